"""Optimizer updates in one pass per parameter: SGD (momentum, dampening, Nesterov, L2
decay) and Adam/AdamW.

Each loop does, per element, the arithmetic of ``opt/updates.py`` in its order, in the
parameter's dtype, with no fused multiply-add (no ``fastmath``): the results equal the NumPy
path's bit for bit (``tests/test_cpu_kernels.py`` checks), so the kernels change no training
run. The NumPy path makes four to eleven passes over each parameter and its slots.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange

from singa_lite.backend.cpu_kernels._jit import exact


@exact
def _sgd(
    p: Any,
    g: Any,
    buf: Any,
    lr: Any,
    wd: Any,
    momentum: Any,
    undampened: Any,
    decay: bool,
    use_buf: bool,
    first: bool,
    dampened: bool,
    nesterov: bool,
) -> None:
    for i in prange(p.size):
        d = p[i] * wd + g[i] if decay else g[i]
        if use_buf:
            if first:
                b = d
            else:
                b = buf[i] * momentum + (d * undampened if dampened else d)
            buf[i] = b
            d = b * momentum + d if nesterov else b
        p[i] = p[i] - lr * d


@exact
def _adam(
    p: Any,
    g: Any,
    m: Any,
    v: Any,
    decay: Any,
    bc2: Any,
    step: Any,
    wd: Any,
    b1: Any,
    one_minus_b1: Any,
    b2: Any,
    one_minus_b2: Any,
    eps: Any,
    mode: int,
) -> None:
    for i in prange(p.size):
        gi = g[i]
        pi = p[i]
        if mode == 2:  # AdamW: decay the weight itself
            pi = pi * decay
        elif mode == 1:  # L2: decay folded into the gradient
            gi = pi * wd + gi
        mi = m[i] * b1 + gi * one_minus_b1
        vi = v[i] * b2 + gi * gi * one_minus_b2
        m[i] = mi
        v[i] = vi
        p[i] = pi - mi / (np.sqrt(vi) / bc2 + eps) * step


def sgd_update(
    p: np.ndarray,
    g: np.ndarray,
    buf: np.ndarray | None,
    lr: Any,
    *,
    weight_decay: Any,
    momentum: Any,
    undampened: Any,
    nesterov: bool,
    first: bool,
) -> None:
    """One SGD update of the C-contiguous ``p`` in place, and of the momentum buffer ``buf``
    unless it is None (``first``: ``buf`` is new and becomes the decayed gradient). Scalars
    are of ``p``'s type; ``undampened`` is ``1 - dampening``, None without dampening."""
    c = p.dtype.type
    b = p if buf is None else buf  # an unused array of the right type
    _sgd(
        p.size,
        p.reshape(-1),
        np.ascontiguousarray(g, dtype=p.dtype).reshape(-1),
        b.reshape(-1),
        c(lr),
        c(weight_decay),
        c(momentum),
        c(1 if undampened is None else undampened),
        bool(weight_decay != 0),
        buf is not None,
        bool(first),
        undampened is not None,
        bool(nesterov),
    )


def adam_update(
    p: np.ndarray,
    g: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    *,
    decay: Any,
    bc2: Any,
    step: Any,
    weight_decay: Any,
    betas: tuple[Any, Any, Any, Any],
    epsilon: Any,
    decoupled: bool,
) -> None:
    """One Adam/AdamW update of the C-contiguous ``p``, ``m``, ``v`` in place. ``decay``
    (AdamW's ``1 - lr * weight_decay``), ``bc2`` and ``step`` (``lr / (1 - beta_1 ** t)``) as
    ``cupy_kernels.adam_update`` takes them; ``betas`` is
    ``(beta_1, 1 - beta_1, beta_2, 1 - beta_2)``."""
    c = p.dtype.type
    mode = (2 if decoupled else 1) if weight_decay != 0 else 0
    _adam(
        p.size,
        p.reshape(-1),
        np.ascontiguousarray(g, dtype=p.dtype).reshape(-1),
        m.reshape(-1),
        v.reshape(-1),
        c(decay),
        c(bc2),
        c(step),
        c(weight_decay),
        *(c(b) for b in betas),
        c(epsilon),
        mode,
    )

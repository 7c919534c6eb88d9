"""The LSTM recurrence (no peepholes): each time step's gate arithmetic in one pass.

``ops.recurrent.LSTMSequence`` runs its time loop in Python; per step, next to the product
``h @ Wh`` (BLAS), NumPy made some ten passes over (N, 4H)- and (N, H)-sized arrays forward
and a dozen backward, each a call of a few microseconds on arrays this small, together more
time than the product. Here a forward step is the product, NumPy's tanh over the gates (its
SIMD tanh runs about four times faster than the loops' ``tanh32``) and one compiled pass for
the rest; a backward step is one compiled pass and the product. The arithmetic is the
reference's, in its order, in the arrays' dtype: the i, f and o pre-activations arrive
halved, so one tanh serves all four gates (``sigmoid(z) = (1 + tanh(z / 2)) / 2``). Rows
(batch entries) are independent, so the parallel form splits them and the result does not
depend on the thread count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import prange

from singa_lite.backend.cpu_kernels._jit import Kernel, kernel, runs_parallel
from singa_lite.backend.cpu_kernels._math import like, tanh


@kernel
def _step_forward(acts: Any, hs: Any, cs: Any, tcs: Any, t: int) -> None:
    # acts[t] (N, 4H) holds tanh of the step's pre-activations (i, f, o halved) and becomes
    # the gate activations; writes c[t+1], tanh(c[t+1]) and h[t+1]. Each gate is a view of
    # its own: indexing one row at four offsets keeps LLVM from vectorising the loop.
    N, H = hs.shape[1], hs.shape[2]
    half, one = like(acts, 0.5), like(acts, 1.0)
    for n in prange(N):
        a = acts[t, n]
        ai, af, ao, ag = a[:H], a[H : 2 * H], a[2 * H : 3 * H], a[3 * H :]
        cp, c, tc, h = cs[t, n], cs[t + 1, n], tcs[t, n], hs[t + 1, n]
        for j in range(H):
            i = (ai[j] + one) * half
            f = (af[j] + one) * half
            o = (ao[j] + one) * half
            ai[j] = i
            af[j] = f
            ao[j] = o
            cj = f * cp[j] + i * ag[j]
            c[j] = cj
            tj = tanh(cj)
            tc[j] = tj
            h[j] = o * tj


@kernel
def _step_backward(
    acts: Any, cs: Any, tcs: Any, dh: Any, dy: Any, has_dy: bool, dc: Any, d: Any, t: int
) -> None:
    # dh (N, H): the gradient reaching h[t+1] through the recurrence; dy[t] joins it when
    # has_dy. dc (N, H): the gradient of c[t+1], updated in place to that of c[t]. d
    # (T, N, 4H): d[t] gets the gradient of the step's (unhalved) gate pre-activations.
    N, H = cs.shape[1], cs.shape[2]
    one = like(acts, 1.0)
    for n in prange(N):
        a, dn = acts[t, n], d[t, n]
        ai, af, ao, ag = a[:H], a[H : 2 * H], a[2 * H : 3 * H], a[3 * H :]
        di, df, do, dg = dn[:H], dn[H : 2 * H], dn[2 * H : 3 * H], dn[3 * H :]
        cp, tc, dhn, dcn = cs[t, n], tcs[t, n], dh[n], dc[n]
        dyn = dy[t, n] if has_dy else dhn
        for j in range(H):
            g = dhn[j] + dyn[j] if has_dy else dhn[j]
            i, f, o, gg, tj = ai[j], af[j], ao[j], ag[j], tc[j]
            c = dcn[j] + g * (o * (one - tj * tj))
            di[j] = i * (one - i) * (c * gg)
            df[j] = f * (one - f) * (c * cp[j])
            do[j] = o * (one - o) * (g * tj)
            dg[j] = (one - gg * gg) * (c * i)
            dcn[j] = c * f


def _stepper(k: Kernel, work: int, args: tuple) -> Callable[..., None]:
    """Runs ``k`` on ``args`` (compiling or loading it for their types) and returns what to
    call for the next steps: the serial dispatcher itself, so that a step costs the dispatch
    alone, or ``k`` through ``Kernel`` for the parallel form (which takes a lock)."""
    k(work, *args)
    if runs_parallel(work):
        return lambda *a: k(work, *a)
    return k.form(False)


def lstm_forward(
    xw: np.ndarray, Wh_half: np.ndarray, hs: np.ndarray, cs: np.ndarray, tcs: np.ndarray
) -> None:
    """The LSTM recurrence over the C-contiguous ``xw`` (T, N, 4H): its input pre-activations
    (biases added, i, f, o halved), turned into the gate activations in place. ``hs`` and
    ``cs`` (T + 1, N, H) hold the initial states at index 0 and get the others; ``tcs``
    (T, N, H) gets ``tanh(c[t])``. ``Wh_half`` (H, 4H) is ``Wh`` with its i, f, o columns
    halved."""
    T, N, G = xw.shape
    hw = np.empty((N, G), xw.dtype)
    step = None
    for t in range(T):
        a = xw[t]
        np.matmul(hs[t], Wh_half, out=hw)
        np.add(a, hw, out=a)
        np.tanh(a, out=a)  # NumPy's SIMD tanh is some 4x faster than the loops' tanh32
        if step is None:
            step = _stepper(_step_forward, N * G, (xw, hs, cs, tcs, t))
        else:
            step(xw, hs, cs, tcs, t)


def lstm_backward(
    acts: np.ndarray,
    cs: np.ndarray,
    tcs: np.ndarray,
    WhT: np.ndarray,
    dy: np.ndarray | None,
    dh: np.ndarray,
    dc: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(d, dh0, dc0)``: the gradients of every step's gate pre-activations (T, N, 4H) and of
    the initial states, from what :func:`lstm_forward` left (``acts``, ``cs``, ``tcs``), the
    contiguous ``WhT`` (4H, H), the outputs' gradient ``dy`` (T, N, H; None when unused) and
    those of the final states ``dh``, ``dc`` (N, H; not written to)."""
    T, N, G = acts.shape
    d = np.empty_like(acts)
    dh = np.array(dh, acts.dtype, order="C")
    dc = np.array(dc, acts.dtype, order="C")
    has_dy = dy is not None
    dy_ = np.ascontiguousarray(dy) if has_dy else acts[:0]  # an unread array of the right type
    if has_dy and dy_.shape != (T, N, G // 4):
        dy_ = np.ascontiguousarray(np.broadcast_to(dy_, (T, N, G // 4)))
    step = None
    for t in range(T - 1, -1, -1):
        if step is None:
            step = _stepper(_step_backward, N * G, (acts, cs, tcs, dh, dy_, has_dy, dc, d, t))
        else:
            step(acts, cs, tcs, dh, dy_, has_dy, dc, d, t)
        np.matmul(d[t], WhT, out=dh)
    return d, dh, dc

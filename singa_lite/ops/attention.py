"""Scaled dot-product attention, computed in blocks over the key length.

``softmax(q @ k^T * scale + mask) @ v`` never holds the full ``(L, S)`` score matrix when ``S``
is longer than one block: the forward pass walks the keys in blocks of ``block`` columns with a
running row maximum and row sum (the "online softmax" of Milakov & Gimelshein, as used by
FlashAttention), and keeps only the output and one log-sum-exp per query row for backward,
which recomputes each block's probabilities. Memory is O(L * block) per head instead of
O(L * S). When the keys fit in one block the probabilities are kept instead of recomputed
(they are then no bigger than a block), which is the fast path for short contexts.

Grouped-query attention needs no copies: the ``G = Hq / Hk`` query heads that share a key head
are folded into that head's rows, so ``q`` is viewed as ``(B, Hk, G * L, E)`` against
``k (B, Hk, S, E)``, and the key and value gradients sum over the group by the same products.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np  # dtype objects and shape arithmetic only; array math goes through self.xp

from singa_lite import _args
from singa_lite.autograd import Operator
from singa_lite.backend import cpu_kernels
from singa_lite.errors import DTypeError
from singa_lite.ops._util import unbroadcast
from singa_lite.tensor import Tensor

__all__ = ["ScaledDotProductAttention", "scaled_dot_product_attention"]

DEFAULT_BLOCK = 128
"""Keys per block: long enough for BLAS to run at speed, short enough that a 4,096-token
attention's per-block temporaries stay well under a quarter of its score matrix."""


def _acc_dtype(dtype: Any) -> Any:
    """The dtype scores are computed in: float16's range and precision are too small for them."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


class ScaledDotProductAttention(Operator):
    """``softmax(q k^T * scale + mask) v`` over ``(*batch, heads, length, features)`` inputs.

    Inputs: ``q (*batch, Hq, L, E)``, ``k (*batch, Hk, S, E)``, ``v (*batch, Hk, S, Ev)`` and an
    optional ``mask`` that broadcasts to ``(*batch, Hq, L, S)``: boolean (True = may attend) or
    additive (float, differentiable). ``Hq`` must be a multiple of ``Hk`` (grouped-query heads).
    """

    def __init__(
        self,
        is_causal: bool = False,
        dropout: float = 0.0,
        scale: float | None = None,
        block: int = DEFAULT_BLOCK,
        training: bool = False,
    ) -> None:
        super().__init__("scaled_dot_product_attention")
        dropout = _args.fraction(self.name, "dropout", dropout)
        if scale is not None:
            _args.number(self.name, "scale", scale)  # kept as given: its dtype may count
        block = _args.count(self.name, "block", block)
        self.is_causal, self.dropout, self.scale, self.block = bool(is_causal), dropout, scale, block
        self.training = bool(training)

    # -- checks and layout ---------------------------------------------------------------------
    def _check(self, q: Any, k: Any, v: Any, mask: Any) -> None:
        for a in (q, k, v):
            if a.dtype.kind != "f":
                raise DTypeError(f"{self.name}: q, k and v must be floating point, got {a.dtype}")
        if not q.dtype == k.dtype == v.dtype:
            raise DTypeError(
                f"{self.name}: q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
            )
        if q.ndim < 3 or not q.ndim == k.ndim == v.ndim:
            raise self.error("q, k and v must all be (*batch, heads, length, features)", q, k, v)
        if q.shape[:-3] != k.shape[:-3] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
            raise self.error("q, k, v disagree in batch, heads, key length or q/k features", q, k, v)
        if k.shape[-3] == 0 or q.shape[-3] % k.shape[-3]:
            raise self.error("the query heads must be a multiple of the key/value heads", q, k, v)
        if mask is None:
            return
        if mask.dtype.kind not in "bf":
            raise DTypeError(
                f"{self.name}: mask must be bool (True = attend) or float (added), got {mask.dtype}"
            )
        full = q.shape[:-1] + k.shape[-2:-1]
        if mask.ndim > len(full) or any(m not in (1, f) for m, f in zip(mask.shape[::-1], full[::-1])):
            raise self.error(f"mask must broadcast to {full}", q, k, mask)

    def _mask5(self, mask: Any, batch: tuple, hk: int, g: int) -> Any:
        """``mask`` as ``(Bm, Hkm, Gm, Lm, Sm)``, each 1 or full, to broadcast against scores
        viewed as ``(B, Hk, G, L, block)``."""
        xp = self.xp
        m = mask.reshape((1,) * (len(batch) + 3 - mask.ndim) + mask.shape)
        mb = m.shape[: len(batch)]
        if any(d == 1 for d in mb) and any(d != 1 for d in mb):
            m = xp.broadcast_to(m, batch + m.shape[len(batch) :])  # partly broadcast batch dims
        b = 1 if all(d == 1 for d in m.shape[: len(batch)]) else math.prod(batch)
        heads = (1, 1) if m.shape[-3] == 1 else (hk, g)
        return m.reshape((b, *heads, *m.shape[-2:]))

    # -- forward -----------------------------------------------------------------------------
    def forward(self, q: Any, k: Any, v: Any, mask: Any = None) -> Any:
        xp = self.xp
        self._check(q, k, v, mask)
        acc = _acc_dtype(q.dtype)
        *batch, hq, L, E = q.shape
        hk, S, Ev = k.shape[-3], k.shape[-2], v.shape[-1]
        g, B = hq // hk, math.prod(batch)
        self.batch, self.q_shape, self.dtype = tuple(batch), q.shape, q.dtype
        self.scale_ = acc.type(self.scale if self.scale is not None else 1 / math.sqrt(E))
        # Scaling q once costs L*E multiplies instead of L*S on the scores.
        self.qs = q.reshape(B, hk, g * L, E).astype(acc, copy=False) * self.scale_
        self.k = k.reshape(B, hk, S, E).astype(acc, copy=False)
        # Keys transposed once, contiguous: NumPy's stacked matmul falls back from BLAS to a
        # slow loop when the right operand of each product is a transposed view.
        self.kt = xp.ascontiguousarray(self.k.transpose(0, 1, 3, 2))
        self.v = v.reshape(B, hk, S, Ev).astype(acc, copy=False)
        self.dims = (B, hk, g, L, S)
        self.mask_shape: Any = None if mask is None else mask.shape
        self.mask: Any = None if mask is None else self._mask5(mask, self.batch, hk, g)
        if self.mask is not None and self.mask.dtype.kind == "f":
            self.mask = self.mask.astype(acc, copy=False)
        self.p_drop = self.dropout if self.training else 0.0
        # A causal query i sees keys j <= i (PyTorch's top-left alignment): blocks starting
        # past the last query row would be all masked, so they are skipped.
        last = S if not self.is_causal else min(S, L)
        self.blocks = [(j, min(j + self.block, last)) for j in range(0, last, self.block)]
        self.keeps: list = []
        out = self._single(acc) if len(self.blocks) == 1 else self._blocked(acc)
        self.out = out
        return out.reshape(*batch, hq, L, Ev).astype(q.dtype, copy=False)

    def _scores(self, j0: int, j1: int, causal: bool = True) -> Any:
        """Masked scores of keys ``[j0, j1)``: ``(B, Hk, G * L, j1 - j0)``; the causal mask
        too unless ``causal`` is False (a kernel applies it then)."""
        xp = self.xp
        B, hk, g, L, _ = self.dims
        s = xp.matmul(self.qs, self.kt[..., j0:j1])
        s5 = s.reshape(B, hk, g, L, j1 - j0)
        if self.mask is not None:
            mb = self.mask[..., j0:j1] if self.mask.shape[-1] > 1 else self.mask
            if mb.dtype.kind == "b":
                xp.copyto(s5, s.dtype.type(-np.inf), where=~mb)
            else:
                s5 += mb
        if causal and self.is_causal and j1 - 1 > 0:
            xp.copyto(s5, s.dtype.type(-np.inf), where=xp.arange(j0, j1) > xp.arange(L)[:, None])
        return s

    def _keep(self, i: int, shape: tuple, dtype: Any, draw: bool) -> Any:
        """Block ``i``'s dropout factors (0 or ``1 / (1 - p)``), or None without dropout. Drawn
        in forward and kept as one bit per score; backward unpacks the same bits."""
        if not self.p_drop:
            return None
        xp = self.xp
        if draw:
            keep = self.device.rng.random(shape, dtype=xp.float32) >= self.p_drop
            self.keeps.append(xp.packbits(keep.reshape(-1)))
        else:
            keep = xp.unpackbits(self.keeps[i])[: math.prod(shape)].reshape(shape)
        return keep.astype(dtype) * dtype.type(1 / (1 - self.p_drop))

    def _single(self, acc: Any) -> Any:
        """All keys in one block: an ordinary softmax, its probabilities kept for backward."""
        xp = self.xp
        kernel = cpu_kernels.usable(xp, self.qs)
        s = self._scores(*self.blocks[0], causal=not kernel) if self.blocks else None
        if s is None:  # no key at all
            self.p = None
            return xp.zeros(self.qs.shape[:-1] + (self.v.shape[-1],), acc)
        if kernel:  # the causal mask and the softmax below, in one pass over each row
            cpu_kernels.softmax.attention_probabilities(s, self.dims[3], self.blocks[0][0], self.is_causal)
            return self._attend(s, acc)
        # Elementwise fixes, not boolean-mask assignment: CuPy would read the mask's count on
        # the host, which a CUDA-graph capture cannot contain.
        m = s.max(axis=-1, keepdims=True)
        xp.copyto(m, m.dtype.type(0), where=~xp.isfinite(m))  # a row with every key masked
        p = xp.exp(xp.subtract(s, m, out=s), out=s)
        total = p.sum(axis=-1, keepdims=True)
        xp.copyto(total, total.dtype.type(1), where=total == 0)  # ... keeps probabilities 0
        p /= total
        return self._attend(p, acc)

    def _attend(self, p: Any, acc: Any) -> Any:
        """The single block's output from its probabilities ``p`` (kept for backward)."""
        self.p = p
        f = self._keep(0, p.shape, acc, True)
        return self.xp.matmul(p if f is None else p * f, self.v[:, :, : p.shape[-1]])

    def _blocked(self, acc: Any) -> Any:
        """Keys in blocks with a running maximum and sum; keeps one log-sum-exp per row."""
        xp = self.xp
        zero, one, inf = acc.type(0), acc.type(1), acc.type(np.inf)  # typed: no promotion on CuPy
        rows = self.qs.shape[:-1] + (1,)
        m = xp.full(rows, -inf, acc)
        total = xp.zeros(rows, acc)
        out = xp.zeros(self.qs.shape[:-1] + (self.v.shape[-1],), acc)
        for i, (j0, j1) in enumerate(self.blocks):
            s = self._scores(j0, j1)
            m_new = xp.maximum(m, s.max(axis=-1, keepdims=True))
            shift = xp.where(xp.isfinite(m_new), m_new, zero)  # a fully masked row so far
            p = xp.exp(xp.subtract(s, shift, out=s), out=s)
            rescale = xp.exp(m - shift)
            total *= rescale
            total += p.sum(axis=-1, keepdims=True)
            out *= rescale
            f = self._keep(i, p.shape, acc, True)
            out += xp.matmul(p if f is None else p * f, self.v[:, :, j0:j1])
            m = m_new
        empty = total == 0
        out /= xp.where(empty, one, total)
        # Rows with no visible key get +inf, so the recomputed probabilities are exp(-inf) = 0.
        lse = xp.where(xp.isfinite(m), m, zero) + xp.log(xp.where(empty, one, total))
        self.lse = xp.where(empty, inf, lse)
        self.p = None
        return out

    # -- backward ----------------------------------------------------------------------------
    def backward(self, dy: Any) -> tuple:
        xp = self.xp
        B, hk, g, L, _ = self.dims
        acc = self.qs.dtype
        do = dy.reshape(self.out.shape).astype(acc, copy=False)
        # Softmax's Jacobian needs sum_j p_j dp_j per row, which equals <dO, O> (with dropout
        # too, since O is built from the dropped probabilities).
        if xp is np:
            rowdot = xp.einsum("...i,...i->...", do, self.out)[..., None]  # no (rows, Ev) temporary
        else:  # CuPy's einsum multiplies through cuBLAS, which a CUDA-graph capture refuses
            rowdot = (do * self.out).sum(axis=-1, keepdims=True)
        # One block over every key (short contexts) writes each gradient whole: no zeros first.
        whole = len(self.blocks) == 1 and self.blocks[0] == (0, self.k.shape[2])
        dq: Any = None
        dk: Any = None
        dv: Any = None
        if not whole:
            dq = xp.zeros_like(self.qs)
            dk, dv = xp.zeros_like(self.k), xp.zeros_like(self.v)
        vt = xp.ascontiguousarray(self.v.transpose(0, 1, 3, 2))  # see kt in forward
        want_mask = self.mask is not None and self.mask.dtype.kind == "f" and self.needs_grad[3]
        dmask = xp.zeros(self.mask.shape, acc) if want_mask else None
        for i, (j0, j1) in enumerate(self.blocks):
            if self.p is not None:
                p = self.p
            else:
                s = self._scores(j0, j1)
                p = xp.exp(xp.subtract(s, self.lse, out=s), out=s)
            f = self._keep(i, p.shape, acc, False)
            pv = xp.matmul((p if f is None else p * f).transpose(0, 1, 3, 2), do)
            dp = xp.matmul(do, vt[..., j0:j1])
            if f is not None:
                dp *= f
            if cpu_kernels.usable(xp, dp, p, rowdot):
                ds = cpu_kernels.softmax.attention_score_grad(dp, p, rowdot)
            else:
                dp -= rowdot
                ds = xp.multiply(dp, p, out=dp)
            if dmask is not None:
                view = dmask[..., j0:j1] if dmask.shape[-1] > 1 else dmask
                view += unbroadcast(ds.reshape(B, hk, g, L, j1 - j0), view.shape)
            dsq = xp.matmul(ds.transpose(0, 1, 3, 2), self.qs)
            if whole:
                dq, dk, dv = xp.matmul(ds, self.k), dsq, pv
            else:
                dq += xp.matmul(ds, self.k[:, :, j0:j1])
                dk[:, :, j0:j1] = dsq
                dv[:, :, j0:j1] = pv
        dq *= self.scale_
        dt = self.dtype
        grads = [
            dq.reshape(self.q_shape).astype(dt, copy=False),
            dk.reshape(self.inputs[1].shape).astype(dt, copy=False),
            dv.reshape(self.inputs[2].shape).astype(dt, copy=False),
        ]
        if self.mask_shape is not None:
            grads.append(None if dmask is None else self._mask_grad(dmask))
        return tuple(grads)

    def _mask_grad(self, dmask: Any) -> Any:
        """The gradient of the additive mask, summed back to the mask's own shape."""
        shape = self.mask_shape
        b = self.batch if dmask.shape[0] > 1 else (1,) * len(self.batch)
        heads = dmask.shape[1] * dmask.shape[2]
        full = dmask.reshape(*b, heads, *dmask.shape[-2:])
        lead = (1,) * (len(self.batch) + 3 - len(shape)) + tuple(shape)
        return unbroadcast(full, lead).reshape(shape).astype(self.inputs[3].dtype, copy=False)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    dropout: float = 0.0,
    scale: float | None = None,
    block: int = DEFAULT_BLOCK,
    training: bool = False,
) -> Tensor:
    """``softmax(q @ k^T * scale + mask) @ v`` on ``(*batch, heads, length, features)`` tensors.

    ``q`` is ``(*batch, Hq, L, E)``, ``k`` ``(*batch, Hk, S, E)``, ``v`` ``(*batch, Hk, S, Ev)``;
    ``Hq`` a multiple of ``Hk`` gives grouped-query attention (each key/value head serves
    ``Hq / Hk`` consecutive query heads). ``mask`` broadcasts to ``(*batch, Hq, L, S)``: a bool
    mask says where a query may attend (True, as in PyTorch), a float mask is added to the
    scores (``-inf`` hides a key) and gets a gradient. ``is_causal`` lets query ``i`` see keys
    ``0..i`` and combines with ``mask``. A query that may see no key gets zeros. ``scale``
    defaults to ``1 / sqrt(E)``. ``dropout`` drops attention probabilities with ``training``
    (drawn from the device's generator); ``layer.MultiHeadAttention`` and
    ``autograd.scaled_dot_product_attention`` pass ``autograd.training``.

    The keys are walked in blocks of ``block``: memory is O(L * block) per head, not O(L * S),
    plus, with dropout on, one bit per score to replay the mask in backward.

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> x = tensor.from_numpy(np.ones((1, 2, 3, 4), np.float32))
    >>> scaled_dot_product_attention(x, x, x, is_causal=True).shape
    (1, 2, 3, 4)
    """
    op = ScaledDotProductAttention(is_causal, dropout, scale, block, training)
    return (op(q, k, v) if mask is None else op(q, k, v, mask))[0]

"""The depthwise strategies of the convolution engine (one input channel per group, channel
multiplier ``m``): a tap loop that keeps what backward needs, a one-``einsum`` inference pass,
and the compiled CPU kernels (``backend/cpu_kernels/conv.py``) where they take the arrays.

**Tap loop** (:class:`Depthwise`): the output is the sum over the ``kh*kw`` kernel taps of a
shifted NCHW view of the padded input times a per-channel weight; each tap is a NumPy call on
one core, so the batch is split over a thread pool (:func:`_over_batch`). The padded input is
kept for backward. With the compiled kernels usable (NumPy, float32/float64, Numba present and
``SINGA_LITE_CPU_KERNELS`` not ``0``) forward and backward instead run as loops over image
rows that make no padded copy and sum in the tap loop's order.

**Inference** (:class:`DepthwiseInfer`, :func:`depthwise_conv`): when no backward follows, the
same sum in one pass: the input is copied once into a zero-padded NHWC buffer, a strided *view*
of it lists every tap's shifted window as ``(kh, kw, N, Ho, Wo, C)``, and ``einsum`` reduces
the tap axes. With channels last, einsum's inner loop is a contiguous run of channels against a
contiguous row of weights (its vectorised sum-of-products kernel); in NCHW the tap axes share
the smallest stride with the pixels and einsum iterates them innermost, which measured 2-3x
slower than the tap loop. On the host, for ShuffleNet's 3x3 layers at batch 1, this path (both
transposes included) measured 1.8-5.6x faster than the tap loop (einsum holds the GIL, so unlike
the tap loop it gains nothing from threads; a single pass still wins).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from singa_lite.backend import cpu_kernels
from singa_lite.ops import _cupy_kernels, window
from singa_lite.ops.conv_blocks import Pads, Plan, _pad_nchw, _tap

_pool: ThreadPoolExecutor | None = None
_PARALLEL_MIN = 1 << 18  # elements; below this the thread hand-off costs more than it saves


def _over_batch(xp: Any, n: int, work: int, fn: Callable[[int, int], Any]) -> list:
    """``fn(lo, hi)`` over slices of a batch of ``n``, one slice per core for big host arrays.

    Depthwise convs are all elementwise work, which NumPy runs on one core but with the GIL
    released, so slicing the batch over a thread pool uses every core (measured 2x on 2 cores).
    im2col/col2im do not use it: next to BLAS's own threads it measured no faster. On other
    backends (the GPU queues work asynchronously) it is one call over the whole batch.
    """
    global _pool
    cores = os.cpu_count() or 1
    if xp.__name__ != "numpy" or cores == 1 or n < 2 or work < _PARALLEL_MIN:
        return [fn(0, n)]
    k = min(cores, n)
    bounds = [n * i // k for i in range(k + 1)]
    if _pool is None:
        _pool = ThreadPoolExecutor(cores, thread_name_prefix="singa_lite-conv")
    return list(_pool.map(fn, bounds[:-1], bounds[1:]))


def kernels_take(xp: Any, x: Any, W: Any) -> bool:
    """Whether the compiled depthwise kernels (``backend/cpu_kernels/conv.py``) take ``x`` and
    ``W``: the one test between them and the NumPy tap loop (``cpu_kernels.usable``)."""
    return cpu_kernels.usable(xp, x, W)


class Depthwise(Plan):
    """Depthwise conv that keeps what backward needs: the tap loop, or with ``compiled`` the
    compiled kernels (the caller has asked :func:`kernels_take`)."""

    def __init__(self, xp: Any, geo: Any, compiled: bool = False) -> None:
        super().__init__(xp, geo)
        self.kernels: Any = None
        if compiled:
            from singa_lite.backend.cpu_kernels import conv  # imports Numba: only once it is wanted

            self.kernels = conv

    def forward(self, x: Any, W: Any, b: Any) -> Any:
        self.x_shape, self.W = x.shape, W
        if self.kernels is not None:
            self.x = x  # the bias is added as the kernel writes the output
            return self.kernels.depthwise_forward(x, W, self.stride, self.dilation, self.pads, self.out_hw, b)
        y = self._depthwise_forward(x, W)
        if b is not None:
            y += b.reshape(1, -1, 1, 1)
        return y

    def backward(self, dy: Any, need_x: bool, need_W: bool) -> tuple[Any, Any]:
        if self.kernels is not None:
            geo = (self.stride, self.dilation, self.pads)
            return self.kernels.depthwise_backward(dy, self.x, self.W, *geo, need_x, need_W)
        return self._depthwise_backward(dy, need_x, need_W)

    # depthwise: one input channel per group, so a sum over taps of per-channel scaled views
    def _depthwise_forward(self, x: Any, W: Any) -> Any:
        xp = self.xp
        mult = W.shape[0] // x.shape[1]
        xpad = _pad_nchw(xp, x, self.pads)
        self.xpad = xp.repeat(xpad, mult, axis=1) if mult > 1 else xpad
        y = xp.zeros((x.shape[0], W.shape[0], *self.out_hw), dtype=x.dtype)
        geo = (self.stride, self.dilation)

        def taps(lo: int, hi: int) -> None:
            out, tmp = y[lo:hi], xp.empty_like(y[lo:hi])
            for i, j in self._taps():
                out += xp.multiply(
                    _tap(self.xpad[lo:hi], i, j, geo, self.out_hw), W[:, 0, i, j, None, None], out=tmp
                )

        _over_batch(xp, x.shape[0], y.size * W[0].size, taps)
        return y

    def _depthwise_backward(self, dy: Any, need_x: bool, need_W: bool) -> tuple:
        xp, W = self.xp, self.W
        geo = (self.stride, self.dilation)
        dpad: Any = xp.zeros_like(self.xpad) if need_x else None

        def taps(lo: int, hi: int) -> Any:
            g = dy[lo:hi]
            dW = self._depthwise_weight_grad(g, self.xpad[lo:hi]) if need_W else None
            if need_x:
                for i, j in self._taps():
                    view = _tap(dpad[lo:hi], i, j, geo, self.out_hw)
                    view += g * W[:, 0, i, j, None, None]
            return dW

        parts = _over_batch(xp, dy.shape[0], dy.size * W[0].size, taps)
        dW = sum(parts[1:], parts[0]) if need_W else None
        dx = None
        if need_x:
            N, C, H, Wd = self.x_shape
            t, _, l, _ = self.pads
            dx = dpad[:, :, t : t + H, l : l + Wd]
            if W.shape[0] != C:
                dx = dx.reshape(N, C, W.shape[0] // C, H, Wd).sum(axis=2)  # -1 fails for N = 0
            dx = xp.ascontiguousarray(dx)
        return dx, dW

    def _depthwise_weight_grad(self, g: Any, xpad: Any) -> Any:
        """``dW[o, 0, i, j] = sum over n, h, w of g * tap (i, j) of xpad``."""
        xp, W, geo = self.xp, self.W, (self.stride, self.dilation)
        if xp.__name__ == "numpy":  # one einsum per tap: one over all taps measured 1.4-3.6x slower
            dW = xp.zeros_like(W)
            for i, j in self._taps():
                dW[:, 0, i, j] = xp.einsum("nchw,nchw->c", g, _tap(xpad, i, j, geo, self.out_hw))
            return dW
        # CuPy: one reduction over a (n, C, kh, kw, Ho, Wo) view of every tap's window, where
        # per-tap einsums would each copy both operands into a batched GEMM.
        (sh, sw), (dh, dw) = geo
        n, c, r, q = xpad.strides
        windows = window.strided(
            xp,
            xpad,
            (g.shape[0], g.shape[1], *self.kernel, *self.out_hw),
            (n, c, r * dh, q * dw, r * sh, q * sw),
        )
        return _cupy_kernels.dot_over(xp, g[:, :, None, None], windows, (0, 4, 5)).reshape(W.shape)

    def _taps(self) -> list[tuple[int, int]]:
        kh, kw = self.kernel
        return [(i, j) for i in range(kh) for j in range(kw)]


class DepthwiseInfer(Plan):
    """Depthwise conv with no backward to follow: :func:`depthwise_conv`."""

    def forward(self, x: Any, W: Any, b: Any) -> Any:
        return depthwise_conv(self.xp, x, W, b, self.pads, self.stride, self.dilation, self.out_hw)


def _pad_nhwc(xp: Any, x: Any, pads: Pads, keep: tuple[int, int]) -> Any:
    """NCHW ``x`` as a zero-padded NHWC array cut to the ``keep`` rows and columns the
    windows read (strided convs may never read the last padded rows)."""
    N, C, H, W = x.shape
    t, _, l, _ = pads
    out = xp.zeros((N, *keep, C), dtype=x.dtype)
    rows, cols = max(0, min(H, keep[0] - t)), max(0, min(W, keep[1] - l))
    out[:, t : t + rows, l : l + cols] = x[:, :, :rows, :cols].transpose(0, 2, 3, 1)
    return out


def depthwise_conv(
    xp: Any,
    x: Any,
    W: Any,
    b: Any,
    pads: Pads,
    stride: tuple,
    dilation: tuple,
    out_hw: tuple,
) -> Any:
    """Depthwise conv of NCHW ``x (N, C, H, W)`` with ``W (C*m, 1, kh, kw)`` and optional bias
    ``b (C*m,)``, as a contiguous NCHW array; output channel ``o`` reads input channel ``o // m``.

    The caller has checked the shapes and worked out ``out_hw``; ``pads`` is
    ``(top, bottom, left, right)``. No state is kept: this is the no-backward path.

    >>> import numpy as np
    >>> x = np.arange(9.0).reshape(1, 1, 3, 3)
    >>> depthwise_conv(np, x, np.ones((1, 1, 2, 2)), None, (0, 0, 0, 0), (1, 1), (1, 1), (2, 2))
    array([[[[ 8., 12.],
             [20., 24.]]]])
    """
    N, C = x.shape[:2]
    O, _, kh, kw = W.shape
    (sh, sw), (dh, dw), (Ho, Wo) = stride, dilation, out_hw
    # Only the rows and columns some window reads: (Ho-1)*s + d*(k-1) + 1 of each.
    keep = ((Ho - 1) * sh + dh * (kh - 1) + 1, (Wo - 1) * sw + dw * (kw - 1) + 1)
    xpad = _pad_nhwc(xp, x, pads, keep)
    n, r, c, e = xpad.strides
    taps = window.strided(xp, xpad, (kh, kw, N, Ho, Wo, C), (r * dh, c * dw, n, r * sh, c * sw, e))
    # (kh, kw, C, m): tap-major rows of weights, contiguous over the channels einsum runs on
    w = xp.ascontiguousarray(W.reshape(C, O // C, kh, kw).transpose(2, 3, 0, 1))
    y = xp.einsum("ijnhwc,ijcm->nhwcm", taps, w).reshape(N, Ho, Wo, O)
    out = xp.empty((N, O, Ho, Wo), dtype=x.dtype)
    nchw = y.transpose(0, 3, 1, 2)
    if b is None:
        out[...] = nchw
    else:  # the bias rides on the copy back to NCHW
        xp.add(nchw, b.reshape(1, O, 1, 1), out=out)
    return out

"""The N-d strategy of the convolution engine: one general im2col for any number of spatial
axes (3-D: video, volumes; 4-D and up).

A strided view lists every kernel tap's window, one copy makes it the column matrix
``(group, C/group * prod(kernel), N * prod(out))``, and a batched GEMM does the rest. Backward
reuses the columns for the weight gradient and scatters the column gradient back tap by tap
(``prod(kernel)`` strided adds, never a loop over pixels). On CuPy, with the backend's kernels on
(``backend/cupy_kernels.py``) and up to 3 spatial axes, one launch makes the column matrix from
the unpadded input, and col2im is a gather into the cropped result that adds each cell's
entries to zero in ``_scatter_taps``' tap order (axis 0 outermost): the same bits, fewer passes.

Padding is given as ``(begin, end)`` pairs, one per spatial axis (``ops.window``).
"""

from __future__ import annotations

import itertools
from math import prod
from typing import Any, NamedTuple

from singa_lite.backend import cupy_kernels
from singa_lite.ops import window

_ALL2 = (slice(None), slice(None))  # the batch and channel axes, whole


class GeometryNd(NamedTuple):
    """Everything the N-d strategy needs to know about one call's windows. For a transposed
    conv, ``out`` is the size of its *input* (the positions of the windows it scatters)."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    pads: tuple[tuple[int, int], ...]
    out: tuple[int, ...]
    group: int


def _windows(xp: Any, a: Any, kernel: tuple, stride: tuple, dilation: tuple, out: tuple, group: int) -> Any:
    """A view ``(group, C/group, *kernel, N, *out)`` of ``a (N, C, *spatial)``: tap ``k`` of
    output position ``p`` along an axis reads ``a`` at ``p*stride + k*dilation``."""
    sN, sC, *sS = a.strides
    cg = a.shape[1] // group
    return window.strided(
        xp,
        a,
        shape=(group, cg, *kernel, a.shape[0], *out),
        strides=(
            sC * cg,
            sC,
            *(s * d for s, d in zip(sS, dilation)),
            sN,
            *(s * t for s, t in zip(sS, stride)),
        ),
    )


def _scatter_taps(out: Any, cols: Any, kernel: tuple, stride: tuple, dilation: tuple, size: tuple) -> None:
    """``out (N, C, *full) +=`` every tap of ``cols (C, *kernel, N, *size)`` at its windows:
    the adjoint of ``_windows`` (col2im)."""
    for tap in itertools.product(*(range(k) for k in kernel)):
        region = tuple(
            slice(t * d, t * d + (m - 1) * s + 1, s) for t, d, m, s in zip(tap, dilation, size, stride)
        )
        # (C, N, *size) -> (N, C, *size) as a view: the add reads it strided
        out[_ALL2 + region] += cols[(slice(None),) + tap].swapaxes(0, 1)


def _pad(xp: Any, x: Any, pads: tuple) -> Any:
    if not any(b or e for b, e in pads):
        return x
    return xp.pad(x, [(0, 0), (0, 0), *pads])


def _kernels_take(xp: Any, n: int, a: Any, *sizes: int) -> bool:
    """Whether the backend's im2col/col2im kernels read ``a`` and make ``sizes`` entries."""
    return n <= 3 and cupy_kernels.usable_32bit(xp, a, sizes=sizes)


class ColumnsConv:
    """Convolution over any number of axes: one column matrix and a batched GEMM."""

    def __init__(self, xp: Any, geo: GeometryNd) -> None:
        self.xp, self.geo = xp, geo
        self.begin = tuple(pb for pb, _ in geo.pads)

    def forward(self, x: Any, W: Any, b: Any) -> Any:
        xp, (kernel, stride, dilation, pads, out, g) = self.xp, self.geo
        N, O, K = x.shape[0], W.shape[0], W.shape[1] * prod(kernel)
        if _kernels_take(xp, len(kernel), x, g * K * N * prod(out)):
            geo = (out, kernel, stride, self.begin, dilation, g)
            self.col = cupy_kernels.im2col(xp, x, *geo, layout="columns")
        else:
            xpad = _pad(xp, x, pads)
            self.col = _windows(xp, xpad, kernel, stride, dilation, out, g).reshape(g, K, N * prod(out))
        self.Wm = W.reshape(g, O // g, K)
        self.x_shape, self.W_shape = x.shape, W.shape
        y = xp.matmul(self.Wm, self.col).reshape(O, N, *out).swapaxes(0, 1)
        y = xp.ascontiguousarray(y)
        if b is not None:
            y += b.reshape(1, O, *([1] * len(kernel)))
        return y

    def backward(self, dy: Any, need_x: bool, need_W: bool) -> tuple[Any, Any]:
        xp, (kernel, stride, dilation, pads, out, g) = self.xp, self.geo
        N, O = dy.shape[:2]
        dym = dy.swapaxes(0, 1).reshape(g, O // g, -1)  # (g, O/g, N * prod(out))
        dx = dW = None
        if need_W:
            dW = xp.matmul(dym, self.col.swapaxes(1, 2)).reshape(self.W_shape)
        if need_x:
            C = self.x_shape[1]
            dcol = xp.matmul(self.Wm.swapaxes(1, 2), dym)  # (g, C/g * prod(kernel), N * prod(out))
            if _kernels_take(xp, len(kernel), dcol, prod(self.x_shape)):
                geo = (out, kernel, stride, self.begin, dilation)
                dx = cupy_kernels.col2im(xp, dcol, self.x_shape, *geo, layout="columns")
            else:
                padded = tuple(size + pb + pe for size, (pb, pe) in zip(self.x_shape[2:], pads))
                dpad = xp.zeros((N, C, *padded), dy.dtype)
                dcol = dcol.reshape(C, *kernel, N, *out)
                _scatter_taps(dpad, dcol, kernel, stride, dilation, out)
                inner = tuple(slice(pb, pb + size) for (pb, _), size in zip(pads, self.x_shape[2:]))
                dx = dpad[_ALL2 + inner]
        return dx, dW


class ColumnsTranspose:
    """Transposed convolution over any number of axes: a GEMM into columns, scattered back."""

    def __init__(self, xp: Any, geo: GeometryNd, output_padding: tuple[int, ...]) -> None:
        self.xp, self.geo = xp, geo
        self.begin = tuple(pb for pb, _ in geo.pads)
        kernel, stride, dilation, _, size, _ = geo
        self.full = tuple(
            (m - 1) * s + d * (k - 1) + 1 + op
            for m, k, s, d, op in zip(size, kernel, stride, dilation, output_padding)
        )

    def forward(self, x: Any, W: Any, b: Any) -> Any:
        xp, (kernel, stride, dilation, pads, size, g) = self.xp, self.geo
        N, C = x.shape[:2]
        og = W.shape[1]
        self.xm = x.swapaxes(0, 1).reshape(g, C // g, -1)  # (g, C/g, N * prod(size))
        self.Wm = W.reshape(g, C // g, og * prod(kernel))
        self.W_shape, self.x_shape = W.shape, x.shape
        cols = xp.matmul(self.Wm.swapaxes(1, 2), self.xm)  # (g, og * prod(kernel), N * prod(size))
        y_shape = (N, g * og, *(f - pb - pe for f, (pb, pe) in zip(self.full, pads)))
        if _kernels_take(xp, len(kernel), cols, prod(y_shape)):
            geo = (size, kernel, stride, self.begin, dilation)
            y = cupy_kernels.col2im(xp, cols, y_shape, *geo, layout="columns")  # cropped, gathered
        else:
            out = xp.zeros((N, g * og, *self.full), x.dtype)
            cols = cols.reshape(g * og, *kernel, N, *size)
            _scatter_taps(out, cols, kernel, stride, dilation, size)
            y = xp.ascontiguousarray(out[self._crop()])
        if b is not None:
            y += b.reshape(1, -1, *([1] * len(kernel)))
        return y

    def _crop(self) -> tuple:
        return _ALL2 + tuple(slice(pb, f - pe) for f, (pb, pe) in zip(self.full, self.geo.pads))

    def backward(self, dy: Any, need_x: bool, need_W: bool) -> tuple[Any, Any]:
        xp, (kernel, stride, dilation, _, size, g) = self.xp, self.geo
        if _kernels_take(xp, len(kernel), dy, dy.shape[0] * dy.shape[1] * prod(kernel) * prod(size)):
            geo = (size, kernel, stride, self.begin, dilation, g)
            col = cupy_kernels.im2col(xp, dy, *geo, layout="columns")  # (g, og*prod(k), N*prod(size))
        else:
            dfull = xp.zeros((*dy.shape[:2], *self.full), dy.dtype)
            dfull[self._crop()] = dy
            col = _windows(xp, dfull, kernel, stride, dilation, size, g)
            col = col.reshape(g, self.W_shape[1] * prod(kernel), -1)
        dx = dW = None
        if need_x:
            N, C = self.x_shape[:2]
            dx = xp.matmul(self.Wm, col).reshape(C, N, *size).swapaxes(0, 1)
        if need_W:
            dW = xp.matmul(self.xm, col.swapaxes(1, 2)).reshape(self.W_shape)
        return dx, dW

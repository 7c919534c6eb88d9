"""Convolution and transposed convolution over any number of spatial axes (3-D: video, volumes).

``conv2d`` (``ops/conv.py``) has paths tuned for images; these ops serve the other ranks (ONNX
``Conv``/``ConvTranspose`` on ``(N, C, D, H, W)`` inputs) with one general im2col: a strided
view lists every kernel tap's window, one copy makes it the column matrix
``(group, C/group * prod(kernel), N * prod(out))``, and a batched GEMM does the rest. Backward
reuses the columns for the weight gradient and scatters the column gradient back tap by tap
(``prod(kernel)`` strided adds, never a loop over pixels). On CuPy, with the backend's kernels on
(``backend/cupy_kernels.py``) and up to 3 spatial axes, one launch makes the column matrix from
the unpadded input, and col2im is a gather into the cropped result that adds each cell's
entries to zero in ``_scatter_taps``' tap order (axis 0 outermost): the same bits, fewer passes.

Padding is given as ``(begin, end)`` pairs, one per spatial axis.
"""

from __future__ import annotations

import itertools
from math import prod
from numbers import Integral
from typing import Any

from singa_lite import _args
from singa_lite.autograd import Operator
from singa_lite.backend import cupy_kernels
from singa_lite.errors import DTypeError, ShapeError
from singa_lite.tensor import Tensor

__all__ = ["ConvNd", "ConvTransposeNd", "conv_nd", "conv_transpose_nd"]

_ALL2 = (slice(None), slice(None))  # the batch and channel axes, whole


def _pairs(owner: str, padding: Any, n: int) -> tuple[tuple[int, int], ...]:
    """Per-axis ``(begin, end)`` from an int, one value per axis, or ``n`` pairs."""
    items = padding if isinstance(padding, (list, tuple)) else ()
    if len(items) == n and not any(isinstance(p, Integral) for p in items):
        pairs = [_args.ints(owner, "padding", p, (2,), 0, scalar=False) for p in items]
        return tuple((begin, end) for begin, end in pairs)
    return tuple((p, p) for p in _args.per_axis(owner, "padding", padding, n, 0))


def _windows(xp: Any, a: Any, kernel: tuple, stride: tuple, dilation: tuple, out: tuple, group: int) -> Any:
    """A view ``(group, C/group, *kernel, N, *out)`` of ``a (N, C, *spatial)``: tap ``k`` of
    output position ``p`` along an axis reads ``a`` at ``p*stride + k*dilation``."""
    sN, sC, *sS = a.strides
    cg = a.shape[1] // group
    return xp.lib.stride_tricks.as_strided(
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


class _ConvNdBase(Operator):
    def __init__(self, n: int, stride: Any, padding: Any, dilation: Any, group: int) -> None:
        super().__init__()
        self.n = n
        self.stride = _args.per_axis(self.name, "stride", stride, n)
        self.dilation = _args.per_axis(self.name, "dilation", dilation, n)
        self.pads = _pairs(self.name, padding, n)
        self.begin = tuple(pb for pb, _ in self.pads)
        self.group = _args.count(self.name, "group", group)

    def _check(self, x: Any, W: Any, b: Any) -> None:
        n, g = self.n, self.group
        if x.ndim != n + 2 or W.ndim != n + 2:
            raise self.error(f"x must be (N, C, {n} spatial axes) and W {n + 2}-D", x, W)
        if 0 in x.shape[2:]:
            raise self.error("x has an empty spatial axis", x, W)
        if x.dtype.kind != "f" or x.dtype != W.dtype or (b is not None and b.dtype != x.dtype):
            got = ", ".join(str(a.dtype) for a in (x, W, b) if a is not None)
            raise DTypeError(f"{self.name}: x, W and b must share a float dtype, got {got}")
        in_channels, out_channels = self.channels(W)
        if x.shape[1] % g or out_channels % g:
            raise self.error(f"group={g} does not divide the channels", x, W)
        if x.shape[1] != in_channels:
            raise self.error(f"x has {x.shape[1]} channels, the weight expects {in_channels}", x, W)
        if b is not None and b.shape != (out_channels,):
            raise self.error(f"bias must have shape ({out_channels},)", x, W, b)

    def channels(self, W: Any) -> tuple[int, int]:
        """The input and output channels ``W`` expects and gives."""
        return W.shape[1] * self.group, W.shape[0]

    def _kernels_take(self, a: Any, *sizes: int) -> bool:
        """Whether the backend's im2col/col2im kernels read ``a`` and make ``sizes`` entries."""
        return self.n <= 3 and cupy_kernels.usable_32bit(self.xp, a, sizes=sizes)

    def _bias_grad(self, dy: Any) -> Any:
        return dy.sum(axis=(0, *range(2, dy.ndim))) if self.needs_grad[2] else None


class ConvNd(_ConvNdBase):
    """Convolution (cross-correlation) of ``x (N, C, *spatial)`` with ``W (O, C/group, *kernel)``
    and optional bias ``b (O,)``, over ``n`` spatial axes."""

    def forward(self, x: Any, W: Any, b: Any = None) -> Any:
        xp, g = self.xp, self.group
        self._check(x, W, b)
        kernel = W.shape[2:]
        out = tuple(
            (size + pb + pe - d * (k - 1) - 1) // s + 1
            for size, k, s, d, (pb, pe) in zip(x.shape[2:], kernel, self.stride, self.dilation, self.pads)
        )
        if min(out) < 1:
            raise self.error(f"kernel {kernel} (dilation {self.dilation}) exceeds the padded input", x, W)
        N, O, K = x.shape[0], W.shape[0], W.shape[1] * prod(kernel)
        if self._kernels_take(x, g * K * N * prod(out)):
            geo = (out, kernel, self.stride, self.begin, self.dilation, g)
            self.col = cupy_kernels.im2col(xp, x, *geo, layout="columns")
        else:
            xpad = _pad(xp, x, self.pads)
            self.col = _windows(xp, xpad, kernel, self.stride, self.dilation, out, g).reshape(
                g, K, N * prod(out)
            )
        self.Wm = W.reshape(g, O // g, K)
        self.x_shape, self.W_shape, self.out = x.shape, W.shape, out
        y = xp.matmul(self.Wm, self.col).reshape(O, N, *out).swapaxes(0, 1)
        y = xp.ascontiguousarray(y)
        if b is not None:
            y += b.reshape(1, O, *([1] * self.n))
        return y

    def backward(self, dy: Any) -> tuple:
        xp, g = self.xp, self.group
        N, O = dy.shape[:2]
        dym = dy.swapaxes(0, 1).reshape(g, O // g, -1)  # (g, O/g, N * prod(out))
        dx = dW = None
        if self.needs_grad[1]:
            dW = xp.matmul(dym, self.col.swapaxes(1, 2)).reshape(self.W_shape)
        if self.needs_grad[0]:
            kernel = self.W_shape[2:]
            C = self.x_shape[1]
            dcol = xp.matmul(self.Wm.swapaxes(1, 2), dym)  # (g, C/g * prod(kernel), N * prod(out))
            if self._kernels_take(dcol, prod(self.x_shape)):
                geo = (self.out, kernel, self.stride, self.begin, self.dilation)
                dx = cupy_kernels.col2im(xp, dcol, self.x_shape, *geo, layout="columns")
            else:
                padded = tuple(size + pb + pe for size, (pb, pe) in zip(self.x_shape[2:], self.pads))
                dpad = xp.zeros((N, C, *padded), dy.dtype)
                dcol = dcol.reshape(C, *kernel, N, *self.out)
                _scatter_taps(dpad, dcol, kernel, self.stride, self.dilation, self.out)
                inner = tuple(slice(pb, pb + size) for (pb, _), size in zip(self.pads, self.x_shape[2:]))
                dx = dpad[_ALL2 + inner]
        if len(self.needs_grad) < 3:
            return dx, dW
        return dx, dW, self._bias_grad(dy)


class ConvTransposeNd(_ConvNdBase):
    """Transposed convolution (``ConvNd``'s gradient w.r.t. its input) of ``x (N, C_in, *spatial)``
    with ``W (C_in, C_out/group, *kernel)`` (PyTorch's and ONNX's layout), over ``n`` axes.

    Output length along an axis: ``(L - 1)*stride + dilation*(k - 1) + 1 + output_padding``
    minus its two pads."""

    def __init__(
        self,
        n: int,
        stride: Any = 1,
        padding: Any = 0,
        output_padding: Any = 0,
        dilation: Any = 1,
        group: int = 1,
    ) -> None:
        super().__init__(n, stride, padding, dilation, group)
        self.output_padding = _args.per_axis(self.name, "output_padding", output_padding, n, 0)
        for op, s, d in zip(self.output_padding, self.stride, self.dilation):
            if op >= max(s, d):
                raise _args.bad(self.name, "output_padding", "be < stride or dilation", output_padding)

    def channels(self, W: Any) -> tuple[int, int]:
        return W.shape[0], W.shape[1] * self.group

    def forward(self, x: Any, W: Any, b: Any = None) -> Any:
        xp, g = self.xp, self.group
        self._check(x, W, b)
        N, C, *size = x.shape
        kernel, og = W.shape[2:], W.shape[1]
        full = tuple(
            (m - 1) * s + d * (k - 1) + 1 + op
            for m, k, s, d, op in zip(size, kernel, self.stride, self.dilation, self.output_padding)
        )
        if any(f - pb - pe < 1 for f, (pb, pe) in zip(full, self.pads)):
            raise self.error(f"padding {self.pads} leaves an empty output", x, W)
        self.xm = x.swapaxes(0, 1).reshape(g, C // g, -1)  # (g, C/g, N * prod(size))
        self.Wm = W.reshape(g, C // g, og * prod(kernel))
        self.size, self.full, self.W_shape, self.x_shape = tuple(size), full, W.shape, x.shape
        cols = xp.matmul(self.Wm.swapaxes(1, 2), self.xm)  # (g, og * prod(kernel), N * prod(size))
        y_shape = (N, g * og, *(f - pb - pe for f, (pb, pe) in zip(full, self.pads)))
        if self._kernels_take(cols, prod(y_shape)):
            geo = (self.size, kernel, self.stride, self.begin, self.dilation)
            y = cupy_kernels.col2im(xp, cols, y_shape, *geo, layout="columns")  # cropped, gathered
        else:
            out = xp.zeros((N, g * og, *full), x.dtype)
            cols = cols.reshape(g * og, *kernel, N, *size)
            _scatter_taps(out, cols, kernel, self.stride, self.dilation, self.size)
            y = xp.ascontiguousarray(out[self._crop()])
        if b is not None:
            y += b.reshape(1, -1, *([1] * self.n))
        return y

    def _crop(self) -> tuple:
        return _ALL2 + tuple(slice(pb, f - pe) for f, (pb, pe) in zip(self.full, self.pads))

    def backward(self, dy: Any) -> tuple:
        xp, g = self.xp, self.group
        kernel = self.W_shape[2:]
        if self._kernels_take(dy, dy.shape[0] * dy.shape[1] * prod(kernel) * prod(self.size)):
            geo = (self.size, kernel, self.stride, self.begin, self.dilation, g)
            col = cupy_kernels.im2col(xp, dy, *geo, layout="columns")  # (g, og*prod(k), N*prod(size))
        else:
            dfull = xp.zeros((*dy.shape[:2], *self.full), dy.dtype)
            dfull[self._crop()] = dy
            col = _windows(xp, dfull, kernel, self.stride, self.dilation, self.size, g)
            col = col.reshape(g, self.W_shape[1] * prod(kernel), -1)
        dx = dW = None
        if self.needs_grad[0]:
            N, C = self.x_shape[:2]
            dx = xp.matmul(self.Wm, col).reshape(C, N, *self.size).swapaxes(0, 1)
        if self.needs_grad[1]:
            dW = xp.matmul(self.xm, col.swapaxes(1, 2)).reshape(self.W_shape)
        if len(self.needs_grad) < 3:
            return dx, dW
        return dx, dW, self._bias_grad(dy)


def _spatial_axes(x: Tensor, what: str) -> int:
    _args.tensor(what, "x", x)
    if len(x.shape) < 3:
        raise ShapeError(f"{what}: x must be (N, C, spatial...), got shape {tuple(x.shape)}")
    return len(x.shape) - 2


def conv_nd(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    group: int = 1,
) -> Tensor:
    """Convolution of ``x (N, C, *spatial)`` with ``W (O, C/group, *kernel)`` over every spatial
    axis (3-D for ``(N, C, D, H, W)``). ``padding``: an int, one per axis, or ``(begin, end)``
    pairs per axis.

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> x = tensor.from_numpy(np.ones((1, 2, 4, 5, 6), np.float32))
    >>> conv_nd(x, tensor.from_numpy(np.ones((3, 2, 3, 3, 3), np.float32)), padding=1).shape
    (1, 3, 4, 5, 6)
    """
    op = ConvNd(_spatial_axes(x, "conv_nd"), stride, padding, dilation, group)
    return (op(x, W) if b is None else op(x, W, b))[0]


def conv_transpose_nd(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    dilation: Any = 1,
    group: int = 1,
) -> Tensor:
    """Transposed convolution of ``x (N, C_in, *spatial)`` with ``W (C_in, C_out/group, *kernel)``
    over every spatial axis; padding as in :func:`conv_nd`."""
    op = ConvTransposeNd(
        _spatial_axes(x, "conv_transpose_nd"), stride, padding, output_padding, dilation, group
    )
    return (op(x, W) if b is None else op(x, W, b))[0]

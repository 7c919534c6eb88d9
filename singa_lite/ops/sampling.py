"""Sampling and re-layout ops: GridSample, AffineGrid, MaxUnpool, Col2Im, CenterCropPad.

``grid_sample`` reads an input at arbitrary normalised positions (PyTorch's and ONNX's
``grid_sample``) in nearest, linear or cubic mode over any number of spatial axes, and is
differentiable in the input and in the grid. ``affine_grid`` and ``center_crop_pad`` are
composites (a matrix product and a pad), so their gradients come free.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from singa_lite import _args, backend
from singa_lite.autograd import Operator
from singa_lite.errors import DTypeError
from singa_lite.ops import linalg, shape
from singa_lite.ops._util import normalize_axis
from singa_lite.ops.indexing import _runs
from singa_lite.tensor import Tensor

__all__ = [
    "Col2Im",
    "GridSample",
    "MaxUnpool",
    "affine_grid",
    "center_crop_pad",
    "col2im",
    "grid_sample",
    "max_unpool",
]

_CUBIC_A = -0.75  # Keys' cubic convolution constant, as PyTorch and ONNX use


def _keys(xp: Any, s: Any) -> tuple[Any, Any]:
    """Keys' cubic kernel at distances ``s`` (``0 <= s < 2``) and its derivative in ``s``."""
    a = _CUBIC_A
    near = ((a + 2) * s - (a + 3)) * s * s + 1
    d_near = (3 * (a + 2) * s - 2 * (a + 3)) * s
    far = ((a * s - 5 * a) * s + 8 * a) * s - 4 * a
    d_far = (3 * a * s - 10 * a) * s + 8 * a
    inside = s <= 1
    return xp.where(inside, near, far), xp.where(inside, d_near, d_far)


def _reflect(xp: Any, u: Any, lo: float, hi: float) -> tuple[Any, Any]:
    """``u`` reflected off ``lo`` and ``hi`` until it lies between them, and ``du'/du`` (±1)."""
    span = hi - lo
    if span <= 0:
        return xp.full_like(u, lo), xp.zeros_like(u)
    below, above = u < lo, u > hi
    dist = xp.where(below, lo - u, xp.where(above, u - hi, 0))
    k = xp.floor(dist / span)
    r = dist - k * span
    even = (k % 2) == 0
    low_side = xp.where(below, even, ~even)  # measured from lo after an even (below) or odd (above) count
    out = xp.where(low_side, lo + r, hi - r)
    sign = xp.where(low_side == below, -1, 1).astype(u.dtype)
    inside = ~(below | above)
    return xp.where(inside, u, out), xp.where(inside, u.dtype.type(1), sign)


class GridSample(Operator):
    """ONNX GridSample / PyTorch ``grid_sample``: ``x`` (N, C, *spatial) read at the positions
    of ``grid`` (N, *out, ndim) in ``[-1, 1]`` (last component: the last spatial axis).

    ``mode`` is ``nearest``, ``linear`` (``bilinear``) or ``cubic`` (``bicubic``);
    ``padding_mode`` ``zeros``, ``border`` or ``reflection``. Every output is a weighted sum of
    taps (1, 2 or 4 per axis), so the gradient scatters back into ``x`` and, through the
    weights' derivatives, into the grid (zero for ``nearest``).
    """

    MODES = {
        "nearest": "nearest",
        "linear": "linear",
        "bilinear": "linear",
        "cubic": "cubic",
        "bicubic": "cubic",
    }

    def __init__(
        self, mode: str = "linear", padding_mode: str = "zeros", align_corners: bool = False
    ) -> None:
        super().__init__()
        self.mode = self.MODES[_args.choice(self.name, "mode", mode, tuple(self.MODES))]
        self.padding_mode = _args.choice(
            self.name, "padding_mode", padding_mode, ("zeros", "border", "reflection")
        )
        self.align_corners = bool(align_corners)

    def forward(self, x: Any, grid: Any) -> Any:
        xp = self.xp
        nd = x.ndim - 2
        if nd < 1 or grid.ndim != x.ndim or grid.shape[0] != x.shape[0] or grid.shape[-1] != nd:
            raise self.error(f"grid must be (N, *out, {max(nd, 0)}) for x of shape (N, C, *spatial)", x, grid)
        if x.dtype.kind != "f" or grid.dtype.kind != "f":
            raise DTypeError(
                f"{self.name}: x and grid must be floating point, got {x.dtype} and {grid.dtype}"
            )
        n, c = x.shape[:2]
        self.x, self.grid_shape, self.grid_dtype = x, grid.shape, grid.dtype
        sizes = x.shape[2:]
        pts = grid.reshape(n, -1, nd)
        taps = [self.taps(pts[..., nd - 1 - d], sizes[d]) for d in range(nd)]
        strides = [math.prod(sizes[d + 1 :]) for d in range(nd)]
        per = taps[0][0].shape[-1]
        full = (n, pts.shape[1], *(per,) * nd)  # every combination of one tap per axis

        def spread(a: Any, d: int) -> Any:  # (N, P, T) along tap axis d of ``full``
            shape = [n, pts.shape[1]] + [1] * nd
            shape[2 + d] = per
            return a.reshape(shape)

        def combine(parts: list) -> Any:
            return (
                xp.broadcast_to(math.prod(parts), full)
                .reshape(n, pts.shape[1], -1)
                .astype(x.dtype, copy=False)
            )

        self.flat = xp.broadcast_to(sum(spread(t[0], d) * strides[d] for d, t in enumerate(taps)), full)
        self.flat = self.flat.reshape(n, pts.shape[1], -1)
        weights = [spread(t[1], d) for d, t in enumerate(taps)]
        self.weight = combine(weights)
        # d weight / d grid component d: this axis's slopes times the other axes' weights
        self.dweight = []
        if self.mode != "nearest":
            for d, t in enumerate(taps):
                self.dweight.append(combine([*weights[:d], spread(t[2], d), *weights[d + 1 :]]))
        vals = self.gather(x)
        out = xp.einsum("npk,npkc->ncp", self.weight, vals)
        return out.reshape(n, c, *grid.shape[1:-1])

    def gather(self, x: Any) -> Any:
        """``x``'s values at every tap: (N, P, K, C)."""
        n, c = x.shape[:2]
        xt = x.reshape(n, c, -1).transpose(0, 2, 1)
        return xt[self.xp.arange(n)[:, None, None], self.flat]

    def taps(self, g: Any, size: int) -> tuple[Any, Any, Any]:
        """Tap indices, weights and d weight / d g (N, P, T) along one axis of ``size``."""
        xp = self.xp
        if self.align_corners:
            scale, u, lo, hi = (size - 1) / 2, (g + 1) * ((size - 1) / 2), 0.0, float(size - 1)
        else:
            scale, u, lo, hi = size / 2, ((g + 1) * size - 1) / 2, -0.5, size - 0.5
        u = u.astype(g.dtype, copy=False)
        if self.mode == "nearest":
            u = xp.rint(u)
        slope = xp.full_like(u, scale)
        # Cubic taps reach past the position itself, so (as in PyTorch and onnxruntime) only
        # each tap is moved inside; the other modes move the position first.
        if self.mode == "cubic":
            pass
        elif self.padding_mode == "border":
            out = (u < lo) | (u > hi)
            clipped = xp.clip(u, 0, size - 1)
            slope = xp.where(out & (clipped != u), u.dtype.type(0), slope)
            u = xp.where(out, clipped, u)
        elif self.padding_mode == "reflection":
            u, sign = _reflect(xp, u, lo, hi)
            slope = slope * sign
        if self.mode == "nearest":
            idx = xp.trunc(u)[..., None]
            w = xp.ones_like(idx)
            dw = xp.zeros_like(idx)
        else:
            base = xp.floor(u)
            t = (u - base)[..., None]
            if self.mode == "linear":
                idx = base[..., None] + xp.arange(2)
                w = xp.concatenate([1 - t, t], axis=-1)
                dw = xp.concatenate([-xp.ones_like(t), xp.ones_like(t)], axis=-1)
            else:
                idx = base[..., None] + xp.arange(-1, 3)
                dist = xp.concatenate([t + 1, t, 1 - t, 2 - t], axis=-1)
                w, dk = _keys(xp, dist)
                dw = dk * xp.asarray([1, 1, -1, -1], dtype=dk.dtype)
            dw = dw * slope[..., None]
        return self.pad_index(idx, w, dw, size, lo, hi)

    def pad_index(self, idx: Any, w: Any, dw: Any, size: int, lo: float, hi: float) -> tuple[Any, Any, Any]:
        """Tap positions outside the axis resolved as ``padding_mode`` says (zeros: the tap
        reads nothing, so neither it nor its slope counts)."""
        xp = self.xp
        idx = xp.nan_to_num(idx, nan=-1.0)  # a NaN position reads nothing (or the first pixel)
        if self.padding_mode == "zeros":
            inside = (idx >= 0) & (idx < size)
            w = xp.where(inside, w, w.dtype.type(0))
            dw = xp.where(inside, dw, dw.dtype.type(0))
        elif self.padding_mode == "reflection":
            idx = xp.trunc(_reflect(xp, idx, lo, hi)[0])
        return xp.clip(idx, 0, size - 1).astype(np.int64), w, dw

    def backward(self, dy: Any) -> tuple:
        xp, x = self.xp, self.x
        n, c = x.shape[:2]
        g = dy.reshape(n, c, -1)
        dx = dgrid = None
        if self.needs_grad[0]:
            contrib = self.weight[..., None] * g.transpose(0, 2, 1)[:, :, None, :]
            dxt = xp.zeros((n, math.prod(x.shape[2:]), c), dtype=dy.dtype)
            xp.add.at(dxt, (xp.arange(n)[:, None, None], self.flat), contrib)
            dx = dxt.transpose(0, 2, 1).reshape(x.shape)
        if self.needs_grad[1]:
            nd = x.ndim - 2
            dgrid = xp.zeros((n, g.shape[2], nd), dtype=dy.dtype)
            if self.dweight:
                vals = self.gather(x)
                for d, dw in enumerate(self.dweight):
                    dgrid[..., nd - 1 - d] = xp.einsum("npk,npkc,ncp->np", dw, vals, g)
            dgrid = dgrid.reshape(self.grid_shape).astype(self.grid_dtype, copy=False)
        return dx, dgrid


def unpool_shape(
    x_shape: tuple, kernel: Sequence[int], strides: Sequence[int], pads: Sequence[int]
) -> tuple[int, ...]:
    """The shape MaxUnpool infers: each spatial size as the max pool that made ``x`` read it."""
    nd = len(kernel)
    return (
        *x_shape[:2],
        *((x_shape[2 + d] - 1) * strides[d] - pads[d] - pads[nd + d] + kernel[d] for d in range(nd)),
    )


class MaxUnpool(Operator):
    """ONNX MaxUnpool: ``x`` written into zeros at the flat positions ``indices`` (as MaxPool
    returns them, over the whole unpooled tensor), then placed at the start of
    ``output_shape`` when that is given (as onnx's reference and node case do; onnxruntime
    reads the indices in the larger shape instead). Repeated positions: the last write wins."""

    def __init__(
        self,
        kernel_shape: Sequence[int],
        strides: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        output_shape: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        me = self.name
        self.kernel = _args.ints(me, "kernel_shape", kernel_shape, low=1, scalar=False)
        nd = len(self.kernel)
        self.strides = (1,) * nd if strides is None else _args.ints(me, "strides", strides, (nd,), low=1)
        self.pads = (0,) * 2 * nd if pads is None else _args.ints(me, "pads", pads, (2 * nd,), low=0)
        self.output_shape = (
            None if output_shape is None else _args.ints(me, "output_shape", output_shape, low=0)
        )

    def forward(self, x: Any, indices: Any) -> Any:
        xp = self.xp
        if x.ndim != len(self.kernel) + 2 or indices.shape != x.shape:
            raise self.error(
                f"x must be (N, C, {len(self.kernel)} spatial) and indices of its shape", x, indices
            )
        if indices.dtype.kind not in "iu":
            raise DTypeError(f"{self.name}: indices must be integers, got dtype {indices.dtype}")
        inner = unpool_shape(x.shape, self.kernel, self.strides, self.pads)
        out_shape = inner if self.output_shape is None else self.output_shape
        if (
            len(out_shape) != x.ndim
            or tuple(out_shape[:2]) != x.shape[:2]
            or any(o < i for o, i in zip(out_shape, inner))
        ):
            raise self.error(f"output_shape {list(out_shape)} must keep N, C and hold {list(inner)}", x)
        size = math.prod(inner)
        pos = indices.reshape(-1).astype(np.int64)
        if pos.size:
            bad = ((pos < 0) | (pos >= size)).any()
            backend.check(
                bad,
                f"{self.name}: indices in range",
                lambda: self.error(f"an index lies outside [0, {size})", x, indices),
            )
        self.inner, self.pos, self.x_shape = inner, pos, x.shape
        flat = xp.zeros(size + 1, dtype=x.dtype)  # the spare slot takes the losing writes
        if pos.size:
            sorted_pos, self.order, last = _runs(xp, pos)
            self.won = xp.empty(pos.shape, dtype=np.bool_)
            self.won[self.order] = last
            flat[xp.where(last, sorted_pos, size)] = x.reshape(-1)[self.order]
        out = xp.zeros(tuple(out_shape), dtype=x.dtype)
        self.key = tuple(slice(0, i) for i in inner)
        out[self.key] = flat[:-1].reshape(inner)
        return out

    def backward(self, dy: Any) -> tuple:
        g = self.xp.ascontiguousarray(dy[self.key]).reshape(-1)[self.pos]
        if self.pos.size:
            g = g * self.won
        return g.reshape(self.x_shape), None


class Col2Im(Operator):
    """ONNX Col2Im: sliding blocks (N, C * prod(block_shape), L) summed back into an image
    (N, C, *image_shape), the inverse layout of im2col; overlapping blocks add up."""

    lead = (slice(None), slice(None))  # the batch and channel axes

    def __init__(
        self,
        image_shape: Sequence[int],
        block_shape: Sequence[int],
        dilations: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        me = self.name
        self.image = _args.ints(me, "image_shape", image_shape, low=1, scalar=False)
        nd = (len(self.image),)
        self.block = _args.ints(me, "block_shape", block_shape, nd, low=1, scalar=False)
        self.dil = (1,) * nd[0] if dilations is None else _args.ints(me, "dilations", dilations, nd, low=1)
        self.pads = (0,) * 2 * nd[0] if pads is None else _args.ints(me, "pads", pads, (2 * nd[0],), low=0)
        self.strides = (1,) * nd[0] if strides is None else _args.ints(me, "strides", strides, nd, low=1)

    def blocks(self) -> list[int]:
        nd = len(self.image)
        return [
            (self.image[d] + self.pads[d] + self.pads[nd + d] - self.dil[d] * (self.block[d] - 1) - 1)
            // self.strides[d] + 1
            for d in range(nd)
        ]  # fmt: skip

    def windows(self, counts: list[int]) -> list[tuple[tuple[int, ...], tuple[slice, ...]]]:
        """(kernel offset, slice of the padded image it covers) for every kernel offset."""
        return [
            (off, tuple(
                slice(o * d, o * d + s * (c - 1) + 1, s)
                for o, d, s, c in zip(off, self.dil, self.strides, counts)
            ))
            for off in itertools.product(*(range(k) for k in self.block))
        ]  # fmt: skip

    def forward(self, x: Any) -> Any:
        nd, k = len(self.image), math.prod(self.block)
        counts = self.blocks()
        if x.ndim != 3 or x.shape[1] % k or min(counts) < 1 or x.shape[2] != math.prod(counts):
            raise self.error(
                f"input must be (N, C * {k}, {math.prod(counts)}) for image {list(self.image)} and "
                f"blocks {list(self.block)} ({counts} positions)", x)  # fmt: skip
        n, c = x.shape[0], x.shape[1] // k
        self.x_shape, self.counts = x.shape, counts
        padded = self.xp.zeros(
            (n, c, *(i + self.pads[d] + self.pads[nd + d] for d, i in enumerate(self.image))), dtype=x.dtype
        )
        cols = x.reshape(n, c, *self.block, *counts)
        for off, window in self.windows(counts):
            padded[self.lead + window] += cols[self.lead + off]
        self.crop = (slice(None), slice(None), *(slice(p, p + i) for p, i in zip(self.pads, self.image)))
        return self.xp.ascontiguousarray(padded[self.crop])

    def backward(self, dy: Any) -> Any:
        xp, nd = self.xp, len(self.image)
        n, c = dy.shape[:2]
        padded = xp.zeros(
            (n, c, *(i + self.pads[d] + self.pads[nd + d] for d, i in enumerate(self.image))), dy.dtype
        )
        padded[self.crop] = dy
        cols = xp.empty((n, c, *self.block, *self.counts), dtype=dy.dtype)
        for off, window in self.windows(self.counts):
            cols[self.lead + off] = padded[self.lead + window]
        return cols.reshape(self.x_shape)


# -- functions ---------------------------------------------------------------------------------
def grid_sample(
    x: Tensor, grid: Tensor, mode: str = "linear", padding_mode: str = "zeros", align_corners: bool = False
) -> Tensor:
    """``x`` (N, C, *spatial) sampled at ``grid`` (N, *out, ndim) positions in ``[-1, 1]``.

    >>> import numpy as np; from singa_lite import tensor
    >>> x = tensor.from_numpy(np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2))
    >>> g = tensor.from_numpy(np.zeros((1, 1, 1, 2), np.float32))
    >>> grid_sample(x, g).numpy().ravel().tolist()
    [1.5]
    """
    return GridSample(mode, padding_mode, align_corners)(x, grid)[0]


def _base_grid(sizes: Sequence[int], align_corners: bool, dtype: Any) -> np.ndarray:
    """The identity grid: (prod(sizes), ndim + 1) rows ``(x, y, [z], 1)``, x on the last axis."""
    axes = []
    for n in sizes:
        i = np.arange(n, dtype=np.float64)
        if align_corners:
            axes.append(-1 + 2 * i / (n - 1) if n > 1 else np.zeros(1))
        else:
            axes.append((2 * i + 1) / n - 1)
    mesh = np.meshgrid(*axes, indexing="ij")
    cols = [m.reshape(-1) for m in mesh[::-1]]
    return np.stack([*cols, np.ones_like(cols[0])], axis=1).astype(dtype)


def affine_grid(theta: Tensor, size: Sequence[int], align_corners: bool = False) -> Tensor:
    """ONNX AffineGrid / PyTorch ``affine_grid``: the sampling grid (N, *spatial, ndim) of the
    affine maps ``theta`` (N, ndim, ndim + 1) for an input of ``size`` (N, C, *spatial); a
    matrix product with the identity grid, so its gradient comes free."""
    theta = _args.tensor("affine_grid", "theta", theta)
    size = _args.ints("affine_grid", "size", size, (4, 5), low=0, scalar=False)
    nd = len(size) - 2
    if theta.shape != (size[0], nd, nd + 1):
        raise _args.bad(
            "affine_grid", "theta", f"have shape {(size[0], nd, nd + 1)} for size {list(size)}", theta.shape
        )
    dev = theta.device
    base = Tensor._wrap(
        dev.backend.from_numpy(_base_grid(size[2:], align_corners, theta.dtype), dev.id()),
        dev,
        False,
        None,
        0,
    )
    grid = linalg.matmul(base, shape.transpose(theta, (0, 2, 1)))
    return shape.reshape(grid, (size[0], *size[2:], nd))


def max_unpool(
    x: Tensor,
    indices: Tensor,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    output_shape: Sequence[int] | None = None,
) -> Tensor:
    """ONNX MaxUnpool: the inverse of a max pool given its flat argmax ``indices``."""
    return MaxUnpool(kernel_shape, strides, pads, output_shape)(x, indices)[0]


def col2im(
    x: Tensor,
    image_shape: Sequence[int],
    block_shape: Sequence[int],
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> Tensor:
    """ONNX Col2Im: columns of sliding blocks summed back into images of ``image_shape``."""
    return Col2Im(image_shape, block_shape, dilations, pads, strides)(x)[0]


def center_crop_pad(x: Tensor, shape_: Sequence[int], axes: Sequence[int] | None = None) -> Tensor:
    """ONNX CenterCropPad: each axis in ``axes`` (all when None) center-cropped or zero-padded
    to the size in ``shape_``; a Pad with negative pads where it crops.

    >>> import numpy as np; from singa_lite import tensor
    >>> center_crop_pad(tensor.from_numpy(np.arange(5, dtype=np.float32)), [3]).numpy().tolist()
    [1.0, 2.0, 3.0]
    """
    x = _args.tensor("center_crop_pad", "x", x)
    nd = x.ndim()
    axes = list(range(nd)) if axes is None else [normalize_axis(a, nd, "center_crop_pad") for a in axes]
    sizes = _args.ints("center_crop_pad", "shape", shape_, (len(axes),), low=0, scalar=False)
    if len(set(axes)) != len(axes):
        raise _args.bad("center_crop_pad", "axes", "not repeat an axis", axes)
    begin, end = [0] * nd, [0] * nd
    for a, want in zip(axes, sizes):
        diff = want - x.shape[a]
        if diff >= 0:
            begin[a], end[a] = diff // 2, diff - diff // 2
        else:
            begin[a], end[a] = -((-diff) // 2), -((-diff) - (-diff) // 2)
    return shape.pad(x, "constant", begin + end)

"""ONNX handlers for detection and indexing: NonMaxSuppression, RoiAlign, GatherND, ScatterND,
TensorScatter, Compress, Unique, CumProd, ReverseSequence, GridSample, AffineGrid, MaxUnpool,
Col2Im, CenterCropPad and the deprecated Scatter.

Each is a thin reader of attributes and host arguments in front of an op of
:mod:`singa_lite.ops.detection`, :mod:`~singa_lite.ops.gather_scatter` or
:mod:`~singa_lite.ops.sampling`; sizes that follow from argument values (a Col2Im image, a
MaxUnpool output, RoiAlign's sample arrays) are checked against the allocation limits first.
"""

from __future__ import annotations

# ruff: noqa: N802  (handlers are named exactly after the ONNX operators)
import math

import numpy as np

from singa_lite import ops
from singa_lite.ops import detection as det
from singa_lite.ops import gather_scatter as gs
from singa_lite.ops import sampling as smp
from singa_lite.sonnx.import_ops.base import Node, wrap
from singa_lite.sonnx.import_ops.shape import ScatterElements
from singa_lite.tensor import Tensor

__all__ = [
    "AffineGrid",
    "CenterCropPad",
    "Col2Im",
    "Compress",
    "CumProd",
    "GatherND",
    "GridSample",
    "MaxUnpool",
    "NonMaxSuppression",
    "ReverseSequence",
    "RoiAlign",
    "Scatter",
    "ScatterND",
    "TensorScatter",
    "Unique",
]


def _as_int64(x: Tensor) -> Tensor:
    return x if x.dtype == np.int64 else wrap(x.data.astype(np.int64), x)


# -- detection ---------------------------------------------------------------------------------
def NonMaxSuppression(
    n: Node,
    boxes: Tensor,
    scores: Tensor,
    max_output: Tensor | None = None,
    iou_threshold: Tensor | None = None,
    score_threshold: Tensor | None = None,
) -> Tensor:
    """Greedy per-class box selection; int64 rows ``[batch, class, box]``."""
    if boxes.ndim() != 3 or scores.ndim() != 3 or boxes.shape[2] != 4:
        raise n.fail(f"boxes must be (B, N, 4) and scores (B, C, N), got {boxes.shape} and {scores.shape}")
    limit = int(n.scalar(max_output, 0))
    n.check_size((scores.size(), 3), np.int64)  # at most every box of every class
    op = det.NonMaxSuppression(
        limit,
        float(n.scalar(iou_threshold, 0.0)),
        None if score_threshold is None or score_threshold.size() == 0 else float(n.scalar(score_threshold)),
        bool(n.attr("center_point_box", 0)),
    )
    return op(boxes, scores)[0]


def RoiAlign(n: Node, x: Tensor, rois: Tensor, batch_indices: Tensor) -> Tensor:
    """Bilinear ROI pooling; ``coordinate_transformation_mode`` half_pixel (the default from
    opset 16) or output_half_pixel (before)."""
    default = "half_pixel" if n.opset >= 16 else "output_half_pixel"
    ctm = n.attr("coordinate_transformation_mode", default)
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise n.fail(f"unknown coordinate_transformation_mode {ctm!r}")
    if rois.ndim() != 2 or rois.shape[1] != 4 or x.ndim() != 4:
        raise n.fail(f"x must be (N, C, H, W) and rois (R, 4), got {x.shape} and {rois.shape}")
    out = (int(n.attr("output_height", 1)), int(n.attr("output_width", 1)))
    kw = {
        "sampling_ratio": int(n.attr("sampling_ratio", 0)),
        "spatial_scale": float(n.attr("spatial_scale", 1.0)),
        "mode": n.attr("mode", "avg"),
        "half_pixel": ctm == "half_pixel",
    }
    op = det.RoiAlign(out[0], out[1], **kw)
    gy, gx = (max(g, 1) for g in op.largest_grid(n.values(rois)))
    r, c, h, w = rois.shape[0], *x.shape[1:]
    n.check_size((r, out[0], max(gy, h)), 8, "samples along y")
    n.check_size((r, out[1], max(gx, w)), 8, "samples along x")
    if kw["mode"] == "max":  # every weighted corner of one box at once
        n.check_size((c, out[0] * gy, out[1] * gx, 4), x.dtype, "weighted corners")
    n.check_size((r, c, *out), x.dtype)
    return op(x, rois, _as_int64(batch_indices))[0]


# -- gather and scatter ------------------------------------------------------------------------
def GatherND(n: Node, x: Tensor, indices: Tensor) -> Tensor:
    b = int(n.attr("batch_dims", 0))
    if indices.ndim() >= 1 and b < indices.ndim() and b < x.ndim():
        k = indices.shape[-1]
        n.check_size((*indices.shape[:-1], *x.shape[b + k :]), x.dtype)
    return gs.GatherND(b)(x, indices)[0]


def ScatterND(n: Node, x: Tensor, indices: Tensor, updates: Tensor) -> Tensor:
    return gs.ScatterND(n.attr("reduction", "none"))(x, indices, updates)[0]


def TensorScatter(n: Node, cache: Tensor, update: Tensor, write_indices: Tensor | None = None) -> Tensor:
    """A KV-cache write (opset 24): ``update`` into ``cache`` at each batch entry's index."""
    if write_indices is None:
        write_indices = wrap(cache.device.xp.zeros(cache.shape[0] if cache.shape else 0, np.int64), cache)
    op = gs.TensorScatter(n.attr("axis", -2), n.attr("mode", "linear"))
    return op(cache, update, write_indices)[0]


def Scatter(n: Node, x: Tensor, indices: Tensor, updates: Tensor) -> Tensor:
    """The deprecated name of ScatterElements (opsets 9 and 10)."""
    return ScatterElements(n, x, indices, updates)


def Compress(n: Node, x: Tensor, condition: Tensor) -> Tensor:
    return gs.Compress(n.attr("axis"))(x, condition)[0]


def Unique(n: Node, x: Tensor) -> Tensor | tuple[Tensor, ...]:
    outs = gs.Unique(n.attr("axis"), bool(n.attr("sorted", 1)))(x)
    return outs[: n.n_outputs] if n.n_outputs > 1 else outs[0]


def CumProd(n: Node, x: Tensor, axis: Tensor) -> Tensor:
    if axis.size() != 1:
        raise n.fail(f"axis must hold one value, got shape {axis.shape}")
    return ops.cumprod(x, int(n.scalar(axis)), bool(n.attr("exclusive", 0)), bool(n.attr("reverse", 0)))


def ReverseSequence(n: Node, x: Tensor, lengths: Tensor) -> Tensor:
    op = gs.ReverseSequence(n.attr("batch_axis", 1), n.attr("time_axis", 0))
    return op(x, lengths)[0]


# -- sampling ----------------------------------------------------------------------------------
def GridSample(n: Node, x: Tensor, grid: Tensor) -> Tensor:
    """Sampling at grid positions; opset 16's mode names ``bilinear``/``bicubic`` too."""
    mode = n.attr("mode", "linear" if n.opset >= 20 else "bilinear")
    if x.ndim() >= 3 and grid.ndim() == x.ndim():
        taps = {"nearest": 1, "linear": 2, "bilinear": 2}.get(mode, 4) ** (x.ndim() - 2)
        n.check_size((math.prod(grid.shape[:-1]), taps, x.shape[1]), x.dtype, "taps")
    op = smp.GridSample(mode, n.attr("padding_mode", "zeros"), bool(n.attr("align_corners", 0)))
    return op(x, grid)[0]


def AffineGrid(n: Node, theta: Tensor, size: Tensor) -> Tensor:
    dims = n.ints(size)
    if len(dims) not in (4, 5) or min(dims) < 0:
        raise n.fail(f"size must be (N, C, H, W) or (N, C, D, H, W), got {dims}")
    n.check_size((dims[0], *dims[2:], len(dims) - 2), theta.dtype)
    return ops.affine_grid(theta, dims, bool(n.attr("align_corners", 0)))


def MaxUnpool(n: Node, x: Tensor, indices: Tensor, output_shape: Tensor | None = None) -> Tensor:
    kernel = n.attr("kernel_shape")
    if kernel is None:
        raise n.fail("kernel_shape is required")
    shape = n.opt_ints(output_shape)
    if shape is not None:
        n.check_size(shape, x.dtype)
    elif x.ndim() == len(kernel) + 2:
        strides = n.attr("strides", [1] * len(kernel))
        pads = n.attr("pads", [0] * 2 * len(kernel))
        n.check_size(smp.unpool_shape(tuple(x.shape), kernel, strides, pads), x.dtype)
    op = smp.MaxUnpool(kernel, n.attr("strides"), n.attr("pads"), shape)
    return op(x, _as_int64(indices))[0]


def Col2Im(n: Node, x: Tensor, image_shape: Tensor, block_shape: Tensor) -> Tensor:
    image, block = n.ints(image_shape), n.ints(block_shape)
    nd = len(image)
    pads = n.attr("pads", [0] * 2 * nd)
    if x.ndim() == 3 and len(pads) == 2 * nd:
        channels = x.shape[1] // max(math.prod(block), 1)
        n.check_size(
            (x.shape[0], channels, *(i + pads[d] + pads[nd + d] for d, i in enumerate(image))), x.dtype
        )
    op = smp.Col2Im(image, block, n.attr("dilations"), n.attr("pads"), n.attr("strides"))
    return op(x)[0]


def CenterCropPad(n: Node, x: Tensor, shape: Tensor) -> Tensor:
    sizes = n.ints(shape)
    axes = n.attr("axes")
    nd = x.ndim()
    out = list(x.shape)
    for a, s in zip(range(nd) if axes is None else axes, sizes):
        if -nd <= a < nd:
            out[a] = s
    n.check_size(out, x.dtype)
    return ops.center_crop_pad(x, sizes, axes)

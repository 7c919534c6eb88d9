"""Converters of detection, N-d gather/scatter and sampling ops (the exporter's side of
:mod:`singa_lite.sonnx.import_ops.detection`). ``affine_grid`` and ``center_crop_pad`` are
composites and export as the MatMul and Pad they are made of.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite.ops import detection as det
from singa_lite.ops import gather_scatter as gs
from singa_lite.ops import sampling as smp
from singa_lite.sonnx.export_ops.base import GraphBuilder, Value, converts, unsupported


def _need(g: GraphBuilder, op: Any, opset: int, why: str = "") -> None:
    if g.opset < opset:
        raise unsupported(op, g.opset, f"needs opset {opset}{': ' + why if why else ''}")


def _i64(g: GraphBuilder, v: Value) -> str:
    return g.as_type(v, np.int64)


@converts(gs.GatherND)
def _gather_nd(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    if op.batch_dims:
        _need(g, op, 12, "batch_dims")
    g.one("GatherND", [xs[0].name, _i64(g, xs[1])], ys[0].name, batch_dims=op.batch_dims or None)


@converts(gs.ScatterND)
def _scatter_nd(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    _need(
        g,
        op,
        {"none": 11, "add": 16, "mul": 16, "max": 18, "min": 18}[op.reduction],
        f"reduction {op.reduction}",
    )
    red = None if op.reduction == "none" else op.reduction
    g.one("ScatterND", [xs[0].name, _i64(g, xs[1]), xs[2].name], ys[0].name, reduction=red)


@converts(gs.TensorScatter)
def _tensor_scatter(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    _need(g, op, 24)
    inputs = [xs[0].name, xs[1].name, _i64(g, xs[2])]
    g.one("TensorScatter", inputs, ys[0].name, axis=int(op.axis), mode=op.mode)


@converts(gs.Compress)
def _compress(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Compress", [xs[0].name, g.as_type(xs[1], np.bool_)], ys[0].name, axis=op.axis)


@converts(gs.Unique)
def _unique(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.node("Unique", [xs[0].name], [y.name for y in ys], axis=op.axis, sorted=int(op.sorted))


@converts(gs.CumProd)
def _cumprod(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    _need(g, op, 26)
    axis = g.const(np.asarray(op.ax, dtype=np.int64))
    attrs = {"exclusive": int(op.exclusive), "reverse": int(op.reverse)}
    g.one("CumProd", [xs[0].name, axis], ys[0].name, **attrs)


@converts(gs.ReverseSequence)
def _reverse_sequence(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    attrs = {"batch_axis": op.batch_axis, "time_axis": op.time_axis}
    g.one("ReverseSequence", [xs[0].name, _i64(g, xs[1])], ys[0].name, **attrs)


@converts(smp.GridSample)
def _grid_sample(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    if xs[0].ndim != 4:
        _need(g, op, 20, "more than 2 spatial axes")
    _need(g, op, 16)
    mode = op.mode if g.opset >= 20 else {"linear": "bilinear", "cubic": "bicubic"}.get(op.mode, op.mode)
    grid = g.as_type(xs[1], xs[0].dtype)
    attrs = {"mode": mode, "padding_mode": op.padding_mode, "align_corners": int(op.align_corners)}
    g.one("GridSample", [xs[0].name, grid], ys[0].name, **attrs)


@converts(smp.MaxUnpool)
def _max_unpool(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    inputs = [xs[0].name, _i64(g, xs[1])]
    if op.output_shape is not None:
        inputs.append(g.ints(op.output_shape))
    attrs = {"kernel_shape": list(op.kernel), "strides": list(op.strides), "pads": list(op.pads)}
    g.one("MaxUnpool", inputs, ys[0].name, **attrs)


@converts(smp.Col2Im)
def _col2im(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    _need(g, op, 18)
    attrs = {"dilations": list(op.dil), "pads": list(op.pads), "strides": list(op.strides)}
    g.one("Col2Im", [xs[0].name, g.ints(op.image), g.ints(op.block)], ys[0].name, **attrs)


@converts(det.NonMaxSuppression)
def _nms(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    box_type = xs[0].dtype
    inputs = [
        xs[0].name,
        g.as_type(xs[1], box_type),
        g.const(np.asarray([op.max_output], dtype=np.int64)),
        g.const(np.asarray([op.iou_threshold], dtype=np.float32)),
    ]
    if op.score_threshold is not None:
        inputs.append(g.const(np.asarray([op.score_threshold], dtype=np.float32)))
    g.one("NonMaxSuppression", inputs, ys[0].name, center_point_box=int(op.center_point_box))


@converts(det.RoiAlign)
def _roi_align(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    attrs: dict[str, Any] = {
        "output_height": op.out[0],
        "output_width": op.out[1],
        "sampling_ratio": op.sampling_ratio,
        "spatial_scale": float(op.spatial_scale),
        "mode": op.mode,
    }
    if op.half_pixel:
        _need(g, op, 16, "half_pixel coordinates")
    if g.opset >= 16:
        attrs["coordinate_transformation_mode"] = "half_pixel" if op.half_pixel else "output_half_pixel"
    rois = g.as_type(xs[1], xs[0].dtype)
    g.one("RoiAlign", [xs[0].name, rois, _i64(g, xs[2])], ys[0].name, **attrs)

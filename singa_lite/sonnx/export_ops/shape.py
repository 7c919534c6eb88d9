"""Converters of shapes, casts, padding, indexing and data movement (the exporter's side of
:mod:`singa_lite.sonnx.import_ops.shape`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite import backend
from singa_lite.ops import indexing as ix
from singa_lite.ops import shape
from singa_lite.sonnx.export_ops.base import GraphBuilder, Value, converts, unsupported


# -- shape ---------------------------------------------------------------------------------------
@converts(shape.Reshape, shape.Squeeze, shape.Unsqueeze)
def _reshape(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    # The traced output shape is exact; Squeeze/Unsqueeze get their own nodes for readability.
    x, y = xs[0], ys[0]
    if isinstance(op, shape.Squeeze):
        axes = (
            [i for i, s in enumerate(x.shape) if s == 1]
            if op.axes is None
            else sorted(a % x.ndim for a in shape._as_list(op.axes))
        )
        if axes:
            g.squeeze(x.name, axes, y.name)
            return
    elif isinstance(op, shape.Unsqueeze):
        g.unsqueeze(x.name, sorted(a % y.ndim for a in shape._as_list(op.axes)), y.name)
        return
    g.reshape(x.name, list(y.shape), y.name)


@converts(shape.Flatten)
def _flatten(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Flatten", [xs[0].name], ys[0].name, axis=int(op.axis))


@converts(shape.Transpose)
def _transpose(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Transpose", [xs[0].name], ys[0].name, perm=[int(p) for p in op.perm])


@converts(shape.Cat)
def _cat(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Concat", [x.name for x in xs], ys[0].name, axis=int(op.axis_))


@converts(shape.Split)
def _split(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.split(xs[0].name, op.axis_, [y.shape[op.axis_] for y in ys], [y.name for y in ys])


@converts(shape.Expand)
def _expand(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Expand", [xs[0].name, g.ints(op.shape)], ys[0].name)


@converts(shape.Tile)
def _tile(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x = xs[0].name
    if len(op.padded) != xs[0].ndim:  # ONNX needs one repeat per axis: add the leading 1s
        x = g.reshape(x, list(op.padded))
    g.one("Tile", [x, g.ints(op.reps)], ys[0].name)


@converts(shape.Pad)
def _pad(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    if op.mode == "wrap" and g.opset < 19:
        raise unsupported(op, g.opset, "mode 'wrap' needs opset 19")
    ins = [xs[0].name, g.ints(op.pads)]
    if op.mode == "constant":
        ins.append(g.scalar(op.constant, xs[0].dtype))
    g.one("Pad", ins, ys[0].name, mode=op.mode)


@converts(shape.Cast)
def _cast(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.cast(xs[0].name, ys[0].dtype, ys[0].name)


@converts(ix.Slice)
def _slice(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    n = len(op.starts)
    axes = list(range(n)) if op.axes is None else op.axes
    steps = [1] * n if op.steps is None else op.steps
    ins = [xs[0].name, g.ints(op.starts), g.ints(op.ends), g.ints(axes), g.ints(steps)]
    g.one("Slice", ins, ys[0].name)


@converts(ix.GetItem)
def _getitem(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    """NumPy basic indexing (ints, slices, None, Ellipsis) plus at most one integer array,
    as Slice, Gather, Squeeze and Unsqueeze."""
    x = xs[0]
    key = list(op.k)
    arrays = [i for i, k in enumerate(key) if hasattr(k, "dtype") and getattr(k, "ndim", 0) > 0]
    if len(arrays) > 1 or any(key[i].dtype.kind not in "iu" for i in arrays):
        raise unsupported(op, g.opset, "only one integer-array index (no bool masks) can be exported")
    if arrays and any(_is_int(k) for k in key):
        raise unsupported(op, g.opset, "an integer-array index mixed with integer indices")
    if Ellipsis in [k for k in key if not hasattr(k, "dtype")]:
        at = next(i for i, k in enumerate(key) if k is Ellipsis)
        used = sum(1 for k in key if k is not None and k is not Ellipsis)
        key[at : at + 1] = [slice(None)] * (x.ndim - used)
    key += [slice(None)] * (x.ndim - sum(1 for k in key if k is not None))
    cuts: list[tuple[int, int, int, int]] = []  # (start, end, axis, step) per sliced axis
    squeeze, unsq, array_at, out_dim, axis = [], [], None, 0, 0
    for k in key:
        if k is None:
            unsq.append(out_dim)
            out_dim += 1
            continue
        dim = x.shape[axis]
        if isinstance(k, slice):
            start, stop, step = k.indices(dim)
            if step < 0 and stop < 0:
                stop = -(2**62)  # "before element 0", which no non-negative end can say
            if (start, stop, step) != (0, dim, 1):
                cuts.append((start, stop, axis, step))
            out_dim += 1
        elif _is_int(k):
            i = (int(backend.to_host(k)) if hasattr(k, "dtype") else int(k)) % dim
            cuts.append((i, i + 1, axis, 1))
            squeeze.append(axis)
        else:
            array_at = axis
            out_dim += k.ndim
        axis += 1
    t = x.name
    if cuts:
        t = g.one("Slice", [t, *(g.ints(column) for column in zip(*cuts))])
    if array_at is not None:
        index = key[array_at + sum(1 for k in key[: array_at + 1] if k is None)]
        idx = g.const(backend.to_host(index))  # GetItem holds its index arrays on the device
        t = g.one("Gather", [t, idx], axis=array_at)
    if squeeze:
        t = g.squeeze(t, squeeze)
    if unsq:
        t = g.unsqueeze(t, unsq)
    g.one("Identity", [t], ys[0].name)


def _is_int(k: Any) -> bool:
    return isinstance(k, (int, np.integer)) or (hasattr(k, "dtype") and getattr(k, "ndim", 1) == 0)


@converts(ix.Gather)
def _gather(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Gather", [xs[0].name, xs[1].name], ys[0].name, axis=int(op.axis_))


@converts(ix.GatherElements)
def _gather_elements(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("GatherElements", [xs[0].name, xs[1].name], ys[0].name, axis=int(op.axis))


@converts(ix.ScatterElements)
def _scatter_elements(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    need = {"none": 11, "add": 16, "mul": 16, "max": 18, "min": 18}[op.reduction]
    if g.opset < need:
        raise unsupported(op, g.opset, f"reduction {op.reduction!r} needs opset {need}")
    red = op.reduction if op.reduction != "none" else None
    g.one("ScatterElements", [x.name for x in xs], ys[0].name, axis=int(op.axis), reduction=red)


@converts(ix.Where)
def _where(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Where", [g.as_type(xs[0], np.bool_), xs[1].name, xs[2].name], ys[0].name)


@converts(ix.OneHot)
def _onehot(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    depth = g.const(np.asarray([op.depth], dtype=np.int64))
    g.one("OneHot", [xs[0].name, depth, xs[1].name], ys[0].name, axis=int(op.axis))


@converts(shape.ShapeOf, ix.NonZero)
def _shape_or_nonzero(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    kind = "Shape" if isinstance(op, shape.ShapeOf) else "NonZero"
    g.one(kind, [xs[0].name], ys[0].name)

"""Converters for the quantization ops (:mod:`singa_lite.ops.quantize`).

QuantizeLinear/DequantizeLinear/DynamicQuantizeLinear export as themselves; an int4 or float8
target is written as ONNX's type and cast back to the type singa_lite holds it in (int8,
float32), so the graph's types match the traced ones. The exact integer products were traced
as float64 arithmetic between ``IntegerAsReal`` (Cast to double) and ``RoundToInt32`` (Round,
Cast to int32); a requantization is Cast, Mul by its multiplier, QuantizeLinear.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite import backend
from singa_lite.ops import quantize as q
from singa_lite.sonnx.export_ops.base import GraphBuilder, Value, converts, unsupported


def _axis_attrs(g: GraphBuilder, op: Any, scale: Value) -> dict[str, int]:
    if op.block_size:
        if g.opset < 21:
            raise unsupported(op, g.opset, "blocked quantization needs opset 21")
        return {"axis": int(op.axis), "block_size": int(op.block_size)}
    if scale.ndim and int(np.prod(scale.shape)) > 1:
        if g.opset < 13:
            raise unsupported(op, g.opset, "per-axis quantization needs opset 13")
        return {"axis": int(op.axis)}
    return {}


@converts(q.QuantizeLinear)
def _quantize(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x, scale = xs[0], xs[1]
    if x.dtype not in (np.float32, np.float16):
        raise unsupported(op, g.opset, f"ONNX QuantizeLinear takes float32/float16 input, got {x.dtype}")
    if op.target == np.int32:  # no ONNX QuantizeLinear to int32 (a bias): the formula itself
        _quantize_int32(g, op, xs, ys)
        return
    attrs = _axis_attrs(g, op, scale)
    held = op.target == op.storage
    if not held and g.opset < 21:
        raise unsupported(op, g.opset, f"quantization to {op.target} needs opset 21")
    # Always a zero point: without one ONNX would quantize to uint8.
    zp = xs[2].name if len(xs) > 2 else g.const(np.zeros((), op.storage))
    ins = [x.name, g.as_type(scale, x.dtype), zp if held else g.cast(zp, op.target)]
    if q._float_target(op.target) and not op.saturate:
        attrs["saturate"] = 0
    if held:
        g.one("QuantizeLinear", ins, ys[0].name, **attrs)
    else:
        g.cast(g.one("QuantizeLinear", ins, None, **attrs), op.storage, ys[0].name)


def _quantize_int32(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x, scale = xs[0], xs[1]
    if op.block_size:
        raise unsupported(op, g.opset, "blocked quantization to int32")
    per_axis = scale.ndim and int(np.prod(scale.shape)) > 1
    axis = int(op.axis) % max(x.ndim, 1)

    def shaped(v: Value) -> str:
        name = g.as_type(v, x.dtype)
        return g.reshape(name, [-1 if i == axis else 1 for i in range(x.ndim)]) if per_axis else name

    v = g.one("Round", [g.one("Div", [x.name, shaped(scale)])])
    if len(xs) > 2:
        v = g.one("Add", [v, shaped(xs[2])])
    lo, hi = q.quant_range(np.int32)
    v = g.one("Clip", [v, g.scalar(lo, x.dtype), g.scalar(hi, x.dtype)])
    g.cast(v, np.int32, ys[0].name)


@converts(q.DequantizeLinear)
def _dequantize(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x, scale, y = xs[0], xs[1], ys[0]
    attrs = _axis_attrs(g, op, scale)
    if x.dtype.kind == "f":  # float8 values held as float32: the formula itself
        if attrs:
            raise unsupported(op, g.opset, "per-axis dequantization of float8 values held as float32")
        d = g.one("Sub", [x.name, g.as_type(xs[2], x.dtype)]) if len(xs) > 2 else x.name
        g.one("Mul", [g.as_type(Value(d, x.shape, x.dtype), y.dtype), g.as_type(scale, y.dtype)], y.name)
        return
    ins = [x.name, scale.name, *([xs[2].name] if len(xs) > 2 else [])]
    if y.dtype == scale.dtype:
        g.one("DequantizeLinear", ins, y.name, **attrs)
    else:
        g.cast(g.one("DequantizeLinear", ins, None, **attrs), y.dtype, y.name)


@converts(q.DynamicQuantizeLinear)
def _dynamic(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.node("DynamicQuantizeLinear", [xs[0].name], [y.name for y in ys])


@converts(q.IntegerAsReal)
def _as_real(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.cast(xs[0].name, np.float64, ys[0].name)


@converts(q.RoundToInt32)
def _to_int32(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.cast(g.one("Round", [xs[0].name]), np.int32, ys[0].name)


@converts(q.Requantize)
def _requantize(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    m = np.asarray(backend.to_host(op.multiplier), np.float32)
    z = np.asarray(backend.to_host(op.zero_point)).astype(op.target)
    scaled = g.one("Mul", [g.cast(xs[0].name, np.float32), g.const(m)])
    g.one("QuantizeLinear", [scaled, g.scalar(1.0, np.float32), g.const(z)], ys[0].name)

"""ONNX handlers for quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, the
QLinear and Integer products (see :mod:`singa_lite.ops.quantize`).

Integer products accumulate exactly (int32) and requantize as onnxruntime does, so integer
outputs match it bit for bit. int4/uint4 and int2/uint2 values are held as int8/uint8; a
QuantizeLinear learns that its zero point is int4 from the type the model declares for it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper

from singa_lite import ops
from singa_lite.errors import SingaLiteError
from singa_lite.ops import window
from singa_lite.sonnx.import_ops.base import Node, window_pads
from singa_lite.tensor import Tensor

# ruff: noqa: N802  (handlers are named exactly after the ONNX operators)

__all__ = [
    "ConvInteger", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearConv",
    "QLinearMatMul", "QuantizeLinear",
]  # fmt: skip


def _onnx_type(n: Node, code: int) -> np.dtype:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(code))
    except Exception:
        raise n.fail(f"element type {code} has no NumPy equivalent") from None


def _target(n: Node, zero_point: Tensor | None) -> np.dtype:
    """QuantizeLinear's output type: its zero point's declared type, ``output_dtype``, or uint8."""
    code = n.attr("output_dtype", 0)
    attr = _onnx_type(n, code) if code else None
    if zero_point is None:
        return attr if attr is not None else np.dtype(np.uint8)
    declared = n.declared_type(2)
    zp_type = declared if declared is not None else np.dtype(zero_point.dtype)
    if attr is not None and attr != zp_type:
        raise n.fail(f"output_dtype {attr} contradicts the zero point's type {zp_type}")
    return zp_type


def _axis_args(n: Node, scale: Tensor) -> tuple[int, int]:
    block = n.attr("block_size", 0)
    if block < 0:
        raise n.fail(f"block_size must not be negative, got {block}")
    if block == 0 and scale.ndim() > 1:
        raise n.fail(
            f"a scale of rank {scale.ndim()} needs block_size (per tensor and per axis scales are 0-D or 1-D)"
        )
    return n.attr("axis", 1), block


def _quant(n: Node, fn: Any) -> Any:
    try:
        return fn()
    except SingaLiteError:
        raise
    except (TypeError, ValueError) as e:
        raise n.fail(str(e)) from None


def QuantizeLinear(n: Node, x: Tensor, y_scale: Tensor, y_zero_point: Tensor | None = None) -> Tensor:
    """Per tensor, per axis (``axis``) or blocked (``block_size``) quantization to int8, uint8,
    int16, uint16, int4, uint4, int2, uint2, the float8s or float4 (``saturate`` for floats)."""
    axis, block = _axis_args(n, y_scale)
    dtype = _target(n, y_zero_point)
    saturate = bool(n.attr("saturate", 1))
    return _quant(n, lambda: ops.quantize_linear(x, y_scale, y_zero_point, axis, block, dtype, saturate))


def DequantizeLinear(n: Node, x: Tensor, x_scale: Tensor, x_zero_point: Tensor | None = None) -> Tensor:
    """``(x - x_zero_point) * x_scale`` per tensor, per axis or blocked; ``output_dtype`` (opset
    23) picks the output type, else the scale's."""
    axis, block = _axis_args(n, x_scale)
    code = n.attr("output_dtype", 0)
    dtype = _onnx_type(n, code) if code else None
    return _quant(n, lambda: ops.dequantize_linear(x, x_scale, x_zero_point, axis, block, dtype))


def DynamicQuantizeLinear(n: Node, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return ops.dynamic_quantize_linear(x)


def MatMulInteger(
    n: Node, A: Tensor, B: Tensor, a_zero_point: Tensor | None = None, b_zero_point: Tensor | None = None
) -> Tensor:
    n.check_size(_matmul_shape(n, A, B), np.float64, "float64 accumulator")
    return ops.matmul_integer(A, B, a_zero_point, b_zero_point)


def _matmul_shape(n: Node, A: Tensor, B: Tensor) -> tuple[int, ...]:
    from singa_lite.sonnx.limits import matmul_shape

    shape = matmul_shape(A.shape, B.shape)
    if shape is None:
        raise n.fail(f"shapes {A.shape} and {B.shape} do not multiply")
    return shape


def _geometry(n: Node, x: Tensor, W: Tensor) -> tuple[list[int], list[tuple[int, int]], list[int], int]:
    """``(strides, padding pairs, dilations, group)`` of a ConvInteger/QLinearConv node."""
    if x.ndim() < 3 or W.ndim() != x.ndim():
        raise n.fail(
            f"expects (N, C, spatial...) input and a weight of the same rank, got {x.shape}, {W.shape}"
        )
    k = len(W.shape) - 2
    kernel = list(W.shape[2:])
    if list(n.attr("kernel_shape", kernel)) != kernel:
        raise n.fail(f"kernel_shape {n.attr('kernel_shape')} contradicts the weight's shape {W.shape}")
    strides = list(n.attr("strides", [1] * k))
    dilations = list(n.attr("dilations", [1] * k))
    group = n.attr("group", 1)
    if group < 1 or x.shape[1] != W.shape[1] * group or W.shape[0] % group:
        raise n.fail(
            f"group = {group} does not fit an input of shape {x.shape} and a weight of shape {W.shape}"
        )
    pairs = list(window.onnx_pairs(window_pads(n, x, kernel, strides, dilations)))
    out = window.out_size(x.shape[2:], kernel, strides, pairs, dilations)
    n.check_size([x.shape[0], W.shape[0], *out], np.float64, "float64 accumulator")
    return strides, pairs, dilations, group


def ConvInteger(
    n: Node, x: Tensor, w: Tensor, x_zero_point: Tensor | None = None, w_zero_point: Tensor | None = None
) -> Tensor:
    strides, pads, dilations, group = _geometry(n, x, w)
    return ops.conv_integer(x, w, x_zero_point, w_zero_point, strides, pads, dilations, group)


def _integer_operands(n: Node, *ts: Tensor) -> None:
    for t in ts:
        if t.dtype.kind not in "iu":
            raise n.fail(f"float8 operands are not supported; got {t.dtype} (int8 and uint8 are)")


def QLinearMatMul(
    n: Node,
    a: Tensor,
    a_scale: Tensor,
    a_zero_point: Tensor,
    b: Tensor,
    b_scale: Tensor,
    b_zero_point: Tensor,
    y_scale: Tensor,
    y_zero_point: Tensor,
) -> Tensor:
    _integer_operands(n, a, b, y_zero_point)
    n.check_size(_matmul_shape(n, a, b), np.float64, "float64 accumulator")
    return ops.qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point)


def QLinearConv(
    n: Node,
    x: Tensor,
    x_scale: Tensor,
    x_zero_point: Tensor,
    w: Tensor,
    w_scale: Tensor,
    w_zero_point: Tensor,
    y_scale: Tensor,
    y_zero_point: Tensor,
    B: Tensor | None = None,
) -> Tensor:
    strides, pads, dilations, group = _geometry(n, x, w)
    return ops.qlinear_conv(
        x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B,
        strides, pads, dilations, group,
    )  # fmt: skip


# -- quantized weights as trainable params (SONNXModel) ------------------------------------------
class QuantizedWeight:
    """An integer initializer that a quantized graph dequantizes, with its scale and zero point:
    ``SONNXModel`` trains the float ``dequantized()`` values as a param and feeds the graph
    ``quantize(param)``, whose rounding passes the gradient straight through."""

    def __init__(
        self, q: np.ndarray, scale: np.ndarray, zero_point: Any, axis: int, dtype: Any, block: int = 0
    ):
        self.q, self.scale, self.zero_point = q, scale.astype(np.float32), zero_point
        self.axis, self.block, self.dtype = axis, block, np.dtype(dtype)
        self._consts: dict[Any, tuple] = {}

    def dequantized(self) -> np.ndarray:
        """The float32 values the graph computes with: ``(q - zero_point) * scale``."""
        from singa_lite.ops.quantize import expand_param

        s = expand_param(np, self.scale, self.q.shape, self.axis, self.block, "scale")
        d = self.q.astype(np.float64)
        if self.zero_point is not None:
            d = d - expand_param(np, self.zero_point, self.q.shape, self.axis, self.block, "zero point")
        return (d.astype(np.float32) * s).astype(np.float32)

    def quantize(self, w: Tensor) -> Tensor:
        """``w`` (the float param) quantized as the graph holds it (recorded, STE gradient)."""
        key = w.device
        if key not in self._consts:
            s = Tensor(data=self.scale, device=w.device, requires_grad=False)
            z = (
                None
                if self.zero_point is None
                else Tensor(data=self.zero_point, device=w.device, requires_grad=False)
            )
            self._consts[key] = (s, z)
        s, z = self._consts[key]
        return ops.quantize_linear(w, s, z, self.axis, self.block, self.dtype)


def quantized_weights(proto: Any, external: Any = None) -> dict[str, QuantizedWeight]:
    """The integer initializers of ``proto`` that feed a quantized weight position (the input of
    DequantizeLinear, the weight and bias of QLinearConv, QLinearMatMul's ``b``, ConvInteger's
    and MatMulInteger's weight) with constant scales and zero points, by initializer name.

    ConvInteger and MatMulInteger carry no weight scale: it is found where onnxruntime's dynamic
    quantization puts it (the product ``Cast -> Mul(x_scale * w_scale)``); without it the
    weight trains in integer units (scale 1)."""
    from singa_lite.ops.quantize import quant_storage
    from singa_lite.sonnx.import_ops.base import proto_array

    inits = {t.name: t for t in proto.graph.initializer}
    nodes = list(proto.graph.node)

    def value(name: str) -> np.ndarray | None:
        t = inits.get(name) if name else None
        return None if t is None else proto_array(t, "initializer", external)

    def dtype_of(name: str) -> np.dtype:
        return np.dtype(helper.tensor_dtype_to_np_dtype(inits[name].data_type))

    def arg(node: Any, i: int) -> str:
        return node.input[i] if i < len(node.input) else ""

    out: dict[str, QuantizedWeight] = {}

    def add(name: str, scale: np.ndarray | None, zp_name: str, axis: int, block: int = 0) -> None:
        q = value(name)
        if q is None or scale is None or name in out:
            return
        try:
            storage = quant_storage(q.dtype)
        except SingaLiteError:
            return
        zp = value(zp_name)
        if storage.kind not in "iu" or (zp_name and zp is None):
            return  # a float8 weight, or a zero point computed in the graph
        zp = None if zp is None else zp.astype(storage)
        out[name] = QuantizedWeight(q.astype(storage), scale, zp, axis, dtype_of(name), block)

    consumers: dict[str, list[Any]] = {}
    for node in nodes:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    for node in nodes:
        op = node.op_type
        if op == "DequantizeLinear":
            add(
                arg(node, 0),
                value(arg(node, 1)),
                arg(node, 2),
                _attr(node, "axis", 1),
                _attr(node, "block_size", 0),
            )
        elif op == "QLinearConv":
            add(arg(node, 3), value(arg(node, 4)), arg(node, 5), 0)
            xs, ws = value(arg(node, 1)), value(arg(node, 4))
            if xs is not None and ws is not None and arg(node, 8):
                add(arg(node, 8), (xs.astype(np.float32) * ws.astype(np.float32)).reshape(-1), "", 0)
        elif op == "QLinearMatMul":
            add(arg(node, 3), value(arg(node, 4)), arg(node, 5), -1)
        elif op in ("ConvInteger", "MatMulInteger"):
            axis = 0 if op == "ConvInteger" else -1
            add(arg(node, 1), _dynamic_scale(node, consumers, value), arg(node, 3), axis)
    return out


def _attr(node: Any, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _dynamic_scale(node: Any, consumers: dict, value: Any) -> np.ndarray:
    """The weight scale of an integer product in onnxruntime's dynamic layout: its output is
    cast to float and multiplied by ``Mul(x_scale, w_scale)``, ``w_scale`` a constant."""
    producers = {}
    for nodes in consumers.values():
        for n in nodes:
            for o in n.output:
                producers[o] = n
    for cast in consumers.get(node.output[0], []):
        if cast.op_type != "Cast":
            continue
        for mul in consumers.get(cast.output[0], []):
            if mul.op_type != "Mul":
                continue
            other = mul.input[1] if mul.input[0] == cast.output[0] else mul.input[0]
            prod = producers.get(other)
            if prod is not None and prod.op_type == "Mul":
                for name in prod.input:
                    s = value(name)
                    if s is not None and s.dtype.kind == "f":
                        return s.reshape(-1) if s.size > 1 else s.reshape(())
    return np.ones((), np.float32)

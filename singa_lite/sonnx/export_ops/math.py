"""Converters of arithmetic, comparisons, logic, unary math, activations, reductions and linear
algebra (the exporter's side of :mod:`singa_lite.sonnx.import_ops.math`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa_lite.ops import activation, elementwise, linalg, reduce, unary
from singa_lite.sonnx.export_ops.base import Converter, GraphBuilder, Value, converts, unsupported


# -- elementwise ---------------------------------------------------------------------------------
def _same_type(onnx_type: str) -> Converter:
    """Ops whose inputs are cast to the output's dtype first (arithmetic)."""

    def convert(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
        g.one(onnx_type, [g.as_type(x, ys[0].dtype) for x in xs], ys[0].name)

    return convert


_cls: type  # the loops below register table-driven converters
for _cls, _name in [
    (elementwise.Add, "Add"),
    (elementwise.Sub, "Sub"),
    (elementwise.Mul, "Mul"),
    (elementwise.Div, "Div"),
    (elementwise.Sum, "Sum"),
    (elementwise.Mean, "Mean"),
    (elementwise.Max, "Max"),
    (elementwise.Min, "Min"),
    (linalg.MatMul, "MatMul"),
]:
    converts(_cls)(_same_type(_name))


@converts(elementwise.Pow)
def _pow(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Pow", [g.as_type(xs[0], ys[0].dtype), xs[1].name], ys[0].name)


def _compare(onnx_type: str, logical: bool = False) -> Converter:
    def convert(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
        common = np.dtype(np.bool_) if logical else np.result_type(*[x.dtype for x in xs])
        g.one(onnx_type, [g.as_type(x, common) for x in xs], ys[0].name)

    return convert


for _cls, _name in [
    (elementwise.Equal, "Equal"),
    (elementwise.Less, "Less"),
    (elementwise.LessEqual, "LessOrEqual"),
    (elementwise.Greater, "Greater"),
    (elementwise.GreaterEqual, "GreaterOrEqual"),
]:
    converts(_cls)(_compare(_name))
for _cls, _name in [
    (elementwise.LogicalAnd, "And"),
    (elementwise.LogicalOr, "Or"),
    (elementwise.LogicalXor, "Xor"),
    (elementwise.LogicalNot, "Not"),
]:
    converts(_cls)(_compare(_name, logical=True))


def _unary(onnx_type: str, **attrs: Any) -> Converter:
    def convert(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
        g.one(onnx_type, [xs[0].name], ys[0].name, **attrs)

    return convert


for _cls, _name in [
    (unary.Abs, "Abs"),
    (unary.Acos, "Acos"),
    (unary.Acosh, "Acosh"),
    (unary.Asin, "Asin"),
    (unary.Asinh, "Asinh"),
    (unary.Atan, "Atan"),
    (unary.Atanh, "Atanh"),
    (unary.Ceil, "Ceil"),
    (unary.Cos, "Cos"),
    (unary.Cosh, "Cosh"),
    (unary.Erf, "Erf"),
    (unary.Exp, "Exp"),
    (unary.Floor, "Floor"),
    (unary.Log, "Log"),
    (unary.Reciprocal, "Reciprocal"),
    (unary.Round, "Round"),
    (unary.Sign, "Sign"),
    (unary.Sin, "Sin"),
    (unary.Sinh, "Sinh"),
    (unary.Sqrt, "Sqrt"),
    (unary.Tan, "Tan"),
    (elementwise.Neg, "Neg"),
    (activation.ReLU, "Relu"),
    (activation.Sigmoid, "Sigmoid"),
    (activation.Tanh, "Tanh"),
    (activation.SoftPlus, "Softplus"),
    (activation.SoftSign, "Softsign"),
    (activation.Identity, "Identity"),
]:
    converts(_cls)(_unary(_name))


@converts(unary.Square)
def _square(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Mul", [xs[0].name, xs[0].name], ys[0].name)


@converts(unary.Clip)
def _clip(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    dt = xs[0].dtype
    lo = "" if op.lo is None else g.scalar(op.lo, dt)
    hi = "" if op.hi is None else g.scalar(op.hi, dt)
    g.one("Clip", [xs[0].name, lo, hi], ys[0].name)


# -- activations ---------------------------------------------------------------------------------
@converts(activation.LeakyRelu)
def _leaky(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("LeakyRelu", [xs[0].name], ys[0].name, alpha=float(op.a))


@converts(activation.Elu)
def _elu(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Elu", [xs[0].name], ys[0].name, alpha=float(op.alpha))


@converts(activation.SeLU)
def _selu(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Selu", [xs[0].name], ys[0].name, alpha=float(op.alpha), gamma=float(op.gamma))


@converts(activation.HardSigmoid)
def _hardsigmoid(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("HardSigmoid", [xs[0].name], ys[0].name, alpha=float(op.alpha), beta=float(op.gamma))


@converts(activation.PRelu)
def _prelu(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("PRelu", [xs[0].name, xs[1].name], ys[0].name)


@converts(activation.Gelu)
def _gelu(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x, dt = xs[0].name, xs[0].dtype
    if g.opset >= 20:
        g.one("Gelu", [x], ys[0].name, approximate=op.approximate)
        return
    # Before opset 20: x * 0.5 * (1 + erf(x / sqrt 2)), or the tanh form.
    if op.approximate == "tanh":
        cube = g.one("Mul", [g.one("Mul", [x, x]), x])
        inner = g.one("Add", [x, g.one("Mul", [cube, g.scalar(0.044715, dt)])])
        t = g.one("Tanh", [g.one("Mul", [inner, g.scalar(math.sqrt(2 / math.pi), dt)])])
    else:
        t = g.one("Erf", [g.one("Mul", [x, g.scalar(1 / math.sqrt(2), dt)])])
    half = g.one("Mul", [g.one("Add", [t, g.scalar(1.0, dt)]), g.scalar(0.5, dt)])
    g.one("Mul", [x, half], ys[0].name)


@converts(activation.SoftMax, activation.LogSoftmax)
def _softmax(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    kind = "Softmax" if isinstance(op, activation.SoftMax) else "LogSoftmax"
    n, axis = xs[0].ndim, op.a
    if g.opset >= 13 or axis == n - 1:
        g.one(kind, [xs[0].name], ys[0].name, axis=axis)
        return
    # Opsets 11-12 flatten from `axis` to the end: move the axis last to get one-axis semantics.
    perm = [i for i in range(n) if i != axis] + [axis]
    back = [perm.index(i) for i in range(n)]
    t = g.one("Transpose", [xs[0].name], perm=perm)
    g.one("Transpose", [g.one(kind, [t], axis=n - 1)], ys[0].name, perm=back)


@converts(activation.AddBias)
def _add_bias(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x, b = xs
    bias = b.name if op.axis == 0 else g.reshape(b.name, [b.shape[0]] + [1] * (x.ndim - 1))
    g.one("Add", [x.name, bias], ys[0].name)


# -- reductions ----------------------------------------------------------------------------------
def _reduce(onnx_type: str) -> Converter:
    def convert(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
        x = g.as_type(xs[0], ys[0].dtype)  # a bool sum counts in int64, as singa_lite's does
        if not op.axes:  # a 0-d input: nothing to reduce
            g.one("Identity", [x], ys[0].name)
            return
        g.reduce(onnx_type, x, op.axes, op.keepdims, ys[0].name)

    return convert


for _cls, _name in [
    (reduce.ReduceSum, "ReduceSum"),
    (reduce.ReduceMean, "ReduceMean"),
    (reduce.ReduceMax, "ReduceMax"),
    (reduce.ReduceMin, "ReduceMin"),
    (reduce.ReduceProd, "ReduceProd"),
]:
    converts(_cls)(_reduce(_name))


@converts(reduce.ArgMax, reduce.ArgMin)
def _arg(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    kind = "ArgMax" if isinstance(op, reduce.ArgMax) else "ArgMin"
    x, axis, keep = xs[0].name, op.axis, op.keepdims
    if axis is None or xs[0].ndim == 0:
        x, axis = g.reshape(x, [-1]), 0
        keep = keep and xs[0].ndim <= 1
    last = int(op.last) if op.last else None
    if last and g.opset < 12:
        raise unsupported(op, g.opset, "select_last_index needs opset 12")
    out = g.one(
        kind,
        [x],
        None if keep or ys[0].ndim else ys[0].name,
        axis=int(axis),
        keepdims=int(keep),
        select_last_index=last,
    )
    if out != ys[0].name:
        g.reshape(out, list(ys[0].shape), ys[0].name)


# -- linear algebra ------------------------------------------------------------------------------
@converts(linalg.Gemm)
def _gemm(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one(
        "Gemm",
        [x.name for x in xs],
        ys[0].name,
        alpha=float(op.alpha),
        beta=float(op.beta),
        transA=int(op.transA),
        transB=int(op.transB),
    )


@converts(linalg.Einsum)
def _einsum(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    if g.opset < 12:
        raise unsupported(op, g.opset, "Einsum needs opset 12")
    eq = f"{','.join(op.ins)}->{op.out}"
    g.one("Einsum", [g.as_type(x, ys[0].dtype) for x in xs], ys[0].name, equation=eq)


@converts(linalg.Tensordot)
def _tensordot(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    if g.opset < 12:
        raise unsupported(op, g.opset, "Tensordot is exported as Einsum, which needs opset 12")
    a, b = xs
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    sa = [next(letters) for _ in range(a.ndim)]
    sb = [next(letters) for _ in range(b.ndim)]
    for i, j in zip(op.axa, op.axb):
        sb[j] = sa[i]
    out = [c for i, c in enumerate(sa) if i not in op.axa] + [c for j, c in enumerate(sb) if j not in op.axb]
    eq = f"{''.join(sa)},{''.join(sb)}->{''.join(out)}"
    g.one("Einsum", [g.as_type(x, ys[0].dtype) for x in xs], ys[0].name, equation=eq)

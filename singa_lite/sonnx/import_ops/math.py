"""ONNX handlers for arithmetic, unary math, activations, comparisons, logic and reductions.

Each function is named exactly after its ONNX operator (see :mod:`singa_lite.sonnx.import_ops`).
Float results go through singa_lite's differentiable ops, so gradients flow when a
``SONNXModel`` trains; integer and bool results carry no gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite import ops
from singa_lite.ops import unary
from singa_lite.sonnx.import_ops.base import Node, const, wrap
from singa_lite.tensor import Tensor

# ruff: noqa: N802

__all__ = [
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "And",
    "ArgMax",
    "ArgMin",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "Ceil",
    "Clip",
    "Cos",
    "Cosh",
    "CumSum",
    "Div",
    "Einsum",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    "Gemm",
    "Greater",
    "GreaterOrEqual",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "IsInf",
    "IsNaN",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "LogSoftmax",
    "MatMul",
    "Max",
    "Mean",
    "Min",
    "Mod",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "PRelu",
    "Pow",
    "Reciprocal",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
    "Relu",
    "Round",
    "Selu",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softmax",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Sub",
    "Sum",
    "Tan",
    "Tanh",
    "Xor",
]  # fmt: skip


def _unary(fn: Any, doc: str) -> Any:
    def handler(n: Node, x: Tensor) -> Tensor:
        return fn(x)

    handler.__doc__ = doc
    return handler


Abs = _unary(unary.abs, "|x|.")
Acos = _unary(unary.acos, "arccos x.")
Acosh = _unary(unary.acosh, "arcosh x.")
Asin = _unary(unary.asin, "arcsin x.")
Asinh = _unary(unary.asinh, "arsinh x.")
Atan = _unary(unary.atan, "arctan x.")
Atanh = _unary(unary.atanh, "artanh x.")
Ceil = _unary(unary.ceil, "ceil x.")
Cos = _unary(unary.cos, "cos x.")
Cosh = _unary(unary.cosh, "cosh x.")
Erf = _unary(unary.erf, "erf x.")
Exp = _unary(unary.exp, "e^x.")
Floor = _unary(unary.floor, "floor x.")
HardSwish = _unary(ops.hardswish, "x * hardsigmoid(x, 1/6, 1/2).")
Log = _unary(unary.log, "ln x.")
Neg = _unary(ops.neg, "-x.")
Reciprocal = _unary(unary.reciprocal, "1 / x.")
Relu = _unary(ops.relu, "max(x, 0).")
Round = _unary(unary.round, "round half to even.")
Sigmoid = _unary(ops.sigmoid, "1 / (1 + e^-x).")
Sign = _unary(unary.sign, "sign x.")
Sin = _unary(unary.sin, "sin x.")
Sinh = _unary(unary.sinh, "sinh x.")
Softplus = _unary(ops.softplus, "ln(1 + e^x).")
Softsign = _unary(ops.softsign, "x / (1 + |x|).")
Sqrt = _unary(unary.sqrt, "sqrt x.")
Tan = _unary(unary.tan, "tan x.")
Tanh = _unary(ops.tanh, "tanh x.")
Not = _unary(ops.logical_not, "logical not.")


def Identity(n: Node, x: Tensor) -> Any:
    """x itself (a new tensor sharing x's data); a sequence or an optional passes as it is."""
    return ops.identity(x) if isinstance(x, Tensor) else (x,)


# -- binary arithmetic: ONNX requires equal dtypes, NumPy's broadcasting ------------------------
def Add(n: Node, a: Tensor, b: Tensor) -> Tensor:
    return ops.add(a, b)


def Sub(n: Node, a: Tensor, b: Tensor) -> Tensor:
    return ops.sub(a, b)


def Mul(n: Node, a: Tensor, b: Tensor) -> Tensor:
    return ops.mul(a, b)


def Div(n: Node, a: Tensor, b: Tensor) -> Tensor:
    """a / b; integer division truncates toward zero as in C (ONNX's rule)."""
    if a.dtype.kind in "iu":
        xp = a.device.xp
        return wrap(xp.trunc(a.data / b.data).astype(a.dtype), a)
    return ops.div(a, b)


def Mod(n: Node, a: Tensor, b: Tensor) -> Tensor:
    """Remainder: the divisor's sign (``fmod=0``, Python's ``%``) or the dividend's (``fmod=1``,
    C's ``fmod``); no gradient.

    The special cases are spelled out, so that NumPy and CuPy agree: the libraries differ
    there (CuPy's float ``%`` is ``x - floor(x / y) * y``: NaN for an infinite divisor, +0 for
    ``0 % -2``). Floats: NaN for a zero or NaN divisor and for an infinite or NaN dividend; a
    finite ``x`` by an infinite ``y`` is ``x`` (moved to ``y`` by ``%`` where their signs
    differ); a zero remainder of ``%`` takes ``y``'s sign. Integers: 0 for a divisor of 0
    (NumPy's and CuPy's answer; ONNX leaves it undefined) or -1 (``INT_MIN % -1`` overflows in C).
    """
    xp = a.device.xp
    x, y = a.data, b.data
    floor = not n.attr("fmod", 0)
    if x.dtype.kind != "f":
        trivial = (y == 0) | (y == -1) if y.dtype.kind == "i" else y == 0
        safe = xp.where(trivial, xp.ones_like(y), y)
        r = xp.mod(x, safe) if floor else xp.fmod(x, safe)
        return wrap(xp.where(trivial, xp.zeros_like(r), r).astype(a.dtype), a)
    # Only finite dividends and finite non-zero divisors reach the library's fmod (exact there).
    finite_x, plain_y = xp.isfinite(x), xp.isfinite(y) & (y != 0)
    r = xp.fmod(xp.where(finite_x, x, 0), xp.where(plain_y, y, 1))
    r = xp.where(xp.isinf(y), x, r)
    r = xp.where(finite_x & ((y != 0) & ~xp.isnan(y)), r, xp.asarray(np.nan, r.dtype))
    if floor:
        r = xp.where((r != 0) & ((r < 0) != (y < 0)), r + y, r)
        r = xp.where(r == 0, xp.copysign(xp.zeros_like(r), y), r)
    return wrap(r.astype(a.dtype), a)


def Pow(n: Node, x: Tensor, y: Tensor) -> Tensor:
    """x ** y; the result has x's dtype even when y's differs (ONNX allows mixed types)."""
    if y.dtype != x.dtype:
        y = ops.cast(y, x.dtype)
    return ops.pow(x, y)


def MatMul(n: Node, a: Tensor, b: Tensor) -> Tensor:
    return ops.matmul(a, b)


def CumSum(n: Node, x: Tensor, axis: Tensor) -> Tensor:
    """Running sums along ``axis``; ``exclusive`` and ``reverse`` as in ``ops.cumsum``."""
    return ops.cumsum(x, int(n.scalar(axis)), bool(n.attr("exclusive", 0)), bool(n.attr("reverse", 0)))


def Einsum(n: Node, *operands: Tensor) -> Tensor:
    """ONNX Einsum (opset 12+): the equation attribute as NumPy writes it."""
    return ops.einsum(n.attr("equation").replace(" ", ""), *operands)


def Gemm(n: Node, a: Tensor, b: Tensor, c: Tensor | None = None) -> Tensor:
    """alpha * A' @ B' + beta * C."""
    ta, tb = bool(n.attr("transA", 0)), bool(n.attr("transB", 0))
    if a.ndim() != 2 or b.ndim() != 2:
        raise n.fail(f"A and B must be matrices, got shapes {a.shape} and {b.shape}")
    (m, ka), (kb, cols) = a.shape[::-1] if ta else a.shape, b.shape[::-1] if tb else b.shape
    if ka != kb:
        raise n.fail(f"A' {(m, ka)} and B' {(kb, cols)} do not multiply (transA={int(ta)}, transB={int(tb)})")
    n.check_size((m, cols), a.dtype)
    return ops.gemm(
        a,
        b,
        c,
        n.attr("alpha", 1.0),
        n.attr("beta", 1.0),
        bool(n.attr("transA", 0)),
        bool(n.attr("transB", 0)),
    )


def _variadic(fn: Any, doc: str) -> Any:
    def handler(n: Node, *xs: Tensor) -> Tensor:
        return fn(*xs)

    handler.__doc__ = doc
    return handler


Sum = _variadic(ops.sum, "Elementwise sum of all inputs.")
Mean = _variadic(ops.mean, "Elementwise mean of all inputs.")
Max = _variadic(ops.max, "Elementwise maximum of all inputs.")
Min = _variadic(ops.min, "Elementwise minimum of all inputs.")


# -- comparisons and logic (bool results, no gradient) ---------------------------------------
def _binary(fn: Any, doc: str) -> Any:
    def handler(n: Node, a: Tensor, b: Tensor) -> Tensor:
        return fn(a, b)

    handler.__doc__ = doc
    return handler


Equal = _binary(ops.equal, "a == b.")
Greater = _binary(ops.greater, "a > b.")
GreaterOrEqual = _binary(ops.greater_equal, "a >= b.")
Less = _binary(ops.less, "a < b.")
LessOrEqual = _binary(ops.less_equal, "a <= b.")
And = _binary(ops.logical_and, "a and b.")
Or = _binary(ops.logical_or, "a or b.")
Xor = _binary(ops.logical_xor, "a xor b.")


def IsNaN(n: Node, x: Tensor) -> Tensor:
    return wrap(x.device.xp.isnan(x.data), x)


def IsInf(n: Node, x: Tensor) -> Tensor:
    xp = x.device.xp
    pos, neg = n.attr("detect_positive", 1), n.attr("detect_negative", 1)
    return wrap(xp.isinf(x.data) & (((x.data > 0) & bool(pos)) | ((x.data < 0) & bool(neg))), x)


# -- activations ---------------------------------------------------------------------------------
def Clip(n: Node, x: Tensor, lo: Tensor | None = None, hi: Tensor | None = None) -> Tensor:
    """x limited to [min, max]: attributes before opset 11, optional inputs since."""
    if n.opset < 11:
        return unary.clip(x, n.attr("min"), n.attr("max"))
    # One-element bounds are host arguments (a constant's read once); others are refused by clip.
    lo_v, hi_v = (n.scalar(t) if t is not None and t.size() == 1 else t for t in (lo, hi))
    return unary.clip(x, lo_v, hi_v)


def Elu(n: Node, x: Tensor) -> Tensor:
    return ops.elu(x, n.attr("alpha", 1.0))


def Gelu(n: Node, x: Tensor) -> Tensor:
    return ops.gelu(x, n.attr("approximate", "none"))


def HardSigmoid(n: Node, x: Tensor) -> Tensor:
    return ops.hardsigmoid(x, n.attr("alpha", 0.2), n.attr("beta", 0.5))


def LeakyRelu(n: Node, x: Tensor) -> Tensor:
    return ops.leakyrelu(x, n.attr("alpha", 0.01))


def PRelu(n: Node, x: Tensor, slope: Tensor) -> Tensor:
    return ops.prelu(x, slope)


def Selu(n: Node, x: Tensor) -> Tensor:
    return ops.selu(x, n.attr("alpha", 1.67326319217681884765625), n.attr("gamma", 1.05070102214813232421875))


def _softmax(n: Node, x: Tensor, fn: Any) -> Tensor:
    # Before opset 13 the input is coerced to 2-D at `axis` (default 1) and normalised per row.
    if n.opset >= 13:
        return fn(x, n.attr("axis", -1))
    axis = n.attr("axis", 1)
    y = fn(ops.flatten(x, axis), 1)
    return ops.reshape(y, x.shape)


def _float16_sum_in_float32(fn: Any, log: bool) -> Any:
    """``fn`` (softmax or log-softmax), except that a float16 input is computed as NumPy's
    float16 arithmetic does it, its sum accumulated in float32 on every backend.

    NumPy rounds each float16 operation to float16 but sums along the last axis in float32;
    CuPy sums float16 along the last axis with CUB in float16, which moved probabilities by an
    ulp and failed onnx's float16 attention cases on CUDA. Here each ``exp`` and the quotient
    are float16 as before, and the sum is an explicit float32 sum rounded once: the same
    values as NumPy's along the last axis, on NumPy and CuPy alike.
    """

    def softmax(x: Tensor, axis: int) -> Tensor:
        if x.dtype != np.float16 or not x.size():
            return fn(x, axis)
        shift = const(x.data.max(axis=axis, keepdims=True), x)  # a constant: softmax ignores it
        y = ops.sub(x, shift)
        e = unary.exp(y)
        total = ops.cast(ops.reduce_sum(ops.cast(e, np.float32), [axis], True), np.float16)
        return ops.sub(y, unary.log(total)) if log else ops.div(e, total)

    return softmax


def Softmax(n: Node, x: Tensor) -> Tensor:
    """softmax along ``axis`` (opset 13+), or over the 2-D coercion at ``axis`` (before)."""
    return _softmax(n, x, _float16_sum_in_float32(ops.softmax, log=False))


def LogSoftmax(n: Node, x: Tensor) -> Tensor:
    return _softmax(n, x, _float16_sum_in_float32(ops.log_softmax, log=True))


# -- reductions ------------------------------------------------------------------------------------
def _reduce(n: Node, x: Tensor, axes_in: Tensor | None, since: int, fn: Any) -> Tensor:
    """Shared by Reduce*: ``axes`` moved to an input at ``since`` (13 for ReduceSum, 18 others)."""
    axes = n.arg("axes", axes_in, since)
    keepdims = bool(n.attr("keepdims", 1))
    if not axes:
        if n.attr("noop_with_empty_axes", 0):
            return ops.identity(x)
        axes = None
    return fn(x, axes, keepdims)


def ReduceSum(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
    return _reduce(n, x, axes, 13, ops.reduce_sum)


def ReduceMean(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
    return _reduce(n, x, axes, 18, ops.reduce_mean)


def ReduceMax(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
    if x.dtype == np.bool_:
        return _bool_reduce(n, x, axes, "any")
    return _reduce(n, x, axes, 18, _empty_aware(ops.reduce_max, -np.inf))


def ReduceMin(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
    if x.dtype == np.bool_:
        return _bool_reduce(n, x, axes, "all")
    return _reduce(n, x, axes, 18, _empty_aware(ops.reduce_min, np.inf))


def _empty_aware(fn: Any, identity: float) -> Any:
    """``fn``, except that a reduction over an empty axis gives ONNX's identity (-inf for max)."""

    def reduce(t: Tensor, axes: Any, keepdims: bool) -> Tensor:
        if t.size():
            return fn(t, axes, keepdims)
        ax = {a % t.ndim() for a in (range(t.ndim()) if axes is None else axes)}
        shape = [1 if i in ax else s for i, s in enumerate(t.shape) if keepdims or i not in ax]
        return wrap(t.device.xp.full(shape, identity, dtype=t.dtype), t)

    return reduce


def _bool_reduce(n: Node, x: Tensor, axes_in: Tensor | None, fn: str) -> Tensor:
    def reduce(t: Tensor, axes: Any, keepdims: bool) -> Tensor:
        return wrap(getattr(t.data, fn)(axis=None if axes is None else tuple(axes), keepdims=keepdims), t)

    return _reduce(n, x, axes_in, 18, reduce)


def ReduceProd(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
    return _reduce(n, x, axes, 18, ops.reduce_prod)


def ReduceSumSquare(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
    return _reduce(n, x, axes, 18, lambda t, a, k: ops.reduce_sum(unary.square(t), a, k))


def ReduceL1(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
    return _reduce(n, x, axes, 18, lambda t, a, k: ops.reduce_sum(unary.abs(t), a, k))


def ReduceL2(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
    return _reduce(n, x, axes, 18, lambda t, a, k: unary.sqrt(ops.reduce_sum(unary.square(t), a, k)))


def ReduceLogSumExp(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
    def lse(t: Tensor, axes: Any, keepdims: bool) -> Tensor:
        m = ops.reduce_max(t, axes, True)
        # The max is a constant shift: detaching it keeps the gradient exact and simple.
        m = const(m.data, t)
        s = unary.log(ops.reduce_sum(unary.exp(ops.sub(t, m)), axes, True)) + m
        return s if keepdims else ops.squeeze(s, list(range(t.ndim())) if axes is None else axes)

    return _reduce(n, x, axes, 18, _empty_aware(lse, -np.inf))


def _arg(n: Node, x: Tensor, fn: Any) -> Tensor:
    return fn(x, n.attr("axis", 0), bool(n.attr("keepdims", 1)), bool(n.attr("select_last_index", 0)))


def ArgMax(n: Node, x: Tensor) -> Tensor:
    return _arg(n, x, ops.argmax)


def ArgMin(n: Node, x: Tensor) -> Tensor:
    return _arg(n, x, ops.argmin)

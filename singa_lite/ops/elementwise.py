"""Elementwise arithmetic, math and logic, with NumPy broadcasting.

Binary ops broadcast like NumPy; their backward sums each gradient back to its input's shape.
The variadic ONNX ops ``max``, ``min``, ``sum`` and ``mean`` take any number of tensors and
broadcast them all together. Comparisons and logic return bool tensors and pass no gradient.
The unary math (``exp``, ``sin``, ``erf``, ``clip`` ...) lives in ``ops/unary.py`` and is
re-exported here, so the whole family is importable from this module.

``sum``, ``max``, ``min``, ``abs``, ``round`` and ``pow`` are SINGA's names and shadow the
builtins inside this module: code here that needs a builtin must spell it ``builtins.sum``.
"""

from __future__ import annotations

from typing import Any

import numpy as np  # shape arithmetic only (CuPy may lack broadcast_shapes); array math uses xp

from singa_lite.autograd import Operator
from singa_lite.errors import DTypeError
from singa_lite.ops import unary
from singa_lite.ops._util import unbroadcast
from singa_lite.ops.unary import *  # noqa: F403 (re-exports the unary half of the family)
from singa_lite.tensor import Tensor

__all__ = [
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Neg",
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "neg",
    "eltwise_mult",
    "equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "max",
    "min",
    "sum",
    "mean",
    "maximum",
    "minimum",
    *unary.__all__,
]


class _Binary(Operator):
    """Shared broadcasting check for binary elementwise ops."""

    def check(self, a: Any, b: Any) -> None:
        try:
            np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise self.error("operands cannot be broadcast together", a, b) from None


class Add(_Binary):
    def forward(self, a: Any, b: Any) -> Any:
        self.shapes = a.shape, b.shape
        try:
            return a + b
        except ValueError:
            raise self.error("operands cannot be broadcast together", a, b) from None

    def backward(self, dy: Any) -> tuple:
        return unbroadcast(dy, self.shapes[0]), unbroadcast(dy, self.shapes[1])


class Sub(_Binary):
    def forward(self, a: Any, b: Any) -> Any:
        self.shapes = a.shape, b.shape
        try:
            return a - b
        except ValueError:
            raise self.error("operands cannot be broadcast together", a, b) from None

    def backward(self, dy: Any) -> tuple:
        return unbroadcast(dy, self.shapes[0]), unbroadcast(-dy, self.shapes[1])


class Mul(_Binary):
    def forward(self, a: Any, b: Any) -> Any:
        self.a, self.b = a, b
        try:
            return a * b
        except ValueError:
            raise self.error("operands cannot be broadcast together", a, b) from None

    def backward(self, dy: Any) -> tuple:
        a, b = self.a, self.b
        da = unbroadcast(dy * b, a.shape) if self.needs_grad[0] else None
        db = unbroadcast(dy * a, b.shape) if self.needs_grad[1] else None
        return da, db


class Div(_Binary):
    def forward(self, a: Any, b: Any) -> Any:
        try:
            y = a / b
        except ValueError:
            raise self.error("operands cannot be broadcast together", a, b) from None
        if y.dtype != a.dtype and a.dtype.kind == "f":
            y = y.astype(a.dtype)
        self.a, self.b, self.y = a, b, y
        return y

    def backward(self, dy: Any) -> tuple:
        a, b = self.a, self.b
        da = unbroadcast((dy / b).astype(a.dtype), a.shape) if self.needs_grad[0] else None
        db = unbroadcast((-dy * self.y / b).astype(b.dtype), b.shape) if self.needs_grad[1] else None
        return da, db


class Pow(_Binary):
    def forward(self, a: Any, b: Any) -> Any:
        self.check(a, b)
        y = self.xp.power(a, b)
        self.a, self.b, self.y = a, b, y
        return y

    def backward(self, dy: Any) -> tuple:
        xp, a, b, y = self.xp, self.a, self.b, self.y
        da = db = None
        if self.needs_grad[0]:
            da = unbroadcast(dy * b * xp.power(a, b - 1), a.shape).astype(a.dtype)
        if self.needs_grad[1]:
            # d/db a^b = a^b ln a, defined for a > 0; 0 elsewhere (where a^b is constant in b).
            ln = xp.log(xp.where(a > 0, a, 1))
            db = unbroadcast(dy * y * ln, b.shape).astype(b.dtype)
        return da, db


class Neg(Operator):
    def forward(self, x: Any) -> Any:
        return -x

    def backward(self, dy: Any) -> Any:
        return -dy


class _Variadic(Operator):
    """An ONNX variadic op (Max, Min, Sum, Mean): one or more inputs broadcast together."""

    def check(self, xs: tuple) -> None:
        self.shapes = [x.shape for x in xs]
        try:
            np.broadcast_shapes(*self.shapes)
        except ValueError:
            raise self.error("operands cannot be broadcast together", *xs) from None


class Sum(_Variadic):
    def forward(self, *xs: Any) -> Any:
        self.check(xs)
        y = xs[0] + xs[1] if len(xs) > 1 else xs[0].copy()
        for x in xs[2:]:
            y = y + x  # not +=: a later input may broadcast y to a larger shape
        return y

    def backward(self, dy: Any) -> tuple:
        return tuple(unbroadcast(dy, s) for s in self.shapes)


class Mean(Sum):
    def forward(self, *xs: Any) -> Any:
        for x in xs:
            if x.dtype.kind != "f":
                raise DTypeError(f"{self.name}: expects floating-point tensors, got {x.dtype}")
        y = super().forward(*xs)
        y /= len(xs)
        return y

    def backward(self, dy: Any) -> tuple:
        return super().backward(dy / len(self.shapes))


class Max(_Variadic):
    """Elementwise maximum; where several inputs attain it, they share the gradient evenly."""

    fn = "maximum"

    def forward(self, *xs: Any) -> Any:
        self.check(xs)
        pick = getattr(self.xp, self.fn)
        y = xs[0].copy() if len(xs) == 1 else pick(xs[0], xs[1])
        for x in xs[2:]:
            y = pick(y, x)
        self.xs, self.y = xs, y
        return y

    def backward(self, dy: Any) -> tuple:
        if len(self.xs) == 1:
            return (dy,)
        hits = [x == self.y for x in self.xs]
        count = hits[0].astype(dy.dtype)  # bool + bool would be a logical or, not a count
        for h in hits[1:]:
            count += h
        share = dy / count
        return tuple(
            unbroadcast(share * h, x.shape) if need else None
            for x, h, need in zip(self.xs, hits, self.needs_grad)
        )


class Min(Max):
    """Elementwise minimum; where several inputs attain it, they share the gradient evenly."""

    fn = "minimum"


class _Compare(_Binary):
    """A comparison or logical op: bool output, no gradient."""

    fn = "equal"

    def forward(self, *xs: Any) -> Any:
        if len(xs) == 2:
            self.check(*xs)
        return getattr(self.xp, self.fn)(*xs)

    def backward(self, dy: Any) -> tuple:
        return (None,) * len(self.inputs)


def _compare(fn: str) -> type[_Compare]:
    return type(
        fn.title().replace("_", ""), (_Compare,), {"fn": fn, "__doc__": f"Elementwise {fn}; no gradient."}
    )


Equal = _compare("equal")
Less = _compare("less")
LessEqual = _compare("less_equal")
Greater = _compare("greater")
GreaterEqual = _compare("greater_equal")
LogicalAnd = _compare("logical_and")
LogicalOr = _compare("logical_or")
LogicalXor = _compare("logical_xor")
LogicalNot = _compare("logical_not")


def add(a: Tensor, b: Tensor) -> Tensor:
    """``a + b`` with broadcasting."""
    return Add()(a, b)[0]


def sub(a: Tensor, b: Tensor) -> Tensor:
    """``a - b`` with broadcasting."""
    return Sub()(a, b)[0]


def mul(a: Tensor, b: Tensor) -> Tensor:
    """``a * b`` elementwise with broadcasting."""
    return Mul()(a, b)[0]


eltwise_mult = mul


def div(a: Tensor, b: Tensor) -> Tensor:
    """``a / b`` elementwise with broadcasting."""
    return Div()(a, b)[0]


def pow(a: Tensor, b: Tensor) -> Tensor:  # noqa: A001
    """``a ** b`` elementwise with broadcasting."""
    return Pow()(a, b)[0]


def neg(x: Tensor) -> Tensor:
    """``-x`` elementwise."""
    return Neg()(x)[0]


def equal(a: Tensor, b: Tensor) -> Tensor:
    """``a == b`` elementwise with broadcasting, as a bool tensor; no gradient."""
    return Equal()(a, b)[0]


def less(a: Tensor, b: Tensor) -> Tensor:
    """``a < b`` elementwise with broadcasting, as a bool tensor; no gradient."""
    return Less()(a, b)[0]


def less_equal(a: Tensor, b: Tensor) -> Tensor:
    """``a <= b`` elementwise with broadcasting, as a bool tensor; no gradient."""
    return LessEqual()(a, b)[0]


def greater(a: Tensor, b: Tensor) -> Tensor:
    """``a > b`` elementwise with broadcasting, as a bool tensor; no gradient."""
    return Greater()(a, b)[0]


def greater_equal(a: Tensor, b: Tensor) -> Tensor:
    """``a >= b`` elementwise with broadcasting, as a bool tensor; no gradient."""
    return GreaterEqual()(a, b)[0]


def logical_and(a: Tensor, b: Tensor) -> Tensor:
    """``a and b`` elementwise with broadcasting, as a bool tensor; no gradient."""
    return LogicalAnd()(a, b)[0]


def logical_or(a: Tensor, b: Tensor) -> Tensor:
    """``a or b`` elementwise with broadcasting, as a bool tensor; no gradient."""
    return LogicalOr()(a, b)[0]


def logical_xor(a: Tensor, b: Tensor) -> Tensor:
    """``a xor b`` elementwise with broadcasting, as a bool tensor; no gradient."""
    return LogicalXor()(a, b)[0]


def logical_not(x: Tensor) -> Tensor:
    """``not x`` elementwise, as a bool tensor; no gradient."""
    return LogicalNot()(x)[0]


def sum(*xs: Tensor) -> Tensor:  # noqa: A001
    """Elementwise sum of one or more tensors, broadcast together (ONNX Sum).

    This is not a reduction: ``sum(a, b, c) == a + b + c``; see ``reduce_sum`` for that.
    """
    return Sum()(*xs)[0]


def mean(*xs: Tensor) -> Tensor:
    """Elementwise mean of one or more float tensors, broadcast together (ONNX Mean)."""
    return Mean()(*xs)[0]


def max(*xs: Tensor) -> Tensor:  # noqa: A001
    """Elementwise maximum of one or more tensors, broadcast together (ONNX Max).

    The gradient goes to the input holding the maximum; tied inputs share it evenly.

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> a, b = (tensor.from_numpy(np.array(v)) for v in ([1.0, 5.0], [3.0, 2.0]))
    >>> tensor.to_numpy(max(a, b)).tolist()
    [3.0, 5.0]
    """
    return Max()(*xs)[0]


def min(*xs: Tensor) -> Tensor:  # noqa: A001
    """Elementwise minimum of one or more tensors, broadcast together (ONNX Min)."""
    return Min()(*xs)[0]


def maximum(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise maximum of two tensors (``max`` with exactly two inputs)."""
    return Max()(a, b)[0]


def minimum(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise minimum of two tensors (``min`` with exactly two inputs)."""
    return Min()(a, b)[0]

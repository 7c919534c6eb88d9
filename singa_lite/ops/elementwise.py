"""Elementwise arithmetic, math and logic, with NumPy broadcasting.

Binary ops broadcast like NumPy; their backward sums each gradient back to its input's shape.
Comparisons and logic return bool tensors and pass no gradient.
"""

from __future__ import annotations

from typing import Any

from singa_lite.autograd import Operator
from singa_lite.ops._util import unbroadcast
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
]


class _Binary(Operator):
    """Shared broadcasting check for binary elementwise ops."""

    def check(self, a: Any, b: Any) -> None:
        try:
            self.xp.broadcast_shapes(a.shape, b.shape)
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
    return type(fn.title().replace("_", ""), (_Compare,), {"fn": fn, "__doc__": f"Elementwise {fn}; no gradient."})


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
    return Neg()(x)[0]


def equal(a: Tensor, b: Tensor) -> Tensor:
    return Equal()(a, b)[0]


def less(a: Tensor, b: Tensor) -> Tensor:
    return Less()(a, b)[0]


def less_equal(a: Tensor, b: Tensor) -> Tensor:
    return LessEqual()(a, b)[0]


def greater(a: Tensor, b: Tensor) -> Tensor:
    return Greater()(a, b)[0]


def greater_equal(a: Tensor, b: Tensor) -> Tensor:
    return GreaterEqual()(a, b)[0]


def logical_and(a: Tensor, b: Tensor) -> Tensor:
    return LogicalAnd()(a, b)[0]


def logical_or(a: Tensor, b: Tensor) -> Tensor:
    return LogicalOr()(a, b)[0]


def logical_xor(a: Tensor, b: Tensor) -> Tensor:
    return LogicalXor()(a, b)[0]


def logical_not(x: Tensor) -> Tensor:
    return LogicalNot()(x)[0]

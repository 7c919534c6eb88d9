"""The less common activations of ONNX: ``celu``, ``thresholded_relu``, ``shrink``, ``mish``,
``swish``, ``swiglu`` and ``hardmax``.

``celu``, ``thresholded_relu`` and ``shrink`` are primitives (their gradients are piecewise);
``mish``, ``swish`` and ``swiglu`` are written with other ops and get their gradients from them.
``hardmax`` is piecewise constant: its gradient is 0.
"""

from __future__ import annotations

from typing import Any

from singa_lite import _args
from singa_lite.errors import ShapeError
from singa_lite.ops import activation, elementwise
from singa_lite.ops._util import normalize_axis
from singa_lite.ops.unary import CheckedOp
from singa_lite.tensor import Tensor

__all__ = [
    "Celu",
    "Hardmax",
    "Shrink",
    "ThresholdedRelu",
    "celu",
    "hardmax",
    "mish",
    "shrink",
    "swiglu",
    "swish",
    "thresholded_relu",
]


class Celu(CheckedOp):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self.alpha = _args.number(self.name, "alpha", alpha)
        if self.alpha == 0:
            raise _args.bad(self.name, "alpha", "not be 0", alpha)

    def forward(self, x: Any) -> Any:
        xp = self.xp
        a = x.dtype.type(self.alpha)
        # exp of the non-positive part only: the positive side never overflows.
        self.e = xp.exp(xp.minimum(x, 0) / a)
        self.pos = x > 0
        return xp.where(self.pos, x, a * (self.e - 1)).astype(x.dtype, copy=False)

    def backward(self, dy: Any) -> Any:
        return dy * self.xp.where(self.pos, 1, self.e).astype(dy.dtype, copy=False)


class ThresholdedRelu(CheckedOp):
    """``x`` where ``x > alpha``, else 0."""

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self.alpha = _args.number(self.name, "alpha", alpha)

    def forward(self, x: Any) -> Any:
        self.mask = x > x.dtype.type(self.alpha)
        return x * self.mask

    def backward(self, dy: Any) -> Any:
        return dy * self.mask


class Shrink(CheckedOp):
    """``x - bias`` where ``x > lambd``, ``x + bias`` where ``x < -lambd``, else 0."""

    kinds = "fiu"

    def __init__(self, lambd: float = 0.5, bias: float = 0.0) -> None:
        super().__init__()
        self.lambd = _args.number(self.name, "lambd", lambd)
        self.bias = _args.number(self.name, "bias", bias)

    def forward(self, x: Any) -> Any:
        xp = self.xp
        up, down = x > self.lambd, x < -self.lambd
        self.mask = up | down
        if x.dtype.kind in "iu":
            bias = int(self.bias)
            y = xp.where(up, x - bias, xp.where(down, x + bias, 0))
        else:
            b = x.dtype.type(self.bias)
            y = xp.where(up, x - b, xp.where(down, x + b, x.dtype.type(0)))
        return y.astype(x.dtype, copy=False)

    def backward(self, dy: Any) -> Any:
        return dy * self.mask


def celu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """Continuously differentiable ELU: ``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``.

    >>> import numpy as np; from singa_lite import tensor
    >>> celu(tensor.from_numpy(np.array([-1.0, 2.0]))).numpy().astype(float).round(4).tolist()
    [-0.6321, 2.0]
    """
    return Celu(alpha)(x)[0]


def thresholded_relu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where ``x > alpha``, else 0."""
    return ThresholdedRelu(alpha)(x)[0]


def shrink(x: Tensor, lambd: float = 0.5, bias: float = 0.0) -> Tensor:
    """Soft (``bias = lambd``) or hard (``bias = 0``) shrinkage, as ONNX Shrink."""
    return Shrink(lambd, bias)(x)[0]


def swish(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x * sigmoid(alpha * x)`` (SiLU for ``alpha = 1``)."""
    _args.tensor("swish", "x", x)
    alpha = _args.number("swish", "alpha", alpha)
    ax = x if alpha == 1 else elementwise.mul(x, _scalar(alpha, x))
    return elementwise.mul(x, activation.sigmoid(ax))


def swiglu(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
    """``swish(a, alpha) * b``: the gated linear unit of Llama-style MLPs."""
    _args.tensor("swiglu", "a", a)
    _args.tensor("swiglu", "b", b)
    if a.shape != b.shape:
        raise ShapeError(f"swiglu: the gate {a.shape} and value {b.shape} must have one shape")
    return elementwise.mul(swish(a, alpha), b)


def mish(x: Tensor) -> Tensor:
    """``x * tanh(softplus(x))``."""
    _args.tensor("mish", "x", x)
    return elementwise.mul(x, activation.tanh(activation.softplus(x)))


class Hardmax(CheckedOp):
    """1 at the first maximum along ``axis``, 0 elsewhere. Piecewise constant: its gradient is 0
    (an op all the same, so that ``to_onnx`` sees it)."""

    kinds = "fiu"

    def __init__(self, axis: int = -1) -> None:
        super().__init__()
        self.axis = _args.axis(self.name, "axis", axis)

    def forward(self, x: Any) -> Any:
        xp = self.xp
        self.a = a = normalize_axis(self.axis, x.ndim, self.name)
        if not x.size:
            return xp.zeros_like(x)
        best = xp.expand_dims(x.argmax(axis=a), a)
        where = xp.arange(x.shape[a]).reshape([-1 if i == a else 1 for i in range(x.ndim)])
        return (where == best).astype(x.dtype)

    def backward(self, dy: Any) -> Any:
        return self.xp.zeros_like(dy)


def hardmax(x: Tensor, axis: int = -1) -> Tensor:
    """1 at the first maximum along ``axis``, 0 elsewhere (ONNX Hardmax); its gradient is 0.

    >>> import numpy as np; from singa_lite import tensor
    >>> hardmax(tensor.from_numpy(np.array([[1.0, 3.0, 3.0]]))).numpy().tolist()
    [[0.0, 1.0, 0.0]]
    """
    return Hardmax(axis)(x)[0]


def _scalar(v: float, like: Tensor) -> Tensor:
    return Tensor._wrap(like.device.xp.asarray(v, like.dtype), like.device, False, None, 0)

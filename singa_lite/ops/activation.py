"""Activation functions, softmax and ``add_bias``.

NumPy turns the result of arithmetic on a 0-d array into a scalar, which ``out=`` cannot take, so
a temporary that is updated in place starts as ``xp.empty_like(x)`` filled through ``out=``.

``relu``, ``sigmoid``, ``tanh``, ``softmax`` and ``add_bias`` run in every training step, so
they work in place on their own temporaries and save the output (not the input) where the
gradient can be written in terms of it. All keep the input's dtype; everything but ``relu``,
``add_bias`` and ``identity`` needs a floating-point input and raises ``DTypeError`` otherwise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np  # shape arithmetic only (CuPy may lack broadcast_shapes); array math uses xp

from singa_lite import _args
from singa_lite.autograd import Operator
from singa_lite.backend import cpu_kernels
from singa_lite.ops._util import normalize_axis, unbroadcast
from singa_lite.ops.unary import CheckedOp, erf_array
from singa_lite.tensor import Tensor

__all__ = [
    "AddBias",
    "Elu",
    "Gelu",
    "HardSigmoid",
    "Identity",
    "LeakyRelu",
    "LogSoftmax",
    "PRelu",
    "ReLU",
    "SeLU",
    "Sigmoid",
    "SoftMax",
    "SoftPlus",
    "SoftSign",
    "Tanh",
    "add_bias",
    "elu",
    "gelu",
    "hardsigmoid",
    "hardswish",
    "identity",
    "leakyrelu",
    "log_softmax",
    "prelu",
    "relu",
    "selu",
    "sigmoid",
    "softmax",
    "softplus",
    "softsign",
    "tanh",
]


_SIGMOID_CAPS: dict = {}  # dtype -> log(its max) - 1: finfo and log cost 1 us a call


def sigmoid_array(xp: Any, x: Any) -> Any:
    """1 / (1 + e^-x) in x's dtype, in place on one temporary.

    This form is exact in both tails (for x << 0 it is 1 / e^-x); capping -x just below
    log(dtype max) keeps e^-x finite, which changes only results already below the dtype's
    smallest normal number. float16 is computed in float32: its e^-x would saturate at 65504.
    """
    if x.dtype.itemsize < 4:
        return sigmoid_array(xp, x.astype(xp.float32)).astype(x.dtype)
    cap = _SIGMOID_CAPS.get(x.dtype)
    if cap is None:
        cap = _SIGMOID_CAPS[x.dtype] = math.log(float(xp.finfo(x.dtype).max)) - 1
    y = xp.negative(x, out=xp.empty_like(x))
    xp.minimum(y, cap, out=y)
    xp.exp(y, out=y)
    y += 1
    xp.reciprocal(y, out=y)
    return y


# -- the every-step activations ----------------------------------------------------------------
def relu_array(xp: Any, x: Any) -> Any:
    """``max(x, 0)`` as a new array (ReLU's forward; batch norm's unfused ReLU too)."""
    if x.dtype.kind == "f" and cpu_kernels.usable(xp, x):  # 2-5x NumPy's maximum
        return cpu_kernels.activation.relu(x)
    return xp.maximum(x, 0)


def relu_grad(xp: Any, y: Any, dy: Any) -> Any:
    """``dy`` where ReLU's output ``y`` is positive, else 0 (``dy`` times the mask)."""
    if cpu_kernels.usable(xp, y, dy):  # one pass, no bool mask
        return cpu_kernels.activation.relu_backward(y, dy)
    return dy * (y > 0)


class ReLU(CheckedOp):
    kinds = "fiu"

    def forward(self, x: Any) -> Any:
        self.y = relu_array(self.xp, x)
        return self.y

    def backward(self, dy: Any) -> Any:
        return relu_grad(self.xp, self.y, dy)


class Sigmoid(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.y = sigmoid_array(self.xp, x)
        return self.y

    def backward(self, dy: Any) -> Any:
        g = 1 - self.y
        g *= self.y
        g *= dy
        return g


class Tanh(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.y = self.xp.tanh(x)
        return self.y

    def backward(self, dy: Any) -> Any:
        xp = self.xp
        g = xp.multiply(self.y, self.y, out=xp.empty_like(self.y))
        xp.subtract(1, g, out=g)
        g *= dy
        return g


class SoftMax(CheckedOp):
    """exp(x) / sum(exp(x)) along ``axis``, shifted by the max so exp cannot overflow."""

    def __init__(self, axis: int = 1) -> None:
        super().__init__()
        self.axis = _args.axis(self.name, "axis", axis)

    def forward(self, x: Any) -> Any:
        self.a = a = normalize_axis(self.axis, x.ndim, self.name)
        if a == x.ndim - 1 and x.shape[a] and cpu_kernels.usable(self.xp, x):  # one pass per row
            self.y = cpu_kernels.softmax.softmax_forward(x)
            return self.y
        y = x - x.max(axis=a, keepdims=True)
        self.xp.exp(y, out=y)
        y /= y.sum(axis=a, keepdims=True)
        self.y = y
        return y

    def backward(self, dy: Any) -> Any:
        y = self.y
        if self.a == y.ndim - 1 and cpu_kernels.usable(self.xp, y, dy):
            return cpu_kernels.softmax.softmax_backward(y, dy)
        dx = dy - (dy * y).sum(axis=self.a, keepdims=True)
        dx *= y
        return dx


class LogSoftmax(CheckedOp):
    """x - log(sum(exp(x))) along ``axis``, computed without overflow."""

    def __init__(self, axis: int = 1) -> None:
        super().__init__()
        self.axis = _args.axis(self.name, "axis", axis)

    def forward(self, x: Any) -> Any:
        xp = self.xp
        self.a = a = normalize_axis(self.axis, x.ndim, self.name)
        y = x - x.max(axis=a, keepdims=True)
        y -= xp.log(xp.exp(y).sum(axis=a, keepdims=True))
        self.y = y
        return y

    def backward(self, dy: Any) -> Any:
        g = self.xp.exp(self.y)  # the softmax
        g *= dy.sum(axis=self.a, keepdims=True)
        return dy - g


class AddBias(CheckedOp):
    """SINGA's bias add: ``axis=0`` adds ``b`` to every row, ``axis=1`` to every column."""

    kinds = "fiu"

    def __init__(self, axis: int = 0) -> None:
        super().__init__()
        # 0: add b to each row; 1: to each column.
        self.axis = _args.choice(self.name, "axis", axis, (0, 1))

    def forward(self, x: Any, b: Any) -> Any:
        # axis 0: b runs along x's last axis; axis 1: along its first axis (rows of a matrix).
        along = x.ndim - 1 if self.axis == 0 else 0
        if b.ndim != 1 or x.ndim < 1 or x.shape[along] != b.shape[0]:
            side = "last" if self.axis == 0 else "first"
            raise self.error(f"axis={self.axis} needs a 1-d b as long as x's {side} axis", x, b)
        self.bshape = b.shape
        return x + b if self.axis == 0 else x + b.reshape(b.shape + (1,) * (x.ndim - 1))

    def backward(self, dy: Any) -> tuple:
        db = None
        if self.needs_grad[1]:
            n = self.bshape[0]
            db = dy.reshape(-1, n).sum(axis=0) if self.axis == 0 else dy.reshape(n, -1).sum(axis=1)
        return dy, db


# -- rectifier variants ------------------------------------------------------------------------
class LeakyRelu(CheckedOp):
    def __init__(self, a: float = 0.01) -> None:
        super().__init__()
        _args.number(self.name, "a", a)
        self.a = a  # kept as given: a NumPy scalar's dtype takes part in the result's

    def forward(self, x: Any) -> Any:
        self.pos = x > 0
        return self.xp.where(self.pos, x, x * self.a)

    def backward(self, dy: Any) -> Any:
        return self.xp.where(self.pos, dy, dy * self.a)


class Elu(CheckedOp):
    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        _args.number(self.name, "alpha", alpha)
        self.alpha = alpha

    def forward(self, x: Any) -> Any:
        xp = self.xp
        self.pos = x > 0
        neg = xp.expm1(xp.minimum(x, 0))  # min(x, 0): exp must not overflow on the unused branch
        neg *= self.alpha
        self.y = xp.where(self.pos, x, neg)
        return self.y

    def backward(self, dy: Any) -> Any:
        # For x <= 0, d/dx alpha (e^x - 1) = alpha e^x = y + alpha.
        return self.xp.where(self.pos, dy, dy * (self.y + self.alpha))


class SeLU(Elu):
    """gamma * elu(x, alpha), with the self-normalising constants as defaults."""

    def __init__(
        self, alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875
    ) -> None:
        super().__init__(alpha)
        _args.number(self.name, "gamma", gamma)
        self.gamma = gamma

    def forward(self, x: Any) -> Any:
        self.y = super().forward(x) * self.gamma
        return self.y

    def backward(self, dy: Any) -> Any:
        return self.xp.where(self.pos, dy * self.gamma, dy * (self.y + self.gamma * self.alpha))


class PRelu(CheckedOp):
    """ONNX PRelu: ``x`` where positive, else ``slope * x``; ``slope`` broadcasts to ``x``."""

    def forward(self, x: Any, slope: Any) -> Any:
        try:
            fits = np.broadcast_shapes(x.shape, slope.shape) == x.shape
        except ValueError:
            fits = False
        if not fits:
            raise self.error("slope must broadcast to the input's shape", x, slope)
        self.x, self.slope, self.pos = x, slope, x > 0
        return self.xp.where(self.pos, x, x * slope).astype(x.dtype, copy=False)

    def backward(self, dy: Any) -> tuple:
        xp, x, slope = self.xp, self.x, self.slope
        dx = dslope = None
        if self.needs_grad[0]:
            dx = xp.where(self.pos, dy, dy * slope).astype(x.dtype, copy=False)
        if self.needs_grad[1]:
            dslope = unbroadcast(xp.where(self.pos, 0, dy * x), slope.shape).astype(slope.dtype, copy=False)
        return dx, dslope


# -- smooth and saturating ---------------------------------------------------------------------
class HardSigmoid(CheckedOp):
    def __init__(self, alpha: float = 0.2, gamma: float = 0.5) -> None:
        super().__init__()
        _args.number(self.name, "alpha", alpha)
        _args.number(self.name, "gamma", gamma)
        self.alpha, self.gamma = alpha, gamma

    def forward(self, x: Any) -> Any:
        self.kernel = cpu_kernels.usable(self.xp, x)
        if self.kernel:  # one pass; backward recomputes the mask from x
            self.x = x
            return cpu_kernels.activation.hardsigmoid_forward(x, self.alpha, self.gamma)
        z = self.xp.multiply(x, self.alpha, out=self.xp.empty_like(x))
        z += self.gamma
        self.inside = (z > 0) & (z < 1)
        return self.xp.clip(z, 0, 1, out=z)

    def backward(self, dy: Any) -> Any:
        if self.kernel:
            if cpu_kernels.usable(self.xp, self.x, dy):
                return cpu_kernels.activation.hardsigmoid_backward(self.x, dy, self.alpha, self.gamma)
            z = self.x * self.alpha
            z += self.gamma
            self.inside = (z > 0) & (z < 1)
        return dy * self.inside * self.alpha


class SoftPlus(CheckedOp):
    """``log(1 + e^x)``, as ``log1p(e^-|x|) + max(x, 0)`` so it neither overflows nor loses the tail."""

    def forward(self, x: Any) -> Any:
        xp = self.xp
        self.x = x
        y = xp.abs(x, out=xp.empty_like(x))
        xp.negative(y, out=y)
        xp.exp(y, out=y)
        xp.log1p(y, out=y)
        y += xp.maximum(x, 0)
        return y

    def backward(self, dy: Any) -> Any:
        return dy * sigmoid_array(self.xp, self.x)


class SoftSign(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.d = d = self.xp.abs(x)
        d += 1
        return x / d

    def backward(self, dy: Any) -> Any:
        return dy / (self.d * self.d)


_GELU_C = math.sqrt(2 / math.pi)
_GELU_K = 0.044715
_INV_SQRT2 = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


class Gelu(CheckedOp):
    """x * Phi(x): exact with erf, or the tanh approximation of Hendrycks & Gimpel."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = _args.choice(self.name, "approximate", approximate, ("none", "tanh"))

    def forward(self, x: Any) -> Any:
        xp = self.xp
        self.kernel = cpu_kernels.usable(xp, x)
        if self.kernel:  # one pass; backward recomputes from x what the lines below keep
            self.x = x
            return cpu_kernels.activation.gelu_forward(x, self.approximate)
        # Beyond |x| = 10 (tanh form) or 40 (exact) the curve's second term is 0 in every dtype;
        # clipping there keeps x^2 and x^3 finite in float16, where 1e4^2 would overflow.
        bound = 10.0 if self.approximate == "tanh" else 40.0
        self.xc = xc = xp.clip(x, -bound, bound, out=xp.empty_like(x))
        if self.approximate == "tanh":
            u = xp.multiply(xc, xc, out=xp.empty_like(x))
            u *= _GELU_K
            u += 1
            u *= xc
            u *= _GELU_C  # u = c (x + k x^3)
            self.t = xp.tanh(u, out=u)
            cdf = self.t + 1
        else:
            cdf = erf_array(xp, x * _INV_SQRT2)
            cdf += 1
        cdf *= 0.5
        self.cdf = cdf
        return x * cdf

    def backward(self, dy: Any) -> Any:
        if self.kernel:
            return cpu_kernels.activation.gelu_backward(self.x, dy, self.approximate)
        xp, xc = self.xp, self.xc
        g = xp.multiply(xc, xc, out=xp.empty_like(xc))
        if self.approximate == "tanh":
            # d/dx 0.5 x (1 + t) = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3k x^2)
            g *= 3 * _GELU_K
            g += 1
            g *= 1 - self.t * self.t
            g *= (0.5 * _GELU_C) * xc
        else:
            # d/dx x Phi(x) = Phi(x) + x phi(x)
            g *= -0.5
            xp.exp(g, out=g)
            g *= _INV_SQRT_2PI * xc
        g += self.cdf
        g *= dy
        return g


class Identity(Operator):
    """The input itself; like SINGA's, the output shares the input's data."""

    def forward(self, x: Any) -> Any:
        return x

    def backward(self, dy: Any) -> Any:
        return dy


# -- functions ---------------------------------------------------------------------------------
def relu(x: Tensor) -> Tensor:
    """``max(x, 0)`` elementwise (float or integer); the gradient at 0 is 0.

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> tensor.to_numpy(relu(tensor.from_numpy(np.array([-1.0, 2.0])))).tolist()
    [0.0, 2.0]
    """
    return ReLU()(x)[0]


def sigmoid(x: Tensor) -> Tensor:
    """The logistic function ``1 / (1 + e^-x)`` elementwise, without overflow."""
    return Sigmoid()(x)[0]


def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent elementwise."""
    return Tanh()(x)[0]


def softmax(x: Tensor, axis: int = 1) -> Tensor:
    """Softmax along ``axis`` (SINGA's default 1: the class axis of an (N, C) batch)."""
    return SoftMax(axis)(x)[0]


def log_softmax(x: Tensor, axis: int = 1) -> Tensor:
    """``log(softmax(x, axis))``, computed stably."""
    return LogSoftmax(axis)(x)[0]


def add_bias(x: Tensor, b: Tensor, axis: int = 0) -> Tensor:
    """SINGA's bias add: ``axis=0`` adds ``b`` (length C) to every row of an (N, C) ``x``;
    ``axis=1`` adds ``b`` (length N) to every column.

    For inputs of more dimensions, ``axis=0`` matches ``b`` to the last axis and ``axis=1`` to
    the first.
    """
    return AddBias(axis)(x, b)[0]


def leakyrelu(x: Tensor, a: float = 0.01) -> Tensor:
    """``x`` where positive, else ``a * x``."""
    return LeakyRelu(a)(x)[0]


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where positive, else ``alpha * (e^x - 1)``."""
    return Elu(alpha)(x)[0]


def selu(
    x: Tensor, alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875
) -> Tensor:
    """Scaled ELU: ``gamma * (x if x > 0 else alpha * (e^x - 1))`` (ONNX Selu defaults)."""
    return SeLU(alpha, gamma)(x)[0]


def prelu(x: Tensor, slope: Tensor) -> Tensor:
    """``x`` where positive, else ``slope * x``; ``slope`` broadcasts to ``x`` (ONNX PRelu).

    For per-channel slopes of an (N, C, H, W) input give ``slope`` the shape (C, 1, 1).
    """
    return PRelu()(x, slope)[0]


def hardsigmoid(x: Tensor, alpha: float = 0.2, gamma: float = 0.5) -> Tensor:
    """``max(0, min(1, alpha * x + gamma))`` (ONNX HardSigmoid)."""
    return HardSigmoid(alpha, gamma)(x)[0]


def hardswish(x: Tensor) -> Tensor:
    """``x * hardsigmoid(x, 1/6, 0.5)`` (ONNX HardSwish)."""
    return x * hardsigmoid(x, 1 / 6, 0.5)


def softplus(x: Tensor) -> Tensor:
    """``log(1 + e^x)`` elementwise, stable for large ``|x|``."""
    return SoftPlus()(x)[0]


def softsign(x: Tensor) -> Tensor:
    """``x / (1 + |x|)`` elementwise."""
    return SoftSign()(x)[0]


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit ``x * Phi(x)``; ``approximate='tanh'`` uses the tanh formula."""
    return Gelu(approximate)(x)[0]


def identity(x: Tensor) -> Tensor:
    """``x`` unchanged (ONNX Identity); the result shares ``x``'s data, as SINGA's does."""
    return Identity()(x)[0]

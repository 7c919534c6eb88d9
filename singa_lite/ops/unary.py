"""Elementwise unary math: abs, exp, log, trigonometry, erf, rounding and clip.

Part of the elementwise family: ``singa_lite.ops.elementwise`` re-exports everything listed in
``__all__`` here (this module exists only to keep each file short).

Ops that only make sense on real numbers (``exp``, ``sin``, ``erf`` ...) raise ``DTypeError`` for
integer or bool tensors instead of silently promoting them to float64; ``abs``, ``square``,
``sign`` and ``clip`` also take integer tensors. Every op keeps its input's dtype.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

from singa_lite import _args, backend
from singa_lite.autograd import Operator
from singa_lite.backend import cpu_kernels
from singa_lite.errors import DTypeError, ShapeError
from singa_lite.tensor import Tensor

__all__ = [
    "Abs",
    "Acos",
    "Acosh",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "Ceil",
    "Clip",
    "Cos",
    "Cosh",
    "Erf",
    "Exp",
    "Floor",
    "Log",
    "Reciprocal",
    "Round",
    "Sign",
    "Sin",
    "Sinh",
    "Sqrt",
    "Square",
    "Tan",
    "abs",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "ceil",
    "clip",
    "cos",
    "cosh",
    "erf",
    "exp",
    "floor",
    "log",
    "reciprocal",
    "round",
    "sign",
    "sin",
    "sinh",
    "sqrt",
    "square",
    "tan",
]


class CheckedOp(Operator):
    """An operator whose tensor inputs must have a dtype kind listed in ``kinds`` (float only
    by default; "fiu" adds signed and unsigned integers, "b" bool).

    The check runs before ``forward`` so the error names the op and the dtype instead of
    surfacing as a float64 result or a NumPy ``TypeError`` from deep inside.
    """

    kinds = "f"

    def __call__(self, *xs: Tensor) -> tuple[Tensor, ...]:
        for x in xs:
            if isinstance(x, Tensor) and x.dtype.kind not in self.kinds:
                want = "a floating-point" if self.kinds == "f" else "a numeric (not bool)"
                raise DTypeError(
                    f"{self.name}: expects {want} tensor, got {x.dtype}; "
                    "cast it first, e.g. x.as_type(tensor.float32)"
                )
        return super().__call__(*xs)


class _IntOk(CheckedOp):
    kinds = "fiu"


# -- erf ---------------------------------------------------------------------------------------
# Neither NumPy nor the CuPy core has erf, so it is computed with the rational approximations of
# Cephes (ndtr.c): erf(x) = x T(x^2)/U(x^2) for |x| < 1, and 1 - erfc(|x|) with
# erfc(a) = exp(-a^2) P(a)/Q(a) above. Against math.erf the relative error is below 5e-16 in
# float64 on [-7, 7] (tested); float32 inputs are computed in float32 (about 1e-7 relative),
# float16 inputs in float32. erfc(6) < 2.2e-17, so |x| is capped at 6 where erf is +-1 in double.
_ERF_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3,
          7.00332514112805075473e3, 5.55923013010394962768e4)  # fmt: skip
_ERF_U = (1.0, 3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
          2.26290000613890934246e4, 4.92673942608635921086e4)  # fmt: skip
_ERFC_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
           4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
           9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)  # fmt: skip
_ERFC_Q = (1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
           9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
           1.65666309194161350182e3, 5.57535340817727675546e2)  # fmt: skip
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _poly(x: Any, coefs: tuple) -> Any:
    """Horner's rule, highest coefficient first; Python-float coefficients keep x's dtype."""
    y = x * coefs[0] + coefs[1]
    for c in coefs[2:]:
        y *= x
        y += c
    return y


def erf_array(xp: Any, x: Any) -> Any:
    """erf of a NumPy or CuPy float array, in its dtype (float16 is computed in float32)."""
    dtype = x.dtype
    if dtype.itemsize < 4:
        x = x.astype(xp.float32)
    xs = xp.clip(x, -1.0, 1.0)  # each branch sees only arguments where it cannot overflow
    z = xs * xs
    small = xs * _poly(z, _ERF_T) / _poly(z, _ERF_U)
    a = xp.minimum(xp.abs(x), 6.0)
    erfc = xp.exp(-(a * a)) * _poly(a, _ERFC_P) / _poly(a, _ERFC_Q)
    large = xp.copysign(1.0 - erfc, x)
    return xp.where(a < 1.0, small, large).astype(dtype, copy=False)


class Erf(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.x = x
        return erf_array(self.xp, x)

    def backward(self, dy: Any) -> Any:
        x = self.x
        return dy * (TWO_OVER_SQRT_PI * self.xp.exp(-(x * x)))


# -- sign and magnitude ------------------------------------------------------------------------
class Abs(_IntOk):
    def forward(self, x: Any) -> Any:
        self.x = x
        return self.xp.abs(x)

    def backward(self, dy: Any) -> Any:
        return dy * self.xp.sign(self.x)


class Square(_IntOk):
    def forward(self, x: Any) -> Any:
        self.x = x
        return x * x

    def backward(self, dy: Any) -> Any:
        return dy * (2 * self.x)


class _Step(CheckedOp):
    """A piecewise-constant op: its gradient is zero everywhere it is defined."""

    fn = "sign"

    def forward(self, x: Any) -> Any:
        return getattr(self.xp, self.fn)(x)

    def backward(self, dy: Any) -> Any:
        return self.xp.zeros_like(dy)


class Sign(_Step):
    kinds = "fiu"
    fn = "sign"


class Ceil(_Step):
    fn = "ceil"


class Floor(_Step):
    fn = "floor"


class Round(_Step):
    fn = "rint"  # rounds halves to even, as ONNX Round does


class Clip(_IntOk):
    """``min <= y <= max``; the gradient passes where ``min < x < max`` strictly."""

    def __init__(self, min: float | None = None, max: float | None = None) -> None:  # noqa: A002
        super().__init__()
        for name, bound in (("min", min), ("max", max)):
            if bound is not None:  # infinities pass: an open end, as ONNX Clip's defaults
                _args.instance(self.name, name, bound, Real, "a number or None")
        self.lo, self.hi = min, max

    def forward(self, x: Any) -> Any:
        self.x = x
        if self.lo is None and self.hi is None:
            return x.copy()
        lo = None if self.lo is None else x.dtype.type(self.lo)
        hi = None if self.hi is None else x.dtype.type(self.hi)
        return self.xp.clip(x, lo, hi)

    def backward(self, dy: Any) -> Any:
        bounded = self.lo is not None or self.hi is not None
        if bounded and cpu_kernels.usable(self.xp, self.x, dy):  # one pass, no bool mask
            return cpu_kernels.activation.clip_backward(self.x, dy, self.lo, self.hi)
        inside = self.xp.ones(dy.shape, dtype=bool)
        if self.lo is not None:
            inside &= self.x > self.lo
        if self.hi is not None:
            inside &= self.x < self.hi
        return dy * inside


# -- exponentials and powers -------------------------------------------------------------------
class Exp(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.y = self.xp.exp(x)
        return self.y

    def backward(self, dy: Any) -> Any:
        return dy * self.y


class Log(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.x = x
        return self.xp.log(x)

    def backward(self, dy: Any) -> Any:
        return dy / self.x


class Sqrt(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.y = self.xp.sqrt(x)
        return self.y

    def backward(self, dy: Any) -> Any:
        return dy / (2 * self.y)


class Reciprocal(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.y = self.xp.reciprocal(x)
        return self.y

    def backward(self, dy: Any) -> Any:
        return -dy * (self.y * self.y)


# -- trigonometric and hyperbolic --------------------------------------------------------------
class Sin(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.x = x
        return self.xp.sin(x)

    def backward(self, dy: Any) -> Any:
        return dy * self.xp.cos(self.x)


class Cos(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.x = x
        return self.xp.cos(x)

    def backward(self, dy: Any) -> Any:
        return -dy * self.xp.sin(self.x)


class Tan(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.y = self.xp.tan(x)
        return self.y

    def backward(self, dy: Any) -> Any:
        return dy * (1 + self.y * self.y)


class Asin(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.x = x
        return self.xp.arcsin(x)

    def backward(self, dy: Any) -> Any:
        return dy / self.xp.sqrt(1 - self.x * self.x)


class Acos(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.x = x
        return self.xp.arccos(x)

    def backward(self, dy: Any) -> Any:
        return -dy / self.xp.sqrt(1 - self.x * self.x)


class Atan(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.x = x
        return self.xp.arctan(x)

    def backward(self, dy: Any) -> Any:
        return dy / (1 + self.x * self.x)


class Sinh(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.x = x
        return self.xp.sinh(x)

    def backward(self, dy: Any) -> Any:
        return dy * self.xp.cosh(self.x)


class Cosh(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.x = x
        return self.xp.cosh(x)

    def backward(self, dy: Any) -> Any:
        return dy * self.xp.sinh(self.x)


class Asinh(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.x = x
        return self.xp.arcsinh(x)

    def backward(self, dy: Any) -> Any:
        return dy / self.xp.sqrt(self.x * self.x + 1)


class Acosh(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.x = x
        return self.xp.arccosh(x)

    def backward(self, dy: Any) -> Any:
        return dy / self.xp.sqrt(self.x * self.x - 1)


class Atanh(CheckedOp):
    def forward(self, x: Any) -> Any:
        self.x = x
        return self.xp.arctanh(x)

    def backward(self, dy: Any) -> Any:
        return dy / (1 - self.x * self.x)


# -- functions ---------------------------------------------------------------------------------
def abs(x: Tensor) -> Tensor:  # noqa: A001
    """``|x|`` elementwise (any numeric dtype); the gradient at 0 is 0."""
    return Abs()(x)[0]


def square(x: Tensor) -> Tensor:
    """``x * x`` elementwise (any numeric dtype)."""
    return Square()(x)[0]


def sign(x: Tensor) -> Tensor:
    """-1, 0 or 1 by the sign of ``x`` (any numeric dtype); zero gradient."""
    return Sign()(x)[0]


def ceil(x: Tensor) -> Tensor:
    """Smallest integer >= ``x``, in ``x``'s float dtype; zero gradient."""
    return Ceil()(x)[0]


def floor(x: Tensor) -> Tensor:
    """Largest integer <= ``x``, in ``x``'s float dtype; zero gradient."""
    return Floor()(x)[0]


def round(x: Tensor) -> Tensor:  # noqa: A001
    """Nearest integer, halves to even (ONNX Round: 2.5 -> 2, -1.5 -> -2); zero gradient."""
    return Round()(x)[0]


def clip(x: Tensor, min: float | Tensor | None = None, max: float | Tensor | None = None) -> Tensor:  # noqa: A002
    """``x`` limited to ``[min, max]`` (either bound may be None; a bound may be a 1-element tensor).

    The gradient passes where ``min < x < max``, as for ``relu`` at 0.

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> tensor.to_numpy(clip(tensor.from_numpy(np.array([-2.0, 0.5, 3.0])), 0, 1)).tolist()
    [0.0, 0.5, 1.0]
    """
    return Clip(_bound(min), _bound(max))(x)[0]


def _bound(b: float | Tensor | None) -> float | None:
    if not isinstance(b, Tensor):
        return b
    if b.size() != 1:
        raise ShapeError(f"Clip: a bound must be a number or a 1-element tensor, got shape {b.shape}")
    return backend.to_host(b.data.reshape(())).item()


def exp(x: Tensor) -> Tensor:
    """``e ** x`` elementwise."""
    return Exp()(x)[0]


def log(x: Tensor) -> Tensor:
    """Natural logarithm elementwise."""
    return Log()(x)[0]


def sqrt(x: Tensor) -> Tensor:
    """Square root elementwise."""
    return Sqrt()(x)[0]


def reciprocal(x: Tensor) -> Tensor:
    """``1 / x`` elementwise."""
    return Reciprocal()(x)[0]


def erf(x: Tensor) -> Tensor:
    """The error function elementwise (relative error < 5e-16 in float64)."""
    return Erf()(x)[0]


def sin(x: Tensor) -> Tensor:
    """Sine elementwise (radians)."""
    return Sin()(x)[0]


def cos(x: Tensor) -> Tensor:
    """Cosine elementwise (radians)."""
    return Cos()(x)[0]


def tan(x: Tensor) -> Tensor:
    """Tangent elementwise (radians)."""
    return Tan()(x)[0]


def asin(x: Tensor) -> Tensor:
    """Inverse sine elementwise; NaN outside [-1, 1]."""
    return Asin()(x)[0]


def acos(x: Tensor) -> Tensor:
    """Inverse cosine elementwise; NaN outside [-1, 1]."""
    return Acos()(x)[0]


def atan(x: Tensor) -> Tensor:
    """Inverse tangent elementwise."""
    return Atan()(x)[0]


def sinh(x: Tensor) -> Tensor:
    """Hyperbolic sine elementwise."""
    return Sinh()(x)[0]


def cosh(x: Tensor) -> Tensor:
    """Hyperbolic cosine elementwise."""
    return Cosh()(x)[0]


def asinh(x: Tensor) -> Tensor:
    """Inverse hyperbolic sine elementwise."""
    return Asinh()(x)[0]


def acosh(x: Tensor) -> Tensor:
    """Inverse hyperbolic cosine elementwise; NaN below 1."""
    return Acosh()(x)[0]


def atanh(x: Tensor) -> Tensor:
    """Inverse hyperbolic tangent elementwise; NaN outside [-1, 1]."""
    return Atanh()(x)[0]

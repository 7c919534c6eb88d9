"""Scalar math for the compiled loops: exp and tanh that the loop vectoriser can take.

Numba compiles ``math.exp`` and ``math.tanh`` to calls into the C library, one element at a
time: 9 ms for a million float32 exps here, against NumPy's 0.7 ms with SIMD. So float32
loops use :func:`exp32` and :func:`tanh32`, written with nothing but arithmetic, comparisons
and a bit cast, which LLVM vectorises; float64 loops keep the C library's (float64 is the
reference and gradient-check dtype, not the hot path). :func:`exp` and :func:`tanh` pick one
by the argument's type. Against float64 ``math.exp``/``math.tanh`` over float32 inputs,
:func:`exp32` is within 1.2 ulp and :func:`tanh32` within 1.3 ulp (``tests/test_cpu_kernels.py``).

Imported by the kernel modules only, so Numba is imported at the first kernel call.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

f32 = np.float32
_INLINE = {"inline": "always", "error_model": "numpy"}  # inlined: a call would stop vectorising

_LOG2E = f32(1 / math.log(2))
# ln 2 split so that n * _LN2_HI is exact for |n| < 2**15: r = x - n ln 2 keeps its low bits.
_LN2_HI = f32(0.693359375)
_LN2_LO = f32(math.log(2) - 0.693359375)
_EXP_MIN = f32(-104.0)  # below: e^x rounds to 0 even as a float32 subnormal
_EXP_MAX = f32(89.0)  # above: past float32's max; the clamped value still overflows to inf
_HALF = f32(0.5)
_ONE = f32(1.0)
_TWO = f32(2.0)
# e^r on |r| <= ln(2)/2 by its Taylor series to r^7: the first term left out is below 2^-27.
_EXP_TAYLOR = tuple(f32(1 / math.factorial(k)) for k in range(8))

# tanh(x) = x + x^3 q(x^2) on |x| < _TANH_SMALL, q fitted here (weighted least squares on
# Chebyshev nodes, in float64) to a relative error under 1.4 ulp in float32; above it
# 1 - 2 / (e^2x + 1), where the subtraction loses at most a bit.
_TANH_SMALL = f32(0.625)
_TANH_Q = (f32(-0.33333285), f32(0.13331512), f32(-0.05374464), f32(0.02065306), f32(-0.00571889))
_TANH_MAX = f32(10.0)  # tanh(10) = 1 - 4e-9 rounds to 1 in float32


@intrinsic
def _float32_from_bits(typingctx: Any, bits: Any) -> Any:
    """The float32 whose IEEE bits are the int32 ``bits``: one instruction."""
    if bits != types.int32:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@intrinsic
def like(typingctx: Any, ref: Any, value: Any) -> Any:
    """``value`` as a scalar of ``ref``'s float type (an array's element type, or a scalar's):
    how a loop compiled for float32 and float64 alike writes its constants without turning
    float32 arithmetic into float64 (a Python float is a float64 to Numba). A cast at code
    generation, folded into the constant."""
    t = ref.dtype if isinstance(ref, types.Array) else ref
    if not isinstance(t, types.Float) or not isinstance(value, (types.Float, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return context.cast(builder, args[1], signature.args[1], signature.return_type)

    return t(ref, value), codegen


@numba.njit(**_INLINE)
def exp32(x: Any) -> Any:
    """``e^x`` of a float32 as 2^n e^r, n = round(x / ln 2)."""
    xc = _EXP_MAX if x > _EXP_MAX else x
    xc = _EXP_MIN if xc < _EXP_MIN else xc
    n = np.floor(xc * _LOG2E + _HALF)
    r = xc - n * _LN2_HI
    r = r - n * _LN2_LO
    c = _EXP_TAYLOR
    p = c[7]
    p = p * r + c[6]
    p = p * r + c[5]
    p = p * r + c[4]
    p = p * r + c[3]
    p = p * r + c[2]
    p = p * r + c[1]
    p = p * r + c[0]
    # 2^n as two factors of at most 2^64 each: both normal floats for every clamped n; the
    # products in turn overflow to inf or underflow gradually where e^x does.
    k = np.int32(0 if x != x else n)
    k1 = k >> 1
    k2 = k - k1
    y = p * _float32_from_bits(np.int32((k1 + 127) << 23))
    y = y * _float32_from_bits(np.int32((k2 + 127) << 23))
    y = f32(0.0) if x < _EXP_MIN else y
    return x if x != x else y


@numba.njit(**_INLINE)
def tanh32(x: Any) -> Any:
    """``tanh(x)`` of a float32."""
    a = -x if x < 0 else x
    z = x * x
    q = _TANH_Q
    s = q[4]
    s = s * z + q[3]
    s = s * z + q[2]
    s = s * z + q[1]
    s = s * z + q[0]
    small = x + x * z * s
    e = exp32(_TWO * (_TANH_MAX if a > _TANH_MAX else a))
    large = _ONE - _TWO / (e + _ONE)
    large = -large if x < 0 else large
    return small if a < _TANH_SMALL else large


def exp(x: Any) -> Any:
    """``e^x`` in ``x``'s float type: :func:`exp32` for float32, ``math.exp`` for float64.

    Compiled code takes the overload below; called from Python (a NumPy scalar or a float), it
    gives the value of its float64 form in ``x``'s type."""
    return _same_type(x, math.exp(float(x)))


def tanh(x: Any) -> Any:
    """``tanh(x)`` in ``x``'s float type: :func:`tanh32` for float32, ``math.tanh`` for float64
    (from Python: as :func:`exp`)."""
    return _same_type(x, math.tanh(float(x)))


def exp_cap(x: Any) -> Any:
    """``log(max of x's type) - 1`` in ``x``'s type: where ``ops.activation.sigmoid_array``
    caps the exponent so that e^-x stays finite."""
    t = np.float32 if isinstance(x, np.float32) else np.float64
    return _same_type(x, math.log(float(np.finfo(t).max)) - 1)


def _same_type(x: Any, value: float) -> Any:
    """``value`` as a scalar of ``x``'s type (a NumPy float scalar), or a float."""
    return type(x)(value) if isinstance(x, np.floating) else value


# Typing functions take no annotations: Numba wants an implementation's parameters to match.
@overload(exp, inline="always")
def _exp(x):
    return (lambda x: exp32(x)) if x == types.float32 else (lambda x: math.exp(x))


@overload(tanh, inline="always")
def _tanh(x):
    return (lambda x: tanh32(x)) if x == types.float32 else (lambda x: math.tanh(x))


@overload(exp_cap, inline="always")
def _exp_cap(x):
    cap = math.log(float(np.finfo(np.float32 if x == types.float32 else np.float64).max)) - 1
    return lambda x: like(x, cap)


@numba.njit(**_INLINE)
def poly(x: Any, coefs: tuple) -> Any:
    """Horner's rule, highest coefficient first, each coefficient in ``x``'s type: the order
    of ``ops.unary._poly``, so that a compiled erf rounds as the NumPy one does."""
    y = x * like(x, coefs[0]) + like(x, coefs[1])
    for i in range(2, len(coefs)):
        y = y * x + like(x, coefs[i])
    return y


# -- row reductions ----------------------------------------------------------------------------
# Summed in float64. A loop's fast-math flags are the whole loop's, and no kernel may reorder
# its adds (that would undo exp's split of ln 2), so without help an FP sum is one dependent
# add per element and stays scalar: eight hand-interleaved partial sums did not vectorise
# either (LLVM left them scalar, ~1.3 cycles an element). These two are compiled apart with
# "reassoc" on their own adds only (fast-math flags are per instruction, and survive LLVM's
# inlining into the kernels), so LLVM vectorises them as tree sums: 4-5x faster on 128-wide
# rows. The order is then LLVM's for the CPU's vector width: fixed for a machine and a build,
# not for the number of threads (each row is summed by one thread).
_REDUCE = {"error_model": "numpy", "boundscheck": False, "fastmath": {"reassoc", "contract"}}


@numba.njit(**_REDUCE)
def row_sum(a: Any, n: int) -> float:
    """``sum(a[:n])`` of a 1-d array, in float64."""
    s = 0.0
    for j in range(n):
        s += a[j]
    return s


@numba.njit(**_REDUCE)
def row_dot(a: Any, b: Any, n: int) -> float:
    """``sum(a[:n] * b[:n])`` of 1-d arrays, each product in their type, summed in float64."""
    s = 0.0
    for j in range(n):
        s += a[j] * b[j]
    return s


@numba.njit(**_INLINE)
def row_max(a: Any, n: int) -> Any:
    """The largest of ``a[:n]`` (-inf for none), ignoring nan: a softmax row with a nan comes
    out all nan anyway, through its sum."""
    m0 = m1 = m2 = m3 = like(a, -np.inf)
    full = n - n % 4
    for j in range(0, full, 4):
        m0 = a[j] if a[j] > m0 else m0
        m1 = a[j + 1] if a[j + 1] > m1 else m1
        m2 = a[j + 2] if a[j + 2] > m2 else m2
        m3 = a[j + 3] if a[j + 3] > m3 else m3
    for j in range(full, n):
        m0 = a[j] if a[j] > m0 else m0
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    return m2 if m2 > m0 else m0

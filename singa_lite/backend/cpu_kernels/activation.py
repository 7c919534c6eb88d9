"""GELU, forward and backward in one pass each, and bias + activation.

Each loop computes what ``ops.activation.Gelu`` and ``ops.fused.BiasActivation`` compute, in
the same order of operations, in the input's dtype; only the transcendental functions differ
(``_math``: within a few ulp of NumPy's). The GELU backward recomputes tanh (or erf) from the
input instead of reading the three arrays NumPy's forward keeps: one array read instead of
three, for arithmetic that costs less than the memory traffic.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import prange

from singa_lite.backend.cpu_kernels import flat
from singa_lite.backend.cpu_kernels._jit import exact, helper, kernel
from singa_lite.backend.cpu_kernels._math import exp, exp_cap, like, poly, tanh
from singa_lite.ops import unary

GELU_C = math.sqrt(2 / math.pi)
GELU_K = 0.044715
_INV_SQRT2 = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
# ops.unary's erf coefficients (Cephes' rational approximations): one table for both paths.
_ERF_T, _ERF_U, _ERFC_P, _ERFC_Q = unary._ERF_T, unary._ERF_U, unary._ERFC_P, unary._ERFC_Q

ACTIVATIONS = ("identity", "relu", "sigmoid", "tanh", "gelu")
"""The activations of :func:`bias_activation_forward`, by their code (the index), as
``cupy_kernels.ACTIVATIONS``."""


# -- scalar pieces, compiled into the loops ---------------------------------------------------
@helper
def _clip(x: Any, bound: Any) -> Any:
    """``clip(x, -bound, bound)``; nan stays nan, as with ``np.clip``."""
    return -bound if x < -bound else (bound if x > bound else x)


@helper
def _erf(x: Any) -> Any:
    """``ops.unary.erf_array`` for one element, in ``x``'s type."""
    one = like(x, 1.0)
    xs = _clip(x, one)
    z = xs * xs
    small = xs * poly(z, _ERF_T) / poly(z, _ERF_U)
    a = -x if x < 0 else x
    a = like(x, 6.0) if a > 6.0 else a
    erfc = exp(-(a * a)) * poly(a, _ERFC_P) / poly(a, _ERFC_Q)
    large = one - erfc
    large = -large if x < 0 else large
    return small if a < one else large


@helper
def _gelu_tanh_parts(x: Any, bound: Any) -> tuple[Any, Any, Any]:
    """``(xc, cdf, e)`` of the tanh GELU: the input clipped to ``bound``, 0.5 (1 + tanh(u)) and
    e^(-2u) with u = c (xc + k xc^3). 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)): one exp and one
    division instead of a tanh, and no cancellation where tanh(u) nears -1."""
    xc = _clip(x, bound)
    u = xc * xc
    u = u * like(x, GELU_K)
    u = u + like(x, 1.0)
    u = u * xc
    u = u * like(x, GELU_C)
    e = exp(u * like(x, -2.0))
    return xc, like(x, 1.0) / (like(x, 1.0) + e), e


@helper
def _gelu_tanh_grad(x: Any) -> Any:
    """d/dx of the tanh GELU as ``Gelu.backward`` forms it (before the product with dy), with
    1 - tanh(u)^2 = 4 cdf^2 e^(-2u)."""
    # Clipped at 10 as in Gelu.backward: e^(-2u) stays finite, and beyond it the x phi(x)
    # term is below 1e-35.
    xc, cdf, e = _gelu_tanh_parts(x, like(x, 10.0))
    g = xc * xc
    g = g * like(x, 3 * GELU_K)
    g = g + like(x, 1.0)
    g = g * (cdf * cdf * e * like(x, 4.0))
    g = g * (like(x, 0.5 * GELU_C) * xc)
    return g + cdf


@helper
def _gelu_erf_cdf(x: Any) -> Any:
    return (_erf(x * like(x, _INV_SQRT2)) + like(x, 1.0)) * like(x, 0.5)


@helper
def _gelu_erf_grad(x: Any) -> Any:
    xc = _clip(x, like(x, 40.0))
    g = xc * xc
    g = g * like(x, -0.5)
    g = exp(g)
    g = g * (like(x, _INV_SQRT_2PI) * xc)
    return g + _gelu_erf_cdf(x)


@helper
def _sigmoid(z: Any) -> Any:
    """``ops.activation.sigmoid_array``: 1 / (1 + e^-z), -z capped below log(max)."""
    cap = exp_cap(z)
    e = -z
    e = cap if e > cap else e
    return like(z, 1.0) / (exp(e) + like(z, 1.0))


# -- GELU --------------------------------------------------------------------------------------
@kernel
def _gelu_tanh_fwd(x: Any, y: Any) -> None:
    for i in prange(x.size):
        # Unclipped: far out e^(-2u) overflows and cdf is exactly 0 (or 1), as NumPy's
        # 0.5 (1 + tanh(u)) rounds there.
        _, cdf, _ = _gelu_tanh_parts(x[i], like(x, np.inf))
        y[i] = x[i] * cdf


@kernel
def _gelu_tanh_bwd(x: Any, dy: Any, dx: Any) -> None:
    for i in prange(x.size):
        dx[i] = _gelu_tanh_grad(x[i]) * dy[i]


@kernel
def _gelu_erf_fwd(x: Any, y: Any) -> None:
    for i in prange(x.size):
        y[i] = x[i] * _gelu_erf_cdf(x[i])


@kernel
def _gelu_erf_bwd(x: Any, dy: Any, dx: Any) -> None:
    for i in prange(x.size):
        dx[i] = _gelu_erf_grad(x[i]) * dy[i]


def gelu_forward(x: np.ndarray, approximate: str) -> np.ndarray:
    """``x * Phi(x)`` (``approximate="none"``: with erf; ``"tanh"``: the tanh formula)."""
    x1 = flat(x)
    y = np.empty_like(x1)
    (_gelu_tanh_fwd if approximate == "tanh" else _gelu_erf_fwd)(x1.size * 4, x1, y)
    return y.reshape(x.shape)


def gelu_backward(x: np.ndarray, dy: np.ndarray, approximate: str) -> np.ndarray:
    """``dy`` times GELU's derivative at ``x`` (``dy`` cast to ``x``'s dtype first)."""
    x1, dy1 = flat(x), flat(dy.astype(x.dtype, copy=False))
    dx = np.empty_like(x1)
    (_gelu_tanh_bwd if approximate == "tanh" else _gelu_erf_bwd)(x1.size * 4, x1, dy1, dx)
    return dx.reshape(x.shape)


# -- bias + activation -------------------------------------------------------------------------
@helper
def _activate(z: Any, code: int) -> Any:
    """``ACTIVATIONS[code](z)`` as ``ops.fused._activate`` computes it (``code`` is a constant
    of each compiled loop, so the branches fold away)."""
    if code == 1:
        return like(z, 0.0) if z < 0 else z
    if code == 2:
        return _sigmoid(z)
    if code == 3:
        return tanh(z)
    if code == 4:
        return z * _gelu_erf_cdf(z)
    return z


@helper
def _activation_grad(saved: Any, dy: Any, code: int) -> Any:
    """``dy`` times the derivative, from the output (relu, sigmoid, tanh) or the input plus
    bias (gelu), as ``ops.fused.BiasActivation._grad``."""
    one = like(dy, 1.0)
    if code == 1:
        return dy * (one if saved > 0 else like(dy, 0.0))
    if code == 2:
        return (one - saved) * saved * dy
    if code == 3:
        return (one - saved * saved) * dy
    if code == 4:
        return _gelu_erf_grad(saved) * dy
    return dy


_ROW_CHUNK = 64  # rows per partial bias sum: fixed, so that db does not depend on the threads


def _bias_kernels(code: int) -> tuple[Any, Any, Any, Any]:
    """The four loops of activation ``code``: forward and backward on rows ``(N, C)`` (bias
    along the row) and on lines ``(N * C, inner)`` (one bias value per line)."""

    def fwd_rows(x: Any, b: Any, y: Any) -> None:
        for r in prange(x.shape[0]):
            for c in range(x.shape[1]):
                y[r, c] = _activate(x[r, c] + b[c], code)

    def fwd_lines(x: Any, b: Any, y: Any) -> None:
        channels = b.size
        for line in prange(x.shape[0]):
            bc = b[line % channels]
            for i in range(x.shape[1]):
                y[line, i] = _activate(x[line, i] + bc, code)

    def bwd_rows(dy: Any, saved: Any, b: Any, dx: Any, partial: Any) -> None:
        rows, channels = dy.shape
        for chunk in prange(partial.shape[0]):
            for r in range(chunk * _ROW_CHUNK, min(rows, (chunk + 1) * _ROW_CHUNK)):
                for c in range(channels):
                    s = saved[r, c] + b[c] if code == 4 else saved[r, c]
                    g = _activation_grad(s, dy[r, c], code)
                    dx[r, c] = g
                    partial[chunk, c] += g

    def bwd_lines(dy: Any, saved: Any, b: Any, dx: Any, db: Any) -> None:
        channels = b.size
        outer = dy.shape[0] // max(channels, 1)
        for c in prange(channels):
            total = 0.0
            for o in range(outer):
                line = o * channels + c
                for i in range(dy.shape[1]):
                    s = saved[line, i] + b[c] if code == 4 else saved[line, i]
                    g = _activation_grad(s, dy[line, i], code)
                    dx[line, i] = g
                    total += g
            db[c] = total

    return kernel(fwd_rows), kernel(fwd_lines), kernel(bwd_rows), kernel(bwd_lines)


_BIAS = [_bias_kernels(code) for code in range(len(ACTIVATIONS))]


def _bias_view(shape: tuple, axis: int) -> tuple[int, int, int]:
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1 :])
    return outer, shape[axis], inner


def bias_activation_forward(x: np.ndarray, b: np.ndarray, activation: str, axis: int) -> np.ndarray:
    """``activation(x + b)`` with the 1-d ``b`` along ``axis`` of ``x``, in one pass."""
    outer, channels, inner = _bias_view(x.shape, axis)
    fwd_rows, fwd_lines, _, _ = _BIAS[ACTIVATIONS.index(activation)]
    b = np.ascontiguousarray(b)
    y = np.empty(x.shape, x.dtype)
    if inner == 1:
        fwd_rows(x.size, np.ascontiguousarray(x).reshape(outer, channels), b, y.reshape(outer, channels))
    else:
        lines = (outer * channels, inner)
        fwd_lines(x.size, np.ascontiguousarray(x).reshape(lines), b, y.reshape(lines))
    return y


def bias_activation_backward(
    dy: np.ndarray, saved: np.ndarray | None, b: np.ndarray, activation: str, axis: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(dx, db)`` of ``activation(x + b)`` from ``dy`` and ``saved`` (the output for relu,
    sigmoid and tanh; the input for gelu; unused for identity), in one pass; ``db`` summed
    in float64."""
    outer, channels, inner = _bias_view(dy.shape, axis)
    _, _, bwd_rows, bwd_lines = _BIAS[ACTIVATIONS.index(activation)]
    dy = np.ascontiguousarray(dy)
    saved = dy if saved is None else np.ascontiguousarray(saved)
    b = np.ascontiguousarray(b)
    dx = np.empty(dy.shape, dy.dtype)
    if inner == 1:
        partial = np.zeros((-(-outer // _ROW_CHUNK), channels), np.float64)
        shape2 = (outer, channels)
        bwd_rows(dy.size, dy.reshape(shape2), saved.reshape(shape2), b, dx.reshape(shape2), partial)
        db = partial.sum(axis=0)
    else:
        lines = (outer * channels, inner)
        db = np.empty(channels, np.float64)
        bwd_lines(dy.size, dy.reshape(lines), saved.reshape(lines), b, dx.reshape(lines), db)
    return dx, db.astype(dy.dtype)


# -- a convolution's epilogue, in place -----------------------------------------------------------
@exact
def _bias_clamp_lines(y: Any, b: Any, lo: Any, hi: Any, clamp: bool) -> None:
    channels = b.size
    for line in prange(y.shape[0]):
        bc = b[line % channels]
        if clamp:
            for i in range(y.shape[1]):
                v = y[line, i] + bc
                v = lo if v < lo else v
                y[line, i] = hi if v > hi else v
        else:
            for i in range(y.shape[1]):
                y[line, i] = y[line, i] + bc


def bias_clamp_(y: np.ndarray, b: np.ndarray, bounds: tuple[float, float] | None = None) -> None:
    """In place, in one pass: ``y += b`` along axis 1 of the C-contiguous ``y (N, C, ...)``,
    then, with ``bounds = (lo, hi)``, ``y`` clamped to them (a conv's fused ReLU or Clip;
    ``inf`` for no upper bound), rounded as those separate NumPy passes (a NaN stays NaN).
    A batch-1 1x1 conv's output is its GEMM's, so its bias and activation cost this one pass
    over it instead of a bias pass and a clamp pass (or a copy of the input with a row of ones
    under it, to add the bias in the GEMM)."""
    lines = y.reshape(y.shape[0] * y.shape[1], math.prod(y.shape[2:]))  # -1 fails for size 0
    lo, hi = (-math.inf, math.inf) if bounds is None else bounds
    t = y.dtype.type
    _bias_clamp_lines(y.size, lines, np.ascontiguousarray(b, y.dtype), t(lo), t(hi), bounds is not None)


@exact
def _clamp_flat(y: Any, lo: Any, hi: Any, relu: bool) -> None:
    if relu:  # np.maximum(y, lo): lo where y is not above it (-0.0 included), a NaN kept
        for i in prange(y.size):
            v = y[i]
            y[i] = v if (v > lo) | (v != v) else lo
    else:  # np.clip(y, lo, hi)
        for i in prange(y.size):
            v = y[i]
            v = lo if v < lo else v
            y[i] = hi if v > hi else v


def clamp_(y: np.ndarray, lo: float, hi: float) -> None:
    """In place, the C-contiguous ``y`` as ``np.maximum(y, lo)`` (``hi`` infinite: a fused ReLU)
    or ``np.clip(y, lo, hi)`` gives it, bit for bit. NumPy's own passes run far from memory
    speed on arrays that fit the cache: over a 3 MB conv output 0.40 ms for the maximum with
    a scalar and 0.13 for the clip, against 0.07 here (one thread)."""
    t = y.dtype.type
    _clamp_flat(y.size, y.reshape(-1), t(lo), t(hi), hi == math.inf)


@exact
def _relu_into(x: Any, y: Any) -> None:
    zero = like(x, 0.0)
    for i in prange(x.size):
        v = x[i]
        y[i] = v if (v > zero) | (v != v) else zero


def relu(x: np.ndarray) -> np.ndarray:
    """``np.maximum(x, 0)`` as a new C-contiguous array, bit for bit (a NaN kept, -0.0 made
    +0.0). NumPy's maximum with a scalar runs at about 1.5 cycles an element: over a 3 MB
    activation in cache 0.37 ms against 0.07 here, over 19 MB 2.6 against 1.4 (one thread)."""
    y = np.empty(x.shape, x.dtype)
    _relu_into(x.size, flat(x), y.reshape(-1))
    return y


# -- piecewise-linear activations ---------------------------------------------------------------
# NumPy's ReLU and clip backward, ``dy * mask``, make a bool array and then multiply float by
# bool through a casting loop; its hard sigmoid makes three temporaries. Each loop here is one
# pass. They multiply ``dy`` by 0 or 1 instead of choosing 0, so that nan and inf in ``dy``
# propagate as in the reference. (ReLU's and clip's forward are one NumPy pass at memory speed
# already: measured no faster compiled.)
@kernel
def _relu_bwd(y: Any, dy: Any, dx: Any) -> None:
    for i in prange(y.size):
        dx[i] = dy[i] * (like(dy, 1.0) if y[i] > 0 else like(dy, 0.0))


@kernel
def _clip_bwd(x: Any, dy: Any, lo: Any, hi: Any, has_lo: bool, has_hi: bool, dx: Any) -> None:
    for i in prange(x.size):
        v = x[i]
        inside = (v > lo or not has_lo) and (v < hi or not has_hi)
        dx[i] = dy[i] * (like(dy, 1.0) if inside else like(dy, 0.0))


# Not contracted (``exact``): alpha * x + gamma rounded twice as NumPy does, so that the
# gradient's 0 < z < 1 test agrees with the reference's at the ends.
@exact
def _hardsigmoid_fwd(x: Any, alpha: Any, gamma: Any, y: Any) -> None:
    for i in prange(x.size):
        z = x[i] * alpha
        z = z + gamma
        z = like(z, 0.0) if z < 0 else z
        y[i] = like(z, 1.0) if z > 1 else z


@exact
def _hardsigmoid_bwd(x: Any, dy: Any, alpha: Any, gamma: Any, dx: Any) -> None:
    for i in prange(x.size):
        z = x[i] * alpha
        z = z + gamma
        g = dy[i] * (like(dy, 1.0) if (z > 0 and z < 1) else like(dy, 0.0))
        dx[i] = g * alpha


def relu_backward(y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """``dy * (y > 0)`` from ReLU's output ``y``, in one pass."""
    y1, dy1 = flat(y), flat(dy)
    dx = np.empty_like(dy1)
    _relu_bwd(y1.size, y1, dy1, dx)
    return dx.reshape(dy.shape)


def clip_backward(x: np.ndarray, dy: np.ndarray, lo: float | None, hi: float | None) -> np.ndarray:
    """``dy`` where ``lo < x < hi`` (an open end passes everything), else 0, in one pass."""
    x1, dy1 = flat(x), flat(dy)
    t = x.dtype.type
    dx = np.empty_like(dy1)
    bounds = t(0 if lo is None else lo), t(0 if hi is None else hi)
    _clip_bwd(x1.size, x1, dy1, *bounds, lo is not None, hi is not None, dx)
    return dx.reshape(dy.shape)


def hardsigmoid_forward(x: np.ndarray, alpha: float, gamma: float) -> np.ndarray:
    """``clip(alpha * x + gamma, 0, 1)`` in one pass."""
    x1 = flat(x)
    t = x.dtype.type
    y = np.empty_like(x1)
    _hardsigmoid_fwd(x1.size, x1, t(alpha), t(gamma), y)
    return y.reshape(x.shape)


def hardsigmoid_backward(x: np.ndarray, dy: np.ndarray, alpha: float, gamma: float) -> np.ndarray:
    """``dy * alpha`` where ``0 < alpha * x + gamma < 1``, else 0, from the input ``x``."""
    x1, dy1 = flat(x), flat(dy)
    t = x.dtype.type
    dx = np.empty_like(dy1)
    _hardsigmoid_bwd(x1.size, x1, dy1, t(alpha), t(gamma), dx)
    return dx.reshape(dy.shape)


# -- SiLU, hard swish, residual add + ReLU ------------------------------------------------------
# For the fused inference chains of ``sonnx.fusion`` (and any op that computes them): NumPy's
# SiLU is six passes (``sigmoid_array``'s five and the product), its hard swish three, an add
# and ReLU two. Each is one pass here, in the reference's order of operations: the backward
# loops are the derivative as autograd forms it through ``x * sigmoid(x)`` and
# ``x * hardsigmoid(x)``.
@kernel
def _silu_fwd(x: Any, y: Any) -> None:
    for i in prange(x.size):
        y[i] = _sigmoid(x[i]) * x[i]


@kernel
def _silu_bwd(x: Any, dy: Any, dx: Any) -> None:
    for i in prange(x.size):
        s = _sigmoid(x[i])
        g = dy[i] * x[i]
        g = (like(s, 1.0) - s) * s * g
        dx[i] = dy[i] * s + g


@exact
def _hardswish_fwd(x: Any, alpha: Any, beta: Any, y: Any) -> None:
    for i in prange(x.size):
        z = x[i] * alpha
        z = z + beta
        z = like(z, 0.0) if z < 0 else z
        z = like(z, 1.0) if z > 1 else z
        y[i] = x[i] * z


@exact
def _hardswish_bwd(x: Any, dy: Any, alpha: Any, beta: Any, dx: Any) -> None:
    for i in prange(x.size):
        z = x[i] * alpha
        z = z + beta
        inside = z > 0 and z < 1
        h = like(z, 0.0) if z < 0 else z
        h = like(z, 1.0) if h > 1 else h
        g = dy[i] * x[i]
        g = g * (like(g, 1.0) if inside else like(g, 0.0))
        dx[i] = dy[i] * h + g * alpha


@kernel
def _add_relu_fwd(a: Any, b: Any, y: Any) -> None:
    for i in prange(a.size):
        v = a[i] + b[i]
        y[i] = like(v, 0.0) if v < 0 else v


def silu_forward(x: np.ndarray) -> np.ndarray:
    """``x * sigmoid(x)`` in one pass (the sigmoid as ``ops.activation.sigmoid_array``)."""
    x1 = flat(x)
    y = np.empty_like(x1)
    _silu_fwd(x1.size * 4, x1, y)
    return y.reshape(x.shape)


def silu_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """``dy * (s + x s (1 - s))``, ``s = sigmoid(x)``, in one pass from the input."""
    x1, dy1 = flat(x), flat(dy)
    dx = np.empty_like(dy1)
    _silu_bwd(x1.size * 4, x1, dy1, dx)
    return dx.reshape(dy.shape)


def hardswish_forward(x: np.ndarray, alpha: float = 1 / 6, beta: float = 0.5) -> np.ndarray:
    """``x * clip(alpha * x + beta, 0, 1)`` in one pass (ONNX HardSwish: the defaults)."""
    x1 = flat(x)
    t = x.dtype.type
    y = np.empty_like(x1)
    _hardswish_fwd(x1.size, x1, t(alpha), t(beta), y)
    return y.reshape(x.shape)


def hardswish_backward(x: np.ndarray, dy: np.ndarray, alpha: float = 1 / 6, beta: float = 0.5) -> np.ndarray:
    """The gradient of :func:`hardswish_forward` from the input, in one pass."""
    x1, dy1 = flat(x), flat(dy)
    t = x.dtype.type
    dx = np.empty_like(dy1)
    _hardswish_bwd(x1.size, x1, dy1, t(alpha), t(beta), dx)
    return dx.reshape(dy.shape)


def add_relu_forward(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``max(a + b, 0)`` of two arrays of one shape and dtype, in one pass. Returns the array
    written: ``out`` where given and C-contiguous of their shape and dtype (it may be ``a`` or
    ``b``, for an in-place sum), else a new one."""
    a1, b1 = flat(a), flat(b)
    fits = out is not None and out.flags.c_contiguous and out.shape == a.shape and out.dtype == a.dtype
    y = out if fits and out is not None else np.empty(a.shape, a.dtype)
    _add_relu_fwd(a1.size, a1, b1, y.reshape(-1))
    return y

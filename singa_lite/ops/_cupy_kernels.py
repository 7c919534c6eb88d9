"""Fused CuPy kernels for batch norm and the depthwise weight gradient.

The plain-``xp`` code in ``ops/normalization.py`` and ``ops/conv.py`` is the reference; these
replace its activation-sized passes on CuPy, where each small kernel costs a launch and the
NumPy-tuned forms (``einsum`` over channels) copy both operands first. Every function takes
the op's ``xp`` and builds its kernel from it on first use, so this module never imports
CuPy and imports cleanly without it.

Per-channel sums reduce ``(N, C, S)`` over axes 0 and 2 in one ``ReductionKernel`` whose
inputs are all activation-shaped: a broadcast ``(1, C, 1)`` input would make CuPy treat the
channel axis as contiguous and give each block many channels, reading ``x`` uncoalesced from
a single block. So the batch mean is never an input of a reduction; the reductions carry
Chan, Golub and LeVeque's ``(count, mean x, mean y, co-moment)`` and merge them pairwise,
which needs no mean up front and does not cancel however large the mean is.
"""

from __future__ import annotations

import functools
from typing import Any

_MOMENTS = r"""
// count, mean of x, mean of y, co-moment sum((x - mean x) * (y - mean y)); y = x gives M2
template <typename F> struct SingaMoments { F n, x, y, c; };

template <typename F> __device__ SingaMoments<F> singa_moments_of(F x, F y) {
    return SingaMoments<F>{F(1), x, y, F(0)};
}

// Chan et al.'s pairwise update of two partial moments
template <typename F>
__device__ SingaMoments<F> singa_merge(const SingaMoments<F>& a, const SingaMoments<F>& b) {
    F n = a.n + b.n;
    if (n == F(0)) return a;
    F dx = b.x - a.x, dy = b.y - a.y, w = b.n / n;
    return SingaMoments<F>{n, a.x + dx * w, a.y + dy * w, a.c + b.c + dx * dy * a.n * w};
}
"""

# Accumulated in double whatever T: in float32, Welford's running mean of data far from zero
# (mean/std = 500) gave sum(dy * xhat) a 1e-4 relative error (double: 7e-8; NumPy's two-pass
# float32: 2e-5). These reductions are latency-bound: double measured no slower on an H200.
_NO_MOMENTS = "SingaMoments<double>{0, 0, 0, 0}"


@functools.cache
def _batch_moments_kernel(xp: Any) -> Any:
    return xp.ReductionKernel(
        "T x",
        "T mean, T var",
        "singa_moments_of<double>(x, x)",
        "singa_merge(a, b)",
        "mean = a.x, var = a.c / a.n",
        _NO_MOMENTS,
        name="singa_bn_moments",
        reduce_type="SingaMoments<double>",
        preamble=_MOMENTS,
    )


@functools.cache
def _grad_sums_kernel(xp: Any) -> Any:
    return xp.ReductionKernel(
        "T x, T dy",
        "T sum_dy, T mean_x, T dot",
        "singa_moments_of<double>(x, dy)",
        "singa_merge(a, b)",
        "sum_dy = a.y * a.n, mean_x = a.x, dot = a.c",
        _NO_MOMENTS,
        name="singa_bn_grad_sums",
        reduce_type="SingaMoments<double>",
        preamble=_MOMENTS,
    )


@functools.cache
def _normalize_kernel(xp: Any) -> Any:
    return xp.ElementwiseKernel(
        "T x, T mean, T a, T b", "T y", "y = (x - mean) * a + b", "singa_bn_normalize"
    )


@functools.cache
def _grad_x_kernel(xp: Any) -> Any:
    return xp.ElementwiseKernel(
        "T dy, T x, T mean, T a, T b, T c",
        "T dx",
        "dx = a * dy + b * (x - mean) + c",
        "singa_bn_grad_x",
    )


@functools.cache
def _dot_kernel(xp: Any) -> Any:
    return xp.ReductionKernel("T u, T v", "T out", "u * v", "a + b", "out = a", "0", "singa_dot")


def _per_channel(xp: Any, x3: Any, n: int) -> list:
    return [xp.empty(x3.shape[1], dtype=x3.dtype) for _ in range(n)]


def batch_moments(xp: Any, x3: Any) -> tuple[Any, Any]:
    """Per-channel mean and biased variance of ``(N, C, S)`` ``x3``: one pass, one launch."""
    mean, var = _per_channel(xp, x3, 2)
    _batch_moments_kernel(xp)(x3, mean, var, axis=(0, 2))
    return mean, var


def grad_sums(xp: Any, dy3: Any, x3: Any, mean: Any) -> tuple[Any, Any]:
    """Per channel, ``sum(dy)`` and ``sum(dy * (x - mean))`` over ``(N, C, S)``: one pass.

    The kernel gives the co-moment about ``x``'s own mean; ``sum(dy) * (mean(x) - mean)``
    moves it to ``mean`` (the batch mean again in training, the running mean in inference).
    """
    sum_dy, mean_x, dot = _per_channel(xp, x3, 3)
    _grad_sums_kernel(xp)(x3, dy3, sum_dy, mean_x, dot, axis=(0, 2))
    dot += (mean_x - mean) * sum_dy
    return sum_dy, dot


def normalize(xp: Any, x3: Any, mean: Any, a: Any, b: Any) -> Any:
    """``(x3 - mean) * a + b`` with per-channel ``mean``, ``a``, ``b``: one launch."""
    return _normalize_kernel(xp)(x3, mean[:, None], a[:, None], b[:, None])


def grad_x(xp: Any, dy3: Any, x3: Any, mean: Any, a: Any, b: Any, c: Any) -> Any:
    """``a * dy3 + b * (x3 - mean) + c`` with per-channel coefficients: one launch."""
    return _grad_x_kernel(xp)(dy3, x3, mean[:, None], a[:, None], b[:, None], c[:, None])


def dot_over(xp: Any, u: Any, v: Any, axis: tuple) -> Any:
    """``sum(u * v)`` over ``axis`` after broadcasting, with no product array: one launch."""
    return _dot_kernel(xp)(u, v, axis=axis)

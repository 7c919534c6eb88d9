"""Layer norm over rows: statistics, normalisation and affine in one pass forward; ``dx``,
``dgamma`` and ``dbeta`` in one pass backward.

``ops.normalization.LayerNorm`` keeps ``xhat`` and ``1/std`` (input-sized) and walks the data
some eight times each way; these loops keep one mean and one ``1/std`` per row and recompute
``xhat`` from the input in backward. The statistics and the row sums of backward are
accumulated in float64 (NumPy's reference sums in the input's dtype, pairwise); the
elementwise arithmetic runs in the input's dtype in the reference's order.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from numba import prange

from singa_lite.backend.cpu_kernels._jit import helper, kernel
from singa_lite.backend.cpu_kernels._math import like, row_dot, row_sum

_ROW_CHUNK = 32
"""Rows per partial sum of ``dgamma``/``dbeta``: fixed, so that they do not depend on the
number of threads."""


@kernel
def _forward(x: Any, gamma: Any, beta: Any, eps: float, y: Any, mean: Any, rstd: Any) -> None:
    n = x.shape[1]
    for r in prange(x.shape[0]):
        xr, yr = x[r], y[r]
        mu = row_sum(xr, n) / n
        for j in range(n):  # the centred row, in y for now
            yr[j] = xr[j] - mu
        m = like(x, mu)
        # 1 / sqrt(var + eps) rounded once from float64; the reference rounds var first.
        s = like(x, 1.0 / math.sqrt(row_dot(yr, yr, n) / n + eps))
        mean[r] = m
        rstd[r] = s
        for j in range(n):
            yr[j] = (xr[j] - m) * s * gamma[j] + beta[j]


@kernel
def _backward(
    x: Any, dy: Any, gamma: Any, mean: Any, rstd: Any, dx: Any, dgamma: Any, dbeta: Any, want_x: bool
) -> None:
    rows, n = x.shape
    for chunk in prange(dgamma.shape[0]):
        xhat = np.empty(n, x.dtype)
        g = np.empty(n, x.dtype)
        dg, db = dgamma[chunk], dbeta[chunk]
        for r in range(chunk * _ROW_CHUNK, min(rows, (chunk + 1) * _ROW_CHUNK)):
            xr, dyr = x[r], dy[r]
            m, s = mean[r], rstd[r]
            for j in range(n):
                xhat[j] = (xr[j] - m) * s
                g[j] = dyr[j] * gamma[j]
                dg[j] += dyr[j] * xhat[j]
                db[j] += dyr[j]
            if want_x:
                mean_g = like(x, row_sum(g, n) / n)
                mean_gx = like(x, row_dot(g, xhat, n) / n)
                dxr = dx[r]
                for j in range(n):
                    dxr[j] = (g[j] - mean_g - xhat[j] * mean_gx) * s


def layer_norm_forward(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, eps: float, norm_shape: tuple
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(y, gamma, mean, rstd)``: layer norm over the trailing axes ``norm_shape`` of ``x``,
    ``scale`` and ``bias`` broadcast to ``norm_shape``; ``gamma`` is the broadcast scale
    (what backward takes), ``mean`` and ``rstd`` one per row."""
    width = math.prod(norm_shape)
    rows = math.prod(x.shape[: x.ndim - len(norm_shape)])
    x2 = np.ascontiguousarray(x).reshape(rows, width)
    gamma = np.ascontiguousarray(np.broadcast_to(scale, norm_shape)).reshape(width)
    beta = np.zeros(width, x.dtype) if bias is None else np.broadcast_to(bias, norm_shape).reshape(width)
    y = np.empty((rows, width), x.dtype)
    mean = np.empty(rows, x.dtype)
    rstd = np.empty(rows, x.dtype)
    _forward(x.size, x2, gamma, np.ascontiguousarray(beta), float(eps), y, mean, rstd)
    return y.reshape(x.shape), gamma, mean, rstd


def layer_norm_backward(
    x: np.ndarray, dy: np.ndarray, gamma: np.ndarray, mean: np.ndarray, rstd: np.ndarray, want_x: bool
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """``(dx, dgamma, dbeta)`` from the forward's ``gamma``, ``mean`` and ``rstd``: ``dx``
    shaped as ``x`` (None unless ``want_x``); ``dgamma`` and ``dbeta`` flat, one per element of
    a row, summed in float64."""
    rows, width = mean.size, gamma.size
    x2 = np.ascontiguousarray(x).reshape(rows, width)
    dy2 = np.ascontiguousarray(dy, dtype=x.dtype).reshape(rows, width)
    chunks = -(-rows // _ROW_CHUNK)
    dgamma = np.zeros((chunks, width), np.float64)
    dbeta = np.zeros((chunks, width), np.float64)
    dx = np.empty((rows, width), x.dtype) if want_x else x2[:0]
    _backward(x.size, x2, dy2, gamma, mean, rstd, dx, dgamma, dbeta, want_x)
    dx_out = dx.reshape(x.shape) if want_x else None
    return dx_out, dgamma.sum(axis=0).astype(x.dtype), dbeta.sum(axis=0).astype(x.dtype)


# -- batch norm --------------------------------------------------------------------------------
# The statistics run down the batch: ``(N, C, S)`` is viewed as ``(N, K)`` rows, K = C * S, cut
# into chunks of columns (whole channels, or a segment of one channel when S is large), and
# each column of a chunk gets its own float64 sums, added to row after row. That inner loop is
# a plain vector add (no reduction across its iterations, so LLVM vectorises it without
# reordering any sum) over buffers that stay in L1, and a column's sums depend on nothing but
# the order of the rows. Each chunk then reduces its columns to one partial per channel
# segment, and the segments of a channel are combined in a fixed order: results depend on the
# shape only, not on the threads. The variance comes in the same single pass, from sums of
# deviations from the first row's value, combined by Chan's rule: the shift bounds the
# cancellation of sum(d^2) - sum(d)^2 / N by a factor of N, and for float32 inputs every d and
# d^2 is exact in float64.
_WIDTH = 1024
"""Columns per chunk (at most; whole channels when S is smaller): two float64 sums each, 16 KiB
that stay in L1 while the rows stream past."""


def _geometry(c: int, s: int) -> tuple[int, int, int]:
    """``(chunks, segments per channel, channels per chunk)`` of the column chunks."""
    if s > _WIDTH:
        segs = -(-s // _WIDTH)
        return c * segs, segs, 1
    per = max(1, _WIDTH // max(s, 1))
    return -(-c // per), 1, per


# A chunk's work as a function of its own, called (not inlined) from the parallel loop: written
# inline in it, the body (its ``np.zeros`` taken into Numba's parallel transform) ran 3x slower
# than the same loop's serial form; called, both forms run at the serial one's speed.
_chunk_body = numba.njit(nogil=True, error_model="numpy", boundscheck=False, fastmath={"contract"})


@helper
def _chunk_span(chunk: int, s: int, segs: int, per: int, channels: int) -> tuple[int, int, int, int]:
    """``(first channel, end channel, first column, end column)`` of a chunk."""
    if segs > 1:
        c0 = chunk // segs
        seg = chunk % segs
        return c0, c0 + 1, c0 * s + seg * _WIDTH, c0 * s + min(s, (seg + 1) * _WIDTH)
    c0 = chunk * per
    c1 = min(channels, c0 + per)
    return c0, c1, c0 * s, c1 * s


@_chunk_body
def _moments_chunk(x: Any, chunk: int, s: int, segs: int, per: int, mean_p: Any, m2_p: Any) -> None:
    rows, channels = x.shape[0], mean_p.shape[0]
    c0, c1, lo, hi = _chunk_span(chunk, s, segs, per, channels)
    width = hi - lo
    a = np.zeros(width, np.float64)
    b = np.zeros(width, np.float64)
    x0 = x[0, lo:hi]
    for r in range(1, rows):
        xr = x[r, lo:hi]
        for j in range(width):
            d = np.float64(xr[j]) - np.float64(x0[j])
            a[j] += d
            b[j] += d * d
    # per channel segment: column means x0 + a / N and squared deviations b - a^2 / N, then
    # Chan's rule over the columns
    seg = chunk % segs
    for c in range(c0, c1):
        j0 = (c - c0) * s
        j1 = min(width, j0 + s)
        total = 0.0
        for j in range(j0, j1):
            total += x0[j] + a[j] / rows
        mu = total / (j1 - j0)
        m2 = 0.0
        for j in range(j0, j1):
            d = x0[j] + a[j] / rows - mu
            m2 += (b[j] - a[j] * a[j] / rows) + rows * d * d
        mean_p[c, seg] = mu
        m2_p[c, seg] = m2


@kernel
def _bn_moments(x: Any, chunks: int, s: int, segs: int, per: int, mean_p: Any, m2_p: Any) -> None:
    for chunk in prange(chunks):
        _moments_chunk(x, chunk, s, segs, per, mean_p, m2_p)


@helper
def _unless_cut(g: Any, x: Any, m: Any, a: Any, b: Any, relu: bool) -> Any:
    """``g``, or with ``relu`` ``g`` where the forward's ``(x - m) * a + b`` passed its fused
    ReLU and ``g * 0`` where it did not (so nan and inf in ``g`` propagate as ReLU's own
    backward lets them): the mask recomputed from the input each pass reads anyway, not saved.
    The expression is the normalising kernel's, so the test agrees with it bit for bit."""
    if not relu:
        return g
    return g if (x - m) * a + b > like(g, 0.0) else g * like(g, 0.0)


@_chunk_body
def _grad_sums_chunk(
    x: Any,
    dy: Any,
    mean: Any,
    fa: Any,
    fb: Any,
    relu: bool,
    chunk: int,
    s: int,
    segs: int,
    per: int,
    sdy_p: Any,
    sdyx_p: Any,
) -> None:
    c0, c1, lo, hi = _chunk_span(chunk, s, segs, per, mean.size)
    width = hi - lo
    a = np.zeros(width, np.float64)
    b = np.zeros(width, np.float64)
    m = np.empty(width, x.dtype)
    ma = np.empty(width, x.dtype)
    mb = np.empty(width, x.dtype)
    for j in range(width):
        c = c0 + j // s if segs == 1 else c0
        m[j], ma[j], mb[j] = mean[c], fa[c], fb[c]
    for r in range(x.shape[0]):
        xr, dyr = x[r, lo:hi], dy[r, lo:hi]
        for j in range(width):
            g = _unless_cut(dyr[j], xr[j], m[j], ma[j], mb[j], relu)
            a[j] += g
            b[j] += g * (xr[j] - m[j])  # the product in x's dtype, as the reference's
    seg = chunk % segs
    for c in range(c0, c1):
        j0 = (c - c0) * s
        j1 = min(width, j0 + s)
        t0 = 0.0
        t1 = 0.0
        for j in range(j0, j1):
            t0 += a[j]
            t1 += b[j]
        sdy_p[c, seg] = t0
        sdyx_p[c, seg] = t1


@kernel
def _bn_grad_sums(
    x: Any,
    dy: Any,
    mean: Any,
    fa: Any,
    fb: Any,
    relu: bool,
    chunks: int,
    s: int,
    segs: int,
    per: int,
    sdy_p: Any,
    sdyx_p: Any,
) -> None:
    for chunk in prange(chunks):
        _grad_sums_chunk(x, dy, mean, fa, fb, relu, chunk, s, segs, per, sdy_p, sdyx_p)


@kernel
def _bn_normalize(x: Any, mean: Any, a: Any, b: Any, relu: bool, y: Any) -> None:
    channels = mean.size
    zero = like(x, 0.0)
    for r in prange(x.shape[0]):
        c = r % channels
        m, ac, bc = mean[c], a[c], b[c]
        xr, yr = x[r], y[r]
        if relu:  # as activation.relu: a NaN kept, -0.0 made +0.0
            for j in range(x.shape[1]):
                v = (xr[j] - m) * ac + bc
                yr[j] = v if (v > zero) | (v != v) else zero
        else:
            for j in range(x.shape[1]):
                yr[j] = (xr[j] - m) * ac + bc


@kernel
def _bn_grad_x(
    x: Any, dy: Any, mean: Any, a: Any, b: Any, c: Any, fa: Any, fb: Any, relu: bool, dx: Any
) -> None:
    channels = mean.size
    for r in prange(x.shape[0]):
        ch = r % channels
        m, ac, bc, cc, fac, fbc = mean[ch], a[ch], b[ch], c[ch], fa[ch], fb[ch]
        xr, dyr, dxr = x[r], dy[r], dx[r]
        for j in range(x.shape[1]):
            g = _unless_cut(dyr[j], xr[j], m, fac, fbc, relu)
            # Bracketed so that each add has one product to contract with: left to LLVM, the
            # fused ReLU's form and the plain one contracted different products.
            dxr[j] = g * ac + ((xr[j] - m) * bc + cc)


def batch_norm_moments(x3: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, var)`` per channel of ``(N, C, S)`` over axes 0 and 2, in ``x3``'s dtype: the
    biased variance, both accumulated in float64 in an order fixed by the shape (nan for an
    empty ``x3``)."""
    n, c, s = x3.shape
    if x3.size == 0:  # the mean of nothing, as NumPy's
        return np.full(c, np.nan, x3.dtype), np.full(c, np.nan, x3.dtype)
    rows = np.ascontiguousarray(x3).reshape(n, c * s)
    chunks, segs, per = _geometry(c, s)
    mean_p = np.empty((c, segs), np.float64)
    m2_p = np.empty((c, segs), np.float64)
    _bn_moments(rows.size, rows, chunks, s, segs, per, mean_p, m2_p)
    # the segments of a channel by Chan's rule, weighted by their sizes
    starts = np.arange(segs) * _WIDTH
    weight = (np.minimum(s, starts + _WIDTH) - starts) * float(n)
    mean = (mean_p * weight).sum(axis=1) / (n * s)
    m2 = m2_p.sum(axis=1) + (np.square(mean_p - mean[:, None]) * weight).sum(axis=1)
    return mean.astype(x3.dtype), (m2 / (n * s)).astype(x3.dtype)


def batch_norm_normalize(
    x3: np.ndarray, mean: np.ndarray, a: np.ndarray, b: np.ndarray, relu: bool = False
) -> np.ndarray:
    """``(x3 - mean) * a + b`` with per-channel ``mean``, ``a``, ``b`` along axis 1 of
    ``(N, C, S)``, in one pass (all in ``x3``'s dtype); with ``relu``, ``relu`` of that in
    the same pass."""
    n, c, s = x3.shape
    lines = np.ascontiguousarray(x3).reshape(n * c, s)
    y = np.empty(lines.shape, x3.dtype)
    dt = x3.dtype
    _bn_normalize(lines.size, lines, _vec(mean, dt), _vec(a, dt), _vec(b, dt), relu, y)
    return y.reshape(x3.shape)


def batch_norm_grad_sums(
    x3: np.ndarray, dy3: np.ndarray, mean: np.ndarray, relu: tuple | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(sum(dy), sum(dy * (x - mean)))`` per channel of ``(N, C, S)``, accumulated in
    float64 (down the batch per position, then over the positions), in ``x3``'s dtype.

    ``relu``: the forward's ``(a, b)`` where it fused a ReLU (``batch_norm_normalize`` with
    ``relu``); ``dy`` is then the gradient of the ReLU's output, passed where it was
    positive."""
    n, c, s = x3.shape
    if x3.size == 0:
        return np.zeros(c, x3.dtype), np.zeros(c, x3.dtype)
    rows = np.ascontiguousarray(x3).reshape(n, c * s)
    drows = np.ascontiguousarray(dy3, dtype=x3.dtype).reshape(n, c * s)
    chunks, segs, per = _geometry(c, s)
    sdy_p = np.empty((c, segs), np.float64)
    sdyx_p = np.empty((c, segs), np.float64)
    dt = x3.dtype
    fa, fb = (mean, mean) if relu is None else relu
    coefs = (_vec(mean, dt), _vec(fa, dt), _vec(fb, dt), relu is not None)
    _bn_grad_sums(rows.size, rows, drows, *coefs, chunks, s, segs, per, sdy_p, sdyx_p)
    return sdy_p.sum(axis=1).astype(x3.dtype), sdyx_p.sum(axis=1).astype(x3.dtype)


def batch_norm_grad_x(
    x3: np.ndarray,
    dy3: np.ndarray,
    mean: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    relu: tuple | None = None,
) -> np.ndarray:
    """``dy * a + (x - mean) * b + c`` with per-channel coefficients along axis 1 of
    ``(N, C, S)``, in one pass: batch norm's ``dx``. ``relu`` as for ``batch_norm_grad_sums``."""
    n, ch, s = x3.shape
    lines = np.ascontiguousarray(x3).reshape(n * ch, s)
    dlines = np.ascontiguousarray(dy3, dtype=x3.dtype).reshape(n * ch, s)
    dx = np.empty(lines.shape, x3.dtype)
    dt = x3.dtype
    fa, fb = (a, b) if relu is None else relu
    coefs = (_vec(fa, dt), _vec(fb, dt), relu is not None)
    _bn_grad_x(lines.size, lines, dlines, _vec(mean, dt), _vec(a, dt), _vec(b, dt), _vec(c, dt), *coefs, dx)
    return dx.reshape(x3.shape)


def _vec(v: np.ndarray, dtype: Any) -> np.ndarray:
    """A per-channel vector as a contiguous 1-d array of ``dtype``."""
    return np.ascontiguousarray(v, dtype=dtype).reshape(-1)

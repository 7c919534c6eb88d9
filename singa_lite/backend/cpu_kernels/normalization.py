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

import numpy as np
from numba import prange

from singa_lite.backend.cpu_kernels._jit import kernel
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

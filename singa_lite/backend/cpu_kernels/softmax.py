"""Softmax over rows, forward and backward, and the masked form attention uses.

``ops.activation.SoftMax`` along the last axis and the probabilities of
``ops.attention.ScaledDotProductAttention`` make four to eight passes over the scores in
NumPy (max, subtract, exp, sum, divide, and attention's mask fix-ups); each loop here reads a
row three times from the cache and writes it twice. Row sums are accumulated in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange

from singa_lite.backend.cpu_kernels._jit import kernel
from singa_lite.backend.cpu_kernels._math import exp, like, row_dot, row_max, row_sum


@kernel
def _forward(x: Any, y: Any) -> None:
    n = x.shape[1]
    for r in prange(x.shape[0]):
        xr, yr = x[r], y[r]
        m = row_max(xr, n)
        for j in range(n):
            yr[j] = exp(xr[j] - m)
        t = like(x, 1.0 / row_sum(yr, n))  # one division a row; NumPy divides each element
        for j in range(n):
            yr[j] = yr[j] * t


@kernel
def _backward(y: Any, dy: Any, dx: Any) -> None:
    n = y.shape[1]
    for r in prange(y.shape[0]):
        d = like(y, row_dot(dy[r], y[r], n))
        for j in range(n):
            dx[r, j] = (dy[r, j] - d) * y[r, j]


@kernel
def _attention(s: Any, queries: int, first_key: int, causal: bool) -> None:
    n = s.shape[1]
    for r in prange(s.shape[0]):
        sr = s[r]
        # A causal query i sees keys j <= i; the block's columns start at key first_key.
        visible = min(n, max(0, r % queries - first_key + 1)) if causal else n
        m = row_max(sr, visible)
        shift = m if np.isfinite(m) else like(s, 0.0)  # a row with every key masked ...
        for j in range(visible):
            sr[j] = exp(sr[j] - shift)
        total = row_sum(sr, visible)
        t = like(s, 1.0 / total) if total != 0 else like(s, 1.0)  # ... keeps probabilities 0
        for j in range(visible):
            sr[j] = sr[j] * t
        for j in range(visible, n):
            sr[j] = 0


@kernel
def _attention_grad(dp: Any, p: Any, rowdot: Any) -> None:
    n = dp.shape[1]
    for r in prange(dp.shape[0]):
        d = rowdot[r]
        for j in range(n):
            dp[r, j] = (dp[r, j] - d) * p[r, j]


def _rows(a: np.ndarray) -> np.ndarray:
    width = a.shape[-1] if a.ndim else 1
    return np.ascontiguousarray(a).reshape(-1, width) if width else np.empty((a.size, 0), a.dtype)


def softmax_forward(x: np.ndarray) -> np.ndarray:
    """Softmax along the last axis of ``x``, shifted by each row's max."""
    x2 = _rows(x)
    y = np.empty(x2.shape, x.dtype)
    _forward(x.size, x2, y)
    return y.reshape(x.shape)


def softmax_backward(y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """``(dy - sum(dy * y)) * y`` along the last axis, from the forward's output ``y``."""
    y2 = _rows(y)
    dx = np.empty(y2.shape, y.dtype)
    _backward(y.size, y2, _rows(dy.astype(y.dtype, copy=False)), dx)
    return dx.reshape(y.shape)


def attention_probabilities(s: np.ndarray, queries: int, first_key: int, causal: bool) -> None:
    """Scores ``s (..., rows, keys)`` to probabilities in place, along the last axis; masked
    scores are ``-inf`` already. With ``causal``, row ``r`` is query ``r % queries`` and sees
    the keys up to its own index (``first_key``: the key of column 0); the columns past it get
    0. A row with no visible key gets zeros. ``s`` must be C-contiguous."""
    _attention(s.size, s.reshape(-1, s.shape[-1]), queries, first_key, causal)


def attention_score_grad(dp: np.ndarray, p: np.ndarray, rowdot: np.ndarray) -> np.ndarray:
    """``(dp - rowdot) * p`` in place on ``dp`` (C-contiguous, as ``p``): the scores' gradient
    from the probabilities' ``dp`` and each row's ``sum(dO * O)``."""
    _attention_grad(dp.size, dp.reshape(-1, dp.shape[-1]), p.reshape(-1, p.shape[-1]), rowdot.reshape(-1))
    return dp

"""Losses, with SINGA's conventions: each returns a tensor of shape ``(1,)`` (so
``tensor.to_numpy(loss)[0]`` works) and averages over the batch, the first axis, of size N.

Targets ``t`` are class labels of shape (N,) (int32/int64) or per-class targets of shape (N, C)
(one-hot or soft, any numeric dtype). Labels outside ``[0, C)`` raise a ``ShapeError``.
float16 inputs are computed in float32 and the loss returned as float16; float32 stays float32.

``mse_loss`` keeps SINGA's ``sum((x - t)**2) / (2 * N)``: half of PyTorch's
``mse_loss(reduction='sum') / N``, and ``C / 2`` times PyTorch's default mean when each sample
has ``C`` values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite import backend
from singa_lite.autograd import Operator
from singa_lite.backend import cupy_kernels
from singa_lite.errors import DTypeError
from singa_lite.tensor import Tensor

__all__ = [
    "BinaryCrossEntropy",
    "CrossEntropy",
    "MeanSquareError",
    "NLLLoss",
    "SoftMaxCrossEntropy",
    "binary_cross_entropy",
    "cross_entropy",
    "mse_loss",
    "nll_loss",
    "softmax_cross_entropy",
]

EPS = 1e-7
"""Probabilities are clipped to ``[EPS, 1]`` (``[EPS, 1 - EPS]`` for binary cross-entropy)
before their log is taken, so a zero probability costs ``-log(1e-7) ~ 16.1`` instead of inf."""


class _Loss(Operator):
    """Shared checks and the ``(1,)``-shaped, dtype-keeping result."""

    def compute(self, x: Any) -> Any:
        """``x`` in the dtype the loss is computed in: float16 is widened to float32."""
        if x.dtype.kind != "f":
            raise DTypeError(
                f"{self.name}: expects floating-point inputs, got {x.dtype} (input shape {x.shape})"
            )
        return x.astype(np.float32) if x.dtype == np.float16 else x

    def result(self, total: Any, n: int, dtype: Any) -> Any:
        return self.xp.asarray(total / n, dtype=dtype).reshape(1)

    @staticmethod
    def label_column(x: Any, t: Any) -> Any:
        """``t`` as ``(N,)`` labels when it is an ``(N, 1)`` integer column against ``C > 1``
        classes (SINGA's char-rnn example passes labels so); otherwise ``t`` unchanged."""
        if t.ndim == 2 and t.shape[1] == 1 and t.dtype.kind in "iu" and x.ndim == 2 and x.shape[1] > 1:
            return t.reshape(t.shape[0])
        return t

    def targets(self, x: Any, t: Any) -> bool:
        """Check ``t`` against the (N, C) scores ``x``; True when ``t`` holds class labels."""
        if x.ndim != 2:
            raise self.error("expects inputs of shape (batch, classes)", x, t)
        N, C = x.shape
        if N == 0:
            raise self.error("the batch is empty", x, t)
        if t.ndim == 1:
            if t.dtype.kind not in "iu":
                raise DTypeError(
                    f"{self.name}: class labels of shape {t.shape} must be int32 or int64, got "
                    f"{t.dtype}; pass targets of shape {x.shape} for one-hot or soft targets"
                )
            if t.shape[0] != N:
                raise self.error(f"{t.shape[0]} labels for a batch of {N}", x, t)
            bad = (t < 0) | (t >= C)

            def error() -> Exception:
                # Called at once on the host; on a device at the next host read (t may be gone).
                label = f"label {int(t[np.argmax(bad)])}" if isinstance(t, np.ndarray) else "a label"
                return self.error(f"{label} is out of range for {C} classes", x, t)

            backend.check(bad.any(), f"{self.name}: labels in [0, {C})", error)
            return True
        if t.shape != x.shape:
            raise self.error("targets must be labels of shape (N,) or per-class of shape (N, C)", x, t)
        if t.dtype.kind not in "fiub":
            raise DTypeError(f"{self.name}: targets must be numeric, got {t.dtype}")
        return False

    def one_hot_scaled(self, labels: Any, shape: tuple, scale: Any, dtype: Any) -> Any:
        """An array of zeros with ``scale`` at ``[n, labels[n]]``."""
        g = self.xp.zeros(shape, dtype=dtype)
        g[self.xp.arange(shape[0]), labels] = scale
        return g


class SoftMaxCrossEntropy(_Loss):
    """Softmax of the logits, then cross-entropy, fused: stable, and the gradient is
    ``(softmax(x) * sum(t) - t) / N`` (``softmax(x) - t`` per sample when ``t`` sums to 1).

    On CuPy, float32/float64 logits against class labels take one kernel each way
    (``backend/kernels/softmax_ce.cu``): the per-element arithmetic below, with each row's
    exponentials summed in another order.
    """

    def forward(self, x: Any, t: Any) -> Any:
        xp = self.xp
        t = self.label_column(x, t)
        self.labels = self.targets(x, t)
        self.kernel = self.labels and cupy_kernels.usable(xp, x, labels=t)
        if self.kernel:
            self.p, loss = cupy_kernels.softmax_ce_forward(xp, x, t)
            self.t, self.dtype = t, x.dtype
            return self.result(loss.sum(), x.shape[0], x.dtype)
        xc = self.compute(x)
        z = xc - xc.max(axis=1, keepdims=True)
        e = xp.exp(z)
        s = e.sum(axis=1, keepdims=True)
        lse = xp.log(s)
        N = x.shape[0]
        if self.labels:
            total = lse.sum() - z[xp.arange(N), t].sum()
        else:
            t = t.astype(xc.dtype, copy=False)
            total = (t * (lse - z)).sum()
        e /= s
        self.p, self.t, self.dtype = e, t, x.dtype
        return self.result(total, N, x.dtype)

    def backward(self, dy: Any) -> tuple:
        p, t = self.p, self.t
        if self.kernel and cupy_kernels.enabled():
            return cupy_kernels.softmax_ce_backward(self.xp, p, t, dy), None
        N = p.shape[0]
        # A 0-d array, not ``(...).astype``: NumPy 2.4's scalar ``astype`` to its own dtype
        # leaks a small object now and then (tests/test_long_run.py saw the heap move).
        scale = self.xp.asarray(dy.reshape(()) / N, dtype=p.dtype)
        if self.labels:
            dx = p * scale
            dx[self.xp.arange(N), t] -= scale
        else:
            dx = (p * t.sum(axis=1, keepdims=True) - t) * scale
        return dx.astype(self.dtype, copy=False), None


class NLLLoss(_Loss):
    """Negative log-likelihood of log-probabilities ``logp``: ``-sum(t * logp) / N``."""

    def forward(self, logp: Any, t: Any) -> Any:
        t = self.label_column(logp, t)
        self.labels = self.targets(logp, t)
        lc = self.compute(logp)
        N = logp.shape[0]
        if self.labels:
            total = -lc[self.xp.arange(N), t].sum()
        else:
            t = t.astype(lc.dtype, copy=False)
            total = -(t * lc).sum()
        self.t, self.shape, self.dtype = t, logp.shape, logp.dtype
        return self.result(total, N, logp.dtype)

    def backward(self, dy: Any) -> tuple:
        N = self.shape[0]
        scale = -dy.reshape(()) / N
        if self.labels:
            return self.one_hot_scaled(self.t, self.shape, scale, self.dtype), None
        return (self.t * scale).astype(self.dtype, copy=False), None


class CrossEntropy(_Loss):
    """Cross-entropy of probabilities ``y``: ``-sum(t * log(clip(y, EPS, 1))) / N``."""

    def forward(self, y: Any, t: Any) -> Any:
        xp = self.xp
        t = self.label_column(y, t)
        self.labels = self.targets(y, t)
        yc = self.compute(y)
        N = y.shape[0]
        if self.labels:
            yc = yc[xp.arange(N), t]  # only the picked probabilities matter
        clipped = xp.clip(yc, EPS, 1)
        if self.labels:
            total = -xp.log(clipped).sum()
        else:
            t = t.astype(yc.dtype, copy=False)
            total = -(t * xp.log(clipped)).sum()
        # Where the clip is active the loss is flat in y: zero gradient there.
        self.inside = (yc >= EPS) & (yc <= 1)
        self.clipped, self.t, self.shape, self.dtype = clipped, t, y.shape, y.dtype
        return self.result(total, N, y.dtype)

    def backward(self, dy: Any) -> tuple:
        N = self.shape[0]
        scale = -dy.reshape(()) / N
        g = scale / self.clipped * self.inside
        if self.labels:
            return self.one_hot_scaled(self.t, self.shape, g, self.dtype), None
        return (g * self.t).astype(self.dtype, copy=False), None


class BinaryCrossEntropy(_Loss):
    """``-sum(t*log(y) + (1-t)*log(1-y)) / N``, ``y`` clipped to ``[EPS, 1-EPS]``, N = y.shape[0]."""

    def forward(self, y: Any, t: Any) -> Any:
        xp = self.xp
        _check_same_shape(self, y, t)
        yc = self.compute(y)
        t = t.astype(yc.dtype, copy=False)
        clipped = xp.clip(yc, EPS, 1 - EPS)
        total = -(t * xp.log(clipped) + (1 - t) * xp.log1p(-clipped)).sum()
        self.inside = (yc >= EPS) & (yc <= 1 - EPS)
        self.clipped, self.t, self.dtype = clipped, t, y.dtype
        return self.result(total, y.shape[0], y.dtype)

    def backward(self, dy: Any) -> tuple:
        y, t = self.clipped, self.t
        scale = dy.reshape(()) / y.shape[0]
        g = ((1 - t) / (1 - y) - t / y) * (scale * self.inside)
        return g.astype(self.dtype, copy=False), None


class MeanSquareError(_Loss):
    """SINGA's ``sum((x - t)**2) / (2 * N)``, N = x.shape[0]; gradients for ``x`` and ``t``."""

    def forward(self, x: Any, t: Any) -> Any:
        _check_same_shape(self, x, t)
        xc = self.compute(x)
        self.err = xc - t.astype(xc.dtype, copy=False)
        self.dtypes = x.dtype, t.dtype
        return self.result((self.err * self.err).sum(), 2 * x.shape[0], x.dtype)

    def backward(self, dy: Any) -> tuple:
        dx = self.err * (dy.reshape(()) / self.err.shape[0])
        dt = -dx.astype(self.dtypes[1], copy=False) if self.needs_grad[1] else None
        return dx.astype(self.dtypes[0], copy=False), dt


def _check_same_shape(op: _Loss, y: Any, t: Any) -> None:
    if y.shape != t.shape or y.ndim == 0:
        raise op.error("inputs and targets must have the same shape, with a batch axis first", y, t)
    if y.shape[0] == 0:
        raise op.error("the batch is empty", y, t)
    if t.dtype.kind not in "fiub":
        raise DTypeError(f"{op.name}: targets must be numeric, got {t.dtype}")


def softmax_cross_entropy(x: Tensor, t: Tensor) -> Tensor:
    """Mean cross-entropy of ``softmax(x)`` against ``t``; ``x`` logits (N, C).

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> x = tensor.from_numpy(np.zeros((2, 4), np.float32))
    >>> t = tensor.from_numpy(np.array([0, 3], np.int32))
    >>> round(float(tensor.to_numpy(softmax_cross_entropy(x, t))[0]), 4)  # log(4)
    1.3863
    """
    return SoftMaxCrossEntropy()(x, t)[0]


def cross_entropy(y: Tensor, t: Tensor) -> Tensor:
    """Mean cross-entropy of probabilities ``y`` (N, C) against labels or one-hot ``t``."""
    return CrossEntropy()(y, t)[0]


def binary_cross_entropy(y: Tensor, t: Tensor) -> Tensor:
    """Binary cross-entropy of probabilities ``y`` against ``t`` (same shape), summed, / N."""
    return BinaryCrossEntropy()(y, t)[0]


def mse_loss(x: Tensor, t: Tensor) -> Tensor:
    """SINGA's ``sum((x - t)**2) / (2 * N)`` (not PyTorch's mean; see the module notes)."""
    return MeanSquareError()(x, t)[0]


def nll_loss(logp: Tensor, t: Tensor) -> Tensor:
    """Mean negative log-likelihood ``-logp[n, t_n]`` of log-probabilities (N, C)."""
    return NLLLoss()(logp, t)[0]

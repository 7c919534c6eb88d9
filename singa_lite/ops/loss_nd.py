"""ONNX's class losses over ``(N, C, d1, ..., dk)`` scores: ``negative_log_likelihood_loss``
and ``softmax_cross_entropy_loss``, with per-class weights, an ignored label and the
``none``/``sum``/``mean`` reductions (PyTorch's ``nll_loss``/``cross_entropy`` semantics).

SINGA's ``nll_loss``/``softmax_cross_entropy`` (in :mod:`~singa_lite.ops.loss`) keep their
``(1,)``-shaped batch mean; these return what ONNX and PyTorch return: a scalar, or the
per-element losses for ``reduction='none'``. The mean divides by the summed weights of the
labels that are not ignored (their count without weights).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite import _args, backend
from singa_lite.autograd import Operator
from singa_lite.errors import DTypeError
from singa_lite.ops import activation
from singa_lite.tensor import Tensor

__all__ = ["NegativeLogLikelihoodLoss", "negative_log_likelihood_loss", "softmax_cross_entropy_loss"]

REDUCTIONS = ("none", "sum", "mean")


class NegativeLogLikelihoodLoss(Operator):
    """``-weight[t] * logp[n, t, ...]`` per element, reduced; inputs ``(logp, target[, weight])``.
    Gradients for ``logp`` only."""

    def __init__(self, reduction: str = "mean", ignore_index: int | None = None) -> None:
        super().__init__()
        self.reduction = _args.choice(self.name, "reduction", reduction, REDUCTIONS)
        self.ignore_index = (
            None if ignore_index is None else _args.integer(self.name, "ignore_index", ignore_index)
        )

    def _check(self, logp: Any, t: Any, w: Any) -> None:
        if logp.dtype.kind != "f":
            raise DTypeError(f"{self.name}: expects floating-point log-probabilities, got {logp.dtype}")
        if t.dtype.kind not in "iu":
            raise DTypeError(f"{self.name}: the target holds class labels and must be integer, got {t.dtype}")
        if logp.ndim < 2 or t.shape != (logp.shape[0], *logp.shape[2:]):
            raise self.error("expects scores (N, C, d1, ...) and labels (N, d1, ...)", logp, t)
        if w is not None and w.shape != (logp.shape[1],):
            raise self.error(f"the weights must have shape ({logp.shape[1]},)", logp, w)

    def forward(self, logp: Any, t: Any, w: Any = None) -> Any:
        xp = self.xp
        self._check(logp, t, w)
        C = logp.shape[1]
        lc = logp.astype(np.float32) if logp.dtype == np.float16 else logp
        keep = xp.ones(t.shape, bool) if self.ignore_index is None else t != self.ignore_index
        safe = xp.where(keep, t, 0).astype(np.int64, copy=False)
        bad = ((safe < 0) | (safe >= C)).any()
        backend.check(
            bad,
            f"{self.name}: labels in [0, {C})",
            lambda: self.error(f"a label is out of range for {C} classes", logp, t),
        )
        picked = xp.take_along_axis(lc, safe[:, None], axis=1)[:, 0]
        weight = (
            keep.astype(lc.dtype)
            if w is None
            else xp.where(keep, w.astype(lc.dtype)[safe], 0).astype(lc.dtype)
        )
        loss = -picked * weight
        self.safe, self.weight, self.shape, self.dtype = safe, weight, logp.shape, logp.dtype
        if self.reduction == "none":
            return loss.astype(logp.dtype, copy=False)
        total = loss.sum()
        if self.reduction == "mean":
            self.count = weight.sum()
            total = total / self.count
        return xp.asarray(total, dtype=logp.dtype)

    def backward(self, dy: Any) -> tuple:
        xp = self.xp
        g = dy.astype(self.weight.dtype, copy=False)
        if self.reduction == "mean":
            g = g / self.count
        coef = -self.weight * g  # broadcasts a scalar dy over every element
        classes = xp.arange(self.shape[1]).reshape([1, -1] + [1] * (len(self.shape) - 2))
        dx = (classes == self.safe[:, None]) * coef[:, None]
        return (dx.astype(self.dtype, copy=False), None) + ((None,) if len(self.inputs) > 2 else ())


def negative_log_likelihood_loss(
    logp: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int | None = None,
) -> Tensor:
    """``-weight[t] * logp[n, t, d...]`` of log-probabilities ``(N, C, d1, ...)`` against labels
    ``(N, d1, ...)``, reduced by ``reduction`` (ONNX NegativeLogLikelihoodLoss, PyTorch's
    ``nll_loss``); labels equal to ``ignore_index`` count nowhere.

    >>> import numpy as np; from singa_lite import tensor
    >>> logp = tensor.from_numpy(np.log(np.array([[0.5, 0.5], [0.25, 0.75]])))
    >>> t = tensor.from_numpy(np.array([0, 1]))
    >>> round(float(negative_log_likelihood_loss(logp, t, reduction="sum").numpy()), 4)
    0.9808
    """
    op = NegativeLogLikelihoodLoss(reduction, ignore_index)
    return (op(logp, target) if weight is None else op(logp, target, weight))[0]


def softmax_cross_entropy_loss(
    scores: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Cross-entropy of ``softmax(scores)`` along axis 1 (ONNX SoftmaxCrossEntropyLoss, PyTorch's
    ``cross_entropy``): the loss and the log-probabilities, whose shape is ``scores``'."""
    log_prob = activation.log_softmax(scores, 1)
    return negative_log_likelihood_loss(log_prob, target, weight, reduction, ignore_index), log_prob

"""Losses as layers. Each returns a tensor of shape (1,), as SINGA's do."""

from __future__ import annotations

from singa_lite import ops
from singa_lite.layer.base import Layer
from singa_lite.tensor import Tensor


class SoftMaxCrossEntropy(Layer):
    """Mean over the batch of cross-entropy between softmax(x) and labels or one-hot targets."""

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        return ops.softmax_cross_entropy(x, t)


class CrossEntropy(Layer):
    """Cross-entropy of probabilities ``y`` against labels or one-hot targets."""

    def forward(self, y: Tensor, t: Tensor) -> Tensor:
        return ops.cross_entropy(y, t)


class BinaryCrossEntropy(Layer):
    def forward(self, y: Tensor, t: Tensor) -> Tensor:
        return ops.binary_cross_entropy(y, t)


class MeanSquareError(Layer):
    """SINGA's ``sum((x - t)^2) / (2 N)``."""

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        return ops.mse_loss(x, t)

"""Normalisation and regularisation layers."""

from __future__ import annotations

from typing import Any

from singa_lite import ops
from singa_lite.layer._args import fraction
from singa_lite.layer.base import Layer
from singa_lite.layer.dense import _param
from singa_lite.tensor import Tensor


class BatchNorm2d(Layer):
    """Batch normalisation of (N, C, H, W) input with SINGA's state names and momentum rule.

    Params ``scale``, ``bias``; states ``running_mean``, ``running_var``, updated in training as
    ``running = momentum * running + (1 - momentum) * batch``.
    """

    def __init__(self, *args: Any, momentum: float = 0.9, eps: float = 1e-5) -> None:
        super().__init__()
        # SINGA's legacy form BatchNorm2d(num_features, momentum); num_features is learnt anyway.
        if len(args) == 2:
            momentum = args[1]
        elif len(args) == 1 and isinstance(args[0], float):
            momentum = args[0]
        self.momentum = float(momentum)
        self.eps = float(eps)

    def initialize(self, x: Tensor) -> None:
        self.check_ndim(x, 4, "(N, C, H, W)")
        c = x.shape[1]
        self.scale = _param((c,), x).set_value(1.0)
        self.bias = _param((c,), x)
        self.running_mean = Tensor((c,), x.device, self.scale.dtype, requires_grad=False)
        self.running_var = Tensor((c,), x.device, self.scale.dtype, requires_grad=False).set_value(1.0)

    def forward(self, x: Tensor) -> Tensor:
        # Checked on every call, not only the first: the op itself takes any (N, C, ...) and
        # would quietly act as a BatchNorm1d on 2-D input.
        self.check_ndim(x, 4, "(N, C, H, W)")
        return ops.batchnorm_2d(
            x, self.scale, self.bias, self.running_mean, self.running_var, self.momentum, self.eps
        )


class LayerNorm(Layer):
    """Normalise over the trailing axes from ``axis`` on, with learnt ``scale`` and ``bias``."""

    def __init__(self, axis: int = -1, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.axis, self.eps, self.use_bias = int(axis), float(eps), bias

    def initialize(self, x: Tensor) -> None:
        shape = x.shape[self.axis :]
        self.scale = _param(shape, x).set_value(1.0)
        if self.use_bias:
            self.bias = _param(shape, x)

    def forward(self, x: Tensor) -> Tensor:
        return ops.layer_norm(x, self.scale, self.bias if self.use_bias else None, self.axis, self.eps)


class Dropout(Layer):
    """Zero each element with probability ``ratio`` in training (scaled by 1/(1-ratio)); identity in eval."""

    def __init__(self, ratio: float = 0.5) -> None:
        super().__init__()
        self.ratio = fraction("Dropout", "ratio", ratio)

    def forward(self, x: Tensor) -> Tensor:
        return ops.dropout(x, self.ratio)

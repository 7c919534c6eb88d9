"""Normalisation and regularisation layers."""

from __future__ import annotations

from typing import Any

from singa_lite import autograd, ops
from singa_lite._args import axis as axis_
from singa_lite._args import count, fraction, number
from singa_lite.errors import ShapeError
from singa_lite.layer.base import Layer
from singa_lite.layer.dense import _param
from singa_lite.tensor import Tensor


class BatchNorm2d(Layer):
    """Batch normalisation of (N, C, H, W) input with SINGA's state names and momentum rule.

    Params ``scale``, ``bias``; states ``running_mean``, ``running_var``, updated in training as
    ``running = momentum * running + (1 - momentum) * batch``.
    """

    ranks: tuple[int, ...] = (4,)
    layout = "(N, C, H, W)"

    def __init__(self, *args: Any, momentum: float = 0.9, eps: float = 1e-5) -> None:
        super().__init__()
        # SINGA's legacy form BatchNorm2d(num_features, momentum); num_features is learnt anyway.
        if len(args) == 2:
            momentum = args[1]
        elif len(args) == 1 and isinstance(args[0], float):
            momentum = args[0]
        me = type(self).__name__
        self.momentum = number(me, "momentum", momentum, 0.0, 1.0)
        self.eps = number(me, "eps", eps, 0.0)

    def _check(self, x: Tensor) -> None:
        # Checked on every call, not only the first: the op itself takes any (N, C, ...) and
        # would quietly normalise another layout.
        if x.ndim() not in self.ranks:
            self.check_ndim(x, self.ranks[0], self.layout)

    def initialize(self, x: Tensor) -> None:
        self._check(x)
        c = x.shape[1]
        self.scale = _param((c,), x).set_value(1.0)
        self.bias = _param((c,), x)
        self.running_mean = Tensor((c,), x.device, self.scale.dtype, requires_grad=False)
        self.running_var = Tensor((c,), x.device, self.scale.dtype, requires_grad=False).set_value(1.0)

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        return ops.batchnorm_2d(
            x,
            self.scale,
            self.bias,
            self.running_mean,
            self.running_var,
            self.momentum,
            self.eps,
            training=autograd.training,
        )


class BatchNorm1d(BatchNorm2d):
    """Batch normalisation of ``(N, C)`` or ``(N, C, L)`` input, per channel; as ``BatchNorm2d``."""

    ranks = (2, 3)
    layout = "(N, C) or (N, C, L)"


class LayerNorm(Layer):
    """Normalise over the trailing axes from ``axis`` on, with learnt ``scale`` and ``bias``."""

    def __init__(self, axis: int = -1, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.axis, self.eps = axis_("LayerNorm", "axis", axis), number("LayerNorm", "eps", eps, 0.0)
        self.use_bias = bias

    def initialize(self, x: Tensor) -> None:
        shape = x.shape[self.axis :]
        self.scale = _param(shape, x).set_value(1.0)
        if self.use_bias:
            self.bias = _param(shape, x)

    def forward(self, x: Tensor) -> Tensor:
        return ops.layer_norm(x, self.scale, self.bias if self.use_bias else None, self.axis, self.eps)


class RMSNorm(Layer):
    """Root-mean-square normalisation over the trailing axes from ``axis`` on, with a learnt
    ``scale`` (no bias); ``eps=None`` is the dtype's machine epsilon, as ``torch.nn.RMSNorm``."""

    def __init__(self, axis: int = -1, eps: float | None = None) -> None:
        super().__init__()
        self.axis = axis_("RMSNorm", "axis", axis)
        self.eps = None if eps is None else number("RMSNorm", "eps", eps, 0.0)

    def initialize(self, x: Tensor) -> None:
        self.scale = _param(x.shape[self.axis :], x).set_value(1.0)

    def forward(self, x: Tensor) -> Tensor:
        return ops.rms_norm(x, self.scale, self.axis, self.eps)


class GroupNorm(Layer):
    """Group normalisation of ``(N, C, ...)``: ``num_groups`` groups of consecutive channels,
    normalised per sample; per-channel ``scale`` and ``bias`` when ``affine``."""

    def __init__(self, num_groups: int, eps: float = 1e-5, affine: bool = True) -> None:
        super().__init__()
        self.num_groups = count("GroupNorm", "num_groups", num_groups)
        self.eps, self.affine = number("GroupNorm", "eps", eps, 0.0), bool(affine)

    def initialize(self, x: Tensor) -> None:
        if x.ndim() < 2 or x.shape[1] % self.num_groups:
            raise ShapeError(
                f"GroupNorm: expects (N, C, ...) with C divisible by {self.num_groups}, got {x.shape}"
            )
        c = x.shape[1]
        if self.affine:
            self.scale = _param((c,), x).set_value(1.0)
            self.bias = _param((c,), x)
        else:  # a fixed unit scale, neither trained nor saved
            dtype = x.dtype if x.dtype.kind == "f" else "float32"
            self._unit = Tensor((c,), x.device, dtype, requires_grad=False).set_value(1.0)

    def forward(self, x: Tensor) -> Tensor:
        if self.affine:
            return ops.group_norm(x, self.num_groups, self.scale, self.bias, self.eps)
        return ops.group_norm(x, self.num_groups, self._unit, None, self.eps)


class Dropout(Layer):
    """Zero each element with probability ``ratio`` in training (scaled by 1/(1-ratio)); identity in eval."""

    def __init__(self, ratio: float = 0.5) -> None:
        super().__init__()
        self.ratio = fraction("Dropout", "ratio", ratio)

    def forward(self, x: Tensor) -> Tensor:
        return ops.dropout(x, self.ratio, training=autograd.training)

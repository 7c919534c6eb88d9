"""Convolution and pooling layers (NCHW)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa_lite import ops
from singa_lite.errors import ArgumentError, ShapeError
from singa_lite.layer._args import choice, count, counts
from singa_lite.layer.base import Layer
from singa_lite.layer.dense import _param
from singa_lite.tensor import Tensor

_NUMBER = (int, float, np.integer, np.floating)


def _pair(v: Any) -> tuple[int, int]:
    """(h, w) from one number or a pair (kernel sizes, strides, dilations)."""
    if isinstance(v, _NUMBER):
        return int(v), int(v)
    if len(v) != 2:
        raise ArgumentError(f"expected one integer or a pair (h, w), got {v!r}")
    return int(v[0]), int(v[1])


def _padding4(padding: Any) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) from an int, a (ph, pw) pair, or a 4-tuple (SINGA's order)."""
    if isinstance(padding, _NUMBER):
        p = int(padding)
        return p, p, p, p
    if len(padding) == 2:
        return int(padding[0]), int(padding[0]), int(padding[1]), int(padding[1])
    if len(padding) == 4:
        return tuple(int(p) for p in padding)  # type: ignore[return-value]
    raise ArgumentError(
        f"padding must be an int, a pair or 4 values (top, bottom, left, right), got {padding}"
    )


_PAD_MODES = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


class Conv2d(Layer):
    """2-D convolution. ``Conv2d(nb_kernels, kernel_size, stride=1, padding=0, ...)``.

    The legacy form ``Conv2d(in_channels, out_channels, kernel_size, stride, padding)`` is
    accepted. ``padding`` is an int, (ph, pw) or (top, bottom, left, right); ``pad_mode``
    ``SAME_UPPER``/``SAME_LOWER`` computes it from the input size as ONNX does.
    """

    def __init__(
        self,
        nb_kernels: int,
        kernel_size: Any,
        *args: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        group: int = 1,
        bias: bool = True,
        pad_mode: str = "NOTSET",
        activation: str = "NOTSET",
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.in_channels = None
        if args:  # legacy Conv2d(in_channels, out_channels, kernel_size, stride, padding)
            self.in_channels, nb_kernels, kernel_size = nb_kernels, kernel_size, args[0]
            if len(args) > 1:
                stride = args[1]
            if len(args) > 2:
                padding = args[2]
        me = type(self).__name__
        if self.in_channels is not None:
            count(me, "in_channels", self.in_channels)
        self.pad_mode = choice(me, "pad_mode", pad_mode, _PAD_MODES)
        self.activation = choice(me, "activation", activation, ("NOTSET", "RELU"))
        self.nb_kernels = count(me, "nb_kernels", nb_kernels)
        self.kernel_size = _pair(counts(me, "kernel_size", kernel_size, 1))
        self.stride = _pair(counts(me, "stride", stride, 1))
        self.padding = _padding4(counts(me, "padding", padding, 0))
        self.dilation = _pair(counts(me, "dilation", dilation, 1))
        self.group = count(me, "group", group)
        self.bias = bias

    def initialize(self, x: Tensor) -> None:
        self.check_ndim(x, 4, "(N, C, H, W)")
        c = x.shape[1]
        if self.in_channels is not None and self.in_channels != c:
            raise ShapeError(
                f"{type(self).__name__}: built for {self.in_channels} input channels, got {x.shape}"
            )
        if c % self.group or self.nb_kernels % self.group:
            raise ShapeError(
                f"Conv2d: group {self.group} must divide channels {c} and kernels {self.nb_kernels}"
            )
        self.in_channels = c
        kh, kw = self.kernel_size
        fan_in = c // self.group * kh * kw
        # SINGA's initialisation: N(0, sqrt(2 / (fan_in + out))).
        std = math.sqrt(2.0 / (fan_in + self.nb_kernels))
        self.W = _param((self.nb_kernels, c // self.group, kh, kw), x).gaussian(0.0, std)
        if self.bias:
            self.b = _param((self.nb_kernels,), x)

    def forward(self, x: Tensor) -> Tensor:
        padding = self.padding
        if self.pad_mode in ("SAME_UPPER", "SAME_LOWER"):
            padding = ops.same_padding(
                x.shape[2:], self.kernel_size, self.stride, self.dilation, self.pad_mode
            )
        y = ops.conv2d(
            x, self.W, self.b if self.bias else None, self.stride, padding, self.dilation, self.group
        )
        return ops.relu(y) if self.activation == "RELU" else y


class SeparableConv2d(Layer):
    """Depthwise convolution (one filter per channel) followed by a 1x1 pointwise convolution.

    ``SeparableConv2d(nb_kernels, kernel_size, stride=1, padding=0, bias=False)``; as SINGA, the
    legacy form ``SeparableConv2d(in_channels, out_channels, kernel_size[, stride[, padding]])``
    (used by SINGA's Xception) is accepted too.
    """

    def __init__(
        self,
        nb_kernels: int,
        kernel_size: Any,
        *args: Any,
        stride: Any = 1,
        padding: Any = 0,
        bias: bool = False,
    ) -> None:
        super().__init__()
        self.in_channels = None
        if args:  # legacy SeparableConv2d(in_channels, out_channels, kernel_size, stride, padding)
            self.in_channels, nb_kernels, kernel_size = nb_kernels, kernel_size, args[0]
            if len(args) > 1:
                stride = args[1]
            if len(args) > 2:
                padding = args[2]
            if len(args) > 3:
                raise ArgumentError(f"SeparableConv2d: too many positional arguments {(nb_kernels, *args)}")
            count("SeparableConv2d", "in_channels", self.in_channels)
        self.nb_kernels = count("SeparableConv2d", "nb_kernels", nb_kernels)
        counts("SeparableConv2d", "kernel_size", kernel_size, 1)
        counts("SeparableConv2d", "stride", stride, 1)
        counts("SeparableConv2d", "padding", padding, 0)
        self.kernel_size, self.stride, self.padding, self.bias = kernel_size, stride, padding, bias

    def initialize(self, x: Tensor) -> None:
        self.check_ndim(x, 4, "(N, C, H, W)")
        c = x.shape[1]
        if self.in_channels is not None and self.in_channels != c:
            raise ShapeError(f"SeparableConv2d: built for {self.in_channels} input channels, got {x.shape}")
        self.depthwise_conv = Conv2d(
            c, self.kernel_size, stride=self.stride, padding=self.padding, group=c, bias=self.bias
        )
        self.point_conv = Conv2d(self.nb_kernels, 1, bias=self.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.point_conv(self.depthwise_conv(x))


class _Pool(Layer):
    is_max = True
    ndim = 2

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        is_max: bool | None = None,
        pad_mode: str = "NOTSET",
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> None:
        super().__init__()
        if is_max is not None:
            self.is_max = is_max
        me = type(self).__name__
        choice(me, "pad_mode", pad_mode, _PAD_MODES)
        counts(me, "kernel_size", kernel_size, 1)
        if stride is not None:
            counts(me, "stride", stride, 1)
        counts(me, "padding", padding, 0)
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.pad_mode, self.ceil_mode, self.count_include_pad = pad_mode, ceil_mode, count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        if self.ndim == 1:
            if self.is_max:
                return ops.max_pool1d(
                    x, self.kernel_size, self.stride, self.padding, ceil_mode=self.ceil_mode
                )
            return ops.avg_pool1d(
                x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad
            )
        padding = self.padding
        if self.pad_mode in ("SAME_UPPER", "SAME_LOWER"):
            k = _pair(self.kernel_size)
            s = _pair(self.stride if self.stride is not None else self.kernel_size)
            padding = ops.same_padding(x.shape[2:], k, s, (1, 1), self.pad_mode)
        if self.is_max:
            return ops.max_pool2d(x, self.kernel_size, self.stride, padding, ceil_mode=self.ceil_mode)
        return ops.avg_pool2d(
            x, self.kernel_size, self.stride, padding, self.ceil_mode, self.count_include_pad
        )


class Pooling2d(_Pool):
    """SINGA's generic pooling layer: max when ``is_max`` else average."""


class MaxPool2d(_Pool):
    is_max = True


class AvgPool2d(_Pool):
    is_max = False


class MaxPool1d(_Pool):
    is_max, ndim = True, 1


class AvgPool1d(_Pool):
    is_max, ndim = False, 1


class GlobalAvgPool2d(Layer):
    def forward(self, x: Tensor) -> Tensor:
        return ops.global_average_pool(x)


class GlobalMaxPool2d(Layer):
    def forward(self, x: Tensor) -> Tensor:
        return ops.global_max_pool(x)

"""Convolution and pooling layers (NCHW)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa_lite import ops
from singa_lite._args import choice, count, counts, ints, number, numbers
from singa_lite.errors import ArgumentError, ShapeError
from singa_lite.layer.base import Layer
from singa_lite.layer.dense import _param
from singa_lite.ops import window
from singa_lite.tensor import Tensor

_NUMBER = (int, float, np.integer, np.floating)


def _pair(owner: str, name: str, v: Any, low: int = 1) -> tuple[int, int]:
    """(h, w) from one integer or a pair, each >= ``low`` (kernel sizes, strides, dilations)."""
    counts(owner, name, v, low)  # first: its message names a bad element ("got -1" of (3, -1))
    return window.per_axis(owner, name, v, 2, low)  # type: ignore[return-value]


def _padding4(owner: str, padding: Any) -> tuple[int, ...]:
    """(top, bottom, left, right) from an int, a (ph, pw) pair, or a 4-tuple (SINGA's order)."""
    counts(owner, "padding", padding, 0)
    return window.flat(window.pads(owner, padding, 2))


_PAD_MODES = window.AUTO_PADS


def _legacy_form(name: str, first: Any, second: Any, args: tuple, stride: Any, padding: Any) -> tuple:
    """``(in_channels, nb_kernels, kernel_size, stride, padding)`` of a conv layer's arguments:
    ``(nb_kernels, kernel_size)``, or SINGA's legacy ``(in_channels, out_channels, kernel_size
    [, stride[, padding]])`` when positional arguments follow (in_channels is then checked)."""
    if not args:
        return None, first, second, stride, padding
    if len(args) > 3:
        raise ArgumentError(f"{name}: too many positional arguments {(first, second, *args)}")
    count(name, "in_channels", first)
    stride = args[1] if len(args) > 1 else stride
    padding = args[2] if len(args) > 2 else padding
    return first, second, args[0], stride, padding


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
        me = type(self).__name__
        self.in_channels, nb_kernels, kernel_size, stride, padding = _legacy_form(
            me, nb_kernels, kernel_size, args, stride, padding
        )
        self.pad_mode = choice(me, "pad_mode", pad_mode, _PAD_MODES)
        self.activation = choice(me, "activation", activation, ("NOTSET", "RELU"))
        self.nb_kernels = count(me, "nb_kernels", nb_kernels)
        self.kernel_size = _pair(me, "kernel_size", kernel_size)
        self.stride = _pair(me, "stride", stride)
        self.padding = _padding4(me, padding)
        self.dilation = _pair(me, "dilation", dilation)
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
            padding = window.same_padding(
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
        self.in_channels, nb_kernels, kernel_size, stride, padding = _legacy_form(
            "SeparableConv2d", nb_kernels, kernel_size, args, stride, padding
        )
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


class Conv1d(Layer):
    """1-D convolution of ``(N, C, L)``: ``Conv1d(nb_kernels, kernel_size, stride=1, padding=0,
    dilation=1, group=1, bias=True)``; ``W`` is ``(nb_kernels, C/group, kernel_size)``.

    ``padding`` is an int or ``(left, right)``. The form ``Conv1d(in_channels, out_channels,
    kernel_size, stride, padding)`` is accepted too, as for ``Conv2d``.
    """

    def __init__(
        self,
        nb_kernels: int,
        kernel_size: int,
        *args: Any,
        stride: int = 1,
        padding: Any = 0,
        dilation: int = 1,
        group: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.in_channels, nb_kernels, kernel_size, stride, padding = _legacy_form(
            "Conv1d", nb_kernels, kernel_size, args, stride, padding
        )
        self.nb_kernels = count("Conv1d", "nb_kernels", nb_kernels)
        self.kernel_size = count("Conv1d", "kernel_size", kernel_size)
        self.stride = count("Conv1d", "stride", stride)
        self.dilation = count("Conv1d", "dilation", dilation)
        counts("Conv1d", "padding", padding, 0)
        (self.padding,) = window.pads("Conv1d", padding, 1)  # an int or (left, right)
        self.group = count("Conv1d", "group", group)
        self.bias = bias

    def initialize(self, x: Tensor) -> None:
        self.check_ndim(x, 3, "(N, C, L)")
        c = x.shape[1]
        if self.in_channels is not None and self.in_channels != c:
            raise ShapeError(f"Conv1d: built for {self.in_channels} input channels, got {x.shape}")
        if c % self.group or self.nb_kernels % self.group:
            raise ShapeError(
                f"Conv1d: group {self.group} must divide channels {c} and kernels {self.nb_kernels}"
            )
        self.in_channels = c
        fan_in = c // self.group * self.kernel_size
        std = math.sqrt(2.0 / (fan_in + self.nb_kernels))  # as Conv2d (SINGA's rule)
        self.W = _param((self.nb_kernels, c // self.group, self.kernel_size), x).gaussian(0.0, std)
        if self.bias:
            self.b = _param((self.nb_kernels,), x)

    def forward(self, x: Tensor) -> Tensor:
        b = self.b if self.bias else None
        return ops.conv1d(x, self.W, b, self.stride, self.padding, self.dilation, self.group)


class ConvTranspose2d(Layer):
    """Transposed 2-D convolution (the gradient of ``Conv2d`` with respect to its input):
    ``ConvTranspose2d(nb_kernels, kernel_size, stride=1, padding=0, output_padding=0,
    dilation=1, group=1, bias=True)``. ``W`` is ``(C_in, nb_kernels/group, kh, kw)`` (PyTorch's
    and ONNX's layout); the output is ``(H - 1) * stride - pad_top - pad_bottom + dilation *
    (kh - 1) + output_padding + 1`` high, and likewise wide.
    """

    def __init__(
        self,
        nb_kernels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        output_padding: Any = 0,
        dilation: Any = 1,
        group: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        me = "ConvTranspose2d"
        self.nb_kernels = count(me, "nb_kernels", nb_kernels)
        self.kernel_size = _pair(me, "kernel_size", kernel_size)
        self.stride = _pair(me, "stride", stride)
        self.padding = _padding4(me, padding)
        self.output_padding = _pair(me, "output_padding", output_padding, 0)
        self.dilation = _pair(me, "dilation", dilation)
        for op, s, d in zip(self.output_padding, self.stride, self.dilation):
            if op >= max(s, d):
                raise ArgumentError(f"{me}: output_padding {op} must be smaller than stride or dilation")
        self.group = count(me, "group", group)
        self.bias = bias

    def initialize(self, x: Tensor) -> None:
        self.check_ndim(x, 4, "(N, C, H, W)")
        c = x.shape[1]
        if c % self.group or self.nb_kernels % self.group:
            raise ShapeError(
                f"ConvTranspose2d: group {self.group} must divide channels {c} and kernels {self.nb_kernels}"
            )
        kh, kw = self.kernel_size
        per_group = self.nb_kernels // self.group
        std = math.sqrt(2.0 / (c // self.group * kh * kw + self.nb_kernels))  # as Conv2d
        self.W = _param((c, per_group, kh, kw), x).gaussian(0.0, std)
        if self.bias:
            self.b = _param((self.nb_kernels,), x)

    def forward(self, x: Tensor) -> Tensor:
        b = self.b if self.bias else None
        return ops.conv_transpose2d(
            x, self.W, b, self.stride, self.padding, self.output_padding, self.dilation, self.group
        )


_UPSAMPLE_MODES = ("nearest", "linear", "bilinear", "trilinear", "bicubic")


class Upsample(Layer):
    """Resize the spatial axes of ``(N, C, *spatial)`` by ``scale_factor`` or to ``size``, as
    ``torch.nn.Upsample``: ``mode`` nearest (the floor of the scaled position), linear,
    bilinear, trilinear or bicubic, with ``align_corners`` for the last four."""

    def __init__(
        self,
        size: Any = None,
        scale_factor: Any = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
    ) -> None:
        super().__init__()
        if (size is None) == (scale_factor is None):
            raise ArgumentError("Upsample: give exactly one of size and scale_factor")
        self.mode = choice("Upsample", "mode", mode, _UPSAMPLE_MODES)
        if size is not None:
            ints("Upsample", "size", size, low=1)
        elif isinstance(scale_factor, _NUMBER):
            number("Upsample", "scale_factor", scale_factor, 0.0, low_open=True)
        else:
            numbers("Upsample", "scale_factor", scale_factor, 0.0, low_open=True)
        if align_corners is not None and mode == "nearest":
            raise ArgumentError("Upsample: align_corners applies to the interpolating modes only")
        self.size, self.scale_factor, self.align_corners = size, scale_factor, bool(align_corners)

    def forward(self, x: Tensor) -> Tensor:
        k = x.ndim() - 2
        if k < 1:
            raise ShapeError(f"Upsample: expects (N, C, *spatial), got {x.shape}")

        def per_axis(v: Any, what: str) -> list:
            vs = [v] * k if isinstance(v, _NUMBER) else list(v)
            if len(vs) != k:
                raise ShapeError(f"Upsample: {what} {v!r} does not fit {k} spatial axes of {x.shape}")
            return vs

        sizes = None if self.size is None else [*x.shape[:2], *(int(s) for s in per_axis(self.size, "size"))]
        scales = (
            None
            if sizes is not None
            else [1.0, 1.0, *(float(s) for s in per_axis(self.scale_factor, "scale_factor"))]
        )
        if self.mode == "nearest":
            return ops.resize(x, scales, sizes, "nearest", "asymmetric", "floor")
        mode = "cubic" if self.mode == "bicubic" else "linear"
        coords = "align_corners" if self.align_corners else "half_pixel"
        # PyTorch's bicubic uses a = -0.75 and reads outside-the-edge taps from the edge.
        return ops.resize(x, scales, sizes, mode, coords, cubic_coeff_a=-0.75)


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
            me = type(self).__name__
            k = _pair(me, "kernel_size", self.kernel_size)
            s = k if self.stride is None else _pair(me, "stride", self.stride)
            padding = window.same_padding(x.shape[2:], k, s, (1, 1), self.pad_mode)
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

"""Convolutions under SINGA's names: ``conv2d`` (groups, depthwise), ``conv_transpose2d`` and
``conv1d``, with their operators ``Conv2d``, ``ConvTranspose2d`` and ``Conv1d``.

These are the convolution engine (``ops.conv_general``) at a fixed rank: the same operator
family as ``conv_nd``, its strategies chosen by ``ops.conv_select.select``. ``conv_output_size``
and ``same_padding`` are the window geometry of ``ops.window``.

Padding is ``(top, bottom, left, right)`` (SINGA's convention; ONNX's ``pads`` are
``(top, left, bottom, right)``), or an int, or ``(ph, pw)``.
"""

from __future__ import annotations

from typing import Any

from singa_lite import _args
from singa_lite.ops.conv_blocks import Pads as Pads  # the helpers stay importable from here
from singa_lite.ops.conv_blocks import col2im as col2im
from singa_lite.ops.conv_blocks import im2col as im2col
from singa_lite.ops.conv_blocks import pad_nhwc as pad_nhwc
from singa_lite.ops.conv_general import ConvNd, ConvTransposeNd
from singa_lite.ops.window import conv_output_size, same_padding
from singa_lite.tensor import Tensor

__all__ = [
    "Conv1d",
    "Conv2d",
    "ConvTranspose2d",
    "conv1d",
    "conv2d",
    "conv_output_size",
    "conv_transpose2d",
    "same_padding",
]


class Conv2d(ConvNd):
    """2-D convolution (cross-correlation) of NCHW ``x`` with ``W (O, C/group, kh, kw)``."""

    def __init__(self, stride: Any = 1, padding: Any = 0, dilation: Any = 1, group: int = 1) -> None:
        super().__init__(2, stride, padding, dilation, group)


class ConvTranspose2d(ConvTransposeNd):
    """Transposed convolution (the gradient of ``Conv2d`` w.r.t. its input) with
    ``W (C_in, C_out/group, kh, kw)``, PyTorch's and ONNX's layout."""

    def __init__(
        self, stride: Any = 1, padding: Any = 0, output_padding: Any = 0, dilation: Any = 1, group: int = 1
    ) -> None:
        super().__init__(2, stride, padding, output_padding, dilation, group)


class Conv1d(ConvNd):
    """1-D convolution of ``(N, C, L)`` with ``W (O, C/group, k)``; padding an int or
    ``(left, right)``. It runs as a conv2d of height 1."""

    def __init__(self, stride: Any = 1, padding: Any = 0, dilation: Any = 1, group: int = 1) -> None:
        me = "Conv1d"
        super().__init__(
            1, _args.count(me, "stride", stride), padding, _args.count(me, "dilation", dilation), group
        )


def conv2d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    group: int = 1,
) -> Tensor:
    """2-D convolution of ``x (N, C, H, W)`` with ``W (O, C/group, kh, kw)`` and optional ``b (O,)``.

    ``stride``/``dilation``: int or ``(sh, sw)``; ``padding``: int, ``(ph, pw)`` or
    ``(top, bottom, left, right)``. ``group == C`` is a depthwise convolution.

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> x = tensor.from_numpy(np.ones((2, 3, 8, 8), np.float32))
    >>> conv2d(x, tensor.from_numpy(np.ones((4, 3, 3, 3), np.float32)), padding=1).shape
    (2, 4, 8, 8)
    """
    op = Conv2d(stride, padding, dilation, group)
    return (op(x, W) if b is None else op(x, W, b))[0]


def conv_transpose2d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    dilation: Any = 1,
    group: int = 1,
) -> Tensor:
    """Transposed 2-D convolution; ``W (C_in, C_out/group, kh, kw)``, output
    ``(H - 1) * stride - pad_top - pad_bottom + dilation * (kh - 1) + output_padding + 1`` high."""
    op = ConvTranspose2d(stride, padding, output_padding, dilation, group)
    return (op(x, W) if b is None else op(x, W, b))[0]


def conv1d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: int = 1,
    padding: Any = 0,
    dilation: int = 1,
    group: int = 1,
) -> Tensor:
    """1-D convolution of ``x (N, C, L)`` with ``W (O, C/group, k)``; padding int or (left, right)."""
    op = Conv1d(stride, padding, dilation, group)
    return (op(x, W) if b is None else op(x, W, b))[0]


# The inference paths build on the helpers above (they live apart to keep files small).

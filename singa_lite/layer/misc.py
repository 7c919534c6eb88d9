"""Parameter-free layers: activations and shape plumbing."""

from __future__ import annotations

from typing import Any

from singa_lite import ops
from singa_lite._args import axis as axis_
from singa_lite._args import ints, number
from singa_lite.layer.base import Layer
from singa_lite.tensor import Tensor


class ReLU(Layer):
    def forward(self, x: Tensor) -> Tensor:
        return ops.relu(x)


class Sigmoid(Layer):
    def forward(self, x: Tensor) -> Tensor:
        return ops.sigmoid(x)


class Tanh(Layer):
    def forward(self, x: Tensor) -> Tensor:
        return ops.tanh(x)


class LeakyReLU(Layer):
    def __init__(self, a: float = 0.01) -> None:
        super().__init__()
        number("LeakyReLU", "a", a)
        self.a = a

    def forward(self, x: Tensor) -> Tensor:
        return ops.leakyrelu(x, self.a)


class Gelu(Layer):
    def forward(self, x: Tensor) -> Tensor:
        return ops.gelu(x)


class SoftMax(Layer):
    """Softmax over ``axis`` (SINGA's default: 1)."""

    def __init__(self, axis: int = 1) -> None:
        super().__init__()
        self.axis = axis_("SoftMax", "axis", axis)

    def forward(self, x: Tensor) -> Tensor:
        return ops.softmax(x, self.axis)


class Flatten(Layer):
    """Flatten to 2-D: (prod(shape[:axis]), prod(shape[axis:]))."""

    def __init__(self, axis: int = 1) -> None:
        super().__init__()
        self.axis = axis_("Flatten", "axis", axis)

    def forward(self, x: Tensor) -> Tensor:
        return ops.flatten(x, self.axis)


class Cat(Layer):
    """Concatenate a list of tensors along ``axis``."""

    def __init__(self, axis: int = 0) -> None:
        super().__init__()
        self.axis = axis_("Cat", "axis", axis)

    def forward(self, xs: list[Tensor]) -> Tensor:
        return ops.cat(list(xs), self.axis)


class Reshape(Layer):
    """Reshape to ``shape`` (given here or to ``forward``, as SINGA's ``forward(x, shape)``)."""

    def __init__(self, shape: Any = None) -> None:
        super().__init__()
        if shape is not None:  # None: the shape comes with each call
            ints("Reshape", "shape", shape, scalar=False)
        self.shape = shape

    def forward(self, x: Tensor, shape: Any = None) -> Tensor:
        return ops.reshape(x, tuple(shape if shape is not None else self.shape))


class Add(Layer):
    """Elementwise sum of two tensors (residual connections)."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return ops.add(a, b)

"""Fully connected layers and embeddings."""

from __future__ import annotations

import math
from typing import Any

from singa_lite import ops
from singa_lite.errors import ShapeError
from singa_lite.layer.base import Layer
from singa_lite.tensor import Tensor


def _param(shape: tuple, like: Tensor) -> Tensor:
    """A trainable tensor on ``like``'s device, in its float dtype (float32 for int inputs)."""
    dtype = like.dtype if like.dtype.kind == "f" else "float32"
    return Tensor(shape, like.device, dtype, requires_grad=True, stores_grad=True)


class Linear(Layer):
    """``y = x @ W + b`` with ``W`` of shape (in, out) (SINGA's layout).

    ``Linear(out_features)`` learns ``in`` from the first input; the legacy form
    ``Linear(in_features, out_features)`` is accepted too.
    """

    def __init__(self, out_features: int, *args: Any, bias: bool = True, **kwargs: Any) -> None:
        super().__init__()
        self.in_features = None
        if args:  # legacy Linear(in, out[, bias])
            self.in_features, out_features = out_features, args[0]
            if len(args) > 1:
                bias = bool(args[1])
        self.out_features = int(out_features)
        self.bias = bias

    def initialize(self, x: Tensor) -> None:
        in_features = x.shape[-1]
        if self.in_features is not None and self.in_features != in_features:
            raise ShapeError(
                f"Linear: built for {self.in_features} input features, got input of shape {x.shape}"
            )
        self.in_features = in_features
        # SINGA's initialisation: N(0, sqrt(2 / (in + out))).
        self.W = _param((in_features, self.out_features), x).gaussian(
            0.0, math.sqrt(2.0 / (in_features + self.out_features))
        )
        if self.bias:
            self.b = _param((self.out_features,), x)

    def forward(self, x: Tensor) -> Tensor:
        y = ops.matmul(x, self.W)
        return ops.add(y, self.b) if self.bias else y


class Gemm(Layer):
    """ONNX Gemm as a layer: ``alpha * op(x) @ op(W) + beta * b`` with optional transposes."""

    def __init__(
        self,
        nb_kernels: int,
        alpha: float = 1.0,
        beta: float = 1.0,
        transA: bool = False,
        transB: bool = True,
        bias: bool = True,
        bias_shape: tuple | None = None,
    ) -> None:
        super().__init__()
        self.nb_kernels = int(nb_kernels)
        self.alpha, self.beta = alpha, beta
        self.transA, self.transB = bool(transA), bool(transB)
        self.bias = bias
        self.bias_shape = bias_shape

    def initialize(self, x: Tensor) -> None:
        in_features = x.shape[0] if self.transA else x.shape[1]
        shape = (self.nb_kernels, in_features) if self.transB else (in_features, self.nb_kernels)
        std = math.sqrt(2.0 / (in_features + self.nb_kernels))
        self.W = _param(shape, x).gaussian(0.0, std)
        if self.bias:
            self.b = _param(self.bias_shape or (1, self.nb_kernels), x)

    def forward(self, x: Tensor) -> Tensor:
        c = self.b if self.bias else None
        return ops.gemm(x, self.W, c, self.alpha, self.beta, self.transA, self.transB)


class Embedding(Layer):
    """Look up rows of ``W`` (input_dim, output_dim) for integer indices."""

    def __init__(self, input_dim: int, output_dim: int, initializer: str = "gaussian") -> None:
        super().__init__()
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self.initializer = initializer

    def initialize(self, x: Tensor) -> None:
        self.W = Tensor((self.input_dim, self.output_dim), x.device, requires_grad=True, stores_grad=True)
        self.W.gaussian(0.0, 1.0 / math.sqrt(self.output_dim))

    def forward(self, x: Tensor) -> Tensor:
        return ops.gather(self.W, 0, x)

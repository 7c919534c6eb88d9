"""Fully connected layers and embeddings."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from singa_lite import initializer as init
from singa_lite import ops, tensor
from singa_lite._args import count, integer, number
from singa_lite.errors import ArgumentError, ShapeError
from singa_lite.layer.base import Layer
from singa_lite.ops import linalg
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
            self.in_features, out_features = count("Linear", "in_features", out_features), args[0]
            if len(args) > 1:
                bias = bool(args[1])
        self.out_features = count("Linear", "out_features", out_features)
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
        # The bias goes into the product's fresh array (no one else reads it).
        return linalg.BiasAdd()(y, self.b)[0] if self.bias else y


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
        self.nb_kernels = count("Gemm", "nb_kernels", nb_kernels)
        number("Gemm", "alpha", alpha)
        number("Gemm", "beta", beta)
        self.alpha, self.beta = alpha, beta  # as given, as ops.gemm takes them
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
    """Look up rows of ``W`` (input_dim, output_dim) for integer indices.

    ``initializer`` fills ``W``: ``"gaussian"`` (the default) draws N(0, 1/sqrt(output_dim)),
    ``"uniform"`` draws U(-1/sqrt(output_dim), 1/sqrt(output_dim)); any other name of
    :mod:`singa_lite.initializer` (``"xavier_uniform"``, ``"he_normal"`` ...) applies that
    initialiser with fans (input_dim, output_dim); a callable is called with ``W`` and fills it
    in place. An unknown name raises ``ArgumentError`` here, not on the first batch.

    ``padding_idx`` (as in PyTorch) names a row that starts at zero and gets no gradient, so a
    padding token always maps to the same vector. ``dtype`` is the table's (float32 by
    default: the integer indices say nothing about it).
    """

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        initializer: str | Callable[[Tensor], Any] = "gaussian",
        padding_idx: int | None = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.dtype = tensor.as_dtype(dtype if dtype is not None else tensor.float32)
        if self.dtype.kind != "f":
            raise ArgumentError(f"Embedding: dtype must be a float type, got {self.dtype}")
        self.input_dim = count("Embedding", "input_dim", input_dim)
        self.output_dim = count("Embedding", "output_dim", output_dim)
        self._fill = _embedding_filler(initializer)
        self.initializer = initializer
        if padding_idx is not None:
            n = self.input_dim
            padding_idx = integer("Embedding", "padding_idx", padding_idx, -n, n - 1) % n
        self.padding_idx = padding_idx

    @classmethod
    def from_pretrained(
        cls, embeddings: Any, freeze: bool = True, padding_idx: int | None = None
    ) -> Embedding:
        """An Embedding whose table is a copy of ``embeddings`` (a 2-D float array or Tensor,
        rows = tokens). ``freeze`` (the default, as in PyTorch) keeps the table out of training;
        ``padding_idx`` marks a row that gets no gradient (its values are kept, not zeroed)."""
        table = tensor.to_numpy(embeddings) if isinstance(embeddings, Tensor) else np.asarray(embeddings)
        if table.ndim != 2 or table.dtype.kind != "f":
            raise ArgumentError(
                f"Embedding.from_pretrained: expects a 2-D float table, got shape {table.shape} "
                f"and dtype {table.dtype}"
            )
        table = table.copy()
        layer = cls(
            table.shape[0], table.shape[1], lambda w: w.copy_from_numpy(table), padding_idx, table.dtype
        )
        layer._pretrained = table
        layer.freeze = bool(freeze)
        return layer

    freeze = False
    _pretrained: Any = None

    def initialize(self, x: Tensor) -> None:
        shape = (self.input_dim, self.output_dim)
        self.W = Tensor(
            shape, x.device, self.dtype, requires_grad=not self.freeze, stores_grad=not self.freeze
        )
        self._fill(self.W)
        if self.padding_idx is not None and self._pretrained is None:
            self.W.data[self.padding_idx] = 0

    def forward(self, x: Tensor) -> Tensor:
        return ops.embedding(x, self.W, self.padding_idx)


def _embedding_filler(initializer: Any) -> Callable[[Tensor], Any]:
    """The function that fills an Embedding's ``W`` for the ``initializer`` argument."""
    if callable(initializer):
        return initializer
    if not isinstance(initializer, str):
        raise ArgumentError(
            f"Embedding: initializer must be a name or a callable, got {type(initializer).__name__}"
        )
    # SINGA's two names keep their Embedding meaning, scaled so rows have unit expected norm.
    if initializer == "gaussian":
        return lambda w: w.gaussian(0.0, 1.0 / math.sqrt(w.shape[1]))
    if initializer == "uniform":
        return lambda w: w.uniform(-1.0 / math.sqrt(w.shape[1]), 1.0 / math.sqrt(w.shape[1]))
    try:
        return init.get(initializer)
    except ArgumentError as e:
        raise ArgumentError(f"Embedding: {e}") from None

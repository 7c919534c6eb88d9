"""Position embeddings: sinusoidal and learned tables added to the input, and rotary.

The sinusoidal and learned layers take ``(N, T, E)`` (``batch_first=True``) or ``(T, N, E)``
and add the rows for positions ``offset .. offset + T - 1``. Rotary embedding instead rotates
the queries and keys of attention (give it to ``MultiHeadAttention(rotary=...)``).

The sinusoidal and rotary tables are constants of the layer, made once per length, device and
dtype; they are not states, so checkpoints do not hold them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite import ops
from singa_lite._args import bad, count, number
from singa_lite.errors import ArgumentError, ShapeError
from singa_lite.layer.base import Layer
from singa_lite.layer.dense import _param
from singa_lite.tensor import Tensor


def _time_axis(x: Tensor, batch_first: bool, owner: str) -> int:
    if x.ndim() != 3:
        raise ShapeError(
            f"{owner}: expects {'(N, T, E)' if batch_first else '(T, N, E)'} input, got {x.shape}"
        )
    return 1 if batch_first else 0


def _offset(owner: str, offset: Any) -> int:
    if not isinstance(offset, (int, np.integer)):  # a float position would be a bug upstream
        raise bad(owner, "offset", "be an integer >= 0", offset)
    return count(owner, "offset", offset, 0)


def _base(owner: str, base: Any) -> float:
    """``base`` as a float > 1: the angles' frequencies fall with the feature index only then."""
    return number(owner, "base", base, 1.0, low_open=True)


class _Tables:
    """Constant tables by (length, width, device, dtype), built by ``make(length, width)`` as
    float64 NumPy arrays and uploaded once; only the latest set is kept."""

    def __init__(self, make: Any) -> None:
        self.make = make
        self.cache: dict[tuple, tuple[Tensor, ...]] = {}

    def get(self, length: int, width: int, like: Tensor) -> tuple[Tensor, ...]:
        key = (length, width, like.device, like.dtype)
        found = self.cache.get(key)
        if found is None:
            self.cache.clear()
            arrays = self.make(length, width)
            found = tuple(
                Tensor(data=a.astype(like.dtype), device=like.device, requires_grad=False) for a in arrays
            )
            self.cache[key] = found
        return found


class SinusoidalPositionalEmbedding(Layer):
    """Adds ``sin(p / base^(2i/E))`` to feature ``2i`` and ``cos(...)`` to feature ``2i + 1`` at
    position ``p`` (Vaswani et al.); no parameters."""

    def __init__(self, base: float = 10000.0, batch_first: bool = False) -> None:
        super().__init__()
        self.base, self.batch_first = _base("SinusoidalPositionalEmbedding", base), bool(batch_first)
        self._tables = _Tables(self._make)

    def _make(self, length: int, e: int) -> tuple[np.ndarray]:
        pos = np.arange(length, dtype=np.float64)[:, None]
        freq = self.base ** (-np.arange(0, e, 2, dtype=np.float64) / e)
        table = np.zeros((length, e))
        table[:, 0::2] = np.sin(pos * freq)
        table[:, 1::2] = np.cos(pos * freq[: e // 2])
        return (table,)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        axis = _time_axis(x, self.batch_first, "SinusoidalPositionalEmbedding")
        offset = _offset("SinusoidalPositionalEmbedding", offset)
        t = x.shape[axis]
        (table,) = self._tables.get(offset + t, x.shape[2], x)
        rows = ops.slice(table, [offset], [offset + t], [0]) if offset else table
        return ops.add(x, rows if self.batch_first else ops.unsqueeze(rows, [1]))


class LearnedPositionalEmbedding(Layer):
    """Adds a learnt vector per position: ``W (max_len, E)``, drawn from N(0, 0.02) (GPT-2's)."""

    def __init__(self, max_len: int, batch_first: bool = False, std: float = 0.02) -> None:
        super().__init__()
        self.max_len = count("LearnedPositionalEmbedding", "max_len", max_len)
        self.batch_first = bool(batch_first)
        self.std = number("LearnedPositionalEmbedding", "std", std, 0.0)

    def initialize(self, x: Tensor, offset: int = 0) -> None:
        _time_axis(x, self.batch_first, "LearnedPositionalEmbedding")
        self.W = _param((self.max_len, x.shape[2]), x).gaussian(0.0, self.std)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        axis = _time_axis(x, self.batch_first, "LearnedPositionalEmbedding")
        offset = _offset("LearnedPositionalEmbedding", offset)
        t = x.shape[axis]
        if offset + t > self.max_len:
            raise ShapeError(
                f"LearnedPositionalEmbedding: positions up to {offset + t} exceed max_len {self.max_len}"
            )
        rows = self.W if (offset, t) == (0, self.max_len) else ops.slice(self.W, [offset], [offset + t], [0])
        return ops.add(x, rows if self.batch_first else ops.unsqueeze(rows, [1]))


class RotaryEmbedding(Layer):
    """Rotary position embedding (RoFormer) of ``x (..., T, D)``: feature pair ``i`` of position
    ``p`` turns by the angle ``p * base^(-2i/R)``; ``rotary_dim`` (default: all ``D``) features
    are rotated, the rest pass through. Pairs are the two halves (``interleaved=False``, as
    GPT-NeoX/LLaMA) or neighbours (``interleaved=True``, as GPT-J). No parameters."""

    def __init__(
        self, base: float = 10000.0, rotary_dim: int | None = None, interleaved: bool = False
    ) -> None:
        super().__init__()
        if rotary_dim is not None and (count("RotaryEmbedding", "rotary_dim", rotary_dim) % 2):
            raise ArgumentError(f"RotaryEmbedding: rotary_dim must be even, got {rotary_dim}")
        self.base, self.rotary_dim = _base("RotaryEmbedding", base), rotary_dim
        self.interleaved = bool(interleaved)
        self._tables = _Tables(self._make)

    def _make(self, length: int, rd: int) -> tuple[np.ndarray, np.ndarray]:
        angle = np.arange(length, dtype=np.float64)[:, None] * self.base ** (-np.arange(0, rd, 2) / rd)
        return np.cos(angle), np.sin(angle)

    def tables(self, length: int, dim: int, like: Tensor) -> tuple[Tensor, Tensor]:
        """The ``cos`` and ``sin`` tables ``(length, R)`` for ``dim`` features, like ``like``."""
        rd = dim if self.rotary_dim is None else self.rotary_dim
        if rd > dim or rd % 2:
            raise ShapeError(
                f"RotaryEmbedding: cannot rotate {rd} of {dim} features (an even count <= {dim})"
            )
        cos, sin = self._tables.get(length, rd, like)
        return cos, sin

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        if x.ndim() < 2:
            raise ShapeError(f"RotaryEmbedding: expects (..., T, D) input, got {x.shape}")
        offset = _offset("RotaryEmbedding", offset)
        t = x.shape[-2]
        cos, sin = self.tables(offset + t, x.shape[-1], x)
        if offset:
            cos = ops.slice(cos, [offset], [offset + t], [0])
            sin = ops.slice(sin, [offset], [offset + t], [0])
        return ops.rotary_embedding(x, cos, sin, self.interleaved)

"""Embeddings: table lookup with a padding row, and rotary position embedding.

``embedding`` is ONNX Gather on axis 0 (and exports as one) whose backward leaves the row
``padding_idx`` without gradient, as ``torch.nn.functional.embedding`` does, so a padding
token's vector stays what it was set to (zeros, by the layer).

``rotary_embedding`` rotates pairs of features by position-dependent angles (Su et al.,
RoFormer): for each pair ``(a, b)`` and its angle's ``cos``/``sin``,
``(a cos - b sin, a sin + b cos)``. The pairs are the two halves of the rotated features
(``interleaved=False``, as GPT-NeoX and LLaMA) or neighbours ``(0, 1), (2, 3)...``
(``interleaved=True``, as GPT-J); ONNX RotaryEmbedding has both.
"""

from __future__ import annotations

from typing import Any

import numpy as np  # shape arithmetic only (CuPy may lack broadcast_shapes)

from singa_lite import _args
from singa_lite.autograd import Operator
from singa_lite.errors import DTypeError
from singa_lite.ops._util import unbroadcast
from singa_lite.ops.indexing import Gather, _index_tensor
from singa_lite.tensor import Tensor

__all__ = ["Embedding", "Rotary", "embedding", "rotary_embedding"]


class Embedding(Gather):
    """Rows of ``W`` at integer ``indices``; the row ``padding_idx`` gets no gradient."""

    def __init__(self, padding_idx: int | None = None) -> None:
        super().__init__(0)
        self.name = "embedding"
        # Its range depends on the table: embedding() checks that.
        self.padding_idx = (
            None if padding_idx is None else _args.integer(self.name, "padding_idx", padding_idx)
        )

    def forward(self, w: Any, indices: Any) -> Any:
        if w.ndim != 2:
            raise self.error("W must be a (num_embeddings, dim) table", w, indices)
        return super().forward(w, indices)

    def backward(self, dy: Any) -> tuple:
        dw, _ = super().backward(dy)
        if self.padding_idx is not None:
            dw[self.padding_idx] = 0
        return dw, None


class Rotary(Operator):
    """Rotate the first ``2 * cos.shape[-1]`` features of ``x (..., T, D)`` by angles whose
    ``cos``/``sin`` ``(T, R)`` (or anything broadcasting to ``x``'s ``(..., T, R)``) are given;
    the remaining features pass through."""

    def __init__(self, interleaved: bool = False) -> None:
        super().__init__("rotary_embedding")
        self.interleaved = bool(interleaved)

    def _halves(self, a: Any, r: int) -> tuple[Any, Any]:
        """The two members of each rotated pair, as views of ``a``."""
        if self.interleaved:
            return a[..., 0 : 2 * r : 2], a[..., 1 : 2 * r : 2]
        return a[..., :r], a[..., r : 2 * r]

    def forward(self, x: Any, cos: Any, sin: Any) -> Any:
        for a in (x, cos, sin):
            if a.dtype.kind != "f":
                raise DTypeError(f"{self.name}: x, cos and sin must be floating point, got {a.dtype}")
        r = cos.shape[-1] if cos.ndim else 0
        if cos.shape != sin.shape or x.ndim < 2 or r == 0 or 2 * r > x.shape[-1]:
            raise self.error("cos and sin must be (..., T, R) with 0 < 2R <= the features of x", x, cos, sin)
        try:
            np.broadcast_shapes(x.shape[:-1] + (r,), cos.shape)
        except ValueError:
            raise self.error("cos and sin must broadcast to x's (..., T, R)", x, cos, sin) from None
        self.r, self.x = r, x
        self.cos, self.sin = cos.astype(x.dtype, copy=False), sin.astype(x.dtype, copy=False)
        a, b = self._halves(x, r)
        y = x.copy()
        ya, yb = self._halves(y, r)
        ya[...] = a * self.cos - b * self.sin
        yb[...] = a * self.sin + b * self.cos
        return y

    def backward(self, dy: Any) -> tuple:
        r, c, s = self.r, self.cos, self.sin
        da, db = self._halves(dy, r)
        dx = None
        if self.needs_grad[0]:
            dx = dy.copy()
            dxa, dxb = self._halves(dx, r)
            # The transpose of the rotation: the same angles turned back.
            dxa[...] = da * c + db * s
            dxb[...] = db * c - da * s
        a, b = self._halves(self.x, r)
        dcos = dsin = None
        if self.needs_grad[1]:
            dcos = unbroadcast(da * a + db * b, c.shape).astype(self.inputs[1].dtype, copy=False)
        if self.needs_grad[2]:
            dsin = unbroadcast(db * a - da * b, s.shape).astype(self.inputs[2].dtype, copy=False)
        return dx, dcos, dsin


def embedding(indices: Any, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """The rows of ``weight (num_embeddings, dim)`` at ``indices``: shape ``indices.shape + (dim,)``.

    ``padding_idx`` (negative counts from the end) names a row that gets no gradient. Indices
    may be ints, arrays or integer Tensors; out-of-range ones raise ``ShapeError``.

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> w = tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(3, 2))
    >>> tensor.to_numpy(embedding(np.array([2, 0]), w)).tolist()
    [[4.0, 5.0], [0.0, 1.0]]
    """
    n = weight.shape[0] if _args.tensor("embedding", "weight", weight).ndim() else 0
    if padding_idx is not None:
        # The range follows from the table: an argument that does not fit it is still the bad one.
        padding_idx = _args.integer("embedding", "padding_idx", padding_idx, -n, n - 1) % n
    op = Embedding(padding_idx)
    return op(weight, _index_tensor(op, indices, weight, 0, "embedding"))[0]


def rotary_embedding(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False) -> Tensor:
    """Rotary position embedding of ``x (..., T, D)`` with ``cos``/``sin`` of shape ``(T, R)``
    (or broadcasting to ``x``'s ``(..., T, R)``), ``2R <= D``: each of the ``R`` feature pairs
    ``(a, b)`` becomes ``(a cos - b sin, a sin + b cos)``; features past ``2R`` pass through.

    Pairs are the halves ``(i, i + R)`` or, with ``interleaved``, neighbours ``(2i, 2i + 1)``.
    """
    return Rotary(interleaved)(x, cos, sin)[0]

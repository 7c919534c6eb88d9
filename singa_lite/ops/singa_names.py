"""SINGA's functional API where its names or argument orders differ from ``singa_lite.ops``.

``singa_lite.autograd`` looks names up here before ``ops``, so SINGA code gets SINGA's
meaning: ``autograd.where(x, y, condition)`` (condition last), ``autograd.round`` rounding
halves away from zero (C's ``round``, as SINGA's kernel does) while ``ops.round`` is ONNX's
halves-to-even (``autograd.rounde`` here), ``autograd.shape`` a function, not a module;
``autograd.dropout`` and ``autograd.batchnorm_2d`` follow ``autograd.training``, where the
``ops`` functions take ``training`` as an argument. ``ops`` keeps the NumPy/ONNX conventions
its own code and the ONNX importer rely on.

>>> import numpy as np
>>> from singa_lite import autograd, tensor
>>> x = tensor.from_numpy(np.array([-2.5, -0.5, 0.5, 1.5, 2.5]))
>>> tensor.to_numpy(autograd.round(x)).tolist(), tensor.to_numpy(autograd.rounde(x)).tolist()
([-3.0, -1.0, 1.0, 2.0, 3.0], [-2.0, -0.0, 0.0, 2.0, 2.0])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from singa_lite import _args, autograd, tensor
from singa_lite.errors import ArgumentError
from singa_lite.ops import (
    attention,
    elementwise,
    indexing,
    interpolate,
    linalg,
    normalization,
    pool,
    reduce,
    unary,
)
from singa_lite.ops import shape as shape_ops
from singa_lite.ops.unary import _Step
from singa_lite.tensor import Tensor


class RoundAway(_Step):
    """Nearest integer, halves away from zero (2.5 -> 3, -2.5 -> -3); zero gradient."""

    def forward(self, x: Any) -> Any:
        xp = self.xp
        t = xp.trunc(x)
        # x - trunc(x) is exact, so only true halves take the away-from-zero branch.
        return xp.where(xp.abs(x - t) == 0.5, t + xp.sign(x), xp.rint(x))


def round(x: Tensor) -> Tensor:  # noqa: A001
    """SINGA's ``round``: nearest integer, halves away from zero; zero gradient."""
    return RoundAway()(x)[0]


def rounde(x: Tensor) -> Tensor:
    """SINGA's ``rounde``: nearest integer, halves to even (ONNX Round); zero gradient."""
    return unary.round(x)


def where(x: Tensor | float, y: Tensor | float, condition: Tensor) -> Tensor:
    """SINGA's ``where``: ``x`` where ``condition`` is nonzero, else ``y`` (condition last).

    A float condition (SINGA's comparisons give 0.0/1.0) counts as true where nonzero.
    """
    _args.tensor("where(x, y, condition)", "condition", condition)
    if condition.dtype != np.bool_:
        condition = shape_ops.cast(condition, np.bool_)
    return indexing.where(condition, x, y)


def upsample(x: Tensor, mode: Any = "nearest", scales: Sequence[float] | None = None) -> Tensor:
    """SINGA's ``upsample(x, mode, scales)``: resize by ``scales``, one per axis of ``x``.

    ``ops.upsample``'s order ``upsample(x, scales)`` is accepted too (a sequence where the
    mode goes).
    """
    if not isinstance(mode, str):
        mode, scales = ("nearest" if scales is None else scales), mode
    if scales is None:
        raise ArgumentError("upsample(x, mode, scales): scales are required, one per axis of x")
    return interpolate.upsample(x, scales, str(mode))


def onehot(axis: Any, indices: Tensor | None = None, depth: Any = None, values: Any = (0.0, 1.0)) -> Tensor:
    """SINGA's ``onehot(axis, indices, depth, values)``: a new axis ``axis`` of size ``depth``
    with ``values[1]`` at each index and ``values[0]`` elsewhere.

    ``ops.onehot``'s order ``onehot(indices, depth, values)`` is accepted too (a Tensor first).
    """
    if isinstance(axis, Tensor):
        axis, indices, depth, values = -1, axis, indices, (values if depth is None else depth)
    if indices is None or depth is None:
        raise ArgumentError("onehot(axis, indices, depth, values): indices and depth are required")
    if isinstance(values, Tensor):
        values = values.as_type(tensor.float32) if values.dtype.kind != "f" else values
    return indexing.onehot(indices, depth, values, _args.axis("onehot", "axis", axis))


def shape(x: Tensor) -> Tensor:
    """SINGA's ``shape``: the shape of ``x`` as an int32 tensor (SINGA has no int64)."""
    return shape_ops.cast(shape_ops.shape_of(x), np.int32)


def negative(x: Tensor) -> Tensor:
    """SINGA's ``negative``: ``-x`` elementwise."""
    return elementwise.neg(x)


def _like(out: Tensor, a: Tensor) -> Tensor:
    """A logical result in ``a``'s float dtype (SINGA's comparisons and logic give 0.0/1.0)."""
    return shape_ops.cast(out, a.dtype) if a.dtype.kind == "f" else out


def _and(a: Tensor, b: Tensor) -> Tensor:
    """SINGA's ``_and``: 1 where both are nonzero, else 0, in ``a``'s dtype; no gradient."""
    return _like(elementwise.logical_and(_bool(a, "_and"), _bool(b, "_and")), a)


def _or(a: Tensor, b: Tensor) -> Tensor:
    """SINGA's ``_or``: 1 where either is nonzero, else 0, in ``a``'s dtype; no gradient."""
    return _like(elementwise.logical_or(_bool(a, "_or"), _bool(b, "_or")), a)


def _xor(a: Tensor, b: Tensor) -> Tensor:
    """SINGA's ``_xor``: 1 where exactly one is nonzero, else 0, in ``a``'s dtype; no gradient."""
    return _like(elementwise.logical_xor(_bool(a, "_xor"), _bool(b, "_xor")), a)


def _not(x: Tensor) -> Tensor:
    """SINGA's ``_not``: 1 where ``x`` is zero, else 0, in ``x``'s dtype; no gradient."""
    return _like(elementwise.logical_not(_bool(x, "_not")), x)


def _bool(x: Tensor, owner: str) -> Tensor:
    _args.tensor(owner, "each input", x)  # before its dtype is read
    return x if x.dtype == np.bool_ else shape_ops.cast(x, np.bool_)


def cossim(a: Tensor, b: Tensor) -> Tensor:
    """SINGA's ``cossim``: the cosine similarity of each row of ``a`` (N, D) with the same row
    of ``b``, shape (N,); differentiable (built from primitives)."""
    _args.tensor("cossim", "a", a)
    _args.tensor("cossim", "b", b)
    dot = reduce.reduce_sum(a * b, 1)
    norms = unary.sqrt(reduce.reduce_sum(a * a, 1)) * unary.sqrt(reduce.reduce_sum(b * b, 1))
    return dot / norms


def constant_of_shape(x: Tensor, value: Any = 0.0) -> Tensor:
    """SINGA's ``constant_of_shape``: a float32 tensor of the shape held in ``x`` (a 1-d integer
    tensor), filled with ``value``; no gradient."""
    _args.tensor("constant_of_shape", "x", x)
    dims = tuple(int(d) for d in autograd.host_values(x).reshape(-1))
    fill = value.numpy().reshape(-1)[0] if isinstance(value, Tensor) else np.asarray(value).reshape(-1)[0]
    return tensor.full(dims, fill.item(), x.device, tensor.float32)


def globalaveragepool(x: Tensor, data_format: str = "channels_first") -> Tensor:
    """SINGA's ``globalaveragepool``: the mean over the spatial axes, kept as size-1 axes;
    ``data_format='channels_last'`` takes ``(N, *spatial, C)``."""
    _args.choice("globalaveragepool", "data_format", data_format, ("channels_first", "channels_last"))
    if data_format == "channels_first":
        return pool.global_average_pool(x)
    return reduce.reduce_mean(x, tuple(range(1, x.ndim() - 1)), keepdims=True)


# Ops that behave differently in training take the mode as an argument in ``ops``; SINGA's
# functional API reads it from ``autograd.training``, as SINGA's own does.
def dropout(x: Tensor, ratio: float = 0.5) -> Tensor:
    """SINGA's ``dropout``: inverted dropout while ``autograd.training`` is on, else the identity."""
    return normalization.dropout(x, ratio, training=autograd.training)


def batchnorm_2d(
    x: Tensor,
    scale: Tensor,
    bias: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    momentum: float = 0.9,
    eps: float = 1e-5,
    training: bool | None = None,
) -> Tensor:
    """``ops.batchnorm_2d`` in training behaviour while ``autograd.training`` is on;
    ``training`` overrides the flag for this call."""
    mode = autograd.training if training is None else bool(training)
    return normalization.batchnorm_2d(x, scale, bias, running_mean, running_var, momentum, eps, mode)


batch_norm = batchnorm_2d


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    dropout: float = 0.0,
    scale: float | None = None,
    block: int = attention.DEFAULT_BLOCK,
) -> Tensor:
    """``ops.scaled_dot_product_attention`` dropping probabilities while ``autograd.training``
    is on."""
    return attention.scaled_dot_product_attention(
        q, k, v, mask, is_causal, dropout, scale, block, training=autograd.training
    )


Concat = shape_ops.Cat  # SINGA's name: Concat(axis)(*xs)
Matmul = linalg.MatMul  # SINGA's name: Matmul()(a, b)

__all__ = [
    "Concat",
    "Matmul",
    "RoundAway",
    "_and",
    "_not",
    "_or",
    "_xor",
    "batch_norm",
    "batchnorm_2d",
    "constant_of_shape",
    "cossim",
    "dropout",
    "globalaveragepool",
    "negative",
    "onehot",
    "round",
    "rounde",
    "scaled_dot_product_attention",
    "shape",
    "upsample",
    "where",
]

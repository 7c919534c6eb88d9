"""Reductions over axes: sum, mean, max, min, prod, the index reductions argmax/argmin, and
the running sum ``cumsum``.

``axes`` is ``None`` (every axis), an int, or a sequence of ints (negative ones count from the
end), as in NumPy. Reductions keep the input's dtype: float16 is accumulated in float32 and
rounded once; integer sums stay in the input's integer type; a bool sum counts (int64).
The gradients of max and min go to the extreme elements, split evenly among ties (as
``torch.amax`` does). argmax/argmin return int64 indices and pass no gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from singa_lite import _args
from singa_lite.autograd import Operator
from singa_lite.errors import DTypeError
from singa_lite.ops._util import normalize_axis
from singa_lite.tensor import Tensor

__all__ = [
    "ArgMax",
    "ArgMin",
    "CumSum",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "argmax",
    "argmin",
    "cumsum",
    "reduce_max",
    "reduce_mean",
    "reduce_min",
    "reduce_prod",
    "reduce_sum",
]

Axes = int | Sequence[int] | None


class _Reduce(Operator):
    """Shared axis handling: ``self.axes`` is a sorted tuple of non-negative axes after ``prepare``."""

    def __init__(self, axes: Axes = None, keepdims: bool = False) -> None:
        super().__init__()
        if axes is not None:
            _args.ints(self.name, "axes", axes)  # their range is checked against the input
        self.raw_axes = axes
        self.keepdims = bool(keepdims)

    def prepare(self, x: Any) -> None:
        self.in_shape = x.shape
        self.axes = _normalize_axes(self.raw_axes, x.ndim, self.name)
        # The input's shape with reduced axes kept as 1: the shape the gradient broadcasts from.
        self.kept_shape = tuple(1 if i in self.axes else s for i, s in enumerate(x.shape))

    def finish(self, y: Any) -> Any:
        return y.reshape(self.kept_shape) if self.keepdims else y

    def spread(self, dy: Any) -> Any:
        """``dy`` broadcast back over the reduced axes, as a fresh writable array."""
        return self.xp.broadcast_to(dy.reshape(self.kept_shape), self.in_shape).copy()


def _normalize_axes(axes: Axes, ndim: int, opname: str) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (int, np.integer)):
        axes = (int(axes),)
    norm = tuple(sorted(normalize_axis(int(a), ndim, opname) for a in axes))
    if len(set(norm)) != len(norm):
        from singa_lite.errors import ShapeError

        raise ShapeError(f"{opname}: repeated axis in {tuple(axes)} for a {ndim}-d input")
    return norm


def _acc_dtype(dtype: np.dtype) -> Any:
    """The dtype to accumulate in: float32 for float16 (which loses digits fast), else the dtype."""
    if dtype == np.float16:
        return np.float32
    if dtype == np.bool_:
        return np.int64
    return dtype


class ReduceSum(_Reduce):
    def forward(self, x: Any) -> Any:
        self.prepare(x)
        y = x.sum(axis=self.axes, dtype=_acc_dtype(x.dtype))
        out_dtype = np.int64 if x.dtype == np.bool_ else x.dtype
        return self.finish(y.astype(out_dtype, copy=False))

    def backward(self, dy: Any) -> Any:
        return self.spread(dy)


class ReduceMean(_Reduce):
    def forward(self, x: Any) -> Any:
        if x.dtype == np.bool_:
            raise DTypeError(f"{self.name}: cannot average a bool tensor; cast it first (x.as_type(float32))")
        self.prepare(x)
        self.count = int(np.prod([x.shape[a] for a in self.axes]))
        if self.count == 0:
            raise self.error(f"mean over axes {self.axes} of no elements", x)
        # Integer means truncate to the input type, as ONNX ReduceMean keeps the type.
        acc = np.dtype(np.float64 if x.dtype.kind in "iu" else _acc_dtype(x.dtype))
        y = x.sum(axis=self.axes, dtype=acc) / acc.type(self.count)
        return self.finish(y.astype(x.dtype, copy=False))

    def backward(self, dy: Any) -> Any:
        if dy.dtype.kind != "f":
            return None  # integer means truncate: no gradient
        g = self.spread(dy)
        g /= g.dtype.type(self.count)
        return g


class _Extreme(_Reduce):
    """Max or min: the gradient goes to the elements equal to the result, split among ties."""

    fn = "max"

    def forward(self, x: Any) -> Any:
        self.prepare(x)
        if x.size == 0 and any(x.shape[a] == 0 for a in self.axes):
            raise self.error(f"{self.fn} over an empty axis of {self.axes}", x)
        y = getattr(x, self.fn)(axis=self.axes, keepdims=True)
        self.is_float = x.dtype.kind == "f"
        if self.is_float:
            self.mask = x == y
        if self.keepdims:
            return y
        return y.reshape([s for i, s in enumerate(x.shape) if i not in self.axes])

    def backward(self, dy: Any) -> Any:
        if not self.is_float:
            return None
        mask = self.mask.astype(dy.dtype)
        count = mask.sum(axis=self.axes, keepdims=True)
        return mask * (dy.reshape(self.kept_shape) / count)


class ReduceMax(_Extreme):
    fn = "max"


class ReduceMin(_Extreme):
    fn = "min"


class ReduceProd(_Reduce):
    def forward(self, x: Any) -> Any:
        self.prepare(x)
        self.x = x
        y = x.prod(axis=self.axes, dtype=_acc_dtype(x.dtype))
        return self.finish(y.astype(x.dtype, copy=False))

    def backward(self, dy: Any) -> Any:
        # d prod / d x_i is the product of the *other* elements; computing it as prod / x_i
        # fails at zeros, so multiply the exclusive prefix and suffix products instead.
        xp, x, axes = self.xp, self.x, self.axes
        rest = [a for a in range(x.ndim) if a not in axes]
        moved = x.transpose(rest + list(axes))
        flat = moved.reshape(moved.shape[: len(rest)] + (-1,))
        ones = xp.ones(flat.shape[:-1] + (1,), dtype=flat.dtype)
        left = xp.concatenate([ones, xp.cumprod(flat[..., :-1], axis=-1)], axis=-1)
        right = xp.flip(xp.cumprod(xp.flip(flat[..., 1:], axis=-1), axis=-1), axis=-1)
        right = xp.concatenate([right, ones], axis=-1)
        others = (left * right).reshape(moved.shape)
        g = others.transpose(np.argsort(rest + list(axes)))
        return g * dy.reshape(self.kept_shape)


class _ArgExtreme(Operator):
    """Index of the first (or last) max/min along one axis; int64 output, no gradient."""

    fn = "argmax"

    def __init__(
        self, axis: int | None = -1, keepdims: bool = False, select_last_index: bool = False
    ) -> None:
        super().__init__()
        self.axis = None if axis is None else _args.axis(self.name, "axis", axis)
        self.keepdims = bool(keepdims)
        self.last = bool(select_last_index)

    def forward(self, x: Any) -> Any:
        xp = self.xp
        if x.ndim == 0:
            return xp.zeros((), dtype=np.int64)
        if self.axis is None:
            x, axis = x.reshape(-1), 0
        else:
            axis = normalize_axis(int(self.axis), x.ndim, self.name)
        if x.shape[axis] == 0:
            raise self.error(f"{self.fn} over the empty axis {axis}", x)
        if self.last:
            i = getattr(xp.flip(x, axis=axis), self.fn)(axis=axis, keepdims=self.keepdims)
            i = (x.shape[axis] - 1) - i
        else:
            i = getattr(x, self.fn)(axis=axis, keepdims=self.keepdims)
        return i.astype(np.int64, copy=False)

    def backward(self, dy: Any) -> Any:
        return None


class ArgMax(_ArgExtreme):
    fn = "argmax"


class ArgMin(_ArgExtreme):
    fn = "argmin"


class CumSum(Operator):
    """Running sum along ``axis`` (ONNX CumSum): ``exclusive`` leaves each element out of its
    own sum, ``reverse`` sums from the end. Integer sums stay in the input's type.

    The gradient of a running sum is the running sum of the gradient the other way round.
    """

    def __init__(self, axis: int, exclusive: bool = False, reverse: bool = False) -> None:
        super().__init__()
        self.axis = _args.axis(self.name, "axis", axis)
        self.exclusive, self.reverse = bool(exclusive), bool(reverse)

    def forward(self, x: Any) -> Any:
        if x.ndim == 0:
            raise self.error("needs at least one axis", x)
        if x.dtype.kind not in "fiu":
            raise DTypeError(f"{self.name}: needs a numeric input, got {x.dtype}")
        self.ax = normalize_axis(self.axis, x.ndim, self.name)
        return _running_sum(self.xp, x, self.ax, self.exclusive, self.reverse)

    def backward(self, dy: Any) -> Any:
        return _running_sum(self.xp, dy, self.ax, self.exclusive, not self.reverse)


def _running_sum(xp: Any, x: Any, axis: int, exclusive: bool, reverse: bool) -> Any:
    acc = _acc_dtype(x.dtype)
    data = xp.flip(x, axis) if reverse else x
    if exclusive:  # the inclusive sums shifted one along: subtracting x would turn inf into nan
        out = xp.zeros(data.shape, dtype=acc)
        lead = (slice(None),) * axis
        xp.cumsum(data[lead + (slice(0, -1),)], axis=axis, dtype=acc, out=out[lead + (slice(1, None),)])
    else:
        out = xp.cumsum(data, axis=axis, dtype=acc)
    out = out.astype(x.dtype, copy=False)
    return xp.ascontiguousarray(xp.flip(out, axis)) if reverse else out


def reduce_sum(x: Tensor, axes: Axes = None, keepdims: bool = False) -> Tensor:
    """Sum over ``axes`` (all when ``None``).

    >>> import numpy as np; from singa_lite import tensor
    >>> tensor.to_numpy(reduce_sum(tensor.from_numpy(np.ones((2, 3), np.float32)), 1)).tolist()
    [3.0, 3.0]
    """
    return ReduceSum(axes, keepdims)(x)[0]


def reduce_mean(x: Tensor, axes: Axes = None, keepdims: bool = False) -> Tensor:
    """Mean over ``axes`` (all when ``None``)."""
    return ReduceMean(axes, keepdims)(x)[0]


def reduce_max(x: Tensor, axes: Axes = None, keepdims: bool = False) -> Tensor:
    """Maximum over ``axes``; the gradient is split evenly among tied maxima."""
    return ReduceMax(axes, keepdims)(x)[0]


def reduce_min(x: Tensor, axes: Axes = None, keepdims: bool = False) -> Tensor:
    """Minimum over ``axes``; the gradient is split evenly among tied minima."""
    return ReduceMin(axes, keepdims)(x)[0]


def reduce_prod(x: Tensor, axes: Axes = None, keepdims: bool = False) -> Tensor:
    """Product over ``axes``; the gradient is exact at zeros."""
    return ReduceProd(axes, keepdims)(x)[0]


def argmax(
    x: Tensor, axis: int | None = -1, keepdims: bool = False, select_last_index: bool = False
) -> Tensor:
    """Index (int64) of the largest element along ``axis`` (of the flattened input when ``None``).

    Ties give the first index, or the last with ``select_last_index`` (ONNX ArgMax).
    """
    return ArgMax(axis, keepdims, select_last_index)(x)[0]


def argmin(
    x: Tensor, axis: int | None = -1, keepdims: bool = False, select_last_index: bool = False
) -> Tensor:
    """Index (int64) of the smallest element along ``axis`` (of the flattened input when ``None``)."""
    return ArgMin(axis, keepdims, select_last_index)(x)[0]


def cumsum(x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False) -> Tensor:
    """Running sum of ``x`` along ``axis`` (ONNX CumSum's ``exclusive`` and ``reverse``).

    >>> import numpy as np; from singa_lite import tensor
    >>> x = tensor.from_numpy(np.array([1.0, 2.0, 3.0], np.float32))
    >>> tensor.to_numpy(cumsum(x, 0)).tolist(), tensor.to_numpy(cumsum(x, 0, True, True)).tolist()
    ([1.0, 3.0, 6.0], [5.0, 3.0, 0.0])
    """
    return CumSum(axis, exclusive, reverse)(x)[0]

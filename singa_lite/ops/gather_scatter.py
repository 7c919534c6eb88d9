"""N-d gather and scatter, selection, running products and sequence reversal (ONNX GatherND,
ScatterND, TensorScatter, Compress, Unique, CumProd, ReverseSequence).

Index inputs never receive a gradient. Indices that live on a device are range-checked with
``backend.check`` (CuPy wraps an out-of-range index around silently); writes with repeated
indices are ordered explicitly (last write wins, as in NumPy) by the sort of
:mod:`singa_lite.ops.indexing`, never left to a backend.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa_lite import _args, backend
from singa_lite.autograd import Operator
from singa_lite.errors import DTypeError, ShapeError
from singa_lite.ops._util import normalize_axis
from singa_lite.ops.indexing import _fold_runs, _runs
from singa_lite.tensor import Tensor

__all__ = [
    "Compress",
    "CumProd",
    "GatherND",
    "ReverseSequence",
    "ScatterND",
    "TensorScatter",
    "Unique",
    "compress",
    "cumprod",
    "gather_nd",
    "reverse_sequence",
    "scatter_nd",
    "tensor_scatter",
    "unique",
]


def _int_index(op: Operator, idx: Any, what: str = "indices") -> Any:
    if idx.dtype.kind not in "iu":
        raise DTypeError(f"{op.name}: {what} must be integers, got dtype {idx.dtype}")
    return idx.astype(np.int64, copy=False)


def _wrap_checked(op: GatherND | ScatterND, idx: Any, sizes: Any, x: Any) -> Any:
    """``idx`` (last axis: one index per dim of ``sizes``) with negatives counted from the end;
    ``ShapeError`` where one lies outside ``[-n, n)``."""
    if idx.size == 0:
        return idx
    xp = op.xp
    n = xp.asarray(sizes, dtype=np.int64)
    if not op.indices_checked:  # host-given indices were checked before upload (``_indices``)
        bad = ((idx < -n) | (idx >= n)).any()

        def error() -> Exception:
            return op.error(f"an index is out of range for the dims {tuple(int(s) for s in sizes)}", x, idx)

        backend.check(bad, f"{op.name}: indices in range", error)
    return xp.where(idx < 0, idx + n, idx)


def _flat_rows(xp: Any, idx: Any, sizes: tuple) -> Any:
    """C-order row numbers of the index tuples ``idx[..., :]`` in an array of dims ``sizes``."""
    pos = xp.zeros(idx.shape[:-1], dtype=np.int64)
    for j, n in enumerate(sizes):
        pos = pos * n + idx[..., j]
    return pos.reshape(-1)


class GatherND(Operator):
    """ONNX GatherND: slices of ``x`` picked by index tuples along the last axis of ``indices``,
    after ``batch_dims`` leading axes that ``x`` and ``indices`` share."""

    indices_checked = False  # set by ``_indices`` when it checked host-given indices

    def __init__(self, batch_dims: int = 0) -> None:
        super().__init__()
        self.batch_dims = _args.count(self.name, "batch_dims", batch_dims, low=0)

    def forward(self, x: Any, indices: Any) -> Any:
        xp, b = self.xp, self.batch_dims
        idx = _int_index(self, indices)
        if idx.ndim < 1 or idx.ndim <= b or x.ndim <= b or x.shape[:b] != idx.shape[:b]:
            raise self.error(f"x and indices must share their first batch_dims={b} axes", x, idx)
        k = idx.shape[-1]
        if k > x.ndim - b:
            raise self.error(
                f"index tuples of length {k} exceed the {x.ndim - b} axes after the batch", x, idx
            )
        batch = math.prod(x.shape[:b])
        rest = x.shape[b + k :]
        idx = _wrap_checked(self, idx.reshape(batch, -1, k), x.shape[b : b + k], x)
        self.key = (xp.arange(batch)[:, None], *(idx[..., j] for j in range(k)))
        self.in_shape = x.shape
        out = x.reshape(batch, *x.shape[b:])[self.key]
        return out.reshape(*x.shape[:b], *indices.shape[b:-1], *rest)

    def backward(self, dy: Any) -> tuple:
        b = self.batch_dims
        batch = math.prod(self.in_shape[:b])
        dx = self.xp.zeros((batch, *self.in_shape[b:]), dtype=dy.dtype)
        k = len(self.key) - 1
        self.xp.add.at(dx, self.key, dy.reshape(batch, -1, *self.in_shape[b + k :]))
        return dx.reshape(self.in_shape), None


class ScatterND(Operator):
    """ONNX ScatterND: a copy of ``x`` with slices of ``updates`` written (or reduced with
    ``add``, ``mul``, ``max``, ``min``) at the index tuples of ``indices``.

    Gradients exist for ``none`` and ``add``; with ``none`` and repeated index tuples the last
    write wins and alone gets a gradient, as in ScatterElements.
    """

    UFUNCS = {"add": "add", "mul": "multiply", "max": "maximum", "min": "minimum"}
    indices_checked = False  # set by ``_indices`` when it checked host-given indices

    def __init__(self, reduction: str = "none") -> None:
        super().__init__()
        self.reduction = _args.choice(self.name, "reduction", reduction, ("none", *self.UFUNCS))

    def forward(self, x: Any, indices: Any, updates: Any) -> Any:
        xp = self.xp
        idx = _int_index(self, indices)
        if idx.ndim < 1 or idx.shape[-1] > x.ndim:
            raise self.error("indices need a last axis no longer than x's rank", x, idx)
        k = idx.shape[-1]
        if updates.shape != idx.shape[:-1] + x.shape[k:]:
            raise self.error("updates must have shape indices.shape[:-1] + x.shape[k:]", x, idx, updates)
        if updates.dtype != x.dtype:
            raise DTypeError(f"{self.name}: updates dtype {updates.dtype} != input dtype {x.dtype}")
        rows, width = math.prod(x.shape[:k]), math.prod(x.shape[k:])
        self.pos = _flat_rows(xp, _wrap_checked(self, idx, x.shape[:k], x), x.shape[:k])
        self.upd_shape, self.rows, self.width = updates.shape, rows, width
        out = xp.empty((rows + 1, width), dtype=x.dtype)  # a spare row takes the losing writes
        out[:-1] = x.reshape(rows, width)
        if self.pos.size:
            sorted_pos, self.order, self.last = _runs(xp, self.pos)
            vals = updates.reshape(self.pos.size, width)[self.order]
            if self.reduction != "none":
                ufunc = getattr(xp, self.UFUNCS[self.reduction])
                vals = ufunc(out[sorted_pos], _fold_runs(xp, ufunc, sorted_pos[:, None], vals))
            out[xp.where(self.last, sorted_pos, rows)] = vals
        return out[:-1].reshape(x.shape)

    def backward(self, dy: Any) -> tuple:
        if self.reduction not in ("none", "add"):
            raise RuntimeError(
                f"{self.name}: reduction={self.reduction!r} has no gradient; only 'none' and 'add' do"
            )
        xp, pos = self.xp, self.pos
        flat = xp.ascontiguousarray(dy).reshape(self.rows, self.width)
        dx = du = None
        if self.needs_grad[0]:
            dx = flat.copy()
            if self.reduction == "none":
                dx[pos] = 0
            dx = dx.reshape(dy.shape)
        if self.needs_grad[2]:
            du = flat[pos]
            if self.reduction == "none" and pos.size:
                won = xp.empty(pos.shape, dtype=np.bool_)
                won[self.order] = self.last
                du = du * won[:, None]
            du = du.reshape(self.upd_shape)
        return dx, None, du


class TensorScatter(Operator):
    """ONNX TensorScatter (a KV-cache write): ``update`` written into ``cache`` along ``axis``
    at ``write_indices[b]`` for each batch entry ``b`` (axis 0), wrapping round in ``circular``
    mode. The cache gets the gradient of what was not overwritten; the update all of its own."""

    def __init__(self, axis: int = -2, mode: str = "linear") -> None:
        super().__init__()
        self.axis = _args.axis(self.name, "axis", axis)
        self.mode = _args.choice(self.name, "mode", mode, ("linear", "circular"))

    def forward(self, cache: Any, update: Any, write_indices: Any) -> Any:
        xp = self.xp
        ax = normalize_axis(self.axis, cache.ndim, self.name)
        if ax == 0:
            raise self.error("axis must not be the batch axis 0", cache)
        if update.ndim != cache.ndim or any(
            u != c for d, (u, c) in enumerate(zip(update.shape, cache.shape)) if d != ax
        ):
            raise self.error(f"update must match the cache on every axis but {ax}", cache, update)
        if update.dtype != cache.dtype:
            raise DTypeError(f"{self.name}: update dtype {update.dtype} != cache dtype {cache.dtype}")
        size, seq = cache.shape[ax], update.shape[ax]
        if seq > size:
            raise self.error(f"the update's {seq} steps exceed the cache's {size}", cache, update)
        wi = _int_index(self, write_indices, "write_indices")
        if wi.shape != (cache.shape[0],):
            raise self.error("write_indices needs one entry per batch entry", cache, wi)
        pos = wi[:, None] + xp.arange(seq, dtype=np.int64)
        if self.mode == "circular":
            pos = pos % size
        elif pos.size:
            bad = ((pos < 0) | (pos >= size)).any()
            backend.check(
                bad,
                f"{self.name}: writes in range",
                lambda: self.error(f"a write lies outside the cache's {size} steps (linear mode)", cache, wi),
            )
        self.ax, self.pos = ax, pos
        out = xp.moveaxis(cache.copy(), ax, 1)
        out[self.key(out)] = xp.moveaxis(update, ax, 1)
        return xp.ascontiguousarray(xp.moveaxis(out, 1, self.ax))

    def key(self, moved: Any) -> tuple:
        """Index of the written steps in an array with the sequence axis moved to 1."""
        batch = self.xp.arange(moved.shape[0])[:, None]
        return (batch, self.pos)

    def backward(self, dy: Any) -> tuple:
        xp = self.xp
        moved = xp.moveaxis(dy, self.ax, 1)
        dc = du = None
        if self.needs_grad[0]:
            dc = moved.copy()
            dc[self.key(dc)] = 0
            dc = xp.moveaxis(dc, 1, self.ax)
        if self.needs_grad[1]:
            du = xp.moveaxis(moved[self.key(moved)], 1, self.ax)
        return dc, du, None


class Compress(Operator):
    """ONNX Compress: the slices of ``x`` along ``axis`` where ``condition`` holds (``x``
    flattened when ``axis`` is None); ``condition`` may be shorter than the axis."""

    def __init__(self, axis: int | None = None) -> None:
        super().__init__()
        self.axis = None if axis is None else _args.axis(self.name, "axis", axis)

    def forward(self, x: Any, condition: Any) -> Any:
        xp = self.xp
        if condition.ndim != 1:
            raise self.error("condition must be 1-D", x, condition)
        self.in_shape = x.shape
        data = x.reshape(-1) if self.axis is None else x
        self.ax = 0 if self.axis is None else normalize_axis(self.axis, x.ndim, self.name)
        self.idx = xp.nonzero(condition.astype(np.bool_, copy=False))[0]
        n = data.shape[self.ax]
        if self.idx.size and int(self.idx[-1]) >= n:
            raise self.error(
                f"condition selects index {int(self.idx[-1])} beyond the axis of size {n}", x, condition
            )
        return xp.take(data, self.idx, axis=self.ax)

    def backward(self, dy: Any) -> tuple:
        shape = (math.prod(self.in_shape),) if self.axis is None else self.in_shape
        dx = self.xp.zeros(shape, dtype=dy.dtype)
        dx[(slice(None),) * self.ax + (self.idx,)] = dy  # each index appears once
        return dx.reshape(self.in_shape), None


class Unique(Operator):
    """ONNX Unique: the distinct elements (or slices along ``axis``) of ``x``, sorted or in
    order of first appearance, with ``indices`` (first positions), ``inverse_indices`` and
    ``counts``, all int64. It produces indices, so it has no gradient."""

    def __init__(self, axis: int | None = None, sorted: bool = True) -> None:  # noqa: A002 (ONNX's name)
        super().__init__()
        self.axis = None if axis is None else _args.axis(self.name, "axis", axis)
        self.sorted = bool(sorted)

    def forward(self, x: Any) -> tuple:
        xp = self.xp
        ax = None if self.axis is None else normalize_axis(self.axis, x.ndim, self.name)
        y, first, inverse, counts = xp.unique(
            x if ax is not None else x.reshape(-1), return_index=True, return_inverse=True,
            return_counts=True, axis=ax,
        )  # fmt: skip
        inverse = inverse.reshape(-1)
        if not self.sorted:
            order = xp.argsort(first, kind="stable")
            rank = xp.empty_like(order)
            rank[order] = xp.arange(order.size)
            y = xp.take(y, order, axis=0 if ax is None else ax)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        i64 = np.int64
        return y, first.astype(i64), inverse.astype(i64), counts.astype(i64)

    def backward(self, *dys: Any) -> Any:
        return None


class CumProd(Operator):
    """Running product along ``axis`` (ONNX CumProd): ``exclusive`` leaves each element out of
    its own product, ``reverse`` multiplies from the end.

    The gradient is exact where elements are zero: for a nonzero ``x_i`` it is
    ``sum_{j>=i} dy_j y_j / x_i``; of the zeros only the first along the axis reaches later
    products, through the running product with that zero read as one.
    """

    def __init__(self, axis: int, exclusive: bool = False, reverse: bool = False) -> None:
        super().__init__()
        self.axis = _args.axis(self.name, "axis", axis)
        self.exclusive, self.reverse = bool(exclusive), bool(reverse)

    def forward(self, x: Any) -> Any:
        xp = self.xp
        if x.ndim == 0:
            raise self.error("needs at least one axis", x)
        if x.dtype.kind not in "fiu":
            raise DTypeError(f"{self.name}: needs a numeric input, got {x.dtype}")
        self.ax = ax = normalize_axis(self.axis, x.ndim, self.name)
        data = xp.flip(x, ax) if self.reverse else x
        if self.exclusive:
            data = self.shift(data, xp.ones_like(data))
        self.factors = data
        self.y = xp.cumprod(data, axis=ax).astype(x.dtype, copy=False)
        return xp.ascontiguousarray(xp.flip(self.y, ax)) if self.reverse else self.y

    def shift(self, data: Any, fill: Any) -> Any:
        """``data`` moved one step along the axis, the first step taken from ``fill``."""
        lead = (slice(None),) * self.ax
        out = fill.copy()
        out[lead + (slice(1, None),)] = data[lead + (slice(0, -1),)]
        return out

    def backward(self, dy: Any) -> Any:
        xp, ax, x, y = self.xp, self.ax, self.factors, self.y
        g = xp.flip(dy, ax) if self.reverse else dy

        def tail_sums(a: Any) -> Any:  # sum over j >= i along the axis
            return xp.flip(xp.cumsum(xp.flip(a, ax), axis=ax), ax)

        zero = x == 0
        first_zero = zero & (xp.cumsum(zero, axis=ax) == 1)
        one = x.dtype.type(1)
        grad = tail_sums(g * y) / xp.where(zero, one, x)
        if bool(first_zero.any()):
            y_skip = xp.cumprod(xp.where(first_zero, one, x), axis=ax)
            grad = xp.where(first_zero, tail_sums(g * y_skip), grad)
        grad = xp.where(zero & ~first_zero, x.dtype.type(0), grad)
        if self.exclusive:  # factor k + 1 is input k; the last input reaches no output
            lead = (slice(None),) * ax
            out = xp.zeros_like(grad)
            out[lead + (slice(0, -1),)] = grad[lead + (slice(1, None),)]
            grad = out
        return xp.ascontiguousarray(xp.flip(grad, ax)) if self.reverse else grad


class ReverseSequence(Operator):
    """ONNX ReverseSequence: for each batch entry ``b`` (along ``batch_axis``) the first
    ``lengths[b]`` steps along ``time_axis`` reversed, the rest left as they are."""

    def __init__(self, batch_axis: int = 1, time_axis: int = 0) -> None:
        super().__init__()
        self.batch_axis = _args.integer(self.name, "batch_axis", batch_axis, 0, 1)
        self.time_axis = _args.integer(self.name, "time_axis", time_axis, 0, 1)
        if self.batch_axis == self.time_axis:
            raise _args.bad(self.name, "batch_axis", "differ from time_axis", batch_axis)

    def forward(self, x: Any, lengths: Any) -> Any:
        xp = self.xp
        if x.ndim < 2:
            raise self.error("needs at least 2 axes", x)
        steps, batch = x.shape[self.time_axis], x.shape[self.batch_axis]
        lens = _int_index(self, lengths, "sequence_lens")
        if lens.shape != (batch,):
            raise self.error("sequence_lens needs one length per batch entry", x, lens)
        if lens.size:
            bad = ((lens < 0) | (lens > steps)).any()
            backend.check(
                bad,
                f"{self.name}: lengths in range",
                lambda: self.error(f"a sequence length lies outside [0, {steps}]", x, lens),
            )
        t = xp.arange(steps, dtype=np.int64)
        t_shape, b_shape = [1] * x.ndim, [1] * x.ndim
        t_shape[self.time_axis], b_shape[self.batch_axis] = steps, batch
        t, lens = t.reshape(t_shape), lens.reshape(b_shape)
        self.idx = xp.broadcast_to(xp.where(t < lens, lens - 1 - t, t), x.shape)
        return xp.take_along_axis(x, self.idx, axis=self.time_axis)

    def backward(self, dy: Any) -> tuple:
        # The permutation is its own inverse.
        return self.xp.take_along_axis(dy, self.idx, axis=self.time_axis), None


# -- functions ---------------------------------------------------------------------------------
def _indices(like: Tensor, indices: Any, tuples_for: tuple[Any, int] | None = None) -> Tensor:
    """``indices`` (list, array or Tensor) as an integer tensor on ``like``'s device.

    ``tuples_for = (op, first axis)``: the last axis of ``indices`` holds index tuples into
    ``like``'s axes from that one on. Given on the host, those are range-checked here, before
    upload, where it costs no device read and the error can name the index, and ``op`` is told
    so; a device Tensor's are checked by the op where they are (the error then comes at the
    next host read).
    """
    dev = like.device
    if isinstance(indices, Tensor):
        if indices.device == dev:
            return indices
        indices = backend.to_host(indices.data)
    host = np.asarray(indices)
    if host.dtype.kind not in "iub":
        if host.size:
            raise DTypeError(f"indices must be integers or booleans, got dtype {host.dtype}")
        host = host.astype(np.int64)
    if tuples_for is not None:
        op, first = tuples_for
        op.indices_checked = _check_tuples(op.name, first, host, like.shape)
    return Tensor._wrap(dev.backend.from_numpy(host, dev.id()), dev, False, None, 0)


def _check_tuples(name: str, first: int, host: np.ndarray, shape: tuple) -> bool:
    """``ShapeError`` naming the first index of the host tuples ``host`` outside its axis;
    whether they were checked (not: a shape or dtype the op itself reports)."""
    dims = shape[first:]
    if host.ndim == 0 or host.size == 0 or host.dtype.kind not in "iu" or host.shape[-1] > len(dims):
        return False
    n = np.asarray(dims[: host.shape[-1]], dtype=np.int64)
    bad = (host < -n) | (host >= n)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        size = int(n[at[-1]])
        raise ShapeError(
            f"{name}: index {int(host[at])} is out of range [{-size}, {size}) for axis {first + at[-1]} "
            f"(input shape {tuple(shape)}, indices shape {host.shape})"
        )
    return True


def gather_nd(x: Tensor, indices: Any, batch_dims: int = 0) -> Tensor:
    """ONNX GatherND: ``x`` read at the index tuples on the last axis of ``indices``.

    >>> import numpy as np; from singa_lite import tensor
    >>> x = tensor.from_numpy(np.arange(4, dtype=np.float32).reshape(2, 2))
    >>> gather_nd(x, [[1, 0], [0, 1]]).numpy().tolist()
    [2.0, 1.0]
    """
    x = _args.tensor("gather_nd", "x", x)
    op = GatherND(batch_dims)
    return op(x, _indices(x, indices, (op, batch_dims)))[0]


def scatter_nd(x: Tensor, indices: Any, updates: Tensor, reduction: str = "none") -> Tensor:
    """ONNX ScatterND: a copy of ``x`` with ``updates`` written (or reduced) at index tuples."""
    x = _args.tensor("scatter_nd", "x", x)
    op = ScatterND(reduction)
    return op(x, _indices(x, indices, (op, 0)), updates)[0]


def tensor_scatter(
    cache: Tensor, update: Tensor, write_indices: Any = None, axis: int = -2, mode: str = "linear"
) -> Tensor:
    """ONNX TensorScatter: ``update`` written into ``cache`` along ``axis`` from
    ``write_indices[b]`` (0 when omitted) for each batch entry."""
    cache = _args.tensor("tensor_scatter", "cache", cache)
    if write_indices is None:
        write_indices = np.zeros(cache.shape[0], np.int64)
    return TensorScatter(axis, mode)(cache, update, _indices(cache, write_indices))[0]


def compress(x: Tensor, condition: Any, axis: int | None = None) -> Tensor:
    """ONNX Compress: the slices of ``x`` along ``axis`` (flattened when None) where
    ``condition`` is true."""
    x = _args.tensor("compress", "x", x)
    return Compress(axis)(x, _indices(x, condition))[0]


def unique(x: Tensor, axis: int | None = None, sorted: bool = True) -> tuple[Tensor, ...]:  # noqa: A002
    """ONNX Unique: ``(values, first_indices, inverse_indices, counts)``.

    >>> import numpy as np; from singa_lite import tensor
    >>> [t.numpy().tolist() for t in unique(tensor.from_numpy(np.array([2, 1, 2], np.int32)))]
    [[1, 2], [1, 0], [1, 0, 1], [1, 2]]
    """
    return Unique(axis, sorted)(x)


def cumprod(x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False) -> Tensor:
    """Running product along ``axis`` (``exclusive``: each element left out of its own)."""
    return CumProd(axis, exclusive, reverse)(x)[0]


def reverse_sequence(x: Tensor, lengths: Any, batch_axis: int = 1, time_axis: int = 0) -> Tensor:
    """ONNX ReverseSequence: the first ``lengths[b]`` steps of each batch entry reversed."""
    x = _args.tensor("reverse_sequence", "x", x)
    return ReverseSequence(batch_axis, time_axis)(x, _indices(x, lengths))[0]

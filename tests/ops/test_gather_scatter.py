"""GatherND, ScatterND, TensorScatter, Compress, Unique, CumProd, ReverseSequence."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from opcheck import check_forward, check_grad, rand, run, t_

from singa_lite import ops
from singa_lite.errors import ShapeError


# -- references written from the ONNX definitions ------------------------------------------------
def gather_nd_ref(x, idx, b=0):
    bshape = x.shape[:b]
    xb = x.reshape(-1, *x.shape[b:])
    ib = idx.reshape(xb.shape[0], -1, idx.shape[-1])
    rest = x.shape[b + idx.shape[-1] :]
    rows = [[xb[i][tuple(t)] for t in ib[i]] for i in range(xb.shape[0])]
    out = np.array([np.stack(r) if r else np.zeros((0, *rest), x.dtype) for r in rows])
    return out.reshape(*bshape, *idx.shape[b:-1], *x.shape[b + idx.shape[-1] :])


def scatter_nd_ref(x, idx, upd, reduction="none"):
    out = x.copy()
    fn = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}.get(reduction)
    for i in np.ndindex(idx.shape[:-1]):
        key = tuple(idx[i])
        out[key] = upd[i] if fn is None else fn(out[key], upd[i])
    return out


def cumprod_ref(x, axis, exclusive=False, reverse=False):
    a = np.flip(x, axis) if reverse else x
    y = np.cumprod(a, axis=axis, dtype=x.dtype)
    if exclusive:
        y = np.concatenate([np.ones_like(np.take(a, [0], axis)), np.delete(y, -1, axis)], axis)
    return np.flip(y, axis) if reverse else y


# -- GatherND -------------------------------------------------------------------------------------
@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4))
def test_gather_nd_forward(dev, data, shape):
    b = data.draw(st.integers(0, len(shape) - 1))
    k = data.draw(st.integers(1, len(shape) - b))
    m = data.draw(st.integers(0, 3))
    x = rand(*shape)
    idx = np.stack(
        [np.random.default_rng(m).integers(-s, s, size=(*shape[:b], m)) for s in shape[b : b + k]], -1
    )
    check_forward(lambda t, i: ops.gather_nd(t, i, b), lambda a, i: gather_nd_ref(a, i, b), [x, idx], dev)


def test_gather_nd_grad_repeats(dev):
    x = rand(3, 4, 2)
    idx = np.array([[0, 1], [2, 3], [0, 1], [-1, 0]])
    check_grad(lambda t, i: ops.gather_nd(t, i), [x, idx], dev, wrt=[0])
    idx_b = np.array([[[1], [0]], [[2], [2]], [[0], [3]]])
    check_grad(lambda t, i: ops.gather_nd(t, i, 1), [x, idx_b], dev, wrt=[0])


def test_gather_nd_errors(dev):
    x = t_(np.zeros((2, 3), np.float32), dev)
    with pytest.raises(ShapeError, match="out of range"):
        ops.gather_nd(x, [[2, 0]])
    with pytest.raises(ShapeError, match="exceed"):
        ops.gather_nd(x, [[0, 0, 0]])


# -- ScatterND ------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_forward(dev, reduction):
    x = rand(4, 3, 2)
    idx = np.array([[[1], [3]], [[1], [0]]])  # a repeat: the last write wins with "none"
    upd = rand(2, 2, 3, 2, seed=1)
    check_forward(
        lambda *a: ops.scatter_nd(*a, reduction), lambda *a: scatter_nd_ref(*a, reduction), [x, idx, upd], dev
    )
    idx2 = np.array([[0, 1], [3, 2], [0, 1]])
    check_forward(
        lambda *a: ops.scatter_nd(*a, reduction),
        lambda *a: scatter_nd_ref(*a, reduction),
        [x, idx2, rand(3, 2, seed=2)],
        dev,
    )


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_nd_grad(dev, reduction):
    x, upd = rand(4, 3), rand(3, 3, seed=1)
    idx = np.array([[1], [2], [1]])
    check_grad(lambda a, i, u: ops.scatter_nd(a, i, u, reduction), [x, idx, upd], dev, wrt=[0, 2])


def test_scatter_nd_errors(dev):
    x = t_(np.zeros((2, 3), np.float32), dev)
    with pytest.raises(ShapeError, match="updates must have shape"):
        ops.scatter_nd(x, [[0]], t_(np.zeros((1, 2), np.float32), dev))
    with pytest.raises(ShapeError, match="out of range"):
        ops.scatter_nd(x, [[5]], t_(np.zeros((1, 3), np.float32), dev))


# -- TensorScatter --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(dev, mode):
    cache, upd = rand(2, 3, 5, 4), rand(2, 3, 2, 4, seed=1)
    wi = np.array([1, 3 if mode == "linear" else 4])

    def ref(c, u, w):
        out = c.copy()
        for b in range(c.shape[0]):
            for s in range(u.shape[2]):
                out[b, :, (w[b] + s) % c.shape[2]] = u[b, :, s]
        return out

    check_forward(lambda c, u, w: ops.tensor_scatter(c, u, w, -2, mode), ref, [cache, upd, wi], dev)
    check_grad(lambda c, u, w: ops.tensor_scatter(c, u, w, -2, mode), [cache, upd, wi], dev, wrt=[0, 1])
    with pytest.raises(ShapeError, match="outside the cache"):
        run(lambda c, u: ops.tensor_scatter(c, u, [4, 4], 2, "linear"), [cache, upd], dev)


# -- Compress -------------------------------------------------------------------------------------
@given(
    x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=4), elements=st.floats(-3, 3)),
    data=st.data(),
)
def test_compress(dev, x, data):
    axis = data.draw(st.none() | st.integers(-x.ndim, x.ndim - 1))
    n = x.size if axis is None else x.shape[axis]
    cond = np.asarray(data.draw(st.lists(st.booleans(), max_size=n)), dtype=bool)
    check_forward(lambda t, c: ops.compress(t, c, axis), lambda a, c: np.compress(c, a, axis), [x, cond], dev)


def test_compress_grad_and_errors(dev):
    check_grad(lambda t, c: ops.compress(t, c, 1), [rand(2, 4), np.array([1, 0, 1], bool)], dev, wrt=[0])
    with pytest.raises(ShapeError, match="beyond the axis"):
        run(lambda t, c: ops.compress(t, c, 0), [rand(2, 2), np.array([0, 0, 1], bool)], dev)


# -- Unique ---------------------------------------------------------------------------------------
@given(
    x=hnp.arrays(np.int32, hnp.array_shapes(min_dims=1, max_dims=2, max_side=5), elements=st.integers(-2, 2)),
    sort=st.booleans(),
    use_axis=st.booleans(),
)
def test_unique(dev, x, sort, use_axis):
    axis = 0 if use_axis else None

    def ref(a):
        y, first, inv, cnt = np.unique(a, True, True, True, axis=axis)
        inv = inv.reshape(-1)
        if not sort:
            order = np.argsort(first, kind="stable")
            rank = np.argsort(order)
            y, first, cnt, inv = np.take(y, order, axis=0), first[order], cnt[order], rank[inv]
        return y, first.astype(np.int64), inv.astype(np.int64), cnt.astype(np.int64)

    check_forward(lambda t: ops.unique(t, axis, sort), ref, [x], dev)


# -- CumProd --------------------------------------------------------------------------------------
@given(
    x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=4), elements=st.floats(-2, 2)),
    data=st.data(),
    exclusive=st.booleans(),
    reverse=st.booleans(),
)
def test_cumprod_forward(dev, x, data, exclusive, reverse):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    check_forward(
        lambda t: ops.cumprod(t, axis, exclusive, reverse),
        lambda a: cumprod_ref(a, axis % a.ndim, exclusive, reverse),
        [x],
        dev,
    )
    xi = np.round(x * 2).astype(np.int32)
    check_forward(
        lambda t: ops.cumprod(t, axis, exclusive, reverse),
        lambda a: cumprod_ref(a, axis % a.ndim, exclusive, reverse),
        [xi],
        dev,
    )


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumprod_grad_with_zeros(dev, exclusive, reverse):
    x = rand(3, 6)
    x[0, 2] = 0.0  # one zero
    x[1, 1] = x[1, 4] = 0.0  # two zeros: only the first reaches later products
    x[2, 5] = 0.0
    check_grad(lambda t: ops.cumprod(t, 1, exclusive, reverse), [x], dev)
    check_grad(lambda t: ops.cumprod(t, 0, exclusive, reverse), [x], dev)


# -- ReverseSequence ------------------------------------------------------------------------------
@pytest.mark.parametrize(("batch_axis", "time_axis"), [(1, 0), (0, 1)])
def test_reverse_sequence(dev, batch_axis, time_axis):
    x = rand(4, 3, 2) if time_axis == 0 else rand(3, 4, 2)
    lens = np.array([4, 0, 2])

    def ref(a, n):
        out = a.copy()
        for b, k in enumerate(n):
            sl = [slice(None)] * a.ndim
            sl[batch_axis], sl[time_axis] = b, slice(0, k)
            out[tuple(sl)] = np.flip(a[tuple(sl)], axis=0)
        return out

    fn = lambda t, n: ops.reverse_sequence(t, n, batch_axis, time_axis)  # noqa: E731
    check_forward(fn, ref, [x, lens], dev)
    check_grad(fn, [x, lens], dev, wrt=[0])
    with pytest.raises(ShapeError, match="outside"):
        run(fn, [x, np.array([5, 0, 0])], dev)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int32, np.int64, np.bool_])
def test_dtypes_are_kept(dev, dtype):
    x = (rand(4, 3, 2) * 3).astype(dtype)
    idx = np.array([[2, 1], [0, 0]])
    upd = (rand(2, 2, seed=1) * 3).astype(dtype)
    check_forward(lambda t, i: ops.gather_nd(t, i), gather_nd_ref, [x, idx], dev)
    check_forward(lambda t, i, u: ops.scatter_nd(t, i, u), scatter_nd_ref, [x, idx, upd], dev)
    cond = np.array([True, False, True, True])
    check_forward(lambda t, c: ops.compress(t, c, 0), lambda a, c: np.compress(c, a, 0), [x, cond], dev)
    lens = np.array([2, 4, 1])
    rev = lambda a, n: np.stack([np.concatenate([a[:k, b][::-1], a[k:, b]]) for b, k in enumerate(n)], 1)  # noqa: E731
    check_forward(lambda t, n: ops.reverse_sequence(t, n), rev, [x, lens], dev)

"""Indexing ops: slice, getitem, gather/scatter, where, onehot, nonzero."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from opcheck import DTYPES, any_arrays, check_forward, check_grad, elements, rand, run, t_

from singa_lite import autograd, backend, device, tensor
from singa_lite.errors import ArgumentError, DTypeError, ShapeError
from singa_lite.ops import shape as S


def onnx_slice_ref(x, starts, ends, axes, steps):
    """ONNX's reference Slice, written independently from the op (index lists, not slices)."""
    idx = [np.arange(s) for s in x.shape]
    for start, end, axis, step in zip(starts, ends, axes, steps):
        dim = x.shape[axis]
        start, end = (start + dim if start < 0 else start), (end + dim if end < 0 else end)
        if step > 0:
            start, end = np.clip(start, 0, dim), np.clip(end, 0, dim)
            idx[axis] = np.arange(start, end, step)
        else:
            start, end = np.clip(start, 0, dim - 1), np.clip(end, -1, dim - 1)
            idx[axis] = np.arange(start, end, step) if dim else np.arange(0)
    return x[np.ix_(*idx)]


@given(x=any_arrays(min_dims=1), data=st.data())
def test_slice_forward(dev, x, data):
    axes = data.draw(st.lists(st.integers(0, x.ndim - 1), min_size=1, max_size=x.ndim, unique=True))
    big = st.sampled_from([2**62, -(2**62)]) | st.integers(-6, 6)
    starts = [data.draw(big) for _ in axes]
    ends = [data.draw(big) for _ in axes]
    steps = [data.draw(st.sampled_from([1, 2, -1, -3])) for _ in axes]
    neg_axes = [a - x.ndim if data.draw(st.booleans()) else a for a in axes]
    check_forward(
        lambda t: S.slice(t, starts, ends, neg_axes, steps),
        lambda a: onnx_slice_ref(a, starts, ends, axes, steps),
        [x],
        dev,
    )


def test_slice_defaults_and_grad(dev):
    x = rand(3, 4)
    check_forward(lambda t: S.slice(t, [1, -3], [3, 100]), lambda a: a[1:3, -3:], [x], dev)
    check_grad(lambda t: S.slice(t, [-1, 0], [-10, 4], [0, 1], [-2, 3]), [x], dev)


def test_slice_errors(dev):
    t = t_(np.zeros((2, 3), np.float32), dev)
    with pytest.raises(ArgumentError, match=r"Slice: steps must be nonzero, got \[0\]"):
        S.slice(t, [0], [1], [0], [0])
    with pytest.raises(ArgumentError, match=r"Slice: ends must be a sequence of integers of length 2"):
        S.slice(t, [0, 0], [1])
    with pytest.raises(ShapeError, match=r"Slice.*out of range"):
        S.slice(t, [0], [1], [2])


KEYS = [
    (1,),
    (slice(None, None, -1), 0),
    (Ellipsis, None, slice(1, 3)),
    ([0, 2, 0],),
    (slice(None), [[1, 1], [0, 2]]),
    ([0, 1], [2, 2]),
    (np.array([True, False, True]),),
    ("mask",),
    ("tensor",),
    (None, 0, [1, 0, 1], Ellipsis),
]


@pytest.mark.parametrize("key", KEYS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_getitem_forward(dev, key, dtype):
    x = (np.arange(3 * 3 * 4) % 5).reshape(3, 3, 4).astype(dtype)
    mask = x.astype(np.float64) > 2
    idx = np.array([2, 0, 2])

    def resolve(wrap):
        named = {"mask": mask, "tensor": idx}
        return tuple(wrap(named[k]) if isinstance(k, str) else k for k in key)

    check_forward(
        lambda t: S.getitem(t, resolve(lambda a: t_(a, dev))), lambda a: a[resolve(lambda a: a)], [x], dev
    )


def test_tensor_int_index_keeps_the_axis_as_in_singa(dev):
    """``Tensor[int]`` keeps its axis (SINGA's semantics) in basic indexing; ``ops.getitem``
    and keys with index arrays keep NumPy's."""
    x = np.arange(24.0).reshape(2, 3, 4)
    t = t_(x, dev)
    assert t[1].shape == (1, 3, 4)
    assert t[:, -1].shape == (2, 1, 4)
    assert t[0, 1:, -1].shape == (1, 2, 1)
    np.testing.assert_array_equal(t[-1, 2].numpy(), x[-1:, 2:3])
    assert t[None, 1].shape == (1, 1, 3, 4)
    assert t[..., 0].shape == (2, 3, 1)
    assert S.getitem(t, 1).shape == (3, 4)  # NumPy's rule through the op
    assert t[[0, 1], 0].shape == (2, 4)  # advanced indexing: NumPy's rule
    assert [r.shape for r in t] == [(3, 4), (3, 4)]  # iteration yields NumPy's rows
    with pytest.raises(IndexError, match=r"GetItem: index 2 is out of range \[-2, 2\) for axis 0"):
        t[2]
    with pytest.raises(IndexError, match="for axis 2"):
        t[0, 0, -5]


@pytest.mark.parametrize("key", KEYS, ids=str)
def test_getitem_grad(dev, key):
    x = rand(3, 3, 4)
    mask = x > 0
    idx = np.array([2, 0, 2])  # repeated: gradients must add up
    named = {"mask": mask, "tensor": t_(idx, dev)}
    resolved = tuple(named[k] if isinstance(k, str) else k for k in key)
    check_grad(lambda t: S.getitem(t, resolved), [x], dev)


def test_getitem_errors(dev):
    t = t_(np.zeros((2, 3), np.float32), dev)
    with pytest.raises(IndexError, match=r"GetItem.*\(2, 3\)"):
        t[2]
    with pytest.raises(IndexError, match="GetItem"):
        t[[0, 5]]
    # CuPy wraps integer-array indices around instead of raising, so the op checks them itself,
    # for host lists and for index Tensors alike, on the axis each one indexes.
    t2, t3 = t_(np.array([0, 2]), dev), t_(np.array([3, 0]), dev)
    bad = [
        ([0, 5], r"index 5 is out of range \[-2, 2\) for axis 0"),
        ((Ellipsis, [0, -4]), r"index -4 is out of range \[-3, 3\) for axis 1"),
        ((None, slice(None), np.array([[3]])), r"index 3 is out of range \[-3, 3\) for axis 1"),
        ((t2, [0, 1]), r"index 2 is out of range \[-2, 2\) for axis 0"),
        (([0, 1], t3), r"index 3 is out of range \[-3, 3\) for axis 1"),
        ((np.array([True, False]), t3), r"index 3 is out of range \[-3, 3\) for axis 1"),
    ]
    for key, message in bad:
        if dev.is_gpu() and any(isinstance(k, tensor.Tensor) for k in key):
            # A device Tensor's indices are checked on the device: the error comes at the next
            # host read, naming the axis and its range but not the index (reading it would sync).
            axis = re.search(r"for axis (\d)", message).group(1)
            deferred = rf"GetItem: an index is out of range \[.*\) for axis {axis} .*\(2, 3\)"
            with pytest.raises(IndexError, match=deferred):
                tensor.to_numpy(t[key])
            continue
        with pytest.raises(IndexError, match=f"GetItem: {message}.*\\(2, 3\\)"):
            t[key]
    assert t[t_(np.array([-2, 1]), dev), [-3, 2]].shape == (2,)


@given(x=any_arrays(min_dims=1), data=st.data())
def test_gather_forward(dev, x, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    n = x.shape[axis]
    ishape = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))
    if n == 0:
        ishape = (0,)
    idx = data.draw(hnp.arrays(np.int64, ishape, elements=st.integers(-n, max(n - 1, -n))))
    check_forward(lambda t: S.gather(t, axis, idx), lambda a: np.take(a, idx, axis=axis), [x], dev)
    check_forward(
        lambda t: S.gather(t, axis, t_(idx.astype(np.int32), dev)), lambda a: np.take(a, idx, axis), [x], dev
    )


def test_gather_grad(dev):
    check_grad(lambda t: S.gather(t, 1, [[0, 2], [2, -1]]), [rand(2, 3, 2)], dev)
    check_grad(lambda t: S.gather(t, 0, 1), [rand(3, 2)], dev)
    # Repeated indices accumulate: d/dx sum(gather(x, [0, 0, 1])) = [2, 1, 0].
    autograd.training = True
    t = t_(np.zeros(3), dev)
    t.requires_grad = t.stores_grad = True
    g = autograd.gradients(S.gather(t, 0, [0, 0, 1]))[t]
    assert tensor.to_numpy(g).tolist() == [2.0, 1.0, 0.0]


@given(
    st.integers(0, 6),
    st.lists(st.integers(0, 5), max_size=40),
    st.sampled_from([(), (3,), (2, 2)]),
    st.sampled_from([np.float32, np.float64]),
    st.integers(0, 2**32 - 1),
)
def test_rows_added_is_add_at_on_axis_0(extra, idx, tail, dtype, seed):
    """Gather's axis-0 backward (an embedding's): the same sums as NumPy's add.at, repeats
    and rows no index names included."""
    from singa_lite.ops.indexing import rows_added

    n = (max(idx) + 1 if idx else 0) + extra
    idx = np.asarray(idx, np.int64)
    rows = np.random.default_rng(seed).standard_normal((idx.size, *tail)).astype(dtype)
    ref = np.zeros((n, *tail), dtype)
    np.add.at(ref, idx, rows)
    got = rows_added((n, *tail), idx, rows)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, float(np.abs(rows).sum())))


def test_gather_axis0_grad_with_index_matrix(dev):
    """A (2, 3) index matrix into a (4, 2) table, repeats included: backward sums the rows."""
    check_grad(lambda t: S.gather(t, 0, [[0, 3, 0], [-1, 2, 0]]), [rand(4, 2)], dev)


def test_gather_errors(dev):
    t = t_(np.zeros((2, 3), np.float32), dev)
    with pytest.raises(ShapeError, match=r"Gather: index out of range \[-3, 3\): min 0, max 3.*\(2, 3\)"):
        S.gather(t, 1, [0, 3])
    with pytest.raises(ShapeError, match="Gather"):
        S.gather(t, 0, [-3])
    with pytest.raises(DTypeError, match="gather: indices must be integers"):
        S.gather(t, 0, t_(np.zeros(2, np.float32), dev))
    with pytest.raises(ShapeError, match="out of range"):
        S.gather(t, 2, [0])


def _along(x, idx, axis):
    grid = list(np.ogrid[tuple(slice(n) for n in idx.shape)])
    grid[axis] = np.where(idx < 0, idx + x.shape[axis], idx)
    return tuple(grid)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_scatter_elements_forward(dev, dtype, axis):
    rng = np.random.default_rng(1)
    x = rng.integers(-5, 5, (3, 4)).astype(dtype)
    idx = rng.integers(-x.shape[axis], x.shape[axis], (2, 3))
    check_forward(lambda t: S.gather_elements(t, idx, axis), lambda a: a[_along(a, idx, axis)], [x], dev)
    upd = rng.integers(-5, 5, (2, 3)).astype(dtype)
    reductions = ["none", "add", "mul", "max", "min"] if dtype != np.bool_ else ["none", "max", "min"]
    for red in reductions:

        def ref(a, u, red=red):
            y = a.copy()
            key = _along(a, idx, axis)
            if red == "none":
                y[key] = u
            else:
                getattr(np, {"add": "add", "mul": "multiply", "max": "maximum", "min": "minimum"}[red]).at(
                    y, key, u
                )
            return y

        fn = lambda a, u, red=red: S.scatter_elements(a, t_(idx, dev), u, axis, red)  # noqa: E731
        check_forward(fn, ref, [x, upd], dev)


def test_gather_scatter_elements_grad(dev):
    idx = np.array([[0, 2, 0], [0, 1, 2]])  # repeats along axis 0 in column 0
    check_grad(lambda t: S.gather_elements(t, idx, 0), [rand(3, 3)], dev)
    check_grad(lambda t: S.gather_elements(t, idx, 1), [rand(2, 4)], dev)
    unique = np.array([[0, 2, 1], [1, 0, 2]])
    for red in ("none", "add"):
        check_grad(
            lambda a, u, red=red: S.scatter_elements(a, unique, u, 0, red), [rand(3, 3), rand(2, 3)], dev
        )
        check_grad(lambda a, u, red=red: S.scatter_elements(a, idx, u, 1, red), [rand(2, 4), rand(2, 3)], dev)
    # With repeats and reduction none, only the update that lands gets a gradient.
    check_grad(lambda a, u: S.scatter_elements(a, idx, u, 0), [rand(3, 3), rand(2, 3)], dev)


REDUCE_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def scatter_in_order(x, idx, upd, axis, red):
    """ScatterElements as ONNX specifies it: updates applied one by one in C order."""
    y = x.copy()
    combine = {"none": lambda a, u: u, **REDUCE_UFUNCS}
    for at in np.ndindex(idx.shape):
        target = list(at)
        target[axis] = idx[at] % x.shape[axis]
        y[tuple(target)] = combine[red](y[tuple(target)], upd[at])
    return y


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("red", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_many_repeats(dev, dtype, red):
    """Dozens of updates per element: every reduction, every dtype, equal to the in-order
    reference. The values keep every result exact in any order of evaluation, so the only
    way to differ is to pick the wrong winner, or to drop or double an update."""
    rng = np.random.default_rng(3)
    for axis, xshape, ishape in [(0, (3, 4), (40, 3)), (1, (2, 3, 5), (2, 33, 4)), (-1, (7,), (70,))]:
        x = rng.integers(0, 3, xshape).astype(dtype)
        idx = rng.integers(-xshape[axis], xshape[axis], ishape)
        # Products of +-1 (of True for bool) stay exact and in range for every dtype.
        upd = rng.choice([True] if dtype == np.bool_ else [-1, 1], ishape) if red == "mul" else None
        upd = (rng.integers(0, 4, ishape) if upd is None else upd).astype(dtype)
        with np.errstate(over="ignore"):
            want = scatter_in_order(x, idx, upd, axis, red)
        got = run(lambda a, u, idx=idx, axis=axis: S.scatter_elements(a, idx, u, axis, red), [x, upd], dev)[0]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want, err_msg=f"axis {axis}")


@pytest.mark.parametrize("red", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_same_bits_everywhere(dev, red):
    """Inexact float32 sums and products, thousands of writes per element: every run on every
    device gives the bits of the CPU (GPU atomics would give a run-dependent order)."""
    rng = np.random.default_rng(7)
    x = rng.uniform(0.5, 1.5, (4, 6)).astype(np.float32)
    idx = rng.integers(0, 4, (4000, 6))
    upd = rng.uniform(0.999, 1.001, (4000, 6)).astype(np.float32)
    on_cpu = run(lambda a, u: S.scatter_elements(a, idx, u, 0, red), [x, upd], device.create_cpu_device())[0]
    for _ in range(3):
        got = run(lambda a, u: S.scatter_elements(a, idx, u, 0, red), [x, upd], dev)[0]
        np.testing.assert_array_equal(got, on_cpu)


def test_scatter_elements_last_write_wins_grad(dev):
    # Many writes to each element: only the last of each reaches the output and gets a gradient.
    idx = np.random.default_rng(5).integers(0, 2, (9, 3))
    check_grad(lambda a, u: S.scatter_elements(a, idx, u, 0), [rand(2, 3), rand(9, 3)], dev)
    check_grad(lambda a, u: S.scatter_elements(a, idx, u, 0, "add"), [rand(2, 3), rand(9, 3)], dev)


def test_runs_pick_the_last_write():
    from singa_lite.ops.indexing import _fold_runs, _runs

    pos = np.array([3, 1, 3, 0, 1, 3])
    sorted_pos, order, last = _runs(np, pos)
    assert sorted_pos.tolist() == [0, 1, 1, 3, 3, 3]
    assert order.tolist() == [3, 1, 4, 0, 2, 5]  # stable: equal positions keep their order
    assert last.tolist() == [True, False, True, False, False, True]
    vals = np.array([10, 20, 30, 40, 50, 60])[order]
    assert _fold_runs(np, np.add, sorted_pos, vals).tolist() == [40, 20, 70, 10, 40, 100]


def test_host_indices_need_no_host_read(dev):
    """Indices given on the host are checked before upload; a Tensor's where they are (on a
    device through a flag raised at the next host read): no index check reads anything back."""
    x = t_(rand(3, 4), dev)
    u = t_(rand(1, 4), dev)
    idx = np.array([[0, 2, 1, -1]])
    ti, tk = t_(idx, dev), t_(np.array([2, -3]), dev)
    calls = {
        "gather": lambda i: S.gather(x, 0, i),
        "gather_elements": lambda i: S.gather_elements(x, i, 0),
        "scatter_elements": lambda i: S.scatter_elements(x, i, u, 0),
    }
    for name, call in calls.items():
        with backend.count_host_reads() as reads:
            call(idx)
            call(idx.tolist())
        assert sum(reads.values()) == 0, name
        with backend.count_host_reads() as reads:
            call(ti)
        assert sum(reads.values()) == 0, (name, reads)
    with backend.count_host_reads() as reads:
        x[[[0], [-1]], [1, 3, -4]]
        x[tk, tk]
    assert sum(reads.values()) == 0
    # On the host the error comes at once, with the bad values; on a device at the next read.
    detail = "" if dev.is_gpu() else ": min -1, max 3"
    with pytest.raises(ShapeError, match=rf"Gather: index out of range \[-3, 3\){detail}"):
        S.gather(x, 0, t_(np.array([3, -1]), dev))
        dev.Sync()
    detail = "" if dev.is_gpu() else ": min -4"
    with pytest.raises(ShapeError, match=rf"ScatterElements: index out of range \[-3, 3\){detail}"):
        S.scatter_elements(x, t_(np.array([[-4, 0, 0, 0]]), dev), u)
        dev.Sync()
    with pytest.raises(IndexError, match=r"GetItem: .*out of range .*for axis 0"):
        x[t_(np.array([0, 3]), dev)]
        dev.Sync()


def test_gather_scatter_elements_errors(dev):
    x = t_(np.zeros((2, 3), np.float32), dev)
    with pytest.raises(ShapeError, match=r"GatherElements.*out of range.*\(2, 3\)"):
        S.gather_elements(x, np.array([[2]]), 0)
    with pytest.raises(ShapeError, match=r"GatherElements.*rank"):
        S.gather_elements(x, np.array([0]), 0)
    u = t_(np.zeros((1, 2), np.float32), dev)
    with pytest.raises(ShapeError, match=r"ScatterElements.*same shape"):
        S.scatter_elements(x, np.zeros((1, 1), np.int64), u)
    with pytest.raises(DTypeError, match="ScatterElements"):
        S.scatter_elements(x, np.zeros((1, 2), np.int64), t_(np.zeros((1, 2)), dev))
    with pytest.raises(ValueError, match="reduction"):
        S.scatter_elements(x, np.zeros((1, 2), np.int64), u, reduction="mean")


@given(
    c=hnp.arrays(np.bool_, hnp.array_shapes(max_dims=2, max_side=3)),
    dtype=st.sampled_from(DTYPES),
    data=st.data(),
)
def test_where_forward(dev, c, dtype, data):
    shape = data.draw(hnp.broadcastable_shapes(c.shape, max_dims=3, max_side=3))
    x = data.draw(hnp.arrays(dtype, shape, elements=elements(dtype)))
    y = data.draw(hnp.arrays(dtype, c.shape, elements=elements(dtype)))
    check_forward(S.where, np.where, [c, x, y], dev)


def test_where_grad_and_scalars(dev):
    c = np.array([[True, False, True]])
    check_grad(S.where, [np.array([True, False]).reshape(2, 1), rand(2, 3), rand(3)], dev, wrt=[1, 2])
    check_forward(
        lambda a: S.where(t_(c, dev), a, 0.0),
        lambda a: np.where(c, a, a.dtype.type(0)),
        [np.ones((2, 3), np.float32)],
        dev,
    )
    check_forward(
        lambda a: S.where(t_(c, dev), 5, a),
        lambda a: np.where(c, a.dtype.type(5), a),
        [np.ones(3, np.int32)],
        dev,
    )


def test_where_errors(dev):
    c = t_(np.ones(3, bool), dev)
    with pytest.raises(ShapeError, match=r"Where.*\(3,\), \(2,\)"):
        S.where(c, t_(np.ones(2, np.float32), dev), t_(np.ones(3, np.float32), dev))
    with pytest.raises(DTypeError, match="Where"):
        S.where(c, t_(np.ones(3, np.float32), dev), t_(np.ones(3, np.float64), dev))


def onehot_ref(idx, depth, values, axis):
    idx = np.where(idx < 0, idx + depth, idx)
    hot = idx[..., None] == np.arange(depth)
    return np.where(np.moveaxis(hot, -1, axis), values[1], values[0])


@given(
    idx=hnp.arrays(
        np.int64, hnp.array_shapes(min_dims=0, max_dims=2, max_side=3), elements=st.integers(-5, 5)
    ),
    depth=st.integers(1, 4),
    data=st.data(),
)
def test_onehot(dev, idx, depth, data):
    axis = data.draw(st.integers(-idx.ndim - 1, idx.ndim))
    want = onehot_ref(idx, depth, np.array([0, 1], np.float32), axis)
    check_forward(lambda t: S.onehot(t, depth, axis=axis), lambda a: want, [idx], dev)
    vals = np.array([-1, 3], np.int32)
    check_forward(
        lambda t, v: S.onehot(t, t_(np.array([depth]), dev), v, axis),
        lambda a, v: onehot_ref(a, depth, v, axis),
        [idx, vals],
        dev,
    )
    check_forward(
        lambda t: S.onehot(t, depth, (2.0, 5.0), axis),
        lambda a: onehot_ref(a, depth, np.float32([2, 5]), axis),
        [idx.astype(np.float32)],
        dev,
    )


def test_onehot_errors(dev):
    with pytest.raises(ArgumentError, match="onehot: depth must be an integer >= 1, got 0"):
        S.onehot(t_(np.zeros(2, np.int64), dev), 0)
    with pytest.raises(ShapeError, match=r"OneHot.*two entries"):
        S.onehot(t_(np.zeros(2, np.int64), dev), 3, t_(np.zeros(3, np.float32), dev))


@given(x=any_arrays(min_dims=0))
def test_nonzero(dev, x):
    want = (
        np.zeros((0, int(x != 0)), np.int64)
        if x.ndim == 0
        else np.array(np.nonzero(x), np.int64).reshape(x.ndim, -1)
    )
    check_forward(S.nonzero, lambda a: want, [x], dev)


def test_index_outputs_pass_no_gradient(dev):
    autograd.training = True
    t = t_(rand(2, 3), dev)
    t.requires_grad = t.stores_grad = True
    assert S.nonzero(t).dtype == np.int64
    assert S.shape_of(t).dtype == np.int64
    assert run(lambda a: S.onehot(a, 3), [np.array([1])], dev)[0].dtype == np.float32

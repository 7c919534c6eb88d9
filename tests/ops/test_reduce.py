"""Reductions: NumPy references over shapes x dtypes x axes, float64 gradient checks, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from opcheck import check_forward, check_grad, run

from singa_lite import autograd, tensor
from singa_lite.errors import DTypeError, ShapeError
from singa_lite.ops import reduce as R

NUMERIC = [np.float16, np.float32, np.float64, np.int32, np.int64]
FLOATS = [np.float16, np.float32, np.float64]


def elements(dtype: type) -> st.SearchStrategy:
    if np.dtype(dtype).kind == "f":
        return st.floats(-4, 4, width=16)
    if np.dtype(dtype).kind == "b":
        return st.booleans()
    return st.integers(-20, 20)


@st.composite
def array_and_axes(draw: st.DrawFn, dtypes: list = NUMERIC, min_side: int = 0) -> tuple:
    """An array, and axes as None, an int or a tuple (negatives included)."""
    dtype = draw(st.sampled_from(dtypes))
    x = draw(
        hnp.arrays(
            dtype,
            hnp.array_shapes(min_dims=0, max_dims=3, min_side=min_side, max_side=4),
            elements=elements(dtype),
        )
    )
    if x.ndim == 0 or draw(st.booleans()):
        return x, None
    chosen = draw(st.lists(st.integers(0, x.ndim - 1), min_size=1, max_size=x.ndim, unique=True))
    axes = tuple(a - x.ndim if draw(st.booleans()) else a for a in chosen)
    return x, (axes[0] if len(axes) == 1 and draw(st.booleans()) else axes)


def param(x: np.ndarray, dev) -> tensor.Tensor:
    """A tensor that autograd yields a gradient for."""
    t = tensor.Tensor(data=x, device=dev, requires_grad=False)
    t.requires_grad = t.stores_grad = True
    return t


def distinct(shape: tuple, seed: int = 0) -> np.ndarray:
    """float64 values without ties (max/min gradients are only defined off ties)."""
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n) * 0.37 - 1.0).reshape(shape)


@given(xa=array_and_axes(), keepdims=st.booleans())
def test_reduce_sum_forward(dev, xa, keepdims):
    x, axes = xa
    out_dtype = np.int64 if x.dtype == np.bool_ else x.dtype
    acc = np.float32 if x.dtype == np.float16 else x.dtype

    def ref(a):
        return a.sum(axis=axes, keepdims=keepdims, dtype=acc).astype(out_dtype)

    check_forward(lambda t: R.reduce_sum(t, axes, keepdims), ref, [x], dev)


def test_reduce_sum_bool_counts(dev):
    y = run(R.reduce_sum, [np.array([True, False, True])], dev)[0]
    assert y.dtype == np.int64 and y == 2


@given(xa=array_and_axes(min_side=1), keepdims=st.booleans())
def test_reduce_mean_forward(dev, xa, keepdims):
    x, axes = xa

    def ref(a):
        if a.dtype.kind == "f":
            return a.astype(np.float64).mean(axis=axes, keepdims=keepdims).astype(a.dtype)
        return a.mean(axis=axes, keepdims=keepdims).astype(a.dtype)

    check_forward(lambda t: R.reduce_mean(t, axes, keepdims), ref, [x], dev)


@pytest.mark.parametrize("op, ref", [(R.reduce_max, np.max), (R.reduce_min, np.min)])
@given(xa=array_and_axes(min_side=1), keepdims=st.booleans())
def test_reduce_extreme_forward(dev, op, ref, xa, keepdims):
    x, axes = xa
    check_forward(lambda t: op(t, axes, keepdims), lambda a: ref(a, axis=axes, keepdims=keepdims), [x], dev)


@given(xa=array_and_axes(dtypes=[np.float32, np.float64, np.int64]), keepdims=st.booleans())
def test_reduce_prod_forward(dev, xa, keepdims):
    x, axes = xa
    check_forward(
        lambda t: R.reduce_prod(t, axes, keepdims),
        lambda a: a.prod(axis=axes, keepdims=keepdims).astype(a.dtype),
        [x],
        dev,
        rtol=1e-4,
    )


@pytest.mark.parametrize("axes", [None, 0, -1, (0, 2), (1,)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("op", [R.reduce_sum, R.reduce_mean, R.reduce_max, R.reduce_min, R.reduce_prod])
def test_reduce_grad(dev, op, axes, keepdims):
    x = distinct((2, 3, 2))
    check_grad(lambda t: op(t, axes, keepdims), [x], dev)


def test_reduce_prod_grad_at_zeros(dev):
    x = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 5.0]])
    check_grad(lambda t: R.reduce_prod(t, 1), [x], dev)
    autograd.training = True
    t = param(x, dev)
    g = autograd.gradients(R.reduce_prod(t, 1))[t]
    np.testing.assert_allclose(tensor.to_numpy(g), [[6.0, 0.0, 0.0], [0.0, 0.0, 0.0]])


@pytest.mark.parametrize("op", [R.reduce_max, R.reduce_min])
def test_extreme_grad_splits_ties(dev, op):
    x = np.array([[1.0, 3.0, 3.0], [-2.0, -2.0, 0.0]])
    autograd.training = True
    t = param(x, dev)
    g = tensor.to_numpy(autograd.gradients(op(t, 1))[t])
    want = [[0, 0.5, 0.5], [0, 0, 1]] if op is R.reduce_max else [[1, 0, 0], [0.5, 0.5, 0]]
    np.testing.assert_allclose(g, want)


@pytest.mark.parametrize("dtype", FLOATS)
def test_reduce_grad_keeps_dtype(dev, dtype):
    autograd.training = True
    t = param(np.ones((2, 3), dtype), dev)
    loss = R.reduce_sum(R.reduce_mean(t, 0)) + R.reduce_sum(R.reduce_max(t, 1))
    assert autograd.gradients(loss)[t].dtype == dtype


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@given(
    xa=array_and_axes(dtypes=[np.float32, np.int32, np.int64], min_side=1),
    keepdims=st.booleans(),
    last=st.booleans(),
)
def test_arg_extreme(dev, name, xa, keepdims, last):
    x, axes = xa
    if x.ndim == 0:
        return
    axis = axes[0] if isinstance(axes, tuple) else (-1 if axes is None else axes)
    np_fn = getattr(np, name)

    def ref(a):
        if last:
            i = a.shape[axis] - 1 - np_fn(np.flip(a, axis), axis=axis, keepdims=keepdims)
        else:
            i = np_fn(a, axis=axis, keepdims=keepdims)
        return np.asarray(i, dtype=np.int64)

    check_forward(lambda t: getattr(R, name)(t, axis, keepdims, last), ref, [x], dev)


def test_arg_extreme_ties_and_flat(dev):
    x = np.array([[1, 5, 5], [2, 2, 0]], np.float32)
    assert run(lambda t: R.argmax(t, 1), [x], dev)[0].tolist() == [1, 0]
    assert run(lambda t: R.argmax(t, 1, select_last_index=True), [x], dev)[0].tolist() == [2, 1]
    assert run(lambda t: R.argmin(t, 1, True, True), [x], dev)[0].tolist() == [[0], [2]]
    assert run(lambda t: R.argmax(t, None), [x], dev)[0] == 1


def test_argmax_passes_no_gradient(dev):
    autograd.training = True
    t = param(np.array([1.0, 3.0, 2.0]), dev)
    y = R.argmax(t, 0)
    assert y.dtype == np.int64
    loss = R.reduce_sum(t) * 2.0
    assert set(autograd.gradients(loss)) == {t}


def test_tensor_sum_positional(dev):
    t = tensor.Tensor(data=np.ones((2, 3), np.float32), device=dev, requires_grad=False)
    y = tensor.sum(t, 1, True)
    assert y.shape == (2, 1) and y.dtype == np.float32


def test_reduce_errors(dev):
    x = tensor.Tensor(data=np.ones((2, 3), np.float32), device=dev, requires_grad=False)
    with pytest.raises(ShapeError, match=r"ReduceSum.*axis 2 is out of range"):
        R.reduce_sum(x, 2)
    with pytest.raises(ShapeError, match="repeated axis"):
        R.reduce_mean(x, (1, -1))
    empty = tensor.Tensor(data=np.ones((0, 3), np.float32), device=dev, requires_grad=False)
    with pytest.raises(ShapeError, match=r"ReduceMax.*\(0, 3\)"):
        R.reduce_max(empty, 0)
    with pytest.raises(ShapeError, match=r"ArgMin.*\(0, 3\)"):
        R.argmin(empty, 0)
    with pytest.raises(ShapeError, match="ReduceMean"):
        R.reduce_mean(empty, 0)
    with pytest.raises(DTypeError, match="ReduceMean"):
        R.reduce_mean(tensor.Tensor(data=np.ones(3, bool), device=dev, requires_grad=False))
    assert R.reduce_max(empty, 1).shape == (0,)


# -- cumsum -------------------------------------------------------------------------------------
def ref_cumsum(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """ONNX CumSum written out element by element along the axis."""
    moved = np.moveaxis(x.astype(np.float64 if x.dtype.kind == "f" else np.int64), axis, -1)
    out = np.zeros_like(moved)
    n = moved.shape[-1]
    for j in range(n):
        lo, hi = (j, n) if reverse else (0, j + 1)
        if exclusive:
            lo, hi = (j + 1, n) if reverse else (0, j)
        out[..., j] = moved[..., lo:hi].sum(axis=-1)
    return np.moveaxis(out, -1, axis).astype(x.dtype)


@given(
    xa=array_and_axes(dtypes=NUMERIC, min_side=1),
    exclusive=st.booleans(),
    reverse=st.booleans(),
)
def test_cumsum_forward(dev, xa, exclusive, reverse):
    x, _ = xa
    if x.ndim == 0:
        x = x.reshape(1)
    axis = -1 if x.ndim == 1 else 1 - x.ndim  # a negative axis, counted from the end
    tol = 2e-2 if x.dtype == np.float16 else 1e-6
    check_forward(
        lambda t: R.cumsum(t, axis, exclusive, reverse),
        lambda a: ref_cumsum(a, axis % a.ndim, exclusive, reverse),
        [x],
        dev,
        rtol=tol,
        atol=tol,
    )


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum_grad(dev, axis, exclusive, reverse):
    check_grad(lambda t: R.cumsum(t, axis, exclusive, reverse), [distinct((3, 4, 2))], dev)


def test_cumsum_bad_input(dev):
    with pytest.raises(ShapeError):
        R.cumsum(tensor.Tensor(data=np.float32(1.0), device=dev, requires_grad=False), 0)
    with pytest.raises(ShapeError):
        R.cumsum(tensor.Tensor(data=np.ones((2, 3), np.float32), device=dev, requires_grad=False), 2)
    with pytest.raises(DTypeError):
        R.cumsum(tensor.Tensor(data=np.ones(3, bool), device=dev, requires_grad=False), 0)


def test_exclusive_cumsum_keeps_inf_nan_and_small_terms(dev):
    x = np.array([np.inf, 1.0, 2.0], np.float32)
    (got,) = run(lambda t: R.cumsum(t, 0, exclusive=True), [x], dev)
    np.testing.assert_array_equal(got, [0.0, np.inf, np.inf])
    (got,) = run(lambda t: R.cumsum(t, 0, exclusive=True, reverse=True), [x], dev)
    np.testing.assert_array_equal(got, [3.0, 2.0, 0.0])
    (got,) = run(lambda t: R.cumsum(t, 0, exclusive=True), [np.array([1.0, 1e8, 3.0], np.float32)], dev)
    np.testing.assert_array_equal(got, np.array([0.0, 1.0, 1e8 + 1], np.float32))  # no cancellation

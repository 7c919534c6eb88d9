"""Shape ops: NumPy references over shapes x dtypes, float64 gradient checks, views, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import DTYPES, any_arrays, check_forward, check_grad, rand, run, t_

from singa_lite import autograd, tensor
from singa_lite.errors import ArgumentError, DTypeError, ShapeError
from singa_lite.ops import shape as S


# -- reshape family ---------------------------------------------------------------------------
@given(x=any_arrays(), data=st.data())
def test_reshape_forward(dev, x, data):
    shape = data.draw(st.permutations(list(x.shape)))
    if shape and x.size and data.draw(st.booleans()):
        shape[data.draw(st.integers(0, len(shape) - 1))] = -1
    check_forward(lambda t: S.reshape(t, tuple(shape)), lambda a: a.reshape(shape), [x], dev)
    check_forward(
        lambda t: t.reshape(*shape) if shape else t.reshape(()), lambda a: a.reshape(shape), [x], dev
    )


@given(x=any_arrays(min_dims=1), data=st.data())
def test_flatten_squeeze_unsqueeze_forward(dev, x, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim))
    k = axis + x.ndim if axis < 0 else axis
    flat = (int(np.prod(x.shape[:k])), int(np.prod(x.shape[k:])))
    check_forward(lambda t: S.flatten(t, axis), lambda a: a.reshape(flat), [x], dev)
    check_forward(S.squeeze, np.squeeze, [x], dev)
    ones = tuple(i for i, s in enumerate(x.shape) if s == 1)
    check_forward(lambda t: S.squeeze(t, list(ones)), lambda a: np.squeeze(a, ones), [x], dev)
    k = data.draw(st.integers(1, 2))
    new = data.draw(st.lists(st.integers(-x.ndim - k, x.ndim + k - 1), min_size=k, max_size=k, unique=True))
    if len({a % (x.ndim + k) for a in new}) < k:
        return
    check_forward(lambda t: S.unsqueeze(t, new), lambda a: np.expand_dims(a, tuple(new)), [x], dev)
    check_forward(lambda t: S.unsqueeze(t, -1), lambda a: a[..., None], [x], dev)


@given(x=any_arrays(), data=st.data())
def test_transpose_forward(dev, x, data):
    perm = data.draw(st.permutations(range(x.ndim)))
    check_forward(lambda t: S.transpose(t, perm), lambda a: a.transpose(perm), [x], dev)
    check_forward(lambda t: t.T(), lambda a: a.T, [x], dev)


def test_reshape_transpose_are_views(dev):
    t = t_(np.zeros((2, 3, 4), np.float32), dev)
    for y in (
        S.reshape(t, (6, 4)),
        S.transpose(t, (2, 0, 1)),
        S.squeeze(S.unsqueeze(t, 0)),
        S.split(t, 2, [1, 3])[1],
    ):
        assert dev.xp.shares_memory(y.data, t.data)  # CuPy has it too


def test_reshape_family_grad(dev):
    x = rand(2, 3, 2)
    check_grad(lambda t: S.reshape(t, (3, -1)), [x], dev)
    check_grad(lambda t: S.flatten(t, 2), [x], dev)
    check_grad(lambda t: S.transpose(t, (1, 2, 0)), [x], dev)
    check_grad(lambda t: S.transpose(t), [x], dev)
    check_grad(lambda t: S.squeeze(S.unsqueeze(t, [0, 2]), 0), [x], dev)


def test_reshape_errors(dev):
    t = t_(np.zeros((2, 3), np.float32), dev)
    with pytest.raises(ShapeError, match=r"Reshape: cannot reshape 6 elements to \(4, -1\).*\(2, 3\)"):
        S.reshape(t, (4, -1))
    with pytest.raises(ShapeError, match=r"Reshape.*\(5,\)"):
        S.reshape(t, (5,))
    with pytest.raises(ShapeError, match="at most one -1"):
        S.reshape(t, (-1, -1))
    with pytest.raises(ShapeError, match=r"Transpose.*permutation.*\(2, 3\)"):
        S.transpose(t, (0, 0))
    with pytest.raises(ShapeError, match=r"Squeeze.*size is not 1"):
        S.squeeze(t, 0)
    with pytest.raises(ShapeError, match="Flatten"):
        S.flatten(t, 3)
    with pytest.raises(ShapeError, match="Unsqueeze"):
        S.unsqueeze(t, 3)


# -- cat / split --------------------------------------------------------------------------------
@given(x=any_arrays(min_dims=1), data=st.data())
def test_cat_split_forward(dev, x, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    other = np.ones(x.shape[: axis % x.ndim] + (2,) + x.shape[axis % x.ndim + 1 :], x.dtype)
    check_forward(
        lambda a, b: S.cat([a, b, a], axis), lambda a, b: np.concatenate([a, b, a], axis), [x, other], dev
    )
    n = x.shape[axis]
    cut = data.draw(st.integers(0, n))
    check_forward(
        lambda a: S.split(a, axis, [cut, n - cut]), lambda a: tuple(np.split(a, [cut], axis)), [x], dev
    )
    if n:
        k = data.draw(st.integers(1, n))
        step = -(-n // k)
        if step * (k - 1) <= n:
            cuts = [step * i for i in range(1, k)]
            check_forward(
                lambda a: S.split(a, axis, None, k), lambda a: tuple(np.split(a, cuts, axis)), [x], dev
            )


def test_cat_split_grad(dev):
    check_grad(lambda a, b: S.cat((a, b), 1), [rand(2, 1, 2), rand(2, 3, 2, seed=1)], dev)
    check_grad(lambda a: S.split(a, -1, [1, 0, 2]), [rand(2, 3)], dev)
    check_grad(lambda a: S.split(a, 0, None, 2), [rand(3, 2)], dev)
    # An unused output still gets a (zero) gradient slot.
    check_grad(lambda a: S.split(a, 0, [1, 2])[1], [rand(3, 2)], dev)
    assert S.concat is S.cat


def test_cat_split_errors(dev):
    a, b = t_(np.zeros((2, 3), np.float32), dev), t_(np.zeros((2, 4), np.float32), dev)
    with pytest.raises(ShapeError, match=r"Cat: shapes differ.*\(2, 3\), \(2, 4\)"):
        S.cat([a, b], 0)
    with pytest.raises(ShapeError, match="Cat"):
        S.cat([a, t_(np.zeros(6, np.float32), dev)], 0)
    with pytest.raises(DTypeError, match="Cat"):
        S.cat([a, t_(np.zeros((2, 3), np.float64), dev)], 0)
    with pytest.raises(ArgumentError, match="cat: xs must be a non-empty list of tensors"):
        S.cat([], 0)
    with pytest.raises(ShapeError, match=r"Split: part sizes \[1, 1\] do not sum to 3.*\(2, 3\)"):
        S.split(a, 1, [1, 1])
    with pytest.raises(ShapeError, match="Split"):
        S.split(a, 1, None, 4)
    with pytest.raises(ArgumentError, match="Split: give parts"):
        S.split(a, 1, None)


# -- expand / tile ------------------------------------------------------------------------------
@given(x=any_arrays(max_dims=2, min_side=1), data=st.data())
def test_expand_tile_forward(dev, x, data):
    extra = data.draw(st.lists(st.integers(1, 3), max_size=2))
    shape = extra + [
        data.draw(st.sampled_from([1, s])) if s != 1 else data.draw(st.integers(1, 3)) for s in x.shape
    ]
    want = np.broadcast_shapes(x.shape, tuple(shape))
    check_forward(lambda t: S.expand(t, shape), lambda a: np.broadcast_to(a, want), [x], dev)
    reps = data.draw(st.lists(st.integers(0, 3), max_size=3))
    check_forward(lambda t: S.tile(t, reps), lambda a: np.tile(a, reps), [x], dev)


def test_expand_tile_grad(dev):
    check_grad(lambda a: S.expand(a, (2, 3, 1)), [rand(3, 1)], dev)
    check_grad(lambda a: S.expand(a, (1, 4)), [rand(3, 1)], dev)
    check_grad(lambda a: S.broadcast_to(a, (2, 3)), [rand(3)], dev)
    check_grad(lambda a: S.tile(a, (2, 1, 3)), [rand(2, 2)], dev)
    check_grad(lambda a: S.tile(a, 2), [rand(2, 2)], dev)


def test_expand_result_is_writable(dev):
    y = S.expand(t_(np.ones((1, 3), np.float32), dev), (2, 3))
    y += 1.0
    assert tensor.to_numpy(y).tolist() == [[2.0] * 3] * 2


def test_expand_tile_errors(dev):
    t = t_(np.zeros((2, 3), np.float32), dev)
    with pytest.raises(ShapeError, match=r"Expand: cannot broadcast to \(4, 3\).*\(2, 3\)"):
        S.expand(t, (4, 3))
    with pytest.raises(ArgumentError, match="Tile: repeats must be"):
        S.tile(t, (1, -1))


# -- pad ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@given(x=any_arrays(min_dims=1, max_dims=3, min_side=3), data=st.data())
def test_pad_forward(dev, mode, x, data):
    n = x.ndim
    pads = data.draw(st.lists(st.integers(-1, 2), min_size=2 * n, max_size=2 * n))
    crop = tuple(slice(-min(b, 0), s + min(e, 0)) for b, e, s in zip(pads[:n], pads[n:], x.shape))
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(pads[:n], pads[n:])]

    def ref(a):
        if mode == "constant":
            return np.pad(a[crop], widths, mode="constant", constant_values=a.dtype.type(1.5))
        return np.pad(a[crop], widths, mode=mode)

    check_forward(lambda t: S.pad(t, mode, pads, 1.5), ref, [x], dev)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_grad(dev, mode):
    check_grad(lambda t: S.pad(t, mode, [1, 2, 0, -1, 2, 1]), [rand(3, 4, 2)], dev)
    check_grad(lambda t: S.pad(t, mode, [0, 3, 0, 0]), [rand(2, 3)], dev)


def test_pad_errors(dev):
    t = t_(np.zeros((2, 3), np.float32), dev)
    with pytest.raises(ShapeError, match=r"Pad: needs 2 \* ndim = 4 pads.*\(2, 3\)"):
        S.pad(t, "constant", [1, 1])
    with pytest.raises(ShapeError, match="crop more"):
        S.pad(t, "constant", [-2, 0, -1, 0])
    with pytest.raises(ValueError, match="mode"):
        S.pad(t, "mirror", [0, 0, 0, 0])
    with pytest.raises(ShapeError, match="empty axis"):
        S.pad(t_(np.zeros((0, 3), np.float32), dev), "edge", [1, 0, 0, 0])


# -- depth/space --------------------------------------------------------------------------------
def _d2s_ref(x: np.ndarray, bs: int, mode: str) -> np.ndarray:
    b, c, h, w = x.shape
    if mode == "DCR":
        t = x.reshape(b, bs, bs, c // bs**2, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(b, c // bs**2, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(b, c // bs**2, h * bs, w * bs)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_depth_space(dev, mode, dtype):
    x = (np.arange(2 * 8 * 2 * 3) % 7).reshape(2, 8, 2, 3).astype(dtype)
    check_forward(lambda t: S.depth_to_space(t, 2, mode), lambda a: _d2s_ref(a, 2, mode), [x], dev)
    y = _d2s_ref(x, 2, "DCR")
    check_forward(lambda t: S.space_to_depth(t, 2), lambda a: x, [y], dev)
    check_grad(lambda t: S.depth_to_space(t, 2, mode), [rand(1, 4, 2, 1)], dev)
    check_grad(lambda t: S.space_to_depth(t, 2), [rand(1, 1, 2, 4)], dev)


def test_depth_space_errors(dev):
    with pytest.raises(ShapeError, match=r"depth_to_space.*\(1, 3, 2, 2\)"):
        S.depth_to_space(t_(np.zeros((1, 3, 2, 2), np.float32), dev), 2)
    with pytest.raises(ShapeError, match=r"space_to_depth.*\(1, 1, 3, 2\)"):
        S.space_to_depth(t_(np.zeros((1, 1, 3, 2), np.float32), dev), 2)


# -- cast / shape_of ----------------------------------------------------------------------------
@given(x=any_arrays(), to=st.sampled_from(DTYPES))
def test_cast_forward(dev, x, to):
    check_forward(lambda t: S.cast(t, to), lambda a: a.astype(to), [x], dev)
    check_forward(lambda t: t.as_type(to), lambda a: a.astype(to), [x], dev)
    check_forward(S.shape_of, lambda a: np.array(a.shape, np.int64), [x], dev)


def test_cast_grad(dev):
    f32 = lambda t: S.cast(S.cast(t, np.float32), np.float64)  # noqa: E731
    check_grad(f32, [rand(2, 3)], dev, eps=1e-3, rtol=1e-3, atol=1e-3)
    autograd.training = True
    t = t_(rand(3), dev)
    t.requires_grad = t.stores_grad = True
    g = autograd.gradients(S.cast(t, np.float32))[t]
    assert g.dtype == np.float64
    # A cast to int cuts the graph: no gradient reaches t through it.
    assert autograd.gradients(S.cast(S.cast(t, np.int32), np.float32)) == {}


def test_cast_errors(dev):
    with pytest.raises(DTypeError):
        S.cast(t_(np.zeros(2, np.float32), dev), np.complex64)


def test_getitem_through_tensor(dev):
    x = np.arange(12.0).reshape(3, 4)
    assert run(lambda t: t[1:, ::2], [x], dev)[0].tolist() == [[4.0, 6.0], [8.0, 10.0]]
    assert [r.shape for r in t_(x, dev)] == [(4,)] * 3  # iteration stops on IndexError


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_round_to_rounds_and_passes_the_gradient_straight_through(dev, dtype):
    x = np.array([[0.4, 1.6], [-2.5, 3.49]], dtype)
    t = tensor.Tensor(data=x, device=dev, requires_grad=False)
    t.requires_grad = t.stores_grad = True
    autograd.training = True
    try:
        y = S.round_to(t, np.round)
        (g,) = autograd.gradients(autograd.reduce_sum(y * y)).values()
    finally:
        autograd.training = False
    assert y.dtype == dtype
    np.testing.assert_array_equal(tensor.to_numpy(y), np.round(x))
    np.testing.assert_array_equal(tensor.to_numpy(g), 2 * np.round(x))  # d(y^2)/dy, passed through

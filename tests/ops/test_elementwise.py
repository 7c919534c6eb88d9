"""Elementwise family: arithmetic, unary math, clip, variadic max/min/sum/mean, comparisons."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from opcheck import check_forward, check_grad, run, to_tensors

from singa_lite import autograd, ops, tensor
from singa_lite.errors import DTypeError, ShapeError

FLOATS = [np.float16, np.float32, np.float64]
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)
SMALL = hnp.array_shapes(min_dims=1, max_dims=2, max_side=3)  # for gradient checks


def uniform(lo: float, hi: float, shapes: st.SearchStrategy = SHAPES) -> st.SearchStrategy:
    """float64 arrays with elements in [lo, hi]."""
    return hnp.arrays(np.float64, shapes, elements=st.floats(lo, hi))


def away(x: np.ndarray, points: list[float], margin: float = 0.1) -> np.ndarray:
    """``x`` with every element within ``margin`` of a kink moved ``2 * margin`` off it."""
    x = x.copy()
    for p in points:
        near = np.abs(x - p) < margin
        x[near] = p + 2 * margin
    return x


def in_dtype(ref, dtype):
    """A reference computed in float64 and returned in ``dtype``."""
    return lambda *a: np.asarray(ref(*[np.asarray(v, np.float64) for v in a])).astype(dtype)


vec_erf = np.vectorize(math.erf, otypes=[np.float64])

# name: (numpy reference, domain of the forward check, kinks to keep gradient inputs away from)
UNARY = {
    "abs": (np.abs, (-3, 3), [0.0]),
    "exp": (np.exp, (-3, 3), []),
    "log": (np.log, (0.1, 5), []),
    "sqrt": (np.sqrt, (0.1, 5), []),
    "square": (np.square, (-3, 3), []),
    "reciprocal": (np.reciprocal, (0.2, 3), []),
    "sin": (np.sin, (-3, 3), []),
    "cos": (np.cos, (-3, 3), []),
    "tan": (np.tan, (-1.2, 1.2), []),
    "asin": (np.arcsin, (-0.9, 0.9), []),
    "acos": (np.arccos, (-0.9, 0.9), []),
    "atan": (np.arctan, (-3, 3), []),
    "sinh": (np.sinh, (-3, 3), []),
    "cosh": (np.cosh, (-3, 3), []),
    "asinh": (np.arcsinh, (-3, 3), []),
    "acosh": (np.arccosh, (1.1, 4), []),
    "atanh": (np.arctanh, (-0.9, 0.9), []),
    "erf": (vec_erf, (-3, 3), []),
}
STEPS = {
    "sign": (np.sign, [0.0]),
    "ceil": (np.ceil, list(np.arange(-3.0, 4.0))),
    "floor": (np.floor, list(np.arange(-3.0, 4.0))),
    "round": (np.round, list(np.arange(-3.5, 4.0))),
}


# -- unary math ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
@given(data=st.data())
def test_unary_forward(dev, name, dtype, data):
    ref, (lo, hi), _ = UNARY[name]
    x = data.draw(uniform(lo, hi)).astype(dtype)
    check_forward(getattr(autograd, name), in_dtype(ref, dtype), [x], dev)


@pytest.mark.parametrize("name", sorted(UNARY))
@given(data=st.data())
def test_unary_grad(dev, name, data):
    _, (lo, hi), kinks = UNARY[name]
    x = away(data.draw(uniform(lo, hi, SMALL)), kinks)
    check_grad(getattr(autograd, name), [x], dev)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(STEPS))
@given(x=uniform(-3, 3))
def test_step_forward_and_zero_grad(dev, name, dtype, x):
    ref, kinks = STEPS[name]
    check_forward(getattr(ops, name), lambda a: ref(a), [x.astype(dtype)], dev)
    if dtype == np.float64:
        check_grad(getattr(ops, name), [away(x, kinks)], dev)


def test_round_halves_to_even(dev):
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997], np.float32)
    got = run(ops.round, [x], dev)[0]  # ONNX Round; autograd.round is SINGA's (halves away)
    np.testing.assert_array_equal(got, [-2, -2, -0, 0, 2, 2, 0])


@pytest.mark.parametrize("name", ["abs", "sign", "square", "neg"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@given(data=st.data())
def test_integer_unary(dev, name, dtype, data):
    x = data.draw(hnp.arrays(dtype, SHAPES, elements=st.integers(-100, 100)))
    ref = {"abs": np.abs, "sign": np.sign, "square": np.square, "neg": np.negative}[name]
    check_forward(getattr(autograd, name), ref, [x], dev)


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin", "erf", "floor", "round", "reciprocal"])
def test_float_only_ops_reject_integers(dev, name):
    x = tensor.Tensor(data=np.arange(4, dtype=np.int32), device=dev, requires_grad=False)
    with pytest.raises(DTypeError, match=r"(?i)" + name):
        getattr(autograd, name)(x)


def test_erf_matches_math_erf_in_float64_and_float32():
    x = np.concatenate([np.linspace(-7, 7, 20001), [0.0, 1e-300, -1e-12, 1e30, -np.inf, np.inf]])
    want = vec_erf(x)
    got64 = tensor.to_numpy(autograd.erf(tensor.Tensor(data=x, requires_grad=False)))
    np.testing.assert_allclose(got64, want, rtol=1e-15, atol=1e-300)  # measured max 4.3e-16
    got32 = tensor.to_numpy(autograd.erf(tensor.Tensor(data=x.astype(np.float32), requires_grad=False)))
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, vec_erf(x.astype(np.float32)), rtol=3e-7, atol=1e-37)
    assert np.isnan(
        tensor.to_numpy(autograd.erf(tensor.Tensor(data=np.array([np.nan]), requires_grad=False)))
    ).all()


def test_tensor_abs_operator(dev):
    t = tensor.Tensor(data=np.array([-1.5, 2.0], np.float32), device=dev, requires_grad=False)
    np.testing.assert_array_equal(tensor.to_numpy(abs(t)), [1.5, 2.0])


# -- clip ---------------------------------------------------------------------------------------
BOUNDS = [(-1.0, 1.0), (None, 0.5), (-0.5, None), (None, None)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("lo", "hi"), BOUNDS)
@given(x=uniform(-3, 3))
def test_clip_forward(dev, dtype, lo, hi, x):
    x = x.astype(dtype)
    ref = (lambda a: a.copy()) if lo is None and hi is None else (lambda a: np.clip(a, lo, hi).astype(dtype))
    check_forward(lambda t: autograd.clip(t, lo, hi), ref, [x], dev)


@pytest.mark.parametrize(("lo", "hi"), BOUNDS)
@given(x=uniform(-3, 3, SMALL))
def test_clip_grad(dev, lo, hi, x):
    kinks = [b for b in (lo, hi) if b is not None]
    check_grad(lambda t: autograd.clip(t, lo, hi), [away(x, kinks)], dev)


def test_clip_integers_and_tensor_bounds(dev):
    x = np.array([-5, 0, 3, 9], np.int32)
    got = run(lambda t: autograd.clip(t, 0, 4), [x], dev)[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [0, 0, 3, 4])
    lo, hi = (tensor.Tensor(data=np.array([v], np.float32), device=dev, requires_grad=False) for v in (-1, 2))
    got = run(lambda t: autograd.clip(t, lo, hi), [np.array([-3.0, 0.5, 3.0], np.float32)], dev)[0]
    np.testing.assert_array_equal(got, np.array([-1.0, 0.5, 2.0], np.float32))


# -- variadic max / min / sum / mean ------------------------------------------------------------
VARIADIC = {"max": np.maximum, "min": np.minimum, "sum": np.add}


def variadic_inputs(data, n: int, dtype=np.float64, max_side: int = 4) -> list[np.ndarray]:
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=n, max_dims=3, max_side=max_side))
    xs = [data.draw(hnp.arrays(np.float64, s, elements=st.floats(-3, 3))) for s in shapes.input_shapes]
    return [x.astype(dtype) for x in xs]


def reduce_ref(fn, xs):
    y = xs[0].copy()
    for x in xs[1:]:
        y = fn(y, x)
    return y


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("name", ["max", "min", "sum", "mean"])
@given(data=st.data())
def test_variadic_forward(dev, name, n, dtype, data):
    xs = variadic_inputs(data, n, dtype)
    if name == "mean":
        ref = lambda *a: (reduce_ref(np.add, a) / n).astype(dtype)  # noqa: E731
    else:
        ref = lambda *a: reduce_ref(VARIADIC[name], a)  # noqa: E731
    check_forward(getattr(autograd, name), ref, xs, dev)


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("name", ["max", "min", "sum", "mean"])
@given(data=st.data())
def test_variadic_grad(dev, name, n, data):
    xs = variadic_inputs(data, n, max_side=3)
    if name in ("max", "min"):
        # Distinct values everywhere, so no two inputs tie after broadcasting.
        rng = np.random.default_rng(len(xs))
        vals = rng.permutation(sum(x.size for x in xs)) * 0.37 - 5
        xs = [v.reshape(x.shape) for v, x in zip(np.split(vals, np.cumsum([x.size for x in xs])[:-1]), xs)]
    check_grad(getattr(autograd, name), xs, dev)


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_ties_share_the_gradient(dev, name):
    a, b = to_tensors([np.array([1.0, 2.0, 3.0]), np.array([1.0, 5.0, 0.0])], dev)
    autograd.training = True
    grads = autograd.gradients(getattr(autograd, name)(a, b))
    ga, gb = tensor.to_numpy(grads[a]), tensor.to_numpy(grads[b])
    np.testing.assert_array_equal(ga, [0.5, 0.0, 1.0] if name == "max" else [0.5, 1.0, 0.0])
    np.testing.assert_array_equal(gb, [0.5, 1.0, 0.0] if name == "max" else [0.5, 0.0, 1.0])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_variadic_integers(dev, dtype):
    xs = [np.array([[1, 7, -3]], dtype), np.array([[4], [-2]], dtype), np.array([0, 5, 1], dtype)]
    for name, fn in VARIADIC.items():
        check_forward(getattr(autograd, name), lambda *a, fn=fn: reduce_ref(fn, a), xs, dev)
    with pytest.raises(DTypeError, match="Mean"):
        autograd.mean(*to_tensors(xs, dev))


def test_maximum_minimum_aliases(dev):
    a, b = np.array([1.0, 5.0]), np.array([3.0, 2.0])
    check_forward(autograd.maximum, np.maximum, [a, b], dev)
    check_forward(autograd.minimum, np.minimum, [a, b], dev)


@pytest.mark.parametrize("name", ["max", "min", "sum", "mean"])
def test_variadic_bad_shapes(dev, name):
    xs = to_tensors([np.zeros((2, 3)), np.zeros((3,)), np.zeros((4,))], dev)
    with pytest.raises(ShapeError, match=r"(?i)" + name + r".*\(2, 3\).*\(4,\)"):
        getattr(autograd, name)(*xs)


def test_variadic_needs_an_input():
    with pytest.raises(TypeError):
        autograd.sum()


# -- binary arithmetic --------------------------------------------------------------------------
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power}


def binary_inputs(data, name: str, max_side: int = 4) -> list[np.ndarray]:
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=max_side))
    a_lo = 0.5 if name == "pow" else -3  # pow's gradient in b needs log(a)
    a = data.draw(hnp.arrays(np.float64, shapes.input_shapes[0], elements=st.floats(a_lo, 3)))
    b = data.draw(hnp.arrays(np.float64, shapes.input_shapes[1], elements=st.floats(-3, 3)))
    if name == "div":
        b = away(b, [0.0], 0.25)
    return [a, b]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=st.data())
def test_binary_forward(dev, name, dtype, data):
    a, b = (v.astype(dtype) for v in binary_inputs(data, name))
    rtol = 2e-2 if dtype == np.float16 and name == "pow" else None
    check_forward(getattr(autograd, name), in_dtype(BINARY[name], dtype), [a, b], dev, rtol=rtol)


@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=st.data())
def test_binary_grad_with_broadcasting(dev, name, data):
    check_grad(getattr(autograd, name), binary_inputs(data, name, max_side=3), dev)


def test_tensor_operators_match_functions(dev):
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    t = tensor.Tensor(data=x, device=dev, requires_grad=False)
    assert (t + 1).dtype == np.float32
    np.testing.assert_allclose(tensor.to_numpy(2 - t / 2 * t**2), 2 - x / 2 * x**2)
    np.testing.assert_array_equal(tensor.to_numpy(-t), -x)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_bad_shapes(dev, name):
    a, b = to_tensors([np.ones((2, 3)), np.ones((4,))], dev)
    with pytest.raises(ShapeError, match=r"\(2, 3\).*\(4,\)"):
        getattr(autograd, name)(a, b)


@pytest.mark.parametrize("name", [*sorted(BINARY), "max", "min", "sum", "mean"])
def test_mixed_float32_float64_follows_numpy_promotion(dev, name):
    a = np.array([[1.0, 2.0, 3.0]], np.float32)
    b = np.array([[0.5], [2.0]], np.float64)
    ta, tb = to_tensors([a, b], dev)
    autograd.training = True
    y = getattr(autograd, name)(ta, tb)
    assert y.shape == (2, 3)
    grads = autograd.gradients(y)
    assert grads[ta].shape == a.shape and grads[tb].shape == b.shape


# -- comparisons and logic ----------------------------------------------------------------------
COMPARE = {
    "equal": np.equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
}
LOGIC = {"logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor}


@pytest.mark.parametrize("dtype", [*FLOATS, np.int32])
@pytest.mark.parametrize("name", sorted(COMPARE))
@given(data=st.data())
def test_comparisons(dev, name, dtype, data):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
    # Few distinct values, so equal elements turn up often.
    a, b = (data.draw(hnp.arrays(dtype, s, elements=st.integers(-2, 2))) for s in shapes.input_shapes)
    check_forward(getattr(autograd, name), COMPARE[name], [a, b], dev)


@pytest.mark.parametrize("name", sorted(LOGIC))
@given(data=st.data())
def test_logic(dev, name, data):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
    a, b = (data.draw(hnp.arrays(np.bool_, s)) for s in shapes.input_shapes)
    check_forward(getattr(autograd, name), LOGIC[name], [a, b], dev)
    check_forward(autograd.logical_not, np.logical_not, [a], dev)


def test_comparison_passes_no_gradient(dev):
    a, b = to_tensors([np.array([1.0, 2.0]), np.array([2.0, 1.0])], dev)
    autograd.training = True
    mask = autograd.less(a, b)
    assert mask.dtype == np.bool_
    np.testing.assert_array_equal(tensor.to_numpy(mask), [True, False])
    assert autograd.gradients(mask) == {}


def test_comparison_bad_shapes(dev):
    a, b = to_tensors([np.ones((2, 3)), np.ones((2,))], dev)
    with pytest.raises(ShapeError, match="Less"):
        autograd.less(a, b)


def test_clip_bound_must_be_a_scalar(dev):
    x, bound = to_tensors([np.zeros(3), np.zeros(2)], dev)
    with pytest.raises(ShapeError, match="Clip"):
        autograd.clip(x, bound)

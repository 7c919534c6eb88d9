"""Activation family: relu and its variants, sigmoid/tanh, softmax, gelu, add_bias, identity."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from opcheck import check_forward, check_grad, run, to_tensors

from singa_lite import autograd, tensor
from singa_lite.errors import DTypeError, ShapeError

FLOATS = [np.float16, np.float32, np.float64]
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)
SMALL = hnp.array_shapes(min_dims=1, max_dims=2, max_side=3)
SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875
vec_erf = np.vectorize(math.erf, otypes=[np.float64])


def uniform(lo: float, hi: float, shapes: st.SearchStrategy = SHAPES) -> st.SearchStrategy:
    return hnp.arrays(np.float64, shapes, elements=st.floats(lo, hi))


def away(x: np.ndarray, points: list[float], margin: float = 0.1) -> np.ndarray:
    """``x`` with every element within ``margin`` of a kink moved ``2 * margin`` off it."""
    x = x.copy()
    for p in points:
        x[np.abs(x - p) < margin] = p + 2 * margin
    return x


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


# name: (function on tensors, NumPy reference in float64, kinks to keep gradient inputs away from)
ELEMENTWISE = {
    "relu": (autograd.relu, lambda x: np.maximum(x, 0), [0.0]),
    "leakyrelu": (autograd.leakyrelu, lambda x: np.where(x > 0, x, 0.01 * x), [0.0]),
    "leakyrelu_0.3": (lambda t: autograd.leakyrelu(t, 0.3), lambda x: np.where(x > 0, x, 0.3 * x), [0.0]),
    "elu": (autograd.elu, elu, [0.0]),
    "elu_0.5": (lambda t: autograd.elu(t, 0.5), lambda x: elu(x, 0.5), [0.0]),
    "selu": (autograd.selu, lambda x: SELU_GAMMA * elu(x, SELU_ALPHA), [0.0]),
    "sigmoid": (autograd.sigmoid, sigmoid, []),
    "hardsigmoid": (
        autograd.hardsigmoid,
        lambda x: np.clip(0.2 * x + 0.5, 0, 1),
        [-2.5, 2.5],
    ),
    "hardsigmoid_custom": (
        lambda t: autograd.hardsigmoid(t, 0.5, 0.25),
        lambda x: np.clip(0.5 * x + 0.25, 0, 1),
        [-0.5, 1.5],
    ),
    "hardswish": (autograd.hardswish, lambda x: x * np.clip(x / 6 + 0.5, 0, 1), [-3.0, 3.0]),
    "tanh": (autograd.tanh, np.tanh, []),
    "softplus": (autograd.softplus, lambda x: np.logaddexp(0, x), []),
    "softsign": (autograd.softsign, lambda x: x / (1 + np.abs(x)), []),
    "gelu": (autograd.gelu, lambda x: 0.5 * x * (1 + vec_erf(x / math.sqrt(2))), []),
    "gelu_tanh": (lambda t: autograd.gelu(t, approximate="tanh"), gelu_tanh, []),
    "identity": (autograd.identity, lambda x: x, []),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
@given(x=uniform(-4, 4))
def test_forward(dev, name, dtype, x):
    fn, ref, _ = ELEMENTWISE[name]
    x = x.astype(dtype)
    check_forward(fn, lambda a: np.asarray(ref(a.astype(np.float64))).astype(dtype), [x], dev)


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
@given(x=uniform(-4, 4, SMALL))
def test_grad(dev, name, x):
    fn, _, kinks = ELEMENTWISE[name]
    check_grad(fn, [away(x, kinks)], dev)


@pytest.mark.parametrize("dtype", FLOATS)
def test_tails_do_not_overflow(dev, dtype):
    x = np.array([-1e4, -100.0, -30.0, 0.0, 30.0, 100.0, 1e4]).astype(dtype)
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # underflow to 0 is fine
        for name in ("sigmoid", "softplus", "elu", "selu", "tanh", "softsign", "gelu", "gelu_tanh"):
            fn, ref, _ = ELEMENTWISE[name]
            got = run(fn, [x], dev)[0]
            assert np.isfinite(got).all(), name
            with np.errstate(over="ignore"):
                want = ref(x.astype(np.float64)).astype(dtype)
            # atol: sigmoid floors e^-x just below the dtype's max, so results under ~1e-38 round up.
            rtol = 1e-2 if dtype == np.float16 else 1e-6
            np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-37, err_msg=name)
    # Exact in the lower tail, where 1 - tanh-style formulas round to 0.
    got = run(autograd.sigmoid, [np.array([-30.0, -80.0], np.float32)], dev)[0]
    np.testing.assert_allclose(got, np.exp([-30.0, -80.0]), rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_relu_and_identity_on_integers(dev, dtype):
    x = np.array([[-3, 0, 4]], dtype)
    check_forward(autograd.relu, lambda a: np.maximum(a, 0), [x], dev)
    check_forward(autograd.identity, lambda a: a, [x], dev)


@pytest.mark.parametrize("name", ["sigmoid", "tanh", "elu", "softmax", "gelu", "softplus", "hardsigmoid"])
def test_float_only_activations_reject_integers(dev, name):
    with pytest.raises(DTypeError, match=r"(?i)" + name):
        getattr(autograd, name)(
            tensor.Tensor(data=np.arange(6, dtype=np.int32).reshape(2, 3), device=dev, requires_grad=False)
        )


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(ValueError, match="approximate"):
        autograd.gelu(tensor.Tensor(data=np.zeros(2), requires_grad=False), approximate="fast")


# -- prelu --------------------------------------------------------------------------------------
SLOPE_SHAPES = [((2, 3, 2, 2), (3, 1, 1)), ((2, 3), (3,)), ((2, 3), (1,)), ((4,), ()), ((2, 3), (2, 3))]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("xshape", "sshape"), SLOPE_SHAPES)
@given(data=st.data())
def test_prelu_forward(dev, xshape, sshape, dtype, data):
    x = data.draw(hnp.arrays(np.float64, xshape, elements=st.floats(-3, 3))).astype(dtype)
    s = data.draw(hnp.arrays(np.float64, sshape, elements=st.floats(-1, 1))).astype(dtype)
    check_forward(autograd.prelu, lambda a, w: np.where(a > 0, a, a * w).astype(dtype), [x, s], dev)


@pytest.mark.parametrize(("xshape", "sshape"), SLOPE_SHAPES[1:])
@given(data=st.data())
def test_prelu_grad(dev, xshape, sshape, data):
    x = away(data.draw(hnp.arrays(np.float64, xshape, elements=st.floats(-3, 3))), [0.0])
    s = data.draw(hnp.arrays(np.float64, sshape, elements=st.floats(-1, 1)))
    check_grad(autograd.prelu, [x, s], dev)


@pytest.mark.parametrize(("xshape", "sshape"), [((2, 3), (2,)), ((3,), (2, 3)), ((2, 3), (4, 1, 1))])
def test_prelu_slope_must_broadcast_to_x(dev, xshape, sshape):
    x, s = to_tensors([np.ones(xshape), np.ones(sshape)], dev)
    with pytest.raises(ShapeError, match=r"PRelu.*slope"):
        autograd.prelu(x, s)


# -- softmax and log_softmax --------------------------------------------------------------------
def softmax_ref(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("log", [False, True])
@given(data=st.data())
def test_softmax_forward(dev, log, dtype, data):
    x = data.draw(uniform(-20, 20, hnp.array_shapes(min_dims=1, max_dims=3, max_side=5))).astype(dtype)
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    fn = autograd.log_softmax if log else autograd.softmax

    def ref(a):
        p = softmax_ref(a.astype(np.float64), axis)
        return (np.log(p) if log else p).astype(dtype)

    check_forward(lambda t: fn(t, axis), ref, [x], dev)


@pytest.mark.parametrize("log", [False, True])
@given(data=st.data())
def test_softmax_grad(dev, log, data):
    x = data.draw(uniform(-3, 3, hnp.array_shapes(min_dims=1, max_dims=3, max_side=3)))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    fn = autograd.log_softmax if log else autograd.softmax
    check_grad(lambda t: fn(t, axis), [x], dev)


def test_softmax_default_axis_is_1_and_large_inputs_are_stable(dev):
    x = np.array([[1000.0, 1001.0], [-1000.0, -1000.0]], np.float32)[:, :, None].repeat(2, axis=2)
    got = run(autograd.softmax, [x], dev)[0]
    np.testing.assert_allclose(got.sum(axis=1), 1, rtol=1e-6)
    np.testing.assert_allclose(got[0, :, 0], softmax_ref(np.array([0.0, 1.0]), 0), rtol=1e-6)
    got = run(autograd.log_softmax, [x], dev)[0]
    assert np.isfinite(got).all()


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_axis_out_of_range(dev, name):
    with pytest.raises(ShapeError, match="axis"):
        getattr(autograd, name)(
            tensor.Tensor(data=np.zeros(3), device=dev, requires_grad=False)
        )  # SINGA's default axis=1


# -- add_bias -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis", [0, 1])
@given(data=st.data())
def test_add_bias_forward(dev, axis, dtype, data):
    x = data.draw(uniform(-3, 3, hnp.array_shapes(min_dims=2, max_dims=2, max_side=5))).astype(dtype)
    b = data.draw(uniform(-3, 3, st.just((x.shape[1 - axis],)))).astype(dtype)
    ref = (lambda a, c: a + c[None, :]) if axis == 0 else (lambda a, c: a + c[:, None])
    check_forward(lambda t, c: autograd.add_bias(t, c, axis), ref, [x, b], dev)


@pytest.mark.parametrize("axis", [0, 1])
@given(data=st.data())
def test_add_bias_grad(dev, axis, data):
    x = data.draw(uniform(-3, 3, hnp.array_shapes(min_dims=1, max_dims=3, max_side=3)))
    b = data.draw(uniform(-3, 3, st.just((x.shape[-1] if axis == 0 else x.shape[0],))))
    check_grad(lambda t, c: autograd.add_bias(t, c, axis), [x, b], dev)


@pytest.mark.parametrize(
    ("xshape", "bshape", "axis"), [((2, 3), (2,), 0), ((2, 3), (3,), 1), ((2, 3), (2, 3), 0)]
)
def test_add_bias_bad_shapes(dev, xshape, bshape, axis):
    x, b = to_tensors([np.zeros(xshape), np.zeros(bshape)], dev)
    with pytest.raises(ShapeError, match=r"AddBias.*\(2, 3\)"):
        autograd.add_bias(x, b, axis)


def test_add_bias_bad_axis():
    x, b = to_tensors(
        [np.zeros((2, 3)), np.zeros(3)], tensor.Tensor(data=np.zeros(1), requires_grad=False).device
    )
    with pytest.raises(ValueError, match="axis"):
        autograd.add_bias(x, b, 2)


def test_float32_stays_float32_in_forward_and_backward(dev):
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    fns = [fn for fn, _, _ in ELEMENTWISE.values()] + [autograd.softmax, autograd.log_softmax]
    for fn in fns:
        (t,) = to_tensors([x], dev)
        autograd.training = True
        y = fn(t)
        grads = autograd.gradients(y)
        assert y.dtype == np.float32 and grads[t].dtype == np.float32, fn

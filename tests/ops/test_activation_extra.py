"""ops/activation_extra.py (celu, thresholded_relu, shrink, swish, mish, swiglu, hardmax):
references, float64 gradients, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import (
    FLOATS,
    away_from,
    check_forward,
    check_grad,
    float_arrays,
    keep_dtype,
    torch_or_skip,
    value_and_grad,
)

from singa_lite import ops
from singa_lite.errors import ShapeError

K = keep_dtype  # a constant tensor that keeps its array's dtype


# -- activations ----------------------------------------------------------------------------
@given(x=float_arrays(), dtype=FLOATS, alpha=st.sampled_from([0.5, 1.0, 2.0]))
def test_celu(dev, x, dtype, alpha):
    def ref(a):
        return (np.maximum(a, 0) + np.minimum(0, alpha * (np.exp(a / alpha) - 1))).astype(a.dtype)

    check_forward(lambda t: ops.celu(t, alpha), ref, [x.astype(dtype)], dev)
    check_grad(lambda t: ops.celu(t, alpha), [away_from(x, [0])], dev)


@given(x=float_arrays(), alpha=st.sampled_from([0.0, 1.0]))
def test_thresholded_relu(dev, x, alpha):
    check_forward(lambda t: ops.thresholded_relu(t, alpha), lambda a: np.where(a > alpha, a, 0), [x], dev)
    check_grad(lambda t: ops.thresholded_relu(t, alpha), [away_from(x, [alpha])], dev)


@given(x=float_arrays(), lambd=st.sampled_from([0.5, 1.5]), bias=st.sampled_from([0.0, 0.5]))
def test_shrink(dev, x, lambd, bias):
    def ref(a):
        return np.where(a > lambd, a - bias, np.where(a < -lambd, a + bias, 0)).astype(a.dtype)

    check_forward(lambda t: ops.shrink(t, lambd, bias), ref, [x], dev)
    check_grad(lambda t: ops.shrink(t, lambd, bias), [away_from(x, [lambd, -lambd])], dev)


def test_shrink_integers(dev):
    x = np.array([-3, -1, 0, 1, 3], np.int32)
    check_forward(lambda t: ops.shrink(t, 1.5, 1.0), lambda a: np.array([-2, 0, 0, 0, 2], np.int32), [x], dev)


@given(x=float_arrays(), dtype=FLOATS)
def test_swish_mish(dev, x, dtype):
    def swish(a, alpha=1.0):
        return a / (1 + np.exp(-alpha * a))

    check_forward(ops.swish, lambda a: swish(a).astype(a.dtype), [x.astype(dtype)], dev)
    check_forward(lambda t: ops.swish(t, 2.0), lambda a: swish(a, 2.0), [x], dev)
    check_forward(
        ops.mish, lambda a: (a * np.tanh(np.log1p(np.exp(a)))).astype(a.dtype), [x.astype(dtype)], dev
    )
    check_grad(ops.swish, [x], dev)
    check_grad(ops.mish, [x], dev)


@given(x=float_arrays(min_dims=2, max_dims=2))
def test_swiglu(dev, x):
    b = np.cos(x)
    check_forward(
        lambda a, v: ops.swiglu(a, v, 1.5), lambda a, v: a / (1 + np.exp(-1.5 * a)) * v, [x, b], dev
    )
    check_grad(lambda a, v: ops.swiglu(a, v), [x, b], dev)


def test_swiglu_needs_one_shape(dev):
    a, b = K(np.ones((2, 3))), K(np.ones((2, 1)))
    with pytest.raises(ShapeError):
        ops.swiglu(a, b)


def test_torch_activations(dev):
    torch = torch_or_skip()
    x = np.linspace(-4, 4, 17)
    cases = [
        (lambda t: ops.celu(t, 0.5), lambda t: torch.nn.functional.celu(t, 0.5)),  # exact in float32
        (ops.mish, torch.nn.functional.mish),
        (ops.swish, torch.nn.functional.silu),
        (lambda t: ops.shrink(t, 0.5, 0.5), lambda t: torch.nn.functional.softshrink(t, 0.5)),
        (lambda t: ops.shrink(t, 0.5, 0.0), lambda t: torch.nn.functional.hardshrink(t, 0.5)),
        (lambda t: ops.thresholded_relu(t, 1.0), lambda t: torch.nn.functional.threshold(t, 1.0, 0.0)),
    ]
    for ours, theirs in cases:
        y, g = value_and_grad(ours, x, dev)
        tx = torch.tensor(x, requires_grad=True)
        ty = theirs(tx)
        ty.sum().backward()
        np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g, tx.grad.numpy(), rtol=1e-12, atol=1e-12)


@given(x=float_arrays(min_dims=1, max_dims=3), axis=st.integers(-1, 0))
def test_hardmax(dev, x, axis):
    def ref(a):
        y = np.zeros_like(a)
        np.put_along_axis(y, np.expand_dims(a.argmax(axis=axis), axis), 1, axis=axis)
        return y

    check_forward(lambda t: ops.hardmax(t, axis), ref, [x], dev)

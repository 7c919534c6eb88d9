"""ops/norm_extra.py (lp_normalization, mean_variance_normalization, lp_pool, det): references,
float64 gradients, bad input."""

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
from singa_lite.errors import ArgumentError, DTypeError, ShapeError

K = keep_dtype  # a constant tensor that keeps its array's dtype


# -- normalisation ---------------------------------------------------------------------------
@given(x=float_arrays(min_dims=2), p=st.sampled_from([1, 2]), dtype=FLOATS)
def test_lp_normalization(dev, x, p, dtype):
    def ref(a):
        norm = (np.abs(a) ** p).sum(axis=-1, keepdims=True) ** (1 / p)
        return np.where(norm == 0, 0, a / np.where(norm == 0, 1, norm)).astype(a.dtype)

    check_forward(lambda t: ops.lp_normalization(t, -1, p), ref, [x.astype(dtype)], dev)
    smooth = away_from(x, [0], 0.05)
    check_grad(lambda t: ops.lp_normalization(t, 0, p), [smooth], dev)


def test_lp_normalization_torch():
    torch = torch_or_skip()
    x = np.random.default_rng(0).standard_normal((3, 4))
    for p, axis in ((1, 0), (2, 1)):
        want = torch.nn.functional.normalize(torch.tensor(x), p=p, dim=axis).numpy()
        np.testing.assert_allclose(ops.lp_normalization(K(x), axis, p).numpy(), want, rtol=1e-12)
    with pytest.raises(ArgumentError):
        ops.lp_normalization(K(x), 0, 3)


@given(x=float_arrays(min_dims=4, max_dims=4, lo=-2, hi=2))
def test_mean_variance_normalization(dev, x):
    def ref(a):
        m = a.mean(axis=(0, 2, 3), keepdims=True)
        return (a - m) / (np.sqrt(((a - m) ** 2).mean(axis=(0, 2, 3), keepdims=True)) + 1e-9)

    check_forward(ops.mean_variance_normalization, ref, [x], dev, rtol=1e-6, atol=1e-6)
    rng = np.random.default_rng(1)
    check_grad(ops.mean_variance_normalization, [rng.standard_normal((2, 2, 2, 2))], dev)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
def test_lp_pool_torch(dev, p):
    torch = torch_or_skip()
    x = np.random.default_rng(2).standard_normal((2, 3, 6, 5))
    got = ops.lp_pool(K(x), (2, 3), (2, 1), p=p).numpy()
    # torch's lp_pool sums x^p (not |x|^p) and works on |x| only for even p: compare on |x|.
    want = torch.nn.functional.lp_pool2d(torch.tensor(np.abs(x)), p, (2, 3), (2, 1)).numpy()
    np.testing.assert_allclose(ops.lp_pool(K(np.abs(x)), (2, 3), (2, 1), p=p).numpy(), want)
    assert got.shape == want.shape
    check_grad(lambda t: ops.lp_pool(t, 2, 1, p=p), [away_from(x[:1, :1, :3, :3], [0], 0.05)], dev)


def test_lp_pool_padding_and_ceil(dev):
    x = np.arange(1.0, 6.0).reshape(1, 1, 5)
    y = ops.lp_pool(K(x), 2, 2, (1, 1), ceil_mode=True, p=1).numpy()
    np.testing.assert_allclose(y, [[[1.0, 5.0, 9.0]]])
    y = ops.lp_pool(K(x), 2, 2, ceil_mode=True, p=1).numpy()
    np.testing.assert_allclose(y, [[[3.0, 7.0, 5.0]]])


# -- det ----------------------------------------------------------------------------------------
@given(shape=st.sampled_from([(1, 1), (3, 3), (2, 2, 2), (2, 1, 4, 4)]), seed=st.integers(0, 99))
def test_det(dev, shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape)
    check_forward(ops.det, np.linalg.det, [x], dev, rtol=1e-9, atol=1e-9)
    check_forward(ops.det, np.linalg.det, [x.astype(np.float32)], dev, rtol=1e-4, atol=1e-4)
    check_grad(ops.det, [x], dev)


def test_det_singular_gradient_and_torch(dev):
    # A singular matrix's gradient is its cofactor matrix (torch's det * inv^T gives 0 there).
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    check_grad(ops.det, [singular], dev)
    np.testing.assert_allclose(value_and_grad(ops.det, singular, dev)[1], [[4.0, -2.0], [-2.0, 1.0]])
    torch = torch_or_skip()
    x = np.random.default_rng(3).standard_normal((2, 3, 3))
    tx = torch.tensor(x, requires_grad=True)
    torch.linalg.det(tx).sum().backward()
    np.testing.assert_allclose(value_and_grad(ops.det, x, dev)[1], tx.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_det_errors():
    with pytest.raises(ShapeError):
        ops.det(K(np.ones((2, 3))))
    with pytest.raises(DTypeError):
        ops.det(K(np.ones((2, 2), np.int64)))

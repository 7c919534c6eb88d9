"""embedding (padding_idx) and rotary_embedding: NumPy references over shapes and dtypes, float64
gradients, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import check_forward, check_grad, to_tensors

from singa_lite import autograd, tensor
from singa_lite.errors import ArgumentError, DTypeError, ShapeError

DTYPES = [np.float16, np.float32, np.float64]
TOL = {np.float16: 2e-2, np.float32: 1e-4, np.float64: 1e-10}


@pytest.mark.parametrize("padding_idx", [None, 0, 3, -1])
def test_embedding(dev, padding_idx):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3))
    idx = np.array([[0, 3, 3], [1, -1, 0]])

    def fn(w):
        return autograd.embedding(idx, w, padding_idx)

    check_forward(fn, lambda w: w[idx], [w], dev)
    if padding_idx is None:  # (the padding row's true derivative is not 0: checked below)
        check_grad(fn, [w], dev)
    autograd.training = True
    t = to_tensors([w], dev)[0]
    grad = tensor.to_numpy(autograd.gradients(autograd.reduce_sum(fn(t)))[t])
    autograd.training = False
    want = np.zeros_like(w)
    np.add.at(want, idx % 4, 1.0)
    if padding_idx is not None:
        want[padding_idx] = 0
    np.testing.assert_array_equal(grad, want)


def test_embedding_takes_index_tensors_and_checks_them(dev):
    w = to_tensors([np.eye(3, dtype=np.float32)], dev)[0]
    idx = tensor.from_numpy(np.array([2, 0], np.int32), dev)
    np.testing.assert_array_equal(tensor.to_numpy(autograd.embedding(idx, w)), np.eye(3)[[2, 0]])
    with pytest.raises(ShapeError, match="out of range"):
        autograd.embedding(np.array([3]), w)
    with pytest.raises(DTypeError):
        autograd.embedding(np.array([0.5]), w)
    with pytest.raises(ArgumentError, match="padding_idx"):
        autograd.embedding(np.array([0]), w, padding_idx=3)
    with pytest.raises(ShapeError, match="table"):
        autograd.embedding(np.array([0]), to_tensors([np.ones(3)], dev)[0])


def ref_rotary(x, c, s, interleaved):
    r = c.shape[-1]
    y = x.astype(np.float64).copy()
    if interleaved:
        a, b = x[..., 0 : 2 * r : 2], x[..., 1 : 2 * r : 2]
        y[..., 0 : 2 * r : 2], y[..., 1 : 2 * r : 2] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., :r], x[..., r : 2 * r]
        y[..., :r], y[..., r : 2 * r] = a * c - b * s, a * s + b * c
    return y


@given(
    lead=st.sampled_from([(), (2,), (2, 3)]),
    t=st.integers(1, 4),
    d=st.integers(2, 7),
    interleaved=st.booleans(),
    per_batch=st.booleans(),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 50),
)
def test_rotary(dev, lead, t, d, interleaved, per_batch, dtype, seed):
    rng = np.random.default_rng(seed)
    r = rng.integers(1, d // 2 + 1)
    x = rng.standard_normal((*lead, t, d)).astype(dtype)
    angle = rng.uniform(-3, 3, ((*lead, t, r) if per_batch else (t, r)))
    c, s = np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)
    tol = TOL[dtype]

    def fn(x, c, s):
        return autograd.rotary_embedding(x, c, s, interleaved)

    check_forward(
        fn, lambda *a: ref_rotary(*a, interleaved).astype(dtype), [x, c, s], dev, rtol=tol, atol=tol
    )
    if dtype == np.float64:
        check_grad(fn, [x, c, s], dev)


def test_rotary_bad_input(dev):
    x, c = to_tensors([np.zeros((2, 3, 4)), np.zeros((3, 3))], dev)
    with pytest.raises(ShapeError):
        autograd.rotary_embedding(x, c, c)  # 2 * 3 features > 4
    c2 = to_tensors([np.zeros((5, 2))], dev)[0]
    with pytest.raises(ShapeError, match="broadcast"):
        autograd.rotary_embedding(x, c2, c2)

"""rms_norm, group_norm, embedding (padding_idx) and rotary_embedding: NumPy references over
shapes and dtypes, float64 gradients, bad input."""

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


def ref_rms(x, w, axes, eps):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps) * w


def ref_group(x, g, w, b, eps=1e-5):
    n, c = x.shape[:2]
    x4 = x.astype(np.float64).reshape(n, g, c // g, -1)
    y = (x4 - x4.mean(axis=(2, 3), keepdims=True)) / np.sqrt(x4.var(axis=(2, 3), keepdims=True) + eps)
    view = (1, c) + (1,) * (x.ndim - 2)
    return y.reshape(x.shape) * w.reshape(view) + (0 if b is None else b.reshape(view))


@given(
    shape=st.sampled_from([(3,), (2, 5), (2, 3, 4), (1, 2, 3, 2)]),
    dims=st.integers(1, 2),
    eps=st.sampled_from([None, 1e-3]),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 50),
)
def test_rms_norm(dev, shape, dims, eps, dtype, seed):
    dims = min(dims, len(shape))
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2).astype(dtype)
    w = rng.standard_normal(shape[-dims:]).astype(dtype)
    axes = tuple(range(len(shape) - dims, len(shape)))
    e = float(np.finfo(dtype).eps) if eps is None else eps
    tol = TOL[dtype]

    def fn(x, w):
        return autograd.rms_norm(x, w, -dims, eps)

    check_forward(fn, lambda x, w: ref_rms(x, w, axes, e).astype(dtype), [x, w], dev, rtol=tol, atol=tol)
    if dtype == np.float64:
        check_grad(fn, [x, w], dev)
        check_grad(lambda x, w: autograd.rms_norm(x, w, -dims, eps), [x, w[..., :1]], dev)  # broadcast scale


@given(
    shape=st.sampled_from([(2, 4), (2, 6, 3), (1, 4, 2, 3), (3, 2, 1, 2, 2)]),
    groups=st.sampled_from([1, 2]),
    bias=st.booleans(),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 50),
)
def test_group_norm(dev, shape, groups, bias, dtype, seed):
    rng = np.random.default_rng(seed)
    c = shape[1]
    x = (rng.standard_normal(shape) * 2 + 1).astype(dtype)
    w, b = rng.standard_normal(c).astype(dtype), rng.standard_normal(c).astype(dtype)
    arrays = [x, w, b] if bias else [x, w]
    tol = TOL[dtype]

    def fn(*a):
        return autograd.group_norm(a[0], groups, *a[1:])

    check_forward(fn, lambda *a: ref_group(a[0], groups, *a[1:], *([] if bias else [None])).astype(dtype),
                  arrays, dev, rtol=tol, atol=tol)  # fmt: skip
    if dtype == np.float64:
        check_grad(fn, arrays, dev)


def test_norm_bad_input(dev):
    x = to_tensors([np.zeros((2, 6, 3))], dev)[0]
    w = to_tensors([np.ones(6)], dev)[0]
    with pytest.raises(ShapeError, match="divisible"):
        autograd.group_norm(x, 4, w)
    with pytest.raises(ShapeError, match="shape"):
        autograd.group_norm(x, 2, to_tensors([np.ones(3)], dev)[0])
    with pytest.raises(ShapeError, match="groups"):
        autograd.group_norm(x, 0, w)
    with pytest.raises(ShapeError, match="broadcast"):
        autograd.rms_norm(x, to_tensors([np.ones(4)], dev)[0])
    with pytest.raises(DTypeError):
        autograd.rms_norm(tensor.from_numpy(np.ones((2, 3), np.int32), dev), w)


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

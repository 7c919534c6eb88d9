"""Losses: NumPy reference formulas over shapes and dtypes, gradient checks, SINGA's (1,) result,
and the errors for bad targets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import _training, check_forward, check_grad, to_tensors

from singa_lite import autograd, tensor
from singa_lite.errors import DTypeError, ShapeError
from singa_lite.ops.loss import (
    EPS,
    binary_cross_entropy,
    cross_entropy,
    mse_loss,
    nll_loss,
    softmax_cross_entropy,
)

FLOATS = st.sampled_from([np.float16, np.float32, np.float64])
TARGETS = st.sampled_from(["int32", "int64", "onehot", "soft"])


# -- NumPy references ---------------------------------------------------------------------
def log_softmax(x):
    z = x - x.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def dense(t, C):
    """Labels (N,) as one-hot (N, C); per-class targets unchanged."""
    return np.eye(C)[t] if t.ndim == 1 else t.astype(np.float64)


def ref_softmax_ce(x, t):
    return -(dense(t, x.shape[1]) * log_softmax(x.astype(np.float64))).sum() / len(x)


def ref_nll(logp, t):
    return -(dense(t, logp.shape[1]) * logp.astype(np.float64)).sum() / len(logp)


def ref_ce(y, t):
    return -(dense(t, y.shape[1]) * np.log(np.clip(y.astype(np.float64), EPS, 1))).sum() / len(y)


def ref_bce(y, t):
    y, t = np.clip(y.astype(np.float64), EPS, 1 - EPS), t.astype(np.float64)
    return -(t * np.log(y) + (1 - t) * np.log(1 - y)).sum() / len(y)


def ref_mse(x, t):
    return ((x.astype(np.float64) - t) ** 2).sum() / (2 * len(x))


def as_loss(ref, dtype):
    """``ref`` returning SINGA's (1,) array of ``dtype``."""
    return lambda *a: np.array([ref(*a)], dtype=dtype)


def make_targets(kind, N, C, rng):
    labels = rng.integers(0, C, N)
    if kind in ("int32", "int64"):
        return labels.astype(kind)
    if kind == "onehot":
        return np.eye(C)[labels]
    return rng.dirichlet(np.ones(C), N)


def probs(rng, shape, dtype):
    return rng.uniform(0.05, 0.95, shape).astype(dtype)


def tol(dtype):
    return 1e-2 if dtype == np.float16 else None


# -- forward against the formulas ---------------------------------------------------------
@given(N=st.integers(1, 5), C=st.integers(1, 6), dtype=FLOATS, kind=TARGETS, seed=st.integers(0, 99))
def test_softmax_cross_entropy(dev, N, C, dtype, kind, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((N, C)) * 3).astype(dtype)
    t = make_targets(kind, N, C, rng)
    check_forward(
        softmax_cross_entropy, as_loss(ref_softmax_ce, dtype), [x, t], dev, rtol=tol(dtype), atol=tol(dtype)
    )


@given(N=st.integers(1, 5), C=st.integers(1, 6), dtype=FLOATS, kind=TARGETS, seed=st.integers(0, 99))
def test_nll_loss(dev, N, C, dtype, kind, seed):
    rng = np.random.default_rng(seed)
    logp = log_softmax(rng.standard_normal((N, C))).astype(dtype)
    t = make_targets(kind, N, C, rng)
    check_forward(nll_loss, as_loss(ref_nll, dtype), [logp, t], dev, rtol=tol(dtype), atol=tol(dtype))


@given(N=st.integers(1, 5), C=st.integers(1, 6), dtype=FLOATS, kind=TARGETS, seed=st.integers(0, 99))
def test_cross_entropy(dev, N, C, dtype, kind, seed):
    rng = np.random.default_rng(seed)
    y = probs(rng, (N, C), dtype)
    t = make_targets(kind, N, C, rng)
    check_forward(cross_entropy, as_loss(ref_ce, dtype), [y, t], dev, rtol=tol(dtype), atol=tol(dtype))


@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
    dtype=FLOATS,
    tdtype=st.sampled_from([np.float32, np.float64, np.int32]),
    seed=st.integers(0, 99),
)
def test_binary_cross_entropy(dev, shape, dtype, tdtype, seed):
    rng = np.random.default_rng(seed)
    y = probs(rng, shape, dtype)
    t = (rng.integers(0, 2, shape) if tdtype == np.int32 else rng.uniform(0, 1, shape)).astype(tdtype)
    check_forward(
        binary_cross_entropy, as_loss(ref_bce, dtype), [y, t], dev, rtol=tol(dtype), atol=tol(dtype)
    )


@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
    dtype=FLOATS,
    seed=st.integers(0, 99),
)
def test_mse_loss(dev, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x, t = rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype)
    check_forward(mse_loss, as_loss(ref_mse, dtype), [x, t], dev, rtol=tol(dtype), atol=tol(dtype))


def test_singa_conventions(dev):
    # A (1,) tensor, so to_numpy(loss)[0] works; float32 in, float32 loss and gradient out.
    x = tensor.Tensor(data=np.zeros((2, 4), np.float32), device=dev, requires_grad=False)
    t = tensor.Tensor(data=np.array([0, 3], np.int32), device=dev, requires_grad=False)
    x.requires_grad = x.stores_grad = True
    with _training():
        loss = softmax_cross_entropy(x, t)
        (grad,) = autograd.gradients(loss).values()
    assert loss.shape == (1,) and loss.dtype == np.float32
    assert tensor.to_numpy(loss)[0] == pytest.approx(np.log(4), rel=1e-6)
    assert grad.dtype == np.float32
    np.testing.assert_allclose(
        tensor.to_numpy(grad), (np.full((2, 4), 0.25) - np.eye(4)[[0, 3]]) / 2, rtol=1e-6
    )


@pytest.mark.parametrize("fn", [softmax_cross_entropy, nll_loss, cross_entropy])
def test_label_column_is_taken_as_labels(dev, fn):
    """SINGA's char-rnn passes labels as an (N, 1) integer column: same loss and gradient."""
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(4), size=3)
    x_np = np.log(probs) if fn is nll_loss else probs
    labels = np.array([2, 0, 3], np.int32)
    results = []
    for t_np in (labels, labels[:, None]):
        x, t = to_tensors([x_np, t_np], dev)
        x.requires_grad = x.stores_grad = True
        with _training():
            loss = fn(x, t)
            (grad,) = autograd.gradients(loss).values()
        results.append((tensor.to_numpy(loss), tensor.to_numpy(grad)))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_softmax_cross_entropy_is_stable(dev):
    x = np.array([[1000.0, 0.0, -1000.0], [-1e4, 1e4, 0.0]], np.float32)
    t = np.array([0, 0], np.int64)
    (loss,) = [tensor.to_numpy(y) for y in [softmax_cross_entropy(*to_tensors([x, t], dev))]]
    np.testing.assert_allclose(loss, [1e4], rtol=1e-6)


@given(
    N=st.integers(1, 6),
    C=st.sampled_from([1, 2, 7, 33, 300]),
    dtype=FLOATS,
    kind=st.sampled_from(["int32", "int64", "onehot"]),
    dy_dtype=st.sampled_from(["same", "float64"]),
    seed=st.integers(0, 99),
)
def test_softmax_cross_entropy_kernels(dev, monkeypatch, N, C, dtype, kind, dy_dtype, seed):
    """On CuPy, float32/float64 logits against labels take the fused kernels; switching them
    off (SINGA_LITE_RAW_KERNELS=0) runs the plain code: the same loss and gradient but for
    the order in which each row's exponentials are summed."""
    from singa_lite.backend import cupy_kernels

    calls = []
    for name in ("softmax_ce_forward", "softmax_ce_backward"):
        orig = getattr(cupy_kernels, name)
        monkeypatch.setattr(cupy_kernels, name, lambda *a, orig=orig: calls.append(1) or orig(*a))
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((N, C)) * 4).astype(dtype)
    t = make_targets(kind, N, C, rng)
    dy = np.array([rng.uniform(0.5, 2)], dtype if dy_dtype == "same" else np.float64)
    runs = []
    for switch in ("1", "0"):
        monkeypatch.setenv("SINGA_LITE_RAW_KERNELS", switch)
        with _training():
            xs, ts = to_tensors([x, t], dev)
            ts.requires_grad = ts.stores_grad = False
            loss = softmax_cross_entropy(xs, ts)
            grad = autograd.gradients(loss, dev.xp.asarray(dy))[xs]
        runs.append((tensor.to_numpy(loss), tensor.to_numpy(grad)))
    (loss1, grad1), (loss0, grad0) = runs
    assert loss1.dtype == loss0.dtype == grad1.dtype == grad0.dtype == dtype
    tol = {np.float16: 0, np.float32: 2e-5, np.float64: 1e-12}[dtype]
    np.testing.assert_allclose(loss1, loss0, rtol=tol, atol=tol)
    np.testing.assert_allclose(grad1, grad0, rtol=tol, atol=tol * float(dy[0]) / N)
    uses_kernels = dev.is_gpu() and dtype != np.float16 and kind != "onehot"
    assert len(calls) == (2 if uses_kernels else 0)


def test_cross_entropy_clips_zero_probability(dev):
    y = np.array([[0.0, 1.0]], np.float32)
    loss = tensor.to_numpy(cross_entropy(*to_tensors([y, np.array([0])], dev)))
    np.testing.assert_allclose(loss, [-np.log(EPS)], rtol=1e-5)


# -- float64 gradient checks ----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["int64", "onehot", "soft"])
@pytest.mark.parametrize(
    ("fn", "make_x"),
    [
        (softmax_cross_entropy, lambda rng: rng.standard_normal((3, 4))),
        (nll_loss, lambda rng: log_softmax(rng.standard_normal((3, 4)))),
        (cross_entropy, lambda rng: probs(rng, (3, 4), np.float64)),
    ],
    ids=["softmax_cross_entropy", "nll_loss", "cross_entropy"],
)
def test_class_loss_grad(dev, fn, make_x, kind):
    rng = np.random.default_rng(0)
    x = make_x(rng)
    t = make_targets(kind, 3, 4, rng)
    check_grad(fn, [x, t], dev, wrt=[0])


def test_softmax_cross_entropy_grad_unnormalised_targets(dev):
    # Targets that do not sum to 1 per row: the gradient is softmax * sum(t) - t, not softmax - t.
    rng = np.random.default_rng(1)
    check_grad(softmax_cross_entropy, [rng.standard_normal((2, 3)), rng.uniform(0, 2, (2, 3))], dev, wrt=[0])


def test_binary_cross_entropy_grad(dev):
    rng = np.random.default_rng(2)
    check_grad(
        binary_cross_entropy, [probs(rng, (3, 2), np.float64), rng.uniform(0, 1, (3, 2))], dev, wrt=[0]
    )


def test_mse_loss_grad(dev):
    rng = np.random.default_rng(3)
    check_grad(mse_loss, [rng.standard_normal((3, 2)), rng.standard_normal((3, 2))], dev)


def test_clipped_probabilities_get_no_gradient(dev):
    y = np.array([[0.0, 0.5], [1e-9, 0.5]])
    with _training():
        ys, ts = to_tensors([y, np.array([[1.0, 0.0], [1.0, 0.0]])], dev)
        ts.requires_grad = False
        grads = autograd.gradients(cross_entropy(ys, ts))
    np.testing.assert_array_equal(tensor.to_numpy(grads[ys]), np.zeros((2, 2)))


# -- bad inputs -------------------------------------------------------------------------------
def _call(fn, x, t, dev):
    return fn(
        tensor.Tensor(data=x, device=dev, requires_grad=False),
        tensor.Tensor(data=t, device=dev, requires_grad=False),
    )


X = np.zeros((3, 4), np.float32)


@pytest.mark.parametrize("fn", [softmax_cross_entropy, cross_entropy, nll_loss])
def test_class_loss_errors(dev, fn):
    name = {softmax_cross_entropy: "SoftMaxCrossEntropy", cross_entropy: "CrossEntropy", nll_loss: "NLLLoss"}[
        fn
    ]
    with pytest.raises(ShapeError, match=rf"{name}: 2 labels for a batch of 3 .*\(3, 4\), \(2,\)"):
        _call(fn, X, np.array([0, 1]), dev)
    # On a GPU the labels are checked on the device and the error comes at the next host read
    # (here the loss value's), without the label's value: reading it would have cost a sync.
    label = "a label" if dev.is_gpu() else "label 4"
    with pytest.raises(ShapeError, match=rf"{name}: {label} is out of range for 4 classes"):
        tensor.to_numpy(_call(fn, X, np.array([0, 4, 1]), dev))
    label = "a label" if dev.is_gpu() else "label -1"
    with pytest.raises(ShapeError, match=f"{label} is out of range"):
        loss = _call(fn, X, np.array([0, -1, 1]), dev)
        dev.Sync()
        tensor.to_numpy(loss)
    with pytest.raises(DTypeError, match=rf"{name}: class labels of shape \(3,\) must be int32 or int64"):
        _call(fn, X, np.array([0.0, 1.0, 2.0], np.float32), dev)
    with pytest.raises(ShapeError, match=r"targets must be labels of shape \(N,\) or per-class"):
        _call(fn, X, np.zeros((3, 5), np.float32), dev)
    with pytest.raises(ShapeError, match=r"expects inputs of shape \(batch, classes\)"):
        _call(fn, np.zeros(4, np.float32), np.array([0]), dev)
    with pytest.raises(ShapeError, match="the batch is empty"):
        _call(fn, np.zeros((0, 4), np.float32), np.zeros(0, np.int32), dev)
    with pytest.raises(DTypeError, match="expects floating-point inputs"):
        _call(fn, X.astype(np.int32), np.array([0, 1, 2]), dev)


@pytest.mark.parametrize(
    ("fn", "name"), [(binary_cross_entropy, "BinaryCrossEntropy"), (mse_loss, "MeanSquareError")]
)
def test_same_shape_loss_errors(dev, fn, name):
    with pytest.raises(
        ShapeError, match=rf"{name}: inputs and targets must have the same shape.*\(3, 4\), \(4, 3\)"
    ):
        _call(fn, X, np.zeros((4, 3), np.float32), dev)
    with pytest.raises(ShapeError, match="same shape"):
        _call(fn, np.float32(0.5), np.float32(0.5), dev)
    with pytest.raises(ShapeError, match="the batch is empty"):
        _call(fn, np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32), dev)


def test_reexported_in_autograd():
    assert autograd.softmax_cross_entropy is softmax_cross_entropy and autograd.mse_loss is mse_loss

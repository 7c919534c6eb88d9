"""Batch/layer/instance norm, LRN and dropout: references, gradients, modes and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import check_forward, check_grad, to_tensors

from singa_lite import autograd, device, tensor
from singa_lite.errors import ArgumentError, DTypeError, ShapeError

DTYPES = [np.float16, np.float32, np.float64]
TOL = {np.float16: 2e-2, np.float32: 1e-4, np.float64: 1e-10}


def ref_bn(x, scale, bias, mean, var, eps=1e-5):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    x = x.astype(np.float64)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(
        shape
    ) + bias.reshape(shape)


def batch_stats(x):
    axes = (0, *range(2, x.ndim))
    return x.astype(np.float64).mean(axis=axes), x.astype(np.float64).var(axis=axes)


def bn_inputs(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    c = shape[1]
    x = (rng.standard_normal(shape) * 2 + 1).astype(dtype)
    params = [
        rng.uniform(0.5, 1.5, c),
        rng.standard_normal(c),
        rng.standard_normal(c),
        rng.uniform(0.5, 2, c),
    ]
    return x, [p.astype(dtype) for p in params]


class training:  # noqa: N801 (a context manager used like a function)
    def __enter__(self) -> None:
        autograd.training = True

    def __exit__(self, *exc: object) -> None:
        autograd.training = False


@given(
    shape=st.sampled_from([(4, 3), (2, 3, 5), (3, 2, 3, 4), (2, 2, 2, 2, 3)]), dtype=st.sampled_from(DTYPES)
)
def test_batchnorm_forward_train_and_eval(dev, shape, dtype):
    x, (scale, bias, rm, rv) = bn_inputs(shape, dtype)
    tol = TOL[dtype]
    with training():
        mean, var = batch_stats(x)
        check_forward(
            lambda *t: autograd.batchnorm_2d(*t),
            lambda *a: ref_bn(x, scale, bias, mean, var).astype(dtype),
            [x, scale, bias, rm, rv],
            dev,
            rtol=tol,
            atol=tol,
        )
    check_forward(
        lambda *t: autograd.batchnorm_2d(*t),
        lambda *a: ref_bn(x, scale, bias, rm.astype(np.float64), rv.astype(np.float64)).astype(dtype),
        [x, scale, bias, rm, rv],
        dev,
        rtol=tol,
        atol=tol,
    )


def test_batchnorm_running_stats_update(dev):
    x, (scale, bias, rm, rv) = bn_inputs((4, 3, 2, 2), np.float32)
    ts = [tensor.Tensor(data=a, device=dev, requires_grad=False) for a in (x, scale, bias, rm, rv)]
    mean, var = batch_stats(x)
    unbiased = var * 16 / 15
    with training():
        autograd.batchnorm_2d(*ts, momentum=0.8)
    np.testing.assert_allclose(tensor.to_numpy(ts[3]), 0.8 * rm + 0.2 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tensor.to_numpy(ts[4]), 0.8 * rv + 0.2 * unbiased, rtol=1e-5, atol=1e-6)
    assert ts[3].dtype == np.float32 and ts[4].dtype == np.float32
    # Inference reads the running statistics and leaves them alone.
    before = tensor.to_numpy(ts[3]).copy()
    y = autograd.batchnorm_2d(*ts)
    np.testing.assert_array_equal(tensor.to_numpy(ts[3]), before)
    want = ref_bn(x, scale, bias, tensor.to_numpy(ts[3]), tensor.to_numpy(ts[4]))
    np.testing.assert_allclose(tensor.to_numpy(y), want, rtol=1e-5, atol=1e-5)


def test_batchnorm_train_differs_from_eval(dev):
    x, params = bn_inputs((4, 2, 3, 3), np.float32)
    ts = [tensor.Tensor(data=a, device=dev, requires_grad=False) for a in (x, *params)]
    y_eval = tensor.to_numpy(autograd.batchnorm_2d(*ts))
    with training():
        y_train = tensor.to_numpy(autograd.batchnorm_2d(*ts))
    assert not np.allclose(y_train, y_eval, atol=1e-2)
    # Training output is standardised per channel before the affine part.
    z = (y_train - params[1][None, :, None, None]) / params[0][None, :, None, None]
    np.testing.assert_allclose(z.mean(axis=(0, 2, 3)), 0, atol=1e-5)


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("shape", [(3, 2, 2, 2), (4, 3)])
def test_batchnorm_grad(dev, train, shape):
    x, params = bn_inputs(shape, np.float64, seed=3)

    def fn(x, scale, bias):
        # Fresh running stats per call: training updates them in place.
        rs = [tensor.Tensor(data=p.copy(), device=dev, requires_grad=False) for p in params[2:]]
        return autograd.batchnorm_2d(x, scale, bias, *rs, training=train)

    check_grad(fn, [x, params[0], params[1]], dev)


def ref_bn_grads(x, scale, dy, mean, var, train, eps=1e-5):
    """dx, dscale, dbias of batch norm in float64, with the statistics it normalised by."""
    axes = (0, *range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    inv = 1 / np.sqrt(var + eps)
    xhat = (x - mean.reshape(shape)) * inv.reshape(shape)
    dbias, dscale = dy.sum(axis=axes), (dy * xhat).sum(axis=axes)
    a = (scale * inv).reshape(shape)
    if not train:
        return dy * a, dscale, dbias
    m = x.size // x.shape[1]
    return a * (dy - dbias.reshape(shape) / m - xhat * dscale.reshape(shape) / m), dscale, dbias


@given(
    shape=st.sampled_from([(4, 3), (2, 3, 5), (3, 2, 3, 4), (8, 4, 16, 16)]),
    dtype=st.sampled_from(DTYPES),
    offset=st.sampled_from([0.0, 100.0]),
    train=st.booleans(),
)
def test_batchnorm_forward_backward_against_float64(dev, shape, dtype, offset, train):
    # Data far from zero: the GPU reduces each channel in one pass, which must not cancel.
    x, (scale, bias, rm, rv) = bn_inputs(shape, dtype, seed=5)
    x = (x.astype(np.float64) + offset).astype(dtype)
    dy = np.random.default_rng(6).standard_normal(shape).astype(dtype)
    tol = {np.float16: 2e-2, np.float32: 1e-4, np.float64: 1e-9}[dtype]
    mean, var = batch_stats(x) if train else (rm.astype(np.float64), rv.astype(np.float64))
    ts = to_tensors([x, scale, bias], dev)
    stats = [tensor.Tensor(data=p, device=dev, requires_grad=False) for p in (rm, rv)]
    autograd.training = True
    y = autograd.batchnorm_2d(*ts, *stats, training=train)
    grads = autograd.gradients(y, tensor.Tensor(data=dy, device=dev, requires_grad=False))
    autograd.training = False
    want = [ref_bn(x, scale, bias, mean, var), *ref_bn_grads(x, scale, dy, mean, var, train)]
    for got, w in zip([y, *(grads[t] for t in ts)], want):
        assert tensor.to_numpy(got).dtype == dtype
        np.testing.assert_allclose(tensor.to_numpy(got).astype(np.float64), w, rtol=tol, atol=tol)
    if train:
        m = x.size // x.shape[1]
        for got, old, new in ((stats[0], rm, mean), (stats[1], rv, var * m / (m - 1))):
            want_stat = 0.9 * old.astype(np.float64) + 0.1 * new
            np.testing.assert_allclose(tensor.to_numpy(got), want_stat, rtol=tol, atol=tol)


def test_batchnorm_bad_input(dev):
    x, params = bn_inputs((2, 3, 2, 2), np.float32)
    ts = [tensor.Tensor(data=a, device=dev, requires_grad=False) for a in (x, *params)]
    with pytest.raises(ShapeError, match="batchnorm_2d"):
        autograd.batchnorm_2d(
            ts[0], tensor.Tensor(data=np.ones(4, np.float32), device=dev, requires_grad=False), *ts[2:]
        )
    with pytest.raises(ShapeError, match="more than one value"), training():
        autograd.batchnorm_2d(tensor.Tensor(data=x[:1, :, :1, :1], device=dev, requires_grad=False), *ts[1:])
    with pytest.raises(DTypeError):
        autograd.batchnorm_2d(
            tensor.Tensor(data=np.ones((2, 3), np.int32), device=dev, requires_grad=False), *ts[1:]
        )


def ref_layer_norm(x, scale, bias, axis, eps=1e-5):
    axes = tuple(range(axis % x.ndim, x.ndim))
    x = x.astype(np.float64)
    y = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + eps) * scale
    return y if bias is None else y + bias


@given(
    shape=st.sampled_from([(3, 4), (2, 3, 4), (2, 2, 3, 2)]),
    axis=st.sampled_from([-1, -2, 1]),
    dtype=st.sampled_from(DTYPES),
    with_bias=st.booleans(),
)
def test_layer_norm_forward(dev, shape, axis, dtype, with_bias):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    norm_shape = shape[axis % len(shape) :]
    scale, bias = rng.standard_normal(norm_shape).astype(dtype), rng.standard_normal(norm_shape).astype(dtype)
    arrays = [x, scale, bias] if with_bias else [x, scale]
    check_forward(
        lambda *t: autograd.layer_norm(*t[:2], t[2] if with_bias else None, axis=axis),
        lambda *a: ref_layer_norm(x, scale, bias if with_bias else None, axis).astype(dtype),
        arrays,
        dev,
        rtol=TOL[dtype],
        atol=TOL[dtype],
    )


@pytest.mark.parametrize("axis, pshape", [(-1, (4,)), (1, (3, 4)), (1, (1, 4)), (-2, (4,))])
def test_layer_norm_grad(dev, axis, pshape):
    rng = np.random.default_rng(1)
    x, scale, bias = rng.standard_normal((2, 3, 4)), rng.standard_normal(pshape), rng.standard_normal(pshape)
    check_grad(lambda *t: autograd.layer_norm(*t, axis=axis), [x, scale, bias], dev)
    check_grad(lambda *t: autograd.layer_norm(*t, axis=axis), [x, scale], dev)


def test_layer_norm_bad_input(dev):
    x = tensor.Tensor(data=np.zeros((2, 3, 4), np.float32), device=dev, requires_grad=False)
    with pytest.raises(ShapeError, match="layer_norm"):
        autograd.layer_norm(x, tensor.Tensor(data=np.ones(3, np.float32), device=dev, requires_grad=False))
    with pytest.raises(ShapeError, match="axis"):
        autograd.layer_norm(
            x, tensor.Tensor(data=np.ones(4, np.float32), device=dev, requires_grad=False), axis=3
        )


def test_instance_norm(dev):
    rng = np.random.default_rng(2)
    x, scale, bias = rng.standard_normal((2, 3, 2, 3)), rng.standard_normal(3), rng.standard_normal(3)
    s4, b4 = scale[None, :, None, None], bias[None, :, None, None]

    def ref(a, *_):
        m, v = a.mean(axis=(2, 3), keepdims=True), a.var(axis=(2, 3), keepdims=True)
        return (a - m) / np.sqrt(v + 1e-5) * s4 + b4

    check_forward(autograd.instance_norm, ref, [x, scale, bias], dev)
    check_grad(autograd.instance_norm, [x[:, :, :, :2], scale, bias], dev)
    with pytest.raises(ShapeError, match="instance_norm"):
        autograd.instance_norm(*to_tensors([x, scale[:2], bias], dev))


def ref_lrn(x, size, alpha, beta, bias):
    c = x.shape[1]
    sq = np.zeros_like(x, dtype=np.float64)
    for i in range(c):
        lo, hi = max(0, i - (size - 1) // 2), min(c - 1, i + size // 2)  # ONNX: floor / ceil of (size-1)/2
        sq[:, i] = (x[:, lo : hi + 1].astype(np.float64) ** 2).sum(axis=1)
    return x / (bias + alpha / size * sq) ** beta


@given(size=st.integers(1, 4), dtype=st.sampled_from(DTYPES), c=st.integers(1, 5))
def test_lrn_forward(dev, size, dtype, c):
    x = np.random.default_rng(size).standard_normal((2, c, 3, 2)).astype(dtype)
    check_forward(
        lambda t: autograd.lrn(t, size, 0.5, 0.75, 1.5),
        lambda a: ref_lrn(a, size, 0.5, 0.75, 1.5).astype(dtype),
        [x],
        dev,
        rtol=TOL[dtype],
        atol=TOL[dtype],
    )


@pytest.mark.parametrize("size", [2, 3])
def test_lrn_grad(dev, size):
    x = np.random.default_rng(5).standard_normal((1, 4, 2, 2))
    check_grad(lambda t: autograd.lrn(t, size, 0.8, 0.6, 1.2), [x], dev)
    with pytest.raises(ArgumentError, match="lrn: size must be an integer >= 1, got 0"):
        autograd.lrn(tensor.Tensor(data=x, device=dev, requires_grad=False), 0)


@pytest.mark.parametrize("ratio", [0.2, 0.5, 0.8])
def test_dropout_ratio_and_scale(dev, ratio):
    x = np.ones((200, 100), np.float32)
    (t,) = to_tensors([x], dev)
    with training():
        y = tensor.to_numpy(autograd.dropout(t, ratio))
    kept = y != 0
    assert abs(kept.mean() - (1 - ratio)) < 0.02  # 20k draws: std of the mean < 0.004
    np.testing.assert_allclose(y[kept], 1 / (1 - ratio), rtol=1e-6)
    assert y.dtype == np.float32


def test_dropout_grad_uses_the_same_mask(dev):
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    with training():
        (t,) = to_tensors([x], dev)
        y = autograd.dropout(t, 0.5)
        g = tensor.to_numpy(autograd.gradients(y, dev.xp.ones(y.shape, np.float32))[t])
    np.testing.assert_allclose(g * x, tensor.to_numpy(y), rtol=1e-6)


def test_dropout_identity_in_eval_and_ratio_zero(dev):
    x = np.random.default_rng(0).standard_normal((3, 4))
    check_forward(lambda t: autograd.dropout(t, 0.7), lambda a: a, [x], dev)
    with training():
        check_forward(lambda t: autograd.dropout(t, 0.0), lambda a: a, [x], dev)
    check_grad(lambda t: autograd.dropout(t, 0.0), [x], dev)


def test_dropout_reproducible(dev):
    x = tensor.Tensor(data=np.ones((8, 8), np.float32), device=dev, requires_grad=False)

    def draw():
        dev.SetRandSeed(42)
        with training():
            return tensor.to_numpy(autograd.dropout(x, 0.5))

    a, b = draw(), draw()
    np.testing.assert_array_equal(a, b)
    with training():
        assert not np.array_equal(tensor.to_numpy(autograd.dropout(x, 0.5)), a)


@pytest.mark.parametrize("ratio", [1.0, -0.1, 1.5])
def test_dropout_bad_ratio(ratio):
    x = tensor.Tensor(data=np.ones(3, np.float32), device=device.create_cpu_device(), requires_grad=False)
    with pytest.raises(ArgumentError, match=r"dropout: ratio must be a number in \[0, 1\)"):
        autograd.dropout(x, ratio)


# -- rms_norm and group_norm ----------------------------------------------------------------------
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
    with pytest.raises(ArgumentError, match="group_norm: groups must be an integer >= 1, got 0"):
        autograd.group_norm(x, 0, w)
    with pytest.raises(ShapeError, match="broadcast"):
        autograd.rms_norm(x, to_tensors([np.ones(4)], dev)[0])
    with pytest.raises(DTypeError):
        autograd.rms_norm(tensor.from_numpy(np.ones((2, 3), np.int32), dev), w)

"""Quantization ops (``singa_lite.ops.quantize``): forward against NumPy formulas, the
straight-through gradients, the exact integer products, and bad input."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import check_forward, check_grad

from singa_lite import autograd, ops, tensor
from singa_lite.errors import DTypeError, ShapeError

QTYPES = [np.int8, np.uint8, np.int16, np.uint16, ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2]


def _t(a, dev, grad=False):
    return tensor.Tensor(data=np.asarray(a), device=dev, requires_grad=grad, stores_grad=grad)


def _range(dtype):
    info = ml_dtypes.iinfo(dtype) if np.dtype(dtype).kind == "V" else np.iinfo(dtype)
    return int(info.min), int(info.max)


def _ref_quantize(x, s, z, dtype):
    lo, hi = _range(dtype)
    return np.clip(np.rint(x.astype(np.float32) / s) + z, lo, hi)


def _param_shape(shape, axis, block):
    """Scale shape: per axis ``(n,)``, blocked ``shape`` with ``ceil(n / block)`` on ``axis``."""
    if block == 0:
        return (shape[axis],)
    out = list(shape)
    out[axis] = -(-shape[axis] // block)
    return tuple(out)


def _expand(p, shape, axis, block):
    if block == 0:
        return p.reshape([shape[axis] if i == axis else 1 for i in range(len(shape))])
    return np.repeat(p, block, axis=axis).take(np.arange(shape[axis]), axis=axis)


@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple),
    dtype=st.sampled_from(QTYPES),
    mode=st.sampled_from(["tensor", "axis", "blocked"]),
    seed=st.integers(0, 2**16),
)
def test_quantize_and_dequantize_match_the_formula(dev, shape, dtype, mode, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    axis = len(shape) - 1
    block = 2 if mode == "blocked" else 0
    lo, hi = _range(dtype)
    if mode == "tensor":
        s, z = np.float32(rng.uniform(0.05, 0.5)), np.asarray(rng.integers(lo, hi + 1))
        se, ze = s, z
    else:
        pshape = _param_shape(shape, axis, block)
        s = rng.uniform(0.05, 0.5, pshape).astype(np.float32)
        z = rng.integers(lo, hi + 1, pshape)
        se, ze = _expand(s, shape, axis, block), _expand(z, shape, axis, block)
    storage = ops.quant_storage(dtype)
    zt = np.asarray(z).astype(storage)
    want = _ref_quantize(x, se, ze, dtype).astype(storage)

    def quantize(a, scale, zp):
        return ops.quantize_linear(a, scale, zp, axis=axis, block_size=block, dtype=dtype)

    check_forward(quantize, lambda *_: want, [x, np.asarray(s), zt], dev)
    deq = (want.astype(np.float64) - ze).astype(np.float32) * se

    def dequantize(q, scale, zp):
        return ops.dequantize_linear(q, scale, zp, axis=axis, block_size=block)

    check_forward(dequantize, lambda *_: deq.astype(np.float32), [want, np.asarray(s), zt], dev)


def test_quantize_rounds_half_to_even_and_saturates(dev):
    x = _t(np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1000.0, -1000.0], np.float32), dev)
    s = _t(np.float32(1.0), dev)
    q = ops.quantize_linear(x, s, _t(np.int8(0), dev))
    assert q.dtype == np.int8 and q.numpy().tolist() == [0, 2, 2, 0, -2, 127, -128]
    q4 = ops.quantize_linear(x, s, dtype=ml_dtypes.int4)
    assert q4.dtype == np.int8 and q4.numpy().tolist() == [0, 2, 2, 0, -2, 7, -8]
    assert ops.quantize_linear(x, s).dtype == np.uint8  # no zero point: uint8, as ONNX


def test_quantize_to_float8_saturates_or_not(dev):
    x = _t(np.array([0.3, 500.0, -1e6], np.float32), dev)
    s = _t(np.float32(1.0), dev)
    q = ops.quantize_linear(x, s, dtype=ml_dtypes.float8_e4m3fn)
    want = np.array([0.3, 448.0, -448.0], np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert q.dtype == np.float32 and q.numpy().tolist() == want.tolist()
    q = ops.quantize_linear(x, s, dtype=ml_dtypes.float8_e5m2, saturate=False)
    assert np.isinf(q.numpy()[2])


def test_quantize_gradient_passes_straight_through_where_not_saturated(dev):
    x = np.array([-3.0, -0.2, 0.26, 0.9, 5.0], np.float64)
    with autograd.training_mode(True):
        xt = _t(x, dev, grad=True)
        q = ops.quantize_linear(xt, _t(np.float32(0.01), dev), _t(np.int8(0), dev))
        y = ops.dequantize_linear(q, _t(np.float32(0.01), dev))
        dx = autograd.gradients(ops.reduce_sum(y * _t(np.arange(5.0), dev)))[xt].numpy()
    # dequantize(quantize(x)) has the STE gradient 1 inside the range [-1.28, 1.27], 0 outside
    np.testing.assert_allclose(dx, np.arange(5.0) * [0, 1, 1, 1, 0], rtol=1e-6)


@given(seed=st.integers(0, 2**16), per_axis=st.booleans())
def test_dequantize_gradient(dev, seed, per_axis):
    rng = np.random.default_rng(seed)
    q = rng.integers(-20, 20, (3, 4)).astype(np.float64)  # held as reals: the gradient is linear
    s = rng.uniform(0.1, 1.0, 4 if per_axis else ()).astype(np.float64)
    check_grad(lambda a, sc: ops.dequantize_linear(a, sc, axis=1), [q, s], dev, wrt=[0])


def test_dynamic_quantize_linear_matches_the_formula(dev):
    rng = np.random.default_rng(0)
    x = rng.normal(2.0, 1.0, (4, 5)).astype(np.float32)  # all positive: the range is widened to 0
    q, s, z = ops.dynamic_quantize_linear(_t(x, dev))
    lo, hi = min(0.0, x.min()), max(0.0, x.max())
    scale = np.float32((np.float32(hi) - np.float32(lo)) / np.float32(255))
    zp = np.clip(np.rint((0 - np.float32(lo)) / scale), 0, 255)
    assert q.dtype == z.dtype == np.uint8 and s.dtype == np.float32
    assert s.numpy() == scale and z.numpy() == zp
    np.testing.assert_array_equal(q.numpy(), np.clip(np.rint(x / scale) + zp, 0, 255).astype(np.uint8))
    q0, s0, z0 = ops.dynamic_quantize_linear(_t(np.zeros(3, np.float32), dev))
    assert q0.numpy().tolist() == [0, 0, 0] and s0.numpy() == 0 and z0.numpy() == 0


@given(
    m=st.integers(1, 5),
    k=st.integers(1, 6),
    n=st.integers(1, 5),
    batch=st.sampled_from([(), (2,)]),
    types=st.sampled_from([(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)]),
    per_axis=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matmul_integer_is_exact(dev, m, k, n, batch, types, per_axis, seed):
    rng = np.random.default_rng(seed)
    ta, tb = types
    a = rng.integers(np.iinfo(ta).min, np.iinfo(ta).max + 1, (*batch, m, k)).astype(ta)
    b = rng.integers(np.iinfo(tb).min, np.iinfo(tb).max + 1, (k, n)).astype(tb)
    za = rng.integers(0, 10, m if per_axis else ()).astype(ta)
    zb = rng.integers(0, 10, n if per_axis else ()).astype(tb)
    want = (a.astype(np.int64) - (za[:, None] if per_axis else za)) @ (b.astype(np.int64) - zb)
    check_forward(ops.matmul_integer, lambda *_: want.astype(np.int32), [a, b, za, zb], dev)


def test_matmul_integer_wraps_as_int32():
    a = np.full((1, 2**16), 255, np.uint8)
    b = np.full((2**16, 1), 255, np.uint8)
    y = ops.matmul_integer(_t(a, None), _t(b, None)).numpy()
    assert y.dtype == np.int32 and int(y[0, 0]) == np.int64(255 * 255 * 2**16).astype(np.int32)


def test_integer_products_pass_gradients_as_if_the_integers_were_reals(dev):
    rng = np.random.default_rng(1)
    a = rng.integers(0, 255, (3, 4)).astype(np.uint8)
    b = rng.integers(-128, 127, (4, 2)).astype(np.int8)
    w = rng.standard_normal((3, 2))
    with autograd.training_mode(True):
        ta, tb = _t(a, dev, grad=True), _t(b, dev, grad=True)
        y = ops.integer_as_real(ops.matmul_integer(ta, tb, _t(np.uint8(3), dev), _t(np.int8(-1), dev)))
        grads = autograd.gradients(ops.reduce_sum(y * _t(w, dev)))
    np.testing.assert_allclose(grads[ta].numpy(), w @ (b.astype(np.float64) + 1).T)
    np.testing.assert_allclose(grads[tb].numpy(), (a.astype(np.float64) - 3).T @ w)


def _ref_conv(x, w, pads, stride, group):
    """A direct int64 convolution (2-D, NumPy) for the reference."""
    x = np.pad(x, ((0, 0), (0, 0), pads[0], pads[1]))
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    per = o // group
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
            for g in range(group):
                p = patch[:, g * cg : (g + 1) * cg]
                out[:, g * per : (g + 1) * per, i, j] = np.einsum(
                    "nchw,ochw->no", p, w[g * per : (g + 1) * per]
                )
    return out


@given(group=st.sampled_from([1, 2]), stride=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_conv_integer_is_exact_and_pads_with_the_zero_point(dev, group, stride, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (2, 4, 5, 5)).astype(np.uint8)
    w = rng.integers(-128, 128, (4, 4 // group, 3, 3)).astype(np.int8)
    zx, zw = np.uint8(rng.integers(0, 256)), rng.integers(-5, 5, 4).astype(np.int8)
    pads = ((1, 0), (1, 1))
    want = _ref_conv(
        x.astype(np.int64) - int(zx), w.astype(np.int64) - zw[:, None, None, None], pads, stride, group
    )

    def fn(a, b, za, zb):
        return ops.conv_integer(a, b, za, zb, stride, list(pads), 1, group)

    check_forward(fn, lambda *_: want.astype(np.int32), [x, w, zx, zw], dev)


def test_qlinear_ops_requantize_as_onnxruntime_does(dev):
    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (3, 5)).astype(np.uint8)
    b = rng.integers(-128, 128, (5, 4)).astype(np.int8)
    sa, sb, sy = np.float32(0.02), rng.uniform(0.001, 0.01, 4).astype(np.float32), np.float32(0.05)
    za, zb, zy = np.uint8(120), np.zeros(4, np.int8), np.uint8(128)
    acc = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb)
    m = (sa * sb / sy).astype(np.float32)
    want = np.clip(np.rint(acc.astype(np.float32) * m) + np.float32(zy), 0, 255).astype(np.uint8)
    got = ops.qlinear_matmul(*[_t(v, dev) for v in (a, sa, za, b, sb, zb, sy, zy)])
    np.testing.assert_array_equal(got.numpy(), want)


def test_bad_arguments_raise_typed_errors(dev):
    x = _t(np.zeros((2, 3), np.float32), dev)
    with pytest.raises(ShapeError, match="per-axis"):
        ops.quantize_linear(x, _t(np.ones(2, np.float32), dev), axis=1)
    with pytest.raises(ShapeError, match="blocked"):
        ops.quantize_linear(x, _t(np.ones((2, 3), np.float32), dev), axis=1, block_size=2)
    with pytest.raises(DTypeError, match="not supported"):
        ops.quantize_linear(x, _t(np.float32(1), dev), dtype=np.float64)
    with pytest.raises(DTypeError, match="integer"):
        ops.matmul_integer(x, x)
    with pytest.raises(DTypeError, match="float"):
        ops.dynamic_quantize_linear(_t(np.zeros(2, np.int8), dev))
    i8 = _t(np.zeros((2, 3), np.int8), dev)
    with pytest.raises(ShapeError, match="zero point"):
        ops.matmul_integer(i8, _t(np.zeros((3, 2), np.int8), dev), _t(np.zeros(5, np.int8), dev))
    with pytest.raises(ShapeError, match="bias"):
        ops.qlinear_conv(
            _t(np.zeros((1, 1, 3, 3), np.uint8), dev), _t(np.float32(1), dev), _t(np.uint8(0), dev),
            _t(np.zeros((2, 1, 1, 1), np.int8), dev), _t(np.float32(1), dev), _t(np.int8(0), dev),
            _t(np.float32(1), dev), _t(np.uint8(0), dev), _t(np.zeros(3, np.int32), dev),
        )  # fmt: skip

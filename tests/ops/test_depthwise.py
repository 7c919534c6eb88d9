"""The depthwise strategies (``ops/depthwise.py``): the inference einsum against the recorded
path (the tap loop, or the compiled kernels, which keep what backward needs) and a float64
reference; the compiled kernels' forward and backward against the tap loop's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from singa_lite import autograd, tensor
from singa_lite.backend import cpu_kernels
from singa_lite.ops import conv, depthwise
from singa_lite.ops.conv import conv_output_size
from singa_lite.ops.conv_blocks import Geometry2d


def _rand(shape: tuple, dtype: type, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def _reference(x, w, b, stride, pads, dilation):
    """Direct float64 depthwise conv: output channel o reads input channel o // m."""
    t, bo, l, r = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, bo), (l, r)))
    O, _, kh, kw = w.shape
    m = O // x.shape[1]
    (sh, sw), (dh, dw) = stride, dilation
    Ho = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    Wo = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((x.shape[0], O, Ho, Wo))
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i * dh : i * dh + sh * (Ho - 1) + 1 : sh, j * dw : j * dw + sw * (Wo - 1) + 1 : sw]
            y += np.repeat(win, m, axis=1) * w[None, :, 0, i, j, None, None]
    return y if b is None else y + b.reshape(1, O, 1, 1)


def _conv(arrays, dev, geo, record: bool) -> np.ndarray:
    """``conv2d`` on ``dev``, recorded for backward (the tap loop) or not (the einsum)."""
    ts = [tensor.Tensor(data=a, device=dev, requires_grad=False) for a in arrays]
    autograd.training = record
    ts[0].requires_grad = record
    try:
        return tensor.to_numpy(autograd.conv2d(*ts, **geo))
    finally:
        autograd.training = False


@st.composite
def depthwise_cases(draw):
    C, m = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    H, W = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    out = [
        conv_output_size(n, kk, s, (p0, p1), d)
        for n, kk, s, (p0, p1), d in zip((H, W), k, stride, (pads[:2], pads[2:]), dilation)
    ]
    assume(min(out) >= 1)
    return dict(
        shapes=((draw(st.integers(1, 2)), C, H, W), (C * m, 1, *k)),
        bias=draw(st.booleans()),
        dtype=draw(st.sampled_from([np.float32, np.float64])),
        geo=dict(stride=stride, padding=pads, dilation=dilation, group=C),
    )


@given(case=depthwise_cases(), seed=st.integers(0, 2**16))
def test_inference_equals_recorded_path(dev, case, seed, monkeypatch):
    (xs, ws), dtype, geo = case["shapes"], case["dtype"], case["geo"]
    arrays = [_rand(xs, dtype, seed), _rand(ws, dtype, seed + 1)]
    if case["bias"]:
        arrays.append(_rand((ws[0],), dtype, seed + 2))
    recorded = _conv(arrays, dev, geo, record=True)

    def no_tap_loop(*_):
        raise AssertionError("inference ran the recording tap loop")

    with monkeypatch.context() as mp:  # the no-backward call: the einsum or the compiled loops
        mp.setattr(depthwise.Depthwise, "_depthwise_forward", no_tap_loop)
        inferred = _conv(arrays, dev, geo, record=False)
    assert inferred.dtype == recorded.dtype == dtype and inferred.shape == recorded.shape
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(inferred, recorded, rtol=tol, atol=tol)
    want = _reference(
        *arrays[:2], arrays[2] if case["bias"] else None, geo["stride"], geo["padding"], geo["dilation"]
    )
    np.testing.assert_allclose(inferred, want, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("xs", "ws", "stride", "pads"),
    [
        ((1, 6, 9, 7), (6, 1, 3, 3), (2, 2), (1, 1, 1, 1)),  # the last padded row is never read
        ((1, 3, 4, 5), (6, 1, 2, 3), (1, 2), (3, 0, 0, 4)),  # padding wider than the kernel
        ((2, 5, 6, 6), (5, 1, 3, 3), (1, 1), (0, 0, 0, 0)),
    ],
)
def test_function_on_strided_input(xs, ws, stride, pads):
    # a channels-last view (as a transpose leaves it) and views with negative strides
    x = np.ascontiguousarray(_rand(xs, np.float64, 3).transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    w, b = _rand(ws, np.float64, 4), _rand((ws[0],), np.float64, 5)
    for view in (x, x[:, ::-1], x[..., ::-1]):
        want = _reference(view, w, b, stride, pads, (1, 1))
        y = depthwise.depthwise_conv(np, view, w, b, pads, stride, (1, 1), want.shape[2:])
        assert y.flags.c_contiguous and y.dtype == x.dtype
        np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


def test_shufflenet_sizes_float32():
    # ShuffleNet's 3x3 layers at batch 1: the shapes the benchmark runs, against float64
    for C, H, s in [(112, 56, 2), (136, 28, 1), (544, 7, 1)]:
        x, w, b = (
            _rand((1, C, H, H), np.float32, 6),
            _rand((C, 1, 3, 3), np.float32, 7),
            _rand((C,), np.float32, 8),
        )
        Ho = conv_output_size(H, 3, s, 1)
        y = depthwise.depthwise_conv(np, x, w, b, (1, 1, 1, 1), (s, s), (1, 1), (Ho, Ho))
        assert y.dtype == np.float32
        np.testing.assert_allclose(y, _reference(x, w, b, (s, s), (1, 1, 1, 1), (1, 1)), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not cpu_kernels.usable(np, np.zeros(1)), reason="compiled CPU kernels off or no Numba")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("H", "stride", "strategy"),
    [(28, 1, "depthwise_kernel"), (56, 2, "depthwise_kernel"), (7, 1, "depthwise_kernel")],
)
def test_inference_takes_the_kernels(H, stride, strategy, dtype):
    """Depthwise inference runs the compiled loops at every plane size, the bias added as they
    write the output; the result equals the reference."""
    x, w, b = _rand((1, 8, H, H), dtype, 9), _rand((16, 1, 3, 3), dtype, 10), _rand((16,), dtype, 11)
    op = conv.Conv2d(stride=stride, padding=1, group=8)
    y = op(*(tensor.Tensor(data=a, requires_grad=False) for a in (x, w, b)))[0]
    assert op.strategy == strategy
    tol = 1e-5 if dtype == np.float32 else 1e-12
    want = _reference(x, w, b, (stride, stride), (1, 1, 1, 1), (1, 1))
    np.testing.assert_allclose(tensor.to_numpy(y), want, rtol=tol, atol=tol)


@pytest.mark.skipif(not cpu_kernels.usable(np, np.zeros(1)), reason="compiled CPU kernels off or no Numba")
@given(case=depthwise_cases(), seed=st.integers(0, 2**16))
def test_compiled_kernels_equal_the_tap_loop(case, seed):
    """The ``depthwise_kernel`` strategy: forward and both gradients as the tap loop's."""
    (xs, ws), dtype, geo = case["shapes"], case["dtype"], case["geo"]
    x, w = _rand(xs, dtype, seed), _rand(ws, dtype, seed + 1)
    b = _rand((ws[0],), dtype, seed + 2) if case["bias"] else None
    pads = geo["padding"]
    out = tuple(
        conv_output_size(n, k, s, p, d)
        for n, k, s, p, d in zip(xs[2:], ws[2:], geo["stride"], (pads[:2], pads[2:]), geo["dilation"])
    )
    g = Geometry2d(ws[2:], geo["stride"], geo["dilation"], pads, out, xs[1])
    loop, compiled = depthwise.Depthwise(np, g), depthwise.Depthwise(np, g, compiled=True)
    assert compiled.kernels is not None and depthwise.kernels_take(np, x, w)
    y_loop, y_kernel = loop.forward(x, w, b), compiled.forward(x, w, b)
    dy = _rand(y_loop.shape, dtype, seed + 3)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y_kernel, y_loop, rtol=tol, atol=tol)
    for need_x, need_w in ((True, True), (True, False), (False, True)):
        got, want = compiled.backward(dy, need_x, need_w), loop.backward(dy, need_x, need_w)
        for a, e in zip(got, want):
            assert (a is None) == (e is None)
            if a is not None:
                assert a.shape == e.shape and a.dtype == e.dtype
                np.testing.assert_allclose(a, e, rtol=tol, atol=tol * max(1, float(np.abs(e).max())))

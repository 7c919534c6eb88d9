"""The compiled depthwise-convolution and pooling kernels (backend/cpu_kernels/conv.py, pool.py)
against NumPy references.

Depthwise: the kernel functions against a tap-by-tap NumPy loop written here (the sums
``ops.conv`` does), over hypothesis-drawn shapes, strides, dilations, paddings, channel
multipliers and dtypes, empty batches included; the bound is float32 1e-5 and float64 1e-12
relative to the same sums over absolute values (a bound relative to the result alone would
fail where it cancels). Pooling: the ops with the kernels on against the ops with them off
(``SINGA_LITE_CPU_KERNELS``), forward and gradients, recorded and not. Half of the examples
force the parallel form of the loops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip(
    "numba", reason="the compiled CPU kernels need numba: pip install 'singa_lite[cpu-kernels]'"
)

from test_cpu_kernels import TOL
from test_cpu_kernels import kernels as switch

from singa_lite import autograd, device, tensor
from singa_lite.backend import cpu_kernels
from singa_lite.backend.cpu_kernels import _jit
from singa_lite.backend.cpu_kernels import conv as dw_kernels
from singa_lite.errors import ShapeError
from singa_lite.ops import pool
from singa_lite.ops.depthwise import depthwise_conv

DEV = device.get_default_device()
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

pytestmark = pytest.mark.skipif(
    not cpu_kernels.enabled(), reason="SINGA_LITE_CPU_KERNELS=0: the kernels are switched off"
)


@contextlib.contextmanager
def kernels(on: bool, parallel: bool = False) -> Iterator[None]:
    """``test_cpu_kernels.kernels`` (on or off, the parallel form forced), with the pool kernels
    on every shape inside, not only where ``ops.pool``'s gates send them."""
    gates = pool.KERNEL_MIN_ROW, pool.KERNEL_INFERENCE
    pool.KERNEL_MIN_ROW, pool.KERNEL_INFERENCE = 0, True
    try:
        with switch(on, parallel):
            yield
    finally:
        pool.KERNEL_MIN_ROW, pool.KERNEL_INFERENCE = gates


# -- depthwise convolution -------------------------------------------------------------------
def _taps(x: np.ndarray, m: int, pads: tuple, kernel: tuple, stride: tuple, dilation: tuple, out: tuple):
    """The zero-padded input, repeated ``m`` times over channels, and the view of it that each
    kernel tap ``(i, j)`` reads for every output cell."""
    N, C, H, W = x.shape
    t, b, l, r = pads
    (kh, kw), (sh, sw), (dh, dw), (Ho, Wo) = kernel, stride, dilation, out
    rows = max(H + t + b, (Ho - 1) * sh + (kh - 1) * dh + 1)  # room for every tap's view
    cols = max(W + l + r, (Wo - 1) * sw + (kw - 1) * dw + 1)
    xp = np.zeros((N, C, rows, cols), x.dtype)
    xp[:, :, t : t + H, l : l + W] = x
    xp = np.repeat(xp, m, axis=1)
    views = {
        (i, j): (
            slice(None),
            slice(None),
            slice(i * dh, i * dh + (Ho - 1) * sh + 1, sh),
            slice(j * dw, j * dw + (Wo - 1) * sw + 1, sw),
        )
        for i in range(kh)
        for j in range(kw)
    }
    return xp, views


def ref_depthwise(x: np.ndarray, w: np.ndarray, dy: np.ndarray, pads: tuple, stride: tuple, dilation: tuple):
    """``(y, dx, dw)`` of a depthwise conv, tap by tap as ``ops.conv`` sums them."""
    N, C, H, W = x.shape
    O, _, kh, kw = w.shape
    m, out = O // C, dy.shape[2:]
    xp, views = _taps(x, m, pads, (kh, kw), stride, dilation, out)
    y = np.zeros(dy.shape, x.dtype)
    dpad = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for (i, j), v in views.items():
        y += xp[v] * w[:, 0, i, j, None, None]
        dpad[v] += dy * w[:, 0, i, j, None, None]
        dw[:, 0, i, j] = (dy * xp[v]).sum(axis=(0, 2, 3))
    t, _, l, _ = pads
    dx = dpad[:, :, t : t + H, l : l + W].reshape(N, C, m, H, W).sum(axis=2)
    return y, dx, dw


def assert_bounded(got: np.ndarray, ref: np.ndarray, bound: np.ndarray, what: str) -> None:
    """``|got - ref| <= tol * bound`` (``bound`` the same sum over absolute values)."""
    assert got.shape == ref.shape and got.dtype == ref.dtype, (what, got.shape, ref.shape, got.dtype)
    tol = TOL[ref.dtype]
    err = np.abs(got.astype(np.float64) - ref)
    limit = tol * (bound.astype(np.float64) + np.finfo(ref.dtype).tiny)
    assert np.all(err <= limit), (what, float((err - limit).max()))


@st.composite
def depthwise_cases(draw: st.DrawFn) -> tuple:
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    stride = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dilation = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    H = draw(st.integers(max(1, (kh - 1) * dilation[0] + 1 - pads[0] - pads[1]), 12))
    W = draw(st.integers(max(1, (kw - 1) * dilation[1] + 1 - pads[2] - pads[3]), 12))
    N, C, m = draw(st.integers(0, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((N, C, H, W)).astype(dtype)
    w = rng.standard_normal((C * m, 1, kh, kw)).astype(dtype)
    out = tuple(
        (n + p0 + p1 - d * (k - 1) - 1) // s + 1
        for n, p0, p1, d, k, s in zip((H, W), pads[0::2], pads[1::2], dilation, (kh, kw), stride)
    )
    dy = rng.standard_normal((N, C * m, *out)).astype(dtype)
    return x, w, dy, pads, stride, dilation


@SETTINGS
@given(depthwise_cases(), st.booleans(), st.booleans())
def test_depthwise_matches_the_tap_loop(case: tuple, parallel: bool, strided: bool) -> None:
    x, w, dy, pads, stride, dilation = case
    if strided:  # a non-contiguous input: the kernel copies it first
        x = np.repeat(x, 2, axis=3)[..., ::2]
    y_ref, dx_ref, dw_ref = ref_depthwise(x, w, dy, pads, stride, dilation)
    y_abs, dx_abs, dw_abs = ref_depthwise(np.abs(x), np.abs(w), np.abs(dy), pads, stride, dilation)
    with kernels(True, parallel):
        y = dw_kernels.depthwise_forward(x, w, stride, dilation, pads, dy.shape[2:])
        dx, dw = dw_kernels.depthwise_backward(dy, x, w, stride, dilation, pads, True, True)
        only_dx = dw_kernels.depthwise_backward(dy, x, w, stride, dilation, pads, True, False)
        only_dw = dw_kernels.depthwise_backward(dy, x, w, stride, dilation, pads, False, True)
    assert_bounded(y, y_ref, y_abs, "y")
    assert_bounded(dx, dx_ref, dx_abs, "dx")
    assert_bounded(dw, dw_ref, dw_abs, "dw")
    assert only_dx[1] is None and only_dw[0] is None
    np.testing.assert_array_equal(only_dx[0], dx)
    np.testing.assert_array_equal(only_dw[1], dw)
    if y.size and w.shape[0] == x.shape[1]:
        # the forward and dx sum in the reference's order, without fused multiply-adds
        np.testing.assert_array_equal(y, y_ref)
        np.testing.assert_array_equal(dx, dx_ref)


@SETTINGS
@given(
    depthwise_cases(),
    st.sampled_from([(0.0, np.inf), (0.0, 6.0), (-np.inf, 0.5), (-1.0, -1.0)]),
    st.booleans(),
)
def test_depthwise_bias_and_clamp_equal_the_separate_passes(
    case: tuple, bounds: tuple, parallel: bool
) -> None:
    """The forward's epilogue (``bias``, a fused ReLU or Clip) against the kernel without it
    followed by ``y += b`` and ``np.clip``: the same bits, a NaN kept as NaN."""
    x, w, dy, pads, stride, dilation = case
    b = np.random.default_rng(0).standard_normal(w.shape[0]).astype(x.dtype)
    if x.size:
        x = x.copy()
        x.flat[0] = np.nan
    with kernels(True, parallel):
        plain = dw_kernels.depthwise_forward(x, w, stride, dilation, pads, dy.shape[2:])
        biased = dw_kernels.depthwise_forward(x, w, stride, dilation, pads, dy.shape[2:], b)
        fused = dw_kernels.depthwise_forward(x, w, stride, dilation, pads, dy.shape[2:], b, bounds)
    plain += b.reshape(1, -1, 1, 1)
    np.testing.assert_array_equal(biased, plain)
    lo, hi = (x.dtype.type(v) for v in bounds)
    np.testing.assert_array_equal(fused, np.clip(plain, lo, hi))
    assert fused.dtype == x.dtype and fused.flags.c_contiguous


@st.composite
def window3x3_cases(draw: st.DrawFn) -> tuple:
    """3x3 windows without dilation, column stride 1 or 2 (``_forward3x3``'s cases): widths on
    both sides of its flat-loop threshold, pads wider than the window, odd and even sizes."""
    stride = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    H = draw(st.integers(max(1, 3 - pads[0] - pads[1]), 9))
    W = draw(st.integers(max(1, 3 - pads[2] - pads[3]), 60))
    N, C, m = draw(st.integers(0, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((N, C, H, W)).astype(dtype)
    if x.size and draw(st.booleans()):
        x.flat[draw(st.integers(0, x.size - 1))] = np.nan
    w = rng.standard_normal((C * m, 1, 3, 3)).astype(dtype)
    b = rng.standard_normal(C * m).astype(dtype)
    out = tuple((n + p0 + p1 - 3) // s + 1 for n, p0, p1, s in zip((H, W), pads[0::2], pads[1::2], stride))
    return x, w, b, pads, stride, out


@SETTINGS
@given(
    window3x3_cases(),
    st.sampled_from([(-np.inf, np.inf), (0.0, 6.0), (0.0, np.inf)]),
    st.booleans(),
)
def test_depthwise_3x3_loops_equal_the_phase_loops(case: tuple, bounds: tuple, parallel: bool) -> None:
    """The 3x3 forward (one pass per output row, a NaN kept) gives the general phase loops'
    bits, with the bias and clamp, on one chunk and on many; and with ``m == 1`` the tap
    loop's, its bias added and clamped after."""
    x, w, b, pads, stride, out = case
    with kernels(True, parallel):
        y = dw_kernels.depthwise_forward(x, w, stride, (1, 1), pads, out, b, bounds)
        general = np.empty_like(y)
        if y.size:
            lohi = np.array(bounds, np.float64)
            geo = dw_kernels._geometry(stride, (1, 1), pads)
            chunks = min(x.shape[0] * x.shape[1], 7 if parallel else 1)
            dw_kernels._forward(y.size * 9, x, w, general, geo, w.shape[0] // x.shape[1], b, lohi, chunks)
    np.testing.assert_array_equal(y, general)
    if w.shape[0] == x.shape[1]:
        ref = ref_depthwise(x, w, np.zeros_like(y), pads, stride, (1, 1))[0] + b.reshape(1, -1, 1, 1)
        np.testing.assert_array_equal(y, np.clip(ref, *(x.dtype.type(v) for v in bounds)))


@st.composite
def same_width_cases(draw: st.DrawFn) -> tuple:
    """Stride 1 with the columns padded to keep the width: the kernels' flat planes, whose
    taps off a row's ends read the zeros the rows are copied with."""
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    left = draw(st.integers(0, (kw - 1) * dw))
    top, bottom = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    pads = (top, bottom, left, (kw - 1) * dw - left)
    H = draw(st.integers(max(1, (kh - 1) * dh + 1 - top - bottom), 9))
    W = draw(st.integers(1, 9))
    N, C, m = draw(st.integers(0, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((N, C, H, W)).astype(dtype)
    w = rng.standard_normal((C * m, 1, kh, kw)).astype(dtype)
    Ho = H + top + bottom - (kh - 1) * dh
    dy = rng.standard_normal((N, C * m, Ho, W)).astype(dtype)
    return x, w, dy, pads, (1, 1), (dh, dw)


@SETTINGS
@given(same_width_cases(), st.booleans())
def test_depthwise_same_width_planes_match_the_tap_loop(case: tuple, parallel: bool) -> None:
    x, w, dy, pads, stride, dilation = case
    y_ref, dx_ref, dw_ref = ref_depthwise(x, w, dy, pads, stride, dilation)
    y_abs, dx_abs, dw_abs = ref_depthwise(np.abs(x), np.abs(w), np.abs(dy), pads, stride, dilation)
    with kernels(True, parallel):
        y = dw_kernels.depthwise_forward(x, w, stride, dilation, pads, dy.shape[2:])
        dx, dw = dw_kernels.depthwise_backward(dy, x, w, stride, dilation, pads, True, True)
    assert_bounded(y, y_ref, y_abs, "y")
    assert_bounded(dx, dx_ref, dx_abs, "dx")
    assert_bounded(dw, dw_ref, dw_abs, "dw")
    if y.size and w.shape[0] == x.shape[1]:  # the reference's order and roundings, edges included
        np.testing.assert_array_equal(y, y_ref)
        np.testing.assert_array_equal(dx, dx_ref)


@SETTINGS
@given(depthwise_cases())
def test_depthwise_forward_matches_the_einsum_path(case: tuple) -> None:
    x, w, dy, pads, stride, dilation = case
    ref = depthwise_conv(np, x, w, None, pads, stride, dilation, dy.shape[2:])
    got = dw_kernels.depthwise_forward(x, w, stride, dilation, pads, dy.shape[2:])
    bound = ref_depthwise(np.abs(x), np.abs(w), dy, pads, stride, dilation)[0]
    assert_bounded(got, ref, bound, "y")


@pytest.mark.parametrize(
    "N, C, m, hw, stride, pads",
    [
        (2, 3, 1, (9, 8), (1, 1), (1, 1, 1, 1)),
        (1, 4, 2, (7, 10), (2, 2), (1, 0, 2, 1)),
        (3, 2, 3, (5, 5), (2, 1), (0, 0, 0, 0)),
    ],
)
def test_depthwise_matches_torch_in_float64(
    N: int, C: int, m: int, hw: tuple, stride: tuple, pads: tuple
) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N, C, *hw))
    w = rng.standard_normal((C * m, 1, 3, 3))
    t, b, l, r = pads
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    yt = torch.nn.functional.conv2d(torch.nn.functional.pad(xt, (l, r, t, b)), wt, stride=stride, groups=C)
    dy = rng.standard_normal(tuple(yt.shape))
    dxt, dwt = torch.autograd.grad(yt, (xt, wt), torch.tensor(dy))
    y = dw_kernels.depthwise_forward(x, w, stride, (1, 1), pads, dy.shape[2:])
    dx, dw = dw_kernels.depthwise_backward(dy, x, w, stride, (1, 1), pads, True, True)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, dxt.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dw, dwt.numpy(), rtol=1e-12, atol=1e-12)


def test_depthwise_dw_does_not_depend_on_the_thread_count() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 6, 13, 11)).astype(np.float32)
    w = rng.standard_normal((12, 1, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((5, 12, 7, 6)).astype(np.float32)
    geo = ((2, 2), (1, 1), (1, 1, 1, 1))
    with kernels(True):
        _jit.PARALLEL_MIN = 1 << 62  # serial
        serial = dw_kernels.depthwise_backward(dy, x, w, *geo, True, True)
    with kernels(True, parallel=True):
        par = dw_kernels.depthwise_backward(dy, x, w, *geo, True, True)
    for a, b in zip(serial, par):
        np.testing.assert_array_equal(a, b)


def test_depthwise_empty_batch() -> None:
    x = np.zeros((0, 3, 5, 5), np.float32)
    w = np.ones((3, 1, 3, 3), np.float32)
    y = dw_kernels.depthwise_forward(x, w, (1, 1), (1, 1), (1, 1, 1, 1), (5, 5))
    dx, dw = dw_kernels.depthwise_backward(y, x, w, (1, 1), (1, 1), (1, 1, 1, 1), True, True)
    assert y.shape == (0, 3, 5, 5) and dx.shape == x.shape
    np.testing.assert_array_equal(dw, np.zeros_like(w))


# -- pooling, through the ops ----------------------------------------------------------------
def run_pool(fn: Any, x: np.ndarray, dy: np.ndarray | None, on: bool, parallel: bool) -> list:
    """``[y]`` (inference) or ``[y, dx]`` (recorded, gradient for ``dy``) as NumPy arrays."""
    with kernels(on, parallel):
        if dy is None:
            return [tensor.to_numpy(fn(tensor.Tensor(device=DEV, data=x)))]
        with autograd.training_mode(True):
            t = tensor.Tensor(device=DEV, data=x, requires_grad=True, stores_grad=True)
            y = fn(t)
            grads = autograd.gradients(y, tensor.Tensor(device=DEV, data=dy.reshape(y.shape)))
            return [tensor.to_numpy(y), tensor.to_numpy(grads[t])]


def assert_close(got: np.ndarray, ref: np.ndarray, what: str) -> None:
    assert got.shape == ref.shape and got.dtype == ref.dtype, (what, got.shape, ref.shape)
    tol = TOL[ref.dtype]
    finite = ref[np.isfinite(ref)]
    scale = float(np.abs(finite).max()) if finite.size else 1.0
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * scale, err_msg=what)


@st.composite
def pool_cases(draw: st.DrawFn) -> tuple:
    n = draw(st.integers(1, 3))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(n))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(n))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(n))
    pads = tuple(draw(st.integers(0, (k - 1) * d)) for k, d in zip(kernel, dilation) for _ in range(2))
    sizes = tuple(
        draw(st.integers(max(1, d * (k - 1) + 1 - pads[2 * a] - pads[2 * a + 1]), 9 if n < 3 else 5))
        for a, (k, d) in enumerate(zip(kernel, dilation))
    )
    batch = (draw(st.integers(0, 2)), draw(st.integers(1, 3)))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((*batch, *sizes)).astype(dtype)
    if draw(st.booleans()):  # ties: the gradient goes to the first maximum
        x = np.round(x)
    return x, kernel, stride, pads, dilation, draw(st.booleans()), rng


def pool_under_test(case: tuple, kind: str) -> tuple[Any, tuple] | None:
    """The pool of a ``pool_cases`` case as ``(fn, output size)``: ``kind`` "max", or "avg" /
    "avg_exclude" (no dilation, padding cut to below the kernel, padded cells counted or not);
    None where no window fits (the average pool's smaller padding): nothing to test."""
    x, kernel, stride, pads, dilation, ceil_mode, _ = case
    if kind == "max":
        fn = lambda t: pool.max_pool(t, kernel, stride, pads, dilation, ceil_mode)  # noqa: E731
    else:
        dilation = (1,) * len(kernel)
        pads = tuple(min(p, k - 1) for p, k in zip(pads, np.repeat(kernel, 2)))
        include = kind == "avg"
        fn = lambda t: pool.avg_pool(t, kernel, stride, pads, ceil_mode, include)  # noqa: E731
    try:
        return fn, pool.pool_output_size(x.shape[2:], kernel, stride, pads, dilation, ceil_mode)
    except ShapeError:
        return None


@SETTINGS
@given(pool_cases(), st.sampled_from(["max", "avg", "avg_exclude"]), st.booleans(), st.booleans())
def test_pools_match_the_numpy_path(case: tuple, kind: str, recorded: bool, parallel: bool) -> None:
    x, rng = case[0], case[-1]
    made = pool_under_test(case, kind)
    if made is None:
        return
    fn, out = made
    dy = rng.standard_normal((*x.shape[:2], *out)).astype(x.dtype) if recorded else None
    ref = run_pool(fn, x, dy, False, False)
    got = run_pool(fn, x, dy, True, parallel)
    for g, r, what in zip(got, ref, ("y", "dx")):
        assert_close(g, r, what)
    if kind == "max":  # the same maxima, and the same cells get the gradient
        np.testing.assert_array_equal(got[0], ref[0])
        if recorded:
            np.testing.assert_array_equal(got[1] != 0, ref[1] != 0)


def run_inference_pool(fn: Any, x: np.ndarray, on: bool, parallel: bool = False) -> np.ndarray:
    """An inference pool with the kernels on or off and ``ops.pool``'s own gates: with them on,
    one or two axes take the plane sweep (``pool_sweep``)."""
    with switch(on, parallel):
        return tensor.to_numpy(fn(tensor.Tensor(device=DEV, data=x)))


@SETTINGS
@given(pool_cases(), st.sampled_from(["max", "avg", "avg_exclude"]), st.booleans())
def test_inference_pool_sweep_matches_the_numpy_sweep(case: tuple, kind: str, parallel: bool) -> None:
    """The plane sweep against the separable NumPy sweep (kernels off): the same maxima bit for
    bit (NaN kept), sums within the tolerance (rows then columns, as NumPy adds them; where
    padding cuts a window the terms may come in another order)."""
    x, rng = case[0], case[-1]
    if rng.integers(2):  # a tenth of the cells NaN (max) or inf (sums)
        x[rng.random(x.shape) < 0.1] = np.nan if kind == "max" else np.inf
    made = pool_under_test(case, kind)
    if made is None:
        return
    fn = made[0]
    ref = run_inference_pool(fn, x, False)
    got = run_inference_pool(fn, x, True, parallel)
    if kind == "max":
        np.testing.assert_array_equal(got, ref)
    else:
        assert_close(got, ref, "y")


@pytest.mark.parametrize("stride", [1, 2])
def test_inference_max_pool_sweep_keeps_nan(stride: int) -> None:
    """A NaN inside a window makes its maximum NaN wherever it sits among the taps (first, in
    the middle, last, on the border), as ``np.maximum`` does; a window of -inf gives -inf."""
    x = np.zeros((1, 2, 7, 8), np.float32)
    x[0, 0, 0, 0] = x[0, 0, 3, 4] = x[0, 0, 6, 7] = np.nan
    x[0, 1] = -np.inf
    x[0, 1, 2, 2] = np.nan
    fn = lambda t: pool.max_pool(t, 3, stride, 1)  # noqa: E731
    ref = run_inference_pool(fn, x, False)
    got = run_inference_pool(fn, x, True)
    assert np.isnan(ref).sum() > 4 and np.isneginf(ref).any()
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize(
    ("shape", "kernel", "stride", "pads", "ceil_mode"),
    [
        ((1, 64, 111, 111), 3, 2, 0, True),  # SqueezeNet's
        ((1, 8, 28, 28), 3, 1, 1, False),  # Inception's stride-1 pools
        ((2, 3, 14, 14), 3, 2, 1, False),
        ((1, 2, 9), 3, 2, 1, True),  # one axis
    ],
)
def test_inference_pools_take_the_sweep(monkeypatch, shape, kernel, stride, pads, ceil_mode) -> None:
    """Inference max and average pools of one or two axes run the plane sweep, and it gives the
    NumPy sweep's result; three axes, a recorded pool and a kernel-off run do not take it."""
    from singa_lite.backend.cpu_kernels import pool as pool_kernels

    calls = []
    real = pool_kernels.pool_sweep
    monkeypatch.setattr(pool_kernels, "pool_sweep", lambda *a: calls.append(a) or real(*a))
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    fns = [
        lambda t: pool.max_pool(t, kernel, stride, pads, ceil_mode=ceil_mode),
        lambda t: pool.avg_pool(t, kernel, stride, pads, ceil_mode, count_include_pad=False),
    ]
    for fn in fns:
        ref = run_inference_pool(fn, x, False)
        assert not calls
        got = run_inference_pool(fn, x, True)
        assert len(calls) == 1
        calls.clear()
        assert_close(got, ref, "y")
    x3 = np.random.default_rng(3).standard_normal((1, 2, 5, 6, 7)).astype(np.float32)
    run_inference_pool(lambda t: pool.max_pool(t, 3, 2, 1), x3, True)
    with switch(True), autograd.training_mode(True):
        pool.max_pool(tensor.Tensor(device=DEV, data=x, requires_grad=True, stores_grad=True), 3, 2, 1)
    assert not calls


def test_max_pool_nan_and_padding_only_windows() -> None:
    x = np.array([[[np.nan, 1.0, 2.0, -np.inf, -np.inf, 3.0]]], np.float32)
    dy = np.arange(1, 5, dtype=np.float32)
    fn = lambda t: pool.max_pool(t, 2, 2, 1, ceil_mode=True)  # noqa: E731
    ref = run_pool(fn, x, dy, False, False)
    got = run_pool(fn, x, dy, True, False)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])


def test_pool_geometry_pads_to_three_axes() -> None:
    from singa_lite.backend.cpu_kernels import pool as pool_kernels

    geo = pool_kernels.geometry((4, 5), (2, 3), (2, 2), (2, 2), (0, 1), (1, 1))
    assert geo.tolist() == [1, 4, 5, 1, 2, 3, 1, 2, 2, 1, 2, 2, 0, 0, 1, 1, 1, 1]


def test_pool_ops_take_the_kernels() -> None:
    x = np.random.default_rng(5).standard_normal((2, 3, 6, 7)).astype(np.float32)
    with kernels(True), autograd.training_mode(True):
        op = pool.MaxPool(pool._Window(2, 3, 2, 1, 1, True, "max_pool"))
        op(tensor.Tensor(device=DEV, data=x, requires_grad=True, stores_grad=True))
    assert op.cpu is not None
    with kernels(False), autograd.training_mode(True):
        op = pool.MaxPool(pool._Window(2, 3, 2, 1, 1, True, "max_pool"))
        op(tensor.Tensor(device=DEV, data=x, requires_grad=True, stores_grad=True))
    assert op.cpu is None


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("shape", "kernel"),
    [
        ((4, 3, 14, 14), (2, 2)),  # LeNet's pools: output rows of 7 and 14 cells
        ((2, 3, 15, 13), (2, 2)),  # a last row and column no window covers
        ((0, 3, 8, 8), (2, 2)),  # an empty batch
        ((2, 2, 9, 10), (3, 2)),
        ((2, 3, 11), (3,)),
        ((1, 2, 4, 6, 6), (2, 3, 2)),
    ],
)
def test_max_pools_that_tile_the_input(shape, kernel, dtype, parallel) -> None:
    """Windows that tile the input (stride == kernel, no padding) take loops of their own, on
    short rows too (``ops.pool``'s own gates, not forced): the same maxima, the same first-maximum
    cells and the same gradients as the NumPy path, NaN, -inf and ties included."""
    from singa_lite.backend.cpu_kernels import pool as pool_kernels

    rng = np.random.default_rng(len(shape) + kernel[0])
    x = np.round(rng.standard_normal(shape) * 2).astype(dtype)  # many ties
    flat = x.reshape(-1)
    if flat.size:
        flat[:: max(1, flat.size // 7)] = np.nan
        flat[3 :: max(1, flat.size // 5)] = -np.inf
    fn = lambda t: pool.max_pool(t, kernel, kernel, 0)  # noqa: E731
    out = pool.pool_output_size(shape[2:], kernel, kernel, 0)
    geo = pool_kernels.geometry(shape[2:], out, kernel, kernel, (0,) * len(kernel), (1,) * len(kernel))
    assert pool_kernels._tiles(geo)
    dy = rng.standard_normal((*shape[:2], *out)).astype(dtype)
    with switch(False):
        ref = run_pool(fn, x, dy, False, False)
    with switch(True, parallel):
        got_y, got_dx = run_pool_ungated(fn, x, dy)
    np.testing.assert_array_equal(got_y, ref[0])
    np.testing.assert_array_equal(got_dx, ref[1])


def run_pool_ungated(fn: Any, x: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A recorded pool and its gradient with the kernels as ``ops.pool`` chooses them; checks
    that they were chosen."""
    with autograd.training_mode(True):
        t = tensor.Tensor(device=DEV, data=x, requires_grad=True, stores_grad=True)
        y = fn(t)
        assert y.creator.cpu is not None, "the pool did not take the compiled kernels"
        grads = autograd.gradients(y, tensor.Tensor(device=DEV, data=dy))
        return tensor.to_numpy(y), tensor.to_numpy(grads[t])


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 2, 8, 8), (2, 3, 7, 11), (1, 1, 2, 2), (0, 2, 4, 4)])
def test_the_2x2_max_pool_loop_is_the_tiles_loop(shape, dtype, parallel, monkeypatch) -> None:
    """2x2 windows at stride 2 take a loop of their own (the taps written out): the same maxima
    and the same first-maximum taps as the general tiles loop, bit for bit, with NaN, -inf and
    ties; and ``max_pool_forward`` takes it."""
    from singa_lite.backend.cpu_kernels import pool as pool_kernels

    rng = np.random.default_rng(shape[-1])
    x = np.round(rng.standard_normal(shape) * 2).astype(dtype)  # many ties
    flat = x.reshape(-1)
    flat[:: max(1, flat.size // 5)] = np.nan
    flat[2 :: max(1, flat.size // 4)] = -np.inf
    out = (shape[2] // 2, shape[3] // 2)
    geo = pool_kernels.geometry(shape[2:], out, (2, 2), (2, 2), (0, 0), (1, 1))
    work = x.size * (10**7 if parallel else 1)  # the parallel form from PARALLEL_MIN up
    results = []
    for loop in (pool_kernels._max_2x2_forward, pool_kernels._max_tiles_forward):
        y, arg = np.empty((*shape[:2], *out), dtype), np.empty((*shape[:2], *out), np.int8)
        loop(work, x.reshape(-1), y.reshape(-1), arg.reshape(-1), geo, True)
        results.append((y, arg))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    calls = []
    original = pool_kernels._max_2x2_forward
    monkeypatch.setattr(pool_kernels, "_max_2x2_forward", lambda *a: calls.append(1) or original(*a))
    y, arg = pool_kernels.max_pool_forward(x, out, geo, np.int8)
    assert (len(calls) == 1 or x.size == 0) and arg is not None  # an empty batch runs no loop
    np.testing.assert_array_equal(y, results[1][0])

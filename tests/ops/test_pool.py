"""Pooling: loop-over-windows references, gradient checks, ties, geometry and bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import check_forward, check_grad, to_tensors

from singa_lite import autograd, tensor
from singa_lite.errors import ArgumentError, DTypeError, ShapeError
from singa_lite.ops.pool import pool_output_size

DTYPES = [np.float16, np.float32, np.float64]


def ref_out(size, k, s, pb, pe, d, ceil_mode):
    """PyTorch's output-size rule, written out independently of the op."""
    span = size + pb + pe - d * (k - 1) - 1
    out = (int(np.ceil(span / s)) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + pb:
        out -= 1
    return out


def ref_pool2d(x, kind, k, s, pads, d=(1, 1), ceil_mode=False, count_include_pad=True):
    """Window-by-window pooling of (N, C, H, W); ``pads`` is (top, bottom, left, right)."""
    n, c, h, w = x.shape
    pt, pbot, pl, pr = pads
    oh = ref_out(h, k[0], s[0], pt, pbot, d[0], ceil_mode)
    ow = ref_out(w, k[1], s[1], pl, pr, d[1], ceil_mode)
    y = np.zeros((n, c, oh, ow), x.dtype)
    for i, j in itertools.product(range(oh), range(ow)):
        rows = [i * s[0] - pt + a * d[0] for a in range(k[0])]
        cols = [j * s[1] - pl + b * d[1] for b in range(k[1])]
        vr = [r for r in rows if 0 <= r < h]
        vc = [q for q in cols if 0 <= q < w]
        win = x[:, :, vr][:, :, :, vc].astype(np.float64)
        if kind == "max":
            y[:, :, i, j] = win.max(axis=(2, 3))
            continue
        if count_include_pad:  # cells inside the padded input (not past the end padding)
            cr = sum(1 for r in rows if r < h + pbot)
            cc = sum(1 for q in cols if q < w + pr)
            count = cr * cc
        else:
            count = len(vr) * len(vc)
        y[:, :, i, j] = win.sum(axis=(2, 3)) / count
    return y


@st.composite
def pool_cases(draw, max_dilation=2):
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, max_dilation)), draw(st.integers(1, max_dilation))
    pads = tuple(draw(st.integers(0, (kk - 1) * dd)) for kk, dd in ((kh, dh), (kh, dh), (kw, dw), (kw, dw)))
    ceil_mode = draw(st.booleans())
    h = draw(st.integers(dh * (kh - 1) + 1, 7))
    w = draw(st.integers(dw * (kw - 1) + 1, 7))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    dtype = draw(st.sampled_from(DTYPES))
    x = np.random.default_rng(draw(st.integers(0, 99))).standard_normal((n, c, h, w)).astype(dtype)
    return x, (kh, kw), (sh, sw), pads, (dh, dw), ceil_mode


@given(case=pool_cases())
def test_max_pool2d_forward(dev, case):
    x, k, s, pads, d, ceil_mode = case
    check_forward(
        lambda t: autograd.max_pool2d(t, k, s, pads, d, ceil_mode),
        lambda a: ref_pool2d(a, "max", k, s, pads, d, ceil_mode),
        [x],
        dev,
    )


@given(case=pool_cases(max_dilation=1), count_include_pad=st.booleans())
def test_avg_pool2d_forward(dev, case, count_include_pad):
    x, k, s, pads, _, ceil_mode = case
    check_forward(
        lambda t: autograd.avg_pool2d(t, k, s, pads, ceil_mode, count_include_pad),
        lambda a: ref_pool2d(
            a, "avg", k, s, pads, ceil_mode=ceil_mode, count_include_pad=count_include_pad
        ).astype(a.dtype),
        [x],
        dev,
    )


@pytest.mark.parametrize("shape, stride", [((2, 3, 7, 7), 1), ((1, 5, 4, 6), (3, 2)), ((1, 2, 1, 1), 1)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_one_window_per_plane(dev, shape, stride, dtype):
    """A window as large as the plane (a classifier's last pool) is a reduction: the same
    values as the reference, in inference and recorded."""
    x = np.random.default_rng(11).standard_normal(shape).astype(dtype)
    k = shape[2:]
    s = (stride, stride) if isinstance(stride, int) else stride
    for kind, fn in (("max", autograd.max_pool2d), ("avg", autograd.avg_pool2d)):
        check_forward(
            lambda t, fn=fn: fn(t, k, stride),
            lambda a, kind=kind: ref_pool2d(a, kind, k, s, (0, 0, 0, 0)).astype(a.dtype),
            [x],
            dev,
        )
    if dtype == np.float64:
        check_grad(lambda t: autograd.avg_pool2d(t, k, stride), [x], dev)


@pytest.mark.parametrize(
    "k, s, pads, d, ceil_mode",
    [
        ((2, 2), None, 0, 1, False),
        ((3, 2), (1, 2), (1, 0, 0, 1), 1, True),
        ((2, 2), (1, 1), 1, (2, 1), False),
    ],
)
def test_max_pool2d_grad(dev, k, s, pads, d, ceil_mode):
    x = np.random.default_rng(1).permutation(30).reshape(1, 2, 3, 5) * 0.1  # distinct: no ties
    check_grad(lambda t: autograd.max_pool2d(t, k, s, pads, d, ceil_mode), [x], dev)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize(
    "k, s, pads, ceil_mode", [((2, 2), None, 0, False), ((3, 2), (2, 1), (1, 1, 0, 1), True)]
)
def test_avg_pool2d_grad(dev, k, s, pads, ceil_mode, count_include_pad):
    x = np.random.default_rng(2).standard_normal((1, 2, 4, 5))
    check_grad(lambda t: autograd.avg_pool2d(t, k, s, pads, ceil_mode, count_include_pad), [x], dev)


@pytest.mark.parametrize("stride", [2, 1])
def test_max_pool_ties_route_to_first(dev, stride):
    x = np.ones((1, 1, 4, 4))
    with autograd_training():
        (t,) = to_tensors([x], dev)
        y = autograd.max_pool2d(t, 2, stride)
        g = tensor.to_numpy(autograd.gradients(y, dev.xp.ones(y.shape))[t])
    want = np.zeros((4, 4))
    for i, j in itertools.product(range(y.shape[2]), range(y.shape[3])):
        want[i * stride, j * stride] += 1  # the window's top-left cell
    np.testing.assert_array_equal(g[0, 0], want)


def test_pool1d(dev):
    x = np.random.default_rng(3).standard_normal((2, 3, 9)).astype(np.float32)
    x4 = x[:, :, None, :]
    check_forward(
        lambda t: autograd.max_pool1d(t, 3, 2, (1, 2), ceil_mode=True),
        lambda a: ref_pool2d(x4, "max", (1, 3), (1, 2), (0, 0, 1, 2), ceil_mode=True)[:, :, 0],
        [x],
        dev,
    )
    check_forward(
        lambda t: autograd.avg_pool1d(t, 4, 3, 1, True, False),
        lambda a: ref_pool2d(
            x4, "avg", (1, 4), (1, 3), (0, 0, 1, 1), ceil_mode=True, count_include_pad=False
        )[:, :, 0].astype(np.float32),
        [x],
        dev,
    )
    check_grad(lambda t: autograd.max_pool1d(t, 2), [np.arange(8.0).reshape(1, 2, 4)], dev)
    check_grad(lambda t: autograd.avg_pool1d(t, 3, 1, 1), [np.arange(8.0).reshape(1, 2, 4)], dev)


def test_pool3d_generic(dev):
    x = np.random.default_rng(4).standard_normal((1, 2, 4, 4, 4))
    want = x.reshape(1, 2, 2, 2, 2, 2, 2, 2).max(axis=(3, 5, 7))
    check_forward(lambda t: autograd.max_pool(t, 2), lambda a: want, [x], dev)
    check_forward(
        lambda t: autograd.avg_pool(t, 2),
        lambda a: x.reshape(1, 2, 2, 2, 2, 2, 2, 2).mean(axis=(3, 5, 7)),
        [x],
        dev,
    )
    check_grad(
        lambda t: autograd.max_pool(t, 2),
        [np.random.default_rng(5).permutation(16).reshape(1, 2, 2, 2, 2) * 1.0],
        dev,
    )


@given(
    shape=st.sampled_from([(2, 3, 4), (1, 2, 3, 5), (2, 1, 2, 2, 3)]),
    dtype=st.sampled_from(DTYPES),
)
def test_global_pools(dev, shape, dtype):
    x = np.random.default_rng(6).standard_normal(shape).astype(dtype)
    axes = tuple(range(2, len(shape)))
    check_forward(
        autograd.global_average_pool, lambda a: a.mean(axis=axes, keepdims=True, dtype=a.dtype), [x], dev
    )
    check_forward(autograd.global_max_pool, lambda a: a.max(axis=axes, keepdims=True), [x], dev)


def test_global_pools_grad(dev):
    x = np.random.default_rng(7).permutation(24).reshape(2, 3, 2, 2) * 0.5
    check_grad(autograd.global_average_pool, [x], dev)
    check_grad(autograd.global_max_pool, [x], dev)


def test_float32_stays_float32(dev):
    x = np.random.default_rng(8).standard_normal((2, 2, 5, 5)).astype(np.float32)
    with autograd_training():
        (t,) = to_tensors([x], dev)
        for fn in (
            lambda a: autograd.max_pool2d(a, 3, 2, 1, ceil_mode=True),
            lambda a: autograd.avg_pool2d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False),
            autograd.global_average_pool,
        ):
            y = fn(t)
            g = autograd.gradients(y, dev.xp.ones(y.shape, np.float32))[t]
            assert y.dtype == np.float32 and g.dtype == np.float32


def _pool_run(fn, x, dev, seed):
    """``fn``'s output and input gradient for a random output gradient, recorded."""
    with autograd_training():
        (t,) = to_tensors([x], dev)
        y = fn(t)
        dy = np.random.default_rng(seed).standard_normal(y.shape).astype(x.dtype)
        g = autograd.gradients(y, dev.xp.asarray(dy))[t]
    return tensor.to_numpy(y), tensor.to_numpy(g)


def _kernels_vs_tap_loops(fn, x, dev, monkeypatch, exact=True):
    """Run ``fn`` with the pool kernels (CuPy) and without: the same bits either way, except
    for a max pool's forward (``exact=False``): there the same values, as the sign of a zero
    maximum and the bits of a NaN one are the ``maximum`` function's own choice."""
    from singa_lite.backend import cupy_kernels

    calls = []
    for name in ("max_pool_forward", "max_pool_backward", "avg_pool_forward", "avg_pool_backward"):
        orig = getattr(cupy_kernels, name)
        monkeypatch.setattr(cupy_kernels, name, lambda *a, orig=orig: calls.append(1) or orig(*a))
    runs = []
    for switch in ("1", "0"):
        monkeypatch.setenv("SINGA_LITE_RAW_KERNELS", switch)
        runs.append(_pool_run(fn, x, dev, seed=0))
    for i, (kernel, plain) in enumerate(zip(*runs)):
        assert kernel.dtype == plain.dtype == x.dtype
        np.testing.assert_array_equal(kernel, plain)
        if exact or i == 1:  # gradients always
            assert kernel.tobytes() == plain.tobytes(), f"kernel {kernel} != tap loop {plain}"
    uses_kernels = dev.is_gpu() and x.dtype in (np.float32, np.float64)
    assert len(calls) == (2 if uses_kernels else 0)  # forward and backward


@given(case=pool_cases(), count_include_pad=st.booleans(), ties=st.booleans())
def test_pool_kernels_equal_the_tap_loops(dev, monkeypatch, case, count_include_pad, ties):
    x, k, s, pads, d, ceil_mode = case
    if ties:  # many equal values (zeros of both signs): the argmax is the first in tap order
        x = np.round(x).astype(x.dtype)
    max_pool = lambda t: autograd.max_pool2d(t, k, s, pads, d, ceil_mode)  # noqa: E731
    avg_pool = lambda t: autograd.avg_pool2d(t, k, s, pads, ceil_mode, count_include_pad, d)  # noqa: E731
    _kernels_vs_tap_loops(max_pool, x, dev, monkeypatch, exact=False)
    _kernels_vs_tap_loops(avg_pool, x, dev, monkeypatch)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pool_kernels_other_ranks_and_special_values(dev, monkeypatch, dtype):
    rng = np.random.default_rng(9)
    x1 = rng.standard_normal((2, 3, 11)).astype(dtype)
    max1 = lambda t: autograd.max_pool1d(t, 3, 2, (1, 2), 2, True)  # noqa: E731
    _kernels_vs_tap_loops(max1, x1, dev, monkeypatch, exact=False)
    _kernels_vs_tap_loops(lambda t: autograd.avg_pool1d(t, 4, 3, 1, True, False), x1, dev, monkeypatch)
    x3 = rng.integers(-2, 3, (1, 2, 7, 6, 6)).astype(dtype)
    x3[0, 0, 1, 2, 3] = np.nan
    x3[0, 1, :3] = -np.inf
    x3[0, 1, 4, 4, 4] = -0.0
    max3 = lambda t: autograd.max_pool(t, 3, 2, 1, 1, True)  # noqa: E731
    _kernels_vs_tap_loops(max3, x3, dev, monkeypatch, exact=False)
    big = lambda t: autograd.max_pool(t, (6, 5, 5), 1, (1, 1, 2, 2, 0, 1))  # noqa: E731 (150 taps: int32 argmax)
    _kernels_vs_tap_loops(big, x3, dev, monkeypatch, exact=False)
    x3 = np.nan_to_num(x3, nan=0.5, neginf=-3.0)
    avg3 = lambda t: autograd.avg_pool(t, (2, 3, 2), (1, 2, 2), 1, True, False)  # noqa: E731
    _kernels_vs_tap_loops(avg3, x3, dev, monkeypatch)
    # inference: the kernel without an argmax gives the separable sweep's maxima
    monkeypatch.setenv("SINGA_LITE_RAW_KERNELS", "1")
    (t,) = to_tensors([x3], dev)
    want = tensor.to_numpy(autograd.max_pool(t, 3, 2, 1, 1, True))
    monkeypatch.setenv("SINGA_LITE_RAW_KERNELS", "0")
    np.testing.assert_array_equal(want, tensor.to_numpy(autograd.max_pool(t, 3, 2, 1, 1, True)))


def test_pool_output_size():
    assert pool_output_size((28, 28), 2) == (14, 14)
    assert pool_output_size(5, 2, ceil_mode=True) == (3,)
    assert pool_output_size(5, 2, stride=2, padding=1, ceil_mode=True) == (3,)  # 4th window dropped
    assert pool_output_size((7, 9), (3, 2), (2, 3), (1, 0, 0, 1), (1, 2)) == (3, 3)
    for size, k, s, p, ceil_mode in itertools.product(
        range(3, 9), (1, 2, 3), (1, 2, 3), (0, 1), (False, True)
    ):
        if p < k:
            assert pool_output_size(size, k, s, p, 1, ceil_mode) == (ref_out(size, k, s, p, p, 1, ceil_mode),)


def test_bad_input(dev):
    x4 = tensor.Tensor(data=np.zeros((1, 1, 4, 4), np.float32), device=dev, requires_grad=False)
    with pytest.raises(ShapeError, match="max_pool2d"):
        autograd.max_pool2d(
            tensor.Tensor(data=np.zeros((4, 4), np.float32), device=dev, requires_grad=False), 2
        )
    with pytest.raises(ShapeError, match="does not fit"):
        autograd.max_pool2d(x4, 5)
    # Bad geometry is a bad argument, whatever the input: ArgumentError, naming the argument.
    with pytest.raises(ArgumentError, match="avg_pool2d: padding must be smaller than the kernel span"):
        autograd.avg_pool2d(x4, 2, padding=2)
    with pytest.raises(ArgumentError, match="padding"):
        autograd.max_pool2d(x4, 2, padding=(1, 1, 1))
    with pytest.raises(ArgumentError, match="max_pool2d: stride must be an integer >= 1"):
        autograd.max_pool2d(x4, 2, stride=0)
    with pytest.raises(ArgumentError, match="kernel_size"):
        autograd.max_pool2d(x4, (2, 2, 2))
    with pytest.raises(DTypeError, match="avg_pool2d"):
        autograd.avg_pool2d(
            tensor.Tensor(data=np.zeros((1, 1, 4, 4), np.int32), device=dev, requires_grad=False), 2
        )
    with pytest.raises(ShapeError, match="GlobalAveragePool"):
        autograd.global_average_pool(
            tensor.Tensor(data=np.zeros((2, 3), np.float32), device=dev, requires_grad=False)
        )


def test_max_pool_int_input(dev):
    x = np.arange(16, dtype=np.int32).reshape(1, 1, 4, 4)
    check_forward(
        lambda t: autograd.max_pool2d(t, 2, padding=1),
        lambda a: ref_pool2d(a, "max", (2, 2), (2, 2), (1,) * 4),
        [x],
        dev,
    )


class autograd_training:  # noqa: N801 (a context manager used like a function)
    def __enter__(self) -> None:
        autograd.training = True

    def __exit__(self, *exc: object) -> None:
        autograd.training = False

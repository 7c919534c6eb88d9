"""conv2d, conv_transpose2d, conv1d: a NumPy reference over kernel taps, float64 gradient
checks, empty batches, bad input, and the geometry helpers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import check_forward, check_grad, to_tensors

from singa_lite import autograd, tensor
from singa_lite.backend import cupy_kernels
from singa_lite.errors import DTypeError, ShapeError
from singa_lite.ops import conv as conv_module
from singa_lite.ops import conv_blocks
from singa_lite.ops.conv import conv_output_size, same_padding


def _rand(shape: tuple, dtype: type = np.float64, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def _pads4(padding) -> tuple:
    if isinstance(padding, int):
        return (padding,) * 4
    return (padding[0], padding[0], padding[1], padding[1]) if len(padding) == 2 else tuple(padding)


def _pair(v) -> tuple:
    return (v, v) if isinstance(v, int) else tuple(v)


def conv2d_ref(x, w, b=None, stride=(1, 1), padding=0, dilation=(1, 1), group=1):
    """Direct convolution: a loop over kernel taps, in float64."""
    stride, dilation = _pair(stride), _pair(dilation)
    t, bo, l, r = _pads4(padding)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, bo), (l, r)))
    N, _, Hp, Wp = xp.shape
    O, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    Ho, Wo = (Hp - dh * (kh - 1) - 1) // sh + 1, (Wp - dw * (kw - 1) - 1) // sw + 1
    og = O // group
    y = np.zeros((N, O, Ho, Wo))
    for g in range(group):
        xg, wg = xp[:, g * cg : (g + 1) * cg], w[g * og : (g + 1) * og].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                tap = xg[
                    :, :, i * dh : i * dh + sh * (Ho - 1) + 1 : sh, j * dw : j * dw + sw * (Wo - 1) + 1 : sw
                ]
                y[:, g * og : (g + 1) * og] += np.einsum("nchw,oc->nohw", tap, wg[:, :, i, j])
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y.astype(x.dtype)


def conv_transpose2d_ref(
    x, w, b=None, stride=(1, 1), padding=0, output_padding=(0, 0), dilation=(1, 1), group=1
):
    """Scatter each input pixel times the kernel into the output: a loop over kernel taps."""
    stride, dilation, output_padding = _pair(stride), _pair(dilation), _pair(output_padding)
    t, bo, l, r = _pads4(padding)
    N, C, H, W = x.shape
    _, og, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    hf, wf = (
        (H - 1) * sh + dh * (kh - 1) + 1 + output_padding[0],
        (W - 1) * sw + dw * (kw - 1) + 1 + output_padding[1],
    )
    out = np.zeros((N, og * group, hf, wf))
    cg = C // group
    for g in range(group):
        xg, wg = x[:, g * cg : (g + 1) * cg].astype(np.float64), w[g * cg : (g + 1) * cg].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum("nchw,co->nohw", xg, wg[:, :, i, j])
                out[
                    :,
                    g * og : (g + 1) * og,
                    i * dh : i * dh + sh * (H - 1) + 1 : sh,
                    j * dw : j * dw + sw * (W - 1) + 1 : sw,
                ] += contrib
    y = out[:, :, t : hf - bo, l : wf - r]
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return y.astype(x.dtype)


TOL = {np.float16: 3e-2, np.float32: 1e-4, np.float64: 1e-10}


@st.composite
def conv_cases(draw):
    group = draw(st.sampled_from([1, 1, 2, 3]))
    cg, og = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = draw(
        st.one_of(
            st.integers(0, 2),
            st.tuples(st.integers(0, 2), st.integers(0, 2)),
            st.tuples(*[st.integers(0, 2)] * 4),
        )
    )
    t, bo, l, r = _pads4(padding)
    H = draw(st.integers(max(1, dilation[0] * (kh - 1) + 1 - t - bo), 7))
    W = draw(st.integers(max(1, dilation[1] * (kw - 1) + 1 - l - r), 7))
    N = draw(st.integers(0, 3))
    return dict(
        x=(N, cg * group, H, W),
        w=(og * group, cg, kh, kw),
        stride=stride,
        padding=padding,
        dilation=dilation,
        group=group,
    )


@given(case=conv_cases(), dtype=st.sampled_from([np.float16, np.float32, np.float64]), bias=st.booleans())
def test_conv2d_forward(dev, case, dtype, bias):
    geo = {k: case[k] for k in ("stride", "padding", "dilation", "group")}
    arrays = [_rand(case["x"], dtype), _rand(case["w"], dtype, seed=1)]
    if bias:
        arrays.append(_rand((case["w"][0],), dtype, seed=2))
    tol = TOL[dtype]
    check_forward(
        lambda *ts: autograd.conv2d(*ts, **geo), lambda *a: conv2d_ref(*a, **geo), arrays, dev, tol, tol
    )


@pytest.mark.parametrize(
    "geo",
    [
        dict(stride=1, padding=1, dilation=1, group=1),
        dict(stride=(2, 1), padding=(1, 0, 2, 1), dilation=1, group=1),
        dict(stride=1, padding=(1, 2), dilation=2, group=2),
        dict(stride=2, padding=1, dilation=1, group=4),  # depthwise
    ],
)
def test_conv2d_grad(dev, geo):
    x, w, b = _rand((2, 4, 5, 4)), _rand((4, 4 // geo["group"], 3, 2), seed=1), _rand((4,), seed=2)
    check_grad(lambda *ts: autograd.conv2d(*ts, **geo), [x, w, b], dev)


@pytest.mark.parametrize("ring_bytes", [0, 1 << 20])  # one block buffer / two in turn
@pytest.mark.parametrize("keep_bytes", [0, 1 << 20])  # backward re-makes / keeps the matrix
@pytest.mark.parametrize("block_bytes", [300, 1500, 4000])  # bands of rows; groups of images
@pytest.mark.parametrize(
    "geo, channels",
    [
        (dict(stride=1, padding=1), (4, 4)),  # dx as a convolution of dy
        (dict(stride=1, padding=(2, 0, 1, 1), dilation=(1, 2)), (2, 4)),  # the same, O = 2C
        (dict(stride=1, padding=1), (2, 6)),  # O > 2C: col2im
        (dict(stride=1, padding=3), (2, 2)),  # padding wider than the kernel: col2im
        (dict(stride=(2, 1), padding=1, group=2), (4, 4)),  # strided: col2im
    ],
)
def test_conv2d_blocked_im2col(dev, monkeypatch, ring_bytes, keep_bytes, block_bytes, geo, channels):
    # The host im2col runs in L2-sized blocks; small blocks exercise every path on tiny inputs.
    monkeypatch.setattr(conv_blocks, "_RING_BYTES", ring_bytes)
    monkeypatch.setattr(conv_blocks, "_BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(conv_blocks, "_BLOCK_ROWS", 1)
    monkeypatch.setattr(conv_blocks, "_KEEP_BYTES", keep_bytes)
    c, o = channels
    x, w, b = _rand((3, c, 4, 3)), _rand((o, c // geo.get("group", 1), 3, 2), seed=1), _rand((o,), seed=2)
    check_forward(lambda *ts: autograd.conv2d(*ts, **geo), lambda *a: conv2d_ref(*a, **geo), [x, w, b], dev)
    check_grad(lambda *ts: autograd.conv2d(*ts, **geo), [x, w, b], dev)


def test_depthwise_multiplier_grad(dev):
    # group == C with 2 output channels per input channel
    x, w = _rand((2, 2, 4, 4)), _rand((4, 1, 3, 3), seed=1)
    geo = dict(stride=1, padding=1, group=2)
    check_forward(lambda *ts: autograd.conv2d(*ts, **geo), lambda *a: conv2d_ref(*a, **geo), [x, w], dev)
    check_grad(lambda *ts: autograd.conv2d(*ts, **geo), [x, w], dev)


def test_conv2d_weight_grad_only(dev):
    # x without requires_grad: backward must skip dx and still give dW and db
    x, w, b = _rand((2, 3, 5, 5)), _rand((2, 3, 3, 3), seed=1), _rand((2,), seed=2)
    check_grad(lambda *ts: autograd.conv2d(*ts, padding=1), [x, w, b], dev, wrt=[1, 2])


def test_conv2d_empty_batch(dev):
    x, w, b = (
        tensor.Tensor(data=a, device=dev, requires_grad=False)
        for a in (_rand((0, 3, 5, 5), np.float32), _rand((4, 3, 3, 3), np.float32), _rand((4,), np.float32))
    )
    autograd.training = True
    for t in (x, w, b):
        t.requires_grad = t.stores_grad = True
    y = autograd.conv2d(x, w, b, padding=1)
    assert y.shape == (0, 4, 5, 5)
    grads = autograd.gradients(y)
    assert grads[w].shape == (4, 3, 3, 3) and not np.any(tensor.to_numpy(grads[w]))


@pytest.mark.parametrize(
    ("xs", "ws", "kw", "msg"),
    [
        ((2, 3, 5, 5), (4, 2, 3, 3), {}, "channels"),  # channel mismatch
        ((2, 3, 5, 5), (4, 1, 3, 3), {"group": 2}, "group"),  # group does not divide C
        ((2, 4, 5, 5), (3, 2, 3, 3), {"group": 2}, "group"),  # group does not divide O
        ((2, 3, 2, 2), (4, 3, 3, 3), {}, "kernel"),  # kernel larger than the input
        ((2, 3, 2, 2), (4, 3, 3, 3), {"dilation": 2, "padding": 1}, "kernel"),
        ((3, 5, 5), (4, 3, 3, 3), {}, "4-D|\\(N, C, H, W\\)"),
    ],
)
def test_conv2d_bad_input(dev, xs, ws, kw, msg):
    x, w = (
        tensor.Tensor(data=_rand(xs), device=dev, requires_grad=False),
        tensor.Tensor(data=_rand(ws), device=dev, requires_grad=False),
    )
    with pytest.raises(ShapeError, match=f"Conv2d.*({msg})"):
        autograd.conv2d(x, w, **kw)


def test_conv2d_bad_bias_and_dtype(dev):
    x, w = (
        tensor.Tensor(data=_rand((1, 2, 4, 4)), device=dev, requires_grad=False),
        tensor.Tensor(data=_rand((3, 2, 3, 3)), device=dev, requires_grad=False),
    )
    with pytest.raises(ShapeError, match="bias"):
        autograd.conv2d(x, w, tensor.Tensor(data=_rand((2,)), device=dev, requires_grad=False))
    with pytest.raises(DTypeError, match="Conv2d"):
        autograd.conv2d(
            x, tensor.Tensor(data=_rand((3, 2, 3, 3), np.float32), device=dev, requires_grad=False)
        )
    with pytest.raises(ValueError, match="stride"):
        autograd.conv2d(x, w, stride=0)
    with pytest.raises(ValueError, match="padding"):
        autograd.conv2d(x, w, padding=(1, 2, 3))


@st.composite
def transpose_cases(draw):
    group = draw(st.sampled_from([1, 1, 2]))
    cg, og = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    out_pad = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
    H, W = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    full = [
        (n - 1) * s + d * (kk - 1) + 1 + op for n, s, d, kk, op in zip((H, W), stride, dilation, k, out_pad)
    ]
    t, bo = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    l, r = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    if full[0] - t - bo < 1 or full[1] - l - r < 1:
        t = bo = l = r = 0
    return dict(
        x=(draw(st.integers(0, 2)), cg * group, H, W),
        w=(cg * group, og, *k),
        stride=stride,
        padding=(t, bo, l, r),
        output_padding=out_pad,
        dilation=dilation,
        group=group,
    )


@given(
    case=transpose_cases(), dtype=st.sampled_from([np.float16, np.float32, np.float64]), bias=st.booleans()
)
def test_conv_transpose2d_forward(dev, case, dtype, bias):
    geo = {k: case[k] for k in ("stride", "padding", "output_padding", "dilation", "group")}
    arrays = [_rand(case["x"], dtype), _rand(case["w"], dtype, seed=1)]
    if bias:
        arrays.append(_rand((case["w"][1] * case["group"],), dtype, seed=2))
    tol = TOL[dtype]
    fn = lambda *ts: autograd.conv_transpose2d(*ts, **geo)  # noqa: E731
    check_forward(fn, lambda *a: conv_transpose2d_ref(*a, **geo), arrays, dev, tol, tol)


@pytest.mark.parametrize(
    "geo",
    [
        dict(stride=2, padding=1, output_padding=1, dilation=1, group=1),
        dict(stride=(1, 2), padding=(0, 1, 1, 0), output_padding=0, dilation=2, group=2),
    ],
)
def test_conv_transpose2d_grad(dev, geo):
    # W (C_in, C_out/group, kh, kw): 3 output channels per group
    x, w, b = _rand((2, 2, 3, 3)), _rand((2, 3, 2, 3), seed=1), _rand((3 * geo["group"],), seed=2)
    check_grad(lambda *ts: autograd.conv_transpose2d(*ts, **geo), [x, w, b], dev)


def test_conv_transpose2d_bad_input(dev):
    x = tensor.Tensor(data=_rand((1, 3, 4, 4)), device=dev, requires_grad=False)
    with pytest.raises(ShapeError, match="ConvTranspose2d"):
        autograd.conv_transpose2d(x, tensor.Tensor(data=_rand((2, 2, 3, 3)), device=dev, requires_grad=False))
    with pytest.raises(ShapeError, match="ConvTranspose2d"):
        autograd.conv_transpose2d(
            x, tensor.Tensor(data=_rand((3, 2, 1, 1)), device=dev, requires_grad=False), padding=3
        )
    with pytest.raises(ValueError, match="output_padding"):
        autograd.conv_transpose2d(
            x,
            tensor.Tensor(data=_rand((3, 2, 3, 3)), device=dev, requires_grad=False),
            stride=2,
            output_padding=2,
        )


@given(
    n=st.integers(0, 2),
    length=st.integers(3, 8),
    k=st.integers(1, 3),
    stride=st.integers(1, 2),
    padding=st.one_of(st.integers(0, 2), st.tuples(st.integers(0, 2), st.integers(0, 2))),
    group=st.sampled_from([1, 2]),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_conv1d_forward(dev, n, length, k, stride, padding, group, dtype):
    x, w, b = (
        _rand((n, 2, length), dtype),
        _rand((4, 2 // group, k), dtype, seed=1),
        _rand((4,), dtype, seed=2),
    )
    pl, pr = (padding, padding) if isinstance(padding, int) else padding

    def ref(x, w, b):
        return conv2d_ref(x[:, :, None], w[:, :, None], b, (1, stride), (0, 0, pl, pr), group=group)[:, :, 0]

    tol = TOL[dtype]
    check_forward(
        lambda *ts: autograd.conv1d(*ts, stride=stride, padding=padding, group=group),
        ref,
        [x, w, b],
        dev,
        tol,
        tol,
    )


def test_conv1d_grad(dev):
    x, w, b = _rand((2, 2, 6)), _rand((3, 2, 3), seed=1), _rand((3,), seed=2)
    check_grad(lambda *ts: autograd.conv1d(*ts, stride=2, padding=(1, 2), dilation=1), [x, w, b], dev)


def test_conv_output_size():
    assert conv_output_size(28, 5, padding=2) == 28
    assert conv_output_size(32, 3, stride=2, padding=1) == 16
    assert conv_output_size(7, 3, dilation=2) == 3
    assert conv_output_size(5, 2, stride=2, padding=(0, 1)) == 3
    assert conv_output_size(5, 2, stride=2) == 2
    assert conv_output_size(5, 2, stride=2, ceil_mode=True) == 3
    # ceil mode never starts a window inside the end padding
    assert conv_output_size(4, 2, stride=2, padding=1, ceil_mode=True) == 3


@pytest.mark.parametrize(
    ("in_hw", "k", "s", "d", "mode", "want"),
    [
        ((28, 28), 5, 1, 1, "SAME_UPPER", (2, 2, 2, 2)),
        ((5, 5), 2, 1, 1, "SAME_UPPER", (0, 1, 0, 1)),
        ((5, 5), 2, 1, 1, "SAME_LOWER", (1, 0, 1, 0)),
        ((7, 8), 3, 2, 1, "same_upper", (1, 1, 0, 1)),
        ((6, 6), (3, 1), 1, (2, 1), "SAME_LOWER", (2, 2, 0, 0)),
    ],
)
def test_same_padding(in_hw, k, s, d, mode, want):
    pads = same_padding(in_hw, k, s, d, mode)
    assert pads == want
    kk, ss, dd = (x if isinstance(x, tuple) else (x, x) for x in (k, s, d))
    for n, kn, sn, dn, pb, pe in zip(in_hw, kk, ss, dd, pads[::2], pads[1::2]):
        assert conv_output_size(n, kn, sn, (pb, pe), dn) == -(-n // sn)
    with pytest.raises(ValueError, match="SAME"):
        same_padding(in_hw, k, s, d, "VALID")


# -- the CuPy backend's im2col/col2im kernels ------------------------------------------------------
# On a GPU, SINGA_LITE_RAW_KERNELS=1 makes the column matrix in one launch (conv.cu) and col2im a
# gather; these tests run each op with the switch on and off. On the CPU both runs are the plain path.
def _grads_run(fn, arrays, dev, monkeypatch, switch):
    """``fn``'s output and every input's gradient for a fixed random output gradient."""
    monkeypatch.setenv(cupy_kernels.ENV, switch)
    autograd.training = True
    ts = to_tensors(arrays, dev)
    y = fn(*ts)
    dy = np.random.default_rng(7).standard_normal(y.shape).astype(y.dtype)
    grads = autograd.gradients(y, dev.xp.asarray(dy))
    return [tensor.to_numpy(y)] + [tensor.to_numpy(grads[t]) for t in ts]


def kernels_vs_plain(fn, ref, arrays, dev, monkeypatch, columns=True):
    """``fn`` forward and backward with the conv kernels on and off: both forwards match
    ``ref``, the two runs agree (up to the GEMMs' rounding, which may take other paths when
    the plain column matrix is a strided view), and only a GPU launches kernels, where the op
    makes ``columns`` (a depthwise conv makes none)."""
    calls = []
    for name in ("im2col", "col2im"):
        orig = getattr(cupy_kernels, name)
        monkeypatch.setattr(cupy_kernels, name, lambda *a, orig=orig, **k: calls.append(1) or orig(*a, **k))
    on = _grads_run(fn, arrays, dev, monkeypatch, "1")
    launched = len(calls)
    off = _grads_run(fn, arrays, dev, monkeypatch, "0")
    assert len(calls) == launched  # switched off: the plain path
    dtype = arrays[0].dtype
    assert (launched > 0) == (columns and dev.is_gpu() and dtype in (np.float32, np.float64))
    tol = TOL[dtype.type]
    want = ref(*arrays)
    for kernel, plain in zip(on, off):
        assert kernel.dtype == plain.dtype == dtype and kernel.shape == plain.shape
        np.testing.assert_allclose(kernel, plain, rtol=tol, atol=tol)
    for y in (on[0], off[0]):
        np.testing.assert_allclose(y.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@given(case=conv_cases(), dtype=st.sampled_from([np.float32, np.float64]), bias=st.booleans())
def test_conv2d_kernels_match_the_plain_path(dev, monkeypatch, case, dtype, bias):
    geo = {k: case[k] for k in ("stride", "padding", "dilation", "group")}
    arrays = [_rand(case["x"], dtype), _rand(case["w"], dtype, seed=1)]
    if bias:
        arrays.append(_rand((case["w"][0],), dtype, seed=2))
    fn = lambda *ts: autograd.conv2d(*ts, **geo)  # noqa: E731
    depthwise = case["w"][1] == 1 and case["group"] > 1
    # A 1x1 kernel at stride 1, unpadded, one group is a plain product: no column matrix.
    pads = case["padding"] if isinstance(case["padding"], (tuple, list)) else (case["padding"],)
    pointwise = (
        case["w"][2:] == (1, 1) and tuple(case["stride"]) == (1, 1) and not any(pads) and case["group"] == 1
    )
    columns = not depthwise and not pointwise
    kernels_vs_plain(fn, lambda *a: conv2d_ref(*a, **geo), arrays, dev, monkeypatch, columns)


@given(case=transpose_cases(), dtype=st.sampled_from([np.float32, np.float64]))
def test_conv_transpose2d_kernels_match_the_plain_path(dev, monkeypatch, case, dtype):
    geo = {k: case[k] for k in ("stride", "padding", "output_padding", "dilation", "group")}
    arrays = [_rand(case["x"], dtype), _rand(case["w"], dtype, seed=1)]
    fn = lambda *ts: autograd.conv_transpose2d(*ts, **geo)  # noqa: E731
    kernels_vs_plain(fn, lambda *a: conv_transpose2d_ref(*a, **geo), arrays, dev, monkeypatch)


@pytest.mark.parametrize(
    "geo, channels",
    [
        (dict(stride=1, padding=1), (4, 4)),  # dx as a convolution of dy: im2col of dy
        (dict(stride=1, padding=(1, 0, 2, 1), dilation=(2, 1)), (2, 6)),  # O > 2C: col2im
        (dict(stride=(2, 3), padding=(0, 1, 2, 0), group=2), (4, 4)),  # strided: col2im
    ],
)
def test_conv2d_kernel_grad(dev, monkeypatch, geo, channels):
    monkeypatch.setenv(cupy_kernels.ENV, "1")
    c, o = channels
    x, w, b = _rand((2, c, 5, 4)), _rand((o, c // geo.get("group", 1), 3, 2), seed=1), _rand((o,), seed=2)
    check_grad(lambda *ts: autograd.conv2d(*ts, **geo), [x, w, b], dev)
    x, w = _rand((2, c, 3, 2)), _rand((c, 2, 2, 3), seed=1)
    check_grad(lambda *ts: autograd.conv_transpose2d(*ts, stride=2, padding=(1, 0, 0, 1)), [x, w], dev)
    x, w = _rand((2, c, 6)), _rand((3, c, 2), seed=1)
    check_grad(lambda *ts: autograd.conv1d(*ts, stride=2, padding=(2, 1), dilation=2), [x, w], dev)


@pytest.fixture
def gpu(dev):
    """The device, on a GPU only: the kernels themselves run on CuPy alone."""
    if not dev.is_gpu():
        pytest.skip("the conv kernels run on CuPy only; the CPU runs the plain path")
    return dev


@given(case=conv_cases(), dtype=st.sampled_from([np.float32, np.float64]))
def test_im2col_col2im_kernels_bitwise(gpu, monkeypatch, case, dtype):
    # im2col is a copy; col2im adds in the plain path's tap order: the same bits.
    monkeypatch.setenv(cupy_kernels.ENV, "1")
    xp, to_numpy = gpu.xp, gpu.backend.to_numpy
    x = _rand(case["x"], dtype)
    x[..., ::2] *= -0.0  # signed zeros survive the copy
    x = xp.asarray(x)
    N, C, H, W = x.shape
    _, _, kh, kw = case["w"]
    stride, dilation, g = _pair(case["stride"]), _pair(case["dilation"]), case["group"]
    t, bo, l, r = pads = _pads4(case["padding"])
    out = tuple(
        conv_output_size(n, k, s, p, d)
        for n, k, s, p, d in zip((H, W), (kh, kw), stride, ((t, bo), (l, r)), dilation)
    )
    col = cupy_kernels.im2col(xp, x, out, (kh, kw), stride, (t, l), dilation, g)
    plain = conv_blocks.im2col(xp, conv_blocks.pad_nhwc(xp, x, pads), (kh, kw), stride, dilation, out, g)
    assert (
        col.shape == plain.shape
        and to_numpy(col).tobytes() == to_numpy(xp.ascontiguousarray(plain)).tobytes()
    )
    taps = xp.asarray(_rand((g, kh * kw * C // g, N * out[0] * out[1]), dtype, seed=3))
    dx = cupy_kernels.col2im(xp, taps, x.shape, out, (kh, kw), stride, (t, l), dilation)
    padded = (N, C, H + t + bo, W + l + r)
    full = conv_blocks.col2im(xp, taps.transpose(0, 2, 1), padded, (kh, kw), stride, dilation, out)
    want = xp.ascontiguousarray(full[:, :, t : t + H, l : l + W])
    assert dx.shape == want.shape and to_numpy(dx).tobytes() == to_numpy(want).tobytes()


# -- the kernels' launches and arguments, against a recording stand-in for CuPy ------------------------
@pytest.fixture
def fake_cupy(monkeypatch):
    from test_kernel_compile import FakeCupy

    monkeypatch.setattr(cupy_kernels, "_modules", {})
    monkeypatch.setattr(cupy_kernels, "_functions", {})
    monkeypatch.setenv(cupy_kernels.ENV, "1")
    fake = FakeCupy()
    fake.empty, fake.empty_like = np.zeros, np.zeros_like  # the launches write nothing
    return fake


def test_conv_kernel_arguments(fake_cupy):
    x = np.zeros((2, 6, 5, 7), np.float32)
    geometry = ((3, 3), (3, 2), (2, 2), (1, 0), (1, 2), 2)  # out, kernel, stride, begin, dilation, group
    col = cupy_kernels.im2col(fake_cupy, x, *geometry)
    assert col.shape == (2, 2 * 9, 3 * 6) and col.dtype == np.float32
    name, grid, block, args = fake_cupy.launches[-1]
    assert name == "singa_im2col<float>" and grid == (3,) and block == (256,)  # one thread an entry
    assert args[0] is x and args[1] is col and args[2:6] == (0, 2, 3, 2)
    assert args[6:] == cupy_kernels.pool_geometry((5, 7), *geometry[:-1])
    assert all(type(a) is np.int32 for a in args[2:])
    col = cupy_kernels.im2col(fake_cupy, x.astype(np.float64), *geometry, layout="columns")
    name, _, _, args = fake_cupy.launches[-1]
    assert name == "singa_im2col<double>" and col.shape == (2, 3 * 6, 2 * 9) and args[2] == 3
    taps = np.zeros((2, 3 * 6, 2 * 9), np.float32)
    dx = cupy_kernels.col2im(fake_cupy, taps, x.shape, *geometry[:-1])
    name, grid, _, args = fake_cupy.launches[-1]
    assert name == "singa_col2im<float>" and dx.shape == x.shape and args[0] is taps and args[1] is dx
    assert args[2:6] == (0, 2, 3, 2) and grid == (-(-x.size // 256),)
    cupy_kernels.col2im(
        fake_cupy, taps.transpose(0, 2, 1)[:, :, ::2], (1, 6, 3, 3), (1, 1), (1, 1), (1, 1), (0, 0), (1, 1)
    )
    assert fake_cupy.launches[-1][3][0].flags.c_contiguous  # a strided column matrix is copied first
    cupy_kernels.col2im(fake_cupy, taps, x.shape, *geometry[:-1], layout="columns")
    assert fake_cupy.launches[-1][3][2] == cupy_kernels.COLS_CHANNEL_FIRST
    assert cupy_kernels.usable_32bit(fake_cupy, x, sizes=(2**31 - 1,))
    assert not cupy_kernels.usable_32bit(fake_cupy, x, sizes=(2**31,))  # too big for the kernels' indices


@pytest.mark.parametrize(
    "stride, out_channels, keep_bytes, want",
    [
        (2, 4, 1 << 20, ["singa_im2col", "singa_col2im"]),  # the matrix kept; dx gathered
        (2, 4, 0, ["singa_im2col", "singa_im2col", "singa_col2im"]),  # made again for dW
        (1, 4, 1 << 20, ["singa_im2col", "singa_im2col"]),  # dx as a convolution: im2col of dy
    ],
)
def test_conv2d_kernel_launches(fake_cupy, monkeypatch, stride, out_channels, keep_bytes, want):
    monkeypatch.setattr(conv_blocks, "_KEEP_BYTES", keep_bytes)
    op = conv_module.Conv2d(stride, 1)
    op.xp, op.needs_grad = fake_cupy, (True, True)
    x, w = np.ones((2, 3, 6, 6), np.float32), np.ones((out_channels, 3, 3, 3), np.float32)
    y = op.forward(x, w)
    dx, dW = op.backward(np.ones(y.shape, np.float32))
    assert dx.shape == x.shape and dW.shape == w.shape
    assert [name.split("<")[0] for name, *_ in fake_cupy.launches] == want
    monkeypatch.setenv(cupy_kernels.ENV, "0")
    op.forward(x, w)
    assert len(fake_cupy.launches) == len(want)  # switched off

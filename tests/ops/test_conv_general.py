"""conv_nd and conv_transpose_nd (3-D and other ranks): a direct NumPy reference over output
positions, PyTorch's conv3d/conv_transpose3d where installed, float64 gradient checks, and bad
input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from opcheck import check_forward, check_grad, to_tensors

from singa_lite import autograd, ops, tensor
from singa_lite.backend import cupy_kernels
from singa_lite.errors import DTypeError, ShapeError
from singa_lite.ops import conv_columns


def _rand(shape: tuple, dtype: type = np.float64, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def conv_ref(x, w, b, stride, pads, dilation, group):
    """Direct convolution, one output position at a time, in float64."""
    n = x.ndim - 2
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *pads])
    N, _, *size = xp.shape
    O, cg, *kernel = w.shape
    out = [(m - d * (k - 1) - 1) // s + 1 for m, k, s, d in zip(size, kernel, stride, dilation)]
    y = np.zeros((N, O, *out))
    og = O // group
    for pos in itertools.product(*(range(o) for o in out)):
        idx = tuple(
            slice(p * s, p * s + d * (k - 1) + 1, d) for p, s, d, k in zip(pos, stride, dilation, kernel)
        )
        for o in range(O):
            g = o // og
            win = xp[(slice(None), slice(g * cg, (g + 1) * cg), *idx)]
            y[(slice(None), o, *pos)] = (win * w[o]).reshape(N, -1).sum(axis=1)
    if b is not None:
        y += b.reshape(1, O, *([1] * n))
    return y.astype(x.dtype)


def conv_transpose_ref(x, w, b, stride, pads, out_pad, dilation, group):
    """Transposed convolution as its definition: each input cell scatters ``x * W``."""
    N, C, *size = x.shape
    _, og, *kernel = w.shape
    full = [
        (m - 1) * s + d * (k - 1) + 1 + op for m, k, s, d, op in zip(size, kernel, stride, dilation, out_pad)
    ]
    y = np.zeros((N, og * group, *full))
    cg = C // group
    for pos in itertools.product(*(range(m) for m in size)):
        idx = tuple(
            slice(p * s, p * s + d * (k - 1) + 1, d) for p, s, d, k in zip(pos, stride, dilation, kernel)
        )
        for c in range(C):
            g = c // cg
            v = x[(slice(None), c, *pos)].astype(np.float64)
            y[(slice(None), slice(g * og, (g + 1) * og), *idx)] += (
                v.reshape(N, *([1] * (len(size) + 1))) * w[c]
            )
    y = y[(slice(None), slice(None), *(slice(pb, f - pe) for f, (pb, pe) in zip(full, pads)))]
    if b is not None:
        y = y + b.reshape(1, -1, *([1] * len(size)))
    return y.astype(x.dtype)


geometry = st.fixed_dictionaries(
    {
        "n": st.sampled_from([1, 3]),
        "N": st.integers(1, 2),
        "group": st.sampled_from([1, 2]),
        "cg": st.integers(1, 2),
        "og": st.integers(1, 2),
        "k": st.integers(1, 3),
        "s": st.integers(1, 2),
        "d": st.integers(1, 2),
        "pb": st.integers(0, 2),
        "pe": st.integers(0, 1),
        "size": st.integers(3, 5),
        "bias": st.booleans(),
    }
)


def _case(g: dict, dtype: type) -> tuple:
    n = g["n"]
    x = _rand((g["N"], g["group"] * g["cg"], *[g["size"]] * n), dtype, 1)
    w = _rand((g["group"] * g["og"], g["cg"], *[g["k"]] * n), dtype, 2)
    b = _rand((g["group"] * g["og"],), dtype, 3) if g["bias"] else None
    pads = [(min(g["pb"], g["k"] - 1), g["pe"])] * n
    return x, w, b, (g["s"],) * n, pads, (g["d"],) * n


@settings(max_examples=30, deadline=None)
@given(g=geometry, dtype=st.sampled_from([np.float32, np.float64]))
def test_conv_nd_forward(dev, g, dtype) -> None:
    x, w, b, stride, pads, dilation = _case(g, dtype)
    arrays = [x, w] + ([b] if b is not None else [])
    check_forward(
        lambda *t: ops.conv_nd(t[0], t[1], t[2] if len(t) > 2 else None, stride, pads, dilation, g["group"]),
        lambda *a: conv_ref(a[0], a[1], a[2] if len(a) > 2 else None, stride, pads, dilation, g["group"]),
        arrays,
        dev,
    )


@settings(max_examples=30, deadline=None)
@given(g=geometry, dtype=st.sampled_from([np.float32, np.float64]), op=st.integers(0, 1))
def test_conv_transpose_nd_forward(dev, g, dtype, op) -> None:
    x, w, b, stride, pads, dilation = _case(g, dtype)
    w = _rand((x.shape[1], g["og"], *w.shape[2:]), dtype, 2)
    b = _rand((g["og"] * g["group"],), dtype, 3) if b is not None else None
    out_pad = (min(op, max(g["s"], g["d"]) - 1),) * g["n"]
    arrays = [x, w] + ([b] if b is not None else [])
    check_forward(
        lambda *t: ops.conv_transpose_nd(
            t[0], t[1], t[2] if len(t) > 2 else None, stride, pads, out_pad, dilation, g["group"]
        ),
        lambda *a: conv_transpose_ref(
            a[0], a[1], a[2] if len(a) > 2 else None, stride, pads, out_pad, dilation, g["group"]
        ),
        arrays,
        dev,
    )


@pytest.mark.parametrize("bias", [False, True])
def test_conv_nd_grad(dev, bias) -> None:
    x, w, b = _rand((2, 4, 4, 5, 3), seed=1), _rand((2, 2, 2, 3, 2), seed=2), _rand((2,), seed=3)
    arrays = [x, w, b] if bias else [x, w]
    check_grad(
        lambda *t: ops.conv_nd(
            t[0], t[1], t[2] if bias else None, (2, 1, 1), [(1, 0), (1, 1), (0, 1)], (1, 2, 1), 2
        ),
        arrays,
        dev,
    )


@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose_nd_grad(dev, bias) -> None:
    x, w, b = _rand((2, 4, 3, 2, 3), seed=1), _rand((4, 1, 2, 3, 2), seed=2), _rand((2,), seed=3)
    arrays = [x, w, b] if bias else [x, w]
    check_grad(
        lambda *t: ops.conv_transpose_nd(
            t[0], t[1], t[2] if bias else None, (2, 1, 2), [(1, 0), (0, 1), (1, 1)], (1, 0, 1), (1, 2, 1), 2
        ),
        arrays,
        dev,
    )


def test_against_torch_3d(dev) -> None:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    x, w, b = (
        _rand((2, 4, 6, 5, 7), np.float32, 1),
        _rand((6, 2, 3, 2, 3), np.float32, 2),
        _rand((6,), np.float32, 3),
    )
    tx, tw, tb = (torch.from_numpy(a) for a in (x, w, b))
    want = torch.nn.functional.conv3d(tx, tw, tb, (2, 1, 2), (1, 0, 1), (1, 2, 1), 2).numpy()
    check_forward(
        lambda *t: ops.conv_nd(*t, (2, 1, 2), (1, 0, 1), (1, 2, 1), 2), lambda *a: want, [x, w, b], dev
    )
    wt = _rand((4, 3, 3, 2, 3), np.float32, 4)
    bt = b[:6]
    want_t = torch.nn.functional.conv_transpose3d(
        tx, torch.from_numpy(wt), torch.from_numpy(bt), (2, 1, 2), (1, 0, 1), (1, 0, 0), 2, (1, 2, 1)
    ).numpy()
    check_forward(
        lambda *t: ops.conv_transpose_nd(*t, (2, 1, 2), (1, 0, 1), (1, 0, 0), (1, 2, 1), 2),
        lambda *a: want_t,
        [x, wt, bt],
        dev,
        rtol=1e-4,
        atol=1e-5,
    )


def test_bad_input(dev) -> None:
    from singa_lite import tensor

    def t(*shape, dtype=np.float32):
        return tensor.Tensor(data=np.zeros(shape, dtype), device=dev, requires_grad=False)

    with pytest.raises(ShapeError, match="channels"):
        ops.conv_nd(t(1, 3, 4, 4, 4), t(2, 2, 1, 1, 1))
    with pytest.raises(ShapeError, match="exceeds"):
        ops.conv_nd(t(1, 2, 2, 2, 2), t(2, 2, 3, 3, 3))
    with pytest.raises(ShapeError, match="spatial"):
        ops.conv_nd(t(1, 2, 4, 4, 4), t(2, 2, 1, 1))
    with pytest.raises(DTypeError):
        ops.conv_nd(t(1, 2, 4, 4, 4), t(2, 2, 1, 1, 1, dtype=np.float64))
    with pytest.raises(DTypeError):
        ops.conv_nd(t(1, 2, 4, 4, 4, dtype=np.int32), t(2, 2, 1, 1, 1, dtype=np.int32))
    with pytest.raises(ShapeError, match="bias"):
        ops.conv_nd(t(1, 2, 4, 4, 4), t(2, 2, 1, 1, 1), t(3))
    with pytest.raises(ValueError, match="padding"):
        ops.conv_nd(t(1, 2, 4, 4, 4), t(2, 2, 1, 1, 1), padding=[1, 2])
    with pytest.raises(ValueError, match="stride"):
        ops.conv_nd(t(1, 2, 4, 4, 4), t(2, 2, 1, 1, 1), stride=0)
    with pytest.raises(ValueError, match="output_padding"):
        ops.conv_transpose_nd(t(1, 2, 4, 4, 4), t(2, 2, 1, 1, 1), stride=2, output_padding=2)
    with pytest.raises(ShapeError, match="empty output"):
        ops.conv_transpose_nd(t(1, 2, 1, 1, 1), t(2, 2, 1, 1, 1), padding=1)


@pytest.mark.parametrize(
    "op, attrs, w_shape",
    [
        ("Conv", {"strides": [2, 1, 1], "pads": [1, 0, 1, 0, 1, 1], "dilations": [1, 2, 1]}, (6, 2, 3, 2, 3)),
        ("Conv", {"auto_pad": "SAME_UPPER", "strides": [2, 2, 1], "group": 2}, (4, 1, 3, 3, 2)),
        (
            "ConvTranspose",
            {"strides": [2, 1, 2], "pads": [1, 0, 0, 0, 1, 1], "output_padding": [1, 0, 1]},
            (2, 3, 2, 3, 2),
        ),
        ("ConvTranspose", {"strides": [2, 2, 1], "output_shape": [9, 11, 6], "group": 2}, (2, 2, 3, 3, 2)),
    ],
)
def test_onnx_3d_against_onnxruntime(op, attrs, w_shape) -> None:
    """3-D Conv / ConvTranspose nodes through the importer match onnxruntime."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    from onnx import TensorProto, helper, numpy_helper

    from singa_lite import sonnx, tensor

    x = _rand((2, 2, 4, 5, 6), np.float32, 1)
    W = _rand(w_shape, np.float32, 2)
    B = _rand((w_shape[0] if op == "Conv" else w_shape[1] * attrs.get("group", 1),), np.float32, 3)
    node = helper.make_node(op, ["x", "W", "B"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "conv3d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c", "d", "e"])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    got = tensor.to_numpy(sonnx.prepare(model).run([x])[0])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_more_bad_input(dev) -> None:
    from singa_lite import tensor

    def t(*shape, dtype=np.float32):
        return tensor.Tensor(data=np.zeros(shape, dtype), device=dev, requires_grad=False)

    with pytest.raises(ShapeError, match="spatial"):
        ops.conv_nd(t(1, 2, 4, 4, 4), t(2))  # a 1-D weight
    with pytest.raises(ShapeError, match="spatial"):
        ops.conv_nd(t(4), t(2, 2, 1))
    with pytest.raises(ShapeError, match="spatial"):
        ops.conv_transpose_nd(t(2, 4), t(4, 2, 1))
    with pytest.raises(ShapeError, match="empty spatial"):
        ops.conv_transpose_nd(t(1, 2, 0, 4, 4), t(2, 3, 1, 1, 1))
    with pytest.raises(DTypeError, match="float16"):
        ops.conv_nd(t(1, 2, 4, 4, 4), t(2, 2, 1, 1, 1), t(2, dtype=np.float16))
    y = ops.conv_nd(t(1, 2, 4, 4, 4), t(2, 2, 3, 3, 3), None, np.int64(2), np.int32(1))  # NumPy ints
    assert y.shape == (1, 2, 2, 2, 2)


def test_onnx_3d_conv_transpose_refuses_short_attributes() -> None:
    from onnx import TensorProto, helper, numpy_helper

    from singa_lite import sonnx
    from singa_lite.errors import OnnxError

    W = numpy_helper.from_array(np.zeros((2, 2, 2, 2, 2), np.float32), "W")
    node = helper.make_node("ConvTranspose", ["x", "W"], ["y"], strides=[2, 2])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, 3, 3, 3))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c", "d", "e"])],
        [W],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OnnxError, match="strides must have 3 values"):
        sonnx.prepare(model).run([np.zeros((1, 2, 3, 3, 3), np.float32)])


# -- the CuPy backend's im2col/col2im kernels (up to 3 spatial axes) ---------------------------------
def _grads_run(fn, arrays, dev, monkeypatch, switch):
    monkeypatch.setenv(cupy_kernels.ENV, switch)
    autograd.training = True
    ts = to_tensors(arrays, dev)
    y = fn(*ts)
    dy = np.random.default_rng(7).standard_normal(y.shape).astype(y.dtype)
    grads = autograd.gradients(y, dev.xp.asarray(dy))
    return [tensor.to_numpy(y)] + [tensor.to_numpy(grads[t]) for t in ts]


@settings(max_examples=30, deadline=None)
@given(
    g=geometry,
    n=st.integers(1, 4),
    dtype=st.sampled_from([np.float32, np.float64]),
    transpose=st.booleans(),
)
def test_kernels_match_the_plain_path(dev, monkeypatch, g, n, dtype, transpose) -> None:
    """Forward and backward with the kernels on and off (SINGA_LITE_RAW_KERNELS): both match
    the reference, and each other up to the GEMMs' rounding. Four spatial axes: the plain path."""
    g = {**g, "n": n, "size": min(g["size"], 4 if n == 4 else 5)}
    x, w, b, stride, pads, dilation = _case(g, dtype)
    assume(transpose or g["size"] + sum(pads[0]) >= g["d"] * (g["k"] - 1) + 1)  # the kernel fits
    out_pad = (max(g["s"], g["d"]) - 1,) * n
    if transpose:
        w = _rand((x.shape[1], g["og"], *w.shape[2:]), dtype, 2)
        b = _rand((g["og"] * g["group"],), dtype, 3)
        want = conv_transpose_ref(x, w, b, stride, pads, out_pad, dilation, g["group"])
    else:
        want = conv_ref(x, w, b, stride, pads, dilation, g["group"])

    def fn(x, w, b=None):
        if transpose:
            return ops.conv_transpose_nd(x, w, b, stride, pads, out_pad, dilation, g["group"])
        return ops.conv_nd(x, w, b, stride, pads, dilation, g["group"])

    arrays = [x, w] if b is None else [x, w, b]
    calls = []
    for name in ("im2col", "col2im"):
        orig = getattr(cupy_kernels, name)
        monkeypatch.setattr(cupy_kernels, name, lambda *a, orig=orig, **k: calls.append(1) or orig(*a, **k))
    on = _grads_run(fn, arrays, dev, monkeypatch, "1")
    launched = len(calls)
    off = _grads_run(fn, arrays, dev, monkeypatch, "0")
    # In 1-D and 2-D, a depthwise conv (one input channel a group) works by taps, and a 1x1
    # kernel at stride 1, unpadded, one group is a plain product: neither makes columns.
    plain = g["k"] == 1 and g["s"] == 1 and not any(map(any, pads)) and g["group"] == 1
    no_columns = not transpose and n <= 2 and (plain or (g["cg"] == 1 and g["group"] > 1))
    assert len(calls) == launched and (launched > 0) == (dev.is_gpu() and n <= 3 and not no_columns)
    tol = 1e-5 if dtype == np.float32 else 1e-10
    for kernel, plain in zip(on, off):
        assert kernel.dtype == plain.dtype == dtype and kernel.shape == plain.shape
        np.testing.assert_allclose(kernel, plain, rtol=tol, atol=tol)
    np.testing.assert_allclose(on[0], want, rtol=tol, atol=tol)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_kernel_grad(dev, monkeypatch, n) -> None:
    monkeypatch.setenv(cupy_kernels.ENV, "1")
    size, k = (5, 4, 3)[:n], (3, 2, 2)[:n]
    stride, dilation = (2, 1, 2)[:n], (1, 2, 1)[:n]
    pads = [(1, 0), (0, 1), (1, 1)][:n]
    x, w, b = _rand((2, 4, *size), seed=1), _rand((2, 2, *k), seed=2), _rand((2,), seed=3)
    check_grad(lambda *t: ops.conv_nd(*t, stride, pads, dilation, 2), [x, w, b], dev)
    w = _rand((4, 1, *k), seed=2)
    check_grad(lambda *t: ops.conv_transpose_nd(*t, stride, pads, (1, 0, 1)[:n], dilation, 2), [x, w, b], dev)


@settings(max_examples=30, deadline=None)
@given(g=geometry, n=st.integers(1, 3), dtype=st.sampled_from([np.float32, np.float64]))
def test_columns_kernels_bitwise(dev, monkeypatch, g, n, dtype) -> None:
    """The "columns" layout: im2col is a copy of the strided windows, col2im adds in the tap
    order of ``_scatter_taps``: the plain path's bits (on a GPU; the kernels need CuPy)."""
    if not dev.is_gpu():
        pytest.skip("the conv kernels run on CuPy only; the CPU runs the plain path")
    monkeypatch.setenv(cupy_kernels.ENV, "1")
    xp, to_numpy = dev.xp, dev.backend.to_numpy
    x, w, _, stride, pads, dilation = _case({**g, "n": n}, dtype)
    assume(g["size"] + sum(pads[0]) >= g["d"] * (g["k"] - 1) + 1)
    x[..., ::2] *= -0.0
    x = xp.asarray(x)
    group, kernel, begin = g["group"], w.shape[2:], tuple(p for p, _ in pads)
    out = tuple(
        (m + pb + pe - d * (k - 1) - 1) // s + 1
        for m, k, s, d, (pb, pe) in zip(x.shape[2:], kernel, stride, dilation, pads)
    )
    col = cupy_kernels.im2col(xp, x, out, kernel, stride, begin, dilation, group, layout="columns")
    win = conv_columns._windows(xp, conv_columns._pad(xp, x, pads), kernel, stride, dilation, out, group)
    plain = xp.ascontiguousarray(win).reshape(col.shape)
    assert to_numpy(col).tobytes() == to_numpy(plain).tobytes()
    taps = xp.asarray(_rand(col.shape, dtype, 4))
    dx = cupy_kernels.col2im(xp, taps, x.shape, out, kernel, stride, begin, dilation, layout="columns")
    padded = xp.zeros((*x.shape[:2], *(m + pb + pe for m, (pb, pe) in zip(x.shape[2:], pads))), dtype)
    conv_columns._scatter_taps(
        padded, taps.reshape(x.shape[1], *kernel, x.shape[0], *out), kernel, stride, dilation, out
    )
    inner = tuple(slice(pb, pb + m) for (pb, _), m in zip(pads, x.shape[2:]))
    want = xp.ascontiguousarray(padded[(slice(None), slice(None), *inner)])
    assert to_numpy(dx).tobytes() == to_numpy(want).tobytes()

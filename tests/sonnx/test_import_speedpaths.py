"""Inference fast paths of ``sonnx.prepare``: the batch-1 channels-first conv and the folding of
BatchNormalization (and per-channel Mul/Add) chains, checked against the general conv path and
against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa_lite import autograd, tensor
from singa_lite.backend import onednn
from singa_lite.ops import conv as conv_mod
from singa_lite.ops import conv_infer
from singa_lite.ops import pool as pool_mod
from singa_lite.ops.conv import Conv2d
from singa_lite.sonnx import prepare

# (C, O, H, W, kernel, stride, padding (t, b, l, r), dilation, group)
CASES = [
    (3, 5, 7, 9, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (4, 6, 5, 5, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),  # 1x1: no im2col
    (4, 6, 5, 5, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 2),  # grouped 1x1
    (6, 4, 11, 8, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1),  # strided 1x1
    (2, 3, 13, 10, (5, 3), (2, 3), (2, 1, 0, 2), (1, 1), 1),  # odd sizes, asymmetric pads
    (6, 9, 9, 7, (3, 2), (1, 2), (1, 0, 1, 1), (2, 1), 3),  # dilated, grouped
    (8, 3, 7, 9, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),  # O <= C/2: kn2row
    (9, 4, 10, 7, (3, 2), (1, 1), (2, 0, 1, 1), (2, 1), 1),  # kn2row, dilated, asymmetric pads
]


def _forward(op: Conv2d, x: np.ndarray, W: np.ndarray, b: np.ndarray) -> np.ndarray:
    op.xp = np
    return op.forward(x, W, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_one_image_conv_matches_general_path(
    case: tuple, dtype: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(onednn.ENV, "0")  # the NumPy strategies (test_conv_onednn holds oneDNN to them)
    C, O, H, Wd, k, s, p, d, g = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, C, H, Wd)).astype(dtype)
    W = rng.standard_normal((O, C // g, *k)).astype(dtype)
    b = rng.standard_normal(O).astype(dtype)
    general = Conv2d(s, p, d, g)
    general.needs_grad = (True, True, True)  # as when recorded: the blocked NHWC path
    fast = Conv2d(s, p, d, g)
    y_general = _forward(general, x, W, b)
    y_fast = _forward(fast, x, W, b)
    # each took its own path: the batch-1 inference GEMM, and a recorded strategy
    assert fast.strategy == "one_image" and general.strategy in ("blocks", "pointwise")
    assert y_fast.dtype == dtype and y_fast.flags.c_contiguous
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y_fast, y_general, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_conv_with_bias_in_the_gemm_matches_general_path(case: tuple, dtype: type) -> None:
    """``conv2d_one_image`` with the bias as a weight column (``PackedConv``'s path)."""
    C, O, H, Wd, k, s, p, d, g = case
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, C, H, Wd)).astype(dtype)
    W = rng.standard_normal((O, C // g, *k)).astype(dtype)
    b = rng.standard_normal(O).astype(dtype)
    general = Conv2d(s, p, d, g)
    general.needs_grad = (True, True, True)
    Wb = conv_infer.one_image_weight(np, W, b, g)
    y = conv_infer.conv2d_one_image(np, x, W, b, Wb, s, p, d, g)
    assert y is not None and y.dtype == dtype and y.flags.c_contiguous
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, _forward(general, x, W, b), rtol=tol, atol=tol)


def test_conv_with_bias_in_the_gemm_declines_what_it_does_not_cover() -> None:
    rng = np.random.default_rng(4)
    W, b = rng.standard_normal((4, 1, 3, 3)), rng.standard_normal(4)
    Wb = conv_infer.one_image_weight(np, W, b, 4)
    x = rng.standard_normal((1, 4, 5, 5))
    assert conv_infer.conv2d_one_image(np, x, W, b, Wb, (1, 1), (1, 1, 1, 1), (1, 1), 4) is None  # depthwise
    W, b = rng.standard_normal((3, 2, 3, 3)), rng.standard_normal(3)
    Wb = conv_infer.one_image_weight(np, W, b, 1)
    x2 = rng.standard_normal((2, 2, 5, 5))
    assert conv_infer.conv2d_one_image(np, x2, W, b, Wb, (1, 1), (0, 0, 0, 0), (1, 1), 1) is None  # batch
    x1 = rng.standard_normal((1, 2, 2, 2))
    assert conv_infer.conv2d_one_image(np, x1, W, b, Wb, (1, 1), (0, 0, 0, 0), (1, 1), 1) is None  # empty


def test_kn2row_is_taken_only_for_narrow_stride_one_convs() -> None:
    W = np.zeros((3, 8, 3, 3))
    assert conv_infer._kn2row_wins(W, (1, 1), 1)
    assert not conv_infer._kn2row_wins(W, (2, 2), 1)  # strided: kn2row would compute every pixel
    assert not conv_infer._kn2row_wins(np.zeros((8, 8, 3, 3)), (1, 1), 1)  # as wide as its input
    assert not conv_infer._kn2row_wins(np.zeros((3, 8, 1, 1)), (1, 1), 1)


def test_one_image_conv_in_bands(monkeypatch: pytest.MonkeyPatch) -> None:
    """A column matrix over the band size is made a few output rows at a time."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 17, 6)).astype(np.float32)
    W = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    whole = _forward(Conv2d(1, 1), x, W, None)
    monkeypatch.setattr(conv_infer, "_BAND_BYTES", 3 * 9 * 6 * 4 * 2)  # two rows per band
    banded = _forward(Conv2d(1, 1), x, W, None)
    np.testing.assert_allclose(banded, whole, rtol=1e-6, atol=1e-6)


def test_recorded_batch_one_conv_keeps_the_backward_path() -> None:
    """While recording, batch 1 keeps the path that saves what backward needs."""
    rng = np.random.default_rng(2)
    x = tensor.Tensor(data=rng.standard_normal((1, 2, 5, 5)), requires_grad=False)
    W = tensor.Tensor(data=rng.standard_normal((3, 2, 3, 3)), requires_grad=False)
    W.requires_grad = W.stores_grad = True
    old, autograd.training = autograd.training, True
    try:
        y = conv_mod.conv2d(x, W, padding=1)
        (dW,) = autograd.gradients(y).values()
    finally:
        autograd.training = old
    assert hasattr(y.creator, "cols")
    # d(sum y)/dW[o, c, i, j] is the sum of the input under tap (i, j) of every window
    xpad = np.pad(x.numpy()[0], ((0, 0), (1, 1), (1, 1)))
    taps = np.array([[xpad[:, i : i + 5, j : j + 5].sum((1, 2)) for j in range(3)] for i in range(3)])
    np.testing.assert_allclose(dW.numpy(), np.broadcast_to(taps.transpose(2, 0, 1), (3, 2, 3, 3)))


# -- BatchNormalization folding ---------------------------------------------------------------
def _model(nodes: list, inits: dict, x_shape: list, opset: int = 13) -> object:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _bn_params(prefix: str, c: int, rng: np.random.Generator) -> dict:
    return {
        f"{prefix}s": rng.uniform(0.5, 2, c).astype(np.float32),
        f"{prefix}b": rng.standard_normal(c).astype(np.float32),
        f"{prefix}m": rng.standard_normal(c).astype(np.float32),
        f"{prefix}v": rng.uniform(0.1, 3, c).astype(np.float32),
    }


def _bn(prefix: str, x: str, y: str) -> object:
    return helper.make_node(
        "BatchNormalization", [x, f"{prefix}s", f"{prefix}b", f"{prefix}m", f"{prefix}v"], [y], epsilon=1e-3
    )


def _check_against_ort(model: object, x: np.ndarray) -> tuple:
    rep = prepare(model)
    ours = rep.run([x])[0].numpy()
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
    return rep, ours


def test_conv_bn_mul_add_folds_into_the_conv_exactly() -> None:
    rng = np.random.default_rng(3)
    inits = {
        "W": rng.standard_normal((6, 3, 3, 3)).astype(np.float32),
        "B": rng.standard_normal(6).astype(np.float32),
        "sc": rng.uniform(0.5, 2, (6, 1, 1)).astype(np.float32),
        "sh": rng.standard_normal((1, 6, 1, 1)).astype(np.float32),
        **_bn_params("bn", 6, rng),
    }
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        _bn("bn", "c", "n"),
        helper.make_node("Mul", ["n", "sc"], ["m"]),
        helper.make_node("Add", ["sh", "m"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    x = rng.standard_normal((1, 3, 9, 7)).astype(np.float32)
    rep, _ = _check_against_ort(_model(nodes, inits, [1, 3, 9, 7]), x)
    assert [n.op for n in rep.inference_program.nodes] == ["Conv"]  # BN, Mul, Add folded in, the Relu fused
    # aux_output may name a tensor folded away: it runs the graph as written
    c = rep.run([x], aux_output=["c"])[1].numpy()
    W, B = (rep.program.constants[k] for k in ("W", "B"))
    plain = conv_mod.conv2d(tensor.Tensor(data=x, requires_grad=False), W, B, padding=1).numpy()
    np.testing.assert_allclose(c, plain, rtol=1e-6, atol=1e-6)
    assert not np.allclose(c, rep.run([x], aux_output=["a"])[1].numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_packed_conv_runs_batch_one_and_batches_like_onnxruntime(dtype: type) -> None:
    """A Conv with a constant bias gets ``PackedConv`` in the inference program; a batch of two
    falls back to the general handler. Both match onnxruntime."""
    from singa_lite.sonnx.import_ops.nn import PackedConv

    rng = np.random.default_rng(5)
    ttype = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    inits = {"W": rng.standard_normal((5, 3, 3, 3)).astype(dtype), "B": rng.standard_normal(5).astype(dtype)}
    node = helper.make_node("Conv", ["x", "W", "B"], ["y"], pads=[1, 0, 1, 2], strides=[2, 1])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", ttype, ["n", 3, 7, 6])],
        [helper.make_tensor_value_info("y", ttype, ["n", 5, 4, 6])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    rep = prepare(model)
    assert isinstance(rep.inference_program.handlers[0], PackedConv)
    sess = (
        None
        if dtype == np.float64
        else ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    )
    for n in (1, 2):
        x = rng.standard_normal((n, 3, 7, 6)).astype(dtype)
        ours = rep.run([x])[0].numpy()
        with autograd.no_grad():  # the unfused program: the general Conv handler
            (general,) = rep.program.run(rep.program.feeds([x]))
        tol = 1e-12 if dtype == np.float64 else 1e-5
        np.testing.assert_allclose(ours, general.numpy(), rtol=tol, atol=tol)
        if dtype == np.float32:  # onnxruntime has no float64 Conv kernel
            assert sess is not None
            np.testing.assert_allclose(ours, sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_standalone_bn_chain_is_one_affine_node() -> None:
    """densenet's pre-activation BN -> Mul -> Add -> Relu -> Conv: the BN cannot go into a conv."""
    rng = np.random.default_rng(4)
    inits = {
        "W": rng.standard_normal((4, 5, 1, 1)).astype(np.float32),
        "sc": rng.uniform(0.5, 2, (5, 1, 1)).astype(np.float32),
        "sh": rng.standard_normal((5, 1, 1)).astype(np.float32),
        **_bn_params("bn", 5, rng),
    }
    nodes = [
        _bn("bn", "x", "n"),
        helper.make_node("Mul", ["n", "sc"], ["m"]),
        helper.make_node("Add", ["m", "sh"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "W"], ["y"]),
    ]
    x = rng.standard_normal((1, 5, 6, 6)).astype(np.float32)
    rep, _ = _check_against_ort(_model(nodes, inits, [1, 5, 6, 6]), x)
    assert [n.op for n in rep.inference_program.nodes] == ["BatchNormalization", "Relu", "Conv"]


def test_affine_node_on_a_3d_input_runs_the_original_nodes() -> None:
    rng = np.random.default_rng(5)
    inits = _bn_params("bn", 4, rng)
    nodes = [_bn("bn", "x", "y")]
    x = rng.standard_normal((2, 4, 7)).astype(np.float32)
    _check_against_ort(_model(nodes, inits, [2, 4, 7]), x)


def test_bn_with_two_readers_or_graph_output_is_not_folded() -> None:
    rng = np.random.default_rng(6)
    inits = {"W": rng.standard_normal((3, 2, 1, 1)).astype(np.float32), **_bn_params("bn", 3, rng)}
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"]),
        _bn("bn", "c", "n"),
        helper.make_node("Add", ["c", "n"], ["y"]),  # the conv output is read twice
    ]
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    rep, _ = _check_against_ort(_model(nodes, inits, [1, 2, 4, 4]), x)
    assert [n.op for n in rep.inference_program.nodes] == ["Conv", "BatchNormalization", "Add"]


# -- separable pooling (inference) ------------------------------------------------------------
# (input shape, kernel, stride, padding (begin, end per axis), dilation, ceil_mode)
POOLS = [
    ((1, 3, 9, 11), 3, 2, (0, 1, 0, 1), 1, False),  # inception's asymmetric-pad max pool
    ((2, 4, 7, 8), (3, 2), 1, (1, 1, 0, 1), 1, True),
    ((1, 2, 13, 10), (2, 3), (3, 2), 0, (2, 1), True),  # dilated, ceil mode, odd sizes
    ((1, 2, 9), 4, 3, (1, 2), 1, False),  # 1-D
    ((1, 2, 5, 6, 7), (2, 3, 1), (1, 2, 1), 0, 1, False),  # 3-D, a kernel axis of 1
    ((1, 3, 5, 6), 2, 1, (1, 1, 1, 1), 1, False),  # no tap covers every output: identity fill
    ((1, 2, 7, 7), 3, 1, (1, 1, 1, 1), 1, False),  # inception's pad-1 3x3 stride-1 pools
]


def _pool(kind: str, x: np.ndarray, case: tuple, recording: bool) -> np.ndarray:
    _, k, s, p, d, ceil = case
    old, autograd.training = autograd.training, recording
    try:
        t = tensor.Tensor(data=x, requires_grad=False)
        t.requires_grad = recording
        if kind == "max":
            return pool_mod.max_pool(t, k, s, p, d, ceil).numpy()
        return pool_mod.avg_pool(t, k, s, p, ceil, True, d).numpy()
    finally:
        autograd.training = old


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("case", POOLS)
def test_separable_pool_matches_the_tap_sweep(case: tuple, kind: str, dtype: type) -> None:
    x = np.random.default_rng(7).standard_normal(case[0]).astype(dtype)
    swept = _pool(kind, x, case, recording=True)  # the full tap sweep backward needs
    separable = _pool(kind, x, case, recording=False)
    assert separable.dtype == dtype and separable.flags.c_contiguous
    if kind == "max":
        np.testing.assert_array_equal(separable, swept)
    else:
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(separable, swept, rtol=tol, atol=tol)


# -- in-place Relu / residual Add -------------------------------------------------------------
def _residual_model(extra_out: bool = False, bias_shape: tuple = (1, 4, 5, 5)) -> object:
    rng = np.random.default_rng(8)
    inits = {
        "W1": rng.standard_normal((4, 4, 3, 3)).astype(np.float32),
        "W2": rng.standard_normal((4, 4, 1, 1)).astype(np.float32),
        "k": rng.standard_normal(bias_shape).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "W2"], ["c2"]),
        helper.make_node("Sum", ["c2", "x"], ["s"]),  # residual: c2 is fresh, x is not
        helper.make_node("Relu", ["s"], ["r2"]),
        helper.make_node("Add", ["k", "r2"], ["y"]),  # broadcast when k is smaller
    ]
    model = _model(nodes, inits, [1, 4, 5, 5])
    if extra_out:
        model.graph.output.append(helper.make_tensor_value_info("c1", TensorProto.FLOAT, []))
    return model


def _handler_kinds(rep: object) -> list:
    prog = rep.inference_program  # type: ignore[attr-defined]
    return [type(h).__name__ == "_InPlaceHandler" for h in prog.handlers]


def test_relu_and_residual_add_run_in_place() -> None:
    x = np.random.default_rng(9).standard_normal((1, 4, 5, 5)).astype(np.float32)
    x0 = x.copy()
    rep, first = _check_against_ort(_residual_model(), x)
    assert _handler_kinds(rep) == [False, True, False, True, True, True]
    np.testing.assert_array_equal(x, x0)  # the graph input (the residual) is never written
    np.testing.assert_array_equal(rep.run([x])[0].numpy(), first)  # nor are the constants


def test_in_place_skips_graph_outputs_and_falls_back_on_broadcast() -> None:
    x = np.random.default_rng(10).standard_normal((1, 4, 5, 5)).astype(np.float32)
    model = _residual_model(extra_out=True, bias_shape=(4, 1, 1))
    rep = prepare(model)
    # c1 is returned as well: the Relu reading it must not overwrite it.
    assert _handler_kinds(rep) == [False, False, False, True, True, True]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ours, ref = rep.run([x]), sess.run(None, {"x": x})
    assert (ref[1] < 0).any()
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-5, atol=1e-5 * float(np.abs(b).max()))


class _NaNEmpty:
    """NumPy, but ``empty`` fills with NaN: a read of a cell never written shows in the result."""

    def __getattr__(self, name: str) -> object:
        return getattr(np, name)

    @staticmethod
    def empty(shape: object, dtype: object = float) -> np.ndarray:
        return np.full(shape, np.nan, dtype)


@pytest.mark.parametrize(
    "shape, kernel, dilation, pads",
    [
        ((6, 1, 1), (3, 3), (1, 1), (1, 1, 1, 1)),
        ((8, 7, 6), (3, 2), (2, 1), (2, 0, 1, 1)),
        ((4, 2, 9), (1, 5), (1, 2), (0, 0, 4, 4)),
    ],
)
def test_kn2row_reads_only_written_cells(shape: tuple, kernel: tuple, dilation: tuple, pads: tuple) -> None:
    """kn2row's flat tap sums leave cells of its grid unwritten; none of them reaches the output."""
    rng = np.random.default_rng(2)
    C, H, Wd = shape
    x = rng.standard_normal((1, C, H, Wd))
    W = rng.standard_normal((2, C, *kernel))
    t, b, left, r = pads
    img = np.pad(x[0], ((0, 0), (t, b), (left, r)))
    Ho, Wo = img.shape[1] - dilation[0] * (kernel[0] - 1), img.shape[2] - dilation[1] * (kernel[1] - 1)
    out = np.empty((2, Ho, Wo))
    conv_infer._kn2row_into(_NaNEmpty(), img, W, dilation, out)
    want = torch_free_conv(img, W, dilation)
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-10)


def torch_free_conv(img: np.ndarray, W: np.ndarray, dilation: tuple) -> np.ndarray:
    """Stride-1 cross-correlation of a padded ``(C, Hp, Wp)`` image, a loop over taps."""
    O, _, kh, kw = W.shape
    (dh, dw), (_, Hp, Wp) = dilation, img.shape
    Ho, Wo = Hp - dh * (kh - 1), Wp - dw * (kw - 1)
    y = np.zeros((O, Ho, Wo))
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("oc,chw->ohw", W[:, :, i, j], img[:, i * dh : i * dh + Ho, j * dw : j * dw + Wo])
    return y

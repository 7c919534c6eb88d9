"""The extra and signal handlers beyond onnx's node cases: gradients through imported losses,
bad settings refused with ``OnnxError`` naming the node, sizes checked before allocating, and
the behaviour ONNX leaves open (shifts past the width, random generators)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from singa_lite import ops, tensor
from singa_lite.errors import OnnxError, SingaLiteError, UnsupportedOperatorError
from singa_lite.sonnx import SingaBackend
from singa_lite.sonnx.exporter import export_function

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def make(op, inputs, outputs=("y",), opset=22, initializers=(), out=None, **attrs):
    """A one-node model: ``inputs`` are (name, type, shape) triples; the outputs have the type
    and shape ``out`` (default: the first input's)."""
    node = helper.make_node(op, [i[0] for i in inputs], list(outputs), name="n0", **attrs)
    out_type, out_shape = out or inputs[0][1:]
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, t, s)
            for n, t, s in inputs
            if n not in {i.name for i in initializers}
        ],
        [helper.make_tensor_value_info(o, out_type, out_shape) for o in outputs],
        list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(model, *arrays):
    return SingaBackend.prepare(model).run(list(arrays))


def test_imported_losses_match_torch():
    """SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss with weights and an ignored label
    give torch's cross_entropy and nll_loss (the gradients are tested in tests/ops)."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 2)).astype(np.float32)
    t = np.array([[0, 3], [1, 2], [2, 2]])
    w = np.array([1.0, 2.0, 0.5, 1.5], np.float32)
    inputs = [("x", F, [3, 4, 2]), ("t", I64, [3, 2]), ("w", F, [4])]
    want = torch.nn.functional.cross_entropy(
        torch.tensor(x), torch.tensor(t), torch.tensor(w), ignore_index=2
    )
    m = make("SoftmaxCrossEntropyLoss", inputs, ("loss",), 13, out=(F, []), ignore_index=2)
    np.testing.assert_allclose(run(m, x, t, w)[0], want.numpy(), rtol=1e-5)
    want = torch.nn.functional.nll_loss(torch.tensor(x), torch.tensor(t), torch.tensor(w), reduction="none")
    m = make("NegativeLogLikelihoodLoss", inputs, ("loss",), 13, out=(F, [3, 2]), reduction="none")
    np.testing.assert_allclose(run(m, x, t, w)[0], want.numpy(), rtol=1e-6)


def _const(name, value, dtype=I64):
    return helper.make_tensor(name, dtype, [], [value])


BAD = [
    ("LpNormalization", [("x", F, [2, 3])], {"p": 3}, "p must be 1 or 2"),
    (
        "BitShift",
        [("x", TensorProto.UINT8, [2]), ("s", TensorProto.UINT8, [2])],
        {"direction": "UP"},
        "direction",
    ),
    ("SwiGLU", [("a", F, [2, 3]), ("b", F, [3])], {}, "one shape"),
    ("Det", [("x", F, [2, 3])], {}, "square"),
    ("EyeLike", [("x", F, [2, 3, 4])], {}, "2-D"),
    ("DFT", [("x", F, [2, 3])], {}, "last axis"),
    (
        "TfIdfVectorizer",
        [("x", I64, [4])],
        {
            "mode": "TF",
            "ngram_indexes": [-1],
            "ngram_counts": [0],
            "pool_int64s": [1],
            "min_gram_length": 1,
            "max_gram_length": 1,
            "max_skip_count": 0,
        },
        "ngram_indexes",
    ),
]


@pytest.mark.parametrize("op, inputs, attrs, message", BAD, ids=[b[0] for b in BAD])
def test_bad_settings_name_the_node(op, inputs, attrs, message):
    opset = 28 if op in ("SwiGLU", "BitShift") else 22
    m = make(op, inputs, opset=opset, **attrs)
    args = [np.ones(s, helper.tensor_dtype_to_np_dtype(t)) for _, t, s in inputs]
    with pytest.raises(OnnxError, match=message) as e:
        run(m, *args)
    assert "n0" in str(e.value)


@pytest.mark.parametrize(
    "op, inputs, inits",
    [
        ("HannWindow", [("size", I64, [])], [_const("size", 10**12)]),
        ("MelWeightMatrix", [("m", I64, []), ("d", I64, []), ("r", I64, []), ("lo", F, []), ("hi", F, [])],
         [_const("m", 10**6), _const("d", 10**7), _const("r", 8000), _const("lo", 0.0, F),
          _const("hi", 4000.0, F)]),
        ("DFT", [("x", F, [1, 4, 1]), ("n", I64, [])], [_const("n", 10**12)]),
    ],
    ids=["window", "mel", "dft_length"],
)  # fmt: skip
def test_sizes_are_checked_before_allocating(op, inputs, inits):
    rank = {"HannWindow": 1, "MelWeightMatrix": 2, "DFT": 3}[op]
    m = make(op, inputs, opset=20, initializers=inits, out=(F, ["d"] * rank))
    feeds = [np.ones(s, np.float32) for n, _, s in inputs if n not in {i.name for i in inits}]
    with pytest.raises(SingaLiteError, match="n0"):
        run(m, *feeds)


def test_bitshift_past_the_width():
    i32 = TensorProto.INT32
    m = make("BitShift", [("x", i32, [4]), ("s", i32, [4])], opset=28, direction="RIGHT")
    (y,) = run(m, np.array([-8, 8, -8, 8], np.int32), np.array([1, 1, 40, 40], np.int32))
    assert y.tolist() == [-4, 4, -1, 0]


def test_random_generators_keep_shape_dtype_and_range():
    m = make("RandomUniformLike", [("x", F, [50])], low=2.0, high=3.0)
    (y,) = run(m, np.zeros(50, np.float32))
    assert y.shape == (50,) and y.dtype == np.float32 and (y >= 2).all() and (y < 3).all()
    m = make("Bernoulli", [("p", F, [1000])])
    (y,) = run(m, np.full(1000, 0.25, np.float32))
    assert set(np.unique(y)) <= {0.0, 1.0} and 150 < y.sum() < 350
    node = helper.make_node("RandomNormal", [], ["y"], name="n0", shape=[3, 2], dtype=TensorProto.DOUBLE)
    g = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [3, 2])])
    (y,) = run(helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)]))
    assert y.shape == (3, 2) and y.dtype == np.float64


def test_models_pass_the_checker():
    onnx.checker.check_model(make("Celu", [("x", F, [2])], alpha=0.5))


# -- export: singa_lite -> to_onnx -> onnxruntime and back ---------------------------------------
def _f32(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)


EXPORTS = {
    "celu": (lambda x: ops.celu(x, 0.5), [_f32(2, 5)], None),
    "thresholded_relu": (lambda x: ops.thresholded_relu(x, 0.3), [_f32(2, 5)], None),
    "shrink": (lambda x: ops.shrink(x, 0.5, 0.2), [_f32(2, 5)], None),
    "mish_swish_swiglu": (lambda x: ops.swiglu(ops.mish(x), ops.swish(x, 1.5)), [_f32(2, 5)], None),
    "det": (ops.det, [_f32(2, 3, 3)], None),
    "hardmax": (lambda x: ops.mul(ops.hardmax(x, 1), x), [_f32(2, 4, 3)], None),
    "lp_normalization": (lambda x: ops.lp_normalization(x, 1, 1), [_f32(2, 5)], None),
    "mvn": (ops.mean_variance_normalization, [_f32(2, 3, 2, 2)], None),
    "lp_pool": (lambda x: ops.lp_pool(x, 2, 1, p=3.0), [_f32(1, 2, 4, 4)], None),
    "nll": (
        lambda x, t, w: ops.negative_log_likelihood_loss(x, t, w, "mean", 1),
        [_f32(3, 4, 2), np.array([[0, 1], [2, 3], [1, 3]]), np.array([1, 2, 3, 4], np.float32)],
        None,
    ),
    "cross_entropy": (
        lambda x, t: ops.softmax_cross_entropy_loss(x, t, None, "none"),
        [_f32(3, 4), np.array([0, 1, 3])],
        None,
    ),
    "dft17": (lambda x: ops.dft(x, 1, 8, False, True), [_f32(2, 6, 1)], 17),
    "dft20_inverse": (lambda x: ops.dft(x, -2, None, True), [_f32(2, 6, 2)], 20),
    "stft": (lambda x: ops.stft(x, 2, ops.hann_window(4), 4), [_f32(1, 10, 1)], 20),
    "deform_conv": (
        lambda x, w, o: ops.deform_conv2d(x, w, o, None, None, 1, 1),
        [_f32(1, 2, 4, 4), _f32(3, 2, 3, 3, seed=1), _f32(1, 18, 4, 4, seed=2)],
        None,
    ),
    "max_roi_pool": (
        lambda x: ops.max_roi_pool(x, tensor.Tensor(data=np.array([[0, 1, 1, 6, 5.0]], np.float32)), 2),
        [_f32(1, 2, 8, 8)],
        None,
    ),
    "causal_conv": (
        lambda x, w: ops.causal_conv_with_state(x, w, activation="silu"),
        [_f32(2, 3, 5), _f32(3, 1, 3, seed=1)],
        None,
    ),
    "linear_attention": (
        lambda q, k, v, g: ops.linear_attention(q, k, v, 2, 1, None, g, None, None, "gated"),
        [_f32(1, 3, 4), _f32(1, 3, 2, seed=1), _f32(1, 3, 3, seed=2), -abs(_f32(1, 3, 1, seed=3))],
        None,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_export_round_trip(name):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    fn, arrays, opset = EXPORTS[name]
    xs = [tensor.Tensor(data=a, requires_grad=False) for a in arrays]
    model = export_function(fn, xs, opset=opset)
    onnx.checker.check_model(model, full_check=True)
    out = fn(*xs)
    want = [np.asarray(t.numpy()) for t in (out if isinstance(out, tuple) else (out,))]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), arrays)})
    back = SingaBackend.prepare(model).run(arrays)
    for g, b, w in zip(got, back, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(b, w, rtol=1e-5, atol=1e-6)


def test_export_needs_the_opset():
    x = tensor.Tensor(data=_f32(2, 4, 1), requires_grad=False)
    with pytest.raises(UnsupportedOperatorError, match="opset 17"):
        export_function(lambda t: ops.dft(t, 1), [x], opset=16)


def test_random_generators_draw_anew_at_every_run():
    """A generator of constant inputs is not folded into a constant at prepare time."""
    node = helper.make_node("RandomUniform", [], ["y"], name="n0", shape=[8])
    g = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", F, [8])])
    rep = SingaBackend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)]))
    assert not np.array_equal(rep.run([])[0], rep.run([])[0])


@pytest.mark.parametrize(
    "src, dst, values",
    [
        (TensorProto.BFLOAT16, TensorProto.INT16, [1.0, -2.5]),
        (TensorProto.FLOAT8E4M3FN, TensorProto.UINT8, [1.0, -2.5]),
        (TensorProto.INT16, TensorProto.BFLOAT16, [16256, -16352]),
    ],
)
def test_bitcast_of_types_held_wider(src, dst, values):
    """A bfloat16 or float8 value, held as float32, is reinterpreted from its declared type."""
    arr = np.array(values, helper.tensor_dtype_to_np_dtype(src))
    node = helper.make_node("BitCast", ["x"], ["y"], to=dst)
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", src, [2])],
        [helper.make_tensor_value_info("y", dst, [2])],
    )
    (y,) = run(helper.make_model(g, opset_imports=[helper.make_opsetid("", 26)]), arr)
    want = arr.view(helper.tensor_dtype_to_np_dtype(dst))
    assert y.dtype == want.dtype and y.view(np.uint8).tolist() == want.view(np.uint8).tolist()


def test_global_lp_pool_and_multinomial():
    x = _f32(2, 3, 4, 5)
    m = make("GlobalLpPool", [("x", F, [2, 3, 4, 5])], out=(F, [2, 3, 1, 1]), p=3)
    want = (np.abs(x.astype(np.float64)) ** 3).sum(axis=(2, 3), keepdims=True) ** (1 / 3)
    np.testing.assert_allclose(run(m, x)[0], want, rtol=1e-5)
    logits = np.log(np.array([[0.2, 0.3, 0.5], [0.0, 0.0, 1.0]], np.float32) + 1e-30)
    m = make("Multinomial", [("x", F, [2, 3])], out=(TensorProto.INT64, [2, 4000]), sample_size=4000, dtype=7)
    (y,) = run(m, logits)
    assert y.dtype == np.int64 and y.shape == (2, 4000)
    np.testing.assert_allclose(np.bincount(y[0], minlength=3) / 4000, [0.2, 0.3, 0.5], atol=0.04)
    assert (y[1] == 2).all()

"""Quantized ONNX models: a small CNN quantized by ``onnxruntime.quantization`` (static QDQ,
static QOperator, per channel, dynamic) runs as onnxruntime runs it (integer tensors bit for
bit, float outputs within 1e-4) and fine-tunes as a ``SONNXModel``; single quantization nodes
against onnxruntime on random data; int4 and bad input."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa_lite import autograd, opt, sonnx, tensor
from singa_lite.errors import OnnxError, SingaLiteError

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
quantization = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime.quantization is missing")


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr, np.float32), name)


def float_cnn(rng: np.random.Generator) -> onnx.ModelProto:
    """Conv-Relu-MaxPool-Conv(stride 2)-Relu-Flatten-MatMul-Add, for (N, 3, 16, 16) inputs."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Flatten", ["r2"], ["f"]),
        helper.make_node("MatMul", ["f", "w3"], ["mm"]),
        helper.make_node("Add", ["mm", "b3"], ["y"]),
    ]
    inits = [
        _init("w1", rng.normal(0, 0.3, (8, 3, 3, 3))),
        _init("b1", rng.normal(0, 0.1, 8)),
        _init("w2", rng.normal(0, 0.2, (16, 8, 3, 3))),
        _init("b2", rng.normal(0, 0.1, 16)),
        _init("w3", rng.normal(0, 0.1, (256, 10))),
        _init("b3", rng.normal(0, 0.1, 10)),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class _Calibration(quantization.CalibrationDataReader):
    def __init__(self, rng: np.random.Generator) -> None:
        self.batches = iter([{"x": rng.normal(size=(4, 3, 16, 16)).astype(np.float32)} for _ in range(4)])

    def get_next(self):
        return next(self.batches, None)


QUANTIZED = {
    "static-qdq": dict(quant_format="QDQ"),
    "static-qdq-per-channel-int8": dict(quant_format="QDQ", per_channel=True, activation_type="QInt8"),
    "static-qoperator": dict(quant_format="QOperator"),
    "static-qoperator-per-channel": dict(quant_format="QOperator", per_channel=True),
    "dynamic": None,
}


@pytest.fixture(scope="module")
def quantized_models(tmp_path_factory) -> dict[str, str]:
    """The float CNN and its quantized forms, as files."""
    q = quantization
    root = tmp_path_factory.mktemp("quant")
    rng = np.random.default_rng(0)
    src = str(root / "float.onnx")
    onnx.save(float_cnn(rng), src)
    paths = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, kw in QUANTIZED.items():
            path = str(root / f"{name}.onnx")
            if kw is None:
                q.quantize_dynamic(src, path)
            else:
                kw = dict(kw)
                kw["quant_format"] = getattr(q.QuantFormat, kw["quant_format"])
                if "activation_type" in kw:
                    kw["activation_type"] = kw["weight_type"] = q.QuantType.QInt8
                if kw["quant_format"] == q.QuantFormat.QOperator:
                    # onnxruntime's QOperator Gemm/pooling/Add are com.microsoft ops: keep to ONNX's
                    kw["op_types_to_quantize"] = ["Conv", "MatMul", "MaxPool"]
                q.quantize_static(src, path, _Calibration(rng), **kw)
            paths[name] = path
    return paths


def _ort_all(path: str, x: np.ndarray) -> tuple[list[str], list[np.ndarray]]:
    """Every node output of the model, by onnxruntime (no graph rewrites: the graph as written)."""
    m = onnx.load(path)
    names = [o for n in m.graph.node for o in n.output if o]
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    declared = {v.name for v in m.graph.output}
    m.graph.output.extend(inferred[n] for n in names if n in inferred and n not in declared)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    return outs, sess.run(None, {"x": x})


@pytest.mark.parametrize("name", list(QUANTIZED))
def test_quantized_cnn_matches_onnxruntime(quantized_models, name):
    """Every tensor of the graph: integer ones bit for bit (same dtype), float ones 1e-4."""
    path = quantized_models[name]
    ops_used = {n.op_type for n in onnx.load(path).graph.node}
    expected_ops = {
        "static-qdq": {"QuantizeLinear", "DequantizeLinear"},
        "static-qoperator": {"QLinearConv", "QLinearMatMul"},
        "dynamic": {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"},
    }
    assert expected_ops.get(name, set()) <= ops_used
    x = np.random.default_rng(5).normal(size=(5, 3, 16, 16)).astype(np.float32)
    names, want = _ort_all(path, x)
    got = sonnx.prepare(path, optimize=False).run([x], aux_output=names[1:])
    integer = 0
    for n, g, w in zip(names, got, want):
        g = g.numpy()
        assert g.dtype == w.dtype, (n, g.dtype, w.dtype)
        if w.dtype.kind in "iu":
            integer += 1
            np.testing.assert_array_equal(g, w, err_msg=n)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=n)
    assert integer >= 3
    (y,) = sonnx.prepare(path).run([x])  # the inference rewrites change nothing
    np.testing.assert_allclose(y.numpy(), want[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", list(QUANTIZED))
def test_quantized_cnn_fine_tunes(quantized_models, name):
    """A few SGD steps as a SONNXModel: the dequantized weights are float params, trained
    through the rounding (straight-through), and the loss falls."""
    path = quantized_models[name]
    model = sonnx.SONNXModel(path)
    params = model.get_params()
    quantized = [k for k in params if k.endswith("_quantized")]
    assert {"w1_quantized", "w2_quantized", "w3_quantized"} <= set(quantized)
    assert all(params[k].dtype == np.float32 for k in quantized)
    before = {k: params[k].numpy().copy() for k in quantized}
    rng = np.random.default_rng(1)
    x = tensor.Tensor(data=rng.normal(size=(16, 3, 16, 16)).astype(np.float32), requires_grad=False)
    y = tensor.from_numpy(rng.integers(0, 10, 16).astype(np.int32))
    model.eval()
    (out,) = model(x)  # before training the params give the quantized model's own outputs
    np.testing.assert_allclose(out.numpy(), _ort_all(path, x.numpy())[1][0], rtol=1e-4, atol=1e-4)
    model.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    model.compile([x], is_train=True, use_graph=False)
    model.train()
    losses = [float(model(x, y)[1].numpy().mean()) for _ in range(8)]
    assert losses[-1] < 0.5 * losses[0], losses
    after = model.get_params()
    assert all(not np.array_equal(after[k].numpy(), before[k]) for k in ("w1_quantized", "w3_quantized"))


def test_fine_tuned_quantized_weights_stay_quantized(quantized_models):
    """What the graph computes with is the quantized value of the float param."""
    model = sonnx.SONNXModel(quantized_models["static-qdq"])
    w = model.get_params()["w1_quantized"]
    w.data[...] += np.float32(0.013)
    spec = model._quantized["w1_quantized"]
    q = spec.quantize(w).numpy()
    assert q.dtype == spec.q.dtype and np.abs(q.astype(int) - spec.q.astype(int)).max() <= 2


# -- single nodes against onnxruntime ----------------------------------------------------------------
def _node_model(node, inputs, outputs, inits=(), opset=21):
    graph = helper.make_graph([node], "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _both(model, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    got = [t.numpy() for t in sonnx.prepare(model).run(feeds)]
    return got, want


V = helper.make_tensor_value_info


@pytest.mark.parametrize("seed", range(4))
def test_qlinear_conv_and_matmul_nodes_match_onnxruntime_bitwise(seed):
    rng = np.random.default_rng(seed)
    T = TensorProto
    x = rng.integers(0, 256, (2, 4, 7, 7)).astype(np.uint8)
    w = rng.integers(-127, 128, (6, 2, 3, 3)).astype(np.int8)
    inits = [
        numpy_helper.from_array(np.float32(rng.uniform(0.01, 0.05)), "xs"),
        numpy_helper.from_array(np.uint8(rng.integers(100, 150)), "xz"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(rng.uniform(0.001, 0.01, 6).astype(np.float32), "ws"),
        numpy_helper.from_array(np.zeros(6, np.int8), "wz"),
        numpy_helper.from_array(np.float32(rng.uniform(0.05, 0.2)), "ys"),
        numpy_helper.from_array(np.uint8(rng.integers(100, 150)), "yz"),
        numpy_helper.from_array(rng.integers(-1000, 1000, 6).astype(np.int32), "b"),
    ]
    node = helper.make_node(
        "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
        pads=[1, 0, 1, 2], strides=[2, 1], group=2,
    )  # fmt: skip
    model = _node_model(node, [V("x", T.UINT8, x.shape)], [V("y", T.UINT8, [2, 6, 4, 7])], inits)
    (got,), (want,) = _both(model, {"x": x})
    np.testing.assert_array_equal(got, want)
    a = rng.integers(-128, 128, (2, 3, 9)).astype(np.int8)
    b = rng.integers(-128, 128, (9, 5)).astype(np.int8)
    names = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    inits = [
        numpy_helper.from_array(np.float32(0.03), "as"),
        numpy_helper.from_array(np.int8(3), "az"),
        numpy_helper.from_array(b, "b"),
        numpy_helper.from_array(np.float32(0.02), "bs"),
        numpy_helper.from_array(np.int8(-2), "bz"),
        numpy_helper.from_array(np.float32(0.4), "ys"),
        numpy_helper.from_array(np.int8(-5), "yz"),
    ]
    model = _node_model(
        helper.make_node("QLinearMatMul", names, ["y"]),
        [V("a", T.INT8, a.shape)],
        [V("y", T.INT8, [2, 3, 5])],
        inits,
    )
    (got,), (want,) = _both(model, {"a": a})
    np.testing.assert_array_equal(got, want)


def test_integer_products_and_dynamic_quantization_match_onnxruntime():
    rng = np.random.default_rng(3)
    T = TensorProto
    x = rng.normal(0.5, 2.0, (3, 8)).astype(np.float32)
    b = rng.integers(0, 256, (8, 4)).astype(np.uint8)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
        helper.make_node("MatMulInteger", ["q", "b", "z", "bz"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [V("x", T.FLOAT, x.shape)],
        [V("q", T.UINT8, [3, 8]), V("s", T.FLOAT, []), V("z", T.UINT8, []), V("y", T.INT32, [3, 4])],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.uint8(7), "bz")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got, want = _both(model, {"x": x})
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    xi = rng.integers(0, 256, (1, 2, 6, 6)).astype(np.uint8)
    w = rng.integers(0, 256, (3, 2, 3, 3)).astype(np.uint8)
    node = helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 1, 1, 1])
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.uint8(128), "xz")]
    model = _node_model(node, [V("x", T.UINT8, xi.shape)], [V("y", T.INT32, [1, 3, 6, 6])], inits, opset=17)
    (got,), (want,) = _both(model, {"x": xi})
    np.testing.assert_array_equal(got, want)


def test_quantize_dequantize_nodes_match_onnxruntime_per_axis_and_blocked():
    rng = np.random.default_rng(4)
    T = TensorProto
    x = rng.normal(0, 3, (4, 6)).astype(np.float32)
    cases = [
        (dict(axis=1), rng.uniform(0.01, 0.1, 6), rng.integers(-5, 5, 6)),
        (dict(axis=0, block_size=2), rng.uniform(0.01, 0.1, (2, 6)), rng.integers(-5, 5, (2, 6))),
    ]
    for attrs, s, z in cases:
        nodes = [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **attrs),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **attrs),
        ]
        graph = helper.make_graph(
            nodes, "g", [V("x", T.FLOAT, x.shape)], [V("q", T.INT8, [4, 6]), V("y", T.FLOAT, [4, 6])],
            [numpy_helper.from_array(s.astype(np.float32), "s"),
             numpy_helper.from_array(z.astype(np.int8), "z")],
        )  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
        (q, y), (wq, wy) = _both(model, {"x": x})
        assert q.dtype == np.int8
        np.testing.assert_array_equal(q, wq)
        np.testing.assert_array_equal(y, wy)


def test_int4_quantization_is_held_as_int8_in_range():
    T = TensorProto
    x = np.linspace(-20, 20, 12, dtype=np.float32)
    z = helper.make_tensor("z", T.INT4, [], [1])
    s = numpy_helper.from_array(np.float32(1.5), "s")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])]
    graph = helper.make_graph(nodes, "g", [V("x", T.FLOAT, [12])], [V("q", T.INT4, [12])], [s, z])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    (q,) = sonnx.prepare(model).run([x])
    assert q.dtype == np.int8 and q.numpy().min() == -8 and q.numpy().max() == 7
    want = np.clip(np.rint(x / np.float32(1.5)) + 1, -8, 7)
    np.testing.assert_array_equal(q.numpy(), want)
    (q4,) = sonnx.SingaBackend.prepare(model).run([x])
    assert q4.dtype == ml_dtypes.int4
    # an int4 input given as an int8 Tensor must hold int4 values
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["q", "s"], ["y"])],
        "g",
        [V("q", T.INT4, [3])],
        [V("y", T.FLOAT, [3])],
        [s],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    rep = sonnx.prepare(model)
    y = rep.run([tensor.Tensor(data=np.array([-8, 0, 7], np.int8), requires_grad=False)])[0]
    assert y.numpy().tolist() == [-12.0, 0.0, 10.5]
    with pytest.raises(SingaLiteError, match="int4"):
        rep.run([tensor.Tensor(data=np.array([-9, 0, 7], np.int8), requires_grad=False)])


def test_bad_quantized_nodes_are_refused_with_the_node_named():
    T = TensorProto
    w = numpy_helper.from_array(np.zeros((2, 3, 3, 3), np.int8), "w")
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], name="ci", kernel_shape=[2, 2])
    model = _node_model(node, [V("x", T.UINT8, [1, 3, 5, 5])], [V("y", T.INT32, [1, 2, 4, 4])], [w], opset=17)
    with pytest.raises(OnnxError, match=r"ci.*kernel_shape"):
        sonnx.prepare(model).run([np.zeros((1, 3, 5, 5), np.uint8)])
    s = numpy_helper.from_array(np.ones(5, np.float32), "s")
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["q"], name="ql", axis=1)
    model = _node_model(node, [V("x", T.FLOAT, [2, 3])], [V("q", T.UINT8, [2, 3])], [s])
    with pytest.raises(SingaLiteError, match="ql"):
        sonnx.prepare(model).run([np.zeros((2, 3), np.float32)])
    # a huge integer product is refused before anything is allocated
    from singa_lite.sonnx import limits

    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"], name="mmi")
    model = _node_model(
        node,
        [V("a", T.UINT8, [4096, 1]), V("b", T.UINT8, [1, 4096])],
        [V("y", T.INT32, [4096, 4096])],
        opset=17,
    )
    rep = sonnx.prepare(model, limits=limits.Limits(max_tensor_bytes=1 << 20))
    with pytest.raises(OnnxError, match="mmi"):
        rep.run([np.ones((4096, 1), np.uint8), np.ones((1, 4096), np.uint8)])


def test_training_mode_is_off_for_inference_runs(quantized_models):
    """prepare().run never records the STE graph (nothing to free, integer outputs exact)."""
    rep = sonnx.prepare(quantized_models["dynamic"])
    with autograd.training_mode(True):
        (y,) = rep.run([np.zeros((1, 3, 16, 16), np.float32)])
    assert y.creator is None


# -- export --------------------------------------------------------------------------------------------
def _traced_quant_graph():
    rng = np.random.default_rng(6)
    x = tensor.Tensor(data=rng.normal(size=(3, 8)).astype(np.float32))

    def c(a):
        return tensor.Tensor(data=np.asarray(a), requires_grad=False)

    from singa_lite import ops

    with autograd.training_mode(True):
        s, z = c(np.float32(0.05)), c(np.int8(3))
        qx = ops.quantize_linear(x, s, z, dtype=np.int8)
        w = c(rng.integers(-100, 100, (8, 4)).astype(np.int8))
        acc = ops.matmul_integer(qx, w, z, c(np.int8(0)))
        y = ops.qlinear_matmul(
            qx, s, z, w, c(np.float32(0.02)), c(np.int8(0)), c(np.float32(0.3)), c(np.uint8(128))
        )
        d = ops.dequantize_linear(y, c(np.float32(0.3)), c(np.uint8(128)))
        scales = c(rng.uniform(0.1, 0.3, 8).astype(np.float32))
        q4 = ops.quantize_linear(x, scales, c(np.zeros(8, np.int8)), axis=1, dtype=ml_dtypes.int4)
        dyn = ops.dynamic_quantize_linear(x)
        f8 = ops.dequantize_linear(ops.quantize_linear(x, s, dtype=ml_dtypes.float8_e4m3fn), s)
    return x, [qx, acc, y, d, q4, *dyn, f8]


def test_quantization_ops_export_and_run_in_onnxruntime_bitwise():
    x, outs = _traced_quant_graph()
    model = sonnx.to_onnx([x], outs, opset=21)
    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {model.graph.input[0].name: x.numpy()})
    back = sonnx.prepare(model).run([x.numpy()])
    for want, g, b in zip(outs, got, back):
        assert g.dtype == want.dtype == b.dtype
        np.testing.assert_array_equal(g, want.numpy())
        np.testing.assert_array_equal(b.numpy(), want.numpy())


def test_quantization_export_names_what_an_old_opset_lacks():
    from singa_lite.errors import UnsupportedOperatorError

    x, outs = _traced_quant_graph()
    with pytest.raises(UnsupportedOperatorError, match="opset 21"):
        sonnx.to_onnx([x], outs, opset=17)


@pytest.mark.parametrize("name", ["static-qdq", "static-qoperator", "dynamic"])
def test_fine_tuned_quantized_model_saves_and_loads_whole(quantized_models, name, tmp_path):
    """``singa_lite.save`` traces the fine-tuned model (its requantized weights included) to
    ONNX; ``singa_lite.load`` gives the same outputs."""
    import singa_lite

    rng = np.random.default_rng(2)
    x = tensor.Tensor(data=rng.normal(size=(4, 3, 16, 16)).astype(np.float32), requires_grad=False)
    y = tensor.from_numpy(rng.integers(0, 10, 4).astype(np.int32))
    model = sonnx.SONNXModel(quantized_models[name])
    model.set_optimizer(opt.SGD(lr=0.05))
    model.compile([x], is_train=True, use_graph=False)
    model.train()
    model(x, y)
    path = str(tmp_path / "tuned.h5")
    singa_lite.save(path, model)
    loaded = singa_lite.load(path)
    model.eval()
    loaded.eval()
    np.testing.assert_allclose(loaded(x)[0].numpy(), model(x)[0].numpy(), rtol=1e-5, atol=1e-5)

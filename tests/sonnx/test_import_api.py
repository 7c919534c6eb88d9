"""``prepare``/``SingaRep`` behaviour: last_layers, aux_output, constant folding, opset handling,
and errors for unsupported operators and malformed models."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa_lite import autograd, sonnx, tensor
from singa_lite.errors import DTypeError, OnnxError, ShapeError, UnsupportedOperatorError
from singa_lite.sonnx import SingaRep, prepare
from singa_lite.sonnx.import_ops import DESIGN_OPS, HANDLERS, schema_versions


def _model(nodes: list, inputs: list, outputs: list, inits: list = (), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _info(name: str, shape: list, dtype: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def mlp() -> onnx.ModelProto:
    """x -> MatMul -> Add -> Relu -> MatMul -> Softmax, with a Constant node in the middle."""
    rng = np.random.default_rng(0)
    w1, w2 = (
        numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
        for n, s in (("w1", (4, 5)), ("w2", (5, 3)))
    )
    b = numpy_helper.from_array(np.full(5, 0.1, np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.float32(2.0))),
        helper.make_node("Add", ["h0", "b"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("Mul", ["h2", "c"], ["h3"]),
        helper.make_node("MatMul", ["h3", "w2"], ["z"]),
        helper.make_node("Softmax", ["z"], ["y"], axis=-1),
    ]
    return _model(nodes, [_info("x", [2, 4])], [_info("y", [2, 3])], [w1, w2, b])


def test_every_design_operator_has_a_handler() -> None:
    assert set(DESIGN_OPS) <= set(HANDLERS)
    assert all(fn.__name__ == op or fn.__name__ == "handler" for op, fn in HANDLERS.items())
    assert schema_versions("Split")[:4] == [1, 2, 11, 13]


def test_run_returns_tensors_and_matches_numpy() -> None:
    rep = prepare(mlp())
    assert isinstance(rep, SingaRep) and rep.inputs == ["x"]
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    (y,) = rep.run([x])
    init = {t.name: numpy_helper.to_array(t) for t in mlp().graph.initializer}
    z = np.maximum(x @ init["w1"] + init["b"], 0) * 2 @ init["w2"]
    ref = np.exp(z - z.max(1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), ref / ref.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(rep.run({"x": x})[0].numpy(), y.numpy())


def test_last_layers_and_aux_output() -> None:
    rep = prepare(mlp())
    x = np.ones((2, 4), np.float32)
    full = rep.run([x], aux_output=["h2", "z"])
    z = rep.run([x], last_layers=-2)[0]  # drops Softmax: the output of the last MatMul
    np.testing.assert_allclose(z.numpy(), full[2].numpy())
    # -4 drops Softmax, MatMul, Mul (the Constant node is not counted): Relu's output.
    np.testing.assert_allclose(rep.run([x], last_layers=-4)[0].numpy(), full[1].numpy())
    h2, h1 = rep.run([x], last_layers=-4, aux_output=["h1"])
    np.testing.assert_allclose(h2.numpy(), np.maximum(h1.numpy(), 0))
    with pytest.raises(ValueError, match="last_layers"):
        rep.run([x], last_layers=0)
    with pytest.raises(OnnxError, match="aux_output"):
        rep.run([x], last_layers=-6, aux_output=["z"])


def test_constant_subgraphs_are_folded_at_prepare() -> None:
    """Transpose(W) and shape arithmetic on initializers run once, at prepare time."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2), "w")
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"]),
        helper.make_node("Reshape", ["wt", "shape"], ["w2"]),
        helper.make_node("MatMul", ["x", "w2"], ["y"]),
    ]
    rep = prepare(_model(nodes, [_info("x", [1, 2])], [_info("y", [1, 3])], [w, shape]))
    assert rep.program.folded == [True, True, False]
    np.testing.assert_allclose(rep.run([np.ones((1, 2), np.float32)])[0].numpy(), [[0 + 1, 2 + 3, 4 + 5]])


def test_opset_moves_attributes_to_inputs() -> None:
    """Squeeze's axes: an attribute at opset 11, an input at 13; both give the same result."""
    x = np.ones((1, 3, 1), np.float32)
    old = _model(
        [helper.make_node("Squeeze", ["x"], ["y"], axes=[0, 2])],
        [_info("x", [1, 3, 1])],
        [_info("y", [3])],
        opset=11,
    )
    axes = numpy_helper.from_array(np.array([0, 2], np.int64), "axes")
    new = _model(
        [helper.make_node("Squeeze", ["x", "axes"], ["y"])],
        [_info("x", [1, 3, 1])],
        [_info("y", [3])],
        [axes],
        13,
    )
    assert prepare(old).run([x])[0].shape == prepare(new).run([x])[0].shape == (3,)


def test_unsupported_operator_names_op_opset_and_node() -> None:
    node = helper.make_node("StringNormalizer", ["x"], ["y"], name="the_norm")
    with pytest.raises(UnsupportedOperatorError, match=r"StringNormalizer.*opset 17.*the_norm"):
        prepare(_model([node], [_info("x", [2, 2])], [_info("y", [])]))


def test_other_domains_are_unsupported() -> None:
    node = helper.make_node("Normalizer", ["x"], ["y"], domain="ai.onnx.ml")
    model = _model([node], [_info("x", [2, 2])], [_info("y", [2, 2])])
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    with pytest.raises(UnsupportedOperatorError, match=r"ai\.onnx\.ml::Normalizer \(opset 3\)"):
        prepare(model)


def test_legacy_broadcast_semantics_are_refused() -> None:
    node = helper.make_node("Add", ["x", "y"], ["z"], broadcast=1, axis=0)
    model = _model([node], [_info("x", [2, 3]), _info("y", [2])], [_info("z", [2, 3])], opset=6)
    model.ir_version = 3
    with pytest.raises(UnsupportedOperatorError, match="broadcasting with an axis"):
        prepare(model)


@pytest.mark.parametrize("cut", [1, 10, 50, 200])
def test_truncated_model_bytes_raise_onnx_error(cut: int) -> None:
    data = mlp().SerializeToString()
    with pytest.raises(OnnxError):
        prepare(data[:-cut])


def test_garbage_bytes_and_missing_files_raise_onnx_error(tmp_path: object) -> None:
    with pytest.raises(OnnxError):
        prepare(b"\x08\x07 definitely not a protobuf \xff\xff\xff")
    with pytest.raises(OnnxError, match="cannot read"):
        prepare(str(tmp_path) + "/missing.onnx")  # type: ignore[operator]


def test_fifo_and_directory_paths_raise_instead_of_hanging(tmp_path) -> None:
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    with pytest.raises(OnnxError, match="not a regular file"):
        prepare(str(fifo))
    with pytest.raises(OnnxError, match="not a regular file"):
        prepare(tmp_path)


def test_model_file_path_is_accepted(tmp_path: object) -> None:
    path = f"{tmp_path}/m.onnx"
    onnx.save(mlp(), path)
    assert prepare(path).run([np.ones((2, 4), np.float32)])[0].shape == (2, 3)


def test_dangling_input_and_bad_inputs_raise_onnx_error() -> None:
    node = helper.make_node("Relu", ["nowhere"], ["y"])
    model = _model([node], [_info("x", [2])], [_info("y", [2])])
    with pytest.raises(OnnxError):
        prepare(model)
    rep = prepare(mlp())
    with pytest.raises(OnnxError, match="missing graph inputs"):
        rep.run([])
    with pytest.raises(OnnxError, match="unknown inputs"):
        rep.run({"x": np.ones((2, 4), np.float32), "q": 1})


def test_runtime_shape_error_names_the_node() -> None:
    model = mlp()
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "features"  # not checked by run
    rep = prepare(model)
    with pytest.raises(ShapeError) as info:
        rep.run([np.ones((2, 7), np.float32)])
    assert "MatMul" in str(info.value)


def test_inputs_are_checked_against_their_declared_type_and_shape() -> None:
    """As onnxruntime: a wrong rank, dim or dtype is refused, not run into wrong shapes."""
    model = mlp()  # x: float32 (2, 4)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"  # any batch size
    rep = prepare(model)
    good = np.ones((3, 4), np.float32)
    assert rep.run([good])[0].shape == (3, 3)
    with pytest.raises(ShapeError, match=r"graph input 'x' is declared with shape \('\?', 4\), got \(4,\)"):
        rep.run([np.ones(4, np.float32)])
    with pytest.raises(ShapeError, match=r"got \(3, 5\)"):
        rep.run([np.ones((3, 5), np.float32)])
    with pytest.raises(DTypeError, match="declared float32, got float64"):
        rep.run([good.astype(np.float64)])
    with pytest.raises(DTypeError, match="got int64"):
        rep.run({"x": tensor.Tensor(data=good.astype(np.int64), requires_grad=False)})
    assert rep.run([[[1.0, 2.0, 3.0, 4.0]]])[0].dtype == np.float32  # lists take the declared type
    with pytest.raises(OnnxError, match="no inputs given"):
        rep.run(None)


def test_narrow_integer_types_are_widened_and_cast_back() -> None:
    node = helper.make_node("Add", ["a", "b"], ["c"])
    model = _model(
        [node],
        [_info("a", [3], TensorProto.UINT8), _info("b", [3], TensorProto.UINT8)],
        [_info("c", [3], TensorProto.UINT8)],
    )
    a = np.array([250, 1, 2], np.uint8)
    (c,) = sonnx.SingaBackend.prepare(model).run([a, a])
    assert c.dtype == np.uint8 and c.tolist() == (a + a).tolist()  # wraps around as uint8 does


def test_to_onnx_is_reexported_lazily() -> None:
    from singa_lite.sonnx import exporter

    assert sonnx.to_onnx is exporter.to_onnx


def test_docs_coverage_table_is_generated_from_the_handlers() -> None:
    from pathlib import Path

    from singa_lite.sonnx.coverage import coverage_table

    docs = Path(__file__).resolve().parents[2] / "docs" / "onnx.md"
    assert coverage_table() in docs.read_text(), "run: python -m singa_lite.sonnx.coverage docs/onnx.md"


def test_damaged_tensor_contents_raise_onnx_error_naming_the_tensor() -> None:
    """Models that pass onnx.checker but whose tensors cannot be read (found by bit flips)."""
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    w.data_type = TensorProto.BOOL  # 48 raw bytes can't be a (4, 3) bool tensor
    model = _model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], [_info("x", [2, 4])], [_info("y", [2, 3])], [w]
    )
    with pytest.raises(OnnxError, match=r"initializer 'w' \(data_type 9, dims \[4, 3\]\) cannot be read"):
        prepare(model)
    c = numpy_helper.from_array(np.float32(2), "c")
    c.data_type = 33  # no such element type
    node = helper.make_node("Constant", [], ["y"], value=c)
    with pytest.raises(OnnxError, match=r"Constant node .*attribute 'value'.*cannot be read"):
        prepare(_model([node], [], [_info("y", [])]))


def test_bfloat16_model_runs_held_as_float32() -> None:
    """A graph in bfloat16 (weights, input, output): computed in float32, the output rounded
    to bfloat16 once, as onnx's reference does for a single MatMul."""
    import ml_dtypes  # onnx's own dependency for its bfloat16 and float8 arrays

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(ml_dtypes.bfloat16)
    x = rng.standard_normal((2, 4)).astype(ml_dtypes.bfloat16)
    bf16 = TensorProto.BFLOAT16
    model = _model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [_info("x", [2, 4], bf16)],
        [_info("y", [2, 3], bf16)],
        [numpy_helper.from_array(w, "w")],
    )
    (y,) = sonnx.SingaBackend.prepare(model).run([x])
    expected = (x.astype(np.float32) @ w.astype(np.float32)).astype(ml_dtypes.bfloat16)
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y.astype(np.float32), expected.astype(np.float32))
    (held,) = prepare(model).run([x])  # SingaRep gives singa_lite tensors: float32
    assert held.dtype == np.float32


def test_a_bfloat16_cast_passes_the_gradient_straight_through() -> None:
    """A model exported with a cast to bfloat16 (autocast) still trains as a SONNXModel."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Cast", ["h"], ["hb"], to=TensorProto.BFLOAT16),
        helper.make_node("Cast", ["hb"], ["y"], to=TensorProto.FLOAT),
    ]
    model = _model(nodes, [_info("x", ["n", 4])], [_info("y", ["n", 3])], [w])
    m = sonnx.SONNXModel(model)
    x = tensor.Tensor(data=rng.standard_normal((2, 4)).astype(np.float32), requires_grad=False)
    autograd.training = True
    (y,) = m.forward(x)
    grads = autograd.gradients(autograd.reduce_sum(y))
    (gw,) = grads.values()
    np.testing.assert_allclose(gw.numpy(), np.asarray(x).T @ np.ones((2, 3), np.float32), rtol=1e-6)
    import ml_dtypes

    rounded = (np.asarray(x) @ numpy_helper.to_array(w)).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(y.numpy(), rounded)


def test_topk_ranks_nan_above_inf_like_onnxruntime() -> None:
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"])
    k = numpy_helper.from_array(np.array([6], np.int64), "k")
    model = _model([node], [_info("x", [6])], [_info("v", [6]), _info("i", [6], TensorProto.INT64)], [k])
    x = np.array([np.inf, np.nan, 1, -np.inf, np.nan, np.inf], np.float32)
    _, idx = prepare(model).run([x])
    assert idx.numpy().tolist() == [1, 4, 0, 5, 2, 3]  # onnxruntime's order

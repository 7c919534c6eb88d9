"""Control flow in imported models: ``If``, ``Loop`` and ``Scan`` whose bodies read outer-scope
values, nested to depth 3, with sequences and optionals; compared with onnxruntime, trained
through as a ``SONNXModel`` (gradients against finite differences and against PyTorch), and
refused with a typed error naming the node path when malformed, unsupported or unbounded.
Real models: ``torch.jit.script`` modules exported by the TorchScript exporter (opsets 13-20)
and ``torch.cond``/``while_loop`` exported by the dynamo exporter."""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa_lite import autograd, ops, opt, sonnx, tensor
from singa_lite.errors import OnnxError, SingaLiteError, UnsupportedOperatorError
from singa_lite.sonnx.import_ops import MAX_OPSET
from singa_lite.sonnx.limits import Limits

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

F, D, I64, B = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.BOOL
ORT_OPSETS = (11, 13, 16, 18, 21, 23, 25)  # If/Loop/Scan changed at 13, 16, 19, 21, 23, 24, 25


def vi(name: str, elem: int, shape: Any) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def seq_vi(name: str, elem: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_sequence_value_info(name, elem, None)


def model(nodes: list, inputs: list, outputs: list, inits: list = (), opset: int = 13) -> onnx.ModelProto:  # type: ignore[assignment]
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8 if opset < 21 else 10
    return m


def ort_run(m: onnx.ModelProto, feeds: dict) -> list:
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def host(v: Any) -> Any:
    return v if v is None else [host(x) for x in v] if isinstance(v, list) else v.numpy()


# -- a Loop whose body holds an If whose else branch holds a Scan: depth 3 --------------------
def nested_model(opset: int, elem: int = F) -> onnx.ModelProto:
    """``Loop(n)`` over ``h``: iterations below 2 take ``tanh(h @ W + b)`` (an If reading W and b
    from the main graph); later ones scan the rows of ``h`` (a Scan in the else branch, reading
    b and W from two scopes up). Each iteration's ``h`` is also a scan output of the Loop."""
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.normal(size=(3, 3)) * 0.5).astype(dtype), "W"),
        numpy_helper.from_array((rng.normal(size=3) * 0.5).astype(dtype), "b"),
        numpy_helper.from_array(np.array(2, np.int64), "two"),
    ]
    then_g = helper.make_graph(
        [
            helper.make_node("MatMul", ["h_in", "W"], ["t1"], name="mm"),
            helper.make_node("Add", ["t1", "b"], ["t2"]),
            helper.make_node("Tanh", ["t2"], ["yt"]),
        ],
        "then",
        [],
        [vi("yt", elem, [2, 3])],
    )
    scan_body = helper.make_graph(
        [
            helper.make_node("Mul", ["row", "b"], ["rb"]),
            helper.make_node("Add", ["s", "rb"], ["s2"]),
            helper.make_node("MatMul", ["row", "W"], ["rw"]),
            helper.make_node("Tanh", ["rw"], ["row2"]),
        ],
        "scan_body",
        [vi("s", elem, [3]), vi("row", elem, [3])],
        [vi("s2", elem, [3]), vi("row2", elem, [3])],
    )
    else_g = helper.make_graph(
        [
            helper.make_node(
                "Scan", ["b", "h_in"], ["s_final", "rows"], name="scan", body=scan_body, num_scan_inputs=1
            ),
            helper.make_node("Add", ["rows", "s_final"], ["ye"]),
        ],
        "else",
        [],
        [vi("ye", elem, [2, 3])],
    )
    body = helper.make_graph(
        [
            helper.make_node("Less", ["i", "two"], ["lt"]),
            helper.make_node("If", ["lt"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node("Identity", ["y"], ["y_scan"]),
        ],
        "body",
        [vi("i", I64, []), vi("c", B, []), vi("h_in", elem, [2, 3])],
        [vi("c_out", B, []), vi("y", elem, [2, 3]), vi("y_scan", elem, [2, 3])],
    )
    loop = helper.make_node("Loop", ["n", "", "x"], ["h", "hs"], name="loop", body=body)
    return model(
        [loop],
        [vi("x", elem, [2, 3]), vi("n", I64, [])],
        [vi("h", elem, [2, 3]), vi("hs", elem, [None, 2, 3])],
        inits,
        opset,
    )


def nested_reference(x: np.ndarray, n: int, W: np.ndarray, b: np.ndarray) -> tuple:
    h, hs = x, []
    for i in range(n):
        if i < 2:
            h = np.tanh(h @ W + b)
        else:
            s, rows = b, []
            for row in h:
                s = s + row * b
                rows.append(np.tanh(row @ W))
            h = np.stack(rows) + s
        hs.append(h)
    return h, np.stack(hs) if hs else None


@pytest.mark.parametrize("opset", ORT_OPSETS)
def test_nested_control_flow_matches_onnxruntime(opset: int) -> None:
    m = nested_model(opset)
    rep = sonnx.prepare(m)
    x = np.random.default_rng(1).normal(size=(2, 3)).astype(np.float32)
    for n in (1, 2, 4):
        feeds = {"x": x, "n": np.array(n, np.int64)}
        got = [t.numpy() for t in rep.run(feeds)]
        for g, r in zip(got, ort_run(m, feeds)):
            assert g.shape == r.shape
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_nested_control_flow_at_the_newest_opset() -> None:
    m = nested_model(MAX_OPSET)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    x = np.random.default_rng(2).normal(size=(2, 3)).astype(np.float32)
    h, hs = sonnx.prepare(m).run({"x": x, "n": np.array(5, np.int64)})
    want_h, want_hs = nested_reference(x, 5, inits["W"], inits["b"])
    np.testing.assert_allclose(h.numpy(), want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hs.numpy(), want_hs, rtol=1e-5, atol=1e-6)


def test_zero_iterations_give_the_initial_values_and_empty_scan_outputs() -> None:
    x = np.ones((2, 3), np.float32)
    h, hs = sonnx.prepare(nested_model(13)).run({"x": x, "n": np.array(0, np.int64)})
    np.testing.assert_array_equal(h.numpy(), x)
    assert hs.shape == (0, 2, 3)


def test_outer_names_read_by_subgraphs_are_inputs_of_their_node() -> None:
    rep = sonnx.prepare(nested_model(13), optimize=False)
    (loop,) = rep.program.nodes
    assert set(loop.captured) == {"W", "b", "two"}
    inner = loop.attrs["body"]
    if_node = next(n for n in inner.nodes if n.op == "If")
    assert if_node.name == "loop/body/if"
    assert set(if_node.captured) == {"h_in", "W", "b"}
    scan = if_node.attrs["else_branch"].nodes[0]
    assert scan.name == "loop/body/if/else_branch/scan" and set(scan.captured) == {"W", "b"}


# -- gradients through the branch taken and every iteration ------------------------------------
def _loss(model: sonnx.SONNXModel, x: tensor.Tensor, n: tensor.Tensor, r: np.ndarray) -> Any:
    _, hs = model.forward(x, n)
    return ops.reduce_sum(ops.mul(hs, tensor.Tensor(data=r, requires_grad=False)))


@pytest.mark.parametrize("n", [1, 4])
def test_gradients_through_loop_if_and_scan_match_finite_differences(n: int) -> None:
    m = nested_model(13, D)
    # W and b feed MatMul/Add only inside the bodies: SONNXModel still makes them params
    model = sonnx.SONNXModel(m)
    assert set(model.get_params()) == {"W", "b"}
    x = tensor.Tensor(data=np.random.default_rng(3).normal(size=(2, 3)), requires_grad=False)
    steps = tensor.Tensor(data=np.array(n, np.int64), requires_grad=False)
    r = np.random.default_rng(4).normal(size=(n, 2, 3))
    model.train()
    params = model.get_params()
    grads = {p: g for p, g in autograd.backward(_loss(model, x, steps, r))}
    for name, p in params.items():
        g = grads[p].numpy()
        num = np.zeros_like(g)
        for idx in np.ndindex(*p.shape):
            keep = p.data[idx]
            with autograd.no_grad():
                p.data[idx] = keep + 1e-6
                up = _loss(model, x, steps, r).numpy().item()
                p.data[idx] = keep - 1e-6
                down = _loss(model, x, steps, r).numpy().item()
            p.data[idx] = keep
            num[idx] = (up - down) / 2e-6
        np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-7, err_msg=name)


# -- sequences and optionals -------------------------------------------------------------------
def sequence_model(opset: int) -> onnx.ModelProto:
    """Rows of x split into a sequence; a Loop over its length squares each row into a new
    sequence (SequenceAt of the outer sequence, SequenceInsert into the carried one); the
    result stacked, concatenated, erased from, measured and rebuilt."""
    body = helper.make_graph(
        [
            helper.make_node("SequenceAt", ["rows", "i"], ["row"]),
            helper.make_node("Mul", ["row", "row"], ["sq"]),
            helper.make_node("SequenceInsert", ["acc", "sq"], ["acc2"]),
            helper.make_node("Identity", ["c"], ["c2"]),
        ],
        "body",
        [vi("i", I64, []), vi("c", B, []), seq_vi("acc", F)],
        [vi("c2", B, []), seq_vi("acc2", F)],
    )
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
        helper.make_node("SequenceLength", ["rows"], ["len"]),
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
        helper.make_node("Loop", ["len", "", "empty"], ["squares"], body=body),
        helper.make_node("ConcatFromSequence", ["squares"], ["stacked"], axis=1, new_axis=1),
        helper.make_node("ConcatFromSequence", ["squares"], ["joined"], axis=0),
        helper.make_node("SequenceErase", ["squares", "one"], ["erased"]),
        helper.make_node("SequenceLength", ["erased"], ["n_erased"]),
        helper.make_node("SplitToSequence", ["x", "two"], ["chunks"], axis=1),
        helper.make_node("SequenceAt", ["chunks", "minus1"], ["last_chunk"]),
        helper.make_node("SequenceConstruct", ["x", "x"], ["pair"]),
        helper.make_node("ConcatFromSequence", ["pair"], ["doubled"], axis=-1),
    ]
    inits = [
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array(2, np.int64), "two"),
        numpy_helper.from_array(np.array(-1, np.int64), "minus1"),
    ]
    outs = [vi("stacked", F, [3, 4]), vi("joined", F, [12]), vi("n_erased", I64, []), seq_vi("erased", F)]
    outs += [vi("last_chunk", F, [4, 1]), vi("doubled", F, [4, 6])]
    return model(nodes, [vi("x", F, [4, 3])], outs, inits, opset)


@pytest.mark.parametrize("opset", ORT_OPSETS[1:])  # loop-carried sequences since opset 13
def test_sequences_in_and_out_of_loops_match_onnxruntime(opset: int) -> None:
    m = sequence_model(opset)
    x = np.random.default_rng(5).normal(size=(4, 3)).astype(np.float32)
    got = [host(v) for v in sonnx.prepare(m).run([x])]
    want = ort_run(m, {"x": x})
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert len(g) == len(w)
            for a, b in zip(g, w):
                np.testing.assert_allclose(a, b, rtol=1e-6)
        else:
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-6)


def optional_model(opset: int) -> onnx.ModelProto:
    """An If choosing between an optional holding x and an empty one; then has/get element."""
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [3]))
    then_g = helper.make_graph(
        [helper.make_node("Optional", ["x"], ["o1"])], "then", [], [helper.make_value_info("o1", opt_type)]
    )
    else_g = helper.make_graph(
        [helper.make_node("Optional", [], ["o2"], type=helper.make_tensor_type_proto(F, [3]))],
        "else",
        [],
        [helper.make_value_info("o2", opt_type)],
    )
    inner_then = helper.make_graph(
        [helper.make_node("OptionalGetElement", ["o"], ["v"])], "got", [], [vi("v", F, [3])]
    )
    inner_else = helper.make_graph([helper.make_node("Neg", ["x"], ["v2"])], "none", [], [vi("v2", F, [3])])
    nodes = [
        helper.make_node("If", ["c"], ["o"], then_branch=then_g, else_branch=else_g),
        helper.make_node("OptionalHasElement", ["o"], ["has"]),
        helper.make_node("If", ["has"], ["y"], then_branch=inner_then, else_branch=inner_else),
    ]
    return model(nodes, [vi("x", F, [3]), vi("c", B, [])], [vi("y", F, [3]), vi("has", B, [])], opset=opset)


@pytest.mark.parametrize("opset", [16, 18, 21, 25])
def test_optionals_from_branches_match_onnxruntime(opset: int) -> None:
    m = optional_model(opset)
    x = np.array([1.0, -2.0, 3.0], np.float32)
    rep = sonnx.prepare(m)
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        got = [t.numpy() for t in rep.run(feeds)]
        for g, w in zip(got, ort_run(m, feeds)):
            np.testing.assert_array_equal(g, w)


def test_sequence_and_optional_graph_inputs_and_outputs() -> None:
    nodes = [
        helper.make_node("OptionalHasElement", ["o"], ["has"]),
        helper.make_node("SequenceLength", ["s"], ["n"]),
        helper.make_node("Identity", ["s"], ["s2"]),
    ]
    opt_in = helper.make_value_info(
        "o", helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2]))
    )
    m = model(
        nodes, [seq_vi("s", F), opt_in], [vi("has", B, []), vi("n", I64, []), seq_vi("s2", F)], opset=18
    )
    a, b = np.zeros(2, np.float32), np.ones(3, np.float32)
    rep = sonnx.SingaBackend.prepare(m)
    has, n, s2 = rep.run([[a, b], None])
    assert not has and n == 2 and [x.tolist() for x in s2] == [a.tolist(), b.tolist()]
    assert rep.run([[], a])[0]
    with pytest.raises(OnnxError, match="sequence"):
        rep.run([a, a])


def scan_axes_model(opset: int) -> onnx.ModelProto:
    """A running sum scanned along axis 1 in reverse; outputs stacked along axis 1, reversed."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "col"], ["s2"]), helper.make_node("Identity", ["s2"], ["out"])],
        "body",
        [vi("s", F, [2]), vi("col", F, [2])],
        [vi("s2", F, [2]), vi("out", F, [2])],
    )
    scan = helper.make_node(
        "Scan",
        ["s0", "x"],
        ["s", "ys"],
        body=body,
        num_scan_inputs=1,
        scan_input_axes=[1],
        scan_input_directions=[1],
        scan_output_axes=[-1],
        scan_output_directions=[1],
    )
    return model(
        [scan], [vi("s0", F, [2]), vi("x", F, [2, 5])], [vi("s", F, [2]), vi("ys", F, [2, 5])], opset=opset
    )


@pytest.mark.parametrize("opset", ORT_OPSETS)
def test_scan_axes_and_directions_match_onnxruntime(opset: int) -> None:
    m = scan_axes_model(opset)
    feeds = {"s0": np.array([1.0, -1.0], np.float32), "x": np.arange(10, dtype=np.float32).reshape(2, 5)}
    got = [t.numpy() for t in sonnx.prepare(m).run(feeds)]
    for g, w in zip(got, ort_run(m, feeds)):
        np.testing.assert_allclose(g, w)


# -- malformed, unsupported and unbounded ------------------------------------------------------
def _if_model(then_nodes: list, then_out: str = "y", domains: tuple = ()) -> onnx.ModelProto:
    then_g = helper.make_graph(then_nodes, "then", [], [vi(then_out, F, [None, None])])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "else", [], [vi("z", F, [2, 2])])
    node = helper.make_node("If", ["c"], ["out"], name="If_3", then_branch=then_g, else_branch=else_g)
    m = model([node], [vi("x", F, [2, 2]), vi("c", B, [])], [vi("out", F, [None, None])], opset=13)
    m.opset_import.extend([helper.make_opsetid(d, 1) for d in domains])
    return m


def test_unsupported_operator_in_a_branch_names_its_path() -> None:
    m = _if_model(
        [helper.make_node("Conv", ["x"], ["y"], name="Conv_7", domain="com.example")],
        domains=("com.example",),
    )
    with pytest.raises(UnsupportedOperatorError, match="If_3/then_branch/Conv_7"):
        sonnx.prepare(m)


def test_failure_inside_a_branch_names_its_path() -> None:
    w = helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(np.ones((3, 3), np.float32)))
    m = _if_model([w, helper.make_node("MatMul", ["x", "w"], ["y"], name="MatMul_7")])
    rep = sonnx.prepare(m)
    x = np.ones((2, 2), np.float32)
    assert rep.run([x, np.array(False)])[0].shape == (2, 2)  # the bad branch is not taken
    with pytest.raises(SingaLiteError, match="If_3/then_branch/MatMul_7"):  # a ShapeError
        rep.run([x, np.array(True)])


def test_malformed_subgraphs_are_refused() -> None:
    bad_branch = _if_model(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["x"], ["y2"])]
    )
    then_g = next(a.g for a in bad_branch.graph.node[0].attribute if a.name == "then_branch")
    then_g.output.append(vi("y2", F, [2, 2]))  # then gives 2 outputs, else 1
    with pytest.raises(OnnxError, match=r"If node 'If_3'.*then_branch must"):
        sonnx.prepare(bad_branch)
    body = helper.make_graph(  # takes no loop-carried value, but the node passes one
        [helper.make_node("Identity", ["c"], ["c2"]), helper.make_node("Neg", ["v0"], ["v2"])],
        "body",
        [vi("i", I64, []), vi("c", B, [])],
        [vi("c2", B, []), vi("v2", F, [])],
    )
    loop = helper.make_node("Loop", ["n", "", "v0"], ["v"], name="Loop_1", body=body)
    m = model([loop], [vi("n", I64, []), vi("v0", F, [])], [vi("v", F, [])], opset=13)
    with pytest.raises(OnnxError, match=r"Loop node 'Loop_1'.*body must take"):
        sonnx.prepare(m)


def _forever(cond_node: str = "Identity") -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node(cond_node, ["c"], ["c2"]), helper.make_node("Add", ["v", "v"], ["v2"])],
        "body",
        [vi("i", I64, []), vi("c", B, []), vi("v", F, [])],
        [vi("c2", B, []), vi("v2", F, [])],
    )
    loop = helper.make_node("Loop", ["", "c", "v0"], ["v"], name="spin", body=body)
    return model([loop], [vi("c", B, []), vi("v0", F, [])], [vi("v", F, [])], opset=13)


def test_a_loop_that_never_ends_stops_at_the_iteration_limit() -> None:
    rep = sonnx.prepare(_forever(), limits=Limits(max_iterations=500))
    with pytest.raises(OnnxError, match=r"spin.*max_iterations = 500"):
        rep.run([np.array(True), np.array(0.0, np.float32)])
    assert rep.run([np.array(False), np.array(1.5, np.float32)])[0].numpy() == 1.5
    assert Limits().max_iterations == 100_000


def test_nested_loops_share_one_iteration_budget() -> None:
    inner = helper.make_graph(
        [helper.make_node("Identity", ["ci"], ["ci2"]), helper.make_node("Add", ["vi", "one"], ["vi2"])],
        "inner",
        [vi("j", I64, []), vi("ci", B, []), vi("vi", F, [])],
        [vi("ci2", B, []), vi("vi2", F, [])],
    )
    outer = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c2"]),
            helper.make_node("Loop", ["n", "", "v"], ["v2"], body=inner),
        ],
        "outer",
        [vi("i", I64, []), vi("c", B, []), vi("v", F, [])],
        [vi("c2", B, []), vi("v2", F, [])],
    )
    loop = helper.make_node("Loop", ["n", "", "v0"], ["v"], name="outer", body=outer)
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    m = model([loop], [vi("n", I64, []), vi("v0", F, [])], [vi("v", F, [])], [one], opset=13)
    rep = sonnx.prepare(m, limits=Limits(max_iterations=200))
    assert rep.run([np.array(10, np.int64), np.array(0.0, np.float32)])[0].numpy() == 100.0  # 110 runs
    with pytest.raises(OnnxError, match="max_iterations"):
        rep.run([np.array(20, np.int64), np.array(0.0, np.float32)])  # 420 runs


def _deep_if(depth: int) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y0"])], "leaf", [], [vi("y0", F, [1])])
    for k in range(1, depth + 1):  # the else branch a leaf: the proto grows linearly
        leaf = helper.make_graph(
            [helper.make_node("Neg", ["x"], [f"n{k}"])], "leaf", [], [vi(f"n{k}", F, [1])]
        )
        node = helper.make_node("If", ["c"], [f"y{k}"], then_branch=g, else_branch=leaf)
        g = helper.make_graph([node], f"level{k}", [], [vi(f"y{k}", F, [1])])
    return model(list(g.node), [vi("x", F, [1]), vi("c", B, [])], [vi(f"y{depth}", F, [1])], opset=13)


def test_subgraph_nesting_is_bounded() -> None:
    x = np.array([2.0], np.float32)
    assert sonnx.prepare(_deep_if(8)).run([x, np.array(True)])[0].numpy() == 2.0
    with pytest.raises(OnnxError, match="max_graph_depth = 4"):
        sonnx.prepare(_deep_if(8), limits=Limits(max_graph_depth=4))
    assert sonnx.prepare(_deep_if(30)).run([x, np.array(False)])[0].numpy() == -2.0  # default 32


def test_bad_sequence_arguments_are_typed_errors() -> None:
    nodes = [
        helper.make_node("SplitToSequence", ["x", "split"], ["s"], axis=0),
        helper.make_node("SequenceAt", ["s", "p"], ["y"]),
    ]
    m = model(
        nodes, [vi("x", F, [4]), vi("split", I64, [None]), vi("p", I64, [])], [vi("y", F, [None])], opset=13
    )
    rep = sonnx.prepare(m)
    x = np.arange(4, dtype=np.float32)
    assert rep.run([x, np.array([1, 3]), np.array(-1)])[0].numpy().tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(OnnxError, match="add up"):
        rep.run([x, np.array([1, 1]), np.array(0)])
    with pytest.raises(OnnxError, match="out of range"):
        rep.run([x, np.array([2, 2]), np.array(2)])


# -- real models: PyTorch's exporters ------------------------------------------------------------
torch = pytest.importorskip("torch", reason="PyTorch is not installed")
nn = torch.nn


class Branchy(nn.Module):
    """Data-dependent If, a counted Loop and a while Loop (TorchScript exports them as such)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3, self.out = (
            nn.Linear(4, 8),
            nn.Linear(8, 8),
            nn.Linear(8, 8),
            nn.Linear(8, 3),
        )

    def forward(self, x: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc1(x))
        if bool(h.sum() > 0):
            h = torch.relu(self.fc2(h))
        else:
            h = torch.tanh(self.fc3(h))
        for _ in range(int(steps)):
            h = torch.tanh(self.fc2(h)) + h
        i = 0
        while bool(h.abs().max() > 1.0) and i < 10:
            h = h * 0.5
            i += 1
        return self.out(h)


def _script_export(module: nn.Module, opset: int) -> bytes:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            torch.jit.script(module), (torch.randn(5, 4), torch.tensor(2)), f, opset_version=opset,
            dynamo=False, input_names=["x", "steps"], dynamic_axes={"x": {0: "n"}},
        )  # fmt: skip
    return f.getvalue()


def _inputs(seed: int, n: int = 6) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 4)).astype(np.float32)


class Regress(sonnx.SONNXModel):
    """The imported model, its loop count fixed (``steps``), trained on mean squared error."""

    steps: tensor.Tensor

    def forward(self, x: Any) -> Any:  # type: ignore[override]
        return super().forward(x, self.steps)

    def train_one_batch(self, x: Any, y: Any, dist_option: str = "plain", spars: Any = None) -> tuple:  # type: ignore[override]
        out = self.forward(x)[0]
        diff = ops.sub(out, y)
        loss = ops.reduce_mean(ops.mul(diff, diff))
        self.optimizer(loss)
        return out, loss


@pytest.mark.parametrize("opset", [13, 16, 17, 20])
def test_torchscript_control_flow_matches_onnxruntime_and_fine_tunes(opset: int) -> None:
    torch.manual_seed(opset)
    net = Branchy()
    data = _script_export(net, opset)
    ops_used = {n.op_type for n in onnx.load_from_string(data).graph.node}
    assert {"If", "Loop"} <= ops_used
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rep = sonnx.prepare(data)
    branches = set()
    for seed in range(6):
        x = _inputs(seed) * (1 + seed)
        steps = np.array(seed % 4, np.int64)
        with torch.no_grad():
            branches.add(bool(torch.tanh(net.fc1(torch.from_numpy(x))).sum() > 0))
        want = sess.run(None, {"x": x, "steps": steps})[0]
        np.testing.assert_allclose(rep.run([x, steps])[0].numpy(), want, rtol=1e-4, atol=1e-5)
    assert branches == {True, False}  # both branches were compared

    model = Regress(data)
    assert {"fc2.weight", "fc3.weight"} <= set(model.get_params())  # read only inside the bodies
    model.steps = tensor.Tensor(data=np.array(3, np.int64), requires_grad=False)
    model.set_optimizer(opt.SGD(lr=0.05))
    model.train()
    x = tensor.from_numpy(_inputs(10, 5))
    y = tensor.from_numpy(np.random.default_rng(11).normal(size=(5, 3)).astype(np.float32))
    losses = [model(x, y)[1].numpy().item() for _ in range(8)]
    assert losses[-1] < losses[0] * 0.9, losses


@pytest.mark.filterwarnings("ignore:graph mode:UserWarning")  # a branch flips: re-recorded
def test_torchscript_control_flow_fine_tunes_in_graph_mode() -> None:
    """Graph mode replays a recorded step; the host reads of If/Loop conditions are noted, so a
    step whose branch or trip count changes is recorded again."""
    torch.manual_seed(1)
    data = _script_export(Branchy(), 17)
    model = Regress(data)
    model.steps = tensor.Tensor(data=np.array(2, np.int64), requires_grad=False)
    x = tensor.from_numpy(_inputs(10))
    y = tensor.from_numpy(np.random.default_rng(11).normal(size=(6, 3)).astype(np.float32))
    model.set_optimizer(opt.SGD(lr=0.05))
    model.compile([x], is_train=True, use_graph=True)
    model.train()
    eager = Regress(data)
    eager.steps = model.steps
    eager.set_optimizer(opt.SGD(lr=0.05))
    eager.train()
    losses = [model(x, y)[1].numpy().item() for _ in range(6)]
    want = [eager(x, y)[1].numpy().item() for _ in range(6)]
    np.testing.assert_allclose(losses, want, rtol=1e-5)
    assert losses[-1] < losses[0]


def test_torchscript_gradients_match_pytorch() -> None:
    """Gradients of every param through the branch taken and 3 loop iterations; the params read
    only by the branch not taken get none, in both frameworks."""
    torch.manual_seed(0)
    net = Branchy()
    model = sonnx.SONNXModel(_script_export(net, 17))
    model.train()
    params = model.get_params()
    assert set(params) == {name for name, _ in net.named_parameters()}
    skipped, fc3_trained = set(), False
    for seed in range(8):
        x = _inputs(seed) * 3
        out = model.forward(
            tensor.from_numpy(x), tensor.Tensor(data=np.array(3, np.int64), requires_grad=False)
        )[0]
        grads = {p: g for p, g in autograd.backward(ops.reduce_sum(ops.mul(out, out)))}
        net.zero_grad(set_to_none=True)
        ref = net(torch.from_numpy(x), torch.tensor(3))
        (ref * ref).sum().backward()
        for name, p in net.named_parameters():
            if p.grad is None:
                assert params[name] not in grads, name
                skipped.add(name.split(".")[0])
                continue
            fc3_trained |= name.startswith("fc3")
            got = grads[params[name]].numpy()
            np.testing.assert_allclose(got, p.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
    assert skipped == {"fc3"} and fc3_trained  # each branch taken at least once (fc2 runs in the loop too)


@pytest.mark.slow  # the dynamo export takes ~10 s
def test_dynamo_cond_and_while_loop_match_onnxruntime() -> None:
    pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript")
    from torch._higher_order_ops.while_loop import while_loop

    class Dyn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2, self.fc3, self.out = (
                nn.Linear(4, 8),
                nn.Linear(8, 8),
                nn.Linear(8, 8),
                nn.Linear(8, 3),
            )

        def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
            h = torch.tanh(self.fc1(x))
            h = torch.cond(
                h.sum() > 0, lambda h: torch.relu(self.fc2(h)), lambda h: torch.tanh(self.fc3(h)), (h,)
            )

            def body(i: torch.Tensor, h: torch.Tensor) -> tuple:
                return i + 1, torch.tanh(self.fc2(h)) + h

            _, h = while_loop(lambda i, h: i < n, body, (torch.zeros((), dtype=torch.int64), h))
            return self.out(h)

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            Dyn(), (torch.randn(5, 4), torch.tensor(2)), dynamo=True, opset_version=18, verbose=False
        )
    data = program.model_proto.SerializeToString()
    assert {"If", "Loop"} <= {n.op_type for n in program.model_proto.graph.node}
    names = [i.name for i in program.model_proto.graph.input]
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rep = sonnx.prepare(data)
    for seed in range(4):
        x, n = _inputs(seed, 5) * (1 + seed), np.array(seed, np.int64)
        want = sess.run(None, dict(zip(names, [x, n])))[0]
        np.testing.assert_allclose(rep.run([x, n])[0].numpy(), want, rtol=1e-4, atol=1e-5)
    model = Regress(data)
    model.steps = tensor.Tensor(data=np.array(2, np.int64), requires_grad=False)
    model.set_optimizer(opt.SGD(lr=0.05))
    model.train()
    x = tensor.from_numpy(_inputs(10, 5))
    y = tensor.from_numpy(np.random.default_rng(11).normal(size=(5, 3)).astype(np.float32))
    losses = [model(x, y)[1].numpy().item() for _ in range(8)]
    assert losses[-1] < losses[0] * 0.9, losses


def test_sequence_and_scan_lengths_are_bounded_before_anything_is_made() -> None:
    split = model(
        [helper.make_node("SplitToSequence", ["x"], ["s"]), helper.make_node("SequenceLength", ["s"], ["n"])],
        [vi("x", F, [None])],
        [vi("n", I64, [])],
        opset=13,
    )
    rep = sonnx.prepare(split, limits=Limits(max_iterations=100))
    assert rep.run([np.zeros(100, np.float32)])[0].numpy() == 100
    with pytest.raises(OnnxError, match=r"split into \(101\) is over Limits.max_iterations = 100"):
        rep.run([np.zeros(101, np.float32)])
    scan = sonnx.prepare(scan_axes_model(13), limits=Limits(max_iterations=4))
    with pytest.raises(OnnxError, match=r"scan length \(5\) is over"):
        scan.run([np.zeros(2, np.float32), np.zeros((2, 5), np.float32)])

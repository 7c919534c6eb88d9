"""The run plan of an imported program (``sonnx.plan``) and the elementwise-chain fusion pass.

The plan must behave as the graph as written: the same outputs, cuts and ``aux_output``,
errors naming the node, ``Limits.max_total_bytes``, training through ``SONNXModel``, control
flow; and it must follow a program whose nodes or handlers change. ``ElementwiseChains`` must
give the unfused outputs, fuse only where each intermediate has one reader, and leave
``prepare(..., optimize=False)`` running the nodes as written.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa_lite import autograd, opt, tensor
from singa_lite.errors import DTypeError, OnnxError, SingaLiteError
from singa_lite.sonnx import SONNXModel, fusion, limits, prepare
from singa_lite.sonnx.import_ops import HANDLERS
from singa_lite.sonnx.plan import Plan

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
from onnx_dispatch import streaming_model


def _model(nodes: list, inits: dict, x_shape: list, outputs: tuple = ("y",), opset: int = 13) -> object:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [None] * len(x_shape)) for name in outputs],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _x(shape: tuple = (2, 3, 4, 5), seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 4).astype(np.float32)


def _ort(model: object, x: np.ndarray) -> list:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])  # type: ignore[attr-defined]
    return sess.run(None, {"x": x})


# -- the plan ------------------------------------------------------------------------------------
def test_streaming_model_matches_onnxruntime_fused_and_as_written() -> None:
    model = streaming_model(3)
    x = np.random.default_rng(1).standard_normal((1, 16, 8)).astype(np.float32)
    ref = _ort(model, x)[0]
    for optimize in (True, False):
        rep = prepare(model, optimize=optimize)
        for _ in range(2):  # the second run reuses the plan
            np.testing.assert_allclose(rep.run([x])[0].numpy(), ref, rtol=1e-5, atol=1e-5)


def test_plan_is_made_once_and_again_when_the_program_changes() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    rep = prepare(_model(nodes, {}, [3]), optimize=False)
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    assert rep.run([x])[0].numpy().tolist() == [0.0, -0.5, -2.0]
    plan = rep.program._plans[(-1, ())]
    rep.run([x])
    assert rep.program._plans[(-1, ())] is plan
    rep.program.handlers[1] = HANDLERS["Abs"]  # a program changed in place: a new plan
    assert rep.run([x])[0].numpy().tolist() == [0.0, 0.5, 2.0]
    assert rep.program._plans[(-1, ())] is not plan


def test_cuts_and_aux_output_through_the_plan() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Neg", ["a"], ["b"]),
        helper.make_node("Add", ["b", "x"], ["y"]),
    ]
    rep = prepare(_model(nodes, {}, [3]))
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    assert rep.run([x], last_layers=-2)[0].numpy().tolist() == [-0.0, -0.5, -2.0]
    y, a = rep.run([x], aux_output=["a"])
    assert y.numpy().tolist() == [-1.0, 0.0, 0.0] and a.numpy().tolist() == [0.0, 0.5, 2.0]
    y, x_again = rep.run([x], aux_output=["x"])  # a graph input may be asked for too
    assert x_again.numpy().tolist() == x.tolist()
    with pytest.raises(OnnxError, match="before the cut"):
        rep.run([x], last_layers=-3, aux_output=["y"])
    with pytest.raises(OnnxError, match="before the cut"):
        rep.run([x], aux_output=["nowhere"])


def test_errors_name_the_node() -> None:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    rep = prepare(_model(nodes, {"w": np.ones((4, 2))}, [None, None]))
    with pytest.raises(SingaLiteError, match="mm"):
        rep.run([np.ones((2, 3), np.float32)])
    with pytest.raises(DTypeError):
        rep.run([np.ones((2, 4), np.float64)])


def test_total_bytes_limit_is_kept() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])]
    model = _model(nodes, {}, [1000])
    x = np.ones(1000, np.float32)
    assert prepare(model, limits=limits.Limits(max_total_bytes=4000)).run([x])[0].shape == (1000,)
    rep = prepare(model, limits=limits.Limits(max_total_bytes=3999))
    with pytest.raises(OnnxError, match="max_total_bytes"):
        rep.run([x])


def test_intermediates_are_freed_after_their_last_reader() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Neg", ["a"], ["b"]),
        helper.make_node("Add", ["b", "x"], ["y"]),
    ]
    rep = prepare(_model(nodes, {}, [3]), optimize=False)
    rep.run([np.ones(3, np.float32)])
    plan = rep.program._plans[(-1, ())]
    frees = {step[1].op: sorted(name for name, s in plan.slot.items() if s in step[5]) for step in plan.steps}
    assert frees == {"Relu": [], "Neg": ["a"], "Add": ["b", "x"]}


def test_missing_feed_is_an_onnx_error() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    rep = prepare(_model(nodes, {}, [3]))
    plan = Plan(rep.program, 1, ["y"], [])
    with pytest.raises(OnnxError, match="no value was given"):
        plan.run({}, None)


def test_sonnxmodel_trains_through_the_plan() -> None:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["z"]),
        helper.make_node("Relu", ["z"], ["y"]),
    ]
    model = _model(nodes, {"w": rng.standard_normal((4, 3)), "b": np.full(3, 0.1)}, [None, 4])
    m = SONNXModel(model)
    x = tensor.from_numpy(rng.standard_normal((8, 4)).astype(np.float32))
    m.eval()
    w = m.get_params()["w"].numpy().copy()
    np.testing.assert_allclose(m.forward(x)[0].numpy(), np.maximum(x.numpy() @ w + 0.1, 0), rtol=1e-5)
    m.set_optimizer(opt.SGD(lr=0.1))
    m.train()
    m(x, tensor.from_numpy(np.arange(8, dtype=np.int32) % 3))  # records through the plan, then steps
    assert not np.allclose(m.get_params()["w"].numpy(), w)


def test_control_flow_bodies_run_through_plans() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["v", "x"], ["v_out"]), helper.make_node("Identity", ["c"], ["c_out"])],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v", TensorProto.FLOAT, [3]),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [3]),
        ],
    )
    nodes = [helper.make_node("Loop", ["n", "", "zero"], ["y"], body=body)]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [
            numpy_helper.from_array(np.array(4, np.int64), "n"),
            numpy_helper.from_array(np.zeros(3, np.float32), "zero"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.array([1.0, -2.0, 0.5], np.float32)
    rep = prepare(model)
    for _ in range(2):
        np.testing.assert_allclose(rep.run([x])[0].numpy(), 4 * x)


# -- elementwise chains --------------------------------------------------------------------------
def _fused_ops(rep: object) -> list[str]:
    return [type(h).__name__ for h in rep.inference_program.handlers]  # type: ignore[attr-defined]


def _same_as_unfused(model: object, x: np.ndarray) -> object:
    rep = prepare(model)
    fused = [t.numpy() for t in rep.run([x])]
    plain = [t.numpy() for t in prepare(model, optimize=False).run([x])]
    for a, b, r in zip(fused, plain, _ort(model, x)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-5)
    return rep


def test_silu_is_one_node() -> None:
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["s", "x"], ["y"])]
    rep = _same_as_unfused(_model(nodes, {}, [2, 3, 4, 5]), _x())
    assert _fused_ops(rep) == ["_SiLU"]
    assert len(prepare(_model(nodes, {}, [2, 3, 4, 5]), optimize=False).inference_program.nodes) == 2


def test_hardsigmoid_times_x_is_one_node() -> None:
    for alpha in (1 / 6, 0.2):
        nodes = [
            helper.make_node("HardSigmoid", ["x"], ["h"], alpha=alpha, beta=0.5),
            helper.make_node("Mul", ["x", "h"], ["y"]),
        ]
        rep = _same_as_unfused(_model(nodes, {}, [2, 3, 4, 5]), _x())
        assert _fused_ops(rep) == ["_HardSwish"]


@pytest.mark.parametrize("divide_first", [False, True])
@pytest.mark.parametrize("opset", [9, 13])
def test_hand_written_hardswish_is_one_node(divide_first: bool, opset: int) -> None:
    if opset < 11:
        clip = helper.make_node("Clip", ["a"], ["c"], min=0.0, max=6.0)
        inits = {"three": 3.0, "six": 6.0}
    else:
        clip = helper.make_node("Clip", ["a", "zero", "six"], ["c"])
        inits = {"three": 3.0, "six": 6.0, "zero": 0.0}
    tail = (
        [helper.make_node("Div", ["c", "six"], ["d"]), helper.make_node("Mul", ["x", "d"], ["y"])]
        if divide_first
        else [helper.make_node("Mul", ["x", "c"], ["m"]), helper.make_node("Div", ["m", "six"], ["y"])]
    )
    nodes = [helper.make_node("Add", ["x", "three"], ["a"]), clip, *tail]
    rep = _same_as_unfused(_model(nodes, inits, [2, 3, 4, 5], opset=opset), _x())
    assert _fused_ops(rep) == ["_HardSwish"]


def test_add_relu_is_one_node() -> None:
    nodes = [helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    rep = _same_as_unfused(_model(nodes, {"b": np.linspace(-1, 1, 5)}, [2, 3, 4, 5]), _x())
    assert _fused_ops(rep) == ["_AddRelu"]


def test_add_relu_after_a_conv_writes_in_place() -> None:
    w = np.random.default_rng(2).standard_normal((3, 3, 1, 1))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Add", ["c", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    rep = _same_as_unfused(_model(nodes, {"w": w}, [1, 3, 4, 5]), _x((1, 3, 4, 5)))
    assert _fused_ops(rep)[-1] == "_AddRelu"


def test_chains_with_another_reader_or_an_output_are_not_fused() -> None:
    shared = [
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Mul", ["s", "x"], ["y"]),
        helper.make_node("Neg", ["s"], ["z"]),
    ]
    rep = _same_as_unfused(_model(shared, {}, [2, 3, 4, 5], outputs=("y", "z")), _x())
    assert "_SiLU" not in _fused_ops(rep)
    as_output = [helper.make_node("Add", ["x", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    rep = _same_as_unfused(_model(as_output, {}, [2, 3], outputs=("y", "s")), _x((2, 3)))
    assert "_AddRelu" not in _fused_ops(rep)
    other_x = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["s", "s"], ["y"])]
    rep = _same_as_unfused(_model(other_x, {}, [2, 3]), _x((2, 3)))
    assert "_SiLU" not in _fused_ops(rep)
    not_six = [
        helper.make_node("Add", ["x", "three"], ["a"]),
        helper.make_node("Clip", ["a", "zero", "five"], ["c"]),
        helper.make_node("Mul", ["x", "c"], ["m"]),
        helper.make_node("Div", ["m", "five"], ["y"]),
    ]
    rep = _same_as_unfused(_model(not_six, {"three": 3.0, "zero": 0.0, "five": 5.0}, [2, 3]), _x((2, 3)))
    assert "_HardSwish" not in _fused_ops(rep)


def test_elementwise_chains_alone_through_optimize() -> None:
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
    rep = prepare(_model(nodes, {}, [4]), optimize=False)
    fused = fusion.optimize(rep.program, [fusion.ElementwiseChains()])
    assert [n.op for n in rep.program.nodes] == ["Sigmoid", "Mul"]  # the original is left as it is
    assert len(fused.nodes) == 1
    x = _x((4,))
    with autograd.no_grad():
        np.testing.assert_allclose(fused.run(fused.feeds([x]))[0].numpy(), x / (1 + np.exp(-x)), rtol=1e-6)


# -- direct operator steps (sonnx.direct) --------------------------------------------------------
def _ints(name: str, values: list) -> object:
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _int_model(
    nodes: list, ints: list, x_shape: list, y_rank: int, x_type: int = TensorProto.FLOAT
) -> object:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", x_type, x_shape)],
        [helper.make_tensor_value_info("y", x_type, [None] * y_rank)],
        ints,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _direct_same(model: object, x: np.ndarray) -> object:
    rep = prepare(model)
    for _ in range(2):  # the second run takes the kept slices, targets, geometry
        ours = rep.run([x])[0].numpy()
        plain = prepare(model, optimize=False).run([x])[0].numpy()
        assert ours.shape == plain.shape and ours.dtype == plain.dtype
        np.testing.assert_allclose(ours, plain, rtol=1e-6, atol=1e-6)
        if x.dtype == np.float32:
            np.testing.assert_allclose(ours, _ort(model, x)[0], rtol=1e-5, atol=1e-5)
    return rep


def test_streaming_model_runs_direct_steps() -> None:
    rep = prepare(streaming_model(2))
    kinds = set(_fused_ops(rep))
    assert {"_Conv1d", "_Sliced", "_Reshaped", "_Transposed", "_Concatenated", "_Pure"} <= kinds


def test_direct_arithmetic_and_activations() -> None:
    """Each node run without its operator gives what the operator gives, and where it cannot
    (operands that do not broadcast) the handler's error, naming the node."""
    nodes = [
        helper.make_node("Sub", ["x", "c"], ["a"]),
        helper.make_node("Div", ["a", "c"], ["b"]),
        helper.make_node("Sigmoid", ["b"], ["s"]),
        helper.make_node("Tanh", ["b"], ["t"]),
        helper.make_node("Mul", ["s", "t"], ["m"]),
        helper.make_node("Relu", ["m"], ["r"]),
        helper.make_node("Add", ["r", "x"], ["y"], name="last_add"),
    ]
    c = numpy_helper.from_array(np.array([1.5, -2.0, 0.5, 3.0], np.float32), "c")
    rep = _direct_same(_int_model(nodes, [c], [None, 4], 2), _x((3, 4)))
    assert _fused_ops(rep).count("_Pure") == 7
    # 0-d operands, whose arithmetic NumPy answers with scalars: arrays again
    half = numpy_helper.from_array(np.array(0.5, np.float32), "c")
    _direct_same(_int_model(nodes, [half], [], 0), np.array(-2.0, np.float32))
    bad = [helper.make_node("Sub", ["x", "c"], ["y"], name="bad_sub")]
    with pytest.raises(SingaLiteError, match="bad_sub"):
        prepare(_int_model(bad, [c], [None, None], 2)).run([_x((3, 5))])


def test_type_checks_run_until_a_run_passes_them() -> None:
    """ONNX types are static: once a run on some input dtypes has passed every step's type
    check, runs on the same dtypes skip them; other dtypes are checked again."""
    from singa_lite.sonnx import validate

    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["y"])]
    rep = prepare(_model(nodes, {}, [3]), optimize=False)
    plan = Plan(rep.program, 2, ["y"], [])
    calls = []
    real = validate.InputTypes.check

    def counted(self, args):
        calls.append(self.node.op)
        return real(self, args)

    dtypes = (np.float32, np.float64, np.int32)
    x32, x64, xint = (tensor.Tensor(data=np.ones(3, t), requires_grad=False) for t in dtypes)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validate.InputTypes, "check", counted)
        plan.run({"x": x32}, None)
        assert calls == ["Neg", "Sigmoid"]
        plan.run({"x": x32}, None)
        assert calls == ["Neg", "Sigmoid"]  # skipped
        plan.run({"x": x64}, None)
        assert calls == ["Neg", "Sigmoid"] * 2  # new dtypes: checked
        with pytest.raises(OnnxError, match="Sigmoid"):  # Neg takes int32, Sigmoid does not
            plan.run({"x": xint}, None)
        plan.run({"x": x64}, None)
        assert len(calls) == 6  # the failed int32 run did not replace the dtypes that passed


@pytest.mark.parametrize(
    "starts, ends, axes, steps",
    [
        ([1], [100], [2], [1]),
        ([-1], [-100], [1], [-2]),
        ([0, 1], [2, -1], [0, -1], None),
        ([2], [1], None, None),
    ],
)
def test_direct_slice(starts: list, ends: list, axes: list | None, steps: list | None) -> None:
    ints = [_ints("s", starts), _ints("e", ends)]
    names = ["x", "s", "e"]
    if axes is not None:
        ints.append(_ints("a", axes))
        names.append("a")
    if steps is not None:
        ints.append(_ints("st", steps))
        names.append("st")
    model = _int_model([helper.make_node("Slice", names, ["y"])], ints, [3, None, None], 3)
    _direct_same(model, _x((3, 4, 5)))
    _direct_same(model, _x((3, 6, 7)))  # another shape: new slices


@pytest.mark.parametrize("shape, allowzero", [([0, -1], 0), ([5, 0, 4], 0), ([-1], 0), ([4, 15], 1)])
def test_direct_reshape(shape: list, allowzero: int) -> None:
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=allowzero)
    model = _int_model([node], [_ints("shape", shape)], [4, 3, 5], len(shape))
    _direct_same(model, _x((4, 3, 5)))


def test_direct_reshape_error_names_the_node() -> None:
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="bad_reshape")
    model = _int_model([node], [_ints("shape", [7, -1])], [None, 5], 2)
    rep = prepare(model)
    rep.run([_x((7, 5))])
    with pytest.raises(SingaLiteError, match="bad_reshape"):
        rep.run([_x((3, 5))])


def test_direct_transpose_squeeze_unsqueeze_concat() -> None:
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"]),
        helper.make_node("Unsqueeze", ["t", "ax"], ["u"]),
        helper.make_node("Squeeze", ["u", "ax"], ["q"]),
        helper.make_node("Transpose", ["q"], ["p"], perm=[1, 2, 0]),
        helper.make_node("Concat", ["p", "p"], ["y"], axis=-1),
    ]
    model = _int_model(nodes, [_ints("ax", [0, 3])], [2, 3, 4], 3)
    _direct_same(model, _x((2, 3, 4)))


def test_direct_steps_leave_integers_to_the_handlers() -> None:
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"]),
        helper.make_node("Mul", ["a", "x"], ["m"]),
        helper.make_node("Relu", ["m"], ["y"]),
    ]
    model = _int_model(nodes, [], [3, 4], 2, TensorProto.INT64)
    x = np.arange(-6, 6, dtype=np.int64).reshape(3, 4)
    np.testing.assert_array_equal(_direct_same(model, x).run([x])[0].numpy(), np.maximum(2 * x * x, 0))


def test_direct_matmul_folds_a_stack_of_rows() -> None:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((5, 2)).astype(np.float32), "w")
    _direct_same(_int_model(nodes, [w], [2, 3, 5], 3), _x((2, 3, 5)))


@pytest.mark.parametrize(
    "attrs, channels",
    [({"pads": [1, 1]}, 4), ({"strides": [2], "dilations": [2]}, 4), ({"group": 2, "pads": [0, 2]}, 4),
     ({"auto_pad": "SAME_UPPER"}, 4), ({"group": 4}, 4)],
)  # fmt: skip
def test_direct_conv1d(attrs: dict, channels: int) -> None:
    rng = np.random.default_rng(4)
    group = attrs.get("group", 1)
    w = numpy_helper.from_array(
        rng.standard_normal((6 if group != 4 else 4, channels // group, 3)).astype(np.float32), "w"
    )
    b = numpy_helper.from_array(rng.standard_normal(w.dims[0]).astype(np.float32), "b")
    model = _int_model(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], [w, b], [None, channels, None], 3
    )
    rep = _direct_same(model, _x((1, channels, 9)))
    assert "_Conv1d" in _fused_ops(rep)
    _direct_same(model, _x((2, channels, 9)))  # a batch: the Conv handler
    _direct_same(model, _x((1, channels, 12)))  # another length: checked again


def test_direct_conv1d_error_names_the_node() -> None:
    w = numpy_helper.from_array(np.ones((2, 3, 3), np.float32), "w")
    b = numpy_helper.from_array(np.zeros(2, np.float32), "b")
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv1d")
    rep = prepare(_int_model([node], [w, b], [1, None, None], 3))
    rep.run([_x((1, 3, 5))])
    with pytest.raises(SingaLiteError, match="conv1d"):
        rep.run([_x((1, 4, 5))])


# -- static shapes -------------------------------------------------------------------------------
def _channel_split(dims: list, value_info: list = ()) -> object:
    """ShuffleNetV2's exported channel split: Shape -> Gather -> Div -> Slice, then Concat."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape_of_x"),
        helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
        helper.make_node("Div", ["c", "two"], ["half"]),
        helper.make_node("Slice", ["x", "zero", "half", "one"], ["a"]),
        helper.make_node("Slice", ["x", "half", "big", "one"], ["b"]),
        helper.make_node("Relu", ["b"], ["rb"]),
        helper.make_node("Concat", ["rb", "a"], ["y"], axis=1),
    ]
    ints = [_ints("zero", [0]), _ints("one", [1]), _ints("two", [2]), _ints("big", [1 << 30])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(dims))],
        ints,
        value_info=list(value_info),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_static_shapes_fold_a_channel_split() -> None:
    model = _channel_split([1, 8, 3, 3])
    rep = _direct_same(model, _x((1, 8, 3, 3)))
    kinds = _fused_ops(rep)
    assert "_ShapeCheck" in kinds and kinds.count("_Sliced") == 2
    assert [n.op for n in rep.inference_program.nodes] == ["Shape", "Slice", "Slice", "Relu", "Concat"]
    # a stale value_info of the model's own is not believed: the shapes are inferred again
    stale = [
        helper.make_tensor_value_info("s", TensorProto.INT64, [7]),
        helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 99, 3, 3]),
    ]
    _direct_same(_channel_split([1, 8, 3, 3], stale), _x((1, 8, 3, 3)))


def test_static_shapes_leave_open_dims_to_each_run() -> None:
    rep = prepare(_channel_split(["n", 8, None, 3]))
    assert "_ShapeCheck" not in _fused_ops(rep)
    for shape in ((1, 8, 2, 3), (3, 8, 5, 3)):
        x = _x(shape)
        np.testing.assert_allclose(rep.run([x])[0].numpy(), _ort(_channel_split(["n", 8, None, 3]), x)[0])


def test_static_shape_check_names_the_node_where_inference_disagrees() -> None:
    """Were shape inference and a handler ever to disagree, the run fails, naming the Shape
    node, instead of computing with the folded value."""
    program = prepare(_channel_split([1, 8, 3, 3]), optimize=False).program
    program.shape_inputs = {"x": (1, 6, 3, 3)}  # as if inference had said so
    optimized = fusion.optimize(program)
    with pytest.raises(OnnxError, match=r"shape_of_x.*shape inference gave"):
        optimized.run(program.feeds([_x((1, 8, 3, 3))]))

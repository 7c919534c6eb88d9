"""The inference-program rewrites of ``sonnx.fusion`` against the unfused program and onnxruntime.

Each rewrite is checked where it applies (the handlers it swaps in, the result) and where one of
its conditions fails (it must leave the graph as written, and the result must not change); then
the pass interface: ``fusion.optimize`` with chosen passes, and ``prepare(..., optimize=False)``.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa_lite import autograd, tensor
from singa_lite.errors import OnnxError
from singa_lite.sonnx import SingaBackend, fusion, prepare
from singa_lite.sonnx.fusion import _Applied, _ClampHandler, _ConcatInto
from singa_lite.sonnx.import_ops import HANDLERS
from singa_lite.sonnx.import_ops.nn import PackedConv

_TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _model(
    nodes: list, inits: dict, x_shape: list, outputs: tuple = ("y",), dtype: type = np.float32
) -> object:
    ttype = _TYPES[dtype]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", ttype, x_shape)],
        [helper.make_tensor_value_info(name, ttype, [None] * len(x_shape)) for name in outputs],
        [numpy_helper.from_array(v.astype(dtype), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _check(model: object, x: np.ndarray) -> object:
    """Run ``model`` fused (twice: buffers must not leak between runs), unfused and, for
    float32, on onnxruntime; all outputs must agree to 1e-5 of their largest value."""
    rep = prepare(model)
    fused = [t.numpy() for t in rep.run([x])]
    again = [t.numpy() for t in rep.run([x])]
    with autograd.no_grad():
        plain = [t.numpy() for t in rep.program.run(rep.program.feeds([x]))]
    refs = [plain, again]
    if x.dtype == np.float32:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])  # type: ignore[attr-defined]
        refs.append(sess.run(None, {"x": x}))
    tol = 1e-5 if x.dtype == np.float32 else 1e-12
    for ref in refs:
        for a, b in zip(fused, ref):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * float(np.abs(b).max()))
    return rep


def _kinds(rep: object) -> list[str]:
    return [type(h).__name__ for h in rep.inference_program.handlers]  # type: ignore[attr-defined]


def _bn(prefix: str, x: str, y: str, c: int, rng: np.random.Generator, inits: dict) -> object:
    inits.update(
        {
            f"{prefix}s": rng.uniform(0.5, 2, c),
            f"{prefix}b": rng.standard_normal(c),
            f"{prefix}m": rng.standard_normal(c),
            f"{prefix}v": rng.uniform(0.1, 3, c),
        }
    )
    names = [x, f"{prefix}s", f"{prefix}b", f"{prefix}m", f"{prefix}v"]
    return helper.make_node("BatchNormalization", names, [y], epsilon=1e-3)


# -- BN -> Relu -> 1x1 Conv as max(x, t) -> Conv' --------------------------------------------
def _bn_relu_conv(rng: np.random.Generator, dtype: type = np.float32, bias: bool = True, **conv: object):
    inits: dict = {"W": rng.standard_normal((4, 6, 1, 1))}
    if bias:
        inits["B"] = rng.standard_normal(4)
    nodes = [
        _bn("bn", "x", "n", 6, rng, inits),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("Conv", ["r", "W", "B"] if bias else ["r", "W"], ["y"], **conv),
    ]
    return nodes, inits


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_bn_relu_conv1x1_becomes_a_clamp_and_a_folded_conv(dtype: type, bias: bool) -> None:
    rng = np.random.default_rng(1)
    nodes, inits = _bn_relu_conv(rng, dtype, bias, strides=[2, 1])
    model = _model(nodes, inits, ["n", 6, "h", "w"], dtype=dtype)
    rep = _check(model, rng.standard_normal((1, 6, 5, 7)).astype(dtype))
    handlers = rep.inference_program.handlers  # type: ignore[attr-defined]
    assert isinstance(handlers[0], _ClampHandler) and isinstance(handlers[1], _Applied)
    assert isinstance(handlers[2], PackedConv)
    _check(model, rng.standard_normal((2, 6, 3, 3)).astype(dtype))


def _negative_scale(nodes: list, inits: dict) -> tuple[list, dict]:
    inits = dict(inits, bns=np.where(np.arange(6) == 2, -0.7, inits["bns"]))
    return nodes, inits


def _padded(nodes: list, inits: dict) -> tuple[list, dict]:
    return [*nodes[:2], helper.make_node("Conv", ["r", "W", "B"], ["y"], pads=[1, 1, 1, 1])], inits


def _kernel_3x3(nodes: list, inits: dict) -> tuple[list, dict]:
    return nodes, dict(inits, W=np.random.default_rng(2).standard_normal((4, 6, 3, 3)))


def _grouped(nodes: list, inits: dict) -> tuple[list, dict]:
    conv = helper.make_node("Conv", ["r", "W", "B"], ["y"], group=2)
    return [*nodes[:2], conv], dict(inits, W=inits["W"][:, :3])


def _relu_read_twice(nodes: list, inits: dict) -> tuple[list, dict]:
    conv = helper.make_node("Conv", ["r", "W", "B"], ["c"])
    pool = helper.make_node("GlobalAveragePool", ["r"], ["p"])
    add = helper.make_node("Add", ["c", "p"], ["y"])
    rng = np.random.default_rng(2)
    return [*nodes[:2], conv, pool, add], dict(
        inits, W=rng.standard_normal((6, 6, 1, 1)), B=rng.standard_normal(6)
    )


@pytest.mark.parametrize("variant", [_negative_scale, _padded, _kernel_3x3, _grouped, _relu_read_twice])
def test_bn_relu_conv_is_not_folded_when_the_identity_does_not_hold(variant: object) -> None:
    rng = np.random.default_rng(3)
    nodes, inits = variant(*_bn_relu_conv(rng))  # type: ignore[operator]
    rep = _check(_model(nodes, inits, [1, 6, 5, 5]), rng.standard_normal((1, 6, 5, 5)).astype(np.float32))
    kinds = _kinds(rep)
    assert kinds[:2] == ["_AffineHandler", "_InPlaceHandler"] and "_ClampHandler" not in kinds


def test_relu_output_as_graph_output_is_not_folded() -> None:
    rng = np.random.default_rng(4)
    nodes, inits = _bn_relu_conv(rng)
    rep = _check(
        _model(nodes, inits, [1, 6, 4, 4], outputs=("y", "r")),
        rng.standard_normal((1, 6, 4, 4)).astype(np.float32),
    )
    assert _kinds(rep)[:2] == ["_AffineHandler", "_InPlaceHandler"]  # r is its own array: n is not returned


def test_clamp_on_a_wrong_input_fails_like_the_unfused_graph() -> None:
    rng = np.random.default_rng(5)
    nodes, inits = _bn_relu_conv(rng)
    rep = prepare(_model(nodes, inits, ["n", 6, "h", "w"]))
    x = tensor.Tensor(data=rng.standard_normal((2, 6, 5)).astype(np.float32), requires_grad=False)
    # run() refuses the 3-D input against the declared 4-D one; the program itself (which
    # SONNXModel runs) meets it, and its fused Clamp must fail as the plain graph does.
    with pytest.raises(Exception, match="Conv"):
        rep.inference_program.run({"x": x})  # type: ignore[attr-defined]


# -- densenet's concat chains --------------------------------------------------------------------
def _dense_block(rng: np.random.Generator, layers: int, c0: int = 3, growth: int = 2, axis: int = 1):
    """``c_j = Concat(c_{j-1}, Conv(Relu(c_{j-1})))``: densenet's growing concatenation."""
    inits: dict = {}
    nodes = []
    prev, channels = "x", c0
    for j in range(layers):
        inits[f"W{j}"] = rng.standard_normal((growth, channels, 3, 3))
        nodes += [
            helper.make_node("Relu", [prev], [f"r{j}"]),
            helper.make_node("Conv", [f"r{j}", f"W{j}"], [f"b{j}"], pads=[1, 1, 1, 1]),
            helper.make_node("Concat", [prev, f"b{j}"], [f"c{j}"], axis=axis),
        ]
        prev, channels = f"c{j}", channels + growth
    nodes.append(helper.make_node("Relu", [prev], ["y"]))
    return nodes, inits


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch", [1, 2])
def test_concat_chain_writes_into_one_buffer(dtype: type, batch: int) -> None:
    rng = np.random.default_rng(6)
    nodes, inits = _dense_block(rng, 4)
    x = rng.standard_normal((batch, 3, 5, 4)).astype(dtype)
    rep = _check(_model(nodes, inits, [batch, 3, 5, 4], dtype=dtype), x)
    chained = [h for h in rep.inference_program.handlers if isinstance(h, _ConcatInto)]  # type: ignore[attr-defined]
    assert [h.extends for h in chained] == [False, True, True, True]
    assert {h.total for h in chained} == {11}
    prog = rep.inference_program  # type: ignore[attr-defined]
    with autograd.no_grad():  # every link is a view of the last concat's buffer
        _, c1, c3 = (t.data for t in prog.run(prog.feeds([x]), aux_output=["c1", "c3"]))
    assert c1.base is c3 and c3.base is None


def test_concat_chain_along_the_last_axis_of_3d_tensors() -> None:
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("Concat", ["x", "x"], ["c0"], axis=-1)]
    for j in range(1, 4):
        nodes += [
            helper.make_node("Neg", [f"c{j - 1}"], [f"n{j}"]),
            helper.make_node("Concat", [f"c{j - 1}", f"n{j}", "x"], [f"c{j}"], axis=-1),
        ]
    nodes.append(helper.make_node("Identity", ["c3"], ["y"]))
    rep = _check(_model(nodes, {}, [2, 3, 2]), rng.standard_normal((2, 3, 2)).astype(np.float32))
    assert _kinds(rep).count("_ConcatInto") == 4


def test_concat_read_by_two_concats_is_not_extended_twice() -> None:
    rng = np.random.default_rng(8)
    nodes, inits = _dense_block(rng, 3)
    # c0 extended by c1 and, again, by a second concat: each must get its own channels
    nodes[-1:] = [
        helper.make_node("Concat", ["c0", "x"], ["d"], axis=1),
        helper.make_node("Relu", ["c2"], ["r"]),
        helper.make_node("ReduceSum", ["d"], ["s"], keepdims=1),
        helper.make_node("Add", ["r", "s"], ["y"]),
    ]
    rep = _check(_model(nodes, inits, [1, 3, 4, 4]), rng.standard_normal((1, 3, 4, 4)).astype(np.float32))
    kinds = _kinds(rep)
    assert "_ConcatInto" in kinds  # c1 -> c2 still chains
    concat_of_c0 = [
        h
        for n, h in zip(rep.inference_program.nodes, rep.inference_program.handlers)  # type: ignore[attr-defined]
        if n.op == "Concat" and n.inputs[0] == "c0"
    ]
    assert all(not isinstance(h, _ConcatInto) or not h.extends for h in concat_of_c0)


def test_concat_chain_stops_at_a_graph_output() -> None:
    rng = np.random.default_rng(9)
    nodes, inits = _dense_block(rng, 3)
    model = _model(nodes, inits, [1, 3, 4, 4], outputs=("y", "c1"))
    rep = _check(model, rng.standard_normal((1, 3, 4, 4)).astype(np.float32))
    # c1 is returned: c2 must not extend it, so the chain is c0 -> c1, and c1 is its whole buffer
    chained = [h for h in rep.inference_program.handlers if isinstance(h, _ConcatInto)]  # type: ignore[attr-defined]
    assert [h.extends for h in chained] == [False, True] and chained[0].total == 7
    assert rep.run([rng.standard_normal((1, 3, 4, 4)).astype(np.float32)])[1].data.base is None


def test_concat_chain_falls_back_when_the_input_outgrows_the_inferred_size() -> None:
    rng = np.random.default_rng(10)
    nodes = [helper.make_node("Concat", ["x", "x"], ["c0"], axis=1)]
    nodes += [
        helper.make_node("Concat", ["c0", "x"], ["c1"], axis=1),
        helper.make_node("Relu", ["c1"], ["y"]),
    ]
    rep = prepare(_model(nodes, {}, [1, 2, 3]))
    assert _kinds(rep).count("_ConcatInto") == 2
    # run() rejects inputs that break the declared shape; the program itself (which SONNXModel
    # runs) still meets them: wider runs the plain concat, narrower a part of the buffer.
    program = rep.inference_program  # type: ignore[attr-defined]
    for channels in (2, 3, 1):
        x = rng.standard_normal((1, channels, 3)).astype(np.float32)
        (y,) = program.run({"x": tensor.Tensor(data=x, requires_grad=False)})
        np.testing.assert_array_equal(y.numpy(), np.maximum(np.concatenate([x, x, x], 1), 0))


def test_concat_with_an_unknown_size_is_left_alone() -> None:
    nodes = [
        helper.make_node("Concat", ["x", "x"], ["c0"], axis=1),
        helper.make_node("Concat", ["c0", "x"], ["y"], axis=1),
    ]
    rep = _check(_model(nodes, {}, [1, "c", 3]), np.ones((1, 2, 3), np.float32))
    assert "_ConcatInto" not in _kinds(rep)


# -- average pool before a 1x1 conv ------------------------------------------------------------
def _conv_pool(rng: np.random.Generator, conv: dict | None = None, **pool: object) -> tuple[list, dict]:
    inits = {"W": rng.standard_normal((4, 6, 1, 1)), "B": rng.standard_normal(4)}
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Conv", ["r", "W", "B"], ["c"], **(conv or {})),
        helper.make_node("AveragePool", ["c"], ["y"], **({"kernel_shape": [2, 2], "strides": [2, 2]} | pool)),
    ]
    return nodes, inits


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_average_pool_runs_before_a_pointwise_conv(dtype: type) -> None:
    rng = np.random.default_rng(12)
    nodes, inits = _conv_pool(rng)
    rep = _check(
        _model(nodes, inits, [1, 6, 6, 5], dtype=dtype), rng.standard_normal((1, 6, 6, 5)).astype(dtype)
    )
    assert [n.op for n in rep.inference_program.nodes] == ["Relu", "AveragePool", "Conv"]  # type: ignore[attr-defined]


def test_global_average_pool_runs_before_a_pointwise_conv() -> None:
    rng = np.random.default_rng(13)
    nodes, inits = _conv_pool(rng)
    nodes[2] = helper.make_node("GlobalAveragePool", ["c"], ["y"])
    rep = _check(_model(nodes, inits, [2, 6, 4, 3]), rng.standard_normal((2, 6, 4, 3)).astype(np.float32))
    assert [n.op for n in rep.inference_program.nodes] == ["Relu", "GlobalAveragePool", "Conv"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "conv, pool",
    [
        ({"strides": [2, 2]}, {}),  # a strided conv skips pixels the pool would average
        ({"pads": [1, 1, 1, 1]}, {}),  # the padded border gets the bias only
        ({}, {"pads": [1, 1, 1, 1]}),  # windows over padding weigh the bias by less than one
        ({}, {"ceil_mode": 1, "count_include_pad": 1}),
    ],
)
def test_average_pool_stays_after_the_conv_when_they_do_not_commute(conv: dict, pool: dict) -> None:
    rng = np.random.default_rng(14)
    nodes, inits = _conv_pool(rng, conv, **pool)
    rep = _check(_model(nodes, inits, [1, 6, 7, 5]), rng.standard_normal((1, 6, 7, 5)).astype(np.float32))
    assert [n.op for n in rep.inference_program.nodes] == ["Relu", "Conv", "AveragePool"]  # type: ignore[attr-defined]


def test_conv_output_read_elsewhere_keeps_the_pool_after_it() -> None:
    rng = np.random.default_rng(15)
    nodes, inits = _conv_pool(rng)
    model = _model(nodes, inits, [1, 6, 4, 4], outputs=("y", "c"))
    rep = _check(model, rng.standard_normal((1, 6, 4, 4)).astype(np.float32))
    assert [n.op for n in rep.inference_program.nodes] == ["Relu", "Conv", "AveragePool"]  # type: ignore[attr-defined]


# -- Conv -> Relu / Clip as one node -------------------------------------------------------------
def _conv_act(
    rng: np.random.Generator, act: str, group: int = 1, k: int = 3, out: int = 6
) -> tuple[list, dict]:
    """A ``k x k`` conv (depthwise where ``group`` is 6) read by ``act``: Relu, Clip(0, 6) as
    opset-13 inputs, or Clip with an open lower end."""
    inits: dict = {"W": rng.standard_normal((out, 6 // group, k, k)), "B": rng.standard_normal(out)}
    pads = [k // 2] * 4
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=pads, group=group)]
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    else:
        inits["hi"] = np.array(0.5 if act == "ClipHigh" else 6.0)
        lo = "" if act == "ClipHigh" else "lo"
        if lo:
            inits["lo"] = np.array(0.0)
        nodes.append(helper.make_node("Clip", ["c", lo, "hi"], ["y"]))
    return nodes, inits


@pytest.mark.parametrize("act", ["Relu", "Clip", "ClipHigh"])
@pytest.mark.parametrize(
    "group, k, out, batch, size",
    [(1, 3, 6, 1, 6), (1, 1, 12, 1, 50), (1, 1, 3, 1, 5), (1, 3, 6, 2, 6), (6, 3, 6, 1, 30), (6, 3, 6, 2, 5)],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_runs_its_activation(
    act: str, group: int, k: int, out: int, batch: int, size: int, dtype: type
) -> None:
    """Batch 1 by GEMM (im2col in bands, a widening 1x1 conv in bands with the bias row, a
    narrowing one on the image), a batch, depthwise (the compiled loops where they run): one
    node, clamped as the separate Relu or Clip would."""
    rng = np.random.default_rng(40)
    nodes, inits = _conv_act(rng, act, group, k, out)
    shape = [batch, 6, size, size]
    rep = _check(_model(nodes, inits, shape, dtype=dtype), rng.standard_normal(shape).astype(dtype))
    program = rep.inference_program  # type: ignore[attr-defined]
    assert [n.op for n in program.nodes] == ["Conv"]
    assert (
        program.handlers[0].bounds
        == {"Relu": (0.0, np.inf), "Clip": (0.0, 6.0), "ClipHigh": (-np.inf, 0.5)}[act]
    )


def test_conv_read_twice_or_as_an_output_keeps_its_activation_apart() -> None:
    rng = np.random.default_rng(41)
    nodes, inits = _conv_act(rng, "Relu", 6)
    x = rng.standard_normal((1, 6, 30, 30)).astype(np.float32)
    rep = _check(_model(nodes, inits, [1, 6, 30, 30], outputs=("y", "c")), x)
    assert [n.op for n in rep.inference_program.nodes] == ["Conv", "Relu"]  # type: ignore[attr-defined]
    twice = [*nodes, helper.make_node("Neg", ["c"], ["z"])]
    rep = _check(_model(twice, inits, [1, 6, 30, 30], outputs=("y", "z")), x)
    assert [n.op for n in rep.inference_program.nodes] == ["Conv", "Relu", "Neg"]  # type: ignore[attr-defined]


def test_clip_of_bounds_computed_at_run_time_is_not_fused() -> None:
    rng = np.random.default_rng(42)
    nodes, inits = _conv_act(rng, "Clip", 6)
    nodes.insert(1, helper.make_node("ReduceMin", ["x"], ["xmin"], keepdims=0))
    nodes[-1] = helper.make_node("Clip", ["c", "xmin", "hi"], ["y"])
    del inits["lo"]
    rep = _check(_model(nodes, inits, [1, 6, 30, 30]), rng.standard_normal((1, 6, 30, 30)).astype(np.float32))
    assert "Clip" in [n.op for n in rep.inference_program.nodes]  # type: ignore[attr-defined]


# -- the pass interface: optimize() and prepare(optimize=False) ------------------------------------
def _conv_bn_relu(rng: np.random.Generator) -> tuple[list, dict]:
    inits: dict = {"W": rng.standard_normal((4, 3, 3, 3)), "B": rng.standard_normal(4)}
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        _bn("bn", "c", "n", 4, rng, inits),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    return nodes, inits


# Each model makes at least one pass fire: folded BN + packed conv + in-place Relu; the clamp;
# the pool moved before the conv; the concat chain.
_PASS_MODELS = {
    "conv_bn_relu": (_conv_bn_relu, (1, 3, 6, 5)),
    "bn_relu_conv1x1": (_bn_relu_conv, (1, 6, 5, 7)),
    "conv1x1_pool": (_conv_pool, (1, 6, 6, 4)),
    "dense_block": (lambda rng: _dense_block(rng, 3), (1, 3, 5, 4)),
}


@pytest.mark.parametrize("name", sorted(_PASS_MODELS))
def test_optimize_false_gives_the_same_outputs_as_the_rewritten_program(name: str) -> None:
    build, shape = _PASS_MODELS[name]
    rng = np.random.default_rng(20)
    nodes, inits = build(rng)
    model = _model(nodes, inits, list(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    fused, plain = prepare(model), prepare(model, optimize=False)
    assert _kinds(fused) != _kinds(plain)  # some pass fired on this model
    (want,), (got,) = fused.run([x]), plain.run([x])
    np.testing.assert_allclose(
        got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5 * float(np.abs(want.numpy()).max())
    )
    (backend_out,) = SingaBackend.prepare(model, optimize=False).run([x])
    np.testing.assert_array_equal(backend_out, got.numpy())


@pytest.mark.parametrize("name", sorted(_PASS_MODELS))
def test_optimize_false_runs_the_nodes_as_the_model_writes_them(name: str) -> None:
    build, shape = _PASS_MODELS[name]
    nodes, inits = build(np.random.default_rng(21))
    model = _model(nodes, inits, list(shape))
    rep = prepare(model, optimize=False)
    program = rep.inference_program  # type: ignore[attr-defined]
    assert program is rep.program
    assert [n.op for n in program.nodes] == [n.op_type for n in nodes]
    assert program.handlers == [HANDLERS[n.op_type] for n in nodes]
    backend_rep = SingaBackend.prepare(model, optimize=False)
    assert backend_rep.rep.inference_program is backend_rep.rep.program  # type: ignore[attr-defined]


def test_optimize_runs_the_passes_given_in_order_and_leaves_the_program_alone() -> None:
    rng = np.random.default_rng(22)
    nodes, inits = _conv_bn_relu(rng)
    rep = prepare(_model(nodes, inits, [1, 3, 6, 5]), optimize=False)
    program = rep.program  # type: ignore[attr-defined]
    folded = fusion.optimize(program, [fusion.FoldAffineChains()])
    assert [n.op for n in folded.nodes] == ["Conv", "Relu"]
    assert folded.handlers == [HANDLERS["Conv"], HANDLERS["Relu"]]  # not packed, not in place
    assert [n.op for n in program.nodes] == ["Conv", "BatchNormalization", "Relu"]
    everything = fusion.optimize(program)
    assert [type(h).__name__ for h in everything.handlers] == ["PackedConv"]  # the Relu runs inside
    assert everything.handlers[0].bounds == (0.0, np.inf)
    without = [p for p in fusion.PASSES if p.name != "conv_activation"]
    in_place = fusion.optimize(program, without)
    assert [type(h).__name__ for h in in_place.handlers] == ["PackedConv", "_InPlaceHandler"]
    assert len({p.name for p in fusion.PASSES}) == len(fusion.PASSES)


def test_a_pass_that_fails_unforeseen_is_named_in_an_onnx_error() -> None:
    class Broken:
        name = "broken"

        def run(self, program: object) -> None:
            raise IndexError("list index out of range")

    nodes, inits = _conv_bn_relu(np.random.default_rng(23))
    rep = prepare(_model(nodes, inits, [1, 3, 6, 5]))
    with pytest.raises(OnnxError, match="'broken' failed on this model: IndexError"):
        fusion.optimize(rep.program, [Broken()])  # type: ignore[attr-defined]

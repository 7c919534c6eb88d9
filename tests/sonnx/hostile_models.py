"""Hostile ONNX models: resource bombs, schema violations, external-data tricks, structural
mutations of small real graphs and bit flips of their bytes (issue 19).

``hostile_runner`` writes them to disk and tries each in a child process; ``test_hostile_onnx``
uses the bombs and schema cases directly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

CANARY = b"CANARY-" * 64  # 448 bytes: 112 floats, 56 int64, 448 uint8
LIMITS = {"max_tensor_bytes": 16 << 20, "max_total_bytes": 64 << 20, "max_model_bytes": 16 << 20}


@dataclass
class Case:
    """One hostile model: ``must_refuse`` where only a typed refusal is right."""

    name: str
    kind: str
    model: bytes
    inputs: list[np.ndarray] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # name -> target ("{cwd}"/"{outside}" expanded)
    must_refuse: bool = True


# -- building graphs ----------------------------------------------------------------------------
def V(name: str, shape: Any, elem: int = T.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def out(name: str, rank: int, elem: int = T.FLOAT) -> onnx.ValueInfoProto:
    """A graph output of known rank and unknown dims."""
    return V(name, [f"{name}_{i}" for i in range(rank)], elem)


def init(name: str, arr: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr), name)


def model(nodes: list, inputs: list, outputs: list, inits: list = (), opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "hostile", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def node(op: str, ins: list, outs: list, **attrs: Any) -> onnx.NodeProto:
    return helper.make_node(op, ins, outs, name=f"{op.lower()}_node", **attrs)


def _bytes(m: onnx.ModelProto) -> bytes:
    return m.SerializeToString()


def f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


# -- resource bombs: each at prepare time (constant arguments) and at run time (graph inputs) ----
def _bomb(
    name: str,
    op: str,
    x: np.ndarray | None,
    args: dict[str, np.ndarray],
    rank: int,
    indices: bool = False,
    **attrs: Any,
) -> list[Case]:
    """``op`` applied to ``x`` (a graph input, if given) and ``args`` (initializers: folded at
    prepare time; graph inputs: checked at run time)."""
    cases = []
    for when in ("fold", "run"):
        names = (["x"] if x is not None else []) + list(args)
        ins = [V("x", list(x.shape))] if x is not None else []
        inits, feeds = [], [x] if x is not None else []
        for k, v in args.items():
            if when == "fold":
                inits.append(init(k, v))
            else:
                ins.append(V(k, list(v.shape), helper.np_dtype_to_tensor_dtype(v.dtype)))
                feeds.append(v)
        if x is None and not ins:
            ins = [V("unused", [1])]
            feeds = [np.zeros(1, np.float32)]
        outs = [out("y", rank)] + ([out("yi", rank, T.INT64)] if indices else [])
        m = model([node(op, names, [o.name for o in outs], **attrs)], ins, outs, inits)
        cases.append(Case(f"bomb-{name}-{when}", "bomb", _bytes(m), feeds))
    return cases


def bombs(side: int = 10**6, tensor_limit: int = LIMITS["max_tensor_bytes"]) -> list[Case]:
    """Ops asked for about ``side**2`` elements (10^12 by default) by a few bytes of model; the
    "many outputs" and "widened" cases each stay under ``tensor_limit`` per tensor and go over
    it (or over 4x it, the total) together."""
    i64 = np.int64
    sq = np.array([side, side], i64)
    x4 = f32(1, 1, 4, 4)
    q = max(side // 4, 2)
    cases = [
        *_bomb("constantofshape", "ConstantOfShape", None, {"shape": sq}, 2),
        *_bomb("expand", "Expand", f32(1, 1), {"shape": sq}, 2),
        *_bomb("tile", "Tile", f32(2, 2), {"repeats": sq}, 2),
        *_bomb(
            "range",
            "Range",
            None,
            {"s": np.array(0, i64), "l": np.array(side * side, i64), "d": np.array(1, i64)},
            1,
        ),
        *_bomb(
            "range-float",
            "Range",
            None,
            {
                "s": np.array(0, np.float32),
                "l": np.array(side * side, np.float32),
                "d": np.array(0.5, np.float32),
            },
            1,
        ),
        *_bomb("pad", "Pad", f32(2, 2), {"pads": np.array([side // 2] * 4, i64)}, 2),
        *_bomb(
            "onehot",
            "OneHot",
            None,
            {
                "i": np.arange(side, dtype=i64) % 7,
                "d": np.array([side], i64),
                "v": np.array([0, 1], np.float32),
            },
            2,
        ),
        *_bomb(
            "resize",
            "Resize",
            x4,
            {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, q, q], np.float32)},
            4,
        ),
        *_bomb(
            "resize-sizes",
            "Resize",
            x4,
            {
                "roi": np.zeros(0, np.float32),
                "scales": np.zeros(0, np.float32),
                "sizes": np.array([1, 1, side, side], i64),
            },
            4,
        ),
        *_bomb("topk", "TopK", f32(1000), {"k": np.array([side * side], i64)}, 1, indices=True),
        *_bomb("broadcast-add", "Add", f32(side, 1), {"b": f32(1, side)}, 2),
        *_bomb("matmul-outer", "MatMul", f32(side, 1), {"b": f32(1, side)}, 2),
        *_bomb("gather", "Gather", f32(1, side), {"i": np.zeros(side, i64)}, 2),
        *_bomb("conv-pads", "Conv", x4, {"w": f32(1, 1, 3, 3)}, 4, pads=[side // 2] * 4),
        *_bomb(
            "conv-im2col", "Conv", f32(1, 1, 64, 64), {"w": f32(1, 1, 64, 64)}, 4, pads=[min(side, 2000)] * 4
        ),
        *_bomb("convtranspose-strides", "ConvTranspose", x4, {"w": f32(1, 1, 3, 3)}, 4, strides=[q, q]),
        *_bomb(
            "convtranspose-output-shape",
            "ConvTranspose",
            x4,
            {"w": f32(1, 1, 3, 3)},
            4,
            output_shape=[side, side],
        ),
        *_bomb("maxpool-kernel", "MaxPool", x4, {}, 4, kernel_shape=[side, side], pads=[side // 2] * 4),
    ]
    # Upsample (opset 9: scales as an input)
    m = model(
        [node("Upsample", ["x", "s"], ["y"])],
        [V("x", [1, 1, 4, 4])],
        [out("y", 4)],
        [init("s", np.array([1, 1, q, q], np.float32))],
        opset=9,
    )
    cases.append(Case("bomb-upsample-fold", "bomb", _bytes(m), [x4]))
    # a chain of doubling Concats from a 4-element tensor, to about side**2 elements
    steps = max(1, (side * side // 4).bit_length())
    nodes, prev = [], "c0"
    for i in range(steps):
        nodes.append(helper.make_node("Concat", [prev, prev], [f"c{i + 1}"], axis=0, name=f"cat{i}"))
        prev = f"c{i + 1}"
    nodes.append(helper.make_node("Add", [prev, "x"], ["y"], name="add"))
    m = model(nodes, [V("x", [1])], [out("y", 1)], [init("c0", np.ones(4, np.float32))])
    cases.append(Case("bomb-concat-chain-fold", "bomb", _bytes(m), [np.ones(1, np.float32)]))
    nodes[0] = helper.make_node("Concat", ["x", "x"], ["c1"], axis=0, name="cat0")
    m = model(nodes[:-1] + [helper.make_node("Identity", [prev], ["y"])], [V("x", [4])], [out("y", 1)])
    cases.append(Case("bomb-concat-chain-run", "bomb", _bytes(m), [np.ones(4, np.float32)]))
    # 64 outputs, each half the per-tensor limit: 32 times it together
    nodes = [helper.make_node("ConstantOfShape", ["s"], [f"o{i}"], name=f"cos{i}") for i in range(64)]
    m = model(nodes, [V("s", [1], T.INT64)], [out(f"o{i}", 1) for i in range(64)])
    cases.append(Case("bomb-many-outputs-run", "bomb", _bytes(m), [np.array([tensor_limit // 8], i64)]))
    # an int8 initializer under the limit, cast to float32: twice over it
    w = np.zeros(tensor_limit // 2, np.int8)
    m = model([node("Cast", ["w"], ["y"], to=T.FLOAT)], [V("x", [1])], [out("y", 1)], [init("w", w)])
    cases.append(Case("bomb-widened-int8", "bomb", _bytes(m), [np.ones(1, np.float32)]))
    return cases


# -- schema violations onnx.checker lets through ----------------------------------------------
def schema_cases() -> list[Case]:
    x4 = V("x", [1, 2, 5, 5])
    feed4 = [f32(1, 2, 5, 5)]
    w, b3 = init("W", f32(3, 2, 3, 3)), init("B", f32(3))
    bn = [init(n, np.ones(2, np.float32)) for n in ("s", "b", "m", "v")]
    cases = {
        "conv-kernel-shape": (
            model([node("Conv", ["x", "W"], ["y"], kernel_shape=[2, 2])], [x4], [out("y", 4)], [w]),
            feed4,
        ),
        # with a constant bias, so that the inference rewrite packs weight and bias at prepare time
        "conv-group-0": (
            model([node("Conv", ["x", "W", "B"], ["y"], group=0)], [x4], [out("y", 4)], [w, b3]),
            feed4,
        ),
        "conv-group-negative": (
            model([node("Conv", ["x", "W", "B"], ["y"], group=-2)], [x4], [out("y", 4)], [w, b3]),
            feed4,
        ),
        "conv-group-not-dividing": (
            model([node("Conv", ["x", "W", "B"], ["y"], group=3)], [x4], [out("y", 4)], [w, b3]),
            feed4,
        ),
        "conv-strides-0": (
            model([node("Conv", ["x", "W"], ["y"], strides=[0, 0])], [x4], [out("y", 4)], [w]),
            feed4,
        ),
        "conv-bias-length": (
            model(
                [node("Conv", ["x", "W", "B"], ["y"])],
                [x4],
                [out("y", 4)],
                [w, init("B", np.ones(5, np.float32))],
            ),
            feed4,
        ),
        "lstm-sideways": (
            model(
                [node("LSTM", ["x", "W", "R"], ["y"], hidden_size=2, direction="sideways")],
                [V("x", [3, 1, 2])],
                [out("y", 4)],
                [init("W", f32(1, 8, 2)), init("R", f32(1, 8, 2))],
            ),
            [f32(3, 1, 2)],
        ),
        "lstm-hidden-size": (
            model(
                [node("LSTM", ["x", "W", "R"], ["y"], hidden_size=10**9)],
                [V("x", [3, 1, 2])],
                [out("y", 4)],
                [init("W", f32(1, 8, 2)), init("R", f32(1, 8, 2))],
            ),
            [f32(3, 1, 2)],
        ),
        "batchnorm-training-1-output": (
            model(
                [node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], training_mode=1)],
                [x4],
                [out("y", 4)],
                bn,
            ),
            feed4,
        ),
        "batchnorm-lengths": (
            model(
                [node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
                [x4],
                [out("y", 4)],
                bn[:3] + [init("v", np.ones(3, np.float32))],
            ),
            feed4,
        ),
        "gemm-int-weight": (
            model(
                [node("Gemm", ["x", "W"], ["y"])],
                [V("x", [1, 2])],
                [out("y", 2)],
                [init("W", np.ones((2, 2), np.int64))],
            ),
            [f32(1, 2)],
        ),
        "slice-float-starts": (
            model(
                [node("Slice", ["x", "s", "e"], ["y"])],
                [V("x", [4])],
                [out("y", 1)],
                [init("s", np.array([1.5], np.float32)), init("e", np.array([3.0], np.float32))],
            ),
            [f32(4)],
        ),
        "topk-negative-k": (
            model(
                [node("TopK", ["x", "k"], ["v", "i"])],
                [V("x", [4])],
                [out("v", 1), out("i", 1, T.INT64)],
                [init("k", np.array([-1], np.int64))],
            ),
            [f32(4)],
        ),
        "relu-opset-1": (
            model([node("Relu", ["x"], ["y"])], [V("x", [2])], [out("y", 1)], opset=1),
            [f32(2)],
        ),
        "range-delta-0": (
            model(
                [node("Range", ["s", "l", "d"], ["y"])],
                [V("x", [1])],
                [out("y", 1)],
                [
                    init("s", np.array(0, np.int64)),
                    init("l", np.array(5, np.int64)),
                    init("d", np.array(0, np.int64)),
                ],
            ),
            [f32(1)],
        ),
    }
    out_cases = [Case(f"schema-{k}", "schema", _bytes(m), feeds) for k, (m, feeds) in cases.items()]
    for code in (0, 999):
        vi = V("x", [2])
        vi.type.tensor_type.elem_type = code
        m = model([node("Relu", ["x"], ["y"])], [vi], [out("y", 1)])
        out_cases.append(Case(f"schema-input-elem-type-{code}", "schema", _bytes(m), [f32(2)]))
    m = model([node("Relu", ["x"], ["y"])], [V("x", [2])], [out("y", 1)])
    m.opset_import.append(helper.make_opsetid("ai.onnx", 13))
    out_cases.append(Case("schema-duplicate-opset", "schema", _bytes(m), [f32(2)]))
    m = model([node("Add", ["x", "w"], ["y"])], [V("x", [2])], [out("y", 1)], [init("w", f32(2))])
    m.graph.initializer[0].data_type = 999
    out_cases.append(Case("schema-initializer-type-999", "schema", _bytes(m), [f32(2)]))
    for key, value in (
        ("singa_lite.params", "[[[[" * 2000),
        ("singa_lite.params", "{not json"),
        ("singa_lite.params", '{"a": 1}'),
        ("singa_lite.params", '["nope"]'),
        ("singa_lite.states", "17"),
    ):
        m = model([node("Add", ["x", "w"], ["y"])], [V("x", [2])], [out("y", 1)], [init("w", f32(2))])
        helper.set_model_props(m, {"singa_lite.params": "[]", key: value})
        out_cases.append(Case(f"schema-metadata-{len(out_cases)}", "schema", _bytes(m), [f32(2)]))
    return out_cases


# -- external data -----------------------------------------------------------------------------
def _external(
    location: str, dims: list, offset: int | None = None, length: int | None = None, elem: int = T.FLOAT
) -> onnx.ModelProto:
    t = onnx.TensorProto()
    t.name, t.data_type = "w", elem
    t.dims.extend(dims)
    t.data_location = T.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            e = t.external_data.add()
            e.key, e.value = key, str(value)
    return model([node("Identity", ["w"], ["y"])], [V("x", [1])], [out("y", len(dims), elem)], [t])


def external_cases() -> list[Case]:
    """Initializers whose external data tries to leave the model's directory."""
    one = [np.zeros(1, np.float32)]
    cases = [
        Case("extdata-cwd-canary", "external", _bytes(_external("canary.bin", [112])), one),
        Case("extdata-dotdot", "external", _bytes(_external("../../cwd/canary.bin", [112])), one),
        Case("extdata-absolute", "external", _bytes(_external("{cwd}/canary.bin", [112])), one),
        Case(
            "extdata-symlinked-dir",
            "external",
            _bytes(_external("link/canary.bin", [112])),
            one,
            links={"link": "{cwd}"},
        ),
        Case(
            "extdata-symlinked-file",
            "external",
            _bytes(_external("w.bin", [112])),
            one,
            links={"w.bin": "{outside}/secret.bin"},
        ),
        Case(
            "extdata-proc-self",
            "external",
            _bytes(_external("../../../../proc/self/environ", [16], elem=T.UINT8)),
            one,
        ),
        Case(
            "extdata-length-mismatch",
            "external",
            _bytes(_external("w.bin", [4], length=8)),
            one,
            files={"w.bin": b"\0" * 64},
        ),
        Case(
            "extdata-past-end",
            "external",
            _bytes(_external("w.bin", [4], offset=60, length=16)),
            one,
            files={"w.bin": b"\0" * 64},
        ),
        Case(
            "extdata-huge-dims",
            "external",
            _bytes(_external("w.bin", [10**6, 10**6])),
            one,
            files={"w.bin": b"\0" * 64},
        ),
        Case(
            "extdata-negative-offset",
            "external",
            _bytes(_external("w.bin", [4], offset=-16)),
            one,
            files={"w.bin": b"\0" * 64},
        ),
        Case("extdata-fifo-or-dir", "external", _bytes(_external(".", [4])), one),
        Case(
            "extdata-string",
            "external",
            _bytes(_external("w.bin", [4], elem=T.STRING)),
            one,
            files={"w.bin": b"\0" * 64},
        ),
    ]
    return cases


def legit_external_case() -> Case:
    """A well-formed model whose weights sit beside it: must load, whatever the cwd is."""
    data = np.arange(8, dtype=np.float32)
    m = model([node("Add", ["x", "w"], ["y"])], [V("x", [4])], [out("y", 1)])
    t = onnx.TensorProto()
    t.name, t.data_type = "w", T.FLOAT
    t.dims.append(4)
    t.data_location = T.EXTERNAL
    for key, value in (("location", "weights.bin"), ("offset", "16"), ("length", "16")):
        e = t.external_data.add()
        e.key, e.value = key, value
    m.graph.initializer.append(t)
    return Case(
        "extdata-legit-beside-the-model",
        "external",
        _bytes(m),
        [np.zeros(4, np.float32)],
        files={"weights.bin": data.tobytes()},
        must_refuse=False,
    )


# -- small real graphs, and their mutations ----------------------------------------------------
def base_models() -> list[tuple[onnx.ModelProto, list[np.ndarray]]]:
    """A few small graphs of the kinds real models are made of."""
    cnn = model(
        [
            node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
            node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
            node("Relu", ["n"], ["r"]),
            node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            node("Flatten", ["p"], ["f"]),
            node("Gemm", ["f", "gw", "gb"], ["g"], transB=1),
            node("Softmax", ["g"], ["y"], axis=-1),
        ],
        [V("x", [1, 3, 8, 8])],
        [out("y", 2)],
        [
            init("cw", f32(4, 3, 3, 3)),
            init("cb", f32(4)),
            *(init(k, np.ones(4, np.float32)) for k in "sbmv"),
            init("gw", f32(5, 64)),
            init("gb", f32(5)),
        ],
    )
    shapes = model(
        [
            node("Shape", ["x"], ["s"]),
            node("Gather", ["s", "i0"], ["n"], axis=0),
            node("Concat", ["n", "m1"], ["t"], axis=0),
            node("Reshape", ["x", "t"], ["r"]),
            node("ConstantOfShape", ["t2"], ["z"], value=init("v", np.array([1.0], np.float32))),
            node("Expand", ["r", "e"], ["ex"]),
            node("Tile", ["ex", "rep"], ["ti"]),
            node("Add", ["ti", "z"], ["y"]),
        ],
        [V("x", [2, 3, 4])],
        [out("y", 2)],
        [
            init("i0", np.array([0], np.int64)),
            init("m1", np.array([-1], np.int64)),
            init("t2", np.array([2, 12], np.int64)),
            init("e", np.array([2, 12], np.int64)),
            init("rep", np.array([1, 1], np.int64)),
        ],
    )
    resize = model(
        [
            node("Resize", ["x", "", "sc"], ["r"], mode="linear"),
            node("Pad", ["r", "pd"], ["p"]),
            node("Slice", ["p", "st", "en", "ax"], ["sl"]),
            node("Transpose", ["sl"], ["tr"], perm=[0, 1, 3, 2]),
            node("ReduceMean", ["tr"], ["y"], axes=[2, 3], keepdims=0),
        ],
        [V("x", [1, 2, 4, 4])],
        [out("y", 2)],
        [
            init("sc", np.array([1, 1, 2, 2], np.float32)),
            init("pd", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
            init("st", np.array([1], np.int64)),
            init("en", np.array([9], np.int64)),
            init("ax", np.array([2], np.int64)),
        ],
        opset=17,
    )
    lstm = model(
        [node("LSTM", ["x", "W", "R", "B"], ["y", "yh"], hidden_size=3)],
        [V("x", [4, 2, 5])],
        [out("y", 4), out("yh", 3)],
        [init("W", f32(1, 12, 5)), init("R", f32(1, 12, 3)), init("B", f32(1, 24))],
    )
    dense = model(
        [
            node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
            node("Concat", ["x", "a"], ["c1"], axis=1),
            node("Conv", ["c1", "w2"], ["b"], pads=[1, 1, 1, 1]),
            node("Concat", ["c1", "b"], ["c2"], axis=1),
            node("ConvTranspose", ["c2", "wt"], ["u"], strides=[2, 2]),
            node("GlobalAveragePool", ["u"], ["y"]),
        ],
        [V("x", [1, 2, 6, 6])],
        [out("y", 4)],
        [init("w1", f32(2, 2, 3, 3)), init("w2", f32(2, 4, 3, 3)), init("wt", f32(6, 2, 2, 2))],
    )
    misc = model(
        [
            node("TopK", ["x", "k"], ["v", "i"], axis=-1),
            node("OneHot", ["i", "d", "ov"], ["oh"], axis=-1),
            node("Range", ["r0", "r1", "r2"], ["rg"]),
            node("Cast", ["rg"], ["rf"], to=T.FLOAT),
            node("ReduceSum", ["oh"], ["s"], keepdims=0),
            node("Greater", ["v", "th"], ["g"]),
            node("Where", ["g", "v", "th"], ["w"]),
            node("MatMul", ["w", "mm"], ["y"]),
        ],
        [V("x", [3, 6])],
        [out("y", 2), out("s", 0), out("rf", 1)],
        [
            init("k", np.array([2], np.int64)),
            init("d", np.array(6, np.int64)),
            init("ov", np.array([0, 1], np.float32)),
            init("r0", np.array(0, np.int64)),
            init("r1", np.array(5, np.int64)),
            init("r2", np.array(1, np.int64)),
            init("th", np.array(0.0, np.float32)),
            init("mm", f32(2, 3)),
        ],
    )
    return [
        (cnn, [f32(1, 3, 8, 8)]),
        (shapes, [f32(2, 3, 4)]),
        (resize, [f32(1, 2, 4, 4)]),
        (lstm, [f32(4, 2, 5)]),
        (dense, [f32(1, 2, 6, 6)]),
        (misc, [f32(3, 6)]),
    ]


_HOSTILE_INTS = [0, -1, -7, 2**31 - 1, -(2**31), 2**62, 10**6, 10**9, 3, 100]
_HOSTILE_FLOATS = [float("nan"), float("inf"), -float("inf"), 0.0, -1.0, 1e30, 1e-30]
_OPS = [
    "Relu",
    "Conv",
    "Concat",
    "Reshape",
    "Expand",
    "Tile",
    "Pad",
    "Resize",
    "Gather",
    "MatMul",
    "Add",
    "ConstantOfShape",
    "TopK",
    "OneHot",
    "Range",
    "Slice",
    "LSTM",
    "BatchNormalization",
    "Where",
    "Split",
]


def _mutate(m: onnx.ModelProto, rnd: random.Random) -> str:
    """One random structural mutation of ``m`` in place; returns what it did."""
    g = m.graph
    choice = rnd.randrange(11)
    nodes_with_attrs = [n for n in g.node if n.attribute]
    if choice == 0 and nodes_with_attrs:
        a = rnd.choice(rnd.choice(nodes_with_attrs).attribute)
        if a.type == onnx.AttributeProto.INT:
            a.i = rnd.choice(_HOSTILE_INTS)
        elif a.type == onnx.AttributeProto.INTS and len(a.ints):
            a.ints[rnd.randrange(len(a.ints))] = rnd.choice(_HOSTILE_INTS)
        elif a.type == onnx.AttributeProto.FLOAT:
            a.f = rnd.choice(_HOSTILE_FLOATS)
        elif a.type == onnx.AttributeProto.STRING:
            a.s = rnd.choice([b"sideways", b"", b"\xff\xfe", b"NOTSET", b"cubic"])
        return f"attr {a.name}"
    if choice == 1 and g.initializer:
        t = rnd.choice(g.initializer)
        try:
            if t.data_location == T.EXTERNAL:
                raise ValueError("external")
            arr = numpy_helper.to_array(t)
        except Exception:  # an earlier mutation damaged it already
            return "none"
        if arr.dtype.kind in "iu":
            flat = arr.astype(np.int64).reshape(-1)
            if flat.size:
                flat[rnd.randrange(flat.size)] = rnd.choice(_HOSTILE_INTS)
            new = numpy_helper.from_array(flat.reshape(arr.shape), t.name)
        else:
            flat = arr.astype(np.float32).reshape(-1)
            if flat.size:
                flat[rnd.randrange(flat.size)] = rnd.choice(_HOSTILE_FLOATS)
            new = numpy_helper.from_array(flat.reshape(arr.shape), t.name)
        t.CopyFrom(new)
        return f"values {t.name}"
    if choice == 2 and g.initializer:
        t = rnd.choice(g.initializer)
        if rnd.random() < 0.5:
            t.data_type = rnd.choice([0, 2, 3, 7, 8, 10, 11, 16, 22, 999])
        else:
            del t.dims[:]
            t.dims.extend(rnd.choice([[], [0], [10**9], [-3], [2, 2], [10**6, 10**6]]))
        return f"tensor {t.name}"
    if choice == 3 and g.node:
        n = rnd.choice(g.node)
        names = (
            [v.name for v in g.input]
            + [t.name for t in g.initializer]
            + [o for x in g.node for o in x.output]
        )
        if n.input:
            n.input[rnd.randrange(len(n.input))] = rnd.choice(names + ["missing", ""])
        return f"rewire {n.name}"
    if choice == 4 and g.node:
        n = rnd.choice(g.node)
        n.op_type = rnd.choice(_OPS)
        return f"op {n.op_type}"
    if choice == 5 and g.node:
        i = rnd.randrange(len(g.node))
        if rnd.random() < 0.5:
            del g.node[i]
        else:
            g.node.insert(i, g.node[i])
        return "node count"
    if choice == 6:
        m.opset_import[0].version = rnd.choice([1, 6, 7, 9, 11, 13, 18, 21, 30, 999])
        return "opset"
    if choice == 7 and g.input:
        v = rnd.choice(g.input)
        if rnd.random() < 0.5:
            v.type.tensor_type.elem_type = rnd.choice([0, 6, 7, 9, 10, 11, 999])
        else:
            dims = v.type.tensor_type.shape.dim
            if len(dims):
                dims[rnd.randrange(len(dims))].dim_value = rnd.choice([0, 1, 10**9])
        return "input type"
    if choice == 8 and nodes_with_attrs:
        n = rnd.choice(nodes_with_attrs)
        del n.attribute[rnd.randrange(len(n.attribute))]
        return f"drop attr {n.name}"
    if choice == 9 and g.initializer:
        t = rnd.choice(g.initializer)
        t.ClearField("raw_data")
        t.ClearField("float_data")
        t.ClearField("int64_data")
        t.data_location = T.EXTERNAL
        for key, value in (
            ("location", rnd.choice(["canary.bin", "../../cwd/canary.bin", "w.bin", "link/canary.bin"])),
            ("offset", str(rnd.choice([0, 8, -4, 10**12]))),
            ("length", str(rnd.choice([4, 16, 448, 10**12]))),
        ):
            e = t.external_data.add()
            e.key, e.value = key, value
        return f"external {t.name}"
    if choice == 10 and g.node:
        n = rnd.choice(g.node)
        n.attribute.append(
            helper.make_attribute(
                rnd.choice(["axis", "pads", "group", "kernel_shape", "perm", "to"]),
                rnd.choice([0, -5, 10**9, [10**6, 10**6], [1, -1]]),
            )
        )
        return f"add attr {n.name}"
    return "none"


def mutations(count: int, seed: int = 0) -> list[Case]:
    rnd = random.Random(seed)
    bases = base_models()
    cases = []
    for i in range(count):
        base, feeds = bases[i % len(bases)]
        m = onnx.ModelProto()
        m.CopyFrom(base)
        what = [_mutate(m, rnd) for _ in range(rnd.randint(1, 3))]
        links = {"link": "{cwd}"} if "external" in " ".join(what) else {}
        files = {"w.bin": CANARY}  # a file inside the model's directory (legitimate to read)
        cases.append(
            Case(
                f"mutation-{i}-{'+'.join(w.split()[0] for w in what)}",
                "mutation",
                _bytes(m),
                feeds,
                files,
                links,
                must_refuse=False,
            )
        )
    return cases


def bitflips(count: int, seed: int = 1) -> list[Case]:
    rnd = random.Random(seed)
    bases = base_models()
    cases = []
    for i in range(count):
        base, feeds = bases[i % len(bases)]
        data = bytearray(base.SerializeToString())
        for _ in range(rnd.randint(1, 8)):
            data[rnd.randrange(len(data))] ^= 1 << rnd.randrange(8)
        cases.append(Case(f"bitflip-{i}", "bitflip", bytes(data), feeds, must_refuse=False))
    return cases


def all_cases(n_mutations: int = 400, n_bitflips: int = 100) -> list[Case]:
    return [
        *bombs(side=10**5),
        *schema_cases(),
        *external_cases(),
        legit_external_case(),
        *mutations(n_mutations),
        *bitflips(n_bitflips),
    ]

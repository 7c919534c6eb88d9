"""ONNX LSTM/GRU/RNN with ``sequence_lens`` shorter than the sequence: against onnxruntime,
against onnx's reference run item by item, gradients, and bad lengths.

onnx's reference implementation ignores ``sequence_lens``; it agrees with the ONNX semantics
(and onnxruntime) when it runs one item cut to its own length, which is how it is used here.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from opcheck import check_grad

from singa_lite import sonnx, tensor
from singa_lite.errors import OnnxError
from singa_lite.sonnx.import_ops.base import Node
from singa_lite.sonnx.import_ops.nn import GRU, LSTM, RNN

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
HANDLERS = {"LSTM": LSTM, "GRU": GRU, "RNN": RNN}
LENS = [3, 5, 0, 1, 5, 2]  # T = 5: full, partial, empty and single-step items, unsorted
# (op, attributes, with peepholes)
CASES = [
    ("LSTM", {}, False),
    ("LSTM", {}, True),
    ("GRU", {"linear_before_reset": 0}, False),
    ("GRU", {"linear_before_reset": 1}, False),
    ("RNN", {}, False),
    ("RNN", {"activations": ["Relu"]}, False),
]


def _state_names(op):
    return ["initial_h", "initial_c"] if op == "LSTM" else ["initial_h"]


def _feeds(op, direction, lens, with_states, with_P, T, I=2, H=3, seed=0, dtype=np.float32):
    """Random inputs of a one-node model, keyed by the ONNX input names."""
    rng = np.random.default_rng(seed)
    D = 2 if direction == "bidirectional" else 1
    k = GATES[op]
    N = len(lens)

    def arr(*s):
        return (rng.standard_normal(s) * 0.6).astype(dtype)

    feeds = {"X": arr(T, N, I), "W": arr(D, k * H, I), "R": arr(D, k * H, H), "B": arr(D, 2 * k * H)}
    feeds["sequence_lens"] = np.asarray(lens, np.int32)
    if with_states:
        for name in _state_names(op):
            feeds[name] = arr(D, N, H)
    if with_P:
        feeds["P"] = arr(D, 3 * H)
    return feeds


def _model(op, direction, feeds, H=3, **attrs):
    """A one-node model whose inputs are the graph inputs ``feeds``, with every output."""
    names = ["X", "W", "R", "B", "sequence_lens", *_state_names(op), "P"][: 8 if op == "LSTM" else 6]
    names = [nm if nm in feeds else "" for nm in names]
    while not names[-1]:
        names.pop()
    inputs = [
        helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for nm, a in feeds.items()
    ]
    outs = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    ftype = helper.np_dtype_to_tensor_dtype(feeds["X"].dtype)
    dims = {"Y": ["T", "D", "N", "H"], "Y_h": ["D", "N", "H"], "Y_c": ["D", "N", "H"]}
    outputs = [helper.make_tensor_value_info(nm, ftype, dims[nm]) for nm in outs]
    if "activations" in attrs and direction == "bidirectional":
        attrs = {**attrs, "activations": attrs["activations"] * 2}
    node = helper.make_node(op, names, outs, hidden_size=H, direction=direction, **attrs)
    graph = helper.make_graph([node], "rnn_lengths", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def _singa(model, feeds):
    return [tensor.to_numpy(y) for y in sonnx.prepare(model).run(feeds)]


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _reference_item(op, direction, feeds, b, attrs):
    """onnx's reference on item ``b`` alone, cut to its length: ``(Y (L, D, 1, H), Y_h, ...)``."""
    L = int(feeds["sequence_lens"][b])
    one = {k: v for k, v in feeds.items() if k != "sequence_lens"}
    one["X"] = feeds["X"][:L, b : b + 1]
    for name in _state_names(op):
        if name in one:
            one[name] = feeds[name][:, b : b + 1]
    return ReferenceEvaluator(_model(op, direction, one, **attrs)).run(None, one)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize(("op", "attrs", "with_P"), CASES)
@pytest.mark.parametrize("with_states", [False, True])
def test_against_onnxruntime_and_reference(op, attrs, with_P, direction, with_states):
    feeds = _feeds(op, direction, LENS, with_states, with_P, T=5)
    model = _model(op, direction, feeds, **attrs)
    got = _singa(model, feeds)
    want = _ort(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    Y, *finals = got
    for b, L in enumerate(LENS):
        assert not Y[L:, :, b].any(), "Y must be zero past an item's end"
        if L == 0:  # onnxruntime's states of an empty item are zero, not the initial ones
            assert not any(f[:, b].any() for f in finals)
            continue
        if "activations" in attrs:
            continue  # onnx's reference RNN knows Tanh only; onnxruntime checked Relu above
        ref_Y, *ref_finals = _reference_item(op, direction, feeds, b, attrs)
        np.testing.assert_allclose(Y[:L, :, b : b + 1], ref_Y, rtol=1e-5, atol=1e-5)
        for f, r in zip(finals, ref_finals):
            np.testing.assert_allclose(f[:, b : b + 1], r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lens", [[2, 2, 2], [0, 0, 0], [4, 0, 4], [1, 4, 3]])
def test_uniform_empty_and_full_lengths(lens):
    """One stretch shorter than T, nothing to run, full and empty items only."""
    feeds = _feeds("LSTM", "bidirectional", lens, True, True, T=4)
    model = _model("LSTM", "bidirectional", feeds)
    want = _ort(model, feeds)
    for g, w in zip(_singa(model, feeds), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_full_lengths_match_no_lengths():
    """Lengths that all equal T take the plain sequence op: the same as no sequence_lens."""
    feeds = _feeds("GRU", "bidirectional", [4, 4, 4], True, False, T=4)
    with_lens = _singa(_model("GRU", "bidirectional", feeds), feeds)
    del feeds["sequence_lens"]
    for a, b in zip(with_lens, _singa(_model("GRU", "bidirectional", feeds), feeds)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_batch_first_layout(op):
    """``layout=1`` (onnxruntime has no kernel for it) equals layout 0 with the axes swapped."""
    feeds = _feeds(op, "bidirectional", LENS, True, op == "LSTM", T=5)
    want = _singa(_model(op, "bidirectional", feeds), feeds)
    batch_first = dict(feeds)
    batch_first["X"] = feeds["X"].transpose(1, 0, 2)
    for name in _state_names(op):
        batch_first[name] = feeds[name].transpose(1, 0, 2)
    got = _singa(_model(op, "bidirectional", batch_first, layout=1), batch_first)
    np.testing.assert_allclose(got[0], want[0].transpose(2, 0, 1, 3), rtol=1e-6, atol=1e-6)
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w.transpose(1, 0, 2), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("op", "attrs", "with_P", "direction"),
    [
        ("LSTM", {}, True, "bidirectional"),
        ("GRU", {"linear_before_reset": 0}, False, "reverse"),
        ("RNN", {}, False, "forward"),
    ],
)
def test_gradients(dev, op, attrs, with_P, direction):
    """Float64 gradients through the handler reach X, W, R, B, P and the initial states."""
    lens = [3, 0, 1, 2]
    feeds = _feeds(op, direction, lens, True, with_P, T=3, I=2, H=2, dtype=np.float64)
    node = Node(_model(op, direction, feeds, H=2, **attrs).graph.node[0], 14)
    names = [k for k in feeds if k != "sequence_lens"]
    seq_lens = tensor.Tensor(data=feeds["sequence_lens"], device=dev, requires_grad=False)

    def run(X, W, R, B, *rest):
        named = dict(zip(names[4:], rest))
        states = [named[s] for s in _state_names(op)]
        extra = [named["P"]] if with_P else []
        return HANDLERS[op](node, X, W, R, B, seq_lens, *states, *extra)

    check_grad(run, [feeds[k] for k in names], dev)


@pytest.mark.parametrize(
    ("lens", "match"),
    [
        ([1, 6, 2], r"must lie in \[0, 5\]"),
        ([1, -1, 2], r"must lie in \[0, 5\]"),
        ([1, 2], r"must have shape \(3,\)"),
    ],
)
def test_bad_lengths(lens, match):
    feeds = _feeds("GRU", "forward", [1, 2, 3], False, False, T=5)
    feeds["sequence_lens"] = np.asarray(lens, np.int32)
    with pytest.raises(OnnxError, match=match):
        _singa(_model("GRU", "forward", feeds), feeds)


@pytest.mark.parametrize("computed", [False, True], ids=["lens-input", "lens-from-mask"])
def test_graph_mode_follows_changing_lengths(computed: bool) -> None:
    """A SONNXModel step recorded with some ``sequence_lens`` is not replayed for others (the
    lengths decide which ops run); it is recorded again, with a warning, and equals eager mode.
    The lengths are a graph input, or computed in the graph from a 0/1 mask."""
    import warnings

    from onnx import TensorProto, numpy_helper

    from singa_lite import ops, opt

    T, N, I, H = 5, 4, 3, 2
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal(s) * 0.5).astype(np.float32), name)
        for name, s in (("W", (1, 4 * H, I)), ("R", (1, 4 * H, H)), ("B", (1, 8 * H)))
    ]
    nodes = [
        helper.make_node("LSTM", ["X", "W", "R", "B", "L"], ["Y", "Yh"], hidden_size=H, direction="reverse")
    ]
    second = helper.make_tensor_value_info("L", TensorProto.INT32, [N])
    if computed:
        inits.append(numpy_helper.from_array(np.array([0], np.int64), "axes"))
        nodes[:0] = [
            helper.make_node("ReduceSum", ["M", "axes"], ["S"], keepdims=0),
            helper.make_node("Cast", ["S"], ["L"], to=TensorProto.INT32),
        ]
        second = helper.make_tensor_value_info("M", TensorProto.FLOAT, [T, N])
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [T, N, I]), second],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, [T, 1, N, H]),
            helper.make_tensor_value_info("Yh", TensorProto.FLOAT, [1, N, H]),
        ],
        initializer=inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])

    class Lengths(sonnx.SONNXModel):
        def train_one_batch(self, x, lens, target):  # type: ignore[override]
            y = self.forward(x, lens)[1]
            loss = ops.mse_loss(y, target)
            self.optimizer(loss)
            return y, loss

    def second_input(lengths: list[int]) -> tensor.Tensor:
        if not computed:
            return tensor.Tensor(data=np.array(lengths, np.int32), requires_grad=False)
        return tensor.Tensor(
            data=(np.arange(T)[:, None] < np.array(lengths)[None, :]).astype(np.float32), requires_grad=False
        )

    def make(use_graph: bool) -> Lengths:
        m = Lengths(proto)
        m.set_optimizer(opt.SGD(lr=0.1))
        x = tensor.Tensor(data=np.zeros((T, N, I), np.float32), requires_grad=False)
        m.compile([x, second_input([T] * N)], is_train=True, use_graph=use_graph)
        return m

    X = tensor.Tensor(data=rng.standard_normal((T, N, I)).astype(np.float32), requires_grad=False)
    target = tensor.Tensor(data=np.zeros((1, N, H), np.float32), requires_grad=False)
    lens = [[5, 3, 2, 0], [5, 3, 2, 0], [1, 5, 5, 2], [5, 5, 5, 5]]
    eager, graphed = make(False), make(True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recorded = []
        for L in lens:
            want = tensor.to_numpy(eager(X, second_input(L), target)[0])
            got = tensor.to_numpy(graphed(X, second_input(L), target)[0])
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
            recorded.append(graphed._graph)
    assert recorded[1] is recorded[0]  # the same lengths replay the recorded step
    assert recorded[2] is not recorded[1]  # new lengths record it again
    assert sum("sequence_lens" in str(w.message) for w in caught) == 1  # said once

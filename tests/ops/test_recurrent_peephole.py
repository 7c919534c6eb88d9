"""LSTM peephole weights ``P``: the op against a NumPy formula and onnx's reference evaluator
(through the importer), its float64 gradients (``dP`` included), and its bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from opcheck import check_forward, check_grad, run

from singa_lite import sonnx, tensor
from singa_lite.errors import DTypeError, ShapeError
from singa_lite.ops.recurrent import lstm, lstm_cell


# -- a NumPy reference written from ONNX's formulas, in singa_lite's layout (gates i, f, o, g) --
def _sig(a):
    return 1 / (1 + np.exp(-a))


def ref_peephole_cell(x, h, c, Wx, Wh, Bx, Bh, P):
    H = h.shape[1]
    a = x @ Wx + Bx + h @ Wh + Bh
    p_i, p_f, p_o = P[:H], P[H : 2 * H], P[2 * H :]
    i = _sig(a[:, :H] + p_i * c)
    f = _sig(a[:, H : 2 * H] + p_f * c)
    c_new = f * c + i * np.tanh(a[:, 3 * H :])
    o = _sig(a[:, 2 * H : 3 * H] + p_o * c_new)  # o sees the new cell state
    return o * np.tanh(c_new), c_new


def ref_peephole_lstm(x, h, c, Wx, Wh, Bx, Bh, P, reverse=False):
    ys = [None] * len(x)
    for t in range(len(x) - 1, -1, -1) if reverse else range(len(x)):
        h, c = ref_peephole_cell(x[t], h, c, Wx, Wh, Bx, Bh, P)
        ys[t] = h
    return np.stack(ys), h, c


def make_inputs(T, N, I, H, dtype, seed=0, cell=False):
    """x, h0, c0, Wx, Wh, Bx, Bh, P with values that keep the gates unsaturated."""
    rng = np.random.default_rng(seed)
    x_shape = (N, I) if cell else (T, N, I)
    shapes = [x_shape, (N, H), (N, H), (I, 4 * H), (H, 4 * H), (4 * H,), (4 * H,), (3 * H,)]
    return [(rng.standard_normal(s) * 0.7).astype(dtype) for s in shapes]


# -- the op --------------------------------------------------------------------------------
@given(
    T=st.integers(1, 4),
    N=st.integers(1, 3),
    I=st.integers(1, 4),
    H=st.integers(1, 4),
    dtype=st.sampled_from([np.float16, np.float32, np.float64]),
    reverse=st.booleans(),
)
def test_forward(dev, T, N, I, H, dtype, reverse):
    arrays = make_inputs(T, N, I, H, dtype)

    def ref(*a):
        outs = ref_peephole_lstm(*(v.astype(np.float64) for v in a), reverse=reverse)
        return tuple(o.astype(dtype) for o in outs)

    tol = 2e-2 if dtype == np.float16 else None
    check_forward(lambda *t: lstm(*t[:7], reverse=reverse, P=t[7]), ref, arrays, dev, rtol=tol, atol=tol)


def test_cell_forward(dev):
    arrays = make_inputs(1, 3, 2, 4, np.float64, cell=True)
    check_forward(lambda *t: lstm_cell(*t[:7], P=t[7]), ref_peephole_cell, arrays, dev)


def test_zero_peepholes_equal_none(dev):
    arrays = make_inputs(3, 2, 3, 4, np.float32)
    arrays[7][:] = 0
    with_p = run(lambda *t: lstm(*t[:7], P=t[7]), arrays, dev)
    without = run(lambda *t: lstm(*t[:7]), arrays[:7], dev)
    for a, b in zip(with_p, without):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_grad(dev, reverse):
    arrays = make_inputs(3, 2, 2, 2, np.float64, seed=1)
    check_grad(lambda *t: lstm(*t[:7], reverse=reverse, P=t[7]), arrays, dev)


def test_grad_of_P_alone(dev):
    """Only ``P`` wants a gradient: the other inputs' gradients are skipped, ``dP`` is not."""
    arrays = make_inputs(3, 2, 2, 3, np.float64, seed=2)
    check_grad(lambda *t: lstm(*t[:7], P=t[7]), arrays, dev, wrt=[7])


def test_cell_grad(dev):
    arrays = make_inputs(1, 2, 2, 2, np.float64, seed=3, cell=True)
    check_grad(lambda *t: lstm_cell(*t[:7], P=t[7]), arrays, dev)


def test_bad_P(dev):
    arrays = make_inputs(2, 2, 3, 4, np.float32)
    ts = [tensor.Tensor(data=a, device=dev, requires_grad=False) for a in arrays]
    with pytest.raises(ShapeError, match=r"P must have shape \(12,\)"):
        lstm(*ts[:7], P=tensor.Tensor(data=np.zeros(16, np.float32), device=dev, requires_grad=False))
    with pytest.raises(DTypeError, match="P must have the dtype"):
        lstm(*ts[:7], P=tensor.Tensor(data=np.zeros(12, np.float64), device=dev, requires_grad=False))


# -- through the importer, against onnx's reference implementation -------------------------
ONNX_INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


def _onnx_lstm(direction, feeds, H):
    """A one-node LSTM model whose inputs (P included) are the graph inputs ``feeds``."""
    names = [nm if nm in feeds else "" for nm in ONNX_INPUTS]
    inputs = [
        helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for nm, a in feeds.items()
    ]
    T, N, _ = feeds["X"].shape
    D = feeds["W"].shape[0]
    shapes = {"Y": (T, D, N, H), "Y_h": (D, N, H), "Y_c": (D, N, H)}
    outputs = [helper.make_tensor_value_info(nm, TensorProto.FLOAT, s) for nm, s in shapes.items()]
    node = helper.make_node("LSTM", names, ["Y", "Y_h", "Y_c"], hidden_size=H, direction=direction)
    graph = helper.make_graph([node], "lstm_peephole", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def _onnx_feeds(direction, with_states, with_lens, T, N, I, H, seed=0):
    rng = np.random.default_rng(seed)
    D = 2 if direction == "bidirectional" else 1

    def arr(*s):
        return (rng.standard_normal(s) * 0.7).astype(np.float32)

    feeds = {"X": arr(T, N, I), "W": arr(D, 4 * H, I), "R": arr(D, 4 * H, H), "B": arr(D, 8 * H)}
    if with_lens:
        feeds["sequence_lens"] = np.full(N, T, np.int32)
    if with_states:
        feeds["initial_h"], feeds["initial_c"] = arr(D, N, H), arr(D, N, H)
    feeds["P"] = arr(D, 3 * H)
    return feeds


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@given(
    T=st.integers(1, 4),
    N=st.integers(1, 3),
    I=st.integers(1, 3),
    H=st.integers(1, 4),
    with_states=st.booleans(),
    with_lens=st.booleans(),
)
def test_onnx_reference(dev, direction, T, N, I, H, with_states, with_lens):
    feeds = _onnx_feeds(direction, with_states, with_lens, T, N, I, H)
    model = _onnx_lstm(direction, feeds, H)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = sonnx.prepare(model, dev).run(feeds)
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        np.testing.assert_allclose(tensor.to_numpy(g), w, rtol=1e-5, atol=1e-5)


def test_sonnxmodel_trains_peepholes() -> None:
    """An imported LSTM's P is a named param of a ``SONNXModel`` and an optimizer updates it."""
    from onnx import numpy_helper

    from singa_lite import autograd, ops, opt

    feeds = _onnx_feeds("bidirectional", True, False, 3, 2, 3, 4)
    weights = {k: feeds.pop(k) for k in ("W", "R", "B", "P")}
    model = _onnx_lstm("bidirectional", {**feeds, **weights}, 4)
    graph = model.graph
    kept = [v for v in graph.input if v.name not in weights]
    del graph.input[:]
    graph.input.extend(kept)
    graph.initializer.extend(numpy_helper.from_array(a, k) for k, a in weights.items())
    want = ReferenceEvaluator(model).run(None, feeds)

    m = sonnx.SONNXModel(model)
    xs = [tensor.Tensor(data=feeds[k], requires_grad=False) for k in ("X", "initial_h", "initial_c")]
    got = m.forward(*xs)
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(tensor.to_numpy(g), w_, rtol=1e-5, atol=1e-5)
    params = m.get_params()
    assert "P" in params
    before = params["P"].numpy().copy()
    m.set_optimizer(opt.SGD(lr=0.1))
    autograd.training = True
    try:
        m.optimizer(ops.reduce_sum(m.forward(*xs)[0]))
    finally:
        autograd.training = False
    assert not np.allclose(m.get_params()["P"].numpy(), before)


@pytest.mark.parametrize("shape", [(12,), (1, 16), (1, 2, 6), (2, 12)])
def test_onnx_bad_P_shape(dev, shape) -> None:
    """A P that is not (num_directions, 3*hidden_size) is refused with the node named."""
    from singa_lite.errors import OnnxError

    feeds = _onnx_feeds("forward", False, False, 3, 2, 3, 4)
    feeds["P"] = np.zeros(shape, np.float32)
    model = _onnx_lstm("forward", feeds, 4)
    with pytest.raises(OnnxError, match="peephole weights P must have shape"):
        sonnx.prepare(model, dev).run(feeds)

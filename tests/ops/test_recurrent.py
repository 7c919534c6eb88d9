"""Recurrent ops: NumPy reference formulas, sequence == chained cells, gradient checks, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import _training, _weighted_sum, check_forward, check_grad, run, to_tensors

from singa_lite import autograd, tensor
from singa_lite.errors import ArgumentError, DTypeError, ShapeError
from singa_lite.ops.recurrent import gru, gru_cell, lstm, lstm_cell, rnn, rnn_cell

GATES = {"rnn": 1, "lstm": 4, "gru": 3}


# -- NumPy references, written from the formulas (not from the op code) -----------------------
def _sig(a):
    return 1 / (1 + np.exp(-a))


def ref_rnn_cell(x, h, Wx, Wh, Bx, Bh, nonlinearity="tanh"):
    a = x @ Wx + Bx + h @ Wh + Bh
    return np.tanh(a) if nonlinearity == "tanh" else np.maximum(a, 0)


def ref_lstm_cell(x, h, c, Wx, Wh, Bx, Bh):
    H = h.shape[1]
    a = x @ Wx + Bx + h @ Wh + Bh
    i, f, o = _sig(a[:, :H]), _sig(a[:, H : 2 * H]), _sig(a[:, 2 * H : 3 * H])
    g = np.tanh(a[:, 3 * H :])
    c_new = f * c + i * g
    return o * np.tanh(c_new), c_new


def ref_gru_cell(x, h, Wx, Wh, Bx, Bh, linear_before_reset=True):
    H = h.shape[1]
    xw = x @ Wx + Bx
    hw = h @ Wh + Bh
    z = _sig(xw[:, :H] + hw[:, :H])
    r = _sig(xw[:, H : 2 * H] + hw[:, H : 2 * H])
    if linear_before_reset:
        n = np.tanh(xw[:, 2 * H :] + r * hw[:, 2 * H :])
    else:
        n = np.tanh(xw[:, 2 * H :] + (r * h) @ Wh[:, 2 * H :] + Bh[2 * H :])
    return (1 - z) * n + z * h


def ref_sequence(cell, x, states, weights, reverse=False, **kw):
    """Loop ``cell`` over time; returns (y, *final states) like the sequence ops."""
    steps = range(len(x) - 1, -1, -1) if reverse else range(len(x))
    ys = [None] * len(x)
    for t in steps:
        out = cell(x[t], *states, *weights, **kw)
        states = out if isinstance(out, tuple) else (out,)
        ys[t] = states[0]
    return (np.stack(ys), *states)


REF_CELLS = {"rnn": ref_rnn_cell, "lstm": ref_lstm_cell, "gru": ref_gru_cell}
OP_CELLS = {"rnn": rnn_cell, "lstm": lstm_cell, "gru": gru_cell}
OP_SEQS = {"rnn": rnn, "lstm": lstm, "gru": gru}
VARIANTS = [
    ("rnn", {"nonlinearity": "tanh"}),
    ("rnn", {"nonlinearity": "relu"}),
    ("lstm", {}),
    ("gru", {"linear_before_reset": True}),
    ("gru", {"linear_before_reset": False}),
]
IDS = ["rnn-tanh", "rnn-relu", "lstm", "gru-lbr", "gru-onnx"]


def make_inputs(kind, T, N, I, H, dtype, seed=0, cell=False):
    """x, states, Wx, Wh, Bx, Bh with values of a size that keeps the gates unsaturated."""
    rng = np.random.default_rng(seed)
    G = GATES[kind] * H
    n_states = 2 if kind == "lstm" else 1
    shapes = [(N, I) if cell else (T, N, I)] + [(N, H)] * n_states + [(I, G), (H, G), (G,), (G,)]
    return [(rng.standard_normal(s) * 0.7).astype(dtype) for s in shapes]


def n_states(kind):
    return 2 if kind == "lstm" else 1


# -- forward against the references -------------------------------------------------------
@pytest.mark.parametrize(("kind", "kw"), VARIANTS, ids=IDS)
@given(
    T=st.integers(1, 4),
    N=st.integers(1, 3),
    I=st.integers(1, 4),
    H=st.integers(1, 4),
    dtype=st.sampled_from([np.float16, np.float32, np.float64]),
    reverse=st.booleans(),
)
def test_sequence_forward(dev, kind, kw, T, N, I, H, dtype, reverse):
    arrays = make_inputs(kind, T, N, I, H, dtype)
    k = n_states(kind)

    def fn(x, *rest):
        return OP_SEQS[kind](x, *rest, reverse=reverse, **kw)

    def ref(x, *rest):
        wide = [a.astype(np.float64) for a in (x, *rest)]
        outs = ref_sequence(REF_CELLS[kind], wide[0], wide[1 : 1 + k], wide[1 + k :], reverse, **kw)
        return tuple(o.astype(dtype) for o in outs)

    tol = 2e-2 if dtype == np.float16 else None
    check_forward(fn, ref, arrays, dev, rtol=tol, atol=tol)


@pytest.mark.parametrize(("kind", "kw"), VARIANTS, ids=IDS)
@given(
    N=st.integers(1, 3),
    I=st.integers(1, 4),
    H=st.integers(1, 4),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_cell_forward(dev, kind, kw, N, I, H, dtype):
    arrays = make_inputs(kind, 1, N, I, H, dtype, cell=True)
    check_forward(
        lambda *a: OP_CELLS[kind](*a, **kw),
        lambda *a: REF_CELLS[kind](*a, **kw),
        arrays,
        dev,
    )


def test_float32_stays_float32(dev):
    arrays = make_inputs("lstm", 3, 2, 3, 4, np.float32)
    with _training():
        ts = to_tensors(arrays, dev)
        outs = lstm(*ts)
        grads = autograd.gradients(_weighted_sum(outs, [dev.xp.ones(o.shape, np.float32) for o in outs]))
    assert all(o.dtype == np.float32 for o in outs)
    assert len(grads) == len(ts) and all(g.dtype == np.float32 for g in grads.values())


# -- the sequence ops equal their cells chained over time -----------------------------------
def _chained(kind, kw, xs, rest, reverse):
    """Cells chained over the per-step inputs ``xs``; returns the outputs and final states."""
    k = n_states(kind)
    states, weights = tuple(rest[:k]), rest[k:]
    ys = [None] * len(xs)
    for t in range(len(xs) - 1, -1, -1) if reverse else range(len(xs)):
        out = OP_CELLS[kind](xs[t], *states, *weights, **kw)
        states = out if isinstance(out, tuple) else (out,)
        ys[t] = states[0]
    return ys, states


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize(("kind", "kw"), VARIANTS, ids=IDS)
def test_sequence_equals_chained_cells(dev, kind, kw, reverse):
    T, N, I, H = 4, 3, 2, 3
    arrays = make_inputs(kind, T, N, I, H, np.float64, seed=1)
    rng = np.random.default_rng(2)
    w_y = rng.standard_normal((T, N, H))
    w_states = [rng.standard_normal((N, H)) for _ in range(n_states(kind))]
    xp = dev.xp
    with _training():
        ts = to_tensors(arrays, dev)
        y, *final = OP_SEQS[kind](*ts, reverse=reverse, **kw)
        weights = [xp.asarray(w) for w in (w_y, *w_states)]
        seq_grads = autograd.gradients(_weighted_sum((y, *final), weights))
        seq_outs = [tensor.to_numpy(o) for o in (y, *final)]
        seq_grads_np = [tensor.to_numpy(seq_grads[t]) for t in ts]

        # One leaf per time step, so the cells need no slicing op.
        xs = to_tensors(list(arrays[0]), dev)
        rest = to_tensors(arrays[1:], dev)
        ys, states = _chained(kind, kw, xs, rest, reverse)
        weights = [xp.asarray(w) for w in (*w_y, *w_states)]
        chain_grads = autograd.gradients(_weighted_sum((*ys, *states), weights))
        chain_outs = [np.stack([tensor.to_numpy(h) for h in ys])] + [tensor.to_numpy(s) for s in states]
        chain_grads_np = [np.stack([tensor.to_numpy(chain_grads[t]) for t in xs])]
        chain_grads_np += [tensor.to_numpy(chain_grads[t]) for t in rest]

    for a, b in zip(seq_outs, chain_outs):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    for i, (g1, g2) in enumerate(zip(seq_grads_np, chain_grads_np)):
        np.testing.assert_allclose(g1, g2, rtol=1e-10, atol=1e-12, err_msg=f"gradient of input {i}")


# -- float64 numerical gradient checks, every input ------------------------------------------
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize(("kind", "kw"), VARIANTS, ids=IDS)
def test_sequence_grad(dev, kind, kw, reverse):
    arrays = make_inputs(kind, 3, 2, 2, 2, np.float64, seed=3)
    check_grad(lambda *a: OP_SEQS[kind](*a, reverse=reverse, **kw), arrays, dev)


@pytest.mark.parametrize(("kind", "kw"), VARIANTS, ids=IDS)
def test_cell_grad(dev, kind, kw):
    arrays = make_inputs(kind, 1, 2, 3, 2, np.float64, seed=4, cell=True)
    check_grad(lambda *a: OP_CELLS[kind](*a, **kw), arrays, dev)


@pytest.mark.parametrize("wrt", [[0], [3], [1, 5]])
def test_grad_of_some_inputs_only(dev, wrt):
    # Inputs without requires_grad get no gradient; the others must still be right.
    arrays = make_inputs("lstm", 2, 2, 2, 2, np.float64, seed=5)
    check_grad(lstm, arrays, dev, wrt=wrt)


def test_only_final_state_used(dev):
    # y unused: the engine hands backward zeros for it; the gradient flows through hT alone.
    arrays = make_inputs("gru", 3, 2, 2, 2, np.float64, seed=6)
    check_grad(lambda *a: gru(*a)[1], arrays, dev)


# -- errors ---------------------------------------------------------------------------------
def _tensors(arrays, dev):
    return [tensor.Tensor(data=a, device=dev, requires_grad=False) for a in arrays]


def test_wrong_weight_shape(dev):
    x, h, c, Wx, Wh, Bx, Bh = make_inputs("lstm", 2, 2, 3, 4, np.float32)
    with pytest.raises(ShapeError, match=r"LSTMSequence: Wx must have shape \(3, 16\)"):
        lstm(*_tensors([x, h, c, Wx[:, :12], Wh, Bx, Bh], dev))
    with pytest.raises(ShapeError, match=r"c0 must have shape \(2, 4\)"):
        lstm(*_tensors([x, h, c[:1], Wx, Wh, Bx, Bh], dev))


def test_wrong_input_rank(dev):
    arrays = make_inputs("gru", 2, 2, 3, 4, np.float32)
    with pytest.raises(ShapeError, match="GRUSequence: expects x of shape"):
        gru(*_tensors([arrays[0][0], *arrays[1:]], dev))
    with pytest.raises(ShapeError, match="GRUCell: expects x of shape"):
        gru_cell(*_tensors(arrays, dev))


def test_mixed_dtypes(dev):
    arrays = make_inputs("rnn", 2, 2, 3, 4, np.float32)
    arrays[2] = arrays[2].astype(np.float64)
    with pytest.raises(DTypeError, match="RNNSequence: inputs must share one float dtype"):
        rnn(*_tensors(arrays, dev))
    ints = [a.astype(np.int32) for a in arrays]
    with pytest.raises(DTypeError):
        rnn(*_tensors(ints, dev))


def test_bad_nonlinearity(dev):
    arrays = make_inputs("rnn", 2, 2, 3, 4, np.float32)
    with pytest.raises(
        ArgumentError, match="RNNSequence: nonlinearity must be one of 'tanh', 'relu', got 'sigmoid'"
    ):
        rnn(*_tensors(arrays, dev), nonlinearity="sigmoid")


def test_reexported_in_autograd():
    assert autograd.lstm is lstm and autograd.gru_cell is gru_cell


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
@pytest.mark.parametrize("reverse", [False, True])
def test_empty_sequence(dev, kind, reverse):
    """T = 0: no output steps, the final states are the initial ones, and every gradient
    (x's included) is defined."""
    rng = np.random.default_rng(0)
    N, I, H, k = 2, 3, 4, {"rnn": 1, "lstm": 4, "gru": 3}[kind]
    arrays = [
        rng.standard_normal(s)
        for s in [(0, N, I), (N, H), (N, H), (I, k * H), (H, k * H), (k * H,), (k * H,)]
    ]
    if kind != "lstm":
        del arrays[2]  # no cell state

    def fn(x, h, *rest):
        return {"rnn": rnn, "lstm": lstm, "gru": gru}[kind](x, h, *rest, reverse=reverse)

    y, h, *_ = run(fn, arrays, dev)
    assert y.shape == (0, N, H)
    np.testing.assert_array_equal(h, arrays[1])
    check_grad(fn, arrays, dev)

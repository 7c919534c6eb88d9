"""Recurrent ops and losses against PyTorch: forward and every gradient, in float64."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import _training, _weighted_sum, to_tensors

from singa_lite import autograd, tensor
from singa_lite.ops.loss import binary_cross_entropy, cross_entropy, mse_loss, nll_loss, softmax_cross_entropy
from singa_lite.ops.recurrent import gru, lstm, rnn

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
F = torch.nn.functional

T, N, I, H = 5, 3, 4, 6


def _perm(kind):
    """Rows of torch's (kH, I) weights in singa_lite's gate order.

    LSTM: torch i, f, g, o -> i, f, o, g. GRU: torch r, z, n -> z, r, n.
    """
    if kind == "lstm":
        return np.r_[0 : 2 * H, 3 * H : 4 * H, 2 * H : 3 * H]
    if kind == "gru":
        return np.r_[H : 2 * H, 0:H, 2 * H : 3 * H]
    return np.arange(H)


def _torch_module(kind, nonlinearity):
    torch.manual_seed(0)
    if kind == "rnn":
        return torch.nn.RNN(I, H, nonlinearity=nonlinearity).double()
    return {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[kind](I, H).double()


def _our_weights(m, kind):
    """(Wx, Wh, Bx, Bh) in singa_lite's layout from a torch module's parameters."""
    p = _perm(kind)
    w_ih, w_hh = m.weight_ih_l0.detach().numpy(), m.weight_hh_l0.detach().numpy()
    b_ih, b_hh = m.bias_ih_l0.detach().numpy(), m.bias_hh_l0.detach().numpy()
    return [w_ih[p].T.copy(), w_hh[p].T.copy(), b_ih[p].copy(), b_hh[p].copy()]


def _torch_weight_grads(m, kind):
    """The torch parameter gradients mapped to singa_lite's layout, in (Wx, Wh, Bx, Bh) order."""
    p = _perm(kind)
    g = [m.weight_ih_l0.grad, m.weight_hh_l0.grad, m.bias_ih_l0.grad, m.bias_hh_l0.grad]
    return [g[0].numpy()[p].T, g[1].numpy()[p].T, g[2].numpy()[p], g[3].numpy()[p]]


CASES = [("rnn", "tanh"), ("rnn", "relu"), ("lstm", None), ("gru", None)]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize(("kind", "nonlinearity"), CASES, ids=["rnn-tanh", "rnn-relu", "lstm", "gru"])
def test_recurrent_matches_torch(dev, kind, nonlinearity, reverse):
    rng = np.random.default_rng(0)
    m = _torch_module(kind, nonlinearity)
    n_states = 2 if kind == "lstm" else 1
    x = rng.standard_normal((T, N, I))
    states = [rng.standard_normal((N, H)) for _ in range(n_states)]
    w_out = [rng.standard_normal((T, N, H))] + [rng.standard_normal((N, H)) for _ in range(n_states)]

    # torch: a reversed sequence is the forward pass over the time-flipped input.
    xt = torch.tensor(x, requires_grad=True)
    st = [torch.tensor(s[None], requires_grad=True) for s in states]
    yt, final = m(xt.flip(0) if reverse else xt, tuple(st) if kind == "lstm" else st[0])
    yt = yt.flip(0) if reverse else yt
    finals_t = [f[0] for f in (final if kind == "lstm" else (final,))]
    outs_t = [yt, *finals_t]
    sum(((o * torch.tensor(w)).sum() for o, w in zip(outs_t, w_out)), torch.tensor(0.0)).backward()

    fn = {
        "rnn": lambda *a: rnn(*a, nonlinearity=nonlinearity, reverse=reverse),
        "lstm": lambda *a: lstm(*a, reverse=reverse),
        "gru": lambda *a: gru(*a, linear_before_reset=True, reverse=reverse),
    }[kind]
    with _training():
        ts = to_tensors([x, *states, *_our_weights(m, kind)], dev)
        outs = fn(*ts)
        grads = autograd.gradients(_weighted_sum(tuple(outs), [dev.xp.asarray(w) for w in w_out]))

    for o, ot in zip(outs, outs_t):
        np.testing.assert_allclose(tensor.to_numpy(o), ot.detach().numpy(), rtol=1e-10, atol=1e-12)
    want = [xt.grad.numpy()] + [s.grad.numpy()[0] for s in st] + _torch_weight_grads(m, kind)
    for i, (t, w) in enumerate(zip(ts, want)):
        np.testing.assert_allclose(tensor.to_numpy(grads[t]), w, rtol=1e-9, atol=1e-12, err_msg=f"input {i}")


# -- losses ---------------------------------------------------------------------------------
def _grad_pair(ours, theirs, x, t, dev, t_grad=False):
    """Loss values and input gradients of ours (on singa_lite tensors) and theirs (on torch)."""
    with _training():
        xs, ts = to_tensors([x, t], dev)
        ts.requires_grad = t_grad
        loss = ours(xs, ts)
        grads = autograd.gradients(loss)
    xt = torch.tensor(x, requires_grad=True)
    tt = torch.tensor(t, requires_grad=t_grad and t.dtype.kind == "f")
    ref = theirs(xt, tt)
    ref.backward()
    assert loss.shape == (1,)
    np.testing.assert_allclose(tensor.to_numpy(loss)[0], ref.item(), rtol=1e-12)
    np.testing.assert_allclose(tensor.to_numpy(grads[xs]), xt.grad.numpy(), rtol=1e-10, atol=1e-14)
    if t_grad:
        np.testing.assert_allclose(tensor.to_numpy(grads[ts]), tt.grad.numpy(), rtol=1e-10, atol=1e-14)


RNG = np.random.default_rng(7)
LOGITS = RNG.standard_normal((5, 4)) * 2
LABELS = RNG.integers(0, 4, 5)
SOFT = RNG.dirichlet(np.ones(4), 5)
PROBS = RNG.uniform(0.05, 0.95, (5, 4))


@pytest.mark.parametrize("t", [LABELS, np.eye(4)[LABELS], SOFT], ids=["labels", "onehot", "soft"])
def test_softmax_cross_entropy(dev, t):
    # torch takes both class indices and per-class probabilities.
    _grad_pair(softmax_cross_entropy, F.cross_entropy, LOGITS, t, dev)


def test_nll_loss(dev):
    logp = torch.log_softmax(torch.tensor(LOGITS), 1).numpy()
    _grad_pair(nll_loss, F.nll_loss, logp, LABELS, dev)


@pytest.mark.parametrize("t", [LABELS, np.eye(4)[LABELS]], ids=["labels", "onehot"])
def test_cross_entropy(dev, t):
    # -sum(t log y) / N is NLL of log(y) (no clipping is active for these probabilities).
    def theirs(y, tt):
        return F.nll_loss(torch.log(y), tt) if tt.ndim == 1 else -(tt * torch.log(y)).sum() / len(y)

    _grad_pair(cross_entropy, theirs, PROBS, t, dev)


def test_binary_cross_entropy(dev):
    t = RNG.uniform(0, 1, PROBS.shape)
    # SINGA's formula sums and divides by the batch size, where torch's mean divides by every element.
    _grad_pair(
        binary_cross_entropy,
        lambda y, tt: F.binary_cross_entropy(y, tt, reduction="sum") / len(y),
        PROBS,
        t,
        dev,
    )


def test_mse_loss(dev):
    t = RNG.standard_normal(LOGITS.shape)
    # SINGA's sum / (2N) is torch's mean times C / 2.
    _grad_pair(
        mse_loss,
        lambda x, tt: F.mse_loss(x, tt) * LOGITS.shape[1] / 2,
        LOGITS,
        t,
        dev,
        t_grad=True,
    )

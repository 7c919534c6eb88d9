"""The optimizers' step options: ``accumulate`` (gradient accumulation), ``clip_norm`` and
``no_decay``, in eager and graph mode, through checkpoints, and with bad arguments.

The references are singa_lite itself run another way (one big batch instead of k micro-batches,
``clip_grad_norm`` by hand, one uninterrupted run); tests/torch_ref/test_torch_step_options.py
checks the same options against ``torch.optim``.
"""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite import ArgumentError, autograd, layer, model, opt, tensor
from singa_lite.clip_grad import clip_grad_norm
from singa_lite.errors import OptimizerError, StateMismatchError

BATCH, FEATURES, CLASSES = 12, 6, 3


class Net(model.Model):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = layer.Linear(8)
        self.act = layer.ReLU()
        self.fc2 = layer.Linear(CLASSES)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def _data(steps: int, batch: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((batch, FEATURES)), rng.integers(0, CLASSES, batch).astype(np.int32))
        for _ in range(steps)
    ]


def _build(optimizer, batch: int, graph: bool = False) -> tuple[Net, tensor.Tensor, tensor.Tensor]:
    m = Net()
    m.set_optimizer(optimizer)
    tx = tensor.Tensor((batch, FEATURES), dtype=tensor.float64)
    ty = tensor.Tensor((batch,), dtype=tensor.int32)
    m.compile([tx], is_train=True, use_graph=graph)
    rng = np.random.default_rng(1)  # the same starting weights for every run
    for _name, p in sorted(m.get_params().items()):
        p.copy_from_numpy(rng.standard_normal(p.shape) * 0.5)
    return m, tx, ty


def _train(m: Net, tx, ty, batches) -> dict[str, np.ndarray]:
    for x, y in batches:
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        m(tx, ty)
    return {k: tensor.to_numpy(v) for k, v in m.get_params().items()}


MAKERS = {
    "sgd_momentum_wd": lambda **o: opt.SGD(lr=0.1, momentum=0.9, weight_decay=0.01, **o),
    "adamw": lambda **o: opt.AdamW(lr=opt.ExponentialDecay(0.05, 1, 0.9), weight_decay=0.1, **o),
    "rmsprop": lambda **o: opt.RMSProp(lr=0.01, weight_decay=0.01, **o),
}


# -- accumulation ----------------------------------------------------------------------------------
@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("make", sorted(MAKERS))
def test_k_micro_batches_equal_one_big_batch(make: str, k: int, graph: bool) -> None:
    """The mean of k micro-batch gradients is the big batch's gradient (the loss is a mean)."""
    updates = 3
    big = _data(updates, BATCH)
    micro = [(x[i::k], y[i::k]) for x, y in big for i in range(k)]  # each big batch split in k
    ref_opt = MAKERS[make]()
    ref = _train(*_build(ref_opt, BATCH), big)
    acc_opt = MAKERS[make](accumulate=k)
    m, tx, ty = _build(acc_opt, BATCH // k, graph)
    got = _train(m, tx, ty, micro)
    assert acc_opt.step_counter == ref_opt.step_counter == updates and acc_opt.micro_step == 0
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-12, atol=1e-13, err_msg=name)


def test_no_update_until_the_window_is_full() -> None:
    sgd = opt.SGD(lr=0.1, accumulate=3)
    m, tx, ty = _build(sgd, 4)
    before = {k: tensor.to_numpy(v) for k, v in m.get_params().items()}
    after_two = _train(m, tx, ty, _data(2, 4))
    assert sgd.step_counter == 0 and sgd.micro_step == 2
    for name in before:
        np.testing.assert_array_equal(after_two[name], before[name])
    after_three = _train(m, tx, ty, _data(1, 4, seed=5))
    assert sgd.step_counter == 1 and sgd.micro_step == 0
    assert any(not np.array_equal(after_three[n], before[n]) for n in before)


def test_a_param_missing_from_some_micro_batches_keeps_its_sum(dev) -> None:
    w = tensor.Tensor(data=np.array([1.0, 2.0]), device=dev, requires_grad=True, stores_grad=True, name="w")
    v = tensor.Tensor(data=np.array([3.0]), device=dev, requires_grad=True, stores_grad=True, name="v")
    sgd = opt.SGD(lr=1.0, accumulate=2)
    g = tensor.Tensor(data=np.array([0.5, 1.0]), device=dev, requires_grad=False)
    sgd.update_all([(w, g), (v, tensor.Tensor(data=np.array([4.0]), device=dev, requires_grad=False))])
    sgd.update_all([(w, g)])  # v's parameter took no part in the second micro-batch
    np.testing.assert_allclose(tensor.to_numpy(w), [0.5, 1.0])
    np.testing.assert_allclose(tensor.to_numpy(v), [1.0])  # mean of (4, nothing) over k = 2
    # The next window starts from zero, not from the last window's sums.
    sgd.update_all([(w, g)])
    sgd.update_all([(w, g)])
    np.testing.assert_allclose(tensor.to_numpy(w), [0.0, 0.0])


# -- clipping ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("graph", [False, True])
def test_clip_norm_equals_clipping_by_hand(graph: bool) -> None:
    batches = _data(4, BATCH)
    clipped = opt.Adam(lr=0.05, clip_norm=0.3)
    got = _train(*_build(clipped, BATCH, graph), batches)
    assert clipped.last_norm is not None and float(tensor.to_numpy(clipped.last_norm)) > 0.3

    ref_opt = opt.Adam(lr=0.05)
    m, tx, ty = _build(ref_opt, BATCH)
    autograd.training = True
    for x, y in batches:
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        loss = m.loss(m.forward(tx), ty)
        pairs = list(autograd.backward(loss))
        grads, _ = clip_grad_norm([g for _, g in pairs], 0.3)
        for (p, _), g in zip(pairs, grads):
            ref_opt.update(p, g)
        ref_opt.step()
    for name, want in m.get_params().items():
        np.testing.assert_allclose(got[name], tensor.to_numpy(want), rtol=1e-12, atol=1e-14, err_msg=name)


# -- weight-decay exclusion -----------------------------------------------------------------------
@pytest.mark.parametrize("make", sorted(MAKERS))
@pytest.mark.parametrize("rule", [("*.b",), "predicate"], ids=["patterns", "predicate"])
def test_no_decay_leaves_the_exempt_params_undecayed(dev, make: str, rule) -> None:
    """With zero gradients only decay moves a param: the matrix moves, the bias does not."""
    no_decay = opt.biases_and_norms if rule == "predicate" else rule
    o = MAKERS[make](no_decay=no_decay)
    W = tensor.Tensor(data=np.ones((2, 2)), device=dev, name="fc.W")
    b = tensor.Tensor(data=np.ones(2), device=dev, name="fc.b")
    for _ in range(2):
        o.apply("fc.W", W, tensor.Tensor(data=np.zeros((2, 2)), device=dev))
        o.apply("fc.b", b, tensor.Tensor(data=np.zeros(2), device=dev))
        o.step()
    assert np.all(tensor.to_numpy(W) < 1.0)
    np.testing.assert_array_equal(tensor.to_numpy(b), np.ones(2))
    assert o.get_states()["options"]["decay_exempt"] == {"fc.W": False, "fc.b": True}


def test_no_decay_equals_zero_decay_on_the_exempt_params() -> None:
    """An exempt bias follows exactly the update a weight_decay=0 optimizer gives it."""
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal(3) for _ in range(4)]
    exempt = opt.AdamW(lr=0.1, weight_decay=0.5, no_decay=["bias"])
    plain = opt.AdamW(lr=0.1, weight_decay=0.0)
    a = tensor.from_numpy(np.ones(3))
    b = tensor.from_numpy(np.ones(3))
    for g in grads:
        exempt.apply("bias", a, tensor.from_numpy(g))
        plain.apply("bias", b, tensor.from_numpy(g))
        exempt.step()
        plain.step()
    np.testing.assert_array_equal(tensor.to_numpy(a), tensor.to_numpy(b))


# -- states and checkpoints -----------------------------------------------------------------------
@pytest.mark.parametrize("stop", [4, 6])  # mid-window and at a window's end (k = 3)
def test_checkpoint_mid_window_resumes_bitwise(tmp_path, stop: int) -> None:
    batches = _data(9, 4)

    def make(**o):
        return opt.AdamW(lr=0.05, weight_decay=0.1, **o)

    options = {"accumulate": 3, "clip_norm": 0.5, "no_decay": ["*.b"]}
    straight = _train(*_build(make(**options), 4), batches)

    m, tx, ty = _build(make(**options), 4)
    _train(m, tx, ty, batches[:stop])
    m.save_states(tmp_path / "ckpt.h5")

    # A fresh optimizer built without the options: the checkpoint brings them back.
    fresh = make()
    m2, tx2, ty2 = _build(fresh, 4)
    m2.load_states(tmp_path / "ckpt.h5")
    assert (fresh.accumulate, fresh.clip_norm, fresh.no_decay) == (3, 0.5, ("*.b",))
    assert fresh.micro_step == stop % 3
    resumed = _train(m2, tx2, ty2, batches[stop:])
    for name in straight:
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)


def test_states_round_trip_and_bad_options() -> None:
    o = opt.SGD(lr=0.1, momentum=0.9, accumulate=2, clip_norm=1.0, no_decay="*.b")
    states = o.get_states()
    assert states["options"] == {
        "clip_norm": 1.0,
        "accumulate": 2,
        "micro_step": 0,
        "no_decay": ["*.b"],
        "decay_exempt": {},
    }
    other = opt.SGD(lr=0.1, momentum=0.9)
    other.set_states(states)
    assert other.slot_names == ("moments", "accum") and other.accumulate == 2
    for key, bad in [
        ("micro_step", 2),
        ("accumulate", 0),
        ("clip_norm", -1.0),
        ("no_decay", 3),
        ("decay_exempt", {"w": "yes"}),
    ]:
        broken = {**states, "options": {**states["options"], key: bad}}
        with pytest.raises(StateMismatchError, match=r"options|decay_exempt"):
            opt.SGD(lr=0.1, momentum=0.9).set_states(broken)
    with pytest.raises(StateMismatchError, match="options"):
        opt.SGD(lr=0.1).set_states({**states, "options": {"clip_norm": 1.0}})
    # Accumulation sums in states that the optimizer does not accumulate: refused.
    with pytest.raises(StateMismatchError, match="accum"):
        opt.SGD(lr=0.1).set_states({"step_counter": 0, "accum": {}})


def test_bad_arguments() -> None:
    for bad in (0, -1.0, float("inf"), "1", True):
        with pytest.raises((ArgumentError, OptimizerError), match="clip_norm"):
            opt.SGD(lr=0.1, clip_norm=bad)
    for bad in (0, -2, 1.5, "2", True):
        with pytest.raises((ArgumentError, OptimizerError), match="accumulate"):
            opt.Adam(accumulate=bad)
    for bad in (3, [1, "x"], object()):
        with pytest.raises(ArgumentError, match="no_decay"):
            opt.AdamW(no_decay=bad)


def test_distopt_clips_and_accumulates_the_averaged_gradients() -> None:
    """A world of one: DistOpt over an accumulating, clipping optimizer equals the optimizer."""
    from singa_lite import dist

    batches = _data(6, 4)
    ref = _train(*_build(opt.Adam(lr=0.05, accumulate=2, clip_norm=0.5), 4), batches)
    inner = opt.Adam(lr=0.05, accumulate=2, clip_norm=0.5)
    wrapped = opt.DistOpt(inner, communicator=dist.SingleProcessCommunicator())
    got = _train(*_build(wrapped, 4), batches)
    assert inner.step_counter == 3
    for name in ref:
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
    with pytest.raises(OptimizerError, match="partial"):
        m, tx, ty = _build(wrapped, 4)
        x, y = batches[0]
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        autograd.training = True
        wrapped.backward_and_partial_update(m.loss(m.forward(tx), ty))

"""Model: compile, call dispatch, summary, and graph mode equal to eager mode."""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite import autograd, layer, model, opt, tensor


class CNN(model.Model):
    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.bn = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.pool = layer.MaxPool2d(2)
        self.flat = layer.Flatten()
        self.drop = layer.Dropout(0.2)
        self.fc = layer.Linear(3)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        y = self.pool(self.relu(self.bn(self.conv(x))))
        return self.fc(self.drop(self.flat(y)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def _data(steps, n=6, seed=0):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((n, 2, 6, 6)).astype(np.float32), rng.integers(0, 3, n).astype(np.int32))
        for _ in range(steps)
    ]


def _train(use_graph, optimizer, steps=8, dev=None, seed=3):
    m = CNN()
    m.set_optimizer(optimizer)
    if dev is not None:
        dev.SetRandSeed(seed)
    tx = tensor.Tensor((6, 2, 6, 6), dev)
    ty = tensor.Tensor((6,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=use_graph)
    # identical initial weights for both runs
    init = np.random.default_rng(1)
    for p in m.get_params().values():
        p.copy_from_numpy(init.standard_normal(p.shape).astype(np.float32) * 0.3)
    if dev is not None:
        dev.SetRandSeed(seed)  # same dropout masks
    losses = []
    for xb, yb in _data(steps):
        tx.copy_from_numpy(xb)
        ty.copy_from_numpy(yb)
        _, loss = m(tx, ty)
        losses.append(tensor.to_numpy(loss)[0])
    return np.array(losses), {k: tensor.to_numpy(v) for k, v in m.get_states().items()}, m


@pytest.mark.parametrize("make_opt", [lambda: opt.SGD(lr=0.05, momentum=0.9), lambda: opt.Adam(lr=0.01)])
def test_graph_mode_equals_eager(dev, make_opt):
    eager_losses, eager_states, _ = _train(False, make_opt(), dev=dev)
    graph_losses, graph_states, m = _train(True, make_opt(), dev=dev)
    assert m._graph is not None and len(m._graph.tape) > 5
    np.testing.assert_array_equal(graph_losses, eager_losses)
    for k in eager_states:
        np.testing.assert_array_equal(graph_states[k], eager_states[k], err_msg=k)
    assert eager_losses[-1] < eager_losses[0]


def test_graph_mode_replays_without_running_python_forward(monkeypatch):
    """After the recorded step, replays run the taped ops: neither the model's Python forward
    nor any layer's is called again, and no new Operator objects are made."""
    calls = {"forward": 0, "ops": 0}
    m = CNN()
    original = CNN.forward

    def counting_forward(self, x):
        calls["forward"] += 1
        return original(self, x)

    monkeypatch.setattr(CNN, "forward", counting_forward)
    init = autograd.Operator.__init__

    def counting_init(self, *a, **k):
        calls["ops"] += 1
        init(self, *a, **k)

    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    tx, ty = tensor.Tensor((6, 2, 6, 6)), tensor.Tensor((6,), dtype=tensor.int32)
    tx.device.SetRandSeed(0)
    m.compile([tx], is_train=True, use_graph=True)
    losses = []
    for i, (xb, yb) in enumerate(_data(1) * 5):  # one batch again and again: the loss must fall
        tx.copy_from_numpy(xb)
        ty.copy_from_numpy(yb)
        if i == 1:  # the first call recorded the step; count from the first replay on
            calls.update(forward=0, ops=0)
            monkeypatch.setattr(autograd.Operator, "__init__", counting_init)
        _, loss = m(tx, ty)
        losses.append(tensor.to_numpy(loss)[0])
    assert calls == {"forward": 0, "ops": 0}, calls
    assert losses[-1] < losses[0]  # and the replays do train


def test_graph_mode_with_fresh_input_tensors_and_shape_change():
    m = CNN()
    m.set_optimizer(opt.SGD(lr=0.05))
    m.compile([tensor.Tensor((6, 2, 6, 6))], is_train=True, use_graph=True)
    for xb, yb in _data(3):
        _, _loss = m(tensor.Tensor(data=xb, requires_grad=False), tensor.Tensor(data=yb, requires_grad=False))
    xb, yb = _data(1, n=4)[0]
    with pytest.warns(UserWarning, match="eagerly"):
        out, _ = m(tensor.Tensor(data=xb, requires_grad=False), tensor.Tensor(data=yb, requires_grad=False))
    assert out.shape == (4, 3)


def test_compile_builds_layers_without_touching_statistics():
    m = CNN()
    m.set_optimizer(opt.SGD(lr=0.1))
    m.compile([tensor.Tensor((2, 2, 6, 6))], is_train=True)
    assert sorted(m.get_params()) == ["bn.bias", "bn.scale", "conv.W", "conv.b", "fc.W", "fc.b"]
    np.testing.assert_array_equal(tensor.to_numpy(m.bn.running_mean), 0)
    assert autograd.training is True and m.training


def test_call_dispatch_train_and_eval():
    m = CNN()
    m.set_optimizer(opt.SGD(lr=0.1))
    m.compile([tensor.Tensor((2, 2, 6, 6))], is_train=True)
    xb, yb = _data(1, n=2)[0]
    _out, loss = m(tensor.Tensor(data=xb, requires_grad=False), tensor.Tensor(data=yb, requires_grad=False))
    assert loss.shape == (1,)
    m.eval()
    assert autograd.training is False
    y = m(tensor.Tensor(data=xb, requires_grad=False))
    assert y.shape == (2, 3) and y.creator is None
    y2 = m(tensor.Tensor(data=xb, requires_grad=False))
    np.testing.assert_array_equal(tensor.to_numpy(y), tensor.to_numpy(y2))  # dropout off


def test_summary_lists_layers_shapes_and_counts():
    m = CNN()
    m.compile([tensor.Tensor((2, 2, 6, 6))], is_train=False)
    text = m.summary(print_fn=lambda s: None)
    assert "conv" in text and "(2, 4, 6, 6)" in text and "(2, 3)" in text
    n = sum(p.size() for p in m.get_params().values())
    assert f"total params: {n:,}" in text


def test_model_without_train_one_batch_says_so():
    class Bare(model.Model):
        def forward(self, x):
            return x

    m = Bare()
    m.train()
    with pytest.raises(TypeError, match="train_one_batch"):
        m(tensor.Tensor((1,)))


class Bag(model.Model):
    """An embedding bag: its index input is captured inside the Gather op."""

    def __init__(self):
        super().__init__()
        self.emb = layer.Embedding(10, 4)
        self.fc = layer.Linear(3)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, idx):
        return self.fc(autograd.reduce_mean(self.emb(idx), axes=1))

    def train_one_batch(self, idx, y):
        out = self.forward(idx)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def _bag_losses(use_graph):
    rng = np.random.default_rng(0)
    m = Bag()
    m.set_optimizer(opt.SGD(lr=0.5))
    first = tensor.Tensor(data=rng.integers(0, 10, (4, 5)).astype(np.int32), requires_grad=False)
    m.compile([first], is_train=True, use_graph=use_graph)
    init = np.random.default_rng(1)
    for p in m.get_params().values():
        p.copy_from_numpy(init.standard_normal(p.shape).astype(np.float32))
    losses, inputs = [], []
    for _ in range(4):  # a fresh tensor every step, as SINGA loops often do
        idx = tensor.Tensor(data=rng.integers(0, 10, (4, 5)).astype(np.int32), requires_grad=False)
        y = tensor.Tensor(data=rng.integers(0, 3, 4).astype(np.int32), requires_grad=False)
        inputs.append((idx, tensor.to_numpy(idx)))
        losses.append(tensor.to_numpy(m(idx, y)[1])[0])
    return np.array(losses), inputs


def test_graph_mode_follows_fresh_index_tensors_and_leaves_them_alone():
    eager, _ = _bag_losses(False)
    graph, inputs = _bag_losses(True)
    np.testing.assert_array_equal(graph, eager)
    for t, values in inputs:
        np.testing.assert_array_equal(tensor.to_numpy(t), values)


def test_set_optimizer_after_recording_uses_the_new_optimizer():
    m = CNN()
    m.set_optimizer(opt.SGD(lr=0.05))
    m.compile([tensor.Tensor((6, 2, 6, 6))], is_train=True, use_graph=True)
    (xb, yb), (xb2, yb2) = _data(2)
    m(tensor.Tensor(data=xb, requires_grad=False), tensor.Tensor(data=yb, requires_grad=False))
    adam = opt.Adam(lr=0.01)
    m.set_optimizer(adam)
    m(tensor.Tensor(data=xb2, requires_grad=False), tensor.Tensor(data=yb2, requires_grad=False))
    m(tensor.Tensor(data=xb2, requires_grad=False), tensor.Tensor(data=yb2, requires_grad=False))
    assert adam.step_counter == 2


def test_layers_built_before_attaching_get_their_full_names():
    class Scale(layer.Layer):
        def __init__(self):
            super().__init__()
            self.W = tensor.Tensor((3,), requires_grad=True, stores_grad=True).set_value(1.0)

        def forward(self, x):
            return x * self.W

    class Two(model.Model):
        def __init__(self):
            super().__init__()
            self.a = Scale()
            self.b = Scale()

        def forward(self, x):
            return self.b(self.a(x))

    m = Two()
    assert m.a.W.name == "a.W" and m.b.W.name == "b.W"  # no compile needed
    sgd = opt.SGD(lr=0.1, momentum=0.9)
    autograd.training = True
    x = tensor.Tensor(data=np.ones((2, 3), np.float32), requires_grad=False)
    sgd(autograd.reduce_sum(m.forward(x)))
    assert sorted(sgd.get_states()["moments"]) == ["a.W", "b.W"]


@pytest.mark.parametrize("use_graph", [False, True])
def test_freezing_and_unfreezing_a_param_between_steps(use_graph):
    """Graph mode records again when a param is frozen or unfrozen after recording."""
    m = CNN()
    m.set_optimizer(opt.SGD(lr=0.1))
    ((xb, yb),) = _data(1)
    tx, ty = tensor.Tensor(data=xb, requires_grad=False), tensor.Tensor(data=yb, requires_grad=False)
    m.compile([tx], is_train=True, use_graph=use_graph)
    m(tx, ty)
    W = m.conv.W
    before = tensor.to_numpy(W).copy()
    W.requires_grad = W.stores_grad = False
    m(tx, ty)
    m(tx, ty)
    np.testing.assert_array_equal(tensor.to_numpy(W), before)
    W.requires_grad = W.stores_grad = True
    m(tx, ty)
    assert not np.array_equal(tensor.to_numpy(W), before)

"""Graph mode's fusion of op pairs (singa_lite/graph_fusion.py): which pairs are fused, which
are left, and that a fused step trains exactly as eager mode does."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from singa_lite import autograd, graph_fusion, layer, model, opt, tensor
from singa_lite.ops.activation import ReLU
from singa_lite.ops.normalization import BatchNorm


class Net(model.Model):
    """conv -> BN -> ReLU -> ..., with switches for the ways the BN output can be read twice."""

    def __init__(self, reuse: str = "") -> None:
        super().__init__()
        self.reuse = reuse
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.bn = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.bn2 = layer.BatchNorm2d()
        self.add = layer.Add()
        self.pool = layer.MaxPool2d(2)
        self.flat = layer.Flatten()
        self.fc = layer.Linear(3)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x: Any) -> Any:
        y = self.bn(self.conv(x))
        z = self.relu(y)
        if self.reuse == "add":  # the BN output read again after the ReLU
            z = self.add(z, y)
        if self.reuse == "state":  # the BN output kept as a state of the model
            self.hidden = y
        self._last = y  # (a private attribute: not a state)
        z = self.relu(self.bn2(z))  # a second pair, fusable in every variant
        return self.fc(self.flat(self.pool(z)))

    def train_one_batch(self, x: Any, y: Any) -> tuple:
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        if self.reuse == "output":  # the BN output returned to the caller
            return out, loss, self._last
        return out, loss


class Pooled(model.Model):
    """conv -> ReLU -> max pool, twice: 2x2 windows that tile, 3x3 ones that overlap (padded);
    then an average pool after a ReLU, which stays as it is."""

    reuse = ""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = layer.Conv2d(4, 3, padding=1)
        self.conv2 = layer.Conv2d(5, 3, padding=1)
        self.relu = layer.ReLU()
        self.pool1 = layer.MaxPool2d(2)
        self.pool2 = layer.MaxPool2d(3, stride=2, padding=1)
        self.avg = layer.AvgPool2d(2)
        self.flat = layer.Flatten()
        self.fc = layer.Linear(3)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x: Any) -> Any:
        y = self.pool2(self.relu(self.conv2(self.pool1(self.relu(self.conv1(x))))))
        return self.fc(self.flat(self.avg(self.relu(y))))

    train_one_batch = Net.train_one_batch


class MLP(model.Model):
    """Linear -> ReLU twice (both fused into Dense ops), then a Linear whose output a ReLU and
    an Add both read (a Dense without its ReLU) and a last Linear."""

    reuse = ""

    def __init__(self) -> None:
        super().__init__()
        self.flat = layer.Flatten()
        self.fc1, self.fc2, self.fc3, self.fc4 = (layer.Linear(n) for n in (8, 7, 7, 3))
        self.relu = layer.ReLU()
        self.add = layer.Add()
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x: Any) -> Any:
        h = self.relu(self.fc2(self.relu(self.fc1(self.flat(x)))))
        h = self.fc3(h)
        return self.fc4(self.add(self.relu(h), h))

    train_one_batch = Net.train_one_batch


def _train(use_graph: bool, reuse: str = "", steps: int = 6) -> tuple[list, dict, Any]:
    m = {"pooled": Pooled, "mlp": MLP}.get(reuse, lambda: Net(reuse))()
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    tx = tensor.Tensor((6, 2, 6, 6))
    ty = tensor.Tensor((6,), dtype=tensor.int32)
    m.compile([tx], is_train=True, use_graph=use_graph)
    init = np.random.default_rng(1)
    for p in m.get_params().values():
        p.copy_from_numpy(init.standard_normal(p.shape).astype(np.float32) * 0.3)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        tx.copy_from_numpy(rng.standard_normal((6, 2, 6, 6)).astype(np.float32))
        ty.copy_from_numpy(rng.integers(0, 3, 6).astype(np.int32))
        losses.append(tensor.to_numpy(m(tx, ty)[1])[0])
    return losses, {k: tensor.to_numpy(v) for k, v in m.get_states().items()}, m


def _ops(m: Any) -> list[str]:
    assert m._graph is not None
    names = []
    for e in m._graph.tape:
        if isinstance(e, autograd.OpCall):
            names.append(type(e.op).__name__ + ("+relu" if getattr(e.op, "relu", False) else ""))
    return names


@pytest.mark.parametrize("reuse", ["", "add", "output", "state", "pooled", "mlp"])
def test_fused_steps_train_as_eager_mode_does(reuse: str) -> None:
    """Graph mode fuses each BN -> ReLU pair whose BN output nothing else reads, moves each
    such ReLU after its max pool, makes each Linear (and such a ReLU) one Dense op, and trains
    bit for bit as eager mode: losses, params, running statistics."""
    eager_losses, eager_states, _ = _train(False, reuse)
    graph_losses, graph_states, m = _train(True, reuse)
    np.testing.assert_array_equal(graph_losses, eager_losses)
    for k in eager_states:
        np.testing.assert_array_equal(graph_states[k], eager_states[k], err_msg=k)
    assert eager_losses[-1] < eager_losses[0]
    names = _ops(m)
    if reuse == "mlp":
        assert names == [
            "Flatten",
            "Dense+relu",
            "Dense+relu",
            "Dense",
            "ReLU",
            "Add",
            "Dense",
            "SoftMaxCrossEntropy",
        ]
        return
    if reuse == "pooled":
        assert names[:6] == ["Conv2d", "MaxPool", "ReLU", "Conv2d", "MaxPool", "ReLU"]
        assert names[6:8] == ["ReLU", "AvgPool"]
    elif reuse:  # the first pair stays two ops, the second is one
        assert names[:3] == ["Conv2d", "BatchNorm", "ReLU"] and names.count("BatchNorm+relu") == 1
    else:
        assert names[:2] == ["Conv2d", "BatchNorm+relu"] and names.count("BatchNorm+relu") == 2
        assert "ReLU" not in names


def test_the_fused_op_takes_the_relu_output_and_its_backward() -> None:
    """The rewrite leaves one op making the ReLU's output tensor, as its creator, and the
    walk order that backward kept for the recorded graph is made again."""
    _, _, m = _train(True, steps=1)  # recorded, not replayed yet
    g = m._graph
    assert g is not None
    fused = [e for e in g.tape if isinstance(e, autograd.OpCall) and type(e.op) is BatchNorm and e.op.relu]
    assert len(fused) == 2
    for e in fused:
        (z,) = e.outputs
        assert z.creator is e.op
    assert not any("_backward_walk" in vars(e.op) for e in g.tape if isinstance(e, autograd.OpCall))


def test_pairs_that_are_not_fused() -> None:
    """A ReLU after something else, an inference BN, an already fused BN and a BN whose output
    a host read or an update step takes stay as recorded."""
    dev_x = tensor.from_numpy(np.random.default_rng(0).standard_normal((4, 2, 3, 3)).astype(np.float32))
    params = [tensor.from_numpy(np.full(2, v, np.float32)) for v in (1.0, 0.0, 0.0, 1.0)]
    for p in params[:2]:
        p.requires_grad = p.stores_grad = True
    dev_x.requires_grad = True

    def record(training: bool, fused: bool = False) -> tuple[list, Any]:
        tape: list = []
        with autograd.training_mode(True), autograd.recording(tape):
            y = BatchNorm(training=training, relu=fused)(dev_x, *params)[0]
            ReLU()(y)
            ReLU()(dev_x)
        return tape, y

    for training, fused in ((False, False), (True, True)):
        tape, _ = record(training, fused)
        assert graph_fusion.fuse(tape, ()) == tape
    tape, y = record(True)
    assert len(graph_fusion.fuse(tape, ())) == 2  # the pair fused; the ReLU of dev_x left
    tape, y = record(True)
    assert graph_fusion.fuse(tape, {"kept": [y]}) == tape
    tape, y = record(True)
    tape.append(autograd.HostRead(y, tensor.to_numpy(y)))
    assert graph_fusion.fuse(tape, ()) == tape
    tape, y = record(True)
    tape.append(autograd.StepCall(print, (y,)))
    assert graph_fusion.fuse(tape, ()) == tape

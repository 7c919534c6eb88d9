"""Whole-model save/load (``singa_lite.saving``): one file holds the ONNX graph and every state;
a fresh process that never imports the model's class loads it, predicts the same and trains on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest

from singa_lite import autograd, checkpoint, device, layer, model, ops, opt, saving, tensor
from singa_lite.errors import CheckpointError

R = np.random.default_rng(0)


class Net(model.Model):
    """Conv, batch norm, pooling, dropout and a linear head: stateful in every way that counts."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = layer.Conv2d(4, 3, padding=1)
        self.bn1 = layer.BatchNorm2d()
        self.pool = layer.MaxPool2d(2)
        self.flat = layer.Flatten()
        self.drop = layer.Dropout(0.25)
        self.fc = layer.Linear(3)

    def forward(self, x):
        y = self.pool(ops.relu(self.bn1(self.conv1(x))))
        return self.fc(self.drop(self.flat(y)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = ops.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def _batch(n=4):
    x = R.standard_normal((n, 2, 6, 6)).astype(np.float32)
    y = R.integers(0, 3, n).astype(np.int32)
    return x, y


def _trained(optimizer) -> Net:
    net = Net()
    net.set_optimizer(optimizer)
    net.compile([tensor.Tensor((4, 2, 6, 6))], is_train=True)
    for _ in range(2):
        x, y = _batch()
        net(tensor.Tensor(data=x, requires_grad=False), tensor.Tensor(data=y, requires_grad=False))
    net.eval()
    return net


# The fresh process: only singa_lite is imported, never this module or the model's class.
CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import singa_lite.saving as saving
    from singa_lite import tensor
    path, data, out = sys.argv[1:4]
    d = np.load(data)
    m = saving.load(path)
    pred = np.asarray(m.forward(tensor.Tensor(data=d["x"], requires_grad=False))[0])
    m.train()
    losses = []
    for i in range(2):
        xb, yb = d["xb%d" % i], d["yb%d" % i]
        _, loss = m(tensor.Tensor(data=xb, requires_grad=False), tensor.Tensor(data=yb, requires_grad=False))
        losses.append(float(tensor.to_numpy(loss)[0]))
    m.eval()
    np.savez(out, pred=pred, after=np.asarray(m.forward(tensor.Tensor(data=d["x"], requires_grad=False))[0]))
    print(json.dumps({"losses": losses, "optimizer": type(m.optimizer).__name__,
                      "step": m.optimizer.step_counter, "aux": m.aux_states,
                      "loaded_class_module": type(m).__module__,
                      "test_module_seen": any("test_saving" in k for k in sys.modules)}))
    """
)


@pytest.mark.parametrize(
    "make_opt", [lambda: opt.SGD(lr=0.05, momentum=0.9), lambda: opt.Adam(lr=0.01)], ids=["sgd", "adam"]
)
def test_load_in_fresh_process_predicts_and_trains_like_the_original(tmp_path, make_opt):
    net = _trained(make_opt())
    path = str(tmp_path / "whole.h5")
    saving.save(path, net, aux_states={"epoch": 7})
    assert checkpoint.verify(path).ok

    x, _ = _batch()
    (xb0, yb0), (xb1, yb1) = _batch(), _batch()
    data = str(tmp_path / "data.npz")
    np.savez(data, x=x, xb0=xb0, yb0=yb0, xb1=xb1, yb1=yb1)
    out = str(tmp_path / "out.npz")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, path, data, out], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    child = json.loads(proc.stdout.strip().splitlines()[-1])

    # The original model goes on from the same point (its RNG state is the one saved).
    expected_pred = np.asarray(net.forward(tensor.Tensor(data=x, requires_grad=False)))
    net.train()
    losses = [
        float(
            tensor.to_numpy(
                net(tensor.Tensor(data=a, requires_grad=False), tensor.Tensor(data=b, requires_grad=False))[1]
            )[0]
        )
        for a, b in ((xb0, yb0), (xb1, yb1))
    ]
    net.eval()
    got = np.load(out)
    np.testing.assert_allclose(got["pred"], expected_pred, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(child["losses"], losses, rtol=0, atol=1e-6)
    np.testing.assert_allclose(
        got["after"],
        np.asarray(net.forward(tensor.Tensor(data=x, requires_grad=False))),
        rtol=1e-5,
        atol=1e-6,
    )
    assert child["optimizer"] == type(net.optimizer).__name__ and child["step"] == net.optimizer.step_counter
    assert child["aux"] == {"epoch": 7}
    assert child["loaded_class_module"].startswith("singa_lite.") and not child["test_module_seen"]


def test_loaded_model_learns(tmp_path):
    net = _trained(opt.SGD(lr=0.1))
    path = str(tmp_path / "m.h5")
    saving.save(path, net)
    m = saving.load(path)
    x, y = _batch()
    tx, ty = tensor.Tensor(data=x, requires_grad=False), tensor.Tensor(data=y, requires_grad=False)
    m.train()
    first = float(tensor.to_numpy(m(tx, ty)[1])[0])
    for _ in range(15):
        last = float(tensor.to_numpy(m(tx, ty)[1])[0])
    m.eval()
    assert last < first


def test_file_holds_a_valid_onnx_graph_and_the_usual_checkpoint(tmp_path):
    net = _trained(opt.SGD(lr=0.1, momentum=0.5))
    path = str(tmp_path / "m.h5")
    saving.save(path, net)
    # An ordinary checkpoint too: the class that wrote it can load it with load_states.
    other = Net()
    other.set_optimizer(opt.SGD(lr=0.1, momentum=0.5))
    other.compile([tensor.Tensor((4, 2, 6, 6))], is_train=False)
    aux = other.load_states(path)
    assert set(aux) == {saving.MODEL_KEY}
    graph = onnx.load_from_string(aux[saving.MODEL_KEY]["onnx"].tobytes())
    onnx.checker.check_model(graph, full_check=True)
    names = {i.name for i in graph.graph.initializer}
    assert set(net.get_states()) <= names
    loaded = saving.load(path)
    assert sorted(loaded.get_params()) == sorted(net.get_params())
    assert sorted(loaded.get_states()) == sorted(net.get_states())


def test_errors(tmp_path):
    net = _trained(opt.SGD(lr=0.1))
    with pytest.raises(CheckpointError, match="reserved"):
        saving.save(str(tmp_path / "a.h5"), net, aux_states={saving.MODEL_KEY: 1})
    with pytest.raises(CheckpointError, match="compiled"):
        saving.save(str(tmp_path / "b.h5"), Net())
    states_only = str(tmp_path / "c.h5")
    net.save_states(states_only)
    with pytest.raises(CheckpointError, match="no model graph"):
        saving.load(states_only)
    autograd.training = False


class Recurrent(model.Model):
    """Its per-gate LSTM weights reach the ONNX LSTM node through Gather/Transpose."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = layer.LSTM(6)
        self.fc = layer.Linear(3)

    def forward(self, x):
        _, h, _ = self.lstm(x)
        return self.fc(h)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = ops.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def test_recurrent_model_round_trips(tmp_path):
    net = Recurrent()
    net.set_optimizer(opt.Adam(lr=0.01))
    x = R.standard_normal((5, 4, 3)).astype(np.float32)  # (T, N, I)
    y = R.integers(0, 3, 4).astype(np.int32)
    net.compile([tensor.Tensor(data=x, requires_grad=False)], is_train=True)
    net(tensor.Tensor(data=x, requires_grad=False), tensor.Tensor(data=y, requires_grad=False))
    net.eval()
    want = tensor.to_numpy(net(tensor.Tensor(data=x, requires_grad=False)))
    path = tmp_path / "rnn.h5"
    saving.save(path, net)
    loaded = saving.load(path)
    assert sorted(loaded.get_params()) == sorted(net.get_params())
    (got,) = loaded(
        tensor.Tensor(data=x, requires_grad=False)
    )  # SONNXModel returns its outputs as a list, as SINGA's does
    np.testing.assert_allclose(tensor.to_numpy(got), want, rtol=1e-5, atol=1e-6)


def _device(name: str) -> device.Device:
    if name == "gpu":
        if device.get_num_gpus() == 0:
            from singa_lite.backend import cupy as cupy_backend

            pytest.skip(f"needs a CUDA GPU: {cupy_backend.UNAVAILABLE_REASON}")
        return device.create_cuda_gpu()
    return device.create_cpu_device()


@pytest.mark.parametrize("src,dst", [("gpu", "cpu"), ("cpu", "gpu")])
def test_whole_model_saved_on_one_device_loads_on_the_other(tmp_path, src, dst):
    src_dev, dst_dev = _device(src), _device(dst)
    net = Net()
    net.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    net.compile([tensor.Tensor((4, 2, 6, 6), src_dev)], is_train=True)
    x, y = _batch()
    net(
        tensor.Tensor(data=x, device=src_dev, requires_grad=False),
        tensor.Tensor(data=y, device=src_dev, requires_grad=False),
    )
    net.eval()
    want = tensor.to_numpy(net.forward(tensor.Tensor(data=x, device=src_dev, requires_grad=False)))
    saving.save(tmp_path / "m.h5", net)
    loaded = saving.load(tmp_path / "m.h5", device=dst_dev)
    assert all(t.device == dst_dev for t in loaded.get_states().values())
    for k, t in net.get_states().items():
        np.testing.assert_array_equal(tensor.to_numpy(loaded.get_states()[k]), tensor.to_numpy(t), err_msg=k)
    got = tensor.to_numpy(loaded.forward(tensor.Tensor(data=x, device=dst_dev, requires_grad=False))[0])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

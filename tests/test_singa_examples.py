"""Apache SINGA's own example models and training loops, run with only their imports changed.

The model classes (in ``singa_example_models.py``) and the loops below are copies of SINGA's
``examples/`` code with ``from singa import ...`` changed to ``from singa_lite import ...``;
SINGA is licensed under the Apache License, Version 2.0, as this project is: Copyright The
Apache Software Foundation, https://github.com/apache/singa.

Covered: ``examples/cnn/model/{cnn,alexnet,resnet,xceptionnet}.py``, ``examples/mlp/model.py``
(the model and its ``__main__`` loop), ``examples/mlp/native.py`` (raw autograd + ``opt.SGD``),
``examples/rnn/char_rnn.py`` (``CharRNN`` with its ``initialize``/``get_states`` overrides and the
``convert``/``numpy2tensors`` helpers) and the loop of ``examples/cnn/train_cnn.py``.
Each model trains a few steps in eager and in graph mode on synthetic data; its states
round-trip through ``get_states``/``set_states`` and ``save_states``/``load_states``.

What the tests change, and why (the model classes themselves are untouched):

- Sizes. SINGA's ImageNet-sized inputs would take seconds per step on a CPU. AlexNet runs at
  its smallest valid input (163x163: the flatten feeds ``Linear(1024, 4096)``). ResNet's
  ``ResNet(block, layers)`` takes a depth argument, so it runs with one block per stage, at its
  smallest valid input for ``AvgPool2d(7)`` (193x193). Xception has no size arguments and its
  ``MaxPool2d(10, 1)`` head needs >= 291x291 inputs (8 GFLOPs per image): the test runs it on
  32x32 inputs and replaces ``globalpooling`` by a pool that fits the 1x1 feature map.
- ``dist_option``: the examples' ``fp16``/``partialUpdate``/``sparse*`` branches call
  ``DistOpt`` methods (multi-GPU NCCL training, ``singa_lite.dist``); these tests take the
  single-device branch (``'fp32'``, or ``'plain'`` in resnet.py).
- native.py trains tensors it never names: the optimizer names them (``param:1``...) as SINGA's
  does. char_rnn.py passes (N, 1) integer labels to ``SoftMaxCrossEntropy``, taken as labels.
- Out of scope: ``examples/rnn/imdb_model.py`` builds ``layer.CudnnRNN``, a cuDNN-only layer;
  ``device.create_cuda_gpu_on`` is replaced by the CPU device (the GPU runs the same code).
"""

from __future__ import annotations

import numpy as np
import pytest
from singa_example_models import (
    CNN,
    MLP,
    AlexNet,
    BasicBlock,
    Bottleneck,
    CharRNN,
    ResNet,
    Xception,
    convert,
)

from singa_lite import autograd, device, layer, opt, tensor


# --- the tests -------------------------------------------------------------------------------
def _xception_at_32():
    """Xception for 32x32 inputs: its 1x1 feature map gets a pool that fits (see the docstring)."""
    m = Xception(num_classes=10, num_channels=3)
    m.globalpooling = layer.MaxPool2d(1, 1)
    return m


# name: (model factory, input shape (batch, C, H, W) or (batch, D), dist_option)
MODELS = {
    "cnn": (lambda: CNN(num_classes=10, num_channels=1), (2, 1, 28, 28), "fp32"),
    "alexnet": (lambda: AlexNet(num_classes=10, num_channels=3), (1, 3, 163, 163), "fp32"),
    "resnet-basic": (lambda: ResNet(BasicBlock, [1, 1, 1, 1], num_channels=3), (2, 3, 193, 193), "plain"),
    "resnet-bottleneck": (
        lambda: ResNet(Bottleneck, [1, 1, 1, 1], num_channels=3),
        (1, 3, 193, 193),
        "plain",
    ),
    "xceptionnet": (_xception_at_32, (2, 3, 32, 32), "fp32"),
    "mlp": (lambda: MLP(data_size=20, perceptron_size=16, num_classes=10), (4, 20), "fp32"),
}


def _batch(shape, num_classes=10, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.integers(0, num_classes, shape[0]).astype(np.int32)
    return x, y


def _placeholders(shape, dev):
    return tensor.Tensor(shape, dev, tensor.float32), tensor.Tensor((shape[0],), dev, tensor.int32)


def _close(a, b, tol=1e-4):
    """Equal up to ``tol`` relative to b's largest value (one pass: the models are large)."""
    return float(np.max(np.abs(a - b), initial=0.0)) <= tol * (1.0 + float(np.max(np.abs(b), initial=0.0)))


def _copies(states):
    return {k: tensor.to_numpy(v).copy() for k, v in states.items()}


def _steps(m, tx, ty, x, y, dist_option, steps=2):
    """Train steps as train_cnn.py does; the loss of each."""
    m.train()
    device.get_default_device().SetRandSeed(1)  # the same dropout masks in eager and graph mode
    losses = []
    for _ in range(steps):
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        out, loss = m(tx, ty, dist_option, None)
        assert tensor.to_numpy(out).shape == (x.shape[0], 10)
        losses.append(float(tensor.to_numpy(loss)[0]))
    return losses


@pytest.mark.parametrize("name", list(MODELS))
def test_example_model_trains_and_round_trips(name, tmp_path):
    """Eager and graph training agree; the states survive set_states and save/load_states."""
    factory, shape, dist_option = MODELS[name]
    dev = device.get_default_device()
    dev.SetRandSeed(0)
    m = factory()
    sgd = opt.SGD(lr=0.005, momentum=0.9, weight_decay=1e-5, dtype=tensor.float32)
    tx, ty = _placeholders(shape, dev)
    m.set_optimizer(sgd)
    m.compile([tx], is_train=True, use_graph=False, sequential=False)
    initial, initial_opt = _copies(m.get_states()), sgd.get_states()
    x, y = _batch(shape)

    eager = _steps(m, tx, ty, x, y, dist_option)
    assert np.all(np.isfinite(eager)), eager
    assert eager[-1] != eager[0], f"{name}: training left the loss unchanged: {eager}"
    # Every parameter the optimizer updated is one the model saves (no orphan layers).
    assert sorted(sgd.moments) == sorted(m.get_params())
    trained = _copies(m.get_states())
    m.save_states(str(tmp_path / "ckpt.zip"), aux_states={"epoch": tensor.from_numpy(np.array([2]))})

    # Back to the start, in graph mode: the same losses and the same trained states.
    m.set_states(initial)
    sgd.set_states(initial_opt)
    m.graph(True, False)
    graph = _steps(m, tx, ty, x, y, dist_option)
    np.testing.assert_allclose(graph, eager, rtol=1e-4, err_msg=f"{name}: graph mode != eager mode")
    for k, v in _copies(m.get_states()).items():
        assert _close(v, trained[k]), f"{name}: {k} after graph training != after eager training"

    # A new model restores the eager-trained one from the checkpoint.
    fresh = factory()
    fresh.set_optimizer(opt.SGD(lr=0.005, momentum=0.9, weight_decay=1e-5))
    fresh.compile([tx], is_train=False, use_graph=False)
    aux = fresh.load_states(str(tmp_path / "ckpt.zip"))
    assert int(tensor.to_numpy(aux["epoch"])[0]) == 2
    loaded = _copies(fresh.get_states())
    assert sorted(loaded) == sorted(trained)
    for k, v in trained.items():
        np.testing.assert_array_equal(loaded[k], v, err_msg=k)
    assert fresh.optimizer.step_counter == 2
    m.eval()
    fresh.eval()
    tx.copy_from_numpy(_batch(shape, seed=1)[0])
    np.testing.assert_allclose(tensor.to_numpy(fresh(tx)), tensor.to_numpy(m(tx)), rtol=1e-3, atol=1e-5)


def accuracy(pred, target):
    """examples/cnn/train_cnn.py's accuracy."""
    y = np.argmax(pred, axis=1)
    a = y == target
    correct = np.array(a, "int").sum()
    return correct


@pytest.mark.parametrize("graph", [True, False])
def test_train_cnn_loop(graph):
    """train_cnn.py's run(): placeholders, compile, train and eval phases, for cnn and mlp."""
    rng = np.random.default_rng(0)
    for name in ("cnn", "mlp"):
        dev = device.get_default_device()
        dev.SetRandSeed(0)
        np.random.seed(0)
        batch_size, num_classes = 8, 3
        if name == "cnn":
            train_x = rng.standard_normal((32, 1, 28, 28)).astype(np.float32)
            m = CNN(num_channels=1, num_classes=num_classes)
        else:
            train_x = rng.standard_normal((32, 12)).astype(np.float32)
            m = MLP(data_size=12, num_classes=num_classes)
        # learnable labels: the class of each sample is where its mean lies
        train_y = np.digitize(train_x.reshape(32, -1).mean(1), [-0.05, 0.05]).astype(np.int32)
        train_x += (train_y - 1).reshape((-1,) + (1,) * (train_x.ndim - 1)).astype(np.float32)
        sgd = opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-5, dtype=tensor.float32)
        if m.dimension == 4:
            tx = tensor.Tensor((batch_size, 1, m.input_size, m.input_size), dev, tensor.float32)
        elif m.dimension == 2:
            tx = tensor.Tensor((batch_size, 12), dev, tensor.float32)
        ty = tensor.Tensor((batch_size,), dev, tensor.int32)
        num_train_batch = train_x.shape[0] // batch_size
        idx = np.arange(train_x.shape[0], dtype=np.int32)
        m.set_optimizer(sgd)
        m.compile([tx], is_train=True, use_graph=graph, sequential=False)
        dev.SetVerbosity(0)
        epoch_losses = []
        for _epoch in range(3):
            np.random.shuffle(idx)
            train_correct = np.zeros(shape=[1], dtype=np.float32)
            train_loss = np.zeros(shape=[1], dtype=np.float32)
            m.train()
            for b in range(num_train_batch):
                x = train_x[idx[b * batch_size : (b + 1) * batch_size]]
                y = train_y[idx[b * batch_size : (b + 1) * batch_size]]
                tx.copy_from_numpy(x)
                ty.copy_from_numpy(y)
                out, loss = m(tx, ty, "fp32", None)
                train_correct += accuracy(tensor.to_numpy(out), y)
                train_loss += tensor.to_numpy(loss)[0]
            epoch_losses.append(float(train_loss[0]))
        m.eval()
        test_correct = np.zeros(shape=[1], dtype=np.float32)
        for b in range(num_train_batch):
            tx.copy_from_numpy(train_x[b * batch_size : (b + 1) * batch_size])
            out_test = m(tx)
            test_correct += accuracy(
                tensor.to_numpy(out_test), train_y[b * batch_size : (b + 1) * batch_size]
            )
        dev.PrintTimeProfiling()
        assert np.all(np.isfinite(epoch_losses)) and epoch_losses[-1] < epoch_losses[0], (name, epoch_losses)
        assert test_correct[0] / train_x.shape[0] > 0.6, (name, test_correct)


def _boundary_data():
    """The 2-D data of examples/mlp/model.py's and native.py's ``__main__``."""
    np.random.seed(0)

    def f(x):
        return 5 * x + 1

    x = np.random.uniform(-1, 1, 400)
    y = f(x) + 2 * np.random.randn(len(x))
    label = np.asarray([5 * a + 1 > b for (a, b) in zip(x, y)]).astype(np.int32)
    data = np.array([[a, b] for (a, b) in zip(x, y)], dtype=np.float32)
    return data, label


def test_mlp_model_main():
    """examples/mlp/model.py's ``__main__``: graph mode, called with ``spars=None`` as a keyword."""
    data, label = _boundary_data()
    dev = device.get_default_device()
    sgd = opt.SGD(0.05)
    tx = tensor.Tensor((400, 2), dev, tensor.float32)
    ty = tensor.Tensor((400,), dev, tensor.int32)
    model = MLP(data_size=2, perceptron_size=3, num_classes=2)

    # attached model to graph
    model.set_optimizer(sgd)
    model.compile([tx], is_train=True, use_graph=True, sequential=False)
    model.train()

    losses = []
    for _i in range(30):
        tx.copy_from_numpy(data)
        ty.copy_from_numpy(label)
        out, loss = model(tx, ty, "fp32", spars=None)  # noqa: RUF059 (as SINGA writes it)
        losses.append(tensor.to_numpy(loss)[0])
    assert model._graph is not None, "the keyword call should be recorded and replayed"
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses


def test_mlp_native():
    """examples/mlp/native.py: raw autograd ops on tensors the script creates, with ``opt.SGD``."""
    from singa_lite.tensor import Tensor as Tensor_  # the script's ``from singa.tensor import Tensor``

    np.random.seed(0)
    autograd.training = True
    data, label = _boundary_data()

    def to_categorical(y, num_classes):
        y = np.array(y, dtype="int")
        n = y.shape[0]
        categorical = np.zeros((n, num_classes))
        categorical[np.arange(n), y] = 1
        return categorical

    label = to_categorical(label, 2).astype(np.float32)
    precision, np_precision = tensor.float32, np.float32
    dev = device.get_default_device()

    inputs = Tensor_(data=data, device=dev)
    target = Tensor_(data=label, device=dev)

    inputs = inputs.as_type(precision)
    target = target.as_type(tensor.int32)

    w0_np = np.random.normal(0, 0.1, (2, 3)).astype(np_precision)
    w0 = Tensor_(data=w0_np, device=dev, dtype=precision, requires_grad=True, stores_grad=True)
    b0 = Tensor_(shape=(3,), device=dev, dtype=precision, requires_grad=True, stores_grad=True)
    b0.set_value(0.0)

    w1_np = np.random.normal(0, 0.1, (3, 2)).astype(np_precision)
    w1 = Tensor_(data=w1_np, device=dev, dtype=precision, requires_grad=True, stores_grad=True)
    b1 = Tensor_(shape=(2,), device=dev, dtype=precision, requires_grad=True, stores_grad=True)
    b1.set_value(0.0)

    sgd = opt.SGD(0.05, 0.8)

    losses = []
    for _i in range(30):
        x = autograd.matmul(inputs, w0)
        x = autograd.add_bias(x, b0)
        x = autograd.relu(x)
        x = autograd.matmul(x, w1)
        x = autograd.add_bias(x, b1)
        loss = autograd.softmax_cross_entropy(x, target)
        sgd(loss)
        losses.append(tensor.to_numpy(loss)[0])
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses


@pytest.mark.filterwarnings("ignore:bool\\(\\) of a Tensor")  # the script's `if labels:` (SINGA truthiness)
def test_char_rnn(tmp_path):
    """examples/rnn/char_rnn.py's train() and evaluate() on a synthetic periodic text."""
    vocab_size, batch_size, seq_length, hidden_size = 5, 4, 6, 8
    text = np.arange(batch_size * 3 * (seq_length + 1)) % vocab_size  # "abcdeabcde..."
    data = text.reshape(-1, seq_length + 1).astype(np.int32)
    dev = device.get_default_device()
    dev.SetRandSeed(0)
    model = CharRNN(vocab_size, hidden_size)
    model.graph(True, False)

    inputs, labels = None, None
    losses = []
    for _epoch in range(4):
        model.train()
        for b in range(data.shape[0] // batch_size):
            batch = data[b * batch_size : (b + 1) * batch_size]
            inputs, labels = convert(batch, batch_size, seq_length, vocab_size, dev, inputs, labels)
            out, loss = model(inputs, labels)  # noqa: RUF059
            model.reset_states(dev)
            losses.append(tensor.to_numpy(loss)[0])
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    assert {"hx", "cx"} <= set(model.get_states())

    # evaluate(): eval mode, the loss from autograd directly
    model.eval()
    model.reset_states(dev)
    y = model(inputs)
    val_loss = tensor.to_numpy(autograd.softmax_cross_entropy(y, labels))[0]
    assert np.isfinite(val_loss)

    model.save_states(str(tmp_path / "rnn.zip"))
    fresh = CharRNN(vocab_size, hidden_size)
    fresh.eval()
    fresh(inputs)  # initialize (creates hx, cx and the LSTM weights) on the first forward
    fresh.load_states(str(tmp_path / "rnn.zip"))
    model.reset_states(dev)
    fresh.reset_states(dev)
    np.testing.assert_allclose(tensor.to_numpy(fresh(inputs)), tensor.to_numpy(model(inputs)), rtol=1e-5)

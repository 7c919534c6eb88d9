"""SINGA-style training scripts, written here, one per family of SINGA's examples (issue 17).

Each runs as a SINGA script would with ``singa`` → ``singa_lite`` in its imports: placeholders
filled with ``copy_from_numpy``, ``compile`` with graph mode, ``model(tx, ty, dist_option,
spars)``, ``tensor.to_numpy(loss)[0]``; it trains (the loss falls) and its states round-trip
through ``get_states``/``set_states`` and ``save_states``/``load_states``. The models are in
``singa_style_models.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from singa_style_models import (
    GAN,
    MLP,
    CharLSTM,
    ConvNet,
    ResidualNet,
    SeparableNet,
    WideConvNet,
    one_hot_steps,
    time_major_labels,
)

from singa_lite import autograd, device, opt, sonnx, tensor

# name: (model factory, input shape, dist_option)
MODELS = {
    "conv": (lambda: ConvNet(num_classes=10, num_channels=1), (4, 1, 16, 16), "plain"),
    "wide": (lambda: WideConvNet(num_classes=10, num_channels=3), (2, 3, 24, 24), "fp32"),
    "residual": (lambda: ResidualNet(num_classes=10, num_channels=3, depth=2), (2, 3, 16, 16), "plain"),
    "separable": (lambda: SeparableNet(num_classes=10, num_channels=3), (2, 3, 16, 16), "plain"),
    "mlp": (lambda: MLP(data_size=20, hidden_size=16, num_classes=10), (4, 20), "fp32"),
}


def _batch(shape, num_classes=10, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(np.float32), rng.integers(0, num_classes, shape[0]).astype(
        np.int32
    )


def _arrays(states):
    return {k: tensor.to_numpy(v).copy() for k, v in states.items()}


def _train(m, tx, ty, x, y, dist_option, steps=3):
    m.train()
    device.get_default_device().SetRandSeed(7)  # the same dropout masks in both modes
    losses = []
    for _ in range(steps):
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        out, loss = m(tx, ty, dist_option, None)
        assert tensor.to_numpy(out).shape == (x.shape[0], 10)
        losses.append(tensor.to_numpy(loss)[0])
    return losses


@pytest.mark.parametrize("name", list(MODELS))
def test_model_trains_in_both_modes_and_round_trips(name, tmp_path):
    factory, shape, dist_option = MODELS[name]
    dev = device.get_default_device()
    dev.SetRandSeed(0)
    m = factory()
    sgd = opt.SGD(lr=0.01, momentum=0.9, weight_decay=1e-5)
    tx, ty = tensor.Tensor(shape, dev, tensor.float32), tensor.Tensor((shape[0],), dev, tensor.int32)
    m.set_optimizer(sgd)
    m.compile([tx], is_train=True, use_graph=False, sequential=False)
    start, start_opt = _arrays(m.get_states()), sgd.get_states()
    x, y = _batch(shape)

    eager = _train(m, tx, ty, x, y, dist_option)
    assert np.all(np.isfinite(eager)) and eager[-1] < eager[0], (name, eager)
    assert sorted(sgd.moments) == sorted(m.get_params())  # every updated param is saved
    trained = _arrays(m.get_states())
    m.save_states(str(tmp_path / "ckpt.h5"), aux_states={"epoch": 3})

    m.set_states(start)
    sgd.set_states(start_opt)
    m.graph(True, False)
    graph = _train(m, tx, ty, x, y, dist_option)
    np.testing.assert_allclose(graph, eager, rtol=1e-4, err_msg=f"{name}: graph != eager")
    for k, v in _arrays(m.get_states()).items():
        np.testing.assert_allclose(v, trained[k], rtol=1e-3, atol=1e-5, err_msg=k)

    fresh = factory()
    fresh.set_optimizer(opt.SGD(lr=0.01, momentum=0.9, weight_decay=1e-5))
    fresh.compile([tx], is_train=False, use_graph=False)
    assert fresh.load_states(str(tmp_path / "ckpt.h5"))["epoch"] == 3
    for k, v in _arrays(fresh.get_states()).items():
        np.testing.assert_array_equal(v, trained[k], err_msg=k)
    assert fresh.optimizer.step_counter == 3


@pytest.mark.parametrize("graph", ["True", "False"])  # as argparse hands them over
def test_epoch_loop_with_placeholders(graph):
    """Shuffled epochs over placeholders, then an eval pass; learnable synthetic labels."""
    rng = np.random.default_rng(1)
    for m, shape in ((ConvNet(num_classes=3), (48, 1, 16, 16)), (MLP(12, 16, 3), (48, 12))):
        dev = device.get_default_device()
        dev.SetRandSeed(0)
        data = rng.standard_normal(shape).astype(np.float32)
        labels = np.digitize(data.reshape(48, -1).mean(1), [-0.05, 0.05]).astype(np.int32)
        data += (labels - 1).reshape((-1,) + (1,) * (data.ndim - 1))
        bs = 8
        tx = tensor.Tensor((bs, *shape[1:]), dev, tensor.float32)
        ty = tensor.Tensor((bs,), dev, tensor.int32)
        m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
        m.compile([tx], is_train=True, use_graph=graph, sequential=False)
        order = np.arange(48)
        epoch_loss = []
        for _ in range(3):
            rng.shuffle(order)
            m.train()
            total = 0.0
            for b in range(48 // bs):
                pick = order[b * bs : (b + 1) * bs]
                tx.copy_from_numpy(data[pick])
                ty.copy_from_numpy(labels[pick])
                _, loss = m(tx, ty, "plain", None)
                total += tensor.to_numpy(loss)[0]
            epoch_loss.append(total)
        m.eval()
        correct = 0
        for b in range(48 // bs):
            tx.copy_from_numpy(data[b * bs : (b + 1) * bs])
            correct += int((tensor.to_numpy(m(tx)).argmax(1) == labels[b * bs : (b + 1) * bs]).sum())
        assert epoch_loss[-1] < epoch_loss[0], epoch_loss
        assert correct / 48 > 0.6, correct


def test_graph_mode_replays_a_call_with_keyword_spars():
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (64, 2)).astype(np.float32)
    y = (x[:, 1] > 0.5 * x[:, 0]).astype(np.int32)
    tx, ty = tensor.Tensor((64, 2)), tensor.Tensor((64,), dtype=tensor.int32)
    m = MLP(2, 8, 2)
    m.set_optimizer(opt.SGD(0.1))
    m.compile([tx], is_train=True, use_graph=True)
    losses = []
    for _ in range(25):
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        _, loss = m(tx, ty, "plain", spars=None)
        losses.append(tensor.to_numpy(loss)[0])
    assert m._graph is not None and m._graph.replays == 24
    assert losses[-1] < losses[0]


def test_native_autograd_mlp_with_unnamed_params():
    """Raw autograd ops on tensors the script makes and never names; ``sgd(loss)`` updates them."""
    rng = np.random.default_rng(3)
    autograd.training = True
    x = rng.uniform(-1, 1, (100, 2)).astype(np.float32)
    onehot = np.eye(2, dtype=np.float32)[(x.sum(1) > 0).astype(int)]
    inputs, target = tensor.from_numpy(x), tensor.from_numpy(onehot)
    w0 = tensor.Tensor(data=rng.normal(0, 0.1, (2, 4)).astype(np.float32), stores_grad=True)
    b0 = tensor.Tensor((4,), stores_grad=True)
    w1 = tensor.Tensor(data=rng.normal(0, 0.1, (4, 2)).astype(np.float32), stores_grad=True)
    b1 = tensor.Tensor((2,), stores_grad=True)
    sgd = opt.SGD(0.1, 0.8)
    losses = []
    for _ in range(30):
        h = autograd.relu(autograd.add_bias(autograd.matmul(inputs, w0), b0))
        loss = autograd.softmax_cross_entropy(autograd.add_bias(autograd.matmul(h, w1), b1), target)
        sgd(loss)
        losses.append(tensor.to_numpy(loss)[0])
    assert losses[-1] < losses[0] * 0.9, losses
    assert set(sgd.moments) == {w0.name, b0.name, w1.name, b1.name}
    assert all(p.is_dummy() for p in (w0, b0, w1, b1))


def test_char_lstm_trains_and_restores(tmp_path):
    vocab, n, t = 5, 4, 6
    codes = np.arange(n * 4 * (t + 1)).reshape(-1, t + 1) % vocab  # a periodic text
    dev = device.get_default_device()
    dev.SetRandSeed(0)
    m = CharLSTM(vocab, 12)
    m.set_optimizer(opt.SGD(0.5, momentum=0.9))
    steps = one_hot_steps(codes[:n, :t], vocab, dev)
    labels = time_major_labels(codes[:n, 1:], dev)
    m.graph(True, False)  # no compile: initialize runs on the first call, making hx/cx
    m.train()
    losses = []
    for _ in range(5):
        for b in range(codes.shape[0] // n):
            batch = codes[b * n : (b + 1) * n]
            one_hot_steps(batch[:, :t], vocab, dev, steps)
            time_major_labels(batch[:, 1:], dev, labels)
            _, loss = m(steps, labels)
            m.reset_states()  # each batch starts from a zero state
            losses.append(tensor.to_numpy(loss)[0])
    assert losses[-1] < losses[0] * 0.5, losses
    assert {"carry.h", "carry.c"} <= set(m.get_states())

    m.save_states(str(tmp_path / "lstm.h5"))
    fresh = CharLSTM(vocab, 12)
    fresh.eval()
    fresh(steps)  # the first forward builds the LSTM and the carried state
    fresh.load_states(str(tmp_path / "lstm.h5"))
    m.eval()
    m.reset_states()
    fresh.reset_states()
    np.testing.assert_allclose(tensor.to_numpy(fresh(steps)), tensor.to_numpy(m(steps)), rtol=1e-5)


def test_gan_updates_each_side_with_its_own_optimizer():
    """Selective updates: each step applies only the gradients of the side being trained."""
    rng = np.random.default_rng(4)
    dev = device.get_default_device()
    dev.SetRandSeed(0)
    gan = GAN(4, 2)
    noise, real = tensor.Tensor((16, 4)), tensor.Tensor((16, 2))
    gan.compile([noise], is_train=True)
    gan.set_optimizers(opt.Adam(lr=0.01), opt.Adam(lr=0.01))
    d_losses = []
    for _ in range(20):
        noise.copy_from_numpy(rng.standard_normal((16, 4)).astype(np.float32))
        real.copy_from_numpy(rng.normal((2.0, -1.0), 0.1, (16, 2)).astype(np.float32))
        gen_before = _arrays({k: v for k, v in gan.get_params().items() if k.startswith("gen.")})
        d_loss, _ = gan(noise, real)
        d_losses.append(tensor.to_numpy(d_loss)[0])
        assert any(
            not np.array_equal(tensor.to_numpy(gan.get_params()[k]), v) for k, v in gen_before.items()
        )  # the generator moved in its own step, after the discriminator's
    names = set(gan.get_params())  # the discriminator was built on its first call
    assert set(gan.dis_opt.m) == {n for n in names if n.startswith("dis.")}
    assert set(gan.gen_opt.m) == {n for n in names if n.startswith("gen.")}
    assert d_losses[-1] < d_losses[0], d_losses


def test_onnx_export_then_sonnx_fine_tune():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    tx, ty = tensor.Tensor((8, 6)), tensor.Tensor((8,), dtype=tensor.int32)
    m = MLP(6, 8, 2)
    m.set_optimizer(opt.SGD(0.1))
    m.compile([tx], is_train=True)
    tx.copy_from_numpy(x)
    out = m.forward(tx)  # recorded: training mode after compile
    onnx_model = sonnx.to_onnx([tx], [out])

    tuned = sonnx.SONNXModel(onnx_model)
    tuned.set_optimizer(opt.SGD(0.1, momentum=0.9))
    tuned.compile([tx], is_train=True, use_graph=True)
    ty.copy_from_numpy(y)
    losses = [tensor.to_numpy(tuned(tx, ty)[1])[0] for _ in range(15)]
    assert losses[-1] < losses[0], losses
    assert set(tuned.get_params())  # imported weights train as named params


@pytest.mark.parametrize("dist_option", ["plain", "half", "partialUpdate", "sparseTopK", "sparseThreshold"])
def test_distopt_update_paths_in_a_world_of_one(dist_option):
    dev = device.get_default_device()
    dev.SetRandSeed(0)
    m = ConvNet(num_classes=10, num_channels=1)
    sgd = opt.DistOpt(opt.SGD(lr=0.05, momentum=0.9))
    assert (sgd.world_size, sgd.global_rank, sgd.local_rank) == (1, 0, 0)
    tx, ty = tensor.Tensor((4, 1, 16, 16)), tensor.Tensor((4,), dtype=tensor.int32)
    m.set_optimizer(sgd)
    m.compile([tx], is_train=True, use_graph=False)
    x, y = _batch((4, 1, 16, 16))
    spars = 0.5 if dist_option == "sparseTopK" else 1e-4
    losses = []
    for _ in range(4):
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        losses.append(tensor.to_numpy(m(tx, ty, dist_option, spars)[1])[0])
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], (dist_option, losses)

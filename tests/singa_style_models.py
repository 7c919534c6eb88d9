"""Small models written here in the style of SINGA's example scripts (issue 17, item 6).

They use what SINGA scripts use, so the tests exercise the API those scripts rely on: a
``model.Model`` whose layers are attributes, SINGA's legacy positional layer forms,
``train_one_batch(x, y, dist_option, spars)`` dispatching to the ``DistOpt`` update paths,
``set_optimizer``, a custom ``initialize`` that makes recurrent state tensors, and
``get_states``/``set_states`` overridden to carry them. One model per family of SINGA's
examples: plain CNN, a wide CNN with dropout (AlexNet's family), residual blocks (ResNet's),
separable convolutions (Xception's), an MLP, and a character LSTM.
"""

from __future__ import annotations

import numpy as np

from singa_lite import autograd, layer, model, tensor


class Classifier(model.Model):
    """The loss and the update step every model below shares."""

    dimension = 4

    def __init__(self) -> None:
        super().__init__()
        self.loss_fn = layer.SoftMaxCrossEntropy()

    def train_one_batch(self, x, y, dist_option="plain", spars=None):
        out = self.forward(x)
        loss = self.loss_fn(out, y)
        if dist_option in ("plain", "fp32"):
            self.optimizer(loss)
        elif dist_option == "half":
            self.optimizer.backward_and_update_half(loss)
        elif dist_option == "partialUpdate":
            self.optimizer.backward_and_partial_update(loss)
        elif dist_option == "sparseTopK":
            self.optimizer.backward_and_sparse_update(loss, topK=True, spars=spars)
        elif dist_option == "sparseThreshold":
            self.optimizer.backward_and_sparse_update(loss, topK=False, spars=spars)
        else:
            raise ValueError(f"unknown dist_option {dist_option!r}")
        return out, loss


class ConvNet(Classifier):
    """Two conv/pool stages and two dense layers (the plain CNN family)."""

    def __init__(self, num_classes=10, num_channels=1, input_size=16):
        super().__init__()
        self.input_size = input_size
        self.conv_a = layer.Conv2d(num_channels, 6, 3, padding=1, activation="RELU")
        self.pool_a = layer.MaxPool2d(2, 2)
        self.conv_b = layer.Conv2d(6, 12, 3, padding=1, activation="RELU")
        self.pool_b = layer.MaxPool2d(2, 2)
        self.flat = layer.Flatten()
        self.hidden = layer.Linear(32)
        self.act = layer.ReLU()
        self.head = layer.Linear(num_classes)

    def forward(self, x):
        y = self.pool_b(self.conv_b(self.pool_a(self.conv_a(x))))
        return self.head(self.act(self.hidden(self.flat(y))))


class WideConvNet(Classifier):
    """Large strided kernels, overlapping pools and dropout before each dense layer."""

    def __init__(self, num_classes=10, num_channels=3, input_size=24):
        super().__init__()
        self.input_size = input_size
        self.stem = layer.Conv2d(num_channels, 16, 5, stride=2, padding=2)
        self.stem_act = layer.ReLU()
        self.pool = layer.MaxPool2d(3, 2)
        self.mid = layer.Conv2d(16, 24, 3, padding=1)
        self.mid_act = layer.ReLU()
        self.flat = layer.Flatten()
        self.drop_a = layer.Dropout(0.3)
        self.fc = layer.Linear(48)
        self.fc_act = layer.ReLU()
        self.drop_b = layer.Dropout(0.3)
        self.head = layer.Linear(num_classes)

    def forward(self, x):
        y = self.pool(self.stem_act(self.stem(x)))
        y = self.flat(self.mid_act(self.mid(y)))
        return self.head(self.drop_b(self.fc_act(self.fc(self.drop_a(y)))))


class ResidualUnit(layer.Layer):
    """conv-bn-relu-conv-bn plus a shortcut (a strided 1x1 conv when the shape changes)."""

    def __init__(self, channels_in, channels_out, stride=1):
        super().__init__()
        self.conv1 = layer.Conv2d(channels_in, channels_out, 3, stride, 1, bias=False)
        self.bn1 = layer.BatchNorm2d(channels_out)
        self.relu = layer.ReLU()
        self.conv2 = layer.Conv2d(channels_out, channels_out, 3, 1, 1, bias=False)
        self.bn2 = layer.BatchNorm2d(channels_out)
        self.add = layer.Add()
        if stride != 1 or channels_in != channels_out:
            self.proj = layer.Conv2d(channels_in, channels_out, 1, stride, bias=False)
            self.proj_bn = layer.BatchNorm2d(channels_out)
        else:
            self.proj = None

    def forward(self, x):
        y = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        skip = x if self.proj is None else self.proj_bn(self.proj(x))
        return self.relu(self.add(y, skip))


class ResidualNet(Classifier):
    """A stem, ``depth`` residual units per stage over two stages, global average pooling."""

    def __init__(self, num_classes=10, num_channels=3, input_size=16, depth=1):
        super().__init__()
        self.input_size = input_size
        self.stem = layer.Conv2d(num_channels, 8, 3, 1, 1, bias=False)
        self.stem_bn = layer.BatchNorm2d(8)
        self.stem_act = layer.ReLU()
        units = [ResidualUnit(8, 8) for _ in range(depth)]
        units += [ResidualUnit(8, 16, 2)] + [ResidualUnit(16, 16) for _ in range(depth - 1)]
        for i, unit in enumerate(units):
            setattr(self, f"unit{i}", unit)  # attributes, so each is named and saved
        self._units = units
        self.pool = layer.AvgPool2d(input_size // 2, 1)
        self.flat = layer.Flatten()
        self.head = layer.Linear(num_classes)

    def forward(self, x):
        y = self.stem_act(self.stem_bn(self.stem(x)))
        for unit in self._units:
            y = unit(y)
        return self.head(self.flat(self.pool(y)))


class SeparableUnit(layer.Layer):
    """Two separable convolutions with batch norm, pooled, beside a strided 1x1 shortcut."""

    def __init__(self, channels_in, channels_out):
        super().__init__()
        self.sep1 = layer.SeparableConv2d(channels_in, channels_out, 3, padding=1)
        self.bn1 = layer.BatchNorm2d(channels_out)
        self.act = layer.ReLU()
        self.sep2 = layer.SeparableConv2d(channels_out, channels_out, 3, padding=1)
        self.bn2 = layer.BatchNorm2d(channels_out)
        self.pool = layer.MaxPool2d(3, 2, 1)
        self.skip = layer.Conv2d(channels_in, channels_out, 1, 2, bias=False)
        self.add = layer.Add()

    def forward(self, x):
        y = self.bn2(self.sep2(self.act(self.bn1(self.sep1(x)))))
        return self.add(self.pool(y), self.skip(x))


class SeparableNet(Classifier):
    """A conv stem and two separable units, then a global pool (the Xception family)."""

    def __init__(self, num_classes=10, num_channels=3, input_size=16):
        super().__init__()
        self.input_size = input_size
        self.stem = layer.Conv2d(num_channels, 8, 3, 1, 1)
        self.stem_act = layer.ReLU()
        self.unit1 = SeparableUnit(8, 16)
        self.unit2 = SeparableUnit(16, 24)
        self.pool = layer.AvgPool2d(input_size // 4, 1)
        self.flat = layer.Flatten()
        self.head = layer.Linear(num_classes)

    def forward(self, x):
        y = self.unit2(self.unit1(self.stem_act(self.stem(x))))
        return self.head(self.flat(self.pool(y)))


class MLP(Classifier):
    """One hidden layer, legacy ``Linear(in, out)`` forms."""

    dimension = 2

    def __init__(self, data_size=10, hidden_size=16, num_classes=10):
        super().__init__()
        self.data_size = data_size
        self.fc1 = layer.Linear(data_size, hidden_size)
        self.act = layer.ReLU()
        self.fc2 = layer.Linear(hidden_size, num_classes)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class CharLSTM(model.Model):
    """Next-character prediction over a list of one-hot time steps.

    The LSTM's carried state lives in ``self.hx``/``self.cx``, made in ``initialize`` (called
    once, before the first forward) and added to ``get_states`` so checkpoints hold them.
    """

    def __init__(self, vocab_size, hidden_size=16):
        super().__init__()
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.lstm = layer.LSTM(vocab_size, hidden_size)
        self.stack = layer.Cat(0)
        self.decode = layer.Linear(hidden_size, vocab_size)
        self.loss_fn = layer.SoftMaxCrossEntropy()

    def initialize(self, steps):
        n = steps[0].shape[0]
        self.hx = tensor.Tensor((n, self.hidden_size), steps[0].device, requires_grad=False)
        self.cx = tensor.Tensor((n, self.hidden_size), steps[0].device, requires_grad=False)

    def forward(self, steps):
        outs, h, c = self.lstm(steps, (self.hx, self.cx))
        self.hx.copy_data(h)
        self.cx.copy_data(c)
        return self.decode(self.stack(outs))  # (T * N, vocab)

    def train_one_batch(self, steps, labels):
        out = self.forward(steps)
        loss = self.loss_fn(out, labels)
        self.optimizer(loss)
        return out, loss

    def reset_states(self):
        self.hx.set_value(0.0)
        self.cx.set_value(0.0)

    def get_states(self):
        states = super().get_states()
        states["carry.h"], states["carry.c"] = self.hx, self.cx
        return states

    def set_states(self, states):
        self.hx.copy_from(states["carry.h"])
        self.cx.copy_from(states["carry.c"])
        super().set_states({k: v for k, v in states.items() if not k.startswith("carry.")})


def one_hot_steps(codes, vocab_size, dev, steps=None):
    """(N, T) character codes as T one-hot (N, vocab) tensors, refilled in place when given."""
    onehot = np.eye(vocab_size, dtype=np.float32)[codes]  # (N, T, vocab)
    if steps is None:
        return [tensor.from_numpy(onehot[:, t], dev) for t in range(codes.shape[1])]
    for t, s in enumerate(steps):
        s.copy_from_numpy(onehot[:, t])
    return steps


def time_major_labels(codes, dev, labels=None):
    """(N, T) next-character codes as one (T * N,) int32 tensor, time-major as the outputs."""
    flat = np.ascontiguousarray(codes.T).reshape(-1).astype(np.int32)
    if labels is None:
        return tensor.from_numpy(flat, dev)
    labels.copy_from_numpy(flat)
    return labels


class Generator(model.Model):
    """Noise to samples (a GAN's generator); trained through the discriminator's verdict."""

    def __init__(self, noise_size=4, data_size=2):
        super().__init__()
        self.fc1 = layer.Linear(noise_size, 16)
        self.act = layer.ReLU()
        self.fc2 = layer.Linear(16, data_size)

    def forward(self, z):
        return self.fc2(self.act(self.fc1(z)))


class Discriminator(model.Model):
    """Samples to a real/fake logit."""

    def __init__(self, data_size=2):
        super().__init__()
        self.fc1 = layer.Linear(data_size, 16)
        self.act = layer.ReLU()
        self.fc2 = layer.Linear(16, 1)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class GAN(model.Model):
    """A generator and a discriminator in one model, each side updated by its own optimizer.

    ``train_one_batch(noise, real)`` runs the discriminator step, then the generator step; each
    applies only the gradients of its side's params (picked by name prefix), so the other side
    stays as it was.
    """

    def __init__(self, noise_size=4, data_size=2):
        super().__init__()
        self.gen = Generator(noise_size, data_size)
        self.dis = Discriminator(data_size)

    def forward(self, noise):
        return self.gen.forward(noise)

    def set_optimizers(self, gen_opt, dis_opt):
        self.gen_opt, self.dis_opt = gen_opt, dis_opt

    def _update(self, optimizer, loss, prefix):
        for p, g in autograd.backward(loss):
            if p.name.startswith(prefix):
                optimizer.apply(p.name, p, g)
        optimizer.step()

    def train_one_batch(self, noise, real):
        n = real.shape[0]
        ones = tensor.from_numpy(np.ones((n, 1), np.float32), real.device)
        zeros = tensor.from_numpy(np.zeros((n, 1), np.float32), real.device)
        fake = self.gen.forward(noise)
        d_loss = bce_with_logits(self.dis.forward(real), ones) + bce_with_logits(
            self.dis.forward(fake), zeros
        )
        self._update(self.dis_opt, d_loss, "dis.")
        g_loss = bce_with_logits(self.dis.forward(self.gen.forward(noise)), ones)
        self._update(self.gen_opt, g_loss, "gen.")
        return d_loss, g_loss


def bce_with_logits(logits, target):
    """Binary cross-entropy of ``sigmoid(logits)`` against 0/1 ``target``, from autograd ops."""
    return autograd.binary_cross_entropy(autograd.sigmoid(logits), target)

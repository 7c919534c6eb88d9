"""Small models, data and training loops shared by the checkpoint tests and their child scripts."""

from __future__ import annotations

import numpy as np

from singa_lite import device, layer, model, opt, tensor

BATCH, SHAPE = 6, (2, 6, 6)


class CNN(model.Model):
    """Conv + BatchNorm + ReLU + MaxPool + Dropout + Linear: every kind of state a model has."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = layer.Conv2d(4, 3, padding=1)
        self.bn1 = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.pool = layer.MaxPool2d(2)
        self.flat = layer.Flatten()
        self.drop = layer.Dropout(0.3)
        self.fc = layer.Linear(3)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        y = self.pool(self.relu(self.bn1(self.conv1(x))))
        return self.fc(self.drop(self.flat(y)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


class MLP(model.Model):
    """Linear(3) -> ReLU -> Linear(2): the model of the golden file."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = layer.Linear(3)
        self.relu = layer.ReLU()
        self.fc2 = layer.Linear(2)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))


OPTIMIZERS = {
    "sgd": lambda: opt.SGD(lr=opt.ExponentialDecay(0.05, 2, 0.9), momentum=0.9),
    "adam": lambda: opt.Adam(lr=0.01),
}


def make_cnn(
    opt_name: str = "sgd", seed: int = 3, dev=None, use_graph: bool = False
) -> tuple[CNN, tensor.Tensor, tensor.Tensor]:
    """A compiled CNN with its optimizer and placeholders, weights drawn from ``seed``."""
    dev = dev or device.create_cpu_device()
    dev.SetRandSeed(seed)
    m = CNN()
    m.set_optimizer(OPTIMIZERS[opt_name]())
    tx = tensor.Tensor((BATCH, *SHAPE), dev)
    ty = tensor.Tensor((BATCH,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=use_graph)
    return m, tx, ty


def batches(steps: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((BATCH, *SHAPE)).astype(np.float32), rng.integers(0, 3, BATCH).astype(np.int32))
        for _ in range(steps)
    ]


def train(m, tx, ty, data, start: int, stop: int) -> None:
    """Steps ``start`` .. ``stop - 1`` of ``data``."""
    for xb, yb in data[start:stop]:
        tx.copy_from_numpy(xb)
        ty.copy_from_numpy(yb)
        m(tx, ty)


# -- the golden file (format version 1) -------------------------------------------------------
GOLDEN_AUX_EPOCH = 3


def golden_params() -> dict[str, np.ndarray]:
    shapes = {"fc1.W": (4, 3), "fc1.b": (3,), "fc2.W": (3, 2), "fc2.b": (2,)}
    return {k: (np.arange(np.prod(s), dtype=np.float32).reshape(s) - 2) / 8 for k, s in shapes.items()}


def golden_moments() -> dict[str, np.ndarray]:
    return {k: v * 0.5 + 1 for k, v in golden_params().items()}

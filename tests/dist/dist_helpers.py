"""What the MPI worker and the tests share: a small model, the data and its sharding."""

from __future__ import annotations

import numpy as np

from singa_lite import data, device, layer, model, opt, tensor

BATCH = 16  # per rank
STEPS = 6


class MLP(model.Model):
    """64 -> hidden -> 10 with softmax cross-entropy; ``train_one_batch`` picks the update path."""

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.fc1 = layer.Linear(hidden)
        self.relu = layer.ReLU()
        self.fc2 = layer.Linear(10)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        return self.fc2(self.relu(self.fc1(x)))

    def train_one_batch(
        self, x: tensor.Tensor, y: tensor.Tensor, dist_option: str = "plain", threshold: int = 2097152
    ) -> tuple:
        out = self.forward(x)
        loss = self.loss(out, y)
        if dist_option == "plain":
            if threshold == 2097152:
                self.optimizer(loss)  # a plain Optimizer or DistOpt's __call__
            else:
                self.optimizer.backward_and_update(loss, threshold=threshold)
        elif dist_option == "half":
            self.optimizer.backward_and_update_half(loss, threshold=threshold)
        else:
            raise ValueError(dist_option)
        return out, loss


# name -> (dist_option, graph mode, optimizer factory, threshold, buffSize)
CONFIGS = {
    "sgd_eager": ("plain", False, lambda: opt.SGD(lr=0.1, momentum=0.9, weight_decay=1e-4), 2097152, 4194304),
    # threshold 100 / buffSize 1000: fc1.W and fc2.W travel alone, the biases fused together.
    "adam_graph_fused": ("plain", True, lambda: opt.Adam(lr=0.01), 100, 1000),
    "sgd_half": ("half", False, lambda: opt.SGD(lr=0.1, momentum=0.9), 100, 1000),
}


def digits_flat() -> tuple[np.ndarray, np.ndarray]:
    x, y = data.load_digits("train")
    return x.reshape(len(x), -1).astype(np.float32), y.astype(np.int32)


def shard(step: int, rank: int, world: int) -> slice:
    """Rank ``rank``'s part of global batch ``step`` (the global batch is ``world * BATCH`` rows)."""
    start = step * world * BATCH + rank * BATCH
    return slice(start, start + BATCH)


def build(batch: int, seed: int, graph: bool, hidden: int = 32) -> tuple[MLP, tensor.Tensor, tensor.Tensor]:
    """A compiled MLP with placeholders of ``batch`` rows, initialised from ``seed``."""
    dev = device.get_default_device()
    dev.SetRandSeed(seed)
    m = MLP(hidden)
    tx = tensor.Tensor((batch, 64), dev)
    ty = tensor.Tensor((batch,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=graph)
    return m, tx, ty


def params_of(m: model.Model) -> dict[str, np.ndarray]:
    return {k: tensor.to_numpy(v).copy() for k, v in m.get_params().items()}

"""A CNN trained SINGA-style: placeholders, compile(use_graph=True), model(tx, ty).

    python examples/cnn.py [--epochs 8]

The same structure as SINGA's examples/cnn/train_cnn.py, on the embedded 8x8 digits.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from singa_lite import data, device, layer, model, opt, tensor


class CNN(model.Model):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = layer.Conv2d(16, 3, padding=1)
        self.conv2 = layer.Conv2d(32, 3, padding=1)
        self.pooling1 = layer.MaxPool2d(2)
        self.pooling2 = layer.MaxPool2d(2)
        self.relu = layer.ReLU()
        self.flatten = layer.Flatten()
        self.linear1 = layer.Linear(64)
        self.linear2 = layer.Linear(num_classes)
        self.softmax_cross_entropy = layer.SoftMaxCrossEntropy()

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        y = self.pooling1(self.relu(self.conv1(x)))
        y = self.pooling2(self.relu(self.conv2(y)))
        y = self.relu(self.linear1(self.flatten(y)))
        return self.linear2(y)

    def train_one_batch(self, x: tensor.Tensor, y: tensor.Tensor) -> tuple:
        out = self.forward(x)
        loss = self.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()

    dev = device.get_default_device()
    dev.SetRandSeed(0)
    x_train, y_train = data.load_digits("train")
    x_val, y_val = data.load_digits("test")

    m = CNN()
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-5))
    tx = tensor.Tensor((args.batch_size, 1, 8, 8), dev, tensor.float32)
    ty = tensor.Tensor((args.batch_size,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=True, sequential=False)
    m.summary()

    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        m.train()
        correct = total = 0
        loss_sum = 0.0
        for xb, yb in data.iterate_batches(x_train, y_train, args.batch_size, seed=epoch, drop_last=True):
            tx.copy_from_numpy(xb)
            ty.copy_from_numpy(yb)
            out, loss = m(tx, ty)
            loss_sum += tensor.to_numpy(loss)[0]
            correct += int((tensor.to_numpy(out).argmax(1) == yb).sum())
            total += len(yb)
        m.eval()
        pred = tensor.to_numpy(m(tensor.from_numpy(x_val, dev))).argmax(1)
        mean_loss = loss_sum / (total // args.batch_size)
        print(
            f"epoch {epoch}: loss {mean_loss:.4f}, train acc {correct / total:.4f}, "
            f"val acc {np.mean(pred == y_val):.4f}, {time.perf_counter() - t0:.2f} s"
        )


if __name__ == "__main__":
    main()

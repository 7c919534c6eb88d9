"""A pure-autograd MLP, as SINGA's examples/mlp: tensors, functional ops, autograd.backward.

    python examples/mlp_autograd.py [--steps 600]

No layers and no Model: parameters are plain tensors with stores_grad=True, the forward pass
is written with autograd functions, and each (param, grad) from autograd.backward is handed to
the optimizer.
"""

from __future__ import annotations

import argparse

import numpy as np

from singa_lite import autograd, data, device, opt, tensor


def param(shape: tuple, dev: device.Device, std: float) -> tensor.Tensor:
    t = tensor.Tensor(shape, dev, requires_grad=True, stores_grad=True)
    return t.gaussian(0.0, std)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=600)
    args = p.parse_args()

    dev = device.get_default_device()
    dev.SetRandSeed(0)
    x_train, y_train = data.load_digits("train")
    x_test, y_test = data.load_digits("test")
    x_train, x_test = x_train.reshape(len(x_train), -1), x_test.reshape(len(x_test), -1)

    w0, b0 = param((64, 64), dev, 0.125), param((64,), dev, 0.0)
    w1, b1 = param((64, 10), dev, 0.125), param((10,), dev, 0.0)
    for name, t in (("w0", w0), ("b0", b0), ("w1", w1), ("b1", b1)):
        t.name = name  # the optimizer keys its slots by parameter name
    sgd = opt.SGD(lr=0.05, momentum=0.9)

    def forward(x: tensor.Tensor) -> tensor.Tensor:
        h = autograd.relu(autograd.add_bias(autograd.matmul(x, w0), b0))
        return autograd.add_bias(autograd.matmul(h, w1), b1)

    autograd.training = True
    batches = data.DataLoader(x_train, y_train, batch_size=64, seed=0, drop_last=True)
    step = 0
    while step < args.steps:
        for xb, yb in batches:
            x = tensor.from_numpy(xb, dev)
            y = tensor.from_numpy(yb, dev)
            loss = autograd.softmax_cross_entropy(forward(x), y)
            for p_, g in autograd.backward(loss):
                sgd.update(p_, g)
            sgd.step()
            if step % 100 == 0:
                print(f"step {step}: training loss = {tensor.to_numpy(loss)[0]:.4f}")
            step += 1
            if step == args.steps:
                break

    autograd.training = False
    pred = tensor.to_numpy(forward(tensor.from_numpy(x_test, dev))).argmax(1)
    print(f"test accuracy: {np.mean(pred == y_test):.4f}")


if __name__ == "__main__":
    main()

"""A SINGA training script (examples/cnn: model/cnn.py + train_cnn.py) with only its imports
changed, trained on the real digits to a real accuracy.

The model class (from ``singa_example_models.py``) and the loop are SINGA's, kept as written
there (legacy positional layer forms, ``activation="RELU"``, ``dist_option`` dispatch in
``train_one_batch``, placeholders filled with ``copy_from_numpy``, ``tensor.to_numpy(loss)[0]``).
The digits are padded to 28x28 so the LeNet-shaped network fits them.
"""

from __future__ import annotations

import numpy as np
from singa_example_models import CNN  # SINGA's examples/cnn/model/cnn.py, imports changed

from singa_lite import data, device, opt, tensor


def accuracy(pred, target):
    y = np.argmax(pred, axis=1)
    return np.sum(y == target)


def test_singa_cnn_script_trains_unchanged():
    singa_dtype = {"float16": tensor.float16, "float32": tensor.float32}
    precision, batch_size, graph, sequential, dist_option, spars = "float32", 64, True, False, "fp32", None
    x, y = data.load_digits("all")
    x = np.pad(x, ((0, 0), (0, 0), (10, 10), (10, 10)))
    train_x, train_y, val_x, val_y = x[:1400], y[:1400], x[1400:], y[1400:]

    dev = device.get_default_device()
    dev.SetRandSeed(0)
    np.random.seed(0)
    m = CNN(num_channels=1, num_classes=10)
    sgd = opt.SGD(lr=0.005, momentum=0.9, weight_decay=1e-5, dtype=singa_dtype[precision])
    tx = tensor.Tensor((batch_size, 1, m.input_size, m.input_size), dev, singa_dtype[precision])
    ty = tensor.Tensor((batch_size,), dev, tensor.int32)
    num_train_batch = train_x.shape[0] // batch_size
    num_val_batch = val_x.shape[0] // batch_size
    idx = np.arange(train_x.shape[0], dtype=np.int32)
    m.set_optimizer(sgd)
    m.compile([tx], is_train=True, use_graph=graph, sequential=sequential)
    dev.SetVerbosity(0)

    for _epoch in range(3):
        np.random.shuffle(idx)
        train_correct = np.zeros(shape=[1], dtype=np.float32)
        train_loss = np.zeros(shape=[1], dtype=np.float32)
        m.train()
        for b in range(num_train_batch):
            xb = train_x[idx[b * batch_size : (b + 1) * batch_size]]
            yb = train_y[idx[b * batch_size : (b + 1) * batch_size]]
            tx.copy_from_numpy(xb)
            ty.copy_from_numpy(yb)
            out, loss = m(tx, ty, dist_option, spars)
            train_correct += accuracy(tensor.to_numpy(out), yb)
            train_loss += tensor.to_numpy(loss)[0]

    m.eval()
    test_correct = np.zeros(shape=[1], dtype=np.float32)
    for b in range(num_val_batch):
        xb = val_x[b * batch_size : (b + 1) * batch_size]
        yb = val_y[b * batch_size : (b + 1) * batch_size]
        tx.copy_from_numpy(xb)
        ty.copy_from_numpy(yb)
        out_test = m(tx)
        test_correct += accuracy(tensor.to_numpy(out_test), yb)
    assert test_correct[0] / (num_val_batch * batch_size) > 0.8
    assert train_correct[0] / (num_train_batch * batch_size) > 0.7

"""A SINGA-style training script, written here, trained on the real digits to a real accuracy.

It is written as a SINGA script is (``singa`` → ``singa_lite`` being the only change such a
script needs): argparse-style string flags, placeholders filled with ``copy_from_numpy``,
``compile`` in graph mode, ``model(tx, ty, dist_option, spars)`` and
``tensor.to_numpy(loss)[0]``. The 8x8 digits are padded to 16x16 for ``ConvNet``.
"""

from __future__ import annotations

import numpy as np
from singa_style_models import ConvNet

from singa_lite import data, device, opt, singa_wrap, tensor


def test_singa_style_cnn_script_trains_on_digits():
    args = {"precision": "float32", "batch": 64, "graph": "True", "dist_option": "plain", "epochs": 4}
    dtypes = {"float16": tensor.float16, "float32": tensor.float32}
    images, labels = data.load_digits("all")
    images = np.pad(images, ((0, 0), (0, 0), (4, 4), (4, 4)))
    split = 1400
    dev = device.create_cuda_gpu() if singa_wrap.USE_CUDA else device.get_default_device()
    dev.SetRandSeed(0)
    rng = np.random.default_rng(0)

    net = ConvNet(num_classes=10, num_channels=1, input_size=16)
    net.set_optimizer(opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-5, dtype=dtypes[args["precision"]]))
    bs = args["batch"]
    tx = tensor.Tensor((bs, 1, 16, 16), dev, dtypes[args["precision"]])
    ty = tensor.Tensor((bs,), dev, tensor.int32)
    net.compile([tx], is_train=True, use_graph=args["graph"], sequential="False")

    order = np.arange(split)
    for _ in range(args["epochs"]):
        rng.shuffle(order)
        net.train()
        seen = hits = 0
        for b in range(split // bs):
            pick = order[b * bs : (b + 1) * bs]
            tx.copy_from_numpy(images[pick])
            ty.copy_from_numpy(labels[pick])
            out, loss = net(tx, ty, args["dist_option"], None)
            assert np.isfinite(tensor.to_numpy(loss)[0])
            hits += int((tensor.to_numpy(out).argmax(1) == labels[pick]).sum())
            seen += bs
    assert hits / seen > 0.7

    net.eval()
    held_out = images[split:], labels[split:]
    hits = 0
    batches = len(held_out[1]) // bs
    for b in range(batches):
        tx.copy_from_numpy(held_out[0][b * bs : (b + 1) * bs])
        hits += int((tensor.to_numpy(net(tx)).argmax(1) == held_out[1][b * bs : (b + 1) * bs]).sum())
    assert hits / (batches * bs) > 0.8

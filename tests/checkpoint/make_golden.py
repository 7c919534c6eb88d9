"""Writes golden_v1.h5, the format-version-1 file that test_checkpoint_golden.py loads forever.

Run once per new format version (``python tests/checkpoint/make_golden.py``); never regenerate
the file of a released version.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ckpt_helpers import GOLDEN_AUX_EPOCH, MLP, golden_moments, golden_params

from singa_lite import device, opt, tensor

if __name__ == "__main__":
    device.create_cpu_device().SetRandSeed(1234)
    m = MLP()
    m.set_optimizer(opt.SGD(lr=opt.StepDecay(0.1, 5, 0.5), momentum=0.9))
    m.compile([tensor.Tensor((2, 4))], is_train=True)
    m.set_states(golden_params())
    sgd_states = m.optimizer.get_states()
    sgd_states.update(step_counter=7, moments=golden_moments())
    m.optimizer.set_states(sgd_states)
    aux = {
        "epoch": GOLDEN_AUX_EPOCH,
        "history": [0.5, 0.25, {"best": tensor.from_numpy(np.array([1.0, 2.0], np.float32))}],
        "note": "golden v1",
        "mask": np.array([True, False]),
    }
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_v1.h5")
    m.save_states(out, aux)
    print("wrote", out)

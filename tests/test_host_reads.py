"""No hidden host synchronisation in a training step: every device-to-host read in the
package goes through ``backend.to_host``, and a training step of each benchmark model (eager
and graph mode) makes none. Counted on the NumPy backend through the same hook the GPU uses;
on a GPU the same test counts real transfers."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from singa_lite import backend, opt, tensor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import training as T

SMALL = {  # the benchmark architectures at a batch small enough for a unit test
    "mlp": (16, 784),
    "cnn": (4, 1, 28, 28),
    "resnet20": (2, 3, 32, 32),
    "lstm": (5, 3, 64),
}


@pytest.mark.parametrize("use_graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("name", sorted(SMALL))
def test_training_step_reads_nothing_on_the_host(dev, name, use_graph):
    shape = SMALL[name]
    batch = shape[1] if name == "lstm" else shape[0]
    rng = np.random.default_rng(0)
    m = T.Classifier(T.SINGA_NETS[name]())
    m.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    tx = tensor.Tensor(data=rng.standard_normal(shape).astype(np.float32), device=dev, requires_grad=False)
    ty = tensor.Tensor(data=rng.integers(0, 10, batch).astype(np.int32), device=dev, requires_grad=False)
    m.compile([tx], is_train=True, use_graph=use_graph)
    m(tx, ty)  # the first step records (graph mode) and makes optimizer slots
    with backend.count_host_reads() as reads:
        for _ in range(3):
            m(tx, ty)
    assert sum(reads.values()) == 0, dict(reads)
    # The count sees reads: the loss value read once per step, the usual loop's one sync.
    with backend.count_host_reads() as reads:
        _, loss = m(tx, ty)
        float(tensor.to_numpy(loss)[0])
    assert sum(reads.values()) == 1, dict(reads)

"""Graph mode's CUDA-graph capture: bitwise the same training as eager mode over 20 steps
(BatchNorm, Dropout, SGD with momentum, Adam, a scheduled learning rate), on a GPU; on the
CPU graph mode never tries a capture and says nothing."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from test_model import _train

from singa_lite import device, model, ops, opt, tensor

OPTIMIZERS = {
    "sgd-momentum": lambda: opt.SGD(lr=0.05, momentum=0.9),
    "sgd-momentum-schedule": lambda: opt.SGD(lr=opt.ExponentialDecay(0.05, 3, 0.7), momentum=0.9),
    "adam": lambda: opt.Adam(lr=0.01),
    "adamw-schedule": lambda: opt.AdamW(lr=opt.StepDecay(0.01, 4, 0.5), weight_decay=0.01),
}


def _gpu():
    if device.get_num_gpus() == 0:
        from singa_lite.backend import cupy as cupy_backend

        pytest.skip(f"needs a GPU: {cupy_backend.UNAVAILABLE_REASON}")
    return device.create_cuda_gpu()


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_cuda_graph_equals_eager_bitwise_gpu(name, monkeypatch):
    dev = _gpu()
    eager_losses, eager_states, _ = _train(False, OPTIMIZERS[name](), steps=20, dev=dev)
    monkeypatch.setenv("SINGA_LITE_CUDA_GRAPH", "0")
    plain_losses, plain_states, plain = _train(True, OPTIMIZERS[name](), steps=20, dev=dev)
    plain_counter = dev.rng.counter
    monkeypatch.delenv("SINGA_LITE_CUDA_GRAPH")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a capture that falls back warns: fail on it
        graph_losses, graph_states, m = _train(True, OPTIMIZERS[name](), steps=20, dev=dev)
    assert plain._graph.cuda_graph is None
    assert m._graph.cuda_graph is not None, m._graph.capture_refusal
    np.testing.assert_array_equal(plain_losses, eager_losses)
    np.testing.assert_array_equal(graph_losses, eager_losses)
    for k in eager_states:
        np.testing.assert_array_equal(graph_states[k], eager_states[k], err_msg=k)
        np.testing.assert_array_equal(plain_states[k], eager_states[k], err_msg=k)
    # The host state a captured step cannot run Python for advanced as the plain replay's did.
    assert m.optimizer.step_counter == plain.optimizer.step_counter == 20
    assert dev.rng.counter == plain_counter > 0


def test_no_capture_on_the_cpu():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, _, m = _train(True, opt.SGD(lr=0.05, momentum=0.9), steps=5, dev=device.create_cpu_device())
    assert m._graph.cuda_graph is None and m._graph.capture_refusal == ""
    assert m._graph.replays == 4


def test_a_refused_capture_names_the_line_that_refused():
    """The fallback warning's reason ends with the innermost singa_lite frame of the error
    (``model._raised_at``), so a user can see which operation a capture could not contain."""
    try:
        ops.reshape(tensor.from_numpy(np.zeros((2, 3), np.float32)), (4, 4))
    except Exception as e:  # any error: its site is what is checked
        where = model._raised_at(e)
    assert where.startswith(" (at ops/") and where.endswith(")"), where
    assert ":" in where.split()[1], where
    assert model._raised_at(ValueError("raised outside singa_lite")) == ""

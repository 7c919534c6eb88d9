"""The compiled LSTM step loops (backend/cpu_kernels/recurrent.py) against the NumPy recurrence.

``ops.lstm`` runs twice on the same inputs, kernels on and off, and its outputs and the
gradients of every input must agree: float32 within 1e-5 and float64 within 1e-12 of the
reference's largest magnitude. Sizes (empty sequences and batches too), directions, value
scales and which outputs carry a gradient come from hypothesis; half of the examples force
the parallel form of the loops.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip(
    "numba", reason="the compiled CPU kernels need numba: pip install 'singa_lite[cpu-kernels]'"
)

from test_cpu_kernels import assert_close, kernels

from singa_lite import autograd, device, ops, tensor
from singa_lite.backend import cpu_kernels

DEV = device.get_default_device()
SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

pytestmark = pytest.mark.skipif(
    not cpu_kernels.enabled(), reason="SINGA_LITE_CPU_KERNELS=0: the kernels are switched off"
)


def run_lstm(arrays: list, grads: tuple, use: tuple, reverse: bool, on: bool, parallel: bool) -> list:
    """``ops.lstm`` on ``arrays`` (x, h0, c0, Wx, Wh, Bx, Bh) with the output gradients
    ``grads`` on the outputs that ``use`` says are used: the outputs and the input gradients."""
    with kernels(on, parallel), autograd.training_mode(True):
        ts = [tensor.Tensor(device=DEV, data=a.copy(), requires_grad=True, stores_grad=True) for a in arrays]
        outs = ops.lstm(*ts, reverse=reverse)
        loss = None
        for o, g, u in zip(outs, grads, use):
            if u:
                term = ops.reduce_sum(ops.mul(o, tensor.Tensor(device=DEV, data=g)))
                loss = term if loss is None else ops.add(loss, term)
        got = autograd.gradients(loss)
        return [tensor.to_numpy(o) for o in outs] + [
            tensor.to_numpy(got[t]) if t in got else None for t in ts
        ]


@SETTINGS
@given(
    st.data(),
    st.sampled_from([np.float32, np.float64]),
    st.integers(0, 6),  # T
    st.integers(0, 5),  # N
    st.integers(1, 7),  # I
    st.integers(1, 9),  # H
    st.sampled_from([0.1, 1.0, 4.0]),
    st.booleans(),
    st.booleans(),
)
def test_lstm_matches_numpy(
    data: Any, dtype: Any, T: int, N: int, I: int, H: int, scale: float, reverse: bool, parallel: bool
) -> None:
    use = data.draw(st.tuples(st.booleans(), st.booleans(), st.booleans()).filter(any))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    shapes = [(T, N, I), (N, H), (N, H), (I, 4 * H), (H, 4 * H), (4 * H,), (4 * H,)]
    arrays = [(rng.standard_normal(s) * scale).astype(dtype) for s in shapes]
    grads = tuple(rng.standard_normal(s).astype(dtype) for s in [(T, N, H), (N, H), (N, H)])
    ref = run_lstm(arrays, grads, use, reverse, False, False)
    got = run_lstm(arrays, grads, use, reverse, True, parallel)
    for i, (g, r) in enumerate(zip(got, ref)):
        if r is None:
            assert g is None, i
        else:
            assert_close(g, r, f"result {i}")


def test_kernel_path_is_taken() -> None:
    """The op reaches the compiled loops for contiguous float arrays (and so the test above
    compares two different paths)."""
    from singa_lite.ops import recurrent

    a = np.zeros((2, 3, 8), np.float32)
    with kernels(True):
        assert recurrent._kernels(np, a, a[0])
    with kernels(False):
        assert not recurrent._kernels(np, a, a[0])

"""Gradient clipping by global norm: the rule, dtypes, aliasing, bad input, and the optimizer
wrapper (states, schedule, graph mode)."""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite import ArgumentError, autograd, opt, tensor
from singa_lite.clip_grad import ClipGradNorm, clip_grad_norm


def _t(arr, dev):
    return tensor.Tensor(data=np.asarray(arr), device=dev, requires_grad=False)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_global_norm_rule(dev, dtype, max_norm):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(dtype) for s in [(3, 4), (5,), ()]]
    clipped, norm = clip_grad_norm([_t(a, dev) for a in arrays], max_norm)
    want = np.sqrt(sum((a.astype(np.float64) ** 2).sum() for a in arrays))
    tol = 1e-3 if dtype == np.float16 else 1e-6
    assert abs(float(tensor.to_numpy(norm)) - want) < tol * want
    coef = min(1.0, max_norm / (want + 1e-6))
    for a, c in zip(arrays, clipped):
        assert c.dtype == dtype and c.shape == a.shape
        np.testing.assert_allclose(tensor.to_numpy(c).astype(np.float64), a * coef, rtol=tol, atol=tol)


def test_shared_gradient_arrays_are_not_scaled_twice(dev):
    g = _t(np.array([3.0, 4.0]), dev)
    same = tensor.Tensor._wrap(g.data, dev, False, None, 0)  # one backward array for two params
    clipped, _ = clip_grad_norm([g, same], 1.0)
    np.testing.assert_allclose(tensor.to_numpy(g), [3.0, 4.0])  # the inputs are untouched
    np.testing.assert_allclose(tensor.to_numpy(clipped[0]), np.array([3.0, 4.0]) / np.sqrt(50), rtol=1e-6)


def test_bad_input(dev):
    g = [_t(np.ones(2), dev)]
    for bad in (0, -1.0, float("inf"), True, "1"):
        with pytest.raises(ArgumentError):
            clip_grad_norm(g, bad)
    with pytest.raises(ArgumentError):
        clip_grad_norm([], 1.0)
    with pytest.raises(ArgumentError):
        ClipGradNorm(object(), 1.0)


def test_wrapper_steps_clips_and_delegates_states(dev):
    w = tensor.Tensor(data=np.array([1.0, 2.0]), device=dev, requires_grad=True, stores_grad=True, name="w")
    sgd = opt.SGD(lr=opt.StepDecay(0.1, 1, 0.5))
    clipper = ClipGradNorm(sgd, 1.0)
    autograd.training = True
    loss = autograd.reduce_sum(w * _t(np.array([30.0, 40.0]), dev))  # gradient (30, 40), norm 50
    clipper(loss)
    np.testing.assert_allclose(tensor.to_numpy(w), [1.0 - 0.1 * 0.6, 2.0 - 0.1 * 0.8], rtol=1e-6)
    assert float(tensor.to_numpy(clipper.last_norm)) == pytest.approx(50.0)
    assert clipper.step_counter == 1 and clipper.lr_value == pytest.approx(0.05)
    clipper.step_counter = 3
    assert sgd.step_counter == 3 and clipper.get_states()["step_counter"] == 3
    clipper.set_states(sgd.get_states())
    assert clipper.lr is sgd.lr

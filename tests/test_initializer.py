"""``singa_lite.initializer``: fans read from Linear and conv weight shapes, and sample
statistics that match each initialiser's formula (seeded, a few thousand values)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from singa_lite import device, initializer, tensor
from singa_lite.errors import ArgumentError

LINEAR = (64, 96)  # SINGA's Linear.W: (in, out)
CONV = (32, 16, 3, 5)  # (out, in, kh, kw)


def _filled(fill, shape, **kwargs) -> np.ndarray:
    dev = device.Device(-1, "numpy", seed=7)  # its own generator: no test disturbs another
    return tensor.to_numpy(fill(tensor.Tensor(shape, dev), **kwargs)).ravel()


def test_fans_of_linear_and_conv_weights():
    assert initializer.fans(LINEAR) == (64, 96)
    assert initializer.fans(CONV) == (16 * 15, 32 * 15)
    assert initializer.fans((5,)) == (5, 5)


def _std_ok(x: np.ndarray, std: float, mean: float = 0.0) -> bool:
    # n >= 6000 values: the sample std is within 3.5 % of the true one (about 4 standard errors
    # for normal samples, more for uniform ones), the sample mean within 4 standard errors.
    # A wrong formula (a missing factor 2 under the root) is off by 30 % or more.
    assert x.size >= 6000
    return abs(x.std() - std) < 0.035 * std and abs(x.mean() - mean) < 4 * std / math.sqrt(x.size)


def _uniform_ok(x: np.ndarray, a: float) -> bool:
    """Inside [-a, a), reaching near both ends, with the std of U(-a, a): a / sqrt(3)."""
    return (
        x.min() >= -a
        and x.max() < a
        and x.min() < -0.99 * a
        and x.max() > 0.99 * a
        and _std_ok(x, a / math.sqrt(3))
    )


@pytest.mark.parametrize("shape", [LINEAR, CONV], ids=["linear", "conv"])
def test_xavier_glorot(shape):
    fan_in, fan_out = initializer.fans(shape)
    a = math.sqrt(6 / (fan_in + fan_out))
    assert _uniform_ok(_filled(initializer.xavier_uniform, shape), a)
    assert _uniform_ok(_filled(initializer.glorot_uniform, shape, gain=2.0), 2 * a)
    std = math.sqrt(2 / (fan_in + fan_out))
    assert _std_ok(_filled(initializer.xavier_normal, shape), std)
    assert _std_ok(_filled(initializer.glorot_normal, shape, gain=0.5), 0.5 * std)


@pytest.mark.parametrize("shape", [LINEAR, CONV], ids=["linear", "conv"])
def test_he_kaiming(shape):
    fan_in = initializer.fans(shape)[0]
    assert _uniform_ok(_filled(initializer.he_uniform, shape), math.sqrt(6 / fan_in))
    assert _uniform_ok(_filled(initializer.kaiming_uniform, shape, fan_in=10), math.sqrt(6 / 10))
    assert _std_ok(_filled(initializer.he_normal, shape), math.sqrt(2 / fan_in))
    assert _std_ok(_filled(initializer.kaiming_normal, shape), math.sqrt(2 / fan_in))


def test_plain_uniform_and_gaussian():
    x = _filled(initializer.uniform, LINEAR, low=-0.3, high=0.3)
    assert _uniform_ok(x, 0.3)
    assert _uniform_ok(_filled(initializer.uniform, CONV), 0.05)  # the defaults: U(-0.05, 0.05)
    x = _filled(initializer.gaussian, CONV, mean=1.0, std=0.2)
    assert _std_ok(x, 0.2, mean=1.0)
    assert _std_ok(_filled(initializer.gaussian, LINEAR), 0.05)


def test_a_seeded_device_gives_the_same_values():
    np.testing.assert_array_equal(_filled(initializer.he_normal, CONV), _filled(initializer.he_normal, CONV))


def test_get_by_name_and_errors():
    assert initializer.get("kaiming_uniform") is initializer.he_uniform
    assert initializer.get("glorot_normal") is initializer.xavier_normal
    with pytest.raises(ArgumentError, match=r"unknown initializer 'xavier'; known: .*'xavier_uniform'"):
        initializer.get("xavier")
    with pytest.raises(ArgumentError, match="unknown initializer"):
        initializer.get(["he_normal"])
    with pytest.raises(ArgumentError, match=r"he_uniform: fans \(0,\) of a weight of shape \(0, 4\)"):
        initializer.he_uniform(tensor.Tensor((0, 4)))

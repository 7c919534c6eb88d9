"""Devices: the CPU device, GPU errors, seeding, backend registry."""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite import DeviceError, backend, device, tensor


def test_cpu_device():
    cpu = device.create_cpu_device()
    assert cpu.id() == -1
    assert cpu.xp is np
    assert device.get_default_device() == cpu
    cpu.Sync()


def test_numpy_backend_always_registered():
    assert backend.available()[0] == "numpy"
    assert backend.get_array_module(np.zeros(2)) is np
    with pytest.raises(KeyError, match="registered"):
        backend.get("tpu")


def test_missing_gpu_raises_clear_error():
    if device.get_num_gpus() > 0:
        with pytest.raises(DeviceError, match="only"):
            device.create_cuda_gpu_on(device.get_num_gpus())
        return
    with pytest.raises(DeviceError, match="pip install"):
        device.create_cuda_gpu()
    with pytest.raises(DeviceError):
        device.create_cuda_gpu_on(0)


def test_seed_reproducibility(dev):
    dev.SetRandSeed(123)
    a = tensor.to_numpy(tensor.Tensor((10,), dev).gaussian())
    dev.SetRandSeed(123)
    b = tensor.to_numpy(tensor.Tensor((10,), dev).gaussian())
    np.testing.assert_array_equal(a, b)


def test_rng_state_round_trip(dev):
    dev.SetRandSeed(5)
    state = dev.get_rng_state()
    a = tensor.to_numpy(tensor.Tensor((4,), dev).uniform())
    dev.set_rng_state(state)
    b = tensor.to_numpy(tensor.Tensor((4,), dev).uniform())
    np.testing.assert_array_equal(a, b)


def test_mixing_devices_names_the_op(dev):
    if dev.id() < 0:
        pytest.skip("needs a GPU to mix devices")
    a = tensor.Tensor(data=np.ones(2, np.float32), requires_grad=False)
    b = tensor.Tensor(data=np.ones(2, np.float32), device=dev, requires_grad=False)
    with pytest.raises(DeviceError, match=r"Add.*different devices"):
        a + b


def test_mixing_devices_is_caught_on_any_machine():
    """The device check runs before any array math: a second host-backed Device stands in for a GPU."""
    other = device.Device(7, "numpy")
    a = tensor.Tensor(data=np.ones((2, 3), np.float32), requires_grad=False)
    b = tensor.Tensor(data=np.ones((2, 3), np.float32), device=other, requires_grad=False)
    with pytest.raises(DeviceError, match=r"Mul: inputs are on different devices.*\(2, 3\) on Device\(cpu\)"):
        a * b

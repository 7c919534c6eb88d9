"""Arrays of another device meeting tensors at every entry point (G5/G6 of the GPU notes).

CuPy refuses ``np.asarray`` of its arrays and host arrays in its assignments; a pretend
device backend whose arrays NumPy cannot read stands in for it here, so the entry points are
checked to move values through the backend, never through an implicit conversion."""

from __future__ import annotations

import numpy as np
import pytest
from pretend_device import BoxBackend, Boxed

from singa_lite import backend, device, tensor


@pytest.fixture
def boxes(monkeypatch):
    monkeypatch.setitem(backend._BACKENDS, BoxBackend.name, BoxBackend())


def test_from_numpy_takes_another_devices_array(boxes):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with backend.count_host_reads() as reads:
        t = tensor.from_numpy(Boxed(x))
    np.testing.assert_array_equal(t.numpy(), x)
    assert sum(reads.values()) == 1  # one transfer, counted


def test_copy_from_numpy_and_set_value_take_another_devices_array(boxes):
    t = tensor.Tensor((2, 3))
    t.copy_from_numpy(Boxed(np.ones(6, np.float64)))
    np.testing.assert_array_equal(t.numpy(), np.ones((2, 3)))
    assert t.dtype == np.float32  # cast to the tensor's dtype
    t.set_value(Boxed(np.array([1.0, 2.0, 3.0])))  # broadcast over rows
    np.testing.assert_array_equal(t.numpy(), [[1, 2, 3], [1, 2, 3]])
    t[0] = Boxed(np.array([7.0, 8.0, 9.0]))
    np.testing.assert_array_equal(t.numpy()[0], [7, 8, 9])


def test_setitem_takes_tensors_and_index_arrays(dev):
    t = tensor.from_numpy(np.zeros((3, 4), np.float32), dev)
    t[tensor.from_numpy(np.array([0, 2]), dev)] = tensor.from_numpy(np.ones(4, np.float32), dev)
    t[np.array([1]), [3]] = 5.0
    t[:, 0] = np.array([4.0, 4.0, 4.0])  # a host array into a (possibly device) tensor
    want = np.zeros((3, 4), np.float32)
    want[[0, 2]] = 1
    want[1, 3] = 5
    want[:, 0] = 4
    np.testing.assert_array_equal(t.numpy(), want)
    t.set_value(np.float32(2))
    assert (t.numpy() == 2).all()


def test_object_arrays_are_refused():
    from singa_lite.errors import DTypeError

    with pytest.raises(DTypeError, match="object arrays"):
        tensor.from_numpy(np.array([object()]))
    with pytest.raises(DTypeError, match="object arrays"):
        tensor.Tensor((1,)).copy_from_numpy(np.array([object()]))


def test_activate_is_harmless_on_the_cpu():
    device.create_cpu_device().activate()


def test_scalar_operands_are_made_once_per_value_on_a_device(monkeypatch):
    """``t * 2.0`` on a GPU used to allocate and fill a 0-d device array on every call (G25)."""
    from singa_lite import tensor as T

    dev = device.Device(-1, "numpy")
    monkeypatch.setattr(
        dev, "backend", type("FakeGpu", (), {"name": "fake", "activate": staticmethod(lambda i: None)})
    )
    monkeypatch.setattr(T, "_SCALARS", {})
    t = tensor.Tensor((3,), dev)
    t.set_value(1.0)
    ys = [t * 2.0, t * 2.0, t + 2.0, t * 3.0]
    assert len(T._SCALARS) == 2  # 2.0 once (for * and +), 3.0 once
    assert [float(y.numpy()[0]) for y in ys] == [2.0, 2.0, 3.0, 3.0]

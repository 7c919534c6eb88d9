"""Tensor: construction, dtypes, conversions, in-place fills, operators, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from singa_lite import DTypeError, ShapeError, autograd, device, tensor
from singa_lite.tensor import Tensor

DTYPES = [np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES)
@given(data=st.data())
def test_numpy_round_trip_every_dtype(dev, dtype, data):
    arr = data.draw(hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=4, max_side=5)))
    t = tensor.Tensor(data=arr, device=dev)  # keeps the dtype it is given
    assert t.dtype == np.dtype(dtype)
    assert t.shape == arr.shape
    np.testing.assert_array_equal(tensor.to_numpy(t), arr)
    np.testing.assert_array_equal(np.asarray(t), arr)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    # from_numpy narrows float64/int64 to float32/int32, as SINGA does, and keeps the rest
    narrowed = {np.dtype(np.float64): np.float32, np.dtype(np.int64): np.int32}.get(np.dtype(dtype), dtype)
    with np.errstate(over="ignore"):  # float64 values beyond float32's range become inf
        f = tensor.from_numpy(arr, dev)
        assert f.dtype == np.dtype(narrowed) and f.requires_grad
        np.testing.assert_array_equal(tensor.to_numpy(f), arr.astype(narrowed))


def test_constructor_defaults(dev):
    t = Tensor((2, 3), dev)
    assert t.shape == (2, 3) and t.dtype == np.float32
    assert t.requires_grad and not t.stores_grad and t.creator is None
    assert t.ndim() == 2 and t.size() == 6
    assert t.device == dev
    np.testing.assert_array_equal(tensor.to_numpy(t), np.zeros((2, 3), np.float32))


def test_constructor_with_data_and_dtype():
    t = Tensor(data=np.arange(4), dtype=tensor.float32)
    assert t.dtype == np.float32 and t.shape == (4,)
    assert tensor.PlaceHolder is Tensor


@pytest.mark.parametrize("bad", [np.complex64, np.complex128, np.str_, object])
def test_unsupported_dtypes_are_rejected(bad):
    with pytest.raises(DTypeError, match="not supported"):
        tensor.from_numpy(np.zeros(3, dtype=bad))
    with pytest.raises(DTypeError):
        Tensor((2,), dtype=bad)


def test_copy_from_numpy_and_copy_from(dev):
    t = Tensor((2, 2), dev)
    t.copy_from_numpy(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(tensor.to_numpy(t), [[0, 1], [2, 3]])
    t.copy_from_numpy(np.array([9, 9], np.float32), offset=1)
    np.testing.assert_array_equal(tensor.to_numpy(t).ravel(), [0, 9, 9, 3])
    u = Tensor((2, 2), dev)
    u.copy_from(t)
    np.testing.assert_array_equal(tensor.to_numpy(u), tensor.to_numpy(t))
    with pytest.raises(ShapeError):
        u.copy_from(Tensor((3,), dev))
    with pytest.raises(ShapeError):
        t.copy_from_numpy(np.zeros(4, np.float32), offset=2)


def test_clone_is_deep(dev):
    t = tensor.from_numpy(np.ones(3, np.float32), dev)
    c = t.clone()
    c.set_value(5)
    assert tensor.to_numpy(t)[0] == 1 and tensor.to_numpy(c)[0] == 5


def test_to_device_and_to_host_on_cpu():
    t = tensor.from_numpy(np.ones(3, np.float32))
    assert t.to_device(device.get_default_device()) is t
    assert t.to_host().device.id() == -1


def test_device_round_trip(dev):
    """to_device then to_host keeps the values (on the CPU both are moves to the host)."""
    t = tensor.from_numpy(np.arange(6, dtype=np.float32))
    t.to_device(dev)
    assert t.device == dev
    t.to_host()
    assert t.device.id() == -1
    np.testing.assert_array_equal(tensor.to_numpy(t), np.arange(6))


def test_random_fills_are_seeded(dev):
    dev.SetRandSeed(7)
    a = Tensor((100,), dev).gaussian(1.0, 2.0)
    b = Tensor((100,), dev).uniform(-1, 1)
    c = Tensor((1000,), dev).bernoulli(0.3)
    dev.SetRandSeed(7)
    a2 = Tensor((100,), dev).gaussian(1.0, 2.0)
    np.testing.assert_array_equal(tensor.to_numpy(a), tensor.to_numpy(a2))
    assert a.dtype == np.float32
    assert tensor.to_numpy(b).min() >= -1 and tensor.to_numpy(b).max() < 1
    assert 0.2 < tensor.to_numpy(c).mean() < 0.4


def test_arithmetic_matches_numpy(dev):
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    b = np.array([0.5, 2.0], np.float32)
    ta, tb = tensor.from_numpy(a, dev), tensor.from_numpy(b, dev)
    cases = {
        "add": (ta + tb, a + b),
        "radd": (1 + ta, 1 + a),
        "sub": (ta - tb, a - b),
        "rsub": (2 - ta, 2 - a),
        "mul": (ta * 3, a * 3),
        "div": (ta / tb, a / b),
        "rdiv": (1 / ta, 1 / a),
        "pow": (ta**2, a**2),
        "neg": (-ta, -a),
    }
    for name, (got, want) in cases.items():
        assert got.dtype == np.float32, name
        np.testing.assert_allclose(tensor.to_numpy(got), want, rtol=1e-6, err_msg=name)


def test_comparisons_give_bool(dev):
    ta = tensor.from_numpy(np.array([1.0, 2.0, 3.0], np.float32), dev)
    assert tensor.to_numpy(ta < 2).tolist() == [True, False, False]
    assert tensor.to_numpy(ta <= 2).tolist() == [True, True, False]
    assert tensor.to_numpy(ta > 2).tolist() == [False, False, True]
    assert tensor.to_numpy(ta >= 2).tolist() == [False, True, True]
    assert tensor.to_numpy(ta == 2).tolist() == [False, True, False]
    assert tensor.to_numpy(ta != 2).tolist() == [True, False, True]


def test_inplace_ops_change_data_without_recording(dev):
    t = tensor.from_numpy(np.ones(3, np.float32), dev)
    data_before = t.data
    t += 1
    t *= 3
    assert t.data is data_before and t.creator is None
    np.testing.assert_array_equal(tensor.to_numpy(t), [6, 6, 6])


def test_tensor_is_hashable_by_identity():
    a, b = Tensor((2,)), Tensor((2,))
    d = {a: 1, b: 2}
    assert d[a] == 1 and d[b] == 2


def test_arithmetic_is_recorded_and_trains():
    autograd.training = True
    x = tensor.from_numpy(np.array([[1.0, 2.0]], np.float32))
    w = tensor.from_numpy(np.array([[3.0, 4.0]], np.float32))
    w.stores_grad = w.requires_grad = True
    b = tensor.from_numpy(np.array([0.5], np.float32))
    b.stores_grad = b.requires_grad = True
    y = x * w + b
    grads = autograd.gradients(y)
    np.testing.assert_array_equal(tensor.to_numpy(grads[w]), [[1.0, 2.0]])
    np.testing.assert_array_equal(tensor.to_numpy(grads[b]), [2.0])


def test_mismatched_shapes_name_the_op():
    a = tensor.from_numpy(np.ones((2, 3), np.float32))
    b = tensor.from_numpy(np.ones((4,), np.float32))
    with pytest.raises(ShapeError, match=r"Add.*\(2, 3\).*\(4,\)"):
        a + b


def test_module_constructors(dev):
    assert tensor.to_numpy(tensor.zeros((2,), dev)).tolist() == [0, 0]
    assert tensor.to_numpy(tensor.ones((2,), dev)).tolist() == [1, 1]
    r = tensor.to_numpy(tensor.random((50,), dev))
    assert r.min() >= 0 and r.max() < 1
    t = Tensor(data=np.ones((2, 3), np.float64), device=dev)
    assert tensor.zeros_like(t).dtype == np.float64
    assert tensor.ones_like(t).shape == (2, 3)


def test_copy_from_numpy_copies_into_the_same_array(dev):
    t = Tensor((3,), dev)
    before = t.data
    src = np.arange(3, dtype=np.float32)
    t.copy_from_numpy(src)
    t += 1
    np.testing.assert_array_equal(src, [0, 1, 2])  # the source is never aliased
    assert t.data is before  # the tensor keeps its memory (placeholders, parameters)
    t.copy_from_numpy(np.array([1.5, 2.5]))  # float64 values are cast to the tensor's dtype
    assert t.dtype == np.float32 and tensor.to_numpy(t).tolist() == [1.5, 2.5, 3.0]


def test_constructor_copies_its_data():
    x_train = np.arange(8, dtype=np.float32).reshape(4, 2)
    tx = Tensor(data=x_train[:2])
    tx.copy_from_numpy(x_train[2:4])
    np.testing.assert_array_equal(x_train[:2], [[0, 1], [2, 3]])  # the caller's data is intact
    assert Tensor(data=[1.0, 2.0]).shape == (2,)
    s = Tensor(data=np.float32(2))
    s.set_value(3)
    assert float(s) == 3.0
    u = Tensor(data=tx)
    u.set_value(7)
    assert tensor.to_numpy(tx)[0, 0] == 4


def test_copy_from_accepts_a_host_array_of_the_same_size():
    t = Tensor((2, 2))
    t.copy_from(np.arange(4, dtype=np.float32))
    assert tensor.to_numpy(t).tolist() == [[0, 1], [2, 3]]


def test_truth_value_follows_numpy_for_one_element_and_singa_otherwise():
    assert not tensor.from_numpy(np.array([0.0]))
    assert tensor.from_numpy(np.array(2))
    labels = tensor.from_numpy(np.zeros((4, 1), np.int32))
    with pytest.warns(UserWarning, match="is True, as any tensor object is in SINGA"):
        assert labels  # SINGA scripts write `if labels:` for "is not None"


def test_to_numpy_of_a_plain_array_is_a_copy():
    """``tensor.to_numpy`` also takes an array (an optimizer's slot, on any device)."""
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = tensor.to_numpy(arr)
    np.testing.assert_array_equal(got, arr)
    got[0, 0] = 7
    assert arr[0, 0] == 0

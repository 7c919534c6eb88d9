"""Round trips: every kind of state, aux values of any nesting, strictness, the golden file,
SINGA's zip checkpoints and non-blocking saves (across devices: test_checkpoint_devices.py)."""

from __future__ import annotations

import io
import json
import math
import os
import threading
import tracemalloc
import zipfile

import numpy as np
import pytest
from ckpt_helpers import GOLDEN_AUX_EPOCH, MLP, batches, golden_moments, golden_params, make_cnn, train
from hypothesis import given
from hypothesis import strategies as st

from singa_lite import checkpoint, device, opt, tensor
from singa_lite.checkpoint import async_save, atomic
from singa_lite.errors import CheckpointError, StateMismatchError

HERE = os.path.dirname(os.path.abspath(__file__))


def _numpy_states(m) -> dict:
    return {k: tensor.to_numpy(v).copy() for k, v in m.get_states().items()}


def test_everything_round_trips(tmp_path):
    m, tx, ty = make_cnn("adam")
    train(m, tx, ty, batches(2), 0, 2)
    m.save_states(tmp_path / "a.h5", {"epoch": 2})
    saved, opt_saved = _numpy_states(m), m.optimizer.get_states()
    rng_saved = device.create_cpu_device().get_rng_state()

    m2, _, _ = make_cnn("adam", seed=7)
    device.create_cpu_device().SetRandSeed(123)
    assert m2.load_states(tmp_path / "a.h5") == {"epoch": 2}
    for k, v in _numpy_states(m2).items():
        np.testing.assert_array_equal(v, saved[k], err_msg=k)
    got = m2.optimizer.get_states()
    assert got["step_counter"] == 2 and got["lr"] == opt_saved["lr"]
    for slot in ("m", "v"):
        assert set(got[slot]) == set(m.get_params())
        for k in got[slot]:
            np.testing.assert_array_equal(tensor.to_numpy(got[slot][k]), tensor.to_numpy(opt_saved[slot][k]))
    assert device.create_cpu_device().get_rng_state() == rng_saved
    assert m2._input_specs == m._input_specs


def test_load_reads_into_the_existing_buffers_without_a_second_copy(tmp_path):
    m = MLP()
    m.compile([tensor.Tensor((2, 512))])
    m.fc1.W.copy_from_numpy(np.ones((512, 3), np.float32) * 2)
    m.save_states(tmp_path / "a.h5")
    for t in m.get_states().values():
        t.copy_from_numpy(np.zeros(t.shape, np.float32))
    buffers = {k: t.data for k, t in m.get_states().items()}
    state_bytes = sum(t.nbytes() for t in m.get_states().values())
    tracemalloc.start()
    m.load_states(tmp_path / "a.h5")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert all(m.get_states()[k].data is buf for k, buf in buffers.items())  # same arrays, filled in place
    assert (tensor.to_numpy(m.fc1.W) == 2).all()
    assert peak < state_bytes * 0.5 + 64_000, (peak, state_bytes)


def test_uncompiled_model_is_built_from_the_saved_input_specs(tmp_path):
    m = MLP()
    m.compile([tensor.Tensor((2, 4))])
    m.save_states(tmp_path / "a.h5")
    fresh = MLP()
    fresh.load_states(tmp_path / "a.h5")
    assert fresh._input_specs == [((2, 4), "float32")]
    np.testing.assert_array_equal(tensor.to_numpy(fresh.fc2.W), tensor.to_numpy(m.fc2.W))


def test_strict_mismatch_lists_everything_and_changes_nothing(tmp_path):
    m = MLP()
    m.compile([tensor.Tensor((2, 4))])
    m.saved_only = tensor.ones((3,))  # unexpected by the other model
    m.save_states(tmp_path / "a.h5")
    other = MLP()
    other.fc2 = type(m.fc2)(5)  # fc2 mis-shaped
    other.compile([tensor.Tensor((2, 4))])
    other.extra = tensor.zeros((2,))  # missing in the file
    before = _numpy_states(other)
    with pytest.raises(StateMismatchError) as info:
        other.load_states(tmp_path / "a.h5")
    msg = str(info.value)
    assert "extra" in msg and "saved_only" in msg and "fc2.W" in msg and "a.h5" in msg
    after = _numpy_states(other)
    assert all(np.array_equal(before[k], after[k]) for k in before)

    aux = other.load_states(tmp_path / "a.h5", strict=False)
    report = aux.pop("__report__")
    assert aux == {}
    assert report["missing"] == ["extra"] and report["unexpected"] == ["saved_only"]
    assert [s.split()[0] for s in report["mismatched"]] == ["fc2.W", "fc2.b"]
    np.testing.assert_array_equal(tensor.to_numpy(other.fc1.W), tensor.to_numpy(m.fc1.W))


def test_optimizer_kind_mismatch(tmp_path):
    m, _, _ = make_cnn("sgd")
    m.save_states(tmp_path / "a.h5")
    m2, _, _ = make_cnn("adam")
    with pytest.raises(StateMismatchError, match="optimizer"):
        m2.load_states(tmp_path / "a.h5")
    assert "optimizer" in m2.load_states(tmp_path / "a.h5", strict=False)["__report__"]["mismatched"][0]


def _same(a, b) -> bool:
    if isinstance(a, tensor.Tensor):
        return (
            isinstance(b, tensor.Tensor)
            and a.dtype == b.dtype
            and np.array_equal(tensor.to_numpy(a), tensor.to_numpy(b))
        )
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        )
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


_arrays = st.sampled_from([np.float32, np.float64, np.int32, np.int64, np.bool_]).flatmap(
    lambda dt: st.lists(st.integers(-5, 5), max_size=6).map(lambda v: np.array(v).astype(dt))
)
_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=8),
    _arrays,
    _arrays.map(lambda a: tensor.from_numpy(a.astype(np.float32))),
)
_aux = st.dictionaries(
    st.text(max_size=6),
    st.recursive(
        _leaves,
        lambda kids: st.one_of(
            st.lists(kids, max_size=3),
            st.tuples(kids, kids),
            st.dictionaries(st.text(max_size=5), kids, max_size=3),
        ),
        max_leaves=8,
    ),
    max_size=4,
)


@given(aux=_aux)
def test_any_nested_aux_round_trips(tmp_path_factory, aux):
    path = tmp_path_factory.mktemp("aux") / "a.h5"
    m = MLP()
    m.compile([tensor.Tensor((2, 4))])
    m.save_states(path, aux)
    assert _same(aux, m.load_states(path))


def test_unsavable_aux_is_refused_before_writing(tmp_path):
    m = MLP()
    m.compile([tensor.Tensor((2, 4))])
    for bad in ({"f": len}, {"o": np.array([object()])}, {"k": {1: 2}}):
        with pytest.raises(CheckpointError):
            m.save_states(tmp_path / "a.h5", bad)
    assert os.listdir(tmp_path) == []


def test_golden_format_v1_loads_forever():
    m = MLP()
    m.set_optimizer(opt.SGD(lr=0.5, momentum=0.1))
    aux = m.load_states(os.path.join(HERE, "golden_v1.h5"))  # also compiles m from the saved specs
    for k, v in golden_params().items():
        np.testing.assert_array_equal(tensor.to_numpy(m.get_states()[k]), v)
    states = m.optimizer.get_states()
    assert states["step_counter"] == 7 and states["hyperparams"]["momentum"] == 0.9
    assert states["lr"] == {"type": "StepDecay", "init_value": 0.1, "step_size": 5, "gamma": 0.5}
    for k, v in golden_moments().items():
        np.testing.assert_array_equal(tensor.to_numpy(states["moments"][k]), v)
    assert aux["epoch"] == GOLDEN_AUX_EPOCH and aux["note"] == "golden v1"
    assert aux["history"][:2] == [0.5, 0.25]
    np.testing.assert_array_equal(tensor.to_numpy(aux["history"][2]["best"]), [1.0, 2.0])
    np.testing.assert_array_equal(aux["mask"], [True, False])
    assert checkpoint.inspect(os.path.join(HERE, "golden_v1.h5"))["root"]["format_version"] == 1


def _singa_zip(path, states: dict, aux: dict) -> None:
    """A checkpoint as SINGA's Model.save_states writes it."""
    buf = io.BytesIO()
    np.savez(buf, **states, **aux)
    attrs = {k: {"state_type": 0, "shape": list(v.shape), "dtype": 0} for k, v in states.items()}
    attrs.update({k: {"state_type": 1, "shape": list(v.shape), "dtype": 0} for k, v in aux.items()})
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("tensor_dict.npz", buf.getvalue())
        zf.writestr("states_attr.json", json.dumps(attrs))


def test_singa_zip_checkpoints_load(tmp_path):
    m = MLP()
    m.compile([tensor.Tensor((2, 4))])
    states = {
        k: np.random.default_rng(0).standard_normal(v.shape).astype(np.float32)
        for k, v in m.get_states().items()
    }
    _singa_zip(tmp_path / "singa.zip", states, {"epoch_t": np.array([4.0], np.float32)})
    aux = m.load_states(tmp_path / "singa.zip")
    np.testing.assert_array_equal(tensor.to_numpy(aux["epoch_t"]), [4.0])
    for k, v in states.items():
        np.testing.assert_array_equal(tensor.to_numpy(m.get_states()[k]), v)
    assert checkpoint.verify(tmp_path / "singa.zip").ok

    _singa_zip(tmp_path / "short.zip", {k: v for k, v in states.items() if k != "fc1.b"}, {})
    with pytest.raises(StateMismatchError, match=r"fc1\.b"):
        m.load_states(tmp_path / "short.zip")
    data = (tmp_path / "singa.zip").read_bytes()
    (tmp_path / "bad.zip").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError):
        m.load_states(tmp_path / "bad.zip")


def test_non_blocking_save_snapshots_and_reraises(tmp_path, monkeypatch):
    m = MLP()
    m.compile([tensor.Tensor((2, 4))])
    m.fc1.W.copy_from_numpy(np.ones((4, 3), np.float32))
    release = threading.Event()
    real = atomic.fsync_fd
    monkeypatch.setattr(atomic, "fsync_fd", lambda fd: (release.wait(10), real(fd)))
    handle = m.save_states(tmp_path / "a.h5", {"n": 1}, blocking=False)
    m.fc1.W.copy_from_numpy(np.zeros((4, 3), np.float32))  # training goes on meanwhile
    assert not handle.done()
    release.set()
    assert handle.wait() == str(tmp_path / "a.h5")
    m2 = MLP()
    assert m2.load_states(tmp_path / "a.h5") == {"n": 1}
    assert (tensor.to_numpy(m2.fc1.W) == 1).all()  # the values at the time of the call

    def fail(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic, "fsync_fd", fail)
    bad = m.save_states(tmp_path / "b.h5", blocking=False)
    with pytest.raises(CheckpointError, match="No space"):
        bad.wait()
    monkeypatch.setattr(atomic, "fsync_fd", real)
    second = [m.save_states(tmp_path / f"c{i}.h5", {"i": i}, blocking=False) for i in range(3)]
    assert [h.wait() for h in second] and async_save._pending is second[-1]
    assert sorted(os.listdir(tmp_path)) == ["a.h5", "c0.h5", "c1.h5", "c2.h5"]


def test_loading_into_an_uncompiled_eval_model_keeps_it_in_eval(tmp_path):
    from ckpt_helpers import CNN, OPTIMIZERS, make_cnn

    m, _, _ = make_cnn("sgd")
    m.save_states(tmp_path / "c.h5")
    fresh = CNN()  # never compiled: load_states compiles it from the saved input specs
    fresh.set_optimizer(OPTIMIZERS["sgd"]())
    fresh.eval()
    fresh.load_states(tmp_path / "c.h5")
    assert fresh.training is False

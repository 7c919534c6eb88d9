"""Checkpoints across devices and the transfers behind them: GPU <-> CPU round trips, one host
read per saved array, and the pinned staging logic (driven through a stand-in for ``xp.cuda``,
so it is checked on machines without a GPU too)."""

from __future__ import annotations

import contextlib
import types

import numpy as np
import pytest
from ckpt_helpers import batches, make_cnn, train

from singa_lite import backend, device, tensor
from singa_lite.checkpoint.staging import DeviceFiller, HostSnapshot


def _device(name: str) -> device.Device:
    if name == "gpu":
        if device.get_num_gpus() == 0:
            from singa_lite.backend import cupy as cupy_backend

            pytest.skip(f"needs a CUDA GPU: {cupy_backend.UNAVAILABLE_REASON}")
        return device.create_cuda_gpu()
    return device.create_cpu_device()


def _host_states(m) -> dict[str, np.ndarray]:
    return {k: tensor.to_numpy(t) for k, t in m.get_states().items()}


def _host_slots(m) -> dict[str, np.ndarray]:
    states = m.optimizer.get_states()
    return {f"{s}/{k}": tensor.to_numpy(v) for s in ("m", "v") for k, v in states[s].items()}


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "background"])
@pytest.mark.parametrize("src,dst", [("gpu", "cpu"), ("cpu", "gpu"), ("gpu", "gpu"), ("cpu", "cpu")])
def test_cross_device_round_trip(tmp_path, src, dst, blocking):
    src_dev, dst_dev = _device(src), _device(dst)
    m, tx, ty = make_cnn("adam", dev=src_dev)
    train(m, tx, ty, batches(2), 0, 2)
    raw = src_dev.xp.arange(6, dtype=src_dev.xp.int64).reshape(2, 3)  # a raw backend array (G30)
    aux = {"t": tensor.ones((2,), src_dev), "raw": raw, "epoch": 2}
    result = m.save_states(tmp_path / "a.h5", aux, blocking=blocking)
    if not blocking:
        result.wait()
    want, want_slots = _host_states(m), _host_slots(m)

    m2, _, _ = make_cnn("adam", seed=9, dev=dst_dev)
    buffers = {k: t.data for k, t in m2.get_states().items()}
    got = m2.load_states(tmp_path / "a.h5")
    assert all(m2.get_states()[k].data is buf for k, buf in buffers.items())  # filled in place
    for k, v in _host_states(m2).items():
        np.testing.assert_array_equal(v, want[k], err_msg=k)
    for k, v in _host_slots(m2).items():
        np.testing.assert_array_equal(v, want_slots[k], err_msg=k)
    assert got["epoch"] == 2 and got["t"].device == dst_dev
    np.testing.assert_array_equal(tensor.to_numpy(got["t"]), [1, 1])
    assert isinstance(got["raw"], np.ndarray)  # raw arrays come back on the host, whatever wrote them
    np.testing.assert_array_equal(got["raw"], np.arange(6).reshape(2, 3))


@pytest.mark.parametrize("use_graph", [False, True], ids=["eager", "graph"])
def test_gpu_background_save_snapshots_before_the_next_step(tmp_path, use_graph):
    gpu = _device("gpu")
    m, tx, ty = make_cnn("sgd", dev=gpu, use_graph=use_graph)
    data = batches(3)
    train(m, tx, ty, data, 0, 1)
    want = _host_states(m)
    handle = m.save_states(tmp_path / "a.h5", blocking=False)
    # queued at once; the step's stream (a graph's too) waits for the copies on the GPU
    train(m, tx, ty, data, 1, 3)
    handle.wait()
    m.load_states(tmp_path / "a.h5")
    for k, v in _host_states(m).items():
        np.testing.assert_array_equal(v, want[k], err_msg=k)


@pytest.mark.parametrize("blocking", [True, False])
def test_save_reads_each_array_to_the_host_once_and_load_never(tmp_path, blocking):
    m, tx, ty = make_cnn("adam")
    train(m, tx, ty, batches(1), 0, 1)
    aux = {"t": tensor.ones((2,)), "a": [np.zeros(3), np.ones(2)], "n": 1}
    slots = 2 * len(m.get_params())  # Adam: m and v
    with backend.count_host_reads() as reads:
        handle = m.save_states(tmp_path / "a.h5", aux, blocking=blocking)
    if not blocking:
        handle.wait()
    assert sum(reads.values()) == len(m.get_states()) + slots + 3, reads
    assert all(site.startswith("checkpoint/staging.py:") for site in reads), reads
    with backend.count_host_reads() as reads:
        m.load_states(tmp_path / "a.h5")
    assert sum(reads.values()) == 0, reads


# -- the GPU path, through a stand-in for CuPy's ``xp.cuda`` -------------------------------------
class _Cuda:
    """Logs what the staging code asks of CUDA; copies happen at once, on NumPy arrays."""

    def __init__(self) -> None:
        self.log: list[tuple] = []
        self.compute = _Stream(self, "compute")

    def alloc_pinned_memory(self, nbytes: int) -> bytearray:
        self.log.append(("pin", nbytes))
        return bytearray(nbytes)

    def Stream(self, non_blocking: bool = False) -> _Stream:
        assert non_blocking
        return _Stream(self, "side")

    def get_current_stream(self) -> _Stream:
        return self.compute

    def Device(self, device_id: int) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


class _Stream:
    def __init__(self, cuda: _Cuda, name: str) -> None:
        self.cuda, self.name, self.events = cuda, name, 0

    def record(self) -> _Event:
        self.events += 1
        self.cuda.log.append(("record", self.name))
        return _Event(self.cuda, f"{self.name}#{self.events}")

    def wait_event(self, event: _Event) -> None:
        self.cuda.log.append(("wait", self.name, event.name))


class _Event:
    def __init__(self, cuda: _Cuda, name: str) -> None:
        self.cuda, self.name = cuda, name

    def synchronize(self) -> None:
        self.cuda.log.append(("sync", self.name))


class _Dev(contextlib.nullcontext):
    id = 0


class _DeviceArray:
    """A device array over a NumPy array, with CuPy's ``get``/``set``/``device``."""

    def __init__(self, cuda: _Cuda, a: np.ndarray) -> None:
        self.cuda, self.a = cuda, a
        self.shape, self.dtype, self.size, self.nbytes, self.flags = (
            a.shape,
            a.dtype,
            a.size,
            a.nbytes,
            a.flags,
        )
        self.device = _Dev()

    def get(self, stream: _Stream, out: np.ndarray, blocking: bool) -> None:
        assert not blocking and out.base is not None  # into a pinned buffer, asynchronously
        out[...] = self.a
        self.cuda.log.append(("d2h", stream.name))

    def set(self, arr: np.ndarray, stream: _Stream) -> None:
        self.a[...] = arr
        self.cuda.log.append(("h2d", stream.name, arr.__array_interface__["data"][0]))


def test_snapshot_queues_pinned_copies_on_a_side_stream_and_one_event():
    cuda = _Cuda()
    xp = types.SimpleNamespace(cuda=cuda)
    arrays = [_DeviceArray(cuda, np.arange(n, dtype=np.float32)) for n in (3, 5, 0)]
    with HostSnapshot(copy=False) as snap:
        hosts = [snap.host(a, xp) for a in arrays]
    assert cuda.log == [
        ("pin", 12),
        ("record", "compute"),  # the side stream starts after the work queued so far
        ("wait", "side", "compute#1"),
        ("d2h", "side"),
        ("pin", 20),
        ("d2h", "side"),  # nothing for the empty array
        ("record", "side"),  # one event for all the copies ...
        ("wait", "compute", "side#1"),  # ... that the compute stream waits on, on the GPU
    ]
    cuda.log.clear()
    snap.wait()
    snap.wait()
    assert cuda.log == [("sync", "side#1")]
    for h, a in zip(hosts, arrays):
        np.testing.assert_array_equal(h, a.a)


def test_snapshot_that_fails_midway_waits_for_the_copies_it_queued():
    cuda = _Cuda()
    xp = types.SimpleNamespace(cuda=cuda)
    with pytest.raises(ValueError), HostSnapshot(copy=True) as snap:
        snap.host(_DeviceArray(cuda, np.ones(2)), xp)
        raise ValueError("bad aux value")
    assert cuda.log[-1] == ("sync", "side#1")


def test_filler_reads_into_two_pinned_buffers_in_turn_and_copies_into_the_existing_arrays(tmp_path):
    import h5py

    cuda = _Cuda()
    values = [np.arange(n, dtype=np.float32) * (i + 1) for i, n in enumerate((4, 6, 2))]
    with h5py.File(tmp_path / "d.h5", "w") as f:
        for i, v in enumerate(values):
            f.create_dataset(str(i), data=v.astype(np.float64))  # converted while read
        targets = [
            types.SimpleNamespace(
                data=_DeviceArray(cuda, np.zeros_like(v)),
                device=types.SimpleNamespace(xp=types.SimpleNamespace(cuda=cuda)),
            )
            for v in values
        ]
        with DeviceFiller(largest=24) as filler:
            for i, t in enumerate(targets):
                filler.fill(f[str(i)], t)
    log = cuda.log
    assert log[:2] == [("pin", 24), ("pin", 24)]
    at = [i for i, e in enumerate(log) if e[0] == "h2d"]
    buf = [log[i][2] for i in at]
    assert buf[0] != buf[1] and buf[0] == buf[2]  # buffers A, B, A
    # buffer A is refilled only after its first copy finished; both are waited for at the end
    assert log[at[2] - 1] == ("sync", "compute#1")
    assert log[-2:] == [("sync", "compute#3"), ("sync", "compute#2")]
    for t, v in zip(targets, values):
        np.testing.assert_array_equal(t.data.a, v)


def test_raw_device_arrays_in_aux_states_are_saved_through_the_pinned_path(tmp_path, monkeypatch):
    cuda = _Cuda()
    fake = types.SimpleNamespace(
        name="fake_gpu", xp=types.SimpleNamespace(cuda=cuda), is_array=lambda a: isinstance(a, _DeviceArray)
    )
    monkeypatch.setattr(backend, "_BACKENDS", dict(backend._BACKENDS))
    backend.register(fake)
    m, _, _ = make_cnn("sgd")
    raw = _DeviceArray(cuda, np.arange(4, dtype=np.int32))
    m.save_states(tmp_path / "a.h5", {"raw": {"x": raw}}, blocking=False).wait()
    assert [e[0] for e in cuda.log] == ["pin", "record", "wait", "d2h", "record", "wait", "sync"]
    got = m.load_states(tmp_path / "a.h5")["raw"]["x"]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [0, 1, 2, 3])

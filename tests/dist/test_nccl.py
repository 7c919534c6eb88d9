"""NCCL on CuPy arrays: a one-rank clique (NCCL refuses two ranks on one GPU), where a GPU exists.

Without a GPU the same ``NcclCommunicator`` code runs over a stand-in for CuPy and its NCCL
bindings that checks what CuPy's Cython signatures check: pointers and the stream are integers.
"""

from __future__ import annotations

import ctypes
import operator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from dist_helpers import build, digits_flat, params_of

from singa_lite import DistributedError, backend, device, opt
from singa_lite.dist import NcclCommunicator, communicator, nccl, nccl_unique_id


def _no_gpu() -> str:
    if device.get_num_gpus() > 0:
        return ""
    from singa_lite.backend import cupy as cupy_backend

    return f"needs a CUDA GPU with NCCL: {cupy_backend.UNAVAILABLE_REASON}"


needs_gpu = pytest.mark.skipif(bool(_no_gpu()), reason=_no_gpu() or "gpu available")


def test_nccl_without_a_gpu_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    # The machine as one without a GPU sees it (so this runs on a GPU machine too): no cupy backend.
    real_get = backend.get

    def get(name: str) -> Any:
        if name == "cupy":
            raise KeyError(name)
        return real_get(name)

    monkeypatch.setattr(backend, "get", get)
    with pytest.raises(DistributedError, match="NCCL needs a CUDA GPU"):
        nccl_unique_id()
    with pytest.raises(DistributedError, match="NCCL needs a CUDA GPU"):
        opt.DistOpt(opt.SGD(lr=0.1), nccl_id=b"x", world_size=1, local_rank=0)


@needs_gpu
def test_one_rank_nccl_collectives() -> None:
    dev = device.create_cuda_gpu()
    cp = dev.xp
    nc = NcclCommunicator(1, nccl_unique_id(), 0)
    assert cp.cuda.Device().id == nc.device_id == 0
    a = cp.arange(6, dtype=cp.float32)
    nc.all_reduce(a)
    with cp.cuda.Stream(non_blocking=True):  # NCCL must get this stream's handle, which is not 0
        nc.all_reduce(a)
        nc.wait()
    h = cp.asarray([1.0, 1.0001], dtype=cp.float32)
    nc.all_reduce_half(h)
    nc.broadcast(a, root=0)
    g, counts = nc.all_gather_v(cp.arange(3, dtype=cp.int32))
    nc.wait()
    np.testing.assert_array_equal(cp.asnumpy(a), np.arange(6))
    np.testing.assert_array_equal(cp.asnumpy(h), [1.0, 1.0])  # float16 on the wire
    assert counts == [3] and cp.asnumpy(g).tolist() == [0, 1, 2]
    assert nc.all_gather_object("x") == ["x"]
    with pytest.raises(DistributedError, match="must be a cupy array"):
        nc.all_reduce(np.zeros(3, np.float32))


@needs_gpu
@pytest.mark.parametrize("graph", [False, True])
def test_distopt_trains_on_nccl(graph: bool) -> None:
    dev = device.create_cuda_gpu()
    old = device.get_default_device()
    device.set_default_device(dev)
    try:
        x, y = digits_flat()

        def train(optimizer: object) -> dict:
            m, tx, ty = build(batch=16, seed=1, graph=graph)
            m.set_optimizer(optimizer)
            for step in range(4):
                tx.copy_from_numpy(x[16 * step : 16 * (step + 1)])
                ty.copy_from_numpy(y[16 * step : 16 * (step + 1)])
                m(tx, ty)
            return params_of(m)

        ref = train(opt.SGD(lr=0.1, momentum=0.9))
        # SINGA's constructor for one process per GPU: an nccl_id and the ranks
        got = train(
            opt.DistOpt(opt.SGD(lr=0.1, momentum=0.9), nccl_id=nccl_unique_id(), local_rank=0, world_size=1)
        )
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-7, err_msg=k)
    finally:
        device.set_default_device(old)


# -- the same code over a stand-in for CuPy and its NCCL bindings (runs everywhere) ------------------------
_NCCL_TYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64")


class _FakeGpuArray(np.ndarray):
    """A host array that answers like a CuPy one: ``.data.ptr``, ``.device.id``, ``.get()``."""

    gpu: int

    def __array_finalize__(self, obj: Any) -> None:
        self.gpu = getattr(obj, "gpu", -1)

    @property
    def data(self) -> Any:
        return SimpleNamespace(ptr=self.ctypes.data)

    @property
    def device(self) -> Any:
        return SimpleNamespace(id=self.gpu)

    def get(self) -> np.ndarray:
        return np.asarray(self)


class _FakeStream:  # like cupy.cuda.Stream: a handle in .ptr, no __int__ or __index__
    def __init__(self, gpu: int) -> None:
        self.ptr = 0x1000 + gpu

    def synchronize(self) -> None:
        pass


class _FakeCupy:
    """The parts of CuPy that NcclCommunicator uses, with two GPUs and a current one."""

    __name__ = "cupy"
    ndarray = _FakeGpuArray

    def __init__(self) -> None:
        self.current = 0
        fake = self

        class Device:
            def __init__(self, gpu: int | None = None) -> None:
                self.id = fake.current if gpu is None else gpu

            def use(self) -> None:
                fake.current = self.id

            def __enter__(self) -> Device:
                self.previous, fake.current = fake.current, self.id
                return self

            def __exit__(self, *exc: object) -> None:
                fake.current = self.previous

        self.cuda = SimpleNamespace(
            Device=Device,
            runtime=SimpleNamespace(getDeviceCount=lambda: 2),
            get_current_stream=lambda device_id=-1: _FakeStream(fake.current if device_id < 0 else device_id),
        )
        for name in ("empty", "zeros", "array", "asarray", "arange", "concatenate"):
            setattr(self, name, self._on_current(getattr(np, name)))

    def _on_current(self, make: Any) -> Any:
        def made(*args: Any, **kw: Any) -> _FakeGpuArray:
            out = np.asarray(make(*args, **kw)).view(_FakeGpuArray)
            out.gpu = self.current
            return out

        return made


class _FakeNcclCommunicator:
    """CuPy's ``NcclCommunicator`` for a clique of one; the signatures take ``intptr_t``."""

    def __init__(self, fake: _FakeCupy, ndev: int, uid: bytes, rank: int) -> None:
        assert (ndev, rank) == (1, 0)
        self.gpu, self.streams = fake.current, []  # NCCL binds to the current device

    def _check(self, *handles: Any) -> None:
        for h in handles:
            operator.index(h)  # what Cython's intptr_t conversion demands: TypeError otherwise
        self.streams.append(handles[-1])
        assert handles[-1] == _FakeStream(self.gpu).ptr, "a stream of another GPU than NCCL's"

    def allReduce(self, send: int, recv: int, count: int, dtype: int, op: int, stream: int) -> None:
        self._check(send, recv, stream)
        ctypes.memmove(recv, send, count * np.dtype(_NCCL_TYPES[dtype]).itemsize)

    def bcast(self, buf: int, count: int, dtype: int, root: int, stream: int) -> None:
        self._check(buf, stream)

    def allGather(self, send: int, recv: int, count: int, dtype: int, stream: int) -> None:
        self._check(send, recv, stream)
        ctypes.memmove(recv, send, count * np.dtype(_NCCL_TYPES[dtype]).itemsize)


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch) -> _FakeCupy:
    """CuPy with two GPUs and NCCL, as the backend registry and ``dist.nccl`` see them."""
    fake = _FakeCupy()
    bindings = SimpleNamespace(
        available=True,
        NCCL_SUM=0,
        get_unique_id=lambda: b"id",
        NcclCommunicator=lambda *args: _FakeNcclCommunicator(fake, *args),
        **{f"NCCL_{t.upper()}": i for i, t in enumerate(_NCCL_TYPES)},
    )
    gpus = SimpleNamespace(
        name="cupy",
        xp=fake,
        is_array=lambda a: isinstance(a, _FakeGpuArray),
        to_numpy=np.asarray,
        raise_deferred=lambda: None,
        device_count=lambda: 2,
    )
    monkeypatch.setitem(backend._BACKENDS, "cupy", gpus)
    monkeypatch.setattr(nccl, "_cupy", lambda: fake)
    monkeypatch.setattr(nccl, "_nccl", lambda: bindings)
    return fake


def test_collectives_hand_nccl_integer_pointers_and_the_stream_handle(fake_cupy: _FakeCupy) -> None:
    nc = NcclCommunicator(1, nccl_unique_id(), 0, local_rank=3)
    assert nc.device_id == fake_cupy.current == 1  # local rank 3 of 2 GPUs, made current
    a = fake_cupy.arange(6, dtype=np.float32)
    nc.all_reduce(a)
    h = fake_cupy.asarray([1.0, 1.0001], dtype=np.float32)
    nc.all_reduce_half(h)
    nc.broadcast(a, root=0)
    with fake_cupy.cuda.Device(0):  # another GPU current: NCCL still gets its own GPU's stream
        g = nc.all_gather(a)
    v, counts = nc.all_gather_v(fake_cupy.arange(3, dtype=np.int32))
    assert nc.all_gather_object({"x": 1}) == [{"x": 1}]
    nc.barrier()
    np.testing.assert_array_equal(a, np.arange(6))
    np.testing.assert_array_equal(h, [1.0, 1.0])  # float16 on the wire
    assert g.shape == (1, 6) and g.gpu == 1
    assert counts == [3] and v.tolist() == [0, 1, 2]
    assert len(nc.comm.streams) > 5


def test_arrays_on_another_gpu_than_the_ranks_are_refused(fake_cupy: _FakeCupy) -> None:
    nc = NcclCommunicator(1, nccl_unique_id(), 0, local_rank=1)
    with fake_cupy.cuda.Device(0):
        a = fake_cupy.zeros(4, dtype=np.float32)
    with pytest.raises(DistributedError, match=r"GPU 1 but got the buffer on GPU 0.*create_cuda_gpu_on\(1\)"):
        nc.all_reduce(a)
    with pytest.raises(DistributedError, match="GPU 1 but got"):
        nc.for_device(SimpleNamespace(xp=fake_cupy, id=lambda: 0))
    assert nc.for_device(SimpleNamespace(xp=fake_cupy, id=lambda: 1)) is nc


def test_a_launched_rank_makes_its_local_gpu_current(
    fake_cupy: _FakeCupy, monkeypatch: pytest.MonkeyPatch
) -> None:
    class TwoRanks:  # MPICommunicator of rank 1 of 2, without MPI
        world_size, global_rank, local_rank = 2, 1, 3

    monkeypatch.setattr(communicator, "_world", None)
    monkeypatch.setattr(communicator, "MPICommunicator", TwoRanks)
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("PMI_SIZE", "2")
    assert isinstance(communicator.get_communicator(abort_on_error=False), TwoRanks)
    assert fake_cupy.current == 1  # local rank 3 % 2 GPUs

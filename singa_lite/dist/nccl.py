"""NCCL through CuPy's low-level bindings: collectives on GPU (CuPy) arrays.

Neither the Debian nor the pip MPI builds are CUDA-aware, so device arrays never go to mpi4py:
NCCL moves them, and MPI only hands every rank NCCL's unique id (a few bytes) at start-up.
``cupyx.distributed.NCCLBackend`` is not used: it has no 'avg' op, no bf16, and can deadlock
at exit (cupy/cupy#7863). NCCL is part of CuPy, so this is the one module besides the CuPy
backend that imports it.

Collectives are queued on the current stream of the communicator's GPU, so they run after the
kernels that produced their buffers without a host synchronisation; :meth:`NcclCommunicator.wait`
blocks until done. NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): one rank per GPU.
A rank's arrays must live on its communicator's GPU, so creating the communicator makes that GPU
the process's current device (as SINGA's communicator does with ``cudaSetDevice``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite import backend
from singa_lite.dist.communicator import Communicator, MPICommunicator
from singa_lite.errors import DistributedError


def _cupy() -> Any:
    """The ``cupy`` module, or a ``DistributedError`` saying why no GPU can be used."""
    from singa_lite import backend

    try:
        return backend.get("cupy").xp
    except KeyError:
        from singa_lite.backend import cupy as cupy_backend

        raise DistributedError(f"NCCL needs a CUDA GPU: {cupy_backend.UNAVAILABLE_REASON}") from None


def _nccl() -> Any:
    _cupy()
    try:
        from cupy.cuda import nccl
    except ImportError as e:
        raise DistributedError(
            f"CuPy was built without NCCL ({e}); install the gpu extra: "
            "pip install 'singa_lite[gpu]' (CUDA 12) or 'singa_lite[gpu-cuda13]' (CUDA 13)"
        ) from None
    if not getattr(nccl, "available", True):
        raise DistributedError(
            "CuPy cannot load the NCCL library; install nvidia-nccl-cu12 (CUDA 12) or nvidia-nccl-cu13 "
            "(CUDA 13): the gpu and gpu-cuda13 extras bring them"
        )
    return nccl


def nccl_unique_id() -> Any:
    """A fresh NCCL id: rank 0 makes one and every rank must be given the same (SINGA's ``nccl_id``)."""
    return _nccl().get_unique_id()


class NcclCommunicator(Communicator):
    """Collectives over NCCL on CuPy arrays, one rank per GPU.

    ``NcclCommunicator(world_size, nccl_id, global_rank)`` joins the clique of ``world_size``
    ranks that share ``nccl_id`` (all must call it); the GPU is ``device_id``, by default
    ``local_rank`` modulo the number of visible GPUs. Under MPI use :meth:`from_mpi`, which
    shares the id for you.
    """

    def __init__(
        self,
        world_size: int,
        nccl_id: Any,
        global_rank: int,
        local_rank: int | None = None,
        device_id: int | None = None,
    ) -> None:
        cp = _cupy()
        self._nccl = _nccl()
        if not 0 <= global_rank < world_size:
            raise DistributedError(f"NCCL rank {global_rank} is outside a world of {world_size}")
        self.xp = cp
        self.world_size, self.global_rank = int(world_size), int(global_rank)
        self.local_rank = int(global_rank if local_rank is None else local_rank)
        if device_id is None:
            device_id = self.local_rank % cp.cuda.runtime.getDeviceCount()
        self.device_id = int(device_id)
        # NCCL binds to the device that is current when the communicator is created; making it
        # current for good also puts the arrays this rank allocates from now on on that GPU.
        cp.cuda.Device(self.device_id).use()
        self.comm = self._nccl.NcclCommunicator(self.world_size, nccl_id, self.global_rank)
        self._types = _nccl_types(self._nccl)

    @classmethod
    def from_mpi(cls, mpi: MPICommunicator, device_id: int | None = None) -> NcclCommunicator:
        """The NCCL clique of the ranks of ``mpi``; rank 0's unique id travels over MPI."""
        nccl = _nccl()
        uid = mpi.comm.bcast(nccl.get_unique_id() if mpi.global_rank == 0 else None, root=0)
        return cls(mpi.world_size, uid, mpi.global_rank, mpi.local_rank, device_id)

    def accepts(self, xp: Any) -> bool:
        return xp is self.xp

    def for_device(self, dev: Any) -> Communicator:
        comm = super().for_device(dev)
        if dev.id() != self.device_id:
            raise DistributedError(self._wrong_gpu(f"{dev}"))
        return comm

    def check_buffer(self, buf: Any, what: str = "buffer") -> None:
        """As the base check, and ``buf`` must be on this communicator's GPU."""
        super().check_buffer(buf, what)
        gpu = getattr(getattr(buf, "device", None), "id", self.device_id)
        if gpu != self.device_id:
            raise DistributedError(self._wrong_gpu(f"the {what} on GPU {gpu}"))

    # -- collectives ----------------------------------------------------------------------------
    def all_reduce(self, buf: Any) -> None:
        self.check_buffer(buf)
        ptr = buf.data.ptr
        self._call(self.comm.allReduce, ptr, ptr, buf.size, self._type(buf), self._nccl.NCCL_SUM)

    def all_reduce_half(self, buf: Any) -> None:
        """NCCL sums float16 natively: the buffer is narrowed, reduced in float16 and widened back."""
        self.check_buffer(buf)
        if buf.dtype == np.float16:
            self.all_reduce(buf)
            return
        half = buf.astype(np.float16)
        self.all_reduce(half)
        buf[...] = half

    def broadcast(self, buf: Any, root: int = 0) -> None:
        self.check_buffer(buf)
        if not 0 <= root < self.world_size:
            raise DistributedError(f"root rank {root} is outside a world of {self.world_size}")
        self._call(self.comm.bcast, buf.data.ptr, buf.size, self._type(buf), root)

    def all_gather(self, buf: Any) -> Any:
        self.check_buffer(buf)
        with self._device():  # the one buffer check_buffer does not see
            recv = self.xp.empty((self.world_size, buf.size), dtype=buf.dtype)
        self._call(self.comm.allGather, buf.data.ptr, recv.data.ptr, buf.size, self._type(buf))
        return recv

    def all_gather_v(self, buf: Any, counts: list[int] | None = None) -> tuple[Any, list[int]]:
        """NCCL has no all-gather-v: every rank's buffer is padded to the longest, gathered, trimmed."""
        self.check_buffer(buf)
        if counts is None:
            sizes = self.all_gather(self.xp.array([buf.size], dtype=np.int64))
            counts = [int(c) for c in backend.to_host(sizes).reshape(-1)]
        padded = self.xp.zeros(max(max(counts), 1), dtype=buf.dtype)
        padded[: buf.size] = buf.reshape(-1)
        rows = self.all_gather(padded)
        return self.xp.concatenate([rows[r, :c] for r, c in enumerate(counts)]), counts

    def wait(self) -> None:
        self._stream().synchronize()

    def barrier(self) -> None:
        super().barrier()
        self.wait()

    def abort(self, code: int = 1) -> None:
        self.comm.abort()
        raise SystemExit(code)

    # -- helpers ----------------------------------------------------------------------------------
    def _call(self, collective: Any, *args: Any) -> None:
        """``collective(*args, stream)``: a method of CuPy's communicator, on this GPU's current stream.

        CuPy's ``NcclCommunicator`` methods take the stream as a raw ``cudaStream_t`` handle
        (``intptr_t``), not a ``cupy.cuda.Stream``: every collective goes through here.
        """
        collective(*args, self._stream().ptr)

    def _device(self) -> Any:
        """This rank's GPU as a context, in case the caller made another GPU current since."""
        return self.xp.cuda.Device(self.device_id)

    def _stream(self) -> Any:
        return self.xp.cuda.get_current_stream(self.device_id)  # this GPU's, whichever is current

    def _wrong_gpu(self, what: str) -> str:
        return (
            f"NCCL rank {self.global_rank} communicates on GPU {self.device_id} but got {what}: put the "
            f"rank's model on device.create_cuda_gpu_on({self.device_id}) (SINGA scripts use "
            "create_cuda_gpu_on(sgd.local_rank))"
        )

    def _type(self, buf: Any) -> int:
        try:
            return self._types[np.dtype(buf.dtype)]
        except KeyError:
            raise DistributedError(f"NCCL cannot carry dtype {buf.dtype}") from None


def _nccl_types(nccl: Any) -> dict[np.dtype, int]:
    names = {
        np.float16: "NCCL_FLOAT16",
        np.float32: "NCCL_FLOAT32",
        np.float64: "NCCL_FLOAT64",
        np.int8: "NCCL_INT8",
        np.uint8: "NCCL_UINT8",
        np.int32: "NCCL_INT32",
        np.uint32: "NCCL_UINT32",
        np.int64: "NCCL_INT64",
        np.uint64: "NCCL_UINT64",
    }
    return {np.dtype(t): getattr(nccl, n) for t, n in names.items() if hasattr(nccl, n)}

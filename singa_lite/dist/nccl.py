"""NCCL through CuPy's low-level bindings: collectives on GPU (CuPy) arrays.

Neither the Debian nor the pip MPI builds are CUDA-aware, so device arrays never go to mpi4py:
NCCL moves them, and MPI only hands every rank NCCL's unique id (a few bytes) at start-up.
``cupyx.distributed.NCCLBackend`` is not used: it has no 'avg' op, no bf16, and can deadlock
at exit (cupy/cupy#7863). NCCL is part of CuPy, so this is the one module besides the CuPy
backend that imports it.

Collectives are queued on CuPy's current stream, so they run after the kernels that produced
their buffers without a host synchronisation; :meth:`NcclCommunicator.wait` blocks until done.
NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): one rank per GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

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
            f"CuPy was built without NCCL ({e}); install the gpu extra (cupy with nvidia-nccl-cu12)"
        ) from None
    if not getattr(nccl, "available", True):
        raise DistributedError("CuPy cannot load the NCCL library; install nvidia-nccl-cu12 (the gpu extra)")
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
        # The device must be current before the communicator is created: NCCL binds to it.
        with cp.cuda.Device(self.device_id):
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

    # -- collectives ----------------------------------------------------------------------------
    def all_reduce(self, buf: Any) -> None:
        self.check_buffer(buf)
        ptr = buf.data.ptr
        self.comm.allReduce(ptr, ptr, buf.size, self._type(buf), self._nccl.NCCL_SUM, self._stream())

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
        self.comm.bcast(buf.data.ptr, buf.size, self._type(buf), root, self._stream())

    def all_gather(self, buf: Any) -> Any:
        self.check_buffer(buf)
        recv = self.xp.empty((self.world_size, buf.size), dtype=buf.dtype)
        self.comm.allGather(buf.data.ptr, recv.data.ptr, buf.size, self._type(buf), self._stream())
        return recv

    def all_gather_v(self, buf: Any, counts: list[int] | None = None) -> tuple[Any, list[int]]:
        """NCCL has no all-gather-v: every rank's buffer is padded to the longest, gathered, trimmed."""
        self.check_buffer(buf)
        if counts is None:
            sizes = self.all_gather(self.xp.array([buf.size], dtype=np.int64))
            counts = [int(c) for c in sizes.get().reshape(-1)]
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
    def _stream(self) -> Any:
        return self.xp.cuda.get_current_stream()

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

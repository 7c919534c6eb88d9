"""Communicators: the collectives DistOpt needs, on MPI (host arrays) or one process.

A communicator sums, broadcasts and gathers contiguous arrays across the ranks of a job.
:class:`MPICommunicator` uses mpi4py's buffer-based collectives on NumPy arrays (the lowercase
pickle-based ones are 20-30x slower and unpickle what other processes send: never used);
:class:`~singa_lite.dist.nccl.NcclCommunicator` does the same for CuPy arrays;
:class:`SingleProcessCommunicator` is the world of one that a script started without a launcher
gets, so the same script runs with and without ``mpiexec``.

mpi4py is imported only when a launcher is detected, so ``import singa_lite.dist`` never needs it.
"""

from __future__ import annotations

import abc
import json
import sys
import time
from typing import Any

import numpy as np

from singa_lite.dist.launch import detect_world
from singa_lite.errors import DistributedError

_ABORT_GRACE_S = 0.5  # fatal path only


class Communicator(abc.ABC):
    """Collectives over the ranks of one job, on the arrays of one array module (``xp``).

    Every collective must be called by every rank, in the same order, with buffers of the same
    size and dtype; that is the caller's contract, as in MPI. Buffers are C-contiguous arrays
    that the collective reads and, for the in-place ones, overwrites.
    """

    xp: Any = np
    world_size: int = 1
    global_rank: int = 0
    local_rank: int = 0

    # -- collectives ----------------------------------------------------------------------------
    @abc.abstractmethod
    def all_reduce(self, buf: Any) -> None:
        """Replace ``buf`` on every rank by the element-wise sum of every rank's ``buf``."""

    @abc.abstractmethod
    def all_reduce_half(self, buf: Any) -> None:
        """As :meth:`all_reduce`, with the values carried as float16 (half the bytes of float32)."""

    @abc.abstractmethod
    def broadcast(self, buf: Any, root: int = 0) -> None:
        """Overwrite ``buf`` on every rank with ``root``'s ``buf``."""

    @abc.abstractmethod
    def all_gather(self, buf: Any) -> Any:
        """A new ``(world_size, buf.size)`` array: row ``r`` is rank ``r``'s ``buf`` (same size on all)."""

    @abc.abstractmethod
    def all_gather_v(self, buf: Any, counts: list[int] | None = None) -> tuple[Any, list[int]]:
        """Every rank's 1-D ``buf`` concatenated in rank order, and each rank's element count.

        Sizes may differ between ranks; pass the ``counts`` a previous call returned to skip
        exchanging them again (for a second array of the same lengths).
        """

    def barrier(self) -> None:
        """Return on each rank only once every rank has called it."""
        self.all_reduce(self.xp.zeros(1, dtype=np.int32))

    def wait(self) -> None:  # noqa: B027 (a no-op for blocking transports, overridden by NCCL)
        """Block until the collectives this rank queued have finished (MPI's are blocking already)."""

    def abort(self, code: int = 1) -> None:
        """End every rank of the job now (the last resort that keeps a failure from hanging)."""
        raise SystemExit(code)

    # -- helpers built on the collectives ----------------------------------------------------------
    def all_gather_bytes(self, data: bytes) -> list[bytes]:
        """Every rank's ``data`` (any length), in rank order."""
        arr = self.xp.asarray(np.frombuffer(data, dtype=np.uint8))
        flat, counts = self.all_gather_v(arr)
        host = bytes(_to_host(flat))
        out, start = [], 0
        for c in counts:
            out.append(host[start : start + c])
            start += c
        return out

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's JSON-able ``obj`` (lists come back as tuples), in rank order: for small
        metadata such as layouts and error strings, never for arrays. JSON, not pickle: no rank
        ever unpickles bytes another process sent."""
        return [_tuples(json.loads(b)) for b in self.all_gather_bytes(json.dumps(obj).encode())]

    def for_device(self, dev: Any) -> Communicator:
        """The communicator that handles arrays on ``dev`` (a :class:`~singa_lite.device.Device`)."""
        if self.accepts(dev.xp):
            return self
        raise DistributedError(
            f"{type(self).__name__} communicates {self.xp.__name__} arrays; it cannot move arrays on {dev}"
        )

    def accepts(self, xp: Any) -> bool:
        return xp is self.xp

    def check_buffer(self, buf: Any, what: str = "buffer") -> None:
        """Raise ``DistributedError`` unless ``buf`` is a C-contiguous array of this communicator's module."""
        if not (hasattr(buf, "dtype") and self.accepts(_module_of(buf))):
            raise DistributedError(
                f"{type(self).__name__}: the {what} must be a {self.xp.__name__} array, "
                f"got {type(buf).__name__}"
                + (
                    " (MPI builds here are not CUDA-aware: device arrays go through NCCL)"
                    if self.xp is np
                    else ""
                )
            )
        if not buf.flags.c_contiguous:
            raise DistributedError(
                f"{type(self).__name__}: the {what} (shape {buf.shape}) is not C-contiguous; collectives "
                "read raw memory, so pass a contiguous copy (xp.ascontiguousarray)"
            )
        if buf.dtype == np.bool_:
            raise DistributedError(
                f"{type(self).__name__}: a bool {what} cannot be summed; cast it to an int"
            )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(global_rank={self.global_rank}, world_size={self.world_size}, "
            f"local_rank={self.local_rank})"
        )


class SingleProcessCommunicator(Communicator):
    """The world of one process: every collective is the identity, on any array module.

    ``all_reduce_half`` still rounds to float16, so a one-process run shows what the wire does.
    """

    def accepts(self, xp: Any) -> bool:
        return True

    def all_reduce(self, buf: Any) -> None:
        self.check_buffer(buf)

    def all_reduce_half(self, buf: Any) -> None:
        self.check_buffer(buf)
        buf[...] = buf.astype(np.float16)

    def broadcast(self, buf: Any, root: int = 0) -> None:
        self.check_buffer(buf)
        _check_root(root, 1)

    def all_gather(self, buf: Any) -> Any:
        self.check_buffer(buf)
        return buf.reshape(1, -1).copy()

    def all_gather_v(self, buf: Any, counts: list[int] | None = None) -> tuple[Any, list[int]]:
        self.check_buffer(buf)
        return buf.reshape(-1).copy(), [int(buf.size)]

    def barrier(self) -> None:
        pass

    def all_gather_bytes(self, data: bytes) -> list[bytes]:
        return [bytes(data)]


class MPICommunicator(Communicator):
    """mpi4py's buffer collectives on NumPy arrays (``Allreduce(IN_PLACE, buf)`` and friends).

    float16 has no MPI datatype everywhere (Open MPI 4 rejects it), so float16 travels as raw
    16-bit words: ``all_reduce_half`` and float16 ``all_reduce`` gather every rank's words
    (``Allgather``) and sum them after widening to float32, in rank order. That sum is exact
    up to one float32 rounding per rank and identical on every rank; its cost grows with the
    world size (each rank receives ``world_size`` halves), which suits the small worlds this
    path is for. A user-defined MPI op would move fewer bytes but sum in float16 at each hop.
    """

    def __init__(self, comm: Any = None) -> None:
        mpi = import_mpi()
        self.MPI = mpi
        self.comm = mpi.COMM_WORLD if comm is None else comm
        self.world_size = int(self.comm.Get_size())
        self.global_rank = int(self.comm.Get_rank())
        # Ranks that share memory are on one node: their rank among themselves is the local rank.
        node = self.comm.Split_type(mpi.COMM_TYPE_SHARED)
        self.local_rank = int(node.Get_rank())
        node.Free()
        self._device_comms: dict[Any, Communicator] = {}

    def all_reduce(self, buf: Any) -> None:
        self.check_buffer(buf)
        if buf.dtype == np.float16:
            self._sum_halves(buf)
        else:
            self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)

    def all_reduce_half(self, buf: Any) -> None:
        self.check_buffer(buf)
        self._sum_halves(buf)

    def _sum_halves(self, buf: Any) -> None:
        words = np.ascontiguousarray(buf.reshape(-1), dtype=np.float16).view(np.uint16)
        recv = np.empty((self.world_size, words.size), dtype=np.uint16)
        self.comm.Allgather(words, recv)
        total = recv.view(np.float16).sum(axis=0, dtype=np.float32)
        buf.reshape(-1)[...] = total

    def broadcast(self, buf: Any, root: int = 0) -> None:
        self.check_buffer(buf)
        _check_root(root, self.world_size)
        self.comm.Bcast(_words(buf), root=root)

    def all_gather(self, buf: Any) -> Any:
        self.check_buffer(buf)
        recv = np.empty((self.world_size, buf.size), dtype=buf.dtype)
        self.comm.Allgather(_words(buf), _words(recv))
        return recv

    def all_gather_v(self, buf: Any, counts: list[int] | None = None) -> tuple[Any, list[int]]:
        self.check_buffer(buf)
        if counts is None:
            sizes = np.empty(self.world_size, dtype=np.int64)
            self.comm.Allgather(np.array([buf.size], dtype=np.int64), sizes)
            counts = [int(c) for c in sizes]
        if counts[self.global_rank] != buf.size:
            raise DistributedError(
                f"all_gather_v: this rank's buffer has {buf.size} elements but counts say "
                f"{counts[self.global_rank]}"
            )
        recv = np.empty(sum(counts), dtype=buf.dtype)
        self.comm.Allgatherv(_words(buf).reshape(-1), [_words(recv), counts])
        return recv, counts

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)

    def accepts(self, xp: Any) -> bool:
        return xp is np

    def for_device(self, dev: Any) -> Communicator:
        """Self for host arrays; for a GPU, an NCCL communicator bootstrapped over this one (cached)."""
        if not dev.is_gpu():
            return self
        if dev not in self._device_comms:
            from singa_lite.dist.nccl import NcclCommunicator

            self._device_comms[dev] = NcclCommunicator.from_mpi(self, device_id=dev.id())
        return self._device_comms[dev]


# -- the process-wide communicator -------------------------------------------------------------------
_world: Communicator | None = None


def get_communicator(abort_on_error: bool = True) -> Communicator:
    """This process's communicator for the whole job, created on first use.

    Under a launcher it is an :class:`MPICommunicator` over ``COMM_WORLD`` (checked against the
    world size the launcher announced); without one, a :class:`SingleProcessCommunicator`.
    With ``abort_on_error`` an uncaught exception on any rank of a multi-rank job ends the
    whole job (``MPI_Abort``) after printing its traceback, as ``python -m mpi4py`` does, so no
    rank is left waiting in a collective for a peer that died. Where CuPy sees GPUs, a launched
    rank also makes GPU ``local_rank % count`` its current device, so the arrays it allocates
    and its NCCL communicator share one GPU (as SINGA's communicator does with ``cudaSetDevice``).
    """
    global _world
    if _world is None:
        info = detect_world()
        if not info.launched:
            _world = SingleProcessCommunicator()
        else:
            comm = MPICommunicator()
            if comm.world_size != info.world_size:
                raise DistributedError(
                    f"the {info.launcher} launcher started {info.world_size} ranks but MPI sees a world of "
                    f"{comm.world_size}: the launcher belongs to a different MPI than mpi4py's; launch "
                    "with the mpiexec next to this Python (singa_lite.dist.find_mpiexec())"
                )
            if abort_on_error and comm.world_size > 1:
                _install_abort_hook(comm)
            _use_local_gpu(comm.local_rank)
            _world = comm
    return _world


def import_mpi() -> Any:
    """``mpi4py.MPI``, or a ``DistributedError`` that says how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise DistributedError(
            f"distributed training over MPI needs mpi4py ({e}); install the dist extra: "
            "pip install 'singa_lite[dist]' (mpi4py and the mpich wheel, no system packages)"
        ) from None
    return MPI


def _use_local_gpu(local_rank: int) -> None:
    from singa_lite import backend

    try:
        gpus = backend.get("cupy")
    except KeyError:  # no usable GPU: nothing to choose
        return
    count = gpus.device_count()
    if count > 0:
        gpus.xp.cuda.Device(local_rank % count).use()


def _install_abort_hook(comm: MPICommunicator) -> None:
    previous = sys.excepthook

    def abort_job(kind: Any, value: Any, tb: Any) -> None:
        previous(kind, value, tb)
        sys.stderr.write(f"[rank {comm.global_rank}] uncaught {kind.__name__}: aborting the MPI job\n")
        sys.stderr.flush()
        # mpiexec forwards stderr through a pipe and stops forwarding when the abort reaches
        # it: a moment's pause lets the traceback above leave before the job is torn down.
        time.sleep(_ABORT_GRACE_S)
        comm.abort(1)

    sys.excepthook = abort_job


def _check_root(root: int, world_size: int) -> None:
    if not 0 <= root < world_size:
        raise DistributedError(f"root rank {root} is outside a world of {world_size}")


def _words(buf: np.ndarray) -> np.ndarray:
    """``buf`` as something MPI has a datatype for: float16 moves as raw 16-bit words."""
    return buf.view(np.uint16) if buf.dtype == np.float16 else buf


def _module_of(arr: Any) -> Any:
    from singa_lite import backend

    return backend.get_array_module(arr)


def _to_host(arr: Any) -> np.ndarray:
    from singa_lite import backend

    return backend.backend_of(arr).to_numpy(arr)


def _tuples(x: Any) -> Any:
    """JSON's lists back as tuples, recursively (layouts are tuples of tuples)."""
    return tuple(_tuples(v) for v in x) if isinstance(x, list) else x

"""Moving checkpoint tensors between their device and the host: one transfer per tensor.

On a GPU every transfer goes through pinned (page-locked) host memory, which the copy engine
reads and writes directly; pageable memory costs CUDA an extra staging copy per transfer and
makes each copy synchronous.

- Save (:class:`HostSnapshot`): each device array is copied into its own pinned host array on a
  side stream that first waits for the compute stream. When the snapshot is sealed, the side
  stream records one event and the compute stream waits on it *on the GPU*, so the next
  training step cannot overwrite a tensor before it is copied, while the host goes on at once.
  The writer waits on that event once (:meth:`HostSnapshot.wait`) before it writes.
- Load (:class:`DeviceFiller`): each dataset is read with ``read_direct`` into a pinned buffer,
  then copied into the tensor's existing device array; two buffers sized to the largest
  tensor take turns, so the next dataset is read while the previous copy runs.

On NumPy both are the plain path: ``backend.to_host`` (shared, or copied for a snapshot) and
``read_direct`` straight into the tensor's own buffer. The CuPy API used (``xp.cuda``) comes
from the array's own module, so this file never imports CuPy.
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np

from singa_lite import backend
from singa_lite.checkpoint import store


def _cuda(xp: Any) -> Any:
    """``xp.cuda`` for a CUDA array module (CuPy), else ``None``."""
    return getattr(xp, "cuda", None)


def pinned_empty(cuda: Any, shape: tuple, dtype: Any) -> np.ndarray:
    """A new NumPy array in pinned host memory (``cupyx.empty_pinned`` without cupyx)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes == 0:
        return np.empty(shape, dtype)
    return np.ndarray(shape, dtype, buffer=cuda.alloc_pinned_memory(nbytes))


def to_host_async(array: Any, out: np.ndarray, stream: Any) -> None:
    """Queue the copy of device ``array`` into the pinned host array ``out`` on ``stream``.

    The pinned, asynchronous counterpart of ``backend.to_host``: the caller waits on the stream
    (or an event recorded on it) before reading ``out``.
    """
    if array.size:
        array.get(stream=stream, out=out, blocking=False)


class HostSnapshot:
    """Host copies of the arrays of one checkpoint save, taken by :meth:`host`.

    Use as a context manager: leaving it seals the snapshot (GPU copies queued, one event per
    device); :meth:`wait` then blocks until every host array holds its values. ``copy=False``
    lets NumPy arrays be shared instead of copied (a blocking save); GPU arrays are always
    copied into memory of their own.
    """

    def __init__(self, copy: bool) -> None:
        self.copy = copy
        self._lanes: dict[int, tuple[Any, Any]] = {}  # device id -> (xp.cuda, side stream)
        self._events: list[Any] = []
        self._sources: list[Any] = []  # device arrays kept alive until their copies are done

    def host(self, array: Any, xp: Any = None, private: bool = False) -> np.ndarray:
        """``array``'s values as a host array (on a GPU: filled once :meth:`wait` returns).

        ``xp`` is ``array``'s module when the caller knows it; ``private=True`` says nothing
        else will change ``array`` (a copy already), so a NumPy array is never copied again.
        """
        cuda = _cuda(xp if xp is not None else backend.get_array_module(array))
        if cuda is None:
            out = backend.to_host(array)
            return out.copy() if self.copy and not private else out
        out = pinned_empty(cuda, tuple(array.shape), array.dtype)
        with array.device:
            to_host_async(array, out, self._lane(cuda, array.device.id))
        self._sources.append(array)
        return out

    def _lane(self, cuda: Any, device_id: int) -> Any:
        """The side stream of ``device_id``, ordered after the work queued so far on it."""
        if device_id not in self._lanes:
            lane = cuda.Stream(non_blocking=True)
            lane.wait_event(cuda.get_current_stream().record())
            self._lanes[device_id] = (cuda, lane)
        return self._lanes[device_id][1]

    def __enter__(self) -> HostSnapshot:
        return self

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        for device_id, (cuda, lane) in self._lanes.items():
            with cuda.Device(device_id):
                done = lane.record()
                cuda.get_current_stream().wait_event(done)
            self._events.append(done)
        self._lanes = {}
        if error is not None:
            self.wait()  # the pinned buffers must outlive the copies into them

    def wait(self) -> None:
        """Block until every copy has landed (a no-op on NumPy and when called again)."""
        for done in self._events:
            done.synchronize()
        self._events, self._sources = [], []


class DeviceFiller:
    """Reads datasets into tensors' existing arrays, one host-to-device copy per tensor on a GPU.

    ``largest`` is the size in bytes of the largest tensor to be filled; the pinned buffers are
    allocated at the first GPU tensor. Use as a context manager: leaving it waits for the last
    copies, so the pinned buffers can be reused or freed.
    """

    def __init__(self, largest: int) -> None:
        self.largest = max(int(largest), 1)
        self._buffers: list[Any] = []
        self._events: list[Any] = [None, None]
        self._turn = 0

    def fill(self, ds: h5py.Dataset, t: Any) -> None:
        """Load ``ds`` (of ``t``'s shape) into Tensor ``t``'s own array."""
        data = t.data
        if isinstance(data, np.ndarray) and data.flags.c_contiguous and data.flags.writeable:
            store.read_into(ds, data)
            return
        cuda = _cuda(t.device.xp)
        if cuda is None or not data.flags.c_contiguous or data.nbytes > self.largest:
            t.copy_from(store.read_array(ds))
            return
        if not self._buffers:
            self._buffers = [cuda.alloc_pinned_memory(self.largest) for _ in range(2)]
        k, self._turn = self._turn, 1 - self._turn
        if self._events[k] is not None:
            self._events[k].synchronize()  # the copy out of this buffer has finished
        staged = np.ndarray(data.shape, data.dtype, buffer=self._buffers[k])
        store.read_into(ds, staged)  # HDF5 converts to the tensor's dtype here, if they differ
        if data.size:
            with data.device:
                stream = cuda.get_current_stream()
                data.set(staged, stream=stream)
                self._events[k] = stream.record()

    def __enter__(self) -> DeviceFiller:
        return self

    def __exit__(self, *exc: Any) -> None:
        for done in self._events:
            if done is not None:
                done.synchronize()
        self._events = [None, None]

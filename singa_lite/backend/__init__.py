"""Backend registry: one module per array library, chosen by the array itself.

A backend is a small object with the same attributes in every module (``name``, ``xp``,
``is_array``, ``to_numpy``, ``from_numpy``, ``new_rng``, ``synchronize``). The NumPy backend is
always registered; the CuPy backend registers itself only when CuPy imports and sees a GPU, so
nothing outside ``backend/cupy.py`` ever imports CuPy.
"""

from __future__ import annotations

import collections
import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from singa_lite.backend import numpy as _numpy_backend
from singa_lite.backend.numpy import tune_malloc as tune_malloc  # the allocator opt-in, re-exported

_BACKENDS: dict[str, Any] = {"numpy": _numpy_backend}


def register(backend: Any) -> None:
    """Add a backend module (or object) under its ``name``."""
    _BACKENDS[backend.name] = backend


def get(name: str) -> Any:
    """The backend registered as ``name``; ``KeyError`` lists the known ones."""
    try:
        return _BACKENDS[name]
    except KeyError:
        raise KeyError(f"no backend {name!r}; registered: {sorted(_BACKENDS)}") from None


def available() -> list[str]:
    """Names of the registered backends, NumPy first."""
    return list(_BACKENDS)


def backend_of(array: Any) -> Any:
    """The backend that owns ``array`` (NumPy for anything that is not a device array)."""
    for b in _BACKENDS.values():
        if b is not _numpy_backend and b.is_array(array):
            return b
    return _numpy_backend


def get_array_module(array: Any) -> Any:
    """``numpy`` or ``cupy``, whichever ``array`` belongs to (Chainer's ``get_array_module``)."""
    return backend_of(array).xp


_host_read_counters: list[collections.Counter] = []
_capture: Any = None  # the cuda_graph.StepGraph capturing a step, if one is


def capturing() -> bool:
    """Whether a training step is being captured into a CUDA graph right now: code that
    branches on host state per step cannot be captured (the graph would freeze one branch)."""
    return _capture is not None


def step_scalar(xp: Any, dtype: Any, key: Any, value: Callable[[], Any]) -> Any:
    """A value that changes from one training step to the next (a scheduled learning rate,
    Adam's bias corrections, the random generator's counter) as a kernel operand.

    ``dtype.type(value())`` normally. While a step is being captured into a CUDA graph, a 0-d
    device array that the graph's kernels read and that every launch sets from ``value()``
    first, so that a replayed step does not reuse the number of the step it was captured in.
    ``key`` names the value within the step (the same key gives the same array).
    """
    if _capture is None or xp is np:
        return np.dtype(dtype).type(value())
    return _capture.scalar(dtype, key, value)


def to_host(array: Any) -> np.ndarray:
    """``array``'s values as a NumPy array: the package's one device-to-host read.

    Every place in singa_lite that needs an array's *values* on the host (a range check, a
    shape read from a tensor, ``Tensor.numpy()``) goes through here, on NumPy arrays too, so
    that :func:`count_host_reads` sees each one on either backend. On a device this waits for
    the array's stream: inside a training step it is a hidden synchronisation, and a CUDA
    graph capture cannot contain it.
    """
    b = backend_of(array)
    if b is not _numpy_backend:
        b.raise_deferred()
    if _host_read_counters:
        frame = sys._getframe(1)
        where = frame.f_code.co_filename.rsplit("singa_lite/", 1)[-1]
        site = f"{where}:{frame.f_lineno} {frame.f_code.co_name}"
        for c in _host_read_counters:
            c[site] += 1
    return b.to_numpy(array)


def check(bad: Any, key: str, make_error: Callable[[], Exception]) -> None:
    """Raise ``make_error()`` when the 0-d boolean array ``bad`` is true, without a hidden
    synchronisation: on the host at once; on a device the flag is OR-ed into a flag kept per
    ``key`` (one fixed 0-d device array, so a CUDA graph can capture the update) and the error
    is raised at the next :func:`to_host` or ``Device.Sync`` -- a step with an out-of-range
    label or index on a GPU reports it when its loss is read, as PyTorch's device asserts do.
    ``key`` names the check (op and condition); ``make_error`` is called once, when raising.
    """
    b = backend_of(bad)
    if b is _numpy_backend:
        if bad:
            raise make_error()
        return
    b.defer_check(bad, key, make_error)


@contextlib.contextmanager
def count_host_reads() -> Iterator[collections.Counter]:
    """Count :func:`to_host` calls made inside the block, by call site (``file:line function``).

    >>> import numpy as np
    >>> with count_host_reads() as reads:
    ...     _ = to_host(np.zeros(3))
    >>> sum(reads.values())
    1
    """
    counter: collections.Counter = collections.Counter()
    _host_read_counters.append(counter)
    try:
        yield counter
    finally:
        _host_read_counters.remove(counter)


def _try_cupy() -> None:
    from singa_lite.backend import cupy as _cupy_backend

    if _cupy_backend.AVAILABLE:
        register(_cupy_backend)


_try_cupy()

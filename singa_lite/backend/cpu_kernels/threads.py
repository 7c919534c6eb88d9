"""One thread count for the compiled kernels, oneDNN and BLAS, chosen once.

The kernels and oneDNN's convolutions run between the matrix products, never during one, so
the cores are never oversubscribed as long as no pool is larger than the cores this process
may run on and an idle pool stops spinning soon (:func:`shorten_blas_spin`).
By default the kernels take BLAS's count (as OpenBLAS sized itself from
``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS`` or the cores), capped by the CPU affinity, and
BLAS is left alone. ``SINGA_LITE_NUM_THREADS=N`` in the environment, or
:func:`set_num_threads`, sets both to ``N``: an explicit opt-in, since a BLAS thread count is
process-wide (the same holds for ``singa_lite.backend.tune_malloc``).

BLAS is read and resized with threadpoolctl, which finds the BLAS libraries loaded in the
process and calls their own ``set_num_threads``; NumPy offers no such call. Without
threadpoolctl the BLAS count is taken from those environment variables and cannot be changed
after NumPy has loaded it.
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import Any

from singa_lite import _args

ENV = "SINGA_LITE_NUM_THREADS"
_BLAS_ENVS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

_count: int | None = None
_generation = 0  # bumped by set_num_threads: each Python thread re-applies the count once
_local = threading.local()
_blas_limiter: Any = None  # threadpoolctl's limiter, kept so that the limit stays in force


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def blas_info() -> list[dict]:
    """threadpoolctl's description of each BLAS loaded in the process (library, its threading
    layer, kernel architecture, thread count); empty without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [i for i in threadpool_info() if i.get("user_api") == "blas"]


def blas_threads() -> int:
    """The thread count of the loaded BLAS (the largest, if several are loaded)."""
    counts = [int(i["num_threads"]) for i in blas_info()]
    if counts:
        return max(counts)
    for name in _BLAS_ENVS:
        value = _parse(os.environ.get(name), name)
        if value:
            return value
    return cores()


def _parse(value: str | None, name: str) -> int | None:
    if value is None or not value.strip():
        return None
    try:
        n = int(value)
        if n >= 1:
            return n
    except ValueError:
        pass
    warnings.warn(f"singa_lite: ignoring {name}={value!r}: not a positive integer", stacklevel=3)
    return None


def count() -> int:
    """Threads the kernels run on: ``SINGA_LITE_NUM_THREADS`` if set, else BLAS's count,
    at most the cores of the CPU affinity. Decided at the first kernel call, then kept.

    >>> count() >= 1
    True
    """
    global _count
    if _count is None:
        n = _parse(os.environ.get(ENV), ENV) or blas_threads()
        _count = max(1, min(n, cores()))
    return _count


def set_num_threads(n: int) -> None:
    """Run the kernels and BLAS on ``n`` threads each (BLAS through threadpoolctl, when
    installed); process-wide, until called again."""
    global _count, _generation, _blas_limiter
    _count = _args.count("set_num_threads", "n", n)
    _generation += 1
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    _blas_limiter = threadpool_limits(limits=n, user_api="blas")


def generation() -> int:
    """Bumped by each :func:`set_num_threads`: a pool that keeps its count per calling thread
    re-applies :func:`count` when this moves."""
    return _generation


def apply(numba: Any) -> None:
    """Give Numba's pool the count in the calling thread (Numba keeps it per thread)."""
    if getattr(_local, "generation", None) != _generation:
        numba.set_num_threads(max(1, min(count(), numba.config.NUMBA_NUM_THREADS)))
        _local.generation = _generation


BLAS_SPIN_ENV = "OPENBLAS_THREAD_TIMEOUT"
BLAS_SPIN = 22
"""OpenBLAS's idle workers spin ``2**BLAS_SPIN`` cycles (~1 ms here) before they sleep."""

_blas_spin_set = False


def shorten_blas_spin() -> bool:
    """Let OpenBLAS's idle worker threads sleep after ``2**BLAS_SPIN`` cycles instead of its
    default ``2**28`` (~70 ms); true when done (or done before).

    OpenBLAS's workers spin (yielding) for that long after each product, so in a training step,
    where a product comes every few milliseconds, they never sleep: another pool's threads
    (oneDNN's OpenMP, Numba's) then share the cores with them, and oneDNN's convolutions ran at
    half speed beside them (LeNet's second conv 35 ms a step against 16). OpenBLAS reads the
    timeout (``OPENBLAS_THREAD_TIMEOUT``, the exponent) when it starts its workers, so this
    sets that variable, has OpenBLAS re-read its environment and stops its workers, as its own
    fork handler does; the next threaded product starts them again with the short timeout.
    A timeout the user set in the environment is left as it is, and so is a BLAS other than
    OpenBLAS's pthreads build. Call it from one thread, with no product running.
    """
    global _blas_spin_set
    if _blas_spin_set:
        return True
    if os.environ.get(BLAS_SPIN_ENV):
        _blas_spin_set = True
        return True
    libs = [
        i
        for i in blas_info()
        if i.get("internal_api") == "openblas" and i.get("threading_layer") == "pthreads"
    ]
    if not libs:
        return False
    import ctypes

    os.environ[BLAS_SPIN_ENV] = str(BLAS_SPIN)
    try:
        for info in libs:
            lib = ctypes.CDLL(info["filepath"])
            lib.openblas_read_env()
            lib.blas_thread_shutdown_()
    except (OSError, AttributeError):  # a build without these entry points: leave it
        return False
    _blas_spin_set = True
    return True


def configure_from_env() -> None:
    """Apply ``SINGA_LITE_NUM_THREADS`` to BLAS at import when it is set; nothing otherwise."""
    n = _parse(os.environ.get(ENV), ENV)
    if n:
        set_num_threads(n)

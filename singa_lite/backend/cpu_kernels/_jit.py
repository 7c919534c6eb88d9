"""Compiling the loops: serial and parallel forms, their disk cache, Numba's thread pool.

A loop is written once over ``numba.prange`` and :class:`Kernel` compiles it, at its first
call for each argument type, in two forms: serial for small arrays, where waking the thread
pool costs more than the work, and ``parallel=True``. Both are cached on disk
(``cache=True``) in a folder of their own, named by a hash of this package's sources: Numba
keys a cached loop by its own file only, so a changed helper in ``_math.py`` would otherwise
load stale machine code. Where no cache folder is writable (a read-only install and home) the
loops are compiled in every process; a cache that fails to load or save is dropped the same
way, never failing the call.

Numba's thread pool is its "workqueue" layer unless ``NUMBA_THREADING_LAYER`` names another:
measured here, the GNU OpenMP layer took 8-12 ms per parallel loop on a busy 2-core machine
(its threads spin, then miss their time slice), the workqueue 0.05 ms; on a quieter machine a
workqueue launch took 85-130 us (its workers sleep between launches) and OpenMP's ~2 us, so a
parallel form pays only on large arrays and never on one thread. The workqueue may not be
entered by two threads at once, so parallel launches hold a lock.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import warnings
from collections.abc import Callable
from importlib import resources
from typing import Any

import numba
import numba.core.config
import numba.core.errors

from singa_lite.backend.cpu_kernels import threads

PARALLEL_MIN = 1 << 21
"""Elements (or element-sized steps of work) below which a kernel runs its serial form. A
workqueue launch costs 85-130 us here (see the module's docstring; 10-50 us was measured on a
busier day), what one thread needs for ~100-200k floats of a simple loop, and a loop's second
thread gains little beside OpenBLAS's spinning workers: GELU over a million floats ran 0.92 ms
parallel against 0.73 serial on two threads, over 16 million 6.8 against 13.9. Measured on two
threads, interleaved, at 2M against the former 64k: ResNet-20's step 316 against 341 ms,
MobileNetV2-style 384 against 412, LeNet equal; batch-1 MobileNetV2 13.1 against 16.7 ms,
ShuffleNetV2 8.2 against 11.6."""

_OPTIONS = {"nogil": True, "error_model": "numpy", "boundscheck": False}
"""``error_model="numpy"``: a float division by zero gives inf or nan as in NumPy instead of
raising (whose check would stop the loop from vectorising)."""

_CONTRACT = {"contract"}
"""The one fast-math flag of the loops that are not :func:`exact`: a multiply and an add may
fuse into an FMA (one rounding instead of two), which halves exp's polynomial. No
reassociation (it would undo exp's split of ln 2), no assumption of finite values."""

_compile_lock = threading.Lock()
_launch_lock = threading.Lock()
_cache_root: str | None = None


def _source_hash() -> str:
    """A hash of this package's Python sources and Numba's version: the cache folder's name."""
    h = hashlib.sha256(numba.__version__.encode())
    folder = resources.files("singa_lite.backend.cpu_kernels")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".py"):
            h.update(entry.name.encode())
            h.update(entry.read_bytes())
    return h.hexdigest()[:16]


def cache_root() -> str | None:
    """The folder compiled kernels are cached in, or None where none is writable:
    ``$NUMBA_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME`` (default ``~/.cache``) +
    ``/singa_lite``; then ``numba-<hash of the kernel sources>``."""
    global _cache_root
    if _cache_root is None:
        base = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
            "singa_lite",
        )
        path = os.path.join(base, f"numba-{_source_hash()}")
        try:
            os.makedirs(path, exist_ok=True)
            tempfile.TemporaryFile(dir=path).close()
            _cache_root = path
        except OSError:
            _cache_root = ""
    return _cache_root or None


def _compile(fn: Callable, parallel: bool, cache: bool, fastmath: Any) -> Any:
    """A Numba dispatcher for ``fn``, which compiles at its first call for each argument type."""
    options = dict(_OPTIONS, fastmath=fastmath)
    root = cache_root() if cache else None
    if root is None:
        return numba.njit(parallel=parallel, **options)(fn)
    # Numba places a function's cache by its config when the dispatcher is made. The serial and
    # parallel forms get folders of their own: Numba's cache index does not tell them apart.
    config = numba.core.config
    saved = config.CACHE_DIR
    config.CACHE_DIR = os.path.join(root, "parallel" if parallel else "serial")
    try:
        return numba.njit(parallel=parallel, cache=True, **options)(fn)
    except RuntimeError:  # no cache locator after all: compile in this process only
        return numba.njit(parallel=parallel, **options)(fn)
    finally:
        config.CACHE_DIR = saved


def _choose_threading_layer() -> None:
    """The workqueue layer, unless the user chose one or Numba's pool is running already."""
    if "NUMBA_THREADING_LAYER" in os.environ:
        return
    from numba.np.ufunc import parallel

    if not parallel._is_initialized:
        numba.core.config.THREADING_LAYER = "workqueue"


class Kernel:
    """A loop over arrays, compiled by Numba at its first call in a serial and a parallel form.

    ``kernel(work, *args)`` runs the parallel form when ``work`` (about the number of elements
    touched) is at least :data:`PARALLEL_MIN` and more than one thread is configured, else the
    serial one. On one thread the parallel form is never run: a launch through Numba's pool
    still hands the loop to a worker and waits for it, measured 85-130 us a call on the 2-core
    machine (a waking thread), 2-3x the whole depthwise convolution of a 14x14 layer.
    """

    def __init__(self, fn: Callable, fastmath: Any = False) -> None:
        self.fn = fn
        self.fastmath = fastmath
        self._forms: dict[bool, Any] = {}
        self._uncached: set[bool] = set()
        self._compiled: set[tuple[bool, str]] = set()

    def form(self, parallel: bool) -> Any:
        """The serial or parallel dispatcher (made at the first call)."""
        disp = self._forms.get(parallel)
        if disp is None:
            with _compile_lock:
                disp = self._forms.get(parallel)
                if disp is None:
                    disp = self._forms[parallel] = _compile(self.fn, parallel, True, self.fastmath)
        return disp

    def _run(self, parallel: bool, args: tuple) -> Any:
        key = (parallel, args[0].dtype.char)
        if key not in self._compiled:
            # Numba's pedantic IR checks warn about the inlined exp and tanh ("variable not in
            # scope"); the compiled loops are right (the tests hold them to NumPy's).
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", numba.core.errors.NumbaIRAssumptionWarning)
                out = self._launch(parallel, args)
            self._compiled.add(key)
            return out
        return self._launch(parallel, args)

    def _launch(self, parallel: bool, args: tuple) -> Any:
        if not parallel:
            return self.form(False)(*args)
        with _launch_lock:
            _choose_threading_layer()
            threads.apply(numba)
            return self.form(True)(*args)

    def __call__(self, work: int, *args: Any) -> Any:
        parallel = runs_parallel(work)
        try:
            return self._run(parallel, args)
        except Exception as e:
            if parallel in self._uncached or isinstance(e, numba.core.errors.NumbaError):
                raise
            # A cache file that cannot be read or written (a full disk, a file truncated by a
            # killed process) must not fail the step: compile without the cache and retry.
            # An error of the loop itself fails again the same way and is raised then.
            with _compile_lock:
                self._uncached.add(parallel)
                self._forms[parallel] = _compile(self.fn, parallel, False, self.fastmath)
            warnings.warn(
                f"singa_lite: compiled kernel {self.fn.__name__} failed with its disk cache "
                f"({type(e).__name__}: {e}); compiled again without it",
                RuntimeWarning,
                stacklevel=2,
            )
            return self._run(parallel, args)


def runs_parallel(work: int) -> bool:
    """Whether a :class:`Kernel` called with ``work`` runs its parallel form."""
    return work >= PARALLEL_MIN and threads.count() > 1


def kernel(fn: Callable) -> Kernel:
    """Decorator: ``fn`` as a :class:`Kernel` whose multiplies and adds may fuse."""
    return Kernel(fn, _CONTRACT)


def exact(fn: Callable) -> Kernel:
    """Decorator: ``fn`` as a :class:`Kernel` rounding every operation as NumPy does (no fused
    multiply-add): for the optimizer updates, which match NumPy's bit for bit."""
    return Kernel(fn, False)


def helper(fn: Callable) -> Any:
    """Decorator: a scalar function the loops call, inlined into them (a call would stop the
    loop from vectorising)."""
    return numba.njit(inline="always", error_model="numpy")(fn)

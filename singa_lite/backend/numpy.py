"""The NumPy backend: host arrays, always available.

Importing it leaves the process as it was. Tuning glibc's allocator for training loops is an
opt-in: call :func:`~singa_lite.backend.tune_malloc`, or set the environment variable
``SINGA_LITE_TUNE_MALLOC=1`` before singa_lite is imported.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

import numpy

name = "numpy"
xp = numpy
AVAILABLE = True

_M_TRIM_THRESHOLD = -1  # mallopt parameter numbers from glibc's <malloc.h>
_M_MMAP_THRESHOLD = -3


TUNE_MALLOC_ENV = "SINGA_LITE_TUNE_MALLOC"
"""The environment variable that, set to ``1``, makes importing singa_lite call
:func:`~singa_lite.backend.tune_malloc`."""

MALLOC_TUNED = False
"""Whether :func:`~singa_lite.backend.tune_malloc` has tuned glibc's allocator in this process."""


def tune_malloc() -> bool:
    """Keep large freed blocks in the process instead of returning them to the OS (glibc only).

    An explicit opt-in, process-wide and not undone: importing singa_lite calls it only when
    the environment variable ``SINGA_LITE_TUNE_MALLOC=1`` is set. ``singa_lite.demo`` and
    ``benchmarks/training.py`` call it.

    A training step allocates and frees the same large arrays every step (im2col matrices,
    activations, gradients). glibc serves blocks over its mmap threshold (dynamic, at most
    32 MiB) with fresh ``mmap`` pages and unmaps them on free, and trims the heap top past
    its trim threshold, so every step page-faults and zero-fills those megabytes again:
    measured 14,000 faults (57 MB) and about 10% of a ResNet-20 CPU step. Raising both
    thresholds to 1 GiB lets freed blocks be reused; the price is that up to that much freed
    memory stays mapped to the process (PyTorch's and CuPy's caching allocators do the same):
    building a 400 MB model leaves 1.34x its size resident instead of 1.0x, the initialisers'
    freed temporaries included (``docs/performance.md``).

    Returns whether the allocator is tuned (also kept in
    :data:`~singa_lite.backend.numpy.MALLOC_TUNED`); off glibc Linux it does nothing and
    returns ``False``.
    """
    global MALLOC_TUNED
    if MALLOC_TUNED or not sys.platform.startswith("linux"):
        return MALLOC_TUNED
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = False
    # Older glibc caps the mmap threshold at 32 MiB (HEAP_MAX_SIZE / 2): fall back to that.
    for size in (1 << 30, 32 << 20):
        if mallopt(_M_MMAP_THRESHOLD, size):
            ok = True
            break
    MALLOC_TUNED = bool(mallopt(_M_TRIM_THRESHOLD, 1 << 30)) and ok
    return MALLOC_TUNED


if os.environ.get(TUNE_MALLOC_ENV) == "1":
    tune_malloc()


def is_array(a: Any) -> bool:
    return isinstance(a, numpy.ndarray)


def to_numpy(a: Any) -> numpy.ndarray:
    return numpy.asarray(a)


def from_numpy(a: numpy.ndarray, device_id: int = -1) -> numpy.ndarray:
    return numpy.asarray(a)


def new_rng(seed: int | None, device_id: int = -1) -> numpy.random.Generator:
    return numpy.random.default_rng(seed)


def rng_state(rng: numpy.random.Generator) -> dict:
    """A JSON-able snapshot of the generator (for checkpoints)."""
    return dict(rng.bit_generator.state)


def set_rng_state(rng: numpy.random.Generator, state: dict) -> None:
    rng.bit_generator.state = state


def synchronize(device_id: int = -1) -> None:
    """Host arrays are always in sync."""


def activate(device_id: int = -1) -> None:
    """The host has no current device to switch."""


def device_count() -> int:
    return 0

"""The NumPy backend: host arrays, always available.

Importing it tunes glibc's allocator for training loops (see :func:`tune_malloc`); set the
environment variable ``SINGA_LITE_MALLOC_TUNE=0`` to leave the allocator as it is.
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


def tune_malloc() -> bool:
    """Keep large freed blocks in the process instead of returning them to the OS (glibc only).

    A training step allocates and frees the same large arrays every step (im2col matrices,
    activations, gradients). glibc serves blocks over its mmap threshold (dynamic, at most
    32 MiB) with fresh ``mmap`` pages and unmaps them on free, and trims the heap top past
    its trim threshold, so every step page-faults and zero-fills those megabytes again:
    measured 14,000 faults (57 MB) and about 10% of a ResNet-20 CPU step. Raising both
    thresholds to 1 GiB lets freed blocks be reused; the price is that up to that much freed
    memory stays mapped to the process (PyTorch's and CuPy's caching allocators do the same).

    Returns whether the allocator was tuned. Does nothing off glibc Linux or when
    ``SINGA_LITE_MALLOC_TUNE=0``.
    """
    if os.environ.get("SINGA_LITE_MALLOC_TUNE", "1") == "0" or not sys.platform.startswith("linux"):
        return False
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
    return bool(mallopt(_M_TRIM_THRESHOLD, 1 << 30)) and ok


MALLOC_TUNED = tune_malloc()
"""Whether importing this backend tuned glibc's allocator (see :func:`tune_malloc`)."""


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

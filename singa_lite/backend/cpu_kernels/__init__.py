"""Compiled CPU kernels for the hot spots of a training step on NumPy, by Numba.

NumPy runs an activation, a normalisation or an optimizer update as several passes over the
array, each on one core; each kernel here is one pass over the data (two over a row for the
statistics of a norm or a softmax), on all the threads of :mod:`.threads`. The ops' plain
``xp`` code is the reference and the fallback: an op asks :func:`usable` with its arrays and
runs its usual code when the answer is no. ``tests/test_cpu_kernels.py`` holds every kernel to
its NumPy reference over a hypothesis grid of shapes, strides and dtypes.

Numba is an optional dependency (the ``cpu-kernels`` extra): it is imported at the first
:func:`usable` call, the loops are compiled at their first call (cached on disk,
``_jit.cache_root``), and without it everything runs the NumPy code. ``SINGA_LITE_CPU_KERNELS=0``
turns the kernels off, for A/B comparisons and as an escape hatch. Thread counts:
:mod:`.threads` (``SINGA_LITE_NUM_THREADS``).

One module per family, each imported (with Numba) at its first use as an attribute of this
package: ``activation`` (GELU, bias + activation, the ReLU, clip and hard sigmoid gradients,
SiLU, hard swish, add + ReLU, a batch-1 conv's bias + clamp epilogue), ``normalization``
(layer norm, batch norm), ``softmax`` (row softmax, attention's), ``optim`` (SGD,
Adam/AdamW), ``conv`` (depthwise convolution), ``pool`` (max and average pooling, and the
inference sweep), ``recurrent`` (the LSTM step); ``_math`` holds the vectorisable exp and
tanh the float32 loops use, ``_jit`` the compilation, its disk cache and the thread pool.
This module and :mod:`.threads` import without Numba.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import numpy as np

from singa_lite.backend.cpu_kernels import threads

ENV = "SINGA_LITE_CPU_KERNELS"

_numba_imports: bool | None = None


def enabled() -> bool:
    """Whether the kernels are switched on: yes unless ``SINGA_LITE_CPU_KERNELS=0``.

    >>> enabled() in (True, False)
    True
    """
    return os.environ.get(ENV, "1").strip() not in ("0", "false", "off", "no")


def available() -> bool:
    """Whether Numba imports (tried once, at the first call)."""
    global _numba_imports
    if _numba_imports is None:
        try:
            import numba  # noqa: F401
        except Exception:  # ImportError, or a Numba built for another NumPy failing at import
            _numba_imports = False
        else:
            _numba_imports = True
    return _numba_imports


_FLOATS = frozenset((np.dtype(np.float32), np.dtype(np.float64)))
"""The kernels' dtypes, as dtype objects: a set lookup costs ~0.05 us, ``dtype.name`` ~2 us,
and ops ask :func:`usable` several times a step."""


def usable(xp: Any, *arrays: Any) -> bool:
    """Whether the kernels can take ``arrays``: NumPy arrays of one dtype, float32 or float64,
    kernels on and Numba importable. Any layout: the wrappers copy a strided array into a
    contiguous one first. The one test that picks the kernel path over the plain one.

    >>> usable(np, np.zeros(3, np.int32))  # integers: always the plain path
    False
    """
    if xp is not np or not enabled():
        return False
    dtype = arrays[0].dtype
    if dtype not in _FLOATS:
        return False
    if any(not isinstance(a, np.ndarray) or a.dtype != dtype for a in arrays):
        return False
    return available()


def usable_in_place(xp: Any, *arrays: Any) -> bool:
    """:func:`usable`, and every array C-contiguous: for the kernels that update arrays in
    place (the optimizer updates).

    >>> usable_in_place(np, np.zeros((3, 2), np.float32).T)
    False
    """
    return usable(xp, *arrays) and all(a.flags.c_contiguous for a in arrays)


def flat(a: np.ndarray) -> np.ndarray:
    """``a`` as a 1-d C-contiguous array (a view when it is contiguous already)."""
    return np.ascontiguousarray(a).reshape(-1)


FAMILIES = ("activation", "normalization", "softmax", "optim", "conv", "pool", "recurrent")


def __getattr__(name: str) -> Any:
    """The kernel modules, imported (and Numba with them) at their first use."""
    if name in FAMILIES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


threads.configure_from_env()

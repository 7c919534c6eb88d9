"""The setting a benchmark ran in, printed as the first line of its results: thread count, the
BLAS NumPy loaded (its kernel architecture and threads, by threadpoolctl), whether the compiled
CPU kernels ran, whether oneDNN runs the convolutions, and glibc malloc tuning. Results files in
``benchmarks/results/`` start with it, so that a ratio can be traced to the library and thread
setting it was measured with."""

from __future__ import annotations

import os

import numpy as np

from singa_lite.backend import cpu_kernels
from singa_lite.backend.cpu_kernels import threads


def blas() -> str:
    """The loaded BLAS libraries as ``api architecture xthreads``, or ``?`` without threadpoolctl."""
    info = threads.blas_info()
    return (
        ", ".join(f"{i.get('internal_api')} {i.get('architecture')} x{i.get('num_threads')}" for i in info)
        or "?"
    )


def kernels() -> str:
    """``on (numba X.Y)``, ``off (SINGA_LITE_CPU_KERNELS=0)`` or ``unavailable (no numba)``."""
    if not cpu_kernels.enabled():
        return f"off ({cpu_kernels.ENV}=0)"
    if not cpu_kernels.available():
        return "unavailable (no numba)"
    import numba

    return f"on (numba {numba.__version__})"


def convolutions() -> str:
    """``oneDNN (onednn-cpu-gomp X)``, ``NumPy (SINGA_LITE_ONEDNN=0)`` or ``NumPy (no oneDNN)``,
    from the installed package: asking does not load the library (which would shorten
    OpenBLAS's spin before the benchmark has used it)."""
    from importlib import metadata

    from singa_lite.backend import onednn

    if not onednn.enabled():
        return f"NumPy ({onednn.ENV}=0 or kernels off)"
    try:
        return f"oneDNN (onednn-cpu-gomp {metadata.version('onednn-cpu-gomp')})"
    except metadata.PackageNotFoundError:
        return "NumPy (no oneDNN)"


def describe(thread_count: int | str, malloc_tuned: bool) -> str:
    """One line naming the setting; ``thread_count`` as the benchmark set it."""
    return (
        f"threads: {thread_count}; BLAS: {blas()}; compiled CPU kernels: {kernels()}; "
        f"convs: {convolutions()}; "
        f"malloc tuned: {'yes' if malloc_tuned else 'n/a'}; "
        f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}; numpy {np.__version__}"
    )

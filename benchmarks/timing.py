"""The one way the benchmarks time a call: the median of ``repeat`` runs after ``warmup``
untimed ones (first-call allocations, BLAS thread start, compiled kernels loading)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], repeat: int, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeat`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)

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


def interleaved_seconds(
    fns: dict[str, Callable[[], object]], repeat: int, rounds: int, settle: float = 0.0
) -> dict[str, list[float]]:
    """Wall times in seconds of ``repeat`` runs of each of ``fns``, taken in ``rounds`` rounds,
    each round a stretch of ``repeat / rounds`` runs of every function in turn.

    The machine is shared: a job that starts or ends while one function runs would move its
    times and not the others', so each function's runs are spread over the whole measurement
    instead of taken in one stretch. With ``settle``, the process sleeps that many seconds
    before a stretch (which ones: below), so that no thread pool of the last one (OpenBLAS's
    workers spin ~0.1 s after a product, PyTorch's and onnxruntime's threads too) still holds
    a core when the next starts. The first run of each stretch is not timed.

    The first function leads every round and the others take their turns forward in even
    rounds and backward in odd ones, so that each of them follows the leader (whose thread
    pools and caches it meets as the leader leaves them) in as many rounds as the others: lead
    with the reference of a different library and compare the rest fairly among themselves.
    With a fixed order, graph mode always ran right after eager mode and eager mode right
    after PyTorch. The pause comes before the leader's stretch and the one after it only: the
    followers, one library's, run back to back, so that the machine changes least between
    the stretches compared with each other."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    per = max(1, -(-repeat // rounds))
    lead, *rest = fns.items()
    for r in range(rounds):
        for i, (k, fn) in enumerate([lead, *(rest if r % 2 == 0 else rest[::-1])]):
            if settle and i < 2:  # the followers, one library, need no pause between them
                time.sleep(settle)
            fn()
            for _ in range(per):
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
    return times


def paired_ratio(a: list[float], b: list[float], rounds: int) -> float:
    """The median over rounds of ``a``'s median over ``b``'s in the same round, for the times
    ``interleaved_seconds`` took in ``rounds`` rounds: each round's two stretches ran a second
    apart, so a change of the machine's speed between rounds, which moves the two overall
    medians apart by chance, cancels in each round's ratio."""
    per = len(a) // rounds
    assert per > 0 and len(b) == len(a), "times from one interleaved_seconds call"
    return statistics.median(
        statistics.median(a[r * per : (r + 1) * per]) / statistics.median(b[r * per : (r + 1) * per])
        for r in range(rounds)
    )

"""The one way the benchmarks time a call: the median of ``repeat`` runs after ``warmup``
untimed ones (first-call allocations, BLAS thread start, compiled kernels loading)."""

from __future__ import annotations

import math
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
    fns: dict[str, Callable[[], object]],
    repeat: int,
    rounds: int,
    settle: float = 0.0,
    turn: int | None = None,
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
    the stretches compared with each other.

    With ``turn``, the followers split their stretches into turns of ``turn`` timed runs (the
    round's runs rounded up to whole turns), taken one turn each in alternate orders, the
    first turn of a round after one untimed run: two followers' turns, a few tenths of a
    second apart, compare with ``paired_ratio(a, b, rounds * turns)``. Only for functions of
    one library, whose thread pools are the same (see ``docs/performance.md``, Measuring)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    per = max(1, -(-repeat // rounds))
    turns = 1 if turn is None else turns_in(repeat, rounds, turn)
    per_turn = -(-per // turns)
    lead, *rest = fns.items()
    for r in range(rounds):
        if settle:
            time.sleep(settle)
        _stretch(*lead, per_turn * turns, times)
        followers = rest if r % 2 == 0 else rest[::-1]
        for t in range(turns):
            for i, (k, fn) in enumerate(followers if turn is None or t % 2 == 0 else followers[::-1]):
                if settle and t == 0 and i == 0:  # the followers, one library, need no pause between them
                    time.sleep(settle)
                _stretch(k, fn, per_turn, times, warm=t == 0)
    return times


def turns_in(repeat: int, rounds: int, turn: int) -> int:
    """How many turns of ``turn`` runs ``interleaved_seconds`` splits a round's runs into."""
    return -(-max(1, -(-repeat // rounds)) // turn)


def _stretch(
    key: str, fn: Callable[[], object], runs: int, times: dict[str, list[float]], warm: bool = True
) -> None:
    """One untimed run of ``fn`` (with ``warm``), then ``runs`` timed ones into ``times[key]``."""
    if warm:
        fn()
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times[key].append(time.perf_counter() - t0)


def paired_ratio(a: list[float], b: list[float], rounds: int) -> float:
    """The median over rounds of ``a``'s median over ``b``'s in the same round, for the times
    ``interleaved_seconds`` took in ``rounds`` rounds: each round's two stretches ran a second
    apart, so a change of the machine's speed between rounds, which moves the two overall
    medians apart by chance, cancels in each round's ratio. For two followers that took
    turns, pass all their turns (``rounds * turns_in(...)``) as ``rounds``: two turns ran
    closer together still."""
    return statistics.median(group_ratios(a, b, rounds))


def group_ratios(a: list[float], b: list[float], groups: int) -> list[float]:
    """``a``'s median over ``b``'s in each of ``groups`` equal groups of runs (rounds or turns)."""
    per = len(a) // groups
    assert per > 0 and len(b) == len(a), "times from one interleaved_seconds call"
    return [
        statistics.median(a[i * per : (i + 1) * per]) / statistics.median(b[i * per : (i + 1) * per])
        for i in range(groups)
    ]


def median_interval(values: list[float]) -> tuple[float, float]:
    """A 95% confidence interval of the median of ``values``, from their order statistics
    (none about their distribution: the sign test's ranks ``n/2 - 0.98 sqrt(n)`` and
    ``1 + n/2 + 0.98 sqrt(n)``, rounded outwards), the whole range for fewer than 6 values."""
    v = sorted(values)
    n = len(v)
    half = 0.98 * math.sqrt(n)
    lo = max(1, math.floor(n / 2 - half))
    hi = min(n, math.ceil(1 + n / 2 + half))
    return v[lo - 1], v[hi - 1]

"""The benchmarks' timing schedule (``benchmarks/timing.py``): who runs when, and how the paired
ratios read the times. A wrong schedule would compare stretches that met different machines."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import timing


def _schedule(repeat: int, rounds: int, turn: int | None) -> tuple[str, dict[str, list[float]]]:
    calls: list[str] = []
    fns = {k: (lambda k=k: calls.append(k)) for k in ("t", "e", "g")}
    times = timing.interleaved_seconds(fns, repeat, rounds, 0.0, turn)
    return "".join(calls), times


def test_stretches_follow_the_leader_in_alternate_orders() -> None:
    calls, times = _schedule(repeat=4, rounds=2, turn=None)
    # each stretch: one untimed run, then two timed ones
    assert calls == "ttteeeggg" + "tttgggeee"
    assert {k: len(v) for k, v in times.items()} == {"t": 4, "e": 4, "g": 4}


def test_followers_take_turns_and_warm_up_once_a_round() -> None:
    calls, times = _schedule(repeat=10, rounds=2, turn=2)
    # five runs a round in turns of two: three turns, six runs each; the leader runs as many
    assert timing.turns_in(10, 2, 2) == 3
    round0 = "t" * 7 + "eeeggg" + "ggee" + "eegg"
    round1 = "t" * 7 + "gggeee" + "eegg" + "ggee"
    assert calls == round0 + round1
    assert {k: len(v) for k, v in times.items()} == {"t": 12, "e": 12, "g": 12}


@pytest.mark.parametrize("repeat, rounds, turn", [(30, 10, 1), (7, 3, 2), (100, 10, 40), (5, 10, 3)])
def test_every_function_gets_whole_turns_in_every_round(repeat: int, rounds: int, turn: int) -> None:
    _, times = _schedule(repeat, rounds, turn)
    turns = timing.turns_in(repeat, rounds, turn)
    counts = {len(v) for v in times.values()}
    assert len(counts) == 1
    n = counts.pop()
    assert n >= repeat and n % (rounds * turns) == 0 and n // (rounds * turns) <= turn


def test_paired_ratio_cancels_a_change_between_rounds() -> None:
    # b is twice as fast as a in each round; the machine halves its speed in the second round
    a = [2.0, 2.0, 4.0, 4.0]
    b = [1.0, 1.0, 2.0, 2.0]
    assert timing.paired_ratio(a, b, 2) == 2.0
    # per run, not per round: a slow outlier run moves one group's median, not the result
    assert timing.paired_ratio([2.0, 2.0, 2.0, 9.0], [1.0, 1.0, 1.0, 1.0], 4) == 2.0
    with pytest.raises(AssertionError):
        timing.paired_ratio([1.0, 2.0], [1.0], 1)


def test_group_ratios_are_one_per_group() -> None:
    a = [3.0, 1.0, 2.0, 8.0, 8.0, 8.0]
    b = [1.0, 1.0, 1.0, 2.0, 4.0, 4.0]
    assert timing.group_ratios(a, b, 2) == [2.0, 2.0]
    assert timing.group_ratios(a, b, 6) == [3.0, 1.0, 2.0, 4.0, 2.0, 2.0]


@pytest.mark.parametrize("n, ranks", [(100, (40, 61)), (30, (9, 22)), (6, (1, 6)), (1, (1, 1))])
def test_median_interval_takes_the_sign_test_ranks(n: int, ranks: tuple[int, int]) -> None:
    values = [float(i) for i in range(n, 0, -1)]  # rank i is the value i, in any order
    assert timing.median_interval(values) == (float(ranks[0]), float(ranks[1]))


def test_median_interval_covers_the_median_about_95_percent_of_the_time() -> None:
    import random

    rng = random.Random(0)
    trials, n = 2000, 40
    hits = 0
    for _ in range(trials):
        lo, hi = timing.median_interval([rng.gauss(1.0, 0.05) for _ in range(n)])
        hits += lo <= 1.0 <= hi
    assert 0.94 <= hits / trials <= 0.995

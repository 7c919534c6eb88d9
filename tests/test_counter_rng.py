"""The counter-based generator GPU devices use, run here on NumPy (it is written against xp)."""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite.backend.counter_rng import CounterRNG


def test_same_seed_same_stream_and_state_resumes_exactly():
    a, b = CounterRNG(np, 42), CounterRNG(np, 42)
    np.testing.assert_array_equal(a.random((3, 4)), b.random((3, 4)))
    state = a.state
    first = a.standard_normal((5,), np.float32)
    c = CounterRNG(np, 0)
    c.state = state
    np.testing.assert_array_equal(c.standard_normal((5,), np.float32), first)
    assert CounterRNG(np, 43).random(4).tolist() != CounterRNG(np, 42).random(4).tolist()


def test_draws_continue_the_stream():
    a, b = CounterRNG(np, 7), CounterRNG(np, 7)
    whole = a.random(10)
    parts = np.concatenate([b.random(4), b.random(6)])
    np.testing.assert_array_equal(whole, parts)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_distributions(dtype):
    g = CounterRNG(np, 1)
    u = g.random((200_000,), dtype)
    assert u.dtype == dtype and u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    z = g.standard_normal((200_000,), dtype)
    assert z.dtype == dtype and np.isfinite(z).all()
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01


def test_foreign_state_is_rejected():
    with pytest.raises(ValueError, match="CounterRNG"):
        CounterRNG(np, 0).state = {"bit_generator": "PCG64"}

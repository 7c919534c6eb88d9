"""backend.check and the deferred device checks behind it, and backend.to_host's counting.

The deferred path is what a GPU uses; ``DeferredChecks`` is written against ``xp``, so it is
exercised here over NumPy arrays exactly as the CuPy backend runs it over device arrays."""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite import backend
from singa_lite.backend.deferred import DeferredChecks


class BoomError(Exception):
    pass


def test_check_raises_at_once_on_the_host():
    backend.check(np.bool_(False), "k", lambda: BoomError("no"))
    with pytest.raises(BoomError, match="labels"):
        backend.check(np.array(True), "k", lambda: BoomError("labels"))


def test_deferred_checks_wait_for_the_read_and_keep_their_arrays():
    d = DeferredChecks(np)
    d.add(np.array(False), "a", lambda: BoomError("a"))
    d.add(np.array(False), "b", lambda: BoomError("b"))
    d.raise_pending()  # nothing failed
    flag_a = d.flags["a"][0]
    d.add(np.array(False), "a", lambda: BoomError("a"))
    d.add(np.array(True), "b", lambda: BoomError("b failed"))
    d.add(np.array(False), "b", lambda: BoomError("b failed"))  # OR-ed: a later pass does not clear it
    with pytest.raises(BoomError, match="b failed"):
        d.raise_pending()
    assert d.flags["a"][0] is flag_a  # the same 0-d arrays (a captured graph writes them)
    assert not any(bool(f) for f, _ in d.flags.values())  # cleared once reported
    d.raise_pending()  # and not raised twice


def test_deferred_checks_read_only_after_a_new_check(monkeypatch):
    d = DeferredChecks(np)
    d.add(np.array(False), "a", lambda: BoomError("a"))
    d.raise_pending()
    calls = []
    monkeypatch.setattr(np, "stack", lambda *a, **k: calls.append(1))
    d.raise_pending()  # no check since the last read: no transfer
    assert calls == []


def test_to_host_counts_reads_by_site():
    with backend.count_host_reads() as reads:
        backend.to_host(np.zeros(2))
        backend.to_host(np.zeros(2))
    assert sum(reads.values()) == 2
    assert all("test_backend_checks.py" in site for site in reads)
    backend.to_host(np.zeros(1))
    assert sum(reads.values()) == 2  # counting stopped with the block

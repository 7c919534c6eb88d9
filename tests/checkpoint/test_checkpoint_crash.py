"""Crash safety: a process saving in a loop is SIGKILLed at random moments, 60 times.

After every kill the last checkpoint the child reported complete (or the one it was replacing
it with, if the kill fell between ``os.replace`` and the report) loads and verifies; the temp
files killed saves leave behind never break a later save, and that save sweeps them away.
"""

from __future__ import annotations

import os
import random
import select
import signal
import time

import numpy as np
from ckpt_helpers import MLP

from singa_lite import checkpoint, tensor

KILLS = 60


def _model() -> MLP:
    m = MLP()
    m.compile([tensor.Tensor((2, 4))])
    return m


def _save(m: MLP, path: str, i: int) -> None:
    """Checkpoint ``i``: every parameter filled with ``i``, so a torn mix would show."""
    for p in m.get_params().values():
        p.copy_from_numpy(np.full(p.shape, i, np.float32))
    m.save_states(path, {"i": i, "blob": np.full(3000, i, np.int64)})


def _child(path: str, start: int, wfd: int) -> None:
    try:
        m = _model()
        i = start
        while True:
            i += 1
            _save(m, path, i)
            os.write(wfd, f"{i}\n".encode())
    finally:
        os._exit(0)


def _completed(rfd: int) -> int | None:
    data = b""
    while select.select([rfd], [], [], 0)[0]:
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        data += chunk
    lines = data.decode().split()
    return int(lines[-1]) if lines else None


def test_sigkill_at_random_moments(tmp_path):
    path = str(tmp_path / "ckpt.h5")
    m = _model()
    last = 0
    _save(m, path, last)
    rnd = random.Random(1)
    torn = 0  # kills that fell inside a save (they leave a temp file)
    for kill in range(KILLS):
        base = (kill + 1) * 100_000
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            os.close(rfd)
            _child(path, base, wfd)
        os.close(wfd)
        time.sleep(rnd.uniform(0.0, 0.03))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        reported = _completed(rfd)
        os.close(rfd)

        torn += any(".tmp-" in n for n in os.listdir(tmp_path))
        aux = m.load_states(path)  # the last complete checkpoint, never a torn one
        assert checkpoint.verify(path).ok
        i = aux["i"]
        allowed = {last, base + 1} if reported is None else {reported, reported + 1}
        assert i in allowed, (i, allowed)
        assert all((tensor.to_numpy(p) == i).all() for p in m.get_params().values())
        assert (aux["blob"] == i).all()

        last = kill + 1
        _save(m, path, last)  # a new save succeeds despite the killed save's temp file
        assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]
    assert torn >= 5, f"only {torn} of {KILLS} kills fell inside a save"

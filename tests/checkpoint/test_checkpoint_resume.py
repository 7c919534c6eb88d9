"""Exact resume: a run interrupted at step k and continued in another process is bit-identical."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ckpt_helpers import batches, make_cnn, train

from singa_lite import checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_resume_in_another_process_is_bitwise_equal(tmp_path, opt_name):
    n, k = 6, 3
    data = batches(n)
    m, tx, ty = make_cnn(opt_name)
    train(m, tx, ty, data, 0, k)
    ckpt = tmp_path / "step3.h5"
    m.save_states(ckpt, {"step": k})
    train(m, tx, ty, data, k, n)
    straight = tmp_path / "straight.h5"
    m.save_states(straight, {"step": n})

    resumed = tmp_path / "resumed.h5"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])}
    subprocess.run(
        [
            sys.executable,
            os.path.join(HERE, "resume_child.py"),
            opt_name,
            str(ckpt),
            str(k),
            str(n),
            str(resumed),
        ],
        check=True,
        env=env,
        timeout=120,
    )
    # diff compares every dataset bit for bit (params, BN statistics, optimizer slots) and the
    # optimizer counters, schedule, RNG states, input specs and aux values.
    assert checkpoint.diff(straight, resumed) == []
    info = checkpoint.inspect(resumed)
    slot_keys = [key for key in info["datasets"] if key.startswith("optimizer/")]
    assert slot_keys and "states/bn1.running_mean" in info["datasets"]
    assert info["optimizer"]["step_counter"] == n

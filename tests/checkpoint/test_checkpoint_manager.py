"""CheckpointManager (schedule, retention, best, fallback restore) and the command-line tool."""

from __future__ import annotations

import os

import numpy as np
import pytest
from ckpt_helpers import MLP

from singa_lite import checkpoint, tensor
from singa_lite.checkpoint.__main__ import main
from singa_lite.errors import CheckpointError


def _model(value: float = 0.0) -> MLP:
    m = MLP()
    m.compile([tensor.Tensor((2, 4))])
    m.fc1.W.copy_from_numpy(np.full((4, 3), value, np.float32))
    return m


def test_schedule_retention_and_best(tmp_path):
    mgr = checkpoint.CheckpointManager(
        tmp_path, max_to_keep=2, keep_best=("loss", "min"), save_every_steps=10
    )
    losses = {0: 5.0, 10: 1.0, 20: 3.0, 30: 4.0, 40: 2.0}
    for step in range(0, 45, 5):
        out = mgr.save(step, _model(step), metrics={"loss": losses.get(step, 9.0)}, aux={"epoch": step // 10})
        assert (out is None) == (step % 10 != 0)
    assert mgr.steps() == [10, 30, 40]  # newest two, plus the best (step 10, loss 1.0)
    assert mgr.latest() == mgr.path_for(40) and mgr.best() == mgr.path_for(10)
    assert mgr.metrics(10) == {"loss": 1.0}
    assert checkpoint.read_root(mgr.best())["step"] == 10


def test_epoch_schedule_and_forced_save(tmp_path):
    mgr = checkpoint.CheckpointManager(tmp_path, max_to_keep=None, save_every_epochs=2)
    saved = [mgr.save(s, _model(), aux={"epoch": s}) is not None for s in range(5)]
    assert saved == [True, False, True, False, True]
    assert mgr.save(7, _model(), aux={"epoch": 7}, force=True) is not None
    with pytest.raises(ValueError, match="epoch"):
        mgr.save(8, _model())


def test_restore_skips_a_damaged_newest_checkpoint(tmp_path):
    mgr = checkpoint.CheckpointManager(tmp_path, max_to_keep=3)
    assert mgr.restore(_model()) is None
    for step in (1, 2, 3):
        mgr.save(step, _model(step), aux={"epoch": step})
    newest = tmp_path / "ckpt-3.h5"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(data)
    (tmp_path / ".ckpt-4.h5.tmp-999999-0123abcd").write_bytes(b"junk from a killed save")
    m = _model(-1)
    with pytest.warns(RuntimeWarning, match="ckpt-3.h5"):
        got = mgr.restore(m)
    assert got.step == 2 and got.aux == {"epoch": 2}
    assert (tensor.to_numpy(m.fc1.W) == 2).all()
    assert checkpoint.CheckpointManager(tmp_path).steps() == [1, 2, 3]
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]  # swept on start


def test_non_blocking_manager_save(tmp_path):
    mgr = checkpoint.CheckpointManager(tmp_path, max_to_keep=1)
    handles = [mgr.save(s, _model(s), blocking=False) for s in range(3)]
    assert handles[-1].wait() == mgr.path_for(2)
    assert mgr.steps() == [2]


def test_cli_inspect_verify_diff(tmp_path, capsys):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    _model(1).save_states(a, {"epoch": 1})
    m = _model(1)
    m.fc1.W.copy_from_numpy(np.array([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1.5]], np.float32))
    m.save_states(b, {"epoch": 2})
    assert main(["inspect", str(a)]) == 0
    out = capsys.readouterr().out
    assert "params/fc1.W" in out and "float32" in out and "(4, 3)" in out and '"epoch": 1' in out
    assert main(["verify", str(a), str(b)]) == 0
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "params/fc1.W: 1 of 12 elements differ, max abs diff 0.5" in out and "aux@json" in out
    assert main(["diff", str(a), str(a)]) == 0

    data = bytearray(a.read_bytes())
    data[-40] ^= 1
    a.write_bytes(data)
    assert main(["verify", str(a)]) == 1
    assert "DAMAGED" in capsys.readouterr().out
    assert main(["inspect", str(a)]) == 1
    with pytest.raises(CheckpointError):
        checkpoint.inspect(a)

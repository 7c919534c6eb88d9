"""examples/gpt.py runs (a small, short configuration), and a run resumed from its checkpoint
ends exactly where an uninterrupted one does."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx", reason="the example exports its model to ONNX")

SCRIPT = Path(__file__).resolve().parent.parent / "examples" / "gpt.py"
SMALL = ["--width", "32", "--depth", "1", "--heads", "2", "--context", "32", "--batch-size", "4"]
SMALL += ["--eval-every", "2", "--warmup", "2", "--dropout", "0.2"]


def run(out: Path, steps: int, *extra: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *SMALL, "--steps", str(steps), "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def final_loss(stdout: str) -> str:
    found = re.search(r"validation loss (\S+):", stdout)
    assert found, stdout
    return found.group(1)


def test_example_trains_samples_exports_and_resumes(tmp_path):
    whole = run(tmp_path / "whole", 4)
    assert "character bigram" in whole and "sample (temperature 0.8):" in whole
    assert (tmp_path / "whole" / "gpt.onnx").exists() and (tmp_path / "whole" / "gpt.h5").exists()
    if "onnxruntime's next-character logits" in whole:
        assert "same argmax: True" in whole
    run(tmp_path / "split", 4, "--stop-after", "3")
    resumed = run(tmp_path / "split", 4)
    assert "resumed from" in resumed
    assert final_loss(resumed) == final_loss(whole)

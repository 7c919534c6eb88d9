"""The SINGA-style examples still run (shortened), so the README's pointers stay true."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize(
    ("script", "args", "expect"),
    [
        ("cnn.py", ["--epochs", "1"], "val acc"),
        ("mlp_autograd.py", ["--steps", "100"], "test accuracy"),
        ("char_lstm.py", ["--steps", "3", "--seq-len", "16", "--batch-size", "8"], "sample:"),
    ],
)
def test_example_runs(script, args, expect):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert expect in proc.stdout

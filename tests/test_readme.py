"""The README's Python snippets run, in order, as one script."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_snippets_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 3
    scope: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), scope)
    assert scope["aux"] == {"epoch": 3}
    assert tuple(scope["y"].shape) == (32, 10)

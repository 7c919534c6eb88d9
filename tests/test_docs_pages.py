"""The documentation site's snippets run: docs/index.md's first model and the side-by-side
pages docs/coming-from-*.md, each column in order as one script.

The singa_lite column always runs; the PyTorch column runs where PyTorch is installed. The
SINGA column is SINGA's own code and is not run here (SINGA is not a dependency).
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = ["coming-from-singa.md", "coming-from-pytorch.md"]
_BLOCK = re.compile(r"```\{code-block\} python\n:caption: ([^\n]+)\n\n(.*?)\n```\n", re.S)
_PAIR = re.compile(r"````\{container\} side-by-side\n(.*?)\n````\n", re.S)


def _blocks(page: str, caption: str) -> list[str]:
    text = (DOCS / page).read_text()
    if page == "index.md":  # plain fenced blocks, no columns
        return re.findall(r"```python\n(.*?)```", text, re.S)
    # A block captioned "SINGA and singa_lite" is code both run: part of the singa_lite column.
    return [code for cap, code in _BLOCK.findall(text) if caption in (cap, cap.rpartition(" and ")[2])]


@pytest.mark.parametrize("page", PAGES)
def test_every_pair_has_two_columns(page):
    text = (DOCS / page).read_text()
    pairs = _PAIR.findall(text)
    assert len(pairs) >= 5
    for body in pairs:
        captions = [cap for cap, _ in _BLOCK.findall(body + "\n")]
        assert len(captions) == 2 and captions[1] == "singa_lite", captions


def _run(page: str, caption: str, tmp_path, monkeypatch) -> dict:
    # A real module as the namespace, so that classes defined in a snippet pickle (torch.save).
    monkeypatch.chdir(tmp_path)
    module = types.ModuleType("docs_snippets")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    blocks = _blocks(page, caption)
    assert blocks
    for code in blocks:
        exec(compile(code, f"{page} ({caption})", "exec"), module.__dict__)
    return module.__dict__


@pytest.mark.parametrize("page", ["index.md", *PAGES])
def test_singa_lite_column_runs(page, tmp_path, monkeypatch, capsys):
    from singa_lite import autograd

    monkeypatch.setattr(autograd, "training", autograd.training)  # the snippets switch it
    _run(page, "singa_lite", tmp_path, monkeypatch)


def test_pytorch_column_runs(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    _run("coming-from-pytorch.md", "PyTorch", tmp_path, monkeypatch)

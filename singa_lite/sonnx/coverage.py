"""The operator coverage table of ``docs/onnx.md``, generated from the handler table.

    python -m singa_lite.sonnx.coverage                 # print the table
    python -m singa_lite.sonnx.coverage docs/onnx.md    # rewrite the table in that file

The versions column lists the opsets, from 11 to the newest the installed ``onnx`` defines, at
which the operator's definition changed (the first entry is the version in effect at opset 11);
a model of any opset in that range runs the operator.
"""

from __future__ import annotations

import sys
from pathlib import Path

from singa_lite.sonnx.handlers import DESIGN_OPS, FAMILIES, HANDLERS, MAX_OPSET, schema_versions

START, END = "<!-- coverage:start -->", "<!-- coverage:end -->"


def versions_from(op: str, first: int = 11) -> list[int]:
    """The versions of ``op`` in effect at some opset in ``[first, MAX_OPSET]``."""
    all_versions = schema_versions(op)
    older = [v for v in all_versions if v <= first]
    return ([older[-1]] if older else []) + [v for v in all_versions if v > first]


def coverage_table() -> str:
    """A Markdown table: operator, handler module, versions handled, DESIGN §5 or extra."""
    family = {name: m.__name__.rsplit(".", 1)[-1] for m in FAMILIES for name in m.__all__}
    rows = []
    for op in sorted(HANDLERS):
        versions = ", ".join(map(str, versions_from(op)))
        rows.append(f"| {op} | `{family[op]}` | {versions} | {'§5' if op in DESIGN_OPS else 'extra'} |")
    head = [
        f"{len(HANDLERS)} operators ({len(DESIGN_OPS)} required by DESIGN §5), opsets 11 to {MAX_OPSET}.",
        "",
        "| operator | handlers module | versions (opset 11 on) | |",
        "| --- | --- | --- | --- |",
    ]
    return "\n".join(head + rows)


def rewrite(path: Path) -> None:
    """Replace the table between the coverage markers of ``path``."""
    text = path.read_text()
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    path.write_text(f"{before}{START}\n{coverage_table()}\n{END}{after}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        rewrite(Path(sys.argv[1]))
    else:
        print(coverage_table())

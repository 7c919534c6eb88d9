"""The operator coverage table of ``docs/onnx.md``, generated from the handler table.

    python -m singa_lite.sonnx.coverage                 # print the table
    python -m singa_lite.sonnx.coverage docs/onnx.md    # rewrite the table in that file

The versions column lists the opsets, from 11 to the newest the installed ``onnx`` defines, at
which the operator's definition changed (the first entry is the version in effect at opset 11);
a model of any opset in that range runs the operator.

Below it, every other operator the installed ``onnx`` defines (``onnx.defs.get_all_schemas``:
the default domain, then ``ai.onnx.ml``, ``ai.onnx.preview.training`` and ``ai.onnx.preview``)
is listed with the reason it is left out, from :data:`REASONS`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx

from singa_lite.sonnx.import_ops import DESIGN_OPS, FAMILIES, HANDLERS, MAX_OPSET, schema_versions

START, END = "<!-- coverage:start -->", "<!-- coverage:end -->"


_STRINGS = "string tensors have no singa_lite dtype"
_LATER = "not implemented yet"
REASONS: dict[str, str] = {
    **dict.fromkeys(("RegexFullMatch", "StringConcat", "StringNormalizer", "StringSplit"), _STRINGS),
    "ImageDecoder": "decodes encoded image bytes (JPEG, PNG...): an image codec, outside a tensor framework",
}
"""Operator (default domain) -> why it has no handler. An operator missing here is ``not
implemented yet``."""

DOMAIN_REASONS: dict[str, str] = {
    "ai.onnx.ml": "classical-ML operators (ai.onnx.ml: trees, SVMs, encoders, maps) are out of scope: "
    "singa_lite imports neural-network graphs",
    "ai.onnx.preview.training": "training-step operators (ai.onnx.preview.training): singa_lite trains "
    "imported models with its own autograd and optimisers (`SONNXModel`, `singa_lite.opt`)",
    "ai.onnx.preview": "preview domain (ai.onnx.preview): not implemented yet",
}
"""Domain -> why its operators have no handlers (the importer runs the default domain)."""


def _schemas() -> dict[str, list[str]]:
    """Operator names by domain, as the installed ``onnx`` defines them (newest schemas)."""
    names: dict[str, set[str]] = {}
    for schema in onnx.defs.get_all_schemas():
        names.setdefault(schema.domain or "ai.onnx", set()).add(schema.name)
    return {domain: sorted(ops) for domain, ops in names.items()}


def left_out_table() -> str:
    """Markdown: every operator onnx defines that has no handler, with the reason."""
    schemas = _schemas()
    default = [op for op in schemas.pop("ai.onnx", []) if op not in HANDLERS]
    rows = [f"| {op} | ai.onnx | {REASONS.get(op, _LATER)} |" for op in default]
    for domain in sorted(schemas):  # one row per domain: its operators share the reason
        rows.append(f"| {', '.join(schemas[domain])} | {domain} | {DOMAIN_REASONS.get(domain, _LATER)} |")
    total = sum(len(v) for v in schemas.values())
    head = [
        f"Left out: {len(default)} operators of the default domain and all {total} of the other "
        f"domains ({', '.join(sorted(schemas))}).",
        "",
        "| operator | domain | why |",
        "| --- | --- | --- |",
    ]
    return "\n".join(head + rows)


def versions_from(op: str, first: int = 11) -> list[int]:
    """The versions of ``op`` in effect at some opset in ``[first, MAX_OPSET]``."""
    all_versions = schema_versions(op)
    older = [v for v in all_versions if v <= first]
    return ([older[-1]] if older else []) + [v for v in all_versions if v > first]


def coverage_table() -> str:
    """A Markdown table: operator, handler module, versions handled, DESIGN §5 or extra."""
    family = {name: m.__name__.removeprefix("singa_lite.sonnx.") for m in FAMILIES for name in m.__all__}
    rows = []
    for op in sorted(HANDLERS):
        versions = ", ".join(map(str, versions_from(op)))
        rows.append(f"| {op} | `{family[op]}` | {versions} | {'§5' if op in DESIGN_OPS else 'extra'} |")
    defined = len(_schemas().get("ai.onnx", []))
    head = [
        f"{len(HANDLERS)} of the {defined} operators of the default domain ({len(DESIGN_OPS)} required by "
        f"DESIGN §5), opsets 11 to {MAX_OPSET}.",
        "",
        "| operator | handler module | versions (opset 11 on) | |",
        "| --- | --- | --- | --- |",
    ]
    return "\n".join(head + rows) + "\n\n" + left_out_table()


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

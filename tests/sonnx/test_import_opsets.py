"""Every DESIGN §5 operator at every opset from 11 to the newest the installed onnx defines.

onnx's node cases are written at the opset their generator picked (mostly the newest). Here,
for each DESIGN operator and each opset from 11 up where it exists, the first of its runnable
cases that can be rewritten to that opset is rewritten (by onnx's ``version_converter``, or,
where onnx has no downgrade adapter but the older version takes the same inputs and
attributes, by declaring the older opset and letting the checker confirm the model) and run
again against the same expected outputs, so each handler's opset branches run too.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import warnings
from typing import Any

import onnx
import pytest
from node_test_excludes import EXCLUDES
from onnx import version_converter
from test_import_node import design_op, node_cases, run_case, unsupported_type

from singa_lite.sonnx.import_ops import DESIGN_OPS, MAX_OPSET

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

OPSETS = range(11, min(MAX_OPSET, onnx.defs.onnx_opset_version()) + 1)

CONVERTER_CHANGES_MEANING = {
    # Opset 13 made these normalise over one axis; the converter keeps the axis attribute on
    # the way down, where it means "flatten from axis on": a different operator.
    ("Softmax", 11),
    ("Softmax", 12),
    ("LogSoftmax", 11),
    ("LogSoftmax", 12),
    ("Hardmax", 11),
    ("Hardmax", 12),
}


@functools.cache
def cases_of(op: str) -> list:
    """The runnable onnx node cases of ``op``, by name."""
    return [
        case
        for name, case in sorted(node_cases().items())
        if design_op(case) == op and name not in EXCLUDES and not unsupported_type(name)
    ]


def _version(op: str, opset: int) -> int | None:
    """The version of ``op``'s schema in force at ``opset`` (None where it did not exist)."""
    try:
        return onnx.defs.get_schema(op, opset).since_version
    except onnx.defs.SchemaError:
        return None


@functools.cache
def converted(op: str, opset: int) -> Any:
    """The first case of ``op`` that onnx can rewrite to ``opset``, rewritten; or None.

    Where the operator's schema is the same at both opsets only the model's opset changes
    (that is all the converter would do, and it is the slow part of this module).
    """
    if _version(op, opset) is None:
        return None
    for case in cases_of(op):
        model = case.model
        source = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        if _version(op, opset) == _version(op, source):
            model = _relabelled(model, opset)
        else:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = version_converter.convert_version(model, opset)
                onnx.checker.check_model(model, full_check=True)
            except Exception:
                # onnx has few downgrade adapters (none from 13 to 12 for most operators);
                # where the older version takes the same inputs and attributes, the model
                # is valid at the older opset as it is (the checker says so), and its stored
                # outputs then check that singa_lite runs the older version the same way.
                try:
                    model = _relabelled(model, opset)
                    onnx.checker.check_model(model, full_check=True)
                except Exception:
                    continue
        return dataclasses.replace(case, model=model)
    return None


def _relabelled(model: Any, opset: int) -> Any:
    model = copy.deepcopy(model)
    next(o for o in model.opset_import if o.domain in ("", "ai.onnx")).version = opset
    return model


@pytest.mark.parametrize("op", sorted(DESIGN_OPS))
def test_every_opset(op: str) -> None:
    if not cases_of(op):
        pytest.skip(f"onnx has no runnable single-node case of {op}")
    ran = []
    for opset in OPSETS:
        c = converted(op, opset)
        if c is None or (op, opset) in CONVERTER_CHANGES_MEANING:
            continue
        run_case(c)
        ran.append(opset)
    assert ran, f"{op}: no opset of {list(OPSETS)} could be converted to"


def test_most_operators_run_at_most_opsets() -> None:
    """A guard that the sweep above really sweeps: of the (operator, opset) pairs where the
    operator exists, nearly all get a case (the rest are older forms with attributes where the
    newer ones take inputs, which onnx cannot convert down to, e.g. Squeeze's axes before 13)."""
    pairs = total = 0
    for op in sorted(DESIGN_OPS):
        if not cases_of(op):
            continue
        exists = [opset for opset in OPSETS if _version(op, opset) is not None]
        total += len(exists)
        pairs += sum(converted(op, opset) is not None for opset in exists)
    assert pairs >= 0.97 * total, f"only {pairs} of {total} (operator, opset) pairs convert"

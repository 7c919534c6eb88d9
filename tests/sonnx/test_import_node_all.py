"""onnx's node test cases over *all* operators through ``SingaBackend``, tallied.

``test_import_node.py`` runs the cases whose operators all have handlers, one test each; this
runs every case, as ``onnx.backend.test`` would (a case whose operators lack handlers fails),
prints the tally and requires a floor, so that a regression anywhere shows.

onnx 1.23.2 has 1,404 node cases of its operators' own: the directories of
``onnx/backend/test/data/node`` without the ``_expanded`` ones. ``collect_testcases`` builds
those and the expanded variants (the function bodies of function operators: ``_expanded``,
``_expanded_ver18``, ``_expanded_ver26``), 1,884 cases in all. Both tallies are printed.
"""

from __future__ import annotations

import warnings

import pytest
from test_import_node import run_case

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# What passes now (raise these as operators are added; they guard against regressions).
FLOOR_ALL = 1798
FLOOR_OPERATOR_CASES = 1327


def _tally() -> tuple[int, int, int, int, list[str]]:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators divide by zero on purpose
        cases = node.collect_testcases(None)
    passed = own_passed = own_total = 0
    failed = []
    for case in cases:
        own = "_expanded" not in case.name
        own_total += own
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run_case(case)
        except Exception:  # a tally: every failure counts the same
            failed.append(case.name)
            continue
        passed += 1
        own_passed += own
    return passed, len(cases), own_passed, own_total, failed


def test_all_node_cases(capsys: pytest.CaptureFixture) -> None:
    passed, total, own_passed, own_total, _ = _tally()
    with capsys.disabled():
        print(
            f"\nonnx node cases: {own_passed}/{own_total} operator cases pass "
            f"({passed}/{total} with the expanded function bodies)"
        )
    assert passed >= FLOOR_ALL
    assert own_passed >= FLOOR_OPERATOR_CASES

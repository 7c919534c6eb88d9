"""Tally onnx's node test cases over *all* operators through ``SingaBackend``.

    python tools/onnx_node_tally.py [--ops Op1,Op2] [--failures]

Prints passed/total overall and per operator (a case whose operators lack handlers counts as a
failure), the way ``tests/sonnx/test_import_node.py`` runs each case. For measuring progress;
the test suite holds the asserted numbers.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "sonnx"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", help="only cases whose first node is one of these operators")
    p.add_argument("--failures", action="store_true", help="print each failing case and why")
    args = p.parse_args()
    from onnx.backend.test.case import node
    from test_import_node import run_case

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    only = set(args.ops.split(",")) if args.ops else None
    passed: Counter = Counter()
    total: Counter = Counter()
    for case in cases:
        op = case.model.graph.node[0].op_type if case.model.graph.node else "?"
        if only and op not in only:
            continue
        total[op] += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run_case(case)
            passed[op] += 1
        except Exception as e:  # noqa: BLE001  (a tally: every failure counts the same)
            if args.failures:
                print(f"FAIL {case.name}: {type(e).__name__}: {str(e)[:160]}")
    for op in sorted(total):
        if passed[op] < total[op]:
            print(f"{op}: {passed[op]}/{total[op]}")
    print(f"all operators: {sum(passed.values())}/{sum(total.values())} node cases pass")


if __name__ == "__main__":
    main()

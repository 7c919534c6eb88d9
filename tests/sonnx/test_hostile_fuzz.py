"""The ONNX importer against a few hundred generated hostile models (``hostile_models``).

Resource bombs at prepare and at run time, schema violations, external-data tricks, random
structural mutations of small real graphs and bit flips of their bytes. Each model goes through
``prepare(path).run`` and ``SONNXModel(path).forward`` in a child process (many per child)
with its address space limited, a timeout per model, small allocation limits, an audit hook on
every file opened, and ``tracemalloc`` measuring each model's peak. Not one model may crash the
child, hang, raise an untyped error, allocate past the limits or open the canary files; the
models that must be refused are, and the well-formed one with external data runs.

``python tests/sonnx/hostile_runner.py --ort`` runs the same cases through onnxruntime too.
"""

from __future__ import annotations

from collections import Counter

from hostile_models import all_cases
from hostile_runner import run_cases, summary, write_cases


def test_hostile_models_are_refused_cleanly(tmp_path):
    cases = all_cases()
    assert len(cases) >= 300
    write_cases(str(tmp_path), cases)
    results = run_cases(str(tmp_path), len(cases))
    s = summary(cases, results)
    assert len(results) == len(cases)
    assert not s["bad"], s["bad"]
    assert not s["wrongly_ran"], s["wrongly_ran"]
    outcome = {cases[r["case"]].name: r["outcome"] for r in results}
    assert outcome["extdata-legit-beside-the-model"] == "ok"
    kinds = Counter((cases[r["case"]].kind, r["outcome"]) for r in results)
    # the mutations reach past the checker into the handlers, and some still run
    assert kinds[("mutation", "ok")] >= 10 and kinds[("mutation", "refused")] >= 100

"""onnx's own node test cases, run through ``SingaBackend`` (tinygrad's conformance habit).

The installed ``onnx`` wheel carries the generators of its node test cases
(``onnx.backend.test.case.node``) rather than their data files; ``collect_testcases`` builds
each case's model, inputs and expected outputs in memory, exactly as onnx writes them to
``onnx/backend/test/data/node``. Every case of an operator that has a handler runs here: cases in
``node_test_excludes.EXCLUDES`` as strict xfails, cases of types singa_lite has no tensor for
must be refused with ``OnnxError``. ``test_design_ops_pass_rate`` prints the pass rate of
DESIGN §5's operators and requires at least 97%.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Any

import numpy as np
import pytest
from node_test_excludes import CUDA_EXCLUDES, EXCLUDES, RANDOM_VALUES, UNSUPPORTED_TYPES
from onnx import TensorProto, numpy_helper

from singa_lite.errors import OnnxError
from singa_lite.sonnx import SingaBackend
from singa_lite.sonnx.import_ops import DESIGN_OPS, HANDLERS

# Conformance cases feed inf/nan/empty inputs on purpose; NumPy warns while computing them.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@functools.cache
def node_cases() -> dict[str, Any]:
    """Every onnx node test case whose operators all have handlers, by name."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators divide by zero on purpose
        cases = node.collect_testcases(None)
    return {c.name: c for c in cases if {n.op_type for n in c.model.graph.node} <= set(HANDLERS)}


def design_op(case: Any) -> str | None:
    """The DESIGN §5 operator a single-node case tests, if any."""
    nodes = case.model.graph.node
    return nodes[0].op_type if len(nodes) == 1 and nodes[0].op_type in DESIGN_OPS else None


def unsupported_type(name: str) -> str | None:
    return next((why for pat, why in UNSUPPORTED_TYPES.items() if re.search(pat, name)), None)


def _array(v: Any) -> np.ndarray:
    return numpy_helper.to_array(v) if isinstance(v, TensorProto) else np.asarray(v)


def run_case(case: Any, device: str = "CPU") -> None:
    """Run one case and compare as ``onnx.backend.test`` does: count, shape, dtype, values
    (``device="CUDA"``: the GPU run, ``tools/gpu_run/onnx_node_cuda.py``)."""
    rep = SingaBackend.prepare(case.model, device)
    for inputs, expected in case.data_sets:
        got = rep.run([_value(v) for v in inputs])
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            _compare(g, e, case)


def _value(v: Any) -> Any:
    """An input as the backend takes it: an array, a list of arrays (a sequence) or None."""
    return v if v is None else [_array(x) for x in v] if isinstance(v, list) else _array(v)


def _compare(g: Any, e: Any, case: Any) -> None:
    if e is None or isinstance(e, list):  # an empty optional, a sequence
        assert type(g) is type(e), (type(g), type(e))
        assert len(g) == len(e) if e is not None else True
        for gi, ei in zip(g or [], e or []):
            _compare(gi, ei, case)
        return
    e = _array(e)
    assert g.shape == e.shape, (g.shape, e.shape)
    assert g.dtype == e.dtype, (g.dtype, e.dtype)
    np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol)


def _params() -> list:
    params = []
    for name in sorted(node_cases()):
        marks = []
        if name in EXCLUDES:
            marks = [pytest.mark.xfail(reason=EXCLUDES[name], strict=name not in RANDOM_VALUES)]
        params.append(pytest.param(name, marks=marks, id=name))
    return params


@pytest.mark.parametrize("name", _params())
def test_node(name: str) -> None:
    case = node_cases()[name]
    if unsupported_type(name):
        # Refused with a clear error, never a crash: the importer cannot hold these values.
        with pytest.raises(OnnxError):
            run_case(case)
        return
    run_case(case)


def test_excludes_are_real_cases() -> None:
    """The exclude list names only cases that exist (a stale entry would hide nothing)."""
    assert set(EXCLUDES) | set(CUDA_EXCLUDES) <= set(node_cases())


def test_design_ops_pass_rate(capsys: pytest.CaptureFixture) -> None:
    """At least 97% of the node cases of DESIGN §5's operators pass (of the types singa_lite has);
    excluded cases count as failures."""
    passed: dict[str, list[int]] = {}
    for name, case in node_cases().items():
        op = design_op(case)
        if op is None or unsupported_type(name):
            continue
        tally = passed.setdefault(op, [0, 0])
        tally[1] += 1
        try:
            run_case(case)
            tally[0] += 1
        except Exception:
            pass
    ok, total = sum(p for p, _ in passed.values()), sum(t for _, t in passed.values())
    missing = sorted(set(DESIGN_OPS) - set(passed))
    with capsys.disabled():
        lines = [f"{op}: {p}/{t}" for op, (p, t) in sorted(passed.items()) if p < t]
        print(f"\nDESIGN §5 node cases: {ok}/{total} pass ({ok / total:.1%}); below 100%: {', '.join(lines)}")
    assert not missing, f"operators without node cases: {missing}"
    assert ok / total >= 0.97

"""Modes are explicit (issue 18): autograd's private state is set only through its context
managers, ops that behave differently in training take the mode as an argument, and every
context restores what it changed, also when the block raises."""

from __future__ import annotations

import ast
import contextlib
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from singa_lite import autograd, layer, model, ops, opt, tensor
from singa_lite.ops import singa_names

PACKAGE = Path(autograd.__file__).parent
AUTOGRAD = Path(autograd.__file__)


# -- no module outside autograd touches its private state ---------------------------------------
def _private_names() -> set[str]:
    """Module-level names autograd.py binds with a leading underscore (its private state and
    helpers). SINGA's ``_and``/``_or``... reach ``autograd`` through ``__getattr__`` and are
    not among them."""
    names: set[str] = set()
    for node in ast.parse(AUTOGRAD.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


class _Scan(ast.NodeVisitor):
    """Collects the uses of autograd's module state in one file that break the rules."""

    def __init__(self, path: Path, private: set[str]) -> None:
        self.rel = path.relative_to(PACKAGE.parent).as_posix()
        self.private = private
        self.aliases: set[str] = set()  # local names bound to the autograd module
        self.scope: list[str] = []  # enclosing class and function names
        self.found: list[str] = []
        # An op gets the mode from its caller; SINGA's functional names read the flag for it.
        self.is_op = self.rel.startswith("singa_lite/ops/") and not self.rel.endswith("singa_names.py")

    def _is_autograd(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.aliases
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "autograd"
            and isinstance(node.value, ast.Name)
            and node.value.id == "singa_lite"
        )

    def _report(self, node: ast.AST, what: str) -> None:
        self.found.append(f"{self.rel}:{getattr(node, 'lineno', '?')}: {what}")

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.name == "singa_lite.autograd" and a.asname:
                self.aliases.add(a.asname)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "singa_lite" or (node.level and node.module is None):
            self.aliases.update(a.asname or a.name for a in node.names if a.name == "autograd")
        if node.module == "singa_lite.autograd":
            for a in node.names:
                if a.name in self.private or a.name == "training":
                    self._report(node, f"imports autograd.{a.name}")

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scoped(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._scoped(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if self._is_autograd(node.value):
            if node.attr in self.private:
                self._report(node, f"autograd.{node.attr}")
            elif node.attr == "training" and isinstance(node.ctx, ast.Store):
                # Model.train() is SINGA's persistent switch; anything else uses training_mode().
                if (self.rel, self.scope) != ("singa_lite/model.py", ["Model", "train"]):
                    self._report(node, "sets autograd.training (use autograd.training_mode)")
            elif node.attr == "training" and self.is_op:
                self._report(node, "an op reads autograd.training (take `training` as an argument)")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f, args = node.func, node.args
        reflective = isinstance(f, ast.Name) and f.id in ("getattr", "setattr", "delattr", "hasattr")
        if reflective and len(args) >= 2 and self._is_autograd(args[0]) and isinstance(args[1], ast.Constant):
            key = args[1].value
            if key in self.private or key == "training":
                self._report(node, f"{ast.unparse(f)}(autograd, {key!r})")
        self.generic_visit(node)


def test_no_module_outside_autograd_touches_its_private_state():
    private = _private_names()
    assert {"_tape", "_retain_graph", "_grad_enabled", "_walked"} <= private
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == AUTOGRAD:
            continue
        scan = _Scan(path, private)
        scan.visit(ast.parse(path.read_text(), str(path)))
        found += scan.found
    assert not found, "modes must go through autograd's context managers:\n" + "\n".join(found)


def test_the_scan_sees_each_kind_of_breach(tmp_path):
    src = (
        "from singa_lite import autograd as ag\n"
        "from singa_lite.autograd import _tape\n"
        "ag._retain_graph = True\n"
        "ag.training = False\n"
        "getattr(ag, '_grad_enabled')\n"
        "class Model:\n"
        "    def train(self):\n"
        "        ag.training = True\n"  # allowed only in singa_lite/model.py
    )
    path = PACKAGE / "ops" / "_probe.py"  # never written: the scan needs only its name
    scan = _Scan(path, _private_names())
    scan.visit(ast.parse(src))
    assert [f.split(": ", 1)[1] for f in scan.found] == [
        "imports autograd._tape",
        "autograd._retain_graph",
        "sets autograd.training (use autograd.training_mode)",
        "getattr(autograd, '_grad_enabled')",
        "sets autograd.training (use autograd.training_mode)",
    ]


# -- contexts restore what they change -----------------------------------------------------------
def _state() -> tuple:
    # This test is autograd's own, so it may look at the private state it guards.
    return (autograd.training, autograd._grad_enabled, autograd._tape, autograd._retain_graph)


def _contexts() -> dict[str, Callable[[], contextlib.AbstractContextManager]]:
    @contextlib.contextmanager
    def graph_step() -> Iterator[None]:  # what Model's graph mode holds while it records
        with autograd.training_mode(True), autograd.recording([]), autograd.retaining_graph():
            yield

    return {
        "no_grad": autograd.no_grad,
        "training": lambda: autograd.training_mode(True),
        "inference": lambda: autograd.training_mode(False),
        "recording": lambda: autograd.recording([]),
        "paused_recording": lambda: autograd.recording(None),
        "retaining_graph": autograd.retaining_graph,
        "graph_step": graph_step,
    }


CONTEXTS = _contexts()


@pytest.mark.parametrize("name", sorted(CONTEXTS))
@pytest.mark.parametrize("outer_training", [False, True])
def test_each_context_restores_the_state_when_its_block_raises(name, outer_training):
    autograd.training = outer_training
    before = _state()
    with pytest.raises(ZeroDivisionError), CONTEXTS[name]():
        _ = 1 / 0
    assert _state() == before


def test_contexts_set_what_they_say():
    tape: list = []
    with autograd.training_mode(True):
        assert autograd.training and autograd.is_recording()
        with autograd.no_grad():
            assert autograd.training and not autograd.is_recording()
        with autograd.training_mode(False):
            assert not autograd.training and not autograd.is_recording()
    with autograd.recording(tape) as got:
        assert got is tape
        x = tensor.from_numpy(np.ones((2, 2), np.float32))
        y = ops.relu(x)
        with autograd.recording(None):
            ops.relu(x)  # paused: not on the tape
    assert [type(e) for e in tape] == [autograd.OpCall]
    assert tape[0].inputs == (x,) and tape[0].outputs == (y,) and tape[0].op.name == "ReLU"


def test_run_step_records_a_step_call_without_its_own_ops():
    x = tensor.from_numpy(np.ones(3, np.float32))

    def step(t):
        return ops.relu(t)

    with autograd.recording([]) as tape:
        autograd.run_step(step, x)
        autograd.host_values(x)
    assert [type(e) for e in tape] == [autograd.StepCall, autograd.HostRead]
    assert tape[0].fn is step and tape[0].args == (x,)
    assert tape[1].tensor is x and np.array_equal(tape[1].values, np.ones(3))


class _InjectedError(Exception):
    pass


def _public_ops() -> dict[str, Callable]:
    """Every op function of ``ops`` and of SINGA's names in ``autograd``, by qualified name."""
    found = {}
    for prefix, module in (("ops", ops), ("autograd", singa_names)):
        for n in module.__all__:
            fn = getattr(module, n)
            if inspect.isfunction(fn):
                found[f"{prefix}.{n}"] = fn
    return found


def _arguments(fn: Callable, x: tensor.Tensor) -> list:
    """One tensor for each required positional argument: enough to reach the op's checks or,
    where they pass, its ``Operator``."""
    params = inspect.signature(fn).parameters.values()
    required = [
        p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in params)
    return [x] * max(len(required), int(variadic))


# Builds its result without an Operator (tensor.full), so the injected failure never reaches it.
NO_OPERATOR = {"autograd.constant_of_shape"}


@pytest.mark.parametrize("name", sorted(CONTEXTS))
def test_every_public_op_raising_under_a_context_leaks_no_state(name, monkeypatch):
    def fail(self, arrays):
        raise _InjectedError(self.name)

    # Every op that reaches an Operator fails inside it; the others fail in their own checks.
    monkeypatch.setattr(autograd.Operator, "forward_arrays", fail)
    x = tensor.from_numpy(np.ones((2, 3), np.float32))
    leaks, silent = [], []
    before = _state()
    for op_name, fn in _public_ops().items():
        with CONTEXTS[name]():
            inside = _state()
            try:
                fn(*_arguments(fn, x))
                silent.append(op_name)
            except Exception:
                pass
            if _state() != inside:
                leaks.append(op_name)
        if _state() != before:
            leaks.append(f"{op_name} (after the block)")
    assert not leaks, f"state changed by: {leaks}"
    assert set(silent) <= NO_OPERATOR, f"these ops did not raise: {sorted(set(silent) - NO_OPERATOR)}"


# -- ops take the training mode as an argument ---------------------------------------------------
def _x() -> tensor.Tensor:
    return tensor.Tensor(data=np.ones((64, 32), np.float32), requires_grad=False)


def test_dropout_follows_its_argument_not_the_flag():
    x = _x()
    with autograd.training_mode(True):
        np.testing.assert_array_equal(tensor.to_numpy(ops.dropout(x, 0.5)), 1)
    with autograd.training_mode(False):
        dropped = tensor.to_numpy(ops.dropout(x, 0.5, training=True))
    assert (dropped == 0).any() and set(np.unique(dropped)) == {0.0, 2.0}


def test_singa_names_and_layers_pass_the_flag():
    x = _x()
    drop = layer.Dropout(0.5)
    for fn in (lambda t: autograd.dropout(t, 0.5), drop):
        with autograd.training_mode(False):
            np.testing.assert_array_equal(tensor.to_numpy(fn(x)), 1)
        with autograd.training_mode(True):
            assert (tensor.to_numpy(fn(x)) == 0).any()


def test_batchnorm_follows_its_argument_not_the_flag():
    rng = np.random.default_rng(0)
    x = tensor.Tensor(data=rng.standard_normal((4, 2, 3, 3)).astype(np.float32), requires_grad=False)

    def stats():
        ones = np.ones(2, np.float32)
        return [tensor.Tensor(data=a, requires_grad=False) for a in (ones, 0 * ones, 0 * ones, ones)]

    with autograd.training_mode(True):
        ts = stats()
        ops.batchnorm_2d(x, *ts)
        assert not tensor.to_numpy(ts[2]).any()  # inference: running mean untouched
    with autograd.training_mode(False):
        ts = stats()
        ops.batchnorm_2d(x, *ts, training=True)
        assert tensor.to_numpy(ts[2]).any()
        ts = stats()
        autograd.batchnorm_2d(x, *ts)  # SINGA's name follows the flag
        assert not tensor.to_numpy(ts[2]).any()


# -- Model uses the contexts ---------------------------------------------------------------------
class _Net(model.Model):
    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fc = layer.Linear(2)
        self.drop = layer.Dropout(0.5)
        self.fail = fail

    def forward(self, x):
        return self.drop(self.fc(x))

    def train_one_batch(self, x):
        loss = autograd.reduce_mean(self.forward(x))
        self.optimizer(loss)
        if self.fail:
            raise _InjectedError
        return loss


@pytest.mark.parametrize("use_graph", [False, True])
def test_a_raising_training_step_restores_the_modes(use_graph):
    m = _Net(fail=True)
    m.set_optimizer(opt.SGD(lr=0.1))
    x = tensor.Tensor(data=np.ones((4, 3), np.float32), requires_grad=False)
    m.compile([x], is_train=True, use_graph=use_graph)
    autograd.training = False  # the model still trains: __call__ holds training_mode(True)
    before = _state()
    with pytest.raises(_InjectedError):
        m(x)
    assert _state() == before


def test_graph_mode_tape_holds_named_entries():
    m = _Net()
    m.set_optimizer(opt.SGD(lr=0.1))
    x = tensor.Tensor(data=np.ones((4, 3), np.float32), requires_grad=False)
    m.compile([x], is_train=True, use_graph=True)
    m(x)
    tape = m._graph.tape
    kinds = {type(e) for e in tape}
    assert kinds == {autograd.OpCall, autograd.StepCall}
    assert isinstance(tape[-1], autograd.StepCall) and tape[-1].fn.__self__ is m.optimizer
    assert any(isinstance(e.op, ops.normalization.Dropout) and e.op.training for e in tape[:-1])
    m(x)  # a replay runs from the named entries
    assert m._graph.replays == 1

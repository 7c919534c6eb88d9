"""The convolution engine: no import cycles in the package, the strategy selection (one function
of explicit arguments), and one op family for every rank."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from singa_lite import autograd, ops, tensor
from singa_lite.ops import conv_select
from singa_lite.ops.conv_blocks import BlockedGemm, Geometry2d
from singa_lite.ops.conv_pointwise import Pointwise

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "singa_lite"


# -- module-level import cycles ----------------------------------------------------------------------
def _module_names(root: pathlib.Path) -> dict[str, tuple[pathlib.Path, bool]]:
    """Dotted name -> (file, is a package) of every module under ``root``."""
    mods = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return mods


def _top_level_imports(body: list) -> list:
    """The import statements that run when the module is imported: its top level, and inside
    top-level ``if``/``try`` blocks (not ``if TYPE_CHECKING``, not function or class bodies)."""
    found = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            found += _top_level_imports(node.body) + _top_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                found += _top_level_imports(block)
    return found


def import_graph(root: pathlib.Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports at module level. ``from pkg import name``
    points at ``pkg.name`` when that is a module, else at ``pkg``."""
    mods = _module_names(root)
    graph = {}
    for name, (path, is_pkg) in mods.items():
        package = name if is_pkg else name.rpartition(".")[0]
        deps = set()
        for node in _top_level_imports(ast.parse(path.read_text()).body):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in mods}
                continue
            base = node.module or ""
            if node.level:  # relative: up level - 1 packages from this one
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                deps.add(full if full in mods else base)
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_package_has_no_import_cycles() -> None:
    graph = import_graph(PACKAGE)
    assert "singa_lite.ops.conv" in graph and "singa_lite.ops.window" in graph["singa_lite.ops.conv"]
    assert cycles(graph) == []


def test_the_cycle_check_finds_cycles(tmp_path: pathlib.Path) -> None:
    """A package whose ``a`` imports ``b`` at the bottom, ``b`` imports ``c`` and ``c`` imports
    ``a`` (the shape ops.conv once had) is caught; imports inside functions do not count."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub import a\n")
    (pkg / "sub" / "a.py").write_text("X = 1\n\nfrom pkg.sub import b  # noqa: E402\n")
    (pkg / "sub" / "b.py").write_text("from . import c\n")
    (pkg / "sub" / "c.py").write_text("try:\n    from pkg.sub.a import X\nexcept ImportError:\n    pass\n")
    (pkg / "lazy.py").write_text("def f():\n    from pkg import lazy2\n")
    (pkg / "lazy2.py").write_text("from pkg import lazy\n")
    graph = import_graph(pkg)
    assert graph["pkg.sub.b"] == {"pkg.sub.c"} and graph["pkg.lazy"] == set()
    assert cycles(graph) == [["pkg.sub.a", "pkg.sub.b", "pkg.sub.c"]]


# -- strategy selection -----------------------------------------------------------------------------
def _select(rank=2, x=(4, 8, 9, 9), w=(16, 8, 3, 3), group=1, dtype="float32", backend="numpy", **kw):
    kw.setdefault("grad", True)
    return conv_select.select(rank, x, w, group, dtype, backend, **kw)


@pytest.mark.parametrize(
    "args, want",
    [
        (dict(grad=True), "blocks"),
        (dict(grad=False), "blocks"),  # a batch: the blocked GEMM either way
        (dict(x=(1, 8, 9, 9), grad=False), "one_image"),
        (dict(x=(1, 8, 9, 9), grad=True), "blocks"),  # a backward follows: keep the columns
        (dict(x=(1, 8, 9, 9), grad=False, backend="cupy"), "one_image"),
        (dict(w=(8, 1, 3, 3), group=8, grad=False), "depthwise_infer"),
        (dict(x=(1, 8, 9, 9), w=(16, 1, 3, 3), group=8, grad=False), "depthwise_infer"),
        (dict(w=(8, 1, 3, 3), group=8), "depthwise"),
        (dict(w=(8, 1, 3, 3), group=8, kernels=True), "depthwise_kernel"),
        (dict(w=(8, 1, 3, 3), group=8, kernels=True, backend="cupy"), "depthwise"),
        (dict(w=(8, 1, 3, 3), group=8, kernels=True, dtype="float16"), "depthwise"),
        # inference takes the compiled loops where they take the arrays, else the einsum
        (dict(w=(8, 1, 3, 3), group=8, kernels=True, grad=False), "depthwise_kernel"),
        (dict(x=(1, 8, 3, 3), w=(8, 1, 3, 3), group=8, kernels=True, grad=False), "depthwise_kernel"),
        (dict(w=(8, 1, 3, 3), group=8, kernels=False, grad=False), "depthwise_infer"),
        (dict(w=(8, 1, 3, 3), group=8, kernels=True, grad=False, backend="cupy"), "depthwise_infer"),
        (dict(w=(8, 2, 3, 3), group=4, grad=True), "blocks"),  # grouped, not depthwise
        (dict(w=(16, 8, 1, 1), pointwise=True), "pointwise"),
        (dict(w=(16, 8, 1, 1), pointwise=True, grad=False), "pointwise"),  # a batch
        (dict(x=(1, 8, 9, 9), w=(16, 8, 1, 1), pointwise=True, grad=False), "one_image"),
        (dict(w=(16, 4, 1, 1), group=2, pointwise=True), "blocks"),  # grouped: the batched GEMM
        (dict(rank=1, x=(4, 8, 9), w=(16, 8, 1), pointwise=True), "pointwise"),
        (dict(w=(8, 1, 3, 3), group=1, x=(4, 1, 9, 9)), "blocks"),  # one channel, one group
        (dict(rank=1, x=(4, 8, 9), w=(16, 8, 3)), "blocks"),
        (dict(rank=1, x=(1, 8, 9), w=(16, 8, 3), grad=False), "one_image"),
        (dict(rank=3, x=(1, 8, 4, 4, 4), w=(16, 8, 3, 3, 3), grad=False), "columns"),
        (dict(rank=3, x=(1, 8, 4, 4, 4), w=(8, 1, 3, 3, 3), group=8), "columns"),
        (dict(rank=4, x=(1, 8, 3, 3, 3, 3), w=(16, 8, 1, 1, 1, 1)), "columns"),
        (dict(transposed=True), "blocks_transpose"),
        (dict(rank=1, x=(1, 8, 9), w=(8, 16, 3), transposed=True, grad=False), "blocks_transpose"),
        (dict(rank=3, x=(1, 8, 4, 4, 4), w=(8, 16, 3, 3, 3), transposed=True), "columns_transpose"),
    ],
)
def test_select(args: dict, want: str) -> None:
    assert _select(**args) == want


@settings(max_examples=200, deadline=None)
@given(
    rank=st.integers(1, 4),
    n=st.integers(0, 3),
    c=st.integers(1, 4),
    group=st.integers(1, 4),
    grad=st.booleans(),
    transposed=st.booleans(),
    kernels=st.booleans(),
    backend=st.sampled_from(["numpy", "cupy"]),
)
def test_select_always_names_a_strategy(rank, n, c, group, grad, transposed, kernels, backend) -> None:
    x, w = (n, c * group, *[5] * rank), (2 * group, c, *[3] * rank)
    got = _select(rank, x, w, group, backend=backend, grad=grad, transposed=transposed, kernels=kernels)
    assert got in conv_select.STRATEGIES
    assert (got in conv_select.IMAGE) == (rank <= 2)
    assert got.endswith("transpose") == transposed
    if grad:  # a forward-only strategy never runs where a backward follows
        assert got not in ("one_image", "depthwise_infer")


# -- one op family ---------------------------------------------------------------------------------
def _t(a: np.ndarray, grad: bool = False) -> tensor.Tensor:
    return tensor.Tensor(data=a, requires_grad=grad, stores_grad=grad)


def _rand(shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("record", [False, True])
@pytest.mark.parametrize(
    "x_shape, w_shape, group, want",
    [
        ((2, 4, 6, 5), (6, 4, 3, 3), 1, ("blocks", "blocks")),
        ((1, 4, 6, 5), (6, 4, 3, 3), 1, ("one_image", "blocks")),
        ((2, 4, 6, 5), (8, 1, 3, 3), 4, ("depthwise*", "depthwise*")),  # the kernels where they run
        ((2, 4, 7), (6, 2, 3), 2, ("blocks", "blocks")),
        ((2, 4, 3, 4, 5), (6, 4, 3, 3, 3), 1, ("columns", "columns")),
    ],
)
def test_every_rank_runs_through_one_family(x_shape, w_shape, group, want, record) -> None:
    """``conv_nd`` and the fixed-rank ops are one op: the same strategy, the same bits."""
    x, w, b = _rand(x_shape, 0), _rand(w_shape, 1), _rand((w_shape[0],), 2)
    old, autograd.training = autograd.training, record
    try:
        y = ops.conv_nd(_t(x, record), _t(w), _t(b), 1, 1, 1, group)
        if len(x_shape) == 4:
            y2 = ops.conv2d(_t(x, record), _t(w), _t(b), 1, 1, 1, group)
            np.testing.assert_array_equal(y.numpy(), y2.numpy())
        if len(x_shape) == 3:
            y2 = ops.conv1d(_t(x, record), _t(w), _t(b), 1, 1, 1, group)
            np.testing.assert_array_equal(y.numpy(), y2.numpy())
    finally:
        autograd.training = old
    op = ops.ConvNd(len(x_shape) - 2, 1, 1, 1, group)
    if record:
        op.needs_grad = (True, True, True)  # as in a graph replay of a recorded call
    op.xp = np
    op.forward(x, w, b)
    assert (
        op.strategy.startswith(want[record].rstrip("*"))
        if want[record].endswith("*")
        else op.strategy == want[record]
    )
    for fixed in (ops.Conv2d(), ops.Conv1d()):
        assert isinstance(fixed, ops.ConvNd)
    assert isinstance(ops.ConvTranspose2d(), ops.ConvTransposeNd)


# -- the pointwise strategy -------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 3),
    c=st.integers(1, 6),
    o=st.integers(1, 6),
    hw=st.tuples(st.integers(1, 6), st.integers(1, 6)),
    bias=st.booleans(),
    channels_last=st.booleans(),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_pointwise_equals_the_blocked_gemm(n, c, o, hw, bias, channels_last, dtype) -> None:
    """``pointwise`` (per-image products in NCHW) gives what the blocked im2col GEMM gives, forward
    and both gradients, on contiguous and channels-last inputs and empty batches."""
    x = _rand((n, *hw, c), 3).astype(dtype).transpose(0, 3, 1, 2)
    if not channels_last:
        x = np.ascontiguousarray(x)
    w, b = _rand((o, c, 1, 1), 4).astype(dtype), _rand((o,), 5).astype(dtype) if bias else None
    dy = _rand((n, o, *hw), 6).astype(dtype)
    geo = Geometry2d((1, 1), (1, 1), (1, 1), (0, 0, 0, 0), hw, 1)
    want_plan, got_plan = BlockedGemm(np, geo), Pointwise(np, geo)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    y, want = got_plan.forward(x, w, b), want_plan.forward(x, w, b)
    assert y.shape == want.shape and y.dtype == dtype
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)
    for need_x, need_w in ((True, True), (True, False), (False, True)):
        got, exp = got_plan.backward(dy, need_x, need_w), want_plan.backward(dy, need_x, need_w)
        for a, e in zip(got, exp):
            assert (a is None) == (e is None)
            if a is not None:
                assert a.shape == e.shape and a.dtype == dtype
                np.testing.assert_allclose(
                    a, e, rtol=tol, atol=tol * max(1.0, float(np.abs(e).max(initial=0)))
                )


@pytest.mark.parametrize("rank", [1, 2])
def test_a_1x1_training_conv_runs_pointwise(rank) -> None:
    """A recorded 1x1 conv (1-D or 2-D) takes ``pointwise``; its output and gradients are the
    float64 einsum's."""
    spatial = (5, 4)[:rank]
    x, w, b = _rand((3, 4, *spatial), 7), _rand((6, 4, *[1] * rank), 8), _rand((6,), 9)
    op = ops.ConvNd(rank)
    op.needs_grad = (True, True, True)
    op.xp = np
    y = op.forward(x, w, b)
    assert op.strategy == "pointwise"
    sub = "nc" + "hw"[:rank]
    want = np.einsum(f"{sub},oc->{sub.replace('c', 'o')}", x, w.reshape(6, 4)) + b.reshape(1, 6, *[1] * rank)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    dy = _rand(y.shape, 10)
    dx, dw, db = op.backward(dy)
    np.testing.assert_allclose(
        dx, np.einsum(f"{sub.replace('c', 'o')},oc->{sub}", dy, w.reshape(6, 4)), rtol=1e-12
    )
    dw_want = np.einsum(f"{sub.replace('c', 'o')},{sub}->oc", dy, x).reshape(w.shape)
    np.testing.assert_allclose(dw, dw_want, rtol=1e-12)
    np.testing.assert_allclose(db, dy.sum(axis=(0, *range(2, dy.ndim))), rtol=1e-12)

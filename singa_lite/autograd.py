"""Reverse-mode automatic differentiation: the ``Operator`` base and the backward engine.

An operator computes on backend arrays (NumPy or CuPy, whichever its inputs hold): ``forward``
takes the input arrays and returns the output array(s), saving on ``self`` only what
``backward`` needs; ``backward`` takes the output gradients and returns one gradient per input
(``None`` where an input gets none). Calling an operator on tensors runs ``forward`` and, when
``training`` is on, records the operator as the outputs' ``creator``.

``backward(loss)`` walks the recorded graph once, in topological order, summing the gradients
of tensors used more than once, and yields ``(param, grad)`` for every tensor that
``stores_grad`` as soon as all its uses are done. As in SINGA, a graph may be walked again
(``gradients(loss)`` twice) until the next op is recorded or another graph is walked: then it
is released, so a loop that keeps its last ``loss`` does not keep every step's graph, and
memory does not grow across steps. ``retain_graph=True`` keeps a graph for good,
``retain_graph=False`` releases it as it is walked.

SINGA's conventions hold: graphs are recorded only while ``autograd.training`` is true (which
``Model.train()`` sets), and the functional API (``relu``, ``matmul``, ``conv2d``...) is
importable from here.

Modes are set through context managers, which restore the old mode on exit, also when the
block raises: ``training_mode(flag)``, ``no_grad()``, ``recording(tape)`` (graph mode and ONNX
export: every op call, update step and host read appended to ``tape`` as an ``OpCall``,
``StepCall`` or ``HostRead``) and ``retaining_graph()``. Ops whose behaviour depends on
training (dropout, batch norm) take it as an argument; only SINGA's functional names
(``autograd.dropout``...) read ``autograd.training`` for it.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from singa_lite import backend
from singa_lite.errors import ArgumentError, AutogradError, DeviceError, ShapeError
from singa_lite.tensor import Tensor

training = False
"""Record graphs for backward and run layers in training behaviour (Dropout, BatchNorm).

SINGA's public switch: ``Model.train()``/``eval()`` set it for good; code that needs a mode
for a while uses ``training_mode``."""

# Private: set only through the context managers below (tests/test_modes.py checks that no
# other module touches them).
_grad_enabled = True
_tape: list[TapeEntry] | None = None  # see recording()
_retain_graph = False  # see retaining_graph()
_walked: Any = None  # (root, ops) of the last backward's walk, as weakrefs, until released


class OpCall(NamedTuple):
    """A tape entry: ``op`` was called on ``inputs`` and made ``outputs`` (graph mode replays
    ``op.forward_arrays`` into the outputs' arrays; ONNX export converts ``op``)."""

    op: Operator
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]


class StepCall(NamedTuple):
    """A tape entry: an update step ran as ``fn(*args)`` (see ``run_step``); its own ops are
    not on the tape, a replay calls ``fn`` again."""

    fn: Callable[..., Any]
    args: tuple


class HostRead(NamedTuple):
    """A tape entry: ``tensor``'s ``values`` were read on the host (see ``host_values``); what
    was recorded after it holds only for these values."""

    tensor: Tensor
    values: Any


TapeEntry = OpCall | StepCall | HostRead


@contextlib.contextmanager
def training_mode(flag: bool = True) -> Iterator[None]:
    """Set ``training`` inside the block and restore the old value after it.

    >>> with training_mode(False):
    ...     training
    False
    """
    global training
    old, training = training, bool(flag)
    try:
        yield
    finally:
        training = old


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Run ops without recording a graph, whatever ``training`` says."""
    global _grad_enabled
    old, _grad_enabled = _grad_enabled, False
    try:
        yield
    finally:
        _grad_enabled = old


@contextlib.contextmanager
def recording(tape: list[TapeEntry] | None) -> Iterator[list[TapeEntry] | None]:
    """Append an ``OpCall`` per op call, a ``StepCall`` per ``run_step`` and a ``HostRead``
    per ``host_values`` inside the block to ``tape``; ``None`` stops recording for the block.

    Graph mode records a training step so; ONNX export traces a forward so. Entries are made
    whatever ``training`` and ``no_grad`` say.

    >>> import numpy as np
    >>> from singa_lite import ops, tensor
    >>> with recording([]) as tape:
    ...     y = ops.relu(tensor.from_numpy(np.ones(2, np.float32)))
    >>> [type(e).__name__ for e in tape]
    ['OpCall']
    """
    global _tape
    old, _tape = _tape, tape
    try:
        yield tape
    finally:
        _tape = old


@contextlib.contextmanager
def retaining_graph() -> Iterator[None]:
    """``backward`` keeps every graph it walks inside the block (``retain_graph=True`` unless
    it is given False), so graph mode can walk the recorded step's graph again each replay."""
    global _retain_graph
    old, _retain_graph = _retain_graph, True
    try:
        yield
    finally:
        _retain_graph = old


def host_values(t: Tensor) -> Any:
    """``t``'s values as a host (NumPy) array, for code that decides something from them (a
    shape, the lengths of sequences). Graph mode notes the read: a replay is only valid for
    the same values, so it records the step again when they change (see ``model._Graph``).
    The read goes through ``backend.to_host``, so ``backend.count_host_reads`` sees it."""
    values = backend.to_host(t.data)
    if _tape is not None:
        _tape.append(HostRead(t, values.copy()))
    return values


def is_recording() -> bool:
    """Whether ops called now are recorded for backward."""
    return training and _grad_enabled


class Operator:
    """Base class of differentiable operators. Subclasses define ``forward`` and ``backward``.

    Non-tensor arguments (axes, strides, ...) go to ``__init__``; tensors go to ``__call__``.
    Inside ``forward``/``backward`` use ``self.xp`` (``numpy`` or ``cupy``) for array math.
    ``self.needs_grad[i]`` tells whether input ``i`` wants a gradient, so backward may skip work.

    ``backward`` answers with SINGA's arity, whatever a subclass returns: the gradient itself
    for a one-input op, a tuple of one per input otherwise (SINGA's tests call
    ``y.creator.backward(dy.data)`` and use the result so).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fn = cls.__dict__.get("backward")
        if fn is not None and not getattr(fn, "_singa_arity", False):
            cls.backward = _singa_arity(fn)  # type: ignore[method-assign]

    xp: Any = None
    released = False  # set once backward has freed this op's links to its inputs
    optional_grads: tuple[int, ...] = ()
    """Outputs whose gradient ``backward`` accepts as ``None`` when nothing used them (the
    engine passes zeros to the others), so an unused big output costs no zero array."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or type(self).__name__
        self.inputs: tuple[Tensor, ...] = ()
        self.needs_grad: tuple[bool, ...] = ()

    def __call__(self, *xs: Tensor) -> tuple[Tensor, ...]:
        dev = _common_device(self, xs)
        self.xp = dev.xp
        self.device = dev
        dev.activate()
        ys = self.forward_arrays([x.data for x in xs])
        record = training and _grad_enabled and any(x.requires_grad for x in xs)
        if record:
            if _walked is not None:
                release_walked()
            self.inputs = xs
            self.needs_grad = tuple(x.requires_grad for x in xs)
            self.out_meta = [(y.shape, y.dtype) for y in ys]
        creator = self if record else None
        outs = tuple(Tensor._wrap(y, dev, record, creator, i) for i, y in enumerate(ys))
        if _tape is not None:
            _tape.append(OpCall(self, xs, outs))
        return outs

    def forward_arrays(self, arrays: list) -> tuple:
        """``forward`` on backend arrays, always as a tuple of arrays (graph replay uses it too)."""
        ys = self.forward(*arrays)
        if not isinstance(ys, tuple):
            ys = (ys,)
        nd = self.xp.ndarray
        if not all(isinstance(y, nd) for y in ys):
            # NumPy turns 0-d arithmetic into scalars; tensors always hold arrays.
            ys = tuple(y if isinstance(y, nd) else self.xp.asarray(y) for y in ys)
        return ys

    def forward(self, *xs: Any) -> Any:
        raise TypeError(f"{type(self).__name__} must define forward")

    def backward(self, *dys: Any) -> Any:
        raise TypeError(f"{type(self).__name__} defines no backward, so it has no gradient")

    def release(self) -> None:
        """Drop the links to the inputs once backward has used them."""
        self.inputs = ()
        self.released = True

    def error(self, message: str, *arrays: Any) -> ShapeError:
        """A ``ShapeError`` naming this op and the shapes of ``arrays``."""
        shapes = ", ".join(str(tuple(a.shape)) for a in arrays)
        return ShapeError(f"{self.name}: {message} (input shapes: {shapes})")


def _singa_arity(fn: Any) -> Any:
    """``fn`` (a ``backward``) returning a lone gradient where it returned a 1-tuple."""

    @functools.wraps(fn)
    def backward(self: Operator, *dys: Any) -> Any:
        dxs = fn(self, *dys)
        return dxs[0] if type(dxs) is tuple and len(dxs) == 1 else dxs

    backward._singa_arity = True  # type: ignore[attr-defined]
    return backward


def _common_device(op: Operator, xs: tuple) -> Any:
    if not xs:
        raise ArgumentError(f"{op.name} needs at least one input tensor")
    dev = None
    for x in xs:
        if not isinstance(x, Tensor):
            raise ArgumentError(
                f"{op.name}: expected Tensor inputs, got {type(x).__name__}; "
                "wrap arrays with tensor.from_numpy"
            )
        if dev is None:
            dev = x.device
        elif x.device != dev:
            desc = ", ".join(f"{tuple(t.shape)} on {t.device}" for t in xs)
            raise DeviceError(
                f"{op.name}: inputs are on different devices ({desc}); move them with Tensor.to_device first"
            )
    return dev


def release_walked(keep: Operator | None = None) -> None:
    """Release the ops the last ``backward`` walked (unless it started at ``keep``): the
    recording of a new op, or a walk of another graph, means they will not be walked again.
    Ops that lead to no param were not walked and stay, as a cast made once before a loop."""
    global _walked
    if _walked is None or (keep is not None and _walked[0]() is keep):
        return
    refs, _walked = _walked[1], None
    for ref in refs:
        op = ref()
        if op is not None:
            op.release()


def _topological(root: Operator) -> tuple[list[Operator], dict[int, int], list[tuple]]:
    """The ops below ``root`` that lead to a param (a ``stores_grad`` leaf), outputs before
    inputs; how often each param is used by them; and the leaves with the flags this used.

    Ops whose inputs reach no param are left out, and each kept op's ``needs_grad`` is narrowed
    to the inputs that do: ``backward`` yields gradients of params only, so a data tensor
    created with ``requires_grad=True`` (``Tensor``'s default, as in SINGA) costs no input
    gradient, and a cast of it made once before a training loop is not walked again.
    """
    # Iterative depth-first post-order. An op is marked when it is expanded, not when it is
    # pushed, so an op reachable by paths of different depths is still placed after every op
    # that feeds gradient into it.
    post: list[Operator] = []
    seen: set[int] = set()
    stack: list[tuple[Operator, bool]] = [(root, False)]
    while stack:
        op, expanded = stack.pop()
        if expanded:
            post.append(op)
            continue
        if id(op) in seen:
            continue
        if op.released:
            raise AutogradError(
                f"backward: {op.name} was freed after an earlier backward through it (an op was "
                "recorded, or another graph walked, since); pass retain_graph=True to that "
                "backward to run another through the same graph later"
            )
        seen.add(id(op))
        stack.append((op, True))
        for x in op.inputs:
            c = x.creator
            if c is not None and id(c) not in seen:
                stack.append((c, False))
    # Post-order lists every op after the ops that make its inputs.
    reaches: set[int] = set()
    order: list[Operator] = []
    param_uses: dict[int, int] = {}
    leaves: dict[int, tuple] = {}  # the flags the walk depended on, to check a cached plan
    for op in post:
        need = []
        kept = False
        for x in op.inputs:
            c = x.creator
            if c is None:
                leaves[id(x)] = (x, x.requires_grad, x.stores_grad)
                n = x.requires_grad and x.stores_grad
                if n:
                    param_uses[id(x)] = param_uses.get(id(x), 0) + 1
            else:
                n = x.requires_grad and id(c) in reaches
            kept = kept or n
            need.append(n)
        if kept:  # (a param input always keeps its op, so its count above stands)
            reaches.add(id(op))
            op.needs_grad = tuple(need)
            order.append(op)
    order.reverse()
    return order, param_uses, list(leaves.values())


def forget_walks(ops: Iterable[Operator]) -> None:
    """Drop the walk orders ``backward`` keeps on the roots of retained graphs among ``ops``,
    for a graph rewritten since (``graph_fusion``)."""
    for op in ops:
        op.__dict__.pop("_backward_walk", None)


def _plan_holds(plan: tuple) -> bool:
    """Whether no leaf's ``requires_grad``/``stores_grad`` changed since ``plan`` was made
    (a param frozen or unfrozen between graph-mode replays changes which ops backward runs)."""
    return all(x.requires_grad == r and x.stores_grad == s for x, r, s in plan[2])


def run_step(fn: Any, *args: Any) -> Any:
    """Run an update step (backward + optimizer) and, in graph mode, record it for replay.

    Optimizers call their update through this, so graph mode can replay the whole step; the
    ops the step itself calls are not recorded as forward ops.
    """
    if _tape is None:
        return fn(*args)
    _tape.append(StepCall(fn, args))
    with recording(None):  # a replay calls fn again rather than the ops it runs
        return fn(*args)


def backward(y: Tensor, dy: Any = None, retain_graph: bool | None = None) -> Iterator[tuple]:
    """Yield ``(param, grad)`` for each tensor with ``stores_grad`` that ``y`` depends on.

    ``dy`` is the gradient of ``y`` (a Tensor or array; ones when omitted). Each param is
    yielded once, with the sum of the gradients of all its uses, as soon as that sum is final.
    ``retain_graph``: None (the default) keeps the graph for another backward until an op is
    recorded or another graph is walked, as SINGA allows; True keeps it; False frees it as it
    is walked.
    """
    global _walked
    if retain_graph is None and _retain_graph:
        retain_graph = True
    if y.creator is None:
        raise AutogradError(
            "backward: this tensor has no recorded graph. Set `autograd.training = True` "
            "(Model.train() does) before the forward pass, and make sure some input has "
            "requires_grad=True."
        )
    if _walked is not None:
        release_walked(keep=y.creator)
    xp = y.device.xp
    if dy is None:
        dy = xp.ones(y.shape, dtype=y.dtype)
    elif isinstance(dy, Tensor):
        dy = dy.data
    root = y.creator
    # The graph below an op never changes (but for graph_fusion's rewrite, which calls
    # forget_walks), so a retained graph (graph mode replays it every step) keeps its walk
    # order on its root op instead of sorting again; under a name no op uses for its own.
    plan = root.__dict__.get("_backward_walk") if retain_graph else None
    if plan is None or not _plan_holds(plan):
        plan = _topological(root)
        if retain_graph:
            root._backward_walk = plan
    order, leaf_uses = plan[0], dict(plan[1])
    try:
        yield from _walk(order, leaf_uses, root, y, dy, retain_graph is False)
    finally:
        # Noted after the walk: an op recorded during it (an optimizer's arithmetic on a
        # param) must not release the graph being walked.
        if retain_graph is None and (_walked is None or _walked[0]() is not root):
            _walked = (weakref.ref(root), [weakref.ref(op) for op in order])


def _walk(order: list, leaf_uses: dict, root: Operator, y: Tensor, dy: Any, release: bool) -> Iterator[tuple]:
    grads: dict[int, list] = {id(root): [None] * len(root.out_meta)}
    grads[id(root)][y._index] = dy
    leaf_grads: dict[int, Any] = {}
    leaves: dict[int, Tensor] = {}
    # Sums this walk made itself (keyed by slot): no op's backward holds them, so the next
    # gradient for the same slot is added in place instead of into yet another new array.
    # A backward's own result may be an alias (Add passes ``dy`` on to both inputs), so the
    # first sum of a slot is always a new array.
    owned: set = set()
    for op in order:
        dys = grads.pop(id(op), None)
        if dys is None:
            continue
        if op.released:  # only reachable through a cached plan: _topological checks the rest
            raise AutogradError(f"backward: {op.name} was freed by an earlier backward through it")
        op.device.activate()
        if any(d is None for d in dys):
            optional = op.optional_grads
            dys = [
                d if d is not None or i in optional else op.xp.zeros(shape, dtype=dt)
                for i, (d, (shape, dt)) in enumerate(zip(dys, op.out_meta))
            ]
        dxs = op.backward(*dys)
        if not isinstance(dxs, tuple):
            dxs = (dxs,)
        if len(dxs) != len(op.inputs):
            raise AutogradError(f"{op.name}.backward returned {len(dxs)} grads for {len(op.inputs)} inputs")
        for x, dx, need in zip(op.inputs, dxs, op.needs_grad):
            if dx is None or not need:
                continue
            if dx.shape != x.shape:
                raise AutogradError(f"{op.name}.backward: grad shape {dx.shape} != input shape {x.shape}")
            c = x.creator
            if c is not None:
                g = grads.get(id(c))
                if g is None:
                    g = grads[id(c)] = [None] * len(c.out_meta)
                i = x._index
                if g[i] is None:
                    g[i] = dx
                else:
                    g[i] = _accumulate(g[i], dx, owned, (id(c), i))
                continue
            k = id(x)
            leaf_grads[k] = dx if k not in leaf_grads else _accumulate(leaf_grads[k], dx, owned, k)
            leaves[k] = x
            leaf_uses[k] -= 1
            if leaf_uses[k] == 0:
                yield x, Tensor._wrap(leaf_grads.pop(k), x.device, False, None, 0)
        if release:
            op.release()
    # Params whose other uses lay on paths that carried no gradient.
    for k, g in leaf_grads.items():
        yield leaves[k], Tensor._wrap(g, leaves[k].device, False, None, 0)


def _accumulate(g: Any, dx: Any, owned: set, slot: Any) -> Any:
    """``g + dx`` for a gradient slot: into ``g`` itself when ``owned`` says this walk made
    it (and the dtypes agree), else as a new array that the slot then owns."""
    if slot in owned and g.dtype == dx.dtype:
        g += dx
        return g
    owned.add(slot)
    return g + dx


def gradients(y: Tensor, dy: Any = None) -> dict[Tensor, Tensor]:
    """``{param: grad}`` for every tensor with ``stores_grad`` that ``y`` depends on."""
    return dict(backward(y, dy))


def __getattr__(name: str) -> Any:
    # The op modules import this one, so the functional API is attached lazily: SINGA's names
    # and argument orders (ops/singa_names.py) first, then every op under its own name. Dunder
    # names are the import system's questions (``__path__`` at each ``from autograd import``,
    # maybe while the op modules are half-imported): never an op.
    if name.startswith("__"):
        raise AttributeError(f"module 'singa_lite.autograd' has no attribute {name!r}")
    from singa_lite import ops
    from singa_lite.ops import singa_names

    if name in singa_names.__all__:
        return getattr(singa_names, name)
    if not name.startswith("_") and hasattr(ops, name) and not _is_module(getattr(ops, name)):
        return getattr(ops, name)
    raise AttributeError(f"module 'singa_lite.autograd' has no attribute {name!r}")


def _is_module(obj: Any) -> bool:
    return type(obj) is type(contextlib)

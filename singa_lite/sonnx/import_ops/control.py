"""ONNX handlers for If, Loop, Scan and the sequence and optional operators their bodies use.

The bodies are :class:`~singa_lite.sonnx.subgraph.Subgraph` objects, compiled with the node
(its graph attributes are replaced by them); a handler gets the node's declared inputs and then
the outer-scope values its bodies read (``Node.captured``). A sequence is a Python list of
Tensors, an empty optional ``None``. Loop, Scan and SequenceMap count the body runs of the
outermost of them and its nested ones against ``Limits.max_iterations``, so a loop whose
condition never turns false stops with an ``OnnxError``; a scan length, an opset-8 Scan batch
and the tensors one SplitToSequence makes are checked against it before any is made.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import numpy as np

from singa_lite import device as _device
from singa_lite import ops
from singa_lite.sonnx import limits as _limits
from singa_lite.sonnx.import_ops.base import Node
from singa_lite.tensor import Tensor

# ruff: noqa: N802  (handlers are named exactly after the ONNX operators)

__all__ = [
    "ConcatFromSequence",
    "If",
    "Loop",
    "Optional",
    "OptionalGetElement",
    "OptionalHasElement",
    "Scan",
    "SequenceAt",
    "SequenceConstruct",
    "SequenceEmpty",
    "SequenceErase",
    "SequenceInsert",
    "SequenceLength",
    "SequenceMap",
    "SplitToSequence",
]

# Body runs so far of the outermost Loop/Scan/SequenceMap running now (nested ones add to it).
_runs: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "singa_lite_onnx_body_runs", default=None
)


@contextlib.contextmanager
def _budget() -> Iterator[list[int]]:
    counter = _runs.get()
    if counter is not None:  # nested: share the outermost loop's count
        yield counter
        return
    counter = [0]
    token = _runs.set(counter)
    try:
        yield counter
    finally:
        _runs.reset(token)


def _tick(n: Node, counter: list[int]) -> None:
    counter[0] += 1
    if counter[0] > n.limits.max_iterations:
        raise n.fail(
            f"loop bodies ran more than Limits.max_iterations = {n.limits.max_iterations} times "
            "(a condition that never turns false?); sonnx.limits.Limits(max_iterations=...) raises it, "
            "if the model is trusted"
        )


def outer_scope(n: Node, args: tuple) -> tuple[list[Any], dict[str, Any]]:
    """A handler's arguments split into the node's declared inputs and the outer-scope values
    its subgraphs read, by name (see ``subgraph.attach``)."""
    k = len(args) - len(n.captured)
    return list(args[:k]), dict(zip(n.captured, args[k:]))


def _check_count(n: Node, count: int, what: str) -> None:
    """Refuse ``count`` body runs or sequence elements over ``max_iterations`` before any is made."""
    if count > n.limits.max_iterations:
        raise n.fail(
            f"{what} ({count}) is over Limits.max_iterations = {n.limits.max_iterations}; "
            "sonnx.limits.Limits(max_iterations=...) raises it, if the model is trusted"
        )


def _new(n: Node, value: Any, dtype: Any) -> Tensor:
    dev = n.device if n.device is not None else _device.get_default_device()
    return Tensor(data=np.asarray(value, dtype=dtype), device=dev, requires_grad=False)


def _flag(n: Node, t: Any, what: str) -> bool:
    if not isinstance(t, Tensor) or t.size() != 1:
        got = type(t).__name__ if not isinstance(t, Tensor) else f"shape {t.shape}"
        raise n.fail(f"{what} must be a one-element tensor, got {got}")
    return bool(n.values(t).reshape(-1)[0])


def _tensor(n: Node, v: Any, what: str) -> Tensor:
    if not isinstance(v, Tensor):
        raise n.fail(f"{what} must be a tensor, got {'an empty optional' if v is None else 'a sequence'}")
    return v


def _sequence(n: Node, v: Any, what: str = "input 0") -> list[Tensor]:
    if not isinstance(v, list):
        raise n.fail(f"{what} must be a sequence, got {'an empty optional' if v is None else 'a tensor'}")
    return v


def _stack(n: Node, xs: list[Any], axis: int, what: str) -> Tensor:
    """``xs`` (tensors of one shape and dtype) stacked along a new axis ``axis``."""
    xs = [_tensor(n, x, what) for x in xs]
    first = xs[0]
    if any(x.shape != first.shape or x.dtype != first.dtype for x in xs):
        kinds = sorted({f"{x.shape} {np.dtype(x.dtype)}" for x in xs})
        raise n.fail(
            f"the {what} of the iterations differ in shape or type ({', '.join(kinds[:4])}): "
            "they cannot be stacked"
        )
    rank = first.ndim() + 1
    if not -rank <= axis < rank:
        raise n.fail(f"axis {axis} is out of range for stacking rank-{rank - 1} {what}")
    axis %= rank
    shape = [*first.shape]
    shape.insert(axis, len(xs))
    n.check_size(shape, first.dtype, what)
    return ops.cat([ops.unsqueeze(x, axis) for x in xs], axis)


def _position(n: Node, t: Tensor | None, size: int, default: int, insert: bool = False) -> int:
    """A sequence position in ``[-size, size - 1]`` (``[-size, size]`` to insert) as an index."""
    if t is None:
        return default
    if t.size() != 1 or np.dtype(t.dtype).kind not in "iu":
        raise n.fail(f"position must be one integer, got a {np.dtype(t.dtype)} tensor of shape {t.shape}")
    p = int(n.values(t).reshape(-1)[0])
    high = size if insert else size - 1
    if not -size <= p <= high:
        raise n.fail(f"position {p} is out of range for a sequence of {size} tensors")
    return p + size if p < 0 else p


# -- control flow ------------------------------------------------------------------------------
def If(n: Node, *args: Any) -> tuple:
    """The outputs of ``then_branch`` where ``cond`` holds, else of ``else_branch``."""
    (cond,), scope = outer_scope(n, args)
    branch = n.attrs["then_branch" if _flag(n, cond, "cond") else "else_branch"]
    return tuple(branch.call(scope, []))


def Loop(n: Node, *args: Any) -> tuple:
    """Run ``body`` while ``cond`` holds and fewer than ``M`` iterations ran (either may be
    omitted); loop-carried values pass from each iteration to the next, scan outputs are
    stacked along a new first axis."""
    (trip, cond, *carried), scope = outer_scope(n, args)
    body = n.attrs["body"]
    n_carried = len(carried)
    n_scan = len(body.outputs) - 1 - n_carried
    limit = None if trip is None else int(n.values(_tensor(n, trip, "M")).reshape(-1)[0])
    going = True if cond is None else _flag(n, cond, "cond")
    scans: list[list[Any]] = [[] for _ in range(n_scan)]
    held = 0  # bytes of the scan outputs kept so far
    i = 0
    with _budget() as counter:
        while going and (limit is None or i < limit):
            _tick(n, counter)
            outs = body.call(scope, [_new(n, i, np.int64), _new(n, going, np.bool_), *carried])
            going = _flag(n, outs[0], "the body's condition output")
            carried = outs[1 : 1 + n_carried]
            for k in range(n_scan):
                scans[k].append(outs[1 + n_carried + k])
                held += outs[1 + n_carried + k].nbytes() if isinstance(outs[1 + n_carried + k], Tensor) else 0
            _limits.check_total(n, held, n.limits, "the scan outputs of this loop")
            i += 1
    stacked = [
        _stack(n, s, 0, f"scan output {k}") if s else body.empty_output(1 + n_carried + k)
        for k, s in enumerate(scans)
    ]
    return tuple([*carried, *stacked][: n.n_outputs])


def _scan(
    n: Node,
    body: Any,
    scope: dict,
    states: list[Any],
    xs: list[Tensor],
    in_axes: list[int],
    in_dirs: list[int],
) -> tuple[list[Any], list[list[Any]]]:
    """Run ``body`` once per slice of ``xs`` along ``in_axes`` (reversed where ``in_dirs`` is
    1); returns the final states and each scan output's values, iteration by iteration."""
    axes = []
    for k, (x, axis) in enumerate(zip(xs, in_axes)):
        x = _tensor(n, x, f"scan input {k}")
        if not -x.ndim() <= axis < x.ndim():
            raise n.fail(f"scan_input_axes[{k}] = {axis} is out of range for an input of shape {x.shape}")
        axes.append(axis % x.ndim())
    lengths = {x.shape[a] for x, a in zip(xs, axes)}
    if len(lengths) > 1:
        raise n.fail(f"the scan inputs have different lengths along their scan axes: {sorted(lengths)}")
    steps = lengths.pop()
    _check_count(n, steps, "the scan length")
    slices = []
    for x, axis, d in zip(xs, axes, in_dirs):
        parts = [ops.squeeze(p, axis) for p in ops.split(x, axis, [1] * steps)] if steps else []
        slices.append(parts[::-1] if d else parts)
    n_scan = len(body.outputs) - len(states)
    outs_by_k: list[list[Any]] = [[] for _ in range(n_scan)]
    held = 0
    with _budget() as counter:
        for t in range(steps):
            _tick(n, counter)
            outs = body.call(scope, [*states, *(s[t] for s in slices)])
            states = outs[: len(states)]
            for k in range(n_scan):
                outs_by_k[k].append(outs[len(states) + k])
                held += outs[len(states) + k].nbytes() if isinstance(outs[len(states) + k], Tensor) else 0
            _limits.check_total(n, held, n.limits, "the scan outputs of this scan")
    return states, outs_by_k


def Scan(n: Node, *args: Any) -> tuple:
    """Run ``body`` along the scan axes of the scan inputs, carrying the state variables;
    scan outputs are stacked along ``scan_output_axes`` (reversed where their direction is 1).
    Opset 8's form (a batch axis first, ``directions``) runs each batch row in turn."""
    declared, scope = outer_scope(n, args)
    body = n.attrs["body"]
    m = n.attr("num_scan_inputs")
    if n.opset < 9:
        return _scan8(n, body, scope, declared, m)
    states, xs = declared[: len(declared) - m], declared[len(declared) - m :]
    n_scan = len(body.outputs) - len(states)
    in_axes = n.attr("scan_input_axes", [0] * m)
    in_dirs = n.attr("scan_input_directions", [0] * m)
    out_axes = n.attr("scan_output_axes", [0] * n_scan)
    out_dirs = n.attr("scan_output_directions", [0] * n_scan)
    states, outs_by_k = _scan(n, body, scope, states, xs, in_axes, in_dirs)
    stacked = []
    for k, values in enumerate(outs_by_k):
        if not values:
            stacked.append(body.empty_output(len(states) + k, out_axes[k]))
            continue
        stacked.append(_stack(n, values[::-1] if out_dirs[k] else values, out_axes[k], f"scan output {k}"))
    return tuple([*states, *stacked][: n.n_outputs])


def _scan8(n: Node, body: Any, scope: dict, declared: list[Any], m: int) -> tuple:
    """Scan before opset 9: axis 0 of every input is a batch, axis 1 the scan axis."""
    lens, rest = declared[0], declared[1:]
    states, xs = rest[: len(rest) - m], [_tensor(n, x, "scan input") for x in rest[len(rest) - m :]]
    batch = {v.shape[0] if v.ndim() else -1 for v in [*states, *xs]}
    if len(batch) != 1 or -1 in batch:
        raise n.fail(f"every input needs the same batch size on axis 0, got {sorted(batch)}")
    rows = batch.pop()
    _check_count(n, rows, "the batch size")
    if lens is not None:
        full = {int(v) for v in n.values(lens).reshape(-1)}
        if any(x.ndim() < 2 for x in xs) or full - {xs[0].shape[1]}:
            raise n.fail("sequence_lens shorter than the scan axis are not supported")
    dirs = n.attr("directions", [0] * m)
    per_row: list[list[Any]] = []
    for b in range(rows):
        row = [ops.squeeze(ops.slice(v, [b], [b + 1], [0]), 0) for v in [*states, *xs]]
        final, outs_by_k = _scan(n, body, scope, row[: len(states)], row[len(states) :], [0] * m, dirs)
        per_row.append([*final, *(_stack(n, v, 0, "scan output") for v in outs_by_k)])
    outs = [_stack(n, [r[k] for r in per_row], 0, "output") for k in range(len(body.outputs))]
    return tuple(outs[: n.n_outputs])


def SequenceMap(n: Node, *args: Any) -> tuple:
    """``body`` applied to the elements of the input sequences in turn (tensor inputs passed
    whole to every run); each output collected into a sequence."""
    declared, scope = outer_scope(n, args)
    body = n.attrs["body"]
    first = _sequence(n, declared[0])
    lengths = {len(v) for v in declared if isinstance(v, list)}
    if len(lengths) > 1:
        raise n.fail(f"the input sequences have different lengths: {sorted(lengths)}")
    outs: list[list[Any]] = [[] for _ in body.outputs]
    with _budget() as counter:
        for i in range(len(first)):
            _tick(n, counter)
            values = body.call(scope, [v[i] if isinstance(v, list) else v for v in declared])
            for k, v in enumerate(values):
                outs[k].append(_tensor(n, v, f"body output {k}"))
    return tuple(outs)


# -- sequences ---------------------------------------------------------------------------------
def SequenceEmpty(n: Node) -> tuple:
    return ([],)


def SequenceConstruct(n: Node, *xs: Tensor) -> tuple:
    return ([_tensor(n, x, "every input") for x in xs],)


def _same_type(n: Node, seq: list[Tensor], x: Tensor) -> None:
    if seq and np.dtype(seq[0].dtype) != np.dtype(x.dtype):
        raise n.fail(
            f"a {np.dtype(x.dtype)} tensor cannot join a sequence of {np.dtype(seq[0].dtype)} tensors"
        )


def SequenceInsert(n: Node, seq: Any, x: Any, position: Tensor | None = None) -> tuple:
    """A new sequence with ``x`` at ``position`` (default: at the end)."""
    seq, x = _sequence(n, seq), _tensor(n, x, "input 1")
    _same_type(n, seq, x)
    p = _position(n, position, len(seq), len(seq), insert=True)
    return ([*seq[:p], x, *seq[p:]],)


def SequenceAt(n: Node, seq: Any, position: Tensor) -> Tensor:
    seq = _sequence(n, seq)
    return seq[_position(n, position, len(seq), 0)]


def SequenceErase(n: Node, seq: Any, position: Tensor | None = None) -> tuple:
    """A new sequence without the tensor at ``position`` (default: the last)."""
    seq = _sequence(n, seq)
    p = _position(n, position, len(seq), len(seq) - 1)
    if not seq:
        raise n.fail("cannot erase from an empty sequence")
    return ([*seq[:p], *seq[p + 1 :]],)


def SequenceLength(n: Node, seq: Any) -> Tensor:
    return _new(n, len(_sequence(n, seq)), np.int64)


def SplitToSequence(n: Node, x: Any, split: Tensor | None = None) -> tuple:
    """``x`` split along ``axis`` into pieces of the sizes ``split`` gives (one size: equal
    chunks, the last smaller), or into pieces of 1 (squeezed unless ``keepdims``)."""
    x = _tensor(n, x, "input 0")
    axis = n.attr("axis", 0)
    if not -x.ndim() <= axis < x.ndim():
        raise n.fail(f"axis {axis} is out of range for an input of shape {x.shape}")
    axis %= x.ndim()
    size = x.shape[axis]
    if split is None:
        _check_count(n, size, "the number of tensors to split into")
        parts = ops.split(x, axis, [1] * size) if size else ()
        return ([ops.squeeze(p, axis) for p in parts] if not n.attr("keepdims", 1) else list(parts),)
    sizes = n.ints(split)
    if split.ndim() == 0:
        if sizes[0] < 1:
            raise n.fail(f"split {sizes[0]} must be positive")
        _check_count(n, size // sizes[0], "the number of tensors to split into")
        sizes = [sizes[0]] * (size // sizes[0]) + ([size % sizes[0]] if size % sizes[0] else [])
    if any(s < 0 for s in sizes) or sum(sizes) != size:
        raise n.fail(f"split sizes {sizes} must be non-negative and add up to the axis length {size}")
    return (list(ops.split(x, axis, sizes)) if sizes else [],)


def ConcatFromSequence(n: Node, seq: Any) -> Tensor:
    """The tensors of ``seq`` joined along ``axis`` (stacked along a new one with ``new_axis``)."""
    seq = _sequence(n, seq)
    if not seq:
        raise n.fail("cannot concatenate an empty sequence")
    axis = n.attr("axis")
    if axis is None:
        raise n.fail("attribute axis is required")
    if n.attr("new_axis", 0):
        return _stack(n, seq, axis, "sequence elements")
    rank = seq[0].ndim()
    if not -rank <= axis < rank:
        raise n.fail(f"axis {axis} is out of range for rank-{rank} tensors")
    n.check_size((sum(x.size() for x in seq),), max(x.dtype.itemsize for x in seq))
    return ops.cat(seq, axis % rank)


# -- optionals ---------------------------------------------------------------------------------
def Optional(n: Node, x: Any = None) -> tuple:
    """``x`` as an optional; without an input, an empty one."""
    return (x,)


def OptionalHasElement(n: Node, x: Any = None) -> Tensor:
    return _new(n, x is not None, np.bool_)


def OptionalGetElement(n: Node, x: Any) -> tuple:
    if x is None:
        raise n.fail("the optional is empty")
    return (x,)

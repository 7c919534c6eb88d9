"""ONNX export: a traced singa_lite graph written as an ONNX model.

Two ways to get the graph:

- ``to_onnx(inputs, outputs)`` (SINGA's API) walks the ``creator`` links back from
  ``outputs``; they exist when the forward pass ran with ``autograd.training`` on.
- ``export_model(model, inputs)`` (and ``Model.to_onnx``) runs ``model.forward`` once in
  inference behaviour under ``autograd.recording``, which notes every operator call, so neither the
  training flag nor ``requires_grad`` matter, and Dropout and BatchNorm are traced in their
  inference form.

Either way the operators reached from the outputs are converted one by one, in call order, by
the converter registered for their class (:mod:`~singa_lite.sonnx.export_ops`). Tensors that no
recorded operator produced become initializers: parameters and states under their own names
(``conv1.W``, ``bn1.running_mean``), other constants as ``const_<k>``. Shapes are those of the trace.

>>> import numpy as np
>>> from singa_lite import autograd, tensor
>>> x = tensor.from_numpy(np.ones((2, 3), np.float32))
>>> model = export_function(lambda a: autograd.relu(a * 2), [x])
>>> [n.op_type for n in model.graph.node]
['Mul', 'Relu']
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

import singa_lite
from singa_lite import _args, autograd, backend
from singa_lite.errors import OnnxError
from singa_lite.sonnx.export_ops import converter_for
from singa_lite.sonnx.export_ops.base import GraphBuilder, Value, onnx_dtype
from singa_lite.tensor import Tensor

MIN_OPSET = 11
DEFAULT_OPSET = min(onnx.defs.onnx_opset_version(), 28)
"""The newest opset of the installed ``onnx``, capped at the newest onnxruntime 1.32 runs."""


# -- the traced graph ----------------------------------------------------------------------------
class _Record:
    """One operator call: the op, the keys of its input and output values."""

    __slots__ = ("in_keys", "op", "out_keys")

    def __init__(self, op: Any, in_keys: list, out_keys: list) -> None:
        self.op, self.in_keys, self.out_keys = op, in_keys, out_keys


class _Trace:
    """Operator calls in call order, with the shape/dtype of every value and the leaf tensors.

    A value's key is ``id(tensor)`` on a tape; when walking creators, an op output is keyed
    by ``(id(op), index)`` because ops do not keep their output tensors.
    """

    def __init__(self) -> None:
        self.records: list[_Record] = []
        self.meta: dict[Any, tuple[tuple, np.dtype]] = {}
        self.leaves: dict[Any, Tensor] = {}
        self._keep: list = []  # holds the traced tensors alive so their ids stay unique
        self.by_creator = False

    @classmethod
    def from_tape(cls, tape: list[autograd.TapeEntry]) -> _Trace:
        tr = cls()
        for entry in tape:
            if not isinstance(entry, autograd.OpCall):  # an update step or a host read
                continue
            op, xs, ys = entry
            for t in (*xs, *ys):
                tr.meta[id(t)] = (tuple(t.shape), t.dtype)
                tr._keep.append(t)
            for x in xs:
                tr.leaves.setdefault(id(x), x)
            tr.records.append(_Record(op, [id(x) for x in xs], [id(y) for y in ys]))
        produced = {k for r in tr.records for k in r.out_keys}
        tr.leaves = {k: t for k, t in tr.leaves.items() if k not in produced}
        return tr

    @classmethod
    def from_creators(cls, outputs: Sequence[Tensor]) -> _Trace:
        tr = cls()
        tr.by_creator = True
        seen: set[int] = set()
        for y in outputs:
            tr.key(y)
            if y.creator is not None:
                tr._walk(y.creator, seen)
        return tr

    def key(self, t: Tensor) -> Any:
        """The key of tensor ``t`` (leaves met while walking creators are recorded)."""
        if not self.by_creator:
            self.meta.setdefault(id(t), (tuple(t.shape), t.dtype))
            self.leaves.setdefault(id(t), t)
            return id(t)
        if t.creator is None:
            self.meta[id(t)] = (tuple(t.shape), t.dtype)
            self.leaves[id(t)] = t
            self._keep.append(t)
            return id(t)
        return (id(t.creator), t._index)

    def _walk(self, root: Any, seen: set[int]) -> None:
        """Append ``root`` and every op it depends on, inputs before users (iterative DFS)."""
        stack = [(root, False)]
        while stack:
            op, expanded = stack.pop()
            if expanded:
                keys = [self.key(x) for x in op.inputs]
                outs = [(id(op), i) for i in range(len(op.out_meta))]
                for k, (shape, dtype) in zip(outs, op.out_meta):
                    self.meta[k] = (tuple(shape), np.dtype(dtype))
                self.records.append(_Record(op, keys, outs))
                continue
            if id(op) in seen:
                continue
            if not op.inputs and getattr(op, "out_meta", None) is not None:
                raise OnnxError(
                    f"to_onnx: the graph of {op.name} was released by a backward pass; "
                    "export before calling backward (or use export_model, which traces a fresh forward)"
                )
            seen.add(id(op))
            stack.append((op, True))
            for x in reversed(op.inputs):
                if x.creator is not None and id(x.creator) not in seen:
                    stack.append((x.creator, False))

    def needed(self, in_keys: list, out_keys: list) -> list[_Record]:
        """The records the outputs depend on, stopping at the graph inputs, in call order."""
        want = set(out_keys)
        stop = set(in_keys)
        kept = []
        for r in reversed(self.records):
            if any(k in want and k not in stop for k in r.out_keys):
                kept.append(r)
                want.update(r.in_keys)
        kept.reverse()
        return kept


# -- public API ----------------------------------------------------------------------------------
def to_onnx(
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    model_name: str = "singa_lite",
    opset: int | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
) -> onnx.ModelProto:
    """An ONNX model of the graph from ``inputs`` to ``outputs`` (SINGA's ``sonnx.to_onnx``).

    The graph is found by walking the ``creator`` links back from ``outputs``, so the forward
    pass must have run with ``autograd.training`` on (``Model.train()``) and before any
    backward. BatchNorm is written in its inference form (running statistics) and Dropout as
    ONNX Dropout, the identity at inference. For a model, ``export_model`` (or
    ``Model.to_onnx``) traces a fresh inference forward and needs neither.
    """
    inputs, outputs = _as_list(inputs), _as_list(outputs, "outputs")
    # An output without a recorded creator is exported as a constant: right for a param or
    # state (named by its layer), wrong for a value computed from the inputs.
    unrecorded = [
        f"output {i} {tuple(y.shape)}"
        for i, y in enumerate(outputs)
        if y.creator is None and y.is_dummy() and not any(y is x for x in inputs)
    ]
    if unrecorded:
        raise OnnxError(
            f"to_onnx: {', '.join(unrecorded)} was computed by no recorded operator, so it would "
            "export as a constant: operators are recorded only with autograd.training = True "
            "(model.train()) and when some input or param requires grad (Tensor(..., "
            "requires_grad=False) does not). Model.to_onnx() / sonnx.export_model(model) trace "
            "the forward themselves"
        )
    trace = _Trace.from_creators(outputs)
    return _build(trace, inputs, outputs, model_name, opset, input_names, output_names)


def export_function(
    fn: Callable[..., Any],
    inputs: Sequence[Tensor],
    model_name: str = "singa_lite",
    opset: int | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
) -> onnx.ModelProto:
    """Trace ``fn(*inputs)`` in inference behaviour and export it; ``fn`` may return a tensor
    or a (nested) list/tuple of tensors, which become the graph outputs in order."""
    inputs = _as_list(inputs)
    out, tape = trace_call(fn, inputs)
    outputs = _flatten(out)
    if not outputs:
        raise OnnxError(f"export: {getattr(fn, '__name__', fn)!r} returned no tensors")
    return _build(_Trace.from_tape(tape), inputs, outputs, model_name, opset, input_names, output_names)


def export_model(
    model: Any,
    inputs: Sequence[Tensor] | None = None,
    model_name: str | None = None,
    opset: int | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
) -> onnx.ModelProto:
    """Export ``model.forward`` traced on ``inputs`` (default: zero placeholders of the shapes
    and dtypes given to ``model.compile``) in inference behaviour.

    Parameters and states become initializers named by their paths (``conv1.W``), so the
    exported model imports back (``sonnx.SONNXModel``) with the same state names.
    """
    if inputs is None:
        specs = getattr(model, "_input_specs", None)
        if not specs:
            raise OnnxError(
                f"export: {type(model).__name__} has not been compiled; pass example inputs "
                "or call model.compile(placeholders) first"
            )
        dev = _model_device(model)
        inputs = [Tensor(shape, dev, dtype, requires_grad=False) for shape, dtype in specs]
    if hasattr(model, "get_states"):
        model.get_states()  # settle every tensor's name from its attribute path
    name = model_name or type(model).__name__
    return export_function(model.forward, inputs, name, opset, input_names, output_names)


def trace_call(fn: Callable[..., Any], inputs: Sequence[Tensor]) -> tuple[Any, list]:
    """Run ``fn(*inputs)`` in inference behaviour, recording every operator call.

    Returns ``(result, tape)``; the tape lists an ``autograd.OpCall`` per operator call.
    """
    tape: list[autograd.TapeEntry] = []
    with autograd.recording(tape), autograd.training_mode(False):
        out = fn(*inputs)
    return out, tape


def _model_device(model: Any) -> Any:
    states = model.get_states() if hasattr(model, "get_states") else {}
    for t in states.values():
        return t.device
    from singa_lite import device

    return device.get_default_device()


def _as_list(ts: Any, name: str = "inputs") -> list[Tensor]:
    """``ts`` (a Tensor or a sequence of them) as a list, or ``ArgumentError`` naming ``name``."""
    if isinstance(ts, Tensor):
        return [ts]
    if not isinstance(ts, (list, tuple)) or not all(isinstance(t, Tensor) for t in ts):
        raise _args.bad("to_onnx", name, "be a Tensor or a list of Tensors", ts)
    return list(ts)


def _flatten(out: Any) -> list[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _flatten(o)]
    return []


def resolve_opset(opset: int | None) -> int:
    """``opset`` checked against what the converters and the installed ``onnx`` support."""
    if opset is None:
        return DEFAULT_OPSET
    opset = _args.integer("to_onnx", "opset", opset)
    newest = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= opset <= newest:
        raise OnnxError(f"to_onnx: opset {opset} is not supported; use {MIN_OPSET} to {newest}")
    return int(opset)


def _build(
    trace: _Trace,
    inputs: list[Tensor],
    outputs: list[Tensor],
    model_name: str,
    opset: int | None,
    input_names: Sequence[str] | None,
    output_names: Sequence[str] | None,
) -> onnx.ModelProto:
    _args.instance("to_onnx", "model_name", model_name, str, "a string")
    g = GraphBuilder(resolve_opset(opset))
    in_keys = [trace.key(t) for t in inputs]
    out_keys = [trace.key(t) for t in outputs]
    names: dict[Any, str] = {}
    graph_inputs = []
    in_names = list(input_names) if input_names else [f"input_{i}" for i in range(len(inputs))]
    if len(in_names) != len(inputs):
        raise _args.bad("to_onnx", "input_names", f"name each of the {len(inputs)} inputs", in_names)
    for k, t, name in zip(in_keys, inputs, in_names):
        if k in names:
            raise OnnxError("to_onnx: the same tensor is given twice as an input")
        names[k] = g.claim(name)
        graph_inputs.append(helper.make_tensor_value_info(names[k], onnx_dtype(t.dtype), list(t.shape)))
    out_names = list(output_names) if output_names else [f"output_{i}" for i in range(len(outputs))]
    if len(out_names) != len(outputs):
        raise _args.bad("to_onnx", "output_names", f"name each of the {len(outputs)} outputs", out_names)

    records = trace.needed(in_keys, out_keys)
    produced = {k for r in records for k in r.out_keys}
    # An output produced by an op takes the output's name directly (the first time it appears).
    for k, name in zip(out_keys, out_names):
        if k in produced and k not in names:
            names[k] = g.claim(name)
    # Op functions may re-wrap an input's array in a new Tensor (integer indices do): a leaf
    # holding the very array of a graph input or of an earlier leaf is that value.
    by_data = {id(t.data): names[k] for k, t in zip(in_keys, inputs)}
    for r in records:
        for k in r.in_keys:
            if k not in names:
                leaf = trace.leaves[k]
                names[k] = by_data.get(id(leaf.data)) or _leaf(g, leaf)
                by_data.setdefault(id(leaf.data), names[k])
        for i, k in enumerate(r.out_keys):
            if k not in names:
                names[k] = g.fresh(f"{type(r.op).__name__}" + (f"_out{i}" if len(r.out_keys) > 1 else ""))
        xs = [Value(names[k], *trace.meta[k]) for k in r.in_keys]
        ys = [Value(names[k], *trace.meta[k]) for k in r.out_keys]
        converter_for(r.op, g.opset)(g, r.op, xs, ys)

    graph_outputs = []
    for k, t, name in zip(out_keys, outputs, out_names):
        if k not in names:  # an output that is a parameter or constant
            names[k] = _leaf(g, trace.leaves.get(k, t))
        src = names[k]
        if src != name:  # an input, a leaf, or an output listed twice: copy it under its name
            src = g.one("Identity", [src], g.claim(name))
        shape, dtype = trace.meta.get(k, (tuple(t.shape), t.dtype))
        graph_outputs.append(helper.make_tensor_value_info(src, onnx_dtype(dtype), list(shape)))

    graph = helper.make_graph(g.nodes, model_name, graph_inputs, graph_outputs, g.initializers)
    opset_id = helper.make_opsetid("", g.opset)
    model = helper.make_model(
        graph,
        opset_imports=[opset_id],
        producer_name="singa_lite",
        producer_version=singa_lite.__version__,
    )
    model.ir_version = helper.find_min_ir_version_for([opset_id])
    # Which initializers were trainable params and which other states, so an importer can
    # restore the split exactly (SONNXModel otherwise infers it from where they are used).
    for role in ("param", "state"):
        listed = [n for n, r in g.roles.items() if r == role]
        helper.set_model_props(model, {**_props(model), f"singa_lite.{role}s": json.dumps(listed)})
    return model


def _props(model: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def _leaf(g: GraphBuilder, t: Tensor) -> str:
    """An initializer for a tensor no recorded op produced: named after it when it has a name."""
    arr = backend.to_host(t.data)
    if t.is_dummy():
        return g.const(arr)
    name = g.initializer(arr, t.name)
    g.roles[name] = "param" if t.stores_grad else "state"
    return name


__all__ = [
    "DEFAULT_OPSET",
    "MIN_OPSET",
    "export_function",
    "export_model",
    "resolve_opset",
    "to_onnx",
    "trace_call",
]

"""Checks of an ONNX model against the operator schemas that ``onnx.checker`` leaves out.

The checker verifies structure (names, attribute kinds, input counts). What it lets through,
and onnxruntime refuses, is refused here with an ``OnnxError`` naming the node, input or tensor:

- the model: two default-domain opset imports; a graph input or output of an element type
  that does not exist (0, 999);
- each node, once, at prepare time: the subgraphs of ``If``, ``Loop``, ``Scan`` and
  ``SequenceMap`` against the node (inputs and outputs they must take and give, scan axes
  and directions); an operator version older than the ones the handlers
  implement (the model's opset resolves to an operator definition from before opset 7 that
  later changed, as onnxruntime does); attribute values out of their schema's range (strides,
  dilations, kernel_shape, group, pads, LSTM ``direction``, BatchNormalization
  ``training_mode`` without the running statistics it must output...);
- each node, at every run, its input *types* against the schema's type constraints: inputs
  bound to one type parameter must agree (a float ``Gemm`` with an int64 weight), and each type
  must be one the parameter allows (float ``Slice`` starts). Element types held in a wider one
  (``import_ops.base.storage_dtype``) are compared as held.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper

from singa_lite.errors import OnnxError, SingaLiteError, UnsupportedOperatorError
from singa_lite.sonnx.import_ops.base import Node, storage_dtype

MIN_OPSET = 7
"""The handlers implement operator definitions from this opset on; an older definition that
changed before it is refused (``onnx.version_converter`` upgrades such a model)."""

_DEFAULT_DOMAINS = ("", "ai.onnx")
_KNOWN_TYPES = frozenset(v for v in TensorProto.DataType.values() if v != TensorProto.UNDEFINED)


# -- the model -------------------------------------------------------------------------------------
def check_model(proto: ModelProto) -> None:
    """Model-level checks: opset imports and the element types of graph inputs and outputs."""
    seen: dict[str, int] = {}
    for o in proto.opset_import:
        domain = "" if o.domain in _DEFAULT_DOMAINS else o.domain
        if domain in seen:
            raise OnnxError(
                f"the model imports the {o.domain or 'ai.onnx'} opset twice (versions {seen[domain]} and "
                f"{o.version}): which one applies is ambiguous"
            )
        seen[domain] = o.version
    graph = proto.graph
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for v in values:
            if v.type.WhichOneof("value") != "tensor_type":
                continue
            code = v.type.tensor_type.elem_type
            if code not in _KNOWN_TYPES:
                raise OnnxError(
                    f"graph {kind} {v.name!r} has element type {code}, which ONNX does not define"
                )


# -- each node at prepare time ---------------------------------------------------------------------
@functools.cache
def _schema(op: str, opset: int) -> Any:
    try:
        return onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None


def check_version(node: Node) -> None:
    """Refuse an operator whose definition at the model's opset predates the handlers'."""
    if node.opset >= MIN_OPSET:
        return
    old, base = _schema(node.op, node.opset), _schema(node.op, MIN_OPSET)
    if old is not None and base is not None and old.since_version != base.since_version:
        raise UnsupportedOperatorError(
            f"{node}: opset {node.opset} gives {node.op} version {old.since_version}, older than the "
            f"versions singa_lite implements (those of opset {MIN_OPSET} on, here version "
            f"{base.since_version}); convert the model with onnx.version_converter"
        )


def _positive(node: Node, name: str) -> None:
    vals = node.attr(name)
    if vals is not None and any(v < 1 for v in (vals if isinstance(vals, list) else [vals])):
        raise node.fail(f"attribute {name} = {vals} must be positive")


def _non_negative(node: Node, name: str) -> None:
    vals = node.attr(name)
    if vals is not None and any(v < 0 for v in (vals if isinstance(vals, list) else [vals])):
        raise node.fail(f"attribute {name} = {vals} must not be negative")


def _one_of(node: Node, name: str, allowed: Sequence[Any]) -> None:
    value = node.attr(name)
    if value is not None and value not in allowed:
        raise node.fail(f"attribute {name} = {value!r} must be one of {', '.join(map(repr, allowed))}")


def _window(node: Node) -> None:
    for name in ("kernel_shape", "strides", "dilations", "group"):
        _positive(node, name)
    _non_negative(node, "pads")
    _non_negative(node, "output_padding")
    _one_of(node, "auto_pad", ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"))
    k = node.attr("kernel_shape")
    for name in ("strides", "dilations", "output_padding"):
        v = node.attr(name)
        if k is not None and v is not None and len(v) != len(k):
            raise node.fail(f"attribute {name} = {v} needs one value per kernel axis ({len(k)})")
    pads = node.attr("pads")
    if k is not None and pads is not None and len(pads) != 2 * len(k):
        raise node.fail(f"attribute pads = {pads} needs {2 * len(k)} values (a begin and an end per axis)")


def _recurrent(node: Node) -> None:
    _one_of(node, "direction", ("forward", "reverse", "bidirectional"))
    _positive(node, "hidden_size")
    _one_of(node, "layout", (0, 1))


def _batch_norm(node: Node) -> None:
    _one_of(node, "training_mode", (0, 1))
    if node.opset >= 14 and node.attr("training_mode", 0) and node.n_outputs != 3:
        raise node.fail(
            f"training_mode=1 computes the running statistics: the node must have 3 outputs "
            f"(Y, running_mean, running_var), it has {node.n_outputs}"
        )
    if node.opset >= 14 and not node.attr("training_mode", 0) and node.n_outputs > 1:
        raise node.fail("with training_mode=0 the node has one output, Y")


def _lrn(node: Node) -> None:
    _positive(node, "size")


def _depth_to_space(node: Node) -> None:
    _positive(node, "blocksize")
    _one_of(node, "mode", ("DCR", "CRD"))


def _space_to_depth(node: Node) -> None:
    _positive(node, "blocksize")


def _gemm(node: Node) -> None:
    _one_of(node, "transA", (0, 1))
    _one_of(node, "transB", (0, 1))


def _topk(node: Node) -> None:
    _one_of(node, "largest", (0, 1))
    _one_of(node, "sorted", (0, 1))


def _graph(node: Node, name: str) -> Any:
    """The ``GraphProto`` of the graph attribute ``name``."""
    a = node.attrs.get(name)
    if getattr(a, "type", None) != onnx.AttributeProto.GRAPH:
        raise node.fail(f"attribute {name} must be a graph")
    return a.g  # type: ignore[union-attr]


def _if(node: Node) -> None:
    for name in ("then_branch", "else_branch"):
        g = _graph(node, name)
        if len(g.input) or len(g.output) != node.n_outputs:
            raise node.fail(
                f"{name} must take no inputs and give the node's {node.n_outputs} outputs; it takes "
                f"{len(g.input)} and gives {len(g.output)}"
            )


def _loop(node: Node) -> None:
    g = _graph(node, "body")
    carried = len(node.inputs) - 2
    if carried < 0 or len(g.input) != carried + 2 or len(g.output) < carried + 1:
        raise node.fail(
            f"body must take the iteration number, the condition and the {max(carried, 0)} loop-carried "
            f"values, and give the condition and those values first; it takes {len(g.input)} inputs and "
            f"gives {len(g.output)} outputs"
        )
    if node.n_outputs > len(g.output) - 1:
        raise node.fail(f"the node has {node.n_outputs} outputs, its body gives {len(g.output) - 1}")


def _scan(node: Node) -> None:
    g = _graph(node, "body")
    m = node.attr("num_scan_inputs")
    declared = len(node.inputs) - (1 if node.opset < 9 else 0)  # opset 8: sequence_lens first
    if not isinstance(m, int) or not 1 <= m <= declared or len(g.input) != declared:
        raise node.fail(
            f"num_scan_inputs = {m} must be in [1, {declared}] and the body must take the node's {declared} "
            f"state and scan inputs; it takes {len(g.input)}"
        )
    states, n_scan = declared - m, len(g.output) - (declared - m)
    if n_scan < 0 or node.n_outputs > len(g.output):
        raise node.fail(
            f"the body gives {len(g.output)} outputs for {states} states and the node's {node.n_outputs}"
        )
    for name, count in (("scan_input_axes", m), ("scan_input_directions", m), ("directions", m),
                        ("scan_output_axes", n_scan), ("scan_output_directions", n_scan)):  # fmt: skip
        v = node.attr(name)
        if v is not None and len(v) != count:
            raise node.fail(f"attribute {name} = {v} needs {count} values")
        if v is not None and "directions" in name and any(d not in (0, 1) for d in v):
            raise node.fail(f"attribute {name} = {v} must hold 0 (forward) or 1 (reverse)")


def _sequence_map(node: Node) -> None:
    g = _graph(node, "body")
    if len(g.input) != len(node.inputs) or len(g.output) != node.n_outputs:
        raise node.fail(
            f"body must take the node's {len(node.inputs)} inputs and give its {node.n_outputs} outputs; it "
            f"takes {len(g.input)} and gives {len(g.output)}"
        )


_ATTRIBUTE_CHECKS = {
    "Conv": _window,
    "ConvTranspose": _window,
    "MaxPool": _window,
    "AveragePool": _window,
    "LpPool": _window,
    "LSTM": _recurrent,
    "GRU": _recurrent,
    "RNN": _recurrent,
    "BatchNormalization": _batch_norm,
    "LRN": _lrn,
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth,
    "Gemm": _gemm,
    "TopK": _topk,
    "If": _if,
    "Loop": _loop,
    "Scan": _scan,
    "SequenceMap": _sequence_map,
}


def check_attributes(node: Node) -> None:
    """Attribute values against the ranges the operator's schema gives them."""
    fn = _ATTRIBUTE_CHECKS.get(node.op)
    if fn is not None:
        fn(node)


# -- input types, at every run ---------------------------------------------------------------------
_TYPE_NAMES = {name.lower(): code for name, code in TensorProto.DataType.items()}


@functools.cache
def _held(type_str: str) -> frozenset | None:
    """The singa_lite dtypes that hold the ONNX types ``type_str`` names ("tensor(float)"), or
    ``None`` for a type that is not a plain tensor (sequences, optionals: not checked)."""
    if not (type_str.startswith("tensor(") and type_str.endswith(")")):
        return None
    code = _TYPE_NAMES.get(type_str[7:-1])
    if code is None:
        return frozenset()
    try:
        return frozenset([storage_dtype(helper.tensor_dtype_to_np_dtype(code))])
    except (SingaLiteError, KeyError, TypeError, ValueError):
        return frozenset()  # a type singa_lite cannot hold (string): nothing of it will come


class InputTypes:
    """A node's type constraints, resolved once: the input positions bound to each type
    parameter and the dtypes (as held) each may have."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.allowed: list[tuple[int, frozenset, str]] = []
        self.groups: list[tuple[int, ...]] = []
        self.positions: list[int] = []  # the constrained input positions
        schema = _schema(node.op, node.opset)
        if schema is None or not schema.inputs:
            return
        constraints = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
        formal = schema.inputs
        bound: dict[str, list[int]] = {}
        for i, name in enumerate(node.inputs):
            if not name:
                continue
            if i < len(formal):
                param = formal[i]
            elif formal[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
                param = formal[-1]
                if not param.is_homogeneous:
                    continue
            else:
                continue
            type_str = param.type_str
            held: set = set()
            for t in constraints.get(type_str, [type_str]):
                h = _held(t)
                if h is None:
                    held = set()
                    break
                held |= h
            if held:
                self.allowed.append((i, frozenset(held), type_str))
            if type_str in constraints:
                bound.setdefault(type_str, []).append(i)
        self.groups = [tuple(v) for v in bound.values() if len(v) > 1]
        self.positions = sorted({i for i, _, _ in self.allowed} | {i for g in self.groups for i in g})

    def check(self, args: Sequence[Any]) -> None:
        """Raise ``OnnxError`` naming the node and input if ``args`` break the constraints.

        The answer follows from the dtypes at the constrained positions alone, so the dtypes
        that passed last time are remembered: a run of the same model checks a tuple."""
        try:
            key: tuple | None = tuple([args[i].dtype for i in self.positions])
        except (AttributeError, IndexError):  # an empty optional, a sequence, an omitted input
            key = None
        if key is not None and key == self._passed:
            return
        self._check(args)
        self._passed = key

    _passed: tuple | None = None

    def _check(self, args: Sequence[Any]) -> None:
        n = len(args)
        for i, held, type_str in self.allowed:
            a = args[i] if i < n else None
            if a is not None and not hasattr(a, "dtype"):  # a sequence (list) where a tensor belongs
                raise OnnxError(
                    f"{self.node}: input {i} ({self.node.inputs[i]!r}) is a sequence, where {type_str} of "
                    f"{self.node.op} (opset {self.node.opset}) takes a tensor"
                )
            if a is not None and a.dtype not in held:
                raise OnnxError(
                    f"{self.node}: input {i} ({self.node.inputs[i]!r}) has element type {np.dtype(a.dtype)}, "
                    f"which {type_str} of {self.node.op} does not allow"
                )
        for group in self.groups:
            present = [(i, args[i]) for i in group if i < n and hasattr(args[i], "dtype")]
            if len({a.dtype for _, a in present}) > 1:
                types = ", ".join(f"{self.node.inputs[i]!r}: {np.dtype(a.dtype)}" for i, a in present)
                raise OnnxError(
                    f"{self.node}: inputs bound to one type parameter have different types ({types})"
                )

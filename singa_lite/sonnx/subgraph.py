"""Subgraphs: the graph attributes of ``If``, ``Loop``, ``Scan`` and ``SequenceMap``.

A subgraph is compiled when its node is, as a :class:`Subgraph` (a ``Program`` of its own): its
nodes are checked and their handlers resolved as the main graph's are, nested subgraphs in
turn, at most ``Limits.max_graph_depth`` deep. Its nodes are named by their path
(``If_3/then_branch/Conv_7``), so every error raised in one says where it happened.

A subgraph may read any value of the scopes around it (ONNX's outer-scope names). The names a
subgraph and its own subgraphs read from outside are appended to the node's inputs
(``Node.captured``): the enclosing program keeps those values alive until the node has run,
counts the node as their reader, and passes their values to the handler after the declared
inputs. The handler runs the body with :meth:`Subgraph.call` as eagerly as the main graph, so
autograd records every op of the branch taken and of every loop iteration, and a
``SONNXModel``'s params read inside a body get their gradients.

Values inside a program are Tensors, lists of Tensors (ONNX sequences) or ``None`` (an empty
optional).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from onnx import AttributeProto, GraphProto, NodeProto

from singa_lite.errors import OnnxError
from singa_lite.sonnx.import_ops.base import Node, proto_array
from singa_lite.sonnx.importer import Program, _elem_dtype, _input_spec, value_kind

RANDOM_OPS = frozenset(
    [
        "Dropout",
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    ]
)
"""Operators whose results differ from run to run: a subgraph holding one is never folded."""


class Subgraph(Program):
    """A graph attribute compiled for the node at ``path`` inside ``parent``; ``outer`` names
    the values visible around it. ``captured`` lists the outer names it reads."""

    def __init__(self, graph: GraphProto, parent: Program, path: str, outer: set[str]) -> None:
        self.device, self.limits = parent.device, parent.limits
        self.opset, self.domain_opsets = parent.opset, parent.domain_opsets
        self.path, self.depth = path, parent.depth + 1
        self.declared = getattr(parent, "declared", {})  # element types the model declares
        if self.depth > self.limits.max_graph_depth:
            raise OnnxError(
                f"subgraph {path!r} is nested {self.depth} deep, over Limits.max_graph_depth = "
                f"{self.limits.max_graph_depth}"
            )
        self.initializers = {t.name: t for t in graph.initializer}
        self.inputs = [v.name for v in graph.input]
        self.input_kinds = {v.name: value_kind(v.type, f"{path}: input {v.name!r}") for v in graph.input}
        self.input_specs = {}
        self.outputs = [v.name for v in graph.output]
        self.output_types = [_elem_dtype(v) for v in graph.output]
        self.output_specs = [_input_spec(v) for v in graph.output]
        for v in graph.output:
            value_kind(v.type, f"{path}: output {v.name!r}")
        self.constants = {
            name: self.tensor(proto_array(t, f"{path}: initializer"), name)
            for name, t in self.initializers.items()
        }
        known = set(outer) | set(self.inputs) | set(self.initializers)
        self._compile(graph.node, known)
        missing = [o for o in self.outputs if o not in known]
        if missing:
            raise OnnxError(
                f"subgraph {path!r}: outputs {missing} are produced by no node, input or outer value"
            )
        defined = set(self.inputs) | set(self.constants) | {o for n in self.nodes for o in n.outputs}
        reads = [name for n in self.nodes for name in n.inputs] + self.outputs
        self.captured = list(dict.fromkeys(name for name in reads if name and name not in defined))
        self.random = any(
            n.op in RANDOM_OPS or any(getattr(a, "random", False) for a in n.attrs.values())
            for n in self.nodes
        )
        self.concat_shapes: dict[str, tuple] = {}
        self.shape_inputs: dict[str, tuple] = {}

    def __repr__(self) -> str:
        return f"subgraph {self.path!r}"

    def call(self, scope: Mapping[str, Any], inputs: Sequence[Any]) -> list[Any]:
        """Run the body on ``inputs`` (its formal inputs, in order) with the outer values
        ``scope`` visible; returns its outputs."""
        if len(inputs) != len(self.inputs):
            raise OnnxError(f"{self}: takes {len(self.inputs)} inputs, was given {len(inputs)}")
        feeds = dict(scope)
        feeds.update(zip(self.inputs, inputs))
        return self.run(feeds)

    def empty_output(self, k: int, axis: int = 0) -> Any:
        """Output ``k`` stacked over zero iterations: an empty tensor of its declared type and
        dims (the dims unknown: shape ``(0,)``)."""
        dtype, dims = self.output_specs[k]
        shape: list[int] = [0]
        if dims is not None and all(d is not None for d in dims) and -len(dims) - 1 <= axis <= len(dims):
            shape = [int(d) for d in dims]  # type: ignore[arg-type]
            shape.insert(axis % (len(dims) + 1), 0)
        return self.tensor(np.zeros(shape, dtype or np.float32), self.outputs[k])


def attach(program: Program, node: Node, known: set[str]) -> None:
    """Compile ``node``'s graph attributes (in place of their protos) as subgraphs of
    ``program`` and append the outer names they read to its inputs (``node.captured``)."""
    captured: list[str] = []
    for name, a in list(node.attrs.items()):
        if not isinstance(a, AttributeProto):
            continue
        if a.type == AttributeProto.GRAPHS:
            raise node.fail(
                f"attribute {name!r} holds a list of graphs, which no ONNX operator singa_lite runs takes"
            )
        if a.type != AttributeProto.GRAPH:
            continue
        sub = Subgraph(a.g, program, f"{node.name}/{name}", known)
        node.attrs[name] = sub
        captured += [c for c in sub.captured if c not in captured]
    node.captured = captured
    node.inputs = [*node.inputs, *captured]


def all_nodes(graph: GraphProto) -> Iterator[NodeProto]:
    """The nodes of ``graph`` and of every subgraph in it (depth first)."""
    stack = [graph]
    while stack:
        g = stack.pop()
        for n in g.node:
            yield n
            for a in n.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)

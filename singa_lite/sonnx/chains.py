"""The elementwise rewrites of :mod:`~singa_lite.sonnx.fusion`'s passes: ``ElementwiseChains``
(PyTorch's exported SiLU and HardSwish chains and a residual Add + Relu, one node each) and the
in-place handler that ``InPlace`` swaps in for a Relu or a residual Add, which the chains take
over; with the readers map both kinds of pass use.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from singa_lite import backend, ops
from singa_lite.backend import cpu_kernels
from singa_lite.ops import activation, conv_infer
from singa_lite.sonnx.import_ops import HANDLERS
from singa_lite.sonnx.import_ops.base import Node
from singa_lite.tensor import Tensor

if TYPE_CHECKING:
    from singa_lite.sonnx.importer import Program


def drop_nodes(program: Program, dropped: set[int]) -> None:
    """Remove nodes ``dropped`` (indices) from ``program``, with their handlers and fold flags."""
    keep = [k for k in range(len(program.nodes)) if k not in dropped]
    program.nodes = [program.nodes[k] for k in keep]
    program.handlers = [program.handlers[k] for k in keep]
    program.folded = [program.folded[k] for k in keep]


def _readers(program: Program) -> dict[str, list[int]]:
    """The indices of the nodes that read each tensor name (once per input slot)."""
    readers: dict[str, list[int]] = {}
    for k, node in enumerate(program.nodes):
        for name in node.inputs:
            readers.setdefault(name, []).append(k)
    return readers


class _InPlaceHandler:
    """``fn`` (Relu, or Add/Sum) writing its result into its input at ``slot`` (see ``InPlace``)."""

    def __init__(self, fn: Callable, op: str, slot: int) -> None:
        self.fn, self.op, self.slot = fn, op, slot

    def __call__(self, node: Node, *args: Tensor) -> Tensor:
        x = args[self.slot]
        a = x.data
        if a.dtype.kind != "f":
            return self.fn(node, *args)
        xp = x.device.xp
        if self.op == "Relu":
            conv_infer.clamp_(xp, a, (0.0, math.inf))  # compiled where it takes a: 2-6x NumPy's
            return x
        other = args[1 - self.slot]
        if other.shape != x.shape or other.dtype != x.dtype:  # broadcasting would change the shape
            return self.fn(node, *args)
        xp.add(a, other.data, out=a)
        return x


class ElementwiseChains:
    """Chains of elementwise nodes that PyTorch exports for one activation, run as one node.

    - SiLU: ``Mul(x, Sigmoid(x))``;
    - HardSwish: ``Mul(x, HardSigmoid(x))``, and ``x * Clip(x + 3, 0, 6) / 6`` (also with the
      division before the product, or a product by ``1/6``), MobileNetV3's hand-written form;
    - ``Relu(Add(a, b))``: a residual sum and its activation in one pass.

    A chain is fused only where each intermediate is read by the next node alone and is not a
    graph output, and each node has the plain handler (or, for Add and Relu, the in-place
    one): the fused node takes the last node's place and outputs, the others are dropped. Its
    handler runs the original nodes where the inputs are not floats.
    """

    name = "elementwise_chains"

    def run(self, program: Program) -> None:
        self.program = program
        self.readers = _readers(program)
        self.dropped: set[int] = set()
        for k, node in enumerate(program.nodes):
            if k in self.dropped or program.folded[k]:
                continue
            if node.op == "Sigmoid" and program.handlers[k] is HANDLERS["Sigmoid"]:
                self._times_x(k, _SiLU)
            elif node.op == "HardSigmoid" and program.handlers[k] is HANDLERS["HardSigmoid"]:
                self._times_x(k, _HardSwish, node.attr("alpha", 0.2), node.attr("beta", 0.5))
            elif node.op == "Add" and len(node.inputs) == 2 and node.n_outputs == 1:
                if program.handlers[k] is HANDLERS["Add"]:
                    self._hard_swish_by_hand(k)
                if k not in self.dropped:
                    self._add_relu(k)
        drop_nodes(program, self.dropped)

    def _next(self, k: int, op: str | None = None, plain: bool = True) -> int | None:
        """The one reader of node ``k``'s one output, if the output is no graph output and the
        reader is an ``op`` node (any, where ``None``) with the plain handler (where ``plain``)."""
        node = self.program.nodes[k]
        if len(node.outputs) != 1 or node.outputs[0] in self.program.outputs:
            return None
        ks = self.readers.get(node.outputs[0], [])
        if len(ks) != 1 or ks[0] in self.dropped or self.program.folded[ks[0]]:
            return None
        reader = self.program.nodes[ks[0]]
        if (op is not None and reader.op != op) or reader.n_outputs != 1:
            return None
        if plain and self.program.handlers[ks[0]] is not HANDLERS.get(reader.op):
            return None
        return ks[0]

    def _fuse(self, chain: list[int], inputs: list[str], handler: Any) -> None:
        """Node ``chain[-1]`` becomes one node of ``inputs`` run by ``handler``; the others go."""
        last = self.program.nodes[chain[-1]]
        new = copy.copy(self.program.nodes[chain[0]])  # the first node's checks and name
        new.inputs, new.outputs = list(inputs), list(last.outputs)
        self.program.nodes[chain[-1]], self.program.handlers[chain[-1]] = new, handler
        self.dropped.update(chain[:-1])

    def _steps(self, chain: list[int]) -> list[tuple[Node, Callable]]:
        return [(self.program.nodes[k], self.program.handlers[k]) for k in chain]

    def _times_x(self, k: int, kind: type[_Chain], *args: float) -> None:
        """``Mul(x, f(x))`` with ``f`` node ``k`` of input ``x``: one ``kind(steps, *args)`` node."""
        x = self.program.nodes[k].inputs[0]
        m = self._next(k, "Mul")
        if m is not None and self._times(m, self.program.nodes[k].outputs[0], x):
            self._fuse([k, m], [x], kind(self._steps([k, m]), *args))

    def _add_relu(self, k: int) -> None:
        if not _plain_or_in_place(self.program.handlers[k], "Add"):
            return
        r = self._next(k, "Relu", plain=False)
        if r is not None and _plain_or_in_place(self.program.handlers[r], "Relu"):
            self._fuse([k, r], list(self.program.nodes[k].inputs), _AddRelu(self._steps([k, r])))

    def _hard_swish_by_hand(self, k: int) -> None:
        """``x * Clip(x + 3, 0, 6) / 6`` (or ``x * (Clip(x + 3, 0, 6) / 6)``) from node ``k``, the Add."""
        add = self.program.nodes[k]
        if len(add.inputs) != 2 or [self._scalar(i) for i in add.inputs].count(3.0) != 1:
            return
        x = add.inputs[0] if self._scalar(add.inputs[1]) == 3.0 else add.inputs[1]
        c = self._next(k, "Clip")
        if c is None or clip_bounds(self.program, self.program.nodes[c]) != (0.0, 6.0):
            return
        first = self._next(c)
        second = None if first is None else self._next(first)
        if second is None:
            return
        assert first is not None
        clipped, mid = self.program.nodes[c].outputs[0], self.program.nodes[first].outputs[0]
        if (self._times(first, clipped, x) and self._sixth(second, mid)) or (
            self._sixth(first, clipped) and self._times(second, mid, x)
        ):
            self._fuse([k, c, first, second], [x], _HardSwish(self._steps([k, c, first, second]), 1 / 6, 0.5))

    def _times(self, k: int, value: str, x: str) -> bool:
        """Whether node ``k`` is ``value * x``."""
        node = self.program.nodes[k]
        return node.op == "Mul" and sorted(node.inputs) == sorted([value, x])

    def _sixth(self, k: int, value: str) -> bool:
        """Whether node ``k`` is ``value / 6`` or ``value * (1/6)``."""
        node = self.program.nodes[k]
        if len(node.inputs) != 2 or value not in node.inputs:
            return False
        if node.op == "Div":
            return node.inputs[0] == value and self._scalar(node.inputs[1]) == 6.0
        other = self._scalar(node.inputs[1 - node.inputs.index(value)])
        return node.op == "Mul" and other is not None and abs(other - 1 / 6) < 1e-7

    def _scalar(self, name: str) -> float | None:
        return scalar_constant(self.program, name)


def scalar_constant(program: Program, name: str) -> float | None:
    """The value of a one-element float constant ``name`` of ``program``, else ``None``."""
    t = program.constants.get(name) if name else None
    if not isinstance(t, Tensor) or t.size() != 1 or t.dtype.kind != "f":
        return None
    return float(backend.to_host(t.data).reshape(-1)[0])


def clip_bounds(program: Program, clip: Node) -> tuple[float | None, float | None] | None:
    """A Clip node's ``(min, max)`` (None for an open end: an omitted input or attribute), or
    None where a given bound is not a one-element float constant (computed at run time)."""
    if clip.opset < 11:
        lo, hi = clip.attr("min"), clip.attr("max")
        return (None if lo is None else float(lo)), (None if hi is None else float(hi))
    ends = []
    for i in (1, 2):
        name = clip.inputs[i] if len(clip.inputs) > i else ""
        value = scalar_constant(program, name)
        if name and value is None:
            return None
        ends.append(value)
    return ends[0], ends[1]


def _plain_or_in_place(fn: Callable, op: str) -> bool:
    return fn is HANDLERS[op] or (isinstance(fn, _InPlaceHandler) and fn.op == op)


class _Chain:
    """A fused chain's handler: ``steps`` are the original ``(node, handler)`` pairs, run one
    after another (``_unfused``) where the fused form does not apply."""

    def __init__(self, steps: list[tuple[Node, Callable]]) -> None:
        self.steps = steps

    def _unfused(self, *inputs: Tensor) -> Tensor:
        values = dict(zip(self.steps[0][0].inputs, inputs))
        for node, fn in self.steps:
            outs = fn(node, *(values.get(i) if i else None for i in node.inputs))
            values[node.outputs[0]] = outs[0] if isinstance(outs, (tuple, list)) else outs
        return values[self.steps[-1][0].outputs[0]]


class _SiLU(_Chain):
    """``x * sigmoid(x)``: one compiled pass where the CPU kernels take ``x``, else one pass
    for the sigmoid and one in place for the product."""

    def __call__(self, node: Node, x: Tensor) -> Tensor:
        if x.dtype.kind != "f":
            return self._unfused(x)
        xp, a = x.device.xp, x.data
        if cpu_kernels.usable(xp, a):
            return Tensor._wrap(cpu_kernels.activation.silu_forward(a), x.device, False, None, 0)
        y = activation.sigmoid_array(xp, a)
        xp.multiply(y, a, out=y)
        return Tensor._wrap(y, x.device, False, None, 0)


class _HardSwish(_Chain):
    """``x * hardsigmoid(x, alpha, beta)``: ``ops.hardswish`` where alpha and beta are its."""

    def __init__(self, steps: list[tuple[Node, Callable]], alpha: float, beta: float) -> None:
        super().__init__(steps)
        self.alpha, self.beta = alpha, beta
        self.plain = float(np.float32(alpha)) == float(np.float32(1 / 6)) and beta == 0.5

    def __call__(self, node: Node, x: Tensor) -> Tensor:
        if x.dtype.kind != "f":
            return self._unfused(x)
        if cpu_kernels.usable(x.device.xp, x.data):  # one pass, the same roundings
            y = cpu_kernels.activation.hardswish_forward(x.data, self.alpha, self.beta)
            return Tensor._wrap(y, x.device, False, None, 0)
        if self.plain:
            return ops.hardswish(x)
        return ops.mul(x, ops.hardsigmoid(x, self.alpha, self.beta))


class _AddRelu(_Chain):
    """``relu(a + b)``: one compiled pass where the CPU kernels take two arrays of one shape
    (into the input an in-place Add would have written, else a new array); otherwise the
    sum's handler (plain or in place), then the ReLU in place on its fresh result."""

    def __call__(self, node: Node, a: Tensor, b: Tensor) -> Tensor:
        (add, add_fn), (relu, relu_fn) = self.steps
        xp = a.device.xp
        if a.shape == b.shape and cpu_kernels.usable(xp, a.data, b.data):
            into = (a, b)[add_fn.slot] if isinstance(add_fn, _InPlaceHandler) else None
            y = cpu_kernels.activation.add_relu_forward(a.data, b.data, None if into is None else into.data)
            if into is not None and y is into.data:
                return into
            return Tensor._wrap(y, a.device, False, None, 0)
        y = add_fn(add, a, b)  # a new array, or (in place) an input only this node reads
        if y.dtype.kind != "f":
            return relu_fn(relu, y)
        y.device.xp.maximum(y.data, 0, out=y.data)
        return y

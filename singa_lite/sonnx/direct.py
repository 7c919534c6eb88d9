"""``DirectOps``: the inference pass that runs common nodes' operators on the arrays directly.

A streaming model's nodes work on tensors of a few hundred elements, where calling an op costs
more than its arithmetic: the ``Operator`` is built and checks its arguments (a Slice's starts,
a Reshape's shape, parsed again at every run), the call checks devices and dtypes, and wraps
the result for autograd. An inference program records nothing, so here each such node gets a
handler holding its operator, built once from the node's attributes and constant arguments;
a run calls the operator's own ``forward`` on the input arrays (the same code, so the same
results and errors) and wraps the result as the fused handlers of
:mod:`~singa_lite.sonnx.fusion` do. Arithmetic, activations and MatMul, whose ``forward`` is
one expression of its arrays, run that expression with no operator at all (``_Pure``). Where
the per-shape part of the arguments (a Slice's Python slices, a Reshape's target, a Concat's
checks) depends on the input's shape, it is kept for the last shape.

Anything the handler was not built for (a dtype the operator refuses, a sequence, an
argument that is not a constant) runs the node's own handler, which also says what is wrong.
Like every pass it serves ``SingaRep``'s whole-graph runs only: a ``SONNXModel``, a cut and
``prepare(..., optimize=False)`` call the ops as the handlers do.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from singa_lite import backend
from singa_lite.autograd import Operator
from singa_lite.errors import SingaLiteError
from singa_lite.ops import activation, conv_infer, indexing, linalg
from singa_lite.ops import shape as shape_ops
from singa_lite.ops._util import normalize_axis
from singa_lite.sonnx.import_ops import HANDLERS, nn
from singa_lite.sonnx.import_ops.base import Node
from singa_lite.tensor import Tensor

if TYPE_CHECKING:
    from singa_lite.sonnx.importer import Program


class _Direct:
    """A node run as ``forward`` of ``op``, built once from the node's attributes and constant
    arguments, on the arrays of its first ``arity`` inputs (all where ``None``; the others are
    the constant arguments). Threads running one program share ``op``: only operators whose
    ``forward`` answers with what it computes in the call, never with state it keeps (as a
    Sigmoid's ``self.y``), run so. ``floats``: only where those inputs are float tensors of one
    dtype (otherwise, and for anything that is not a tensor, ``fn``)."""

    def __init__(
        self, fn: Callable, op: Operator | None, floats: bool = True, arity: int | None = None
    ) -> None:
        self.fn, self.op, self.floats, self.arity = fn, op, floats, arity

    def __call__(self, node: Node, *args: Any) -> Any:
        first = args[0]
        if type(first) is not Tensor:
            return self.fn(node, *args)
        dtype = first.data.dtype
        xs = args if self.arity is None else args[: self.arity]
        for a in xs:
            if type(a) is not Tensor or (self.floats and a.data.dtype != dtype):
                return self.fn(node, *args)
        if self.floats and dtype.kind != "f":
            return self.fn(node, *args)
        dev = first.device
        dev.activate()
        op = self.op
        assert op is not None  # the subclasses without one run their own calls
        xp = op.xp = dev.xp
        op.device = dev
        y = op.forward(*[a.data for a in xs])
        if not isinstance(y, xp.ndarray):  # NumPy answers 0-d arithmetic with a scalar
            y = xp.asarray(y)
        return Tensor._wrap(y, dev, False, None, 0)


class _Pure:
    """A node whose operator's ``forward`` is a function of its float arrays alone (an
    arithmetic ufunc, an activation): ``func(xp, *arrays)`` is called with no operator at
    all, the same expression ``forward`` evaluates. Other inputs, a dtype mismatch or an
    error (operands that do not broadcast) run the node's handler, which says what is wrong."""

    def __init__(self, fn: Callable, func: Callable, arity: int) -> None:
        self.fn, self.func, self.arity = fn, func, arity

    def __call__(self, node: Node, *args: Any) -> Any:
        first = args[0]
        if len(args) != self.arity or type(first) is not Tensor:
            return self.fn(node, *args)
        x = first.data
        dtype = x.dtype
        if dtype.kind != "f":
            return self.fn(node, *args)
        dev = first.device
        dev.activate()
        xp = dev.xp
        if self.arity == 1:
            y = self.func(xp, x)
        else:
            second = args[1]
            if type(second) is not Tensor or second.data.dtype != dtype:
                return self.fn(node, *args)
            try:
                y = self.func(xp, x, second.data)
            except ValueError:  # shapes that do not broadcast: the handler's error names them
                return self.fn(node, *args)
        if type(y) is not xp.ndarray:  # NumPy answers 0-d arithmetic with a scalar
            y = xp.asarray(y)
        return Tensor._wrap(y, dev, False, None, 0)


def _binary(op: Callable) -> Callable:
    return lambda xp, a, b: op(a, b)


_PURE: dict[str, tuple[Callable, int]] = {  # each as its operator's forward computes it
    "Add": (_binary(operator.add), 2),
    "Sub": (_binary(operator.sub), 2),
    "Mul": (_binary(operator.mul), 2),
    "Div": (_binary(operator.truediv), 2),  # one float dtype: the quotient keeps it
    "Relu": (lambda xp, x: xp.maximum(x, 0), 1),
    "Sigmoid": (activation.sigmoid_array, 1),
    "Tanh": (lambda xp, x: xp.tanh(x), 1),
    "MatMul": (linalg.matmul_array, 2),  # a 0-d operand: ValueError, so the handler's error
}


class _Sliced(_Direct):
    """A Slice of constant arguments: its Python slices kept for the last input shape."""

    def __init__(self, fn: Callable, op: indexing.Slice) -> None:
        super().__init__(fn, None, floats=False)
        self.slicer = op
        self.last: tuple = (None, ())  # (input shape, its slices), replaced as one

    def __call__(self, node: Node, x: Any, *rest: Any) -> Any:
        if type(x) is not Tensor:
            return self.fn(node, x, *rest)
        a = x.data
        shape, key = self.last
        if a.shape != shape:
            try:
                key = self.slicer.key(a)
            except SingaLiteError:
                return self.fn(node, x, *rest)  # its error, named by the node
            self.last = (a.shape, key)
        return Tensor._wrap(a[key], x.device, False, None, 0)


class _Reshaped(_Direct):
    """A Reshape to a constant shape: the target (0s and -1 resolved) kept for the last input shape."""

    def __init__(self, fn: Callable, shape: list[int], allowzero: bool) -> None:
        super().__init__(fn, None, floats=False)
        self.wanted, self.allowzero = shape, allowzero
        self.last: tuple = (None, ())  # (input shape, target shape), replaced as one

    def __call__(self, node: Node, x: Any, *rest: Any) -> Any:
        if type(x) is not Tensor:
            return self.fn(node, x, *rest)
        a = x.data
        shape, target = self.last
        if a.shape != shape:
            try:
                wanted = self.wanted
                if not self.allowzero:
                    wanted = [a.shape[i] if s == 0 else s for i, s in enumerate(wanted)]
                target = tuple(shape_ops.Reshape(wanted).target(a))
            except Exception:  # an IndexError, a ShapeError: the handler says it, naming the node
                return self.fn(node, x, *rest)
            self.last = (a.shape, target)
        return Tensor._wrap(a.reshape(target), x.device, False, None, 0)


class _Transposed(_Direct):
    """A Transpose: its permutation kept for the last input rank."""

    def __init__(self, fn: Callable, perm: list[int] | None) -> None:
        super().__init__(fn, None, floats=False)
        self.axes = shape_ops.Transpose(perm).axes  # as the operator checks and keeps them
        self.last: tuple = (None, ())  # (input rank, permutation), replaced as one

    def __call__(self, node: Node, x: Any) -> Any:
        if type(x) is not Tensor:
            return self.fn(node, x)
        a = x.data
        ndim, perm = self.last
        if a.ndim != ndim:
            axes = self.axes
            n = a.ndim
            perm = tuple(range(n))[::-1] if axes is None else tuple(i + n if i < 0 else i for i in axes)
            if sorted(perm) != list(range(a.ndim)):
                return self.fn(node, x)  # the operator's error, named by the node
            self.last = (a.ndim, perm)
        return Tensor._wrap(a.transpose(perm), x.device, False, None, 0)


class _Concatenated(_Direct):
    """A Concat of tensors: its size checked against the limits, as the handler does. The
    checks (the size limit, the shapes and dtypes ``Cat`` compares, its axis) follow from the
    input shapes and dtypes alone, so a run on the ones that passed last concatenates at once."""

    def __init__(self, fn: Callable, axis: int) -> None:
        super().__init__(fn, shape_ops.Cat(axis), floats=False)
        self.axis = axis
        self.last: tuple = (None, 0)  # ((shape, dtype) per input, normalised axis), replaced as one

    def __call__(self, node: Node, *xs: Any) -> Any:
        if not xs or any(type(x) is not Tensor for x in xs):
            return self.fn(node, *xs)
        arrays = [x.data for x in xs]
        key = tuple([(a.shape, a.dtype) for a in arrays])
        checked, axis = self.last
        if key != checked:
            node.check_size((sum(a.size for a in arrays),), max(a.itemsize for a in arrays))
            y = super().__call__(node, *xs)  # Cat's checks and errors
            self.last = (key, normalize_axis(self.axis, arrays[0].ndim, "Concat"))
            return y
        first = xs[0]
        return Tensor._wrap(first.device.xp.concatenate(arrays, axis=axis), first.device, False, None, 0)


class _Conv1d:
    """A 1-D Conv of constant weight and bias on one sequence (a streaming frame): run as the
    2-D conv of height 1 that ``PackedConv`` runs, the bias packed into the weight once; a
    small frame (``TAPS_MOST``) of one group by taps instead (``_by_taps``). The node's checks
    (``Conv``'s, which also name what is wrong) depend on the input's shape and dtype alone:
    they run for the first input and again only when those change. Batches, other dtypes and
    depthwise convs run ``Conv``."""

    TAPS_MOST = 1 << 16
    """Entries of the tap products (taps x output channels x padded length) up to which a
    one-group conv runs ``_by_taps``: six NumPy calls, where the 2-D path's padding, window
    view, column copy, ones row and product cost 17 us on a (16, 8) frame."""

    def __init__(self, fn: Callable, W: Tensor, B: Tensor, group: int) -> None:
        xp = W.device.xp
        self.fn, self.W, self.B, self.group = fn, W, B, group
        self.W4 = W.data.reshape(*W.shape[:2], 1, W.shape[2])
        self.Wb = conv_infer.one_image_weight(xp, self.W4, B.data, group)
        O, _, k = W.shape
        # taps major: row t*O + o is output channel o's tap t
        self.Wt = xp.ascontiguousarray(W.data.transpose(2, 0, 1).reshape(k * O, -1))
        self.bias = B.data.reshape(O, 1)
        self.last: tuple = (None, ())  # ((input shape, dtype), geometry), replaced as one

    def __call__(self, node: Node, x: Any, W: Any, B: Any = None) -> Any:
        if type(x) is not Tensor or W is not self.W or B is not self.B or x.data.ndim != 3:
            return self.fn(node, x, W, B)
        a = x.data
        checked, geometry = self.last
        if (a.shape, a.dtype) != checked:
            _, strides, dilations, pads, group = nn._conv_checks(node, x, W, B)
            geometry = ((1, strides[0]), (0, 0, pads[0], pads[1]), (1, dilations[0]), group)
            self.last = ((a.shape, a.dtype), geometry)
        (_, s), (_, _, p0, p1), (_, d), _ = geometry
        if (
            self.group == 1
            and a.shape[0] == 1
            and a.dtype == self.Wt.dtype == self.bias.dtype
            and self.Wt.shape[0] * (a.shape[2] + p0 + p1) <= self.TAPS_MOST
        ):
            y = self._by_taps(x.device.xp, a[0], s, d, p0, p1)
            if y is not None:
                return Tensor._wrap(y[None], x.device, False, None, 0)
        y = conv_infer.conv2d_one_image(
            x.device.xp, a.reshape(a.shape[0], a.shape[1], 1, a.shape[2]), self.W4, self.B.data, self.Wb,
            *geometry,
        )  # fmt: skip
        if y is None:  # a batch, a depthwise conv, another dtype
            return self.fn(node, x, W, B)
        return Tensor._wrap(y.reshape(y.shape[0], y.shape[1], y.shape[3]), x.device, False, None, 0)

    def _by_taps(self, xp: Any, img: Any, s: int, d: int, p0: int, p1: int) -> Any:
        """``(O, Lo)``: one product of every tap's weights with the padded frame ``(C, L)``,
        then each tap's rows, shifted by its offset, added up with the bias (kn2row). None
        where no output position fits (``Conv`` says so)."""
        C, L = img.shape
        O = self.bias.shape[0]
        k = self.Wt.shape[0] // O
        Lo = (L + p0 + p1 - d * (k - 1) - 1) // s + 1
        if Lo < 1:
            return None
        if p0 or p1:
            padded = xp.zeros((C, L + p0 + p1), img.dtype)
            padded[:, p0 : p0 + L] = img
        else:
            padded = img
        Z = xp.matmul(self.Wt, padded)  # (k*O, Lp): each tap's product at every position
        span = s * (Lo - 1) + 1
        y = xp.add(Z[:O, :span:s], self.bias)
        for t in range(1, k):
            y += Z[t * O : (t + 1) * O, t * d : t * d + span : s]
        return y


class DirectOps:
    """Nodes whose operator can be built once run it on their arrays (see the module docstring):
    Add, Sub, Mul, Div, Relu, Sigmoid, Tanh and MatMul on floats; Transpose; Slice, Reshape,
    Squeeze and Unsqueeze with constant arguments; Concat; 1-D Conv of a constant weight and
    bias on one sequence."""

    name = "direct_ops"

    def run(self, program: Program) -> None:
        for k, node in enumerate(program.nodes):
            fn = program.handlers[k]
            if program.folded[k] or fn is not HANDLERS.get(node.op):
                continue
            try:
                direct = self._direct(program, node, fn)
            except Exception:  # arguments the op refuses: the handler says so at run time
                direct = None
            if direct is not None:
                program.handlers[k] = direct

    @staticmethod
    def _direct(program: Program, node: Node, fn: Callable) -> Callable | None:
        op = node.op
        if op in _PURE and node.n_outputs == 1:
            return _Pure(fn, *_PURE[op])
        if op == "Transpose":
            perm = node.attr("perm")
            return _Transposed(fn, None if perm is None else list(perm))
        if op == "Conv" and len(node.inputs) == 3:
            W, B = (program.constants.get(name) for name in node.inputs[1:])
            group = node.attr("group", 1)
            if (
                isinstance(W, Tensor)
                and isinstance(B, Tensor)
                and W.ndim() == 3
                and W.dtype == B.dtype
                and W.dtype.kind == "f"
                and isinstance(group, int)
                and group >= 1
                and W.shape[0] % group == 0
                and tuple(B.shape) == (W.shape[0],)
            ):
                return _Conv1d(fn, W, B, group)
            return None
        if op == "Concat" and "axis" in node.attrs:
            return _Concatenated(fn, node.attr("axis"))
        # Arguments that became inputs (Slice at opset 10, Reshape at 5, (Un)squeeze at 13):
        # only constant ones are built in; older nodes keep them as attributes, left to the handler.
        since = {"Slice": 10, "Reshape": 5, "Unsqueeze": 13, "Squeeze": 13}.get(op)
        args = _constant_ints(program, node.inputs[1:]) if since and node.opset >= since else None
        if args is None:
            return None
        if op == "Slice" and len(args) >= 2 and args[0] is not None and args[1] is not None:
            axes, steps = (args[i] if len(args) > i else None for i in (2, 3))
            return _Sliced(fn, indexing.Slice(args[0], args[1], axes, steps))
        if op == "Reshape" and len(args) == 1 and args[0] is not None:
            return _Reshaped(fn, args[0], bool(node.attr("allowzero", 0)))
        if op == "Unsqueeze" and len(args) == 1 and args[0] is not None:
            return _Direct(fn, shape_ops.Unsqueeze(args[0]), False, 1)
        if op == "Squeeze" and len(args) <= 1:
            return _Direct(fn, shape_ops.Squeeze(args[0] if args else None), False, 1)
        return None


def _constant_ints(program: Program, names: list[str]) -> list[list[int] | None] | None:
    """The values of the constant integer inputs ``names`` (``None`` for an omitted one), or
    ``None`` where one is not a constant integer tensor."""
    out: list[list[int] | None] = []
    for name in names:
        if not name:
            out.append(None)
            continue
        t = program.constants.get(name)
        if not isinstance(t, Tensor) or t.dtype.kind not in "iu":
            return None
        out.append([int(v) for v in backend.to_host(t.data).reshape(-1)])
    return out

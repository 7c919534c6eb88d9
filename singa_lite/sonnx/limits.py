"""What an ONNX model may make singa_lite allocate: limits checked *before* allocating.

An ONNX file is untrusted input, and a few of its bytes can ask for 10^12 elements: a
``ConstantOfShape`` of a huge shape, an ``Expand``, ``Tile``, ``Pad`` or ``Range`` of huge
arguments, ``Resize`` scales, ``Conv`` pads, a chain of doubling ``Concat`` nodes, two small
tensors whose broadcast is huge. Every handler whose output (or workspace) size follows from its
arguments computes that size first and checks it here; ``Program`` checks the broadcast of the
elementwise operators and keeps totals. The same checks run when ``prepare`` folds constants and
at every run. A model over a limit raises ``OnnxError`` naming the node, the size and the limit,
and nothing is allocated.

=====================  ========  ===========================================================
limit                  default   what it bounds
=====================  ========  ===========================================================
``max_tensor_bytes``   4 GiB     one tensor an operator creates (an output or a workspace)
``max_total_bytes``    16 GiB    what a program holds at once besides its initializers and
                                 inputs: the constants folded at prepare time; the live
                                 intermediates (graph outputs included) of one run
``max_model_bytes``    2 GiB     a model file or byte string read by ``prepare`` (protobuf
                                 cannot parse more); external data is bounded per tensor by
                                 ``max_tensor_bytes`` and must exist on disk
``max_iterations``     100000    the body runs of ``Loop``, ``Scan`` and ``SequenceMap``
                                 nodes in one run of an outermost control-flow node, nested
                                 loops included (a ``Loop`` whose condition never turns false
                                 stops here)
``max_graph_depth``    32        how deeply subgraphs (``If``/``Loop``/``Scan`` bodies) nest
=====================  ========  ===========================================================

Set them for one call (``prepare(model, limits=Limits(max_tensor_bytes=1 << 30))``, also
``SONNXModel(..., limits=...)`` and ``singa_lite.load(..., limits=...)``), or for everything
prepared inside a block; a program keeps the limits it was prepared with:

>>> from singa_lite.sonnx import limits
>>> with limits.allocation_limits(max_tensor_bytes=1 << 20) as lim:
...     lim.max_tensor_bytes, limits.current().max_total_bytes == limits.DEFAULT.max_total_bytes
(1048576, True)
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from singa_lite.errors import OnnxError

GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Limits:
    """Limits of ONNX import: bytes, loop iterations and subgraph depth (see the module docstring)."""

    max_tensor_bytes: int = 4 * GiB
    max_total_bytes: int = 16 * GiB
    max_model_bytes: int = 2 * GiB
    max_iterations: int = 100_000
    max_graph_depth: int = 32

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"Limits.{f.name} must be a non-negative int, got {v!r}")


DEFAULT = Limits()
_current: contextvars.ContextVar[Limits] = contextvars.ContextVar("singa_lite_onnx_limits", default=DEFAULT)


def current() -> Limits:
    """The limits in force here: those of the innermost :func:`allocation_limits` block."""
    return _current.get()


def resolve(limits: Limits | None) -> Limits:
    """``limits``, or the current ones where ``None``."""
    if limits is None:
        return current()
    if not isinstance(limits, Limits):
        raise TypeError(f"limits must be a sonnx.limits.Limits, got {type(limits).__name__}")
    return limits


@contextlib.contextmanager
def allocation_limits(**changes: int) -> Iterator[Limits]:
    """Within the block, models are prepared with the current limits changed by ``changes``
    (``max_tensor_bytes=``, ``max_total_bytes=``, ``max_model_bytes=``, ``max_iterations=``,
    ``max_graph_depth=``)."""
    token = _current.set(dataclasses.replace(current(), **changes))
    try:
        yield _current.get()
    finally:
        _current.reset(token)


def _hint(field: str) -> str:
    return f"sonnx.limits.Limits({field}=...) raises it, if the model is trusted"


def element_count(where: Any, shape: Sequence[Any], what: str = "output") -> int:
    """The number of elements of ``shape``, after checking every dim is a non-negative int."""
    dims = []
    for d in shape:
        if isinstance(d, (float, np.floating)) and not float(d).is_integer():
            raise OnnxError(f"{where}: {what} dimension {d!r} is not an integer")
        try:
            dims.append(int(d))
        except (TypeError, ValueError, OverflowError):
            raise OnnxError(f"{where}: {what} dimension {d!r} is not an integer") from None
    if any(d < 0 for d in dims):
        raise OnnxError(f"{where}: {what} shape {tuple(dims)} has a negative dimension")
    return math.prod(dims)


def check(
    where: Any, shape: Sequence[Any], dtype: Any, limits: Limits, what: str = "output"
) -> tuple[int, ...]:
    """``shape`` as ints, after checking that an array of ``shape`` and ``dtype`` (or an
    itemsize in bytes) fits ``limits.max_tensor_bytes``; ``where`` names the node."""
    count = element_count(where, shape, what)
    itemsize = dtype if isinstance(dtype, int) else np.dtype(dtype).itemsize
    need = count * itemsize
    if need > limits.max_tensor_bytes:
        raise OnnxError(
            f"{where}: the {what} of shape {tuple(int(d) for d in shape)} would take {need} bytes, over the "
            f"allocation limit of {limits.max_tensor_bytes} bytes ({_hint('max_tensor_bytes')})"
        )
    return tuple(int(d) for d in shape)


def check_bytes(where: Any, need: int, limits: Limits, what: str) -> None:
    """Check a workspace of ``need`` bytes against ``limits.max_tensor_bytes``."""
    if need > limits.max_tensor_bytes:
        raise OnnxError(
            f"{where}: the {what} would take {need} bytes, over the allocation limit of "
            f"{limits.max_tensor_bytes} bytes ({_hint('max_tensor_bytes')})"
        )


def check_total(where: Any, total: int, limits: Limits, what: str) -> None:
    """Check the bytes a program holds at once against ``limits.max_total_bytes``."""
    if total > limits.max_total_bytes:
        raise OnnxError(
            f"{where}: {what} would hold {total} bytes, over the limit of {limits.max_total_bytes} "
            f"bytes ({_hint('max_total_bytes')})"
        )


def broadcast(where: Any, *shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy's broadcast of ``shapes``; ``OnnxError`` naming ``where`` if they do not fit."""
    try:
        return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))
    except ValueError:
        raise OnnxError(f"{where}: shapes {[tuple(s) for s in shapes]} do not broadcast") from None


# -- the output sizes of operators whose size follows from their inputs' shapes alone ---------
BROADCASTING = frozenset(
    [
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Mod",
        "And",
        "Or",
        "Xor",
        "Equal",
        "Greater",
        "GreaterOrEqual",
        "Less",
        "LessOrEqual",
        "Where",
        "Max",
        "Min",
        "Sum",
        "Mean",
        "PRelu",
        "BitShift",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
    ]
)
"""Operators whose output is the broadcast of their inputs."""


def precheck(node: Any, args: Sequence[Any], limits: Limits) -> None:
    """Before ``node`` runs on ``args``: check the size of an output that only input shapes
    decide (a broadcast, a product, a gather) and that may be far larger than its inputs.
    Shapes that do not fit each other are left to the operator, which names the fault."""
    op = node.op
    if op in BROADCASTING:
        shapes = [a.shape for a in args if a is not None]
        if len(set(shapes)) > 1:
            try:
                out = tuple(np.broadcast_shapes(*shapes))
            except ValueError:
                return
            dtype = max((a.dtype for a in args if a is not None), key=lambda d: np.dtype(d).itemsize)
            check(node, out, dtype, limits)
    elif op == "MatMul" and len(args) == 2 and all(a is not None for a in args):
        shape = matmul_shape(args[0].shape, args[1].shape)
        if shape is not None:
            check(node, shape, args[0].dtype, limits)
    elif op == "Gather" and len(args) == 2 and all(a is not None for a in args):
        data, indices = args
        axis = node.attr("axis", 0)
        if data.ndim() and -data.ndim() <= axis < data.ndim():
            axis %= data.ndim()
            check(node, (*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :]), data.dtype, limits)
    elif op == "Einsum":
        shape = einsum_shape(node, node.attr("equation", ""), [a.shape for a in args if a is not None])
        if shape is not None:
            check(node, shape, args[0].dtype, limits)


def matmul_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """The output shape of NumPy's ``matmul`` of shapes ``a`` and ``b`` (1-D operands
    included); ``None`` where they do not multiply."""
    if not a or not b:
        return None
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        return None
    try:
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    except ValueError:
        return None
    out = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def einsum_shape(where: Any, equation: str, shapes: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
    """The output shape of an Einsum ``equation`` over operands of ``shapes`` (``None`` where
    the equation is malformed: the op itself then says what is wrong)."""
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        return None
    sizes: dict[str, int] = {}
    ellipsis: list[Sequence[int]] = []
    for term, shape in zip(terms, shapes):
        letters = term.replace("...", "")
        n_ell = len(shape) - len(letters)
        if ("..." in term and n_ell < 0) or ("..." not in term and n_ell != 0):
            return None
        head, _, tail = term.partition("...")
        if "..." in term:
            ellipsis.append(shape[len(head) : len(shape) - len(tail)])
            dims = list(shape[: len(head)]) + list(shape[len(shape) - len(tail) :])
        else:
            dims = list(shape)
        for ch, d in zip(letters, dims):
            sizes[ch] = max(sizes.get(ch, 1), int(d))
    if "->" not in eq:
        counts = {ch: lhs.count(ch) for ch in sizes}
        rhs = ("..." if ellipsis else "") + "".join(sorted(ch for ch, c in counts.items() if c == 1))
    try:
        ell = tuple(np.broadcast_shapes(*ellipsis)) if ellipsis else ()
    except ValueError:
        return None
    head, sep, tail = rhs.partition("...")
    return (*(sizes.get(ch, 1) for ch in head), *(ell if sep else ()), *(sizes.get(ch, 1) for ch in tail))

"""What every ONNX handler receives: the node's attributes, its opset, and small readers.

A handler is a function named exactly after the ONNX operator. It takes a :class:`Node` and the
node's inputs as ``Tensor`` objects (``None`` for an omitted optional input) and returns one
``Tensor`` or a tuple of them, one per node output. Inputs that ONNX passes as tensors but that
are really arguments (shapes, axes, pads, scales) are read into Python values with
:meth:`Node.ints` / :meth:`Node.opt_floats` / :meth:`Node.scalar`; since the graph runs eagerly,
this works equally for constants folded at prepare time and for shapes computed at run time
(``Shape -> Gather -> Concat -> Reshape``). A constant's values are read from the device once,
when the program is prepared (:class:`HostConstants`), not on every run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import AttributeProto, NodeProto, TensorProto, helper, numpy_helper

from singa_lite import autograd, backend
from singa_lite.errors import OnnxError
from singa_lite.ops import window
from singa_lite.sonnx import limits as _limits
from singa_lite.tensor import Tensor, as_dtype


class HostConstants:
    """Host copies of a program's constant tensors, each read from the device at most once.

    ``Program`` registers the constants its nodes read and reads at prepare time those that
    handlers take as arguments (``import_ops.HOST_INPUTS``); a registered constant a handler
    reads otherwise is read on first use and kept. Tensors are matched by identity: a
    constant's tensor lives as long as its program.
    """

    def __init__(self) -> None:
        self._tensors: dict[int, Tensor] = {}
        self._values: dict[int, np.ndarray] = {}

    def register(self, t: Tensor) -> None:
        """Mark ``t`` as a constant (its values are not read yet)."""
        self._tensors[id(t)] = t

    def get(self, t: Tensor) -> np.ndarray | None:
        """``t``'s host values if ``t`` is a registered constant (read now if not yet), else None."""
        key = id(t)
        if self._tensors.get(key) is not t:
            return None
        values = self._values.get(key)
        if values is None:
            # A read-only view: on NumPy the host array is the tensor's own buffer.
            values = self._values[key] = backend.to_host(t.data).view()
            values.flags.writeable = False
        return values


class Node:
    """One ONNX node as a handler sees it: ``op``, ``name``, ``opset``, attributes, outputs.

    ``opset`` is the model's version of the default (``ai.onnx``) domain; handlers branch on it
    where an operator changed (attributes that became inputs, new defaults). ``constants``
    (set by ``Program``) holds the host values of the program's constants; ``limits`` (also set
    by ``Program``) what the handler may allocate (see :meth:`check_size`).
    """

    def __init__(self, proto: NodeProto, opset: int) -> None:
        self.op = proto.op_type
        self.name = proto.name or (proto.output[0] if proto.output else "?")
        self.opset = opset
        self.inputs = list(proto.input)
        self.outputs = list(proto.output)
        self.attrs = {a.name: _attribute(a, self) for a in proto.attribute}
        self.constants: HostConstants | None = None
        self.limits = _limits.DEFAULT
        # ONNX element types of the graph's values where the model declares them (set by
        # Program): an int4 zero point is held as int8, but a QuantizeLinear must know it.
        self.declared: dict[str, np.dtype] = {}
        self.types: Any = None  # validate.InputTypes, set by Program
        self.device: Any = None  # the program's device, set by Program
        # Outer-scope names its subgraphs read (If, Loop, Scan): ``subgraph.attach`` appends them
        # to ``inputs``, so the handler receives their values after the declared inputs.
        self.captured: list[str] = []

    def __repr__(self) -> str:
        return f"{self.op} node {self.name!r} (opset {self.opset})"

    @property
    def n_outputs(self) -> int:
        """How many outputs the graph asks of this node (optional trailing ones may be omitted)."""
        return len(self.outputs)

    def declared_type(self, i: int) -> np.dtype | None:
        """The element type the model declares for input ``i`` (``None`` where unknown)."""
        name = self.inputs[i] if i < len(self.inputs) else ""
        return self.declared.get(name) if name else None

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute ``name``, or ``default`` where the node does not set it."""
        return self.attrs.get(name, default)

    def fail(self, message: str) -> OnnxError:
        """An ``OnnxError`` that names this node, for settings no singa_lite op supports."""
        return OnnxError(f"{self}: {message}")

    def check_size(self, shape: Sequence[Any], dtype: Any, what: str = "output") -> tuple[int, ...]:
        """``shape`` as ints, once an array of ``shape`` and ``dtype`` (or an itemsize) is known
        to fit the program's allocation limit; call it *before* allocating."""
        return _limits.check(self, shape, dtype, self.limits, what)

    # -- reading tensor arguments into Python values -------------------------------------
    # A constant's values were read at prepare time; any other tensor is read now, through
    # ``autograd.host_values``: graph mode replays a step only for the values read.
    def values(self, t: Tensor) -> np.ndarray:
        """``t``'s values as a host array (read-only where ``t`` is a constant)."""
        known = None if self.constants is None else self.constants.get(t)
        return known if known is not None else autograd.host_values(t)

    def array(self, t: Tensor | None) -> np.ndarray | None:
        """``values`` of an optional input (``None`` stays ``None``)."""
        return None if t is None else self.values(t)

    def ints(self, t: Tensor) -> list[int]:
        """The values of an integer tensor argument (a shape, axes, pads) as a list."""
        return [int(v) for v in self.values(t).reshape(-1)]

    def opt_ints(self, t: Tensor | None) -> list[int] | None:
        """``ints`` of an optional input; ``None`` where it is omitted."""
        return None if t is None else self.ints(t)

    def opt_floats(self, t: Tensor | None) -> list[float] | None:
        return None if t is None else [float(v) for v in self.values(t).reshape(-1)]

    def scalar(self, t: Tensor | None, default: Any = None) -> Any:
        """A one-element tensor argument as a Python number."""
        if t is None or t.size() == 0:
            return default
        return self.values(t).reshape(-1)[0].item()

    def arg(self, attr: str, input_value: Tensor | None, since: int) -> Any:
        """An argument that was the attribute ``attr`` before opset ``since`` and an input after.

        Many operators moved arguments to inputs (Split, Squeeze, Unsqueeze, ReduceSum at 13;
        Pad at 11; Reduce* at 18): this reads whichever form the node's opset uses.
        """
        if self.opset < since:
            return self.attr(attr)
        return self.opt_ints(input_value)


# ONNX's recurrent gate blocks against singa_lite's: the same permutation both ways (its own
# inverse), used by the importer and the exporter. LSTM: ONNX i, o, f, c / singa_lite i, f, o,
# g; GRU's z, r, h and RNN's one gate agree. LSTM's peepholes P: ONNX i, o, f / singa_lite i, f, o.
GATE_ORDER = {"LSTM": (0, 2, 1, 3), "GRU": (0, 1, 2), "RNN": (0,)}
PEEPHOLE_ORDER = (0, 2, 1)


def proto_array(t: TensorProto, what: str, external: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """``t`` as a NumPy array, or an ``OnnxError`` naming it when its contents are damaged
    (a data type onnx does not know, data that does not fill the declared dims...): such a
    model passes ``onnx.checker``, and NumPy's own error would not say which tensor it was.

    A tensor stored in an external file comes from ``external`` (the arrays
    ``reading.read_model`` read safely); onnx's own reader is never asked, since it would
    resolve the file against the working directory."""
    if t.data_location == TensorProto.EXTERNAL:
        if external is not None and t.name in external:
            return external[t.name]
        raise OnnxError(
            f"{what} {t.name or '(unnamed)'!r} keeps its data in an external file, which is read only "
            "through prepare/SONNXModel with the model's path or base_dir"
        )
    try:
        return numpy_helper.to_array(t)
    except Exception as e:  # ValueError, KeyError, TypeError... from numpy_helper
        raise OnnxError(
            f"{what} {t.name or '(unnamed)'!r} (data_type {t.data_type}, dims {list(t.dims)}) "
            f"cannot be read: {type(e).__name__}: {e}"
        ) from None


def _attribute(a: AttributeProto, node: Node) -> Any:
    """An attribute as a Python value: ints, floats, str, lists, or a NumPy array for tensors."""
    kind = a.type
    if kind == AttributeProto.FLOAT:
        return float(a.f)
    if kind == AttributeProto.INT:
        return int(a.i)
    if kind == AttributeProto.STRING:
        return a.s.decode("utf-8", errors="replace")
    if kind == AttributeProto.TENSOR:
        return proto_array(a.t, f"{node.op} node {node.name!r}: attribute {a.name!r}, tensor")
    if kind == AttributeProto.FLOATS:
        return [float(v) for v in a.floats]
    if kind == AttributeProto.INTS:
        return [int(v) for v in a.ints]
    if kind == AttributeProto.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in a.strings]
    # Sub-graphs (If, Loop, Scan) and sparse tensors belong to operators singa_lite has no
    # handler for; keep the raw proto so a handler that meets one can say so.
    return a


def _onnx_types(*names: str) -> tuple[np.dtype, ...]:
    """The NumPy dtypes (ml_dtypes' for the exotic ones) of the ONNX element types ``names``
    that the installed onnx defines."""
    codes = [getattr(TensorProto, n) for n in names if hasattr(TensorProto, n)]
    return tuple(np.dtype(helper.tensor_dtype_to_np_dtype(c)) for c in codes)


# Element types singa_lite tensors lack are held in a wider one that is exact for every value:
# sub-byte integers as int8/uint8 (their values range-checked where they enter: inputs, Cast,
# QuantizeLinear saturate to them); bfloat16, the float8s and float4 (ml_dtypes' types, which
# onnx itself uses) as float32. Cast rounds to the declared type's values, and SingaBackend
# casts graph outputs back to their declared types. int8 ... uint64 are singa_lite dtypes.
HELD_AS_INT8 = _onnx_types("INT4", "INT2")
HELD_AS_UINT8 = _onnx_types("UINT4", "UINT2")
HELD_AS_FLOAT32 = _onnx_types(
    "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0", "FLOAT4E2M1"
)
HELD_WIDER = (*HELD_AS_INT8, *HELD_AS_UINT8, *HELD_AS_FLOAT32)


def sub_byte_range(dtype: Any) -> tuple[int, int] | None:
    """``(lowest, highest)`` of a sub-byte integer type (int4: -8..7), else ``None``."""
    d = np.dtype(dtype)
    if d in HELD_AS_INT8 or d in HELD_AS_UINT8:
        import ml_dtypes  # onnx's own dependency: there whenever these types exist

        info = ml_dtypes.iinfo(d)
        return int(info.min), int(info.max)
    return None


def storage_dtype(dtype: Any) -> np.dtype:
    """The singa_lite dtype that holds ONNX values of ``dtype`` (``DTypeError`` if none can)."""
    d = np.dtype(dtype)
    if d in HELD_AS_INT8:
        return np.dtype(np.int8)
    if d in HELD_AS_UINT8:
        return np.dtype(np.uint8)
    if d in HELD_AS_FLOAT32:
        return np.dtype(np.float32)
    return as_dtype(d)


def wrap(arr: Any, like: Tensor) -> Tensor:
    """A new tensor holding ``arr`` on ``like``'s device, not recorded (for integer and bool
    results, which carry no gradient)."""
    arr = like.device.xp.asarray(arr)
    as_dtype(arr.dtype)
    return Tensor._wrap(arr, like.device, False, None, 0)


def const(value: Any, like: Tensor, dtype: Any = None) -> Tensor:
    """A constant tensor on ``like``'s device (``like``'s dtype unless ``dtype`` is given)."""
    xp = like.device.xp
    return Tensor._wrap(xp.asarray(value, dtype=dtype or like.dtype), like.device, False, None, 0)


def onnx_pads_to_pairs(pads: Sequence[int]) -> list[tuple[int, int]]:
    """ONNX ``[b1, b2, ..., e1, e2, ...]`` as ``[(b1, e1), (b2, e2), ...]`` (``ops.window``)."""
    return list(window.onnx_pairs(pads))


def same_pads(
    in_sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    mode: str,
) -> list[int]:
    """ONNX ``auto_pad`` SAME_UPPER / SAME_LOWER padding as ONNX ``pads`` for any number of axes
    (``ops.window.same_pads``: output length ``ceil(in / stride)``, an odd total's extra cell at
    the end for SAME_UPPER, at the beginning for SAME_LOWER)."""
    return window.to_onnx(window.same_pads(in_sizes, kernel, strides, dilations, mode))


def window_pads(
    node: Node, x: Tensor, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> list[int]:
    """The explicit ONNX ``pads`` of a Conv/pool node, resolving ``auto_pad``."""
    n = len(kernel)
    auto = node.attr("auto_pad", "NOTSET")
    if auto not in window.AUTO_PADS:
        raise node.fail(f"unknown auto_pad {auto!r}")
    if auto == "NOTSET":  # as written: the caller checks its length
        return list(node.attr("pads", [0] * (2 * n)))
    return window.to_onnx(window.auto_pads(auto, x.shape[2:], kernel, strides, dilations, ()))

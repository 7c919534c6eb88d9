"""What every converter works with: the graph being built and the registry of converters.

A converter is ``convert(g, op, xs, ys)``: ``g`` is the :class:`GraphBuilder`, ``op`` the
traced operator (its attributes hold what its forward computed: ``op.perm``, ``op.axes_``...),
``xs``/``ys`` the :class:`Value` of each input and output. It appends the nodes that compute
``ys`` from ``xs`` and must write each output under ``ys[i].name``. ``@converts(cls)`` registers
it for an operator class in :data:`CONVERTERS`; converters are looked up by the op's class, then
its base classes, so a subclass (``Mean`` of ``Sum``) registers its own converter only where its
ONNX form differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from singa_lite.errors import UnsupportedOperatorError


class Value:
    """One tensor of the ONNX graph being built: its name, shape and NumPy dtype."""

    __slots__ = ("dtype", "name", "shape")

    def __init__(self, name: str, shape: tuple, dtype: Any) -> None:
        self.name, self.shape, self.dtype = name, tuple(shape), np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.shape}, {self.dtype})"


class GraphBuilder:
    """Collects nodes and initializers; the converters call its helpers.

    Helpers that differ across opsets (``squeeze``, ``unsqueeze``, ``reduce``, ``split``) hide
    the difference, so a converter is written once.
    """

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.used: set[str] = set()
        self.roles: dict[str, str] = {}  # initializer name -> "param" or "state"
        self._counts: dict[str, int] = {}

    # -- names ------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A name not used yet in this graph, starting with ``hint``."""
        while True:
            k = self._counts.get(hint, 0)
            self._counts[hint] = k + 1
            name = f"{hint}_{k}"
            if name not in self.used:
                self.used.add(name)
                return name

    def claim(self, name: str) -> str:
        """``name`` itself if free, else a fresh variant of it."""
        if name in self.used:
            return self.fresh(name)
        self.used.add(name)
        return name

    # -- emitting ---------------------------------------------------------------------------
    def node(
        self, op_type: str, inputs: Sequence[str], outputs: int | Sequence[str] = 1, **attrs: Any
    ) -> list[str]:
        """Append a node; ``outputs`` is a count (fresh names) or the names. Returns the names."""
        names = [self.fresh(op_type) for _ in range(outputs)] if isinstance(outputs, int) else list(outputs)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(
            helper.make_node(op_type, list(inputs), names, name=self.fresh(f"n_{op_type}"), **attrs)
        )
        return names

    def one(self, op_type: str, inputs: Sequence[str], out: str | None = None, **attrs: Any) -> str:
        """Append a single-output node; returns its output name."""
        return self.node(op_type, inputs, 1 if out is None else [out], **attrs)[0]

    def initializer(self, array: Any, name: str) -> str:
        """Add ``array`` as an initializer called ``name`` (made unique); returns the name."""
        return self._add(np.asarray(array), self.claim(name))

    def const(self, array: Any, dtype: Any = None) -> str:
        """A constant initializer (``dtype`` defaults to the array's own)."""
        return self._add(np.asarray(array, dtype=dtype), self.fresh("const"))

    def _add(self, arr: np.ndarray, name: str) -> str:
        self.initializers.append(numpy_helper.from_array(arr, name))
        return name

    def ints(self, values: Sequence[int]) -> str:
        """An int64 vector constant (shapes, axes, pads...)."""
        return self.const(np.asarray(list(values), dtype=np.int64).reshape(-1))

    # -- opset-dependent forms --------------------------------------------------------------
    def squeeze(self, x: str, axes: Sequence[int], out: str | None = None) -> str:
        if self.opset >= 13:
            return self.one("Squeeze", [x, self.ints(axes)], out)
        return self.one("Squeeze", [x], out, axes=list(axes))

    def unsqueeze(self, x: str, axes: Sequence[int], out: str | None = None) -> str:
        if self.opset >= 13:
            return self.one("Unsqueeze", [x, self.ints(axes)], out)
        return self.one("Unsqueeze", [x], out, axes=list(axes))

    def reduce(
        self, op_type: str, x: str, axes: Sequence[int], keepdims: bool, out: str | None = None
    ) -> str:
        """``Reduce*`` over ``axes``: an input from opset 13 (ReduceSum) or 18 (the others)."""
        as_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        if as_input:
            return self.one(op_type, [x, self.ints(axes)], out, keepdims=int(keepdims))
        return self.one(op_type, [x], out, axes=list(axes), keepdims=int(keepdims))

    def split(self, x: str, axis: int, sizes: Sequence[int], outs: Sequence[str] | int) -> list[str]:
        """``Split`` into pieces of ``sizes`` along ``axis`` (sizes an input from opset 13)."""
        if self.opset >= 13:
            return self.node("Split", [x, self.ints(sizes)], outs, axis=axis)
        return self.node("Split", [x], outs, axis=axis, split=list(sizes))

    def reshape(self, x: str, shape: Sequence[int], out: str | None = None) -> str:
        return self.one("Reshape", [x, self.ints(shape)], out)

    def cast(self, x: str, dtype: Any, out: str | None = None) -> str:
        return self.one("Cast", [x], out, to=onnx_dtype(dtype))

    def as_type(self, x: Value, dtype: Any) -> str:
        """``x`` cast to ``dtype`` where it differs (NumPy promotes where ONNX needs equal types)."""
        return x.name if x.dtype == np.dtype(dtype) else self.cast(x.name, dtype)

    def scalar(self, value: float, dtype: Any) -> str:
        """A 0-d constant of ``dtype``."""
        return self.const(np.asarray(value, dtype=dtype))


def onnx_dtype(dtype: Any) -> int:
    """The ONNX ``TensorProto`` type of a NumPy dtype."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def unsupported(op: Any, opset: int, why: str = "") -> UnsupportedOperatorError:
    """The error for an operator (or one of its settings) that has no ONNX form here."""
    detail = f": {why}" if why else ""
    return UnsupportedOperatorError(
        f"to_onnx: cannot export singa_lite operator {type(op).__name__} ({op.name}) at opset {opset}{detail}"
    )


Converter = Callable[[GraphBuilder, Any, list[Value], list[Value]], None]
CONVERTERS: dict[type, Converter] = {}
"""singa_lite operator class -> its converter (filled by the family modules as they import)."""


def converts(*classes: type) -> Callable[[Converter], Converter]:
    """Register the decorated function as the converter of ``classes``."""

    def register(fn: Converter) -> Converter:
        for cls in classes:
            CONVERTERS[cls] = fn
        return fn

    return register

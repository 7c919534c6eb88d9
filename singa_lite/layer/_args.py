"""Checks of the inputs a layer is called with (DESIGN §4: typed errors, no crashes).

Constructor arguments are checked by ``singa_lite._args``, as every entry point's are; this
module holds what is particular to layers: refusing raw arrays where Tensors go, and naming a
layer by its path in a model.
"""

from __future__ import annotations

from numbers import Real
from typing import Any

from singa_lite.errors import ArgumentError
from singa_lite.tensor import Tensor


def _is_array(x: Any) -> bool:
    """An array that is not a Tensor: NumPy/CuPy arrays and NumPy scalars."""
    return not isinstance(x, Tensor) and (
        hasattr(x, "__array_interface__") or hasattr(x, "__cuda_array_interface__")
    )


def describe(layer: Any) -> str:
    """``Linear`` for a free layer, ``Linear 'blk1.fc'`` for one registered in a model."""
    path = layer._prefix().rstrip(layer.sep)
    return f"{type(layer).__name__} {path!r}" if path else type(layer).__name__


def check_inputs(layer: Any, args: tuple) -> None:
    """Reject raw data passed to a layer: arrays anywhere among the positional arguments (or
    inside a list or tuple of them), where a NumPy or CuPy array would fail deep inside an op;
    and, for singa_lite's own layers, whose first argument is always the data, a number or a
    list holding anything but Tensors there. Layers defined elsewhere may take plain values
    in any position (a scale, a shape), so only arrays are refused for them."""
    for x in args:  # the common case, Tensors only, costs one isinstance per argument
        if not isinstance(x, Tensor):
            break
    else:
        return
    hint = "wrap arrays with tensor.from_numpy(...)"
    for i, x in enumerate(args):
        items = x if isinstance(x, (list, tuple)) else (x,)
        for item in items:
            if _is_array(item):
                raise ArgumentError(
                    f"{describe(layer)}: input {i} is {'a list holding ' if items is x else ''}"
                    f"{type(item).__name__}, not Tensor; {hint}"
                )
    if not args or not type(layer).__module__.startswith("singa_lite."):
        return
    first = args[0]
    if isinstance(first, (list, tuple)):
        bad = [type(x).__name__ for x in first if not isinstance(x, Tensor)]
        if bad or not first:
            raise ArgumentError(
                f"{describe(layer)}: input is a {type(first).__name__} of {bad or 'nothing'}, "
                f"not of Tensors; {hint}"
            )
    elif isinstance(first, (bool, Real)):
        raise ArgumentError(f"{describe(layer)}: input is {type(first).__name__}, not Tensor; {hint}")

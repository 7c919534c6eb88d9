"""Checks of layer constructor arguments and call inputs (DESIGN §4: typed errors, no crashes).

Each check raises :class:`~singa_lite.errors.ArgumentError` naming the layer, the argument and
the offending value, at construction time: a bad ``Conv2d(0, 3)`` fails where it is written,
not on the first batch with a NumPy message from deep inside an op.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any

from singa_lite.errors import ArgumentError
from singa_lite.tensor import Tensor


def count(owner: str, name: str, value: Any, low: int = 1) -> int:
    """``value`` as an int no smaller than ``low``; integral floats (``3.0``) are accepted, as
    the ``int(...)`` these layers always applied accepted them."""
    ok = isinstance(value, Integral) or (isinstance(value, Real) and float(value).is_integer())
    if isinstance(value, bool) or not ok or value < low:
        raise ArgumentError(f"{owner}: {name} must be an integer >= {low}, got {value!r}")
    return int(value)


def counts(owner: str, name: str, value: Any, low: int) -> Any:
    """Check an int or a sequence of ints (kernel sizes, strides, paddings), each >= ``low``;
    returns ``value`` unchanged (the ops normalise its form)."""
    items = value if isinstance(value, Sequence) and not isinstance(value, str) else [value]
    if not items:
        raise ArgumentError(f"{owner}: {name} must be an integer or a sequence of integers, got {value!r}")
    for v in items:
        count(owner, name, v, low)
    return value


def fraction(owner: str, name: str, value: Any) -> float:
    """``value`` as a float in [0, 1) (a drop ratio)."""
    if isinstance(value, bool) or not isinstance(value, Real) or not 0.0 <= float(value) < 1.0:
        raise ArgumentError(f"{owner}: {name} must be a number in [0, 1), got {value!r}")
    return float(value)


def choice(owner: str, name: str, value: Any, options: Sequence[str]) -> str:
    """``value`` if it is one of ``options`` (exact spelling, as SINGA's)."""
    if not isinstance(value, str) or value not in options:
        raise ArgumentError(f"{owner}: {name} must be one of {tuple(options)}, got {value!r}")
    return value


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

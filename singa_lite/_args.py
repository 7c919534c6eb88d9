"""Checks of the arguments of public functions and constructors: one error path (DESIGN §4).

Every op, layer, optimizer, schedule and entry point checks its non-tensor arguments here. A
checker returns the argument in its normal form (an ``int``, a tuple of ints, a ``float``) or
raises :class:`~singa_lite.errors.ArgumentError` whose message names the callable, the argument
and the offending value, so a bad call fails where it is written rather than deep inside an
op with a NumPy message::

    Conv2d: stride must be an integer >= 1 or 2 of them, got 0

Problems of a tensor's shape or dtype are not argument problems: they keep ``ShapeError`` and
``DTypeError``. The checkers cost a few ``isinstance`` calls: ops call them on every forward.

>>> count("Linear", "out_features", 4.0)
4
>>> count("Linear", "out_features", 0)
Traceback (most recent call last):
...
singa_lite.errors.ArgumentError: Linear: out_features must be an integer >= 1, got 0
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Sequence
from numbers import Real
from typing import Any

import numpy as np  # to tell NumPy's bools from ints

from singa_lite.errors import ArgumentError

_SHOWN = 80  # characters of a bad value's repr in a message: an array must not flood it


def show(value: Any) -> str:
    """``repr(value)``, cut short."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def bad(
    owner: str, name: str, requirement: str, value: Any, error: type[ArgumentError] = ArgumentError
) -> ArgumentError:
    """The error for ``owner``'s argument ``name`` that is not ``requirement``; for checks the
    helpers below do not cover (``bad("Pad", "pads", "be ints", p)``)."""
    return error(f"{owner}: {name} must {requirement}, got {show(value)}")


def _integral(value: Any) -> int | None:
    """``value`` as an int if it is one (NumPy ints too) or an integral float (``3.0``, which
    the ``int(...)`` of older code accepted); ``None`` otherwise. Bools are not numbers here."""
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        return operator.index(value)  # ints, NumPy ints and 0-d int arrays, as int() took them
    except TypeError:
        pass
    if not isinstance(value, Real) and hasattr(value, "__array__"):
        value = _scalar(value)  # a 0-d Tensor, as from iterating a shape tensor
    if isinstance(value, Real) and math.isfinite(value) and float(value).is_integer():
        return int(float(value))
    return None


def _scalar(value: Any) -> Any:
    """The number held by a 0-d array-like (a Tensor), or ``value`` itself."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):  # a CuPy array will not convert implicitly
        return value
    return arr.item() if arr.ndim == 0 and arr.dtype.kind in "iuf" else value


def _range_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    """`` in [0, 1)``, `` >= 1`` or ``""``: the bounds as a reader writes them (``0``, not ``0.0``)."""
    lo, hi = (None if b is None else f"{b:g}" for b in (low, high))
    if lo is not None and hi is not None:
        return f" in {'(' if low_open else '['}{lo}, {hi}{')' if high_open else ']'}"
    if lo is not None:
        return f" {'>' if low_open else '>='} {lo}"
    if hi is not None:
        return f" {'<' if high_open else '<='} {hi}"
    return ""


def integer(
    owner: str,
    name: str,
    value: Any,
    low: int | None = None,
    high: int | None = None,
    error: type[ArgumentError] = ArgumentError,
) -> int:
    """``value`` as an int in ``[low, high]`` (either bound may be left out)."""
    v = _integral(value)
    if v is None or (low is not None and v < low) or (high is not None and v > high):
        raise bad(owner, name, "be an integer" + _range_text(low, high, False, False), value, error)
    return v


def count(owner: str, name: str, value: Any, low: int = 1, error: type[ArgumentError] = ArgumentError) -> int:
    """``value`` as an int no smaller than ``low``: a size, a number of groups or heads."""
    return integer(owner, name, value, low, None, error)


def axis(owner: str, name: str, value: Any) -> int:
    """An axis (any int; its range depends on the input, so ops check that on the tensor)."""
    return integer(owner, name, value)


def _items(value: Any) -> list | None:
    """The elements of a sequence-like ``value`` (a list, tuple, range or array), else None."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        return None
    try:
        return list(value)
    except TypeError:  # a 0-d array has __iter__ but cannot be iterated
        return None


def ints(
    owner: str,
    name: str,
    value: Any,
    lengths: Sequence[int] | None = None,
    low: int | None = None,
    scalar: bool = True,
) -> tuple[int, ...]:
    """``value``, an int (if ``scalar``) or a sequence of ints, as a tuple (an int as a 1-tuple);
    each int ``>= low`` and the sequence as long as one of ``lengths`` (any length if None)."""
    single = _integral(value) if scalar else None
    items = [value] if single is not None else _items(value)
    vals = None if items is None else [_integral(v) for v in items]
    ok = vals is not None and all(v is not None and (low is None or v >= low) for v in vals)
    if ok and lengths is not None and single is None:
        ok = len(vals) in lengths  # type: ignore[arg-type]
    if not ok:
        bound = _range_text(low, None, False, False)
        what = f"an integer{bound} or a sequence of them" if scalar else f"a sequence of integers{bound}"
        if lengths is not None:
            what += " of length " + " or ".join(str(n) for n in lengths)
        raise bad(owner, name, f"be {what}", value)
    return tuple(vals)  # type: ignore[arg-type]


def per_axis(owner: str, name: str, value: Any, n: int, low: int = 1) -> tuple[int, ...]:
    """An int for every axis, or ``n`` ints (one per axis), each ``>= low``, as an ``n``-tuple:
    the form of strides, dilations and kernel sizes."""
    single = _integral(value)
    if single is not None and single >= low:
        return (single,) * n
    items = _items(value)
    vals = [] if items is None else [_integral(v) for v in items]
    if items is None or len(vals) != n or any(v is None or v < low for v in vals):
        raise bad(owner, name, f"be an integer >= {low} or {n} of them", value)
    return tuple(vals)  # type: ignore[arg-type]


def counts(owner: str, name: str, value: Any, low: int) -> Any:
    """Check an int or a non-empty sequence of ints, each >= ``low``, of any length (a layer's
    kernel size before its rank is known); returns ``value`` unchanged (the ops normalise it)."""
    items = [value] if _integral(value) is not None else _items(value)
    if not items:
        raise bad(owner, name, f"be an integer >= {low} or a sequence of them", value)
    for v in items:
        count(owner, name, v, low)  # names the bad element: "got -1" for (3, -1)
    return value


def _real(value: Any, low: float | None, high: float | None, low_open: bool, high_open: bool) -> float | None:
    """``value`` as a float if it is a finite number within the bounds, else None."""
    if hasattr(value, "__array__") and not isinstance(value, Real):
        value = _scalar(value)
    if not isinstance(value, Real) or isinstance(value, bool) or not math.isfinite(value):
        return None
    v = float(value)
    if low is not None and (v < low or (low_open and v == low)):
        return None
    if high is not None and (v > high or (high_open and v == high)):
        return None
    return v


def number(
    owner: str,
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    error: type[ArgumentError] = ArgumentError,
) -> float:
    """``value`` as a finite float between ``low`` and ``high`` (each bound closed unless
    ``*_open``; either may be left out). NumPy scalars count; bools and NaN do not."""
    v = _real(value, low, high, low_open, high_open)
    if v is None:
        what = "be a finite number" if low is None and high is None else "be a number"
        raise bad(owner, name, what + _range_text(low, high, low_open, high_open), value, error)
    return v


def numbers(
    owner: str, name: str, value: Any, low: float | None = None, low_open: bool = False
) -> tuple[float, ...]:
    """A sequence of finite numbers, each above ``low``, as a tuple of floats (scales, a roi)."""
    items = _items(value)
    vals = [] if items is None else [_real(v, low, None, low_open, False) for v in items]
    if items is None or None in vals:
        raise bad(owner, name, "be a sequence of numbers" + _range_text(low, None, low_open, False), value)
    return tuple(vals)  # type: ignore[arg-type]


def positive(owner: str, name: str, value: Any) -> float:
    """A finite number > 0 (a scale, an epsilon that must not vanish, a norm bound)."""
    return number(owner, name, value, 0.0, None, low_open=True)


def fraction(owner: str, name: str, value: Any) -> float:
    """``value`` as a float in [0, 1) (a drop ratio)."""
    return number(owner, name, value, 0.0, 1.0, high_open=True)


def choice(owner: str, name: str, value: Any, options: Sequence[Any]) -> Any:
    """``value`` if it is one of ``options`` (exact spelling, as SINGA's and ONNX's)."""
    try:
        known = value in options and not isinstance(value, bool)
    except TypeError:  # an unhashable value tested against a set
        known = False
    if not known:
        listed = ", ".join(repr(o) for o in options)
        raise bad(owner, name, f"be one of {listed}", value)
    return value


def instance(owner: str, name: str, value: Any, types: type | tuple[type, ...], what: str) -> Any:
    """``value`` if it is an instance of ``types``; ``what`` says what was expected in words."""
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types)):
        raise ArgumentError(f"{owner}: {name} must be {what}, got {type(value).__name__} {show(value)}")
    return value


def _tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def tensor(owner: str, name: str, value: Any) -> Any:
    """``value`` if it is a Tensor: for functions that read a tensor's shape before an op does."""
    from singa_lite.tensor import Tensor  # here, so that tensor.py may use these checks too

    if not isinstance(value, Tensor):
        hint = "wrap arrays with tensor.from_numpy"
        raise ArgumentError(f"{owner}: {name} must be a Tensor, got {type(value).__name__}; {hint}")
    return value


def path(owner: str, name: str, value: Any) -> str:
    """``value`` (a str, bytes or ``os.PathLike``) as a ``str`` path."""
    try:
        p = os.fspath(value)
    except TypeError:
        raise bad(owner, name, "be a path (a str or os.PathLike)", value) from None
    return p if isinstance(p, str) else os.fsdecode(p)


def has(owner: str, name: str, value: Any, methods: Sequence[str], what: str) -> Any:
    """``value`` if it has every one of ``methods`` (duck typing: a model, an optimizer)."""
    if isinstance(value, type) or not all(callable(getattr(value, m, None)) for m in methods):
        raise ArgumentError(f"{owner}: {name} must be {what}, got {type(value).__name__} {show(value)}")
    return value

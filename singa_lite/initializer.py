"""Parameter initialisers: fill a tensor in place from its device's seeded generator.

Fans are read from the shape when not given: for a matrix ``(in, out)`` (SINGA's ``Linear.W``)
fan_in is ``shape[0]``; for a conv kernel ``(out, in, kh, kw)`` fan_in is ``in * kh * kw`` and
fan_out is ``out * kh * kw``.

>>> from singa_lite import tensor, initializer
>>> w = initializer.he_normal(tensor.Tensor((64, 32)))
>>> w.shape
(64, 32)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from singa_lite import _args
from singa_lite.errors import ArgumentError
from singa_lite.tensor import Tensor


def fans(shape: tuple) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight of ``shape`` (matrix ``(in, out)`` or conv ``(out, in, kh, kw)``)."""
    shape = _args.ints("fans", "shape", shape, low=0, scalar=False)
    if len(shape) < 2:
        n = int(shape[0]) if shape else 1
        return n, n
    if len(shape) == 2:
        return int(shape[0]), int(shape[1])
    receptive = math.prod(int(s) for s in shape[2:])
    return int(shape[1]) * receptive, int(shape[0]) * receptive


def _checked(name: str, t: Tensor, *fan: int) -> None:
    """Fans must be positive: a weight with an empty axis has no scale to derive."""
    if min(fan) <= 0:
        raise ArgumentError(f"{name}: fans {fan} of a weight of shape {t.shape} must be positive")


def uniform(t: Tensor, low: float = -0.05, high: float = 0.05) -> Tensor:
    """U(low, high)."""
    _args.tensor("uniform", "t", t)
    if _args.number("uniform", "low", low) > _args.number("uniform", "high", high):
        raise _args.bad("uniform", "high", f"be >= low ({low})", high)
    return t.uniform(low, high)


def gaussian(t: Tensor, mean: float = 0.0, std: float = 0.05) -> Tensor:
    """N(mean, std)."""
    _args.tensor("gaussian", "t", t)
    _args.number("gaussian", "mean", mean)
    _args.number("gaussian", "std", std, 0.0)
    return t.gaussian(mean, std)


def _gain(name: str, t: Tensor, gain: Any) -> float:
    _args.tensor(name, "t", t)
    return _args.number(name, "gain", gain, 0.0)


def _fan_in(name: str, t: Tensor, fan_in: Any) -> int:
    """``fan_in`` if given (an integer >= 1), else the one ``t``'s shape implies."""
    _args.tensor(name, "t", t)
    if fan_in is None:
        fan_in = fans(t.shape)[0]
        _checked(name, t, fan_in)
        return fan_in
    return _args.count(name, "fan_in", fan_in)


def xavier_uniform(t: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot & Bengio (2010): U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    gain = _gain("xavier_uniform", t, gain)
    fan_in, fan_out = fans(t.shape)
    _checked("xavier_uniform", t, fan_in, fan_out)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return t.uniform(-a, a)


def xavier_normal(t: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot normal: N(0, std) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    gain = _gain("xavier_normal", t, gain)
    fan_in, fan_out = fans(t.shape)
    _checked("xavier_normal", t, fan_in, fan_out)
    return t.gaussian(0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def he_uniform(t: Tensor, fan_in: int | None = None) -> Tensor:
    """He et al. (2015): U(-a, a) with a = sqrt(6 / fan_in), for ReLU networks."""
    fan_in = _fan_in("he_uniform", t, fan_in)
    a = math.sqrt(6.0 / fan_in)
    return t.uniform(-a, a)


def he_normal(t: Tensor, fan_in: int | None = None) -> Tensor:
    """He normal: N(0, sqrt(2 / fan_in))."""
    fan_in = _fan_in("he_normal", t, fan_in)
    return t.gaussian(0.0, math.sqrt(2.0 / fan_in))


glorot_uniform = xavier_uniform
glorot_normal = xavier_normal
kaiming_uniform = he_uniform
kaiming_normal = he_normal

_BY_NAME: dict[str, Callable[..., Tensor]] = {
    "uniform": uniform,
    "gaussian": gaussian,
    "xavier_uniform": xavier_uniform,
    "xavier_normal": xavier_normal,
    "glorot_uniform": xavier_uniform,
    "glorot_normal": xavier_normal,
    "he_uniform": he_uniform,
    "he_normal": he_normal,
    "kaiming_uniform": he_uniform,
    "kaiming_normal": he_normal,
}


def get(name: str) -> Callable[..., Any]:
    """The initialiser called ``name`` (for layer arguments such as ``initializer="he_uniform"``)."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):  # TypeError: an unhashable name such as a list
        raise ArgumentError(f"unknown initializer {name!r}; known: {sorted(_BY_NAME)}") from None

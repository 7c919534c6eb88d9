"""Small array helpers shared by the op families (all written against ``xp``)."""

from __future__ import annotations

from typing import Any


def unbroadcast(g: Any, shape: tuple) -> Any:
    """Sum ``g`` down to ``shape``: the gradient of a broadcast from ``shape`` to ``g.shape``."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, s in enumerate(shape) if s == 1 and g.shape[i + lead] != 1
    )
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)


def normalize_axis(axis: int, ndim: int, opname: str = "op") -> int:
    """``axis`` in ``[0, ndim)``; negative axes count from the end. ``ValueError`` if out of range."""
    from singa_lite.errors import ShapeError

    if not -ndim <= axis < max(ndim, 1):
        raise ShapeError(f"{opname}: axis {axis} is out of range for a {ndim}-d input")
    return axis % max(ndim, 1)

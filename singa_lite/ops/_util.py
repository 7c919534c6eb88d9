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


def column_sums(xp: Any, a: Any) -> Any:
    """The sums down the rows of 2-D ``a`` (a bias's gradient). On NumPy as ``ones @ a``:
    BLAS's matrix-vector product runs on its threads, 2-4x NumPy's one-core sum down the rows
    on a (2048, 512) float32 ``a``, its rounding no worse. CuPy sums (a CUDA-graph capture
    refuses the cuBLAS call a product would make)."""
    if xp.__name__ != "numpy" or a.dtype.kind != "f" or a.dtype.itemsize < 4:  # BLAS: float32, 64
        return a.sum(axis=0)
    return xp.ones(a.shape[0], a.dtype) @ a


def normalize_axis(axis: int, ndim: int, opname: str = "op") -> int:
    """``axis`` in ``[0, ndim)``; negative axes count from the end. ``ValueError`` if out of range."""
    from singa_lite.errors import ShapeError

    if not -ndim <= axis < max(ndim, 1):
        raise ShapeError(f"{opname}: axis {axis} is out of range for a {ndim}-d input")
    return axis % max(ndim, 1)

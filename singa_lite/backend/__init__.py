"""Backend registry: one module per array library, chosen by the array itself.

A backend is a small object with the same attributes in every module (``name``, ``xp``,
``is_array``, ``to_numpy``, ``from_numpy``, ``new_rng``, ``synchronize``). The NumPy backend is
always registered; the CuPy backend registers itself only when CuPy imports and sees a GPU, so
nothing outside ``backend/cupy.py`` ever imports CuPy.
"""

from __future__ import annotations

from typing import Any

from singa_lite.backend import numpy as _numpy_backend

_BACKENDS: dict[str, Any] = {"numpy": _numpy_backend}


def register(backend: Any) -> None:
    """Add a backend module (or object) under its ``name``."""
    _BACKENDS[backend.name] = backend


def get(name: str) -> Any:
    """The backend registered as ``name``; ``KeyError`` lists the known ones."""
    try:
        return _BACKENDS[name]
    except KeyError:
        raise KeyError(f"no backend {name!r}; registered: {sorted(_BACKENDS)}") from None


def available() -> list[str]:
    """Names of the registered backends, NumPy first."""
    return list(_BACKENDS)


def backend_of(array: Any) -> Any:
    """The backend that owns ``array`` (NumPy for anything that is not a device array)."""
    for b in _BACKENDS.values():
        if b is not _numpy_backend and b.is_array(array):
            return b
    return _numpy_backend


def get_array_module(array: Any) -> Any:
    """``numpy`` or ``cupy``, whichever ``array`` belongs to (Chainer's ``get_array_module``)."""
    return backend_of(array).xp


def _try_cupy() -> None:
    from singa_lite.backend import cupy as _cupy_backend

    if _cupy_backend.AVAILABLE:
        register(_cupy_backend)


_try_cupy()

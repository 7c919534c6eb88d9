"""A pretend device for tests: arrays NumPy cannot read (as CuPy's refuse ``np.asarray``) and
the backend that owns them, so entry points are checked to move values through the backend,
never through an implicit conversion. Register with
``monkeypatch.setitem(backend._BACKENDS, BoxBackend.name, BoxBackend())``."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite import backend


class Boxed:
    """An array of the pretend device: a dtype, a shape, and no implicit NumPy conversion."""

    def __init__(self, arr: Any) -> None:
        self.arr = np.array(arr)
        a = self.arr
        self.dtype, self.shape, self.ndim, self.size = a.dtype, a.shape, a.ndim, a.size

    def astype(self, dtype: Any, copy: bool = True) -> Boxed:
        return Boxed(self.arr.astype(dtype, copy=copy))

    def reshape(self, *shape: Any) -> Boxed:
        return Boxed(self.arr.reshape(*shape))

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError("Implicit conversion to a NumPy array is not allowed")


class BoxBackend:
    """The pretend device's backend: ``Boxed`` arrays, read through ``to_numpy``."""

    name = "boxes"
    xp = np

    def __getattr__(self, attr: str) -> Any:
        # Anything else as the NumPy backend does it; device-only hooks do nothing here.
        return getattr(backend.get("numpy"), attr, lambda *args, **kwargs: None)

    @staticmethod
    def is_array(a: Any) -> bool:
        return isinstance(a, Boxed)

    @staticmethod
    def to_numpy(a: Boxed) -> np.ndarray:
        return a.arr.copy()

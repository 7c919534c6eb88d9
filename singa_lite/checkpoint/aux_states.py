"""User aux states: nested dicts/lists/tuples of Tensors, arrays, numbers, strings, bools, None.

Arrays may belong to any backend (NumPy, CuPy); every array comes back as a NumPy array, and
every Tensor as a Tensor on the loading model's device.

The structure is kept as one JSON document (``aux@json``) in which every Tensor, array and NumPy
scalar is replaced by a reference ``{"__singa_lite__": "tensor", "ref": "aux/history/2"}`` to a
dataset at the value's path under ``aux/``. Tuples and dicts that happen to use the tag key are
wrapped (``{"__singa_lite__": "tuple", "items": [...]}``), so every value comes back with its
type. Nothing is pickled; anything else is refused with the path of the offending value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from singa_lite import backend
from singa_lite.checkpoint.store import ARRAY_KINDS, escape
from singa_lite.errors import CheckpointError, CorruptCheckpointError
from singa_lite.tensor import Tensor

TAG = "__singa_lite__"
ARRAY_TAGS = ("tensor", "ndarray", "scalar")


def encode(value: Any, arrays: dict[str, np.ndarray], host: Callable[[Any], np.ndarray]) -> Any:
    """The JSON form of ``value``; its arrays go into ``arrays`` keyed by dataset path.

    ``host(array)`` returns a backend array's values as a host array (a copy for a non-blocking
    save); it is called only for arrays whose dtype can be saved.
    """
    return _encode(value, ("aux",), arrays, host)


def _encode(value: Any, path: tuple[str, ...], arrays: dict, host: Callable) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else {TAG: "float", "value": repr(value)}
    if isinstance(value, Tensor):
        return _array_ref(value.data, "tensor", path, arrays, host)
    if backend.backend_of(value).is_array(value):
        return _array_ref(value, "ndarray", path, arrays, host)
    if isinstance(value, np.generic):
        return _array_ref(np.asarray(value), "scalar", path, arrays, np.asarray)
    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise CheckpointError(f"aux states at {_where(path)}: dict keys must be str, got {bad[0]!r}")
        items = {k: _encode(v, (*path, escape(k)), arrays, host) for k, v in value.items()}
        return {TAG: "dict", "items": items} if TAG in value else items
    if isinstance(value, (list, tuple)):
        items_l = [_encode(v, (*path, str(i)), arrays, host) for i, v in enumerate(value)]
        return {TAG: "tuple", "items": items_l} if isinstance(value, tuple) else items_l
    raise CheckpointError(
        f"aux states at {_where(path)}: cannot save a {type(value).__name__}; use Tensors, NumPy "
        "arrays, numbers, str, bool, None, and lists, tuples and dicts of them"
    )


def _array_ref(arr: Any, kind: str, path: tuple[str, ...], arrays: dict, host: Callable) -> dict:
    if np.dtype(arr.dtype).kind not in ARRAY_KINDS:
        raise CheckpointError(f"aux states at {_where(path)}: arrays of dtype {arr.dtype} cannot be saved")
    ref = "/".join(path)
    arrays[ref] = host(arr)
    return {TAG: kind, "ref": ref}


def _where(path: tuple[str, ...]) -> str:
    return "/".join(path)


def decode(doc: Any, read: Callable[[str, str], Any], where: str) -> Any:
    """The aux states from their JSON form; ``read(ref, kind)`` fetches an array by reference."""
    if isinstance(doc, list):
        return [decode(v, read, where) for v in doc]
    if not isinstance(doc, dict):
        return doc
    tag = doc.get(TAG)
    if tag is None:
        return {k: decode(v, read, where) for k, v in doc.items()}
    if tag in ARRAY_TAGS and isinstance(doc.get("ref"), str) and doc["ref"].startswith("aux/"):
        return read(doc["ref"], tag)
    if tag == "float" and doc.get("value") in ("nan", "inf", "-inf"):
        return float(doc["value"])
    if tag == "tuple" and isinstance(doc.get("items"), list):
        return tuple(decode(v, read, where) for v in doc["items"])
    if tag == "dict" and isinstance(doc.get("items"), dict):
        return {k: decode(v, read, where) for k, v in doc["items"].items()}
    raise CorruptCheckpointError(f"{where}: malformed aux entry {doc!r}")

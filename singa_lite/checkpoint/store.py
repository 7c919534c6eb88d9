"""The HDF5 layout of a checkpoint (format version 1): writing it and reading it back safely.

::

    /                 attrs: format, format_version, library_version, created, model_class,
                             [step], [metrics] (JSON)
    params/<name>     trainable parameters            (datasets)
    states/<name>     other layer states, e.g. BatchNorm running statistics
    optimizer/        attrs: one JSON value per non-slot entry of ``Optimizer.get_states()``
                      (optimizer, step_counter, lr, hyperparams) and ``slots`` (JSON list)
    optimizer/<param name>/<slot>   slot arrays (moments, m, v, ...)
    rng/              attrs: ``cpu``, ``cuda:<id>``: generator states (JSON)
    inputs/           attrs: ``specs``: placeholder shapes and dtypes for ``compile`` (JSON)
    aux/              attrs: ``json``: the user's aux states, arrays replaced by references
    aux/<key>[/...]   the aux tensors and arrays (datasets)

Every dataset has one attribute ``meta``: JSON ``{"dtype": "<f4", "shape": [...], "xxh3": hex}``;
loading checks the dataset against it. Names are written as given (``params/conv1.W``), with
``%``, ``/`` and NUL escaped as ``%25``, ``%2F``, ``%00`` (and ``.``/``..``/empty names, which
HDF5 cannot hold, as ``%2E``/``%2E%2E``/``%``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np

from singa_lite.checkpoint.integrity import USERBLOCK_SIZE, dataset_checksum
from singa_lite.errors import CorruptCheckpointError, IncompatibleCheckpointError

FORMAT = "singa_lite.checkpoint"
FORMAT_VERSION = 1
GROUPS = ("params", "states", "optimizer", "rng", "inputs", "aux")
ARRAY_KINDS = "biufc"  # bool, int, uint, float, complex: never object, string or compound


# -- names ---------------------------------------------------------------------------------------
def escape(name: str) -> str:
    """``name`` as one HDF5 link name (reversible by :func:`unescape`)."""
    if name == "":
        return "%"
    if name in (".", ".."):
        return "%2E" * len(name)
    return name.replace("%", "%25").replace("/", "%2F").replace("\0", "%00")


_ESCAPED = re.compile(r"%(25|2F|00|2E)")


def unescape(name: str) -> str:
    """The original name of an escaped HDF5 link name."""
    if name == "%":
        return ""
    return _ESCAPED.sub(lambda m: chr(int(m[1], 16)), name)


def dumps(value: Any) -> str:
    """JSON text of an attribute value (NaN and infinities allowed, as Python's json writes them)."""
    return json.dumps(value, sort_keys=False, separators=(",", ":"))


# -- writing -------------------------------------------------------------------------------------
def create_file(path: str) -> h5py.File:
    """A new HDF5 file with room for the checksummed header in its user block."""
    return h5py.File(path, "w", userblock_size=USERBLOCK_SIZE)


def write_array(group: h5py.Group, link: str, arr: np.ndarray) -> None:
    """One dataset named ``link`` (already escaped), contiguous and uncompressed, with its ``meta``."""
    if arr.dtype.kind not in ARRAY_KINDS:
        raise TypeError(f"{group.name}/{link}: arrays of dtype {arr.dtype} cannot be saved (no pickle)")
    ds = group.create_dataset(link, data=arr)
    ds.attrs["meta"] = dumps(
        {"dtype": arr.dtype.str, "shape": list(arr.shape), "xxh3": dataset_checksum(arr)}
    )


def write_attrs(obj: h5py.Group | h5py.File, attrs: dict[str, Any]) -> None:
    """Each value as a JSON string attribute (strings and numbers included, so types round-trip)."""
    for key, value in attrs.items():
        obj.attrs[key] = dumps(value)


# -- reading -------------------------------------------------------------------------------------
class Reader:
    """Read access to a verified checkpoint; every malformed piece raises a typed error."""

    def __init__(self, path: str, f: h5py.File) -> None:
        self.path = path
        self.f = f
        self._check_root()

    def _check_root(self) -> None:
        fmt = self.root_attr("format", None)
        if fmt != FORMAT:
            raise IncompatibleCheckpointError(f"{self.path}: format {fmt!r}, expected {FORMAT!r}")
        version = self.root_attr("format_version", None)
        if not isinstance(version, int) or isinstance(version, bool):
            raise CorruptCheckpointError(f"{self.path}: format_version {version!r} is not an integer")
        if version > FORMAT_VERSION:
            raise IncompatibleCheckpointError(
                f"{self.path}: format version {version}, this singa_lite reads versions up to "
                f"{FORMAT_VERSION}: upgrade singa_lite to load it"
            )
        # Only hard links: soft and external links could lead outside this verified file.
        soft = []
        self.f.visititems_links(
            lambda name, link: soft.append(name) if not isinstance(link, h5py.HardLink) else None
        )
        if soft:
            raise CorruptCheckpointError(f"{self.path}: {soft[0]} is a soft or external link")
        for name in self.f:
            if name not in GROUPS or not isinstance(self.f[name], h5py.Group):
                raise CorruptCheckpointError(f"{self.path}: unexpected entry {name!r} at the root")

    @staticmethod
    def _child(group: Any, link: str) -> Any:
        return group[link]  # every link was checked to be a hard link when the file was opened

    def root_attr(self, key: str, default: Any = KeyError) -> Any:
        return self.attr(self.f, key, default)

    def attr(self, obj: Any, key: str, default: Any = KeyError) -> Any:
        """The JSON attribute ``key`` of ``obj`` decoded (``default`` when absent)."""
        try:
            raw = obj.attrs[key]
        except KeyError:
            if default is KeyError:
                raise CorruptCheckpointError(f"{self.path}: missing attribute {obj.name}@{key}") from None
            return default
        where = f"{obj.name.rstrip('/')}@{key}"
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        if not isinstance(raw, str):
            raise CorruptCheckpointError(f"{self.path}: attribute {where} is not JSON text")
        try:
            return json.loads(raw)
        except ValueError:
            raise CorruptCheckpointError(f"{self.path}: attribute {where} is not valid JSON") from None

    def attrs(self, group: str) -> dict[str, Any]:
        g = self.group(group)
        return {} if g is None else {k: self.attr(g, k) for k in g.attrs}

    def group(self, name: str) -> h5py.Group | None:
        obj = self._child(self.f, name) if name in self.f else None
        if obj is not None and not isinstance(obj, h5py.Group):
            raise CorruptCheckpointError(f"{self.path}: {name} is not a group")
        return obj

    def dataset(self, key: str) -> h5py.Dataset:
        """The dataset at ``key`` (an HDF5 path), checked against its ``meta`` attribute."""
        obj: Any = self.f
        for link in key.split("/"):  # each step through a hard link only
            if not isinstance(obj, h5py.Group) or link not in obj:
                raise CorruptCheckpointError(f"{self.path}: {key} is missing")
            obj = self._child(obj, link)
        if not isinstance(obj, h5py.Dataset):
            raise CorruptCheckpointError(f"{self.path}: {key} is not a dataset")
        self.check(key, obj)
        return obj

    def check(self, key: str, ds: h5py.Dataset) -> dict:
        """Reject object/string/compound dtypes and datasets that disagree with their ``meta``."""
        if ds.dtype.kind not in ARRAY_KINDS:
            raise CorruptCheckpointError(f"{self.path}: {key} has unsupported dtype {ds.dtype} (key {key})")
        meta = self.attr(ds, "meta")
        if not isinstance(meta, dict) or not {"dtype", "shape", "xxh3"} <= set(meta):
            raise CorruptCheckpointError(f"{self.path}: {key}: malformed meta attribute {meta!r}")
        if list(ds.shape) != meta["shape"] or ds.dtype.str != meta["dtype"]:
            raise CorruptCheckpointError(
                f"{self.path}: {key}: dataset {ds.dtype.str}{list(ds.shape)} disagrees with its recorded "
                f"{meta['dtype']}{meta['shape']}"
            )
        return meta

    def datasets(self, group: str) -> dict[str, h5py.Dataset]:
        """The datasets directly under ``group`` by unescaped name, each checked."""
        g = self.group(group)
        if g is None:
            return {}
        out = {}
        for link in g:
            ds = self._child(g, link)
            if not isinstance(ds, h5py.Dataset):
                raise CorruptCheckpointError(f"{self.path}: {group}/{link} is not a dataset")
            self.check(f"{group}/{link}", ds)
            out[unescape(link)] = ds
        return out

    def walk(self, group: str) -> Iterator[tuple[str, h5py.Dataset]]:
        """Every dataset below ``group`` with its HDF5 path (for verify, inspect and diff)."""
        g = self.group(group)
        if g is None:
            return
        stack = [(group, g)]
        while stack:
            prefix, node = stack.pop()
            for link in sorted(node):
                key = f"{prefix}/{link}"
                obj = self._child(node, link)
                if isinstance(obj, h5py.Group):
                    stack.append((key, obj))
                elif isinstance(obj, h5py.Dataset):
                    self.check(key, obj)
                    yield key, obj
                else:
                    raise CorruptCheckpointError(f"{self.path}: {key} is neither a group nor a dataset")


def converts_losslessly(src: Any, dst: Any) -> bool:
    """Whether a dataset of dtype ``src`` may be read into a tensor of dtype ``dst``: the same
    dtype, float into float (a precision the model chose), or an integer or bool into a type
    that holds every value of it. HDF5 would clip int16 300 into int8 127 without a word."""
    src, dst = np.dtype(src), np.dtype(dst)
    if src == dst or (src.kind == "f" and dst.kind == "f"):
        return True
    return src.kind in "biu" and np.can_cast(src, dst, "safe")


def read_into(ds: h5py.Dataset, out: np.ndarray) -> None:
    """Read a dataset straight into ``out`` (HDF5 converts the dtype if it differs)."""
    if out.size:
        ds.read_direct(out)


def read_array(ds: h5py.Dataset) -> np.ndarray:
    """A new array holding the dataset."""
    out = np.empty(ds.shape, dtype=ds.dtype)
    read_into(ds, out)
    return out

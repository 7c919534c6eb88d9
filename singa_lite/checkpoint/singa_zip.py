"""Apache SINGA's own checkpoints: a zip of ``tensor_dict.npz`` and ``states_attr.json``.

``states_attr.json`` maps each name to ``{"state_type": 0 | 1, "shape": [...], "dtype": ...}``:
type 0 is a model state, type 1 an aux state (returned as a Tensor). SINGA's files carry no
checksum; the zip's own CRC-32 of each member is checked as it is read.

Nothing is decompressed or allocated on the file's word alone. Before a byte is inflated, the
declared size of every member is checked: the JSON against ``MAX_ATTR_BYTES``, the npz against
what the model's own states and ``aux_limit`` allow. Then every ``.npy`` header is parsed and
checked (a numeric dtype, no pickled objects, a shape that fills exactly the member's bytes
and agrees with the JSON), and each model state's shape against the tensor it will fill: a
mismatch is reported without reading the array. The arrays that fill no model tensor (aux
states) total at most ``aux_limit`` bytes. Zip members inflate no further than their declared
size, so a member that lies about it fails its CRC instead of growing.
"""

from __future__ import annotations

import io
import json
import math
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from singa_lite import _args
from singa_lite.checkpoint.integrity import open_regular
from singa_lite.checkpoint.loader import Report
from singa_lite.errors import CorruptCheckpointError
from singa_lite.tensor import Tensor

TENSOR_DICT = "tensor_dict.npz"
STATES_ATTR = "states_attr.json"
MODEL_STATE, AUX_STATE = 0, 1
MAX_ATTR_BYTES = 64 << 20
"""The largest ``states_attr.json`` read (a few hundred bytes per state in SINGA's files)."""
AUX_LIMIT = 1 << 30
"""Default bound on the bytes of the arrays not matched to a model tensor (aux states; every
array when no model is given)."""
_MAX_HEADER = 1 << 16  # bytes of one .npy header, more than any real one
_ENTRY_BYTES = 1 << 10  # a model state's .npy header and zip headers, beyond its data
_ARRAY_KINDS = "biufc"


@dataclass
class _Array:
    """One ``.npy`` member of the npz, its header parsed and checked, its data not yet read."""

    name: str
    info: zipfile.ZipInfo
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran: bool

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def read(
    path: Any, expected: Mapping[str, tuple[int, ...]] | None = None, aux_limit: int = AUX_LIMIT
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(model states, aux states)`` of a SINGA zip checkpoint as NumPy arrays.

    ``expected`` maps model-state names to the shapes of the tensors they will fill: those must
    match, and are bounded by them. The other arrays (aux states, and every array when
    ``expected`` is None) may take ``aux_limit`` bytes in all.
    """
    path = _args.path("read_singa_zip", "path", path)
    aux_limit = _args.count("read_singa_zip", "aux_limit", aux_limit, 0)
    with _Zip(path, expected, aux_limit) as z:
        entries = z.entries()
        for name, e in entries.items():
            if expected is not None and name in expected and e.shape != tuple(expected[name]):
                raise z.fail(f"{name}: shape {e.shape} does not match the model's {tuple(expected[name])}")
        z.check_free({k: e for k, e in entries.items() if expected is None or k not in expected})
        model_states: dict[str, np.ndarray] = {}
        aux_states: dict[str, np.ndarray] = {}
        for name, e in entries.items():
            (model_states if z.kinds[name] == MODEL_STATE else aux_states)[name] = z.array(e)
    return model_states, aux_states


class _Zip:
    """An open SINGA zip: its JSON read, its npz staged, every ``.npy`` header checked."""

    def __init__(self, path: str, expected: Mapping[str, tuple[int, ...]] | None, aux_limit: int) -> None:
        self.path, self.expected, self.aux_limit = path, dict(expected or {}), aux_limit
        fd = open_regular(path)
        self.file = os.fdopen(fd, "rb")
        self.kinds: dict[str, int] = {}
        self.attrs: dict[str, Any] = {}
        self.npz: zipfile.ZipFile | None = None

    def __enter__(self) -> _Zip:
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self.npz is not None:
            self.npz.close()
        self.file.close()

    def fail(self, what: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"{self.path}: {what}")

    def check_free(self, entries: dict[str, _Array]) -> None:
        """The arrays that fill no model tensor must fit ``aux_limit`` together."""
        free = sum(e.nbytes for e in entries.values())
        if free > self.aux_limit:
            raise self.fail(
                f"its arrays that fill no model tensor take {free} bytes, over the limit of "
                f"{self.aux_limit} (read(..., aux_limit=) raises it for a trusted file)"
            )

    def _open(self) -> None:
        try:
            outer = zipfile.ZipFile(self.file)
            attr_info = outer.getinfo(STATES_ATTR)
            npz_info = outer.getinfo(TENSOR_DICT)
        except KeyError as e:
            raise self.fail(f"a SINGA checkpoint must hold {e}") from None
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
            raise self.fail(f"damaged SINGA zip checkpoint: {e}") from e
        if attr_info.file_size > MAX_ATTR_BYTES:
            raise self.fail(f"{STATES_ATTR} declares {attr_info.file_size} bytes, over {MAX_ATTR_BYTES}")
        try:
            self.attrs = json.loads(outer.read(attr_info))
        except (ValueError, RecursionError, zipfile.BadZipFile, OSError, EOFError) as e:
            raise self.fail(f"{STATES_ATTR} is damaged: {type(e).__name__}: {e}") from None
        self._check_attrs()
        # Bound the npz by the model's own states (at the widest dtype) and aux_limit.
        bound = self.aux_limit + sum(
            16 * math.prod(shape) + _ENTRY_BYTES
            for name, shape in self.expected.items()
            if self.kinds.get(name) == MODEL_STATE
        )
        if npz_info.file_size > bound:
            raise self.fail(
                f"{TENSOR_DICT} declares {npz_info.file_size} bytes, more than the model's states "
                f"and the aux limit allow ({bound}): refused before inflating it"
            )
        try:
            # np.load needs a seekable file; the npz is compressed in the zip, so stage it
            # (at most its declared size, checked above, is inflated).
            staged = io.BytesIO(outer.read(npz_info))
            self.npz = zipfile.ZipFile(staged)
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
            raise self.fail(f"damaged SINGA zip checkpoint: {e}") from e

    def _check_attrs(self) -> None:
        if not isinstance(self.attrs, dict):
            raise self.fail(f"{STATES_ATTR} is not a JSON object")
        for name, meta in self.attrs.items():
            if not isinstance(meta, dict) or meta.get("state_type") not in (MODEL_STATE, AUX_STATE):
                raise self.fail(f"{name}: no valid state_type in {STATES_ATTR}")
            shape = meta.get("shape")
            if shape is not None and (
                not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)
            ):
                raise self.fail(f"{name}: shape {shape!r} in {STATES_ATTR} is not a list of sizes")
            self.kinds[name] = meta["state_type"]

    def entries(self) -> dict[str, _Array]:
        """Every ``.npy`` of the npz, its header checked; nothing else is read."""
        assert self.npz is not None
        out: dict[str, _Array] = {}
        for info in self.npz.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name not in self.attrs:
                raise self.fail(f"{name}: an array with no entry in {STATES_ATTR}")
            if name in out:
                raise self.fail(f"{name}: stored twice")
            out[name] = self._header(name, info)
        missing = sorted(set(self.attrs) - set(out))
        if missing:
            raise self.fail(f"{TENSOR_DICT} lacks the arrays {missing} that {STATES_ATTR} lists")
        return out

    def _header(self, name: str, info: zipfile.ZipInfo) -> _Array:
        assert self.npz is not None
        try:
            with self.npz.open(info) as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(
                        f, max_header_size=_MAX_HEADER
                    )
                elif version in ((2, 0), (3, 0)):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(
                        f, max_header_size=_MAX_HEADER
                    )
                else:
                    raise ValueError(f"unknown .npy format version {version}")
                header_len = f.tell()
        except (ValueError, TypeError, SyntaxError, OSError, EOFError, zipfile.BadZipFile) as e:
            raise self.fail(f"{name}: damaged .npy header: {e}") from None
        if dtype.hasobject or dtype.kind not in _ARRAY_KINDS or dtype.fields is not None:
            raise self.fail(f"{name}: dtype {dtype} is not a plain numeric type (no pickled objects)")
        arr = _Array(name, info, tuple(int(d) for d in shape), dtype, bool(fortran))
        if header_len + arr.nbytes != info.file_size:
            raise self.fail(
                f"{name}: its header gives shape {arr.shape} of {dtype} ({arr.nbytes} bytes), but the member "
                f"holds {info.file_size - header_len}"
            )
        recorded = self.attrs[name].get("shape")
        if recorded is not None and list(arr.shape) != recorded:
            raise self.fail(f"{name}: shape {arr.shape} != recorded {recorded}")
        return arr

    def array(self, e: _Array) -> np.ndarray:
        """The array of ``e``, read into a new buffer of its checked size (CRC checked)."""
        assert self.npz is not None
        out = np.empty(e.shape, dtype=e.dtype, order="F" if e.fortran else "C")
        flat = out.reshape(-1, order="A").view(np.uint8).data if out.size else memoryview(bytearray())
        try:
            with self.npz.open(e.info) as member:
                f: Any = member  # a ZipExtFile: seekable, with readinto
                f.seek(e.info.file_size - e.nbytes)
                got = 0
                while got < e.nbytes:
                    n = f.readinto(flat[got:])
                    if not n:
                        raise EOFError("the member ended early")
                    got += n
                f.read(1)  # reaching the end checks the member's CRC
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
            raise self.fail(f"{e.name}: damaged data: {err}") from None
        return out


def load(model: Any, path: str, strict: bool, aux_limit: int = AUX_LIMIT) -> dict:
    """Load a SINGA zip checkpoint into ``model``; the aux states come back as Tensors.

    Missing, unexpected and mis-shaped model states are found from the ``.npy`` headers,
    before any array is read; only the arrays that will be used are read."""
    targets = model.get_states()
    with _Zip(path, {k: t.shape for k, t in targets.items()}, aux_limit) as z:
        entries = z.entries()
        saved = {k: e for k, e in entries.items() if z.kinds[k] == MODEL_STATE}
        report = Report(
            missing=sorted(set(targets) - set(saved)),
            unexpected=sorted(set(saved) - set(targets)),
            notes=["a SINGA zip checkpoint: no optimizer or RNG states"],
        )
        matched = []
        for name in sorted(set(saved) & set(targets)):
            if saved[name].shape != targets[name].shape:
                report.mismatched.append(
                    f"{name} (checkpoint {saved[name].shape}, model {targets[name].shape})"
                )
            else:
                matched.append(name)
        if strict and report:
            raise report.error(path)
        aux_entries = {k: e for k, e in entries.items() if z.kinds[k] == AUX_STATE}
        z.check_free(aux_entries)
        arrays = {name: z.array(saved[name]) for name in matched}
        aux = {k: z.array(e) for k, e in aux_entries.items()}
    for name, arr in arrays.items():
        targets[name].copy_from(arr)
    dev = next(iter(targets.values())).device if targets else None
    out: dict[str, Any] = {k: Tensor(device=dev, data=v, requires_grad=False) for k, v in aux.items()}
    if not strict:
        out["__report__"] = report.as_dict()
    return out

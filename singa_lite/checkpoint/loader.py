"""Loading a checkpoint into a model: verify, match, then read each dataset into its target.

The order is what makes loading safe: (1) only a regular file is opened; (2) its whole-file
checksum is verified by streaming it, before libhdf5 parses a byte; (3) HDF5 opens the very
file that was verified (``/proc/self/fd``); (4) every key is matched against the model and,
with ``strict=True``, all mismatches are reported at once *before anything is changed*;
(5) optimizer slots are read and handed to ``Optimizer.set_states`` (which validates before it
commits), then the RNG states, then each model tensor is read straight into its own buffer (on
a GPU: through a pinned buffer, one host-to-device copy into the tensor's array).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from singa_lite import _args
from singa_lite import device as _device
from singa_lite.checkpoint import aux_states as _aux
from singa_lite.checkpoint import integrity, store
from singa_lite.checkpoint.staging import DeviceFiller
from singa_lite.checkpoint.states import model_optimizer
from singa_lite.errors import (
    CheckpointError,
    CorruptCheckpointError,
    IncompatibleCheckpointError,
    SingaLiteError,
    StateMismatchError,
)
from singa_lite.tensor import Tensor, as_dtype

_H5_ERRORS = (OSError, KeyError, ValueError, TypeError, RuntimeError)
PLACEHOLDER_LIMIT = 1 << 30
"""The most bytes of placeholders that loading into an uncompiled model allocates from the
file's input specs (a batch of inputs; far below anything real)."""


@dataclass
class Report:
    """What did not match between a checkpoint and a model (``strict=False`` returns it)."""

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.mismatched)

    def as_dict(self) -> dict[str, list[str]]:
        return {
            "missing": self.missing,
            "unexpected": self.unexpected,
            "mismatched": self.mismatched,
            "notes": self.notes,
        }

    def error(self, path: str) -> StateMismatchError:
        parts = [
            f"{k} keys {v}"
            for k, v in (
                ("missing", self.missing),
                ("unexpected", self.unexpected),
                ("mis-shaped or mis-typed", self.mismatched),
            )
            if v
        ]
        return StateMismatchError(
            f"{path}: the checkpoint does not match the model: {'; '.join(parts)}. "
            "Load with strict=False to load the keys that match."
        )


@contextlib.contextmanager
def open_verified(path: str) -> Iterator[store.Reader]:
    """A :class:`store.Reader` on ``path`` after its whole-file checksum was verified.

    HDF5 parses exactly the bytes that were verified: the file behind the descriptor that was
    checksummed, even when another process replaces ``path`` meanwhile (``_open_h5``).
    """
    path = _args.path("open_verified", "path", path)
    fd = integrity.open_regular(path)
    try:
        integrity.verify_fd(path, fd)
        f, handle = _open_h5(path, fd)
        with contextlib.ExitStack() as stack, f:
            if handle is not None:
                stack.callback(handle.close)  # runs after the File is closed
            try:
                yield store.Reader(path, f)
            except _H5_ERRORS as e:
                if isinstance(e, SingaLiteError):
                    raise
                raise CorruptCheckpointError(f"{path}: malformed checkpoint: {type(e).__name__}: {e}") from e
    finally:
        os.close(fd)


def _open_h5(path: str, fd: int) -> tuple[h5py.File, Any]:
    """HDF5 on the verified file ``fd``: through ``/proc/self/fd`` (HDF5's own fast driver), or,
    where that fails because the file was replaced (unlinked, HDF5 cannot resolve its real
    path), through a Python file object on the same descriptor. Either way the very bytes that
    were verified are parsed: a concurrent save never makes a good file look damaged."""
    name = integrity.fd_path(fd, path)
    try:
        return h5py.File(name, "r"), None
    except _H5_ERRORS as e:
        first = e
    if name != path:
        handle = os.fdopen(os.dup(fd), "rb", buffering=0)
        try:
            return h5py.File(handle, "r"), handle  # h5py's fileobj driver; the caller closes both
        except _H5_ERRORS:
            handle.close()
    raise CorruptCheckpointError(f"{path}: HDF5 cannot open the file: {first}") from first


def load_model_states(model: Any, fpath: Any, strict: bool = True) -> dict:
    """Restore into ``model`` what ``save_model_states`` wrote; returns the aux states.

    Also reads SINGA's own zip checkpoints. ``strict=False`` loads the keys that match and
    returns the mismatch report under ``"__report__"``.
    """
    _args.has("load_model_states", "model", model, ("get_params", "get_states"), "a Model (or Layer)")
    path = _args.path("load_model_states", "fpath", fpath)
    kind = integrity.sniff(path)
    if kind == "singa_zip":
        from singa_lite.checkpoint import singa_zip

        return singa_zip.load(model, path, strict)
    if kind == "hdf5":
        raise IncompatibleCheckpointError(f"{path}: an HDF5 file but not a singa_lite checkpoint")
    with open_verified(path) as reader:
        aux = _Loader(reader, model).run(strict)
    return aux


class _Loader:
    """One load of a verified checkpoint into one model."""

    def __init__(self, reader: store.Reader, model: Any) -> None:
        self.r = reader
        self.path = reader.path
        self.model = model
        self.report = Report()

    def run(self, strict: bool) -> dict:
        self._compile_if_needed()
        targets = self.model.get_states()
        dev = next(iter(targets.values())).device if targets else _device.get_default_device()
        # Read and check everything that can fail before the first change to the model.
        pairs = self._match_tensors(targets)
        opt_states = self._optimizer_states()
        rng = self._rng_states()
        aux = self._aux(dev)
        if strict and self.report:
            raise self.report.error(self.path)
        if opt_states is not None:
            self._set_optimizer(opt_states, strict)
        for dev_rng, state, key in rng:
            try:
                dev_rng.set_rng_state(state)
            except (TypeError, ValueError, KeyError) as e:
                raise CorruptCheckpointError(f"{self.path}: rng/{key}: bad generator state: {e}") from e
        with DeviceFiller(max((t.nbytes() for _, t in pairs), default=0)) as filler:
            for ds, t in pairs:
                filler.fill(ds, t)
        if not strict:
            aux["__report__"] = self.report.as_dict()
        return aux

    # -- model tensors ---------------------------------------------------------------------
    def _compile_if_needed(self) -> None:
        """A model that was never compiled has no tensors yet: build it from the saved specs."""
        specs = self.r.attrs("inputs").get("specs") or []
        if self.model.get_states() or not specs or getattr(self.model, "_initialized", True):
            return
        checked = input_specs(self.path, specs, PLACEHOLDER_LIMIT)
        try:
            placeholders = [Tensor(shape, dtype=dtype) for shape, dtype in checked]
            # keep the model's mode: an eval-mode model stays one after loading
            self.model.compile(
                placeholders,
                is_train=getattr(self.model, "training", True),
                use_graph=getattr(self.model, "graph_mode", False),
            )
        except (KeyError, TypeError, SingaLiteError) as e:
            raise CheckpointError(
                f"{self.path}: compiling the model from the saved input specs {specs} failed: {e}"
            ) from e

    def _match_tensors(self, targets: dict[str, Tensor]) -> list[tuple[h5py.Dataset, Tensor]]:
        saved = self.r.datasets("params")
        for name, ds in self.r.datasets("states").items():
            if name in saved:
                raise CorruptCheckpointError(f"{self.path}: {name!r} is both in params/ and states/")
            saved[name] = ds
        self.report.missing += sorted(set(targets) - set(saved))
        self.report.unexpected += sorted(set(saved) - set(targets))
        pairs = []
        for name in sorted(set(saved) & set(targets)):
            ds, t = saved[name], targets[name]
            if tuple(ds.shape) != t.shape:
                self.report.mismatched.append(f"{name} (checkpoint {tuple(ds.shape)}, model {t.shape})")
            elif not store.converts_losslessly(ds.dtype, t.dtype):
                self.report.mismatched.append(
                    f"{name} (checkpoint {ds.dtype}, model {t.dtype}: the values would not survive)"
                )
            else:
                pairs.append((ds, t))
        return pairs

    # -- optimizer -------------------------------------------------------------------------
    def _optimizer_states(self) -> dict | None:
        """The saved optimizer states, slots read into new arrays; ``None`` if nothing to load."""
        opt = model_optimizer(self.model)
        group = self.r.group("optimizer")
        if group is None:
            if opt is not None:
                self.report.notes.append("no optimizer states in the checkpoint: the optimizer keeps its own")
            return None
        if opt is None:
            self.report.notes.append("the checkpoint's optimizer states were skipped: the model has none")
            return None
        states = self.r.attrs("optimizer")
        slot_names = states.pop("slots", [])
        if not isinstance(slot_names, list) or not all(isinstance(s, str) for s in slot_names):
            raise CorruptCheckpointError(f"{self.path}: optimizer@slots is malformed")
        if states.get("optimizer") != type(opt).__name__:
            self.report.mismatched.append(
                f"optimizer (checkpoint {states.get('optimizer')}, model {type(opt).__name__})"
            )
            return None
        params = self.model.get_params()
        slots: dict[str, dict[str, np.ndarray]] = {s: {} for s in slot_names}
        for link in group:
            pname = store.unescape(link)
            for slot, ds in self.r.datasets(f"optimizer/{link}").items():
                key = f"optimizer/{pname}/{slot}"
                if slot not in slots:
                    raise CorruptCheckpointError(f"{self.path}: {key}: slot not listed in optimizer@slots")
                if pname not in params:
                    self.report.unexpected.append(key)
                elif tuple(ds.shape) != params[pname].shape:
                    self.report.mismatched.append(
                        f"{key} (checkpoint {tuple(ds.shape)}, param {params[pname].shape})"
                    )
                else:
                    slots[slot][pname] = store.read_array(ds)
        return {**states, **slots}

    def _set_optimizer(self, states: dict, strict: bool) -> None:
        try:
            model_optimizer(self.model).set_states(states)
        except (SingaLiteError, KeyError, TypeError, ValueError) as e:
            if strict:
                raise StateMismatchError(f"{self.path}: optimizer states do not fit: {e}") from e
            self.report.notes.append(f"optimizer states skipped: {e}")

    # -- rng and aux -----------------------------------------------------------------------
    def _rng_states(self) -> list[tuple[Any, Any, str]]:
        out = []
        for key, state in self.r.attrs("rng").items():
            dev = _rng_device(key)
            if dev is None:
                self.report.notes.append(f"rng/{key} skipped: no such device here")
            elif not isinstance(state, dict):
                raise CorruptCheckpointError(f"{self.path}: rng/{key} is not a generator state")
            else:
                out.append((dev, state, key))
        return out

    def _aux(self, dev: Any) -> dict:
        doc = self.r.attrs("aux").get("json", {})

        def read(ref: str, kind: str) -> Any:
            arr = store.read_array(self.r.dataset(ref))
            if kind == "tensor":
                return Tensor(device=dev, data=arr, requires_grad=False)
            return arr[()] if kind == "scalar" else arr

        out = _aux.decode(doc, read, self.path)
        if not isinstance(out, dict):
            raise CorruptCheckpointError(f"{self.path}: aux@json is not a dict")
        return out


def input_specs(path: str, specs: Any, max_bytes: int) -> list[tuple[tuple[int, ...], np.dtype]]:
    """The saved placeholder specs (``inputs@specs``) as ``(shape, dtype)``, each checked: a list
    of ``{"shape": [sizes], "dtype": name}`` of supported dtypes, taking ``max_bytes`` at most
    in all (they are allocated to compile the model)."""
    if not isinstance(specs, list):
        raise CorruptCheckpointError(f"{path}: inputs@specs is not a list: {specs!r}"[:300])
    out, total = [], 0
    for i, spec in enumerate(specs):
        shape = spec.get("shape") if isinstance(spec, dict) else None
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise CorruptCheckpointError(
                f"{path}: inputs@specs[{i}] has no list of sizes as its shape: {spec!r}"[:300]
            )
        try:
            if not isinstance(spec.get("dtype"), str):
                raise TypeError("not a name")
            dtype = as_dtype(spec["dtype"])
        except (SingaLiteError, TypeError, ValueError):
            raise CorruptCheckpointError(
                f"{path}: inputs@specs[{i}] has no supported dtype: {spec!r}"[:300]
            ) from None
        total += math.prod(shape) * dtype.itemsize
        if total > max_bytes:
            raise CorruptCheckpointError(
                f"{path}: the input specs ask for placeholders of {total} bytes, "
                f"over the limit of {max_bytes}"
            )
        out.append((tuple(shape), dtype))
    return out


def _rng_device(key: str) -> Any:
    if key == "cpu":
        return _device.create_cpu_device()
    if key.startswith("cuda:") and key[5:].isdigit() and int(key[5:]) < _device.get_num_gpus():
        return _device.create_cuda_gpu_on(int(key[5:]))
    return None


def read_root(path: str) -> dict[str, Any]:
    """The root attributes of a verified checkpoint (step, metrics, versions, ...)."""
    with open_verified(_args.path("read_root", "path", path)) as r:
        return {k: r.root_attr(k) for k in r.f.attrs}

"""``verify``, ``inspect`` and ``diff``: look into checkpoints without a model.

``verify`` checks the whole-file checksum and then every dataset's own checksum. When the
whole-file checksum fails, it names the damaged tensors by scanning the per-dataset checksums in
a *child process*: parsing a damaged file can crash libhdf5, and a crash there must not take the
caller down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from singa_lite import _args
from singa_lite.checkpoint import integrity, singa_zip, store
from singa_lite.checkpoint.loader import open_verified
from singa_lite.errors import CheckpointError, CorruptCheckpointError


@dataclass
class VerifyReport:
    """The outcome of :func:`verify`: ``ok``, or an ``error`` and the ``damaged`` keys found."""

    path: str
    ok: bool
    error: str | None = None
    damaged: list[str] = field(default_factory=list)
    datasets: int = 0


def verify(path: Any) -> VerifyReport:
    """Check a checkpoint's whole-file checksum and every dataset's checksum and structure."""
    path = _args.path("verify", "path", path)
    try:
        kind = integrity.sniff(path)
        if kind == "singa_zip":
            return _verify_zip(path)
        with open_verified(path) as r:
            keys = [(key, ds, r.check(key, ds)) for group in store.GROUPS for key, ds in r.walk(group)]
            damaged = [
                k for k, ds, meta in keys if integrity.dataset_checksum(store.read_array(ds)) != meta["xxh3"]
            ]
        return VerifyReport(
            path, not damaged, "dataset checksum mismatch" if damaged else None, damaged, len(keys)
        )
    except CorruptCheckpointError as e:
        return VerifyReport(
            path, False, str(e), _locate_damage(path) if "checksum mismatch" in str(e) else []
        )
    except CheckpointError as e:
        return VerifyReport(path, False, str(e))


def _verify_zip(path: str) -> VerifyReport:
    try:
        # Without a model the arrays are bounded by the file: a few times its size (float
        # weights barely compress), far below what a zip bomb inflates to.
        limit = max(singa_zip.AUX_LIMIT, 4 * os.stat(path).st_size)
        model_states, aux = singa_zip.read(path, aux_limit=limit)  # sizes checked before inflating
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()  # reads every member, checking its CRC-32
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        return VerifyReport(path, False, f"{path}: damaged SINGA zip: {e}")
    except CheckpointError as e:
        return VerifyReport(path, False, str(e))
    if bad is not None:
        return VerifyReport(path, False, f"{path}: zip member {bad} fails its CRC", [bad])
    return VerifyReport(path, True, datasets=len(model_states) + len(aux))


def _locate_damage(path: str) -> list[str]:
    """Keys whose own checksum fails, found by a child process that may crash safely."""
    cmd = [sys.executable, "-m", "singa_lite.checkpoint", "_scan", path]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ["(the damage could not be located)"]
    if out.returncode != 0:
        return [f"(HDF5 structure: the scan exited with status {out.returncode})"]
    damaged = json.loads(out.stdout)
    return damaged or ["(names, attributes or HDF5 metadata: every dataset's own checksum matches)"]


def scan_unverified(path: str) -> list[str]:
    """Per-dataset checksum scan of a file that failed its whole-file check (child process only)."""
    damaged = []
    with h5py.File(path, "r") as f:
        items: list[tuple[str, Any]] = []
        f.visititems(lambda name, obj: items.append((name, obj)) if isinstance(obj, h5py.Dataset) else None)
        for name, ds in items:
            try:
                meta = json.loads(ds.attrs["meta"])
                arr = np.empty(ds.shape, ds.dtype)
                ds.read_direct(arr)
                if integrity.dataset_checksum(arr) != meta["xxh3"] or list(ds.shape) != meta["shape"]:
                    damaged.append(name)
            except Exception:  # any unreadable piece is damage to report, not to raise
                damaged.append(name)
    return damaged


def inspect(path: Any) -> dict[str, Any]:
    """A verified checkpoint's contents: root attrs, every dataset's dtype/shape/bytes, the
    optimizer, RNG and input entries, and the aux states (arrays shown by reference)."""
    path = _args.path("inspect", "path", path)
    if integrity.sniff(path) == "singa_zip":
        model_states, aux = singa_zip.read(path)
        return {
            "path": path,
            "format": "SINGA zip",
            "checksum": "zip CRC-32 per member",
            "datasets": {k: _describe(v) for k, v in {**model_states, **aux}.items()},
        }
    with open_verified(path) as r:
        return {
            "path": path,
            "checksum": "ok",
            "root": {k: r.root_attr(k) for k in r.f.attrs},
            "datasets": {
                key: {"dtype": str(ds.dtype), "shape": list(ds.shape), "bytes": int(ds.nbytes)}
                for group in store.GROUPS
                for key, ds in r.walk(group)
            },
            "optimizer": r.attrs("optimizer"),
            "rng": sorted(r.attrs("rng")),
            "inputs": r.attrs("inputs").get("specs", []),
            "aux": r.attrs("aux").get("json", {}),
        }


def _describe(arr: np.ndarray) -> dict[str, Any]:
    return {"dtype": str(arr.dtype), "shape": list(arr.shape), "bytes": int(arr.nbytes)}


def diff(a: Any, b: Any) -> list[str]:
    """Lines describing how two checkpoints differ (empty if their states are equal)."""
    a, b = _args.path("diff", "a", a), _args.path("diff", "b", b)
    lines = []
    with open_verified(a) as ra, open_verified(b) as rb:
        da = {k: ds for g in store.GROUPS for k, ds in ra.walk(g)}
        db = {k: ds for g in store.GROUPS for k, ds in rb.walk(g)}
        lines += [f"only in {a}: {k}" for k in sorted(set(da) - set(db))]
        lines += [f"only in {b}: {k}" for k in sorted(set(db) - set(da))]
        for key in sorted(set(da) & set(db)):
            line = _diff_arrays(key, store.read_array(da[key]), store.read_array(db[key]))
            if line:
                lines.append(line)
        for group in ("optimizer", "rng", "inputs", "aux"):
            xa, xb = ra.attrs(group), rb.attrs(group)
            lines += [
                f"{group}@{k}: {xa.get(k)!r} != {xb.get(k)!r}"
                for k in sorted(set(xa) | set(xb))
                if xa.get(k) != xb.get(k)
            ]
    return lines


def _diff_arrays(key: str, x: np.ndarray, y: np.ndarray) -> str | None:
    if x.shape != y.shape or x.dtype != y.dtype:
        return f"{key}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}"
    if x.tobytes() == y.tobytes():
        return None
    neq = ~((x == y) | (np.isnan(x) & np.isnan(y))) if x.dtype.kind in "fc" else x != y
    n = int(np.count_nonzero(neq))
    if x.dtype.kind in "biu":
        return f"{key}: {n} of {x.size} elements differ"
    err = np.abs(x.astype(np.float64) - y.astype(np.float64))[neq]
    return f"{key}: {n} of {x.size} elements differ, max abs diff {np.nanmax(err) if err.size else 0:.6g}"

"""Apache SINGA's own checkpoints: a zip of ``tensor_dict.npz`` and ``states_attr.json``.

``states_attr.json`` maps each name to ``{"state_type": 0 | 1, "shape": [...], "dtype": ...}``:
type 0 is a model state, type 1 an aux state (returned as a Tensor). The npz is read with
``allow_pickle=False``, so object arrays are refused. SINGA's files carry no checksum; the zip's
own CRC-32 of each member is checked as it is read.
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import numpy as np

from singa_lite.checkpoint.loader import Report
from singa_lite.errors import CorruptCheckpointError
from singa_lite.tensor import Tensor

TENSOR_DICT = "tensor_dict.npz"
STATES_ATTR = "states_attr.json"
MODEL_STATE, AUX_STATE = 0, 1


def read(path: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(model states, aux states)`` of a SINGA zip checkpoint as NumPy arrays."""
    try:
        with zipfile.ZipFile(path) as zf:
            attrs = json.loads(zf.read(STATES_ATTR))
            # np.load needs a seekable file; zip members are compressed, so stage the npz bytes.
            npz_bytes = io.BytesIO(zf.read(TENSOR_DICT))
        with np.load(npz_bytes, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except KeyError as e:
        raise CorruptCheckpointError(f"{path}: a SINGA checkpoint must hold {e}") from None
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise CorruptCheckpointError(f"{path}: damaged SINGA zip checkpoint: {e}") from e
    if not isinstance(attrs, dict):
        raise CorruptCheckpointError(f"{path}: {STATES_ATTR} is not a JSON object")
    model_states: dict[str, np.ndarray] = {}
    aux_states: dict[str, np.ndarray] = {}
    for name, arr in arrays.items():
        meta = attrs.get(name)
        if not isinstance(meta, dict) or meta.get("state_type") not in (MODEL_STATE, AUX_STATE):
            raise CorruptCheckpointError(f"{path}: {name}: no valid state_type in {STATES_ATTR}")
        if "shape" in meta and list(arr.shape) != list(meta["shape"]):
            raise CorruptCheckpointError(f"{path}: {name}: shape {arr.shape} != recorded {meta['shape']}")
        (model_states if meta["state_type"] == MODEL_STATE else aux_states)[name] = arr
    return model_states, aux_states


def load(model: Any, path: str, strict: bool) -> dict:
    """Load a SINGA zip checkpoint into ``model``; the aux states come back as Tensors."""
    saved, aux = read(path)
    targets = model.get_states()
    report = Report(
        missing=sorted(set(targets) - set(saved)),
        unexpected=sorted(set(saved) - set(targets)),
        notes=["a SINGA zip checkpoint: no optimizer or RNG states"],
    )
    for name in sorted(set(saved) & set(targets)):
        if saved[name].shape != targets[name].shape:
            report.mismatched.append(f"{name} (checkpoint {saved[name].shape}, model {targets[name].shape})")
    if strict and report:
        raise report.error(path)
    for name in sorted(set(saved) & set(targets)):
        if saved[name].shape == targets[name].shape:
            targets[name].copy_from(saved[name])
    dev = next(iter(targets.values())).device if targets else None
    out: dict[str, Any] = {k: Tensor(device=dev, data=v, requires_grad=False) for k, v in aux.items()}
    if not strict:
        out["__report__"] = report.as_dict()
    return out

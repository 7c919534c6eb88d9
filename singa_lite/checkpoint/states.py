"""What a checkpoint holds, gathered from a model (``collect``) and written to HDF5 (``write``).

A :class:`Bundle` is everything ``save_states`` writes, as host arrays and JSON-able values:
params, other layer states, the optimizer, RNG states, placeholder specs and aux states. A
blocking save lets the bundle point at the model's own host arrays (no copy); a non-blocking
save snapshots them, so training can go on while a thread writes. GPU arrays are copied to
pinned host memory asynchronously (``staging.HostSnapshot``): call :meth:`Bundle.wait` before
reading the bundle's arrays.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import singa_lite
from singa_lite import backend
from singa_lite import device as _device
from singa_lite.checkpoint import aux_states as _aux
from singa_lite.checkpoint import store
from singa_lite.checkpoint.staging import HostSnapshot
from singa_lite.tensor import Tensor


@dataclass
class Bundle:
    """A checkpoint's contents in memory, ready to be written by :func:`write`."""

    params: dict[str, np.ndarray]
    states: dict[str, np.ndarray]
    optimizer: dict[str, Any] | None  # non-slot entries, JSON-able
    slots: dict[str, dict[str, np.ndarray]]  # slot name -> param name -> array
    rng: dict[str, Any]
    inputs: list[dict[str, Any]]
    aux_doc: Any
    aux_arrays: dict[str, np.ndarray]
    root: dict[str, Any] = field(default_factory=dict)
    wait: Callable[[], None] = lambda: None
    """Blocks until every array above holds its values (GPU copies are still in flight before)."""


def collect(model: Any, aux_states: dict | None, snapshot: bool, root: dict | None = None) -> Bundle:
    """A :class:`Bundle` of ``model``'s states and ``aux_states``.

    ``snapshot=True`` copies every host array, so the model may change while the bundle is
    written (non-blocking saves); otherwise the bundle shares the model's host arrays. Each
    array crosses from its device to the host once; :meth:`Bundle.wait` before reading them.
    """
    params = model.get_params()
    all_states = model.get_states()
    with HostSnapshot(copy=snapshot) as snap:
        host = snap.host
        optimizer, slots = _optimizer_states(model_optimizer(model), host)
        aux_arrays: dict[str, np.ndarray] = {}
        aux_doc = _aux.encode(dict(aux_states or {}), aux_arrays, host)
        bundle = Bundle(
            params={k: host(t.data, t.device.xp) for k, t in params.items()},
            states={k: host(t.data, t.device.xp) for k, t in all_states.items() if k not in params},
            optimizer=optimizer,
            slots=slots,
            rng=_rng_states(all_states.values()),
            inputs=[{"shape": list(s), "dtype": str(d)} for s, d in getattr(model, "_input_specs", [])],
            aux_doc=aux_doc,
            aux_arrays=aux_arrays,
            root={"model_class": type(model).__name__, **(root or {})},
            wait=snap.wait,
        )
    return bundle


def model_optimizer(model: Any) -> Any:
    """The optimizer whose states a checkpoint holds: a ``DistOpt`` contributes the optimizer
    it wraps, so single-process and distributed runs write and read the same file."""
    opt = getattr(model, "optimizer", None)
    inner = getattr(opt, "opt", None)
    return inner if inner is not None and hasattr(inner, "get_states") else opt


def _optimizer_states(optimizer: Any, host: Callable[..., np.ndarray]) -> tuple[dict | None, dict]:
    """Split ``optimizer.get_states()`` into JSON-able entries and slot arrays, each brought to the
    host by ``host(array)`` (``get_states`` returns copies, so they need no snapshot of their own)."""
    if optimizer is None or not hasattr(optimizer, "get_states"):
        return None, {}
    entries: dict[str, Any] = {}
    slots: dict[str, dict[str, np.ndarray]] = {}
    for key, value in optimizer.get_states().items():
        is_arrays = isinstance(value, dict) and all(
            isinstance(v, Tensor) or backend.backend_of(v).is_array(v) for v in value.values()
        )
        if is_arrays and (value or key in getattr(optimizer, "slot_names", ())):
            slots[key] = {
                n: host(v.data if isinstance(v, Tensor) else v, private=True) for n, v in value.items()
            }
            continue
        entries[key] = value
    entries["slots"] = sorted(slots)
    return entries, slots


def _rng_states(tensors: Any) -> dict[str, Any]:
    """The CPU generator's state and that of every GPU the model's tensors live on."""
    rng = {"cpu": _device.create_cpu_device().get_rng_state()}
    for dev in sorted({t.device for t in tensors if t.device.id() >= 0}, key=lambda d: d.id()):
        rng[f"cuda:{dev.id()}"] = dev.get_rng_state()
    return rng


def write(path: str, bundle: Bundle) -> None:
    """Write ``bundle`` as a new HDF5 file at ``path`` (the layout of ``store``)."""
    bundle.wait()
    with store.create_file(path) as f:
        store.write_attrs(
            f,
            {
                "format": store.FORMAT,
                "format_version": store.FORMAT_VERSION,
                "library_version": singa_lite.__version__,
                "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                **bundle.root,
            },
        )
        for group, arrays in (("params", bundle.params), ("states", bundle.states)):
            g = f.create_group(group)
            for name, arr in arrays.items():
                store.write_array(g, store.escape(name), arr)
        if bundle.optimizer is not None:
            g = f.create_group("optimizer")
            store.write_attrs(g, bundle.optimizer)
            for slot, values in bundle.slots.items():
                for pname, arr in values.items():
                    sub = g.require_group(store.escape(pname))
                    store.write_array(sub, store.escape(slot), arr)
        store.write_attrs(f.create_group("rng"), bundle.rng)
        store.write_attrs(f.create_group("inputs"), {"specs": bundle.inputs})
        g = f.create_group("aux")
        store.write_attrs(g, {"json": bundle.aux_doc})
        for ref, arr in bundle.aux_arrays.items():
            parent, _, name = ref.partition("/")[2].rpartition("/")
            # refs are "aux/" + escaped path components: the groups and the link name as they are
            store.write_array(g.require_group(parent) if parent else g, name, arr)

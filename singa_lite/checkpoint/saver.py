"""Saving a model's states: collect a bundle, write it to a temp file, seal, replace atomically."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from singa_lite import _args
from singa_lite.checkpoint import async_save, atomic, integrity, states
from singa_lite.checkpoint.async_save import SaveHandle
from singa_lite.errors import CheckpointError


def write_bundle(path: str, bundle: states.Bundle) -> None:
    """Write ``bundle`` to ``path`` crash-safely, with the whole-file checksum in the user block."""

    def write(tmp: str) -> None:
        try:
            states.write(tmp, bundle)
        except (TypeError, ValueError, RuntimeError) as e:
            raise CheckpointError(f"{path}: could not write the checkpoint: {e}") from e

    atomic.atomic_write(path, write, integrity.seal)


def save_model_states(
    model: Any,
    fpath: Any,
    aux_states: dict | None = None,
    blocking: bool = True,
    root: dict | None = None,
    on_done: Callable[[str], None] | None = None,
) -> str | SaveHandle:
    """Save everything needed to resume ``model`` to the HDF5 file ``fpath``.

    Params, layer states, optimizer (counters, schedule, slots), RNG states, input specs and
    ``aux_states``. Returns the path, or with ``blocking=False`` a :class:`SaveHandle` at once:
    the states are copied to host memory first (from a GPU: queued on a side stream, the host
    does not wait), so training may go on while a thread writes.
    ``root`` adds root attributes; ``on_done(path)`` runs after a successful write.
    """
    _args.has("save_model_states", "model", model, ("get_params", "get_states"), "a Model (or Layer)")
    path = _args.path("save_model_states", "fpath", fpath)
    if aux_states is not None:
        _args.instance("save_model_states", "aux_states", aux_states, Mapping, "a dict or None")
    if os.path.isdir(path):
        raise CheckpointError(f"{path}: is a directory; give a file path for the checkpoint")
    bundle = states.collect(model, aux_states, snapshot=not blocking, root=root)

    def job() -> None:
        bundle.wait()  # the GPU's copies land before anything reads (or frees) their buffers
        write_bundle(path, bundle)
        if on_done is not None:
            on_done(path)

    if not blocking:
        return async_save.submit(path, job)
    async_save.run_blocking(job)
    return path

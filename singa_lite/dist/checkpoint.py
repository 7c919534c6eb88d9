"""Checkpoints in a data-parallel job: rank 0 writes, every rank restores.

The ranks of a data-parallel job hold the same parameters and optimizer states, so one file
is enough; writing it from every rank would only race on the same path. Both helpers are
collective (every rank calls them) and agree on the outcome, so a failed write or read raises
on every rank instead of leaving the others waiting.

A model whose optimizer is a ``DistOpt`` is saved and loaded with the wrapped optimizer in its
place, so the file is the one a single process writes: a distributed run can resume from a
single-process checkpoint and the other way round.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from singa_lite.dist.communicator import Communicator, get_communicator
from singa_lite.errors import DistributedError


def save_states(
    model: Any, fpath: Any, aux_states: dict | None = None, communicator: Communicator | None = None
) -> None:
    """Rank 0 calls ``model.save_states(fpath, aux_states)``; every rank returns once it is written.

    A failure on rank 0 is raised there and reported on the other ranks as ``DistributedError``.
    """
    comm = communicator or get_communicator()
    error: BaseException | None = None
    if comm.global_rank == 0:
        try:
            with _plain_optimizer(model):
                model.save_states(fpath, aux_states or {})
        except Exception as e:  # re-raised below, after the other ranks have heard of it
            error = e
    status = comm.all_gather_object(None if error is None else f"{type(error).__name__}: {error}")
    if error is not None:
        raise error
    if status[0] is not None:
        raise DistributedError(f"rank 0 failed to write the checkpoint {fpath}: {status[0]}")


def load_states(
    model: Any, fpath: Any, strict: bool = True, communicator: Communicator | None = None
) -> dict:
    """Every rank calls ``model.load_states(fpath, strict)``; returns the aux states.

    If any rank fails (a missing file on a node without the shared disk, say), every rank
    raises, naming the ranks that failed. Call ``DistOpt.broadcast_params(model)`` afterwards
    (``DistOpt.load_checkpoint`` does) to make rank 0's values everyone's.
    """
    comm = communicator or get_communicator()
    aux: dict = {}
    error: BaseException | None = None
    try:
        with _plain_optimizer(model):
            aux = model.load_states(fpath, strict=strict)
    except Exception as e:  # re-raised below, after the other ranks have heard of it
        error = e
    status = comm.all_gather_object(None if error is None else f"{type(error).__name__}: {error}")
    if error is not None:
        raise error
    failed = {r: s for r, s in enumerate(status) if s is not None}
    if failed:
        raise DistributedError(f"loading the checkpoint {fpath} failed on ranks {failed}")
    return aux


@contextlib.contextmanager
def _plain_optimizer(model: Any) -> Iterator[None]:
    """Put a DistOpt's wrapped optimizer in ``model.optimizer`` for the duration."""
    from singa_lite.dist.distopt import DistOpt

    wrapper = getattr(model, "optimizer", None)
    if not isinstance(wrapper, DistOpt):
        yield
        return
    model.optimizer = wrapper.opt
    try:
        yield
    finally:
        model.optimizer = wrapper

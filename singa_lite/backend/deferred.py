"""Checks of device values raised later instead of synchronising now (``backend.check``).

A label or index check on a GPU (``labels < C``) yields a flag in device memory; reading it
would stall the host until the step so far has run. Instead each check OR-s its flag into a
0-d array kept per check (a fixed address, so a captured CUDA graph goes on updating it),
and the flags are read together, in one small transfer, at the next read the host makes
anyway (``backend.to_host``, ``Device.Sync``): the error names the op and the condition, and
the step that tripped it has run, as with PyTorch's device-side asserts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class DeferredChecks:
    """The pending checks of one array library (``xp``): ``add`` per check, ``raise_pending``
    at host reads."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self.flags: dict[str, list] = {}  # key -> [0-d bool array, make_error]
        self.dirty = False  # a check was added since the flags were last read

    def add(self, bad: Any, key: str, make_error: Callable[[], Exception]) -> None:
        entry = self.flags.get(key)
        if entry is None:
            self.flags[key] = [bad.astype(self.xp.bool_, copy=True).reshape(()), make_error]
        else:
            self.xp.logical_or(entry[0], bad, out=entry[0])
            entry[1] = make_error
        self.dirty = True

    def raise_pending(self) -> None:
        """Read every flag (one transfer), clear them, and raise the first check that failed."""
        if not self.dirty:
            return
        self.dirty = False
        keys = list(self.flags)
        raised = self.xp.stack([self.flags[k][0] for k in keys])
        raised = raised.get() if hasattr(raised, "get") else raised
        for k in keys:
            self.flags[k][0].fill(False)  # the same arrays: a captured graph keeps writing them
        for k, f in zip(keys, raised):
            if f:
                raise self.flags[k][1]()

"""Non-blocking saves: the states are snapshotted to host memory, a thread writes the file.

At most one write is in flight per process: a new save (blocking or not) first waits for the
previous one, so saves land in the order they were asked for and never compete for the disk.
The writer thread is not a daemon, so an interpreter that exits waits for the file to be
complete. A failed write is kept in its handle and re-raised by ``wait()``.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

_lock = threading.Lock()
_pending: SaveHandle | None = None


class SaveHandle:
    """The result of ``save_states(..., blocking=False)``: ``wait()`` returns the path or raises."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._observed = False

    def done(self) -> bool:
        """True once the write has finished (successfully or not)."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> str:
        """Block until the file is written; re-raise the write's error; return the path."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"saving {self.path} did not finish within {timeout} s")
        self._observed = True
        if self._error is not None:
            raise self._error
        return self.path

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as e:  # kept for wait(): a thread has no caller to raise to
            self._error = e
        finally:
            self._done.set()

    def __repr__(self) -> str:
        state = "failed" if self._error else "done" if self.done() else "writing"
        return f"SaveHandle({self.path!r}, {state})"


def wait_pending() -> None:
    """Wait for the write in flight, if any; warn about a failure nobody has waited for."""
    prev = _pending
    if prev is None:
        return
    prev._done.wait()
    if prev._error is not None and not prev._observed:
        prev._observed = True
        warnings.warn(f"an earlier non-blocking save failed: {prev._error}", RuntimeWarning, stacklevel=3)


def submit(path: str, job: Callable[[], None]) -> SaveHandle:
    """Run ``job`` (which writes ``path``) on a writer thread after any save in flight."""
    global _pending
    with _lock:
        wait_pending()
        handle = SaveHandle(path)
        threading.Thread(target=handle._run, args=(job,), name=f"singa_lite save {path}").start()
        _pending = handle
    return handle


def run_blocking(job: Callable[[], None]) -> None:
    """Run ``job`` now, after any save in flight (so saves keep their order)."""
    with _lock:
        wait_pending()
        job()

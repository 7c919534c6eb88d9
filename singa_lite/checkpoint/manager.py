"""``CheckpointManager``: a directory of step-numbered checkpoints with retention and fallback.

    mgr = CheckpointManager("ckpts", max_to_keep=3, keep_best=("val_loss", "min"))
    start = mgr.restore(model)            # None on a fresh start
    for step in range(start.step + 1 if start else 0, steps):
        ...
        mgr.save(step, model, metrics={"val_loss": v}, aux={"epoch": epoch})

Files are ``ckpt-<step>.h5``; each holds its step and metrics as root attributes, so the
directory itself is the index (no side file to fall out of step after a crash). Metrics are
read from a file's header region only after the file's checksum is verified, and cached by
(size, mtime).

Damage is never mistaken for a fresh start: ``restore`` skips a damaged file for the next
older one, and when every file is damaged it raises ``CorruptCheckpointError`` naming each
file and its fault (``None`` means only "no checkpoint yet"). Retention never deletes the
newest intact checkpoint, however many newer files are damaged.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from typing import Any

from singa_lite import _args
from singa_lite.checkpoint import atomic, integrity, loader, saver
from singa_lite.checkpoint.async_save import SaveHandle
from singa_lite.errors import ArgumentError, CheckpointError, CorruptCheckpointError

_NAME = re.compile(r"^ckpt-(\d+)\.h5$")


@dataclass(frozen=True)
class Restored:
    """What ``CheckpointManager.restore`` loaded."""

    step: int
    path: str
    aux: dict


class CheckpointManager:
    """Save every N steps/epochs, keep the newest ``max_to_keep`` (and the best), restore safely.

    ``keep_best=(metric, "min" | "max")`` also keeps the checkpoint with the best value of
    ``metrics[metric]`` whatever its age. ``save_every_steps``/``save_every_epochs`` make
    ``save`` skip (returning ``None``) unless ``step`` (or ``aux["epoch"]``) is a multiple; with
    neither, every call saves.
    """

    def __init__(
        self,
        directory: Any,
        max_to_keep: int | None = 5,
        keep_best: tuple[str, str] | None = None,
        save_every_steps: int | None = None,
        save_every_epochs: int | None = None,
    ) -> None:
        me = "CheckpointManager"
        if max_to_keep is not None:
            max_to_keep = _args.count(me, "max_to_keep", max_to_keep)
        if keep_best is not None:
            is_pair = isinstance(keep_best, (list, tuple)) and len(keep_best) == 2
            if not is_pair or not isinstance(keep_best[0], str) or keep_best[1] not in ("min", "max"):
                raise _args.bad(me, "keep_best", "be (metric name, 'min' or 'max') or None", keep_best)
        if save_every_steps is not None:
            save_every_steps = _args.count(me, "save_every_steps", save_every_steps)
        if save_every_epochs is not None:
            save_every_epochs = _args.count(me, "save_every_epochs", save_every_epochs)
        self.directory = _args.path(me, "directory", directory)
        self.max_to_keep = max_to_keep
        self.keep_best = keep_best
        self.save_every_steps = save_every_steps
        self.save_every_epochs = save_every_epochs
        self._metrics: dict[str, tuple[tuple[int, int], dict | None]] = {}
        # path -> ((inode, size, mtime), intact?): a file is verified once while it is unchanged
        self._intact: dict[str, tuple[tuple[int, int, int], bool]] = {}
        os.makedirs(self.directory, exist_ok=True)
        for stale in atomic.stale_temps(self.directory):
            os.remove(stale)

    # -- saving ----------------------------------------------------------------------------
    def should_save(self, step: int, epoch: int | None = None) -> bool:
        """Whether the schedule asks for a checkpoint at ``step`` (and ``epoch``)."""
        if self.save_every_steps is None and self.save_every_epochs is None:
            return True
        if self.save_every_steps is not None and step % self.save_every_steps == 0:
            return True
        return (
            self.save_every_epochs is not None and epoch is not None and epoch % self.save_every_epochs == 0
        )

    def save(
        self,
        step: int,
        model: Any,
        metrics: dict | None = None,
        aux: dict | None = None,
        force: bool = False,
        blocking: bool = True,
    ) -> str | SaveHandle | None:
        """Save ``model`` as the checkpoint of ``step`` if the schedule (or ``force``) says so.

        Returns the path (a :class:`SaveHandle` with ``blocking=False``), or ``None`` when
        skipped. Older checkpoints beyond ``max_to_keep`` are deleted once the new one is safe.
        """
        epoch = (aux or {}).get("epoch")
        if self.save_every_epochs is not None and epoch is None and self.save_every_steps is None:
            raise ArgumentError(
                "CheckpointManager.save: save_every_epochs needs the epoch: pass aux={'epoch': ...}"
            )
        if not (force or self.should_save(step, epoch)):
            return None
        saved_metrics = dict(metrics or {})
        root = {"step": int(step), "metrics": saved_metrics}

        def on_done(path: str) -> None:
            st = os.stat(path)  # we know what we wrote: no need to read it back for its metrics
            self._metrics[path] = ((st.st_size, st.st_mtime_ns), saved_metrics)
            self._intact[path] = ((st.st_ino, st.st_size, st.st_mtime_ns), True)
            self._prune()

        return saver.save_model_states(
            model, self.path_for(step), aux, blocking=blocking, root=root, on_done=on_done
        )

    def path_for(self, step: int) -> str:
        return os.path.join(self.directory, f"ckpt-{int(step)}.h5")

    # -- querying --------------------------------------------------------------------------
    def steps(self) -> list[int]:
        """Steps of the checkpoint files present, oldest first (not yet verified)."""
        found = (_NAME.match(n) for n in os.listdir(self.directory))
        return sorted(int(m[1]) for m in found if m)

    def latest(self) -> str | None:
        """Path of the newest checkpoint file, or ``None``."""
        steps = self.steps()
        return self.path_for(steps[-1]) if steps else None

    def metrics(self, step: int) -> dict | None:
        """The metrics saved with ``step`` (``None`` if that file is damaged)."""
        path = self.path_for(step)
        st = os.stat(path)
        key = (st.st_size, st.st_mtime_ns)
        cached = self._metrics.get(path)
        if cached is None or cached[0] != key:
            value: dict | None
            try:
                value = dict(loader.read_root(path).get("metrics") or {})
            except (CheckpointError, TypeError, ValueError):
                value = None
            cached = self._metrics[path] = (key, value)
        return cached[1]

    def best(self) -> str | None:
        """Path of the intact checkpoint with the best ``keep_best`` metric, or ``None``."""
        step = self._best_step(self.steps())
        return None if step is None else self.path_for(step)

    def _best_step(self, steps: list[int]) -> int | None:
        if self.keep_best is None:
            return None
        metric, mode = self.keep_best
        scored = [(m[metric], s) for s in steps if (m := self.metrics(s)) and metric in m]
        if not scored:
            return None
        pick = min if mode == "min" else max
        return pick(scored, key=lambda vs: (vs[0], -vs[1] if mode == "min" else vs[1]))[1]

    # -- restoring -------------------------------------------------------------------------
    def restore(self, model: Any, strict: bool = True) -> Restored | None:
        """Load the newest intact checkpoint into ``model``; ``None`` if there is no checkpoint.

        A damaged file is skipped with a warning and the next older one is tried; the model is
        untouched by a skipped file (its checksum is checked before anything is read). When
        every file is damaged, ``CorruptCheckpointError`` names each one and its fault: starting
        over would silently lose the run.
        """
        faults = []
        for step in reversed(self.steps()):
            path = self.path_for(step)
            try:
                aux = loader.load_model_states(model, path, strict=strict)
            except CorruptCheckpointError as e:
                warnings.warn(f"skipping damaged checkpoint: {e}", RuntimeWarning, stacklevel=2)
                faults.append(str(e))
                continue
            return Restored(step, path, aux)
        if faults:
            raise CorruptCheckpointError(
                f"{self.directory}: every checkpoint is damaged, none was loaded ({len(faults)} files):\n  "
                + "\n  ".join(faults)
                + "\nMove them aside to start over, or restore a copy."
            )
        return None

    # -- retention -------------------------------------------------------------------------
    def _is_intact(self, path: str) -> bool:
        """Whether ``path`` passes its whole-file checksum (cached while the file is unchanged)."""
        try:
            st = os.stat(path)
        except OSError:
            return False
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        known = self._intact.get(path)
        if known is None or known[0] != key:
            try:
                integrity.verify_file(path)
                known = (key, True)
            except CheckpointError:
                known = (key, False)
            self._intact[path] = known
        return known[1]

    def _newest_intact(self, steps: list[int]) -> int | None:
        for step in reversed(steps):
            if self._is_intact(self.path_for(step)):
                return step
        return None

    def _prune(self) -> None:
        steps = self.steps()
        if self.max_to_keep is None or len(steps) <= self.max_to_keep:
            return
        keep = set(steps[-self.max_to_keep :])
        best = self._best_step(steps)
        if best is not None:
            keep.add(best)
        newest_intact = self._newest_intact(steps)  # damaged newer files must not push it out
        if newest_intact is not None:
            keep.add(newest_intact)
        for step in steps:
            if step not in keep:
                path = self.path_for(step)
                self._metrics.pop(path, None)
                self._intact.pop(path, None)
                os.remove(path)

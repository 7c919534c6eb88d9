"""Crash-safe replacement of a file: temp file, fsync, ``os.replace``, fsync of the directory.

A crash (or SIGKILL) at any instant leaves either the old file or the complete new one at
``path``, never a torn file. The temp file lives in the same directory (``os.replace`` is atomic
only within one file system) and is named ``.<name>.tmp-<pid>-<random>``: a killed save leaves
one behind, which never collides with a later save's name and is swept once its process is gone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
from collections.abc import Callable, Iterator

from singa_lite.errors import CheckpointError

_TEMP = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)-[0-9a-f]{8}$")


def temp_path_for(path: str) -> str:
    """A fresh temp file name beside ``path``."""
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def fsync_fd(fd: int) -> None:
    """``os.fsync``; its own function so tests can simulate a full disk at the last moment."""
    os.fsync(fd)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        fsync_fd(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP):  # some file systems cannot sync a dir
            raise
    finally:
        os.close(fd)


def atomic_write(path: str, write: Callable[[str], None], finish: Callable[[int], None]) -> None:
    """Create ``path`` atomically: ``write(temp)`` fills a temp file, ``finish(fd)`` seals it.

    Any failure (full disk, read-only directory, an error inside ``write``) removes the temp
    file, leaves an existing ``path`` untouched and raises ``CheckpointError`` naming ``path``.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise CheckpointError(f"{path}: is a directory; give a file path for the checkpoint")
    directory = os.path.dirname(path)
    tmp = temp_path_for(path)
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDWR)
        try:
            finish(fd)
            fsync_fd(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        _fsync_dir(directory)
    except OSError as e:
        _remove_quietly(tmp)
        what = e.strerror or str(e)
        raise CheckpointError(f"{path}: could not write the checkpoint: {what}") from e
    except BaseException:
        _remove_quietly(tmp)
        raise
    sweep_stale_temps(path)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def stale_temps(directory: str, name: str | None = None) -> Iterator[str]:
    """Temp files in ``directory`` (for target ``name``, or any) whose writer process is gone."""
    try:
        entries = os.listdir(directory or ".")
    except OSError:
        return
    for entry in entries:
        m = _TEMP.match(entry)
        if m and (name is None or m["name"] == name) and not _pid_alive(int(m["pid"])):
            yield os.path.join(directory, entry)


def sweep_stale_temps(path: str) -> None:
    """Remove the temp files a killed save of ``path`` left behind (best effort)."""
    directory, name = os.path.split(path)
    for stale in stale_temps(directory, name):
        _remove_quietly(stale)

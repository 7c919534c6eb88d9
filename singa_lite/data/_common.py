"""What every loader in :mod:`singa_lite.data` shares: its error and safe file reading."""

from __future__ import annotations

import gzip
import os
import zlib
from importlib import resources

from singa_lite.errors import SingaLiteError

_GZIP_MAGIC = b"\x1f\x8b"


class DatasetError(SingaLiteError, ValueError):
    """A data file is missing, damaged or not in the expected format; the message names it."""


def read_file_bytes(path: str | os.PathLike[str]) -> bytes:
    """Return the bytes of ``path``, gunzipped if the file is gzip data (whatever its name).

    Only regular files are opened: a FIFO or a device would block or never end.
    Every I/O or decompression failure becomes a :class:`DatasetError` naming the file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DatasetError(f"{path}: no such regular file")
    try:
        with open(path, "rb") as f:
            raw = f.read()
        # Sniff instead of trusting the suffix: downloads are often renamed or
        # transparently decompressed by browsers.
        return gzip.decompress(raw) if raw[:2] == _GZIP_MAGIC else raw
    except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
        raise DatasetError(f"{path}: cannot read ({exc})") from exc


def find_file(directory: str | os.PathLike[str], names: list[str], what: str) -> str:
    """Return the first of ``names`` (each also tried with ``.gz``) that exists in ``directory``."""
    directory = os.fspath(directory)
    for name in names:
        for candidate in (name, name + ".gz"):
            path = os.path.join(directory, candidate)
            if os.path.isfile(path):
                return path
    raise DatasetError(f"{directory}: no {what} file found (looked for {', '.join(names)}, each also .gz)")


def read_package_bytes(name: str) -> bytes:
    """The bytes of the data file ``name`` shipped inside this package (works from wheels too)."""
    return (resources.files(__package__) / name).read_bytes()

"""Whole-file and per-dataset checksums, and the header kept in the HDF5 user block.

A checkpoint is an HDF5 file whose first ``USERBLOCK_SIZE`` bytes are a *user block*: bytes
HDF5 reserves for the application and never reads. We keep a small header there::

    offset  size  field
    0       16    MAGIC
    16      4     header version (uint32, little-endian)
    20      4     user block size (uint32)
    24      8     file size in bytes (uint64)
    32      16    hash name, ASCII, NUL-padded ("xxh3_128")
    48      16    file digest
    64      448   zeros

The file digest is XXH3-128 of the *whole file* with the digest field read as zeros, so a flipped
bit anywhere (data, names, attributes, HDF5's own metadata, this header) is caught. It is checked
by streaming the file *before* libhdf5 parses a byte of it: a flipped bit in HDF5 metadata can
crash libhdf5, and per-dataset checksums alone cannot see a flipped name or attribute.

Each dataset also carries an ``xxh3`` attribute (XXH3-64 of its bytes) so ``verify`` and
``diff`` can name the damaged tensor. XXH3 runs at memory speed (~13 GB/s streaming here, 3x
zlib.crc32), which keeps a verified load within 1.3x of an unverified one.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

from singa_lite.errors import CheckpointError, CorruptCheckpointError, IncompatibleCheckpointError

MAGIC = b"\x89SINGALITE-CKPT\n"
HEADER_VERSION = 1
USERBLOCK_SIZE = 512
HASH_NAME = "xxh3_128"
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
ZIP_SIGNATURE = b"PK\x03\x04"

_HEADER = struct.Struct("<16sIIQ16s16s")  # magic, version, userblock size, file size, hash, digest
_DIGEST_AT, _DIGEST_LEN = 48, 16
_WINDOW = 16 << 20  # bytes mapped at a time: bounds the resident pages a verification adds


@dataclass(frozen=True)
class Header:
    """The parsed user-block header of a checkpoint."""

    version: int
    userblock_size: int
    file_size: int
    hash_name: str
    digest: bytes


def dataset_checksum(arr: np.ndarray) -> str:
    """XXH3-64 of an array's bytes in C order, as 16 hex digits (the ``xxh3`` dataset attribute)."""
    return xxhash.xxh3_64_hexdigest(np.ascontiguousarray(arr).data)


def pack_header(file_size: int, digest: bytes = b"\0" * _DIGEST_LEN) -> bytes:
    """The user block for a file of ``file_size`` bytes (digest zeroed unless given)."""
    head = _HEADER.pack(MAGIC, HEADER_VERSION, USERBLOCK_SIZE, file_size, HASH_NAME.encode(), digest)
    return head.ljust(USERBLOCK_SIZE, b"\0")


def file_digest(fd: int, size: int) -> bytes:
    """XXH3-128 of the first ``size`` bytes of ``fd`` with the header's digest field as zeros."""
    h = xxhash.xxh3_128()
    for offset in range(0, size, _WINDOW):
        length = min(_WINDOW, size - offset)
        with mmap.mmap(fd, length, offset=offset, access=mmap.ACCESS_READ) as mm:
            if offset == 0:
                h.update(mm[:_DIGEST_AT])
                h.update(b"\0" * _DIGEST_LEN)
                h.update(memoryview(mm)[_DIGEST_AT + _DIGEST_LEN :])
            else:
                h.update(mm)
    return h.digest()


def seal(fd: int) -> None:
    """Write the header into the user block of the freshly written HDF5 file ``fd``."""
    size = os.fstat(fd).st_size
    os.pwrite(fd, pack_header(size), 0)
    os.pwrite(fd, file_digest(fd, size), _DIGEST_AT)


def open_regular(path: str) -> int:
    """A read-only descriptor of ``path``, refusing anything but a regular file.

    ``O_NONBLOCK`` makes opening a FIFO return at once (a plain open blocks until a writer
    appears), and ``fstat`` on the opened descriptor leaves no window for a swap after a check.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint file") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path}: is a directory, not a checkpoint file") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot open: {e.strerror}") from e
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (FIFO, device or socket)"
        raise CheckpointError(f"{path}: is {kind}; only regular files are read as checkpoints")
    return fd


def sniff(path: str) -> str:
    """``"singa_lite"``, ``"singa_zip"`` or ``"hdf5"`` from the first bytes; typed error otherwise."""
    fd = open_regular(path)
    try:
        head = os.pread(fd, len(MAGIC), 0)
    finally:
        os.close(fd)
    if head == MAGIC:
        return "singa_lite"
    if head.startswith(ZIP_SIGNATURE):
        return "singa_zip"
    if head.startswith(HDF5_SIGNATURE):
        return "hdf5"
    if not head:
        raise CorruptCheckpointError(f"{path}: the file is empty")
    raise CorruptCheckpointError(
        f"{path}: not a singa_lite checkpoint (damaged header, or a file of another kind)"
    )


def verify_file(path: str) -> Header:
    """Check the whole-file digest of ``path`` by streaming it; the parsed header if intact.

    Raises ``CorruptCheckpointError`` (empty, truncated, damaged) or
    ``IncompatibleCheckpointError`` (a plain HDF5 file, or a header from a newer version).
    """
    fd = open_regular(path)
    try:
        return verify_fd(path, fd)
    finally:
        os.close(fd)


def verify_fd(path: str, fd: int) -> Header:
    """:func:`verify_file` on an open descriptor (``path`` only names it in errors)."""
    size = os.fstat(fd).st_size
    header = _parse_header(path, os.pread(fd, USERBLOCK_SIZE, 0), size)
    if file_digest(fd, size) != header.digest:
        raise CorruptCheckpointError(
            f"{path}: checksum mismatch, the file is damaged; "
            f"`python -m singa_lite.checkpoint verify {path}` names the damaged tensors"
        )
    return header


def fd_path(fd: int, path: str) -> str:
    """A path that opens the very file behind ``fd`` (so what HDF5 parses is what was verified,
    even if ``path`` is replaced meanwhile); ``path`` itself where /proc is missing."""
    proc = f"/proc/self/fd/{fd}"
    return proc if os.path.exists(proc) else path


def _parse_header(path: str, raw: bytes, size: int) -> Header:
    if not raw:
        raise CorruptCheckpointError(f"{path}: the file is empty")
    if raw.startswith(HDF5_SIGNATURE):
        raise IncompatibleCheckpointError(
            f"{path}: an HDF5 file but not a singa_lite checkpoint (no checksummed header)"
        )
    if len(raw) < _HEADER.size or not raw.startswith(MAGIC):
        raise CorruptCheckpointError(f"{path}: not a singa_lite checkpoint (damaged or truncated header)")
    _, version, ub_size, file_size, hash_name, digest = _HEADER.unpack_from(raw)
    if file_size != size:
        raise CorruptCheckpointError(
            f"{path}: the file has {size} bytes but its header records {file_size}: truncated or damaged"
        )
    name = hash_name.rstrip(b"\0").decode("ascii", "replace")
    if version > HEADER_VERSION or name != HASH_NAME:
        # A flipped bit lands here as well; the digest cannot be checked with an unknown hash.
        raise IncompatibleCheckpointError(
            f"{path}: header version {version} with hash {name!r}; this library reads header "
            f"version {HEADER_VERSION} with {HASH_NAME}: upgrade singa_lite, or the header is damaged"
        )
    return Header(version, ub_size, file_size, name, digest)


def verify_datasets(items: Any) -> list[str]:
    """Names of the ``(name, array, expected_hex)`` items whose checksum does not match."""
    return [name for name, arr, expected in items if dataset_checksum(arr) != expected]

"""Loaders for standard data files a user already has: MNIST's IDX and CIFAR-10's binary batches.

Nothing is downloaded. Every file is checked against its format (magic number, header,
size) before use, and a bad file raises :class:`~singa_lite.data.DatasetError` naming it.
Files may be gzipped or not, whatever their names say.
"""

from __future__ import annotations

import math
import os
import struct
from typing import Any

import numpy as np

from singa_lite import _args
from singa_lite.data._common import DatasetError, find_file, read_file_bytes

# IDX type codes (third magic byte) -> element dtype; multi-byte types are big-endian.
_IDX_DTYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_MNIST_PREFIX = {"train": "train", "test": "t10k"}

_CIFAR_IMAGE_BYTES = 3 * 32 * 32
_CIFAR_RECORD = 1 + _CIFAR_IMAGE_BYTES  # one label byte, then R, G and B planes of 32x32
_CIFAR_FILES = {"train": [f"data_batch_{i}.bin" for i in range(1, 6)], "test": ["test_batch.bin"]}
_CIFAR_SUBDIR = "cifar-10-batches-bin"  # what cifar-10-binary.tar.gz unpacks to


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read one IDX file (the format of MNIST and its relatives) into a native-endian array.

    The magic number is two zero bytes, a type code and the number of dimensions; then
    one big-endian uint32 per dimension, then the data, which must fill the rest exactly.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "labels-idx1-ubyte")
    >>> _ = open(path, "wb").write(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 2, 1]))
    >>> read_idx(path)
    array([7, 2, 1], dtype=uint8)
    """
    return _read_idx(_args.path("read_idx", "path", path))[1]


def _read_idx(path: str | os.PathLike[str]) -> tuple[int, np.ndarray]:
    """``(magic number, array)`` of an IDX file; see :func:`read_idx`."""
    data = read_file_bytes(path)
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] not in _IDX_DTYPES or data[3] == 0:
        raise DatasetError(f"{path}: not an IDX file (magic bytes {data[:4].hex() or 'missing'})")
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DatasetError(f"{path}: truncated IDX header ({len(data)} bytes, needs {header})")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    dtype = _IDX_DTYPES[data[2]]
    count = math.prod(dims)
    expected, found = count * dtype.itemsize, len(data) - header
    if found != expected:
        hint = "truncated" if found < expected else "trailing bytes"
        raise DatasetError(
            f"{path}: header says shape {dims} of {dtype.name} ({expected} data bytes) "
            f"but the file holds {found} ({hint})"
        )
    array = np.frombuffer(data, dtype, count, header).reshape(dims).astype(dtype.newbyteorder("="))
    return int.from_bytes(data[:4], "big"), array


def load_mnist(directory: str | os.PathLike[str], split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Read MNIST (or Fashion-MNIST) IDX files from ``directory`` as ``(x, y)``.

    Looks for ``train-images-idx3-ubyte`` and ``train-labels-idx1-ubyte`` (``t10k-...`` for
    ``split='test'``), each optionally ``.gz``, and also accepts the ``train-images.idx3-ubyte``
    spelling. Returns ``x`` float32 of shape ``(N, 1, 28, 28)`` in [0, 1] and ``y`` int32.

    Example, with the four files from http://yann.lecun.com/exdb/mnist/ in ``~/mnist``:
    ``x, y = load_mnist(os.path.expanduser("~/mnist"), "test")`` gives 10000 samples.
    """
    _args.choice("load_mnist", "split", split, tuple(_MNIST_PREFIX))
    directory = _args.path("load_mnist", "directory", directory)
    prefix = _MNIST_PREFIX[split]
    images_path = _find_idx(directory, prefix, "images", 3)
    labels_path = _find_idx(directory, prefix, "labels", 1)
    images = _read_idx_as(images_path, ndim=3, magic=0x0803)
    labels = _read_idx_as(labels_path, ndim=1, magic=0x0801)
    if images.shape[1:] != (28, 28):
        raise DatasetError(
            f"{images_path}: images are {images.shape[1]}x{images.shape[2]}, MNIST's are 28x28"
        )
    if len(images) != len(labels):
        raise DatasetError(f"{images_path} holds {len(images)} images but {labels_path} {len(labels)} labels")
    x = images[:, None].astype(np.float32)
    x /= 255.0
    return x, labels.astype(np.int32)


def load_cifar10(directory: str | os.PathLike[str], split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Read the binary version of CIFAR-10 from ``directory`` as ``(x, y)``.

    ``split='train'`` reads ``data_batch_1.bin`` .. ``data_batch_5.bin``, ``'test'`` reads
    ``test_batch.bin`` (each optionally ``.gz``), from ``directory`` or its
    ``cifar-10-batches-bin`` sub-directory. Each record is one label byte and 3072 pixel
    bytes (red, green, blue planes of 32x32). Returns ``x`` float32 ``(N, 3, 32, 32)`` in
    [0, 1] and ``y`` int32 in 0..9. The Python (pickle) version is refused: unpickling a
    downloaded file can run arbitrary code.

    Example, after ``tar xzf cifar-10-binary.tar.gz`` in ``~/data``:
    ``x, y = load_cifar10(os.path.expanduser("~/data"), "test")`` gives 10000 samples.
    """
    _args.choice("load_cifar10", "split", split, tuple(_CIFAR_FILES))
    directory = _args.path("load_cifar10", "directory", directory)
    if os.path.isdir(os.path.join(directory, _CIFAR_SUBDIR)):
        directory = os.path.join(directory, _CIFAR_SUBDIR)
    if os.path.isfile(os.path.join(directory, "data_batch_1")) and not os.path.isfile(
        os.path.join(directory, "data_batch_1.bin")
    ):
        raise DatasetError(
            f"{directory}: holds the Python (pickle) version of CIFAR-10, which singa_lite does not "
            "unpickle; download the binary version (cifar-10-binary.tar.gz) instead"
        )
    records = [_read_cifar_batch(find_file(directory, [name], "CIFAR-10")) for name in _CIFAR_FILES[split]]
    total = sum(len(r) for r in records)
    # Fill one float32 array batch by batch: no second full-size copy (train is 600 MB).
    x = np.empty((total, 3, 32, 32), dtype=np.float32)
    y = np.empty(total, dtype=np.int32)
    start = 0
    for batch in records:
        stop = start + len(batch)
        x[start:stop] = batch[:, 1:].reshape(-1, 3, 32, 32)
        y[start:stop] = batch[:, 0]
        start = stop
    x /= 255.0
    return x, y


def _find_idx(directory: str | os.PathLike[str], prefix: str, kind: str, ndim: int) -> str:
    names = [f"{prefix}-{kind}-idx{ndim}-ubyte", f"{prefix}-{kind}.idx{ndim}-ubyte"]
    return find_file(directory, names, f"MNIST {kind}")


def _read_idx_as(path: str, ndim: int, magic: int) -> np.ndarray:
    """Read an IDX file that must be uint8 with ``ndim`` dimensions (magic ``0x0000080<ndim>``)."""
    found, array = _read_idx(path)
    if found != magic:
        swapped = "; are images and labels swapped?" if found in (0x0801, 0x0803) else ""
        raise DatasetError(
            f"{path}: magic number {found:#010x} ({array.dtype}, {array.ndim} dims), "
            f"expected {magic:#010x} (uint8, {ndim} dims){swapped}"
        )
    return array


def _read_cifar_batch(path: str) -> np.ndarray:
    """One CIFAR-10 binary batch as a uint8 array of shape (records, 3073), validated."""
    data = read_file_bytes(path)
    if not data or len(data) % _CIFAR_RECORD:
        raise DatasetError(
            f"{path}: {len(data)} bytes is not a whole number of {_CIFAR_RECORD}-byte CIFAR-10 records "
            "(1 label byte + 3072 pixel bytes); the file is truncated or not CIFAR-10 binary"
        )
    batch = np.frombuffer(data, np.uint8).reshape(-1, _CIFAR_RECORD)
    bad = np.flatnonzero(batch[:, 0] > 9)
    if bad.size:
        raise DatasetError(
            f"{path}: record {bad[0]} has label {batch[bad[0], 0]}, not 0..9 "
            "(CIFAR-100 binary has 2 label bytes and is a different format)"
        )
    return batch

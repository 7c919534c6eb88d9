"""The embedded default data set: UCI's 8x8 handwritten digits (1797 images, 10 classes).

It ships inside the package (``digits.npz``, 45 KB; licence and attribution in
``LICENSE.digits.txt``), so examples and tests train a real classifier with no download.
"""

from __future__ import annotations

import functools
import io
import zipfile

import numpy as np
from numpy.typing import DTypeLike

from singa_lite import _args
from singa_lite.data._common import DatasetError, read_package_bytes
from singa_lite.data.batching import split_indices
from singa_lite.errors import DTypeError

_FILE = "digits.npz"
NUM_SAMPLES = 1797
NUM_CLASSES = 10
MAX_PIXEL = 16  # each pixel counts the set bits of a 4x4 block of the original bitmap
_SPLITS = ("train", "test", "all")


def load_digits(
    split: str = "train",
    test_fraction: float = 0.2,
    seed: int = 0,
    normalize: bool = True,
    dtype: DTypeLike = np.float32,
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(x, y)``: digit images of shape ``(N, 1, 8, 8)`` and int32 labels 0..9.

    ``split`` is ``'train'``, ``'test'`` or ``'all'``. The split is stratified by class and
    fixed by ``(test_fraction, seed)``, so the test set is the same on every run; train and
    test are disjoint and together make up ``'all'``. Samples keep the file's order.
    ``normalize`` scales pixels from 0..16 to [0, 1]; without it ``x`` holds the raw counts
    in ``dtype`` (which may then be an integer type).

    >>> x, y = load_digits("test")
    >>> x.shape, x.dtype, y.dtype, float(x.max())
    ((359, 1, 8, 8), dtype('float32'), dtype('int32'), 1.0)
    """
    _args.choice("load_digits", "split", split, _SPLITS)
    dtype = np.dtype(dtype)
    if normalize and dtype.kind != "f":
        raise DTypeError(f"load_digits: normalize=True needs a floating dtype, got {dtype}")
    images, labels = _raw_digits()
    if split == "all":
        idx = np.arange(NUM_SAMPLES)
    else:
        train, test = split_indices(labels, test_fraction, seed, stratify=True)
        idx = train if split == "train" else test
    x = images[idx, None].astype(dtype)
    if normalize:
        x /= MAX_PIXEL
    return x, labels[idx].astype(np.int32)


@functools.lru_cache(maxsize=1)
def _raw_digits() -> tuple[np.ndarray, np.ndarray]:
    """The stored ``(images uint8 (1797, 8, 8), labels int64 (1797,))``, read once, read-only."""
    try:
        with np.load(io.BytesIO(read_package_bytes(_FILE)), allow_pickle=False) as npz:
            images, labels = npz["images"], npz["labels"]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise DatasetError(f"singa_lite/data/{_FILE} cannot be read ({exc}); reinstall singa_lite") from exc
    _check_digits(images, labels)
    images.flags.writeable = False  # shared by every call through the cache
    labels.flags.writeable = False
    return images, labels


def _check_digits(images: np.ndarray, labels: np.ndarray) -> None:
    """Catch a damaged or replaced package file before it trains a model on garbage."""
    problems = []
    if images.shape != (NUM_SAMPLES, 8, 8) or images.dtype != np.uint8:
        problems.append(f"images are {images.dtype}{images.shape}, expected uint8(1797, 8, 8)")
    elif images.max() > MAX_PIXEL:
        problems.append(f"a pixel is {images.max()}, above {MAX_PIXEL}")
    if labels.shape != (NUM_SAMPLES,) or labels.dtype.kind not in "iu":
        problems.append(f"labels are {labels.dtype}{labels.shape}, expected integers (1797,)")
    elif labels.min() < 0 or labels.max() >= NUM_CLASSES:
        problems.append(f"labels span {labels.min()}..{labels.max()}, expected 0..9")
    if problems:
        raise DatasetError(f"singa_lite/data/{_FILE} is damaged: " + "; ".join(problems))

"""Splitting a data set and iterating over it in (shuffled) mini-batches.

>>> import numpy as np
>>> from singa_lite.data import DataLoader
>>> x, y = np.arange(10.0).reshape(5, 2), np.arange(5)
>>> loader = DataLoader(x, y, batch_size=2, seed=0)
>>> [len(yb) for _, yb in loader]
[2, 2, 1]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from singa_lite import _args
from singa_lite.data._common import DatasetError

Seed = int | np.random.Generator | None


def split_indices(
    labels: np.ndarray, test_fraction: float = 0.2, seed: int = 0, stratify: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Return sorted ``(train_idx, test_idx)`` that split ``range(len(labels))`` reproducibly.

    With ``stratify`` each class is split on its own, so both parts keep the class
    proportions (each class gives ``round(count * test_fraction)`` samples to the test part).
    Samples are ranked by a hash of ``(seed, index)`` rather than by NumPy's random streams,
    which NumPy may change between versions: the same arguments give the same split on
    every run, platform and NumPy version.

    >>> train, test = split_indices(np.array([0, 0, 0, 0, 1, 1, 1, 1]), 0.5)
    >>> len(train), len(test), sorted(set(train) | set(test)) == list(range(8))
    (4, 4, True)
    """
    _args.number("split_indices", "test_fraction", test_fraction, 0.0, 1.0, low_open=True, high_open=True)
    if not isinstance(seed, int | np.integer):  # a float seed would hash differently from its int
        raise _args.bad("split_indices", "seed", "be an integer in [0, 2**64)", seed)
    seed = _args.integer("split_indices", "seed", seed, 0, 2**64 - 1)
    labels = np.asarray(labels)
    keys = _splitmix64(
        _splitmix64(np.full(len(labels), seed, dtype=np.uint64)) + np.arange(len(labels), dtype=np.uint64)
    )
    groups = (
        [np.flatnonzero(labels == c) for c in np.unique(labels)] if stratify else [np.arange(len(labels))]
    )
    is_test = np.zeros(len(labels), dtype=bool)
    for members in groups:
        ranked = members[np.argsort(keys[members], kind="stable")]
        is_test[ranked[: round(len(members) * test_fraction)]] = True
    return np.flatnonzero(~is_test), np.flatnonzero(is_test)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (Steele et al., 2014): a fixed, well-mixed uint64 hash."""
    # uint64 array arithmetic wraps modulo 2**64 silently, which is exactly what the hash needs.
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def train_test_split(
    x: np.ndarray, y: np.ndarray, test_fraction: float = 0.2, seed: int = 0, stratify: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split ``x`` and ``y`` along axis 0 into ``(x_train, x_test, y_train, y_test)``.

    The order of the four results is scikit-learn's; samples keep their original order
    inside each part. ``stratify`` splits each class of ``y`` in the same proportion.

    >>> x, y = np.arange(20).reshape(10, 2), np.array([0, 1] * 5)
    >>> x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_fraction=0.4)
    >>> x_tr.shape, x_te.shape, np.bincount(y_te).tolist()
    ((6, 2), (4, 2), [2, 2])
    """
    _check_pair(x, y, "train_test_split")
    train, test = split_indices(y, test_fraction, seed, stratify)
    return x[train], x[test], y[train], y[test]


def iterate_batches(
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int,
    shuffle: bool = True,
    seed: Seed = None,
    drop_last: bool = False,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(xb, yb)`` batches that cover every sample of one epoch exactly once.

    ``seed`` (an int or a ``numpy.random.Generator``) makes the order reproducible; passing
    the same Generator to successive calls gives a new order each epoch (this is what
    :class:`DataLoader` does). Without ``shuffle`` the batches are views in the original
    order; ``drop_last`` skips a final batch smaller than ``batch_size``.

    >>> x, y = np.arange(5), np.arange(5)
    >>> [yb.tolist() for _, yb in iterate_batches(x, y, 2, shuffle=False)]
    [[0, 1], [2, 3], [4]]
    """
    # Checked now, not at the first next(): a bad call fails where it is written.
    _check_pair(x, y, "iterate_batches")
    return _batches(x, y, _batch_size("iterate_batches", batch_size), shuffle, seed, drop_last)


def _batches(
    x: np.ndarray, y: np.ndarray, batch_size: int, shuffle: bool, seed: Seed, drop_last: bool
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    n = len(x)
    stop = n - n % batch_size if drop_last else n
    order = np.random.default_rng(seed).permutation(n) if shuffle else None
    for start in range(0, stop, batch_size):
        if order is None:
            yield x[start : start + batch_size], y[start : start + batch_size]
        else:
            idx = order[start : start + batch_size]
            yield x[idx], y[idx]


class DataLoader:
    """Re-iterable mini-batches of ``(x, y)``: each ``for`` loop over it is one epoch.

    One random generator, seeded once, drives every epoch, so epochs come in different
    orders while the whole sequence of epochs is reproducible from ``seed``.
    :meth:`get_state` / :meth:`set_state` capture that generator (a JSON-able dict) so a
    resumed run sees the same future epochs as an uninterrupted one.

    >>> x, y = np.arange(6), np.arange(6)
    >>> loader = DataLoader(x, y, batch_size=4, seed=1)
    >>> len(loader), sum(len(yb) for _, yb in loader)
    (2, 6)
    """

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        batch_size: int,
        shuffle: bool = True,
        seed: int | None = None,
        drop_last: bool = False,
    ) -> None:
        _check_pair(x, y, "DataLoader")
        self.x, self.y = x, y
        self.batch_size = _batch_size("DataLoader", batch_size)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self._rng = np.random.default_rng(seed)

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        return iterate_batches(self.x, self.y, self.batch_size, self.shuffle, self._rng, self.drop_last)

    def __len__(self) -> int:
        """The number of batches in one epoch."""
        full, rest = divmod(len(self.x), self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def get_state(self) -> dict[str, Any]:
        """The shuffling generator's state, for a checkpoint's aux data."""
        return dict(self._rng.bit_generator.state)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`get_state`; later epochs then repeat the saved run's."""
        self._rng.bit_generator.state = state


def _check_pair(x: np.ndarray, y: np.ndarray, where: str) -> None:
    if len(x) != len(y):
        raise DatasetError(f"{where}: x has {len(x)} samples but y has {len(y)}")


def _batch_size(owner: str, batch_size: Any) -> int:
    if not isinstance(batch_size, int | np.integer):  # 32.0 is a bug upstream, not a size
        raise _args.bad(owner, "batch_size", "be an integer >= 1", batch_size)
    return _args.count(owner, "batch_size", batch_size)

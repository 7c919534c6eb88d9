"""Small data set helpers: an embedded default data set, loaders for standard files, batching.

Nothing here downloads anything. Shipped with the package:

* :func:`load_digits` — UCI's 8x8 handwritten digits (1797 images, 10 classes, CC BY 4.0);
* :func:`load_text` — a 24 KB public-domain English text for character-level models.

Readers for files the user already has: :func:`load_mnist` (IDX, optionally gzipped) and
:func:`load_cifar10` (the binary version). Every bad file raises :class:`DatasetError`.

>>> from singa_lite.data import load_digits, DataLoader
>>> x, y = load_digits("train")
>>> xb, yb = next(iter(DataLoader(x, y, batch_size=32, seed=0)))
>>> xb.shape, yb.shape
((32, 1, 8, 8), (32,))
"""

from singa_lite.data._common import DatasetError
from singa_lite.data.batching import DataLoader, iterate_batches, split_indices, train_test_split
from singa_lite.data.digits import load_digits
from singa_lite.data.formats import load_cifar10, load_mnist, read_idx
from singa_lite.data.text import char_vocab, decode_text, encode_text, load_text

__all__ = [
    "DataLoader",
    "DatasetError",
    "char_vocab",
    "decode_text",
    "encode_text",
    "iterate_batches",
    "load_cifar10",
    "load_digits",
    "load_mnist",
    "load_text",
    "read_idx",
    "split_indices",
    "train_test_split",
]

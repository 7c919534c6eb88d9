"""A small English text shipped with the package, and character vocabularies for it.

``coriolanus.txt`` holds Act I, scenes 1-5, of Shakespeare's *Coriolanus* (24 KB, public
domain; see ``LICENSE.text.txt``), enough to train a character-level LSTM in minutes.

>>> from singa_lite.data import load_text, char_vocab, encode_text, decode_text
>>> text = load_text()
>>> chars, char_to_idx = char_vocab(text)
>>> ids = encode_text(text[:14], char_to_idx)
>>> decode_text(ids, chars)
'First Citizen:'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from singa_lite import _args
from singa_lite.data._common import DatasetError, read_package_bytes

_FILE = "coriolanus.txt"


def load_text() -> str:
    """Return the shipped corpus as one string, without its '#' header lines.

    >>> load_text().splitlines()[0]
    'First Citizen:'
    """
    lines = read_package_bytes(_FILE).decode("utf-8").splitlines(keepends=True)
    start = 0
    while start < len(lines) and lines[start].startswith("#"):
        start += 1
    if start < len(lines) and not lines[start].strip():
        start += 1  # the blank line that separates the header from the text
    return "".join(lines[start:])


def char_vocab(text: str) -> tuple[list[str], dict[str, int]]:
    """Return ``(chars, char_to_idx)``: the distinct characters of ``text``, sorted, and their indices.

    >>> char_vocab("hello")
    (['e', 'h', 'l', 'o'], {'e': 0, 'h': 1, 'l': 2, 'o': 3})
    """
    chars = sorted(set(_args.instance("char_vocab", "text", text, str, "a string")))
    return chars, {c: i for i, c in enumerate(chars)}


def encode_text(text: str, char_to_idx: dict[str, int]) -> np.ndarray:
    """Map each character of ``text`` to its index: an int32 array of ``len(text)``.

    >>> encode_text("hole", char_vocab("hello")[1]).tolist()
    [1, 3, 2, 0]
    """
    _args.instance("encode_text", "text", text, str, "a string")
    _args.instance("encode_text", "char_to_idx", char_to_idx, Mapping, "a dict from char_vocab")
    try:
        return np.fromiter((char_to_idx[c] for c in text), dtype=np.int32, count=len(text))
    except KeyError:
        missing = sorted(set(text) - char_to_idx.keys())
        raise DatasetError(f"encode_text: characters not in the vocabulary: {missing}") from None


def decode_text(indices: np.ndarray | list[int], chars: list[str]) -> str:
    """Turn indices back into text, the inverse of :func:`encode_text`.

    >>> decode_text([1, 3, 2, 0], ["e", "h", "l", "o"])
    'hole'
    """
    _args.instance("decode_text", "chars", chars, Sequence, "a list of characters from char_vocab")
    ids = np.asarray(indices).ravel()
    whole = ids.dtype.kind in "iu" or (ids.dtype.kind == "f" and bool(np.all(np.mod(ids, 1) == 0)))
    if not whole or (ids.size and not -len(chars) <= ids.min() <= ids.max() < len(chars)):
        raise _args.bad("decode_text", "indices", f"be integers in [0, {len(chars)})", indices)
    return "".join(chars[int(i)] for i in ids)

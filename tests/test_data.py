"""Tests of singa_lite.data: embedded digits and text, MNIST/CIFAR readers, batching."""

from __future__ import annotations

import gzip
import os
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from singa_lite import SingaLiteError
from singa_lite.data import (
    DataLoader,
    DatasetError,
    char_vocab,
    decode_text,
    encode_text,
    iterate_batches,
    load_cifar10,
    load_digits,
    load_mnist,
    load_text,
    read_idx,
    split_indices,
    train_test_split,
)

# ---------------------------------------------------------------- digits


def test_digits_all_shapes_dtypes_range_and_balance():
    x, y = load_digits("all")
    assert x.shape == (1797, 1, 8, 8) and x.dtype == np.float32
    assert y.shape == (1797,) and y.dtype == np.int32
    assert x.min() == 0.0 and x.max() == 1.0
    counts = np.bincount(y)
    assert counts.tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    # The first image of the UCI file is a 0; checks the pixels were stored unchanged.
    assert y[0] == 0 and (x[0, 0, 0] * 16).tolist() == [0, 0, 5, 13, 9, 1, 0, 0]


def test_digits_raw_counts_and_dtype():
    x, _ = load_digits("all", normalize=False, dtype=np.uint8)
    assert x.dtype == np.uint8 and x.max() == 16
    x64, _ = load_digits("test", dtype=np.float64)
    assert x64.dtype == np.float64
    with pytest.raises(SingaLiteError, match="floating"):
        load_digits(normalize=True, dtype=np.int32)
    with pytest.raises(ValueError, match="split"):
        load_digits("validation")


def test_digits_split_is_stratified_disjoint_complete_and_stable():
    x_all, y_all = load_digits("all")
    _, y_tr = load_digits("train")
    x_te, y_te = load_digits("test")
    assert len(y_tr) + len(y_te) == 1797 and len(y_te) == 359
    # Each class gives round(count * 0.2) samples to the test set.
    assert np.bincount(y_te).tolist() == [round(c * 0.2) for c in np.bincount(y_all)]
    train_idx, test_idx = split_indices(y_all, 0.2, seed=0)
    assert np.intersect1d(train_idx, test_idx).size == 0
    assert np.array_equal(np.union1d(train_idx, test_idx), np.arange(1797))
    np.testing.assert_array_equal(x_te, x_all[test_idx])
    np.testing.assert_array_equal(y_tr, y_all[train_idx])
    # Stable: the same call gives the same set; a pinned checksum guards against
    # a change of algorithm silently moving samples between train and test.
    np.testing.assert_array_equal(load_digits("test")[1], y_te)
    assert test_idx[:8].tolist() == _PINNED_TEST_IDX_HEAD
    other, _ = load_digits("test", seed=1)
    assert not np.array_equal(other, x_te)


_PINNED_TEST_IDX_HEAD = [5, 7, 14, 17, 33, 34, 40, 44]  # from a NumPy-independent hash


def test_digits_outputs_are_private_copies():
    x, y = load_digits("all")
    x[:] = 7
    y[:] = 7
    x2, y2 = load_digits("all")
    assert x2.max() == 1.0 and y2.max() == 9


# ---------------------------------------------------------------- MNIST (IDX)


def _idx_bytes(array: np.ndarray, code: int = 0x08) -> bytes:
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def _write_mnist(directory, split: str, n: int, gz: bool, rng) -> tuple[np.ndarray, np.ndarray]:
    prefix = "train" if split == "train" else "t10k"
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    for name, array in ((f"{prefix}-images-idx3-ubyte", images), (f"{prefix}-labels-idx1-ubyte", labels)):
        data = _idx_bytes(array)
        if gz:
            (directory / (name + ".gz")).write_bytes(gzip.compress(data))
        else:
            (directory / name).write_bytes(data)
    return images, labels


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("split", ["train", "test"])
def test_mnist_round_trip(tmp_path, split, gz):
    images, labels = _write_mnist(tmp_path, split, 5, gz, np.random.default_rng(0))
    x, y = load_mnist(tmp_path, split)
    assert x.shape == (5, 1, 28, 28) and x.dtype == np.float32
    assert y.dtype == np.int32
    np.testing.assert_allclose(x[:, 0] * 255, images, atol=1e-4)
    np.testing.assert_array_equal(y, labels)
    assert x.min() >= 0.0 and x.max() <= 1.0


def test_mnist_accepts_dotted_names_and_gzip_without_suffix(tmp_path):
    images = np.full((2, 28, 28), 255, dtype=np.uint8)
    (tmp_path / "t10k-images.idx3-ubyte").write_bytes(gzip.compress(_idx_bytes(images)))
    (tmp_path / "t10k-labels.idx1-ubyte").write_bytes(_idx_bytes(np.array([3, 9], dtype=np.uint8)))
    x, y = load_mnist(tmp_path, "test")
    assert x.min() == 1.0 and y.tolist() == [3, 9]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:-1], "truncated"),
        (lambda b: b + b"\0", "trailing bytes"),
        (lambda b: b"\x12\x34" + b[2:], "not an IDX file"),
        (lambda b: b[:2] + b"\x07" + b[3:], "not an IDX file"),  # unknown type code
        (lambda b: b[:6], "truncated IDX header"),
        (lambda b: b"", "not an IDX file"),
    ],
)
def test_mnist_bad_images_file(tmp_path, damage, message):
    _write_mnist(tmp_path, "train", 3, False, np.random.default_rng(1))
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(DatasetError, match=message) as info:
        load_mnist(tmp_path, "train")
    assert "train-images-idx3-ubyte" in str(info.value)
    assert isinstance(info.value, SingaLiteError) and isinstance(info.value, ValueError)


def test_mnist_wrong_magic_and_mismatches(tmp_path):
    _write_mnist(tmp_path, "train", 3, False, np.random.default_rng(2))
    images = tmp_path / "train-images-idx3-ubyte"
    labels = tmp_path / "train-labels-idx1-ubyte"
    good_images, good_labels = images.read_bytes(), labels.read_bytes()
    # A valid IDX file of the wrong kind (int32 labels): magic 0x00000c01 is named.
    labels.write_bytes(_idx_bytes(np.arange(3, dtype=np.int32), code=0x0C))
    with pytest.raises(DatasetError, match=r"0x00000c01.*expected 0x00000801"):
        load_mnist(tmp_path)
    labels.write_bytes(good_images)  # images where labels belong
    with pytest.raises(DatasetError, match="swapped"):
        load_mnist(tmp_path)
    labels.write_bytes(_idx_bytes(np.arange(4, dtype=np.uint8)))
    with pytest.raises(DatasetError, match=r"3 images but .* 4 labels"):
        load_mnist(tmp_path)
    labels.write_bytes(good_labels)
    images.write_bytes(_idx_bytes(np.zeros((3, 8, 8), dtype=np.uint8)))
    with pytest.raises(DatasetError, match="28x28"):
        load_mnist(tmp_path)
    images.write_bytes(gzip.compress(good_images)[:40])  # truncated gzip stream
    with pytest.raises(DatasetError, match="cannot read"):
        load_mnist(tmp_path)


def test_mnist_missing_files_and_bad_split(tmp_path):
    with pytest.raises(DatasetError, match="no MNIST images file"):
        load_mnist(tmp_path, "test")
    with pytest.raises(ValueError, match="split"):
        load_mnist(tmp_path, "val")
    (tmp_path / "t10k-images-idx3-ubyte").mkdir()  # not a regular file: skipped, not opened
    with pytest.raises(DatasetError, match="no MNIST images file"):
        load_mnist(tmp_path, "test")


@pytest.mark.parametrize(
    ("dtype", "code"),
    [
        (np.uint8, 0x08),
        (np.int8, 0x09),
        (np.int16, 0x0B),
        (np.int32, 0x0C),
        (np.float32, 0x0D),
        (np.float64, 0x0E),
    ],
)
def test_read_idx_all_types_native_endian(tmp_path, dtype, code):
    array = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype)
    path = tmp_path / "a.idx"
    path.write_bytes(_idx_bytes(array, code))
    out = read_idx(path)
    np.testing.assert_array_equal(out, array)
    assert out.dtype == np.dtype(dtype) and out.dtype.isnative and out.flags.writeable


def test_read_idx_refuses_fifo(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(DatasetError, match="no such regular file"):
        read_idx(fifo)  # must not block


# ---------------------------------------------------------------- CIFAR-10 (binary)


def _write_cifar(directory, names, n: int, rng, gz: bool = False) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for name in names:
        images = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        data = np.concatenate([labels[:, None], images.reshape(n, -1)], axis=1).tobytes()
        (directory / (name + (".gz" if gz else ""))).write_bytes(gzip.compress(data) if gz else data)
        xs.append(images)
        ys.append(labels)
    return np.concatenate(xs), np.concatenate(ys)


_TRAIN = [f"data_batch_{i}.bin" for i in range(1, 6)]


@pytest.mark.parametrize("gz", [False, True])
def test_cifar10_round_trip(tmp_path, gz):
    rng = np.random.default_rng(3)
    images, labels = _write_cifar(tmp_path, _TRAIN, 2, rng, gz)
    test_images, test_labels = _write_cifar(tmp_path, ["test_batch.bin"], 3, rng, gz)
    x, y = load_cifar10(tmp_path, "train")
    assert x.shape == (10, 3, 32, 32) and x.dtype == np.float32 and y.dtype == np.int32
    np.testing.assert_allclose(x * 255, images, atol=1e-4)  # batches in order 1..5
    np.testing.assert_array_equal(y, labels)
    x, y = load_cifar10(tmp_path, "test")
    np.testing.assert_allclose(x * 255, test_images, atol=1e-4)
    np.testing.assert_array_equal(y, test_labels)


def test_cifar10_finds_unpacked_subdirectory(tmp_path):
    sub = tmp_path / "cifar-10-batches-bin"
    sub.mkdir()
    _, labels = _write_cifar(sub, ["test_batch.bin"], 2, np.random.default_rng(4))
    assert load_cifar10(tmp_path, "test")[1].tolist() == labels.tolist()


def test_cifar10_bad_files(tmp_path):
    rng = np.random.default_rng(5)
    _write_cifar(tmp_path, ["test_batch.bin"], 2, rng)
    path = tmp_path / "test_batch.bin"
    good = path.read_bytes()
    path.write_bytes(good[:-10])
    with pytest.raises(DatasetError, match=r"test_batch\.bin.*not a whole number of 3073-byte"):
        load_cifar10(tmp_path, "test")
    path.write_bytes(b"")
    with pytest.raises(DatasetError, match="0 bytes"):
        load_cifar10(tmp_path, "test")
    path.write_bytes(good[:3073] + bytes([42]) + good[3074:])
    with pytest.raises(DatasetError, match="record 1 has label 42"):
        load_cifar10(tmp_path, "test")


def test_cifar10_missing_batch_and_pickle_version(tmp_path):
    _write_cifar(tmp_path, _TRAIN[:4], 1, np.random.default_rng(6))
    with pytest.raises(DatasetError, match=r"data_batch_5\.bin"):
        load_cifar10(tmp_path, "train")
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "data_batch_1").write_bytes(b"\x80\x04not for unpickling")
    with pytest.raises(DatasetError, match="pickle"):
        load_cifar10(pickled, "train")
    with pytest.raises(ValueError, match="split"):
        load_cifar10(tmp_path, "all")


# ---------------------------------------------------------------- batching


@given(
    n=st.integers(0, 40),
    batch_size=st.integers(1, 12),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_iterate_batches_covers_each_sample_once(n, batch_size, shuffle, drop_last, seed):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    y = np.arange(n)
    batches = list(iterate_batches(x, y, batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last))
    seen = np.concatenate([yb for _, yb in batches]) if batches else np.array([], dtype=int)
    for xb, yb in batches:
        np.testing.assert_array_equal(xb[:, 0], 2 * yb)  # x and y stay paired
        assert len(yb) <= batch_size
    if drop_last:
        assert all(len(yb) == batch_size for _, yb in batches)
        assert len(seen) == n - n % batch_size
        assert len(np.unique(seen)) == len(seen)
    else:
        assert sorted(seen.tolist()) == list(range(n))
    if not shuffle:
        assert seen.tolist() == list(range(len(seen)))


def test_iterate_batches_reproducible_with_seed():
    x, y = np.arange(50), np.arange(50)
    first = [yb.tolist() for _, yb in iterate_batches(x, y, 8, seed=7)]
    again = [yb.tolist() for _, yb in iterate_batches(x, y, 8, seed=7)]
    other = [yb.tolist() for _, yb in iterate_batches(x, y, 8, seed=8)]
    assert first == again and first != other
    assert first != [yb.tolist() for _, yb in iterate_batches(x, y, 8, shuffle=False)]


def test_dataloader_epochs_differ_but_replay_from_seed_and_state():
    x, y = np.arange(30), np.arange(30)

    def epochs(loader, k):
        return [np.concatenate([yb for _, yb in loader]).tolist() for _ in range(k)]

    loader = DataLoader(x, y, batch_size=4, seed=11)
    assert len(loader) == 8
    run = epochs(loader, 3)
    assert run[0] != run[1] != run[2]
    assert all(sorted(e) == list(range(30)) for e in run)
    assert epochs(DataLoader(x, y, batch_size=4, seed=11), 3) == run
    # Resume: a loader restored from the state after epoch 1 continues like the original.
    resumed = DataLoader(x, y, batch_size=4, seed=999)
    original = DataLoader(x, y, batch_size=4, seed=11)
    epochs(original, 1)
    resumed.set_state(original.get_state())
    assert epochs(resumed, 2) == run[1:]
    assert len(DataLoader(x, y, batch_size=4, drop_last=True)) == 7


def test_batching_argument_errors():
    x = np.zeros((4, 2))
    with pytest.raises(DatasetError, match="4 samples but y has 3"):
        next(iterate_batches(x, np.zeros(3), 2))
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="batch_size"):
            DataLoader(x, np.zeros(4), batch_size=bad)


def test_train_test_split_stratified_and_plain():
    y = np.repeat(np.arange(3), [10, 20, 30])
    x = np.arange(60)
    x_tr, x_te, _, y_te = train_test_split(x, y, test_fraction=0.1, seed=3)
    assert np.bincount(y_te).tolist() == [1, 2, 3]
    assert np.array_equal(np.sort(np.concatenate([x_tr, x_te])), x)
    np.testing.assert_array_equal(y[x_te], y_te)  # pairs kept
    assert np.all(np.diff(x_tr) > 0)  # original order inside each part
    _, x_te2, _, _ = train_test_split(x, y, test_fraction=0.1, seed=3, stratify=False)
    assert len(x_te2) == 6
    with pytest.raises(ValueError, match="test_fraction"):
        train_test_split(x, y, test_fraction=1.0)
    for bad_seed in (-1, 2**64, 1.5):
        with pytest.raises(ValueError, match="seed"):
            split_indices(y, 0.1, seed=bad_seed)


# ---------------------------------------------------------------- text


def test_load_text_is_the_corpus_without_header():
    text = load_text()
    assert 20_000 <= len(text.encode("utf-8")) <= 60_000
    assert text.startswith("First Citizen:\nBefore we proceed any further, hear me speak.\n")
    assert text.endswith("Where they shall know our mind: away!\n")
    assert "#" not in text and text.isascii()


def test_char_vocab_and_encode_decode_round_trip():
    text = load_text()
    chars, char_to_idx = char_vocab(text)
    assert chars == sorted(chars) and len(chars) == len(set(text)) == len(char_to_idx)
    assert all(chars[i] == c for c, i in char_to_idx.items())
    ids = encode_text(text, char_to_idx)
    assert ids.dtype == np.int32 and ids.shape == (len(text),) and ids.max() == len(chars) - 1
    assert decode_text(ids, chars) == text
    with pytest.raises(DatasetError, match=r"\['#', '@'\]"):
        encode_text("a@b#", char_vocab("ab")[1])

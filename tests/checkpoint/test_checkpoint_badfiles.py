"""Bad files: each gives a typed error, never a wrong value, never a crash or a hang, and leaves
every other file untouched."""

from __future__ import annotations

import errno
import os
import random
import resource
import signal
import stat

import h5py
import numpy as np
import pytest
from ckpt_helpers import MLP

from singa_lite import checkpoint, opt, tensor
from singa_lite.checkpoint import atomic, integrity, store
from singa_lite.errors import (
    CheckpointError,
    CorruptCheckpointError,
    IncompatibleCheckpointError,
    StateMismatchError,
)


def _mlp() -> MLP:
    m = MLP()
    m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    m.compile([tensor.Tensor((2, 4))])
    return m


@pytest.fixture
def good(tmp_path):
    """A valid checkpoint and a sibling whose bytes must never change."""
    m = _mlp()
    path = tmp_path / "good.h5"
    m.save_states(path, {"epoch": 1, "w": np.arange(4.0)})
    sibling = tmp_path / "sibling.h5"
    m.save_states(sibling, {"epoch": 2})
    before = sibling.read_bytes()
    yield path
    assert sibling.read_bytes() == before
    assert checkpoint.verify(sibling).ok


def _states(m) -> dict:
    return {k: tensor.to_numpy(v).copy() for k, v in m.get_states().items()}


def _expect(path, error=CheckpointError):
    m = _mlp()
    before = _states(m)
    with pytest.raises(error) as info:
        m.load_states(path)
    assert str(path) in str(info.value)
    after = _states(m)
    assert all(np.array_equal(before[k], after[k]) for k in before), "a failed load changed the model"
    return info.value


def test_empty_file(tmp_path, good):
    (tmp_path / "empty.h5").write_bytes(b"")
    _expect(tmp_path / "empty.h5", CorruptCheckpointError)


def test_not_hdf5(tmp_path, good):
    (tmp_path / "text.h5").write_text("hello, not a checkpoint\n" * 40)
    _expect(tmp_path / "text.h5", CorruptCheckpointError)


def test_plain_hdf5_file_is_incompatible(tmp_path, good):
    with h5py.File(tmp_path / "plain.h5", "w") as f:
        f["x"] = np.ones(3)
    _expect(tmp_path / "plain.h5", IncompatibleCheckpointError)


def test_fifo_does_not_hang(tmp_path, good):
    fifo = tmp_path / "pipe.h5"
    os.mkfifo(fifo)
    signal.alarm(10)  # a regression would block forever: turn it into a failure
    try:
        _expect(fifo, CheckpointError)
        assert not checkpoint.verify(fifo).ok
    finally:
        signal.alarm(0)


def test_directory_and_missing_paths(tmp_path, good):
    assert "directory" in str(_expect(tmp_path, CheckpointError))
    _expect(tmp_path / "missing.h5", CheckpointError)
    with pytest.raises(CheckpointError, match="directory"):
        _mlp().save_states(tmp_path)


@pytest.mark.parametrize("cut", [1, 100, 511, 512, 700, 0.5, -1])
def test_truncated(tmp_path, good, cut):
    data = good.read_bytes()
    n = int(len(data) * cut) if isinstance(cut, float) else cut % len(data)
    (tmp_path / "cut.h5").write_bytes(data[:n])
    _expect(tmp_path / "cut.h5", CorruptCheckpointError)


def test_bit_flips_never_load(tmp_path, good):
    """Hundreds of single-bit flips anywhere (data, names, attributes, HDF5 metadata, header):
    every one is caught before libhdf5 sees the file."""
    data = bytearray(good.read_bytes())
    targets = [data.find(s) for s in (b"fc1.W", b"step_counter", b"epoch", b"meta", b"TREE", b"SNOD")]
    rnd = random.Random(0)
    offsets = [rnd.randrange(len(data)) for _ in range(300)]
    offsets += [t + rnd.randrange(4) for t in targets if t >= 0] + list(range(0, 64, 3))
    bad = tmp_path / "flipped.h5"
    m = _mlp()
    for off in offsets:
        flipped = bytearray(data)
        flipped[off] ^= 1 << rnd.randrange(8)
        bad.write_bytes(flipped)
        with pytest.raises(CheckpointError):
            m.load_states(bad)
    assert len(offsets) >= 300


def test_verify_names_the_damaged_tensor(tmp_path, good):
    with h5py.File(good, "r") as f:
        offset = f["params/fc2.W"].id.get_offset()
    data = bytearray(good.read_bytes())
    data[offset + 5] ^= 0x10
    bad = tmp_path / "damaged.h5"
    bad.write_bytes(data)
    err = _expect(bad, CorruptCheckpointError)
    assert "checksum mismatch" in str(err)
    report = checkpoint.verify(bad)
    assert not report.ok and report.damaged == ["params/fc2.W"]


def _reseal(path) -> None:
    """Make a hand-edited file pass the whole-file check, so the structural checks must catch it."""
    fd = os.open(path, os.O_RDWR)
    try:
        integrity.seal(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "edit, error",
    [
        (lambda f: f.attrs.__setitem__("format_version", "2"), IncompatibleCheckpointError),
        (lambda f: f.attrs.__setitem__("format", '"keras"'), IncompatibleCheckpointError),
        (lambda f: f.attrs.__setitem__("format_version", '"one"'), CorruptCheckpointError),
        (
            lambda f: f["params"].create_dataset("obj", data=["a", "b"], dtype=h5py.string_dtype()),
            CorruptCheckpointError,
        ),
        (lambda f: _replace(f, "params/fc1.W", np.zeros((3, 4), np.float32)), CorruptCheckpointError),
        (lambda f: f["aux"].attrs.__setitem__("json", "{not json"), CorruptCheckpointError),
        (lambda f: f.__setitem__("params/fc1.link", h5py.SoftLink("/params/fc1.W")), CorruptCheckpointError),
        (lambda f: f.__setitem__("other", h5py.ExternalLink("elsewhere.h5", "/x")), CorruptCheckpointError),
    ],
    ids=[
        "version",
        "format",
        "version-type",
        "object-dtype",
        "mis-shaped",
        "bad-json",
        "soft-link",
        "ext-link",
    ],
)
def test_structural_damage_with_a_valid_checksum(tmp_path, good, edit, error):
    with h5py.File(good, "r+") as f:
        edit(f)
    _reseal(good)
    assert integrity.verify_file(str(good))
    _expect(good, error)


def _replace(f, key, arr) -> None:
    meta = f[key].attrs["meta"]
    del f[key]
    f[key] = arr
    f[key].attrs["meta"] = meta


def test_header_from_a_newer_version(tmp_path, good):
    data = bytearray(good.read_bytes())
    data[16] = 9  # header version
    (tmp_path / "new.h5").write_bytes(data)
    _expect(tmp_path / "new.h5", IncompatibleCheckpointError)


def test_shape_mismatch_against_the_model_is_a_state_error(tmp_path, good):
    with h5py.File(good, "r+") as f:
        meta = f["params/fc1.W"].attrs["meta"].replace("[4,3]", "[3,4]")
        _replace(f, "params/fc1.W", np.zeros((3, 4), np.float32))
        f["params/fc1.W"].attrs["meta"] = meta
    _reseal(good)
    err = _expect(good, StateMismatchError)
    assert "fc1.W" in str(err)


def _read_only_dir(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    _mlp().save_states(ro / "old.h5")
    os.chmod(ro, stat.S_IRUSR | stat.S_IXUSR)
    if os.geteuid() == 0:  # root ignores permissions: make the temp file's creation fail as it would

        def denied(path):
            raise PermissionError(errno.EACCES, "Permission denied", path)

        monkeypatch.setattr(store, "create_file", denied)
    return ro


def test_read_only_directory(tmp_path, monkeypatch):
    ro = _read_only_dir(tmp_path, monkeypatch)
    before = (ro / "old.h5").read_bytes()
    try:
        with pytest.raises(CheckpointError, match=r"old\.h5"):
            _mlp().save_states(ro / "old.h5")
        assert (ro / "old.h5").read_bytes() == before and sorted(os.listdir(ro)) == ["old.h5"]
    finally:
        os.chmod(ro, stat.S_IRWXU)


def test_full_disk_at_fsync(tmp_path, good, monkeypatch):
    before = good.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "fsync_fd", full)
    with pytest.raises(CheckpointError, match="No space left") as info:
        _mlp().save_states(good)
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
    assert good.read_bytes() == before
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_full_disk_inside_hdf5(tmp_path, good):
    """A real write failure from inside libhdf5 (file size limit: EFBIG, like a full disk)."""
    before = good.read_bytes()
    m = _mlp()
    big = {"blob": np.zeros(1 << 16)}
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, old_limit[1]))
    try:
        with pytest.raises(CheckpointError):
            m.save_states(good, big)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert good.read_bytes() == before
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]

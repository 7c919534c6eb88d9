"""The checkpoint holes of issue 19: SINGA zip bombs, a reader racing a writer, and a manager
whose every checkpoint is damaged. Each test fails on the code before the fix: an untyped
``MemoryError`` after gigabytes of RSS, a false "corrupt" while another process saves, ``None``
from ``restore`` (a silent fresh start) and retention deleting the only intact checkpoint."""

from __future__ import annotations

import io
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
import tracemalloc
import zipfile
import zlib

import h5py
import numpy as np
import pytest
from ckpt_helpers import MLP, make_cnn

from singa_lite import checkpoint, tensor
from singa_lite.checkpoint import integrity, singa_zip
from singa_lite.errors import CheckpointError, CorruptCheckpointError, StateMismatchError

HERE = os.path.dirname(os.path.abspath(__file__))


def _mlp() -> MLP:
    m = MLP()
    m.compile([tensor.Tensor((2, 4))])
    return m


# -- SINGA zip checkpoints ---------------------------------------------------------------------
def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _singa_zip(path, npz: bytes, attrs: dict | bytes) -> None:
    """A checkpoint as SINGA writes it: a deflated zip of ``tensor_dict.npz`` and ``states_attr.json``."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("tensor_dict.npz", npz)
        zf.writestr("states_attr.json", attrs if isinstance(attrs, bytes) else json.dumps(attrs))


def _attrs(states: dict, aux: dict = {}) -> dict:  # noqa: B006
    out = {k: {"state_type": 0, "shape": list(v.shape), "dtype": 0} for k, v in states.items()}
    out.update({k: {"state_type": 1, "shape": list(v.shape), "dtype": 0} for k, v in aux.items()})
    return out


def _states(m) -> dict[str, np.ndarray]:
    return {k: np.full(v.shape, 0.5, np.float32) for k, v in m.get_states().items()}


def _zero_bomb(path, size: int) -> None:
    """A zip whose ``tensor_dict.npz`` inflates to ``size`` zero bytes (about size / 1000 on disk),
    written by hand: deflate blocks of 64 MiB of zeros, each ended by a full flush so that the
    same compressed block can be repeated."""
    chunk = 64 << 20
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(b"\0" * chunk) + c.flush(zlib.Z_FULL_FLUSH)
    tail = zlib.compressobj(9, zlib.DEFLATED, -15).flush(zlib.Z_FINISH)
    data = block * (size // chunk) + tail
    attrs = json.dumps({"fc1.W": {"state_type": 0, "shape": [4, 3], "dtype": 0}}).encode()
    entries, body = [], b""
    for name, payload, method, crc, usize in (
        (b"states_attr.json", attrs, 0, zlib.crc32(attrs), len(attrs)),
        (b"tensor_dict.npz", data, 8, 0, size),  # the CRC is never reached: refused before
    ):
        entries.append((name, len(body), method, crc, len(payload), usize))
        body += struct.pack(
            "<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, len(payload), usize, len(name), 0
        )
        body += name + payload
    central = b""
    for name, offset, method, crc, csize, usize in entries:
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII",
            0x02014B50,
            20,
            20,
            0,
            method,
            0,
            0,
            crc,
            csize,
            usize,
            len(name),
            0,
            0,
            0,
            0,
            0,
            offset,
        )
        central += name
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), len(body), 0)
    with open(path, "wb") as f:
        f.write(body + central + end)


def test_a_4_gib_zero_filled_member_is_refused_before_inflating(tmp_path):
    """In a child with 1 GiB of address space to spare: before, the staged npz grew until a
    MemoryError (3 GB of RSS where memory allowed); now the declared size is refused at once."""
    bomb = tmp_path / "bomb.zip"
    _zero_bomb(bomb, (4 << 30) - (64 << 20))
    assert bomb.stat().st_size < 8 << 20
    script = textwrap.dedent(f"""
        import resource, sys, time
        sys.path.insert(0, {HERE!r})
        from ckpt_helpers import MLP
        from singa_lite import tensor
        m = MLP(); m.compile([tensor.Tensor((2, 4))])
        vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.RLIM_INFINITY))
        t0 = time.perf_counter()
        try:
            m.load_states({str(bomb)!r})
        except BaseException as e:
            print(type(e).__name__, round(time.perf_counter() - t0, 2), str(e)[:200])
    """)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    kind, seconds, message = out.stdout.split(" ", 2)
    assert kind == "CorruptCheckpointError", out.stdout + out.stderr
    assert float(seconds) < 1.0 and "tensor_dict.npz declares" in message


def test_an_npy_header_claiming_2_40_elements_is_refused_before_allocating(tmp_path):
    """Before: np.load allocated the 4 TiB the header claimed (an untyped MemoryError)."""
    m = _mlp()
    states = _states(m)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)}
    )
    bad = io.BytesIO()
    with zipfile.ZipFile(bad, "w") as zf:
        for name, arr in states.items():
            if name == "fc1.W":
                zf.writestr("fc1.W.npy", b"\x93NUMPY\x01\x00" + header.getvalue()[8:] + arr.tobytes())
            else:
                buf = io.BytesIO()
                np.save(buf, arr)
                zf.writestr(f"{name}.npy", buf.getvalue())
    _singa_zip(tmp_path / "s.zip", bad.getvalue(), _attrs(states))
    tracemalloc.start()
    try:
        with pytest.raises(
            CorruptCheckpointError, match=r"fc1\.W: its header gives shape \(1099511627776,\)"
        ):
            m.load_states(tmp_path / "s.zip")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert not checkpoint.verify(tmp_path / "s.zip").ok


@pytest.mark.parametrize(
    "attrs, match",
    [
        (b"[" * 100_000 + b"]" * 100_000, "states_attr.json is damaged"),  # RecursionError before
        (b"{not json", "states_attr.json is damaged"),
        (json.dumps({"fc1.W": {"state_type": 0, "shape": "huge"}}).encode(), "not a list of sizes"),
        (json.dumps({"fc1.W": {"state_type": 7}}).encode(), "no valid state_type"),
    ],
)
def test_a_malformed_states_attr_json_is_a_corrupt_checkpoint(tmp_path, attrs, match):
    m = _mlp()
    _singa_zip(tmp_path / "s.zip", _npz(_states(m)), attrs)
    with pytest.raises(CorruptCheckpointError, match=match):
        m.load_states(tmp_path / "s.zip")


def test_zip_member_sizes_are_bounded_by_the_model_and_the_aux_limit(tmp_path, monkeypatch):
    m = _mlp()
    states = _states(m)
    # model states of other shapes are reported without being read
    wrong = dict(states, **{"fc1.W": np.zeros((3, 4), np.float32)})
    _singa_zip(tmp_path / "w.zip", _npz(wrong), _attrs(wrong))
    with pytest.raises(StateMismatchError, match=r"fc1\.W \(checkpoint \(3, 4\), model \(4, 3\)\)"):
        m.load_states(tmp_path / "w.zip")
    # aux states beyond the limit
    aux = {"big": np.zeros(1 << 16, np.float32)}
    _singa_zip(tmp_path / "a.zip", _npz({**states, **aux}), _attrs(states, aux))
    monkeypatch.setattr(singa_zip, "AUX_LIMIT", 1 << 16)
    with pytest.raises(CorruptCheckpointError, match=r"aux limit allow|fill no model tensor"):
        singa_zip.load(m, str(tmp_path / "a.zip"), strict=True, aux_limit=1 << 16)
    # a JSON member declaring more than MAX_ATTR_BYTES is not inflated
    monkeypatch.setattr(singa_zip, "MAX_ATTR_BYTES", 1 << 10)
    _singa_zip(tmp_path / "j.zip", _npz(states), json.dumps(_attrs(states)).encode() + b" " * 4096)
    with pytest.raises(CorruptCheckpointError, match=r"states_attr\.json declares"):
        m.load_states(tmp_path / "j.zip")
    # and a good one still loads, aux states included
    _singa_zip(
        tmp_path / "g.zip",
        _npz({**states, "epoch": np.array([3.0], np.float32)}),
        _attrs(states, {"epoch": np.zeros(1)}),
    )
    aux_out = m.load_states(tmp_path / "g.zip")
    assert float(tensor.to_numpy(aux_out["epoch"])[0]) == 3.0
    assert all((tensor.to_numpy(v) == 0.5).all() for v in m.get_states().values())


# -- a reader racing a writer ------------------------------------------------------------------
def _writer(path: str) -> None:
    try:
        m = _mlp()
        i = 0
        while True:
            i += 1
            for p in m.get_params().values():
                p.copy_from_numpy(np.full(p.shape, i, np.float32))
            m.save_states(path, {"i": i})
    finally:
        os._exit(0)


@pytest.mark.parametrize("locking", ["TRUE", "FALSE"])
def test_a_load_racing_a_save_never_reports_a_good_file_damaged(tmp_path, monkeypatch, locking):
    """Another process replaces the file atomically in a loop; every load gets the old or the
    new checkpoint, whole (before: ~7% of loads raised "HDF5 cannot open the file: can't
    retrieve real path" because the verified file had been unlinked)."""
    monkeypatch.setenv("HDF5_USE_FILE_LOCKING", locking)
    path = str(tmp_path / "ckpt.h5")
    m = _mlp()
    m.save_states(path, {"i": 0})
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        _writer(path)
    loads, deadline = 0, time.monotonic() + 1.5
    try:
        while time.monotonic() < deadline:
            aux = m.load_states(path)
            values = {float(tensor.to_numpy(p).reshape(-1)[0]) for p in m.get_params().values()}
            assert values == {float(aux["i"])} or aux["i"] == 0, (values, aux)
            loads += 1
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert loads > 20


# -- the manager -------------------------------------------------------------------------------
def _damage(path) -> None:
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        data[len(data) // 2] ^= 0xFF
        f.seek(0)
        f.write(data)


def test_restore_with_every_checkpoint_damaged_raises_naming_each(tmp_path):
    mgr = checkpoint.CheckpointManager(tmp_path, max_to_keep=3)
    for step in (1, 2, 3):
        mgr.save(step, _mlp(), aux={"step": step})
    _damage(tmp_path / "ckpt-1.h5")
    _damage(tmp_path / "ckpt-2.h5")
    (tmp_path / "ckpt-3.h5").write_bytes(b"")
    with pytest.warns(RuntimeWarning), pytest.raises(CorruptCheckpointError) as info:
        mgr.restore(_mlp())
    msg = str(info.value)
    for step in (1, 2, 3):
        assert f"ckpt-{step}.h5" in msg
    assert "checksum mismatch" in msg and "empty" in msg and "every checkpoint is damaged" in msg
    assert mgr.steps() == [1, 2, 3]  # nothing deleted
    assert checkpoint.CheckpointManager(tmp_path / "fresh").restore(_mlp()) is None


def test_retention_never_deletes_the_newest_intact_checkpoint(tmp_path):
    """Newer files that are damaged must not push the newest intact one out (before: saving
    step 3 after newer damaged 10 and 11 deleted 1, 2 and the new 3, leaving nothing to load)."""
    mgr = checkpoint.CheckpointManager(tmp_path, max_to_keep=2)
    for step in (1, 2):
        mgr.save(step, _mlp(), aux={"step": step})
    for step in (10, 11):  # damaged newer files (a failing disk, a copy gone wrong)
        (tmp_path / f"ckpt-{step}.h5").write_bytes((tmp_path / "ckpt-2.h5").read_bytes())
        _damage(tmp_path / f"ckpt-{step}.h5")
    with pytest.warns(RuntimeWarning):
        assert mgr.restore(_mlp()).step == 2
    mgr.save(3, _mlp(), aux={"step": 3})  # training goes on from step 2
    assert mgr.steps() == [3, 10, 11]
    with pytest.warns(RuntimeWarning):
        assert mgr.restore(_mlp()).aux == {"step": 3}


# -- placeholder specs of an uncompiled model ---------------------------------------------------
def test_input_specs_are_checked_before_placeholders_are_allocated(tmp_path):
    m, _, _ = make_cnn()
    path = tmp_path / "c.h5"
    m.save_states(path)
    with h5py.File(path, "r+") as f:
        f["inputs"].attrs["specs"] = '[{"shape": [1000000, 1000000, 6], "dtype": "float32"}]'
    fd = os.open(path, os.O_RDWR)
    integrity.seal(fd)
    os.close(fd)
    from ckpt_helpers import CNN

    fresh = CNN()
    with pytest.raises(CorruptCheckpointError, match="placeholders of 24000000000000 bytes"):
        fresh.load_states(path)
    with pytest.raises(CheckpointError):
        CNN().load_states(path)

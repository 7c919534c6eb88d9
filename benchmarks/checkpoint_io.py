"""Checkpoint save and load of a ~400 MB state (~200 tensors) against raw h5py, torch, safetensors.

    python benchmarks/checkpoint_io.py [--mb 400] [--tensors 196] [--repeat 5] [--dir /tmp]
                                       [--device cpu|gpu]

Everything runs in this one process on the same arrays. "save" includes fsync (every format is
made durable, as singa_lite's is); "load" reads into preallocated arrays where the format allows
(singa_lite, raw h5py) and is a warm (page-cache) load. singa_lite's load includes streaming the
whole-file XXH3 checksum before HDF5 opens the file. Peak extra memory is what the load
allocates beyond the state itself: tracemalloc (NumPy buffers) and the process's anonymous RSS
high-water mark (VmHWM is per process, so it is sampled as RssAnon before/after each load).
Targets (issue 4): save <= 1.3x raw h5py, verified load <= 1.5x raw h5py, extra memory <= 10%.

With ``--device gpu`` the state lives on the first CUDA device: "save" starts from the device
arrays, "load" ends with them filled on the device (synchronised). Raw h5py then copies each
array with a plain (pageable) transfer; torch.save/torch.load (and safetensors.torch) run on the
*same* CUDA memory, shared through DLPack, when PyTorch has CUDA (skipped otherwise).
singa_lite's non-blocking save is reported too: how long the caller waits, and until written.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable

import h5py
import numpy as np

from singa_lite import backend, device, layer, model, tensor


class Wide(model.Model):
    """A stack of Linear layers whose params make up the state (W and b per layer)."""

    def __init__(self, n_layers: int, width: int) -> None:
        super().__init__()
        self.layers = [layer.Linear(width) for _ in range(n_layers)]
        self.register_layers(self.layers)

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        for lyr in self.layers:
            x = lyr(x)
        return x


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def _time(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _rss_anon() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def _peak_extra(fn: Callable[[], object]) -> tuple[int, int]:
    """(tracemalloc peak, growth of anonymous RSS) of one call."""
    before = _rss_anon()
    tracemalloc.start()
    result = fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    grown = max(0, _rss_anon() - before)
    del result
    return peak, grown


def _formats(
    m: model.Model, states: dict, paths: dict, dev: device.Device
) -> list[tuple[str, Callable, Callable]]:
    """(name, save, load) of every format on ``dev``; a load returns what it made, if anything."""
    gpu, sync = dev.is_gpu(), dev.Sync
    targets = {k: a.copy() for k, a in states.items()}  # on the state's own device

    def h5_save() -> None:
        with h5py.File(paths["h5"], "w") as f:
            for k, a in states.items():
                f.create_dataset(k, data=backend.to_host(a))
        _fsync(paths["h5"])

    def h5_load() -> None:
        with h5py.File(paths["h5"], "r") as f:
            for k, a in targets.items():
                if gpu:
                    a.set(f[k][()])  # CuPy: one pageable host-to-device copy per array
                else:
                    f[k].read_direct(a)
        sync()

    def singa_load() -> None:
        m.load_states(paths["singa"])
        sync()

    formats: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        ("singa_lite (verified)", lambda: m.save_states(paths["singa"]), singa_load),
        ("raw h5py", h5_save, h5_load),
    ]
    try:
        import torch
    except ImportError:
        print("torch not installed: skipped")
        return formats
    if gpu and not torch.cuda.is_available():
        print(f"torch {torch.__version__} has no CUDA: torch comparison skipped")
        return formats
    tstates = {k: torch.from_dlpack(a) if gpu else torch.from_numpy(a) for k, a in states.items()}
    where = "cuda" if gpu else "cpu"

    def pt_save() -> None:
        torch.save(tstates, paths["pt"])
        _fsync(paths["pt"])

    def pt_load() -> object:
        out = torch.load(paths["pt"], map_location=where, weights_only=True)
        if gpu:
            torch.cuda.synchronize()
        return out

    formats.append(("torch.save/load", pt_save, pt_load))
    try:
        if gpu:
            from safetensors.torch import load_file, save_file

            st_states: dict = tstates
        else:
            from safetensors.numpy import load_file, save_file

            st_states = states
    except ImportError:
        print("safetensors not installed: skipped")
        return formats

    def st_save() -> None:
        save_file(st_states, paths["st"])
        _fsync(paths["st"])

    def st_load() -> object:
        out = load_file(paths["st"], device=where) if gpu else load_file(paths["st"])
        if gpu:
            torch.cuda.synchronize()
        return out

    formats.append(("safetensors", st_save, st_load))
    return formats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=400)
    ap.add_argument("--tensors", type=int, default=196)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    args = ap.parse_args()
    gpu = args.device == "gpu"
    dev = device.create_cuda_gpu() if gpu else device.create_cpu_device()  # says what is missing

    n_layers = args.tensors // 2
    width = int((args.mb * 2**20 / 4 / n_layers) ** 0.5)
    m = Wide(n_layers, width)
    m.compile([tensor.Tensor((1, width), dev)])
    rng = np.random.default_rng(0)
    for p in m.get_params().values():
        p.copy_from_numpy(rng.standard_normal(p.shape, dtype=np.float32))
    states = {k: t.data for k, t in m.get_states().items()}
    size = sum(a.nbytes for a in states.values())
    print(
        f"device: {dev}; state: {len(states)} tensors, {size / 2**20:.0f} MiB (float32); BLAS env "
        f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}"
    )

    tmp = tempfile.mkdtemp(dir=args.dir)
    paths = {k: os.path.join(tmp, f"state.{k}") for k in ("singa", "h5", "pt", "st", "bg")}
    # run interleaved so drifting disk speed hits all alike
    formats = _formats(m, states, paths, dev)
    saves: dict[str, list[float]] = {name: [] for name, _, _ in formats}
    loads: dict[str, list[float]] = {name: [] for name, _, _ in formats}
    for _ in range(args.repeat):
        for name, save, _ in formats:
            saves[name] += _time(save, 1)
    for _ in range(args.repeat):
        for name, _, load in formats:
            loads[name] += _time(load, 1)
    rows = [(name, saves[name], loads[name], _peak_extra(load)) for name, _, load in formats]

    base_save, base_load = statistics.median(rows[1][1]), statistics.median(rows[1][2])
    print(
        f"{'format':<22} {'save med':>9} {'min':>7} {'x h5py':>7}  {'load med':>9} {'min':>7} {'x h5py':>7}"
        f"  {'peak extra (tracemalloc / RSS)':>30}"
    )
    for name, s, ld, (traced, rss) in rows:
        print(
            f"{name:<22} {statistics.median(s):9.3f} {min(s):7.3f} {statistics.median(s) / base_save:7.2f}  "
            f"{statistics.median(ld):9.3f} {min(ld):7.3f} {statistics.median(ld) / base_load:7.2f}  "
            f"{traced / size:14.1%} / {rss / size:6.1%}"
        )
    torch_row = [r for r in rows if r[0] == "torch.save/load"]
    if torch_row:
        _, ts, tl, _ = torch_row[0]
        print(
            f"singa_lite / torch: save {statistics.median(rows[0][1]) / statistics.median(ts):.2f}x, "
            f"load {statistics.median(rows[0][2]) / statistics.median(tl):.2f}x (medians; < 1 is faster)"
        )
    stalls, totals = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        handle = m.save_states(paths["bg"], blocking=False)
        stalls.append(time.perf_counter() - t0)
        handle.wait()
        totals.append(time.perf_counter() - t0)
    print(
        f"singa_lite non-blocking save: the caller waits {statistics.median(stalls) * 1e3:.1f} ms "
        f"(median), written after {statistics.median(totals):.3f} s"
    )
    for p in paths.values():
        if os.path.exists(p):
            os.remove(p)
    os.rmdir(tmp)


if __name__ == "__main__":
    main()

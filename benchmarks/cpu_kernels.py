"""Training steps with the compiled CPU kernels on and off, against PyTorch CPU.

    python benchmarks/cpu_kernels.py [--only gpt,mlp,cnn,resnet20,lstm] [--rounds 6] [--steps 5]

The kernels (``singa_lite/backend/cpu_kernels``) are switched per step by
``SINGA_LITE_CPU_KERNELS``, which the ops read at every call, so on and off run interleaved in
one process: ``--rounds`` rounds of ``--steps`` steps each way. PyTorch runs afterwards, not
interleaved (its thread pool spins after each op and would slow the other side down). Prints
the median milliseconds per step, on/off, and both against PyTorch, with the thread settings
and the BLAS in use. The workloads and PyTorch's side are ``benchmarks/training.py``'s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import training  # benchmarks/training.py, next to this file

from singa_lite import backend, device, model, opt, tensor
from singa_lite.backend import cpu_kernels
from singa_lite.backend.cpu_kernels import threads
from singa_lite.clip_grad import ClipGradNorm


def singa_step(name: str) -> tuple:
    """A compiled singa_lite model of workload ``name`` and a function running one step."""
    shape, _ = training.SHAPES[name]
    batch = shape[1] if name == "lstm" else shape[0]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int32)
    dev = device.create_cpu_device()
    m: model.Model
    if name == "gpt":
        x = rng.integers(0, training.GPT_VOCAB, shape).astype(np.int32)
        y = rng.integers(0, training.GPT_VOCAB, x.size).astype(np.int32)
        m = training.GPT()
        m.set_optimizer(ClipGradNorm(opt.AdamW(lr=1e-3), 1.0))
    else:
        m = training.Classifier(training.SINGA_NETS[name]())
        m.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    tx, ty = tensor.from_numpy(x, dev), tensor.from_numpy(y, dev)
    m.compile([tx], is_train=True, use_graph=False)

    def step() -> None:
        m(tx, ty)
        dev.Sync()

    return m, step


def timed(step: object, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()  # type: ignore[operator]
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def on_off(name: str, rounds: int, steps: int) -> tuple[list[float], list[float]]:
    _, step = singa_step(name)
    times: dict[str, list[float]] = {"1": [], "0": []}
    for switch in ("1", "0"):  # warm up both, the kernels' compilation included
        os.environ[cpu_kernels.ENV] = switch
        timed(step, 3)
    for _ in range(rounds):
        for switch in ("1", "0"):
            os.environ[cpu_kernels.ENV] = switch
            times[switch] += timed(step, steps)
    os.environ.pop(cpu_kernels.ENV, None)
    return times["1"], times["0"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="gpt")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    backend.tune_malloc()
    blas = ", ".join(
        " ".join(str(b.get(k)) for k in ("internal_api", "version", "architecture"))
        for b in threads.blas_info()
    )
    print(
        f"kernels: {'numba' if cpu_kernels.available() else 'unavailable'}, {threads.count()} threads; "
        f"BLAS: {blas or 'unknown'}, {threads.blas_threads()} threads; "
        f"PyTorch: {training.THREADS} threads (BENCH_THREADS)"
    )
    heads = ("on ms", "off ms", "on/off", "torch ms", "on/torch", "off/torch")
    print(f"{'workload':38} " + " ".join(f"{h:>9}" for h in heads))
    for name in args.only.split(","):
        on, off = on_off(name, args.rounds, args.steps)
        ref = training.bench_torch(name, args.rounds * args.steps)
        on_m, off_m = statistics.median(on), statistics.median(off)
        t_m = statistics.median(ref) if ref else None
        cells = (
            ("n/a", "n/a", "n/a")
            if t_m is None
            else (f"{t_m:.2f}", f"{on_m / t_m:.2f}", f"{off_m / t_m:.2f}")
        )
        print(
            f"{training.SHAPES[name][1]:38} {on_m:9.2f} {off_m:9.2f} {on_m / off_m:9.2f} "
            f"{cells[0]:>9} {cells[1]:>9} {cells[2]:>9}",
            flush=True,
        )


if __name__ == "__main__":
    main()

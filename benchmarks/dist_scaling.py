"""Data-parallel scaling: samples/s of the demo CNN on 1 and 2 ranks, and the all-reduce cost.

    python benchmarks/dist_scaling.py [--ranks 1,2] [--steps 60] [--batch-size 64]

Launches itself under ``mpiexec -n N python -m mpi4py`` for each N (one BLAS thread per rank),
trains the demo CNN in graph mode with ``DistOpt`` (``backward_and_update``), and reports per N:
samples/s over all ranks, the speed-up over one rank, the milliseconds per step DistOpt spent
in its all-reduces, and the milliseconds per step of a bare mpi4py ``Allreduce(IN_PLACE)`` of
the same buffers (the floor for this transport). On one machine the ranks share its cores and
memory bandwidth, so the speed-up measures overhead, not what a cluster would gain.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from singa_lite import data, device, dist, opt, tensor
from singa_lite.demo import DigitsCNN


def worker(args: argparse.Namespace) -> None:
    """One rank: time training steps, then a bare Allreduce of the same buffers."""
    dev = device.get_default_device()
    dev.SetRandSeed(0)
    sgd = opt.DistOpt(opt.SGD(lr=0.05, momentum=0.9))
    x, y = data.load_digits("train")
    x, y = x[sgd.global_rank :: sgd.world_size], y[sgd.global_rank :: sgd.world_size]
    m = DigitsCNN()
    m.set_optimizer(sgd)
    tx = tensor.Tensor((args.batch_size, *x.shape[1:]), dev)
    ty = tensor.Tensor((args.batch_size,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=True)
    sgd.broadcast_params(m)
    batches = list(data.iterate_batches(x, y, args.batch_size, shuffle=True, seed=0, drop_last=True))

    def steps(n: int) -> float:
        sgd.barrier()
        t0 = time.perf_counter()
        for i in range(n):
            xb, yb = batches[i % len(batches)]
            tx.copy_from_numpy(xb)
            ty.copy_from_numpy(yb)
            m(tx, ty)
        return time.perf_counter() - t0

    steps(5)  # warm-up: records the graph, allocates the buffers
    sgd.comm_seconds = 0.0
    seconds = steps(args.steps)
    comm_ms = 1e3 * sgd.comm_seconds / args.steps

    buffers = [b.buf for plan in sgd._plans.values() for b in plan.buckets]
    comm = sgd.communicator
    sgd.barrier()
    t0 = time.perf_counter()
    if isinstance(comm, dist.MPICommunicator):
        for _ in range(args.steps):
            for b in buffers:
                comm.comm.Allreduce(comm.MPI.IN_PLACE, b, op=comm.MPI.SUM)
    bare_ms = 1e3 * (time.perf_counter() - t0) / args.steps
    result = {
        "ranks": sgd.world_size,
        "samples_per_s": args.steps * args.batch_size * sgd.world_size / seconds,
        "allreduce_ms_per_step": comm_ms,
        "bare_mpi4py_ms_per_step": bare_ms,
        "bytes_per_step": int(sum(b.nbytes for b in buffers)),
        "buffers": len(buffers),
    }
    results = comm.all_gather_object(result)
    if sgd.global_rank == 0:
        # The slowest rank sets the pace of a synchronous job.
        result["samples_per_s"] = min(r["samples_per_s"] for r in results)
        Path(args.json).write_text(json.dumps(result))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(r) for r in args.ranks.split(",")]:
            out = Path(tmp) / f"{n}.json"
            cmd = dist.launch_command(
                n,
                __file__,
                "--worker",
                "--json",
                str(out),
                "--steps",
                str(args.steps),
                "--batch-size",
                str(args.batch_size),
            )
            subprocess.run(cmd, env=dist.launch_env(), check=True, timeout=600)
            rows.append(json.loads(out.read_text()))
    base = rows[0]["samples_per_s"]
    print(
        f"{'ranks':>5} {'samples/s':>10} {'speed-up':>8} {'DistOpt all-reduce ms/step':>27} "
        f"{'bare mpi4py ms/step':>20} {'KiB/step':>9}"
    )
    for r in rows:
        print(
            f"{r['ranks']:>5} {r['samples_per_s']:>10.0f} {r['samples_per_s'] / base:>8.2f} "
            f"{r['allreduce_ms_per_step']:>27.3f} {r['bare_mpi4py_ms_per_step']:>20.3f} "
            f"{r['bytes_per_step'] / 1024:>9.0f}"
        )
    print(
        f"(python {sys.version.split()[0]}, numpy {np.__version__}, {args.steps} steps, "
        f"batch {args.batch_size} per rank)"
    )


if __name__ == "__main__":
    main()

"""Run by the dist tests under ``mpiexec -n 2 python -m mpi4py mpi_worker.py <scenario> <out dir>``.

Each scenario asserts what it can see from inside the job; the rank results the test compares
with a one-process reference are written to ``<out dir>/rank<r>.npz``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
from dist_helpers import CONFIGS, STEPS, build, digits_flat, params_of, shard

from singa_lite import DistributedError, dist, opt


def collectives(comm: dist.Communicator, out: Path) -> None:
    r, n = comm.global_rank, comm.world_size
    for dtype in (np.float32, np.float64, np.int32, np.float16):
        a = np.arange(5, dtype=dtype) + r
        comm.all_reduce(a)
        np.testing.assert_array_equal(a, (np.arange(5) * n + sum(range(n))).astype(dtype))
    h = np.array([0.1, 1000.0, -3.3], dtype=np.float32) * (r + 1)
    comm.all_reduce_half(h)
    expect = sum(np.array([0.1, 1000.0, -3.3], np.float32) * (k + 1) for k in range(n))
    np.testing.assert_allclose(h, expect, rtol=2e-3)
    b = np.full(4, float(r), dtype=np.float32)
    comm.broadcast(b, root=n - 1)
    np.testing.assert_array_equal(b, np.full(4, n - 1.0))
    g = comm.all_gather(np.array([r, 10 * r], dtype=np.int64))
    np.testing.assert_array_equal(g, [[k, 10 * k] for k in range(n)])
    v, counts = comm.all_gather_v(np.full(r + 1, r, dtype=np.int32))  # rank r sends r + 1 values
    assert counts == [k + 1 for k in range(n)], counts
    np.testing.assert_array_equal(v, np.concatenate([np.full(k + 1, k) for k in range(n)]))
    assert comm.all_gather_object({"rank": r}) == [{"rank": k} for k in range(n)]
    for bad, why in ((np.zeros((4, 4), np.float32)[:, 1], "not C-contiguous"), (np.zeros(3, bool), "bool")):
        try:
            comm.all_reduce(bad)
        except DistributedError as e:
            assert why in str(e), e
        else:
            raise AssertionError(f"all_reduce accepted a {why} buffer")
    comm.barrier()
    print(f"rank {r}: collectives ok", flush=True)


def exact(comm: dist.Communicator, out: Path) -> None:
    """Each config: STEPS steps from different seeds made identical by broadcast_params."""
    x, y = digits_flat()
    r, n = comm.global_rank, comm.world_size
    results: dict[str, np.ndarray] = {}
    for name, (option, graph, make_opt, threshold, buff) in CONFIGS.items():
        m, tx, ty = build(batch=x[shard(0, r, n)].shape[0], seed=100 + r, graph=graph)
        sgd = opt.DistOpt(make_opt(), buffSize=buff)
        m.set_optimizer(sgd)
        sgd.broadcast_params(m)
        for k, v in params_of(m).items():
            results[f"{name}/init/{k}"] = v
        for step in range(STEPS):
            tx.copy_from_numpy(x[shard(step, r, n)])
            ty.copy_from_numpy(y[shard(step, r, n)])
            m(tx, ty, option, threshold)
        assert sgd.step_counter == STEPS
        for k, v in params_of(m).items():
            results[f"{name}/final/{k}"] = v
    np.savez(out / f"rank{r}.npz", **results)


def fail(comm: dist.Communicator, out: Path) -> None:
    """Rank 1 dies before the collective that rank 0 is already waiting in."""
    if comm.global_rank == 1:
        raise RuntimeError("deliberate failure on rank 1")
    comm.all_reduce(np.zeros(4, np.float32))  # would wait forever without MPI_Abort


def mismatch(comm: dist.Communicator, out: Path) -> None:
    """Rank 1 builds a wider hidden layer: the first update must fail clearly on every rank."""
    x, y = digits_flat()
    r = comm.global_rank
    m, tx, ty = build(batch=16, seed=0, graph=False, hidden=32 if r == 0 else 48)
    m.set_optimizer(opt.DistOpt(opt.SGD(lr=0.1)))
    tx.copy_from_numpy(x[:16])
    ty.copy_from_numpy(y[:16])
    try:
        m(tx, ty)
    except DistributedError as e:
        print(f"rank {r}: DistributedError: {e}", flush=True)
    else:
        raise AssertionError("mismatched shapes were not detected")


def checkpoint(comm: dist.Communicator, out: Path) -> None:
    """Train, checkpoint (rank 0 writes), train on; a fresh model resumed from the file must match."""
    x, y = digits_flat()
    r, n = comm.global_rank, comm.world_size
    path = out / "ckpt.h5"

    def run(m, tx, ty, steps: range) -> None:
        for step in steps:
            tx.copy_from_numpy(x[shard(step, r, n)])
            ty.copy_from_numpy(y[shard(step, r, n)])
            m(tx, ty)

    m, tx, ty = build(batch=16, seed=r, graph=True)
    sgd = opt.DistOpt(opt.SGD(lr=0.1, momentum=0.9))
    m.set_optimizer(sgd)
    sgd.broadcast_params(m)
    run(m, tx, ty, range(3))
    sgd.save_checkpoint(m, path, {"step": 3})
    assert path.exists()
    run(m, tx, ty, range(3, 6))
    uninterrupted = params_of(m)

    m2, tx2, ty2 = build(batch=16, seed=50 + r, graph=True)  # different values on every rank
    sgd2 = opt.DistOpt(opt.SGD(lr=0.1, momentum=0.9))
    m2.set_optimizer(sgd2)
    aux = sgd2.load_checkpoint(m2, path)
    assert aux.get("step") == 3, aux
    run(m2, tx2, ty2, range(3, 6))
    resumed = params_of(m2)
    for k in uninterrupted:
        np.testing.assert_allclose(resumed[k], uninterrupted[k], rtol=1e-6, atol=1e-7, err_msg=k)
    np.savez(out / f"rank{r}.npz", **resumed)
    print(f"rank {r}: checkpoint ok", flush=True)


SCENARIOS = {f.__name__: f for f in (collectives, exact, fail, mismatch, checkpoint)}

if __name__ == "__main__":
    scenario, out_dir = sys.argv[1], Path(sys.argv[2])
    if scenario == "fail":
        # The process manager forwards stderr through a pipe and may kill its forwarder on
        # MPI_Abort before the pipe drains; a file per rank keeps what the hook wrote.
        rank_err = out_dir / f"rank{os.environ.get('PMI_RANK', '?')}.stderr"
        os.dup2(os.open(rank_err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
    world = dist.get_communicator()
    assert world.world_size == 2, f"expected 2 ranks, got {world}"
    SCENARIOS[scenario](world, out_dir)

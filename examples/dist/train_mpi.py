"""The demo CNN trained data-parallel: each rank on its shard of the digits, DistOpt in between.

    mpiexec -n 2 python -m mpi4py examples/dist/train_mpi.py [--dist-option plain] [--epochs 5]

``--dist-option`` picks DistOpt's update path the way SINGA's examples do: ``plain``, ``half``,
``partialUpdate``, ``sparseTopK`` or ``sparseThreshold`` (with ``--spars``). ``--checkpoint
PATH`` saves at the end (rank 0 writes); with ``--resume`` a run starts from that file.
Without ``mpiexec`` the same script trains as a single process.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from singa_lite import data, device, opt, tensor
from singa_lite.demo import DigitsCNN, evaluate

OPTIONS = ("plain", "half", "partialUpdate", "sparseTopK", "sparseThreshold")


class DistDigitsCNN(DigitsCNN):
    """The demo CNN whose ``train_one_batch`` chooses DistOpt's update path (SINGA's ``dist_option``)."""

    def train_one_batch(
        self, x: tensor.Tensor, y: tensor.Tensor, dist_option: str = "plain", spars: float = 0.05
    ) -> tuple:
        out = self.forward(x)
        loss = self.loss(out, y)
        if dist_option == "plain":
            self.optimizer(loss)
        elif dist_option == "half":
            self.optimizer.backward_and_update_half(loss)
        elif dist_option == "partialUpdate":
            self.optimizer.backward_and_partial_update(loss)
        elif dist_option == "sparseTopK":
            self.optimizer.backward_and_sparse_update(loss, topK=True, spars=spars)
        elif dist_option == "sparseThreshold":
            self.optimizer.backward_and_sparse_update(loss, topK=False, spars=spars)
        else:
            raise ValueError(f"unknown dist_option {dist_option!r}; choose from {OPTIONS}")
        return out, loss


def shard(x: np.ndarray, y: np.ndarray, rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ``world``-th sample from ``rank``, cut to one length so all ranks run the same steps."""
    n = len(x) // world
    return x[rank::world][:n], y[rank::world][:n]


def train(args: argparse.Namespace) -> dict[str, Any]:
    dev = device.get_default_device()
    dev.SetRandSeed(args.seed)
    sgd = opt.DistOpt(opt.SGD(lr=args.lr, momentum=0.9, weight_decay=1e-5))
    rank, world = sgd.global_rank, sgd.world_size
    x_train, y_train = shard(*data.load_digits("train"), rank, world)
    x_test, y_test = data.load_digits("test")

    m = DistDigitsCNN()
    m.set_optimizer(sgd)
    tx = tensor.Tensor((args.batch_size, *x_train.shape[1:]), dev)
    ty = tensor.Tensor((args.batch_size,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=args.graph)
    if args.resume and args.checkpoint and Path(args.checkpoint).exists():
        sgd.load_checkpoint(m, args.checkpoint)  # every rank loads; rank 0's values are broadcast
    else:
        sgd.broadcast_params(m)  # identical starting points whatever each rank's seed did

    t0 = time.perf_counter()
    samples = 0
    for epoch in range(args.epochs):
        losses = []
        for xb, yb in data.iterate_batches(
            x_train,
            y_train,
            args.batch_size,
            shuffle=True,
            seed=args.seed + 1000 * epoch + rank,
            drop_last=True,
        ):
            tx.copy_from_numpy(xb)
            ty.copy_from_numpy(yb)
            _, loss = m(tx, ty, args.dist_option, args.spars)
            losses.append(float(tensor.to_numpy(loss)[0]))
            samples += len(xb) * world
        acc = evaluate(m, x_test, y_test, dev)
        if rank == 0:
            print(
                f"epoch {epoch + 1}: loss {np.mean(losses):.4f}  test accuracy (rank 0) {acc:.4f}", flush=True
            )
    seconds = time.perf_counter() - t0
    if args.checkpoint:
        sgd.save_checkpoint(m, args.checkpoint, {"epochs": args.epochs})
    accs = sgd.communicator.all_gather_object(evaluate(m, x_test, y_test, dev))
    return {
        "dist_option": args.dist_option,
        "world_size": world,
        "test_acc": accs,
        "seconds": seconds,
        "samples_per_s": samples / seconds,
        "comm_seconds": sgd.comm_seconds,
        "rank": rank,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dist-option", choices=OPTIONS, default="plain")
    p.add_argument("--spars", type=float, default=0.05, help="top-K fraction or magnitude threshold")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-graph", dest="graph", action="store_false", help="run eagerly")
    p.add_argument("--checkpoint", help="save here at the end (rank 0 writes)")
    p.add_argument("--resume", action="store_true", help="start from --checkpoint if it exists")
    p.add_argument("--json", help="rank 0 writes the results here")
    args = p.parse_args(argv)
    report = train(args)
    if report["rank"] == 0:
        print(
            f"{report['world_size']} rank(s), {args.dist_option}: test accuracy per rank "
            f"{[round(a, 4) for a in report['test_acc']]}, {report['samples_per_s']:.0f} samples/s"
        )
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

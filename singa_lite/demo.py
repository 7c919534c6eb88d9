"""The quick-start demo: a small CNN on the embedded 8x8 handwritten digits.

    python -m singa_lite.demo [--epochs 20] [--out runs/demo]

Trains with SGD + momentum in graph mode, shows a progress bar, reports test accuracy and
writes ``loss_accuracy.png`` (loss and accuracy curves) into ``--out``. A checkpoint is kept
after every epoch in ``--out/checkpoints``: run it again and it resumes where it stopped.
Run as a script it opts in to :func:`singa_lite.backend.tune_malloc` and says so;
:func:`train` leaves the allocator alone.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from singa_lite import backend, checkpoint, data, device, layer, model, opt, tensor


class DigitsCNN(model.Model):
    """conv3x3(32)-BN-ReLU-pool, conv3x3(64)-BN-ReLU-pool, fc(128)-ReLU-dropout, fc(10)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = layer.Conv2d(32, 3, padding=1)
        self.bn1 = layer.BatchNorm2d()
        self.conv2 = layer.Conv2d(64, 3, padding=1)
        self.bn2 = layer.BatchNorm2d()
        self.pool = layer.MaxPool2d(2)
        self.relu = layer.ReLU()
        self.flatten = layer.Flatten()
        self.fc1 = layer.Linear(128)
        self.dropout = layer.Dropout(0.25)
        self.fc2 = layer.Linear(num_classes)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        y = self.pool(self.relu(self.bn1(self.conv1(x))))
        y = self.pool(self.relu(self.bn2(self.conv2(y))))
        y = self.dropout(self.relu(self.fc1(self.flatten(y))))
        return self.fc2(y)

    def train_one_batch(self, x: tensor.Tensor, y: tensor.Tensor) -> tuple:
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def evaluate(m: model.Model, x: np.ndarray, y: np.ndarray, dev: Any, batch: int = 256) -> float:
    """Accuracy of ``m`` on (x, y), in inference mode."""
    m.eval()
    correct = 0
    for i in range(0, len(x), batch):
        logits = tensor.to_numpy(m(tensor.from_numpy(x[i : i + batch], dev)))
        correct += int((logits.argmax(1) == y[i : i + batch]).sum())
    m.train()
    return correct / len(x)


def plot(history: dict[str, list[float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    epochs = np.arange(1, len(history["loss"]) + 1)
    ax1.plot(epochs, history["loss"], marker="o")
    ax1.set(xlabel="epoch", ylabel="training loss", title="loss")
    ax2.plot(epochs, history["train_acc"], marker="o", label="train")
    ax2.plot(epochs, history["test_acc"], marker="o", label="test")
    ax2.set(xlabel="epoch", ylabel="accuracy", title="accuracy", ylim=(0, 1.01))
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def train(
    epochs: int = 20,
    batch_size: int = 64,
    lr: float = 0.05,
    seed: int = 0,
    out_dir: str | Path = "runs/demo",
    progress: bool = True,
    make_plot: bool = True,
    resume: bool = True,
) -> dict:
    """Train the demo CNN; returns the history (loss, train_acc, test_acc per epoch).

    A checkpoint is written to ``out_dir/checkpoints`` after every epoch; with ``resume`` a
    later call picks up after the last completed epoch (weights, optimizer, RNG and history),
    so an interrupted run loses at most one epoch.
    """
    dev = device.get_default_device()
    dev.SetRandSeed(seed)
    x_train, y_train = data.load_digits("train")
    x_test, y_test = data.load_digits("test")

    steps = len(x_train) // batch_size
    m = DigitsCNN()
    # Cosine decay to zero over the run: the last epochs settle instead of bouncing.
    m.set_optimizer(opt.SGD(lr=opt.CosineDecay(lr, epochs * steps), momentum=0.9, weight_decay=1e-4))
    tx = tensor.Tensor((batch_size, *x_train.shape[1:]), dev)
    ty = tensor.Tensor((batch_size,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=True)

    history: dict[str, list[float]] = {"loss": [], "train_acc": [], "test_acc": []}
    manager = checkpoint.CheckpointManager(Path(out_dir) / "checkpoints", max_to_keep=2)
    start = 0
    restored = manager.restore(m) if resume else None
    if restored is not None and restored.aux.get("epochs") == epochs:
        start = restored.step + 1
        history = {k: list(restored.aux["history"][k]) for k in history}
        print(f"resuming after epoch {start} from {restored.path} (pass --fresh to start over)")
    bar = _progress(total=(epochs - start) * steps, enabled=progress)
    for epoch in range(start, epochs):
        losses, correct = [], 0
        for xb, yb in data.iterate_batches(
            x_train, y_train, batch_size, shuffle=True, seed=seed + epoch, drop_last=True
        ):
            tx.copy_from_numpy(xb)
            ty.copy_from_numpy(yb)
            out, loss = m(tx, ty)
            losses.append(float(tensor.to_numpy(loss)[0]))
            correct += int((tensor.to_numpy(out).argmax(1) == yb).sum())
            bar.update(1)
        history["loss"].append(float(np.mean(losses)))
        history["train_acc"].append(correct / (steps * batch_size))
        history["test_acc"].append(evaluate(m, x_test, y_test, dev))
        bar.set_postfix(
            epoch=epoch + 1, loss=f"{history['loss'][-1]:.3f}", test_acc=f"{history['test_acc'][-1]:.3f}"
        )
        manager.save(
            epoch,
            m,
            metrics={"test_acc": history["test_acc"][-1]},
            aux={"epochs": epochs, "history": history},
            force=True,
        )
    bar.close()
    m.eval()  # autograd.training off again for whatever runs next
    if make_plot:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        plot(history, out / "loss_accuracy.png")
        history["plot"] = str(out / "loss_accuracy.png")  # type: ignore[assignment]
    return history


def _progress(total: int, enabled: bool) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # the demo extra is not installed: train without a bar
        enabled = False
    if enabled:
        return tqdm(total=total, unit="step", desc="training")

    class _Silent:
        def update(self, n: int) -> None: ...
        def set_postfix(self, **kw: Any) -> None: ...
        def close(self) -> None: ...

    return _Silent()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/demo", help="directory for the plot and checkpoints")
    p.add_argument("--fresh", action="store_true", help="ignore earlier checkpoints in --out")
    args = p.parse_args(argv)
    # A training loop frees and reallocates the same large arrays every step: let glibc keep them.
    tuned = backend.tune_malloc()
    print(f"glibc malloc tuning (singa_lite.backend.tune_malloc): {'on' if tuned else 'not available'}")
    t0 = time.perf_counter()
    h = train(args.epochs, args.batch_size, args.lr, args.seed, args.out, resume=not args.fresh)
    print(
        f"test accuracy: {h['test_acc'][-1]:.4f}  (best {max(h['test_acc']):.4f})  "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    print(f"loss and accuracy curves: {h['plot']}")


if __name__ == "__main__":
    main()

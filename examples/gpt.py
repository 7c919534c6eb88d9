"""A character-level GPT trained on the public-domain text shipped with singa_lite.

    python examples/gpt.py                     # about 5 minutes on 2 CPU cores
    python examples/gpt.py --steps 20 --fresh  # a quick look

Four pre-norm transformer blocks (4 heads, width 128, causal attention over 128 characters)
learn to predict the next character of Shakespeare's *Coriolanus* (Act I), trained with AdamW,
a linear warm-up into a cosine decay and gradient clipping, in graph mode. It prints a
progress bar, the training and validation curves, the validation loss next to the best
character-bigram model fitted on the same training text, and samples; it saves a loss plot
(with matplotlib), a checkpoint it resumes from when run again, and the model as ONNX, which
it runs in onnxruntime (when installed) to check the next-character logits.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from singa_lite import autograd, data, device, layer, model, opt, tensor


class GPT(model.Model):
    """Token and position embeddings, pre-norm transformer blocks, a final norm and a head."""

    def __init__(self, vocab: int, context: int, width: int, depth: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.tok = layer.Embedding(vocab, width)
        self.pos = layer.LearnedPositionalEmbedding(context, batch_first=True)
        self.drop = layer.Dropout(dropout)
        self.blocks = [
            layer.TransformerEncoderLayer(
                width, heads, 4 * width, dropout, "gelu_tanh", batch_first=True, norm_first=True
            )
            for _ in range(depth)
        ]
        for i, block in enumerate(self.blocks):
            setattr(self, f"block{i}", block)
        self.norm = layer.LayerNorm()
        self.head = layer.Linear(vocab)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, idx: tensor.Tensor) -> tensor.Tensor:
        x = self.drop(self.pos(self.tok(idx)))
        for block in self.blocks:
            x = block(x, is_causal=True)
        return self.head(self.norm(x))

    def train_one_batch(self, idx: tensor.Tensor, target: tensor.Tensor) -> tensor.Tensor:
        logits = self.forward(idx)
        loss = self.loss(autograd.reshape(logits, (-1, logits.shape[-1])), target)
        self.optimizer(loss)
        return loss


# -- data and the baseline -------------------------------------------------------------------------
def batch(ids: np.ndarray, step: int, size: int, context: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random windows; the batch of a step depends only on (seed, step), so a resumed run sees
    the batches an uninterrupted one would."""
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(ids) - context - 1, size)
    w = np.stack([ids[s : s + context + 1] for s in starts])
    return w[:, :-1].astype(np.int32), w[:, 1:].reshape(-1).astype(np.int32)


def bigram_loss(train: np.ndarray, val: np.ndarray, vocab: int) -> float:
    """Validation cross-entropy (nats/char) of the best add-k smoothed character bigram fitted
    on ``train`` (k picked on ``val`` itself, so the baseline is, if anything, flattered)."""
    counts = np.zeros((vocab, vocab))
    np.add.at(counts, (train[:-1], train[1:]), 1)
    losses = []
    for k in (0.01, 0.03, 0.1, 0.3, 1.0):
        p = (counts + k) / (counts + k).sum(axis=1, keepdims=True)
        losses.append(-np.log(p[val[:-1], val[1:]]).mean())
    return float(min(losses))


def evaluate(m: GPT, val: np.ndarray, context: int) -> float:
    """Mean next-character cross-entropy over the validation text, in windows of ``context``."""
    n = (len(val) - 1) // context
    xs = np.stack([val[i * context : (i + 1) * context] for i in range(n)]).astype(np.int32)
    ys = np.stack([val[i * context + 1 : (i + 1) * context + 1] for i in range(n)])
    m.eval()
    logits = tensor.to_numpy(m.forward(tensor.from_numpy(xs))).astype(np.float64)
    m.train()
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return float(-np.take_along_axis(logp, ys[..., None], axis=-1).mean())


def sample(m: GPT, prompt: np.ndarray, n: int, context: int, temperature: float, seed: int) -> np.ndarray:
    """``n`` characters drawn after ``prompt`` at ``temperature``."""
    rng = np.random.default_rng(seed)
    ids = list(prompt)
    m.eval()
    for _ in range(n):
        window = np.asarray(ids[-context:], np.int32)[None]
        z = tensor.to_numpy(m.forward(tensor.from_numpy(window)))[0, -1].astype(np.float64) / temperature
        p = np.exp(z - z.max())
        ids.append(int(rng.choice(len(p), p=p / p.sum())))
    m.train()
    return np.asarray(ids[len(prompt) :])


# -- reporting ---------------------------------------------------------------------------------------
class Progress:
    """tqdm's bar where it is installed (``pip install singa_lite[demo]``), a line every
    ``every`` steps otherwise."""

    def __init__(self, start: int, total: int, every: int) -> None:
        self.every, self.step, self.total = every, start, total
        try:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True)
        except ImportError:
            self.bar = None

    def update(self, loss: float, lr: float) -> None:
        self.step += 1
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", refresh=False)
            self.bar.update(1)
        elif self.step % self.every == 0 or self.step == self.total:
            print(f"step {self.step}/{self.total}  loss {loss:.3f}  lr {lr:.2e}", flush=True)

    def write(self, text: str) -> None:
        (self.bar.write if self.bar is not None else print)(text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def plot(curves: dict, bigram: float, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(no matplotlib: {path} not drawn; pip install singa_lite[demo])")
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, points in curves.items():
        if points:
            ax.plot(*zip(*points), label=name)
    ax.axhline(bigram, color="gray", linestyle="--", label="character bigram (validation)")
    ax.set(xlabel="step", ylabel="cross-entropy (nats / character)", title="char GPT on Coriolanus")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"loss plot: {path}")


def check_onnx(m: GPT, window: np.ndarray, path: Path) -> None:
    """Export the model, run it in onnxruntime, compare the next-character logits."""
    onnx_model = m.to_onnx([tensor.Tensor(window.shape, dtype=tensor.int32)])
    path.write_bytes(onnx_model.SerializeToString())
    m.eval()
    ours = tensor.to_numpy(m.forward(tensor.from_numpy(window)))[:, -1]
    m.train()
    try:
        import onnxruntime as ort
    except ImportError:
        print(f"ONNX model: {path} (no onnxruntime to run it: pip install onnxruntime)")
        return
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, {sess.get_inputs()[0].name: window})[0][:, -1]
    print(
        f"ONNX model: {path} (opset {onnx_model.opset_import[0].version}); onnxruntime's next-character "
        f"logits differ from singa_lite's by at most {np.abs(theirs - ours).max():.2e}, "
        f"same argmax: {bool((theirs.argmax(-1) == ours.argmax(-1)).all())}"
    )


# -- main ------------------------------------------------------------------------------------------
def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--accumulate", type=int, default=1, help="micro-batches per update")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--out", type=Path, default=Path("gpt_run"), help="checkpoint, plot and ONNX go here")
    p.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    p.add_argument("--stop-after", type=int, help="stop after this step, as an interrupted run would")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def build(args: argparse.Namespace, vocab: int) -> tuple[GPT, tensor.Tensor, tensor.Tensor]:
    """The model with its optimizer, compiled in graph mode on placeholder batches."""
    m = GPT(vocab, args.context, args.width, args.depth, args.heads, args.dropout)
    decay_steps = max(args.steps - args.warmup, 1)
    schedule = opt.CosineDecay(args.lr, decay_steps, alpha=0.1, warmup_steps=args.warmup)
    adamw = opt.AdamW(
        lr=schedule,
        weight_decay=args.weight_decay,
        no_decay=opt.biases_and_norms,  # decay the matrices only
        clip_norm=args.clip,
        accumulate=args.accumulate,
    )
    m.set_optimizer(adamw)
    tx = tensor.Tensor((args.batch_size, args.context), dtype=tensor.int32)
    ty = tensor.Tensor((args.batch_size * args.context,), dtype=tensor.int32)
    m.compile([tx], is_train=True, use_graph=True)
    n_params = sum(t.size() for t in m.get_params().values())
    print(f"GPT: {args.depth} blocks, {args.heads} heads, width {args.width}, context {args.context}", end="")
    print(f", {n_params:,} parameters")
    return m, tx, ty


def train(
    args: argparse.Namespace, m: GPT, placeholders: tuple, train_ids: np.ndarray, val: np.ndarray
) -> dict:
    """Train to ``args.steps``, resuming from the checkpoint in ``args.out`` if there is one;
    returns the curves ``{"train": [(step, loss)], "validation": [...]}``."""
    ckpt = args.out / "gpt.h5"
    start, curves = 0, {"train": [], "validation": []}
    if ckpt.exists() and not args.fresh:
        aux = m.load_states(ckpt)
        start = int(aux["step"])
        curves = {k: [(int(s), float(v)) for s, v in aux[k]] for k in curves}
        print(f"resumed from {ckpt} at step {start} (--fresh starts over)")
    tx, ty = placeholders
    t0 = time.perf_counter()
    bar = Progress(start, args.steps, args.eval_every)
    recent: list[float] = []
    for step in range(start, min(args.steps, args.stop_after or args.steps)):
        xb, yb = batch(train_ids, step, args.batch_size, args.context, args.seed)
        tx.copy_from_numpy(xb)
        ty.copy_from_numpy(yb)
        recent.append(float(tensor.to_numpy(m(tx, ty))[0]))
        bar.update(recent[-1], m.optimizer.lr_value)
        done = step + 1
        if done % args.eval_every == 0 or done in (args.steps, args.stop_after):
            tr, va = float(np.mean(recent)), evaluate(m, val, args.context)
            curves["train"].append((done, tr))
            curves["validation"].append((done, va))
            recent = []
            bar.write(f"step {done}: train {tr:.3f}, validation {va:.3f}")
            # Everything to resume: params, AdamW's slots and step, the RNG (dropout), the curves.
            m.save_states(
                ckpt, aux_states={"step": done, **{k: [list(p) for p in v] for k, v in curves.items()}}
            )
    bar.close()
    print(f"trained {bar.step - start} steps in {(time.perf_counter() - t0) / 60:.1f} min")
    return curves


def main() -> None:
    args = parse_args()
    device.get_default_device().SetRandSeed(args.seed)
    text = data.load_text()
    chars, c2i = data.char_vocab(text)
    ids = data.encode_text(text, c2i)
    split = int(len(ids) * 0.9)
    train_ids, val = ids[:split], ids[split:]
    print(
        f"{len(text):,} characters ({len(train_ids):,} train, {len(val):,} validation), {len(chars)} distinct"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    m, tx, ty = build(args, len(chars))
    curves = train(args, m, (tx, ty), train_ids, val)

    bigram = bigram_loss(train_ids, val, len(chars))
    print("\n step   train  validation  (cross-entropy, nats per character)")
    for (step, tr), (_, va) in zip(curves["train"], curves["validation"]):
        print(f"{step:5d}  {tr:6.3f}  {va:10.3f}")
    final = curves["validation"][-1][1] if curves["validation"] else math.nan
    verdict = "below" if final < bigram else "NOT below"
    print(
        f"validation loss {final:.3f}: {verdict} the character bigram's {bigram:.3f} by {bigram - final:.3f}"
    )
    plot(curves, bigram, args.out / "loss.png")

    prompt = "MENENIUS:\n"
    out = sample(m, data.encode_text(prompt, c2i), 300, args.context, 0.8, args.seed)
    print("\nsample (temperature 0.8):\n" + prompt + data.decode_text(out, chars))
    check_onnx(m, val[: args.context].astype(np.int32)[None], args.out / "gpt.onnx")


if __name__ == "__main__":
    main()

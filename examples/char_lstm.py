"""A character-level LSTM on the public-domain text shipped with singa_lite.

    python examples/char_lstm.py [--steps 250]

Trains an Embedding -> LSTM -> Linear model to predict the next character, then samples
some text from it. SINGA's LSTM call convention: lstm(xs, (h0, c0)) -> (outputs, h, c).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from singa_lite import autograd, data, device, layer, model, opt, tensor


class CharLSTM(model.Model):
    def __init__(self, vocab: int, hidden: int = 128, embed: int = 32) -> None:
        super().__init__()
        self.embed = layer.Embedding(vocab, embed)
        self.lstm = layer.LSTM(embed, hidden)
        self.fc = layer.Linear(vocab)
        self.loss = layer.SoftMaxCrossEntropy()
        self.hidden = hidden

    def forward(self, idx: tensor.Tensor, state: tuple | None = None) -> tuple:
        # idx: (T, N) int32 -> embeddings (T, N, E) -> LSTM outputs (T, N, H)
        y, h, c = self.lstm(self.embed(idx), state)
        t, n, hdim = y.shape
        logits = self.fc(autograd.reshape(y, (t * n, hdim)))
        return logits, (h, c)

    def train_one_batch(self, idx: tensor.Tensor, target: tensor.Tensor) -> tensor.Tensor:
        logits, _ = self.forward(idx)
        loss = self.loss(logits, target)
        self.optimizer(loss)
        return loss


def sample(m: CharLSTM, chars: list[str], c2i: dict[str, int], prime: str, n: int, seed: int = 0) -> str:
    """Generate ``n`` characters after ``prime``, sampling from the softmax."""
    rng = np.random.default_rng(seed)
    m.eval()
    state = None
    idx = np.array([[c2i[c]] for c in prime], np.int32)
    out = list(prime)
    for _ in range(n):
        logits, state = m.forward(tensor.from_numpy(idx), state)
        z = tensor.to_numpy(logits)[-1]
        p = np.exp(z - z.max())
        nxt = rng.choice(len(chars), p=p / p.sum())
        out.append(chars[nxt])
        idx = np.array([[nxt]], np.int32)
    m.train()
    return "".join(out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--seq-len", type=int, default=48)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()

    device.get_default_device().SetRandSeed(0)
    text = data.load_text()
    chars, c2i = data.char_vocab(text)
    encoded = data.encode_text(text, c2i)
    m = CharLSTM(len(chars))
    m.set_optimizer(opt.Adam(lr=0.005))
    tx = tensor.Tensor((args.seq_len, args.batch_size), dtype=tensor.int32)
    ty = tensor.Tensor((args.seq_len * args.batch_size,), dtype=tensor.int32)
    m.compile([tx], is_train=True, use_graph=True)

    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for step in range(args.steps):
        starts = rng.integers(0, len(encoded) - args.seq_len - 1, args.batch_size)
        window = np.stack([encoded[s : s + args.seq_len + 1] for s in starts], axis=1)  # (T+1, N)
        tx.copy_from_numpy(window[:-1])
        ty.copy_from_numpy(window[1:].reshape(-1))
        loss = m(tx, ty)
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step}: loss {tensor.to_numpy(loss)[0]:.3f}  ({time.perf_counter() - t0:.1f} s)")
    print("sample:", sample(m, chars, c2i, "MARCIUS:", 200))


if __name__ == "__main__":
    main()

"""One training step (forward + backward + SGD-momentum update) in singa_lite and PyTorch CPU.

    python benchmarks/training.py [--steps 60] [--rounds 10] [--min-seconds 6.0]
                                  [--only mlp,cnn,resnet20,lstm,gpt,mobilenet] [--device cpu|gpu]

Runs each workload in singa_lite eager mode, singa_lite graph mode and, where installed,
PyTorch CPU, in this one process with the same thread count, and prints the median and minimum
milliseconds per step, the singa_lite/PyTorch ratios (below 1.0: singa_lite is faster) and
graph mode's over eager mode's. The three take their steps in turns (``--rounds``, a stretch
of steps each per round, PyTorch first and the two modes after it in alternate orders), so
that a change in the shared machine's load falls on all of them. A ratio to PyTorch is the
median over rounds of the two sides' medians in that round (``timing.paired_ratio``): the
machine's speed changes between rounds and moves the overall medians apart by chance (one
MLP run: graph 3.88 against eager 3.31 ms overall, graph/torch 1.16 overall, graph/eager 0.92
round by round). The two modes split their stretch into turns of about 0.1 s each
(``TURN_SECONDS``), eager and graph in alternate orders, and graph/eager is the median over
turns: two modes that differ by 1-3% (what a replay saves of a step that is mostly matrix
products) were 5% apart either way in two stretches a second apart (the GPT's graph/eager
0.96-1.05 in three runs), 0.97-0.99 in turns. A workload whose ``--steps`` take less than
``--min-seconds`` (6.0) gets as many more steps as that needs: 30 steps of the 4 ms MLP are
120 ms, which one burst of the machine's load covers (graph/torch 0.91 and 1.11 in two 30-step
runs, 0.77-0.80 in three of 300 steps in 10 rounds).
The ``gpt`` workload is ``examples/gpt.py``'s model (4 pre-norm blocks, 4 heads, width 128,
causal attention over 128 characters, batch 16) with its update: AdamW after clipping the
gradients to a global norm of 1, biases and norm parameters exempt from weight decay.
The machine is shared and noisy: compare ratios, not absolute times. With ``--device gpu``
both run on the first CUDA device (PyTorch with TF32 off, as singa_lite keeps float32 exact)
and every step ends with a device synchronisation. It opts in to glibc malloc tuning
(``singa_lite.backend.tune_malloc``, which PyTorch's side benefits from too) and says so.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from singa_lite import autograd, backend, device, layer, model, opt, tensor
from singa_lite.backend.cpu_kernels import threads as cpu_threads

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # mobile_nets.py beside this file
import mobile_nets
import setting
from timing import group_ratios, interleaved_seconds, median_interval, paired_ratio, turns_in

THREADS = int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1))
GPT_VOCAB = 58  # the characters of the text examples/gpt.py trains on


# -- singa_lite models ---------------------------------------------------------------------------
class Classifier(model.Model):
    """Wraps a feature network with softmax cross-entropy and the optimizer step."""

    def __init__(self, net: layer.Layer) -> None:
        super().__init__()
        self.net = net
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        return self.net(x)

    def train_one_batch(self, x: tensor.Tensor, y: tensor.Tensor) -> tuple:
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


class Sequential(layer.Layer):
    def __init__(self, *layers: layer.Layer) -> None:
        super().__init__()
        self.register_layers(*layers)
        self._order = layers

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        for lyr in self._order:
            x = lyr(x)
        return x


class BasicBlock(layer.Layer):
    def __init__(self, planes: int, stride: int, downsample: bool) -> None:
        super().__init__()
        self.conv1 = layer.Conv2d(planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = layer.BatchNorm2d()
        self.conv2 = layer.Conv2d(planes, 3, padding=1, bias=False)
        self.bn2 = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.add = layer.Add()
        self.downsample = downsample
        if downsample:
            self.conv_sc = layer.Conv2d(planes, 1, stride=stride, bias=False)
            self.bn_sc = layer.BatchNorm2d()

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        sc = self.bn_sc(self.conv_sc(x)) if self.downsample else x
        return self.relu(self.add(y, sc))


def resnet20() -> layer.Layer:
    blocks: list[layer.Layer] = [
        layer.Conv2d(16, 3, padding=1, bias=False),
        layer.BatchNorm2d(),
        layer.ReLU(),
    ]
    in_planes = 16
    for planes, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(3):
            s = stride if i == 0 else 1
            blocks.append(BasicBlock(planes, s, downsample=(s != 1 or in_planes != planes)))
            in_planes = planes
    blocks += [layer.GlobalAvgPool2d(), layer.Flatten(), layer.Linear(10)]
    return Sequential(*blocks)


class LSTMNet(layer.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = layer.LSTM(64, 128)
        self.fc = layer.Linear(10)

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        _y, h, _c = self.lstm(x)
        return self.fc(h)


class GPT(model.Model):
    """``examples/gpt.py``'s model: token and learned position embeddings, pre-norm blocks."""

    def __init__(self, vocab: int = GPT_VOCAB, context: int = 128, width: int = 128, depth: int = 4) -> None:
        super().__init__()
        self.tok = layer.Embedding(vocab, width)
        self.pos = layer.LearnedPositionalEmbedding(context, batch_first=True)
        self.blocks = [
            layer.TransformerEncoderLayer(
                width, 4, 4 * width, 0.0, "gelu_tanh", batch_first=True, norm_first=True
            )
            for _ in range(depth)
        ]
        for i, block in enumerate(self.blocks):
            setattr(self, f"block{i}", block)
        self.norm = layer.LayerNorm()
        self.head = layer.Linear(vocab)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, idx: tensor.Tensor) -> tensor.Tensor:
        x = self.pos(self.tok(idx))
        for block in self.blocks:
            x = block(x, is_causal=True)
        return self.head(self.norm(x))

    def train_one_batch(self, idx: tensor.Tensor, target: tensor.Tensor) -> tuple:
        logits = self.forward(idx)
        loss = self.loss(autograd.reshape(logits, (-1, logits.shape[-1])), target)
        self.optimizer(loss)
        return logits, loss


SINGA_NETS: dict[str, Callable[[], layer.Layer]] = {
    "mlp": lambda: Sequential(
        layer.Linear(512), layer.ReLU(), layer.Linear(256), layer.ReLU(), layer.Linear(10)
    ),
    "cnn": lambda: Sequential(
        layer.Conv2d(32, 5, padding=2),
        layer.ReLU(),
        layer.MaxPool2d(2),
        layer.Conv2d(64, 5, padding=2),
        layer.ReLU(),
        layer.MaxPool2d(2),
        layer.Flatten(),
        layer.Linear(1024),
        layer.ReLU(),
        layer.Linear(10),
    ),
    "resnet20": resnet20,
    "lstm": LSTMNet,
    "mobilenet": mobile_nets.singa_mobilenet,
}

SHAPES = {
    "mlp": ((128, 784), "MLP 784-512-256-10, batch 128"),
    "cnn": ((64, 1, 28, 28), "LeNet CNN 1x28x28, batch 64"),
    "resnet20": ((32, 3, 32, 32), "ResNet-20 + BN 3x32x32, batch 32"),
    "lstm": ((32, 32, 64), "LSTM 64->128, 32 steps, batch 32"),  # (T, N, I)
    "mobilenet": ((32, 3, 32, 32), "MobileNetV2-style 3x32x32, batch 32"),
    "gpt": ((16, 128), "char GPT 4x128, context 128, batch 16"),  # token ids; AdamW + clipping
}


def time_steps(step: Callable[[], None], steps: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


SETTLE = 0.5
"""Seconds of sleep before each stretch of steps (``timing.interleaved_seconds``)."""
TURN_SECONDS = 0.1
"""About how long each of eager and graph mode runs before the other takes its turn."""


def bench_singa(name: str, use_graph: bool, steps: int, gpu: bool = False) -> list[float]:
    return time_steps(singa_step(name, use_graph, gpu), steps)


def singa_step(name: str, use_graph: bool, gpu: bool = False) -> Callable[[], None]:
    """One singa_lite training step of workload ``name``, after three warm-up steps."""
    shape, _ = SHAPES[name]
    batch = shape[1] if name == "lstm" else shape[0]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int32)
    dev = device.create_cuda_gpu() if gpu else device.create_cpu_device()
    m: model.Model
    if name == "gpt":
        x = rng.integers(0, GPT_VOCAB, shape).astype(np.int32)
        y = rng.integers(0, GPT_VOCAB, x.size).astype(np.int32)
        m = GPT()
        m.set_optimizer(opt.AdamW(lr=1e-3, clip_norm=1.0, no_decay=opt.biases_and_norms))
    else:
        m = Classifier(SINGA_NETS[name]())
        m.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    tx = tensor.from_numpy(x, dev)
    ty = tensor.from_numpy(y, dev)
    m.compile([tx], is_train=True, use_graph=use_graph)

    def step() -> None:
        m(tx, ty)
        dev.Sync()

    for _ in range(3):
        step()
    return step


# -- PyTorch reference -----------------------------------------------------------------------
def bench_torch(name: str, steps: int, gpu: bool = False) -> list[float] | None:
    step = torch_step(name, gpu)
    return None if step is None else time_steps(step, steps)


def torch_step(name: str, gpu: bool = False) -> Callable[[], None] | None:
    """One PyTorch training step of workload ``name`` after three warm-up steps (None
    without PyTorch, or without CUDA for ``gpu``)."""
    try:
        import torch
        from torch import nn
    except ImportError:
        return None
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    if gpu and not torch.cuda.is_available():
        return None
    where = "cuda" if gpu else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    class Block(nn.Module):
        def __init__(self, cin: int, planes: int, stride: int) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(planes)
            self.c2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(planes)
            self.sc = (
                nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
                if stride != 1 or cin != planes
                else nn.Identity()
            )

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + self.sc(x))

    class LSTMNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(64, 128)
            self.fc = nn.Linear(128, 10)

        def forward(self, x):
            _, (h, _) = self.lstm(x)
            return self.fc(h[0])

    class GPT(nn.Module):
        def __init__(self, vocab: int = GPT_VOCAB, context: int = 128, width: int = 128) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, width)
            self.pos = nn.Parameter(torch.randn(context, width) * 0.02)
            gelu = nn.GELU(approximate="tanh")
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(width, 4, 4 * width, 0.0, gelu, batch_first=True, norm_first=True)
                for _ in range(4)
            )
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(context))

        def forward(self, idx):
            x = self.tok(idx) + self.pos
            for block in self.blocks:
                x = block(x, src_mask=self.mask, is_causal=True)
            return self.head(self.norm(x)).reshape(-1, GPT_VOCAB)

    def resnet() -> nn.Module:
        mods: list[nn.Module] = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
        cin = 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                mods.append(Block(cin, planes, stride if i == 0 else 1))
                cin = planes
        mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
        return nn.Sequential(*mods)

    nets = {
        "mlp": lambda: nn.Sequential(
            nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)
        ),
        "cnn": lambda: nn.Sequential(
            nn.Conv2d(1, 32, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(3136, 1024),
            nn.ReLU(),
            nn.Linear(1024, 10),
        ),
        "resnet20": resnet,
        "lstm": LSTMNet,
        "gpt": GPT,
        "mobilenet": mobile_nets.torch_mobilenet,
    }
    shape, _ = SHAPES[name]
    batch = shape[1] if name == "lstm" else shape[0]
    net = nets[name]().to(where)
    net.train()
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(where)
    y = torch.from_numpy(rng.integers(0, 10, batch).astype(np.int64)).to(where)
    if name == "gpt":
        x = torch.from_numpy(rng.integers(0, GPT_VOCAB, shape)).to(where)
        y = torch.from_numpy(rng.integers(0, GPT_VOCAB, x.numel())).to(where)
        groups = [  # the same weight-decay exclusion as opt.biases_and_norms
            {"params": [p for p in net.parameters() if p.ndim >= 2]},
            {"params": [p for p in net.parameters() if p.ndim < 2], "weight_decay": 0.0},
        ]
        update = torch.optim.AdamW(groups, lr=1e-3)
    else:
        update = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        update.zero_grad(set_to_none=True)
        loss_fn(net(x), y).backward()
        if name == "gpt":
            nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        update.step()
        if gpu:
            torch.cuda.synchronize()

    for _ in range(3):
        step()
    return step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=60, help="timed steps of each variant")
    p.add_argument(
        "--rounds", type=int, default=10, help="the steps are taken in this many rounds, the variants in turn"
    )
    p.add_argument(
        "--min-seconds",
        type=float,
        default=6.0,
        help="more steps for a workload whose --steps take less than this many seconds",
    )
    p.add_argument("--only", default="mlp,cnn,resnet20,lstm,gpt,mobilenet")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument(
        "--threads", type=int, default=THREADS, help="threads for both: BLAS, compiled kernels, torch"
    )
    args = p.parse_args()
    set_threads(args.threads)
    gpu = args.device == "gpu"
    if gpu and device.get_num_gpus() == 0:
        device.create_cuda_gpu()  # raises DeviceError saying what is missing
    # Training loops reuse large freed blocks: the times below are with glibc told to keep them.
    tuned = backend.tune_malloc()
    print(f"device: {args.device}; {setting.describe(THREADS, tuned)}")
    header = (
        f"{'workload':36} {'eager ms (min)':>16} {'graph ms (min)':>16} {'torch ms (min)':>16} "
        f"{'eager/torch':>11} {'graph/torch':>11} {'target':>7} {'graph/eager (95%)':>21}"
    )
    print(header)
    print("-" * len(header))
    targets = GPU_TARGETS if gpu else TARGETS
    for name in args.only.split(","):
        # PyTorch leads each round and eager and graph mode follow it in alternate rounds
        # (timing.interleaved_seconds): the two compared with each other meet the same.
        reference = torch_step(name, gpu)
        variants = {} if reference is None else {"torch": reference}
        variants |= {"eager": singa_step(name, False, gpu), "graph": singa_step(name, True, gpu)}
        # on a GPU no BLAS pool spins between steps: no pause
        one = step_seconds(variants["eager"])
        steps = steps_for(one, args.steps, args.min_seconds)
        # After PyTorch the two modes take turns of about TURN_SECONDS each: graph/eager
        # compares turns a few tenths of a second apart, not two stretches a second or more
        # apart. Without PyTorch, eager mode leads instead and the modes pair by round.
        turn = max(1, round(TURN_SECONDS / one)) if reference is not None else None
        seconds = interleaved_seconds(variants, steps, args.rounds, 0.0 if gpu else SETTLE, turn)
        times = {k: [t * 1e3 for t in v] for k, v in seconds.items()}
        mode_groups = args.rounds * (1 if turn is None else turns_in(steps, args.rounds, turn))
        eager, graph = time_steps_summary(times["eager"]), time_steps_summary(times["graph"])
        torch_s = time_steps_summary(times["torch"]) if "torch" in times else None
        ratios = [ratio(times, a, b, args.rounds) for a, b in (("eager", "torch"), ("graph", "torch"))]
        print(
            f"{SHAPES[name][1]:36} {fmt(eager):>16} {fmt(graph):>16} {fmt(torch_s):>16} "
            f"{ratios[0]:>11} {ratios[1]:>11} {targets.get(name, ''):>7} "
            f"{modes_ratio(times, mode_groups):>21}",
            flush=True,
        )


TARGETS = {"mlp": "<= 1.0", "cnn": "<= 1.2", "resnet20": "<= 1.5", "lstm": "<= 1.5", "gpt": "<= 1.5"}
TARGETS["mobilenet"] = "<= 2.0"
"""Issue targets for the graph/torch ratio on 2 threads (docs/performance.md)."""
GPU_TARGETS = {"mlp": "<= 1.2", "cnn": "<= 2.0", "resnet20": "<= 2.0"}
"""Issue targets for the graph/torch ratio against PyTorch CUDA on an H100/H200."""


def set_threads(n: int) -> None:
    """Run singa_lite (BLAS and the compiled kernels) and PyTorch on ``n`` threads each."""
    global THREADS
    THREADS = n
    cpu_threads.set_num_threads(n)


def step_seconds(step: Callable[[], None]) -> float:
    """The seconds one call of ``step`` takes (timed once)."""
    t0 = time.perf_counter()
    step()
    return max(time.perf_counter() - t0, 1e-6)


def steps_for(one: float, steps: int, min_seconds: float) -> int:
    """``steps``, or more where ``steps`` of a step taking ``one`` second take less than
    ``min_seconds``: as many as take that long."""
    return steps if one * steps >= min_seconds else math.ceil(min_seconds / one)


def time_steps_summary(times: list[float]) -> tuple[float, float]:
    return statistics.median(times), min(times)


def ratio(times: dict[str, list[float]], a: str, b: str, rounds: int) -> str:
    """``a`` over ``b``, round by round (``timing.paired_ratio``); n/a without ``b``."""
    return f"{paired_ratio(times[a], times[b], rounds):.2f}" if b in times else "n/a"


def modes_ratio(times: dict[str, list[float]], groups: int) -> str:
    """Graph mode over eager mode, turn by turn (or round by round), with a 95% confidence
    interval of that median (``timing.median_interval``)."""
    each = group_ratios(times["graph"], times["eager"], groups)
    lo, hi = median_interval(each)
    return f"{statistics.median(each):.2f} ({lo:.2f}-{hi:.2f})"


def fmt(s: tuple[float, float] | None) -> str:
    return "n/a" if s is None else f"{s[0]:.2f} ({s[1]:.2f})"


if __name__ == "__main__":
    main()

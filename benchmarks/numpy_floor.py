"""What NumPy itself reaches on this machine: the floor under any framework built on it.

    python benchmarks/numpy_floor.py [--repeat 20] [--only training,onnx]

The speed targets of the training and ONNX benchmarks are ratios to PyTorch and onnxruntime,
whose convolutions and GEMMs are their own (oneDNN, MLAS). singa_lite's run on NumPy's BLAS.
This prints, in one process, how far NumPy alone can go on the same workloads:

* training (``training.py``'s MLP, LeNet CNN and ResNet-20, one SGD-momentum step): the
  *GEMM floor*, the time of just the matrix products of forward and backward (convolutions
  as im2col products; no gradient for the input), each timed alone with its operands ready;
  and for the MLP a *NumPy step*, the whole step written by hand in NumPy with no framework.
* ONNX (the nine "light" models of ``onnx_inference.py``, batch 1): the GEMM floor of every
  Conv (but depthwise ones, which are no matrix products) and Gemm node (shapes from ONNX
  shape inference), each timed alone, and *in order*: the same products run one after
  another with the model's own weights, which come from memory as in a real run; next to
  singa_lite and onnxruntime.

Each is printed as a ratio to the reference in the same process. A floor ratio above a
target means no NumPy framework can meet that target on this machine; the gap between
singa_lite and its floor is what a framework still controls (im2col copies, pooling,
elementwise passes, the optimizer, Python).
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
from functools import partial
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # timing.py beside this file
from timing import median_seconds

Gemm = tuple[int, int, int]  # (M, K, N): an (M, K) @ (K, N) product


def gemm_floor_ms(shapes: list[Gemm], repeat: int) -> float:
    """Sum of the median times of each ``(M, K) @ (K, N)`` float32 product, operands ready."""
    rng = np.random.default_rng(0)
    cache: dict[Gemm, float] = {}
    for m, k, n in shapes:
        if (m, k, n) not in cache:
            a = rng.random((m, k), dtype=np.float32)
            b = rng.random((k, n), dtype=np.float32)
            cache[m, k, n] = 1e3 * median_seconds(partial(np.matmul, a, b), repeat)
    return sum(cache[s] for s in shapes)


def gemm_pass_ms(shapes: list[Gemm], repeat: int) -> float:
    """Median time of the products run one after another as a model runs them, each with its
    own weight (left operand), so that a weight comes from memory when it is reached, as it
    does in a real run (resnet50 holds 100 MB of weights, more than the caches); the right
    operands (the activations, just written in a real run) are made once per shape and stay
    in cache. The floor a batch-1 run of the model's GEMMs cannot go under, with no im2col,
    pooling or elementwise pass at all."""
    rng = np.random.default_rng(0)
    weights = [rng.random((m, k), dtype=np.float32) for m, k, _ in shapes]
    right = {(k, n): rng.random((k, n), dtype=np.float32) for _, k, n in shapes}
    outs = {(m, n): np.empty((m, n), np.float32) for m, _, n in shapes}

    def run() -> None:
        for w, (m, k, n) in zip(weights, shapes):
            np.matmul(w, right[k, n], out=outs[m, n])

    return 1e3 * median_seconds(run, repeat)


# -- training workloads ----------------------------------------------------------------------
def linear(n: int, i: int, o: int, need_dx: bool = True) -> list[Gemm]:
    """Forward, weight gradient and (unless it is the first layer) input gradient."""
    return [(n, i, o), (i, n, o)] + ([(n, o, i)] if need_dx else [])


def conv(n: int, c: int, hw: int, o: int, k: int, s: int, p: int, need_dx: bool = True) -> list[Gemm]:
    """A square conv as im2col products: ``P = N*Ho*Wo`` pixels, ``K = C*k*k`` taps."""
    out = (hw + 2 * p - k) // s + 1
    pixels, taps = n * out * out, c * k * k
    return [(pixels, taps, o), (o, pixels, taps)] + ([(pixels, o, taps)] if need_dx else [])


def resnet20_gemms(n: int = 32) -> list[Gemm]:
    g = conv(n, 3, 32, 16, 3, 1, 1, need_dx=False)
    g += 6 * conv(n, 16, 32, 16, 3, 1, 1)
    for cin, planes, hw in ((16, 32, 32), (32, 64, 16)):
        g += conv(n, cin, hw, planes, 3, 2, 1) + conv(n, cin, hw, planes, 1, 2, 0)
        g += 5 * conv(n, planes, hw // 2, planes, 3, 1, 1)
    return g + linear(n, 64, 10)


TRAINING: dict[str, list[Gemm]] = {
    "mlp": linear(128, 784, 512, need_dx=False) + linear(128, 512, 256) + linear(128, 256, 10),
    "cnn": conv(64, 1, 28, 32, 5, 1, 2, need_dx=False)
    + conv(64, 32, 14, 64, 5, 1, 2)
    + linear(64, 3136, 1024)
    + linear(64, 1024, 10),
    "resnet20": resnet20_gemms(),
}


def numpy_mlp_step(repeat: int) -> float:
    """One SGD-momentum step of the 784-512-256-10 MLP written directly in NumPy."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 784), dtype=np.float32)
    y = rng.integers(0, 10, 128)
    sizes = [(784, 512), (512, 256), (256, 10)]
    Ws = [rng.standard_normal(s, dtype=np.float32) * np.float32(0.05) for s in sizes]
    bs = [np.zeros(s[1], np.float32) for s in sizes]
    params = [p for pair in zip(Ws, bs) for p in pair]
    moments = [np.zeros_like(p) for p in params]
    lr, mom = np.float32(0.01), np.float32(0.9)

    def step() -> None:
        acts = [x]
        for i, (W, b) in enumerate(zip(Ws, bs)):
            h = acts[-1] @ W
            h += b
            acts.append(np.maximum(h, 0, out=h) if i < 2 else h)
        z = acts[-1] - acts[-1].max(axis=1, keepdims=True)
        e = np.exp(z)
        d = e / e.sum(axis=1, keepdims=True)
        d[np.arange(128), y] -= 1
        d /= np.float32(128)
        grads: list[np.ndarray] = []
        for i in (2, 1, 0):
            grads[:0] = [acts[i].T @ d, d.sum(axis=0)]
            if i:
                d = d @ Ws[i].T
                d *= acts[i] > 0
        for p, m, g in zip(params, moments, grads):
            m *= mom
            m += g
            p -= lr * m

    return 1e3 * median_seconds(step, repeat)


def training_rows(repeat: int) -> None:
    from training import SHAPES, bench_torch  # this folder's benchmark: same workloads

    head = f"{'training step (ms)':34}{'GEMM floor':>11}{'NumPy step':>11}{'torch':>8}"
    print(f"{head}  floor/torch (step/torch)")
    for name, shapes in TRAINING.items():
        floor = gemm_floor_ms(shapes, repeat)
        step = numpy_mlp_step(repeat) if name == "mlp" else None
        torch_times = bench_torch(name, repeat)
        ref = statistics.median(torch_times) if torch_times else None
        step_s = f"{step:.2f}" if step is not None else "-"
        ref_s = f"{ref:.2f}" if ref else "n/a"
        ratio = f"{floor / ref:.2f}" if ref else "n/a"
        if step is not None and ref:
            ratio += f" ({step / ref:.2f})"
        print(f"{SHAPES[name][1]:34}{floor:>11.2f}{step_s:>11}{ref_s:>8}  {ratio}", flush=True)


# -- ONNX models -----------------------------------------------------------------------------
def onnx_gemms(model: Any) -> list[Gemm]:
    """The products of every Conv (im2col form, per group) and Gemm node of ``model``."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    dims = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
    }
    dims.update({t.name: list(t.dims) for t in inferred.graph.initializer})
    shapes: list[Gemm] = []
    for node in inferred.graph.node:
        if node.op_type == "Conv":
            O, cg, kh, kw = dims[node.input[1]]
            _, _, ho, wo = dims[node.output[0]]
            group = next((a.i for a in node.attribute if a.name == "group"), 1)
            if cg == 1 and group > 1:
                continue  # depthwise: per-channel elementwise work, not a matrix product
            shapes += group * [(O // group, cg * kh * kw, ho * wo)]
        elif node.op_type == "Gemm":
            k, n = dims[node.input[1]]
            if next((a.i for a in node.attribute if a.name == "transB"), 0):
                k, n = n, k
            # As y^T = W^T x^T: the weight on the left, as in the convolutions (gemm_pass_ms).
            shapes.append((n, k, dims[node.output[0]][0]))
    return shapes


def onnx_rows(repeat: int) -> None:
    import onnx
    import onnxruntime as ort
    from onnx_inference import LIGHT_DIR, input_of

    from singa_lite.sonnx import prepare

    head = f"{'ONNX, batch 1 (ms)':20}{'GEMM floor':>11}{'in order':>9}{'singa_lite':>11}{'ORT':>8}"
    print(f"{head}{'floor/ORT':>10}{'order/ORT':>10}{'ours/ORT':>9}")
    for path in sorted(glob.glob(os.path.join(LIGHT_DIR, "light_*.onnx"))):
        model = onnx.load(path)
        name, x = input_of(model)
        gemms = onnx_gemms(model)
        floor = gemm_floor_ms(gemms, repeat)
        in_order = gemm_pass_ms(gemms, repeat)
        ours = 1e3 * median_seconds(partial(prepare(model).run, [x]), repeat)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        ref = 1e3 * median_seconds(partial(sess.run, None, {name: x}), repeat)
        label = os.path.basename(path)[len("light_") : -len(".onnx")]
        row = f"{label:20}{floor:>11.2f}{in_order:>9.2f}{ours:>11.2f}{ref:>8.2f}"
        print(f"{row}{floor / ref:>10.2f}{in_order / ref:>10.2f}{ours / ref:>9.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--only", default="training,onnx")
    args = parser.parse_args()
    print(f"numpy {np.__version__}; {os.cpu_count()} cores")
    if "training" in args.only:
        training_rows(args.repeat)
    if "onnx" in args.only:
        onnx_rows(args.repeat)


if __name__ == "__main__":
    main()

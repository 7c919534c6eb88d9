"""Batch-1 inference latency of ONNX models run through ``sonnx.prepare`` against onnxruntime.

    python benchmarks/onnx_inference.py [--repeat 20] [--threads 0] [--models resnet50,vgg19]

Both run in this one process on the same input, on the CPU. The models are onnx's nine "light"
model-zoo CNNs shipped in the ``onnx`` wheel (real architectures with constant weights) at their
224x224 batch-1 input. Each model is run once to warm up, then ``--repeat`` times; the median is
reported. ``--threads`` sets onnxruntime's intra-op threads (0: its default, all cores); NumPy's
BLAS uses its own default. Target (issue 5): within 2x of onnxruntime for the CNNs.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort

from singa_lite.sonnx import prepare

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up: first-call allocations, BLAS thread start
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def input_of(model: onnx.ModelProto) -> tuple[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    x = next(v for v in model.graph.input if v.name not in inits)
    shape = [d.dim_value or 1 for d in x.type.tensor_type.shape.dim]
    return x.name, np.random.default_rng(0).random(shape, dtype=np.float32)


def bench(path: str, repeat: int, threads: int) -> tuple[str, float, float, float]:
    model = onnx.load(path)
    name, x = input_of(model)
    rep = prepare(model)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    ours = rep.run([x])[0].numpy()
    ref = sess.run(None, {name: x})[0]
    err = float(np.abs(ours - ref).max() / max(float(np.abs(ref).max()), 1e-30))
    t_singa = median_seconds(lambda: rep.run([x]), repeat)
    t_ort = median_seconds(lambda: sess.run(None, {name: x}), repeat)
    return os.path.basename(path)[len("light_") : -len(".onnx")], t_singa, t_ort, err


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--models", default="", help="comma-separated subset (default: all nine)")
    args = parser.parse_args()
    paths = sorted(glob.glob(os.path.join(LIGHT_DIR, "light_*.onnx")))
    if args.models:
        wanted = set(args.models.split(","))
        paths = [p for p in paths if os.path.basename(p)[6:-5] in wanted]
    print(f"{'model':<14}{'singa_lite ms':>15}{'onnxruntime ms':>16}{'ratio':>8}{'max rel err':>13}")
    ratios = []
    for path in paths:
        name, ts, to, err = bench(path, args.repeat, args.threads)
        ratios.append(ts / to)
        print(f"{name:<14}{ts * 1e3:>15.2f}{to * 1e3:>16.2f}{ts / to:>8.2f}{err:>13.1e}")
    print(f"geometric mean ratio: {float(np.exp(np.mean(np.log(ratios)))):.2f} (target <= 2)")


if __name__ == "__main__":
    main()

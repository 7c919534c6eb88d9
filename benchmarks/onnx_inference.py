"""Batch-1 inference latency of ONNX models run through ``sonnx.prepare`` against onnxruntime.

    python benchmarks/onnx_inference.py [--repeat 40] [--threads 0] [--models resnet50,vgg19]
                                        [--device cpu|gpu]

Both run in this one process on the same input, on the CPU by default, taking turns in eight
stretches of runs, so that a change in the shared machine's load falls on both; the ratio is
the median over the eight rounds of the two sides' medians in the round
(``timing.paired_ratio``, as ``training.py``'s: with four stretches and the overall medians,
SqueezeNet's ratio was 1.66-2.00 in six runs of the same code). The models are
onnx's nine "light" model-zoo CNNs shipped in the ``onnx`` wheel (real architectures with
constant weights) at their 224x224 batch-1 input, and MobileNetV2 and ShuffleNetV2
(``mobile_nets.py``: random weights, exported from PyTorch at run time; skipped without
PyTorch). Each model is run once to warm up, then ``--repeat`` times (and once untimed per
stretch); the medians are reported. ``--threads N`` runs both on ``N`` threads (onnxruntime's
intra-op pool; singa_lite's BLAS and compiled kernels); 0 leaves each its default (all cores).
Target: within 2x of onnxruntime for every model.

With ``--device gpu`` singa_lite runs on the first CUDA device, its input already there, and
each run ends with a device synchronisation; onnxruntime runs with its CUDAExecutionProvider
through an I/O binding (input and outputs kept on the GPU) where that provider is available,
and otherwise on the CPU, which the output says.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort

from singa_lite import backend, device, tensor
from singa_lite.backend.cpu_kernels import threads as cpu_threads
from singa_lite.sonnx import prepare

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # mobile_nets.py beside this file
import setting
from timing import interleaved_seconds, paired_ratio

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def input_of(model: onnx.ModelProto) -> tuple[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    x = next(v for v in model.graph.input if v.name not in inits)
    shape = [d.dim_value or 1 for d in x.type.tensor_type.shape.dim]
    return x.name, np.random.default_rng(0).random(shape, dtype=np.float32)


def ort_runner(
    path: str, name: str, x: np.ndarray, threads: int, cuda: bool
) -> tuple[Callable[[], object], Callable[[], np.ndarray]]:
    """(run the model once, run it once and return its first output on the host) in onnxruntime,
    on CUDA with an I/O binding (input and outputs stay on the GPU) if ``cuda``."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    if not cuda:
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])

        def run_cpu() -> np.ndarray:
            return sess.run(None, {name: x})[0]

        return run_cpu, run_cpu
    sess = ort.InferenceSession(path, opts, providers=["CUDAExecutionProvider"])
    if sess.get_providers()[0] != "CUDAExecutionProvider":
        raise RuntimeError(f"onnxruntime could not start its CUDA provider (got {sess.get_providers()})")
    binding = sess.io_binding()
    binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0))
    for out in sess.get_outputs():
        binding.bind_output(out.name, "cuda")

    def run() -> None:
        sess.run_with_iobinding(binding)  # returns once the outputs are computed

    def result() -> np.ndarray:
        run()
        return binding.copy_outputs_to_cpu()[0]

    return run, result


MOBILE = ("mobilenetv2", "shufflenetv2")


def mobile_models(folder: str) -> list[str]:
    """MobileNetV2 and ShuffleNetV2 (benchmarks/mobile_nets.py, random weights) exported from
    PyTorch into ``folder``, named like the light models; none without PyTorch."""
    try:
        import mobile_nets
    except ImportError:  # PyTorch is a benchmark reference, not a dependency
        return []
    paths = []
    for name, make in (
        ("mobilenetv2", mobile_nets.torch_mobilenet_v2_224),
        ("shufflenetv2", mobile_nets.torch_shufflenet_v2_224),
    ):
        path = os.path.join(folder, f"light_{name}.onnx")
        mobile_nets.export_onnx(make(), path)
        paths.append(path)
    return paths


def bench(
    path: str, repeat: int, threads: int, dev: device.Device, ort_cuda: bool
) -> tuple[str, float, float, float, float]:
    model = onnx.load(path)
    name, x = input_of(model)
    rep = prepare(model, dev)
    feed = tensor.from_numpy(x, dev) if dev.is_gpu() else x  # the GPU's input is there already

    def singa() -> object:
        out = rep.run([feed])
        dev.Sync()
        return out

    ort_run, ort_result = ort_runner(path, name, x, threads, ort_cuda)
    ours = rep.run([feed])[0].numpy()
    ref = ort_result()
    err = float(np.abs(ours - ref).max() / max(float(np.abs(ref).max()), 1e-30))
    # The two take turns in ROUNDS stretches of runs each, the first run of a stretch untimed
    # (it finds the caches holding the other's weights); with more than one CPU thread, after a
    # pause in which the other's thread pool stops spinning (timing.interleaved_seconds). The
    # ratio is paired round by round (timing.paired_ratio).
    settle = 0.0 if threads == 1 or dev.is_gpu() else 0.5
    times = interleaved_seconds({"singa": singa, "ort": ort_run}, repeat, ROUNDS, settle)
    t_singa, t_ort = (statistics.median(times[k]) for k in ("singa", "ort"))
    ratio = paired_ratio(times["singa"], times["ort"], ROUNDS)
    return os.path.basename(path)[len("light_") : -len(".onnx")], t_singa, t_ort, ratio, err


ROUNDS = 8
"""Stretches of runs each side takes, in turns."""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--models", default="", help="comma-separated subset (default: all nine)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    args = parser.parse_args()
    if args.threads > 0:  # BLAS and the compiled kernels; onnxruntime's pool is set per session
        cpu_threads.set_num_threads(args.threads)
    tuned = backend.tune_malloc()  # as the quoted numbers were measured (docs/performance.md)
    print(f"{setting.describe(args.threads or 'default', tuned)}; onnxruntime {ort.__version__}")
    gpu = args.device == "gpu"
    dev = device.create_cuda_gpu() if gpu else device.create_cpu_device()  # says what is missing
    ort_cuda = gpu and "CUDAExecutionProvider" in ort.get_available_providers()
    ort_where = "CUDA" if ort_cuda else "CPU"
    if gpu:
        print(f"singa_lite on {dev}; onnxruntime {ort.__version__} on {ort_where}", end="")
        print("" if ort_cuda else f" (no CUDAExecutionProvider; it has {ort.get_available_providers()})")
    paths = sorted(glob.glob(os.path.join(LIGHT_DIR, "light_*.onnx")))
    tmp = tempfile.TemporaryDirectory()
    paths += mobile_models(tmp.name)
    if args.models:
        wanted = set(args.models.split(","))
        paths = [p for p in paths if os.path.basename(p)[6:-5] in wanted]
    ort_col = "onnxruntime ms" if not gpu else f"ort {ort_where} ms"
    print(f"{'model':<14}{'singa_lite ms':>15}{ort_col:>16}{'ratio':>8}{'max rel err':>13}")
    light: list[float] = []
    mobile: list[float] = []
    for path in paths:
        name, ts, to, ratio, err = bench(path, args.repeat, args.threads, dev, ort_cuda)
        (mobile if name in MOBILE else light).append(ratio)
        print(f"{name:<14}{ts * 1e3:>15.2f}{to * 1e3:>16.2f}{ratio:>8.2f}{err:>13.1e}", flush=True)
    where = f" (singa_lite {dev} vs onnxruntime {ort_where})" if gpu else ""
    if light:
        geomean = float(np.exp(np.mean(np.log(light))))
        print(
            f"light models: geometric mean ratio {geomean:.2f} (target <= 1.3), "
            f"largest {max(light):.2f} (target <= 2.0){where}"
        )
    if mobile:
        print(f"mobile models: largest ratio {max(mobile):.2f} (target <= 2.0){where}")


if __name__ == "__main__":
    main()

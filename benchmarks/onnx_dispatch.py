"""The per-node cost of running a small ONNX graph: ``sonnx.prepare(...).run`` against onnxruntime.

    python benchmarks/onnx_dispatch.py [--blocks 10] [--repeat 200] [--threads 1] [--profile]

A streaming speech/keyword-spotting model runs a graph of about 150 nodes on tensors of a few
hundred elements for every audio frame, so its latency is the framework's dispatch cost, not
arithmetic. The graph here is built with ``onnx.helper``: ``--blocks`` gated residual blocks of
15 nodes each on a ``(1, 16, 8)`` (batch, channels, frames) input: a Conv1d, a Sigmoid * Tanh
gate, a frame shift (Slice, Slice, Concat), a channel mix (Transpose, MatMul, Add, Transpose),
a scale through a flat view (Reshape, Mul, Reshape) and the residual Add. Both run in this one
process on the same input, taking turns in four stretches of runs; the medians of
``--repeat`` runs are printed as microseconds per node, with their ratio. ``--profile``
prints cProfile's top functions of singa_lite's runs.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from singa_lite.backend.cpu_kernels import threads as cpu_threads
from singa_lite.sonnx import prepare

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # setting.py beside this file
import setting
from timing import interleaved_seconds

CHANNELS, FRAMES = 16, 8
NODES_PER_BLOCK = 15


def streaming_model(blocks: int, seed: int = 0) -> onnx.ModelProto:
    """A ``blocks * 15``-node streaming-style graph on a ``(1, 16, 8)`` float32 input (opset 17)."""
    rng = np.random.default_rng(seed)
    c, t = CHANNELS, FRAMES
    inits = [
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([t], np.int64), "frames"),
        numpy_helper.from_array(np.array([2], np.int64), "time_axis"),
        numpy_helper.from_array(np.array([1, c * t], np.int64), "flat"),
        numpy_helper.from_array(np.array([1, c, t], np.int64), "unflat"),
    ]
    nodes = []
    x = "x"
    for b in range(blocks):

        def name(s: str, b: int = b) -> str:
            return f"b{b}_{s}"

        w = (rng.standard_normal((c, c, 3)) * 0.2).astype(np.float32)
        mix = (rng.standard_normal((c, c)) * 0.2).astype(np.float32)
        inits += [
            numpy_helper.from_array(w, name("W")),
            numpy_helper.from_array(np.zeros(c, np.float32), name("B")),
            numpy_helper.from_array(mix, name("mix")),
            numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), name("mix_b")),
            numpy_helper.from_array(np.full(c * t, 0.5, np.float32), name("scale")),
        ]
        nodes += [
            helper.make_node("Conv", [x, name("W"), name("B")], [name("conv")], pads=[1, 1]),
            helper.make_node("Sigmoid", [name("conv")], [name("sig")]),
            helper.make_node("Tanh", [name("conv")], [name("tanh")]),
            helper.make_node("Mul", [name("sig"), name("tanh")], [name("gate")]),
            # drop the oldest frame, append the newest input frame (a streaming buffer shift)
            helper.make_node("Slice", [name("gate"), "one", "frames", "time_axis"], [name("old")]),
            helper.make_node("Slice", [x, "zero", "one", "time_axis"], [name("new")]),
            helper.make_node("Concat", [name("old"), name("new")], [name("shift")], axis=2),
            helper.make_node("Transpose", [name("shift")], [name("tr")], perm=[0, 2, 1]),
            helper.make_node("MatMul", [name("tr"), name("mix")], [name("mm")]),
            helper.make_node("Add", [name("mm"), name("mix_b")], [name("mixed")]),
            helper.make_node("Transpose", [name("mixed")], [name("back")], perm=[0, 2, 1]),
            helper.make_node("Reshape", [name("back"), "flat"], [name("flat")]),
            helper.make_node("Mul", [name("flat"), name("scale")], [name("scaled")]),
            helper.make_node("Reshape", [name("scaled"), "unflat"], [name("unflat")]),
            helper.make_node("Add", [x, name("unflat")], [name("out")]),
        ]
        x = name("out")
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    graph = helper.make_graph(
        nodes,
        "streaming",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, t])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, t])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--optimize", type=int, default=1, help="prepare(..., optimize=bool(N))")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.threads > 0:
        cpu_threads.set_num_threads(args.threads)
    print(f"{setting.describe(args.threads or 'default', False)}; onnxruntime {ort.__version__}")
    model = streaming_model(args.blocks)
    n_nodes = len(model.graph.node)
    x = np.random.default_rng(1).standard_normal((1, CHANNELS, FRAMES)).astype(np.float32)
    rep = prepare(model, optimize=bool(args.optimize))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    ours = rep.run([x])[0].numpy()
    ref = sess.run(None, {"x": x})[0]
    err = float(np.abs(ours - ref).max() / max(float(np.abs(ref).max()), 1e-30))
    # in turns, four stretches each, so that a change in the machine's load falls on both
    times = interleaved_seconds(
        {"singa": lambda: rep.run([x]), "ort": lambda: sess.run(None, {"x": x})},
        args.repeat,
        4,
        0.0 if args.threads == 1 else 0.5,
    )
    t_singa, t_ort = (statistics.median(times[k]) for k in ("singa", "ort"))
    us_singa, us_ort = t_singa * 1e6 / n_nodes, t_ort * 1e6 / n_nodes
    print(f"{n_nodes} nodes, input {tuple(x.shape)}, max rel err {err:.1e}")
    print(f"{'':<12}{'us / node':>10}{'us / run':>11}")
    print(f"{'singa_lite':<12}{us_singa:>10.2f}{t_singa * 1e6:>11.1f}")
    print(f"{'onnxruntime':<12}{us_ort:>10.2f}{t_ort * 1e6:>11.1f}")
    print(f"ratio {us_singa / us_ort:.2f} (singa_lite / onnxruntime)")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.repeat):
            rep.run([x])
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()

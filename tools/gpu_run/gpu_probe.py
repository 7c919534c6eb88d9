#!/usr/bin/env python3
"""First-GPU-run probe for singa_lite: one check per finding of ../shared/notes/gpu.md.

Run from the repository root:  python3 gpu_probe.py [--cpu] [--budget 90]

Each check prints one line ``CHECK <id> <verdict> <detail>``. A check states what reading the
code predicted ("ok" or "bug"); the verdicts are PASS (predicted ok, is ok), CONFIRMED
(predicted bug, reproduced), FAIL (predicted ok, broke: a new finding), NOT-REPRODUCED
(predicted bug, did not happen: the prediction was wrong) and SKIP. ``--cpu`` runs every check that
does not need CuPy on the CPU device: a dry run that proves the probe itself works.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import math
import os
import sys
import tempfile
import time
import traceback
from typing import Any, Callable

import numpy as np

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "benchmarks"), os.path.join(os.getcwd(), "tests")]

from singa_lite import autograd, device, ops, opt, tensor  # noqa: E402

ARGS = argparse.Namespace(cpu=False, budget=90.0)
RESULTS: list[tuple[str, str, str]] = []
T_START = time.perf_counter()


# -- harness -----------------------------------------------------------------------------------
def gpu() -> Any:
    return device.create_cpu_device() if ARGS.cpu else device.create_cuda_gpu()


def cpu() -> Any:
    return device.create_cpu_device()


def xp() -> Any:
    return gpu().xp


def sync() -> None:
    if not ARGS.cpu:
        xp().cuda.Device().synchronize()


def check(cid: str, predicted: str, needs_cupy: bool = False) -> Callable:
    """Register and run a check at once; the function returns a detail string or raises."""

    def deco(fn: Callable[[], str]) -> Callable:
        if needs_cupy and ARGS.cpu:
            RESULTS.append((cid, "SKIP", "needs CuPy"))
            print(f"CHECK {cid} SKIP needs CuPy", flush=True)
            return fn
        if time.perf_counter() - T_START > ARGS.budget:
            RESULTS.append((cid, "SKIP", "probe time budget spent"))
            print(f"CHECK {cid} SKIP budget", flush=True)
            return fn
        t0 = time.perf_counter()
        try:
            detail = fn() or ""
            ok = True
        except Exception as e:  # noqa: BLE001 (every failure is a result here)
            tb = traceback.extract_tb(e.__traceback__)
            site = next((f"{os.path.relpath(f.filename)}:{f.lineno}" for f in reversed(tb) if "singa_lite" in f.filename), "")
            detail = f"{type(e).__name__}: {str(e)[:300]} @ {site or tb[-1].filename + ':' + str(tb[-1].lineno)}"
            ok = False
        verdict = {("ok", True): "PASS", ("ok", False): "FAIL", ("bug", False): "CONFIRMED", ("bug", True): "NOT-REPRODUCED"}[
            (predicted, ok)
        ]
        if not ok and detail.split(":")[0] in ("DeviceError", "ModuleNotFoundError", "ImportError"):
            verdict = "SETUP-ERROR"  # no GPU / no package: says nothing about the finding
        dt = time.perf_counter() - t0
        RESULTS.append((cid, verdict, detail))
        print(f"CHECK {cid} {verdict} ({dt:.1f}s) {detail}", flush=True)
        return fn

    return deco


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {got.shape} != {want.shape}")
    err = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
    if not err <= rtol:
        raise AssertionError(f"{what}: rel err {err:.2e} > {rtol:.0e}")
    return err


def grads_of(fn: Callable, arrays: list[np.ndarray], dev: Any) -> tuple[np.ndarray, list[np.ndarray]]:
    """Forward output and the gradients of sum(out * w) w.r.t. every float input, on ``dev``."""
    autograd.training = True
    try:
        ts = []
        for a in arrays:
            t = tensor.from_numpy(a, dev)
            t.requires_grad = t.stores_grad = a.dtype.kind == "f"
            ts.append(t)
        y = fn(*ts)
        w = tensor.from_numpy(np.random.default_rng(1).standard_normal(y.shape).astype(y.dtype), dev)
        g = autograd.gradients(ops.reduce_sum(ops.mul(y, w)))
        return tensor.to_numpy(y), [tensor.to_numpy(g[t]) if t in g else None for t in ts]
    finally:
        autograd.training = False


def cross_device(fn: Callable, arrays: list[np.ndarray], rtol: float = 1e-5) -> str:
    y0, g0 = grads_of(fn, arrays, cpu())
    y1, g1 = grads_of(fn, arrays, gpu())
    errs = [assert_close(y1, y0, rtol, "forward")]
    for i, (a, b) in enumerate(zip(g1, g0)):
        if b is not None:
            errs.append(assert_close(a, b, rtol, f"grad {i}"))
    return f"max rel err {max(errs):.1e}"


class SyncSites:
    """Counts Python-level device->host reads (bool/int/float/item/get/tolist/asnumpy) by the
    innermost singa_lite frame that caused them. C-level syncs inside CuPy are not seen."""

    NAMES = ("__bool__", "__int__", "__float__", "__index__", "__complex__", "item", "get", "tolist")

    def __enter__(self) -> SyncSites:
        import cupy

        self.cp, self.saved, self.sites, self.depth = cupy, {}, collections.Counter(), 0
        for n in self.NAMES:
            orig = getattr(cupy.ndarray, n, None)
            if orig is None:
                continue
            self.saved[n] = orig

            def wrap(arr: Any, *a: Any, _orig: Any = orig, _n: str = n, **k: Any) -> Any:
                self._record(_n)
                self.depth += 1
                try:
                    return _orig(arr, *a, **k)
                finally:
                    self.depth -= 1

            setattr(cupy.ndarray, n, wrap)
        self.saved_asnumpy = cupy.asnumpy

        def asnumpy(a: Any, *args: Any, **kw: Any) -> Any:
            self._record("asnumpy")
            self.depth += 1
            try:
                return self.saved_asnumpy(a, *args, **kw)
            finally:
                self.depth -= 1

        cupy.asnumpy = asnumpy
        return self

    def _record(self, how: str) -> None:
        if self.depth:
            return
        stack = traceback.extract_stack()[:-2]
        site = next(
            (f"{f.filename.split('singa_lite/', 1)[-1]}:{f.lineno} {f.name}" for f in reversed(stack)
             if "/singa_lite/" in f.filename and "/tests/" not in f.filename),
            f"{os.path.basename(stack[-1].filename)}:{stack[-1].lineno}",
        )
        self.sites[f"{site} [{how}]"] += 1

    def __exit__(self, *exc: Any) -> None:
        for n, orig in self.saved.items():
            if n in vars(self.cp.ndarray):
                delattr(self.cp.ndarray, n)  # back to the inherited slot
        self.cp.asnumpy = self.saved_asnumpy


def bench_model(name: str, dev: Any, use_graph: bool = False) -> tuple[Any, Any, Any]:
    import training as T  # benchmarks/training.py

    shape, _ = T.SHAPES[name]
    batch = shape[1] if name == "lstm" else shape[0]
    rng = np.random.default_rng(0)
    m = T.Classifier(T.SINGA_NETS[name]())
    m.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    tx = tensor.from_numpy(rng.standard_normal(shape).astype(np.float32), dev)
    ty = tensor.from_numpy(rng.integers(0, 10, batch).astype(np.int32), dev)
    m.compile([tx], is_train=True, use_graph=use_graph)
    return m, tx, ty


def per_call_us(fn: Callable[[], Any], n: int = 200) -> float:
    for _ in range(5):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - t0) / n * 1e6


# -- checks --------------------------------------------------------------------------------------
def run_checks() -> None:  # noqa: C901, PLR0915 (one flat list of checks reads best)
    rng = np.random.default_rng(0)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731

    @check("C01-env", "ok")
    def _() -> str:
        if ARGS.cpu:
            return f"numpy {np.__version__} (cpu dry run)"
        import cupy as cp
        from singa_lite import backend

        p = cp.cuda.runtime.getDeviceProperties(0)
        acc = getattr(cp._core, "get_routine_accelerators", lambda: "?")()
        return (
            f"cupy {cp.__version__} numpy {np.__version__} runtime {cp.cuda.runtime.runtimeGetVersion()} "
            f"driver {cp.cuda.runtime.driverGetVersion()} nvrtc {cp.cuda.nvrtc.getVersion()} "
            f"gpu {p['name'].decode()} cc {p['major']}.{p['minor']} backends {backend.available()} "
            f"accelerators {acc} CUPY_TF32={os.environ.get('CUPY_TF32')} "
            f"NEP50: f32+np.float64 -> {(cp.ones(2, 'f4') + np.float64(1)).dtype}"
        )

    @check("C01b-first-step-latency-cold-kernels", "ok", needs_cupy=True)
    def _() -> str:
        cache = os.environ.get("CUPY_CACHE_DIR", os.path.expanduser("~/.cupy/kernel_cache"))
        n0 = sum(len(f) for _, _, f in os.walk(cache)) if os.path.isdir(cache) else 0
        m, tx, ty = bench_model("resnet20", gpu())
        t0 = time.perf_counter()
        m(tx, ty)
        sync()
        t1 = time.perf_counter()
        m(tx, ty)
        sync()
        t2 = time.perf_counter()
        n1 = sum(len(f) for _, _, f in os.walk(cache)) if os.path.isdir(cache) else 0
        return f"resnet20 first step {(t1 - t0) * 1e3:.0f} ms, second {(t2 - t1) * 1e3:.1f} ms; kernel cache {n0} -> {n1} files"

    geos = [  # (x shape, W shape, stride, padding, dilation, group)
        ((2, 3, 9, 8), (4, 3, 3, 3), 1, 1, 1, 1),
        ((2, 4, 11, 10), (6, 2, 3, 2), 2, (1, 0, 2, 1), 2, 2),
        ((2, 4, 7, 7), (4, 1, 3, 3), 1, 1, 1, 4),  # depthwise
        ((1, 3, 8, 8), (5, 3, 1, 1), 1, 0, 1, 1),
    ]
    for i, (xs, ws, s, p, d, g) in enumerate(geos):

        @check(f"C02-conv2d-geo{i}", "ok")
        def _(xs: tuple = xs, ws: tuple = ws, s: Any = s, p: Any = p, d: Any = d, g: int = g) -> str:
            return cross_device(lambda x, W, b: ops.conv2d(x, W, b, s, p, d, g), [f32(*xs), f32(*ws), f32(ws[0])])

    @check("C02-conv2d-inference-batch1-band", "ok")
    def _() -> str:
        x, W, b = f32(1, 8, 40, 40), f32(16, 8, 3, 3), f32(16)
        ref = ops.conv2d(*(tensor.from_numpy(a, cpu()) for a in (x, W, b)), padding=1)
        got = ops.conv2d(*(tensor.from_numpy(a, gpu()) for a in (x, W, b)), padding=1)
        return f"rel err {assert_close(tensor.to_numpy(got), tensor.to_numpy(ref), 1e-5, 'conv_one_image'):.1e}"

    @check("C03-maxpool-avgpool-ceil-pad", "ok")
    def _() -> str:
        a = cross_device(lambda x: ops.max_pool2d(x, 3, 2, 1, ceil_mode=True), [f32(2, 3, 9, 9)])
        b = cross_device(lambda x: ops.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), [f32(2, 3, 9, 9)])
        return f"max {a}; avg {b}"

    @check("C04-batchnorm-train", "ok")
    def _() -> str:
        c = 5
        run_m, run_v = np.zeros(c, np.float32), np.ones(c, np.float32)

        def bn(x: Any, sc: Any, bi: Any) -> Any:
            dev = x.device
            return ops.batchnorm_2d(x, sc, bi, tensor.from_numpy(run_m, dev), tensor.from_numpy(run_v, dev))

        return cross_device(bn, [f32(4, c, 6, 6), f32(c), f32(c)], 1e-4)

    for dt in ("float32", "float64", "float16"):

        @check(f"C05-getitem-intarray-grad-{dt}", "ok")
        def _(dt: str = dt) -> str:
            idx = np.array([0, 2, 2, 1, 0])
            return cross_device(lambda x: x[idx], [f32(4, 3).astype(dt)], 1e-2 if dt == "float16" else 1e-6)

    @check("C06-gather-embedding-grad", "ok")
    def _() -> str:
        idx = rng.integers(0, 50, (8, 7))
        return cross_device(lambda E: ops.gather(E, 0, idx), [f32(50, 16)])

    @check("C07-scatter-elements-mul", "ok")
    def _() -> str:
        x, u = f32(4, 3), f32(2, 3)
        idx = np.array([[0, 1, 2], [3, 1, 0]])
        out = ops.scatter_elements(tensor.from_numpy(x, gpu()), idx, tensor.from_numpy(u, gpu()), 0, "mul")
        return f"ok, shape {out.shape}"

    @check("C08-scatter-elements-duplicates-last-write", "ok")
    def _() -> str:
        x, u = np.zeros((3, 4096), np.float32), np.arange(2 * 4096, dtype=np.float32).reshape(2, 4096)
        idx = np.zeros((2, 4096), np.int64)  # both rows write row 0: NumPy keeps the last (row 1)
        want = ops.scatter_elements(tensor.from_numpy(x, cpu()), idx, tensor.from_numpy(u, cpu())).numpy()
        bad = 0
        for _ in range(20):
            got = ops.scatter_elements(tensor.from_numpy(x, gpu()), idx, tensor.from_numpy(u, gpu())).numpy()
            bad += int((got != want).sum())
        if bad:
            raise AssertionError(f"{bad} elements differ from NumPy's last-write-wins over 20 runs")
        return "matched NumPy in 20 runs"

    @check("C09-onnx-topk-largest-float", "ok")
    def _() -> str:
        import onnx
        from onnx import TensorProto, helper

        from singa_lite import sonnx

        node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1)
        graph = helper.make_graph(
            [node], "topk",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6])],
            [helper.make_tensor_value_info("v", TensorProto.FLOAT, [3, 2]),
             helper.make_tensor_value_info("i", TensorProto.INT64, [3, 2])],
            [helper.make_tensor("k", TensorProto.INT64, [1], [2])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        onnx.checker.check_model(model)
        x = f32(3, 6)
        v, i = sonnx.prepare(model, gpu()).run([x])
        want = np.argsort(-x, axis=-1, kind="stable")[:, :2]
        np.testing.assert_array_equal(i.numpy(), want)
        return "matches a stable descending argsort"

    @check("C10-nccl-one-rank-all-reduce", "ok", needs_cupy=True)
    def _() -> str:
        from singa_lite.dist import NcclCommunicator, nccl_unique_id

        cp = xp()
        nc = NcclCommunicator(1, nccl_unique_id(), 0)
        a = cp.arange(6, dtype=cp.float32)
        nc.all_reduce(a)
        nc.wait()
        return f"ok {cp.asnumpy(a).tolist()}"

    @check("C11-setitem-host-array-into-gpu-tensor", "ok", needs_cupy=True)
    def _() -> str:
        t = tensor.zeros((2, 3), gpu())
        t[0] = np.ones(3, np.float32)
        return "ok"

    @check("C12-from_numpy-of-a-cupy-array", "ok", needs_cupy=True)
    def _() -> str:
        t = tensor.from_numpy(xp().ones(3, dtype=np.float32), gpu())
        return f"ok {t.device}"

    @check("C13-onnx-run-with-cupy-input", "ok", needs_cupy=True)
    def _() -> str:
        from onnx import TensorProto, helper

        from singa_lite import sonnx

        g = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])], "relu",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        (y,) = sonnx.prepare(m, gpu()).run([xp().ones((2, 3), dtype=np.float32)])
        return f"ok {y.shape}"

    @check("C14-host-syncs-per-training-step", "ok", needs_cupy=True)
    def _() -> str:
        out = []
        for name in ("mlp", "cnn", "resnet20", "lstm"):
            m, tx, ty = bench_model(name, gpu())
            m(tx, ty)
            with SyncSites() as s:
                m(tx, ty)
            out.append(f"{name}: {sum(s.sites.values())} {dict(s.sites)}")
        # an embedding model: Gather's range check
        E = tensor.from_numpy(f32(100, 8), gpu())
        E.requires_grad = E.stores_grad = True
        idx = tensor.from_numpy(rng.integers(0, 100, (4, 5)).astype(np.int64), gpu())
        autograd.training = True
        with SyncSites() as s:
            loss = ops.reduce_sum(ops.gather(E, 0, idx))
            autograd.gradients(loss)
        autograd.training = False
        out.append(f"gather: {sum(s.sites.values())} {dict(s.sites)}")
        for o in out:
            print(f"    host reads, {o}", flush=True)
        total = sum(int(o.split(":")[1].split()[0]) for o in out)
        if total:
            raise AssertionError("; ".join(out))
        return "no host reads"

    @check("C15-graph-mode-captures-a-cuda-graph", "ok", needs_cupy=True)
    def _() -> str:
        """Graph mode on the GPU: each benchmark model's step captured as a CUDA graph, and 6
        captured steps bitwise equal to eager ones."""
        out = []
        for name in ("mlp", "cnn", "resnet20", "lstm"):
            me, txe, tye = bench_model(name, gpu(), use_graph=False)
            mg, txg, tyg = bench_model(name, gpu(), use_graph=True)
            mg.set_states(me.get_states())
            for _ in range(8):
                me(txe, tye)
                mg(txg, tyg)
            g = mg._graph
            if g is None or g.cuda_graph is None:
                raise AssertionError(f"{name}: not captured ({g.capture_refusal if g else 'no graph'})")
            diff = [k for k, t in me.get_params().items() if not np.array_equal(t.numpy(), mg.get_params()[k].numpy())]
            if diff:
                raise AssertionError(f"{name}: params differ bitwise from eager: {diff[:3]}")
            out.append(name)
        return f"captured and bitwise equal to eager after 8 steps: {', '.join(out)}"

    @check("C16-counter-rng-cpu-gpu-bits", "ok")
    def _() -> str:
        from singa_lite.backend.counter_rng import CounterRNG

        a, b = CounterRNG(np, 123), CounterRNG(xp(), 123)
        u0, u1 = a.random((1000,)), b.random((1000,))
        u1 = u1 if ARGS.cpu else xp().asnumpy(u1)
        np.testing.assert_array_equal(u0, u1)
        n0, n1 = a.standard_normal((100000,)), b.standard_normal((100000,))
        n1 = n1 if ARGS.cpu else xp().asnumpy(n1)
        ulp = np.abs(n0 - n1) / np.spacing(np.abs(n0))
        f0 = n0.astype(np.float32)
        f1 = n1.astype(np.float32)
        return (f"uniform bitwise equal; normal float64 max {ulp.max():.0f} ulp, "
                f"{int((n0 != n1).sum())} of 1e5 differ; as float32 {int((f0 != f1).sum())} differ")

    for name in ("mlp", "cnn", "resnet20", "lstm"):

        @check(f"C17-train-parity-cpu-gpu-{name}", "ok")
        def _(name: str = name) -> str:
            # Tolerance per param from the CPU's own sensitivity: the same steps with the input
            # scaled by 1 + 2^-23 (BatchNorm's scale/bias gradients are sums that nearly cancel,
            # so float32 rounding alone moves them by ~1e-2 after 3 steps).
            mc, txc, tyc = bench_model(name, cpu())
            mp, txp, typ = bench_model(name, cpu())
            mg, txg, tyg = bench_model(name, gpu())
            mg.set_states(mc.get_states())
            mp.set_states(mc.get_states())
            txp.copy_from_numpy(txc.numpy() * np.float32(1 + 2**-23))
            for _ in range(3):
                mc(txc, tyc)
                mp(txp, typ)
                mg(txg, tyg)
            pc, pp, pg = mc.get_params(), mp.get_params(), mg.get_params()
            errs, tols = {}, {}
            for k in pc:
                c_np = tensor.to_numpy(pc[k])
                base = float(np.linalg.norm(tensor.to_numpy(pp[k]) - c_np) / max(np.linalg.norm(c_np), 1e-30))
                tols[k] = max(1e-3, 10 * base)
                errs[k] = assert_close(tensor.to_numpy(pg[k]), c_np, tols[k], k)
            worst = max(errs, key=lambda k: errs[k] / tols[k])
            return f"3 SGD steps, worst param {worst} rel err {errs[worst]:.1e} (tolerance {tols[worst]:.1e})"

    @check("C18-graph-mode-equals-eager-bitwise", "ok")
    def _() -> str:
        me, txe, tye = bench_model("cnn", gpu(), use_graph=False)
        mg, txg, tyg = bench_model("cnn", gpu(), use_graph=True)
        mg.set_states(me.get_states())
        for _ in range(5):
            me(txe, tye)
            mg(txg, tyg)
        diff = [k for k, t in me.get_params().items() if not np.array_equal(t.numpy(), mg.get_params()[k].numpy())]
        if diff:
            raise AssertionError(f"params differ bitwise after 5 steps: {diff[:4]}")
        return "5 steps, bitwise equal"

    @check("C19-checkpoint-gpu-save-load-cpu-and-gpu", "ok")
    def _() -> str:
        m, tx, ty = bench_model("cnn", gpu())
        m(tx, ty)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ck.h5")
            t0 = time.perf_counter()
            m.save_states(path)
            t_save = time.perf_counter() - t0
            mb = os.path.getsize(path) / 2**20
            m2, *_ = bench_model("cnn", gpu())
            t0 = time.perf_counter()
            m2.load_states(path)
            sync()
            t_load = time.perf_counter() - t0
            m3, *_ = bench_model("cnn", cpu())
            m3.load_states(path)
        for k, t in m.get_params().items():
            np.testing.assert_array_equal(t.numpy(), m2.get_params()[k].numpy())
            np.testing.assert_array_equal(t.numpy(), m3.get_params()[k].numpy())
        return f"{mb:.1f} MiB: save {t_save * 1e3:.0f} ms, load to GPU {t_load * 1e3:.0f} ms; CPU load equal"

    @check("C20-dispatch-overheads", "ok")
    def _() -> str:
        dev = gpu()
        x = tensor.from_numpy(f32(32, 16, 32, 32), dev)
        r_op = per_call_us(lambda: ops.relu(x))
        r_raw = per_call_us(lambda: dev.xp.maximum(x.data, 0))
        r_scalar = per_call_us(lambda: x * 2.0)
        a = x.data.reshape(32, 16, -1)
        ein = per_call_us(lambda: dev.xp.einsum("ncs,ncs->c", a, a), 50)
        red = per_call_us(lambda: (a * a).sum(axis=(0, 2)), 50)
        from singa_lite.backend.counter_rng import CounterRNG

        rg = CounterRNG(dev.xp, 0)
        n = 1 << 22
        t_rng = per_call_us(lambda: rg.random((n,), np.float32), 20)
        t_ref = per_call_us(lambda: dev.xp.random.random(n, dtype=np.float32) if not ARGS.cpu else None, 20)
        p = tensor.from_numpy(f32(256, 256), dev)
        p.name = "w"
        gr = tensor.from_numpy(f32(256, 256), dev)
        adam = opt.Adam()
        t_adam = per_call_us(lambda: adam.apply("w", p, gr), 100)
        return (f"relu op {r_op:.1f} us vs raw {r_raw:.1f} us; x*2.0 {r_scalar:.1f} us; BN stat einsum "
                f"{ein:.0f} us vs (a*a).sum {red:.0f} us; CounterRNG 4M floats {t_rng:.0f} us vs "
                f"cupy.random {t_ref:.0f} us; Adam.apply 256x256 {t_adam:.0f} us")

    @check("C21-onnx-resnet50-gpu-batch1", "ok")
    def _() -> str:
        import glob

        import onnx

        from singa_lite import sonnx

        paths = glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_resnet50.onnx"))
        if not paths:
            return "no light_resnet50.onnx in this onnx wheel"
        model = onnx.load(paths[0])
        x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
        # The light models' weights give logits of ~1e19, all equal on the CPU: the softmax of
        # such numbers is decided by last-bit differences, so the logits are compared instead.
        logits = [n for n in model.graph.node if n.op_type == "Softmax"][-1].input[0]
        ref = sonnx.prepare(model, cpu()).run([x], aux_output=[logits])[1].numpy()
        rep = sonnx.prepare(model, gpu())
        got = rep.run([x], aux_output=[logits])[1].numpy()
        err = assert_close(got, ref, 1e-4, "resnet50 logits")
        ts = []
        for _ in range(6):
            t0 = time.perf_counter()
            rep.run([x])[0].numpy()
            ts.append(time.perf_counter() - t0)
        syncs = "?"
        if not ARGS.cpu:
            with SyncSites() as s:
                rep.run([x])[0].numpy()
            syncs = f"{sum(s.sites.values())} host reads {dict(s.sites)}"
        return f"rel err vs CPU {err:.1e}; median {sorted(ts)[3] * 1e3:.1f} ms; {syncs}"

    @check("C22-device-sync-on-a-user-stream", "ok", needs_cupy=True)
    def _() -> str:
        cp = xp()
        s = cp.cuda.Stream(non_blocking=True)
        a = cp.ones((4096, 4096), dtype=cp.float32)
        with s:
            for _ in range(20):
                a = a @ a * 1e-4
            gpu().Sync()
            done = s.done
        s.synchronize()
        if not done:
            raise AssertionError("Device.Sync() returned while work queued on the current (non-default) stream was still running")
        return "Device.Sync() waited for the current stream"

    @check("C24-load-kernels-compiled-on-a-cpu-machine", "ok", needs_cupy=True)
    def _() -> str:
        """im2col built here by NVRTC 12.9 / 13.5 without a GPU (compile_check.py --emit): does the
        device's driver load the cubins and JIT the PTX, and do they compute im2col?"""
        import glob

        cp = xp()
        C, H, W, kh, kw, sh, sw, ph, pw, dh, dw = 3, 9, 8, 3, 3, 2, 1, 1, 1, 1, 2
        Ho, Wo = (H + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (W + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        x = f32(C, H, W)
        xp_ = np.pad(x, ((0, 0), (ph, ph), (pw, pw)))
        want = np.stack([xp_[:, i * dh : i * dh + sh * (Ho - 1) + 1 : sh, j * dw : j * dw + sw * (Wo - 1) + 1 : sw]
                         for i in range(kh) for j in range(kw)], axis=1).reshape(C * kh * kw, Ho * Wo)
        here = os.path.dirname(os.path.abspath(__file__))
        out = []
        paths = sorted(glob.glob(os.path.join(here, "kernels", "im2col_*")))
        if not paths:
            return "no prebuilt kernels beside the probe (tests/test_kernel_compile.py checks the sources)"
        for path in paths:
            try:
                fn = cp.RawModule(path=path).get_function("im2col_nchw")
                col = cp.empty((C * kh * kw, Ho * Wo), cp.float32)
                args = (cp.asarray(x), col, *(np.int32(v) for v in (C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo)))
                fn((8,), (128,), args)
                np.testing.assert_array_equal(cp.asnumpy(col), want)
                out.append(f"{os.path.basename(path)}: ok")
            except Exception as e:  # noqa: BLE001
                out.append(f"{os.path.basename(path)}: {type(e).__name__}: {str(e)[:80]}")
        if not out:
            return "no kernels/ folder beside the probe"
        if any(": ok" not in o for o in out if "nvrtc12" in o or "sm_90" in o):
            raise AssertionError("; ".join(out))
        return "; ".join(out)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--cpu", action="store_true", help="dry run on the CPU device (checks that need CuPy skip)")
    p.add_argument("--budget", type=float, default=90.0, help="seconds after which remaining checks skip")
    p.parse_args(namespace=ARGS)
    if not ARGS.cpu and device.get_num_gpus() == 0:
        from singa_lite.backend import cupy as cupy_backend

        print(f"NO GPU: {cupy_backend.UNAVAILABLE_REASON}; nothing to probe (use --cpu for a dry run)")
        return 2
    run_checks()
    print("\nverdict counts:", dict(collections.Counter(v for _, v, _ in RESULTS)))
    for cid, v, d in RESULTS:
        if v in ("FAIL", "NOT-REPRODUCED"):
            print(f"  ATTENTION {cid} {v}: {d[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The CUDA kernels of the CuPy backend, checked without a GPU.

Compile checks: every source under ``singa_lite/backend/kernels`` goes through NVRTC (the
``cuda-bindings`` and NVRTC wheels of the ``gpu-check`` extra) for sm_80 and sm_90 with the
options CuPy's ``RawModule`` compiles it with and every template instantiation the loader
launches; a compile error or a register spill fails. They skip, saying why, only where those
wheels are missing.

Loader checks: ``backend/cupy_kernels.py``'s pure-Python part (the switch, the layout test,
launch sizes, argument packing, the per-device cache) against a recording stand-in for CuPy.
Whether the kernels compute what the plain ``xp`` code computes is checked on a GPU, by the
device-parametrised tests of the pools, the optimizers, the losses, the convolutions and
``ops.bias_activation`` (each with the kernels switched on and off).
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import numpy as np
import pytest

from singa_lite.backend import cupy_kernels as ck

ARCHS = ("sm_80", "sm_90")
CUPY_ADDS = ("-ftz=true", "--device-as-default-execution-space")
"""What CuPy 14's RawModule adds to our ``OPTIONS`` besides ``-arch`` (cupy/cuda/compiler.py)."""

BROKEN = 'extern "C" __global__ void broken(float* y) { y[threadIdx.x] = not_declared; }\n'

# A kernel that cannot fit 24 registers: proves that the spill check can fail.
HUNGRY = r"""
extern "C" __global__ void hungry(const float* x, float* y, int n) {
    float v[48];
    #pragma unroll
    for (int i = 0; i < 48; ++i) v[i] = x[threadIdx.x + i * n];
    float s = 0.f;
    #pragma unroll
    for (int i = 0; i < 48; ++i) s += v[i] * v[47 - i] * v[(i * 7) % 48];
    y[threadIdx.x] = s;
}
"""


# -- compiling with NVRTC ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def nvrtc() -> Any:
    why = "the gpu-check extra is not installed (pip install -e '.[gpu-check]')"
    mod = pytest.importorskip("cuda.bindings.nvrtc", reason=why)
    try:
        err, *_ = mod.nvrtcVersion()
    except Exception as e:  # cuda-bindings without the NVRTC library wheel
        pytest.skip(f"NVRTC library not found ({e}): {why}")
    assert err == mod.nvrtcResult.NVRTC_SUCCESS
    return mod


def _checked(nvrtc: Any, result: tuple, what: str) -> Any:
    err, *rest = result
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, f"{what}: {err}"
    return rest[0] if len(rest) == 1 else tuple(rest)


def compile_cuda(
    nvrtc: Any, text: str, name: str, target: str, expressions: tuple = (), extra: tuple = ()
) -> dict:
    """Compile ``text`` for ``target`` (sm_XX: a cubin, compute_XX: PTX only) as CuPy does.

    Returns ``ok``, the compile ``log`` (with ptxas's ``-v`` report for sm targets), the
    ``lowered`` (mangled) name of each name expression and, for PTX targets, the ``ptx``.
    """
    prog = _checked(nvrtc, nvrtc.nvrtcCreateProgram(text.encode(), name.encode(), 0, [], []), "create")
    try:
        for e in expressions:
            _checked(nvrtc, nvrtc.nvrtcAddNameExpression(prog, e.encode()), f"name expression {e}")
        options = (*ck.OPTIONS, *CUPY_ADDS, f"--gpu-architecture={target}", *extra)
        if target.startswith("sm_"):
            options += ("--ptxas-options=-v",)
        encoded = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        log = bytearray(max(_checked(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog), "log size"), 1))
        _checked(nvrtc, nvrtc.nvrtcGetProgramLog(prog, log), "log")
        out: dict = {"ok": err == nvrtc.nvrtcResult.NVRTC_SUCCESS, "log": log.decode().rstrip("\x00")}
        if out["ok"]:
            out["lowered"] = {
                e: _checked(nvrtc, nvrtc.nvrtcGetLoweredName(prog, e.encode()), e).decode()
                for e in expressions
            }
            if target.startswith("compute_"):
                ptx = bytearray(_checked(nvrtc, nvrtc.nvrtcGetPTXSize(prog), "PTX size"))
                _checked(nvrtc, nvrtc.nvrtcGetPTX(prog, ptx), "PTX")
                out["ptx"] = ptx.decode().rstrip("\x00")
        return out
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def ptxas_report(log: str) -> dict[str, dict[str, int]]:
    """Per entry function of a ``ptxas -v`` log: registers, spill stores, spill loads, stack."""
    report: dict[str, dict[str, int]] = {}
    entry = None
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '([^']+)'", line):
            entry = m.group(1)
            report[entry] = {}
        elif entry and (
            m := re.search(
                r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line
            )
        ):
            report[entry].update(stack=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        elif entry and (m := re.search(r"Used (\d+) registers", line)):
            report[entry]["registers"] = int(m[1])
    return report


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(ck.SOURCES))
def test_kernel_source_compiles_without_spills(nvrtc, name, arch):
    expressions = ck.SOURCES[name]
    result = compile_cuda(nvrtc, ck.source(name), name, arch, expressions)
    assert result["ok"], f"{name} does not compile for {arch}:\n{result['log']}"
    report = ptxas_report(result["log"])
    for expression, lowered in result["lowered"].items():
        stats = report.get(lowered)
        assert stats and "registers" in stats and "spill_stores" in stats, (
            f"no ptxas report for {expression} ({lowered}) in:\n{result['log']}"
        )
        print(f"{arch} {expression}: {stats['registers']} registers, {stats['stack']} B stack")
        assert stats["spill_stores"] == 0 and stats["spill_loads"] == 0, (
            f"{expression} spills on {arch}: {stats}"
        )


@pytest.mark.parametrize("arch", ARCHS)
def test_optimizer_kernels_contract_nothing_into_fma(nvrtc, arch):
    # The fused updates promise the rounding of the op-by-op sequence: no fused multiply-add.
    result = compile_cuda(
        nvrtc, ck.source("optim.cu"), "optim.cu", arch.replace("sm_", "compute_"), ck.SOURCES["optim.cu"]
    )
    assert result["ok"], result["log"]
    assert not re.search(r"^\s*fma\.", result["ptx"], re.MULTILINE)


def test_broken_source_is_refused(nvrtc):
    result = compile_cuda(nvrtc, BROKEN, "broken.cu", "sm_90")
    assert not result["ok"] and "not_declared" in result["log"]


def test_spills_are_seen(nvrtc):
    result = compile_cuda(nvrtc, HUNGRY, "hungry.cu", "sm_90", extra=("--maxrregcount=24",))
    assert result["ok"], result["log"]
    assert ptxas_report(result["log"])["hungry"]["spill_stores"] > 0


# -- the sources and the loader's tables -----------------------------------------------------
def test_every_source_and_kernel_is_listed():
    folder = resources.files("singa_lite.backend").joinpath("kernels")
    on_disk = sorted(f.name for f in folder.iterdir() if f.name.endswith(".cu"))
    assert on_disk == sorted(ck.SOURCES)
    for name, expressions in ck.SOURCES.items():
        text = ck.source(name)
        assert "singa_mul" in text  # the shared helpers come first
        kernels = set(re.findall(r"__global__\s+void\s+(\w+)", text))
        assert kernels == {e.split("<")[0] for e in expressions}, f"{name}: a kernel without instantiations"


# -- the loader against a recording stand-in for CuPy ------------------------------------------
class FakeDeviceArray:
    """A 0-d device array as ``backend.step_scalar`` returns it inside a capture."""

    def __init__(self, dtype: Any) -> None:
        self.dtype = np.dtype(dtype)

    def astype(self, dtype: Any) -> FakeDeviceArray:
        return FakeDeviceArray(dtype)


class FakeCupy:
    """NumPy for allocations; RawModule and the current device recorded, launches logged."""

    def __init__(self) -> None:
        self.device = 0
        self.modules: list[dict] = []
        self.launches: list[tuple] = []
        fake = self

        class Runtime:
            @staticmethod
            def getDevice() -> int:
                return fake.device

        class Cuda:
            runtime = Runtime

        self.cuda = Cuda

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    def RawModule(self, code: str, options: tuple, name_expressions: tuple) -> Any:
        record = {"code": code, "options": options, "names": name_expressions, "got": []}
        self.modules.append(record)
        fake = self

        class Module:
            @staticmethod
            def get_function(expression: str) -> Any:
                assert expression in name_expressions
                record["got"].append((fake.device, expression))
                return lambda grid, block, args: fake.launches.append((expression, grid, block, args))

        return Module


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(ck, "_modules", {})
    monkeypatch.setattr(ck, "_functions", {})
    monkeypatch.delenv(ck.ENV, raising=False)
    return FakeCupy()


def test_switch_and_usable(fake, monkeypatch):
    monkeypatch.delenv(ck.ENV, raising=False)
    assert not ck.enabled()  # off by default until a GPU run has checked them (ck._DEFAULT)
    monkeypatch.setenv(ck.ENV, "1")
    f32 = np.zeros((2, 3), np.float32)
    assert ck.usable(fake, f32, f32) and ck.usable(fake, f32.astype(np.float64))
    assert not ck.usable(np, f32)  # NumPy: the plain path, always
    assert not ck.usable(fake, f32.astype(np.float16))
    assert not ck.usable(fake, f32.T)  # not C-contiguous
    assert not ck.usable(fake, f32, f32.astype(np.float64))
    assert ck.usable(fake, f32, labels=np.zeros(2, np.int64))
    assert not ck.usable(fake, f32, labels=np.zeros(2, np.uint8))
    monkeypatch.setenv(ck.ENV, "0")
    assert not ck.enabled() and not ck.usable(fake, f32)
    monkeypatch.setenv(ck.ENV, "1")
    assert ck.enabled()


def test_compiled_once_per_source_kept_per_device(fake):
    p = np.zeros(10, np.float32)
    for device in (0, 0, 1):
        fake.device = device
        ck.sgd_update(
            fake, p, p, None, 0.1, weight_decay=0, momentum=0, undampened=None, nesterov=False, first=False
        )
    (module,) = fake.modules
    assert module["options"] == ck.OPTIONS and module["names"] == ck.SOURCES["optim.cu"]
    assert module["code"] == ck.source("optim.cu")
    assert module["got"] == [(0, "singa_sgd<float>"), (1, "singa_sgd<float>")]


def test_launch_sizes():
    assert ck.linear_grid(1) == ((1,), (256,))
    assert ck.linear_grid(257) == ((2,), (256,))
    assert ck.linear_grid(0) == ((1,), (256,))
    assert ck.linear_grid(10**12) == ((ck.MAX_BLOCKS,), (256,))
    assert [ck.row_block(c) for c in (1, 32, 33, 200, 256, 10**6)] == [32, 32, 64, 256, 256, 256]


def test_scalar_operands():
    assert ck.scalar_operand(np.float64(0.5), np.float32) == (0, 0.5)
    ptr, value = ck.scalar_operand(2, np.float64)
    assert type(ptr) is np.uint64 and type(value) is np.float64 and value == 2
    dev = FakeDeviceArray(np.float32)
    assert ck.scalar_operand(dev, np.float32) == (dev, 0)  # read by the kernel when it runs
    converted, _ = ck.scalar_operand(dev, np.float64)
    assert converted.dtype == np.float64


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sgd_arguments(fake, dtype):
    c = np.dtype(dtype).type
    p, g, buf = (np.zeros((3, 4), dtype) for _ in range(3))
    lr = FakeDeviceArray(dtype)
    ck.sgd_update(
        fake,
        p,
        g,
        buf,
        lr,
        weight_decay=c(0.1),
        momentum=c(0.9),
        undampened=c(0.7),
        nesterov=True,
        first=True,
    )
    ck.sgd_update(
        fake,
        p,
        g,
        None,
        c(0.5),
        weight_decay=c(0),
        momentum=c(0),
        undampened=None,
        nesterov=False,
        first=False,
    )
    (e1, grid, block, a1), (_, _, _, a2) = fake.launches
    assert e1 == f"singa_sgd<{'float' if dtype == np.float32 else 'double'}>"
    assert grid == (1,) and block == (256,)
    assert a1[:5] == (p, g, buf, lr, 0) and a1[5:8] == (c(0.1), c(0.9), c(0.7))
    assert a1[8] == 1 + 2 + 4 + 8 + 16 and a1[9] == 12
    assert a2[2] == 0 and a2[3] == 0 and a2[4] == c(0.5) and a2[7] == 1 and a2[8] == 0
    assert [type(a) for a in a1[4:]] == [np.dtype(dtype).type] * 4 + [np.int32, np.int64]


def test_adam_arguments(fake):
    p, g, m, v = (np.zeros(5, np.float64) for _ in range(4))
    c = np.float64
    betas = (c(0.9), c(0.1), c(0.999), c(0.001))
    step = FakeDeviceArray(np.float64)
    for decoupled in (False, True):
        ck.adam_update(
            fake, p, g, m, v, decay=c(0.99), bc2=c(0.5), step=step,
            weight_decay=c(0.01), betas=betas, epsilon=c(1e-8), decoupled=decoupled,
        )  # fmt: skip
    (_, _, _, a1), (_, _, _, a2) = fake.launches
    assert a1[:4] == (p, g, m, v) and a1[4:10] == (0, 0.99, 0, 0.5, step, 0)
    assert a1[10:16] == (0.01, *betas, 1e-8) and a1[16] == 1 and a1[17] == 5
    assert a2[16] == 2


def test_pool_arguments(fake):
    geometry = ck.pool_geometry((7, 6), (3, 3), (3, 2), (2, 2), (1, 0), (1, 1))
    assert geometry == (1, 7, 6, 1, 3, 3, 1, 3, 2, 1, 2, 2, 0, 1, 0, 1, 1, 1)
    assert all(type(v) is np.int32 for v in geometry)
    limits = ck.count_limits((7, 6), (1, 0), (1, 1), True)
    assert limits == (0, 0, 0, 1, 9, 7)
    assert ck.count_limits((7, 6), (1, 0), (1, 1), False) == (0, 1, 0, 1, 8, 6)
    x = np.zeros((2, 3, 7, 6), np.float32)
    y, arg = ck.max_pool_forward(fake, x, (3, 3), geometry, np.int32)
    assert y.shape == arg.shape == (2, 3, 3, 3) and arg.dtype == np.int32
    _, no_arg = ck.max_pool_forward(fake, x, (3, 3), geometry, None)
    dx = ck.max_pool_backward(fake, y, arg, x.shape, geometry, overlap=True)
    ck.avg_pool_forward(fake, x, (3, 3), geometry, limits)
    ck.avg_pool_backward(fake, y, x.shape, geometry, limits)
    names = [launch[0] for launch in fake.launches]
    assert names == [
        "singa_max_pool_fwd<float, int>",
        "singa_max_pool_fwd<float, signed char>",
        "singa_max_pool_bwd<float, int>",
        "singa_avg_pool_fwd<float>",
        "singa_avg_pool_bwd<float>",
    ]
    fwd, fwd0, bwd, avg, _ = (launch[3] for launch in fake.launches)
    assert no_arg is None and fwd0[2] == 0 and fwd[2] is arg and fwd[3] == 6 and fwd[4:] == geometry
    assert dx.shape == x.shape and bwd[3] == 1 and bwd[5:] == geometry
    assert avg[3:] == geometry + limits
    assert fake.launches[0][1] == ((2 * 3 * 9 + 255) // 256,)  # one thread per output
    with pytest.raises(ValueError, match="up to 3 spatial axes"):
        ck.pool_geometry((2,) * 4, (1,) * 4, (2,) * 4, (2,) * 4, (0,) * 4, (1,) * 4)


def test_softmax_ce_arguments(fake):
    x = np.zeros((5, 100), np.float32)
    labels = np.zeros(5, np.int64)
    p, loss = ck.softmax_ce_forward(fake, x, labels)
    assert p.shape == x.shape and loss.shape == (5,) and loss.dtype == np.float32
    name, grid, block, args = fake.launches[-1]
    assert name == "singa_softmax_ce_fwd<float, long long>" and grid == (5,) and block == (128,)
    assert args[4] == 100 and args[5] == 5
    dy = np.ones(1, np.float32)
    ck.softmax_ce_backward(fake, p, labels, dy)
    args = fake.launches[-1][3]
    assert args[2] is dy and args[3] == np.float32(5)  # the kernel divides dy by N
    ck.softmax_ce_backward(fake, p, labels, np.full(1, 3.0, np.float64))
    args = fake.launches[-1][3]  # another dtype: the scale is made first, in dy's dtype
    assert args[2].dtype == np.float32 and args[2] == np.float32(3.0 / 5) and args[3] == 1

"""Matrix products for the CuPy backend through cuBLAS called directly (ctypes).

Why not ``cupy.matmul``: CuPy refuses every cuBLAS call while a stream is being captured into
a CUDA graph (its ``cublas.setStream`` raises ``NotImplementedError`` when the stream is
capturing, in 13.x and 14.x), so a training step with one matrix product could never become
a graph. cuBLAS itself supports capture when the handle has a fixed workspace. Calling
``cublasGemmStridedBatchedEx`` ourselves also costs less host time per product than CuPy's
path (measured on an H200: 17 us vs 29 us per small product).

Only what the ops need is covered: float16/32/64 operands of two or more dimensions (and 1-D
vectors, whose dot product is a reduction), batch
axes equal on both sides or present on one. Anything else goes to CuPy's own function, which
is right everywhere except inside a capture (the capture then fails and graph mode falls back
to replaying without a graph, saying why).
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

from singa_lite.backend import gemm_plan

# dtype -> (cudaDataType, cublasComputeType, accumulator): CUDA_R_16F/32F/64F, COMPUTE_32F/64F.
# Keyed by dtype objects: ``dtype.name`` costs ~8 us a call, a noticeable part of a product.
_TYPES = {
    np.dtype(np.float16): (2, 68, "float32"),
    np.dtype(np.float32): (0, 68, "float32"),
    np.dtype(np.float64): (1, 70, "float64"),
}
_PLANS: dict[tuple, Any] = {}  # (shapes, strides, itemsize) -> GemmPlan or None: steps repeat
_GEMM_DEFAULT = -1
_WORKSPACE = 32 << 20  # bytes per handle; cuBLAS must not allocate while being captured


def _find_cublas() -> ctypes.CDLL:
    """The libcublas CuPy has loaded (the same library, so the same kernels)."""
    with open("/proc/self/maps") as f:
        paths = {ln.split()[-1] for ln in f if "libcublas.so" in ln and "libcublasLt" not in ln}
    for p in sorted(paths):
        if p.startswith("/"):
            return ctypes.CDLL(p)
    for name in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError("libcublas is not loaded and not on the library path")


class Blas:
    """One cuBLAS handle per device, each with a fixed workspace; products on CuPy's current stream."""

    def __init__(self, cupy: Any) -> None:
        self.cp = cupy
        self.lib: Any = None  # loaded at the first product: importing must not touch the GPU
        self.handles: dict[int, list] = {}  # device -> [handle, stream ptr, workspace]
        self.one = {"float64": ctypes.c_double(1.0), "float32": ctypes.c_float(1.0)}
        self.zero = {"float64": ctypes.c_double(0.0), "float32": ctypes.c_float(0.0)}

    def _load(self) -> None:
        self.cp.cuda.device.get_cublas_handle()  # makes CuPy load libcublas
        lib = _find_cublas()
        f = lib.cublasGemmStridedBatchedEx
        vp, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        f.argtypes = [vp, i, i, i, i, i, vp, vp, i, i, ll, vp, i, i, ll, vp, vp, i, i, ll, i, i, i]
        f.restype = i
        self.gemm = f
        self.lib = lib

    def handle(self) -> ctypes.c_void_p:
        if self.lib is None:
            self._load()
        dev = self.cp.cuda.runtime.getDevice()
        entry = self.handles.get(dev)
        if entry is None:
            h = ctypes.c_void_p()
            _check(self.lib.cublasCreate_v2(ctypes.byref(h)), "cublasCreate")
            ws = self.cp.empty(_WORKSPACE, dtype=self.cp.uint8)
            _check(
                self.lib.cublasSetWorkspace_v2(h, ctypes.c_void_p(ws.data.ptr), ctypes.c_size_t(_WORKSPACE)),
                "cublasSetWorkspace",
            )
            entry = self.handles[dev] = [h, None, ws]
        stream = self.cp.cuda.get_current_stream().ptr
        if entry[1] != stream:
            _check(self.lib.cublasSetStream_v2(entry[0], ctypes.c_void_p(stream)), "cublasSetStream")
            entry[1] = stream
        return entry[0]

    def matmul(self, a: Any, b: Any, out: Any = None, **kwargs: Any) -> Any:
        cp = self.cp
        types = _TYPES.get(getattr(a, "dtype", None))
        if (
            types is None
            or kwargs
            or not isinstance(a, cp.ndarray)
            or not isinstance(b, cp.ndarray)
            or a.dtype != b.dtype
            or a.ndim < 2
            or b.ndim < 2
        ):
            return cp.matmul(a, b, out=out, **kwargs)
        p = _plan(a, b)
        if p is None:
            a, b = cp.ascontiguousarray(a), cp.ascontiguousarray(b)
            p = _plan(a, b)
            if p is None:  # empty, or batch axes that broadcast: CuPy's general path
                return cp.matmul(a, b, out=out)
        shape = (*(a.shape[:-2] or b.shape[:-2]), p.m, p.n)
        if out is not None and (out.shape != shape or out.dtype != a.dtype or not out.flags.c_contiguous):
            out[...] = self.matmul(a, b)
            return out
        c = out if out is not None else cp.empty(shape, dtype=a.dtype)
        t, compute, acc = types
        h = self.handle()
        _check(
            self.gemm(
                h, p.b.op, p.a.op, p.n, p.m, p.k, ctypes.byref(self.one[acc]),
                b.data.ptr, t, p.b.ld, p.b.batch_stride,
                a.data.ptr, t, p.a.ld, p.a.batch_stride,
                ctypes.byref(self.zero[acc]), c.data.ptr, t, p.n, p.m * p.n, p.batch, compute, _GEMM_DEFAULT,
            ),
            "cublasGemmStridedBatchedEx",
        )  # fmt: skip
        return c

    def dot(self, a: Any, b: Any, out: Any = None) -> Any:
        if getattr(a, "ndim", 0) == 2 and getattr(b, "ndim", 0) == 2:
            return self.matmul(a, b, out=out)
        if out is None and getattr(a, "ndim", 0) == 1 and getattr(b, "ndim", 0) == 1:
            return (a * b).sum()  # CuPy's 1-D dot is a cuBLAS call too; a reduction captures
        return self.cp.dot(a, b, out=out)

    def tensordot(self, a: Any, b: Any, axes: Any = 2) -> Any:
        """``tensordot`` as one product of the operands transposed and flattened (CuPy's own
        does the same through its cuBLAS path); 0-d operands and odd axes go to CuPy."""
        if getattr(a, "ndim", 0) == 0 or getattr(b, "ndim", 0) == 0:
            return self.cp.tensordot(a, b, axes)
        if isinstance(axes, int):
            ax_a, ax_b = list(range(a.ndim - axes, a.ndim)), list(range(axes))
        else:
            ax_a, ax_b = (list(x) if isinstance(x, (list, tuple)) else [x] for x in axes)
        ax_a = [x % a.ndim for x in ax_a]
        ax_b = [x % b.ndim for x in ax_b]
        if len(ax_a) != len(ax_b) or any(a.shape[i] != b.shape[j] for i, j in zip(ax_a, ax_b)):
            return self.cp.tensordot(a, b, axes)
        free_a = [i for i in range(a.ndim) if i not in ax_a]
        free_b = [i for i in range(b.ndim) if i not in ax_b]
        k = math.prod(a.shape[i] for i in ax_a)
        am = a.transpose(free_a + ax_a).reshape(math.prod(a.shape[i] for i in free_a), k)
        bm = b.transpose(ax_b + free_b).reshape(k, math.prod(b.shape[i] for i in free_b))
        y = self.matmul(am, bm)
        return y.reshape([a.shape[i] for i in free_a] + [b.shape[i] for i in free_b])


def _plan(a: Any, b: Any) -> Any:
    key = (a.shape, a.strides, b.shape, b.strides, a.itemsize)
    try:
        return _PLANS[key]
    except KeyError:
        if len(_PLANS) > 4096:  # shapes that never repeat must not grow the cache without end
            _PLANS.clear()
        p = _PLANS[key] = gemm_plan.plan(*key)
        return p


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed with cuBLAS status {status}")

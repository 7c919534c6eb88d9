"""oneDNN's CPU convolutions, called through ctypes: the GEMM-bound convs of a training step.

A convolution by im2col and OpenBLAS runs at 80-100 GFLOP/s a core here, and its column copies
and col2im at memory speed on top; oneDNN's direct convolution kernels (the library PyTorch's
CPU convolutions call) run the same products in a channel-blocked layout with no column matrix
(``docs/performance.md`` has the numbers). oneDNN ships on PyPI as a C library without a Python
binding (the ``onednn`` extra, ``onednn-cpu-gomp``): this module loads ``libdnnl.so.3`` with
ctypes and drives its C API: memory descriptors, convolution primitive descriptors for the
forward, backward-data and backward-weights passes, reorders between NCHW and the layout each
primitive chose, and execution on one CPU stream.

:func:`usable` is the one test an op asks: the library loads, the compiled CPU kernels are on
(``SINGA_LITE_CPU_KERNELS``; ``SINGA_LITE_ONEDNN=0`` turns this library off alone), and the
arrays are float32 NumPy arrays. Without the library every convolution runs on the NumPy
strategies, which are also what this path is tested against.

Threads: oneDNN runs on the OpenMP pool of the ``libgomp`` it links; each calling thread gives
it :func:`~singa_lite.backend.cpu_kernels.threads.count` threads (``omp_set_num_threads``)
before its first call, so oneDNN, OpenBLAS and the Numba kernels run on one count and take
turns, never at once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from singa_lite.backend import cpu_kernels
from singa_lite.backend.cpu_kernels import threads

ENV = "SINGA_LITE_ONEDNN"
LIBRARY = "libdnnl.so.3"

_P = ctypes.c_void_p
_Dims = ctypes.c_int64 * 12  # dnnl_dims_t: DNNL_MAX_NDIMS entries

# The C API's enum values (oneapi/dnnl/dnnl_types.h and dnnl_common_types.h, oneDNN 3.x).
_CPU = 1  # dnnl_cpu
_IN_ORDER = 1  # dnnl_stream_in_order
_F32 = 3  # dnnl_f32
_TAG_ANY = 1  # dnnl_format_tag_any: the primitive picks the layout
_PLAIN = {1: 2, 2: 3, 3: 4, 4: 5, 5: 6, 6: 7}  # dnnl_a .. dnnl_abcdef: row-major by rank
_FORWARD_TRAINING, _FORWARD_INFERENCE = 64, 96
_DIRECT = 1  # dnnl_convolution_direct
_QUERY_IMPL = 8  # dnnl_query_impl_info_str
_QUERY_SRC, _QUERY_DIFF_SRC, _QUERY_WEIGHTS, _QUERY_DIFF_WEIGHTS = 129, 130, 131, 132
_QUERY_DST, _QUERY_DIFF_DST = 133, 134
_SRC, _DST, _WEIGHTS, _BIAS = 1, 17, 33, 41  # DNNL_ARG_*
_DIFF_SRC, _DIFF_DST, _DIFF_WEIGHTS, _DIFF_BIAS = 129, 145, 161, 169

_ALIGN = 64  # oneDNN's kernels read whole cache lines: buffers start on one


class OneDnnError(RuntimeError):
    """A oneDNN call returned an error status (the strategy falls back to NumPy on it)."""


class _Arg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", _P)]


_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "dnnl_engine_create": (ctypes.c_int, [ctypes.POINTER(_P), ctypes.c_int, ctypes.c_size_t]),
    "dnnl_stream_create": (ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.c_uint]),
    "dnnl_stream_wait": (ctypes.c_int, [_P]),
    "dnnl_memory_desc_create_with_tag": (
        ctypes.c_int,
        [ctypes.POINTER(_P), ctypes.c_int, _Dims, ctypes.c_int, ctypes.c_int],
    ),
    "dnnl_memory_desc_destroy": (ctypes.c_int, [_P]),
    "dnnl_memory_desc_equal": (ctypes.c_int, [_P, _P]),
    "dnnl_memory_desc_get_size": (ctypes.c_size_t, [_P]),
    "dnnl_memory_create": (ctypes.c_int, [ctypes.POINTER(_P), _P, _P, _P]),
    "dnnl_memory_destroy": (ctypes.c_int, [_P]),
    "dnnl_convolution_forward_primitive_desc_create": (
        ctypes.c_int,
        [ctypes.POINTER(_P), _P, ctypes.c_int, ctypes.c_int, _P, _P, _P, _P, _Dims, _Dims, _Dims, _Dims, _P],
    ),
    "dnnl_convolution_backward_data_primitive_desc_create": (
        ctypes.c_int,
        [ctypes.POINTER(_P), _P, ctypes.c_int, _P, _P, _P, _Dims, _Dims, _Dims, _Dims, _P, _P],
    ),
    "dnnl_convolution_backward_weights_primitive_desc_create": (
        ctypes.c_int,
        [ctypes.POINTER(_P), _P, ctypes.c_int, _P, _P, _P, _P, _Dims, _Dims, _Dims, _Dims, _P, _P],
    ),
    "dnnl_reorder_primitive_desc_create": (ctypes.c_int, [ctypes.POINTER(_P), _P, _P, _P, _P, _P]),
    "dnnl_primitive_desc_query_md": (_P, [_P, ctypes.c_int, ctypes.c_int]),
    "dnnl_primitive_desc_query": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_int, _P]),
    "dnnl_primitive_desc_destroy": (ctypes.c_int, [_P]),
    "dnnl_primitive_create": (ctypes.c_int, [ctypes.POINTER(_P), _P]),
    "dnnl_primitive_destroy": (ctypes.c_int, [_P]),
    "dnnl_primitive_execute": (ctypes.c_int, [_P, _P, ctypes.c_int, ctypes.POINTER(_Arg)]),
}

_lock = threading.Lock()
_state: dict[str, Any] = {}  # "lib", "engine", "stream", "omp" once loaded; "error" if not
_local = threading.local()


def enabled() -> bool:
    """Whether this path is switched on: the compiled CPU kernels on and ``SINGA_LITE_ONEDNN``
    not ``0``."""
    return cpu_kernels.enabled() and os.environ.get(ENV, "1").strip() not in ("0", "false", "off", "no")


def _candidates() -> Iterator[str]:
    """Where ``libdnnl`` may be: the environment's ``lib/`` (where the wheel puts it), the
    loader's path, then whatever ``ldconfig`` knows (asked last: it runs a subprocess)."""
    yield os.path.join(sys.prefix, "lib", LIBRARY)
    yield LIBRARY
    found = ctypes.util.find_library("dnnl")
    if found:
        yield found


GOMP_SPIN = "10000"
"""Spins of an idle OpenMP worker before it sleeps, for the libgomp this module loads
(libgomp's default, 300,000, keeps its workers spinning into the NumPy and OpenBLAS work
between two convolutions: the product after a conv ran 1.5-1.9x slower beside them)."""


def _load() -> None:
    errors = []
    for path in _candidates():
        try:
            lib = _open(path)
        except OSError as e:  # not there, or its libgomp missing
            errors.append(str(e))
            continue
        engine, stream = _P(), _P()
        try:
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = restype, argtypes
            _check(lib.dnnl_engine_create(ctypes.byref(engine), _CPU, 0), "engine_create")
            _check(lib.dnnl_stream_create(ctypes.byref(stream), engine, _IN_ORDER), "stream_create")
        except (AttributeError, OneDnnError) as e:  # another version's library, or no CPU engine
            errors.append(f"{path}: {e}")
            continue
        _state.update(lib=lib, engine=engine, stream=stream, omp=_openmp())
        threads.shorten_blas_spin()  # its spinning workers would halve oneDNN's threads
        return
    _state["error"] = "; ".join(errors)


def _open(path: str) -> Any:
    """Load ``path``; libgomp reads ``GOMP_SPINCOUNT`` as it loads, so the variable is set for
    that moment (unless the user set it, or it is already loaded) and then restored."""
    before = os.environ.get("GOMP_SPINCOUNT")
    if before is None and not os.environ.get("OMP_WAIT_POLICY"):
        os.environ["GOMP_SPINCOUNT"] = GOMP_SPIN
    try:
        return ctypes.CDLL(path)
    finally:
        if before is None:
            os.environ.pop("GOMP_SPINCOUNT", None)


def _openmp() -> Any:
    """The libgomp oneDNN runs on (already loaded by it), for ``omp_set_num_threads``."""
    try:
        omp = ctypes.CDLL("libgomp.so.1")
    except OSError:
        return None
    omp.omp_set_num_threads.argtypes = [ctypes.c_int]
    return omp


def available() -> bool:
    """Whether ``libdnnl`` loads (tried once, at the first call).

    >>> available() in (True, False)
    True
    """
    if not _state:
        with _lock:
            if not _state:
                _load()
    return "lib" in _state


def why_unavailable() -> str:
    """The loader's message when :func:`available` is false ('' otherwise)."""
    available()
    return str(_state.get("error", ""))


def usable(xp: Any, *arrays: Any, inference: bool = False) -> bool:
    """Whether oneDNN can take ``arrays``: float32 NumPy arrays, the path on and the library
    loaded. (float64 has no oneDNN kernels; those convs keep the NumPy strategies.)

    ``inference``: a conv with no backward, which takes oneDNN only on one thread. On more,
    its OpenMP threads and OpenBLAS's take turns every few hundred microseconds in a batch-1
    network (a oneDNN 3x3 conv, an OpenBLAS 1x1 conv, ...), and each pool's idle workers,
    still spinning, halve the other's: on two threads DenseNet-121 took 308 ms against 72 and
    Inception-v1 104 against 45. A training step's convs run for milliseconds each.

    >>> usable(np, np.zeros(3, np.float64))
    False
    """
    if xp is not np or not all(a.dtype == np.float32 for a in arrays) or not enabled():
        return False
    if inference and threads.count() > 1:
        return False  # asked first: loading the library shortens OpenBLAS's spin
    return available()


def _check(status: int, what: str) -> None:
    if status != 0:
        raise OneDnnError(f"oneDNN {what} failed with status {status}")


def _dims(values: Sequence[int]) -> Any:
    d = _Dims()
    for i, v in enumerate(values):
        d[i] = int(v)
    return d


def _lib() -> Any:
    """The library, with this thread's OpenMP thread count set."""
    lib = _state["lib"]
    generation = threads.generation()
    if getattr(_local, "generation", None) != generation:  # OpenMP keeps the count per thread
        if _state["omp"] is not None:
            _state["omp"].omp_set_num_threads(threads.count())
        _local.generation = generation
    return lib


class _Desc:
    """An owned memory descriptor: a dense shape in a plain row-major or chosen layout."""

    def __init__(self, shape: Sequence[int], tag: int) -> None:
        self.handle = _P()
        self.lib = lib = _state["lib"]  # kept: module globals may be gone when __del__ runs
        _check(
            lib.dnnl_memory_desc_create_with_tag(
                ctypes.byref(self.handle), len(shape), _dims(shape), _F32, tag
            ),
            "memory_desc_create",
        )

    def __del__(self) -> None:
        if self.handle:
            self.lib.dnnl_memory_desc_destroy(self.handle)


class _Primitive:
    """A primitive descriptor and its primitive, destroyed together."""

    def __init__(self, pd: Any) -> None:
        self.lib = lib = _state["lib"]
        self.pd, self.handle = pd, _P()
        try:
            _check(lib.dnnl_primitive_create(ctypes.byref(self.handle), pd), "primitive_create")
        except OneDnnError:
            lib.dnnl_primitive_desc_destroy(pd)
            self.pd = None
            raise

    def md(self, query: int) -> Any:
        """The memory descriptor the primitive chose for one argument (owned by ``self.pd``)."""
        return _state["lib"].dnnl_primitive_desc_query_md(self.pd, query, 0)

    def impl(self) -> str:
        name = ctypes.c_char_p()
        _state["lib"].dnnl_primitive_desc_query(self.pd, _QUERY_IMPL, 0, ctypes.byref(name))
        return (name.value or b"").decode()

    def run(self, args: Sequence[tuple[int, Any]]) -> None:
        run(self.handle, args)

    def __del__(self) -> None:
        if self.handle:
            self.lib.dnnl_primitive_destroy(self.handle)
        if self.pd:
            self.lib.dnnl_primitive_desc_destroy(self.pd)


class _Memory:
    """A oneDNN memory object over a buffer this side owns (an aligned NumPy array)."""

    def __init__(self, md: Any, array: Any) -> None:
        self.array = array  # kept alive while the memory object points into it
        self.md, self.handle = md, _P()
        self.lib = _state["lib"]
        _check(
            self.lib.dnnl_memory_create(ctypes.byref(self.handle), md, _state["engine"], array.ctypes.data),
            "memory_create",
        )

    def __del__(self) -> None:
        if self.handle:
            self.lib.dnnl_memory_destroy(self.handle)


_run_lock = threading.Lock()


def run(primitive: Any, args: Sequence[tuple[int, Any]]) -> None:
    """Execute ``primitive`` on the stream with ``(DNNL_ARG_*, _Memory)`` arguments and wait.

    One call at a time: ctypes lets go of the GIL, and a oneDNN build without concurrent
    execution shares one scratchpad between calls; each call has all the threads anyway."""
    lib = _lib()
    packed = (_Arg * len(args))(*(_Arg(k, m.handle) for k, m in args))
    with _run_lock:
        _check(
            lib.dnnl_primitive_execute(primitive, _state["stream"], len(args), packed), "primitive_execute"
        )
        _check(lib.dnnl_stream_wait(_state["stream"]), "stream_wait")


def aligned_empty(nbytes: int) -> Any:
    """A float32 buffer of ``nbytes`` (rounded up) starting on a 64-byte boundary."""
    raw = np.empty(nbytes + _ALIGN, np.uint8)
    skip = -raw.ctypes.data % _ALIGN
    return raw[skip : skip + nbytes].view(np.float32)


class _Layout:
    """One tensor's two layouts: NCHW (the caller's array) and the one a primitive chose,
    with the reorders between them when they differ."""

    def __init__(self, plain: _Desc, chosen: Any) -> None:
        lib = _state["lib"]
        self.plain, self.chosen = plain, chosen
        self.same = bool(lib.dnnl_memory_desc_equal(plain.handle, chosen))
        self.nbytes = int(lib.dnnl_memory_desc_get_size(chosen))
        # (plain -> chosen, chosen -> plain), or None where the primitive takes NCHW itself
        self.reorders = (
            None if self.same else (_reorder(plain.handle, chosen), _reorder(chosen, plain.handle))
        )

    def wrap(self, array: Any) -> _Memory:
        """``array`` (C-contiguous, in the plain layout) as a memory in the chosen layout: the
        array itself when they are the same, else a reordered copy."""
        if self.reorders is None:
            return _Memory(self.chosen, array)
        dst = self.output()
        self.reorders[0].run([(_SRC, _Memory(self.plain.handle, array)), (_DST, dst)])
        return dst

    def output(self) -> _Memory:
        """A fresh memory in the chosen layout, for a primitive to write."""
        return _Memory(self.chosen, aligned_empty(self.nbytes))

    def unwrap(self, memory: _Memory, shape: Sequence[int]) -> Any:
        """``memory`` as a C-contiguous NCHW array of ``shape``."""
        if self.reorders is None:
            return memory.array.reshape(shape)
        out = aligned_empty(4 * int(np.prod(shape))).reshape(shape)
        self.reorders[1].run([(_SRC, memory), (_DST, _Memory(self.plain.handle, out))])
        return out


def _reorder(src_md: Any, dst_md: Any) -> _Primitive:
    pd = _P()
    engine = _state["engine"]
    _check(
        _state["lib"].dnnl_reorder_primitive_desc_create(
            ctypes.byref(pd), src_md, engine, dst_md, engine, None
        ),
        "reorder_primitive_desc_create",
    )
    return _Primitive(pd)


class Convolution:
    """One convolution geometry's oneDNN primitives: the forward at once, the two backward
    passes at their first use. Shared by every call of that geometry (:func:`convolution`)."""

    def __init__(
        self,
        x_shape: tuple[int, ...],
        w_shape: tuple[int, ...],
        bias: bool,
        stride: tuple[int, ...],
        dilation: tuple[int, ...],
        pads: tuple[tuple[int, int], ...],
        out: tuple[int, ...],
        group: int,
        training: bool,
    ) -> None:
        lib, engine = _lib(), _state["engine"]
        O = w_shape[0]
        self.x_shape, self.w_shape, self.group = x_shape, w_shape, group
        self.y_shape = (x_shape[0], O, *out)
        # grouped weights are (g, O/g, C/g, *kernel) to oneDNN; the same bytes as (O, C/g, ...)
        self.w_dnnl = w_shape if group == 1 else (group, O // group, *w_shape[1:])
        self.geometry = (
            _dims(stride),
            _dims([d - 1 for d in dilation]),  # oneDNN counts the gaps between taps
            _dims([pb for pb, _ in pads]),
            _dims([pe for _, pe in pads]),
        )
        plain = {name: _Desc(s, _PLAIN[len(s)]) for name, s in self._shapes().items()}
        self.plain = plain
        anyx, anyw, anyy = (_Desc(s, _TAG_ANY) for s in (x_shape, self.w_dnnl, self.y_shape))
        self._any = (anyx, anyw, anyy)
        pd = _P()
        prop = _FORWARD_TRAINING if training else _FORWARD_INFERENCE
        _check(
            lib.dnnl_convolution_forward_primitive_desc_create(
                ctypes.byref(pd), engine, prop, _DIRECT, anyx.handle, anyw.handle,
                plain["b"].handle if bias else None, anyy.handle, *self.geometry, None,
            ),
            f"convolution forward for x {x_shape}, W {w_shape}",
        )  # fmt: skip
        self.fwd = _Primitive(pd)
        self.fx, self.fw, self.fy = (
            _Layout(plain[k], self.fwd.md(q))
            for k, q in (("x", _QUERY_SRC), ("w", _QUERY_WEIGHTS), ("y", _QUERY_DST))
        )
        self.bias = bias
        self._bwd_data: tuple | None = None
        self._bwd_weights: tuple | None = None

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        return {"x": self.x_shape, "w": self.w_dnnl, "y": self.y_shape, "b": (self.w_shape[0],)}

    def forward(self, x: Any, W: Any, b: Any, wm: _Memory | None = None) -> tuple[Any, _Memory, _Memory]:
        """``y`` (NCHW) and the source and weight memories the backward passes can reuse;
        ``wm`` is ``W`` already in the forward's layout (``weights``), for a constant weight."""
        xm, ym = self.fx.wrap(x), self.fy.output()
        wm = self.fw.wrap(W) if wm is None else wm
        args = [(_SRC, xm), (_WEIGHTS, wm), (_DST, ym)]
        if b is not None:
            args.append((_BIAS, _Memory(self.plain["b"].handle, b)))
        self.fwd.run(args)
        return self.fy.unwrap(ym, self.y_shape), xm, wm

    def weights(self, W: Any) -> _Memory:
        """``W`` (C-contiguous) in the forward's layout: made once for a weight that stays."""
        return self.fw.wrap(W)

    def backward(
        self, dy: Any, x: Any, xm: _Memory, W: Any, wm: _Memory, need_x: bool, need_W: bool, need_b: bool
    ) -> tuple[Any, Any, Any]:
        """``(dx, dW, db)`` from NCHW ``dy``, each ``None`` where not asked for; ``xm``/``wm`` are
        the forward's memories (reused where the backward primitive chose the same layout)."""
        dx = dW = db = None
        dym: _Memory | None = None  # dy in the backward-data layout, reused where they agree
        if need_x:
            prim, ldy, lw, ldx = self._data()
            w_in = wm if _same(lw.chosen, wm.md) else lw.wrap(W)
            dxm = ldx.output()
            dym = ldy.wrap(dy)
            prim.run([(_DIFF_DST, dym), (_WEIGHTS, w_in), (_DIFF_SRC, dxm)])
            dx = ldx.unwrap(dxm, self.x_shape)
        if need_W or need_b:
            prim, lx, ldy, ldw = self._weights()
            x_in = xm if _same(lx.chosen, xm.md) else lx.wrap(x)
            dwm = ldw.output()
            dy_in = dym if dym is not None and _same(ldy.chosen, dym.md) else ldy.wrap(dy)
            args = [(_SRC, x_in), (_DIFF_DST, dy_in), (_DIFF_WEIGHTS, dwm)]
            if self.bias:
                db = np.empty(self.w_shape[0], np.float32)
                args.append((_DIFF_BIAS, _Memory(self.plain["b"].handle, db)))
            prim.run(args)
            dW = ldw.unwrap(dwm, self.w_dnnl).reshape(self.w_shape) if need_W else None
        return dx, dW, db

    def _data(self) -> tuple:
        """(primitive, dy, W, dx layouts) of the backward-data pass, built at its first use."""
        if self._bwd_data is None:
            anyx, anyw, anyy = self._any
            create = _state["lib"].dnnl_convolution_backward_data_primitive_desc_create
            descs = (anyx.handle, anyw.handle, anyy.handle)
            wanted = (("y", _QUERY_DIFF_DST), ("w", _QUERY_WEIGHTS), ("x", _QUERY_DIFF_SRC))
            self._bwd_data = self._backward(create, descs, "data", wanted)
        return self._bwd_data

    def _weights(self) -> tuple:
        """(primitive, x, dy, dW layouts) of the backward-weights pass, built at its first use."""
        if self._bwd_weights is None:
            anyx, anyw, anyy = self._any
            create = _state["lib"].dnnl_convolution_backward_weights_primitive_desc_create
            bias = self.plain["b"].handle if self.bias else None
            descs = (anyx.handle, anyw.handle, bias, anyy.handle)
            wanted = (("x", _QUERY_SRC), ("y", _QUERY_DIFF_DST), ("w", _QUERY_DIFF_WEIGHTS))
            self._bwd_weights = self._backward(create, descs, "weights", wanted)
        return self._bwd_weights

    def _backward(self, create: Any, descs: tuple, what: str, wanted: tuple) -> tuple:
        """A backward pass's primitive (``create`` given ``descs``, this geometry and the forward
        as its hint) and the layouts it chose for the ``wanted`` (tensor, query) pairs."""
        pd = _P()
        _check(
            create(ctypes.byref(pd), _state["engine"], _DIRECT, *descs, *self.geometry, self.fwd.pd, None),
            f"convolution backward {what} for x {self.x_shape}, W {self.w_shape}",
        )
        prim = _Primitive(pd)
        return (prim, *(_Layout(self.plain[k], prim.md(q)) for k, q in wanted))

    def impl(self) -> str:
        """The name of the forward kernel oneDNN chose (``jit:avx512_core``, ``gemm:jit``, ...)."""
        return self.fwd.impl()


def _same(a: Any, b: Any) -> bool:
    return bool(_state["lib"].dnnl_memory_desc_equal(a, b))


_CACHE_SIZE = 256
_cache: OrderedDict[tuple, Convolution] = OrderedDict()


def convolution(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    bias: bool,
    stride: tuple[int, ...],
    dilation: tuple[int, ...],
    pads: tuple[tuple[int, int], ...],
    out: tuple[int, ...],
    group: int,
    training: bool,
) -> Convolution:
    """The :class:`Convolution` of this geometry, built at its first use and kept (the
    ``_CACHE_SIZE`` most recently used); ``pads`` are ``(begin, end)`` per spatial axis, ``out``
    the output's spatial size (``ops.window.out_size``). Raises :class:`OneDnnError` where
    oneDNN has no kernel."""
    if not available():
        raise OneDnnError(f"oneDNN is not loaded: {why_unavailable()}")
    key = (x_shape, w_shape, bias, stride, dilation, pads, out, group, training)
    with _lock:
        conv = _cache.get(key)
        if conv is not None:
            _cache.move_to_end(key)
            return conv
    conv = Convolution(*key)
    with _lock:
        _cache[key] = conv
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return conv

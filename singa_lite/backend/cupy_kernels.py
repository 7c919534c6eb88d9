"""Hand-written CUDA kernels for the hot spots of a training step on CuPy, compiled at first use.

The sources are ``backend/kernels/*.cu`` (package data). Each is compiled by CuPy's
``RawModule`` (NVRTC, CuPy's on-disk kernel cache) the first time one of its kernels runs on a
device; the kernels are kept per device. Templates are instantiated for float and double by
the name expressions in :data:`SOURCES`, which ``tests/test_kernel_compile.py`` compiles on a
CPU-only machine for sm_80 and sm_90 with CuPy's options.

The ops' plain ``xp`` code is the reference and the fallback: an op calls :func:`usable` with
its arrays and runs its usual code when the answer is no (NumPy, float16, integers, a strided
layout). ``SINGA_LITE_RAW_KERNELS`` switches every kernel on (1) or off (0), for A/B
comparisons and as an escape hatch; see ``_DEFAULT``. This module never imports CuPy: it gets CuPy as ``xp``.

Kernel arguments follow CuPy's rules: an array is passed as its data pointer, a NumPy scalar
by value in its own width. A per-step scalar (``backend.step_scalar``) is a pointer and a value
(:func:`scalar_operand`): a 0-d device array inside a CUDA-graph capture, read by the kernel
when it runs, else a number with a null pointer.
"""

from __future__ import annotations

import math
import os
from importlib import resources
from typing import Any

import numpy as np

ENV = "SINGA_LITE_RAW_KERNELS"
OPTIONS = ("-std=c++17",)
"""Our options for ``RawModule``; CuPy adds ``-ftz=true``, ``-arch=sm_XX`` (the device's) and
``--device-as-default-execution-space``."""

_CTYPES = {
    "float32": "float",
    "float64": "double",
    "int8": "signed char",
    "int32": "int",
    "int64": "long long",
}
_FLOATS = ("float", "double")
_ARGS = ("signed char", "int")  # the max pool's argmax: int8 up to 127 taps, else int32
_LABELS = ("int", "long long")

SOURCES: dict[str, tuple[str, ...]] = {
    "optim.cu": tuple(f"singa_{k}<{t}>" for k in ("sgd", "adam") for t in _FLOATS),
    "pool.cu": (
        *(f"singa_max_pool_{d}<{t}, {a}>" for d in ("fwd", "bwd") for t in _FLOATS for a in _ARGS),
        *(f"singa_avg_pool_{d}<{t}>" for d in ("fwd", "bwd") for t in _FLOATS),
    ),
    "softmax_ce.cu": tuple(
        f"singa_softmax_ce_{d}<{t}, {lab}>" for d in ("fwd", "bwd") for t in _FLOATS for lab in _LABELS
    ),
    "conv.cu": tuple(f"singa_{k}<{t}>" for k in ("im2col", "col2im") for t in _FLOATS),
    "bias_act.cu": tuple(
        f"singa_{k}<{t}>" for k in ("bias_act_fwd", "bias_act_bwd", "bias_grad_sum") for t in _FLOATS
    ),
}
"""Every kernel source and the template instantiations (name expressions) the wrappers launch."""

BLOCK = 256
MAX_BLOCKS = 8192  # ~8 waves of an H100 (132 SMs x 8 blocks of 256); grid-stride loops do the rest
MAX_ROW_BLOCK = 256

_modules: dict[str, Any] = {}
_functions: dict[tuple[int, str, str], Any] = {}


_DEFAULT = "0"
"""Off unless ``SINGA_LITE_RAW_KERNELS=1``. The kernels compile in CI (NVRTC, sm_80/sm_90); on
an H200 the device tests that switch them on pass and graph-mode steps ran equal or faster with
them (benchmarks/results/gpu-h200.md). The default turns to "1" once the whole GPU suite has
run with them on."""


def enabled() -> bool:
    """Whether the kernels are on (``SINGA_LITE_RAW_KERNELS=1``; ``0`` or unset: every op runs
    its plain ``xp`` code, see ``_DEFAULT``).

    >>> enabled() in (True, False)
    True
    """
    return os.environ.get(ENV, _DEFAULT).strip() not in ("", "0")


def usable(xp: Any, *arrays: Any, labels: Any = None) -> bool:
    """Whether the kernels can take ``arrays``: on CuPy, kernels enabled, every array
    C-contiguous and of one dtype, float32 or float64; ``labels``, if given, C-contiguous
    int32 or int64. The one test that picks the kernel path over the plain one.

    >>> usable(np, np.zeros(3, np.float32))  # NumPy: always the plain path
    False
    """
    if xp is np or not enabled():
        return False
    dtype = arrays[0].dtype
    if dtype.name not in ("float32", "float64"):
        return False
    if any(a.dtype != dtype or not a.flags.c_contiguous for a in arrays):
        return False
    return labels is None or (labels.dtype.name in ("int32", "int64") and labels.flags.c_contiguous)


def source(name: str) -> str:
    """The text compiled for ``name`` (a key of :data:`SOURCES`): the shared helpers, then the file."""
    folder = resources.files("singa_lite.backend").joinpath("kernels")
    return folder.joinpath("_common.cuh").read_text() + "\n" + folder.joinpath(name).read_text()


def template(kernel: str, *dtypes: Any) -> str:
    """The name expression of ``kernel`` instantiated for ``dtypes``.

    >>> template("singa_max_pool_fwd", np.float32, np.int8)
    'singa_max_pool_fwd<float, signed char>'
    """
    return f"{kernel}<{', '.join(_CTYPES[np.dtype(d).name] for d in dtypes)}>"


def function(xp: Any, name: str, expression: str) -> Any:
    """The kernel ``expression`` of source ``name`` on the current device, compiled (by CuPy,
    through its disk cache) the first time a device asks for it."""
    key = (int(xp.cuda.runtime.getDevice()), name, expression)
    fn = _functions.get(key)
    if fn is None:
        module = _modules.get(name)
        if module is None:
            module = _modules[name] = xp.RawModule(
                code=source(name), options=OPTIONS, name_expressions=SOURCES[name]
            )
        fn = _functions[key] = module.get_function(expression)
    return fn


def linear_grid(n: int, block: int = BLOCK) -> tuple[tuple[int], tuple[int]]:
    """``(grid, block)`` for a grid-stride loop over ``n`` items.

    >>> linear_grid(1000)
    ((4,), (256,))
    >>> linear_grid(10**9)
    ((8192,), (256,))
    """
    return (max(1, min(-(-n // block), MAX_BLOCKS)),), (block,)


def row_block(columns: int) -> int:
    """Threads per row for the row kernels: a power of two, 32 to 256, about ``columns``.

    >>> row_block(10), row_block(100), row_block(5000)
    (32, 128, 256)
    """
    threads = 32
    while threads < min(columns, MAX_ROW_BLOCK):
        threads *= 2
    return threads


def scalar_operand(value: Any, dtype: Any) -> tuple[Any, Any]:
    """A per-step scalar as the kernel's ``(pointer, value)`` pair: a device array is read
    through its pointer (what a captured graph needs); a number goes by value with a null
    pointer.

    >>> scalar_operand(0.5, np.float32)
    (np.uint64(0), np.float32(0.5))
    """
    dtype = np.dtype(dtype)
    if isinstance(value, (int, float, np.generic, np.ndarray)):
        return np.uint64(0), dtype.type(value)
    if value.dtype != dtype:
        value = value.astype(dtype)
    return value, dtype.type(0)


def _launch(xp: Any, name: str, expression: str, n: int, args: tuple) -> None:
    grid, block = linear_grid(n)
    function(xp, name, expression)(grid, block, args)


# -- optimizer updates -----------------------------------------------------------------------
def sgd_update(
    xp: Any,
    p: Any,
    g: Any,
    buf: Any,
    lr: Any,
    *,
    weight_decay: Any,
    momentum: Any,
    undampened: Any,
    nesterov: bool,
    first: bool,
) -> None:
    """One SGD update of ``p``, and of the momentum buffer ``buf`` unless it is None, in one
    launch. ``lr`` is a per-step scalar; ``weight_decay`` (0: none), ``momentum`` and
    ``undampened`` (``1 - dampening``, None without dampening) are scalars of ``p``'s type;
    ``first`` says ``buf`` is new: it becomes the (decayed) gradient."""
    c = p.dtype.type
    momentum_flags = 0 if buf is None else 2 + 4 * bool(first) + 16 * bool(nesterov)
    flags = int(weight_decay != 0) + momentum_flags + 8 * (undampened is not None)
    lr_ptr, lr_value = scalar_operand(lr, p.dtype)
    hyper = (c(weight_decay), c(momentum), c(1 if undampened is None else undampened))
    args = (
        p,
        g,
        np.uint64(0) if buf is None else buf,
        lr_ptr,
        lr_value,
        *hyper,
        np.int32(flags),
        np.int64(p.size),
    )
    _launch(xp, "optim.cu", template("singa_sgd", p.dtype), p.size, args)


def adam_update(
    xp: Any,
    p: Any,
    g: Any,
    m: Any,
    v: Any,
    *,
    decay: Any,
    bc2: Any,
    step: Any,
    weight_decay: Any,
    betas: tuple[Any, Any, Any, Any],
    epsilon: Any,
    decoupled: bool,
) -> None:
    """One Adam/AdamW update of ``p``, ``m``, ``v`` in one launch. ``decay`` (AdamW's
    ``1 - lr * weight_decay``), ``bc2`` and ``step`` (``lr / (1 - beta_1 ** t)``) are per-step
    scalars (``decay`` unused unless ``decoupled``); ``betas`` is
    ``(beta_1, 1 - beta_1, beta_2, 1 - beta_2)`` in ``p``'s type."""
    c = p.dtype.type
    flags = (2 if decoupled else 1) if weight_decay != 0 else 0
    scalars = [a for s in (decay, bc2, step) for a in scalar_operand(s, p.dtype)]
    hyper = (c(weight_decay), *(c(b) for b in betas), c(epsilon))
    args = (p, g, m, v, *scalars, *hyper, np.int32(flags), np.int64(p.size))
    _launch(xp, "optim.cu", template("singa_adam", p.dtype), p.size, args)


# -- pooling ---------------------------------------------------------------------------------
def pool_geometry(
    sizes: tuple[int, ...],
    out: tuple[int, ...],
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    begin: tuple[int, ...],
    dilation: tuple[int, ...],
) -> tuple[np.int32, ...]:
    """The pool kernels' window arguments: sizes, outputs, kernel, stride, begin padding and
    dilation of three spatial axes, fewer axes padded in front with a 1-cell axis.

    >>> [int(v) for v in pool_geometry((5,), (3,), (2,), (2,), (1,), (1,))]
    [1, 1, 5, 1, 1, 3, 1, 1, 2, 1, 1, 2, 0, 0, 1, 1, 1, 1]
    """
    lead = 3 - len(sizes)
    if lead < 0:
        raise ValueError(f"the pool kernels take up to 3 spatial axes, got {len(sizes)}")
    args: list[np.int32] = []
    for values, fill in ((sizes, 1), (out, 1), (kernel, 1), (stride, 1), (begin, 0), (dilation, 1)):
        full = (fill,) * lead + tuple(values)
        if max(full) >= 2**31:
            raise ValueError(f"pool geometry {full} does not fit the kernels' int32")
        args.extend(np.int32(v) for v in full)
    return tuple(args)


def count_limits(
    sizes: tuple[int, ...], begin: tuple[int, ...], end: tuple[int, ...], count_include_pad: bool
) -> tuple[np.int32, ...]:
    """``(lo0, lo1, lo2, hi0, hi1, hi2)``: the padded cells an average pool counts on each axis.

    >>> [int(v) for v in count_limits((5,), (1,), (2,), True)]
    [0, 0, 0, 1, 1, 8]
    >>> [int(v) for v in count_limits((5,), (1,), (2,), False)]
    [0, 0, 1, 1, 1, 6]
    """
    lead = 3 - len(sizes)
    if count_include_pad:
        lo, hi = [0] * 3, [1] * lead + [s + b + e for s, b, e in zip(sizes, begin, end)]
    else:
        lo, hi = [0] * lead + list(begin), [1] * lead + [b + s for s, b in zip(sizes, begin)]
    return tuple(np.int32(v) for v in (*lo, *hi))


def max_pool_forward(xp: Any, x: Any, out: tuple[int, ...], geometry: tuple, arg_dtype: Any) -> tuple:
    """``(y, arg)`` of a max pool of C-contiguous ``x`` into spatial size ``out``: ``arg`` (the
    tap of each window's first maximum, of ``arg_dtype``) only when ``arg_dtype`` is given."""
    y = xp.empty((*x.shape[:2], *out), x.dtype)
    arg = None if arg_dtype is None else xp.empty(y.shape, arg_dtype)
    planes = x.shape[0] * x.shape[1]
    kernel = template("singa_max_pool_fwd", x.dtype, np.int8 if arg is None else arg.dtype)
    args = (x, y, np.uint64(0) if arg is None else arg, np.int64(planes), *geometry)
    _launch(xp, "pool.cu", kernel, y.size, args)
    return y, arg


def max_pool_backward(xp: Any, dy: Any, arg: Any, x_shape: tuple, geometry: tuple, overlap: bool) -> Any:
    """The max pool's input gradient from C-contiguous ``dy`` and the forward's ``arg``."""
    dx = xp.empty(x_shape, dy.dtype)
    planes = x_shape[0] * x_shape[1]
    kernel = template("singa_max_pool_bwd", dy.dtype, arg.dtype)
    _launch(xp, "pool.cu", kernel, dx.size, (dy, arg, dx, np.int32(overlap), np.int64(planes), *geometry))
    return dx


def avg_pool_forward(xp: Any, x: Any, out: tuple[int, ...], geometry: tuple, limits: tuple) -> Any:
    """An average pool of C-contiguous ``x`` into spatial size ``out``."""
    y = xp.empty((*x.shape[:2], *out), x.dtype)
    planes = x.shape[0] * x.shape[1]
    kernel = template("singa_avg_pool_fwd", x.dtype)
    _launch(xp, "pool.cu", kernel, y.size, (x, y, np.int64(planes), *geometry, *limits))
    return y


def avg_pool_backward(xp: Any, dy: Any, x_shape: tuple, geometry: tuple, limits: tuple) -> Any:
    """The average pool's input gradient from C-contiguous ``dy``."""
    dx = xp.empty(x_shape, dy.dtype)
    planes = x_shape[0] * x_shape[1]
    kernel = template("singa_avg_pool_bwd", dy.dtype)
    _launch(xp, "pool.cu", kernel, dx.size, (dy, dx, np.int64(planes), *geometry, *limits))
    return dx


# -- softmax cross-entropy -------------------------------------------------------------------
def softmax_ce_forward(xp: Any, x: Any, labels: Any) -> tuple[Any, Any]:
    """``(p, loss)``: the softmax of the ``(N, C)`` logits ``x`` and each row's cross-entropy
    against class ``labels``, one block per row."""
    rows, columns = x.shape
    p = xp.empty_like(x)
    loss = xp.empty(rows, x.dtype)
    kernel = template("singa_softmax_ce_fwd", x.dtype, labels.dtype)
    args = (x, labels, p, loss, np.int32(columns), np.int64(rows))
    function(xp, "softmax_ce.cu", kernel)((min(rows, 65535),), (row_block(columns),), args)
    return p, loss


def softmax_ce_backward(xp: Any, p: Any, labels: Any, dy: Any) -> Any:
    """``(p - onehot(labels)) * dy / N`` as ops/loss.py computes it, from the forward's ``p``."""
    rows, columns = p.shape
    if dy.dtype == p.dtype:
        scale, divisor = dy, p.dtype.type(rows)
    else:  # the scale rounds in dy's dtype first
        scale, divisor = xp.asarray(dy.reshape(()) / rows).astype(p.dtype), p.dtype.type(1)
    dx = xp.empty_like(p)
    kernel = template("singa_softmax_ce_bwd", p.dtype, labels.dtype)
    args = (p, labels, scale, divisor, dx, np.int32(columns), np.int64(p.size))
    _launch(xp, "softmax_ce.cu", kernel, p.size, args)
    return dx


# -- convolution columns ---------------------------------------------------------------------
def usable_32bit(xp: Any, *arrays: Any, sizes: tuple[int, ...] = ()) -> bool:
    """:func:`usable` for the kernels that index in 32 bits (conv columns, bias + activation):
    ``arrays``, and the arrays of ``sizes`` elements they make, must each hold fewer than 2**31.

    >>> usable_32bit(np, np.zeros(3, np.float32), sizes=(10,))  # NumPy: always the plain path
    False
    """
    return usable(xp, *arrays) and all(n < 2**31 for n in (*(a.size for a in arrays), *sizes))


COLS_K_MAJOR = 1
COLS_CHANNEL_FIRST = 2
_LAYOUTS = {"rows": 0, "columns": COLS_K_MAJOR | COLS_CHANNEL_FIRST}
"""Column matrices (conv.cu): ``rows`` ``(G, N*windows, taps*C/G)`` with entries ordered (tap,
channel), ops/conv.py's; ``columns`` ``(G, C/G*taps, N*windows)`` ordered (channel, tap),
ops/conv_general.py's."""


def col_shape(x_shape: tuple, out: tuple, kernel: tuple, group: int, layout: str) -> tuple[int, int, int]:
    """The shape of the column matrix of an ``(N, C, *spatial)`` input in ``layout``.

    >>> col_shape((2, 6, 5, 5), (3, 3), (3, 3), 2, "rows"), col_shape((2, 6, 5), (3,), (3,), 2, "columns")
    ((2, 18, 27), (2, 9, 6))
    """
    windows = x_shape[0] * int(np.prod(out))
    entries = x_shape[1] // group * int(np.prod(kernel))
    return (group, windows, entries) if layout == "rows" else (group, entries, windows)


def _conv_args(
    x_shape: tuple, out: tuple, kernel: tuple, stride: tuple, begin: tuple, dilation: tuple, group: int
) -> tuple:
    """``(groups, channels per group, batch, *window geometry)`` as conv.cu takes them."""
    geometry = pool_geometry(x_shape[2:], out, kernel, stride, begin, dilation)
    return (np.int32(group), np.int32(x_shape[1] // group), np.int32(x_shape[0]), *geometry)


def im2col(
    xp: Any,
    x: Any,
    out: tuple,
    kernel: tuple,
    stride: tuple,
    begin: tuple,
    dilation: tuple,
    group: int,
    layout: str = "rows",
) -> Any:
    """The column matrix (:func:`col_shape`) of C-contiguous ``x (N, C, *spatial)``, up to 3
    spatial axes, for ``out`` windows; ``begin`` is the padding before each axis (windows
    never read past the end padding, so it needs no argument). One launch, padding included."""
    col = xp.empty(col_shape(x.shape, out, kernel, group, layout), x.dtype)
    args = (
        x,
        col,
        np.int32(_LAYOUTS[layout]),
        *_conv_args(x.shape, out, kernel, stride, begin, dilation, group),
    )
    _launch(xp, "conv.cu", template("singa_im2col", x.dtype), col.size, args)
    return col


def col2im(
    xp: Any,
    col: Any,
    x_shape: tuple,
    out: tuple,
    kernel: tuple,
    stride: tuple,
    begin: tuple,
    dilation: tuple,
    layout: str = "rows",
) -> Any:
    """The adjoint of :func:`im2col`: a new C-contiguous ``x_shape`` array whose cells sum the
    entries of ``col`` that read them, added in tap order (conv.cu). ``col`` is
    ``(G, entries, N*windows)``: the transpose of a ``rows`` matrix, a ``columns`` one as it is."""
    col = xp.ascontiguousarray(col)
    x = xp.empty(x_shape, col.dtype)
    flags = np.int32(_LAYOUTS[layout] & COLS_CHANNEL_FIRST)
    args = (col, x, flags, *_conv_args(x_shape, out, kernel, stride, begin, dilation, col.shape[0]))
    _launch(xp, "conv.cu", template("singa_col2im", col.dtype), x.size, args)
    return x


# -- bias + activation -----------------------------------------------------------------------
ACTIVATIONS = ("identity", "relu", "sigmoid", "tanh", "gelu")
"""The activations of bias_act.cu, by their code (the index)."""
_BIAS_BLOCKS = 1024  # the backward's target: ~1 wave of 256-thread blocks on an H100
_BIAS_LEAST = (128, 4096)  # fewest rows (inner == 1) / elements (else) worth a block: 16 a thread


def bias_grid(outer: int, channels: int, inner: int) -> tuple[int, int, int]:
    """``(tiles, chunks, chunk)`` of the bias + activation backward on ``(outer, C, inner)``:
    32-channel tiles of a Dense layer's rows (``inner == 1``), one-channel tiles else; the
    batch split into ``chunks`` of ``chunk`` rows or elements, enough blocks for the device.

    >>> bias_grid(128, 512, 1), bias_grid(32, 16, 1024)
    ((16, 1, 128), (16, 8, 4096))
    """
    if inner == 1:
        tiles, items, least = -(-channels // 32), outer, _BIAS_LEAST[0]
    else:
        tiles, items, least = channels, outer * inner, _BIAS_LEAST[1]
    chunks = max(1, min(-(-_BIAS_BLOCKS // max(tiles, 1)), -(-items // least), 65535))
    chunk = max(1, -(-items // chunks))
    return tiles, max(1, -(-items // chunk)), chunk


def _outer_inner(shape: tuple, axis: int) -> tuple[int, int]:
    return int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1 :]))


def bias_activation_forward(xp: Any, x: Any, b: Any, activation: str, axis: int) -> Any:
    """``activation(x + b)`` with ``b`` along ``axis`` of C-contiguous ``x``: one launch."""
    y = xp.empty_like(x)
    cap = x.dtype.type(math.log(float(np.finfo(x.dtype).max)) - 1)  # as ops.activation.sigmoid_array
    _, inner = _outer_inner(x.shape, axis)
    code = np.int32(ACTIVATIONS.index(activation))
    args = (x, b, y, code, cap, np.int32(x.shape[axis]), np.uint32(inner), np.uint32(x.size))
    _launch(xp, "bias_act.cu", template("singa_bias_act_fwd", x.dtype), x.size, args)
    return y


def bias_activation_backward(
    xp: Any, dy: Any, saved: Any, b: Any, activation: str, axis: int, need_x: bool, need_b: bool
) -> tuple[Any, Any]:
    """``(dx, db)`` of ``activation(x + b)`` from C-contiguous ``dy`` and ``saved`` (the output
    for relu, sigmoid and tanh; the input for gelu; unused for identity, whose ``dx`` is ``dy``):
    one launch, two when ``db`` is summed over several chunks of the batch. None where not
    needed."""
    channels = dy.shape[axis]
    outer, inner = _outer_inner(dy.shape, axis)
    identity = activation == "identity"
    dx = xp.empty_like(dy) if need_x and not identity else None
    tiles, chunks, chunk = bias_grid(outer, channels, inner)
    db = partial = None
    if need_b:
        db = xp.empty(channels, dy.dtype)
        partial = db if chunks == 1 else xp.empty((chunks, channels), dy.dtype)
    if dx is not None or db is not None:
        args = (
            dy,
            dy if saved is None else saved,
            b,
            np.uint64(0) if dx is None else dx,
            np.uint64(0) if partial is None else partial,
            np.int32(ACTIVATIONS.index(activation)),
            np.int32(channels),
            np.uint32(inner),
            np.uint32(outer),
            np.uint32(chunk),
        )
        kernel = function(xp, "bias_act.cu", template("singa_bias_act_bwd", dy.dtype))
        kernel((tiles, chunks), (32, 8), args)
    if db is not None and chunks > 1:
        sums = (partial, db, np.int32(channels), np.int32(chunks))
        _launch(xp, "bias_act.cu", template("singa_bias_grad_sum", dy.dtype), channels, sums)
    return (dy if need_x and identity else dx), db

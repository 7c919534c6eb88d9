"""Pooling over the spatial axes of ``(N, C, *spatial)`` inputs: max, average and global.

Windows are visited one kernel tap at a time: a tap is a strided view of the padded input
(``x[:, :, i::s, j::s]``), so the loops run over ``prod(kernel)`` taps, never over pixels,
and work the same on NumPy and CuPy.

On CuPy, float32 and float64 pools of up to three spatial axes run as one kernel per
direction (``backend/kernels/pool.cu``): the same taps in the same order, so the same sums, the
same argmax and the same gradients, bit for bit (a maximum that is a zero of either sign, or a
NaN, may differ in its sign or NaN bits). On NumPy the same pools run as compiled loops
(``backend/cpu_kernels/pool.py``) where ``cpu_kernels.usable`` says so: the same forward,
backward sums in another order where windows overlap; an inference pool of one or two axes
runs their plane sweep (``pool_sweep``: the NumPy sweep's maxima, its sums in its order but
where padding cuts a window). Every other case runs the loops below.

Padding may be an int, one value per spatial axis, or ``(begin, end)`` pairs per axis in axis
order, i.e. ``(top, bottom, left, right)`` in 2-D as in SINGA's conv (ONNX's
``[x1_begin, x2_begin, x1_end, x2_end]`` must be reordered by the caller).
``ceil_mode`` follows PyTorch and ONNX: the last window may run past the end padding, but a
window never starts past the input plus its begin padding.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np  # the window counts of AvgPool are host-side geometry; array math uses xp

from singa_lite import _args, autograd
from singa_lite.autograd import Operator
from singa_lite.backend import cpu_kernels, cupy_kernels
from singa_lite.errors import DTypeError, ShapeError
from singa_lite.ops import window
from singa_lite.tensor import Tensor

__all__ = [
    "AvgPool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "MaxPool",
    "avg_pool",
    "avg_pool1d",
    "avg_pool2d",
    "global_average_pool",
    "global_max_pool",
    "max_pool",
    "max_pool1d",
    "max_pool2d",
    "pool_output_size",
]

IntOrSeq = int | Sequence[int]

KERNEL_MIN_ROW = 16
"""Output row length (cells of the last axis) from which a recorded pool runs the compiled CPU
kernels (see ``_Pool.cpu_kernels``); the tests set it to 0 to run them on small shapes."""
KERNEL_INFERENCE = False
"""Whether pools that record no backward run the compiled argmax kernels (slower than the
separable sweep where measured) instead of the plane sweep; the tests set it to run them."""


def pool_output_size(
    input_size: IntOrSeq,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: IntOrSeq = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
) -> tuple[int, ...]:
    """Spatial output size of a pooling window sweep over ``input_size`` (spatial axes only).

    >>> pool_output_size((28, 28), 2)
    (14, 14)
    >>> pool_output_size(5, 2, ceil_mode=True)
    (3,)
    """
    sizes = _args.ints("pool_output_size", "input_size", input_size, None, 0)
    win = _Window(len(sizes), kernel_size, stride, padding, dilation, ceil_mode, "pool_output_size")
    return win.out_size(sizes)


class _Window:
    """The geometry of a pooling sweep: kernel, stride, pads, dilation, ceil mode."""

    def __init__(
        self,
        n: int,
        kernel_size: IntOrSeq,
        stride: IntOrSeq | None,
        padding: IntOrSeq,
        dilation: IntOrSeq,
        ceil_mode: bool,
        opname: str,
    ) -> None:
        self.n, self.opname = n, opname
        self.kernel = window.per_axis(opname, "kernel_size", kernel_size, n)
        self.stride = self.kernel if stride is None else window.per_axis(opname, "stride", stride, n)
        self.dilation = window.per_axis(opname, "dilation", dilation, n)
        pairs = window.pads(opname, padding, n)
        self.begin, self.end = tuple(b for b, _ in pairs), tuple(e for _, e in pairs)
        self.ceil_mode = bool(ceil_mode)
        for k, d, pb, pe in zip(self.kernel, self.dilation, self.begin, self.end):
            if max(pb, pe) >= d * (k - 1) + 1:
                # Otherwise whole windows could lie in the padding (PyTorch forbids even more).
                raise _args.bad(
                    opname, "padding", f"be smaller than the kernel span {d * (k - 1) + 1}", padding
                )

    def out_size(self, sizes: Sequence[int]) -> tuple[int, ...]:
        pairs = tuple(zip(self.begin, self.end))
        out = window.out_size(sizes, self.kernel, self.stride, pairs, self.dilation, self.ceil_mode)
        if min(out) < 1:
            raise ShapeError(f"{self.opname}: kernel {self.kernel} does not fit input size {tuple(sizes)}")
        return out

    def pad_widths(self, sizes: Sequence[int], out: Sequence[int]) -> list[tuple[int, int]]:
        """Begin/end pad per spatial axis, the end grown so that ceil-mode windows fit."""
        widths = []
        for size, o, k, s, d, pb, pe in zip(
            sizes, out, self.kernel, self.stride, self.dilation, self.begin, self.end
        ):
            need = (o - 1) * s + d * (k - 1) + 1  # padded length the windows touch
            widths.append((pb, max(pe, need - size - pb)))
        return widths

    def taps(self, out: Sequence[int]) -> list[tuple[slice, ...]]:
        """One index per kernel tap: the strided view of the padded input that tap reads."""
        axes = [
            [slice(i * d, i * d + (o - 1) * s + 1, s) for i in range(k)]
            for k, s, d, o in zip(self.kernel, self.stride, self.dilation, out)
        ]
        return [(slice(None), slice(None), *t) for t in itertools.product(*axes)]

    def reduce_separably(self, xp: Any, x: Any, out: Sequence[int], op: Any, identity: Any) -> Any:
        """``op`` (``xp.maximum``, ``xp.add``) over every window of the *unpadded* ``x``, one
        axis at a time: ``sum(kernel)`` passes instead of ``prod(kernel)`` (4 against 8 for a
        3x3 window), the later ones over an input already shrunk by the stride. Each tap is
        clipped to the output positions whose window cell lies inside ``x``, so the padding
        (``identity`` for ``op``) is never made: ``np.pad`` measured ~2.5 ms per inception
        run. The result is a new array. Forward-only: the per-tap argmax a recorded max pool
        keeps needs the full sweep.
        """
        y = x
        geo = zip(self.kernel, self.stride, self.dilation, out, self.begin)
        for axis, (k, s, d, o, pb) in enumerate(geo):
            lead, n = (slice(None),) * (axis + 2), y.shape[axis + 2]
            if axis == self.n - 1 and n == s * o and k > 1 and y.flags.c_contiguous:
                y = _flat_last_axis(xp, y, k, s, d, pb, op)
                continue
            spans = []  # (first output, end output, view of y) per tap that reaches x
            for i in range(k):
                lo, hi = max(0, -(-(pb - i * d) // s)), min(o, (n - 1 - i * d + pb) // s + 1)
                if hi > lo:
                    start = lo * s + i * d - pb
                    spans.append((lo, hi, y[lead + (slice(start, start + (hi - lo - 1) * s + 1, s),)]))
            full = [v for lo, hi, v in spans if lo == 0 and hi == o]
            if k == 1 and full:
                y = full[0]
                continue
            if len(full) >= 2:
                acc, used = op(full[0], full[1]), 2
            elif full:
                acc, used = full[0].copy(), 1
            else:
                acc, used = xp.full((*y.shape[: axis + 2], o, *y.shape[axis + 3 :]), identity, y.dtype), 0
            done = {id(v) for v in full[:used]}
            for lo, hi, v in spans:
                if id(v) not in done:
                    part = acc[lead + (slice(lo, hi),)]
                    op(part, v, out=part)
            y = acc
        return y if y.base is None else y.copy()  # a view of the input when every k is 1

    def whole(self, sizes: Sequence[int]) -> bool:
        """Whether there is one window per plane and it is the plane: kernel = size, no
        padding, dilation 1 (a classifier's last 7x7 average pool)."""
        geo = zip(sizes, self.kernel, self.begin, self.end, self.dilation)
        return all(k == n and b == e == 0 and d == 1 for n, k, b, e, d in geo)

    def tiles(self, sizes: Sequence[int], out: Sequence[int]) -> bool:
        """Whether the windows tile the input: stride == kernel, no begin padding, dilation 1,
        and no window past the input's end."""
        geo = zip(sizes, out, self.kernel, self.stride, self.begin, self.dilation)
        return all(k == s and b == 0 and d == 1 and o * k <= n for n, o, k, s, b, d in geo)

    def overlapping(self) -> bool:
        return any(d * (k - 1) + 1 > s for k, s, d in zip(self.kernel, self.stride, self.dilation))


def _flat_last_axis(xp: Any, y: Any, k: int, s: int, d: int, pb: int, op: Any) -> Any:
    """``op`` over windows of ``k`` taps (stride ``s``, dilation ``d``, ``pb`` cells of begin
    padding) along the last axis of C-contiguous ``y``, whose length is ``s`` times the
    output's: a new array.

    Then output cell ``p`` of the flattened result reads input cell ``s*p + offset`` of the
    flattened ``y`` for every row at once, so each tap is one long strided vector op; the
    views of a row-by-row sweep have inner loops only a row long (14 cells in inception's
    pools), measured 1.5-3x slower. A flat tap reaches across row ends into the columns
    nearest the borders, so those few columns are then made again, column by column, from
    the taps that stay inside their row.
    """
    L = y.shape[-1]
    o = L // s
    offs = [i * d - pb for i in range(k)]
    f = y.reshape(-1)
    acc = xp.empty((*y.shape[:-1], o), dtype=y.dtype)
    flat = acc.reshape(-1)
    for t, off in enumerate(offs):
        lo = max(0, -(off // s))  # first and end output cells whose source cell exists
        hi = min(flat.size, (f.size - 1 - off) // s + 1)
        src = f[s * lo + off : s * (hi - 1) + off + 1 : s]
        if t == 0:
            flat[lo:hi] = src
            flat[:lo] = flat[hi:] = 0  # border cells, made again below; never left unset
        else:
            part = flat[lo:hi]
            op(part, src, out=part)
    rows, cols = acc.reshape(-1, o), y.reshape(-1, L)
    first_inside = -(offs[0] // s)  # columns before it, or from `last_inside` on, reach out
    last_inside = (L - 1 - offs[-1]) // s + 1
    for w in [*range(min(o, first_inside)), *range(max(0, last_inside), o)]:
        inside = [s * w + off for off in offs if 0 <= s * w + off < L]  # never empty
        col = rows[:, w]
        col[...] = cols[:, inside[0]]
        for c in inside[1:]:
            op(col, cols[:, c], out=col)
    return acc


class _Pool(Operator):
    """Shared set-up of the windowed pools: check the input, pad it, list the taps."""

    taps: list | None  # the tap views of the padded input; None when a kernel ran forward
    cpu: Any  # the compiled CPU pool kernels (a module) when they ran forward, else None

    def __init__(self, window: _Window) -> None:
        if not isinstance(window, _Window):
            raise _args.bad(
                type(self).__name__, "window", "be a pooling window; call max_pool or avg_pool", window
            )
        super().__init__(window.opname)
        self.win = window

    def kernel_usable(self, x: Any) -> bool:
        """Whether the pool kernels of the CuPy backend take ``x`` (see cupy_kernels.usable)."""
        return self.win.n <= 3 and cupy_kernels.usable(self.xp, x)

    def cpu_kernels(self, x: Any) -> Any:
        """The compiled CPU pool kernels (``backend/cpu_kernels/pool.py``) when they take ``x``
        and are worth it, else None; imported here so that Numba loads only when used.

        Measured on 2 cores against the NumPy code: a recorded pool (forward with the argmax,
        and backward) with output rows of 16 cells took about the same time, one with rows of 7
        to 14 cells 1.7-2.9x (the loops run row by row), except where the windows tile the
        input (``tiles``: LeNet's and VGG's 2x2/2 pools), which has loops of its own; without
        recording, the separable NumPy sweep (``reduce_separably``) was faster (1.2-1.8x the
        kernel's speed).
        """
        n = self.win.n
        wanted = autograd.is_recording() or KERNEL_INFERENCE
        if n > 3 or x.ndim != n + 2 or not wanted or not cpu_kernels.usable(self.xp, x):
            return None
        out = self.win.out_size(x.shape[2:])
        if out[-1] < KERNEL_MIN_ROW and not self.win.tiles(x.shape[2:], out):
            return None
        from singa_lite.backend.cpu_kernels import pool as _pool_kernels

        return _pool_kernels

    def cpu_sweep(self, x: Any) -> Any:
        """The compiled CPU pool kernels for a pool of one or two spatial axes that records no
        backward (their ``pool_sweep``: each plane's passes as long vector loops), else None.
        Measured on one thread against the separable NumPy sweep: 0.3-0.7x its time on the
        3x3 pools of SqueezeNet, Inception and ResNet (111x111 down to 14x14 planes)."""
        if self.win.n > 2 or x.ndim != self.win.n + 2 or not cpu_kernels.usable(self.xp, x):
            return None
        from singa_lite.backend.cpu_kernels import pool as _pool_kernels

        return _pool_kernels

    def cpu_geometry(self, kernels: Any) -> Any:
        """The window as the CPU pool kernels' argument (after ``prepare``)."""
        w = self.win
        return kernels.geometry(self.x_shape[2:], self.out, w.kernel, w.stride, w.begin, w.dilation)

    def geometry(self) -> tuple:
        """The window as the pool kernels' arguments (after ``prepare``)."""
        w = self.win
        return cupy_kernels.pool_geometry(self.x_shape[2:], self.out, w.kernel, w.stride, w.begin, w.dilation)

    def tap_list(self) -> list:
        return self.taps if self.taps is not None else self.win.taps(self.out)

    def prepare(self, x: Any, pad_value: Any, pad: bool = True) -> tuple[Any, list]:
        n = self.win.n
        if x.ndim != n + 2:
            raise self.error(f"expects an (N, C, {n} spatial) input", x)
        if x.dtype.kind not in "fiu":
            raise DTypeError(f"{self.name}: unsupported dtype {x.dtype}")
        sizes = x.shape[2:]
        self.out = self.win.out_size(sizes)
        widths = self.win.pad_widths(sizes, self.out)
        self.x_shape = x.shape
        self.inner = (slice(None), slice(None), *(slice(b, b + s) for (b, _), s in zip(widths, sizes)))
        self.padded_shape = (*x.shape[:2], *(b + s + e for (b, e), s in zip(widths, sizes)))
        if not pad:  # a kernel or the separable sweep reads x itself: no taps to list
            return x, []
        if any(b or e for b, e in widths):
            x = self.xp.pad(x, [(0, 0), (0, 0), *widths], constant_values=pad_value)
        return x, self.win.taps(self.out)


class MaxPool(_Pool):
    """Max over each window; the gradient goes to the window's first maximum."""

    arg: Any  # tap index of each window's maximum, kept only when recording for backward

    def forward(self, x: Any) -> Any:
        xp = self.xp
        low = -xp.inf if x.dtype.kind == "f" else xp.iinfo(x.dtype).min
        self.kernel, self.taps = self.kernel_usable(x), None
        self.cpu = self.cpu_kernels(x)
        if self.kernel or self.cpu:
            self.prepare(x, low, pad=False)
            arg = None  # else the tap loop's dtype, so that either backward can follow
            if autograd.is_recording():
                arg = xp.int8 if _numel(self.win.kernel) < 128 else xp.int32
            if self.cpu:
                y, self.arg = self.cpu.max_pool_forward(x, self.out, self.cpu_geometry(self.cpu), arg)
                return y
            y, self.arg = cupy_kernels.max_pool_forward(xp, x, self.out, self.geometry(), arg)
            return y
        if not autograd.is_recording():  # inference: no argmax to keep, no padding to make
            self.prepare(x, low, pad=False)
            self.arg = None
            if self.win.whole(x.shape[2:]):
                return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)
            sweep = self.cpu_sweep(x)
            if sweep is not None:
                return sweep.pool_sweep(x, self.out, self.cpu_geometry(sweep))
            return self.win.reduce_separably(xp, x, self.out, xp.maximum, low)
        xpad, taps = self.prepare(x, low)
        y = xpad[taps[0]].copy()
        # The tap index of each window's maximum; int8 keeps backward's memory traffic low.
        self.arg = xp.zeros(y.shape, xp.int8 if len(taps) < 128 else xp.int32)
        for t, tap in enumerate(taps[1:], 1):
            v = xpad[tap]
            # Taps come in increasing order, so max(arg, t * (v > y)) sets arg to t exactly
            # where v is a new strict maximum (ties keep the first tap); a masked copy is
            # several times slower on NumPy.
            hit = (v > y).astype(self.arg.dtype) * self.arg.dtype.type(t)
            xp.maximum(self.arg, hit, out=self.arg)
            xp.maximum(y, v, out=y)
        self.taps = taps
        return y

    def backward(self, dy: Any) -> Any:
        xp = self.xp
        overlap = self.win.overlapping()
        if self.kernel:
            dy = xp.ascontiguousarray(dy)
            if cupy_kernels.usable(xp, dy):
                geometry = self.geometry()
                return cupy_kernels.max_pool_backward(xp, dy, self.arg, self.x_shape, geometry, overlap)
        if self.cpu and cpu_kernels.usable(xp, dy):
            return self.cpu.max_pool_backward(dy, self.arg, self.x_shape, self.cpu_geometry(self.cpu))
        dx = xp.zeros(self.padded_shape, dy.dtype)
        for t, tap in enumerate(self.tap_list()):
            hit = self.arg == t
            if overlap:
                dx[tap] += dy * hit
            else:  # taps write disjoint cells, so a plain store beats adding
                xp.multiply(dy, hit, out=dx[tap])
        return dx[self.inner]


class AvgPool(_Pool):
    """Mean over each window.

    With ``count_include_pad`` the divisor counts the padded-input cells a window covers
    (PyTorch: cells past the end padding, reached only in ceil mode, never count); without it
    only the input's own cells count.
    """

    def __init__(self, window: _Window, count_include_pad: bool = True) -> None:
        super().__init__(window)
        self.count_include_pad = count_include_pad

    def forward(self, x: Any) -> Any:
        if x.dtype.kind != "f":
            raise DTypeError(f"{self.name}: needs a floating-point input, got {x.dtype}")
        self.kernel, self.taps, self.dtype = self.kernel_usable(x), None, x.dtype
        self.cpu = self.cpu_kernels(x)
        if self.cpu:
            self.prepare(x, 0, pad=False)
            self.scale = self._inverse_counts(x.dtype)
            return self.cpu.avg_pool_forward(x, self.out, self.cpu_geometry(self.cpu), self.scale)
        if self.kernel:
            self.prepare(x, 0, pad=False)
            w = self.win
            limits = cupy_kernels.count_limits(x.shape[2:], w.begin, w.end, self.count_include_pad)
            return cupy_kernels.avg_pool_forward(self.xp, x, self.out, self.geometry(), limits)
        acc = x.dtype if x.dtype.itemsize >= 4 else self.xp.float32  # sum float16 in float32
        if autograd.is_recording() or acc != x.dtype:
            xpad, self.taps = self.prepare(x, 0)
            y = xpad[self.taps[0]].astype(acc)
            for tap in self.taps[1:]:
                y += xpad[tap]
        else:  # inference: window sums axis by axis (same sums, another rounding order)
            self.prepare(x, 0, pad=False)
            if self.win.whole(x.shape[2:]):  # one window over each plane: a mean
                return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)
            sweep = self.cpu_sweep(x)
            if sweep is not None:
                self.scale = self._inverse_counts(acc)
                return sweep.pool_sweep(x, self.out, self.cpu_geometry(sweep), self.scale)
            y = self.win.reduce_separably(self.xp, x, self.out, self.xp.add, 0)
        self.scale = self._inverse_counts(acc)
        if self.scale.ndim and y.flags.c_contiguous:  # flat images: (Ho, Wo) loops row by row
            flat = y.reshape(*y.shape[:2], _numel(y.shape[2:]))  # -1 fails for N = 0
            flat *= self.scale.reshape(1, 1, -1)
        else:
            y *= self.scale
        return y.astype(x.dtype, copy=False)

    def _inverse_counts(self, dtype: Any) -> Any:
        """1 / (cells counted per window), broadcastable against the output: a scalar where
        every window counts the same. Pure geometry, so it is worked out on the host, once
        per geometry (a batch-1 inference pool spent a quarter of its time here)."""
        win = self.win
        geo = (self.x_shape[2:], self.out, win.kernel, win.stride, win.dilation, win.begin, win.end)
        scale = _inverse_counts(*geo, self.count_include_pad, np.dtype(dtype))
        # a scalar, or the cached read-only array (a device copy on CuPy): no op writes it
        return scale[()] if scale.ndim == 0 else self.xp.asarray(scale)

    def backward(self, dy: Any) -> Any:
        xp = self.xp
        if self.kernel:
            dy = xp.ascontiguousarray(dy)
            if cupy_kernels.usable(xp, dy) and dy.dtype == self.dtype:  # 1 / count in x's dtype
                w = self.win
                limits = cupy_kernels.count_limits(self.x_shape[2:], w.begin, w.end, self.count_include_pad)
                return cupy_kernels.avg_pool_backward(xp, dy, self.x_shape, self.geometry(), limits)
            self.scale = self._inverse_counts(self.dtype)
        if self.cpu and cpu_kernels.usable(xp, dy) and dy.dtype == self.dtype:
            return self.cpu.avg_pool_backward(dy, self.x_shape, self.cpu_geometry(self.cpu), self.scale)
        g = (dy * self.scale).astype(dy.dtype, copy=False)
        dx = xp.zeros(self.padded_shape, dy.dtype)
        for tap in self.tap_list():
            dx[tap] += g
        return dx[self.inner]


@functools.lru_cache(maxsize=256)
def _inverse_counts(
    sizes: tuple,
    out: tuple,
    kernel: tuple,
    stride: tuple,
    dilation: tuple,
    begin: tuple,
    end: tuple,
    include_pad: bool,
    dtype: np.dtype,
) -> np.ndarray:
    """``AvgPool._inverse_counts`` on the host: a 0-d array where every window counts the same
    (read-only: the cache shares it)."""
    n = len(sizes)
    scale = np.ones((1, 1) + (1,) * n, dtype)
    for axis, (size, o, k, s, d, pb, pe) in enumerate(zip(sizes, out, kernel, stride, dilation, begin, end)):
        cells = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d  # padded coordinates
        lo, hi = (0, size + pb + pe) if include_pad else (pb, pb + size)
        count = ((cells >= lo) & (cells < hi)).sum(axis=1)
        shape = [1] * (n + 2)
        shape[axis + 2] = o
        scale = scale / count.reshape(shape).astype(dtype)
    if scale.min() == scale.max():
        scale = np.asarray(scale.flat[0])
    scale.flags.writeable = False
    return scale


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


class GlobalAveragePool(Operator):
    """Mean over every axis after the first two, kept as size-1 axes (ONNX)."""

    def forward(self, x: Any) -> Any:
        if x.ndim < 3:
            raise self.error("expects an (N, C, *spatial) input with at least one spatial axis", x)
        if x.dtype.kind != "f":
            raise DTypeError(f"{self.name}: needs a floating-point input, got {x.dtype}")
        self.x_shape = x.shape
        return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)

    def backward(self, dy: Any) -> Any:
        n = _numel(self.x_shape[2:])
        return self.xp.broadcast_to(dy / dy.dtype.type(n), self.x_shape).astype(dy.dtype)


class GlobalMaxPool(Operator):
    """Max over every axis after the first two, kept as size-1 axes (ONNX).

    The gradient goes to the first maximum of each channel.
    """

    def forward(self, x: Any) -> Any:
        if x.ndim < 3:
            raise self.error("expects an (N, C, *spatial) input with at least one spatial axis", x)
        self.x_shape = x.shape
        flat = x.reshape(x.shape[0] * x.shape[1], -1)
        self.arg = flat.argmax(axis=1)
        return flat.max(axis=1).reshape(x.shape[:2] + (1,) * (x.ndim - 2))

    def backward(self, dy: Any) -> Any:
        xp = self.xp
        rows = self.arg.shape[0]
        dx = xp.zeros((rows, _numel(self.x_shape[2:])), dy.dtype)
        dx[xp.arange(rows), self.arg] = dy.reshape(-1)
        return dx.reshape(self.x_shape)


def max_pool(
    x: Tensor,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: IntOrSeq = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
) -> Tensor:
    """Max pooling over every spatial axis of ``(N, C, *spatial)`` (1-D, 2-D, 3-D...: ONNX MaxPool)."""
    n = max(len(_args.tensor("max_pool", "x", x).shape) - 2, 1)
    return MaxPool(_Window(n, kernel_size, stride, padding, dilation, ceil_mode, "max_pool"))(x)[0]


def avg_pool(
    x: Tensor,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: IntOrSeq = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    dilation: IntOrSeq = 1,
) -> Tensor:
    """Average pooling over every spatial axis of ``(N, C, *spatial)`` (ONNX AveragePool)."""
    n = max(len(_args.tensor("avg_pool", "x", x).shape) - 2, 1)
    win = _Window(n, kernel_size, stride, padding, dilation, ceil_mode, "avg_pool")
    return AvgPool(win, count_include_pad)(x)[0]


def max_pool2d(
    x: Tensor,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: IntOrSeq = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
) -> Tensor:
    """2-D max pooling of an ``(N, C, H, W)`` tensor, padding with -inf.

    ``stride`` defaults to the kernel size; ``padding`` is an int, ``(ph, pw)`` or
    ``(top, bottom, left, right)``.

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> x = tensor.from_numpy(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    >>> tensor.to_numpy(max_pool2d(x, 2)).reshape(-1).tolist()
    [5.0, 7.0, 13.0, 15.0]
    """
    return MaxPool(_Window(2, kernel_size, stride, padding, dilation, ceil_mode, "max_pool2d"))(x)[0]


def avg_pool2d(
    x: Tensor,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: IntOrSeq = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    dilation: IntOrSeq = 1,
) -> Tensor:
    """2-D average pooling of an ``(N, C, H, W)`` tensor.

    ``count_include_pad`` defaults to True as in PyTorch and SINGA (ONNX's AveragePool
    defaults to 0, so its importer passes the attribute explicitly). Results match
    ``torch.nn.functional.avg_pool2d`` including ceil mode.
    """
    win = _Window(2, kernel_size, stride, padding, dilation, ceil_mode, "avg_pool2d")
    return AvgPool(win, count_include_pad)(x)[0]


def max_pool1d(
    x: Tensor,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: IntOrSeq = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
) -> Tensor:
    """1-D max pooling of an ``(N, C, L)`` tensor; ``padding`` is an int or ``(begin, end)``."""
    return MaxPool(_Window(1, kernel_size, stride, padding, dilation, ceil_mode, "max_pool1d"))(x)[0]


def avg_pool1d(
    x: Tensor,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: IntOrSeq = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    dilation: IntOrSeq = 1,
) -> Tensor:
    """1-D average pooling of an ``(N, C, L)`` tensor; see :func:`avg_pool2d`."""
    win = _Window(1, kernel_size, stride, padding, dilation, ceil_mode, "avg_pool1d")
    return AvgPool(win, count_include_pad)(x)[0]


def global_average_pool(x: Tensor) -> Tensor:
    """Mean over all spatial axes of ``(N, C, *spatial)``, giving ``(N, C, 1, ..., 1)``."""
    return GlobalAveragePool()(x)[0]


def global_max_pool(x: Tensor) -> Tensor:
    """Max over all spatial axes of ``(N, C, *spatial)``, giving ``(N, C, 1, ..., 1)``."""
    return GlobalMaxPool()(x)[0]

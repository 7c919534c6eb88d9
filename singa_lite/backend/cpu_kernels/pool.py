"""Max and average pooling over up to three spatial axes, forward and backward, one pass each.

``ops.pool`` visits a window one kernel tap at a time, a NumPy pass over a strided view of a
padded copy of the input per tap (three passes per tap for a recorded max pool's argmax);
these loops visit each window once, skipping the cells outside the input instead of padding
it. Pools of fewer axes are taken as three with leading axes of size 1; the ``(image,
channel)`` planes are shared out over the threads.

Coordinates as ``ops.pool`` has them: output cell ``o`` of an axis covers padded cells
``o * stride + i * dilation`` for taps ``i < kernel``, input cell ``z`` being padded cell
``z + begin``; cells past the end padding that a ceil-mode window reaches are padding too.
Forward runs the taps in the reference's order (first axis outermost): the max pool keeps the
first maximum's tap index (a NaN makes the value NaN and leaves the index at the maximum
before it, as ``np.maximum`` and the reference's strict ``>`` do), and the average pool's sum
rounds as the tap loop's does. Backward scatters each output cell's gradient over its window,
windows in order: where windows overlap, a cell's terms are added in another order than the
reference's (the same sum, rounded differently when a cell collects three or more).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import prange

from singa_lite.backend.cpu_kernels import threads
from singa_lite.backend.cpu_kernels._jit import exact, helper
from singa_lite.backend.cpu_kernels._math import like


def geometry(
    sizes: Sequence[int],
    out: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    begin: Sequence[int],
    dilation: Sequence[int],
) -> np.ndarray:
    """The loops' window arguments as one int64 array: sizes, outputs, kernel, stride, begin
    padding and dilation of three axes, fewer axes padded in front with a 1-cell axis.

    >>> geometry((5,), (3,), (2,), (2,), (1,), (1,)).tolist()
    [1, 1, 5, 1, 1, 3, 1, 1, 2, 1, 1, 2, 0, 0, 1, 1, 1, 1]
    """
    lead = 3 - len(sizes)
    args: list[int] = []
    for values, fill in ((sizes, 1), (out, 1), (kernel, 1), (stride, 1), (begin, 0), (dilation, 1)):
        args.extend((fill,) * lead + tuple(int(v) for v in values))
    return np.array(args, np.int64)


_U = np.uint64


@helper
def _spans(g: Any) -> Any:
    """Per tap ``i`` of the last axis, the output columns ``[lo, hi)`` whose cell
    ``o * stride + i * dilation - begin`` lies in the input (``hi <= lo`` for none)."""
    size, out, k, s, pad, d = g[2], g[5], g[8], g[11], g[14], g[17]
    spans = np.zeros((k, 2), np.int64)
    for i in range(k):
        off = i * d - pad
        lo = -(off // s) if off < 0 else 0
        hi = (size - 1 - off) // s + 1 if size - 1 - off >= 0 else 0
        spans[i, 0], spans[i, 1] = lo, min(hi, out)
    return spans


@helper
def _row(x: Any, start: int, size: int, s: int, ph: Any) -> Any:
    """The input row at ``start`` as the loops read it: ``x`` itself at stride 1; else its
    cells split by phase into ``ph`` (phase ``r`` holds cells ``u*s + r``), so that a tap's
    cells ``q*s + off`` are one contiguous run there. A strided read kept the select loops
    from vectorising (6x slower than the split and contiguous loops together)."""
    if s == 1:
        return x
    width = ph.size // s
    for r in range(s):
        for u in range((size - r + s - 1) // s):
            ph[_U(r * width + u)] = x[_U(start + u * s + r)]
    return ph


@helper
def _tap_start(start: int, lo: int, off: int, s: int, width: int) -> Any:
    """Where :func:`_row`'s result holds a tap's cell for output column ``lo``: the cell
    ``lo*s + off`` of the row starting at ``start`` (stride 1) or of the phase split."""
    if s == 1:
        return _U(start + lo + off)
    return _U((off % s) * width + lo + off // s)


# Each output row (the last axis) is built tap by tap, one vector loop per tap over the output
# columns whose cell is inside the input; the loops index flat arrays with uint64 offsets (a
# signed index may be negative to Numba, which then wraps it: a branch per element that
# stops vectorisation).
@exact
def _max_forward(x: Any, y: Any, arg: Any, g: Any, want_arg: bool) -> None:
    S0, S1, S2, O0, O1, O2 = g[0], g[1], g[2], g[3], g[4], g[5]
    k0, k1, k2, s0, s1, s2 = g[6], g[7], g[8], g[9], g[10], g[11]
    p0, p1, p2, d0, d1, d2 = g[12], g[13], g[14], g[15], g[16], g[17]
    spans = _spans(g)
    low = like(x, -np.inf)
    us2 = _U(s2)
    for p in prange(x.size // (S0 * S1 * S2)):
        # the row's taps as int32, the width of a float32: an int8 lane next to float lanes
        # kept the select loop from vectorising (6x slower)
        best = np.zeros(O2, np.int32)
        width = (S2 + s2 - 1) // s2
        ph = np.empty(width * s2, x.dtype)
        for o0 in range(O0):
            for o1 in range(O1):
                ys = _U(((p * O0 + o0) * O1 + o1) * O2)
                for q in range(O2):
                    y[ys + _U(q)] = low
                    best[q] = 0
                for i0 in range(k0):
                    z0 = o0 * s0 - p0 + i0 * d0
                    if z0 < 0 or z0 >= S0:
                        continue
                    for i1 in range(k1):
                        z1 = o1 * s1 - p1 + i1 * d1
                        if z1 < 0 or z1 >= S1:
                            continue
                        start = ((p * S0 + z0) * S1 + z1) * S2
                        # the split costs a strided read of the row: worth it for the select
                        # of the argmax only, the plain max vectorises on strided reads
                        split = want_arg and s2 > 1
                        src = _row(x, start, S2, s2 if split else 1, ph)
                        for i2 in range(k2):
                            lo, hi = spans[i2, 0], spans[i2, 1]
                            if hi <= lo:
                                continue
                            tap = (i0 * k1 + i1) * k2 + i2
                            xs = _tap_start(start, lo, i2 * d2 - p2, s2 if split else 1, width)
                            yl = ys + _U(lo)
                            n = _U(hi - lo)
                            if split:
                                t = np.int32(tap)
                                bl = _U(lo)
                                for q in range(n):
                                    v, b = src[xs + q], y[yl + q]
                                    # strict: ties keep the earlier tap; NaN wins, as np.maximum's
                                    y[yl + q] = v if v > b or v != v else b
                                    best[bl + q] = t if v > b else best[bl + q]
                            elif want_arg:
                                t = np.int32(tap)
                                bl = _U(lo)
                                for q in range(n):
                                    v, b = src[xs + q], y[yl + q]
                                    y[yl + q] = v if v > b or v != v else b
                                    best[bl + q] = t if v > b else best[bl + q]
                            else:
                                xg = _U(start + lo * s2 + i2 * d2 - p2)
                                for q in range(n):
                                    v, b = x[xg + q * us2], y[yl + q]
                                    y[yl + q] = v if v > b or v != v else b
                if want_arg:
                    for q in range(O2):
                        arg[ys + _U(q)] = best[q]


@exact
def _max_backward(dy: Any, arg: Any, dx: Any, g: Any) -> None:
    S0, S1, S2, O0, O1, O2 = g[0], g[1], g[2], g[3], g[4], g[5]
    k0, k1, k2, s0, s1, s2 = g[6], g[7], g[8], g[9], g[10], g[11]
    p0, p1, p2, d0, d1, d2 = g[12], g[13], g[14], g[15], g[16], g[17]
    # a tap's offset on each axis, looked up rather than divided out per cell
    taps = np.empty((k0 * k1 * k2, 3), np.int64)
    for i0 in range(k0):
        for i1 in range(k1):
            for i2 in range(k2):
                t = (i0 * k1 + i1) * k2 + i2
                taps[t, 0], taps[t, 1], taps[t, 2] = i0 * d0 - p0, i1 * d1 - p1, i2 * d2 - p2
    plane = S0 * S1 * S2
    for p in prange(dx.size // plane):
        for e in range(plane):
            dx[_U(p * plane + e)] = 0
        for o0 in range(O0):
            for o1 in range(O1):
                ys = ((p * O0 + o0) * O1 + o1) * O2
                for o2 in range(O2):
                    t = np.int64(arg[_U(ys + o2)])
                    z0, z1, z2 = o0 * s0 + taps[t, 0], o1 * s1 + taps[t, 1], o2 * s2 + taps[t, 2]
                    # A window with no maximum inside the input (all -inf or NaN) points at
                    # its first tap, maybe padding: the reference drops that gradient too.
                    if z0 >= 0 and z0 < S0 and z1 >= 0 and z1 < S1 and z2 >= 0 and z2 < S2:
                        dx[_U(p * plane + (z0 * S1 + z1) * S2 + z2)] += dy[_U(ys + o2)]


@exact
def _avg_forward(x: Any, y: Any, scale: Any, g: Any) -> None:
    S0, S1, S2, O0, O1, O2 = g[0], g[1], g[2], g[3], g[4], g[5]
    k0, k1, k2, s0, s1, s2 = g[6], g[7], g[8], g[9], g[10], g[11]
    p0, p1, p2, d0, d1, d2 = g[12], g[13], g[14], g[15], g[16], g[17]
    spans = _spans(g)
    us2 = _U(s2)
    for p in prange(x.size // (S0 * S1 * S2)):
        for o0 in range(O0):
            for o1 in range(O1):
                ys = _U(((p * O0 + o0) * O1 + o1) * O2)
                for q in range(O2):
                    y[ys + _U(q)] = 0
                for i0 in range(k0):
                    z0 = o0 * s0 - p0 + i0 * d0
                    if z0 < 0 or z0 >= S0:
                        continue
                    for i1 in range(k1):
                        z1 = o1 * s1 - p1 + i1 * d1
                        if z1 < 0 or z1 >= S1:
                            continue
                        start = ((p * S0 + z0) * S1 + z1) * S2
                        for i2 in range(k2):
                            lo, hi = spans[i2, 0], spans[i2, 1]
                            if hi > lo:
                                xs = _U(start + lo * s2 + i2 * d2 - p2)
                                yl = ys + _U(lo)
                                for q in range(_U(hi - lo)):
                                    y[yl + q] += x[xs + q * us2]
                sc = _U((o0 * O1 + o1) * O2)
                for q in range(_U(O2)):
                    y[ys + q] *= scale[sc + q]


@exact
def _avg_backward(dy: Any, dx: Any, scale: Any, g: Any) -> None:
    S0, S1, S2, O0, O1, O2 = g[0], g[1], g[2], g[3], g[4], g[5]
    k0, k1, k2, s0, s1, s2 = g[6], g[7], g[8], g[9], g[10], g[11]
    p0, p1, p2, d0, d1, d2 = g[12], g[13], g[14], g[15], g[16], g[17]
    spans = _spans(g)
    us2 = _U(s2)
    plane = S0 * S1 * S2
    for p in prange(dx.size // plane):
        row = np.empty(O2, dy.dtype)
        for e in range(plane):
            dx[_U(p * plane + e)] = 0
        for o0 in range(O0):
            for o1 in range(O1):
                ys, sc = _U(((p * O0 + o0) * O1 + o1) * O2), _U((o0 * O1 + o1) * O2)
                for q in range(_U(O2)):
                    row[q] = dy[ys + q] * scale[sc + q]
                for i0 in range(k0):
                    z0 = o0 * s0 - p0 + i0 * d0
                    if z0 < 0 or z0 >= S0:
                        continue
                    for i1 in range(k1):
                        z1 = o1 * s1 - p1 + i1 * d1
                        if z1 < 0 or z1 >= S1:
                            continue
                        for i2 in range(k2):
                            lo, hi = spans[i2, 0], spans[i2, 1]
                            if hi > lo:
                                xs = _U(((p * S0 + z0) * S1 + z1) * S2 + lo * s2 + i2 * d2 - p2)
                                for q in range(_U(hi - lo)):
                                    dx[xs + q * us2] += row[_U(lo) + q]


# -- windows that tile the input -----------------------------------------------------------------
# Kernel equal to the stride, no padding, no dilation (the 2x2/2 max pool of most CNNs): each
# input cell is in one window at most, so a window is read once where it lies and its gradient
# goes straight to the one cell its argmax names. The row loops above pay their setup per
# output row, which took 1.7-2.9x NumPy's time on rows of 7 and 14 cells.
def _tiles(g: np.ndarray) -> bool:
    """Whether window ``g`` (:func:`geometry`) tiles the input: on every axis stride == kernel,
    no begin padding, dilation 1, and the windows inside the input (no ceil-mode overhang)."""
    S, O, k, s, b, d = g[0:3], g[3:6], g[6:9], g[9:12], g[12:15], g[15:18]
    return bool((k == s).all() and (b == 0).all() and (d == 1).all() and (O * k <= S).all())


@exact
def _max_tiles_forward(x: Any, y: Any, arg: Any, g: Any, want_arg: bool) -> None:
    """Each window's maximum, taps in the reference's order (the first maximum's tap in ``arg``,
    a NaN kept as ``_max_forward`` keeps it). Without branches: on random data a branch per
    comparison mispredicts half the time (9.5 ms against 3.8 for LeNet's first pool)."""
    S0, S1, S2, O0, O1, O2 = g[0], g[1], g[2], g[3], g[4], g[5]
    k0, k1, k2 = g[6], g[7], g[8]
    low = like(x, -np.inf)
    for p in prange(x.size // (S0 * S1 * S2)):
        for o0 in range(O0):
            for o1 in range(O1):
                ys = _U(((p * O0 + o0) * O1 + o1) * O2)
                for o2 in range(O2):
                    b = low
                    t = 0
                    for i0 in range(k0):
                        for i1 in range(k1):
                            xr = _U(((p * S0 + o0 * k0 + i0) * S1 + o1 * k1 + i1) * S2 + o2 * k2)
                            for i2 in range(k2):
                                v = x[xr + _U(i2)]
                                c = v > b
                                t = ((i0 * k1 + i1) * k2 + i2) if c else t
                                b = v if (c | (v != v)) else b
                    y[ys + _U(o2)] = b
                    if want_arg:
                        arg[ys + _U(o2)] = t


@helper
def _take(v: Any, i: Any, b: Any, t: Any) -> tuple[Any, Any]:
    """One tap of :func:`_max_tiles_forward`'s comparison: ``(best, tap)`` after value ``v`` of
    tap ``i``."""
    c = v > b
    return (v if (c | (v != v)) else b), (i if c else t)


@exact
def _max_2x2_forward(x: Any, y: Any, arg: Any, g: Any, want_arg: bool) -> None:
    """:func:`_max_tiles_forward` for 2x2 windows at stride 2 (LeNet's and VGG's pools), its
    four taps written out, so that a row of windows is one loop of selects that vectorises
    across the row (two interleaved loads per input row): 4.9 -> ~1 ms on LeNet's first pool,
    the generic loop's taps being loops of runtime length."""
    S1, S2, O1, O2 = g[1], g[2], g[4], g[5]
    low = like(x, -np.inf)
    for p in prange(x.size // (S1 * S2)):
        for o1 in range(O1):
            r0 = _U((p * S1 + 2 * o1) * S2)
            r1 = r0 + _U(S2)
            ys = _U((p * O1 + o1) * O2)
            for o2 in range(_U(O2)):
                q = _U(2) * o2
                b, t = _take(x[r0 + q], 0, low, 0)
                b, t = _take(x[r0 + q + _U(1)], 1, b, t)
                b, t = _take(x[r1 + q], 2, b, t)
                b, t = _take(x[r1 + q + _U(1)], 3, b, t)
                y[ys + o2] = b
                if want_arg:
                    arg[ys + o2] = t


@exact
def _max_tiles_backward(dy: Any, arg: Any, dx: Any, g: Any) -> None:
    """Each ``dy`` cell to the input cell its window's ``arg`` names; every other cell 0."""
    S0, S1, S2, O0, O1, O2 = g[0], g[1], g[2], g[3], g[4], g[5]
    k0, k1, k2 = g[6], g[7], g[8]
    # each tap's offset from its window's first cell, looked up (a division per cell cost more
    # than the rest of the loop)
    offsets = np.empty(k0 * k1 * k2, np.int64)
    for i0 in range(k0):
        for i1 in range(k1):
            for i2 in range(k2):
                offsets[(i0 * k1 + i1) * k2 + i2] = (i0 * S1 + i1) * S2 + i2
    plane = S0 * S1 * S2
    for p in prange(dx.size // plane):
        for e in range(plane):
            dx[_U(p * plane + e)] = 0
        for o0 in range(O0):
            for o1 in range(O1):
                ys = ((p * O0 + o0) * O1 + o1) * O2
                row = ((p * S0 + o0 * k0) * S1 + o1 * k1) * S2
                for o2 in range(O2):
                    z = row + o2 * k2 + offsets[np.int64(arg[_U(ys + o2)])]
                    dx[_U(z)] = dy[_U(ys + o2)]


# -- inference: each plane in rows of padded width -----------------------------------------------
# With no argmax to keep, a 1-D or 2-D pool is separable: the max (or sum) over a window's rows,
# then over its columns. The row loops above run one output row at a time, each tap a loop of
# one row's cells (7 to 56 here): short loops that run their scalar remainders. Here a plane
# is laid out in rows of ``Wp`` cells, ``Wp`` a multiple of the column stride and wide enough
# for the left padding, the input row and the last window's reach, the padding cells holding
# the reduction's identity (-inf, 0). Then every pass runs over a whole plane as one loop of
# unit stride: tap ``i`` of the rows reads cell ``t + i*dh*Wp`` of the padded plane (stride-1
# rows) for output cell ``t`` of a plane of ``Ho`` rows of ``Wp`` cells; tap ``j`` of the
# columns reads cell ``t + j*dw`` of that; the columns an output row keeps are ``q*sw``, read
# out in a last strided copy. The row pass of a strided pool reads the input rows in place
# (each output row's ``kh`` input rows), one loop per row of ``W`` cells. A column stride of
# 2 makes the column pass twice the output's cells, but as vector loops: a strided read there
# compiles to gathers or scalar code, measured 1.3-2x slower than these loops together.
@helper
def _fold(dst: Any, d0: Any, src: Any, s0: Any, n: Any, use_max: bool, first: bool) -> None:
    """``dst[d0 + t]`` set to ``src[s0 + t]`` (``first``), else to its max with it (NaN kept,
    as ``np.maximum`` keeps it) or sum, for ``t < n``."""
    if first:
        for t in range(n):
            dst[d0 + t] = src[s0 + t]
    elif use_max:
        for t in range(n):
            a, b = dst[d0 + t], src[s0 + t]
            dst[d0 + t] = a if (a >= b) | (a != a) else b
    else:
        for t in range(n):
            dst[d0 + t] = dst[d0 + t] + src[s0 + t]


@exact
def _sweep(x: Any, y: Any, scale: Any, g: Any, use_max: bool, chunks: int) -> None:
    H, W, Ho, Wo = g[1], g[2], g[4], g[5]
    kh, kw, sh, sw, pt, pl, dh, dw = g[7], g[8], g[10], g[11], g[13], g[14], g[16], g[17]
    Wp = -(-max((Wo - 1) * sw + (kw - 1) * dw + 1, pl + W) // sw) * sw
    Hp = max((Ho - 1) * sh + (kh - 1) * dh + 1, pt + H)
    ident = like(x, -np.inf) if use_max else like(x, 0.0)
    n = _U(Ho * Wp)
    planes = x.size // (H * W)
    per_cell = scale.size > 1
    for chunk in prange(chunks):
        padded = np.full(Hp * Wp if sh == 1 else 0, ident, x.dtype)
        rows = np.full(Ho * Wp + (kw - 1) * dw, ident, x.dtype)  # the cells past n: a tap's reach
        cols = np.empty(Ho * Wp, x.dtype)
        for p in range(chunk * planes // chunks, (chunk + 1) * planes // chunks):
            xb = p * H * W
            if sh == 1:  # the plane padded, then each row tap one loop over all the rows
                for h in range(H):
                    _fold(padded, _U((h + pt) * Wp + pl), x, _U(xb + h * W), _U(W), use_max, True)
                for i in range(kh):
                    _fold(rows, _U(0), padded, _U(i * dh * Wp), n, use_max, i == 0)
            else:  # each output row from its input rows in place; rows outside are skipped
                for r in range(Ho):
                    first = True
                    for i in range(kh):
                        h = r * sh + i * dh - pt
                        if h >= 0 and h < H:
                            _fold(rows, _U(r * Wp + pl), x, _U(xb + h * W), _U(W), use_max, first)
                            first = False
            for j in range(kw):
                _fold(cols, _U(0), rows, _U(j * dw), n, use_max, j == 0)
            yb = p * Ho * Wo
            for r in range(Ho):
                a, c = _U(yb + r * Wo), _U(r * Wp)
                if use_max:
                    for q in range(_U(Wo)):
                        y[a + q] = cols[c + q * _U(sw)]
                elif per_cell:
                    for q in range(_U(Wo)):
                        y[a + q] = cols[c + q * _U(sw)] * scale[_U(r * Wo) + q]
                else:
                    for q in range(_U(Wo)):
                        y[a + q] = cols[c + q * _U(sw)] * scale[0]


def pool_sweep(x: np.ndarray, out: Sequence[int], geo: np.ndarray, scale: Any = None) -> np.ndarray:
    """The max pool (``scale`` None) or average pool (each window's sum times ``scale``, as in
    :func:`avg_pool_forward`) of ``x (N, C, *spatial)``, one or two spatial axes (``geo``'s
    first axis of size 1), without an argmax: for inference. The max propagates a NaN as
    ``np.maximum`` does; sums add each window's rows first, then its columns, as the NumPy
    sweep ``ops.pool._Window.reduce_separably`` does."""
    y = np.empty((*x.shape[:2], *out), x.dtype)
    if y.size:
        planes = x.shape[0] * x.shape[1]
        use_max = scale is None
        if use_max or np.ndim(scale) == 0:  # one factor for every cell
            factors = np.full(1, 1 if use_max else scale, x.dtype)
        else:
            factors = _scale(scale, out, x.dtype)
        work = x.size * int(geo[7] + geo[8]) + y.size
        chunks = min(planes, 4 * threads.count())
        _sweep(work, _flat(x), y.reshape(-1), factors, geo, use_max, chunks)
    return y


def _flat(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1)


def max_pool_forward(
    x: np.ndarray, out: Sequence[int], geo: np.ndarray, arg_dtype: Any
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(y, arg)``: the max pool of ``x (N, C, *spatial)`` (up to three spatial axes) into
    spatial size ``out``, window ``geo`` (:func:`geometry`); ``arg``, each window's first
    maximum as its tap index in ``arg_dtype`` (row-major over the kernel), only when
    ``arg_dtype`` is given."""
    y = np.empty((*x.shape[:2], *out), x.dtype)
    want = arg_dtype is not None
    arg = np.empty(y.shape, arg_dtype) if want else np.empty(0, np.int8)
    if y.size:
        work = y.size * int(np.prod(geo[6:9]))
        loops = _max_tiles_forward if _tiles(geo) else _max_forward
        if loops is _max_tiles_forward and geo[6] == 1 and geo[7] == 2 and geo[8] == 2:
            loops = _max_2x2_forward  # 2x2 at stride 2: the taps written out
        loops(work, _flat(x), y.reshape(-1), arg.reshape(-1), geo, want)
    return y, (arg if want else None)


def max_pool_backward(dy: np.ndarray, arg: np.ndarray, x_shape: Sequence[int], geo: np.ndarray) -> np.ndarray:
    """The max pool's input gradient from ``dy`` and the forward's ``arg``, in ``dy``'s dtype."""
    dx = np.empty(tuple(x_shape), dy.dtype)
    if dx.size:
        loops = _max_tiles_backward if _tiles(geo) else _max_backward
        loops(dx.size + dy.size, _flat(dy), _flat(arg), dx.reshape(-1), geo)
    return dx


def avg_pool_forward(x: np.ndarray, out: Sequence[int], geo: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The average pool of ``x (N, C, *spatial)`` into spatial size ``out``: each window's sum
    of the input cells it covers, times ``scale`` (1 / cells counted; a scalar, or one per
    output cell broadcastable to ``(1, 1, *out)``)."""
    y = np.empty((*x.shape[:2], *out), x.dtype)
    if y.size:
        work = y.size * int(np.prod(geo[6:9]))
        _avg_forward(work, _flat(x), y.reshape(-1), _scale(scale, out, x.dtype), geo)
    return y


def avg_pool_backward(
    dy: np.ndarray, x_shape: Sequence[int], geo: np.ndarray, scale: np.ndarray
) -> np.ndarray:
    """The average pool's input gradient: each output cell's ``dy * scale`` added to the
    input cells of its window."""
    dx = np.empty(tuple(x_shape), dy.dtype)
    if dx.size:
        work = dy.size * int(np.prod(geo[6:9]))
        _avg_backward(work, _flat(dy), dx.reshape(-1), _scale(scale, dy.shape[2:], dy.dtype), geo)
    return dx


def _scale(scale: Any, out: Sequence[int], dtype: Any) -> np.ndarray:
    """``scale`` (a scalar, or an array broadcastable to ``(1, 1, *out)``) as a flat
    contiguous array of one value per output cell, in ``dtype``."""
    s = np.asarray(scale, dtype)
    full = np.broadcast_to(s.reshape(s.shape[2:]) if s.ndim > 2 else s, tuple(out))
    return np.ascontiguousarray(full).reshape(-1)

"""Depthwise convolution (one input channel per group, channel multiplier ``m``), forward and
backward, as loops over whole planes.

The NumPy reference (``ops.depthwise.Depthwise``, the engine's ``depthwise`` strategy) runs a
depthwise conv as ``kh*kw`` passes of a multiply and an add over shifted views of a padded copy
of the input, each pass a NumPy call on one core. These loops make the same passes over one
plane at a time, in cache, as vector loops with no branch: an input plane is first split into
its ``sh*sw`` *phase planes* (rows ``pa, pa + sh, ...`` and columns ``pb, pb + sw, ...``),
kept in rows of ``Wb`` cells with zeros where the input ends. With ``a = i*dh - top = sh*oa +
pa`` (floor division) and ``b = j*dw - left = sw*ob + pb``, tap ``(i, j)`` of output cell
``(r, q)`` reads cell ``(r + oa, q + ob)`` of phase ``(pa, pb)``: output cell ``v`` of a plane
of ``Ho`` rows of ``Wb`` cells reads phase cell ``v`` plus a fixed offset, so each tap is one
loop over the plane (three taps to a loop), the padding's zero products included as in the
reference, and the ``Wb - Wo`` extra cells of each row are dropped. ``dx`` is the transpose:
each of its phases is a stride-1 correlation of ``dy`` (in rows of ``Wb`` with zeros around)
with that phase's taps, put back in place; ``dw`` multiplies ``dy`` by the same phase planes,
one loop per tap into per-lane float64 partial sums. The ``(image, channel)`` planes are shared
out over the threads in chunks (backward: the input channels, each with its ``m`` output
channels, so that ``dw`` needs no reduction across threads).

Sums run in the reference's order and rounding (``exact``: no fused multiply-add): forward,
each output cell adds its taps in ``(i, j)`` order to zero; backward, each input cell of
``dx`` adds its taps in the same order (with ``m > 1`` the multiplier's planes one after
another, where the reference sums them last). ``dw`` is summed in float64 from products in the
input's dtype, one partial sum per lane, added in a fixed order at the end, so the result does
not depend on the number of threads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange

from singa_lite.backend.cpu_kernels import _jit
from singa_lite.backend.cpu_kernels._jit import exact, helper
from singa_lite.backend.cpu_kernels._math import like
from singa_lite.backend.cpu_kernels._planes import fill, rows_into

_U = np.uint64
_CHUNKS = 64
"""The forward's planes go to the threads in up to this many chunks, each with its own buffers
(one chunk when the loop runs serial: with 64, every plane of a layer of up to 64 channels got
buffers allocated and zeroed for it alone)."""


# The loops index flat arrays with uint64 offsets: Numba wraps a signed index that may be
# negative (Python's a[-1]), a branch per element that keeps LLVM from vectorising, and array
# views made inside the loops cost a reference count each (slower than a short row's work).
@helper
def _axpy(yf: Any, ys: Any, xf: Any, xs: Any, wt: Any, n: Any) -> None:
    """``yf[ys + t] += xf[xs + t] * wt`` for ``t < n``."""
    for t in range(n):
        yf[ys + t] += xf[xs + t] * wt


@helper
def _lanes(af: Any, a0: Any, gf: Any, g0: Any, xf: Any, x0: Any, n: Any) -> None:
    """``af[a0 + t] += gf[g0 + t] * xf[x0 + t]``: ``dw``'s per-lane partial sums (float64) from
    products in the input's dtype."""
    for t in range(n):
        af[a0 + t] += gf[g0 + t] * xf[x0 + t]


@helper
def _taps3(yf: Any, ys: Any, xf: Any, p0: Any, p1: Any, p2: Any, w0: Any, w1: Any, w2: Any, n: Any) -> None:
    """Three taps in one pass: ``yf[ys + t] += xf[p0 + t] * w0 + xf[p1 + t] * w1 + xf[p2 + t] *
    w2``, added left to right as the tap-by-tap reference adds them. Three at a time, not all
    nine: LLVM vectorises a loop only while it needs at most 8 run-time overlap checks of the
    pointers."""
    for t in range(n):
        yf[ys + t] = yf[ys + t] + xf[p0 + t] * w0 + xf[p1 + t] * w1 + xf[p2 + t] * w2


@helper
def _tap_pass(
    yf: Any,
    yb: Any,
    n: Any,
    xf: Any,
    offs: Any,
    taps: Any,
    first: int,
    count: int,
    wf: Any,
    wb: int,
    zero: bool,
) -> None:
    """``yf[yb + t]`` (set with ``zero``, else added to) ``+= sum of xf[offs[k] + t] * wf[wb +
    taps[k]]`` over the taps ``k`` in ``[first, first + count)`` in their order, for ``t < n``."""
    if zero:
        for t in range(n):
            yf[yb + t] = 0
    k, end = first, first + count
    while k + 3 <= end:
        w0, w1, w2 = wf[_U(wb + taps[k])], wf[_U(wb + taps[k + 1])], wf[_U(wb + taps[k + 2])]
        _taps3(yf, yb, xf, _U(offs[k]), _U(offs[k + 1]), _U(offs[k + 2]), w0, w1, w2, n)
        k += 3
    while k < end:
        _axpy(yf, yb, xf, _U(offs[k]), wf[_U(wb + taps[k])], n)
        k += 1


@helper
def _window_row(s: Any, a: Any, i: Any, b: Any, j: Any, c: Any, k: Any, wa: Any, wb: Any, wc: Any) -> Any:
    """``s`` plus one window row's three taps, ``a[i] * wa``, ``b[j] * wb``, ``c[k] * wc``,
    added in that order."""
    return s + a[i] * wa + b[j] * wb + c[k] * wc


@helper
def _clamp(v: Any, lo: Any, hi: Any) -> Any:
    """``v`` clamped to ``[lo, hi]`` as ``np.clip`` does it (a NaN stays NaN)."""
    v = lo if v < lo else v
    return hi if v > hi else v


@helper
def _rows_out(
    dst: Any, d0: int, wo: int, src: Any, wb: int, rows: int, b: Any, lo: Any, hi: Any, clamp: bool
) -> None:
    """Rows of ``src`` (``wb`` apart) into ``dst`` (``wo`` apart from ``d0``), ``b`` added to
    each cell and, with ``clamp``, the sum clamped to ``[lo, hi]``: the conv's bias and a
    fused ReLU or Clip, added and rounded as the separate passes do (a NaN stays NaN)."""
    for r in range(rows):
        a, c = _U(d0 + r * wo), _U(r * wb)
        if clamp:
            for t in range(_U(wo)):
                dst[a + t] = _clamp(src[c + t] + b, lo, hi)
        else:
            for t in range(_U(wo)):
                dst[a + t] = src[c + t] + b


@helper
def _phase_layout(geo: Any, kh: int, kw: int, Ho: int, Wo: int) -> Any:
    """The phase planes of one call (see the module's docstring): ``(oa_lo, ob_lo, Hb, Wb,
    span, rows, cols)`` (``rows``, ``cols``: how far a tap reaches below and right of the
    top-left one), and per tap ``t = i*kw + j`` its phase ``pa*sw + pb``, its cell offset in
    that phase and its offset ``phase*span + cell`` among all phases."""
    sh, sw, dh, dw, pt, pl = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5]
    oa_lo, oa_hi = -pt // sh, ((kh - 1) * dh - pt) // sh
    ob_lo, ob_hi = -pl // sw, ((kw - 1) * dw - pl) // sw
    Hb, Wb = Ho + oa_hi - oa_lo, Wo + ob_hi - ob_lo
    span = Hb * Wb + ob_hi - ob_lo  # a plane and the cells the last row's lanes read past it
    lay = np.array((oa_lo, ob_lo, Hb, Wb, span, oa_hi - oa_lo, ob_hi - ob_lo), np.int64)
    phase = np.empty(kh * kw, np.int64)
    cell = np.empty(kh * kw, np.int64)
    offs = np.empty(kh * kw, np.int64)
    for i in range(kh):
        oa = (i * dh - pt) // sh
        for j in range(kw):
            ob = (j * dw - pl) // sw
            t = i * kw + j
            phase[t] = (i * dh - pt - sh * oa) * sw + (j * dw - pl - sw * ob)
            cell[t] = (oa - oa_lo) * Wb + ob - ob_lo
            offs[t] = phase[t] * span + cell[t]
    return lay, phase, cell, offs


@helper
def _phase_planes(
    out: Any,
    xf: Any,
    xb: int,
    H: int,
    W: int,
    sh: int,
    sw: int,
    oa_lo: int,
    ob_lo: int,
    Hb: int,
    Wb: int,
    span: int,
) -> None:
    """The ``H x W`` plane at ``xb`` as its ``sh*sw`` phase planes in ``out``: cell ``(u, v)`` of
    phase ``(pa, pb)``, at ``(pa*sw + pb)*span + u*Wb + v``, is input cell ``(sh*(u + oa_lo) +
    pa, sw*(v + ob_lo) + pb)``. Cells outside the input are left as they are (zeros the caller
    made once)."""
    for pa in range(sh):
        u0, u1 = -oa_lo, min(Hb, (H - pa + sh - 1) // sh - oa_lo)
        for pb in range(sw):
            v0, v1 = -ob_lo, min(Wb, (W - pb + sw - 1) // sw - ob_lo)
            if v1 <= v0:
                continue
            base = (pa * sw + pb) * span
            for u in range(u0, u1):
                dst = _U(base + u * Wb + v0)
                src = _U(xb + (sh * (u + oa_lo) + pa) * W + sw * (v0 + ob_lo) + pb)
                for t in range(_U(v1 - v0)):
                    out[dst + t] = xf[src + t * _U(sw)]


@helper
def _from_phases(
    dxf: Any, xb: int, H: int, W: int, sh: int, sw: int, oa_lo: int, ob_lo: int, Hb: int, Wb: int, src: Any
) -> None:
    """The inverse of ``_phase_planes`` into the plane at ``xb``, phase planes ``Hb*Wb`` apart
    in ``src``; the input cells no phase cell covers (no window reads them) get zero."""
    for pa in range(sh):
        for u in range((H - pa + sh - 1) // sh):
            h = sh * u + pa
            uu = u - oa_lo
            for pb in range(sw):
                nv = (W - pb + sw - 1) // sw
                d = _U(xb + h * W + pb)
                if uu < 0 or uu >= Hb:
                    for v in range(nv):
                        dxf[d + _U(v * sw)] = 0
                    continue
                v1 = min(nv, Wb + ob_lo)  # phase column v - ob_lo < Wb (it is >= 0: ob_lo <= 0)
                s0 = _U((pa * sw + pb) * Hb * Wb + uu * Wb - ob_lo)
                for v in range(v1):
                    dxf[d + _U(v * sw)] = src[s0 + _U(v)]
                for v in range(v1, nv):
                    dxf[d + _U(v * sw)] = 0


@exact
def _forward(x: Any, w: Any, y: Any, geo: Any, m: int, bias: Any, bounds: Any, chunks: int) -> None:
    sh, sw = geo[0], geo[1]
    N, O, Ho, Wo = y.shape
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    kh, kw = w.shape[2], w.shape[3]
    xf, yf, wf = x.reshape(-1), y.reshape(-1), w.reshape(-1)
    lay, _, _, offs = _phase_layout(geo, kh, kw, Ho, Wo)
    oa_lo, ob_lo, Hb, Wb, span = lay[0], lay[1], lay[2], lay[3], lay[4]
    taps = np.empty(kh * kw, np.int64)
    for t in range(kh * kw):
        taps[t] = t
    # The input planes go to the threads in chunks, each with its own buffers; a plane's
    # phases are made once for its m output channels.
    lo, hi = like(x, bounds[0]), like(x, bounds[1])  # compared in x's dtype, not float64
    clamp = bounds[0] > -np.inf or bounds[1] < np.inf
    planes = N * C
    for chunk in prange(chunks):
        phases = np.zeros(sh * sw * span, x.dtype)
        ybuf = np.empty(Ho * Wb, x.dtype)
        for p in range(chunk * planes // chunks, (chunk + 1) * planes // chunks):
            n, c = p // C, p % C
            _phase_planes(phases, xf, p * H * W, H, W, sh, sw, oa_lo, ob_lo, Hb, Wb, span)
            for k in range(m):
                o = c * m + k
                _tap_pass(ybuf, _U(0), _U(Ho * Wb), phases, offs, taps, 0, kh * kw, wf, o * kh * kw, True)
                _rows_out(yf, (n * O + o) * Ho * Wo, Wo, ybuf, Wb, Ho, bias[o], lo, hi, clamp)


# -- 3x3 windows ---------------------------------------------------------------------------------
# The common depthwise conv (MobileNets, ShuffleNets, EfficientNets: 3x3, no dilation, column
# stride 1 or 2) in one pass per output row instead of three tap passes over a plane buffer and
# a copy out: each plane is copied once into a zero-padded buffer (``_planes.fill``: at column
# stride 2 split into even and odd columns) and every output cell sums its nine taps in (i, j)
# order in a register, adds the bias and clamps on its way out. Stride-1 planes with rows
# shorter than ``_FLAT_ROW`` run as one loop over the whole buffer (rows of ``Wo + 2`` cells,
# the two past the output dropped on the way out): rows that short leave the per-row loops in
# their scalar remainders. The same sums, in the same order, as the phase loops: the two give
# the same bits.
_FLAT_ROW = 24
"""Output rows (stride 1) shorter than this run the 3x3 forward's flat loop over the plane."""


# Both loops take the nine weights as scalars and keep the offsets within a row constant, so
# that LLVM checks one overlap per buffer row, not one per tap: it gives up on vectorising a
# loop that needs more than eight checks.
@helper
def _row3(
    yf: Any,
    out: Any,
    n: int,
    buf: Any,
    a0: Any,
    a1: Any,
    a2: Any,
    ws: Any,
    bias: Any,
    lo: Any,
    hi: Any,
) -> None:
    """One output row of a 3x3 window at column stride 1: ``n`` cells whose window rows are
    cells ``q, q + 1, q + 2`` of ``buf``'s rows at ``a0, a1, a2``, the taps summed in order,
    plus ``bias``, clamped to ``[lo, hi]``, into ``yf`` from ``out``; ``ws`` the nine weights."""
    w0, w1, w2, w3, w4, w5, w6, w7, w8 = ws
    z, one, two = like(buf[0], 0.0), _U(1), _U(2)
    for q in range(_U(n)):
        s = _window_row(z, buf, a0 + q, buf, a0 + q + one, buf, a0 + q + two, w0, w1, w2)
        s = _window_row(s, buf, a1 + q, buf, a1 + q + one, buf, a1 + q + two, w3, w4, w5)
        s = _window_row(s, buf, a2 + q, buf, a2 + q + one, buf, a2 + q + two, w6, w7, w8)
        yf[out + q] = _clamp(s + bias, lo, hi)


@helper
def _row3_split(
    yf: Any,
    out: Any,
    n: int,
    ev: Any,
    od: Any,
    a0: Any,
    a1: Any,
    a2: Any,
    ws: Any,
    bias: Any,
    lo: Any,
    hi: Any,
) -> None:
    """:func:`_row3` at column stride 2: a window row is even cell ``q`` (in ``ev``), odd cell
    ``q`` (in ``od``) and even cell ``q + 1`` of its padded row."""
    w0, w1, w2, w3, w4, w5, w6, w7, w8 = ws
    z, one = like(ev[0], 0.0), _U(1)
    for q in range(_U(n)):
        s = _window_row(z, ev, a0 + q, od, a0 + q, ev, a0 + q + one, w0, w1, w2)
        s = _window_row(s, ev, a1 + q, od, a1 + q, ev, a1 + q + one, w3, w4, w5)
        s = _window_row(s, ev, a2 + q, od, a2 + q, ev, a2 + q + one, w6, w7, w8)
        yf[out + q] = _clamp(s + bias, lo, hi)


@exact
def _forward3x3(x: Any, w: Any, y: Any, geo: Any, m: int, bias: Any, bounds: Any, chunks: int) -> None:
    sh, sw, pt, pl = geo[0], geo[1], geo[4], geo[5]
    N, O, Ho, Wo = y.shape
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    xf, yf, wf = x.reshape(-1), y.reshape(-1), w.reshape(-1)
    Hp = (Ho - 1) * sh + 3  # the buffer's rows: those the windows reach
    split = sw == 2
    rs = Wo + 1 if split else Wo + 2  # cells per buffer row (stride 2: per half)
    flat = sh == 1 and sw == 1 and Wo < _FLAT_ROW
    z = like(x, 0.0)
    lo, hi = like(z, bounds[0]), like(z, bounds[1])  # compared in x's dtype, not float64
    planes = N * C
    for chunk in prange(chunks):
        # the padded plane (at column stride 2 its even columns; the odd ones in od)
        buf = np.zeros(Hp * rs + 2, x.dtype)  # + 2: the flat loop's last lanes read past it
        od = np.zeros(Hp * rs if split else 0, x.dtype)
        ybuf = np.empty(Ho * rs if flat else 0, x.dtype)
        for p in range(chunk * planes // chunks, (chunk + 1) * planes // chunks):
            n, c = p // C, p % C
            fill(buf, od, xf, p * H * W, H, W, pt, pl, Hp, rs)
            for k in range(m):
                o = c * m + k
                t = o * 9
                w0, w1, w2, w3, w4 = wf[t], wf[t + 1], wf[t + 2], wf[t + 3], wf[t + 4]
                ws = (w0, w1, w2, w3, w4, wf[t + 5], wf[t + 6], wf[t + 7], wf[t + 8])
                b = bias[o]
                yb = (n * O + o) * Ho * Wo
                if flat:  # the whole plane as one row, the cells past each output row dropped
                    _row3(ybuf, _U(0), Ho * rs, buf, _U(0), _U(rs), _U(2 * rs), ws, b, lo, hi)
                    rows_into(yf, yb, Wo, ybuf, 0, rs, Ho)
                    continue
                for r in range(Ho):
                    a0 = _U(r * sh * rs)
                    a1, a2, out = a0 + _U(rs), a0 + _U(2 * rs), _U(yb + r * Wo)
                    if split:
                        _row3_split(yf, out, Wo, buf, od, a0, a1, a2, ws, b, lo, hi)
                    else:
                        _row3(yf, out, Wo, buf, a0, a1, a2, ws, b, lo, hi)


@exact
def _backward(
    dy: Any, x: Any, w: Any, dx: Any, dwsum: Any, geo: Any, m: int, need_dx: bool, need_dw: bool
) -> None:
    sh, sw = geo[0], geo[1]
    N, C, H, W = x.shape
    Ho, Wo = dy.shape[2], dy.shape[3]
    kh, kw = w.shape[2], w.shape[3]
    xf, gf, wf, dxf = x.reshape(-1), dy.reshape(-1), w.reshape(-1), dx.reshape(-1)
    lay, phase, cell, offs = _phase_layout(geo, kh, kw, Ho, Wo)
    oa_lo, ob_lo, Hb, Wb, span, rows_out, cols_out = lay[0], lay[1], lay[2], lay[3], lay[4], lay[5], lay[6]
    # dy's planes in rows of Wb cells (zeros after each row's Wo), rows_out zero rows above and
    # below and cols_out zero cells before and after: dx's taps read up to that far outside.
    g0 = cols_out + rows_out * Wb  # dy's first cell
    glen = 2 * g0 + Ho * Wb
    lanes = Ho * Wb
    # dx's phase (pa, pb) takes the taps of that phase: its cell (u, v) is input cell
    # (sh*(u + oa_lo) + pa, sw*(v + ob_lo) + pb), which tap (i, j) reaches from dy's cell
    # (u, v) - (its offset): per phase, the taps in (i, j) order with their offsets into dy.
    kk = kh * kw
    ntap = np.zeros(sh * sw, np.int64)
    dtaps = np.empty(sh * sw * kk, np.int64)  # phase f's taps from f*kk on
    doffs = np.empty(sh * sw * kk, np.int64)
    for t in range(kh * kw):
        f = phase[t]
        dtaps[f * kk + ntap[f]] = t
        doffs[f * kk + ntap[f]] = g0 - cell[t]  # >= 0: g0 is past the farthest reach
        ntap[f] += 1
    # One input channel per iteration: its dx planes and the dw of its m output channels, so
    # that no two threads write the same cell and dw needs no reduction across threads.
    for c in prange(C):
        part = np.zeros(m * kh * kw * lanes if need_dw else 0, np.float64)
        phases = np.zeros(sh * sw * span if need_dw else 0, x.dtype)
        gp = np.zeros(glen, x.dtype)
        dph = np.empty(sh * sw * Hb * Wb if need_dx else 0, x.dtype)
        for n in range(N):
            xb = (n * C + c) * H * W
            if need_dw:
                _phase_planes(phases, xf, xb, H, W, sh, sw, oa_lo, ob_lo, Hb, Wb, span)
            for k in range(m):
                o = c * m + k
                rows_into(gp, g0, Wb, gf, (n * C * m + o) * Ho * Wo, Wo, Ho)
                if need_dw:
                    # tap t of output cell v reads phase cell v + cell[t]: one loop per tap
                    # over all the lanes (those past Wo add zero products)
                    for t in range(kh * kw):
                        at = _U((k * kh * kw + t) * lanes)
                        _lanes(part, at, gp, _U(g0), phases, _U(offs[t]), _U(lanes))
                if need_dx:
                    for f in range(sh * sw):
                        at, nt = _U(f * Hb * Wb), _U(Hb * Wb)
                        _tap_pass(dph, at, nt, gp, doffs, dtaps, f * kk, ntap[f], wf, o * kk, k == 0)
            if need_dx:
                _from_phases(dxf, xb, H, W, sh, sw, oa_lo, ob_lo, Hb, Wb, dph)
        if need_dw:
            for t in range(m * kh * kw):
                total = 0.0
                for q in range(lanes):
                    total += part[t * lanes + q]
                dwsum[c * m * kh * kw + t] = total


def _geometry(stride: Any, dilation: Any, pads: Any) -> np.ndarray:
    """``(sh, sw, dh, dw, top, left)`` as the loops' int64 array."""
    return np.array((*stride, *dilation, pads[0], pads[2]), np.int64)


def depthwise_forward(
    x: np.ndarray,
    w: np.ndarray,
    stride: Any,
    dilation: Any,
    pads: Any,
    out_hw: Any,
    bias: np.ndarray | None = None,
    bounds: tuple[float, float] | None = None,
) -> np.ndarray:
    """Depthwise convolution of NCHW ``x (N, C, H, W)`` with ``w (C*m, 1, kh, kw)``: output
    channel ``o`` reads input channel ``o // m``. ``pads`` is ``(top, bottom, left, right)``,
    ``stride``, ``dilation`` and ``out_hw`` are pairs the caller has checked (``out_hw`` as
    ``ops.conv.Conv2d`` works it out). ``bias (C*m,)`` is added to the sums and the result
    clamped to ``bounds = (lo, hi)`` (a fused ReLU or Clip; ``-inf``/``inf`` for no bound) as
    they are written out, rounded as a separate ``y += b`` and clamp would be. Returns a new
    C-contiguous ``(N, C*m, Ho, Wo)`` array in ``x``'s dtype (float32 or float64; ``w`` and
    ``bias`` are cast to it)."""
    x = np.ascontiguousarray(x)
    w = np.ascontiguousarray(w, dtype=x.dtype)
    N, C = x.shape[:2]
    O, _, kh, kw = w.shape
    b = np.zeros(O, x.dtype) if bias is None else np.ascontiguousarray(bias, dtype=x.dtype).reshape(O)
    lohi = np.array((-np.inf, np.inf) if bounds is None else [x.dtype.type(v) for v in bounds], np.float64)
    y = np.empty((N, O, *out_hw), x.dtype)
    if y.size:
        three = kh == kw == 3 and tuple(dilation) == (1, 1) and stride[1] in (1, 2)
        run = _forward3x3 if three else _forward
        work = y.size * kh * kw
        # one chunk, so one set of buffers, unless the loop runs on the threads
        chunks = min(N * C, _CHUNKS) if _jit.runs_parallel(work) else 1
        run(work, x, w, y, _geometry(stride, dilation, pads), O // C, b, lohi, chunks)
    return y


def depthwise_backward(
    dy: np.ndarray,
    x: np.ndarray,
    w: np.ndarray,
    stride: Any,
    dilation: Any,
    pads: Any,
    need_dx: bool,
    need_dw: bool,
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(dx, dw)`` of :func:`depthwise_forward` from the output gradient ``dy``, each None
    unless asked for (``need_dx``, ``need_dw``); ``dx`` shaped and typed as ``x``, ``dw`` as
    ``w`` in ``x``'s dtype. ``dw`` is summed in float64 in a fixed order: the same for any
    number of threads."""
    x = np.ascontiguousarray(x)
    dy = np.ascontiguousarray(dy, dtype=x.dtype)
    w = np.ascontiguousarray(w, dtype=x.dtype)
    C = x.shape[1]
    O, _, kh, kw = w.shape
    dx = np.empty(x.shape, x.dtype) if need_dx else np.empty((0, C, 0, 0), x.dtype)
    dwsum = np.zeros(w.size, np.float64)
    if (need_dx or need_dw) and x.size and dy.size:
        geo = _geometry(stride, dilation, pads)
        _backward(dy.size * kh * kw, dy, x, w, dx, dwsum, geo, O // C, need_dx, need_dw)
    elif need_dx:
        dx[...] = 0  # no window reads the input (an empty batch or output)
    return (dx if need_dx else None), (dwsum.reshape(w.shape).astype(x.dtype) if need_dw else None)

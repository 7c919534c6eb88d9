"""Depthwise convolution (one input channel per group, channel multiplier ``m``), forward and
backward, as loops over image rows or whole planes.

The NumPy reference (``ops.depthwise.Depthwise``, the engine's ``depthwise`` strategy) runs a
depthwise conv as ``kh*kw`` passes of a multiply and an add over shifted views of a padded copy
of the input, each pass a NumPy call on one core (the batch split over a thread pool). These
loops read each input row from cache: forward, an output row adds a 3x3 kernel's three rows in
three vector loops (other kernels tap by tap), the columns of every tap clipped to the input;
at stride 1 with rows as long as the input's (3x3, pad 1) one loop per kernel row runs over the
whole flat plane, and the edge columns are made again cell by cell (short rows were mostly loop
overhead). ``dx`` is the same correlation of ``dy``. The ``(image, channel)`` planes are shared
out over the threads (backward: the input channels, each with its ``m`` output channels, so
that ``dw`` needs no reduction across threads).

Sums run in the reference's order and rounding (``exact``: no fused multiply-add): forward,
each output cell adds its taps in ``(i, j)`` order to zero; backward, each input cell of
``dx`` adds its taps in the same order (with ``m > 1`` the multiplier's planes one after
another, where the reference sums them last). Skipped padding cells would add exact zeros.
``dw`` is summed in float64 from products in the input's dtype: per channel and tap, one
partial sum per output column (per cell of a plane padded to the padded input's width at
stride 1, where each tap is then one loop over the plane), added in a fixed order at the end,
so the result does not depend on the number of threads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange

from singa_lite.backend.cpu_kernels._jit import exact, exact_parallel, helper

_U = np.uint64
_CHUNKS = 64
"""The forward's planes go to the threads in this many chunks, each with its own buffers."""


@helper
def _columns(off: int, stride: int, width: int, out: int) -> tuple[int, int]:
    """``[lo, hi)``: the output columns ``q`` whose input column ``q * stride + off`` lies in
    ``[0, width)``; ``hi <= lo`` when there are none."""
    lo = -(off // stride) if off < 0 else 0
    hi = (width - 1 - off) // stride + 1 if width - 1 - off >= 0 else 0
    return lo, min(hi, out)


# The loops index flat arrays with uint64 offsets: Numba wraps a signed index that may be
# negative (Python's a[-1]), a branch per element that keeps LLVM from vectorising, and array
# views made inside the loops cost a reference count each (slower than a short row's work).
@helper
def _axpy(yf: Any, ys: Any, sy: Any, xf: Any, xs: Any, sx: Any, wt: Any, n: Any) -> None:
    """``yf[ys + t*sy] += xf[xs + t*sx] * wt`` for ``t < n``."""
    if sx == 1 and sy == 1:
        for t in range(n):
            yf[ys + t] += xf[xs + t] * wt
    elif sy == 1:
        for t in range(n):
            yf[ys + t] += xf[xs + t * sx] * wt
    else:
        for t in range(n):
            yf[ys + t * sy] += xf[xs + t * sx] * wt


@helper
def _lanes(af: Any, a0: Any, gf: Any, g0: Any, xf: Any, x0: Any, sx: Any, n: Any) -> None:
    """``af[a0 + t] += gf[g0 + t] * xf[x0 + t*sx]``: ``dw``'s per-column partial sums (float64)
    from products in the input's dtype."""
    if sx == 1:
        for t in range(n):
            af[a0 + t] += gf[g0 + t] * xf[x0 + t]
    else:
        for t in range(n):
            af[a0 + t] += gf[g0 + t] * xf[x0 + t * sx]


@helper
def _taps3(yf: Any, ys: Any, xf: Any, p0: Any, p1: Any, p2: Any, sx: Any, w: Any, n: Any, add: bool) -> None:
    """One row of a 3x3 window in one pass: ``yf[ys + t]`` (set, or added to with ``add``)
    ``= xf[p0 + t*sx] * w[0] + xf[p1 + t*sx] * w[1] + xf[p2 + t*sx] * w[2]``, added left to
    right as the tap-by-tap reference adds them. A row at a time, not all nine taps: LLVM
    vectorises a loop only while it needs at most 8 run-time overlap checks of the pointers."""
    w0, w1, w2 = w
    if sx == 1:  # contiguous: vector loads; LLVM does not version a loop on a stride
        if add:
            for t in range(n):
                yf[ys + t] = yf[ys + t] + xf[p0 + t] * w0 + xf[p1 + t] * w1 + xf[p2 + t] * w2
        else:
            for t in range(n):
                yf[ys + t] = xf[p0 + t] * w0 + xf[p1 + t] * w1 + xf[p2 + t] * w2
    elif add:
        for t in range(n):
            u = t * sx
            yf[ys + t] = yf[ys + t] + xf[p0 + u] * w0 + xf[p1 + u] * w1 + xf[p2 + u] * w2
    else:
        for t in range(n):
            u = t * sx
            yf[ys + t] = xf[p0 + u] * w0 + xf[p1 + u] * w1 + xf[p2 + u] * w2


@helper
def _sum3x3(
    yf: Any, ys: Any, xf: Any, top: Any, step: Any, cols: Any, sx: Any, wf: Any, wb: Any, n: Any, add: bool
) -> None:
    """A 3x3 window over a row of outputs: ``yf[ys + t]`` (set, or added to with ``add``) ``=
    sum over (i, j) of xf[top + i*step + cols[j] + t*sx] * wf[wb + 3i + j]``, in ``(i, j)``
    order (``step`` may be negative)."""
    for i in range(3):
        r = _U(top + i * step)
        w = (wf[wb + _U(3 * i)], wf[wb + _U(3 * i + 1)], wf[wb + _U(3 * i + 2)])
        _taps3(yf, ys, xf, r + _U(cols[0]), r + _U(cols[1]), r + _U(cols[2]), sx, w, n, add or i > 0)


@helper
def _flat_plane(
    yf: Any,
    yb: int,
    Hy: int,
    xf: Any,
    xb: int,
    Hx: int,
    W: int,
    wf: Any,
    wb: Any,
    kh: int,
    kw: int,
    rows: tuple[int, int],
    cols: tuple[int, int],
    zero: bool,
) -> None:
    """Adds to (or, with ``zero``, sets) the plane of ``Hy`` rows of ``W`` at ``yb``: cell
    ``u`` gets ``xf[xb + u + ro_i*W + co_j] * w[i, j]`` over the taps, ``ro_i = rows[0] +
    i*rows[1]``, ``co_j = cols[0] + j*cols[1]``, input rows outside ``[0, Hx)`` skipped; one
    loop per kernel row over the flat plane (see ``_forward``). A tap off either end of a row
    reads the row before or after: the caller's rows end in zeros, guard cells around them."""
    if zero:
        for u in range(_U(Hy * W)):
            yf[_U(yb) + u] = 0
    for i in range(kh):
        ro = rows[0] + i * rows[1]
        r_lo, r_hi = max(0, -ro), min(Hy, Hx - ro)
        u0, u1 = r_lo * W, r_hi * W
        if u1 <= u0:
            continue
        x0 = xb + u0 + ro * W + cols[0]  # >= 0 and every tap in the buffer: the guard cells
        n = _U(u1 - u0)
        if kw == 3:
            w = (wf[wb + _U(3 * i)], wf[wb + _U(3 * i + 1)], wf[wb + _U(3 * i + 2)])
            p0, p1, p2 = _U(x0), _U(x0 + cols[1]), _U(x0 + 2 * cols[1])
            _taps3(yf, _U(yb + u0), xf, p0, p1, p2, _U(1), w, n, True)
        else:
            for j in range(kw):
                wt = wf[wb + _U(i * kw + j)]
                _axpy(yf, _U(yb + u0), _U(1), xf, _U(x0 + j * cols[1]), _U(1), wt, n)


@helper
def _spans(kw: int, dw: int, pl: int, sw: int, W: int, Wo: int, cut: Any, out_space: bool) -> Any:
    """Per kernel column ``j``, the output columns ``[lo, hi)`` its tap reads inside the input
    (row 0), then those of them left of and right of the fused interior (rows 1 and 2):
    ``cut`` bounds the interior in output columns (``out_space``) or input columns."""
    spans = np.zeros((3, kw, 2), np.int64)
    for j in range(kw):
        off = j * dw - pl
        lo, hi = _columns(off, sw, W, Wo)
        spans[0, j, 0], spans[0, j, 1] = lo, hi
        if out_space:
            spans[1, j, 0], spans[1, j, 1] = lo, min(hi, cut[0])
            spans[2, j, 0], spans[2, j, 1] = max(lo, cut[1]), hi
        else:
            left, right = _columns(off, sw, cut[0], Wo), _columns(off - cut[1], sw, W - cut[1], Wo)
            spans[1, j, 0], spans[1, j, 1] = max(lo, left[0]), min(hi, left[1])
            spans[2, j, 0], spans[2, j, 1] = max(lo, right[0]), min(hi, right[1])
    return spans


@exact_parallel
def _forward(x: Any, w: Any, y: Any, geo: Any, m: int) -> None:
    sh, sw, dh, dw, pt, pl = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5]
    N, O, Ho, Wo = y.shape
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    kh, kw = w.shape[2], w.shape[3]
    xf, yf, wf = x.reshape(-1), y.reshape(-1), w.reshape(-1)
    # Output columns [qa, qb) read no padding: there a 3x3 window runs fused, row by row of
    # the kernel; the columns at the edges, and rows at the top and bottom, tap by tap.
    qa = _columns(-pl, sw, W, Wo)[0]
    qb = _columns((kw - 1) * dw - pl, sw, W, Wo)[1]
    fused = kh == 3 and kw == 3 and qb > qa
    spans = _spans(kw, dw, pl, sw, W, Wo, (qa, qb), True)
    cols = (qa * sw - pl, qa * sw - pl + dw, qa * sw - pl + 2 * dw)
    # Stride 1 with rows as long as the input's ("same" width, 3x3 pad 1): each plane is copied
    # into rows of Wp = W + cl + cr cells whose last cl + cr are zeros. Output cell u of such a
    # flat plane reads input cell u + offset, one offset per tap, and a tap left or right of a
    # row reads the zeros at the end of the row before or its own: so each kernel row is one
    # loop over the whole plane, the edge columns included, adding the zero products of the
    # padding as the reference does (short rows, and edge columns made cell by cell, were
    # loop overhead for the most part). The planes are shared out in chunks, each with its
    # own copy buffers.
    flat = sh == 1 and sw == 1 and Wo == W
    cl, cr = max(0, pl), max(0, (kw - 1) * dw - pl)
    Wp = W + cl + cr
    planes = N * O
    chunks = min(planes, _CHUNKS)
    for chunk in prange(chunks):
        # cl guard cells before the first row, cr after the last (taps past either end)
        xpad = np.zeros(cl + H * Wp + cr if flat else 0, x.dtype)
        ypad = np.empty(Ho * Wp if flat else 0, x.dtype)
        for p in range(chunk * planes // chunks, (chunk + 1) * planes // chunks):
            n, o = p // O, p % O
            xb = (n * C + o // m) * H * W
            wb = _U(o * kh * kw)
            if flat:
                _rows_into(xpad, cl, Wp, xf, xb, W, H)
                _flat_plane(ypad, 0, Ho, xpad, cl, H, Wp, wf, wb, kh, kw, (-pt, dh), (-pl, dw), True)
                _rows_into(yf, p * Ho * W, W, ypad, 0, Wp, Ho)
            else:
                _strided_plane(yf, p, Ho, Wo, xf, xb, H, W, wf, wb, geo, kh, kw, qa, qb, fused, spans, cols)


@helper
def _rows_into(dst: Any, d0: int, dstride: int, src: Any, s0: int, sstride: int, rows: int) -> None:
    """Copy ``rows`` rows of ``min(dstride, sstride)`` cells from ``src`` (rows ``sstride``
    apart from ``s0``) into ``dst`` (rows ``dstride`` apart from ``d0``)."""
    n = _U(min(dstride, sstride))
    for r in range(rows):
        a, b = _U(d0 + r * dstride), _U(s0 + r * sstride)
        for t in range(n):
            dst[a + t] = src[b + t]


@helper
def _strided_plane(
    yf: Any,
    p: int,
    Ho: int,
    Wo: int,
    xf: Any,
    xb: int,
    H: int,
    W: int,
    wf: Any,
    wb: Any,
    geo: Any,
    kh: int,
    kw: int,
    qa: int,
    qb: int,
    fused: bool,
    spans: Any,
    cols: Any,
) -> None:
    """Output plane ``p`` row by row: a 3x3 window's interior fused, the rest tap by tap."""
    sh, sw, dh, dw, pt, pl = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5]
    usw = _U(sw)
    for r in range(Ho):
        ys = _U(p * Ho * Wo + r * Wo)
        top = r * sh - pt
        if fused and top >= 0 and top + 2 * dh < H:
            _sum3x3(yf, ys + _U(qa), xf, xb + top * W, dh * W, cols, usw, wf, wb, _U(qb - qa), False)
            e0, e1 = 1, 3
            for q in range(qa):
                yf[ys + _U(q)] = 0
            for q in range(qb, Wo):
                yf[ys + _U(q)] = 0
        else:
            e0, e1 = 0, 1
            for q in range(Wo):
                yf[ys + _U(q)] = 0
        for i in range(kh):
            h = top + i * dh
            if h < 0 or h >= H:
                continue
            for j in range(kw):
                wt = wf[wb + _U(i * kw + j)]
                for e in range(e0, e1):
                    a, b = spans[e, j, 0], spans[e, j, 1]
                    if b > a:
                        xs = _U(xb + h * W + a * sw + j * dw - pl)
                        _axpy(yf, ys + _U(a), _U(1), xf, xs, usw, wt, _U(b - a))


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
    """The ``H x W`` plane at ``xb`` as its ``sh*sw`` phase planes in ``out`` (see
    ``_backward``): cell ``(u, v)`` of phase ``(pa, pb)``, at ``(pa*sw + pb)*span + u*Wb + v``,
    is input cell ``(sh*(u + oa_lo) + pa, sw*(v + ob_lo) + pb)``. Cells outside the input are
    left as they are (zeros the caller made once)."""
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


@exact
def _backward(
    dy: Any, x: Any, w: Any, dx: Any, dwsum: Any, geo: Any, m: int, need_dx: bool, need_dw: bool
) -> None:
    sh, sw, dh, dw, pt, pl = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5]
    N, C, H, W = x.shape
    Ho, Wo = dy.shape[2], dy.shape[3]
    kh, kw = w.shape[2], w.shape[3]
    xf, gf, wf, dxf = x.reshape(-1), dy.reshape(-1), w.reshape(-1), dx.reshape(-1)
    usw = _U(sw)
    one = _U(1)
    # dx at stride 1 is a 3x3 correlation of dy: input columns [ca, cb) read no padding of dy
    # and run fused, as the forward's interior does.
    ca = max(0, (kw - 1) * dw - pl)
    cb = min(W, Wo - pl)
    fuse_dx = kh == 3 and kw == 3 and sh == 1 and sw == 1 and cb > ca
    flat = sh == 1 and sw == 1 and Wo == W  # the forward's flat planes, in dy
    dspans = _spans(kw, dw, pl, sw, W, Wo, (ca, cb), False)
    dcols = (ca + pl, ca + pl - dw, ca + pl - 2 * dw)
    # dw by phases: with a = i*dh - pt = sh*oa + pa (floor division), tap (i, j) of output cell
    # (r, q) reads row r + oa of the input's rows of phase pa (rows pa, pa + sh, ...) and
    # column q + ob of its columns of phase pb: a stride-1 correlation of dy with one phase
    # plane. The sh*sw phase planes are kept in rows of Wb cells, their top-left cell at
    # (oa_lo, ob_lo), zeros where the input ends; dy in rows of Wb too, zeros after each Wo.
    # Then cell v of a plane of Ho rows of Wb lanes meets phase cell v + offset of the tap,
    # one loop per tap over the whole plane into dw's float64 partial sums, one per lane
    # (the lanes past Wo add zero products).
    oa_lo, oa_hi = -pt // sh, ((kh - 1) * dh - pt) // sh
    ob_lo, ob_hi = -pl // sw, ((kw - 1) * dw - pl) // sw
    Hb, Wb = Ho + oa_hi - oa_lo, Wo + ob_hi - ob_lo
    span = Hb * Wb + ob_hi - ob_lo  # a plane and the cells the last row's lanes read past it
    lanes = Ho * Wb
    guard = (kw - 1) * dw  # dy's: at least the padding on either side (dx's flat planes)
    # One input channel per iteration: its dx planes and the dw of its m output channels, so
    # that no two threads write the same cell and dw needs no reduction across threads.
    for c in prange(C):
        part = np.zeros(m * kh * kw * lanes if need_dw else 0, np.float64)
        phases = np.zeros(sh * sw * span if need_dw else 0, x.dtype)
        # dy's planes: dw's lanes read them, and at stride 1 with rows as long as the input's,
        # so does dx, as the forward's flat planes (dx is dy correlated with the taps mirrored,
        # a tap off either end of a row reading zeros), into dpad.
        dx_flat = need_dx and flat
        gp = np.zeros(2 * guard + lanes if need_dw or dx_flat else 0, x.dtype)
        dpad = np.empty(H * Wb if dx_flat else 0, x.dtype)
        for n in range(N):
            xb = (n * C + c) * H * W
            if need_dw:
                _phase_planes(phases, xf, xb, H, W, sh, sw, oa_lo, ob_lo, Hb, Wb, span)
            if need_dw or dx_flat:
                for k in range(m):
                    o = c * m + k
                    _rows_into(gp, guard, Wb, gf, (n * C * m + o) * Ho * Wo, Wo, Ho)
                    if need_dw:
                        for i in range(kh):
                            oa = (i * dh - pt) // sh
                            pa = i * dh - pt - sh * oa
                            for j in range(kw):
                                ob = (j * dw - pl) // sw
                                pb = j * dw - pl - sw * ob
                                off = (pa * sw + pb) * span + (oa - oa_lo) * Wb + ob - ob_lo
                                at = _U(((k * kh + i) * kw + j) * lanes)
                                _lanes(part, at, gp, _U(guard), phases, _U(off), one, _U(lanes))
                    if dx_flat:
                        wb = _U(o * kh * kw)
                        _flat_plane(
                            dpad, 0, H, gp, guard, Ho, Wb, wf, wb, kh, kw, (pt, -dh), (pl, -dw), k == 0
                        )
                if dx_flat:
                    _rows_into(dxf, xb, W, dpad, 0, Wb, H)
            if need_dx and not flat:
                for h in range(H):
                    ds = _U(xb + h * W)
                    fused = fuse_dx and h + pt - 2 * dh >= 0 and h + pt < Ho
                    if fused:
                        for k in range(m):
                            o = c * m + k
                            g0 = ((n * C * m + o) * Ho + h + pt) * Wo
                            wb, n_in = _U(o * 9), _U(cb - ca)
                            _sum3x3(dxf, ds + _U(ca), gf, g0, -dh * Wo, dcols, one, wf, wb, n_in, k > 0)
                        e0, e1 = 1, 3
                        for q in range(ca):
                            dxf[ds + _U(q)] = 0
                        for q in range(cb, W):
                            dxf[ds + _U(q)] = 0
                    else:
                        e0, e1 = 0, 1
                        for q in range(W):
                            dxf[ds + _U(q)] = 0
                    for k in range(m):
                        o = c * m + k
                        for i in range(kh):
                            t = h + pt - i * dh
                            if t < 0:
                                break
                            r = t // sh
                            if r * sh != t or r >= Ho:
                                continue
                            gb = ((n * C * m + o) * Ho + r) * Wo
                            for j in range(kw):
                                wt = wf[_U((o * kh + i) * kw + j)]
                                for e in range(e0, e1):
                                    a, b = dspans[e, j, 0], dspans[e, j, 1]
                                    if b > a:
                                        d0 = ds + _U(a * sw + j * dw - pl)
                                        _axpy(dxf, d0, usw, gf, _U(gb + a), one, wt, _U(b - a))
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
    x: np.ndarray, w: np.ndarray, stride: Any, dilation: Any, pads: Any, out_hw: Any
) -> np.ndarray:
    """Depthwise convolution of NCHW ``x (N, C, H, W)`` with ``w (C*m, 1, kh, kw)``: output
    channel ``o`` reads input channel ``o // m``. ``pads`` is ``(top, bottom, left, right)``,
    ``stride``, ``dilation`` and ``out_hw`` are pairs the caller has checked (``out_hw`` as
    ``ops.conv.Conv2d`` works it out). Returns a new C-contiguous ``(N, C*m, Ho, Wo)`` array in
    ``x``'s dtype (float32 or float64; ``w`` is cast to it)."""
    x = np.ascontiguousarray(x)
    w = np.ascontiguousarray(w, dtype=x.dtype)
    N, C = x.shape[:2]
    O, _, kh, kw = w.shape
    y = np.empty((N, O, *out_hw), x.dtype)
    if y.size:
        _forward(y.size * kh * kw, x, w, y, _geometry(stride, dilation, pads), O // C)
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

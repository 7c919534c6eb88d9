"""Padded copies of one input plane, for the loops that visit 3x3 windows a row at a time
(``conv._forward3x3``).

A window loop that reads its taps straight from an NCHW plane must test every tap against the
plane's edges; these helpers copy a plane once into a buffer that already holds the padding
(zeros for a convolution), so that the loops run without a branch. With a
column stride of 2 each padded row is split into its even and odd columns, kept in two arrays:
the taps of a window row are then even cell ``q``, odd cell ``q`` and even cell ``q + 1``, three
contiguous runs, where a stride-2 read compiles to gathers. The split writes both arrays in one
loop; writing both halves into one array ran at a third of the speed (LLVM does not vectorise
two streams of stores into an array it cannot tell apart).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite.backend.cpu_kernels._jit import helper

_U = np.uint64


@helper
def rows_into(dst: Any, d0: int, dstride: int, src: Any, s0: int, sstride: int, rows: int) -> None:
    """Copy ``rows`` rows of ``min(dstride, sstride)`` cells from ``src`` (rows ``sstride``
    apart from ``s0``) into ``dst`` (rows ``dstride`` apart from ``d0``)."""
    n = _U(min(dstride, sstride))
    for r in range(rows):
        a, b = _U(d0 + r * dstride), _U(s0 + r * sstride)
        for t in range(n):
            dst[a + t] = src[b + t]


@helper
def split_row(ev: Any, od: Any, d: Any, xf: Any, src: Any, W: int, pl: int, We: int) -> None:
    """Input row ``xf[src : src + W]``, shifted right by ``pl`` padding cells, as its even
    columns into ``ev`` and its odd ones into ``od``, both from ``d``; cells past ``We`` (a
    half row) are dropped."""
    # input cell w goes to padded column w + pl: cells 2k to one half, cells 2k + 1 to the other
    first, second = (od, ev) if pl % 2 else (ev, od)
    a, b = _U(d + pl // 2), _U(d + (pl + 1) // 2)
    na = max(0, min((W + 1) // 2, We - pl // 2))
    nb = max(0, min(W // 2, We - (pl + 1) // 2))
    for k in range(_U(nb)):  # nb <= na: the odd cells never outnumber the even ones
        first[a + k] = xf[src + _U(2) * k]
        second[b + k] = xf[src + _U(2) * k + _U(1)]
    for k in range(_U(nb), _U(na)):
        first[a + k] = xf[src + _U(2) * k]


@helper
def fill(buf: Any, od: Any, xf: Any, xb: int, H: int, W: int, pt: int, pl: int, Hp: int, rs: int) -> None:
    """The ``H x W`` plane at ``xf[xb]`` into rows ``pt`` on of ``buf`` (``Hp`` rows of ``rs``
    cells), shifted right by ``pl``; split into ``buf`` and ``od`` (each ``rs`` cells a row)
    where ``od`` is not empty. Cells past the buffer are dropped; the padding around is left
    as the caller made it (the same cells are written for every plane)."""
    split = od.size > 0
    for h in range(max(0, -pt), min(H, Hp - pt)):
        src, d = _U(xb + h * W), _U((h + pt) * rs)
        if split:
            split_row(buf, od, d, xf, src, W, pl, rs)
        elif pl < rs:
            rows_into(buf, d + _U(pl), rs - pl, xf, src, W, 1)

"""Winograd F(2x2, 3x3) for batch-1 inference of stride-1 3x3 convolutions.

Each 2x2 block of output pixels is computed from the 4x4 input tile around it as
``A^T [(G g G^T) * (B^T d B)] A``: the 36 multiplies per (block, input channel, output
channel) of the direct conv become 16, i.e. 2.25x fewer. With ``U = G g G^T`` made once per
weight (``winograd_weight``) and ``V = B^T d B`` for every tile, the products summed over input
channels are 16 independent GEMMs ``U[k] (O, C) @ V[k] (C, tiles)``, one per position ``k``
of the 4x4 transformed tile, run as one stacked ``matmul``. The input and output transforms
are additions and subtractions of strided views, vectorised over all tiles and channels.

F(2x2, 3x3) is the variant used here because its transforms have coefficients 0 and +-1
(and +-1/2 in ``G``, exact in binary): the float32 error stays at the level of the direct
conv's summation order, where F(4x4, 3x3)'s coefficients up to 8 lose about two more digits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite.ops.conv import Pads

_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
"""Weight transform of F(2x2, 3x3): ``U = G g G^T`` maps each 3x3 kernel to a 4x4 tile."""


def winograd_weight(xp: Any, W: Any, b: Any | None = None) -> Any:
    """``W (O, C, 3, 3)`` as the ``(16, O, C)`` stack ``U[4i+j] = (G W G^T)[i, j]``, in ``W``'s
    dtype (computed in float64). With bias ``b (O,)`` it is ``(16, O, C + 1)``: column ``C``
    holds ``b`` at position 5 (tile entry (1, 1)) and 0 elsewhere. Every output of a block
    sums position (1, 1) with coefficient 1, so ``winograd_conv`` then adds the bias in
    the GEMM, against a row of ones in its transformed input.
    """
    O, C = W.shape[:2]
    G = xp.asarray(_G)
    U = xp.einsum("ik,ockl,jl->ijoc", G, W.astype(np.float64), G).reshape(16, O, C)
    if b is not None:
        col = xp.zeros((16, O, 1))
        col[5, :, 0] = b
        U = xp.concatenate((U, col), axis=2)
    return xp.ascontiguousarray(U.astype(W.dtype))


def winograd_conv(xp: Any, x: Any, U: Any, pads: Pads, out_hw: tuple, biased: bool) -> Any:
    """Stride-1 3x3 conv of NCHW batch-1 ``x`` with ``U = winograd_weight(xp, W[, b])``.

    ``biased`` says whether ``U`` carries the bias column; ``pads`` are non-negative. Returns
    the ``(1, O, Ho, Wo)`` output.

    Every array the transforms touch is flat per channel, so that each of their additions is
    one contiguous vector op: numpy's strided loops over short rows (a 14x14 image has
    7 tiles a row) measured 3-5x slower. The image is split into its four (row, column)
    parity planes ``P[p, q][c, r, s] = padded[c, 2r+p, 2s+q]``, ``(th+1, tw+1)`` each: entry
    ``(i, j)`` of tile ``(r, s)`` is then ``P[i%2, j%2]`` at flat offset
    ``(i//2)*(tw+1) + j//2`` from the tile's own index. Transforms and GEMMs also run over the
    plane's last column, ``tw+1`` tiles a row where ``tw`` are wanted, and the output
    transform drops it.
    """
    O, C = U.shape[1], x.shape[1]
    Ho, Wo = out_hw
    th, tw = -(-Ho // 2), -(-Wo // 2)  # 2x2 output blocks down and across
    E, n = tw + 1, (th + 1) * (tw + 1)  # plane row length, plane size
    P = _parity_planes(xp, x[0], pads, th, tw)
    V = xp.empty((16, C + biased, n), dtype=x.dtype)
    if biased:
        V[:, C] = 1
    _input_transform(xp, P, V.reshape(16, -1)[:, : C * n], E)
    # Measured: bands of tile rows small enough for the GEMM output to stay in cache were
    # slower (thinner GEMMs), so the 16 GEMMs, the only multiplies, run whole.
    M = xp.matmul(U, V[:, :, : th * E])
    y = xp.empty((1, O, Ho, Wo), dtype=x.dtype)
    _output_transform(xp, M.reshape(16, O, th, E), y[0])
    return y


def _parity_planes(xp: Any, img: Any, pads: Pads, th: int, tw: int) -> Any:
    """``(2, 2, C*(th+1)*(tw+1) + tw+2)`` array: the parity planes of ``img (C, H, W)`` padded
    by ``pads``, each flattened, with ``tw+2`` zeros after for the transform's offsets."""
    C, H, W = img.shape
    t, _, l, _ = pads
    planes = xp.zeros((2, 2, C * (th + 1) * (tw + 1) + tw + 2), dtype=img.dtype)
    grid = planes[:, :, : C * (th + 1) * (tw + 1)].reshape(2, 2, C, th + 1, tw + 1)
    for p in range(2):
        h0 = (p - t) % 2  # first image row on padded rows of parity p
        r0, nr = (h0 + t) // 2, min(len(range(h0, H, 2)), th + 1 - (h0 + t) // 2)
        for q in range(2):
            w0 = (q - l) % 2
            s0, ns = (w0 + l) // 2, min(len(range(w0, W, 2)), tw + 1 - (w0 + l) // 2)
            grid[p, q, :, r0 : r0 + nr, s0 : s0 + ns] = img[:, h0 : h0 + 2 * nr : 2, w0 : w0 + 2 * ns : 2]
    return planes


def _input_transform(xp: Any, P: Any, V: Any, E: int) -> None:
    """``V[4i+j]`` (flat, length ``m``) = entry ``(i, j)`` of ``B^T d B`` for the tile ``d`` at
    every plane index; ``B^T``'s rows combine ``d0-d2, d1+d2, d2-d1, d1-d3``."""
    m = V.shape[1]
    R = xp.empty((4, 2, m + 1), dtype=V.dtype)
    for q in range(2):  # rows: d_i is plane (i%2, q) shifted by (i//2) plane rows
        _bt(xp, P[0, q, : m + 1], P[1, q, : m + 1], P[0, q, E : E + m + 1], P[1, q, E : E + m + 1], R[:, q])
    for i in range(4):  # columns: plane (i, j%2) shifted by j//2
        r0, r1 = R[i, 0], R[i, 1]
        _bt(xp, r0[:m], r1[:m], r0[1:], r1[1:], V[4 * i : 4 * i + 4])


def _bt(xp: Any, d0: Any, d1: Any, d2: Any, d3: Any, out: Any) -> None:
    """The four rows of ``B^T d``: ``d0-d2, d1+d2, d2-d1, d1-d3``."""
    xp.subtract(d0, d2, out=out[0])
    xp.add(d1, d2, out=out[1])
    xp.subtract(d2, d1, out=out[2])
    xp.subtract(d1, d3, out=out[3])


def _output_transform(xp: Any, M: Any, y: Any) -> None:
    """``y (O, Ho, Wo)`` from ``M[4i+j] (O, th, tw+1)``: output pixel ``(2r+a, 2s+b)`` is
    ``(A^T m A)[a, b]`` of tile ``(r, s)``; ``A^T``'s rows combine ``m0+m1+m2, m1-m2-m3``.
    Both stages run on whole flat planes and a last copy interleaves the four pixels of each
    tile: measured 2x faster than writing the second stage straight into the output."""
    N = M[0].size
    S = xp.empty((2, 4, N), dtype=M.dtype)
    flat = M.reshape(16, N)
    for j in range(4):  # rows
        _at(xp, [flat[4 * i + j] for i in range(4)], S[0, j], S[1, j])
    Y = xp.empty((2, 2, N), dtype=M.dtype)
    for a in range(2):  # columns
        _at(xp, list(S[a]), Y[a, 0], Y[a, 1])
    Y = Y.reshape((2, 2) + M.shape[1:])
    for a in range(2):
        for b in range(2):
            out = y[:, a::2, b::2]
            out[...] = Y[a, b, :, : out.shape[1], : out.shape[2]]


def _at(xp: Any, m: list, out0: Any, out1: Any) -> None:
    """The two rows of ``A^T m``: ``m0+m1+m2`` and ``m1-m2-m3``."""
    xp.add(m[0], m[1], out=out0)
    out0 += m[2]
    xp.subtract(m[1], m[2], out=out1)
    out1 -= m[3]

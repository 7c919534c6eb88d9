"""Convolutions: ``conv2d`` (groups, depthwise), ``conv_transpose2d`` and ``conv1d``.

The CPU strategy is im2col + GEMM. The image is copied once into a padded NHWC buffer; a
strided *view* of it lists every receptive field, and a reshape copies that view into the
``(N*Ho*Wo, kh*kw*C)`` column matrix, whose rows are contiguous runs of ``kw*C`` values. On
the host the matrix is made a block of output pixels at a time into an L2-sized buffer, each
block multiplied by the ``(kh*kw*C, O)`` weight matrix while it is still in cache and written
to the NCHW output (with the bias) in the same pass. Backward re-makes the blocks for the
weight gradient. For stride 1 it finds ``dx`` as a convolution of ``dy`` with the flipped
kernel (and ``dW`` from the same blocks of ``dy``); otherwise it scatters the column gradient
back with ``col2im``: a loop over the ``kh*kw`` kernel taps, each a vectorised strided add.
Groups run as a batch of GEMMs. Depthwise convs (one input channel per group) skip im2col:
they are a sum over taps of shifted views times per-channel weights; when no backward follows,
``ops/depthwise.py`` does that sum in one einsum over channels-last windows.

``im2col``/``col2im`` are written against ``xp`` so the same code runs on CuPy. There, with the
backend's kernels on (``backend/cupy_kernels.py``), one launch makes the whole column matrix
straight from the NCHW input, padding included (``_KernelColumns``), and col2im is a gather
that writes ``dx`` in NCHW: each input pixel adds its taps' entries to zero in the tap order
of ``_scatter_taps`` (kernel row, then column), so both paths give the same bits.

Padding is ``(top, bottom, left, right)`` (SINGA's convention; ONNX's ``pads`` are
``(top, left, bottom, right)``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from math import prod
from typing import Any

from singa_lite import _args, autograd
from singa_lite.autograd import Operator
from singa_lite.backend import cupy_kernels
from singa_lite.errors import DTypeError
from singa_lite.ops import _cupy_kernels
from singa_lite.tensor import Tensor

__all__ = [
    "Conv1d",
    "Conv2d",
    "ConvTranspose2d",
    "conv1d",
    "conv2d",
    "conv_output_size",
    "conv_transpose2d",
    "same_padding",
]

Pads = tuple[int, int, int, int]


# -- geometry ----------------------------------------------------------------------------------
def _pair(owner: str, name: str, v: Any, least: int = 1) -> tuple[int, int]:
    return _args.per_axis(owner, name, v, 2, least)  # type: ignore[return-value]


def _pads(owner: str, padding: Any) -> Pads:
    """``int``, ``(ph, pw)`` or ``(top, bottom, left, right)`` as a 4-tuple."""
    p = _args.ints(owner, "padding", padding, (2, 4), 0)
    if len(p) == 1:
        return (p[0],) * 4
    return (p[0], p[0], p[1], p[1]) if len(p) == 2 else p  # type: ignore[return-value]


def conv_output_size(
    in_size: int,
    kernel: int,
    stride: int = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int = 1,
    ceil_mode: bool = False,
) -> int:
    """Output length of a convolution or pooling window along one axis.

    ``padding`` is per side, or ``(begin, end)``. ``ceil_mode`` (pooling) keeps a last partial
    window, but never one that starts inside the end padding (PyTorch's and ONNX's rule).

    >>> conv_output_size(28, 5, padding=2), conv_output_size(32, 3, stride=2, padding=1)
    (28, 16)
    """
    me = "conv_output_size"
    in_size, kernel = _args.count(me, "in_size", in_size, 0), _args.count(me, "kernel", kernel)
    stride, dilation = _args.count(me, "stride", stride), _args.count(me, "dilation", dilation)
    pads = _args.ints(me, "padding", padding, (2,), 0)
    begin, end = pads[0], pads[-1]
    span = in_size + begin + end - dilation * (kernel - 1) - 1
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= in_size + begin:
        out -= 1
    return out


def same_padding(
    in_hw: tuple[int, int], kernel: Any, stride: Any = 1, dilation: Any = 1, mode: str = "SAME_UPPER"
) -> Pads:
    """``(top, bottom, left, right)`` padding for ONNX ``auto_pad`` SAME_UPPER / SAME_LOWER.

    The output size is ``ceil(in / stride)``; an odd total padding puts the extra row/column
    at the end (SAME_UPPER) or at the beginning (SAME_LOWER).

    >>> same_padding((28, 28), 5), same_padding((5, 5), 2, mode="SAME_LOWER")
    ((2, 2, 2, 2), (1, 0, 1, 0))
    """
    me = "same_padding"
    upper = mode.upper() if isinstance(mode, str) else mode  # ONNX spells it in capitals
    if upper not in ("SAME_UPPER", "SAME_LOWER"):
        raise _args.bad(me, "mode", "be 'SAME_UPPER' or 'SAME_LOWER'", mode)
    pads = []
    for n, k, s, d in zip(
        in_hw, _pair(me, "kernel", kernel), _pair(me, "stride", stride), _pair(me, "dilation", dilation)
    ):
        total = max((-(-n // s) - 1) * s + d * (k - 1) + 1 - n, 0)
        small, big = total // 2, total - total // 2
        pads += [small, big] if upper == "SAME_UPPER" else [big, small]
    return tuple(pads)  # type: ignore[return-value]


# -- batch parallelism -------------------------------------------------------------------------
_pool: ThreadPoolExecutor | None = None
_PARALLEL_MIN = 1 << 18  # elements; below this the thread hand-off costs more than it saves


def _over_batch(xp: Any, n: int, work: int, fn: Callable[[int, int], Any]) -> list:
    """``fn(lo, hi)`` over slices of a batch of ``n``, one slice per core for big host arrays.

    Depthwise convs are all elementwise work, which NumPy runs on one core but with the GIL
    released, so slicing the batch over a thread pool uses every core (measured 2x on 2 cores).
    im2col/col2im do not use it: next to BLAS's own threads it measured no faster. On other
    backends (the GPU queues work asynchronously) it is one call over the whole batch.
    """
    global _pool
    cores = os.cpu_count() or 1
    if xp.__name__ != "numpy" or cores == 1 or n < 2 or work < _PARALLEL_MIN:
        return [fn(0, n)]
    k = min(cores, n)
    bounds = [n * i // k for i in range(k + 1)]
    if _pool is None:
        _pool = ThreadPoolExecutor(cores, thread_name_prefix="singa_lite-conv")
    return list(_pool.map(fn, bounds[:-1], bounds[1:]))


# -- im2col / col2im ---------------------------------------------------------------------------
def pad_nhwc(xp: Any, x: Any, pads: Pads) -> Any:
    """NCHW ``x`` as a zero-padded NHWC array (one copy: transpose and pad together)."""
    N, C, H, W = x.shape
    t, b, l, r = pads
    nhwc = x.transpose(0, 2, 3, 1)
    if not (t or b or l or r):
        return nhwc  # a view; im2col makes the one copy
    out = xp.zeros((N, H + t + b, W + l + r, C), dtype=x.dtype)
    out[:, t : t + H, l : l + W] = nhwc
    return out


def im2col(xp: Any, x: Any, kernel: tuple, stride: tuple, dilation: tuple, out_hw: tuple, group: int) -> Any:
    """Receptive fields of padded NHWC ``x`` as a ``(group, N*Ho*Wo, kh*kw*C/group)`` matrix.

    Each row is one output pixel's window, ordered (kh, kw, channel), so that with one group
    and no dilation it is ``kh`` contiguous runs of the input: the copy streams.
    """
    N, _, _, C = x.shape
    (kh, kw), (sh, sw), (dh, dw), (Ho, Wo) = kernel, stride, dilation, out_hw
    cg = C // group
    bN, bH, bW, bC = x.strides
    win = xp.lib.stride_tricks.as_strided(
        x,
        shape=(group, N, Ho, Wo, kh, kw, cg),
        strides=(bC * cg, bN, bH * sh, bW * sw, bH * dh, bW * dw, bC),
    )
    return win.reshape(group, N * Ho * Wo, kh * kw * cg)  # the one copy


def col2im(
    xp: Any, col: Any, padded_shape: tuple, kernel: tuple, stride: tuple, dilation: tuple, out_hw: tuple
) -> Any:
    """Adjoint of ``im2col``: add each window row of ``col (g, N*Ho*Wo, kh*kw*C/g)`` back into
    a zero ``padded_shape = (N, C, Hp, Wp)`` image, returned as an NCHW view.

    Fastest when ``col`` is the transpose of a contiguous ``(g, K, N*Ho*Wo)`` array (what
    ``W @ dy`` gives): every kernel tap then reads one contiguous block.
    """
    g = col.shape[0]
    N, C, Hp, Wp = padded_shape
    (kh, kw), (Ho, Wo) = kernel, out_hw
    taps = col.transpose(0, 2, 1).reshape(g, kh, kw, C // g, N, Ho, Wo)
    out = xp.zeros((g, C // g, N, Hp, Wp), dtype=col.dtype)
    _scatter_taps(taps, out, stride, dilation)
    return out.reshape(C, N, Hp, Wp).transpose(1, 0, 2, 3)


def _scatter_taps(taps: Any, out: Any, stride: tuple, dilation: tuple) -> None:
    """Add ``taps (g, kh, kw, C/g, N, Ho, Wo)`` into the windows of ``out (g, C/g, N, Hp, Wp)``."""
    _, kh, kw, _, _, Ho, Wo = taps.shape
    (sh, sw), (dh, dw) = stride, dilation
    for i in range(kh):  # a loop over kernel taps, each one vectorised over every pixel
        rows = slice(i * dh, i * dh + sh * (Ho - 1) + 1, sh)
        for j in range(kw):
            view = out[:, :, :, rows, j * dw : j * dw + sw * (Wo - 1) + 1 : sw]
            view += taps[:, i, j]  # through a view: `out[...] += v` would copy the slice back


# -- blocked im2col + GEMM ---------------------------------------------------------------------
_BLOCK_BYTES = 1 << 20
"""Size of one im2col block on the host: small enough to stay in a core's L2 cache..."""
_BLOCK_ROWS = 2048
"""...but at least this many rows: shorter GEMMs ran measurably slower on two BLAS threads."""
_KEEP_BYTES = 8 << 20
"""Forward keeps im2col matrices up to this size for backward (see ``_ColumnBlocks``)."""

Block = tuple[int, int, int, int]  # images n0:n1, output rows h0:h1


class _ColumnBlocks:
    """The im2col matrix of a padded NHWC image, made one block of output pixels at a time.

    The whole matrix is ``kh*kw`` times the image: for a 3x3 conv on 16 channels it is
    written to and read back from main memory at a cost (measured) near the GEMM's own.
    Made a block at a time into one reused L2-sized buffer, each block is still in cache
    when the GEMM reads it, which measured 1.3-1.8x faster forward; backward re-makes the
    blocks from the saved padded image instead of keeping the matrix. With ``keep``, a
    matrix of at most ``_KEEP_BYTES`` is kept for backward instead (few channels: re-making
    it cost more than keeping it). On a GPU one block covers everything: there one big
    GEMM is what is fast.
    """

    def __init__(
        self,
        xp: Any,
        xpad: Any,
        kernel: tuple,
        stride: tuple,
        dilation: tuple,
        out_hw: tuple,
        group: int,
        keep: bool = False,
    ) -> None:
        N, _, _, C = xpad.shape
        (kh, kw), (sh, sw), (dh, dw), (Ho, Wo) = kernel, stride, dilation, out_hw
        cg = C // group
        bN, bH, bW, bC = xpad.strides
        self.xp, self.group, self.out_hw, self.K = xp, group, out_hw, kh * kw * cg
        self.win = xp.lib.stride_tricks.as_strided(
            xpad,
            shape=(group, N, Ho, Wo, kh, kw, cg),
            strides=(bC * cg, bN, bH * sh, bW * sw, bH * dh, bW * dw, bC),
        )
        row_bytes = group * Wo * self.K * xpad.itemsize  # one output row's windows
        budget = _BLOCK_BYTES if xp.__name__ == "numpy" else N * Ho * row_bytes
        budget = max(budget, _BLOCK_ROWS * group * self.K * xpad.itemsize)
        if Ho * row_bytes <= budget:  # whole images per block
            n = max(1, budget // (Ho * row_bytes))
            self.blocks: list[Block] = [(n0, min(N, n0 + n), 0, Ho) for n0 in range(0, max(N, 1), n)]
        else:  # large images: bands of output rows
            h = max(1, budget // row_bytes)
            self.blocks = [(i, i + 1, h0, min(Ho, h0 + h)) for i in range(N) for h0 in range(0, Ho, h)]
        self.buf: Any = None
        self.kept: dict[Block, Any] | None = {} if keep and N * Ho * row_bytes <= _KEEP_BYTES else None

    def col(self, blk: Block) -> Any:
        """The ``(group, rows, kh*kw*C/group)`` column matrix of one block."""
        n0, n1, h0, h1 = blk
        rows = (n1 - n0) * (h1 - h0) * self.out_hw[1]
        win = self.win[:, n0:n1, h0:h1]
        if self.kept is not None:
            if blk not in self.kept:
                self.kept[blk] = win.reshape(self.group, rows, self.K)  # a copy
            return self.kept[blk]
        if len(self.blocks) == 1:
            return win.reshape(self.group, rows, self.K)  # the one copy
        if self.buf is None:
            n0, n1, h0, h1 = self.blocks[0]
            most = (n1 - n0) * (h1 - h0) * self.out_hw[1]
            self.buf = self.xp.empty((self.group, most, self.K), dtype=self.win.dtype)
        col = self.buf[:, :rows]
        col.reshape(win.shape)[...] = win
        return col

    def conv(self, Wm: Any, y: Any, bias: Any = None) -> Any:
        """``y (N, O, Ho, Wo)`` = the windows times ``Wm (g, K, O/g)`` (+ ``bias``), block by block."""
        for blk in self.blocks:
            _store_rows(self.xp, _gemm(self.xp, self.col(blk), Wm), y, blk, bias)
        return y


class _KernelColumns(_ColumnBlocks):
    """``_ColumnBlocks`` made by the CuPy backend's im2col kernel: one block, the whole
    matrix from the NCHW image in one launch with the padding, so no padded copy is made or
    kept. With ``keep``, a matrix of at most ``_KEEP_BYTES`` is kept for backward; a larger
    one is made again from ``x``. ``geo`` is ``(kernel, stride, dilation, out_hw, group)``."""

    def __init__(self, xp: Any, x: Any, pads: Pads, geo: tuple, keep: bool = False) -> None:
        kernel, stride, dilation, out_hw, group = geo
        self.xp, self.group, self.out_hw = xp, group, out_hw
        self.K = kernel[0] * kernel[1] * x.shape[1] // group
        self.x, self.geometry = x, (out_hw, kernel, stride, (pads[0], pads[2]), dilation, group)
        self.blocks = [(0, x.shape[0], 0, out_hw[0])]
        keep = keep and _col_size(x.shape, kernel, out_hw) * x.itemsize <= _KEEP_BYTES
        self.kept = {} if keep else None

    def col(self, blk: Block) -> Any:
        if self.kept is not None and blk in self.kept:
            return self.kept[blk]
        col = cupy_kernels.im2col(self.xp, self.x, *self.geometry)
        if self.kept is not None:
            self.kept[blk] = col
        return col


def _column_blocks(xp: Any, x: Any, pads: Pads, geo: tuple, keep: bool = False) -> _ColumnBlocks:
    """The column blocks of NCHW ``x`` for ``geo = (kernel, stride, dilation, out_hw, group)``:
    by the backend's kernel where it takes ``x``, else from a padded NHWC copy."""
    if cupy_kernels.usable_32bit(xp, x, sizes=(_col_size(x.shape, geo[0], geo[3]),)):
        return _KernelColumns(xp, x, pads, geo, keep)
    kernel, stride, dilation, out_hw, group = geo
    return _ColumnBlocks(xp, pad_nhwc(xp, x, pads), kernel, stride, dilation, out_hw, group, keep)


def _col_size(x_shape: tuple, kernel: tuple, out_hw: tuple) -> int:
    """Entries of the column matrix of an NCHW input: every window of every channel."""
    return x_shape[0] * x_shape[1] * kernel[0] * kernel[1] * out_hw[0] * out_hw[1]


def _store_rows(xp: Any, m: Any, y: Any, blk: Block, bias: Any = None) -> None:
    """Write pixel rows ``m (g, rows, O/g)`` of block ``blk`` into NCHW ``y`` (+ ``bias (O,)``).

    The transposing copy and the bias add are one pass.
    """
    n0, n1, h0, h1 = blk
    g, _, og = m.shape
    dst = y[n0:n1, :, h0:h1].reshape(n1 - n0, g, og, h1 - h0, y.shape[3])  # splits C: a view
    src = m.reshape(g, n1 - n0, h1 - h0, y.shape[3], og).transpose(1, 0, 4, 2, 3)
    if bias is None:
        dst[...] = src
    else:
        xp.add(src, bias.reshape(g, og, 1, 1), out=dst)


def _block_channels_first(xp: Any, dy: Any, blk: Block, group: int) -> Any:
    """Block ``blk`` of NCHW ``dy`` as a contiguous ``(g, O/g, rows)`` matrix."""
    n0, n1, h0, h1 = blk
    _, O, _, W = dy.shape
    d = dy[n0:n1, :, h0:h1].reshape(n1 - n0, group, O // group, h1 - h0, W).transpose(1, 2, 0, 3, 4)
    return xp.ascontiguousarray(d).reshape(group, O // group, -1)


def _weight_matrix(W: Any, group: int) -> Any:
    """Conv weight ``(O, C/g, kh, kw)`` as ``(g, kh*kw*C/g, O/g)``, matching im2col's rows."""
    O, cg, kh, kw = W.shape
    return W.reshape(group, O // group, cg, kh, kw).transpose(0, 3, 4, 2, 1).reshape(group, -1, O // group)


def _weight_from_matrix(m: Any, shape: tuple) -> Any:
    O, cg, kh, kw = shape
    g = m.shape[0]
    return m.reshape(g, kh, kw, cg, O // g).transpose(0, 4, 3, 1, 2).reshape(shape)


def _pixel_rows(y: Any, group: int) -> Any:
    """NCHW ``(N, O, H, W)`` as ``(g, N*H*W, O/g)`` pixel rows, stored channel-major so that
    ``W @ rows.T`` (col2im's input) and ``col.T @ rows`` stream through it."""
    N, O, H, W = y.shape
    cm = y.transpose(1, 0, 2, 3).reshape(group, O // group, N * H * W)  # one copy
    return cm.transpose(0, 2, 1)


def _from_rows(m: Any, N: int, H: int, W: int) -> Any:
    """``(g, N*H*W, O/g)`` pixel rows as a contiguous NCHW array."""
    g, _, og = m.shape
    y = m.reshape(g, N, H, W, og).transpose(1, 0, 4, 2, 3).reshape(N, g * og, H, W)
    return y if y.flags.c_contiguous else y.copy()


def _gemm(xp: Any, a: Any, b: Any) -> Any:
    """Batched ``a @ b`` over groups; a single group goes to BLAS as one plain 2-D product."""
    if a.shape[0] == 1:
        return xp.matmul(a[0], b[0])[None]
    return xp.matmul(a, b)


def _tap(x: Any, i: int, j: int, kernel_geo: tuple, out_hw: tuple) -> Any:
    """The NCHW view of padded ``x`` that kernel tap ``(i, j)`` reads for every output pixel."""
    (sh, sw), (dh, dw) = kernel_geo
    Ho, Wo = out_hw
    return x[:, :, i * dh : i * dh + sh * (Ho - 1) + 1 : sh, j * dw : j * dw + sw * (Wo - 1) + 1 : sw]


def _pad_nchw(xp: Any, x: Any, pads: Pads) -> Any:
    t, b, l, r = pads
    if not (t or b or l or r):
        return x
    N, C, H, W = x.shape
    out = xp.zeros((N, C, H + t + b, W + l + r), dtype=x.dtype)
    out[:, :, t : t + H, l : l + W] = x
    return out


# -- operators ---------------------------------------------------------------------------------
class _ConvBase(Operator):
    def __init__(self, stride: Any, padding: Any, dilation: Any, group: int) -> None:
        super().__init__()
        self.stride = _pair(self.name, "stride", stride)
        self.dilation = _pair(self.name, "dilation", dilation)
        self.pads = _pads(self.name, padding)
        self.group = _args.count(self.name, "group", group)

    def _check(self, x: Any, W: Any, b: Any, in_channels: int) -> None:
        g = self.group
        if x.ndim != 4 or W.ndim != 4:
            raise self.error("x must be (N, C, H, W) and W 4-D", x, W)
        if x.dtype != W.dtype or (b is not None and b.dtype != x.dtype):
            raise DTypeError(f"{self.name}: x, W and b must share a dtype, got {x.dtype} and {W.dtype}")
        if x.shape[1] % g or W.shape[0] % g:
            raise self.error(f"group={g} does not divide the channels", x, W)
        if x.shape[1] != in_channels:
            raise self.error(f"x has {x.shape[1]} channels, the weight expects {in_channels}", x, W)
        if b is not None and b.shape != (self.out_channels(W),):
            raise self.error(f"bias must have shape ({self.out_channels(W)},)", x, W, b)

    def out_channels(self, W: Any) -> int:
        return W.shape[0]


class Conv2d(_ConvBase):
    """2-D convolution (cross-correlation) of NCHW ``x`` with ``W (O, C/group, kh, kw)``."""

    def __init__(self, stride: Any = 1, padding: Any = 0, dilation: Any = 1, group: int = 1) -> None:
        super().__init__(stride, padding, dilation, group)

    def forward(self, x: Any, W: Any, b: Any = None) -> Any:
        self._check(x, W, b, W.shape[1] * self.group)
        _, _, H, Wd = x.shape
        O, cg, kh, kw = W.shape
        t, bo, l, r = self.pads
        self.kernel = (kh, kw)
        self.out_hw = tuple(
            conv_output_size(n, k, s, p, d)
            for n, k, s, p, d in zip((H, Wd), (kh, kw), self.stride, ((t, bo), (l, r)), self.dilation)
        )
        if min(self.out_hw) < 1:
            raise self.error(f"kernel {kh}x{kw} (dilation {self.dilation}) exceeds the padded input", x, W)
        self.x, self.x_shape, self.W, self.has_bias = x, x.shape, W, b is not None
        depthwise = cg == 1 and self.group > 1
        # Not recording (inference, no_grad) and not a graph-mode replay: no backward follows.
        inference = not autograd.is_recording() and not self.needs_grad
        if inference and x.shape[0] == 1 and not depthwise:
            return conv_infer.conv_one_image(
                self.xp, x, W, b, self.pads, self.stride, self.dilation, self.out_hw, self.group
            )
        if depthwise and inference:
            # No backward follows: one einsum, and no padded copy kept (see ops/depthwise.py).
            return depthwise_conv(self.xp, x, W, b, self.pads, self.stride, self.dilation, self.out_hw)
        if depthwise:
            y = self._depthwise_forward(x, W)
            if b is not None:
                y += b.reshape(1, O, 1, 1)
            return y
        return self._gemm_forward(x, W, b)

    def backward(self, dy: Any) -> tuple:
        need_x, need_W = self.needs_grad[0], self.needs_grad[1]
        if self.W.shape[1] == 1 and self.group > 1:
            dx, dW = self._depthwise_backward(dy, need_x, need_W)
        else:
            dx, dW = self._gemm_backward(dy, need_x, need_W)
        if not self.has_bias:
            return dx, dW
        db = dy.sum(axis=(0, 2, 3)) if self.needs_grad[2] else None
        return dx, dW, db

    # blocked im2col + GEMM: general path
    def _gemm_forward(self, x: Any, W: Any, b: Any) -> Any:
        xp, (t, bo, l, r) = self.xp, self.pads
        self.padded_shape = (*x.shape[:2], x.shape[2] + t + bo, x.shape[3] + l + r)
        geo = (self.kernel, self.stride, self.dilation, self.out_hw, self.group)
        self.cols = _column_blocks(xp, x, self.pads, geo, keep=True)
        self.Wm = _weight_matrix(W, self.group)
        y = xp.empty((x.shape[0], W.shape[0], *self.out_hw), dtype=x.dtype)
        return self.cols.conv(self.Wm, y, b)

    def _gemm_backward(self, dy: Any, need_x: bool, need_W: bool) -> tuple:
        xp, g = self.xp, self.group
        dx_pads = self._dx_pads() if need_x else None
        if dx_pads is not None:
            return self._grads_by_conv(dy, dx_pads, need_W)
        # col2im: a gather by the backend's kernel straight into dx, else a scatter into dpad
        gather = (
            need_x
            and len(self.cols.blocks) == 1
            and dy.dtype == self.W.dtype
            and cupy_kernels.usable_32bit(
                xp, dy, sizes=(_col_size(self.x_shape, self.kernel, self.out_hw), prod(self.x_shape))
            )
        )
        by_col2im = need_x and not gather
        dWt: Any = None
        dpad: Any = None
        dx = None
        if by_col2im:
            N, C, Hp, Wp = self.padded_shape
            dpad = xp.zeros((g, C // g, N, Hp, Wp), dy.dtype)  # channel-major: col2im's taps
        if need_W or need_x:
            for blk in self.cols.blocks:
                dyc = _block_channels_first(xp, dy, blk, g)  # (g, O/g, rows)
                if need_W:  # dW^T += dy (O, rows) @ col (rows, K)
                    part = _gemm(xp, dyc, self.cols.col(blk))
                    dWt = part if dWt is None else xp.add(dWt, part, out=dWt)
                if gather:
                    t, _, l, _ = self.pads
                    geo = (self.out_hw, self.kernel, self.stride, (t, l), self.dilation)
                    dx = cupy_kernels.col2im(xp, _gemm(xp, self.Wm, dyc), self.x_shape, *geo)
                elif by_col2im:
                    self._col2im_block(dyc, dpad, blk)
        dW = _weight_from_matrix(dWt.transpose(0, 2, 1), self.W.shape) if need_W else None
        if by_col2im:
            N, C, H, Wd = self.x_shape
            t, _, l, _ = self.pads
            nchw = dpad.reshape(C, N, *dpad.shape[3:]).transpose(1, 0, 2, 3)
            dx = xp.ascontiguousarray(nchw[:, :, t : t + H, l : l + Wd])
        return dx, dW

    def _col2im_block(self, dyc: Any, dpad: Any, blk: Block) -> None:
        """Add block ``blk``'s column gradient ``W @ dy`` into ``dpad (g, C/g, N, Hp, Wp)``."""
        n0, n1, h0, h1 = blk
        (kh, kw), (sh, _), (dh, _) = self.kernel, self.stride, self.dilation
        g, cg = dpad.shape[:2]
        # (g, K, rows): each kernel tap of it is one contiguous block
        taps = _gemm(self.xp, self.Wm, dyc).reshape(g, kh, kw, cg, n1 - n0, h1 - h0, self.out_hw[1])
        out = dpad[:, :, n0:n1, h0 * sh : (h1 - 1) * sh + dh * (kh - 1) + 1]
        _scatter_taps(taps, out, self.stride, self.dilation)

    def _dx_pads(self) -> Pads | None:
        """Padding of ``dy`` that makes ``dx`` a stride-1 convolution of it, or None.

        With stride 1, ``dx`` is ``dy`` correlated with the flipped, transposed kernel: a
        blocked im2col *gather* of ``dy`` and GEMMs, measured 1.1-1.5x faster than GEMMs into
        the column gradient and a ``kh*kw``-tap scatter-add (col2im), up to ``O = 2C`` (3x3
        and 5x5 kernels). Its matrix has ``kh*kw*O`` columns against col2im's ``kh*kw*C``,
        so wider outputs keep col2im.
        """
        O, cg, kh, kw = self.W.shape
        if self.stride != (1, 1) or 2 * cg * self.group < O:
            return None
        (dh, dw), (t, b, l, r) = self.dilation, self.pads
        pads = (dh * (kh - 1) - t, dh * (kh - 1) - b, dw * (kw - 1) - l, dw * (kw - 1) - r)
        return pads if min(pads) >= 0 else None  # padding wider than the kernel: use col2im

    def _grads_by_conv(self, dy: Any, pads: Pads, need_W: bool) -> tuple:
        """``dx`` as a stride-1 convolution of ``dy`` (see ``_dx_pads``), and ``dW`` from the
        same column blocks of ``dy``.

        Block by block over the pixels of ``x``: ``dx = col(dy) @ Wf`` with ``Wf`` the flipped,
        transposed kernel, and ``dWf += x (C, pixels) @ col(dy)``, which is ``dW`` with its
        taps flipped. So backward builds one im2col matrix (of ``dy``), not two.
        """
        xp, g = self.xp, self.group
        O, cg, kh, kw = self.W.shape
        # Rows (i, j, o) of the flipped kernel against columns c, per group.
        Wf = self.W.reshape(g, O // g, cg, kh, kw)[..., ::-1, ::-1].transpose(0, 3, 4, 1, 2)
        Wf = Wf.reshape(g, kh * kw * (O // g), cg)
        H, Wd = self.x_shape[2:]
        cols = _column_blocks(xp, dy, pads, (self.kernel, (1, 1), self.dilation, (H, Wd), g))
        dx = xp.empty(self.x_shape, dtype=dy.dtype)
        dWf: Any = None
        for blk in cols.blocks:
            col = cols.col(blk)
            _store_rows(xp, _gemm(xp, col, Wf), dx, blk)
            if need_W:
                part = _gemm(xp, _block_channels_first(xp, self.x, blk, g), col)  # (g, C/g, K)
                dWf = part if dWf is None else xp.add(dWf, part, out=dWf)
        dW = None
        if need_W:  # (g, c, (i', j', o)) -> (g*O/g + o, c, kh-1-i', kw-1-j')
            dW = dWf.reshape(g, cg, kh, kw, O // g)[:, :, ::-1, ::-1].transpose(0, 4, 1, 2, 3)
            dW = xp.ascontiguousarray(dW).reshape(self.W.shape)
        return dx, dW

    # depthwise: one input channel per group, so a sum over taps of per-channel scaled views
    def _depthwise_forward(self, x: Any, W: Any) -> Any:
        xp = self.xp
        mult = W.shape[0] // x.shape[1]
        xpad = _pad_nchw(xp, x, self.pads)
        self.xpad = xp.repeat(xpad, mult, axis=1) if mult > 1 else xpad
        y = xp.zeros((x.shape[0], W.shape[0], *self.out_hw), dtype=x.dtype)
        geo = (self.stride, self.dilation)

        def taps(lo: int, hi: int) -> None:
            out, tmp = y[lo:hi], xp.empty_like(y[lo:hi])
            for i, j in self._taps():
                out += xp.multiply(
                    _tap(self.xpad[lo:hi], i, j, geo, self.out_hw), W[:, 0, i, j, None, None], out=tmp
                )

        _over_batch(xp, x.shape[0], y.size * W[0].size, taps)
        return y

    def _depthwise_backward(self, dy: Any, need_x: bool, need_W: bool) -> tuple:
        xp, W = self.xp, self.W
        geo = (self.stride, self.dilation)
        dpad: Any = xp.zeros_like(self.xpad) if need_x else None

        def taps(lo: int, hi: int) -> Any:
            g = dy[lo:hi]
            dW = self._depthwise_weight_grad(g, self.xpad[lo:hi]) if need_W else None
            if need_x:
                for i, j in self._taps():
                    view = _tap(dpad[lo:hi], i, j, geo, self.out_hw)
                    view += g * W[:, 0, i, j, None, None]
            return dW

        parts = _over_batch(xp, dy.shape[0], dy.size * W[0].size, taps)
        dW = sum(parts[1:], parts[0]) if need_W else None
        dx = None
        if need_x:
            N, C, H, Wd = self.x_shape
            t, _, l, _ = self.pads
            dx = dpad[:, :, t : t + H, l : l + Wd]
            if W.shape[0] != C:
                dx = dx.reshape(N, C, W.shape[0] // C, H, Wd).sum(axis=2)  # -1 fails for N = 0
            dx = xp.ascontiguousarray(dx)
        return dx, dW

    def _depthwise_weight_grad(self, g: Any, xpad: Any) -> Any:
        """``dW[o, 0, i, j] = sum over n, h, w of g * tap (i, j) of xpad``."""
        xp, W, geo = self.xp, self.W, (self.stride, self.dilation)
        if xp.__name__ == "numpy":  # one einsum per tap: one over all taps measured 1.4-3.6x slower
            dW = xp.zeros_like(W)
            for i, j in self._taps():
                dW[:, 0, i, j] = xp.einsum("nchw,nchw->c", g, _tap(xpad, i, j, geo, self.out_hw))
            return dW
        # CuPy: one reduction over a (n, C, kh, kw, Ho, Wo) view of every tap's window, where
        # per-tap einsums would each copy both operands into a batched GEMM.
        (sh, sw), (dh, dw) = geo
        n, c, r, q = xpad.strides
        windows = xp.lib.stride_tricks.as_strided(
            xpad, (g.shape[0], g.shape[1], *self.kernel, *self.out_hw), (n, c, r * dh, q * dw, r * sh, q * sw)
        )
        return _cupy_kernels.dot_over(xp, g[:, :, None, None], windows, (0, 4, 5)).reshape(W.shape)

    def _taps(self) -> list[tuple[int, int]]:
        kh, kw = self.kernel
        return [(i, j) for i in range(kh) for j in range(kw)]


class ConvTranspose2d(_ConvBase):
    """Transposed convolution (the gradient of ``Conv2d`` w.r.t. its input) with
    ``W (C_in, C_out/group, kh, kw)``, PyTorch's and ONNX's layout."""

    def __init__(
        self, stride: Any = 1, padding: Any = 0, output_padding: Any = 0, dilation: Any = 1, group: int = 1
    ) -> None:
        super().__init__(stride, padding, dilation, group)
        self.output_padding = _pair(self.name, "output_padding", output_padding, least=0)
        for op, s, d in zip(self.output_padding, self.stride, self.dilation):
            if op >= max(s, d):
                raise _args.bad(self.name, "output_padding", "be < stride or dilation", output_padding)

    def out_channels(self, W: Any) -> int:
        return W.shape[1] * self.group

    def forward(self, x: Any, W: Any, b: Any = None) -> Any:
        self._check(x, W, b, W.shape[0])
        xp, g = self.xp, self.group
        N, _, H, Wd = x.shape
        _, og, kh, kw = W.shape
        t, bo, l, r = self.pads
        (sh, sw), (dh, dw), (oph, opw) = self.stride, self.dilation, self.output_padding
        # The windows of the H x W input cover `full` rows; output padding adds rows past them.
        hp, wp = (H - 1) * sh + dh * (kh - 1) + 1 + oph, (Wd - 1) * sw + dw * (kw - 1) + 1 + opw
        if hp - t - bo < 1 or wp - l - r < 1:
            raise self.error(f"padding {self.pads} leaves an empty output", x, W)
        self.kernel, self.in_hw, self.x_shape = (kh, kw), (H, Wd), x.shape
        self.Wm = _weight_matrix(W, g)
        self.W_shape, self.has_bias = W.shape, b is not None
        self.xm = _pixel_rows(x, g)
        dcol = _gemm(xp, self.Wm, self.xm.transpose(0, 2, 1))  # (g, K, N*H*W)
        y_shape = (N, og * g, hp - t - bo, wp - l - r)
        if cupy_kernels.usable_32bit(xp, dcol, sizes=(N * og * g * hp * wp,)):
            geo = (self.in_hw, self.kernel, self.stride, (t, l), self.dilation)
            y = cupy_kernels.col2im(xp, dcol, y_shape, *geo)  # the cropped output, gathered
        else:
            dcol = dcol.transpose(0, 2, 1)
            out = col2im(xp, dcol, (N, og * g, hp, wp), self.kernel, self.stride, self.dilation, self.in_hw)
            y = xp.ascontiguousarray(out[:, :, t : hp - bo, l : wp - r])
        if b is not None:
            y += b.reshape(1, -1, 1, 1)
        return y

    def backward(self, dy: Any) -> tuple:
        xp, g = self.xp, self.group
        if cupy_kernels.usable_32bit(xp, dy, sizes=(_col_size(dy.shape, self.kernel, self.in_hw),)):
            t, _, l, _ = self.pads
            geo = (self.in_hw, self.kernel, self.stride, (t, l), self.dilation, g)
            col = cupy_kernels.im2col(xp, dy, *geo)  # padding included: no padded copy of dy
        else:
            col = im2col(
                xp, pad_nhwc(xp, dy, self.pads), self.kernel, self.stride, self.dilation, self.in_hw, g
            )
        dx = dW = None
        if self.needs_grad[0]:
            N, _, H, Wd = self.x_shape
            dx = _from_rows(_gemm(xp, col, self.Wm), N, H, Wd)
        if self.needs_grad[1]:
            dW = _weight_from_matrix(_gemm(xp, col.transpose(0, 2, 1), self.xm), self.W_shape)
        if not self.has_bias:
            return dx, dW
        return dx, dW, dy.sum(axis=(0, 2, 3)) if self.needs_grad[2] else None


class Conv1d(Conv2d):
    """1-D convolution of ``(N, C, L)`` with ``W (O, C/group, k)``: a conv2d of height 1."""

    def __init__(self, stride: Any = 1, padding: Any = 0, dilation: Any = 1, group: int = 1) -> None:
        pad = _args.ints("Conv1d", "padding", padding, (2,), 0)
        super().__init__(
            (1, _args.count("Conv1d", "stride", stride)),
            (0, 0, pad[0], pad[-1]),
            (1, _args.count("Conv1d", "dilation", dilation)),
            group,
        )

    def forward(self, x: Any, W: Any, b: Any = None) -> Any:
        if x.ndim != 3 or W.ndim != 3:
            raise self.error("x must be (N, C, L) and W (O, C/group, k)", x, W)
        return super().forward(x[:, :, None], W[:, :, None], b)[:, :, 0]

    def backward(self, dy: Any) -> tuple:
        grads = super().backward(dy[:, :, None])
        return tuple(g[:, :, 0] if g is not None and i < 2 else g for i, g in enumerate(grads))


def conv2d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    group: int = 1,
) -> Tensor:
    """2-D convolution of ``x (N, C, H, W)`` with ``W (O, C/group, kh, kw)`` and optional ``b (O,)``.

    ``stride``/``dilation``: int or ``(sh, sw)``; ``padding``: int, ``(ph, pw)`` or
    ``(top, bottom, left, right)``. ``group == C`` is a depthwise convolution.

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> x = tensor.from_numpy(np.ones((2, 3, 8, 8), np.float32))
    >>> conv2d(x, tensor.from_numpy(np.ones((4, 3, 3, 3), np.float32)), padding=1).shape
    (2, 4, 8, 8)
    """
    op = Conv2d(stride, padding, dilation, group)
    return (op(x, W) if b is None else op(x, W, b))[0]


def conv_transpose2d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    dilation: Any = 1,
    group: int = 1,
) -> Tensor:
    """Transposed 2-D convolution; ``W (C_in, C_out/group, kh, kw)``, output
    ``(H - 1) * stride - pad_top - pad_bottom + dilation * (kh - 1) + output_padding + 1`` high."""
    op = ConvTranspose2d(stride, padding, output_padding, dilation, group)
    return (op(x, W) if b is None else op(x, W, b))[0]


def conv1d(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: int = 1,
    padding: Any = 0,
    dilation: int = 1,
    group: int = 1,
) -> Tensor:
    """1-D convolution of ``x (N, C, L)`` with ``W (O, C/group, k)``; padding int or (left, right)."""
    op = Conv1d(stride, padding, dilation, group)
    return (op(x, W) if b is None else op(x, W, b))[0]


# The inference paths build on the helpers above (they live apart to keep files small).
from singa_lite.ops import conv_infer  # noqa: E402
from singa_lite.ops.depthwise import depthwise_conv  # noqa: E402

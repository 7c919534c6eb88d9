"""The image strategies of the convolution engine: blocked im2col + GEMM for 2-D convs and
transposed convs (1-D convs run as images of height 1).

The image is copied once into a padded NHWC buffer; a strided *view* of it lists every
receptive field, and a reshape copies that view into the ``(N*Ho*Wo, kh*kw*C)`` column matrix,
whose rows are contiguous runs of ``kw*C`` values. On the host the matrix is made a block of
output pixels at a time into an L2-sized buffer, each block multiplied by the
``(kh*kw*C, O)`` weight matrix while it is still in cache and written to the NCHW output
(with the bias) in the same pass. Backward re-makes the blocks for the weight gradient. For
stride 1 it finds ``dx`` as a convolution of ``dy`` with the flipped kernel (and ``dW`` from
the same blocks of ``dy``); otherwise it scatters the column gradient back with ``col2im``: a
loop over the ``kh*kw`` kernel taps, each a vectorised strided add. Groups run as a batch of
GEMMs.

``im2col``/``col2im`` are written against ``xp`` so the same code runs on CuPy. There, with the
backend's kernels on (``backend/cupy_kernels.py``), one launch makes the whole column matrix
straight from the NCHW input, padding included (``_KernelColumns``), and col2im is a gather
that writes ``dx`` in NCHW: each input pixel adds its taps' entries to zero in the tap order
of ``_scatter_taps`` (kernel row, then column), so both paths give the same bits.

Padding is ``(top, bottom, left, right)`` (SINGA's convention); a :class:`Geometry2d` carries
the whole geometry of one call. Strategies are chosen by ``ops.conv_select.select``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from math import prod
from typing import Any, NamedTuple

from singa_lite.backend import cupy_kernels
from singa_lite.ops import window

Pads = tuple[int, ...]
"""``(top, bottom, left, right)``."""


class Geometry2d(NamedTuple):
    """Everything a 2-D strategy needs to know about one call's windows."""

    kernel: tuple[int, ...]  # (kh, kw)
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    pads: Pads
    out_hw: tuple[int, ...]  # the window positions: the output's size, a transposed conv's input's
    group: int


class Plan(ABC):
    """One strategy's run of one convolution: ``forward`` keeps what its ``backward`` needs.

    Forward-only strategies (inference) leave ``backward`` undefined: the engine selects them
    only when no backward follows.
    """

    def __init__(self, xp: Any, geo: Geometry2d) -> None:
        self.xp = xp
        self.kernel, self.stride, self.dilation, self.pads, self.out_hw, self.group = geo

    @abstractmethod
    def forward(self, x: Any, W: Any, b: Any) -> Any:
        """The convolution's output; keeps what ``backward`` needs."""

    def backward(self, dy: Any, need_x: bool, need_W: bool) -> tuple[Any, Any]:
        raise TypeError(f"{type(self).__name__} runs inference only: it has no backward")


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
    win = window.strided(
        xp,
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
_RING_BYTES = 4 << 20
"""Blocks up to this size alternate between two buffers (see ``_ColumnBlocks.col``)."""

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
        self.win = window.strided(
            xp,
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
        self.bufs: list[Any] = []
        self.turn = 0
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
        if not self.bufs:
            n0, n1, h0, h1 = self.blocks[0]
            shape = (self.group, (n1 - n0) * (h1 - h0) * self.out_hw[1], self.K)
            ring = 2 if prod(shape) * self.win.itemsize <= _RING_BYTES else 1
            self.bufs = [self.xp.empty(shape, dtype=self.win.dtype) for _ in range(ring)]
        # With two BLAS threads the GEMM's second thread reads part of the block into its
        # core's cache; rewriting that buffer for the next block then waits on the other core
        # for each of those lines. Two buffers in turn let that copy age out first. Measured
        # beside the GEMMs, 2 threads: ResNet-20's 16-channel im2col 1.9 -> 1.1 ms a layer
        # (blocks of 1.2 MB), its 32-channel one 0.50 -> 0.36 (2.4 MB), the whole step 0.77-0.90x
        # in three interleaved runs; LeNet's 6.3 MB blocks 1.7 -> 2.3 ms, so those keep one.
        buf = self.bufs[self.turn % len(self.bufs)]
        self.turn += 1
        col = buf[:, :rows]
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


# -- strategies ---------------------------------------------------------------------------------
class BlockedGemm(Plan):
    """The general 2-D strategy: blocked im2col + GEMM forward, col2im or a conv of ``dy`` back."""

    def forward(self, x: Any, W: Any, b: Any) -> Any:
        self.x, self.x_shape, self.W = x, x.shape, W
        return self._gemm_forward(x, W, b)

    def backward(self, dy: Any, need_x: bool, need_W: bool) -> tuple[Any, Any]:
        return self._gemm_backward(dy, need_x, need_W)

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


class TransposeGemm(Plan):
    """2-D transposed conv: ``W^T x`` column GEMM and a col2im forward; an im2col of ``dy`` and
    GEMMs back. ``W (C_in, C_out/group, kh, kw)``; ``geo.out_hw`` is the *input*'s size."""

    def __init__(self, xp: Any, geo: Geometry2d, output_padding: tuple[int, ...]) -> None:
        super().__init__(xp, geo)
        self.in_hw, self.output_padding = self.out_hw, output_padding

    def forward(self, x: Any, W: Any, b: Any) -> Any:
        xp, g = self.xp, self.group
        N, _, H, Wd = x.shape
        _, og, kh, kw = W.shape
        t, bo, l, r = self.pads
        (sh, sw), (dh, dw), (oph, opw) = self.stride, self.dilation, self.output_padding
        # The windows of the H x W input cover `full` rows; output padding adds rows past them.
        hp, wp = (H - 1) * sh + dh * (kh - 1) + 1 + oph, (Wd - 1) * sw + dw * (kw - 1) + 1 + opw
        self.x_shape, self.W_shape = x.shape, W.shape
        self.Wm = _weight_matrix(W, g)
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

    def backward(self, dy: Any, need_x: bool, need_W: bool) -> tuple[Any, Any]:
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
        if need_x:
            N, _, H, Wd = self.x_shape
            dx = _from_rows(_gemm(xp, col, self.Wm), N, H, Wd)
        if need_W:
            dW = _weight_from_matrix(_gemm(xp, col.transpose(0, 2, 1), self.xm), self.W_shape)
        return dx, dW

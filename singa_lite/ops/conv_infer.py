"""Batch-1 inference for ``conv2d``: one image, channels first, nothing kept for backward.

With a single image and no gradient wanted, ``W (O, C*kh*kw) @ col (C*kh*kw, Ho*Wo)`` gives
the NCHW output directly (no transposing copy); 1x1 stride-1 convs use the image itself as
the matrix; narrowing stride-1 convs use kn2row (one GEMM of all taps, then a sum of shifted
windows); big column matrices are made in bands of output rows. The engine selects this
strategy (:class:`OneImage`) when no backward follows; ``sonnx``'s inference program calls
``conv2d_one_image`` with the bias folded into the weight as an extra column.

(A Winograd F(2x2, 3x3) path for wide 14x14 convs was measured 0.82-0.89x im2col's time on
its own but 0.7% faster to 2% slower inside resnet50, inception and vgg19, whose caches its
transforms' extra passes evict; it was removed.)
"""

from __future__ import annotations

import math
from typing import Any

from singa_lite.backend import cpu_kernels
from singa_lite.ops import window
from singa_lite.ops.conv_blocks import Pads, Plan, _pad_nchw

_BAND_BYTES = 1 << 20
"""Column matrix ``conv_one_image`` makes at once (about a core's L2 cache), bigger ones going
in bands of output rows, so that the GEMM reads each band while it is still in cache..."""
_BAND_COLUMNS = 2048
"""...but with at least this many output pixels: thinner GEMMs ran slower than the cache saved
(measured: 3x3 convs on 64-192 channels lost at 1 MiB bands, the 7x7 stem won 25%)."""


class OneImage(Plan):
    """Batch-1 conv with no backward to follow: :func:`conv_one_image`."""

    def forward(self, x: Any, W: Any, b: Any) -> Any:
        geo = (self.pads, self.stride, self.dilation, self.out_hw, self.group)
        return conv_one_image(self.xp, x, W, b, *geo)


def conv_one_image(
    xp: Any,
    x: Any,
    W: Any,
    b: Any,
    pads: Pads,
    stride: tuple,
    dilation: tuple,
    out_hw: tuple,
    group: int,
    Wb: Any = None,
    bounds: tuple[float, float] | None = None,
) -> Any:
    """Forward of a batch-1 conv as ``W (O, C*kh*kw) @ col (C*kh*kw, Ho*Wo)`` per group.

    With the rows of the column matrix ordered (channel, tap) and its columns the output
    pixels, the product is already the NCHW output: no transposing copy (the blocked NHWC
    path's ``_store_rows``), and for a 1x1 stride-1 conv no im2col at all, the image itself
    being the column matrix. Measured 1.2-7x faster than the blocked path at batch 1, whose
    GEMMs have only ``Ho*Wo`` rows. Nothing is kept for backward: it serves inference only.

    ``Wb`` is ``W`` with ``b`` as one more column (``one_image_weight``, made once by the
    caller): the column matrix then gets a row of ones and the GEMM adds the bias, where a
    separate ``y += b`` pass over an output bigger than the cache measured as long as a
    1x1 conv's GEMM itself. ``bounds = (lo, hi)`` clamps the output (a fused ReLU or Clip).
    A 1x1 stride-1 conv on the compiled CPU kernels adds its bias and clamps in one pass
    after the GEMM (``cpu_kernels.activation.bias_clamp_``): MobileNetV2 12% faster than
    with the ones row (a copy of the input) and a clamp pass.
    """
    O, cg, kh, kw = W.shape
    (Ho, Wo), (sh, sw), (dh, dw) = out_hw, stride, dilation
    K, og = cg * kh * kw, O // group
    img = _pad_nchw(xp, x, pads)[0]  # (C, Hp, Wp)
    y = xp.empty((1, O, Ho, Wo), dtype=x.dtype)
    Wm, ym = W.reshape(group, og, K), y.reshape(group, og, Ho * Wo)
    biased = Wb is not None and b is not None
    pointwise = kh == kw == 1 and (sh, sw) == (1, 1)
    if pointwise and b is not None and cpu_kernels.usable(xp, y, b):
        _gemm_into(xp, Wm, img.reshape(group, cg, Ho * Wo), ym)
        cpu_kernels.activation.bias_clamp_(y, b, bounds)
        return y
    if pointwise and not (biased and cg < og):
        # Copying a wider input under a row of ones would cost more than the bias pass.
        _gemm_into(xp, Wm, img.reshape(group, cg, Ho * Wo), ym)
    elif _kn2row_wins(W, stride, group):
        _kn2row_into(xp, img, W, dilation, y[0])
    else:
        sC, sH, sW = img.strides
        win = window.strided(
            xp,
            img,
            shape=(group, cg, kh, kw, Ho, Wo),
            strides=(sC * cg, sC, sH * dh, sW * dw, sH * sh, sW * sw),
        )
        # Bands fit a CPU core's cache; a GPU takes the whole matrix in one GEMM (bands there
        # only split VGG's 115 MB column matrix into ~100 small, launch-bound products).
        band = max(_BAND_BYTES, _BAND_COLUMNS * group * K * x.itemsize) if xp.__name__ == "numpy" else 1 << 62
        rows = max(1, band // (group * K * Wo * x.itemsize))
        for h0 in range(0, Ho, rows):  # bands keep a big image's matrix (vgg's: 115 MB) in cache
            h1 = min(Ho, h0 + rows)
            band = win[..., h0:h1, :]
            if biased:
                col = xp.empty((group, K + 1, (h1 - h0) * Wo), dtype=x.dtype)
                col[:, :K].reshape(band.shape)[...] = band  # the one copy
                col[:, K] = 1
                _gemm_into(xp, Wb, col, ym[:, :, h0 * Wo : h1 * Wo])
            else:
                col = band.reshape(group, K, (h1 - h0) * Wo)  # the one copy
                _gemm_into(xp, Wm, col, ym[:, :, h0 * Wo : h1 * Wo])
        if biased:
            return clamp_(xp, y, bounds)
    if b is not None:
        y += b.reshape(1, O, 1, 1)
    return clamp_(xp, y, bounds)


def clamp_(xp: Any, y: Any, bounds: tuple[float, float] | None) -> Any:
    """``y`` clamped in place to ``bounds = (lo, hi)`` (``hi`` may be inf), if given."""
    if bounds is not None:
        lo, hi = bounds
        if y.flags.c_contiguous and cpu_kernels.usable(xp, y):
            cpu_kernels.activation.clamp_(y, lo, hi)
        elif hi == math.inf:
            xp.maximum(y, y.dtype.type(lo), out=y)
        else:
            xp.clip(y, y.dtype.type(lo), y.dtype.type(hi), out=y)
    return y


def one_image_weight(xp: Any, W: Any, b: Any, group: int) -> Any:
    """``W (O, C/g, kh, kw)`` and bias ``b (O,)`` as one ``(g, O/g, C/g*kh*kw + 1)`` matrix,
    the bias last: the ``Wb`` argument of ``conv2d_one_image``, made once per constant weight."""
    og = W.shape[0] // group
    return xp.concatenate((W.reshape(group, og, -1), b.reshape(group, og, 1)), axis=-1)


def conv2d_one_image(
    xp: Any,
    x: Any,
    W: Any,
    b: Any,
    Wb: Any,
    stride: tuple,
    pads: Pads,
    dilation: tuple,
    group: int,
    bounds: tuple[float, float] | None = None,
) -> Any | None:
    """Inference forward of NCHW batch-1 ``x`` on arrays (nothing recorded): ``Conv2d``'s
    batch-1 path with ``Wb = one_image_weight(xp, W, b, group)`` given, so that the GEMM adds
    the bias, and the output clamped to ``bounds``. None where that path does not apply
    (depthwise, a batch, mismatched shapes or dtypes, an empty output): the caller then runs
    ``Conv2d``, which also raises its errors.
    """
    O, cg, kh, kw = W.shape
    if x.ndim != 4 or x.shape[0] != 1 or x.shape[1] != cg * group or (cg == 1 and group > 1):
        return None
    if not (x.dtype == W.dtype == b.dtype == Wb.dtype) or Wb.shape != (group, O // group, cg * kh * kw + 1):
        return None
    t, bo, l, r = pads
    out_hw = window.out_size(x.shape[2:], (kh, kw), stride, ((t, bo), (l, r)), dilation)
    if min(out_hw) < 1:
        return None
    return conv_one_image(xp, x, W, b, pads, stride, dilation, out_hw, group, Wb, bounds)


def _kn2row_wins(W: Any, stride: tuple, group: int) -> bool:
    """Whether ``_kn2row_into`` beats im2col for this batch-1 conv.

    kn2row moves ``kh*kw*O`` values per pixel where im2col moves ``kh*kw*C``, but multiplies
    the padding ring as well: on real shapes (densenet's 128 -> 32 3x3 convs) it measured
    0.4-0.7x im2col's time with ``O <= C/2``, and equal to 3.8x slower from ``O = C`` up.
    """
    O, C, kh, kw = W.shape
    return group == 1 and stride == (1, 1) and kh * kw > 1 and 2 * O <= C


def _kn2row_into(xp: Any, img: Any, W: Any, dilation: tuple, out: Any) -> None:
    """``out (O, Ho, Wo)`` = stride-1 conv of padded ``img (C, Hp, Wp)``, without im2col.

    One GEMM ``(kh*kw*O, C) @ (C, Hp*Wp)`` gives every tap's contribution at every padded
    pixel; the output is then the sum over taps of shifted windows of it. The sum runs on
    each tap's plane flattened: output pixel ``(o, r, c)`` at flat ``p = (o*Hp + r)*Wp + c``
    reads tap ``(i, j)`` at ``p + i*dh*Wp + j*dw``, so each tap is one shifted contiguous
    vector and the shifts that cross a row or plane end land only on cells outside the
    ``Ho x Wo`` window of each plane, which are dropped when the result is copied out.
    NumPy runs a 1-D add 3-4x faster than the same add over ``(O, Ho, Wo)`` windows, whose
    short rows it iterates one by one.
    """
    O, C, kh, kw = W.shape
    (dh, dw), (_, Ho, Wo), (_, Hp, Wp) = dilation, out.shape, img.shape
    Wt = W.transpose(2, 3, 0, 1).reshape(kh * kw * O, C)  # taps major: a copy of the weight only
    Z = xp.matmul(Wt, img.reshape(C, Hp * Wp)).reshape(kh * kw, O * Hp * Wp)
    offsets = [i * dh * Wp + j * dw for i in range(kh) for j in range(kw)]
    # The last output pixel is at flat O*Hp*Wp - 1 - offsets[-1]: the first n cells hold every
    # output pixel, and the cells after them (never written) are padding the copy skips.
    n = O * Hp * Wp - offsets[-1]
    grid = xp.empty(O * Hp * Wp, dtype=Z.dtype)
    acc = grid[:n]
    xp.add(Z[0, offsets[0] : offsets[0] + n], Z[1, offsets[1] : offsets[1] + n], out=acc)
    for t in range(2, kh * kw):
        acc += Z[t, offsets[t] : offsets[t] + n]
    out[...] = grid.reshape(O, Hp, Wp)[:, :Ho, :Wo]


def _gemm_into(xp: Any, a: Any, b: Any, out: Any) -> None:
    """``out = a @ b`` over groups; one group as a plain 2-D product, which BLAS gets whole."""
    if a.shape[0] == 1:
        xp.matmul(a[0], b[0], out=out[0])
    else:
        xp.matmul(a, b, out=out)

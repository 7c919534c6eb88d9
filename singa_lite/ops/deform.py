"""Deformable convolution (ONNX DeformConv, torchvision's ``deform_conv2d``) and max ROI pooling
(ONNX MaxRoiPool), written with other ops, so that their gradients come from those.

``deform_conv2d`` samples the input bilinearly at every kernel tap moved by a learned offset
(corners outside the input count as 0), optionally scales each sample by a mask, and multiplies
the samples with the weights as a grouped convolution does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite import _args
from singa_lite.errors import ShapeError
from singa_lite.ops import elementwise, indexing, linalg, reduce, shape
from singa_lite.tensor import Tensor

__all__ = ["deform_conv2d", "max_roi_pool"]


def _const(arr: Any, like: Tensor) -> Tensor:
    return Tensor._wrap(like.device.xp.asarray(arr, like.dtype), like.device, False, None, 0)


def deform_conv2d(
    x: Tensor,
    weight: Tensor,
    offset: Tensor,
    bias: Tensor | None = None,
    mask: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    group: int = 1,
    offset_group: int = 1,
) -> Tensor:
    """Deformable 2-D convolution of ``x (N, C, H, W)`` with ``weight (O, C/group, kh, kw)``;
    ``offset (N, offset_group*2*kh*kw, oh, ow)`` holds a (dy, dx) per tap and output position,
    ``mask (N, offset_group*kh*kw, oh, ow)`` an optional factor per sample. ``padding`` is an
    int, ``(ph, pw)`` or ``(top, left, bottom, right)`` (ONNX's order).
    """
    name = "deform_conv2d"
    for arg, t in (("x", x), ("weight", weight), ("offset", offset)):
        if _args.tensor(name, arg, t).ndim() != 4:
            raise ShapeError(f"{name}: {arg} must be 4-D, got {t.shape}")
    sh, sw = _args.per_axis(name, "stride", stride, 2)
    dh, dw = _args.per_axis(name, "dilation", dilation, 2)
    pads = _args.ints(name, "padding", padding, (1, 2, 4), 0)
    pt, pl, pb, pr = pads * 4 if len(pads) == 1 else (*pads, *pads) if len(pads) == 2 else pads
    group = _args.count(name, "group", group)
    G = _args.count(name, "offset_group", offset_group)
    N, C, H, W = x.shape
    O, Cg, kh, kw = weight.shape
    K = kh * kw
    oh = (H + pt + pb - (dh * (kh - 1) + 1)) // sh + 1
    ow = (W + pl + pr - (dw * (kw - 1) + 1)) // sw + 1
    if Cg * group != C or O % group or C % G:
        raise ShapeError(
            f"{name}: x {x.shape} and weight {weight.shape} do not fit group {group}, offset_group {G}"
        )
    if offset.shape != (N, 2 * G * K, oh, ow):
        raise ShapeError(f"{name}: offset {offset.shape} must be {(N, 2 * G * K, oh, ow)}")
    if mask is not None and mask.shape != (N, G * K, oh, ow):
        raise ShapeError(f"{name}: mask {mask.shape} must be {(N, G * K, oh, ow)}")
    # where each tap of each output position reads, before its offset: (1, 1, K, oh, ow)
    tap_y, tap_x = np.divmod(np.arange(K), kw)
    base_y = (np.arange(oh) * sh - pt)[None, :, None] + (tap_y * dh)[:, None, None]
    base_x = (np.arange(ow) * sw - pl)[None, None, :] + (tap_x * dw)[:, None, None]
    off = shape.reshape(offset, (N, G, K, 2, oh, ow))
    py = elementwise.add(shape.squeeze(indexing.slice(off, [0], [1], [3]), 3), _const(base_y, x))
    px = elementwise.add(shape.squeeze(indexing.slice(off, [1], [2], [3]), 3), _const(base_x, x))
    xp = x.device.xp
    y0, x0 = xp.floor(py.data), xp.floor(px.data)  # constants: the gradient flows through ly, lx
    ly, lx = elementwise.sub(py, _const(y0, x)), elementwise.sub(px, _const(x0, x))
    hy, hx = elementwise.sub(_const(1, x), ly), elementwise.sub(_const(1, x), lx)
    flat = shape.reshape(x, (N, G, C // G, H * W))
    samples = None
    for dy, dx, wy, wx in ((0, 0, hy, hx), (0, 1, hy, lx), (1, 0, ly, hx), (1, 1, ly, lx)):
        yy, xx = y0.astype(np.int64) + dy, x0.astype(np.int64) + dx
        inside = (yy >= 0) & (yy < H) & (xx >= 0) & (xx < W)
        at = xp.clip(yy, 0, H - 1) * W + xp.clip(xx, 0, W - 1)  # (N, G, K, oh, ow)
        at = xp.broadcast_to(at.reshape(N, G, 1, K * oh * ow), (N, G, C // G, K * oh * ow))
        picked = shape.reshape(indexing.gather_elements(flat, at, 3), (N, G, C // G, K, oh, ow))
        weight_4 = elementwise.mul(elementwise.mul(wy, wx), _const(inside, x))
        term = elementwise.mul(picked, shape.unsqueeze(weight_4, 2))
        samples = term if samples is None else elementwise.add(samples, term)
    assert samples is not None
    if mask is not None:
        samples = elementwise.mul(samples, shape.unsqueeze(shape.reshape(mask, (N, G, K, oh, ow)), 2))
    cols = shape.reshape(samples, (N, group, Cg * K, oh * ow))
    y = linalg.einsum("gok,ngkp->ngop", shape.reshape(weight, (group, O // group, Cg * K)), cols)
    y = shape.reshape(y, (N, O, oh, ow))
    if bias is not None:
        y = elementwise.add(y, shape.reshape(bias, (1, O, 1, 1)))
    return y


def max_roi_pool(x: Tensor, rois: Tensor, pooled_shape: Any, spatial_scale: float = 1.0) -> Tensor:
    """Max pooling of each region ``(batch_index, x1, y1, x2, y2)`` of ``rois (R, 5)`` (input
    pixels times ``spatial_scale``, rounded) of ``x (N, C, H, W)`` into ``pooled_shape`` bins,
    as Caffe's ROI pooling (ONNX MaxRoiPool); an empty bin is 0. ``(R, C, ph, pw)``.
    """
    name = "max_roi_pool"
    if _args.tensor(name, "x", x).ndim() != 4 or _args.tensor(name, "rois", rois).ndim() != 2:
        raise ShapeError(f"{name}: expects x (N, C, H, W) and rois (R, 5), got {x.shape} and {rois.shape}")
    if rois.shape[1] != 5:
        raise ShapeError(f"{name}: rois must be (R, 5), got {rois.shape}")
    ph, pw = _args.per_axis(name, "pooled_shape", pooled_shape, 2)
    scale = _args.positive(name, "spatial_scale", spatial_scale)
    N, _, H, W = x.shape
    xp = x.device.xp
    r = xp.asarray(rois.data, np.float64)
    if not bool(xp.isfinite(r).all()) or bool((xp.abs(r) > 2**40).any()):
        raise ShapeError(f"{name}: rois must hold finite coordinates of a sensible size")
    batch = r[:, 0].astype(np.int64)
    if batch.size and (int(batch.min()) < 0 or int(batch.max()) >= N):
        raise ShapeError(f"{name}: a batch index of rois is outside [0, {N})")
    x1, y1, x2, y2 = (xp.round(r[:, i] * scale).astype(np.int64) for i in range(1, 5))
    rh, rw = xp.maximum(y2 - y1 + 1, 1), xp.maximum(x2 - x1 + 1, 1)

    def edges(start: Any, size: Any, bins: int, limit: int) -> tuple[Any, Any]:
        i = xp.arange(bins)[None, :]
        lo = xp.floor(i * size[:, None] / bins).astype(np.int64) + start[:, None]
        hi = xp.ceil((i + 1) * size[:, None] / bins).astype(np.int64) + start[:, None]
        return xp.clip(lo, 0, limit), xp.clip(hi, 0, limit)

    h_lo, h_hi = edges(y1, rh, ph, H)  # (R, ph)
    w_lo, w_hi = edges(x1, rw, pw, W)
    rows, cols = xp.arange(H), xp.arange(W)
    in_h = (rows >= h_lo[..., None]) & (rows < h_hi[..., None])  # (R, ph, H)
    in_w = (cols >= w_lo[..., None]) & (cols < w_hi[..., None])  # (R, pw, W)
    picked = indexing.gather(x, 0, Tensor._wrap(batch, x.device, False, None, 0))  # (R, C, H, W)
    low = _const(np.finfo(x.dtype).min, x)
    # A bin is a rectangle: the max over its columns, then over its rows.
    by_col = [
        reduce.reduce_max(indexing.where(_bool(in_w[:, j, None, None, :], x), picked, low), [3], True)
        for j in range(pw)
    ]
    wide = shape.cat(by_col, 3)  # (R, C, H, pw)
    by_row = [
        reduce.reduce_max(indexing.where(_bool(in_h[:, i, None, :, None], x), wide, low), [2], True)
        for i in range(ph)
    ]
    y = shape.cat(by_row, 2)  # (R, C, ph, pw)
    empty = ~(in_h.any(axis=-1)[:, :, None] & in_w.any(axis=-1)[:, None, :])  # (R, ph, pw)
    return indexing.where(_bool(empty[:, None], x), _const(0, x), y)


def _bool(arr: Any, like: Tensor) -> Tensor:
    return Tensor._wrap(like.device.xp.asarray(arr, bool), like.device, False, None, 0)

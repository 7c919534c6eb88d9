"""Detection ops: NonMaxSuppression (an index producer, no gradient) and RoiAlign
(differentiable in its feature map).

Both read small per-box values on the host where they decide shapes or a sequential order:
NMS's greedy selection, RoiAlign's per-box sample counts and image numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite import _args, backend
from singa_lite.autograd import Operator
from singa_lite.errors import DTypeError
from singa_lite.tensor import Tensor

__all__ = ["NonMaxSuppression", "RoiAlign", "non_max_suppression", "roi_align"]


class NonMaxSuppression(Operator):
    """ONNX NonMaxSuppression: for every batch entry and class, boxes taken greedily by
    descending score (ties: lower index first), each dropping the remaining boxes whose IoU with
    it exceeds ``iou_threshold``; at most ``max_output`` per class, only scores above
    ``score_threshold`` (when given). Returns int64 rows ``[batch, class, box]``.

    ``boxes`` (B, N, 4) are ``[y1, x1, y2, x2]`` (either diagonal) or, with
    ``center_point_box``, ``[x_center, y_center, width, height]``; ``scores`` are (B, C, N).
    """

    def __init__(
        self,
        max_output: int = 0,
        iou_threshold: float = 0.0,
        score_threshold: float | None = None,
        center_point_box: bool = False,
    ) -> None:
        super().__init__()
        self.max_output = max(_args.integer(self.name, "max_output", max_output), 0)
        self.iou_threshold = _args.number(self.name, "iou_threshold", iou_threshold)
        self.score_threshold = (
            None if score_threshold is None else _args.number(self.name, "score_threshold", score_threshold)
        )
        self.center_point_box = bool(center_point_box)

    def corners(self, boxes: Any) -> tuple[Any, Any, Any, Any]:
        """(x_min, x_max, y_min, y_max) of (..., 4) boxes, as ONNX's reference reads them."""
        xp = self.xp
        if self.center_point_box:
            xc, yc, w, h = (boxes[..., i] for i in range(4))
            return xc - w / 2, xc + w / 2, yc - h / 2, yc + h / 2
        y1, x1, y2, x2 = (boxes[..., i] for i in range(4))
        return xp.minimum(x1, x2), xp.maximum(x1, x2), xp.minimum(y1, y2), xp.maximum(y1, y2)

    def suppressed(self, c: tuple, i: Any, rest: Any) -> Any:
        """Which boxes ``rest`` overlap box ``i`` by more than the IoU threshold."""
        xp = self.xp
        x0, x1, y0, y1 = (a[i] for a in c)
        rx0, rx1, ry0, ry1 = (a[rest] for a in c)
        w = xp.minimum(x1, rx1) - xp.maximum(x0, rx0)
        h = xp.minimum(y1, ry1) - xp.maximum(y0, ry0)
        inter = w * h
        area, areas = (x1 - x0) * (y1 - y0), (rx1 - rx0) * (ry1 - ry0)
        union = area + areas - inter
        ok = (w > 0) & (h > 0) & (inter > 0) & (area > 0) & (areas > 0) & (union > 0)
        iou = inter / xp.where(ok, union, 1)
        return ok & (iou > self.iou_threshold)

    def forward(self, boxes: Any, scores: Any) -> Any:
        xp = self.xp
        if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or scores.shape[::2] != boxes.shape[:2]:
            raise self.error("boxes must be (B, N, 4) and scores (B, C, N)", boxes, scores)
        if boxes.dtype.kind != "f" or scores.dtype.kind != "f":
            raise DTypeError(f"{self.name}: boxes and scores must be floating point")
        rows: list[tuple[int, int, int]] = []
        for b in range(boxes.shape[0]):
            c = self.corners(boxes[b])
            for cls in range(scores.shape[1]):
                picked = self.select(c, scores[b, cls])
                rows.extend((b, cls, i) for i in picked)
        return xp.asarray(np.asarray(rows, dtype=np.int64).reshape(-1, 3))

    def select(self, c: tuple, s: Any) -> list[int]:
        """The greedy picks among one class's boxes with scores ``s``."""
        xp = self.xp
        if self.max_output == 0:
            return []
        cand = xp.argsort(-s, kind="stable")
        if self.score_threshold is not None:
            cand = cand[s[cand] > self.score_threshold]
        picked: list[int] = []
        while cand.size and len(picked) < self.max_output:
            i = cand[0]
            picked.append(int(i))
            rest = cand[1:]
            cand = rest[~self.suppressed(c, i, rest)] if rest.size else rest
        return picked

    def backward(self, dy: Any) -> Any:
        return None, None


_MAX_SAMPLES = 1 << 26
"""The most bilinear samples RoiAlign takes along one axis for all boxes at once (adaptive
sampling grows with the box: an infinite or huge box would otherwise ask for terabytes)."""


def _axis_samples(xp: Any, start: Any, size_bin: Any, grid: Any, top: int, out: int, extent: int) -> tuple:
    """RoiAlign's samples along one axis of ``extent`` pixels for R boxes: the two pixels each
    sample reads and their bilinear weights, (R, out, top) each, for ``grid[r]`` samples per
    bin (``top`` the largest); samples past a box's own count, or outside ``[-1, extent]``,
    weigh nothing."""
    dt = start.dtype
    p = xp.arange(out, dtype=dt)[None, :, None]
    i = xp.arange(top, dtype=dt)[None, None, :]
    g = grid.astype(dt)[:, None, None]
    pos = (
        start[:, None, None]
        + p * size_bin[:, None, None]
        + (i + dt.type(0.5)) * size_bin[:, None, None] / xp.maximum(g, 1)
    )
    live = (i < g) & (pos >= -1) & (pos <= extent)
    pos = xp.where(live, xp.maximum(pos, 0), 0)  # NaN and far-away samples read pixel 0, weighing 0
    low = xp.trunc(pos).astype(np.int64)
    edge = low >= extent - 1
    low = xp.where(edge, extent - 1, low)
    high = xp.where(edge, extent - 1, low + 1)
    frac = xp.where(edge, dt.type(0), pos - low)
    w_low = xp.where(live, 1 - frac, dt.type(0))
    w_high = xp.where(live, frac, dt.type(0))
    return low, high, w_low, w_high


class RoiAlign(Operator):
    """ONNX RoiAlign: each box of ``rois`` (R, 4: x1, y1, x2, y2 in input units times
    ``spatial_scale``) on image ``batch_indices[r]`` of ``x`` (N, C, H, W) pooled to
    (out_h, out_w) by averaging (``avg``) or taking the largest weighted corner (``max``, as
    ONNX defines it) of bilinear samples, ``sampling_ratio`` per bin and axis (adaptive when 0).
    Differentiable in ``x``.
    """

    def __init__(
        self,
        output_height: int = 1,
        output_width: int = 1,
        sampling_ratio: int = 0,
        spatial_scale: float = 1.0,
        mode: str = "avg",
        half_pixel: bool = True,
    ) -> None:
        super().__init__()
        me = self.name
        self.out = (
            _args.count(me, "output_height", output_height),
            _args.count(me, "output_width", output_width),
        )
        self.sampling_ratio = _args.count(me, "sampling_ratio", sampling_ratio, low=0)
        self.spatial_scale = _args.number(me, "spatial_scale", spatial_scale)
        self.mode = _args.choice(me, "mode", mode, ("avg", "max"))
        self.half_pixel = bool(half_pixel)

    def geometry(self, rois: Any) -> tuple:
        """Per box: start (y, x), bin size (y, x) and samples per bin (y, x), on ``rois``'s array
        module; the sample counts also as host ints (they decide shapes)."""
        xp = backend.get_array_module(rois)
        dt = rois.dtype.type
        off = dt(0.5) if self.half_pixel else dt(0)
        scaled = rois * dt(self.spatial_scale) - off
        start = (scaled[:, 1], scaled[:, 0])
        ext = [scaled[:, 3] - scaled[:, 1], scaled[:, 2] - scaled[:, 0]]
        if not self.half_pixel:
            ext = [xp.maximum(e, dt(1)) for e in ext]
        bins = (ext[0] / dt(self.out[0]), ext[1] / dt(self.out[1]))
        if self.sampling_ratio:
            grid = [xp.full(rois.shape[0], self.sampling_ratio, dtype=np.int64)] * 2
        else:
            # Infinite or NaN boxes get a huge or no grid (refused by the limits, or empty),
            # never an int64 overflow.
            cap = float(2**40)
            grid = [
                xp.clip(xp.nan_to_num(xp.ceil(e / dt(o)), nan=0.0, posinf=cap, neginf=0.0), 0, cap).astype(
                    np.int64
                )
                for e, o in zip(ext, self.out)
            ]
        return start, bins, grid

    def largest_grid(self, rois: np.ndarray) -> tuple[int, int]:
        """The most samples per bin along y and x over host ``rois`` (what sizes the workspace)."""
        grid = self.geometry(rois)[2]
        return tuple(int(g.max()) if g.size else 0 for g in grid)  # type: ignore[return-value]

    def forward(self, x: Any, rois: Any, batch_indices: Any) -> Any:
        xp = self.xp
        if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or batch_indices.shape != rois.shape[:1]:
            raise self.error(
                "x must be (N, C, H, W), rois (R, 4) and batch_indices (R,)", x, rois, batch_indices
            )
        if x.dtype.kind != "f" or rois.dtype.kind != "f":
            raise DTypeError(
                f"{self.name}: x and rois must be floating point, got {x.dtype} and {rois.dtype}"
            )
        if batch_indices.dtype.kind not in "iu":
            raise DTypeError(f"{self.name}: batch_indices must be integers, got {batch_indices.dtype}")
        n, c, h, w = x.shape
        self.images = backend.to_host(batch_indices).astype(np.int64)
        if self.images.size and (self.images.min() < 0 or self.images.max() >= n):
            raise self.error(f"a batch index lies outside [0, {n})", x, batch_indices)
        rois = rois.astype(x.dtype, copy=False)
        start, bins, grid = self.geometry(rois)
        tops = [int(g.max()) if g.size else 0 for g in grid]
        for t, o, axis in zip(tops, self.out, "yx"):
            if rois.shape[0] * o * t > _MAX_SAMPLES:
                raise self.error(
                    f"boxes need {t} samples per bin along {axis} ({rois.shape[0] * o * t} in all, over "
                    f"{_MAX_SAMPLES}): give a sampling_ratio or smaller boxes", x, rois
                )  # fmt: skip
        self.y = _axis_samples(xp, start[0], bins[0], grid[0], max(tops[0], 1), self.out[0], h)
        self.x = _axis_samples(xp, start[1], bins[1], grid[1], max(tops[1], 1), self.out[1], w)
        self.count = xp.maximum(grid[0] * grid[1], 1).astype(x.dtype)
        self.x_shape, self.dtype = x.shape, x.dtype
        if self.mode == "max":
            gys, gxs = (backend.to_host(g).tolist() for g in grid)
            return self.forward_max(x, gys, gxs)
        self.ay, self.ax = self.axis_matrix(self.y, h), self.axis_matrix(self.x, w)
        out = xp.zeros((rois.shape[0], c, *self.out), dtype=x.dtype)
        for b, sel in self.by_image():
            t = xp.einsum("rph,chw->rcpw", self.ay[sel], x[b])
            out[sel] = xp.einsum("rcpw,rqw->rcpq", t, self.ax[sel]) / self.count[sel][:, None, None, None]
        return out

    def axis_matrix(self, samples: tuple, extent: int) -> Any:
        """(R, out, extent): the summed bilinear weight of every pixel along one axis per bin."""
        xp = self.xp
        low, high, w_low, w_high = samples
        r, out, top = low.shape
        m = xp.zeros((r, out, extent), dtype=w_low.dtype)
        rr = xp.arange(r)[:, None, None]
        pp = xp.arange(out)[None, :, None]
        shape = (r, out, top)
        xp.add.at(m, (xp.broadcast_to(rr, shape), xp.broadcast_to(pp, shape), low), w_low)
        xp.add.at(m, (xp.broadcast_to(rr, shape), xp.broadcast_to(pp, shape), high), w_high)
        return m

    def by_image(self) -> list[tuple[int, Any]]:
        """(image, positions of its boxes) for every image some box is on."""
        return [(int(b), self.xp.asarray(np.nonzero(self.images == b)[0])) for b in np.unique(self.images)]

    def corners(self, samples: tuple, r: int, g: int) -> tuple[Any, Any]:
        """Box ``r``'s pixel indices and weights along one axis: (out * g, 2) each."""
        low, high, w_low, w_high = (a[r, :, :g] for a in samples)
        xp = self.xp
        idx = xp.stack([low, high], axis=-1).reshape(-1, 2)
        wgt = xp.stack([w_low, w_high], axis=-1).reshape(-1, 2)
        return idx, wgt

    def forward_max(self, x: Any, gys: list[int], gxs: list[int]) -> Any:
        xp = self.xp
        c = x.shape[1]
        oh, ow = self.out
        out = xp.zeros((len(gys), c, oh, ow), dtype=x.dtype)
        self.argmax: list[Any] = []
        for r, (gy, gx) in enumerate(zip(gys, gxs)):
            if gy == 0 or gx == 0:
                self.argmax.append(None)
                continue
            (yi, wy), (xi, wx) = self.corners(self.y, r, gy), self.corners(self.x, r, gx)
            img = x[int(self.images[r])]
            vals = img[:, yi[:, :, None, None], xi[None, None]] * (wy[:, :, None, None] * wx[None, None])
            vals = vals.reshape(c, oh, gy * 2, ow, gx * 2).transpose(0, 1, 3, 2, 4).reshape(c, oh, ow, -1)
            best = xp.argmax(vals, axis=-1)
            out[r] = xp.take_along_axis(vals, best[..., None], axis=-1)[..., 0]
            self.argmax.append((best, yi, wy, xi, wx, gy, gx))
        return out

    def backward(self, dy: Any) -> tuple:
        xp = self.xp
        dx = xp.zeros(self.x_shape, dtype=dy.dtype)
        if self.mode == "avg":
            for b, sel in self.by_image():
                g = dy[sel] / self.count[sel][:, None, None, None]
                dx[b] += xp.einsum("rph,rcpq,rqw->chw", self.ay[sel], g, self.ax[sel])
            return dx, None, None
        oh, ow = self.out
        for r, saved in enumerate(self.argmax):
            if saved is None:
                continue
            best, yi, wy, xi, wx, gy, gx = saved
            # best indexes (gy, 2, gx, 2) within each bin
            sy, cy, sx, cx = xp.unravel_index(best, (gy, 2, gx, 2))
            rows = xp.arange(oh)[None, :, None] * gy + sy
            cols = xp.arange(ow)[None, None, :] * gx + sx
            py, px = yi[rows, cy], xi[cols, cx]
            wgt = wy[rows, cy] * wx[cols, cx]
            ch = xp.broadcast_to(xp.arange(dy.shape[1])[:, None, None], best.shape)
            xp.add.at(dx[int(self.images[r])], (ch, py, px), dy[r] * wgt)
        return dx, None, None


# -- functions ---------------------------------------------------------------------------------
def non_max_suppression(
    boxes: Tensor,
    scores: Tensor,
    max_output_boxes_per_class: int = 0,
    iou_threshold: float = 0.0,
    score_threshold: float | None = None,
    center_point_box: bool = False,
) -> Tensor:
    """ONNX NonMaxSuppression: int64 rows ``[batch, class, box]`` of the boxes kept.

    >>> import numpy as np; from singa_lite import tensor
    >>> b = tensor.from_numpy(np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 2, 1, 3]]], np.float32))
    >>> s = tensor.from_numpy(np.array([[[0.9, 0.8, 0.7]]], np.float32))
    >>> non_max_suppression(b, s, 3, 0.5).numpy()[:, 2].tolist()
    [0, 2]
    """
    op = NonMaxSuppression(max_output_boxes_per_class, iou_threshold, score_threshold, center_point_box)
    return op(boxes, scores)[0]


def roi_align(
    x: Tensor,
    rois: Tensor,
    batch_indices: Any,
    output_size: tuple[int, int] = (1, 1),
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    mode: str = "avg",
    half_pixel: bool = True,
) -> Tensor:
    """ONNX RoiAlign: features (R, C, *output_size) of the boxes ``rois`` (x1, y1, x2, y2) on
    images ``batch_indices``; ``half_pixel`` shifts by half a pixel as torchvision's
    ``aligned=True`` does."""
    x = _args.tensor("roi_align", "x", x)
    if not isinstance(batch_indices, Tensor):
        dev = x.device
        host = np.asarray(batch_indices, dtype=np.int64)
        batch_indices = Tensor._wrap(dev.backend.from_numpy(host, dev.id()), dev, False, None, 0)
    op = RoiAlign(output_size[0], output_size[1], sampling_ratio, spatial_scale, mode, half_pixel)
    return op(x, rois, batch_indices)[0]

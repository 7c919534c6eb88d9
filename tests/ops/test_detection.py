"""NonMaxSuppression (hand-computed cases) and RoiAlign (a loop reference written from the ONNX
definition; torchvision is not a dependency), with float64 gradient checks of RoiAlign."""

from __future__ import annotations

import math

import numpy as np
import pytest
from opcheck import check_forward, check_grad, rand, run, t_

from singa_lite import ops
from singa_lite.errors import ShapeError


def nms(boxes, scores, *args, **kw):
    out = ops.non_max_suppression(
        *(t_(np.asarray(a, np.float32), None) for a in (boxes, scores)), *args, **kw
    )
    assert out.dtype == np.int64
    return out.numpy().tolist()


def test_nms_hand_cases():
    # Box 1 overlaps box 0 by IoU 0.8/1.2 = 0.667; box 2 is apart.
    boxes = [[[0, 0, 1, 1], [0, 0.2, 1, 1.2], [0, 2, 1, 3]]]
    scores = [[[0.9, 0.8, 0.7]]]
    assert nms(boxes, scores, 3, 0.5) == [[0, 0, 0], [0, 0, 2]]
    assert nms(boxes, scores, 3, 0.7) == [[0, 0, 0], [0, 0, 1], [0, 0, 2]]  # 0.667 is not > 0.7
    assert nms(boxes, scores, 1, 0.5) == [[0, 0, 0]]  # max_output_boxes_per_class
    assert nms(boxes, scores, 3, 0.5, score_threshold=0.75) == [[0, 0, 0]]
    assert nms(boxes, scores, 0, 0.5) == []
    # Flipped corners mean the same box; equal scores keep the lower index first.
    flipped = [[[1, 1, 0, 0], [0, 0.2, 1, 1.2], [1, 3, 0, 2]]]
    assert nms(flipped, [[[0.5, 0.5, 0.5]]], 3, 0.5) == [[0, 0, 0], [0, 0, 2]]
    # Center format: [x_c, y_c, w, h].
    centers = [[[0.5, 0.5, 1, 1], [0.7, 0.5, 1, 1], [2.5, 0.5, 1, 1]]]
    assert nms(centers, scores, 3, 0.5, center_point_box=True) == [[0, 0, 0], [0, 0, 2]]


def test_nms_batches_and_classes():
    boxes = [[[0, 0, 1, 1], [0, 0.1, 1, 1.1]], [[0, 0, 1, 1], [5, 5, 6, 6]]]
    scores = [[[0.1, 0.9], [0.8, 0.2]], [[0.3, 0.4], [0.6, 0.5]]]
    assert nms(boxes, scores, 2, 0.5) == [[0, 0, 1], [0, 1, 0], [1, 0, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]]


def test_nms_degenerate_boxes_never_suppress():
    boxes = [[[0, 0, 0, 1], [0, 0, 0, 1]]]  # zero area
    assert nms(boxes, [[[0.9, 0.8]]], 5, 0.0) == [[0, 0, 0], [0, 0, 1]]


def test_nms_errors(dev):
    with pytest.raises(ShapeError, match="boxes must be"):
        ops.non_max_suppression(
            t_(np.zeros((1, 2, 3), np.float32), dev), t_(np.zeros((1, 1, 2), np.float32), dev), 1
        )


# -- RoiAlign -----------------------------------------------------------------------------------
def bilinear(img, y, x):
    """One channel-vector sample, as RoiAlign defines it (with its clamping at the edges)."""
    _, h, w = img.shape
    if y < -1 or y > h or x < -1 or x > w:
        return [np.zeros(img.shape[0])] * 4, [0.0] * 4
    y, x = max(y, 0.0), max(x, 0.0)
    yl, xl = int(y), int(x)
    yh, xh = yl + 1, xl + 1
    if yl >= h - 1:
        yl = yh = h - 1
        y = float(yl)
    if xl >= w - 1:
        xl = xh = w - 1
        x = float(xl)
    ly, lx = y - yl, x - xl
    ws = [(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx]
    return [img[:, yl, xl], img[:, yl, xh], img[:, yh, xl], img[:, yh, xh]], ws


def roi_align_ref(x, rois, bidx, out, scale, ratio, mode, half):
    oh, ow = out
    res = np.zeros((len(rois), x.shape[1], oh, ow))
    off = 0.5 if half else 0.0
    for r, (roi, b) in enumerate(zip(rois, bidx)):
        x0, y0, x1, y1 = roi * scale - off
        rw, rh = x1 - x0, y1 - y0
        if not half:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = ratio or max(math.ceil(rh / oh), 0)
        gw = ratio or max(math.ceil(rw / ow), 0)
        for p in range(oh):
            for q in range(ow):
                acc = []
                for iy in range(gh):
                    for ix in range(gw):
                        yy = y0 + p * rh / oh + (iy + 0.5) * rh / oh / gh
                        xx = x0 + q * rw / ow + (ix + 0.5) * rw / ow / gw
                        vals, ws = bilinear(x[b], yy, xx)
                        acc.append([v * w for v, w in zip(vals, ws)])
                if not acc:
                    continue
                a = np.asarray(acc)  # (samples, 4, C)
                if mode == "avg":
                    res[r, :, p, q] = a.sum(axis=(0, 1)) / max(gh * gw, 1)
                else:
                    res[r, :, p, q] = a.max(axis=(0, 1))
    return res


ROIS = np.array([[0.3, 0.4, 3.7, 2.9], [1.2, 0.1, 5.4, 4.6], [-1.5, -0.5, 2.2, 1.3], [2.0, 1.0, 1.5, 2.5]])


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("half", [True, False])
@pytest.mark.parametrize(("ratio", "out"), [(0, (2, 3)), (2, (3, 2)), (1, (1, 1))])
def test_roi_align(dev, mode, half, ratio, out):
    x = rand(2, 3, 5, 6)
    bidx = np.array([0, 1, 1, 0])
    scale = 0.9

    def fn(a, r, b):
        return ops.roi_align(a, r, b, out, scale, ratio, mode, half)

    check_forward(
        fn, lambda a, r, b: roi_align_ref(a, r, b, out, scale, ratio, mode, half), [x, ROIS, bidx], dev
    )
    check_grad(fn, [x, ROIS, bidx], dev, wrt=[0])
    x32 = x.astype(np.float32)
    got = run(fn, [x32, ROIS.astype(np.float32), bidx], dev)[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, roi_align_ref(x, ROIS, bidx, out, scale, ratio, mode, half), atol=1e-5)


def test_roi_align_errors(dev):
    x = t_(np.zeros((1, 2, 4, 4), np.float32), dev)
    rois = t_(np.zeros((1, 4), np.float32), dev)
    with pytest.raises(ShapeError, match="batch index"):
        ops.roi_align(x, rois, [1])
    with pytest.raises(ShapeError, match="rois"):
        ops.roi_align(x, t_(np.zeros((1, 5), np.float32), dev), [0])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf box coordinates
def test_roi_align_refuses_unbounded_sampling(dev):
    x = t_(np.ones((1, 1, 4, 4), np.float32), dev)
    huge = t_(np.array([[0, 0, np.inf, 1], [0, 0, 1e12, 1]], np.float32), dev)
    with pytest.raises(ShapeError, match="samples per bin"):
        ops.roi_align(x, huge, [0, 0])
    # A fixed sampling ratio bounds the work; samples off the image weigh nothing.
    y = ops.roi_align(x, huge, [0, 0], sampling_ratio=2).numpy()
    assert y.shape == (2, 1, 1, 1) and np.isfinite(y[1]).all()

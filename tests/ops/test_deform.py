"""ops/deform.py (deform_conv2d, max_roi_pool): references, float64 gradients, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import (
    check_forward,
    check_grad,
    keep_dtype,
)

from singa_lite import ops
from singa_lite.errors import ShapeError

K = keep_dtype  # a constant tensor that keeps its array's dtype


# -- deformable convolution, ROI pooling ---------------------------------------------------------
def _bilinear(img, y, x):
    """img (H, W) at (y, x), corners outside counting as 0."""
    H, W = img.shape
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    total = 0.0
    for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            if 0 <= yy < H and 0 <= xx < W:
                total += wy * wx * img[yy, xx]
    return total


def ref_deform_conv(x, w, offset, b, mask, stride, pads, dil, group, G):
    N, C = x.shape[:2]
    O, Cg, kh, kw = w.shape
    oh, ow = offset.shape[2:]
    off = offset.reshape(N, G, kh, kw, 2, oh, ow)
    m = np.ones((N, G, kh, kw, oh, ow)) if mask is None else mask.reshape(N, G, kh, kw, oh, ow)
    y = np.zeros((N, O, oh, ow))
    for n, o, i, j in np.ndindex(N, O, oh, ow):
        g = o // (O // group)
        for c in range(g * Cg, (g + 1) * Cg):
            og = c // (C // G)
            for a, bb in np.ndindex(kh, kw):
                py = i * stride - pads[0] + a * dil + off[n, og, a, bb, 0, i, j]
                px = j * stride - pads[1] + bb * dil + off[n, og, a, bb, 1, i, j]
                y[n, o, i, j] += w[o, c - g * Cg, a, bb] * m[n, og, a, bb, i, j] * _bilinear(x[n, c], py, px)
    return y + (0 if b is None else b[None, :, None, None])


@pytest.mark.parametrize(
    "stride, pads, dil, group, G, masked",
    [(1, (0, 0, 0, 0), 1, 1, 1, False), (2, (1, 1, 1, 1), 1, 2, 2, True), (1, (1, 0, 0, 1), 2, 1, 2, True)],
)
def test_deform_conv2d(dev, stride, pads, dil, group, G, masked):
    rng = np.random.default_rng(stride + group)
    N, C, H, W, O, k = 1, 4, 5, 5, 2, 2
    x, w = rng.standard_normal((N, C, H, W)), rng.standard_normal((O, C // group, k, k))
    oh = (H + pads[0] + pads[2] - (dil * (k - 1) + 1)) // stride + 1
    ow = (W + pads[1] + pads[3] - (dil * (k - 1) + 1)) // stride + 1
    # offsets away from whole numbers (the sampling weights have kinks there)
    offset = np.round(rng.uniform(-1.5, 1.5, (N, 2 * G * k * k, oh, ow)), 0) + rng.uniform(
        0.2, 0.8, (N, 2 * G * k * k, oh, ow)
    )
    b = rng.standard_normal(O)
    mask = rng.uniform(0.5, 1.0, (N, G * k * k, oh, ow)) if masked else None
    args = [x, w, offset, b] + ([mask] if masked else [])

    def fn(*ts):
        return ops.deform_conv2d(*ts[:4], ts[4] if masked else None, stride, pads, dil, group, G)

    check_forward(fn, lambda *a: ref_deform_conv(*a[:4], mask, stride, pads, dil, group, G), args, dev)
    check_grad(fn, args, dev)


def test_deform_conv2d_zero_offset_is_conv(dev):
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((4, 3, 3, 3))
    y = ops.deform_conv2d(K(x), K(w), K(np.zeros((2, 18, 4, 3))), None, None, 1, 0).numpy()
    np.testing.assert_allclose(y, ops.conv2d(K(x), K(w)).numpy(), rtol=1e-10, atol=1e-10)
    with pytest.raises(ShapeError):
        ops.deform_conv2d(K(x), K(w), K(np.zeros((2, 18, 4, 4))))


def ref_max_roi_pool(x, rois, ph, pw, scale):
    out = np.zeros((len(rois), x.shape[1], ph, pw))
    H, W = x.shape[2:]
    for r, (bi, x1, y1, x2, y2) in enumerate(rois):
        x1, y1, x2, y2 = (int(np.round(v * scale)) for v in (x1, y1, x2, y2))
        rh, rw = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        for i, j in np.ndindex(ph, pw):
            hs = min(max(int(np.floor(i * rh / ph)) + y1, 0), H)
            he = min(max(int(np.ceil((i + 1) * rh / ph)) + y1, 0), H)
            ws = min(max(int(np.floor(j * rw / pw)) + x1, 0), W)
            we = min(max(int(np.ceil((j + 1) * rw / pw)) + x1, 0), W)
            if he > hs and we > ws:
                out[r, :, i, j] = x[int(bi), :, hs:he, ws:we].max(axis=(1, 2))
    return out


def test_max_roi_pool(dev):
    rng = np.random.default_rng(3)
    x = rng.permutation(2 * 3 * 8 * 9).reshape(2, 3, 8, 9).astype(np.float64)  # no ties
    rois = np.array([[0, 0, 0, 8, 7], [1, 2, 1, 5, 6], [1, 7, 6, 20, 20], [0, 3, 3, 3, 3]], np.float64)
    check_forward(
        lambda a, r: ops.max_roi_pool(a, r, (2, 3), 0.9),
        lambda a, r: ref_max_roi_pool(a, r, 2, 3, 0.9),
        [x, rois],
        dev,
    )
    check_grad(lambda a, r: ops.max_roi_pool(a, r, (2, 3)), [x / 10, rois], dev, wrt=[0])
    with pytest.raises(ShapeError):
        ops.max_roi_pool(K(x), K(np.array([[2.0, 0, 0, 1, 1]])), (1, 1))


def test_max_roi_pool_onnxruntime():
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    from onnx import TensorProto, helper

    from singa_lite.sonnx import SingaBackend

    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 10, 12)).astype(np.float32)
    rois = np.array([[0, 1, 1, 9, 7], [0, 0, 2, 11, 9], [0, 4, 4, 4, 5]], np.float32)
    node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[3, 2], spatial_scale=0.8)
    g = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, rois.shape),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (3, 2, 3, 2))],
    )
    g.node[0].input[1] = "r"
    # onnxruntime has MaxRoiPool-1 only (opset 22 changed nothing but the types)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x, "r": rois})[0]
    np.testing.assert_allclose(SingaBackend.prepare(model).run([x, rois])[0], want)

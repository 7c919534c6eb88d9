"""A small detector head with NonMaxSuppression, imported and compared with onnxruntime
(bitwise for the selected indices, 1e-4 for boxes and scores), then fine-tuned as a
``SONNXModel``; plus the detection handlers' argument checks."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, checker, helper, numpy_helper

from singa_lite import autograd, ops, opt, sonnx, tensor
from singa_lite.errors import OnnxError, SingaLiteError

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

H = W = 6
ANCHORS = H * W


def _init(name: str, arr: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(arr), name)


def detector_head(opset: int = 17) -> bytes:
    """conv features -> per-cell box regression (added to anchors) and class scores ->
    NonMaxSuppression -> GatherND of the kept boxes and scores."""
    rng = np.random.default_rng(0)
    ys, xs = np.meshgrid(np.arange(H), np.arange(W), indexing="ij")
    anchors = np.stack([ys, xs, ys + 2.0, xs + 2.0], -1).reshape(1, ANCHORS, 4).astype(np.float32)
    inits = [
        _init("conv.W", rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)),
        _init("conv.b", rng.normal(0, 0.1, 8).astype(np.float32)),
        _init("box.W", rng.normal(0, 0.2, (4, 8, 1, 1)).astype(np.float32)),
        _init("box.b", np.zeros(4, np.float32)),
        _init("cls.W", rng.normal(0, 0.5, (2, 8, 1, 1)).astype(np.float32)),
        _init("cls.b", np.zeros(2, np.float32)),
        _init("anchors", anchors),
        _init("shape_b", np.array([1, 4, ANCHORS], np.int64)),
        _init("shape_s", np.array([1, 2, ANCHORS], np.int64)),
        _init("max_out", np.array([4], np.int64)),
        _init("iou", np.array([0.3], np.float32)),
        _init("score_thr", np.array([0.2], np.float32)),
        _init("cols", np.array([0, 2], np.int64)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv.W", "conv.b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["f"]),
        helper.make_node("Conv", ["f", "box.W", "box.b"], ["breg"]),
        helper.make_node("Reshape", ["breg", "shape_b"], ["breg_flat"]),
        helper.make_node("Transpose", ["breg_flat"], ["deltas"], perm=[0, 2, 1]),
        helper.make_node("Add", ["deltas", "anchors"], ["boxes"]),
        helper.make_node("Conv", ["f", "cls.W", "cls.b"], ["logits"]),
        helper.make_node("Reshape", ["logits", "shape_s"], ["logits_flat"]),
        helper.make_node("Sigmoid", ["logits_flat"], ["scores"]),
        helper.make_node(
            "NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_thr"], ["selected"]
        ),
        helper.make_node("Gather", ["selected", "cols"], ["batch_box"], axis=1),
        helper.make_node("GatherND", ["boxes", "batch_box"], ["kept_boxes"]),
        helper.make_node("GatherND", ["scores", "selected"], ["kept_scores"]),
    ]
    graph = helper.make_graph(
        nodes,
        "detector_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, H, W])],
        [
            helper.make_tensor_value_info("selected", TensorProto.INT64, ["k", 3]),
            helper.make_tensor_value_info("kept_boxes", TensorProto.FLOAT, ["k", 4]),
            helper.make_tensor_value_info("kept_scores", TensorProto.FLOAT, ["k"]),
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, ANCHORS, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, ANCHORS]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    checker.check_model(model, full_check=True)
    return model.SerializeToString()


def images(n: int, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 1, (1, 3, H, W)).astype(np.float32) for _ in range(n)]


@pytest.mark.parametrize("opset", [11, 17, 21])
def test_detector_head_matches_onnxruntime(opset: int) -> None:
    data = detector_head(opset)
    rep = sonnx.prepare(data)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for x in images(4):
        want = sess.run(None, {"x": x})
        got = [t.numpy() for t in rep.run([x])]
        assert want[0].shape[0] > 1  # something was kept, and something suppressed or cut
        np.testing.assert_array_equal(got[0], want[0])
        assert got[0].dtype == np.int64
        for g, w in zip(got[1:], want[1:]):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


class DetectorTuner(sonnx.SONNXModel):
    """Fine-tunes the head: the kept boxes towards targets and their scores towards 1, the
    dense scores of the other anchors towards 0."""

    def train_one_batch(self, x, target_boxes, dist_option="plain", spars=None):  # type: ignore[override]
        selected, kept_boxes, kept_scores, _, scores = self.forward(x)
        pick = autograd.host_values(selected)[:, 2]  # noted, so graph mode re-records on a change
        goal = tensor.Tensor(data=target_boxes.numpy()[pick], requires_grad=False)
        box_loss = ops.mse_loss(kept_boxes, goal)
        ones = tensor.Tensor(data=np.ones(kept_scores.shape, np.float32), requires_grad=False)
        score_loss = ops.mse_loss(kept_scores, ones)
        background = ops.reduce_mean(ops.square(scores))
        loss = ops.add(ops.add(box_loss, score_loss), background)
        self.optimizer(loss)
        return selected, loss


@pytest.mark.parametrize("use_graph", [False, True])
@pytest.mark.filterwarnings("ignore:graph mode:UserWarning")  # the kept boxes change: re-recorded
def test_detector_head_fine_tunes_as_sonnxmodel(use_graph: bool) -> None:
    model = DetectorTuner(detector_head())
    assert {"conv.W", "box.W", "cls.W"} <= set(model.get_params())
    x = tensor.Tensor(data=images(1)[0], requires_grad=False)
    rng = np.random.default_rng(2)
    targets = model.forward(x)[3].numpy()[0] + rng.normal(0, 0.5, (ANCHORS, 4)).astype(np.float32)
    model.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    model.compile([x], is_train=True, use_graph=use_graph)
    model.train()
    box_w = model.get_params()["box.W"].numpy().copy()
    goal = tensor.Tensor(data=targets, requires_grad=False)
    losses = [float(model(x, goal)[1].numpy().reshape(-1)[0]) for _ in range(12)]
    assert losses[-1] < 0.6 * losses[0], losses
    assert not np.allclose(model.get_params()["box.W"].numpy(), box_w)  # through GatherND
    model.eval()
    sess = ort.InferenceSession(detector_head(), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": x.numpy()})[0].shape[0] >= 1


# -- handler argument checks ------------------------------------------------------------------
def _single(
    op: str, inputs: list[tuple[str, int, list]], rank: int, out_type: int = TensorProto.FLOAT, **attrs
) -> bytes:
    node = helper.make_node(op, [n for n, _, _ in inputs], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info("y", out_type, [f"d{i}" for i in range(rank)])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()


def test_handlers_reject_bad_arguments() -> None:
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    bad_nms = _single("NonMaxSuppression", [("b", f, [1, 2, 3]), ("s", f, [1, 1, 2])], 2, i64)
    with pytest.raises(OnnxError, match=r"NonMaxSuppression.*boxes must be"):
        sonnx.prepare(bad_nms).run([np.zeros((1, 2, 3), np.float32), np.zeros((1, 1, 2), np.float32)])
    col = _single("Col2Im", [("x", f, [1, 4, 4]), ("i", i64, [2]), ("b", i64, [2])], 4)
    with pytest.raises(SingaLiteError, match="Col2Im"):
        sonnx.prepare(col).run([np.zeros((1, 4, 4), np.float32), np.array([10**6, 10**6]), np.array([2, 2])])
    crop = _single("CenterCropPad", [("x", f, [2, 2]), ("s", i64, [2])], 2)
    with pytest.raises(OnnxError, match="limit"):
        sonnx.prepare(crop).run([np.zeros((2, 2), np.float32), np.array([10**6, 10**6])])
    roi = _single("RoiAlign", [("x", f, [1, 1, 4, 4]), ("r", f, [1, 4]), ("b", i64, [1])], 4)
    with pytest.raises(OnnxError, match="limit"):
        sonnx.prepare(roi).run(
            [
                np.zeros((1, 1, 4, 4), np.float32),
                np.array([[0, 0, 1e12, 1e12]], np.float32),
                np.zeros(1, np.int64),
            ]
        )


# -- export: singa_lite -> to_onnx -> onnxruntime and back ---------------------------------------
R = np.random.default_rng(3)


def f32(*shape: int) -> np.ndarray:
    return R.uniform(-1.2, 1.2, shape).astype(np.float32)


BOXES = np.array([[[0, 0, 1, 1], [0, 0.2, 1, 1.2], [0, 2, 1, 3], [0.1, 2.1, 1.1, 3.2]]], np.float32)
ROIS = np.array([[0.3, 0.4, 3.7, 2.9], [1.2, 0.1, 5.4, 4.6]], np.float32)
POOL_IDX = np.array([[[[5, 7], [13, 15]]]], np.int64)

EXPORT_CASES = [
    ("gather_nd", lambda a: ops.gather_nd(a, [[0, 1], [2, 0]]), [f32(3, 2, 4)], 17),
    ("gather_nd_batch", lambda a: ops.gather_nd(a, [[1], [0], [1]], 1), [f32(3, 2, 4)], 17),
    ("scatter_nd", lambda a, b: ops.scatter_nd(a, [[1], [0]], b), [f32(3, 4), f32(2, 4)], 17),
    ("scatter_nd_add", lambda a, b: ops.scatter_nd(a, [[1], [1]], b, "add"), [f32(3, 4), f32(2, 4)], 17),
    ("compress", lambda a: ops.compress(a, [True, False, True], 1), [f32(2, 3)], 17),
    ("unique", lambda a: ops.unique(ops.cast(ops.round(a), np.int64), None, False), [f32(3, 4)], 17),
    ("reverse_sequence", lambda a: ops.reverse_sequence(a, [3, 1], 1, 0), [f32(3, 2, 2)], 17),
    (
        "grid_sample",
        lambda a, b: ops.grid_sample(a, b, "linear", "border", True),
        [f32(1, 2, 4, 5), f32(1, 3, 2, 2)],
        17,
    ),
    (
        "grid_sample_cubic",
        lambda a, b: ops.grid_sample(a, b, "cubic"),
        [f32(1, 2, 4, 5), f32(1, 3, 2, 2)],
        20,
    ),
    (
        "grid_sample_3d",
        lambda a, b: ops.grid_sample(a, b, "nearest"),
        [f32(1, 2, 3, 4, 5), f32(1, 2, 2, 2, 3)],
        22,
    ),
    ("affine_grid", lambda t: ops.affine_grid(t, (2, 1, 3, 4)), [f32(2, 2, 3)], 17),
    ("center_crop_pad", lambda a: ops.center_crop_pad(a, (3, 6), (0, 1)), [f32(5, 4)], 17),
    ("max_unpool", lambda a, i: ops.max_unpool(a, i, (2, 2), (2, 2)), [f32(1, 1, 2, 2), POOL_IDX], 17),
    ("col2im", lambda a: ops.col2im(a, (4, 5), (2, 2), pads=(1, 0, 0, 1)), [f32(1, 8, 20)], 18),
    ("nms", lambda b, s: ops.non_max_suppression(b, s, 3, 0.5, 0.1), [BOXES, f32(1, 2, 4)], 17),
    ("roi_align", lambda a, r: ops.roi_align(a, r, [0, 0], (2, 2), 0.8, 2), [f32(1, 2, 5, 6), ROIS], 17),
    (
        "roi_align_max",
        lambda a, r: ops.roi_align(a, r, [0, 0], (2, 3), mode="max"),
        [f32(1, 2, 5, 6), ROIS],
        21,
    ),
]


@pytest.mark.parametrize(("name", "fn", "arrays", "opset"), EXPORT_CASES, ids=[c[0] for c in EXPORT_CASES])
def test_export_matches_onnxruntime_and_imports_back(name, fn, arrays, opset) -> None:
    from singa_lite.sonnx.exporter import export_function

    xs = [tensor.Tensor(data=a, requires_grad=False) for a in arrays]
    model = export_function(fn, xs, opset=opset)
    checker.check_model(model, full_check=True)
    out = fn(*xs)
    expected = [t.numpy() for t in (out if isinstance(out, (list, tuple)) else [out])]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: a for i, a in zip(sess.get_inputs(), arrays)}
    back = [t.numpy() for t in sonnx.prepare(model).run(list(arrays))]
    for got in (sess.run(None, feeds), back):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, e.shape, g.dtype, e.dtype)
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_export_needs_opset() -> None:
    from singa_lite.errors import UnsupportedOperatorError
    from singa_lite.sonnx.exporter import export_function

    x = tensor.Tensor(data=f32(1, 8, 20), requires_grad=False)
    with pytest.raises(UnsupportedOperatorError, match=r"Col2Im.*opset 18"):
        export_function(lambda a: ops.col2im(a, (4, 5), (2, 2), pads=(1, 0, 0, 1)), [x], opset=17)
    c = tensor.Tensor(data=f32(2, 3), requires_grad=False)
    model = export_function(lambda a: ops.cumprod(a, 1, True), [c], opset=26)
    checker.check_model(model, full_check=True)
    np.testing.assert_allclose(
        sonnx.prepare(model).run([c.numpy()])[0].numpy(), ops.cumprod(c, 1, True).numpy()
    )
    cache, update = (tensor.Tensor(data=f32(2, n, 3), requires_grad=False) for n in (4, 2))
    model = export_function(lambda a, b: ops.tensor_scatter(a, b, [1, 0]), [cache, update], opset=24)
    checker.check_model(model, full_check=True)


# -- a spatial transformer exported from PyTorch: AffineGrid -> GridSample ----------------------
def spatial_transformer_onnx() -> tuple[bytes, object]:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import io
    import warnings

    class STN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.loc = torch.nn.Linear(3 * 8 * 8, 6)
            torch.nn.init.normal_(self.loc.weight, 0, 0.01)
            self.loc.bias.data = torch.tensor([0.9, 0.1, 0.05, -0.1, 1.1, 0.0])

        def forward(self, x):  # type: ignore[no-untyped-def]
            theta = self.loc(x.flatten(1)).view(-1, 2, 3)
            grid = torch.nn.functional.affine_grid(theta, list(x.shape), align_corners=False)
            return torch.nn.functional.grid_sample(x, grid, "bilinear", "border", align_corners=False)

    torch.manual_seed(0)
    model = STN().eval()
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (torch.zeros(2, 3, 8, 8),), f, opset_version=20, dynamo=False, input_names=["x"]
        )
    return f.getvalue(), model


class WarpTuner(sonnx.SONNXModel):
    def train_one_batch(self, x, target, dist_option="plain", spars=None):  # type: ignore[override]
        (out,) = self.forward(x)
        loss = ops.mse_loss(out, target)
        self.optimizer(loss)
        return out, loss


def test_spatial_transformer_matches_and_fine_tunes() -> None:
    data, _ = spatial_transformer_onnx()
    yy, xx = np.meshgrid(np.linspace(-1, 1, 8), np.linspace(-1, 1, 8), indexing="ij")
    # Smooth images: a warp of noise has no slope to follow.
    x = np.stack([np.stack([np.sin(2 * xx + c), np.cos(2 * yy - c), xx * yy]) for c in (0.0, 0.7)])
    x = x.astype(np.float32)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(sonnx.prepare(data).run([x])[0].numpy(), want, rtol=1e-4, atol=1e-4)
    # Fine-tune the localisation net to undo the warp: the identity is the target.
    model = WarpTuner(data)
    tx = tensor.Tensor(data=x, requires_grad=False)
    # theta is a Gemm of 192 pixels: a small rate keeps each step's change of theta small
    model.set_optimizer(opt.SGD(lr=1e-5, momentum=0.9))
    model.compile([tx], is_train=True, use_graph=False)
    model.train()
    losses = [float(model(tx, tx)[1].numpy().reshape(-1)[0]) for _ in range(15)]
    assert losses[-1] < 0.25 * losses[0], losses

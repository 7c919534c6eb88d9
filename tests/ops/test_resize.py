"""Resize/Upsample against ONNX's reference implementation, plus gradients and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import check_forward, check_grad

from singa_lite import autograd, tensor
from singa_lite.errors import DTypeError, ShapeError

onnx = pytest.importorskip("onnx", reason="onnx is not installed")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

COORDS = ["half_pixel", "pytorch_half_pixel", "half_pixel_symmetric", "align_corners", "asymmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
ELEM = {np.float16: TensorProto.FLOAT16, np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def onnx_resize(x, scales=None, sizes=None, **attrs):
    """ONNX's own reference Resize (opset 19) on ``x``."""
    if scales is not None:
        inputs, init = ["X", "", "S"], helper.make_tensor("S", TensorProto.FLOAT, [len(scales)], scales)
    else:
        inputs, init = ["X", "", "", "Z"], helper.make_tensor("Z", TensorProto.INT64, [len(sizes)], sizes)
    elem = ELEM[x.dtype.type]
    graph = helper.make_graph(
        [helper.make_node("Resize", inputs, ["Y"], **attrs)],
        "resize",
        [helper.make_tensor_value_info("X", elem, None)],
        [helper.make_tensor_value_info("Y", elem, None)],
        [init],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return ReferenceEvaluator(model).run(None, {"X": x})[0]


@st.composite
def resize_cases(draw):
    shape = (
        draw(st.integers(1, 2)),
        draw(st.integers(1, 2)),
        draw(st.integers(1, 4)),
        draw(st.integers(1, 5)),
    )
    if draw(st.booleans()):
        scales = [1.0, 1.0] + [draw(st.sampled_from([0.5, 0.6, 1.0, 1.5, 2.0, 3.0])) for _ in range(2)]
        scales = [s if int(n * s) >= 1 else 1.0 for n, s in zip(shape, scales)]
        sizes = None
    else:
        scales, sizes = None, [shape[0], shape[1], draw(st.integers(1, 7)), draw(st.integers(1, 7))]
    mode = draw(st.sampled_from(["nearest", "linear", "cubic"]))
    attrs = {
        "mode": mode,
        "coordinate_transformation_mode": draw(st.sampled_from(COORDS)),
        "nearest_mode": draw(st.sampled_from(NEAREST)),
        "exclude_outside": int(mode == "cubic" and draw(st.booleans())),
    }
    dtype = draw(st.sampled_from([np.float16, np.float32, np.float64]))
    x = np.random.default_rng(draw(st.integers(0, 99))).standard_normal(shape).astype(dtype)
    return x, scales, sizes, attrs


@given(case=resize_cases())
def test_resize_matches_onnx_reference(dev, case):
    x, scales, sizes, attrs = case
    tol = 2e-2 if x.dtype == np.float16 else 1e-5
    check_forward(
        lambda t: autograd.resize(t, scales, sizes, **attrs),
        lambda a: onnx_resize(a, scales, sizes, **attrs),
        [x],
        dev,
        rtol=tol,
        atol=tol,
    )


@pytest.mark.parametrize("nearest_mode", NEAREST)
def test_tf_half_pixel_for_nn(dev, nearest_mode):
    # Dropped from ONNX's reference after opset 12; checked against its formula instead.
    x = np.arange(5.0).reshape(1, 1, 5)
    src = (np.arange(7) + 0.5) / 1.4
    rounding = {
        "round_prefer_floor": np.ceil(src - 0.5),
        "round_prefer_ceil": np.floor(src + 0.5),
        "floor": np.floor(src),
        "ceil": np.ceil(src),
    }
    idx = rounding[nearest_mode]
    want = x[..., np.clip(idx, 0, 4).astype(int)]
    check_forward(
        lambda t: autograd.resize(
            t,
            sizes=[1, 1, 7],
            coordinate_transformation_mode="tf_half_pixel_for_nn",
            nearest_mode=nearest_mode,
        ),
        lambda a: want,
        [x],
        dev,
    )


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("sizes", [[1, 2, 5, 3], [1, 2, 2, 1]])
def test_resize_grad(dev, mode, coord, sizes):
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 2))
    check_grad(
        lambda t: autograd.resize(t, sizes=sizes, mode=mode, coordinate_transformation_mode=coord), [x], dev
    )


def test_resize_grad_3d_and_exclude_outside(dev):
    x = np.random.default_rng(1).standard_normal((1, 1, 2, 2, 3))
    check_grad(lambda t: autograd.resize(t, scales=[1, 1, 2, 1.5, 0.7], mode="linear"), [x], dev)
    check_grad(lambda t: autograd.resize(t, sizes=[1, 1, 3, 2, 5], mode="cubic", exclude_outside=1), [x], dev)


def test_upsample(dev):
    x = np.random.default_rng(2).standard_normal((2, 3, 2, 3)).astype(np.float32)
    check_forward(
        lambda t: autograd.upsample(t, [1, 1, 2, 3]),
        lambda a: a.repeat(2, axis=2).repeat(3, axis=3),
        [x],
        dev,
    )
    check_forward(
        lambda t: autograd.upsample(t, [1, 1, 2, 2], mode="bilinear"),
        lambda a: onnx_resize(
            a, [1.0, 1.0, 2.0, 2.0], mode="linear", coordinate_transformation_mode="asymmetric"
        ),
        [x],
        dev,
    )


def test_resize_keeps_dtype_and_untouched_axes(dev):
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    check_forward(lambda t: autograd.resize(t, scales=[1, 1, 1], mode="linear"), lambda a: a, [x], dev)
    check_forward(lambda t: autograd.resize(t, sizes=[2, 3, 4], mode="cubic"), lambda a: a, [x], dev)


def test_resize_bad_input(dev):
    x = tensor.from_numpy(np.zeros((1, 1, 2, 2), np.float32), dev)
    with pytest.raises(ShapeError, match="exactly one"):
        autograd.resize(x)
    with pytest.raises(ShapeError, match="exactly one"):
        autograd.resize(x, scales=[1, 1, 2, 2], sizes=[1, 1, 4, 4])
    with pytest.raises(ShapeError, match="one value per axis"):
        autograd.resize(x, scales=[2, 2])
    with pytest.raises(ShapeError, match="positive"):
        autograd.resize(x, scales=[1, 1, 0, 2])
    with pytest.raises(ShapeError, match="empty"):
        autograd.resize(x, scales=[1, 1, 0.2, 1])
    with pytest.raises(ShapeError, match="mode"):
        autograd.resize(x, scales=[1, 1, 2, 2], mode="area")
    with pytest.raises(ShapeError, match="coordinate_transformation_mode"):
        autograd.resize(x, scales=[1, 1, 2, 2], coordinate_transformation_mode="tf_crop_and_resize")
    with pytest.raises(ShapeError, match="upsample"):
        autograd.upsample(x, [1, 1, 2, 2], mode="cubic")
    with pytest.raises(DTypeError, match="resize"):
        autograd.resize(tensor.from_numpy(np.zeros((1, 2), np.int32), dev), scales=[1, 2])

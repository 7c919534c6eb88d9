"""Resize/Upsample against ONNX's reference implementation, plus gradients and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import check_forward, check_grad

from singa_lite import autograd, tensor
from singa_lite.errors import ArgumentError, DTypeError, ShapeError

onnx = pytest.importorskip("onnx", reason="onnx is not installed")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

COORDS = ["half_pixel", "pytorch_half_pixel", "half_pixel_symmetric", "align_corners", "asymmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
ELEM = {np.float16: TensorProto.FLOAT16, np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def onnx_resize(x, scales=None, sizes=None, roi=None, **attrs):
    """ONNX's own reference Resize (opset 19) on ``x``."""
    if scales is not None:
        inputs, init = ["X", "", "S"], [helper.make_tensor("S", TensorProto.FLOAT, [len(scales)], scales)]
    else:
        inputs, init = ["X", "", "", "Z"], [helper.make_tensor("Z", TensorProto.INT64, [len(sizes)], sizes)]
    if roi is not None:
        inputs[1] = "R"
        init.append(helper.make_tensor("R", TensorProto.FLOAT, [len(roi)], roi))
    elem = ELEM[x.dtype.type]
    graph = helper.make_graph(
        [helper.make_node("Resize", inputs, ["Y"], **attrs)],
        "resize",
        [helper.make_tensor_value_info("X", elem, None)],
        [helper.make_tensor_value_info("Y", elem, None)],
        init,
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


@st.composite
def antialias_cases(draw):
    """Downsampling linear/cubic resizes, where antialias widens the filter."""
    shape = (1, draw(st.integers(1, 2)), draw(st.integers(4, 9)), draw(st.integers(4, 9)))
    if draw(st.booleans()):
        scales, sizes = (
            [1.0, 1.0] + [draw(st.sampled_from([0.3, 0.45, 0.5, 0.6, 0.75])) for _ in range(2)],
            None,
        )
    else:
        scales, sizes = (
            None,
            [1, shape[1], draw(st.integers(1, shape[2] - 1)), draw(st.integers(1, shape[3]))],
        )
    mode = draw(st.sampled_from(["linear", "cubic"]))
    attrs = {
        "mode": mode,
        "antialias": 1,
        # Not align_corners or half_pixel_symmetric: their coordinates can land an ulp above an
        # integer, where the reference picks its taps one to the left of its own weights.
        "coordinate_transformation_mode": draw(
            st.sampled_from(["half_pixel", "pytorch_half_pixel", "asymmetric"])
        ),
        "exclude_outside": int(mode == "cubic" and draw(st.booleans())),
    }
    x = np.random.default_rng(draw(st.integers(0, 99))).standard_normal(shape)
    return x, scales, sizes, attrs


@given(case=antialias_cases())
def test_antialias_matches_onnx_reference(dev, case):
    x, scales, sizes, attrs = case
    check_forward(
        lambda t: autograd.resize(t, scales, sizes, **attrs),
        lambda a: onnx_resize(a, scales, sizes, **attrs),
        [x],
        dev,
        rtol=1e-5,  # the reference rounds some coordinates through float32
        atol=1e-5,
    )


@st.composite
def crop_cases(draw):
    """tf_crop_and_resize with regions that may reach past the input (extrapolation)."""
    shape = (1, draw(st.integers(1, 2)), draw(st.integers(2, 6)), draw(st.integers(2, 6)))
    # Region edges that put no coordinate exactly on an input edge or a nearest-rounding tie:
    # there the reference's float32 coordinates and singa_lite's float64 ones may differ by an
    # ulp and land on either side.
    starts = [0.0, 0.0] + [draw(st.sampled_from([-0.37, 0.0, 0.13, 0.41])) for _ in range(2)]
    ends = [1.0, 1.0] + [draw(st.sampled_from([0.47, 0.83, 0.97, 1.29])) for _ in range(2)]
    sizes = [1, shape[1], draw(st.integers(1, 6)), draw(st.integers(1, 6))]
    attrs = {
        "mode": draw(st.sampled_from(["nearest", "linear", "cubic"])),
        "coordinate_transformation_mode": "tf_crop_and_resize",
        "extrapolation_value": draw(st.sampled_from([0.0, -2.5])),
    }
    x = np.random.default_rng(draw(st.integers(0, 99))).standard_normal(shape)
    return x, sizes, starts + ends, attrs


@given(case=crop_cases())
def test_tf_crop_and_resize_matches_onnx_reference(dev, case):
    x, sizes, roi, attrs = case
    check_forward(
        lambda t: autograd.resize(t, sizes=sizes, roi=roi, **attrs),
        lambda a: onnx_resize(a, sizes=sizes, roi=roi, **attrs),
        [x],
        dev,
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias_and_crop_grad(dev, mode):
    x = np.random.default_rng(3).standard_normal((1, 1, 6, 5))
    check_grad(lambda t: autograd.resize(t, sizes=[1, 1, 2, 3], mode=mode, antialias=True), [x], dev)
    crop = dict(coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=1.5)
    roi = [0, 0, -0.3, 0.2, 1, 1, 0.9, 1.4]  # reaches past the top and the right edge
    check_grad(lambda t: autograd.resize(t, sizes=[1, 1, 4, 3], mode=mode, roi=roi, **crop), [x], dev)


def test_tf_crop_and_resize_needs_a_roi():
    with pytest.raises(ArgumentError, match="needs a roi"):
        autograd.resize(
            tensor.Tensor(data=np.ones((1, 1, 2, 2)), requires_grad=False),
            sizes=[1, 1, 3, 3],
            coordinate_transformation_mode="tf_crop_and_resize",
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
        lambda t: autograd.upsample(t, "bilinear", [1, 1, 2, 2]),  # SINGA's order: mode, scales
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
    x = tensor.Tensor(data=np.zeros((1, 1, 2, 2), np.float32), device=dev, requires_grad=False)
    with pytest.raises(ArgumentError, match="exactly one"):
        autograd.resize(x)
    with pytest.raises(ArgumentError, match="exactly one"):
        autograd.resize(x, scales=[1, 1, 2, 2], sizes=[1, 1, 4, 4])
    with pytest.raises(ShapeError, match="one value per axis"):
        autograd.resize(x, scales=[2, 2])
    with pytest.raises(ArgumentError, match="resize: scales must be a sequence of numbers > 0"):
        autograd.resize(x, scales=[1, 1, 0, 2])
    with pytest.raises(ShapeError, match="empty"):
        autograd.resize(x, scales=[1, 1, 0.2, 1])
    with pytest.raises(ArgumentError, match="resize: mode must be one of"):
        autograd.resize(x, scales=[1, 1, 2, 2], mode="area")
    with pytest.raises(ArgumentError, match="coordinate_transformation_mode"):
        autograd.resize(x, scales=[1, 1, 2, 2], coordinate_transformation_mode="tf_crop_and_resize")
    with pytest.raises(ArgumentError, match="upsample: mode must be one of"):
        autograd.upsample(x, "cubic", [1, 1, 2, 2])
    with pytest.raises(DTypeError, match="resize"):
        autograd.resize(
            tensor.Tensor(data=np.zeros((1, 2), np.int32), device=dev, requires_grad=False), scales=[1, 2]
        )

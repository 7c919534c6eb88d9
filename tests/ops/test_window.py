"""Window geometry (``ops/window.py``): output sizes with pooling's ceil mode, auto_pad, and the
argument forms of strides and pads, shared by conv, pooling, the layers and sonnx."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from singa_lite import ops
from singa_lite.errors import ArgumentError
from singa_lite.ops import window

axis = st.fixed_dictionaries(
    {
        "size": st.integers(0, 12),
        "kernel": st.integers(1, 4),
        "stride": st.integers(1, 4),
        "pad_begin": st.integers(0, 3),
        "pad_end": st.integers(0, 3),
        "dilation": st.integers(1, 3),
    }
)


def _windows(size, kernel, stride, pad_begin, pad_end, dilation, ceil_mode) -> int:
    """Count the windows one by one: a window starts at ``p * stride`` of the padded axis; it
    must end inside it (floor), or (ceil) may overhang its end by less than a stride but must
    start inside the input or its begin padding."""
    padded, span = size + pad_begin + pad_end, dilation * (kernel - 1) + 1
    count = 0
    for p in range(padded + stride + 1):
        start = p * stride
        if start + span <= padded or (
            ceil_mode and start + span < padded + stride and start < size + pad_begin
        ):
            count = p + 1
    return count


@given(geo=axis, ceil_mode=st.booleans())
def test_axis_out_counts_the_windows(geo: dict, ceil_mode: bool) -> None:
    padded = geo["size"] + geo["pad_begin"] + geo["pad_end"]
    assume(padded >= geo["dilation"] * (geo["kernel"] - 1) + 1)  # at least one window
    assert window.axis_out(**geo, ceil_mode=ceil_mode) == _windows(**geo, ceil_mode=ceil_mode)


@given(geo=axis, ceil_mode=st.booleans())
def test_axis_out_matches_torch_pooling(geo: dict, ceil_mode: bool) -> None:
    torch = pytest.importorskip("torch")
    k, pad, d = geo["kernel"], geo["pad_begin"], geo["dilation"]
    assume(pad <= k // 2 and geo["size"] + 2 * pad >= d * (k - 1) + 1)  # PyTorch's own limits
    x = torch.zeros(1, 1, geo["size"])
    y = torch.nn.functional.max_pool1d(x, k, geo["stride"], pad, d, ceil_mode=ceil_mode)
    assert window.axis_out(geo["size"], k, geo["stride"], pad, pad, d, ceil_mode) == y.shape[-1]


def test_axis_out_drops_a_window_that_starts_in_the_end_padding() -> None:
    # size 4, kernel 2, stride 2, pads (1, 1): ceil gives 3 windows starting at 0, 2, 4 (padded
    # coordinates); 4 < size + begin = 5, so the third stays.
    assert window.axis_out(4, 2, 2, 1, 1, 1, True) == 3
    # size 3, kernel 1, stride 2, pads (0, 1): the window at 4 would start in the end padding.
    assert window.axis_out(3, 1, 2, 0, 1, 1, True) == 2
    assert window.axis_out(3, 1, 2, 0, 1, 1, False) == 2


def test_out_size_and_conv_output_size() -> None:
    assert window.out_size((28, 9), (5, 3), (1, 2), ((2, 2), (1, 0)), (1, 1)) == (28, 4)
    assert ops.conv_output_size(9, 3, 2, (1, 0)) == window.axis_out(9, 3, 2, 1, 0)
    assert ops.conv_output_size(5, 2, 2, 0, 1, True) == 3


@given(
    size=st.integers(1, 20), kernel=st.integers(1, 5), stride=st.integers(1, 4), dilation=st.integers(1, 3)
)
def test_same_pads_give_ceil_size_over_stride(size, kernel, stride, dilation) -> None:
    for mode in ("SAME_UPPER", "SAME_LOWER"):
        ((b, e),) = window.same_pads((size,), (kernel,), (stride,), (dilation,), mode)
        assert abs(b - e) <= 1 and (e >= b) == (mode == "SAME_UPPER" or b == e)
        assert window.axis_out(size, kernel, stride, b, e, dilation) == -(-size // stride)


def test_auto_pads() -> None:
    geo = ((5, 6), (2, 3), (1, 2), (1, 1))
    assert window.auto_pads("VALID", *geo, ((1, 1), (1, 1))) == ((0, 0), (0, 0))
    assert window.auto_pads("NOTSET", *geo, ((1, 2), (3, 4))) == ((1, 2), (3, 4))
    assert (
        window.auto_pads("SAME_LOWER", *geo, ()) == window.same_pads(*geo, "SAME_LOWER") == ((1, 0), (1, 0))
    )
    assert ops.same_padding((5, 6), (2, 3), (1, 2), mode="same_lower") == (1, 0, 1, 0)
    assert window.to_onnx(((1, 0), (1, 1))) == [1, 1, 0, 1]
    assert window.onnx_pairs([1, 1, 0, 1]) == ((1, 0), (1, 1))
    assert window.flat(((1, 0), (1, 1))) == (1, 0, 1, 1)


@pytest.mark.parametrize(
    "padding, n, want",
    [
        (1, 2, ((1, 1), (1, 1))),
        ((1, 2), 2, ((1, 1), (2, 2))),
        ((1, 2, 3, 4), 2, ((1, 2), (3, 4))),  # SINGA's (top, bottom, left, right)
        ([(0, 1), (2, 3)], 2, ((0, 1), (2, 3))),
        ((1.0, np.int64(2)), 2, ((1, 1), (2, 2))),
        (3, 1, ((3, 3),)),
        ((1, 2), 1, ((1, 2),)),  # (left, right)
        ([(0, 1)], 1, ((0, 1),)),
        ((1, 2, 3), 3, ((1, 1), (2, 2), (3, 3))),
        ([(0, 0), (0, 1), (1, 1)], 3, ((0, 0), (0, 1), (1, 1))),
    ],
)
def test_pads_forms(padding, n, want) -> None:
    assert window.pads("f", padding, n) == want


@pytest.mark.parametrize(
    "padding, n", [(-1, 2), ((1, 2, 3), 2), ((1, 2, 3), 1), ([(0, 0), (0, -1)], 2), ("1", 2), (None, 1)]
)
def test_bad_pads(padding, n) -> None:
    with pytest.raises(ArgumentError, match=r"^f: padding must"):
        window.pads("f", padding, n)


def test_per_axis() -> None:
    assert window.per_axis("f", "stride", 2, 3) == (2, 2, 2)
    assert window.per_axis("f", "output_padding", (0, 1), 2, 0) == (0, 1)
    with pytest.raises(ArgumentError, match=r"^f: stride must be an integer >= 1 or 2 of them, got 0$"):
        window.per_axis("f", "stride", 0, 2)

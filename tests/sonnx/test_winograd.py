"""Winograd F(2x2, 3x3) batch-1 convolution (``ops.winograd``) against the general conv path,
and its use by ``conv_infer.conv2d_one_image`` and ``sonnx``'s ``PackedConv``.

Tolerance: F(2x2, 3x3)'s transforms have coefficients 0, +-1 and +-1/2, all exact, so the only
differences from the direct conv are rounding order: ``U`` is rounded once from float64, and each
output sums ``16*C`` products plus four-term transform sums instead of ``9*C`` products. The
error is a few ``eps * sqrt(9*C)`` of the output scale; measured ``max|err| / max|y|`` was
4e-7..8e-7 in float32 for C = 64..512, and ~1e-16 in float64. The bounds used, 1e-5 and 1e-12
relative to ``max|y|``, leave a margin of 10x or more and still catch any wrong tap or sign
(errors of order 1).
"""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite.ops import conv_infer, winograd
from singa_lite.ops.conv import Conv2d

# (C, O, H, W, pads (t, b, l, r))
CASES = [
    (3, 5, 7, 9, (1, 1, 1, 1)),  # odd H and W
    (4, 6, 8, 6, (0, 0, 0, 0)),  # no padding: 6x4 output
    (2, 3, 5, 8, (0, 0, 0, 0)),  # odd output height
    (5, 4, 9, 7, (1, 0, 0, 1)),  # asymmetric pads
    (3, 2, 6, 5, (2, 1, 3, 0)),  # pads wider than the kernel's reach
    (1, 1, 3, 3, (0, 0, 0, 0)),  # a 1x1 output
    (6, 7, 4, 11, (1, 1, 1, 1)),  # wide and short
]
TOL = {np.float32: 1e-5, np.float64: 1e-12}


def _general(x: np.ndarray, W: np.ndarray, b: np.ndarray | None, pads: tuple) -> np.ndarray:
    op = Conv2d((1, 1), pads, (1, 1), 1)
    op.needs_grad = (True, True, b is not None)  # as if recording: the general path
    op.xp = np
    return op.forward(x, W, b) if b is not None else op.forward(x, W)


@pytest.mark.parametrize("biased", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_winograd_matches_general_conv(case: tuple, dtype: type, biased: bool) -> None:
    C, O, H, Wd, pads = case
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, C, H, Wd)).astype(dtype)
    W = rng.standard_normal((O, C, 3, 3)).astype(dtype)
    b = rng.standard_normal(O).astype(dtype) if biased else None
    U = winograd.winograd_weight(np, W, b)
    assert U.shape == (16, O, C + biased) and U.dtype == dtype
    ref = _general(x, W, b, pads)
    y = winograd.winograd_conv(np, x, U, pads, ref.shape[2:], biased)
    assert y.shape == ref.shape and y.dtype == dtype and y.flags.c_contiguous
    np.testing.assert_allclose(y, ref, rtol=0, atol=TOL[dtype] * np.abs(ref).max())


def test_winograd_float32_error_on_a_wide_conv() -> None:
    """A resnet-sized conv (256 channels, 14x14), against a float64 reference."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 256, 14, 14)).astype(np.float32)
    W = (rng.standard_normal((64, 256, 3, 3)) / 48).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    ref = _general(x.astype(np.float64), W.astype(np.float64), b.astype(np.float64), (1, 1, 1, 1))
    y = winograd.winograd_conv(np, x, winograd.winograd_weight(np, W, b), (1, 1, 1, 1), (14, 14), True)
    assert np.abs(y - ref).max() <= 1e-5 * np.abs(ref).max()


def test_one_image_conv_takes_winograd_where_it_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 160, 12, 11)).astype(np.float32)
    W = (rng.standard_normal((8, 160, 3, 3)) / 36).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    Wb, U = conv_infer.one_image_weight(np, W, b, 1), winograd.winograd_weight(np, W, b)
    args = (np, x, W, b, Wb, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    calls = []
    real = winograd.winograd_conv
    monkeypatch.setattr(winograd, "winograd_conv", lambda *a, **k: calls.append(1) or real(*a, **k))
    y = conv_infer.conv2d_one_image(*args, U)
    assert calls == [1] and y is not None
    np.testing.assert_allclose(y, conv_infer.conv2d_one_image(*args), rtol=0, atol=1e-5 * np.abs(y).max())
    conv_infer.conv2d_one_image(*args, U.astype(np.float64))  # another dtype: im2col
    assert calls == [1]


def test_winograd_rule() -> None:
    wide, narrow = np.zeros((64, 256, 3, 3)), np.zeros((64, 128, 3, 3))
    args = ((1, 1), (1, 1), (1, 1, 1, 1), 1)
    assert conv_infer._winograd_wins(wide, *args, (14, 14))
    assert not conv_infer._winograd_wins(narrow, *args, (14, 14))  # GEMMs too thin
    assert not conv_infer._winograd_wins(wide, *args, (28, 28))  # transforms cost more
    assert not conv_infer._winograd_wins(wide, *args, (7, 7))  # mostly padding tiles
    assert not conv_infer._winograd_wins(wide, (2, 2), (1, 1), (1, 1, 1, 1), 1, (14, 14))
    assert not conv_infer._winograd_wins(wide, (1, 1), (2, 2), (1, 1, 1, 1), 1, (14, 14))
    assert not conv_infer._winograd_wins(np.zeros((64, 256, 1, 1)), *args, (14, 14))

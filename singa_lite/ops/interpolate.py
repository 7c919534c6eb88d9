"""ONNX Resize and Upsample: nearest, (multi-)linear and cubic interpolation of N-D arrays.

Interpolation is separable, so an N-D resize is a 1-D resize along each axis whose size
changes. Along one axis every output position reads a few input positions (1 for nearest,
2 for linear, 4 for cubic) with weights: the op gathers those "taps" with ``take`` and sums
them, so the work is a loop over taps, never over pixels. The gradient is the transpose:
each tap's weighted gradient is scatter-added back, and because tap indices never decrease
along the axis, the outputs that land on one input form a run that is summed with a few
strided gathers.

Coordinate mapping (output index ``o`` to input coordinate, scale ``s = out / in``):
half_pixel ``(o + 0.5) / s - 0.5``, pytorch_half_pixel (same, -0.5 when the output has
length 1), half_pixel_symmetric, align_corners ``o * (in - 1) / (out - 1)``, asymmetric ``o / s``,
tf_half_pixel_for_nn ``(o + 0.5) / s``, and tf_crop_and_resize, which maps the output onto the
region ``roi`` (normalised start and end per axis) and gives ``extrapolation_value`` where that
region reaches past the input. Otherwise coordinates beyond the input read its edge.

With ``antialias`` a downsampling linear or cubic resize stretches its filter by ``1 / s`` (a
2/s- or 4/s-tap window, weights normalised to 1), as ONNX (opset 18) and PIL do: still a fixed
set of taps per axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Real
from typing import Any

import numpy as np

from singa_lite import _args, backend
from singa_lite.autograd import Operator
from singa_lite.errors import ArgumentError, DTypeError
from singa_lite.tensor import Tensor

__all__ = ["Resize", "resize", "upsample"]

_COORD_MODES = (
    "half_pixel",
    "pytorch_half_pixel",
    "half_pixel_symmetric",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_MODES = ("nearest", "linear", "cubic")


class Resize(Operator):
    """Resize ``x`` to ``sizes`` (or ``floor(shape * scales)``) with ONNX Resize semantics."""

    def __init__(
        self,
        scales: Sequence[float] | None = None,
        sizes: Sequence[int] | None = None,
        mode: str = "nearest",
        coordinate_transformation_mode: str = "half_pixel",
        nearest_mode: str = "round_prefer_floor",
        cubic_coeff_a: float = -0.75,
        exclude_outside: int = 0,
        antialias: bool = False,
        roi: Sequence[float] | None = None,
        extrapolation_value: float = 0.0,
    ) -> None:
        super().__init__("resize")
        me = self.name
        if (scales is None) == (sizes is None):
            raise ArgumentError(f"{me}: give exactly one of scales and sizes")
        # ONNX carries scales as float32: round them the same way, or a scale such as 0.6
        # lands coordinates on the other side of a floor/round boundary from every runtime.
        if scales is not None:
            scales = tuple(
                float(np.float32(s)) for s in _args.numbers(me, "scales", scales, 0.0, low_open=True)
            )
        self.scales = scales
        self.sizes = None if sizes is None else _args.ints(me, "sizes", sizes, low=1, scalar=False)
        self.mode = _args.choice(me, "mode", mode, _MODES)
        self.coord = _args.choice(
            me, "coordinate_transformation_mode", coordinate_transformation_mode, _COORD_MODES
        )
        self.nearest_mode = _args.choice(me, "nearest_mode", nearest_mode, _NEAREST_MODES)
        self.cubic_a = _args.number(me, "cubic_coeff_a", cubic_coeff_a)
        self.exclude_outside = bool(exclude_outside)
        self.antialias = bool(antialias)
        if roi is not None:
            roi = tuple(float(np.float32(v)) for v in _args.numbers(me, "roi", roi))  # as ONNX carries it
        self.roi = roi
        self.extrapolation_value = float(
            _args.instance(me, "extrapolation_value", extrapolation_value, Real, "a number")
        )
        if self.coord == "tf_crop_and_resize" and self.roi is None:
            raise ArgumentError(f"{me}: coordinate_transformation_mode 'tf_crop_and_resize' needs a roi")

    def forward(self, x: Any) -> Any:
        if x.dtype.kind != "f":
            raise DTypeError(f"resize: needs a floating-point input, got {x.dtype}")
        given = self.scales if self.scales is not None else self.sizes
        assert given is not None
        if len(given) != x.ndim:
            raise self.error(f"scales/sizes {given} need one value per axis", x)
        if self.roi is not None and self.coord == "tf_crop_and_resize" and len(self.roi) != 2 * x.ndim:
            raise self.error(f"roi {self.roi} needs a start and an end per axis", x)
        self.plan = []  # (axis, input length, taps) for each axis that changes
        y = x
        for axis, n_in in enumerate(x.shape):
            if self.scales is not None:
                scale = self.scales[axis]
                n_out = int(n_in * scale)  # ONNX: floor(in * scale)
            else:
                n_out = self.sizes[axis]  # type: ignore[index]
                scale = n_out / n_in
            if n_out < 1:
                raise self.error(f"scale {scale} leaves axis {axis} empty", x)
            src = self._source(n_in, n_out, scale, axis)
            if n_out == n_in and scale == 1 and self.coord != "tf_crop_and_resize":
                continue  # untouched axes (N and C) stay as they are, as in onnxruntime
            # tf_crop_and_resize: outputs mapped outside the input get extrapolation_value
            # (and no gradient): their taps weigh 0, then the value is set.
            outside = (src < 0) | (src > n_in - 1) if self.coord == "tf_crop_and_resize" else None
            if outside is not None and not bool(backend.to_host(outside.any())):
                outside = None
            taps = self._taps(src, n_in, scale, x.dtype, outside)
            y = _gather(self.xp, y, axis, taps)
            if outside is not None:
                _as_3d(y, axis)[0][:, outside] = self.extrapolation_value
            self.plan.append((axis, n_in, taps))
        return y if y is not x else x.copy()

    def backward(self, dy: Any) -> Any:
        for axis, n_in, taps in reversed(self.plan):
            dy = _scatter(self.xp, dy, axis, n_in, taps)
        return dy

    # -- one axis ---------------------------------------------------------------------------
    def _source(self, n_in: int, n_out: int, scale: float, axis: int) -> Any:
        """Input coordinate of each output position (float64).

        As in ONNX's reference implementation (which generates its conformance data), the
        output length in these formulas is the unrounded ``scale * n_in`` when scales are given.
        """
        o = self.xp.arange(n_out, dtype=self.xp.float64)
        length = n_out if self.sizes is not None else scale * n_in
        mode = self.coord
        if mode == "tf_crop_and_resize":
            assert self.roi is not None
            start, end = self.roi[axis], self.roi[len(self.roi) // 2 + axis]
            if length == 1:
                return o * 0 + (end - start) * (n_in - 1) / 2 + start * (n_in - 1)
            return o * ((end - start) * (n_in - 1) / (length - 1)) + start * (n_in - 1)
        if mode == "align_corners":
            return o * 0 if length == 1 else o * ((n_in - 1) / (length - 1))
        if mode == "asymmetric":
            return o / scale
        if mode == "tf_half_pixel_for_nn":
            return (o + 0.5) / scale
        if mode == "pytorch_half_pixel" and length == 1:
            return o * 0 - 0.5
        offset = 0.0
        if mode == "half_pixel_symmetric":
            offset = n_in / 2 * (1 - n_out / length)
        return offset + (o + 0.5) / scale - 0.5

    def _taps(self, src: Any, n_in: int, scale: float, dtype: Any, outside: Any) -> list[tuple[Any, Any]]:
        """``[(index, weight), ...]``: output ``o`` is ``sum(w[o] * x[index[o]])`` (w None = 1).

        ``outside`` marks outputs whose weights are all 0 (tf_crop_and_resize sets them after).
        """
        xp = self.xp
        last = n_in - 1
        if self.mode == "nearest":
            idx = {
                "round_prefer_floor": xp.ceil(src - 0.5),
                "round_prefer_ceil": xp.floor(src + 0.5),
                "floor": xp.floor(src),
                "ceil": xp.ceil(src),
            }[self.nearest_mode]
            w = None if outside is None else (~outside).astype(dtype)
            return [(xp.clip(idx, 0, last).astype(xp.int64), w)]
        if self.antialias and scale < 1:
            raw, weights = self._antialias_weights(src, scale)
        else:
            base = xp.floor(src)
            r = src - base
            offsets: tuple[int, ...]
            if self.mode == "linear":
                offsets, weights = (0, 1), [1 - r, r]
            else:
                offsets, weights = (-1, 0, 1, 2), _cubic_weights(r, self.cubic_a)
            raw = [base + k for k in offsets]
        if (self.exclude_outside and self.mode == "cubic") or (self.antialias and scale < 1):
            if self.exclude_outside:
                weights = [w * ((i >= 0) & (i <= last)) for w, i in zip(weights, raw)]
            total = sum(weights)
            weights = [w / total for w in weights]
        if outside is not None:
            weights = [w * ~outside for w in weights]
        return [(xp.clip(i, 0, last).astype(xp.int64), w.astype(dtype)) for i, w in zip(raw, weights)]

    def _antialias_weights(self, src: Any, scale: float) -> tuple[list[Any], list[Any]]:
        """Input positions and (unnormalised) weights of the filter stretched by ``1/scale``:
        ONNX's reference puts the window's taps at ``base + j``, ``base = ceil(src) - 1`` (so the
        fraction ``src - base`` is in (0, 1]), ``j`` from ``floor(-support/scale) + 1`` on."""
        xp = self.xp
        support = 1 if self.mode == "linear" else 2
        start = int(np.floor(-support / scale)) + 1
        base = xp.ceil(src) - 1
        frac = src - base
        raw, weights = [], []
        for j in range(start, 2 - start):
            t = xp.abs(scale * (j - frac))
            if self.mode == "linear":
                w = xp.clip(1 - t, 0, 1)
            else:
                a = self.cubic_a
                near = ((a + 2) * t - (a + 3)) * t * t + 1
                far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
                w = xp.where(t <= 1, near, xp.where(t < 2, far, 0.0))
            raw.append(base + j)
            weights.append(w)
        return raw, weights


def _cubic_weights(r: Any, a: float) -> list[Any]:
    """Keys' cubic convolution weights of the 4 neighbours at offsets -1, 0, 1, 2 (ONNX)."""
    s = 1 - r
    return [
        ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
        ((a + 2) * r - (a + 3)) * r * r + 1,
        ((a + 2) * s - (a + 3)) * s * s + 1,
        ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a,
    ]


def _as_3d(a: Any, axis: int) -> tuple[Any, tuple]:
    pre = 1
    for s in a.shape[:axis]:
        pre *= s
    return a.reshape(pre, a.shape[axis], -1), a.shape


def _gather(xp: Any, x: Any, axis: int, taps: list) -> Any:
    """``y[.., o, ..] = sum_t w_t[o] * x[.., idx_t[o], ..]`` along ``axis``."""
    x3, shape = _as_3d(x, axis)
    y: Any = None
    for idx, w in taps:
        v = x3.take(idx, axis=1)
        if w is not None:
            v *= w[:, None]
        y = v if y is None else y.__iadd__(v)
    n_out = taps[0][0].shape[0]
    return y.reshape(shape[:axis] + (n_out,) + shape[axis + 1 :])


def _scatter(xp: Any, dy: Any, axis: int, n_in: int, taps: list) -> Any:
    """The transpose of :func:`_gather`: ``dx[.., i, ..] = sum(w_t[o] dy[.., o, ..] for idx_t[o] == i)``."""
    dy3, shape = _as_3d(dy, axis)
    dx = xp.zeros((dy3.shape[0], n_in, dy3.shape[2]), dy.dtype)
    n_out = dy3.shape[1]
    for idx, w in taps:
        v = dy3 if w is None else dy3 * w[:, None]
        # idx never decreases, so the outputs of input i are the run starts[i] .. +counts[i].
        counts = xp.bincount(idx, minlength=n_in)
        starts = xp.cumsum(counts) - counts
        for k in range(int(backend.to_host(counts.max()))):  # one pass per output sharing an input
            live = (counts > k).astype(dy.dtype)
            dx += v.take(xp.minimum(starts + k, n_out - 1), axis=1) * live[:, None]
    return dx.reshape(shape[:axis] + (n_in,) + shape[axis + 1 :])


def resize(
    x: Tensor,
    scales: Sequence[float] | None = None,
    sizes: Sequence[int] | None = None,
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    antialias: bool = False,
    roi: Sequence[float] | None = None,
    extrapolation_value: float = 0.0,
) -> Tensor:
    """ONNX Resize of ``x`` to ``sizes`` or ``floor(x.shape * scales)`` (one value per axis).

    ``mode`` is ``'nearest'``, ``'linear'`` (bilinear, trilinear... on the resized axes) or
    ``'cubic'``; the gradient flows to ``x``. ``antialias`` widens the linear/cubic filter when
    downsampling; ``roi`` (starts, then ends, normalised) and ``extrapolation_value`` go with
    ``coordinate_transformation_mode='tf_crop_and_resize'``. ``torch.nn.functional.interpolate`` equivalents:
    bilinear ``align_corners=False`` is ``half_pixel``, ``align_corners=True`` is
    ``align_corners``; torch's ``'nearest'`` is ``asymmetric`` with ``nearest_mode='floor'``.

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> x = tensor.from_numpy(np.array([[[[1.0, 2.0]]]], dtype=np.float32))
    >>> tensor.to_numpy(resize(x, scales=[1, 1, 1, 2])).tolist()
    [[[[1.0, 1.0, 2.0, 2.0]]]]
    """
    op = Resize(
        scales,
        sizes,
        mode,
        coordinate_transformation_mode,
        nearest_mode,
        cubic_coeff_a,
        exclude_outside,
        antialias,
        roi,
        extrapolation_value,
    )
    return op(x)[0]


def upsample(x: Tensor, scales: Sequence[float], mode: str = "nearest") -> Tensor:
    """ONNX Upsample: resize by ``scales`` with asymmetric coordinates (floor for nearest).

    ``mode`` is ``'nearest'`` or ``'linear'`` (``'bilinear'`` is accepted as linear).
    """
    mode = _args.choice("upsample", "mode", mode, ("nearest", "linear", "bilinear"))
    mode = "linear" if mode == "bilinear" else mode
    return resize(
        x, scales=scales, mode=mode, coordinate_transformation_mode="asymmetric", nearest_mode="floor"
    )

"""ONNX handlers for neural-network layers: convolution, pooling, normalisation, resizing, RNNs.

Layouts are mapped onto singa_lite's ops here: ONNX ``pads`` ``[begins..., ends...]`` become
per-axis pairs; ONNX recurrent weights ``W[dir, gates*H, I]`` (LSTM gates i, o, f, c) become the
``x @ W`` matrices ``(I, gates*H)`` in singa_lite's gate order (i, f, o, g). The re-layout is
done with differentiable ops so that a trained ``SONNXModel`` updates the ONNX-shaped weights.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from singa_lite import autograd, ops
from singa_lite.backend import onednn
from singa_lite.ops import conv_infer, conv_select, depthwise, unary, window
from singa_lite.sonnx import limits
from singa_lite.sonnx.import_ops.base import (
    GATE_ORDER,
    PEEPHOLE_ORDER,
    Node,
    window_pads,
    wrap,
)
from singa_lite.tensor import Tensor

# ruff: noqa: N802  (handlers and ONNX input names follow the ONNX spelling)

__all__ = [
    "GRU",
    "LRN",
    "LSTM",
    "RNN",
    "AveragePool",
    "BatchNormalization",
    "Conv",
    "ConvTranspose",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "InstanceNormalization",
    "LayerNormalization",
    "MaxPool",
    "Resize",
    "Upsample",
]  # fmt: skip


def _geometry(n: Node, x: Tensor, kernel: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """``strides``, ``dilations`` and explicit ONNX ``pads`` of a windowed node, each checked to
    have one value per spatial axis of ``x`` (two for pads)."""
    k = len(kernel)
    if x.ndim() != k + 2:
        raise n.fail(f"a kernel of {k} axes needs an (N, C, {k} spatial axes) input, got shape {x.shape}")
    strides = list(n.attr("strides", [1] * k))
    dilations = list(n.attr("dilations", [1] * k))
    pads = window_pads(n, x, kernel, strides, dilations)
    for what, v, want in (("strides", strides, k), ("dilations", dilations, k), ("pads", pads, 2 * k)):
        if len(v) != want:
            raise n.fail(f"{what} must have {want} values for {k} spatial axes, got {v}")
    if min(strides + dilations + list(kernel), default=1) < 1 or min(pads, default=0) < 0:
        raise n.fail(
            f"kernel {list(kernel)}, strides {strides} and dilations {dilations} must be positive, "
            f"pads {pads} not negative"
        )
    return strides, dilations, pads


def _window_out(
    n: Node, x: Tensor, kernel: Sequence[int], strides: list, dilations: list, pads: list
) -> list[int]:
    """The output length of each spatial axis of a convolution (floor mode); the padded input
    is checked against the allocation limit on the way."""
    pairs = window.onnx_pairs(pads)
    padded = [i + b + e for i, (b, e) in zip(x.shape[2:], pairs)]
    n.check_size([*x.shape[:2], *padded], x.dtype, "padded input")
    out = list(window.out_size(x.shape[2:], kernel, strides, pairs, dilations))
    if min(out, default=1) < 1:
        raise n.fail(
            f"the kernel {list(kernel)} (dilations {dilations}) does not fit the padded input {padded}"
        )
    return out


def _conv_checks(n: Node, x: Tensor, W: Tensor, B: Tensor | None) -> tuple[list, list, list, list, int]:
    """Check a Conv node against its inputs (channels, group, kernel_shape, bias) and what it
    will allocate; ``(kernel, strides, dilations, pads, group)``."""
    group = n.attr("group", 1)
    if W.ndim() < 3 or W.ndim() != x.ndim():
        raise n.fail(
            f"expects an (N, C, spatial...) input and a weight of the same rank, got {x.shape}, {W.shape}"
        )
    if group < 1 or x.shape[1] != W.shape[1] * group or W.shape[0] % group:
        raise n.fail(
            f"group = {group} does not fit an input of {x.shape[1]} channels and a weight of shape {W.shape} "
            "(input channels must be weight.shape[1] * group, output channels a multiple of group)"
        )
    kernel = list(W.shape[2:])
    if list(n.attr("kernel_shape", kernel)) != kernel:
        raise n.fail(f"kernel_shape {n.attr('kernel_shape')} contradicts the weight's shape {W.shape}")
    if B is not None and tuple(B.shape) != (W.shape[0],):
        raise n.fail(f"the bias must have shape ({W.shape[0]},) (the output channels), got {B.shape}")
    strides, dilations, pads = _geometry(n, x, kernel)
    out = _window_out(n, x, kernel, strides, dilations, pads)
    n.check_size([x.shape[0], W.shape[0], *out], x.dtype)
    # The im2col matrix: made in blocks of at least 2048 rows (or one output row) on the host,
    # whole on a GPU (ops.conv).
    row = math.prod(kernel) * W.shape[1] * group * x.dtype.itemsize
    rows = x.shape[0] * math.prod(out)
    block = rows if x.device.xp.__name__ != "numpy" else min(rows, max(2048, out[-1]))
    limits.check_bytes(n, block * row, n.limits, "im2col workspace")
    return kernel, strides, dilations, pads, group


# -- convolution ---------------------------------------------------------------------------------
def Conv(n: Node, x: Tensor, W: Tensor, B: Tensor | None = None) -> Tensor:
    """Convolution over 1, 2, 3 or more spatial axes with ``group``, ``dilations``, ``strides``,
    ``pads``/``auto_pad``."""
    return _conv(x, W, B, _conv_checks(n, x, W, B))


def _conv(x: Tensor, W: Tensor, B: Tensor | None, checked: tuple) -> Tensor:
    """The convolution of checked inputs; ``checked`` is what ``_conv_checks`` returned."""
    _, strides, dilations, pads, group = checked
    return ops.conv_nd(x, W, B, tuple(strides), window.onnx_pairs(pads), tuple(dilations), group)


class _Prepared(NamedTuple):
    """A :class:`PackedConv`'s work for one input shape and dtype, done at the first run."""

    checks: tuple  # _conv_checks' answer: (kernel, strides, dilations, pads, group)
    geometry: tuple  # (strides, (top, bottom, left, right), dilations, group)
    depthwise_hw: tuple | None  # the output's size, when the compiled depthwise kernel runs it
    onednn: tuple | None  # (backend.onednn.Convolution, the weight in its layout), when it runs it


class PackedConv:
    """A Conv node of an inference program whose weight and bias are constants: its weight
    with the bias appended as a column is made once, so that a batch-1 run adds the bias in
    the GEMM (``conv.conv2d_one_image``); a depthwise conv on the compiled CPU kernels adds it
    as the kernel writes the output; a conv that oneDNN runs (``conv_select``: float32, a
    kernel larger than 1x1) has its weight reordered to oneDNN's layout once per input shape.
    ``bounds = (lo, hi)`` is a Relu or Clip fused in (``fusion.ConvActivation``): the output
    clamped where it is made (the depthwise kernel) or in place after. Any other input (a
    batch, 1-D, a depthwise conv off the kernels) runs ``Conv``. Not an ONNX operator:
    ``SingaRep``'s fused program swaps it in."""

    def __init__(self, W: Tensor, B: Tensor, group: int, bounds: tuple[float, float] | None = None) -> None:
        xp = W.device.xp
        self.Wb = conv_infer.one_image_weight(xp, W.data, B.data, group)
        self.bounds = bounds
        # _conv_checks' answer per input shape and dtype (the weight and bias are constants):
        # the checks and the geometry they work out cost ~90 us a node, a run repeats them.
        self.checked: dict[tuple, _Prepared] = {}

    @classmethod
    def with_bounds(cls, conv: PackedConv, bounds: tuple[float, float]) -> PackedConv:
        """``conv`` (its packed weight shared) with the activation ``bounds`` fused in."""
        fused = copy.copy(conv)
        fused.bounds, fused.checked = bounds, {}
        return fused

    @staticmethod
    def fits(W: Tensor, B: Tensor, group: int) -> bool:
        """Whether a weight, bias and group make a packed matrix (others run ``Conv``, which says
        what is wrong with them)."""
        return W.ndim() == 4 and group >= 1 and W.shape[0] % group == 0 and tuple(B.shape) == (W.shape[0],)

    def __call__(self, n: Node, x: Tensor, W: Tensor, B: Tensor | None = None) -> Tensor:
        if B is None or x.ndim() != 4 or W.ndim() != 4:
            return self._clamped(Conv(n, x, W, B))
        key = (x.shape, x.dtype, W.shape, B.shape)
        prepared = self.checked.get(key)
        if prepared is None:
            if len(self.checked) >= 8:  # inputs of ever new shapes: keep a few
                self.checked.clear()
            prepared = self.checked[key] = self._prepare(n, x, W, B)
        if prepared.depthwise_hw is not None:  # the compiled kernels: bias and clamp as it writes
            (strides, pads, dilations, _), out_hw = prepared.geometry, prepared.depthwise_hw
            from singa_lite.backend.cpu_kernels import conv as dw  # Numba: imported once wanted

            y = dw.depthwise_forward(x.data, W.data, strides, dilations, pads, out_hw, B.data, self.bounds)
            return Tensor._wrap(y, x.device, False, None, 0)
        if prepared.onednn is not None:  # the weight already in oneDNN's layout
            conv, wm = prepared.onednn
            y = conv.forward(np.ascontiguousarray(x.data), None, B.data, wm)[0]
            return Tensor._wrap(conv_infer.clamp_(np, y, self.bounds), x.device, False, None, 0)
        strides, pads, dilations, group = prepared.geometry
        args = (x.data, W.data, B.data, self.Wb, strides, pads, dilations, group, self.bounds)
        y1 = conv_infer.conv2d_one_image(x.device.xp, *args)
        if y1 is not None:
            return Tensor._wrap(y1, x.device, False, None, 0)
        return self._clamped(_conv(x, W, B, prepared.checks))

    def _prepare(self, n: Node, x: Tensor, W: Tensor, B: Tensor) -> _Prepared:
        """What a run of this conv on inputs of ``x``'s shape and dtype repeats: the checks
        (~90 us a node) and the strategy, with what the strategy makes once from the weight."""
        checks = _conv_checks(n, x, W, B)
        _, strides, dilations, pads, group = checks
        pairs = window.onnx_pairs(pads)
        geometry = (tuple(strides), window.flat(pairs), tuple(dilations), group)
        xp = x.device.xp
        depthwise_run = depthwise.kernels_take(xp, x.data, W.data)
        dnnl = onednn.usable(xp, x.data, W.data, B.data, inference=True)
        strategy = conv_select.select(
            2, x.shape, W.shape, group, x.dtype, xp.__name__, grad=False, kernels=depthwise_run, onednn=dnnl
        )
        out_hw = tuple(window.out_size(x.shape[2:], W.shape[2:], strides, pairs, dilations))
        if strategy == "depthwise_kernel":
            return _Prepared(checks, geometry, out_hw, None)
        if strategy == "onednn":
            args = (tuple(strides), tuple(dilations), tuple(pairs), out_hw, group, False)
            try:
                conv = onednn.convolution(x.shape, W.shape, True, *args)
            except onednn.OneDnnError:  # no kernel for this geometry: the NumPy strategies
                return _Prepared(checks, geometry, None, None)
            return _Prepared(checks, geometry, None, (conv, conv.weights(np.ascontiguousarray(W.data))))
        return _Prepared(checks, geometry, None, None)

    def _clamped(self, y: Tensor) -> Tensor:
        """``y`` (a new array nothing else holds) clamped in place to the fused bounds."""
        conv_infer.clamp_(y.device.xp, y.data, self.bounds)
        return y


def ConvTranspose(n: Node, x: Tensor, W: Tensor, B: Tensor | None = None) -> Tensor:
    """Transposed convolution over 1, 2, 3 or more spatial axes, with ``output_shape``,
    ``output_padding`` and ``auto_pad``."""
    nk = x.ndim() - 2  # spatial axes
    if nk < 1 or W.ndim() != x.ndim():
        raise n.fail(
            f"expects (N, C, spatial...) input and a weight of the same rank, got {x.shape}, {W.shape}"
        )
    group = n.attr("group", 1)
    if group < 1 or x.shape[1] != W.shape[0] or W.shape[0] % group:
        raise n.fail(
            f"group = {group} does not fit an input of {x.shape[1]} channels and a weight of shape "
            f"{W.shape} (weight.shape[0] must be the input channels, a multiple of group)"
        )
    k = list(W.shape[2:])
    if list(n.attr("kernel_shape", k)) != k:
        raise n.fail(f"kernel_shape {n.attr('kernel_shape')} contradicts the weight's shape {W.shape}")
    if B is not None and tuple(B.shape) != (W.shape[1] * group,):
        raise n.fail(f"the bias must have shape ({W.shape[1] * group},) (the output channels), got {B.shape}")
    strides = list(n.attr("strides", [1] * nk))
    dilations = list(n.attr("dilations", [1] * nk))
    out_pad = list(n.attr("output_padding", [0] * nk))
    full = [(i - 1) * s + d * (kk - 1) + 1 for i, s, d, kk in zip(x.shape[2:], strides, dilations, k)]
    auto = n.attr("auto_pad", "NOTSET")
    target = n.attr("output_shape")
    if target is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        # ONNX: total padding = full + output_padding - output_shape, split by auto_pad.
        target = None if target is None else list(target)[-nk:]
        geo = (x.shape[2:], k, strides, dilations, out_pad, target, auto)
        pads = window.to_onnx(window.transpose_pads(*geo))
    elif auto == "VALID":
        pads = [0] * 2 * nk
    else:
        pads = list(n.attr("pads", [0] * 2 * nk))
    for what, v, want in (
        ("strides", strides, nk),
        ("dilations", dilations, nk),
        ("output_padding", out_pad, nk),
        ("pads", pads, 2 * nk),
    ):
        if len(v) != want:
            raise n.fail(f"{what} must have {want} values for {nk} spatial axes, got {v}")
    if min(strides + dilations) < 1 or min(out_pad) < 0:
        raise n.fail(
            f"strides {strides} and dilations {dilations} must be positive, "
            f"output_padding {out_pad} not negative"
        )
    _transpose_sizes(n, x, W, group, full, out_pad, pads)
    fits = min(pads) >= 0 and all(op < max(s, d) for op, s, d in zip(out_pad, strides, dilations))
    if fits:
        return _conv_transpose(x, W, B, strides, pads, out_pad, dilations, group)
    # Negative pads (an output_shape larger than the natural one) or a wide output_padding:
    # take the full result and crop or zero-extend it, then add the bias everywhere.
    y = _conv_transpose(x, W, None, strides, [0] * 2 * nk, [0] * nk, dilations, group)
    ends = [op - e for op, e in zip(out_pad, pads[nk:])]
    y = ops.pad(y, "constant", [0, 0, *(-p for p in pads[:nk]), 0, 0, *ends])
    if B is not None:
        y = ops.add(y, ops.reshape(B, (1, -1, *[1] * nk)))
    return y


def _transpose_sizes(
    n: Node, x: Tensor, W: Tensor, group: int, full: list, out_pad: list, pads: list
) -> None:
    """Check what a transposed convolution allocates: the column matrix ``W^T x`` (every input
    pixel times every kernel tap), the full image it is added into, and the output."""
    nk, cout, isz = len(full), W.shape[1] * group, x.dtype.itemsize
    cols = x.shape[0] * math.prod(x.shape[2:]) * cout * math.prod(W.shape[2:]) * isz
    limits.check_bytes(n, cols, n.limits, "column matrix")
    n.check_size([x.shape[0], cout, *(f + op for f, op in zip(full, out_pad))], x.dtype, "uncropped output")
    out = [f + op - pads[a] - pads[a + nk] for a, (f, op) in enumerate(zip(full, out_pad))]
    if min(out) < 1:
        raise n.fail(f"pads {pads} (or output_shape) leave an empty output: {out}")
    n.check_size([x.shape[0], cout, *out], x.dtype)


def _conv_transpose(
    x: Tensor,
    W: Tensor,
    B: Tensor | None,
    strides: list,
    pads: list,
    out_pad: list,
    dilations: list,
    group: int,
) -> Tensor:
    """ONNX-ordered ``pads`` (begins, then ends), any rank: the engine's transposed conv."""
    pairs = window.onnx_pairs(pads)
    return ops.conv_transpose_nd(x, W, B, tuple(strides), pairs, tuple(out_pad), tuple(dilations), group)


# -- pooling -------------------------------------------------------------------------------------
def _pool_args(n: Node, x: Tensor) -> tuple:
    kernel = list(n.attr("kernel_shape"))
    strides, dilations, pads = _geometry(n, x, kernel)
    out = _window_out(n, x, kernel, strides, dilations, pads)
    n.check_size([*x.shape[:2], *(o + 1 for o in out)], x.dtype)  # ceil_mode adds at most one
    # singa_lite's pools take per-axis (begin, end) pairs, interleaved.
    pairs = list(window.flat(window.onnx_pairs(pads)))
    return kernel, strides, pairs, dilations, bool(n.attr("ceil_mode", 0))


def MaxPool(n: Node, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
    """Max pooling over every spatial axis, with dilations, ceil_mode and auto_pad; the optional
    Indices output (flat positions in the input, row- or column-major) for 2-D pools."""
    kernel, strides, pairs, dilations, ceil_mode = _pool_args(n, x)
    y = ops.max_pool(x, kernel, strides, pairs, dilations, ceil_mode)
    if n.n_outputs < 2 or not n.outputs[1]:
        return y
    if len(kernel) != 2 or ceil_mode or max(dilations) > 1:
        raise n.fail("the Indices output is supported for 2-D pools without dilation or ceil_mode")
    # every window's values are gathered at once
    n.check_size([*y.shape, *kernel], max(8, x.dtype.itemsize), "window workspace")
    return y, _argmax_indices(n, x, y, kernel, strides, pairs)


def _argmax_indices(n: Node, x: Tensor, y: Tensor, kernel: list, strides: list, pairs: list) -> Tensor:
    """ONNX MaxPool's Indices: for each window, the flat input index of its (first) maximum."""
    xp = x.device.xp
    N, C, H, W = x.shape
    t, left = pairs[0], pairs[2]
    oh, ow = y.shape[2:]
    rows = (xp.arange(oh) * strides[0] - t)[:, None] + xp.arange(kernel[0])  # (oh, kh)
    cols = (xp.arange(ow) * strides[1] - left)[:, None] + xp.arange(kernel[1])  # (ow, kw)
    r = rows[:, None, :, None]
    c = cols[None, :, None, :]  # windows as (oh, ow, kh, kw)
    inside = (r >= 0) & (r < H) & (c >= 0) & (c < W)
    vals = x.data[:, :, r.clip(0, H - 1), c.clip(0, W - 1)]
    vals = xp.where(inside, vals, -xp.inf).reshape(N, C, oh, ow, -1)
    best = vals.argmax(axis=-1)
    br, bc = (
        best // kernel[1] + rows[:, :1].reshape(1, 1, oh, 1),
        best % kernel[1] + cols[:, :1].reshape(1, 1, 1, ow),
    )
    flat = br * W + bc if n.attr("storage_order", 0) == 0 else bc * H + br
    base = xp.arange(N * C).reshape(N, C, 1, 1) * (H * W)
    return wrap((flat + base).astype(np.int64), x)


def AveragePool(n: Node, x: Tensor) -> Tensor:
    """Average pooling; ``count_include_pad`` defaults to 0 as in ONNX."""
    kernel, strides, pairs, dilations, ceil_mode = _pool_args(n, x)
    return ops.avg_pool(x, kernel, strides, pairs, ceil_mode, bool(n.attr("count_include_pad", 0)), dilations)


def GlobalAveragePool(n: Node, x: Tensor) -> Tensor:
    return ops.global_average_pool(x)


def GlobalMaxPool(n: Node, x: Tensor) -> Tensor:
    return ops.global_max_pool(x)


# -- normalisation -------------------------------------------------------------------------------
def BatchNormalization(
    n: Node, x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor
) -> Tensor | tuple[Tensor, ...]:
    """Batch normalisation. With ``training_mode=1`` (opset 14+) the batch statistics normalise
    and the updated running statistics are returned as outputs 2 and 3, as ONNX defines them
    (biased batch variance); otherwise the running statistics normalise, except while a
    ``SONNXModel`` trains, where singa_lite's batch norm updates them in place."""
    eps, momentum = n.attr("epsilon", 1e-5), n.attr("momentum", 0.9)
    channels = x.shape[1] if x.ndim() >= 2 else None
    for what, p in (("scale", scale), ("B", bias), ("mean", mean), ("var", var)):
        if tuple(p.shape) != (channels,):
            raise n.fail(f"{what} must have shape ({channels},) (the input's channels), got {p.shape}")
    if n.attr("training_mode", 0) or (n.opset < 14 and n.n_outputs > 1):
        axes = [0, *range(2, x.ndim())]
        shape = (1, -1) + (1,) * (x.ndim() - 2)
        mu = ops.reduce_mean(x, axes)
        centred = ops.sub(x, ops.reshape(mu, shape))
        sigma2 = ops.reduce_mean(unary.square(centred), axes)
        inv = unary.reciprocal(unary.sqrt(ops.add(sigma2, _scalar(eps, x))))
        y = ops.add(ops.mul(centred, ops.reshape(ops.mul(inv, scale), shape)), ops.reshape(bias, shape))
        m = _scalar(momentum, x)
        keep = _scalar(1 - momentum, x)
        new_mean = ops.add(ops.mul(mean, m), ops.mul(mu, keep))
        new_var = ops.add(ops.mul(var, m), ops.mul(sigma2, keep))
        return (y, new_mean, new_var)[: n.n_outputs]
    return ops.batchnorm_2d(x, scale, bias, mean, var, momentum, eps, training=autograd.training)


def _scalar(v: float, like: Tensor) -> Tensor:
    return wrap(np.asarray(v, dtype=like.dtype), like)


def LayerNormalization(
    n: Node, x: Tensor, scale: Tensor, bias: Tensor | None = None
) -> Tensor | tuple[Tensor, ...]:
    """Normalise over axes ``[axis, ndim)``; optional outputs Mean and InvStdDev keep the
    reduced axes with size 1."""
    axis, eps = n.attr("axis", -1), n.attr("epsilon", 1e-5)
    y = ops.layer_norm(x, scale, bias, axis, eps)
    if n.n_outputs == 1:
        return y
    # The statistics, in the stash type (float32 by default), as ONNX's function body defines.
    xp = x.device.xp
    a = axis % x.ndim()
    xs = x.data.astype(np.float32) if n.attr("stash_type", 1) == 1 else x.data
    axes = tuple(range(a, x.ndim()))
    mu = xs.mean(axis=axes, keepdims=True)
    inv = 1 / xp.sqrt(((xs - mu) ** 2).mean(axis=axes, keepdims=True) + eps)
    return (y, wrap(mu.astype(xs.dtype), x), wrap(inv.astype(xs.dtype), x))[: n.n_outputs]


def InstanceNormalization(n: Node, x: Tensor, scale: Tensor, bias: Tensor) -> Tensor:
    return ops.instance_norm(x, scale, bias, n.attr("epsilon", 1e-5))


def LRN(n: Node, x: Tensor) -> Tensor:
    """Local response normalisation across channels. A window wider than ``2C`` channels covers
    them all wherever it is centred: it runs as one of ``2C`` with ``alpha`` scaled to keep
    ``alpha / size``, so a huge ``size`` costs neither its padding nor a loop per tap."""
    size, alpha = n.attr("size"), n.attr("alpha", 1e-4)
    if x.ndim() < 3:
        raise n.fail(f"expects an (N, C, spatial...) input, got shape {x.shape}")
    if size > 2 * x.shape[1]:
        size, alpha = 2 * x.shape[1], alpha * (2 * x.shape[1]) / size
    n.check_size([x.shape[0], x.shape[1] + size, *x.shape[2:]], max(4, x.dtype.itemsize), "padded input")
    return ops.lrn(x, size, alpha, n.attr("beta", 0.75), n.attr("bias", 1.0))


# -- resizing ------------------------------------------------------------------------------------
def Resize(
    n: Node,
    x: Tensor,
    roi: Tensor | None = None,
    scales: Tensor | None = None,
    sizes: Tensor | None = None,
) -> Tensor:
    """ONNX Resize (opset 10: ``X, scales``; 11+: ``X, roi, scales, sizes``; 18+: ``axes``,
    ``keep_aspect_ratio_policy``)."""
    if n.opset < 11:  # opset 10 had inputs (X, scales) and asymmetric coordinates
        scales, roi = roi, None
    ctm = n.attr("coordinate_transformation_mode", "half_pixel" if n.opset >= 11 else "asymmetric")
    scale_vals = n.opt_floats(scales) or None
    size_vals = n.opt_ints(sizes) or None
    rank = x.ndim()
    axes = [a % rank for a in n.attr("axes", range(rank))]
    roi_vals = None
    if ctm == "tf_crop_and_resize":
        given = n.opt_floats(roi) or []
        if len(given) != 2 * len(axes):
            raise n.fail(f"tf_crop_and_resize needs a roi of {2 * len(axes)} values, got {given}")
        starts, ends = [0.0] * rank, [1.0] * rank  # axes not listed keep their whole extent
        for k, a in enumerate(axes):
            starts[a], ends[a] = given[k], given[len(axes) + k]
        roi_vals = starts + ends
    if size_vals is not None:
        if len(size_vals) != len(axes):
            raise n.fail(f"sizes {size_vals} need one value per resized axis ({len(axes)})")
        size_vals = _aspect_sizes(n, x, axes, size_vals)
        full = list(x.shape)
        for a, s in zip(axes, size_vals):
            full[a] = s
        size_vals = list(n.check_size(full, x.dtype))
    elif scale_vals is not None:
        if len(scale_vals) != len(axes):
            raise n.fail(f"scales {scale_vals} need one value per resized axis ({len(axes)})")
        full_scales = [1.0] * rank
        for a, f in zip(axes, scale_vals):
            full_scales[a] = f
        scale_vals = full_scales
        _check_scaled(n, x, scale_vals)
    mode = n.attr("mode", "nearest")
    nearest = n.attr("nearest_mode", "round_prefer_floor" if n.opset >= 11 else "floor")
    return ops.resize(
        x,
        scale_vals,
        size_vals,
        mode,
        ctm,
        nearest,
        n.attr("cubic_coeff_a", -0.75),
        n.attr("exclude_outside", 0),
        bool(n.attr("antialias", 0)),
        roi_vals,
        n.attr("extrapolation_value", 0.0),
    )


def _aspect_sizes(n: Node, x: Tensor, axes: list[int], sizes: list[int]) -> list[int]:
    """``sizes`` after ``keep_aspect_ratio_policy`` (opset 18): one scale for every axis."""
    policy = n.attr("keep_aspect_ratio_policy", "stretch")
    if policy == "stretch":
        return sizes
    ratios = [s / x.shape[a] for a, s in zip(axes, sizes)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    return [round(scale * x.shape[a]) for a in axes]


def Upsample(n: Node, x: Tensor, scales: Tensor | None = None) -> Tensor:
    """Deprecated ONNX Upsample (opsets 7-9): scales as attribute (7-8) or input (9)."""
    vals = n.opt_floats(scales) or n.attr("scales")  # an input since opset 9, an attribute before
    if vals is None or len(vals) != x.ndim():
        raise n.fail(f"scales {vals} need one value per axis of the input {x.shape}")
    _check_scaled(n, x, vals)
    return ops.upsample(x, vals, n.attr("mode", "nearest"))


def _check_scaled(n: Node, x: Tensor, scales: Sequence[float]) -> None:
    """Check ``floor(shape * scales)`` (scales rounded to float32, as ONNX carries them)."""
    if not all(math.isfinite(f) and f > 0 for f in scales):
        raise n.fail(f"scales {list(scales)} must be finite and positive")
    n.check_size([math.floor(d * float(np.float32(f))) for d, f in zip(x.shape, scales)], x.dtype)


# -- recurrent layers ----------------------------------------------------------------------------
def _recurrent(
    n: Node,
    x: Tensor,
    W: Tensor,
    R: Tensor,
    B: Tensor | None,
    seq_lens: Tensor | None,
    states: list,
    P: Tensor | None = None,
) -> tuple:
    """Shared by LSTM, GRU and RNN: run each direction with singa_lite's sequence op and stack
    the results into ONNX's ``Y (T, dirs, N, H)`` and ``Y_h (dirs, N, H)`` (and ``Y_c``).
    ``P``: LSTM's peephole weights ``(dirs, 3H)``, gates i, o, f. ``seq_lens`` shorter than
    the sequence run through :class:`_LengthBatches`."""
    H = n.attr("hidden_size", R.shape[-1])
    direction = n.attr("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    _check_recurrent(n, x, W, R, B, dirs, H)
    if n.attr("clip") is not None or n.attr("input_forget", 0):
        raise n.fail("clip and input_forget are not supported")
    if n.attr("activations") is not None and not _default_activations(n, dirs):
        raise n.fail(f"activations {n.attr('activations')} are not supported")
    batch_first = n.attr("layout", 0) == 1
    if batch_first:
        x = ops.transpose(x, (1, 0, 2))
        states = [None if s is None else ops.transpose(s, (1, 0, 2)) for s in states]
    T, N, _ = x.shape
    for s in states:
        if s is not None and tuple(s.shape) != (dirs, N, H):
            raise n.fail(f"initial states must have shape {(dirs, N, H)} (layout 0), got {s.shape}")
    batches = _LengthBatches.of(n, seq_lens, T, N)
    order = GATE_ORDER[n.op]
    k = len(order)
    ys, finals = [], []
    for d in range(dirs):
        Wx = _gate_matrix(W, d, order, H)
        Wh = _gate_matrix(R, d, order, H)
        if B is None:
            zero = wrap(x.device.xp.zeros(k * H, dtype=x.dtype), x)
            Bx = Bh = zero
        else:
            Bd = ops.getitem(B, d)
            Bx = _gate_vector(ops.slice(Bd, [0], [k * H]), order, H)
            Bh = _gate_vector(ops.slice(Bd, [k * H], [2 * k * H]), order, H)
        init = [
            wrap(x.device.xp.zeros((N, H), dtype=x.dtype), x) if s is None else ops.getitem(s, d)
            for s in states
        ]
        Pd = None if P is None else _gate_vector(ops.getitem(P, d), PEEPHOLE_ORDER, H)
        cell = _DirectionRun(n, Wx, Wh, Bx, Bh, Pd)
        reverse = direction == "reverse" or d == 1
        y, *last = cell(x, init, reverse) if batches is None else batches.run(cell, x, init, reverse)
        ys.append(ops.unsqueeze(y, 1))
        finals.append([ops.unsqueeze(s, 0) for s in last])
    Y = ys[0] if dirs == 1 else ops.cat(ys, 1)
    outs = [Y] + [parts[0] if dirs == 1 else ops.cat(list(parts), 0) for parts in zip(*finals)]
    if batch_first:
        outs = [ops.transpose(outs[0], (2, 0, 1, 3))] + [ops.transpose(s, (1, 0, 2)) for s in outs[1:]]
    return tuple(outs[: n.n_outputs])


def _check_recurrent(n: Node, x: Tensor, W: Tensor, R: Tensor, B: Tensor | None, dirs: int, H: int) -> None:
    """The weights' shapes against ``direction``, ``hidden_size`` and the input, as ONNX defines them."""
    gates = len(GATE_ORDER[n.op])
    if x.ndim() != 3:
        raise n.fail(f"X must have 3 axes (sequence, batch, input), got shape {x.shape}")
    want = {"W": (dirs, gates * H, x.shape[2]), "R": (dirs, gates * H, H), "B": (dirs, 2 * gates * H)}
    for what, t in (("W", W), ("R", R), ("B", B)):
        if t is not None and tuple(t.shape) != want[what]:
            raise n.fail(
                f"{what} must have shape {want[what]} for {dirs} direction(s), hidden_size {H} and "
                f"{x.shape[2]} input features, got {t.shape}"
            )


class _DirectionRun:
    """One direction's weights in singa_lite's layout: called on ``x (T, N, I)`` and the
    initial states, runs the node's fused sequence op and returns ``(y, *final_states)``."""

    def __init__(self, n: Node, Wx: Tensor, Wh: Tensor, Bx: Tensor, Bh: Tensor, P: Tensor | None) -> None:
        self.n, self.P = n, P
        self.weights = (Wx, Wh, Bx, Bh)

    def __call__(self, x: Tensor, init: list, reverse: bool) -> tuple:
        n = self.n
        if n.op == "LSTM":
            return ops.lstm(x, init[0], init[1], *self.weights, reverse=reverse, P=self.P)
        if n.op == "GRU":
            return ops.gru(x, init[0], *self.weights, bool(n.attr("linear_before_reset", 0)), reverse)
        act = (n.attr("activations") or ["Tanh"])[0].lower()
        return ops.rnn(x, init[0], *self.weights, act, reverse)


class _LengthBatches:
    """ONNX ``sequence_lens`` shorter than the sequence, the way onnxruntime runs them.

    Item ``b`` of length ``L`` runs steps ``0..L-1`` only (the reverse direction from its own
    step ``L-1`` down to 0); ``Y`` is zero at the steps past its end, ``Y_h``/``Y_c`` are its
    states after its last step, and an item of length 0 has zero states. The items are sorted
    longest first, so that those still running at any step are a prefix of the batch, and the
    recurrence runs one fused sequence op per stretch of steps between two distinct lengths
    (PyTorch's packed sequences): at most ``T`` steps in all, and the hand-written backward of
    the sequence ops. The reverse direction first reverses each item within its own length,
    after which it is the forward problem; the outputs are reversed back the same way.
    Everything around the sequence ops is indexing, padding and concatenation, so gradients
    reach the weights and the initial states.
    """

    def __init__(self, lens: np.ndarray, T: int) -> None:
        self.T = T
        self.order = np.argsort(-lens, kind="stable")  # longest first
        self.inverse = np.argsort(self.order)
        self.lens = lens[self.order]

    @staticmethod
    def of(n: Node, seq_lens: Tensor | None, T: int, N: int) -> _LengthBatches | None:
        """The batches of a node's ``sequence_lens``; ``None`` where every item runs all ``T``
        steps (the plain sequence op then runs the whole batch)."""
        if seq_lens is None:
            return None
        lens = np.asarray(n.ints(seq_lens), dtype=np.int64)
        if lens.shape != (N,):
            raise n.fail(f"sequence_lens must have shape ({N},) (the batch), got {tuple(seq_lens.shape)}")
        if ((lens < 0) | (lens > T)).any():
            raise n.fail(f"sequence_lens must lie in [0, {T}] (the sequence length), got {lens.tolist()}")
        return None if (lens == T).all() else _LengthBatches(lens, T)

    def run(self, cell: _DirectionRun, x: Tensor, init: list, reverse: bool) -> tuple:
        """``cell`` over the valid steps of every item: ``(Y, *final_states)`` as the plain
        sequence op would return them, in the original batch order."""
        T, N, H = self.T, len(self.lens), init[0].shape[1]
        steps = self._steps(reverse)
        xs = ops.getitem(x, (steps, self.order[None, :]))  # sorted, each item reversed if asked
        states = [ops.gather(s, 0, self.order) for s in init]
        ys: list[Tensor] = []  # the outputs of each stretch of steps
        done: list[list[Tensor]] = [[] for _ in init]  # the final states of finished items
        start = 0
        for end in np.unique(self.lens[self.lens > 0]):
            running = int((self.lens >= end).sum())
            if running < states[0].shape[0]:  # drop the items that ended at `start`
                states = [ops.getitem(s, slice(0, running)) for s in states]
            y, *states = cell(ops.getitem(xs, (slice(start, int(end)), slice(0, running))), states, False)
            ys.append(ops.pad(y, pads=[0, 0, 0, 0, N - running, 0]))
            finished = int((self.lens == end).sum())
            for parts, s in zip(done, states):
                parts.append(ops.getitem(s, slice(running - finished, running)))
            start = int(end)
        if start < T:  # the steps after the longest item's end
            ys.append(wrap(x.device.xp.zeros((T - start, N, H), dtype=x.dtype), x))
        y_sorted = ops.cat(ys, 0) if len(ys) > 1 else ys[0]
        # `done` holds blocks of the sorted batch, shortest items first; the items of length 0
        # (zero states, as in onnxruntime) come before them, since they sit last when sorted.
        idle = N - int((self.lens > 0).sum())
        if idle:
            for parts in done:
                parts.insert(0, wrap(x.device.xp.zeros((idle, H), dtype=x.dtype), x))
        finals = [ops.gather(ops.cat(parts[::-1], 0), 0, self.inverse) for parts in done]
        # steps is its own inverse along time, so the same index undoes the reversal.
        y = ops.getitem(y_sorted, (steps[:, self.inverse], self.inverse[None, :]))
        return (y, *finals)

    def _steps(self, reverse: bool) -> np.ndarray:
        """``(T, N)``: the step of the input that sorted item ``b`` reads at its step ``t``."""
        t = np.arange(self.T)[:, None]
        if not reverse:
            return np.broadcast_to(t, (self.T, len(self.lens)))
        return np.where(t < self.lens, self.lens - 1 - t, t)


def _default_activations(n: Node, dirs: int) -> bool:
    defaults = {"LSTM": ["sigmoid", "tanh", "tanh"], "GRU": ["sigmoid", "tanh"], "RNN": ["tanh"]}
    acts = [a.lower() for a in n.attr("activations")]
    if n.op == "RNN":
        return all(a in ("tanh", "relu") for a in acts) and len(set(acts)) == 1
    return acts == defaults[n.op] * dirs


def _gate_matrix(W: Tensor, d: int, order: tuple[int, ...], H: int) -> Tensor:
    """ONNX ``W[d]`` (gates*H, I) as singa_lite's ``(I, gates*H)`` in singa_lite's gate order."""
    k = len(order)
    w = ops.getitem(W, d)
    if order != tuple(range(k)):
        w = ops.reshape(ops.getitem(ops.reshape(w, (k, H, -1)), np.asarray(order)), (k * H, -1))
    return ops.transpose(w, (1, 0))


def _gate_vector(b: Tensor, order: tuple[int, ...], H: int) -> Tensor:
    k = len(order)
    if order == tuple(range(k)):
        return b
    return ops.reshape(ops.getitem(ops.reshape(b, (k, H)), np.asarray(order)), (k * H,))


def LSTM(
    n: Node,
    X: Tensor,
    W: Tensor,
    R: Tensor,
    B: Tensor | None = None,
    sequence_lens: Tensor | None = None,
    initial_h: Tensor | None = None,
    initial_c: Tensor | None = None,
    P: Tensor | None = None,
) -> tuple:
    """LSTM with outputs ``Y, Y_h, Y_c``; forward, reverse or bidirectional; ``layout`` 0 or 1;
    peephole weights ``P`` optional."""
    if P is not None:
        dirs, H = W.shape[0], n.attr("hidden_size", R.shape[-1])
        if tuple(P.shape) != (dirs, 3 * H):
            raise n.fail(f"peephole weights P must have shape {(dirs, 3 * H)}, got {tuple(P.shape)}")
    return _recurrent(n, X, W, R, B, sequence_lens, [initial_h, initial_c], P)


def GRU(
    n: Node,
    X: Tensor,
    W: Tensor,
    R: Tensor,
    B: Tensor | None = None,
    sequence_lens: Tensor | None = None,
    initial_h: Tensor | None = None,
) -> tuple:
    """GRU with outputs ``Y, Y_h``; ``linear_before_reset`` 0 (ONNX default) or 1."""
    return _recurrent(n, X, W, R, B, sequence_lens, [initial_h])


def RNN(
    n: Node,
    X: Tensor,
    W: Tensor,
    R: Tensor,
    B: Tensor | None = None,
    sequence_lens: Tensor | None = None,
    initial_h: Tensor | None = None,
) -> tuple:
    """Elman RNN (tanh or relu) with outputs ``Y, Y_h``."""
    return _recurrent(n, X, W, R, B, sequence_lens, [initial_h])

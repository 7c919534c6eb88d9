"""ONNX handlers for the remaining operators of the default domain: further activations,
normalisations and losses, Det, LpPool, DeformConv and MaxRoiPool, the stateful sequence
operators of opset 27 (LinearAttention, CausalConvWithState), the bitwise operators and BitCast,
EyeLike, TfIdfVectorizer and the random generators.

Float results go through singa_lite's differentiable ops (``ops.activation_extra``,
``ops.norm_extra``, ``ops.loss_nd``, ``ops.deform``, ``ops.stateful``); bitwise, identity-matrix,
n-gram and random results carry no gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper

from singa_lite import backend, ops
from singa_lite.ops import unary
from singa_lite.sonnx.import_ops.base import HELD_AS_FLOAT32, Node, storage_dtype, wrap
from singa_lite.sonnx.import_ops.math import _reduce
from singa_lite.sonnx.import_ops.nn import _pool_args
from singa_lite.sonnx.import_ops.shape import onnx_dtype
from singa_lite.tensor import Tensor

# ruff: noqa: N802

__all__ = [
    "Bernoulli",
    "BitCast",
    "BitShift",
    "BitwiseAnd",
    "BitwiseNot",
    "BitwiseOr",
    "BitwiseXor",
    "CausalConvWithState",
    "Celu",
    "DeformConv",
    "Det",
    "EyeLike",
    "GlobalLpPool",
    "Hardmax",
    "LinearAttention",
    "LpNormalization",
    "LpPool",
    "MaxRoiPool",
    "MeanVarianceNormalization",
    "Mish",
    "Multinomial",
    "NegativeLogLikelihoodLoss",
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
    "ReduceLogSum",
    "Shrink",
    "SoftmaxCrossEntropyLoss",
    "SwiGLU",
    "Swish",
    "TfIdfVectorizer",
    "ThresholdedRelu",
]  # fmt: skip


# -- activations -----------------------------------------------------------------------------------
def Celu(n: Node, x: Tensor) -> Tensor:
    return ops.celu(x, n.attr("alpha", 1.0))


def ThresholdedRelu(n: Node, x: Tensor) -> Tensor:
    return ops.thresholded_relu(x, n.attr("alpha", 1.0))


def Shrink(n: Node, x: Tensor) -> Tensor:
    return ops.shrink(x, n.attr("lambd", 0.5), n.attr("bias", 0.0))


def Mish(n: Node, x: Tensor) -> Tensor:
    return ops.mish(x)


def Swish(n: Node, x: Tensor) -> Tensor:
    return ops.swish(x, n.attr("alpha", 1.0))


def SwiGLU(n: Node, a: Tensor, b: Tensor) -> Tensor:
    if a.shape != b.shape:
        raise n.fail(f"the gate {a.shape} and the value {b.shape} must have one shape")
    return ops.swiglu(a, b, n.attr("alpha", 1.0))


def Hardmax(n: Node, x: Tensor) -> Tensor:
    """1 at the first maximum along ``axis`` (opset 13+), or per row of the 2-D coercion at
    ``axis`` (before)."""
    if n.opset >= 13:
        return ops.hardmax(x, n.attr("axis", -1))
    y = ops.hardmax(ops.flatten(x, n.attr("axis", 1)), 1)
    return ops.reshape(y, x.shape)


# -- normalisation, pooling, reductions, losses ---------------------------------------------------
def LpNormalization(n: Node, x: Tensor) -> Tensor:
    p = n.attr("p", 2)
    if p not in (1, 2):
        raise n.fail(f"p must be 1 or 2, got {p}")
    return ops.lp_normalization(x, n.attr("axis", -1), p)


def MeanVarianceNormalization(n: Node, x: Tensor) -> Tensor:
    return ops.mean_variance_normalization(x, n.attr("axes", [0, 2, 3]))


def LpPool(n: Node, x: Tensor) -> Tensor:
    """``(sum |x|^p)^(1/p)`` over each window; geometry as AveragePool's."""
    kernel, strides, pairs, dilations, ceil_mode = _pool_args(n, x)
    return ops.lp_pool(x, kernel, strides, pairs, dilations, ceil_mode, float(n.attr("p", 2)))


def GlobalLpPool(n: Node, x: Tensor) -> Tensor:
    """LpPool with one window over all spatial axes."""
    if x.ndim() < 3:
        raise n.fail(f"expects (N, C, spatial...), got shape {x.shape}")
    return ops.lp_pool(x, list(x.shape[2:]), 1, 0, 1, False, float(n.attr("p", 2)))


def ReduceLogSum(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
    return _reduce(n, x, axes, 18, lambda t, a, k: unary.log(ops.reduce_sum(t, a, k)))


def _loss_args(n: Node, target: Tensor, weight: Tensor | None) -> tuple:
    if target.dtype.kind not in "iu":
        raise n.fail(f"the target must hold integer class labels, got {target.dtype}")
    return weight, n.attr("reduction", "mean"), n.attr("ignore_index")


def NegativeLogLikelihoodLoss(n: Node, x: Tensor, target: Tensor, weight: Tensor | None = None) -> Tensor:
    return ops.negative_log_likelihood_loss(x, target, *_loss_args(n, target, weight))


def SoftmaxCrossEntropyLoss(
    n: Node, scores: Tensor, labels: Tensor, weights: Tensor | None = None
) -> Tensor | tuple[Tensor, Tensor]:
    loss, log_prob = ops.softmax_cross_entropy_loss(scores, labels, *_loss_args(n, labels, weights))
    return (loss, log_prob) if n.n_outputs > 1 else loss


def Det(n: Node, x: Tensor) -> Tensor:
    if x.ndim() < 2 or x.shape[-1] != x.shape[-2]:
        raise n.fail(f"expects square matrices in the last two axes, got shape {x.shape}")
    return ops.det(x)


# -- deformable convolution, ROI pooling ----------------------------------------------------------
def DeformConv(
    n: Node, x: Tensor, w: Tensor, offset: Tensor, b: Tensor | None = None, mask: Tensor | None = None
) -> Tensor:
    """2-D deformable convolution (``ops.deform_conv2d``); other ranks are refused."""
    if x.ndim() != 4 or w.ndim() != 4 or offset.ndim() != 4:
        raise n.fail(
            f"supports 2-D inputs (N, C, H, W) only, got x {x.shape}, W {w.shape}, offset {offset.shape}"
        )
    kernel = n.attr("kernel_shape", list(w.shape[2:]))
    if list(kernel) != list(w.shape[2:]):
        raise n.fail(f"kernel_shape {kernel} does not match W {w.shape}")
    pads = n.attr("pads", [0, 0, 0, 0])
    if len(pads) != 4 or min(pads) < 0:
        raise n.fail(f"pads must be 4 non-negative ints, got {pads}")
    G = n.attr("offset_group", 1)
    K = w.shape[2] * w.shape[3]
    n.check_size(
        [x.shape[0], x.shape[1], K, *offset.shape[2:]], 8 * max(x.dtype.itemsize, 8), "sample workspace"
    )
    return ops.deform_conv2d(
        x, w, offset, b, mask, n.attr("strides", 1), pads, n.attr("dilations", 1), n.attr("group", 1), G
    )


def MaxRoiPool(n: Node, x: Tensor, rois: Tensor) -> Tensor:
    """Caffe's max ROI pooling into ``pooled_shape`` bins (``ops.max_roi_pool``)."""
    shape = n.attr("pooled_shape")
    if shape is None or len(shape) != 2 or min(shape) < 1:
        raise n.fail(f"pooled_shape must be two positive ints, got {shape}")
    if x.ndim() != 4 or rois.ndim() != 2:
        raise n.fail(f"expects X (N, C, H, W) and rois (R, 5), got {x.shape} and {rois.shape}")
    n.check_size([rois.shape[0], x.shape[1], *shape], x.dtype)
    n.check_size([rois.shape[0], *x.shape[1:]], 2 * x.dtype.itemsize, "ROI workspace")
    if shape[0] * shape[1] > 4096:
        raise n.fail(f"pooled_shape {shape} has more than 4096 bins")
    return ops.max_roi_pool(x, rois, shape, n.attr("spatial_scale", 1.0))


# -- stateful sequence operators (opset 27) -------------------------------------------------------
def CausalConvWithState(
    n: Node, x: Tensor, weight: Tensor, bias: Tensor | None = None, past: Tensor | None = None
) -> tuple[Tensor, Tensor] | Tensor:
    y, present = ops.causal_conv_with_state(x, weight, bias, past, n.attr("activation", "none"))
    return (y, present) if n.n_outputs > 1 else y


def LinearAttention(
    n: Node,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    past: Tensor | None = None,
    decay: Tensor | None = None,
    beta: Tensor | None = None,
) -> tuple[Tensor, Tensor] | Tensor:
    """Linear attention (``update_rule`` linear, gated, delta or gated_delta); ``chunk_size`` is a
    speed hint of the definition and changes nothing here."""
    hq, hkv = n.attr("q_num_heads"), n.attr("kv_num_heads")
    if hq is None or hkv is None:
        raise n.fail("q_num_heads and kv_num_heads are required")
    y, state = ops.linear_attention(
        q, k, v, hq, hkv, past, decay, beta, n.attr("scale", 0.0), n.attr("update_rule", "gated_delta")
    )
    return (y, state) if n.n_outputs > 1 else y


# -- bitwise operators (integers; no gradient) ----------------------------------------------------
def _bitwise(fn: str) -> Any:
    def handler(n: Node, a: Tensor, b: Tensor) -> Tensor:
        _integers(n, a, b)
        return wrap(getattr(a.device.xp, fn)(a.data, b.data), a)

    handler.__doc__ = f"Elementwise {fn} of two integer tensors."
    return handler


def _integers(n: Node, *xs: Tensor) -> None:
    for x in xs:
        if x.dtype.kind not in "iub":
            raise n.fail(f"expects integer tensors, got {x.dtype}")
    try:
        np.broadcast_shapes(*(x.shape for x in xs))
    except ValueError:
        raise n.fail(f"shapes {' and '.join(str(x.shape) for x in xs)} do not broadcast") from None


BitwiseAnd = _bitwise("bitwise_and")
BitwiseOr = _bitwise("bitwise_or")
BitwiseXor = _bitwise("bitwise_xor")


def BitwiseNot(n: Node, x: Tensor) -> Tensor:
    """~x, in x's integer type (an int4 held as int8 is complemented there; the graph's output
    cast keeps the low bits, which are the same)."""
    _integers(n, x)
    return wrap(x.device.xp.invert(x.data), x)


def BitShift(n: Node, x: Tensor, y: Tensor) -> Tensor:
    """x shifted left or right (``direction``) by y bits, within x's width.

    A shift by the width or more gives 0 (-1 for a negative x shifted right: the sign fills),
    and so does a negative shift count (ONNX leaves both undefined; C's shift too).
    """
    _integers(n, x, y)
    xp = x.device.xp
    direction = n.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise n.fail(f"direction must be LEFT or RIGHT, got {direction!r}")
    a, s = xp.broadcast_arrays(x.data, y.data.astype(x.dtype, copy=False))
    bits = 8 * x.dtype.itemsize
    inside = (s >= 0) & (s < bits)
    safe = xp.where(inside, s, 0)
    if direction == "LEFT":
        r = xp.where(inside, xp.left_shift(a, safe), 0)
    else:
        fill = xp.where(a < 0, -1, 0) if x.dtype.kind == "i" else 0
        r = xp.where(inside, xp.right_shift(a, safe), fill)
    return wrap(r.astype(x.dtype, copy=False), x)


def BitCast(n: Node, x: Tensor) -> Tensor:
    """The bits of x read as the element type ``to`` (of the same width).

    A value held in a wider type (bfloat16 or a float8 as float32, int4 as int8) is first put
    back in the type the model declares for it; where the model declares none, an integer is
    narrowed to ``to``'s width (its low bits).
    """
    target = np.dtype(helper.tensor_dtype_to_np_dtype(n.attr("to")))
    width = target.itemsize
    xp = x.device.xp
    data = x.data
    declared = n.declared_type(0)
    if declared is not None and declared != data.dtype and storage_dtype(declared) == data.dtype:
        data = backend.to_host(data).astype(declared)  # ml_dtypes' types live on the host
    elif data.dtype.itemsize != width and data.dtype.kind in "iu" and data.dtype.itemsize > width:
        data = (data & ((1 << (8 * width)) - 1)).astype(np.dtype(f"u{width}"))
    if data.dtype.itemsize != width:
        raise n.fail(f"cannot reinterpret {data.dtype} as {target}: their widths differ")
    if isinstance(data, np.ndarray) or target in HELD_AS_FLOAT32 or storage_dtype(target) != target:
        # the bits as the target type on the host, then held as singa_lite holds that type
        bits = np.ascontiguousarray(backend.to_host(data)).reshape(-1)
        return wrap(bits.view(target).reshape(data.shape).astype(storage_dtype(target)), x)
    return wrap(xp.ascontiguousarray(data).reshape(-1).view(target).reshape(data.shape), x)


# -- text features --------------------------------------------------------------------------------
def TfIdfVectorizer(n: Node, x: Tensor) -> Tensor:
    """Counts of the pool's n-grams of token ids in each row of ``x`` ((C,) or (B, C)), as TF,
    IDF (``weights`` where present) or TF-IDF (counts times ``weights``); float32.

    An n-gram of length n > 1 is counted once for every skip distance 1 .. max_skip_count + 1
    (tokens ``d`` apart); unigrams once. A pool n-gram listed twice counts at its last index.
    """
    if n.attr("pool_strings"):
        raise n.fail("string pools need string tensors, which singa_lite has no dtype for")
    if x.dtype.kind not in "iu" or x.ndim() not in (1, 2):
        raise n.fail(f"expects integer token ids of shape (C,) or (B, C), got {x.dtype} {x.shape}")
    pool = list(n.attr("pool_int64s", []))
    counts, indexes = list(n.attr("ngram_counts", [])), list(n.attr("ngram_indexes", []))
    lo, hi, skips = n.attr("min_gram_length", 1), n.attr("max_gram_length", 1), n.attr("max_skip_count", 0)
    mode, weights = n.attr("mode", "TF"), n.attr("weights")
    if (
        mode not in ("TF", "IDF", "TFIDF")
        or not indexes
        or min(indexes) < 0
        or not 1 <= lo <= hi
        or skips < 0
    ):
        raise n.fail(
            f"bad settings: mode {mode!r}, gram lengths [{lo}, {hi}], max_skip_count {skips}, "
            f"ngram_indexes {indexes[:8]} (non-negative, one per pool n-gram)"
        )
    size = max(indexes) + 1
    if weights is not None and len(weights) < size:
        raise n.fail(f"{len(weights)} weights for {size} outputs")
    grams: dict[int, dict[tuple, int]] = {}  # length -> n-gram -> output column (the last wins)
    ends = [*counts[1:], len(pool)]
    serial = 0
    for length, (start, end) in enumerate(zip(counts, ends), 1):
        for k in range(start, end - length + 1, length):
            if serial >= len(indexes):
                raise n.fail(f"{len(indexes)} ngram_indexes for more n-grams in the pool")
            if lo <= length <= hi:
                grams.setdefault(length, {})[tuple(pool[k : k + length])] = indexes[serial]
            serial += 1
    xp = x.device.xp
    rows = x.data.reshape(1, -1) if x.ndim() == 1 else x.data
    B, C = rows.shape
    out = xp.zeros(n.check_size([B, size], np.float64))
    for length, table in grams.items():
        wanted = xp.asarray(list(table))  # (k, length)
        # (k, size): row j is one-hot at n-gram j's column (columns may repeat)
        n.check_size([len(table), size], np.float64, "n-gram columns")
        to_column = xp.zeros((len(table), size))
        to_column[xp.arange(len(table)), xp.asarray(list(table.values()))] = 1
        for d in range(1, (skips + 1 if length > 1 else 1) + 1):
            span = d * (length - 1)
            if span >= C:
                break
            n.check_size([B, C - span, len(table), length], bool, "n-gram workspace")
            at = xp.arange(C - span)[:, None] + d * xp.arange(length)
            hits = (rows[:, at][:, :, None, :] == wanted[None, None]).all(axis=-1).sum(axis=1)
            out += hits @ to_column
    w = xp.asarray(weights if weights else [1.0] * size, np.float64)[:size]
    y = out if mode == "TF" else (out > 0) * w if mode == "IDF" else out * w
    return wrap((y.reshape(-1) if x.ndim() == 1 else y).astype(np.float32), x)


# -- constants ------------------------------------------------------------------------------------
def EyeLike(n: Node, x: Tensor) -> Tensor:
    """A matrix of x's shape with ones on diagonal ``k`` (dtype ``dtype``, else x's)."""
    if x.ndim() != 2:
        raise n.fail(f"expects a 2-D input, got shape {x.shape}")
    dtype = onnx_dtype(n, n.attr("dtype")) if n.attr("dtype") is not None else x.dtype
    n.check_size(x.shape, dtype)
    return wrap(x.device.xp.eye(*x.shape, k=n.attr("k", 0), dtype=dtype), x)


# -- random generators (from the device's seeded generator; ONNX's seed is not reproduced) ------
def _random_dtype(n: Node, like: Tensor | None) -> np.dtype:
    code = n.attr("dtype")
    if code is not None:
        return onnx_dtype(n, code)
    return np.dtype(np.float32) if like is None else like.dtype


def _draw(n: Node, like: Tensor, shape: Any, dtype: np.dtype, normal: bool) -> Tensor:
    shape = n.check_size(shape, dtype)
    rng = like.device.rng
    if normal:
        vals = rng.standard_normal(shape) * n.attr("scale", 1.0) + n.attr("mean", 0.0)
    else:
        low, high = n.attr("low", 0.0), n.attr("high", 1.0)
        vals = rng.random(shape) * (high - low) + low
    return wrap(like.device.xp.asarray(vals).astype(dtype), like)


def RandomUniformLike(n: Node, x: Tensor) -> Tensor:
    return _draw(n, x, x.shape, _random_dtype(n, x), normal=False)


def RandomNormalLike(n: Node, x: Tensor) -> Tensor:
    return _draw(n, x, x.shape, _random_dtype(n, x), normal=True)


def _anchor() -> Tensor:
    from singa_lite import device

    dev = device.get_default_device()
    return Tensor._wrap(dev.xp.zeros(()), dev, False, None, 0)


def RandomUniform(n: Node) -> Tensor:
    return _draw(n, _anchor(), n.attr("shape"), _random_dtype(n, None), normal=False)


def RandomNormal(n: Node) -> Tensor:
    return _draw(n, _anchor(), n.attr("shape"), _random_dtype(n, None), normal=True)


def Multinomial(n: Node, x: Tensor) -> Tensor:
    """``sample_size`` class indices per row, drawn with probabilities ``softmax(x)`` (x holds
    unnormalised log-probabilities, (batch, classes))."""
    if x.ndim() != 2 or x.shape[1] < 1:
        raise n.fail(f"expects (batch, classes) log-probabilities, got shape {x.shape}")
    count = n.attr("sample_size", 1)
    if count < 1:
        raise n.fail(f"sample_size must be positive, got {count}")
    dtype = onnx_dtype(n, n.attr("dtype", 6))
    if dtype.kind not in "iu":
        raise n.fail(f"dtype must be int32 or int64, got {dtype}")
    n.check_size([x.shape[0], count, x.shape[1]], bool, "sample workspace")
    xp = x.device.xp
    z = x.data.astype(np.float64)
    p = xp.exp(z - z.max(axis=1, keepdims=True))
    edges = xp.cumsum(p, axis=1) / p.sum(axis=1, keepdims=True)
    u = xp.asarray(x.device.rng.random((x.shape[0], count)))
    picked = (edges[:, None, :] <= u[..., None]).sum(axis=-1)
    return wrap(xp.minimum(picked, x.shape[1] - 1).astype(dtype), x)


def Bernoulli(n: Node, p: Tensor) -> Tensor:
    """1 with probability p, else 0 (in ``dtype``, else p's type)."""
    dtype = _random_dtype(n, p)
    u = p.device.rng.random(n.check_size(p.shape, dtype))
    return wrap((p.device.xp.asarray(u) < p.data).astype(dtype), p)

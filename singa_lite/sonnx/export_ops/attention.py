"""Converters of the transformer ops: attention, RMS and group norm, rotary embedding.

Each has an ONNX operator from some opset on (``Attention`` and ``RMSNormalization`` from 23,
``GroupNormalization`` with per-channel scale and bias from 21) and a form in older operators
below it. Rotary embedding is always written in elementwise operators: ONNX's
``RotaryEmbedding`` wants 4-D input and position ids, and the plain form runs everywhere.
(The exporter's side of :mod:`singa_lite.sonnx.import_ops.attention`.)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa_lite.ops import attention, embeddings, normalization
from singa_lite.sonnx.export_ops.base import GraphBuilder, Value, converts, onnx_dtype


def _stash(dtype: Any) -> int:
    """The precision ONNX normalisations compute in: float32, or float64 for float64 input
    (their default, float32, would round a float64 model's statistics)."""
    return onnx_dtype(np.float64) if np.dtype(dtype) == np.float64 else onnx_dtype(np.float32)


# -- attention -----------------------------------------------------------------------------------
def _as_4d(g: GraphBuilder, x: Value, batch: int) -> str:
    """``(*batch, H, T, D)`` as ``(B, H, T, D)``: ONNX Attention takes one batch axis."""
    return x.name if x.ndim == 4 else g.reshape(x.name, [batch, *x.shape[-3:]])


def _mask_4d(g: GraphBuilder, op: Any, mask: Value, q: Value) -> str:
    """The mask, broadcasting to ``(*batch, Hq, L, S)``, as one broadcasting to ``(B, Hq, L, S)``."""
    full = (1,) * (q.ndim - mask.ndim) + mask.shape
    lead, last = full[:-3], list(full[-3:])
    name = mask.name
    if mask.dtype.kind == "f":
        name = g.as_type(mask, q.dtype)
    if any(d != 1 for d in lead):
        expanded = g.one("Expand", [name, g.ints([*op.batch, *last])])
        return g.reshape(expanded, [math.prod(op.batch), *last])
    return name if mask.ndim == 4 else g.reshape(name, [1, *last])


@converts(attention.ScaledDotProductAttention)
def _attention(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    q, k, v = xs[:3]
    batch = math.prod(op.batch)
    qn, kn, vn = (_as_4d(g, x, batch) for x in (q, k, v))
    mask = _mask_4d(g, op, xs[3], q) if len(xs) > 3 else None
    out = ys[0].name if q.ndim == 4 else None
    if g.opset >= 23:
        inputs = [qn, kn, vn] + ([mask] if mask else [])
        y = g.one("Attention", inputs, out, is_causal=int(op.is_causal), scale=float(op.scale_))
    else:
        kind = xs[3].dtype.kind if len(xs) > 3 else ""
        y = _attention_matmul(g, op, (qn, kn, vn), (mask, kind), v.shape[-1], q.dtype, out)
    if out is None:
        g.reshape(y, list(ys[0].shape), ys[0].name)


def _attention_matmul(
    g: GraphBuilder, op: Any, qkv: tuple[str, str, str], masking: tuple, ev: int, dt: Any, out: str | None
) -> str:
    """Attention in MatMul and Softmax (before opset 23). The query heads sharing a key head
    are folded into its rows, as the op does, so no key or value is repeated."""
    (q, k, v), (mask, kind) = qkv, masking
    b, hk, grp, length, keys = op.dims
    hq = hk * grp
    s = g.one("MatMul", [g.reshape(q, [b, hk, grp * length, -1]), g.one("Transpose", [k], perm=[0, 1, 3, 2])])
    s = g.reshape(g.one("Mul", [s, g.scalar(float(op.scale_), dt)]), [b, hq, length, keys])
    if mask is not None:
        s = g.one("Where", [mask, s, g.scalar(-np.inf, dt)]) if kind == "b" else g.one("Add", [s, mask])
    if op.is_causal:
        s = g.one("Where", [g.const(np.tri(length, keys, dtype=bool)), s, g.scalar(-np.inf, dt)])
    p = g.one("Softmax", [s], axis=3)
    # A row that sees no key is all -inf: Softmax gives NaN there, the op gives zeros.
    p = g.one("Where", [g.one("IsNaN", [p]), g.scalar(0.0, dt), p])
    y = g.one("MatMul", [g.reshape(p, [b, hk, grp * length, keys]), v])
    return g.reshape(y, [b, hq, length, ev], out)


# -- normalisation -------------------------------------------------------------------------------
@converts(normalization.RMSNorm)
def _rms_norm(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x, scale = xs
    if g.opset >= 23:
        g.one(
            "RMSNormalization",
            [x.name, scale.name],
            ys[0].name,
            axis=op.axes[0],
            epsilon=op.eps_,
            stash_type=_stash(x.dtype),
        )
        return
    wide = np.float32 if x.dtype == np.float16 else x.dtype  # the op's float16 sums run in float32
    xf = g.as_type(x, wide)
    ms = g.reduce("ReduceMean", g.one("Mul", [xf, xf]), op.axes, True)
    rms = g.one("Sqrt", [g.one("Add", [ms, g.scalar(op.eps_, wide)])])
    y = g.one("Div", [xf, rms])
    y = g.cast(y, x.dtype) if wide != x.dtype else y
    g.one("Mul", [y, scale.name], ys[0].name)


@converts(normalization.GroupNorm)
def _group_norm(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x, scale = xs[:2]
    c, dt = x.shape[1], x.dtype
    bias = xs[2].name if len(xs) > 2 else g.const(np.zeros(c, dt))
    if g.opset >= 21:
        g.one(
            "GroupNormalization",
            [x.name, scale.name, bias],
            ys[0].name,
            epsilon=op.eps,
            num_groups=op.groups,
            stash_type=_stash(dt),
        )
        return
    # InstanceNormalization of (N, G, rest) normalises each (sample, group); the per-channel
    # affine follows (GroupNormalization-18 took per-group scale and bias instead).
    grouped = g.reshape(x.name, [x.shape[0], op.groups, -1])
    ones, zeros = g.const(np.ones(op.groups, dt)), g.const(np.zeros(op.groups, dt))
    normed = g.reshape(g.one("InstanceNormalization", [grouped, ones, zeros], epsilon=op.eps), list(x.shape))
    view = [c] + [1] * (x.ndim - 2)
    y = g.one("Mul", [normed, g.reshape(scale.name, view)])
    g.one("Add", [y, g.reshape(bias, view)], ys[0].name)


# -- rotary embedding ----------------------------------------------------------------------------
def _slice_last(g: GraphBuilder, x: str, start: int, end: int, step: int = 1) -> str:
    return g.one("Slice", [x, g.ints([start]), g.ints([end]), g.ints([-1]), g.ints([step])])


@converts(embeddings.Rotary)
def _rotary(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x, cos, sin = xs
    r, d = cos.shape[-1], x.shape[-1]
    c, s = g.as_type(cos, x.dtype), g.as_type(sin, x.dtype)
    if op.interleaved:
        a, b = _slice_last(g, x.name, 0, 2 * r, 2), _slice_last(g, x.name, 1, 2 * r, 2)
    else:
        a, b = _slice_last(g, x.name, 0, r), _slice_last(g, x.name, r, 2 * r)
    ya = g.one("Sub", [g.one("Mul", [a, c]), g.one("Mul", [b, s])])
    yb = g.one("Add", [g.one("Mul", [a, s]), g.one("Mul", [b, c])])
    if op.interleaved:
        pairs = g.one("Concat", [g.unsqueeze(ya, [-1]), g.unsqueeze(yb, [-1])], axis=-1)
        rotated = [g.reshape(pairs, [*x.shape[:-1], 2 * r])]
    else:
        rotated = [ya, yb]
    rest = [_slice_last(g, x.name, 2 * r, d)] if 2 * r < d else []
    g.one("Concat", [*rotated, *rest], ys[0].name, axis=-1)

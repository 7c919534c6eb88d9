"""ONNX handlers for transformer operators: Attention, RMSNormalization, GroupNormalization,
RotaryEmbedding.

``Attention`` runs on ``scaled_dot_product_attention`` (blocked over the keys) whenever the node
asks only for the output (and the caches): the masks that follow from shapes and attributes
(bottom-right causal frontier after a cache, sliding windows, ``nonpad_kv_seqlen`` padding) are
built on the host as one boolean mask and joined to ``attn_mask``. Soft-capping, the
``qk_matmul_output`` output and ``softmax_precision`` need the whole score matrix; those nodes
run as MatMul, Softmax and MatMul ops, as ONNX's own function body does.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import helper

from singa_lite import ops
from singa_lite.ops.attention import DEFAULT_BLOCK
from singa_lite.sonnx.import_ops.base import Node, const
from singa_lite.tensor import Tensor

# ruff: noqa: N802  (handlers and ONNX input names follow the ONNX spelling)

__all__ = ["Attention", "GroupNormalization", "RMSNormalization", "RotaryEmbedding"]


def _split_heads(n: Node, x: Tensor, heads: int | None, what: str) -> Tensor:
    """``(B, T, heads * D)`` -> ``(B, heads, T, D)`` (3-D Attention and RotaryEmbedding input)."""
    if not heads or x.shape[2] % heads:
        raise n.fail(f"3-D {what} of shape {x.shape} needs a head count dividing {x.shape[2]}, got {heads}")
    b, t, hidden = x.shape
    return ops.transpose(ops.reshape(x, (b, t, heads, hidden // heads)), (0, 2, 1, 3))


def _merge_heads(y: Tensor) -> Tensor:
    b, h, t, d = y.shape
    return ops.reshape(ops.transpose(y, (0, 2, 1, 3)), (b, t, h * d))


def _allowed(n: Node, shape: tuple[int, int], past: int, nonpad: np.ndarray | None) -> np.ndarray | None:
    """Which keys each query may see by the causal, window and padding rules, as a bool array
    ``(1 or B, 1, L, S)``; None where they allow everything. Causal and window positions are
    offset-aligned (bottom-right): the queries come after ``past`` cached keys, or after
    ``nonpad - L`` keys per batch with an external cache."""
    length, keys = shape
    causal = bool(n.attr("is_causal", 0))
    left, right = n.attr("left_window_size", -1), n.attr("right_window_size", -1)
    if not causal and left < 0 and right < 0 and nonpad is None:
        return None
    offset = np.asarray(past if nonpad is None else nonpad - length).reshape(-1, 1, 1)
    i, j = np.arange(length)[:, None], np.arange(keys)[None, :]
    diff = i + offset - j  # (1 or B, L, S): how far key j lies before query i
    ok = np.ones(diff.shape, bool)
    if causal:
        ok &= diff >= 0
    if left >= 0:
        ok &= diff <= left
    if right >= 0:
        ok &= -diff <= right
    if nonpad is not None:
        ok &= j < nonpad.reshape(-1, 1, 1)
    return ok[:, None]


def _join(mask: Tensor | None, allowed: np.ndarray | None, like: Tensor, keys: int) -> Tensor | None:
    """``attn_mask`` (padded to ``keys`` with hidden keys) combined with the ``allowed`` mask."""
    if mask is not None and mask.shape[-1] < keys:
        fill = False if mask.dtype.kind == "b" else -np.inf
        nd = mask.ndim()
        pad = [0] * nd + [0] * (nd - 1) + [keys - mask.shape[-1]]
        mask = ops.pad(mask, "constant", pad, fill)
    if allowed is None:
        return mask
    rule = const(allowed, like, np.bool_)
    if mask is None:
        return rule
    if mask.dtype.kind == "b":
        return ops.logical_and(mask, rule)
    hidden = const(np.where(allowed, 0.0, -np.inf), like, mask.dtype)
    return ops.add(mask, hidden)


def Attention(
    n: Node,
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    attn_mask: Tensor | None = None,
    past_key: Tensor | None = None,
    past_value: Tensor | None = None,
    nonpad_kv_seqlen: Tensor | None = None,
) -> Tensor | tuple[Tensor, ...]:
    """Attention-23/24/25: 3-D (with ``q_num_heads``/``kv_num_heads``) or 4-D inputs, GQA, a
    boolean or additive ``attn_mask``, KV caches, ``is_causal``, windows, ``softcap``, ``scale``
    and the ``qk_matmul_output`` modes."""
    three_d = Q.ndim() == 3
    if not Q.ndim() == K.ndim() == V.ndim() or Q.ndim() not in (3, 4):
        raise n.fail(f"Q, K and V must all be 3-D or all 4-D, got {Q.shape}, {K.shape}, {V.shape}")
    if (past_key is None) != (past_value is None) or (past_key is not None and nonpad_kv_seqlen is not None):
        raise n.fail("past_key and past_value go together, and not with nonpad_kv_seqlen")
    if three_d:
        q = _split_heads(n, Q, n.attr("q_num_heads"), "Q")
        k = _split_heads(n, K, n.attr("kv_num_heads"), "K")
        v = _split_heads(n, V, n.attr("kv_num_heads"), "V")
    else:
        q, k, v = Q, K, V
    past = 0
    if past_key is not None and past_value is not None:
        past = past_key.shape[2]
        k, v = ops.cat([past_key, k], 2), ops.cat([past_value, v], 2)
    b, hq, length, e = q.shape
    keys = k.shape[2]
    if k.shape[0] != b or hq % max(k.shape[1], 1) or k.shape[:3] != v.shape[:3] or k.shape[3] != e:
        raise n.fail(f"Q {q.shape}, K {k.shape} and V {v.shape} (as 4-D) do not fit together")
    nonpad = None if nonpad_kv_seqlen is None else n.values(nonpad_kv_seqlen).astype(np.int64).reshape(-1)
    if nonpad is not None and nonpad.shape != (b,):
        raise n.fail(f"nonpad_kv_seqlen must have one length per batch ({b}), got {nonpad.shape}")
    scale = n.attr("scale")
    scale = 1 / math.sqrt(e) if scale is None else float(scale)
    n.check_size((b, hq, length, v.shape[3]), q.dtype)
    mask = _join(attn_mask, _allowed(n, (length, keys), past, nonpad), q, keys)
    softcap = float(n.attr("softcap", 0.0))
    full = softcap > 0 or n.n_outputs > 3 or n.attr("softmax_precision") is not None
    qk: Tensor | None = None
    if full:
        y, qk = _attention_ops(n, q, k, v, mask, scale, softcap)
    else:
        n.check_size((b, hq, length, min(keys, DEFAULT_BLOCK)), q.dtype, "score block")
        y = ops.scaled_dot_product_attention(q, k, v, mask, scale=scale)
    outs = [_merge_heads(y) if three_d else y, k, v] + ([] if qk is None else [qk])
    return outs[0] if n.n_outputs == 1 else tuple(outs[: n.n_outputs])


def _attention_ops(
    n: Node, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float, softcap: float
) -> tuple[Tensor, Tensor]:
    """Attention with the whole score matrix, for soft-capping and the ``qk_matmul_output``
    output; returns the output and that tensor (as ``qk_matmul_output_mode`` picks)."""
    b, hq, length, _ = q.shape
    hk, keys = k.shape[1], k.shape[2]
    n.check_size((b, hq, length, keys), q.dtype, "score matrix")
    if hq != hk:  # each key/value head repeated for its group of query heads
        g = hq // hk
        k = ops.reshape(ops.expand(ops.unsqueeze(k, [2]), (b, hk, g, *k.shape[2:])), (b, hq, *k.shape[2:]))
        v = ops.reshape(ops.expand(ops.unsqueeze(v, [2]), (b, hk, g, *v.shape[2:])), (b, hq, *v.shape[2:]))
    root = const(math.sqrt(scale), q)  # ONNX scales Q and K by sqrt(scale) each
    s = ops.matmul(ops.mul(q, root), ops.transpose(ops.mul(k, root), (0, 1, 3, 2)))
    if softcap > 0:
        c = const(softcap, q)
        s = ops.mul(ops.tanh(ops.div(s, c)), c)
    mode = n.attr("qk_matmul_output_mode", 0)
    qk = s
    if mask is not None:
        bias = mask if mask.dtype.kind == "f" else ops.where(mask, const(0.0, q), const(-np.inf, q))
        s = ops.add(s, bias)
        # A row whose bias hides every key gives zeros (Softmax would give NaN).
        hidden = ops.equal(ops.reduce_max(bias, [-1], keepdims=True), const(-np.inf, q))
    if mode == 2:
        qk = s
    precision = n.attr("softmax_precision")
    wide = np.dtype(helper.tensor_dtype_to_np_dtype(precision)) if precision is not None else None
    p = ops.softmax(s if wide is None else ops.cast(s, wide), -1)
    if mask is not None:
        p = ops.where(hidden, const(0.0, p), p)
    p = ops.cast(p, q.dtype) if p.dtype != q.dtype else p
    if mode == 3:
        qk = p
    return ops.matmul(p, v), qk


def RMSNormalization(n: Node, X: Tensor, scale: Tensor) -> Tensor:
    """``X / sqrt(mean(X^2) + epsilon) * scale`` over axes ``[axis, rank)``."""
    return ops.rms_norm(X, scale, n.attr("axis", -1), n.attr("epsilon", 1e-5))


def GroupNormalization(n: Node, X: Tensor, scale: Tensor, bias: Tensor) -> Tensor:
    """Per (sample, group) statistics; per-channel scale and bias from opset 21, per-group ones
    (each repeated over its channels here) in GroupNormalization-18."""
    groups = n.attr("num_groups")
    if X.ndim() < 2 or not groups or X.shape[1] % groups:
        raise n.fail(f"num_groups {groups} must divide the channels of {X.shape}")
    c = X.shape[1]
    if n.opset < 21 and scale.shape == (groups,) and c != groups:
        scale, bias = (
            ops.reshape(ops.expand(ops.reshape(p, (groups, 1)), (groups, c // groups)), (c,))
            for p in (scale, bias)
        )
    return ops.group_norm(X, groups, scale, bias, n.attr("epsilon", 1e-5))


def RotaryEmbedding(
    n: Node, X: Tensor, cos_cache: Tensor, sin_cache: Tensor, position_ids: Tensor | None = None
) -> Tensor:
    """Rotary embedding of ``(B, H, S, D)`` or ``(B, S, hidden)`` (with ``num_heads``) input;
    the caches are ``(B, S, R)``, or ``(max_pos, R)`` looked up at ``position_ids``."""
    if position_ids is not None:
        cos_cache, sin_cache = (ops.gather(c, 0, position_ids) for c in (cos_cache, sin_cache))
    x = _split_heads(n, X, n.attr("num_heads"), "input") if X.ndim() == 3 else X
    if x.ndim() != 4 or cos_cache.ndim() != 3 or cos_cache.shape != sin_cache.shape:
        raise n.fail(f"expects (B, H, S, D) input and (B, S, R) caches, got {X.shape}, {cos_cache.shape}")
    rd = n.attr("rotary_embedding_dim", 0) or x.shape[3]
    if cos_cache.shape[2] * 2 != rd or rd > x.shape[3]:
        raise n.fail(f"caches of {cos_cache.shape[2]} angles do not rotate {rd} of {x.shape[3]} features")
    b, s, r = cos_cache.shape
    c, sn = (ops.reshape(t, (b, 1, s, r)) for t in (cos_cache, sin_cache))
    y = ops.rotary_embedding(x, c, sn, bool(n.attr("interleaved", 0)))
    return ops.reshape(ops.transpose(y, (0, 2, 1, 3)), X.shape) if X.ndim() == 3 else y

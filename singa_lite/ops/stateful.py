"""Sequence ops that carry a state between calls, for incremental decoding (ONNX opset 27):
``causal_conv_with_state`` (the depthwise causal convolution of Mamba and Gated DeltaNet) and
``linear_attention`` (linear, gated, delta and gated-delta recurrences, with grouped heads).

Both are written with other ops and take their gradients from them. ``linear_attention`` runs
the recurrence token by token, as its definition reads; float16 and bfloat16-held inputs are
computed in float32 and the results cast back.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa_lite import _args
from singa_lite.errors import ShapeError
from singa_lite.ops import activation_extra, conv, elementwise, indexing, linalg, shape, unary
from singa_lite.tensor import Tensor

__all__ = ["causal_conv_with_state", "linear_attention"]

UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


def causal_conv_with_state(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    past: Tensor | None = None,
    activation: str = "none",
) -> tuple[Tensor, Tensor]:
    """Depthwise causal 1-D convolution of ``x (B, C, L)`` with ``weight (C, 1, k)``, the last
    ``k - 1`` positions of the previous call (``past (B, C, k - 1)``, zeros if omitted) in front;
    ``activation`` ``'silu'``/``'swish'`` applies SiLU. Returns the output ``(B, C, L)`` and the
    state for the next call ``(B, C, k - 1)``.

    >>> import numpy as np; from singa_lite import tensor
    >>> x = tensor.from_numpy(np.arange(1.0, 5.0).reshape(1, 1, 4))
    >>> w = tensor.from_numpy(np.ones((1, 1, 2)))
    >>> y, state = causal_conv_with_state(x, w)
    >>> y.numpy().tolist(), state.numpy().tolist()
    ([[[1.0, 3.0, 5.0, 7.0]]], [[[4.0]]])
    """
    act = _args.choice("causal_conv_with_state", "activation", activation, ("none", "silu", "swish"))
    _args.tensor("causal_conv_with_state", "x", x)
    _args.tensor("causal_conv_with_state", "weight", weight)
    if x.ndim() != 3 or weight.ndim() != 3 or weight.shape[:2] != (x.shape[1], 1) or weight.shape[2] < 1:
        raise ShapeError(
            f"causal_conv_with_state: expects x (B, C, L) and weight (C, 1, k), "
            f"got {x.shape} and {weight.shape}"
        )
    (B, C, _), k = x.shape, weight.shape[2]
    if past is None:
        past = Tensor._wrap(x.device.xp.zeros((B, C, k - 1), x.dtype), x.device, False, None, 0)
    elif past.shape != (B, C, k - 1):
        raise ShapeError(f"causal_conv_with_state: past state {past.shape} must be {(B, C, k - 1)}")
    padded = shape.cat([past, x], 2) if k > 1 else x
    # float16 is convolved (and activated) in float32 and rounded once, as ONNX's reference does
    wide = np.float32 if x.dtype.itemsize < 4 else x.dtype
    y = conv.conv1d(
        _as(padded, wide), _as(weight, wide), None if bias is None else _as(bias, wide), 1, 0, 1, C
    )
    if act != "none":
        y = activation_extra.swish(y)
    y = _as(y, x.dtype)
    length = padded.shape[2]
    return y, indexing.slice(padded, [length - (k - 1)], [length], [2])


def _heads(x: Tensor, heads: int, what: str) -> Tensor:
    """(B, T, H*D) -> (B, H, T, D)."""
    B, T, HD = x.shape
    if HD % heads:
        raise ShapeError(f"linear_attention: {what}'s last axis {HD} is not a multiple of {heads} heads")
    return shape.transpose(shape.reshape(x, (B, T, heads, HD // heads)), (0, 2, 1, 3))


def _at(x: Tensor, t: int) -> Tensor:
    """``x[:, :, t]`` of a (B, H, T, D) tensor."""
    return shape.squeeze(indexing.slice(x, [t], [t + 1], [2]), 2)


def linear_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    q_heads: int,
    kv_heads: int,
    past: Tensor | None = None,
    decay: Tensor | None = None,
    beta: Tensor | None = None,
    scale: float | None = None,
    update_rule: str = "gated_delta",
) -> tuple[Tensor, Tensor]:
    """Linear attention over ``(B, T, H*D)`` query, key and value (ONNX LinearAttention):
    the state ``S (B, H_kv, d_k, d_v)`` is updated token by token, ``S_t = a_t S_{t-1} +
    k_t (x) u_t`` with ``a_t = exp(g_t)`` for the gated rules (``decay`` holds g, per head or per
    key dimension) and ``u_t = beta_t (v_t - a_t S_{t-1}^T k_t)`` for the delta rules, and read
    as ``o_t = scale q_t^T S_t`` (scale ``1/sqrt(d_k)`` by default); query heads share the
    state of their group. Returns the output ``(B, T, H_q*d_v)`` and the last state.
    """
    rule = _args.choice("linear_attention", "update_rule", update_rule, UPDATE_RULES)
    hq = _args.count("linear_attention", "q_heads", q_heads)
    hkv = _args.count("linear_attention", "kv_heads", kv_heads)
    if hq % hkv:
        raise _args.bad("linear_attention", "q_heads", f"be a multiple of kv_heads {hkv}", hq)
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gated != (decay is not None) or delta != (beta is not None):
        raise _args.bad(
            "linear_attention", "decay/beta", f"be given exactly as update_rule {rule!r} needs", rule
        )
    for name, t in (("query", query), ("key", key), ("value", value)):
        if _args.tensor("linear_attention", name, t).ndim() != 3:
            raise ShapeError(f"linear_attention: {name} must be (B, T, H*D), got {t.shape}")
    B, T, _ = query.shape
    if key.shape[:2] != (B, T) or value.shape[:2] != (B, T):
        raise ShapeError(
            f"linear_attention: query {query.shape}, key {key.shape}, value {value.shape} disagree"
        )
    out_dtype = query.dtype
    wide = np.float32 if out_dtype.itemsize < 4 else out_dtype

    def f(t: Tensor) -> Tensor:
        return t if t.dtype == wide else shape.cast(t, wide)

    q, k, v = _heads(f(query), hq, "query"), _heads(f(key), hkv, "key"), _heads(f(value), hkv, "value")
    dk, dv = k.shape[3], v.shape[3]
    if q.shape[3] != dk:
        raise ShapeError(f"linear_attention: query heads of {q.shape[3]} and key heads of {dk} differ")
    g4 = None if decay is None else _gates(f(decay), B, T, hkv, dk)
    b4 = None if beta is None else _betas(f(beta), B, T, hkv)
    state_dtype = out_dtype if past is None else past.dtype
    if past is None:
        state = Tensor._wrap(query.device.xp.zeros((B, hkv, dk, dv), wide), query.device, False, None, 0)
    elif past.shape != (B, hkv, dk, dv):
        raise ShapeError(f"linear_attention: past state {past.shape} must be {(B, hkv, dk, dv)}")
    else:
        state = f(past)
    scale_t = _const(scale or 1 / math.sqrt(dk), wide, query)
    group = hq // hkv
    outs = []
    for i in range(T):
        k_t, v_t = _at(k, i), _at(v, i)
        if g4 is not None:
            state = elementwise.mul(state, shape.unsqueeze(unary.exp(_at(g4, i)), 3))
        if b4 is not None:
            recalled = linalg.einsum("bhdm,bhd->bhm", state, k_t)
            v_t = elementwise.mul(_at(b4, i), elementwise.sub(v_t, recalled))
        state = elementwise.add(state, elementwise.mul(shape.unsqueeze(k_t, 3), shape.unsqueeze(v_t, 2)))
        read = state
        if group > 1:  # query head h reads kv head h // group
            read = shape.expand(shape.unsqueeze(state, 2), (B, hkv, group, dk, dv))
            read = shape.reshape(read, (B, hq, dk, dv))
        o_t = elementwise.mul(linalg.einsum("bhd,bhdm->bhm", _at(q, i), read), scale_t)
        outs.append(shape.unsqueeze(o_t, 2))
    if outs:
        out = shape.cat(outs, 2)
    else:
        out = Tensor._wrap(query.device.xp.zeros((B, hq, 0, dv), wide), query.device, False, None, 0)
    out = shape.reshape(shape.transpose(out, (0, 2, 1, 3)), (B, T, hq * dv))
    return _as(out, out_dtype), _as(state, state_dtype)


def _gates(decay: Tensor, B: int, T: int, hkv: int, dk: int) -> Tensor:
    """decay (B, T, H_kv) or (B, T, H_kv*d_k) as (B, H_kv, T, 1 or d_k)."""
    if decay.ndim() != 3 or decay.shape[:2] != (B, T) or decay.shape[2] not in (hkv, hkv * dk):
        raise ShapeError(f"linear_attention: decay {decay.shape} must be {(B, T, hkv)} or {(B, T, hkv * dk)}")
    return _heads(decay, hkv, "decay")


def _betas(beta: Tensor, B: int, T: int, hkv: int) -> Tensor:
    """beta (B, T, H_kv or 1) as (B, H_kv or 1, T, 1)."""
    if beta.ndim() != 3 or beta.shape[:2] != (B, T) or beta.shape[2] not in (hkv, 1):
        raise ShapeError(f"linear_attention: beta {beta.shape} must be {(B, T, hkv)} or {(B, T, 1)}")
    return _heads(beta, beta.shape[2], "beta")


def _const(v: float, dtype: Any, like: Tensor) -> Tensor:
    return Tensor._wrap(like.device.xp.asarray(v, dtype), like.device, False, None, 0)


def _as(t: Tensor, dtype: Any) -> Tensor:
    return t if t.dtype == dtype else shape.cast(t, dtype)

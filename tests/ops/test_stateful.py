"""ops/stateful.py (causal_conv_with_state, linear_attention): references, float64 gradients,
bad input."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import (
    check_forward,
    check_grad,
    keep_dtype,
)

from singa_lite import ops
from singa_lite.errors import ArgumentError, ShapeError

K = keep_dtype  # a constant tensor that keeps its array's dtype


# -- stateful sequence ops ----------------------------------------------------------------------
def ref_causal_conv(x, w, b, past, act):
    k = w.shape[2]
    past = np.zeros((*x.shape[:2], k - 1)) if past is None else past
    padded = np.concatenate([past, x], axis=2)
    y = sum(padded[:, :, j : j + x.shape[2]] * w[None, :, 0, j : j + 1] for j in range(k))
    y = y + (0 if b is None else b[None, :, None])
    if act != "none":
        y = y / (1 + np.exp(-y))
    return y, padded[:, :, padded.shape[2] - (k - 1) :]


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("with_bias_past", [False, True])
@pytest.mark.parametrize("act", ["none", "silu"])
def test_causal_conv_with_state(dev, k, with_bias_past, act):
    rng = np.random.default_rng(k)
    x, w = rng.standard_normal((2, 3, 5)), rng.standard_normal((3, 1, k))
    extra = [rng.standard_normal(3), rng.standard_normal((2, 3, k - 1))] if with_bias_past else []

    def fn(*ts):
        return ops.causal_conv_with_state(*ts[:2], *(ts[2:] or (None, None)), activation=act)

    def ref(*arrays):
        return ref_causal_conv(*arrays[:2], *(arrays[2:] or (None, None)), act)

    check_forward(fn, ref, [x, w, *extra], dev)
    check_grad(lambda *ts: fn(*ts)[0], [x, w, *extra], dev)


def test_causal_conv_with_state_errors():
    with pytest.raises(ShapeError):
        ops.causal_conv_with_state(K(np.ones((1, 2, 4))), K(np.ones((3, 1, 2))))
    with pytest.raises(ShapeError):
        ops.causal_conv_with_state(
            K(np.ones((1, 2, 4))),
            K(np.ones((2, 1, 2))),
            None,
            K(np.ones((1, 2, 3))),
        )
    with pytest.raises(ArgumentError):
        ops.causal_conv_with_state(K(np.ones((1, 2, 4))), K(np.ones((2, 1, 2))), activation="relu")


def ref_linear_attention(q, k, v, hq, hkv, past, decay, beta, rule):
    B, T_, _ = q.shape
    split = lambda a, h: a.reshape(B, T_, h, -1).transpose(0, 2, 1, 3)  # noqa: E731
    q4, k4, v4 = split(q, hq), split(k, hkv), split(v, hkv)
    dk, dv = k4.shape[3], v4.shape[3]
    s = np.zeros((B, hkv, dk, dv)) if past is None else past.copy()
    out = np.zeros((B, hq, T_, dv))
    for t in range(T_):
        if rule in ("gated", "gated_delta"):
            s = s * np.exp(split(decay, hkv)[:, :, t])[..., None]
        u = v4[:, :, t]
        if rule in ("delta", "gated_delta"):
            u = split(beta, beta.shape[2])[:, :, t] * (u - np.einsum("bhdm,bhd->bhm", s, k4[:, :, t]))
        s = s + k4[:, :, t, :, None] * u[:, :, None, :]
        out[:, :, t] = np.einsum("bhd,bhdm->bhm", q4[:, :, t], np.repeat(s, hq // hkv, axis=1)) / np.sqrt(dk)
    return out.transpose(0, 2, 1, 3).reshape(B, T_, -1), s


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2)])
def test_linear_attention(dev, rule, heads):
    hq, hkv = heads
    rng = np.random.default_rng(len(rule) + hq)
    B, T_, dk, dv = 1, 3, 2, 3
    q, k = rng.standard_normal((B, T_, hq * dk)) * 0.5, rng.standard_normal((B, T_, hkv * dk)) * 0.5
    v, past = rng.standard_normal((B, T_, hkv * dv)), rng.standard_normal((B, hkv, dk, dv)) * 0.3
    decay = -rng.uniform(0.1, 1.0, (B, T_, hkv * dk)) if "gated" in rule else None
    beta = rng.uniform(0.2, 0.9, (B, T_, 1)) if "delta" in rule else None
    extras = [a for a in (decay, beta) if a is not None]

    def fn(qt, kt, vt, pt, *rest):
        it = iter(rest)
        d = next(it) if decay is not None else None
        b = next(it) if beta is not None else None
        return ops.linear_attention(qt, kt, vt, hq, hkv, pt, d, b, None, rule)

    args = [q, k, v, past, *extras]
    check_forward(fn, lambda *a: ref_linear_attention(*a[:3], hq, hkv, a[3], decay, beta, rule), args, dev)
    check_grad(fn, args, dev)


def test_linear_attention_errors():
    x = K(np.ones((1, 2, 4)))
    with pytest.raises(ArgumentError):
        ops.linear_attention(x, x, x, 2, 2, update_rule="gated")  # no decay
    with pytest.raises(ArgumentError):
        ops.linear_attention(x, x, x, 3, 2, update_rule="linear")
    with pytest.raises(ShapeError):
        ops.linear_attention(x, x, x, 3, 3, update_rule="linear")  # 4 is not 3 heads

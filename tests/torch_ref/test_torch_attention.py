"""Attention and the ops transformers use, against PyTorch: forward and every input's gradient,
float64 within 1e-9 and float32 within 1e-4, over hypothesis-drawn shapes, masks and heads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import to_tensors

from singa_lite import autograd, tensor

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
F = torch.nn.functional

TOL = {np.float64: 1e-9, np.float32: 1e-4}


def both(fn, tfn, arrays, dev, tol, seed=0):
    """``fn`` (singa_lite) and ``tfn`` (torch) on ``arrays``: outputs and every float input's
    gradient for one random output gradient."""
    autograd.training = True
    try:
        ts = to_tensors(arrays, dev)
        for t, a in zip(ts, arrays):
            t.requires_grad = t.stores_grad = a.dtype.kind == "f"
        y = fn(*ts)
        dy = np.random.default_rng(seed).standard_normal(y.shape).astype(y.dtype)
        grads = autograd.gradients(y, dev.xp.asarray(dy))
    finally:
        autograd.training = False
    tts = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    ty = tfn(*tts)
    ty.backward(torch.from_numpy(dy))
    np.testing.assert_allclose(tensor.to_numpy(y), ty.detach().numpy(), rtol=tol, atol=tol)
    for t, tt in zip(ts, tts):
        if tt.requires_grad:
            np.testing.assert_allclose(tensor.to_numpy(grads[t]), tt.grad.numpy(), rtol=tol, atol=tol)


@st.composite
def attention_case(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    n, hk, g = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    length, keys = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    e, ev = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    q = rng.standard_normal((n, hk * g, length, e)).astype(dtype)
    k = rng.standard_normal((n, hk, keys, e)).astype(dtype)
    v = rng.standard_normal((n, hk, keys, ev)).astype(dtype)
    kind = draw(st.sampled_from(["none", "causal", "bool", "float"]))
    shape = draw(
        st.sampled_from([(length, keys), (n, 1, length, keys), (n, hk * g, length, keys), (1, keys)])
    )
    mask = None
    if kind == "bool":
        mask = rng.random(shape) > 0.3  # rows that see no key give zeros in both
    elif kind == "float":
        mask = rng.standard_normal(shape).astype(dtype)
    scale = draw(st.sampled_from([None, 0.7]))
    return [q, k, v] + ([] if mask is None else [mask]), kind == "causal", scale, draw(st.integers(1, 5))


@given(case=attention_case())
def test_sdpa(dev, case):
    arrays, causal, scale, block = case
    gqa = arrays[0].shape[1] != arrays[1].shape[1]
    both(
        lambda q, k, v, m=None: autograd.scaled_dot_product_attention(q, k, v, m, causal, 0.0, scale, block),
        lambda q, k, v, m=None: F.scaled_dot_product_attention(
            q, k, v, attn_mask=m, is_causal=causal, scale=scale, enable_gqa=gqa
        ),
        arrays,
        dev,
        TOL[arrays[0].dtype.type],
    )


@given(
    shape=st.sampled_from([(2, 6, 5), (3, 4, 2, 3), (2, 8), (1, 6, 1, 1, 2)]),
    groups=st.sampled_from([1, 2]),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 100),
)
def test_group_norm(dev, shape, groups, dtype, seed):
    rng = np.random.default_rng(seed)
    c = shape[1]
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    w, b = rng.standard_normal(c).astype(dtype), rng.standard_normal(c).astype(dtype)
    both(
        lambda x, w, b: autograd.group_norm(x, groups, w, b, 1e-5),
        lambda x, w, b: F.group_norm(x, groups, w, b, 1e-5),
        [x, w, b],
        dev,
        TOL[dtype],
    )


@given(
    shape=st.sampled_from([(2, 6), (3, 4, 5), (2, 3, 2, 4)]),
    dims=st.integers(1, 2),
    eps=st.sampled_from([None, 1e-5]),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 100),
)
def test_rms_norm(dev, shape, dims, eps, dtype, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2).astype(dtype)
    w = rng.standard_normal(shape[-dims:]).astype(dtype)
    both(
        lambda x, w: autograd.rms_norm(x, w, -dims, eps),
        lambda x, w: F.rms_norm(x, shape[-dims:], w, eps),
        [x, w],
        dev,
        TOL[dtype],
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_tanh(dev, dtype):
    x = np.linspace(-8, 8, 101).astype(dtype)
    both(lambda t: autograd.gelu(t, "tanh"), lambda t: F.gelu(t, approximate="tanh"), [x], dev, TOL[dtype])


@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding(dev, padding_idx):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((5, 3))
    idx = np.array([[0, 2, 4], [2, 2, 1]])
    autograd.training = True
    tw = to_tensors([w], dev)[0]
    y = autograd.embedding(idx, tw, padding_idx)
    dy = rng.standard_normal(y.shape)
    grad = tensor.to_numpy(autograd.gradients(y, dev.xp.asarray(dy))[tw])
    autograd.training = False
    pw = torch.tensor(w, requires_grad=True)
    ty = F.embedding(torch.tensor(idx), pw, padding_idx)
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(tensor.to_numpy(y), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(grad, pw.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rotary_embedding(dev, interleaved, dtype):
    """Against the rotation written with torch's complex numbers (pairs as complex values)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 8)).astype(dtype)
    angle = rng.uniform(-3, 3, (5, 3))  # rotates 6 of the 8 features
    cos, sin = np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)

    def torch_rotary(x, c, s):
        rot = x[..., :6]
        pairs = (
            rot.reshape(*rot.shape[:-1], 3, 2)
            if interleaved
            else torch.stack([rot[..., :3], rot[..., 3:]], -1)
        )
        z = torch.view_as_complex(pairs.contiguous()) * torch.complex(c, s)
        out = torch.view_as_real(z)
        out = out.flatten(-2) if interleaved else torch.cat([out[..., 0], out[..., 1]], -1)
        return torch.cat([out, x[..., 6:]], -1)

    both(
        lambda x, c, s: autograd.rotary_embedding(x, c, s, interleaved),
        torch_rotary,
        [x, cos, sin],
        dev,
        TOL[dtype],
    )

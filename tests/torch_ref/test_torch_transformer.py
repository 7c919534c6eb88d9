"""Transformer-era layers against ``torch.nn``: MultiHeadAttention, encoder and decoder layers,
RMSNorm, GroupNorm, BatchNorm1d, Conv1d, ConvTranspose2d, Upsample; and 20 training steps of a
tiny GPT (AdamW, warmup + cosine, gradient clipping, graph mode) equal to the same model in
PyTorch in float64."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import to_tensors

from singa_lite import autograd, layer, model, opt, tensor
from singa_lite.clip_grad import ClipGradNorm

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
nn = torch.nn

TOL = {np.float64: 1e-9, np.float32: 1e-4}


def _np(p):
    return p.detach().numpy().copy()


def mha_params(tm, prefix=""):
    """Our names for the weights of ``torch.nn.MultiheadAttention`` ``tm``."""
    e = tm.embed_dim
    w = _np(tm.in_proj_weight)
    out = {}
    for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
        out[f"{prefix}{name}.W"] = w[i * e : (i + 1) * e].T.copy()
        if tm.in_proj_bias is not None:
            out[f"{prefix}{name}.b"] = _np(tm.in_proj_bias)[i * e : (i + 1) * e]
    out[f"{prefix}out_proj.W"] = _np(tm.out_proj.weight).T.copy()
    if tm.out_proj.bias is not None:
        out[f"{prefix}out_proj.b"] = _np(tm.out_proj.bias)
    return out


def block_params(tb, prefix=""):
    """Our names for the weights of a torch encoder or decoder layer ``tb``."""
    out = mha_params(tb.self_attn, prefix + "self_attn.")
    if hasattr(tb, "multihead_attn"):
        out.update(mha_params(tb.multihead_attn, prefix + "multihead_attn."))
    for name in ("linear1", "linear2"):
        lin = getattr(tb, name)
        out[f"{prefix}{name}.W"], out[f"{prefix}{name}.b"] = _np(lin.weight).T.copy(), _np(lin.bias)
    for name in ("norm1", "norm2", "norm3"):
        if hasattr(tb, name):
            ln = getattr(tb, name)
            out[f"{prefix}{name}.scale"], out[f"{prefix}{name}.bias"] = _np(ln.weight), _np(ln.bias)
    return out


def run_both(ours, theirs, arrays, dev, tol, params, kwargs=None, tkwargs=None, seed=0):
    """Build ``ours`` on ``arrays``, load ``params``, compare outputs and every float input's
    gradient with ``theirs`` (a torch module or function)."""
    kwargs, tkwargs = kwargs or {}, tkwargs or {}
    ts = to_tensors(arrays, dev)
    ours(*ts, **kwargs)
    ours.set_params(params())
    autograd.training = True
    try:
        y = ours(*ts, **kwargs)
        dy = np.random.default_rng(seed).standard_normal(y.shape).astype(y.dtype)
        grads = autograd.gradients(y, dev.xp.asarray(dy))
    finally:
        autograd.training = False
    tts = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    ty = theirs(*tts, **tkwargs)
    ty = ty[0] if isinstance(ty, tuple) else ty
    ty.backward(torch.from_numpy(dy))
    np.testing.assert_allclose(tensor.to_numpy(y), ty.detach().numpy(), rtol=tol, atol=tol)
    for t, tt in zip(ts, tts):
        if tt.requires_grad:
            np.testing.assert_allclose(tensor.to_numpy(grads[t]), tt.grad.numpy(), rtol=tol, atol=tol)
    return ours


def _dtype(dtype):
    return torch.float64 if dtype == np.float64 else torch.float32


@given(
    dtype=st.sampled_from([np.float32, np.float64]),
    heads=st.sampled_from([1, 2, 4]),
    n=st.integers(1, 3),
    length=st.integers(1, 6),
    keys=st.integers(1, 6),
    batch_first=st.booleans(),
    masks=st.sampled_from(["none", "padding", "bool", "float", "both", "causal"]),
    bias=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_multihead_attention(dev, dtype, heads, n, length, keys, batch_first, masks, bias, seed):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    e = 8
    tm = nn.MultiheadAttention(e, heads, bias=bias, batch_first=batch_first, dtype=_dtype(dtype))
    if bias:  # torch starts its biases at zero: make them matter
        with torch.no_grad():
            tm.in_proj_bias.normal_()
            tm.out_proj.bias.normal_()
    keys = length if masks == "causal" else keys
    qshape = (n, length, e) if batch_first else (length, n, e)
    kshape = (n, keys, e) if batch_first else (keys, n, e)
    arrays = [rng.standard_normal(s).astype(dtype) for s in (qshape, kshape, kshape)]
    kw, tkw = {}, {"need_weights": False}
    if masks in ("padding", "both"):
        pad = rng.random((n, keys)) < 0.3
        pad[:, 0] = False
        kw["key_padding_mask"], tkw["key_padding_mask"] = pad, torch.tensor(pad)
    if masks in ("bool", "both"):
        see = rng.random((length, keys)) > 0.3
        see[:, 0] = True
        kw["attn_mask"], tkw["attn_mask"] = see, torch.tensor(~see)  # torch's layer: True = hidden
    if masks == "float":
        add = rng.standard_normal((n * heads, length, keys)).astype(dtype)
        kw["attn_mask"], tkw["attn_mask"] = add, torch.tensor(add)
    if masks == "causal":
        kw["is_causal"] = True
        tkw["attn_mask"] = nn.Transformer.generate_square_subsequent_mask(length, dtype=_dtype(dtype))
    kw = {
        k: tensor.Tensor(data=v, device=dev, requires_grad=False) if isinstance(v, np.ndarray) else v
        for k, v in kw.items()
    }
    ours = layer.MultiHeadAttention(e, heads, bias=bias, batch_first=batch_first)
    run_both(
        ours,
        tm,
        arrays,
        dev,
        TOL[dtype],
        lambda: mha_params(tm),
        kw,
        tkw,
    )


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_encoder_layer(dev, norm_first, activation, dtype):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    kw = {"dropout": 0.0, "activation": activation, "norm_first": norm_first, "batch_first": True}
    tb = nn.TransformerEncoderLayer(8, 2, 16, dtype=_dtype(dtype), **kw)
    ours = layer.TransformerEncoderLayer(8, 2, 16, **kw)
    pad = np.zeros((3, 5), bool)
    pad[1, 3:] = True
    x = rng.standard_normal((3, 5, 8)).astype(dtype)
    run_both(
        ours,
        tb,
        [x],
        dev,
        TOL[dtype],
        lambda: block_params(tb),
        {"src_key_padding_mask": tensor.from_numpy(pad, dev), "is_causal": True},
        {
            "src_key_padding_mask": torch.tensor(pad),
            "src_mask": torch.ones(5, 5, dtype=torch.bool).triu(1),  # torch: True = hidden
            "is_causal": True,
        },
    )


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_decoder_layer(dev, norm_first, dtype):
    torch.manual_seed(1)
    rng = np.random.default_rng(1)
    kw = {"dropout": 0.0, "activation": "gelu", "norm_first": norm_first}
    tb = nn.TransformerDecoderLayer(8, 4, 12, dtype=_dtype(dtype), **kw)
    ours = layer.TransformerDecoderLayer(8, 4, 12, **kw)
    tgt, mem = rng.standard_normal((5, 2, 8)).astype(dtype), rng.standard_normal((7, 2, 8)).astype(dtype)
    mpad = np.zeros((2, 7), bool)
    mpad[0, 5:] = True
    run_both(
        ours,
        tb,
        [tgt, mem],
        dev,
        TOL[dtype],
        lambda: block_params(tb),
        {
            "memory_key_padding_mask": tensor.from_numpy(mpad, dev),
            "tgt_is_causal": True,
        },
        {
            "memory_key_padding_mask": torch.tensor(mpad),
            "tgt_mask": nn.Transformer.generate_square_subsequent_mask(5, dtype=_dtype(dtype)),
            "tgt_is_causal": True,
        },
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_norm_and_conv_layers(dev, dtype):
    rng = np.random.default_rng(2)
    tol, tdt = TOL[dtype], _dtype(dtype)

    def x(*shape):
        return rng.standard_normal(shape).astype(dtype)

    def affine(t, names=("scale", "bias")):
        return dict(zip(names, (_np(t.weight), _np(t.bias))))

    tr = nn.RMSNorm((3, 4), dtype=tdt)
    with torch.no_grad():
        tr.weight.normal_()
    run_both(layer.RMSNorm(axis=-2), tr, [x(2, 5, 3, 4)], dev, tol, lambda: {"scale": _np(tr.weight)})
    tg = nn.GroupNorm(3, 6, dtype=tdt)
    with torch.no_grad():
        tg.weight.normal_(), tg.bias.normal_()
    run_both(layer.GroupNorm(3), tg, [x(2, 6, 4, 3)], dev, tol, lambda: affine(tg))
    for shape in ((6, 4), (3, 4, 5)):
        tbn = nn.BatchNorm1d(4, dtype=tdt).train()
        ours = run_both(layer.BatchNorm1d(), tbn, [x(*shape)], dev, tol, lambda t=tbn: affine(t))
        np.testing.assert_allclose(tensor.to_numpy(ours.running_var), _np(tbn.running_var), rtol=tol)
    tc = nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2, dtype=tdt)
    run_both(
        layer.Conv1d(6, 3, stride=2, padding=1, dilation=2, group=2),
        tc,
        [x(2, 4, 11)],
        dev,
        tol,
        lambda: {"W": _np(tc.weight), "b": _np(tc.bias)},
    )
    tt = nn.ConvTranspose2d(4, 6, (3, 2), stride=2, padding=1, output_padding=1, groups=2, dtype=tdt)
    run_both(
        layer.ConvTranspose2d(6, (3, 2), stride=2, padding=1, output_padding=1, group=2),
        tt,
        [x(2, 4, 5, 4)],
        dev,
        tol,
        lambda: {"W": _np(tt.weight), "b": _np(tt.bias)},
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scale_factor": 2},
        {"scale_factor": (2, 3)},
        {"size": (7, 5)},
        {"scale_factor": 2, "mode": "bilinear"},
        {"scale_factor": 3, "mode": "bilinear", "align_corners": True},
        {"size": (7, 9), "mode": "bicubic", "align_corners": False},
    ],
)
def test_upsample(dev, kwargs):
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 3))
    run_both(layer.Upsample(**kwargs), nn.Upsample(**kwargs), [x], dev, 1e-9, dict)


class TinyGPT(model.Model):
    """Token + learned position embeddings, pre-norm blocks with causal attention, a head."""

    def __init__(self, vocab, context, width, depth, heads):
        super().__init__()
        self.tok = layer.Embedding(vocab, width, dtype=tensor.float64)
        self.pos = layer.LearnedPositionalEmbedding(context, batch_first=True)
        self.blocks = [
            layer.TransformerEncoderLayer(
                width, heads, 4 * width, 0.0, "gelu_tanh", batch_first=True, norm_first=True
            )
            for _ in range(depth)
        ]
        for i, b in enumerate(self.blocks):
            setattr(self, f"block{i}", b)
        self.norm = layer.LayerNorm()
        self.head = layer.Linear(vocab)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, idx):
        x = self.pos(self.tok(idx))
        for b in self.blocks:
            x = b(x, is_causal=True)
        return self.head(self.norm(x))

    def train_one_batch(self, idx, target):
        logits = self.forward(idx)
        loss = self.loss(autograd.reshape(logits, (-1, logits.shape[-1])), target)
        self.optimizer(loss)
        return loss


class TorchGPT(nn.Module):
    def __init__(self, vocab, context, width, depth, heads):
        super().__init__()
        self.tok = nn.Embedding(vocab, width, dtype=torch.float64)
        self.pos = nn.Parameter(torch.zeros(context, width, dtype=torch.float64))
        gelu = nn.GELU(approximate="tanh")
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(
                width, heads, 4 * width, 0.0, gelu, batch_first=True, norm_first=True, dtype=torch.float64
            )
            for _ in range(depth)
        )
        self.norm = nn.LayerNorm(width, dtype=torch.float64)
        self.head = nn.Linear(width, vocab, dtype=torch.float64)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(idx.shape[1], dtype=torch.float64)
        for b in self.blocks:
            x = b(x, src_mask=mask, is_causal=True)
        return self.head(self.norm(x))


def test_tiny_gpt_trains_as_pytorch(dev):
    """20 steps of AdamW + warmup/cosine + clipping in graph mode: the losses and every final
    parameter equal PyTorch's in float64 within 1e-9."""
    vocab, context, width, depth, heads, batch, steps = 11, 8, 16, 2, 4, 3, 20
    torch.manual_seed(0)
    theirs = TorchGPT(vocab, context, width, depth, heads)
    ours = TinyGPT(vocab, context, width, depth, heads)
    schedule = opt.CosineDecay(3e-3, steps, alpha=0.1, warmup_steps=4)
    ours.set_optimizer(ClipGradNorm(opt.AdamW(lr=schedule, weight_decay=0.1), 0.5))
    tx = tensor.Tensor((batch, context), dev, tensor.int32)
    ty = tensor.Tensor((batch * context,), dev, tensor.int32)
    ours.compile([tx], is_train=True, use_graph=True)
    params = {
        "tok.W": _np(theirs.tok.weight),
        "pos.W": _np(theirs.pos).copy(),
        "head.W": _np(theirs.head.weight).T,
    }
    params |= {
        "head.b": _np(theirs.head.bias),
        "norm.scale": _np(theirs.norm.weight),
        "norm.bias": _np(theirs.norm.bias),
    }
    for i, b in enumerate(theirs.blocks):
        params |= block_params(b, f"block{i}.")
    params["pos.W"] = np.random.default_rng(0).normal(0, 0.02, (context, width))
    with torch.no_grad():
        theirs.pos.copy_(torch.from_numpy(params["pos.W"]))
    ours.set_params({k: v.astype(np.float64) for k, v in params.items()})
    for p in ours.get_params().values():
        assert p.dtype == np.float64
    topt = torch.optim.AdamW(theirs.parameters(), lr=3e-3, weight_decay=0.1)
    tsched = torch.optim.lr_scheduler.LambdaLR(topt, lambda s: schedule.value(s) / 3e-3)
    rng = np.random.default_rng(1)
    for _ in range(steps):
        x = rng.integers(0, vocab, (batch, context + 1))
        tx.copy_from_numpy(x[:, :-1].astype(np.int32))
        ty.copy_from_numpy(x[:, 1:].reshape(-1).astype(np.int32))
        loss = float(tensor.to_numpy(ours(tx, ty))[0])
        topt.zero_grad()
        logits = theirs(torch.tensor(x[:, :-1]))
        tloss = nn.functional.cross_entropy(logits.reshape(-1, vocab), torch.tensor(x[:, 1:].reshape(-1)))
        tloss.backward()
        tnorm = nn.utils.clip_grad_norm_(theirs.parameters(), 0.5)
        topt.step()
        tsched.step()
        assert abs(loss - tloss.item()) < 1e-9
        assert abs(float(tensor.to_numpy(ours.optimizer.last_norm)) - tnorm.item()) < 1e-9
    final = {k: tensor.to_numpy(v) for k, v in ours.get_params().items()}
    want = {"tok.W": _np(theirs.tok.weight), "pos.W": _np(theirs.pos), "head.W": _np(theirs.head.weight).T}
    for i, b in enumerate(theirs.blocks):
        want |= block_params(b, f"block{i}.")
    for name, w in want.items():
        np.testing.assert_allclose(final[name], w, rtol=1e-9, atol=1e-9, err_msg=name)

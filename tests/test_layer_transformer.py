"""The transformer-era layers beyond test_layer.py's shapes, names, gradients and state round
trips: masks, positional embeddings, graph mode against eager, a checkpoint, bad arguments."""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite import ArgumentError, ShapeError, autograd, layer, model, opt, tensor
from singa_lite.clip_grad import ClipGradNorm

rng = np.random.default_rng(0)


def _x(shape, dev, dtype=np.float32):
    return tensor.from_numpy(rng.standard_normal(shape).astype(dtype), dev)


def _t(arr, dev):
    """A tensor of ``arr`` in its own dtype (float64 stays float64), recording nothing."""
    return tensor.Tensor(data=arr, device=dev, requires_grad=False)


def test_mha_masks_hide_keys(dev):
    """A hidden key changes nothing: padding, a bool mask, a float -inf mask and a shorter
    key sequence agree."""
    mha = layer.MultiHeadAttention(6, 3, batch_first=True)
    q, kv = _x((2, 4, 6), dev), _x((2, 5, 6), dev)
    full = tensor.to_numpy(mha(q, kv[:, :3]))
    pad = np.zeros((2, 5), bool)
    pad[:, 3:] = True
    see = ~pad[0][None].repeat(4, 0)
    for kwargs in (
        {"key_padding_mask": tensor.from_numpy(pad, dev)},
        {"attn_mask": tensor.from_numpy(see, dev)},
        {"attn_mask": tensor.from_numpy(np.where(see, 0, -np.inf).astype(np.float32), dev)},
        {
            "key_padding_mask": tensor.from_numpy(pad, dev),
            "attn_mask": tensor.from_numpy(np.zeros((4, 5), np.float32), dev),
        },
    ):
        np.testing.assert_allclose(tensor.to_numpy(mha(q, kv, **kwargs)), full, rtol=1e-5, atol=1e-6)


def test_rotary_scores_depend_on_relative_position(dev):
    rot = layer.RotaryEmbedding()
    vec = rng.standard_normal(8)
    q = _t(np.tile(vec, (1, 1, 6, 1)), dev)
    k = _t(np.tile(rng.standard_normal(8), (1, 1, 6, 1)), dev)
    s = tensor.to_numpy(autograd.matmul(rot(q), autograd.transpose(rot(k), (0, 1, 3, 2))))[0, 0]
    for d in range(-4, 5):
        diag = np.diagonal(s, d)
        np.testing.assert_allclose(diag, diag[0], rtol=1e-9)
    np.testing.assert_allclose(
        tensor.to_numpy(rot(q, offset=2)),
        tensor.to_numpy(rot(_t(np.tile(vec, (1, 1, 8, 1)), dev)))[:, :, 2:],
    )


def test_sinusoidal_table_and_offset(dev):
    pe = layer.SinusoidalPositionalEmbedding(batch_first=True)
    x = _t(np.zeros((1, 4, 6)), dev)
    table = tensor.to_numpy(pe(x, offset=3))[0]
    pos = np.arange(3, 7)[:, None]
    freq = 10000.0 ** (-np.arange(0, 6, 2) / 6)
    np.testing.assert_allclose(table[:, 0::2], np.sin(pos * freq), rtol=1e-12)
    np.testing.assert_allclose(table[:, 1::2], np.cos(pos * freq), rtol=1e-12)


def test_learned_positions_limit_and_embedding_padding(dev):
    pe = layer.LearnedPositionalEmbedding(4, batch_first=True)
    pe(_x((1, 4, 3), dev))
    with pytest.raises(ShapeError, match="max_len"):
        pe(_x((1, 3, 3), dev), offset=2)
    emb = layer.Embedding(5, 3, padding_idx=-1, dtype="float64")
    out = emb(tensor.from_numpy(np.array([[4, 1]]), dev))
    assert emb.W.dtype == np.float64 and not tensor.to_numpy(out)[0, 0].any()


class Seq2Seq(model.Model):
    def __init__(self) -> None:
        super().__init__()
        self.enc = layer.TransformerEncoderLayer(8, 2, 16, 0.1, batch_first=True)
        self.dec = layer.TransformerDecoderLayer(8, 2, 16, 0.1, batch_first=True, norm_first=True)
        self.rms = layer.RMSNorm()
        self.out = layer.Linear(3)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, src, tgt):
        return self.out(self.rms(self.dec(tgt, self.enc(src), tgt_is_causal=True)))

    def train_one_batch(self, src, tgt, y):
        logits = self.forward(src, tgt)
        loss = self.loss(autograd.reshape(logits, (-1, 3)), y)
        self.optimizer(loss)
        return loss


def _train(dev, use_graph, steps=4):
    dev.SetRandSeed(0)
    m = Seq2Seq()
    m.set_optimizer(ClipGradNorm(opt.AdamW(lr=opt.CosineDecay(0.01, 10, warmup_steps=2)), 1.0))
    data = np.random.default_rng(1)
    src, tgt = tensor.Tensor((2, 5, 8), dev), tensor.Tensor((2, 4, 8), dev)
    y = tensor.Tensor((8,), dev, tensor.int32)
    m.compile([src, tgt], is_train=True, use_graph=use_graph)
    losses = []
    for _ in range(steps):
        src.copy_from_numpy(data.standard_normal((2, 5, 8)).astype(np.float32))
        tgt.copy_from_numpy(data.standard_normal((2, 4, 8)).astype(np.float32))
        y.copy_from_numpy(data.integers(0, 3, 8).astype(np.int32))
        losses.append(float(tensor.to_numpy(m(src, tgt, y))[0]))
    return m, losses


def test_graph_mode_equals_eager_and_states_round_trip(dev, tmp_path):
    _, eager_losses = _train(dev, False)
    graph, graph_losses = _train(dev, True)
    np.testing.assert_array_equal(eager_losses, graph_losses)  # dropout included: same draws
    path = tmp_path / "seq2seq.h5"
    graph.save_states(path, aux_states={"step": 4})
    fresh, _ = _train(dev, False, steps=0)
    assert fresh.load_states(path)["step"] == 4
    for name, t in graph.get_states().items():
        np.testing.assert_array_equal(
            tensor.to_numpy(fresh.get_states()[name]), tensor.to_numpy(t), err_msg=name
        )
    assert fresh.optimizer.step_counter == 4


@pytest.mark.parametrize(
    "make",
    [
        lambda: layer.MultiHeadAttention(6, 4),
        lambda: layer.MultiHeadAttention(8, 4, num_kv_heads=3),
        lambda: layer.MultiHeadAttention(8, 2, dropout=1.0),
        lambda: layer.MultiHeadAttention(8, 2, rotary=layer.Linear(2)),
        lambda: layer.TransformerEncoderLayer(8, 2, activation="swish"),
        lambda: layer.GroupNorm(0),
        lambda: layer.Conv1d(4, 3, padding=(1, 2, 3)),
        lambda: layer.ConvTranspose2d(4, 3, stride=2, output_padding=2),
        lambda: layer.Upsample(),
        lambda: layer.Upsample(scale_factor=2, mode="area"),
        lambda: layer.RotaryEmbedding(rotary_dim=3),
        lambda: layer.SinusoidalPositionalEmbedding(base=1),
        lambda: layer.Embedding(4, 2, padding_idx=4),
        lambda: layer.Embedding(4, 2, dtype="int32"),
    ],
)
def test_bad_arguments(make):
    with pytest.raises(ArgumentError):
        make()


def test_bad_inputs(dev):
    with pytest.raises(ShapeError, match="embed_dim"):
        layer.MultiHeadAttention(8, 2)(_x((3, 2, 6), dev))
    with pytest.raises(ShapeError):
        layer.MultiHeadAttention(8, 2)(_x((3, 8), dev))
    with pytest.raises(ShapeError, match="key_padding_mask"):
        layer.MultiHeadAttention(8, 2)(
            _x((3, 2, 8), dev), key_padding_mask=tensor.from_numpy(np.zeros((3, 2), bool), dev)
        )
    with pytest.raises(ShapeError, match="divisible"):
        layer.GroupNorm(3)(_x((2, 4, 3), dev))
    with pytest.raises(ShapeError):
        layer.BatchNorm1d()(_x((2, 4, 3, 3), dev))
    with pytest.raises(ShapeError):
        layer.Conv1d(2, 3)(_x((2, 4, 3, 3), dev))
    with pytest.raises(ShapeError):
        layer.Upsample(size=(3, 4))(_x((1, 2, 3), dev))
    with pytest.raises(ArgumentError, match="offset"):
        layer.SinusoidalPositionalEmbedding()(_x((3, 1, 4), dev), offset=-1)


@pytest.mark.parametrize("use_graph", [False, True], ids=["eager", "graph"])
def test_gpt_step_reads_nothing_on_the_host(dev, use_graph):
    """The benchmark's GPT (embedding, attention, clipping, AdamW) trains without a hidden
    device-to-host read: nothing in the step waits for a GPU or stops a CUDA-graph capture."""
    import os
    import sys

    from singa_lite import backend

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import training

    m = training.GPT(context=16, width=16, depth=1)
    m.set_optimizer(ClipGradNorm(opt.AdamW(lr=opt.CosineDecay(1e-3, 10, warmup_steps=2)), 1.0))
    tx = tensor.from_numpy(rng.integers(0, 58, (2, 16)).astype(np.int32), dev)
    ty = tensor.from_numpy(rng.integers(0, 58, 32).astype(np.int32), dev)
    m.compile([tx], is_train=True, use_graph=use_graph)
    m(tx, ty)
    with backend.count_host_reads() as reads:
        for _ in range(3):
            m(tx, ty)
    assert sum(reads.values()) == 0, dict(reads)

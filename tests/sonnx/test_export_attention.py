"""Export and import of the transformer ops and layers: attention (as ONNX Attention from opset
23, as MatMul/Softmax below), RMSNorm, GroupNorm, rotary embedding, and whole transformer
models; onnxruntime and singa_lite's importer must give the op's own outputs, and an imported
model must train (gradients flow through the imported Attention)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from singa_lite import autograd, layer, model, opt, sonnx, tensor
from singa_lite.sonnx.exporter import export_function

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

# The MatMul/Softmax form (before opset 23) sends a query that sees no key through Softmax of
# -inf only, which is NaN (then replaced by 0): NumPy warns on the way.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

R = np.random.default_rng(0)
OPSETS = [17, 21, 23, 28]


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _roundtrip(fn, arrays, opset, tol=2e-5):
    xs = [tensor.from_numpy(a) for a in arrays]
    want = tensor.to_numpy(fn(*xs))
    m = export_function(fn, xs, opset=opset)
    onnx.checker.check_model(m, full_check=True)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), arrays)})[0]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    back = sonnx.prepare(m).run(arrays)[0]
    np.testing.assert_allclose(np.asarray(back), want, rtol=tol, atol=tol)
    return [n.op_type for n in m.graph.node]


Q, K, V = f32(2, 4, 5, 8), f32(2, 2, 6, 8), f32(2, 2, 6, 3)
SEE = R.random((5, 6)) > 0.3
SEE[1] = False  # a query that sees no key: zeros in every form
CASES = {
    "causal_gqa": (lambda q, k, v: autograd.scaled_dot_product_attention(q, k, v, is_causal=True), [Q, K, V]),
    "bool_mask": (lambda q, k, v, m: autograd.scaled_dot_product_attention(q, k, v, m), [Q, K, V, SEE]),
    "float_mask_scale": (
        lambda q, k, v, m: autograd.scaled_dot_product_attention(q, k, v, m, scale=0.3),
        [Q, K, V, f32(2, 1, 5, 6)],
    ),
    "3d_causal_and_mask": (
        lambda q, k, v, m: autograd.scaled_dot_product_attention(q, k, v, m, is_causal=True),
        [Q[0], K[0, :1], V[0, :1], SEE],
    ),
    "5d_batch_mask": (
        lambda q, k, v, m: autograd.scaled_dot_product_attention(q, k, v, m),
        [f32(2, 3, 2, 4, 5), f32(2, 3, 1, 6, 5), f32(2, 3, 1, 6, 2), R.random((2, 1, 1, 4, 6)) > 0.2],
    ),
    "rms_norm": (lambda x, w: autograd.rms_norm(x, w, axis=-2), [f32(2, 6, 4, 3), f32(4, 3)]),
    "rms_norm_eps": (lambda x, w: autograd.rms_norm(x, w, eps=1e-3), [f32(3, 5), f32(5)]),
    "group_norm": (lambda x, w, b: autograd.group_norm(x, 3, w, b), [f32(2, 6, 4, 3), f32(6), f32(6)]),
    "group_norm_no_bias": (lambda x, w: autograd.group_norm(x, 2, w), [f32(2, 4, 5), f32(4)]),
    "rotary": (lambda x, c, s: autograd.rotary_embedding(x, c, s), [f32(2, 3, 4, 8), f32(4, 3), f32(4, 3)]),
    "rotary_interleaved": (
        lambda x, c, s: autograd.rotary_embedding(x, c, s, interleaved=True),
        [f32(2, 4, 6), f32(2, 4, 2), f32(2, 4, 2)],
    ),
}


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_op_roundtrip(name, opset):
    fn, arrays = CASES[name]
    ops_used = _roundtrip(fn, arrays, opset)
    native = {"causal_gqa": "Attention", "rms_norm": "RMSNormalization", "group_norm": "GroupNormalization"}
    if name in native:
        newer = opset >= (21 if name == "group_norm" else 23)
        assert (native[name] in ops_used) == newer, ops_used


class TinyLM(model.Model):
    def __init__(self, rotary: bool = False) -> None:
        super().__init__()
        self.tok = layer.Embedding(13, 16, padding_idx=0)
        self.pos = layer.SinusoidalPositionalEmbedding(batch_first=True)
        kw = {"batch_first": True, "norm_first": True, "activation": "gelu_tanh"}
        self.enc = layer.TransformerEncoderLayer(16, 4, 32, 0.1, **kw)
        self.attn = layer.MultiHeadAttention(
            16, 4, batch_first=True, num_kv_heads=2, rotary=layer.RotaryEmbedding() if rotary else None
        )
        self.norm = layer.RMSNorm()
        self.head = layer.Linear(13)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, idx):
        x = self.enc(self.pos(self.tok(idx)), is_causal=True)
        return self.head(self.norm(self.attn(x, is_causal=True)))

    def train_one_batch(self, idx, y):
        loss = self.loss(autograd.reshape(self.forward(idx), (-1, 13)), y)
        self.optimizer(loss)
        return loss


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("rotary", [False, True])
def test_model_export_runs_in_onnxruntime_and_imports_back(opset, rotary):
    m = TinyLM(rotary)
    tx = tensor.Tensor((2, 7), dtype=tensor.int32)
    m.compile([tx], is_train=False)
    idx = R.integers(0, 13, (2, 7)).astype(np.int32)
    m.eval()
    want = tensor.to_numpy(m.forward(tensor.from_numpy(idx)))
    onnx_model = m.to_onnx(opset=opset)
    onnx.checker.check_model(onnx_model, full_check=True)
    sess = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"input_0": idx})[0], want, rtol=1e-4, atol=1e-5)
    # Back into singa_lite: the same outputs, and the same parameter names.
    back = np.asarray(sonnx.prepare(onnx_model).run([idx])[0])
    np.testing.assert_allclose(back, want, rtol=1e-4, atol=1e-5)
    assert sorted(sonnx.SONNXModel(onnx_model).get_params()) == sorted(m.get_params())


def test_imported_attention_trains():
    """A model imported with an ONNX Attention node fine-tunes: gradients flow to q, k, v's
    projections through the imported node."""
    m = TinyLM()
    tx = tensor.Tensor((2, 7), dtype=tensor.int32)
    m.compile([tx], is_train=False)
    onnx_model = m.to_onnx(opset=23)
    assert "Attention" in {n.op_type for n in onnx_model.graph.node}

    class Tune(sonnx.SONNXModel):
        def train_one_batch(self, idx, y):
            out = self.forward(idx)[0]
            loss = autograd.softmax_cross_entropy(autograd.reshape(out, (-1, 13)), y)
            self.optimizer(loss)
            return loss

    tuned = Tune(onnx_model)
    tuned.set_optimizer(opt.Adam(lr=0.01))
    idx = tensor.from_numpy(R.integers(1, 13, (2, 7)).astype(np.int32))
    y = tensor.from_numpy(R.integers(0, 13, 14).astype(np.int32))
    tuned.compile([idx], is_train=True, use_graph=False)
    before = {k: tensor.to_numpy(v) for k, v in tuned.get_params().items()}
    losses = [float(tensor.to_numpy(tuned(idx, y))[0]) for _ in range(5)]
    assert losses[-1] < losses[0]
    changed = {k for k, v in tuned.get_params().items() if not np.array_equal(tensor.to_numpy(v), before[k])}
    assert {"attn.q_proj.W", "attn.k_proj.W", "attn.v_proj.W"} <= changed

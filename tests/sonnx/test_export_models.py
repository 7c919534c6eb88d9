"""Export of models built from singa_lite layers: onnxruntime and ``sonnx`` reproduce them.

Every layer family appears in some model here; each model is exported with ``export_model``
(what ``Model.to_onnx`` calls), checked with ``onnx.checker`` (full check), run in
onnxruntime (1e-5), and imported back as a ``SONNXModel`` whose params keep their names.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from singa_lite import layer, model, ops, tensor
from singa_lite.sonnx.exporter import export_model

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
R = np.random.default_rng(0)


class CNN(model.Model):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = layer.Conv2d(6, 3, stride=1, padding=(1, 0, 1, 2), dilation=1)
        self.bn1 = layer.BatchNorm2d()
        self.sepconv = layer.SeparableConv2d(8, 3, padding=1)
        self.conv2 = layer.Conv2d(8, 3, padding=1, group=2, activation="RELU")
        self.same = layer.Conv2d(4, 3, stride=2, pad_mode="SAME_UPPER", bias=False)
        self.pool = layer.MaxPool2d(2, 2, ceil_mode=True)
        self.avg = layer.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.gap = layer.GlobalAvgPool2d()
        self.flat = layer.Flatten()
        self.fc = layer.Linear(5)
        self.gemm = layer.Gemm(3)
        self.drop = layer.Dropout(0.3)

    def forward(self, x):
        y = ops.relu(self.bn1(self.conv1(x)))
        y = self.conv2(self.sepconv(y))
        y = self.avg(self.pool(self.same(y)))
        z = self.flat(self.gap(y))
        return self.gemm(ops.tanh(self.fc(self.drop(z))))


class ResBlock(layer.Layer):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = layer.Conv2d(c, 3, padding=1, bias=False)
        self.bn1 = layer.BatchNorm2d()
        self.conv2 = layer.Conv2d(c, 3, padding=1, bias=False)
        self.bn2 = layer.BatchNorm2d()
        self.add = layer.Add()

    def forward(self, x):
        y = self.bn2(self.conv2(ops.relu(self.bn1(self.conv1(x)))))
        return ops.relu(self.add(x, y))


class ResNetTwoHeads(model.Model):
    """Nested layers (names blk1.conv1.W) and two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = layer.Conv2d(4, 3, padding=1)
        self.blk1 = ResBlock(4)
        self.blk2 = ResBlock(4)
        self.pool = layer.MaxPool2d(2)
        self.flat = layer.Flatten()
        self.head = layer.Linear(3)
        self.cat = layer.Cat(1)

    def forward(self, x):
        y = self.pool(self.blk2(self.blk1(self.stem(x))))
        logits = self.head(self.flat(y))
        probs = layer.SoftMax()(logits)
        return logits, self.cat([probs, logits])


class Recurrent(model.Model):
    """LSTM over a (T, N, I) tensor, GRU over a list of steps, RNN batch-first."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = layer.LSTM(5)
        self.gru = layer.GRU(4)
        self.rnn = layer.RNN(3, batch_first=True)
        self.fc = layer.Linear(2)

    def forward(self, x):
        y, h, c = self.lstm(x)
        steps, hg = self.gru(list(y))  # the steps, each without the time axis
        z, hr = self.rnn(ops.transpose(ops.cat([ops.unsqueeze(s, 0) for s in steps], 0), (1, 0, 2)))
        return self.fc(ops.cat([h, c, hg, hr], 1)), z


class Encoder(model.Model):
    """A small transformer encoder: embedding Gather, attention MatMuls, LayerNorm, Gelu."""

    def __init__(self, vocab: int = 11, d: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.d, self.heads = d, heads
        self.emb = layer.Embedding(vocab, d)
        self.q, self.k, self.v, self.o = (layer.Linear(d) for _ in range(4))
        self.ln1, self.ln2 = layer.LayerNorm(), layer.LayerNorm()
        self.ff1, self.ff2 = layer.Linear(16), layer.Linear(d)
        self.act = layer.Gelu()

    def split(self, t, n, s):
        return ops.transpose(ops.reshape(t, (n, s, self.heads, self.d // self.heads)), (0, 2, 1, 3))

    def forward(self, ids):
        n, s = ids.shape
        x = self.emb(ids)
        q, k, v = (self.split(f(x), n, s) for f in (self.q, self.k, self.v))
        att = ops.softmax(
            ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) / float(np.sqrt(self.d // self.heads)), -1
        )
        ctx = ops.reshape(ops.transpose(ops.matmul(att, v), (0, 2, 1, 3)), (n, s, self.d))
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.ff2(self.act(self.ff1(x))))


MODELS = [
    ("cnn", CNN, [R.standard_normal((2, 3, 9, 9)).astype(np.float32)]),
    ("resnet_two_heads", ResNetTwoHeads, [R.standard_normal((2, 3, 8, 8)).astype(np.float32)]),
    ("recurrent", Recurrent, [R.standard_normal((4, 2, 3)).astype(np.float32)]),
    ("encoder", Encoder, [R.integers(0, 11, (2, 5)).astype(np.int64)]),
]


def _built(cls, arrays):
    m = cls()
    m.compile([tensor.Tensor(data=a, requires_grad=False) for a in arrays], is_train=False)
    for t in m.get_states().values():  # non-trivial running stats and biases
        t.copy_from_numpy(np.asarray(t) + R.uniform(0.1, 0.5, t.shape).astype(np.float32))
    return m


def _outs(out):
    if isinstance(out, tensor.Tensor):
        return [np.asarray(out)]
    return [a for o in out for a in _outs(o)]


@pytest.mark.parametrize("name,cls,arrays", MODELS, ids=[m[0] for m in MODELS])
def test_model_export_runs_in_onnxruntime(name, cls, arrays):
    m = _built(cls, arrays)
    proto = export_model(m)
    onnx.checker.check_model(proto, full_check=True)
    assert {i.name for i in proto.graph.initializer} >= set(m.get_states())
    expected = _outs(m.forward(*[tensor.Tensor(data=a, requires_grad=False) for a in arrays]))
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), arrays)})
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,cls,arrays", MODELS, ids=[m[0] for m in MODELS])
def test_model_export_imports_back(name, cls, arrays):
    from singa_lite import sonnx

    m = _built(cls, arrays)
    expected = _outs(m.forward(*[tensor.Tensor(data=a, requires_grad=False) for a in arrays]))
    back = sonnx.SONNXModel(export_model(m))
    got = back.forward(*[tensor.Tensor(data=a, requires_grad=False) for a in arrays])
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-5, atol=1e-5)


def test_names_and_opset_options():
    m = _built(CNN, MODELS[0][2])
    proto = export_model(m, model_name="cnn", opset=13, input_names=["image"], output_names=["scores"])
    assert proto.graph.name == "cnn" and proto.opset_import[0].version == 13
    assert [i.name for i in proto.graph.input] == ["image"] and [o.name for o in proto.graph.output] == [
        "scores"
    ]
    props = {p.key: p.value for p in proto.metadata_props}
    assert "conv1.W" in props["singa_lite.params"] and "bn1.running_mean" in props["singa_lite.states"]
    onnx.checker.check_model(proto, full_check=True)


def test_export_needs_inputs_or_compile():
    from singa_lite.errors import OnnxError

    with pytest.raises(OnnxError, match="compiled"):
        export_model(CNN())

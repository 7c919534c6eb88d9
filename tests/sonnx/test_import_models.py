"""Whole models through ``prepare``: onnx's nine "light" model-zoo models (through
``onnx.backend.test``'s own runner) and real architectures exported from PyTorch with random
weights, checked against onnxruntime within 1e-4 relative."""

from __future__ import annotations

import io
import unittest
import warnings

import numpy as np
import pytest

from singa_lite.sonnx import SingaBackend, prepare

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
torch = pytest.importorskip("torch", reason="PyTorch is not installed")
nn = torch.nn

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512"]  # fmt: skip


@pytest.fixture(scope="module")
def light_tests() -> dict:
    """onnx's backend test classes for SingaBackend, restricted to the light models."""
    import onnx.backend.test

    backend_test = onnx.backend.test.BackendTest(SingaBackend, __name__)
    backend_test.include("^test_(" + "|".join(LIGHT) + ")_cpu$")
    return {
        name: cls for cls in backend_test.test_cases.values() for name in dir(cls) if name.startswith("test_")
    }


@pytest.mark.parametrize("name", LIGHT)
def test_light_model_zoo(
    name: str, light_tests: dict, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnx's runner feeds its dummy input and compares with the output stored in the wheel."""
    monkeypatch.setenv("ONNX_HOME", str(tmp_path))  # the runner writes its test data there
    method = f"test_{name}_cpu"
    result = unittest.TestResult()
    light_tests[method](method).run(result)
    assert result.testsRun == 1 and not result.skipped
    assert not result.failures and not result.errors, (result.failures + result.errors)[0][1]


# -- architectures exported from PyTorch -------------------------------------------------------
def _export(model: nn.Module, args: tuple, opset: int, **kw: object) -> bytes:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), args, f, opset_version=opset, dynamo=False, **kw)
    return f.getvalue()


def _check_against_ort(onnx_bytes: bytes, inputs: list[np.ndarray]) -> None:
    sess = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
    expected = sess.run(None, feeds)
    got = prepare(onnx_bytes).run(inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(e).max())))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
        return torch.relu(y + (x if self.down is None else self.down(x)))


def resnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
        BasicBlock(8, 8, 1), BasicBlock(8, 16, 2), BasicBlock(16, 32, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )  # fmt: skip


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.body = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.use_res else self.body(x)


def mobilenet_v2() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
        InvertedResidual(8, 8, 1, 1), InvertedResidual(8, 12, 2, 6), InvertedResidual(12, 12, 1, 6),
        InvertedResidual(12, 16, 2, 6), nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(32, 10),
    )  # fmt: skip


def vgg() -> nn.Module:
    layers: list[nn.Module] = []
    cin = 3
    for width in (8, "M", 16, "M", 16, 16, "M", 32, 32, "M"):
        if width == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(cin, int(width), 3, padding=1), nn.ReLU()]
            cin = int(width)
    return nn.Sequential(
        *layers, nn.Flatten(), nn.Linear(32 * 2 * 2, 24), nn.ReLU(), nn.Dropout(), nn.Linear(24, 10)
    )


def _randomize_bn(model: nn.Module) -> nn.Module:
    """Non-trivial running statistics, so inference-form batch norm is really tested."""
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model


@pytest.mark.parametrize("build", [resnet, mobilenet_v2, vgg], ids=["resnet", "mobilenet_v2", "vgg"])
@pytest.mark.parametrize("opset", [11, 17])
def test_cnn_matches_onnxruntime(build: object, opset: int) -> None:
    torch.manual_seed(0)
    model = _randomize_bn(build())  # type: ignore[operator]
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    _check_against_ort(_export(model, (torch.from_numpy(x),), opset), [x])


class SequenceModel(nn.Module):
    def __init__(self, cell: type, bidirectional: bool) -> None:
        super().__init__()
        self.rnn = cell(6, 8, num_layers=2, bidirectional=bidirectional, batch_first=True)
        self.fc = nn.Linear(8 * (2 if bidirectional else 1), 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.rnn(x)[0]
        return self.fc(y[:, -1])


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU], ids=["lstm", "gru"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
def test_rnn_sequence_model_matches_onnxruntime(cell: type, bidirectional: bool) -> None:
    torch.manual_seed(0)
    x = np.random.default_rng(1).standard_normal((3, 7, 6)).astype(np.float32)
    data = _export(SequenceModel(cell, bidirectional), (torch.from_numpy(x),), 14)
    _check_against_ort(data, [x])


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.layers = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, activation="gelu", batch_first=True),
            num_layers=2,
            enable_nested_tensor=False,
        )
        self.fc = nn.Linear(16, 5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.fc(self.layers(self.emb(tokens)).mean(1))


@pytest.mark.parametrize("opset", [17, 20])
def test_transformer_encoder_matches_onnxruntime(opset: int) -> None:
    """Embedding Gather, MatMul, LayerNormalization, Softmax, Erf (17) or Gelu (20)."""
    torch.manual_seed(0)
    tokens = np.random.default_rng(2).integers(0, 50, (2, 9)).astype(np.int64)
    data = _export(Encoder(), (torch.from_numpy(tokens),), opset)
    _check_against_ort(data, [tokens])


@pytest.mark.parametrize("opset", [17, 20])
def test_transformer_encoder_fine_tunes_as_sonnxmodel(opset: int) -> None:
    """The exported encoder (attention as MatMul/Softmax, LayerNormalization, Gelu) trains as a
    SONNXModel: the loss falls and every imported weight matrix moves."""
    from singa_lite import autograd, opt, sonnx, tensor

    torch.manual_seed(0)
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 50, (8, 9)).astype(np.int64)
    labels = rng.integers(0, 5, 8).astype(np.int32)
    data = _export(Encoder(), (torch.from_numpy(tokens),), opset)

    class Tune(sonnx.SONNXModel):
        def train_one_batch(self, x, y):
            loss = autograd.softmax_cross_entropy(self.forward(x)[0], y)
            self.optimizer(loss)
            return loss

    m = Tune(data)
    m.set_optimizer(opt.Adam(lr=0.01))
    x, y = tensor.Tensor(data=tokens), tensor.Tensor(data=labels)
    m.compile([x], is_train=True, use_graph=True)
    before = {k: tensor.to_numpy(v) for k, v in m.get_params().items()}
    losses = [float(tensor.to_numpy(m(x, y))[0]) for _ in range(15)]
    assert losses[-1] < 0.5 * losses[0], losses
    moved = [k for k, v in m.get_params().items() if not np.array_equal(tensor.to_numpy(v), before[k])]
    assert len(moved) >= 0.9 * len(before), sorted(set(before) - set(moved))


def test_dynamic_batch_shape_subgraph() -> None:
    """Shape -> Gather -> Concat -> Reshape computed from the runtime tensor: any batch size."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
    x = torch.randn(2, 3, 8, 8)
    data = _export(model, (x,), 13, input_names=["x"], dynamic_axes={"x": {0: "n"}})
    for n in (1, 5):
        xn = np.random.default_rng(n).standard_normal((n, 3, 8, 8)).astype(np.float32)
        _check_against_ort(data, [xn])


def test_backend_run_model_returns_numpy() -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.Softmax(-1))
    x = np.ones((2, 4), np.float32)
    out = SingaBackend.run_model(_export(model, (torch.from_numpy(x),), 13), [x])
    assert isinstance(out[0], np.ndarray) and out[0].shape == (2, 3)

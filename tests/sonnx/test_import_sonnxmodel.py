"""``SONNXModel``: imported weights as named params and states, training through any
optimizer, and transfer learning that survives ``save_states`` and a fresh process."""

from __future__ import annotations

import io
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from singa_lite import layer, opt, sonnx, tensor
from singa_lite.data import load_digits
from singa_lite.errors import ShapeError

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
nn = torch.nn


def digits_cnn_onnx() -> bytes:
    """A small CNN for 8x8 digits, exported with BatchNormalization kept as its own node."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(16, 10),
    ).eval()  # fmt: skip
    # Trained-looking statistics (at their initial 0/1 values PyTorch's exporter would share
    # them with the BN shift/scale initializers of equal value).
    model[1].running_mean.uniform_(-0.1, 0.1)
    model[1].running_var.uniform_(0.5, 1.5)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (torch.zeros(1, 1, 8, 8),), f, opset_version=13, dynamo=False,
            do_constant_folding=False, input_names=["x"], dynamic_axes={"x": {0: "n"}},
        )  # fmt: skip
    return f.getvalue()


class DigitsTransfer(sonnx.SONNXModel):
    """The imported CNN without its last node (the Gemm), and a new Linear head."""

    def __init__(self, onnx_model: object) -> None:
        super().__init__(onnx_model)
        self.head = layer.Linear(10)

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:  # type: ignore[override]
        features = super().forward(x, last_layers=-2)[0]
        return self.head(features)


def test_imported_weights_are_named_params_and_states() -> None:
    model = sonnx.SONNXModel(digits_cnn_onnx())
    params, states = model.get_params(), model.get_states()
    assert set(params) == {
        "0.weight",
        "0.bias",
        "1.weight",
        "1.bias",
        "4.weight",
        "4.bias",
        "8.weight",
        "8.bias",
    }
    assert {"1.running_mean", "1.running_var"} <= set(states) - set(params)
    assert all(t.stores_grad for t in params.values())
    assert model.onnx_names["0.weight"] == "0.weight"


def test_param_names_are_sanitised_and_unique() -> None:
    taken = {"training"}
    names = [sonnx.model.param_name(n, taken) for n in ("onnx::Conv_1", "onnx::Conv_1", "_w", "training")]
    assert names == ["onnx__Conv_1", "onnx__Conv_1_1", "w_w", "training_1"]


def test_forward_matches_prepare_and_gradients_reach_imported_weights() -> None:
    data = digits_cnn_onnx()
    model = sonnx.SONNXModel(data)
    x = tensor.Tensor(data=load_digits("test")[0][:4], requires_grad=False)
    model.eval()
    np.testing.assert_allclose(
        model.forward(x)[0].numpy(), sonnx.prepare(data).run([x])[0].numpy(), rtol=1e-6
    )
    model.set_optimizer(opt.SGD(lr=0.1))
    model.train()
    before = model.get_params()["0.weight"].numpy().copy()
    mean_before = model.get_states()["1.running_mean"].numpy().copy()
    y = tensor.Tensor(data=np.arange(4, dtype=np.int32), requires_grad=False)
    model(x, y)
    assert not np.allclose(model.get_params()["0.weight"].numpy(), before)
    assert not np.allclose(model.get_states()["1.running_mean"].numpy(), mean_before)  # BN trains


_RELOAD = """
import sys
import numpy as np
sys.path.insert(0, {tests!r})
from test_import_sonnxmodel import DigitsTransfer
from singa_lite import tensor
from singa_lite.data import load_digits
from singa_lite.errors import ShapeError
model = DigitsTransfer({onnx_path!r})
x = tensor.Tensor(data=load_digits("test")[0], requires_grad=False)
model.compile([x], is_train=False)
model.load_states({ckpt!r})
np.save({out!r}, model(x).numpy())
"""


def test_transfer_learning_survives_save_states_and_a_fresh_process(tmp_path: Path) -> None:
    onnx_path = tmp_path / "cnn.onnx"
    onnx_path.write_bytes(digits_cnn_onnx())
    x_train, y_train = load_digits("train")
    x_test, _ = load_digits("test")
    model = DigitsTransfer(str(onnx_path))
    model.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    tx = tensor.Tensor(data=x_train[:64], requires_grad=False)
    model.compile([tx], is_train=True)
    # last_layers=-2 really cuts the classifier: the head sees the features, not 10 logits.
    (features,) = sonnx.SONNXModel.forward(model, tx, last_layers=-2)
    (logits,) = sonnx.SONNXModel.forward(model, tx)
    assert logits.shape == (64, 10) and features.shape[1] != 10
    assert model.head.W.shape == (features.shape[1], 10)
    losses = []
    for step in range(30):
        i = (step * 64) % (len(x_train) - 64)
        _, loss = model(
            tensor.Tensor(data=x_train[i : i + 64], requires_grad=False),
            tensor.Tensor(data=y_train[i : i + 64], requires_grad=False),
        )
        losses.append(loss.numpy().item())
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    ckpt = tmp_path / "ckpt.h5"
    model.save_states(str(ckpt))
    model.eval()
    expected = model(tensor.Tensor(data=x_test, requires_grad=False)).numpy()
    assert {"0.weight", "1.running_var", "head.W"} <= set(model.get_states())

    script = _RELOAD.format(
        tests=str(Path(__file__).parent),
        onnx_path=str(onnx_path),
        ckpt=str(ckpt),
        out=str(tmp_path / "p.npy"),
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "p.npy"), expected, rtol=1e-6, atol=1e-6)


def test_sonnxmodel_runs_other_batch_sizes_and_widened_inputs() -> None:
    """run() checks declared dims like onnxruntime; SONNXModel fine-tunes at any batch size and
    takes its Tensors' widened types (an exporter fixed batch 1 here, and a uint8 input)."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 2), np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
            helper.make_node("MatMul", ["xf", "w"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m = sonnx.SONNXModel(model)
    m.eval()
    (y,) = m(tensor.Tensor(data=np.ones((8, 4), np.int64), requires_grad=False))
    np.testing.assert_array_equal(y.numpy(), np.full((8, 2), 4.0, np.float32))
    with pytest.raises(ShapeError, match="declared with shape"):
        sonnx.prepare(model).run([np.ones((8, 4), np.uint8)])


def test_sonnxmodel_reads_lists_and_other_floats_as_the_declared_type() -> None:
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((3, 2), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [w],
    )
    m = sonnx.SONNXModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    m.eval()
    assert m.forward([[1.0, 2.0, 3.0]])[0].dtype == np.float32
    assert m.forward(np.ones((4, 3)))[0].dtype == np.float32  # float64 data, float32 model

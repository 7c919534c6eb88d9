"""DESIGN §4 for the Python API: bad input to layers, optimizers and models raises a typed error
(a ``SingaLiteError``) that names the culprit, never a raw ``AttributeError``/``KeyError`` from
deep inside the library."""

from __future__ import annotations

import math

import numpy as np
import pytest

from singa_lite import layer, model, opt, tensor
from singa_lite.errors import (
    ArgumentError,
    OptimizerError,
    OptimizerNotSetError,
    ShapeError,
    SingaLiteError,
    StateMismatchError,
)


def _t(*shape: int) -> tensor.Tensor:
    return tensor.Tensor(data=np.ones(shape, np.float32), requires_grad=False)


def test_argument_error_is_caught_by_every_handler_that_caught_the_builtins():
    assert issubclass(ArgumentError, SingaLiteError)
    assert issubclass(ArgumentError, ValueError) and issubclass(ArgumentError, TypeError)


# -- layers ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make, data",
    [
        (lambda: layer.Linear(3), np.ones((2, 3), np.float32)),
        (lambda: layer.Linear(3), [[1.0, 2.0, 3.0]]),
        (lambda: layer.Conv2d(2, 3), np.ones((1, 1, 4, 4), np.float32)),
        (layer.ReLU, np.ones(3)),
        (lambda: layer.Linear(3), 2.0),
        (lambda: layer.Cat(), [_t(2), np.ones(2)]),
    ],
    ids=["linear-ndarray", "linear-list", "conv-ndarray", "relu-ndarray", "linear-float", "cat-mixed"],
)
def test_raw_data_given_to_a_layer_says_to_wrap_it(make, data):
    lyr = make()
    with pytest.raises(ArgumentError, match=r"not (of )?Tensors?; wrap arrays with tensor\.from_numpy"):
        lyr(data)
    assert not lyr.get_params()  # nothing was built from the bad input


def test_an_array_as_a_second_input_is_refused_too():
    with pytest.raises(ArgumentError, match=r"SoftMaxCrossEntropy: input 1 is ndarray"):
        layer.SoftMaxCrossEntropy()(_t(2, 3), np.zeros(2, np.int32))


def test_a_registered_layer_is_named_by_its_path():
    class Net(layer.Layer):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(2)

        def forward(self, x):
            return self.fc(x.data)  # a bug in user code: hands the array on

    with pytest.raises(ArgumentError, match="Linear 'fc': input 0 is ndarray"):
        Net()(_t(1, 3))


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda: layer.Linear(-3), "Linear: out_features must be an integer >= 1, got -3"),
        (lambda: layer.Linear(0), "Linear: out_features must be an integer >= 1, got 0"),
        (lambda: layer.Linear("8"), "out_features must be an integer"),
        (lambda: layer.Linear(0, 4), "Linear: in_features must be an integer >= 1, got 0"),
        (lambda: layer.Gemm(0), "Gemm: nb_kernels must be an integer >= 1, got 0"),
        (lambda: layer.Conv2d(0, 3), "Conv2d: nb_kernels must be an integer >= 1, got 0"),
        (lambda: layer.Conv2d(4, 0), "Conv2d: kernel_size must be an integer >= 1, got 0"),
        (lambda: layer.Conv2d(4, (3, -1)), "kernel_size must be an integer >= 1, got -1"),
        (lambda: layer.Conv2d(4, 3, stride=0), "Conv2d: stride must be an integer >= 1, got 0"),
        (lambda: layer.Conv2d(4, 3, padding=-1), "Conv2d: padding must be an integer >= 0, got -1"),
        (lambda: layer.Conv2d(4, 3, dilation=0), "Conv2d: dilation must be an integer >= 1, got 0"),
        (lambda: layer.Conv2d(4, 3, group=0), "Conv2d: group must be an integer >= 1, got 0"),
        (
            lambda: layer.Conv2d(4, 3, padding=(1, 2, 3)),
            r"Conv2d: padding must be .* of length 2 or 4, got \(1, 2, 3\)",
        ),
        (lambda: layer.Conv2d(4, 3, pad_mode="same"), "Conv2d: pad_mode must be one of .*got 'same'"),
        (lambda: layer.Conv2d(4, 3, pad_mode=None), "pad_mode must be one of .*got None"),
        (lambda: layer.Conv2d(4, 3, activation="relu"), "activation must be one of .*got 'relu'"),
        (lambda: layer.SeparableConv2d(0, 3), "SeparableConv2d: nb_kernels must be an integer >= 1"),
        (lambda: layer.SeparableConv2d(4, 3, stride=0), "SeparableConv2d: stride must be"),
        (lambda: layer.MaxPool2d(2, pad_mode="valid"), "MaxPool2d: pad_mode must be one of"),
        (lambda: layer.AvgPool2d(0), "AvgPool2d: kernel_size must be an integer >= 1, got 0"),
        (lambda: layer.MaxPool1d(2, stride=0), "MaxPool1d: stride must be an integer >= 1, got 0"),
        (lambda: layer.Dropout(-0.1), r"Dropout: ratio must be a number in \[0, 1\), got -0.1"),
        (lambda: layer.Dropout(1.5), r"Dropout: ratio must be a number in \[0, 1\), got 1.5"),
        (lambda: layer.Dropout("half"), "Dropout: ratio must be a number"),
        (lambda: layer.Embedding(0, 4), "Embedding: input_dim must be an integer >= 1, got 0"),
        (lambda: layer.Embedding(10, -4), "Embedding: output_dim must be an integer >= 1, got -4"),
        (lambda: layer.RNN(0), "RNN: hidden_size must be an integer >= 1, got 0"),
        (lambda: layer.LSTM(3, 4, num_layers=2), "one unidirectional layer per instance.*num_layers=2"),
        (lambda: layer.GRU(3, 4, nonlinearity="gelu"), "GRU: nonlinearity must be one of"),
    ],
)
def test_bad_layer_arguments_fail_at_construction(make, fragment):
    with pytest.raises(ArgumentError, match=fragment):
        make()


def test_integral_numbers_of_any_kind_are_still_accepted():
    assert layer.Linear(np.int64(3)).out_features == 3
    assert layer.Linear(3.0).out_features == 3
    assert layer.Conv2d(np.int32(4), (np.int64(3), 3)).kernel_size == (3, 3)


def test_batchnorm2d_refuses_input_that_is_not_4d():
    bn = layer.BatchNorm2d()
    with pytest.raises(
        ShapeError, match=r"BatchNorm2d: expects a 4-d input \(N, C, H, W\), got shape \(2, 3\)"
    ):
        bn(_t(2, 3))
    bn(_t(2, 3, 4, 4))  # built on 4-d input, it still refuses 2-d later
    with pytest.raises(ShapeError, match="4-d input"):
        bn(_t(2, 3))


def test_set_states_with_unknown_names_lists_them_and_the_expected_ones():
    fc = layer.Linear(2)
    fc(_t(1, 3))
    with pytest.raises(
        StateMismatchError, match=r"no state named \['nope', 'zz'\]; expected names: \['W', 'b'\]"
    ):
        fc.set_states({"nope": np.zeros(1), "zz": np.zeros(1), "W": np.zeros((3, 2))})
    with pytest.raises(StateMismatchError, match="no parameter named"):
        fc.set_params({"nope": np.zeros(1)})
    with pytest.raises(StateMismatchError, match="call the layer once"):
        layer.Linear(2).set_states({"W": np.zeros((3, 2))})  # not built yet: no names at all
    with pytest.raises(ArgumentError, match="expects a dict"):
        fc.set_states([("W", np.zeros((3, 2)))])
    with pytest.raises(ArgumentError, match="'W': expects a Tensor or an array, got list"):
        fc.set_states({"W": [[0.0, 0.0]] * 3})


def test_embedding_initializer_is_honoured():
    idx = tensor.Tensor(data=np.arange(10, dtype=np.int32), requires_grad=False)
    emb = layer.Embedding(1000, 16, initializer="uniform")
    emb(idx)
    w = tensor.to_numpy(emb.W)
    bound = 1 / math.sqrt(16)
    assert w.min() >= -bound and w.max() < bound
    assert w.min() < -0.95 * bound and w.max() > 0.95 * bound  # uniform fills the whole range
    assert abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound

    emb = layer.Embedding(1000, 16)  # the default, "gaussian": N(0, 1/sqrt(output_dim))
    emb(idx)
    assert abs(tensor.to_numpy(emb.W).std() - 0.25) < 0.01

    emb = layer.Embedding(1000, 16, initializer="xavier_uniform")
    emb(idx)
    a = math.sqrt(6 / (1000 + 16))
    assert np.abs(tensor.to_numpy(emb.W)).max() <= a

    emb = layer.Embedding(5, 2, initializer=lambda w: w.set_value(0.5))
    y = emb(idx[:3])
    assert np.all(tensor.to_numpy(y) == 0.5)


def test_embedding_rejects_an_unknown_initializer_when_built():
    with pytest.raises(
        ArgumentError, match=r"Embedding: unknown initializer 'glorot'; known: .*'he_uniform'"
    ):
        layer.Embedding(10, 4, initializer="glorot")
    with pytest.raises(ArgumentError, match="name or a callable, got int"):
        layer.Embedding(10, 4, initializer=3)


# -- optimizers -----------------------------------------------------------------------------
def _param() -> tensor.Tensor:
    p = tensor.Tensor(data=np.ones(3, np.float32), requires_grad=False)
    p.name = "w"
    return p


@pytest.mark.parametrize(
    "call, error, fragment",
    [
        (
            lambda: opt.SGD(0.1).set_states(None),
            ArgumentError,
            "SGD.set_states: expects the dict .* got NoneType",
        ),
        (lambda: opt.SGD(0.1).set_states([1, 2]), ArgumentError, "got list"),
        (
            lambda: opt.SGD(0.1).set_states({"step_counter": 1, "hyperparams": 5}),
            StateMismatchError,
            "'hyperparams' must be a dict, got int",
        ),
        (
            lambda: opt.SGD(0.1, momentum=0.9).set_states({"step_counter": 1, "moments": [1]}),
            StateMismatchError,
            "'moments' must be a dict",
        ),
        (
            lambda: opt.SGD(0.1).set_states({"step_counter": "x"}),
            OptimizerError,
            "non-negative integer, got 'x'",
        ),
        (lambda: opt.SGD(0.1).set_states({"step_counter": 1, "lr": 0.5}), OptimizerError, "schedule states"),
        (lambda: opt.SGD(0.1).apply("w", _param(), None), ArgumentError, "gradient of 'w' .* got NoneType"),
        (
            lambda: opt.Adam().apply("w", np.ones(3), np.ones(3)),
            ArgumentError,
            "param_value must be a Tensor",
        ),
        (lambda: opt.SGD(0.1).update(np.ones(3), np.ones(3)), ArgumentError, "updates Tensors, got ndarray"),
        (lambda: opt.SGD(-0.1), OptimizerError, r"SGD: lr must be a number >= 0, got -0.1"),
        (lambda: opt.SGD(0.1, momentum=-0.5), OptimizerError, r"SGD: momentum must be a number >= 0"),
        (lambda: opt.SGD("fast"), ArgumentError, "SGD: lr must be a number or a DecayScheduler, got 'fast'"),
        (lambda: opt.SGD(math.nan), OptimizerError, "SGD: lr must be a number >= 0, got nan"),
        (lambda: opt.ExponentialDecay(0.1, 10, 0.5)(None), OptimizerError, "non-negative integer, got None"),
    ],
)
def test_bad_optimizer_input_is_typed(call, error, fragment):
    with pytest.raises(error, match=fragment):
        call()


def test_a_failed_set_states_leaves_the_optimizer_unchanged():
    sgd = opt.SGD(0.1, momentum=0.9)
    sgd.apply("w", _param(), _param())
    before = tensor.to_numpy(sgd.get_states()["moments"]["w"])
    with pytest.raises(SingaLiteError):
        sgd.set_states({"step_counter": 3, "hyperparams": "momentum"})
    assert sgd.step_counter == 0
    np.testing.assert_array_equal(tensor.to_numpy(sgd.get_states()["moments"]["w"]), before)


# -- models ---------------------------------------------------------------------------------
class _Net(model.Model):
    def __init__(self):
        super().__init__()
        self.fc = layer.Linear(2)
        self.loss_fn = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.fc(x)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss_fn(out, y)
        self.optimizer(loss)
        return out, loss


def _batch() -> tuple[tensor.Tensor, tensor.Tensor]:
    return _t(4, 3), tensor.Tensor(data=np.array([0, 1, 0, 1], np.int32), requires_grad=False)


@pytest.mark.parametrize("use_graph", [False, True])
def test_training_without_set_optimizer_says_to_call_it(use_graph):
    m = _Net()
    x, y = _batch()
    m.compile([x], is_train=True, use_graph=use_graph)
    with pytest.raises(
        OptimizerNotSetError, match=r"_Net has no optimizer: call set_optimizer\(\.\.\.\) first"
    ):
        m(x, y)
    # Still an AttributeError: code probing for an optimizer reads "none".
    assert getattr(m, "optimizer", None) is None and not hasattr(m, "optimizer")


def test_an_optimizer_assigned_directly_works_as_in_singa_scripts():
    m = _Net()
    x, y = _batch()
    m.compile([x], is_train=True)
    m.optimizer = opt.SGD(0.1)  # SINGA's examples override set_optimizer with this
    m(x, y)
    assert m.optimizer.step_counter == 1
    m.set_optimizer(None)  # clearing is allowed
    assert getattr(m, "optimizer", None) is None


@pytest.mark.parametrize("bad", ["sgd", opt.SGD, 0.1])
def test_set_optimizer_refuses_what_is_not_an_optimizer(bad):
    m = _Net()
    with pytest.raises(ArgumentError, match=r"the optimizer must be an opt.Optimizer"):
        m.set_optimizer(bad)
    with pytest.raises(ArgumentError, match=r"the optimizer must be an opt.Optimizer"):
        m.optimizer = bad


def test_mode_flags_must_be_booleans():
    m = _Net()
    x, _ = _batch()
    with pytest.raises(ArgumentError, match=r"_Net.graph: mode must be True or False, got 'yes'"):
        m.graph("yes")
    with pytest.raises(ArgumentError, match="sequential must be True or False"):
        m.graph(True, sequential="no")
    with pytest.raises(ArgumentError, match=r"_Net.compile: use_graph must be True or False, got 'yes'"):
        m.compile([x], use_graph="yes")
    with pytest.raises(ArgumentError, match="is_train must be True or False, got None"):
        m.compile([x], is_train=None)
    with pytest.raises(ArgumentError, match=r"_Net.train: mode must be True or False, got 2"):
        m.train(2)
    m.graph(np.bool_(True), 0)  # NumPy bools and 0/1 are flags
    assert m.graph_mode is True and m.sequential is False


def test_compile_needs_tensor_placeholders():
    m = _Net()
    with pytest.raises(ArgumentError, match=r"inputs must be Tensors .* got a list of \['ndarray'\]"):
        m.compile([np.ones((4, 3), np.float32)])
    with pytest.raises(ArgumentError, match=r"inputs must be Tensors .* got ndarray"):
        m.compile(np.ones((4, 3), np.float32))


def test_model_without_train_one_batch_says_so():
    class Bare(model.Model):
        def forward(self, x):
            return x

    with pytest.raises(ArgumentError, match="must define train_one_batch"):
        Bare()(_t(1))


# -- tensors --------------------------------------------------------------------------------
def test_tensor_argument_errors_are_typed():
    with pytest.raises(ArgumentError, match="negative dimensions"):
        tensor.Tensor((2, -1))
    with pytest.raises(ArgumentError, match="shape must be a tuple of integers"):
        tensor.Tensor(("a", 2))
    with pytest.raises(ArgumentError, match="copy_from: expects a Tensor or an array, got list"):
        _t(2).copy_from([1.0, 2.0])
    with pytest.raises(ArgumentError, match="0-d"):
        len(tensor.Tensor(data=np.float32(1.0), requires_grad=False))

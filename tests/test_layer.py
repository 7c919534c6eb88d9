"""Layers: output shapes, gradient flow to every parameter, naming, state round trips."""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite import ArgumentError, ShapeError, StateMismatchError, autograd, layer, tensor
from singa_lite.layer import Layer

rng = np.random.default_rng(0)


def _x(shape, dev, dtype=np.float32):
    return tensor.from_numpy(rng.standard_normal(shape).astype(dtype), dev)


def _labels(n, dev, classes=3):
    return tensor.from_numpy(rng.integers(0, classes, n).astype(np.int32), dev)


def _onehot(labels, dev, classes=3):
    return tensor.from_numpy(np.eye(classes, dtype=np.float32)[labels], dev)


def _scalar(y):
    """Sum of every output element, as a loss."""
    ys = y if isinstance(y, (list, tuple)) else [y]
    total = None
    for t in ys:
        s = autograd.reduce_sum(t * t)
        total = s if total is None else total + s
    return total


_MHA = sorted([f"{p}_proj.{w}" for p in "kqv" for w in "Wb"] + ["out_proj.W", "out_proj.b"])

# (factory, input factory, expected output shape, expected param names)
CASES = {
    "Linear": (lambda: layer.Linear(5), lambda d: _x((4, 3), d), (4, 5), ["W", "b"]),
    "Linear(legacy)": (lambda: layer.Linear(3, 5), lambda d: _x((4, 3), d), (4, 5), ["W", "b"]),
    "Linear(no bias)": (lambda: layer.Linear(5, bias=False), lambda d: _x((4, 3), d), (4, 5), ["W"]),
    "Gemm": (lambda: layer.Gemm(5), lambda d: _x((4, 3), d), (4, 5), ["W", "b"]),
    "Embedding": (
        lambda: layer.Embedding(10, 4),
        lambda d: tensor.from_numpy(np.array([[1, 2], [3, 9]], np.int32), d),
        (2, 2, 4),
        ["W"],
    ),
    "Conv2d": (
        lambda: layer.Conv2d(4, 3, padding=1),
        lambda d: _x((2, 3, 6, 6), d),
        (2, 4, 6, 6),
        ["W", "b"],
    ),
    "Conv2d(legacy)": (
        lambda: layer.Conv2d(3, 4, 3, 2, 1),
        lambda d: _x((2, 3, 6, 6), d),
        (2, 4, 3, 3),
        ["W", "b"],
    ),
    "Conv2d(asym pad, dilation, group)": (
        lambda: layer.Conv2d(4, 3, padding=(1, 0, 2, 1), dilation=2, group=2),
        lambda d: _x((2, 2, 7, 7), d),
        (2, 4, 4, 6),
        ["W", "b"],
    ),
    "Conv2d(SAME_UPPER)": (
        lambda: layer.Conv2d(4, 3, stride=2, pad_mode="SAME_UPPER"),
        lambda d: _x((1, 2, 7, 7), d),
        (1, 4, 4, 4),
        ["W", "b"],
    ),
    "SeparableConv2d": (
        lambda: layer.SeparableConv2d(5, 3, padding=1),
        lambda d: _x((2, 3, 5, 5), d),
        (2, 5, 5, 5),
        ["depthwise_conv.W", "point_conv.W"],
    ),
    "BatchNorm2d": (
        lambda: layer.BatchNorm2d(),
        lambda d: _x((4, 3, 2, 2), d),
        (4, 3, 2, 2),
        ["bias", "scale"],
    ),
    "LayerNorm": (lambda: layer.LayerNorm(), lambda d: _x((4, 6), d), (4, 6), ["bias", "scale"]),
    "MaxPool2d": (lambda: layer.MaxPool2d(2), lambda d: _x((2, 3, 5, 5), d), (2, 3, 2, 2), []),
    "MaxPool2d(ceil)": (
        lambda: layer.MaxPool2d(2, ceil_mode=True),
        lambda d: _x((2, 3, 5, 5), d),
        (2, 3, 3, 3),
        [],
    ),
    "AvgPool2d": (lambda: layer.AvgPool2d(3, 1, 1), lambda d: _x((2, 3, 5, 5), d), (2, 3, 5, 5), []),
    "MaxPool1d": (lambda: layer.MaxPool1d(2), lambda d: _x((2, 3, 8), d), (2, 3, 4), []),
    "AvgPool1d": (lambda: layer.AvgPool1d(2), lambda d: _x((2, 3, 8), d), (2, 3, 4), []),
    "RNN": (
        lambda: layer.RNN(3, 4),
        lambda d: _x((5, 2, 3), d),
        ((5, 2, 4), (2, 4)),
        ["Bh", "Bx", "Wh", "Wx"],
    ),
    "LSTM": (
        lambda: layer.LSTM(3, 4),
        lambda d: _x((5, 2, 3), d),
        ((5, 2, 4), (2, 4), (2, 4)),
        sorted(f"{p}_{g}" for p in ("Wx", "Wh", "Bx", "Bh") for g in "ifog"),
    ),
    "GRU": (
        lambda: layer.GRU(3, 4),
        lambda d: _x((5, 2, 3), d),
        ((5, 2, 4), (2, 4)),
        sorted(f"{p}_{g}" for p in ("Wx", "Wh", "Bx", "Bh") for g in "zrn"),
    ),
    "Dropout": (lambda: layer.Dropout(0.3), lambda d: _x((4, 5), d), (4, 5), []),
    "Flatten": (lambda: layer.Flatten(), lambda d: _x((2, 3, 4), d), (2, 12), []),
    "ReLU": (lambda: layer.ReLU(), lambda d: _x((2, 3), d), (2, 3), []),
    "Sigmoid": (lambda: layer.Sigmoid(), lambda d: _x((2, 3), d), (2, 3), []),
    "SoftMax": (lambda: layer.SoftMax(), lambda d: _x((2, 3), d), (2, 3), []),
    "Reshape": (lambda: layer.Reshape((3, 2)), lambda d: _x((2, 3), d), (3, 2), []),
    "Tanh": (lambda: layer.Tanh(), lambda d: _x((2, 3), d), (2, 3), []),
    "LeakyReLU": (lambda: layer.LeakyReLU(0.1), lambda d: _x((2, 3), d), (2, 3), []),
    "Gelu": (lambda: layer.Gelu(), lambda d: _x((2, 3), d), (2, 3), []),
    "Pooling2d(avg)": (
        lambda: layer.Pooling2d(2, 2, is_max=False),
        lambda d: _x((2, 3, 4, 4), d),
        (2, 3, 2, 2),
        [],
    ),
    "GlobalAvgPool2d": (lambda: layer.GlobalAvgPool2d(), lambda d: _x((2, 3, 4, 4), d), (2, 3, 1, 1), []),
    "GlobalMaxPool2d": (lambda: layer.GlobalMaxPool2d(), lambda d: _x((2, 3, 4, 4), d), (2, 3, 1, 1), []),
    # Several inputs: the input factory returns the argument tuple.
    "Add": (lambda: layer.Add(), lambda d: (_x((2, 3), d), _x((2, 3), d)), (2, 3), []),
    "Cat": (lambda: layer.Cat(1), lambda d: ([_x((2, 3), d), _x((2, 2), d)],), (2, 5), []),
    "SoftMaxCrossEntropy": (
        lambda: layer.SoftMaxCrossEntropy(),
        lambda d: (_x((4, 3), d), _labels(4, d)),
        (1,),
        [],
    ),
    "CrossEntropy": (
        lambda: layer.CrossEntropy(),
        lambda d: (autograd.softmax(_x((4, 3), d)), _labels(4, d)),
        (1,),
        [],
    ),
    "BinaryCrossEntropy": (
        lambda: layer.BinaryCrossEntropy(),
        lambda d: (
            autograd.sigmoid(_x((4, 3), d)),
            tensor.from_numpy(np.eye(3, dtype=np.float32)[[0, 2, 1, 0]], d),
        ),
        (1,),
        [],
    ),
    "MeanSquareError": (lambda: layer.MeanSquareError(), lambda d: (_x((4, 3), d), _x((4, 3), d)), (1,), []),
    # the transformer-era layers (more of them in test_layer_transformer.py)
    "MultiHeadAttention": (
        lambda: layer.MultiHeadAttention(8, 2),
        lambda d: _x((5, 2, 8), d),
        (5, 2, 8),
        _MHA,
    ),
    "MultiHeadAttention(cross, gqa, no bias)": (
        lambda: layer.MultiHeadAttention(8, 4, batch_first=True, num_kv_heads=2, bias=False),
        lambda d: (_x((2, 5, 8), d), _x((2, 3, 6), d), _x((2, 3, 7), d)),
        (2, 5, 8),
        ["k_proj.W", "out_proj.W", "q_proj.W", "v_proj.W"],
    ),
    "TransformerEncoderLayer": (
        lambda: layer.TransformerEncoderLayer(8, 2, 16, 0.1),
        lambda d: _x((4, 2, 8), d),
        (4, 2, 8),
        ["linear1.W", "linear1.b", "linear2.W", "linear2.b", "norm1.bias", "norm1.scale", "norm2.bias"]
        + ["norm2.scale"]
        + [f"self_attn.{n}" for n in _MHA],
    ),
    "TransformerDecoderLayer": (
        lambda: layer.TransformerDecoderLayer(8, 2, 16, 0.0, "gelu_tanh", batch_first=True, norm_first=True),
        lambda d: (_x((2, 4, 8), d), _x((2, 6, 8), d)),
        (2, 4, 8),
        ["linear1.W", "linear1.b", "linear2.W", "linear2.b"]
        + [f"norm{i}.{p}" for i in (1, 2, 3) for p in ("bias", "scale")]
        + [f"{a}.{n}" for a in ("multihead_attn", "self_attn") for n in _MHA],
    ),
    "RMSNorm": (lambda: layer.RMSNorm(), lambda d: _x((2, 3, 4), d), (2, 3, 4), ["scale"]),
    "GroupNorm": (lambda: layer.GroupNorm(2), lambda d: _x((2, 4, 3, 3), d), (2, 4, 3, 3), ["bias", "scale"]),
    "GroupNorm(no affine)": (
        lambda: layer.GroupNorm(2, affine=False),
        lambda d: _x((2, 4, 3), d),
        (2, 4, 3),
        [],
    ),
    "BatchNorm1d": (lambda: layer.BatchNorm1d(), lambda d: _x((4, 3), d), (4, 3), ["bias", "scale"]),
    "BatchNorm1d(N, C, L)": (
        lambda: layer.BatchNorm1d(),
        lambda d: _x((4, 3, 5), d),
        (4, 3, 5),
        ["bias", "scale"],
    ),
    "Conv1d": (lambda: layer.Conv1d(4, 3, padding=1), lambda d: _x((2, 3, 7), d), (2, 4, 7), ["W", "b"]),
    "Conv1d(legacy, asym pad)": (
        lambda: layer.Conv1d(3, 4, 3, 2, (2, 0)),
        lambda d: _x((2, 3, 7), d),
        (2, 4, 4),
        ["W", "b"],
    ),
    "ConvTranspose2d": (
        lambda: layer.ConvTranspose2d(4, 3, stride=2),
        lambda d: _x((2, 3, 4, 4), d),
        (2, 4, 9, 9),
        ["W", "b"],
    ),
    "Upsample": (lambda: layer.Upsample(scale_factor=2), lambda d: _x((1, 2, 3, 4), d), (1, 2, 6, 8), []),
    "Upsample(linear, 1-D)": (
        lambda: layer.Upsample(size=7, mode="linear"),
        lambda d: _x((1, 2, 3), d),
        (1, 2, 7),
        [],
    ),
    "SinusoidalPositionalEmbedding": (
        lambda: layer.SinusoidalPositionalEmbedding(),
        lambda d: _x((5, 2, 6), d),
        (5, 2, 6),
        [],
    ),
    "LearnedPositionalEmbedding": (
        lambda: layer.LearnedPositionalEmbedding(8, batch_first=True),
        lambda d: _x((2, 5, 6), d),
        (2, 5, 6),
        ["W"],
    ),
    "RotaryEmbedding": (
        lambda: layer.RotaryEmbedding(rotary_dim=4),
        lambda d: _x((2, 3, 5, 6), d),
        (2, 3, 5, 6),
        [],
    ),
}


def test_every_layer_class_has_a_case():
    classes = {
        n for n, c in vars(layer).items() if isinstance(c, type) and issubclass(c, Layer) and c is not Layer
    }
    covered = {name.split("(")[0] for name in CASES}
    assert classes <= covered, sorted(classes - covered)


def _shapes(y):
    if isinstance(y, (list, tuple)):
        return tuple(_shapes(t) for t in y)
    return tuple(y.shape)


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_shape_grad_names_and_states(dev, name):
    make, make_input, want_shape, want_params = CASES[name]
    lyr = make()
    args = make_input(dev)
    autograd.training = True
    y = lyr(*args) if isinstance(args, tuple) else lyr(args)
    assert _shapes(y) == want_shape
    params = lyr.get_params()
    assert list(params) == sorted(want_params)
    for pname, p in params.items():
        assert p.name == pname and p.stores_grad and p.device == dev
    if params:
        grads = autograd.gradients(_scalar(y))
        for pname, p in params.items():
            assert p in grads, f"no gradient reached {pname}"
            assert grads[p].shape == p.shape
            assert np.isfinite(tensor.to_numpy(grads[p])).all()
    # state round trip: perturb, restore, same values
    states = {k: tensor.to_numpy(v) for k, v in lyr.get_states().items()}
    for t in lyr.get_states().values():
        t.set_value(7)
    lyr.set_states(states)
    for k, v in lyr.get_states().items():
        np.testing.assert_array_equal(tensor.to_numpy(v), states[k])


def test_paths_name_nested_layers():
    class Block(Layer):
        def __init__(self):
            super().__init__()
            self.conv1 = layer.Conv2d(2, 3, padding=1)
            self.bn1 = layer.BatchNorm2d()

        def forward(self, x):
            return self.bn1(self.conv1(x))

    class Net(Layer):
        def __init__(self):
            super().__init__()
            self.blk1 = Block()
            self.fc = layer.Linear(2)
            self.heads = [layer.Linear(1), layer.Linear(1)]
            self.register_layers(self.heads)

        def forward(self, x):
            y = autograd.flatten(self.blk1(x))
            return self.fc(y)

    net = Net()
    net(_x((2, 1, 4, 4), None))
    assert list(net.get_params()) == [
        "blk1.bn1.bias",
        "blk1.bn1.scale",
        "blk1.conv1.W",
        "blk1.conv1.b",
        "fc.W",
        "fc.b",
    ]
    states = net.get_states()
    assert "blk1.bn1.running_mean" in states and "blk1.bn1.running_var" in states
    assert states["blk1.conv1.W"].name == "blk1.conv1.W"


def test_set_states_reports_bad_keys_and_shapes():
    fc = layer.Linear(2)
    fc(_x((1, 3), None))
    with pytest.raises(StateMismatchError, match=r"\['nope'\]; expected names: \['W', 'b'\]"):
        fc.set_states({"nope": np.zeros(1)})
    with pytest.raises(ShapeError, match="'W'"):
        fc.set_params({"W": np.zeros((4, 4), np.float32)})


def test_batchnorm_differs_between_train_and_eval():
    bn = layer.BatchNorm2d()
    x = tensor.from_numpy(rng.standard_normal((8, 2, 3, 3)).astype(np.float32) * 3 + 1)
    autograd.training = True
    y_train = tensor.to_numpy(bn(x))
    rm = tensor.to_numpy(bn.running_mean)
    batch_mean = tensor.to_numpy(x).mean(axis=(0, 2, 3))
    np.testing.assert_allclose(rm, 0.1 * batch_mean, rtol=1e-5, atol=1e-6)  # momentum 0.9 from zeros
    autograd.training = False
    y_eval = tensor.to_numpy(bn(x))
    assert not np.allclose(y_train, y_eval)
    np.testing.assert_allclose(y_train.mean(axis=(0, 2, 3)), 0, atol=1e-5)


def test_dropout_differs_between_train_and_eval():
    d = layer.Dropout(0.5)
    x = tensor.from_numpy(np.ones((100, 100), np.float32))
    autograd.training = False
    np.testing.assert_array_equal(tensor.to_numpy(d(x)), 1)
    autograd.training = True
    y = tensor.to_numpy(d(x))
    assert 0.45 < (y == 0).mean() < 0.55
    np.testing.assert_allclose(y[y != 0], 2.0)


def test_dropout_rejects_bad_ratio():
    with pytest.raises(ValueError):
        layer.Dropout(1.0)


def test_linear_rejects_wrong_input_size():
    fc = layer.Linear(3, 5)
    with pytest.raises(ShapeError, match="3 input features"):
        fc(_x((2, 4), None))


def test_lstm_accepts_a_list_of_steps():
    lstm = layer.LSTM(3, 4)
    xs = [_x((2, 3), None) for _ in range(5)]
    h0 = tensor.zeros((2, 4))
    c0 = tensor.zeros((2, 4))
    outs, h, _c = lstm(xs, (h0, c0))
    assert len(outs) == 5 and outs[0].shape == (2, 4)
    np.testing.assert_allclose(tensor.to_numpy(outs[-1]), tensor.to_numpy(h), rtol=1e-6)


def test_losses_return_shape_1(dev):
    x = _x((4, 3), dev)
    t = _labels(4, dev)
    assert layer.SoftMaxCrossEntropy()(x, t).shape == (1,)
    p = autograd.softmax(x)
    onehot = tensor.from_numpy(np.eye(3, dtype=np.float32)[[0, 1, 2, 0]], dev)
    assert layer.CrossEntropy()(p, onehot).shape == (1,)
    assert layer.BinaryCrossEntropy()(autograd.sigmoid(x), onehot).shape == (1,)
    assert layer.MeanSquareError()(x, onehot).shape == (1,)


def test_legacy_linear_bias_flag_and_rnn_without_bias():
    fc = layer.Linear(3, 4, False)
    fc(_x((2, 3), None))
    assert list(fc.get_params()) == ["W"]
    rnn = layer.RNN(3, 4, bias=False)
    rnn(_x((5, 2, 3), None))
    assert list(rnn.get_params()) == ["Wh", "Wx"]
    assert sorted(set(rnn.get_states()) - set(rnn.get_params())) == ["Bh", "Bx"]


def _x23():
    return tensor.from_numpy(np.ones((2, 3), np.float32))


def test_closure_adoption_never_makes_a_cycle():
    """A closure that refers back to a layer being built (its future parent) adopts nothing."""

    class Inner(Layer):
        def __init__(self, outer):
            super().__init__()
            self.cb = lambda t: outer.fc(t)

        def forward(self, x):
            return self.cb(x)

    class Outer(Layer):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(4)
            self.inner = Inner(self)

        def forward(self, x):
            return self.inner(x)

    class Top(Layer):
        def __init__(self):
            super().__init__()
            self.blk = Outer()

        def forward(self, x):
            return self.blk(x)

    m = Top()
    m(_x23())
    assert sorted(m.get_params()) == ["blk.fc.W", "blk.fc.b"]


def test_closure_adoption_follows_reassignment_and_yields_to_attributes():
    class Reassigned(Layer):
        def __init__(self):
            super().__init__()
            fc = layer.Linear(2)
            self.f = lambda t: fc(t)
            self.f = lambda t: fc(t) * 2  # the same layer, closed over again

        def forward(self, x):
            return self.f(x)

    class AlsoAttribute(Layer):
        def __init__(self):
            super().__init__()
            fc = layer.Linear(2)
            self.f = lambda t: fc(t)
            self.fc = fc  # an attribute outranks the closure: registered once

        def forward(self, x):
            return self.f(x)

    r, a = Reassigned(), AlsoAttribute()
    r(_x23())
    a(_x23())
    assert sorted(r.get_params()) == ["f.fc.W", "f.fc.b"]
    assert sorted(a.get_params()) == ["fc.W", "fc.b"]


def test_initialize_may_call_forward_and_custom_layers_take_plain_values():
    class Probe(Layer):
        def initialize(self, x):
            self.fc = layer.Linear(3)
            self.out_shape = self.forward(x).shape  # learning a shape by running forward

        def forward(self, x):
            return self.fc(x)

    class Scale(Layer):  # not singa_lite's: a number may come first
        def forward(self, a, x):
            return x * a

    p = Probe()
    assert p(_x23()).shape == (2, 3) and p.out_shape == (2, 3)
    assert Scale()(2.0, _x23()).shape == (2, 3)


def test_closure_adoption_survives_deletes_and_refused_assignments():
    class Two(Layer):
        def __init__(self):
            super().__init__()
            fc = layer.Linear(2)
            self.f = lambda t: fc(t)
            self.g = lambda t: fc(t) + 1  # a second closure over the same layer

        def forward(self, x):
            return self.g(x)

    t = Two()
    t(_x23())
    del t.f  # g still uses the layer: it is still registered (under g now)
    assert sorted(t.get_params()) == ["g.fc.W", "g.fc.b"]

    class Moved(Layer):
        def __init__(self):
            super().__init__()
            fc = layer.Linear(2)
            self.a = fc
            del self.a  # no longer an attribute: a closure may adopt it
            self.f = lambda t: fc(t)

        def forward(self, x):
            return self.f(x)

    m = Moved()
    m(_x23())
    assert sorted(m.get_params()) == ["f.fc.W", "f.fc.b"]

    inner, leaf = layer.Linear(2), layer.Linear(2)

    class Holder(Layer):
        def __init__(self):
            super().__init__()
            self.f = lambda t: inner(t)

    h = Holder()
    inner.w = leaf
    with pytest.raises(ArgumentError, match="cannot contain itself"):
        leaf.y = inner  # a cycle: refused, and nothing changed
    assert [name for name, _ in h.named_layers()] == ["f.inner", "f.inner.w"]

"""Export of every operator family: singa_lite -> to_onnx -> onnxruntime gives the same outputs.

Each case traces a small function of singa_lite ops, checks the ONNX model with
``onnx.checker.check_model(full_check=True)`` and compares onnxruntime's outputs with
singa_lite's (1e-5). The same cases go back through ``sonnx.prepare`` into singa_lite.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from singa_lite import autograd, ops, tensor
from singa_lite.errors import OnnxError, UnsupportedOperatorError
from singa_lite.sonnx.exporter import DEFAULT_OPSET, export_function

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

R = np.random.default_rng(0)


def f32(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return R.uniform(lo, hi, shape).astype(np.float32)


def flat(out: object) -> list:
    if isinstance(out, tensor.Tensor):
        return [out]
    return [t for o in out for t in flat(o)]  # type: ignore[attr-defined]


def export_and_run(fn, arrays, opset=None):
    """The exported model (checked), singa_lite's outputs and onnxruntime's outputs."""
    xs = [tensor.Tensor(data=a, requires_grad=False) for a in arrays]
    _PARAMS[0] = np.random.default_rng(1)
    model = export_function(fn, xs, opset=opset)
    onnx.checker.check_model(model, full_check=True)
    _PARAMS[0] = np.random.default_rng(1)
    expected = [np.asarray(t) for t in flat(fn(*xs))]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: a for i, a in zip(sess.get_inputs(), arrays)}
    return model, expected, sess.run(None, feeds)


def assert_close(got, expected, tol=1e-5):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g = np.asarray(g)
        assert g.shape == e.shape, (g.shape, e.shape)
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=tol, atol=tol)
        else:
            np.testing.assert_array_equal(g, e)


def _t(a: np.ndarray) -> tensor.Tensor:
    return tensor.Tensor(data=a, requires_grad=False)


_PARAMS = [np.random.default_rng(1)]


def w(*shape: int) -> tensor.Tensor:
    """A weight drawn inside a traced function: the same values on every call of the function
    (``export_and_run`` reseeds before each call), so tracing and checking see one model."""
    return tensor.Tensor(data=_PARAMS[0].uniform(-1, 1, shape).astype(np.float32), requires_grad=False)


W33 = f32(4, 3, 3, 3)
VAR3 = f32(3, lo=0.5)
B4 = f32(4)
IDX = np.array([[0, 2], [1, 0]], dtype=np.int64)

# (id, function of the input tensors, input arrays)
CASES = [
    # elementwise arithmetic, broadcasting, variadic, comparison and logic
    ("add_sub_mul_div", lambda a, b: ((a + b) * a - b) / (b * b + 1), [f32(2, 3), f32(3)]),
    ("scalar_consts", lambda a: a * 2 + 1 - 0.5 / (a * a + 1), [f32(2, 3)]),
    ("pow", lambda a, b: ops.pow(a, b), [f32(2, 3, lo=0.5), f32(2, 3)]),
    ("neg_abs", lambda a: ops.abs(-a), [f32(4)]),
    (
        "variadic",
        lambda a, b, c: [ops.max(a, b, c), ops.min(a, b), ops.sum(a, b, c), ops.mean(a, c)],
        [f32(2, 3), f32(3), f32(2, 1)],
    ),
    ("compare", lambda a, b: [a < b, a <= b, a > b, a >= b, ops.equal(a, a)], [f32(3, 2), f32(3, 2)]),
    (
        "logic",
        lambda a, b: [
            ops.logical_and(a > 0, b > 0),
            ops.logical_or(a > 0, b > 0),
            ops.logical_xor(a > 0, b > 0),
            ops.logical_not(a > 0),
        ],
        [f32(5), f32(5)],
    ),
    ("int_div", lambda a, b: a / b, [np.array([3, 7], np.int64), np.array([2, 2], np.int64)]),
    # unary math
    (
        "unary_any",
        lambda a: [
            ops.exp(a),
            ops.sin(a),
            ops.cos(a),
            ops.tan(a),
            ops.atan(a),
            ops.sinh(a),
            ops.cosh(a),
            ops.asinh(a),
            ops.erf(a),
            ops.sign(a),
            ops.ceil(a),
            ops.floor(a),
            ops.round(a),
            ops.square(a),
            ops.clip(a, -0.5, 0.7),
            ops.clip(a, None, 0.1),
        ],
        [f32(3, 4)],
    ),
    (
        "unary_domain",
        lambda a: [
            ops.log(a),
            ops.sqrt(a),
            ops.reciprocal(a),
            ops.asin(a - 1),
            ops.acos(a - 1),
            ops.atanh(a - 1),
            ops.acosh(a + 1),
        ],
        [f32(3, 4, lo=0.1, hi=1.9)],
    ),
    # activations
    (
        "activations",
        lambda a: [
            ops.relu(a),
            ops.sigmoid(a),
            ops.tanh(a),
            ops.leakyrelu(a, 0.2),
            ops.elu(a, 0.7),
            ops.selu(a),
            ops.hardsigmoid(a, 0.3, 0.4),
            ops.softplus(a),
            ops.softsign(a),
            ops.hardswish(a),
            ops.identity(a),
        ],
        [f32(2, 5)],
    ),
    ("gelu", lambda a: [ops.gelu(a), ops.gelu(a, "tanh")], [f32(2, 5)]),
    ("prelu", lambda a, s: ops.prelu(a, s), [f32(2, 3, 4, 4), f32(3, 1, 1)]),
    (
        "softmax",
        lambda a: [
            ops.softmax(a, 1),
            ops.softmax(a, 0),
            ops.softmax(a, -1),
            ops.log_softmax(a, 1),
            ops.log_softmax(a, 0),
        ],
        [f32(2, 3, 4)],
    ),
    ("add_bias", lambda a, b, c: [ops.add_bias(a, b, 0), ops.add_bias(a, c, 1)], [f32(2, 3), f32(3), f32(2)]),
    # reductions
    (
        "reduce",
        lambda a: [
            ops.reduce_sum(a, 1),
            ops.reduce_sum(a, None, True),
            ops.reduce_mean(a, (0, 2)),
            ops.reduce_max(a, -1, True),
            ops.reduce_min(a, 0),
            ops.reduce_prod(a, 2),
        ],
        [f32(2, 3, 4)],
    ),
    (
        "arg",
        lambda a: [
            ops.argmax(a, 1),
            ops.argmax(a, None),
            ops.argmin(a, -1, True),
            ops.argmax(a, 0, select_last_index=True),
        ],
        [np.round(f32(3, 4))],
    ),
    ("bool_sum", lambda a: ops.reduce_sum(a > 0, 1), [f32(3, 4)]),
    # shape
    (
        "reshape_family",
        lambda a: [
            ops.reshape(a, (3, -1)),
            ops.flatten(a, 2),
            ops.flatten(a, 0),
            ops.squeeze(ops.unsqueeze(a, [0, -1]), None),
            ops.squeeze(a[:, :1], 1),
            ops.unsqueeze(a, 1),
            ops.transpose(a, (2, 0, 1)),
            a.T(),
        ],
        [f32(2, 3, 4)],
    ),
    (
        "cat_split",
        lambda a, b: [ops.cat([a, b, a], 1), *ops.split(a, 1, [1, 2]), *ops.split(b, 0, None, 2)],
        [f32(3, 3), f32(3, 2)],
    ),
    (
        "expand_tile",
        lambda a: [ops.expand(a, (2, 3, 4)), ops.tile(a, (2, 1)), ops.tile(a, (2, 1, 2))],
        [f32(3, 1)],
    ),
    (
        "pad",
        lambda a: [
            ops.pad(a, "constant", [0, 1, 2, 1, 0, 0], 1.5),
            ops.pad(a, "reflect", [0, 1, 1, 0, 1, 2]),
            ops.pad(a, "edge", [1, 0, 0, 0, 2, 1]),
            ops.pad(a, "constant", [0, -1, 1, 0, 0, -1]),
        ],
        [f32(2, 3, 4)],
    ),
    (
        "cast_shape",
        lambda a: [ops.cast(a, tensor.int32), ops.cast(a, tensor.float64), ops.shape_of(a)],
        [f32(2, 3) * 3],
    ),
    (
        "slice",
        lambda a: [ops.slice(a, [1, 0], [3, 10], [0, 1], [1, 2]), ops.slice(a, [-1], [-100], [1], [-2])],
        [f32(4, 5)],
    ),
    (
        "getitem",
        lambda a: [
            a[1],
            a[:, 1:3],
            a[::-1, None, 2:],
            a[..., 0],
            a[-1, ::2, None],
            a[np.array([2, 0])],
            a[:, np.array([[1], [0]])],
        ],
        [f32(3, 4, 2)],
    ),
    (
        "gather_family",
        lambda a: [
            ops.gather(a, 0, IDX),
            ops.gather(a, 1, [-1, 0]),
            ops.gather_elements(a, np.array([[0, 1], [2, 0]]), 1),
        ],
        [f32(3, 4)],
    ),
    (
        "scatter",
        lambda a, u: [
            ops.scatter_elements(a, np.array([[1, 0]]), u, 1),
            ops.scatter_elements(a, np.array([[1, 1]]), u, 0, "add"),
        ],
        [f32(3, 2), f32(1, 2)],
    ),
    (
        "where_onehot_nonzero",
        lambda a, i: [
            ops.where(a > 0, a, -a),
            ops.where(a > 0, a, 0.5),
            ops.onehot(i, 4),
            ops.nonzero(a > 0),
        ],
        [f32(3, 4), np.array([0, 3, -1], np.int64)],
    ),
    (
        "depth_space",
        lambda a: [
            ops.depth_to_space(a, 2),
            ops.depth_to_space(a, 2, "CRD"),
            ops.space_to_depth(ops.depth_to_space(a, 2), 2),
        ],
        [f32(1, 8, 2, 3)],
    ),
    # linear algebra
    (
        "matmul",
        lambda a, b, v: [ops.matmul(a, b), ops.matmul(v, b[0]), ops.matmul(a[0], v)],
        [f32(2, 3, 4), f32(2, 4, 5), f32(4)],
    ),
    (
        "gemm",
        lambda a, b, c: [ops.gemm(a, b, c, 0.5, 2.0, transB=True), ops.gemm(a.T(), b.T(), None, transA=True)],
        [f32(3, 4), f32(5, 4), f32(5)],
    ),
    (
        "einsum_tensordot",
        lambda a, b: [
            ops.einsum("ij,kj->ik", a, b),
            ops.einsum("ij->j", a),
            ops.tensordot(a, b, ([1], [1])),
            ops.tensordot(a, b.T(), 1),
        ],
        [f32(3, 4), f32(5, 4)],
    ),
    # convolution and pooling
    (
        "conv2d",
        lambda x: [
            ops.conv2d(x, _t(W33), _t(B4), 2, (1, 0, 2, 1)),
            ops.conv2d(x, _t(W33), None, 1, 1, dilation=2),
        ],
        [f32(2, 3, 7, 8)],
    ),
    (
        "conv_group",
        lambda x: [
            ops.conv2d(x, w(6, 2, 3, 3), None, 1, 1, group=2),
            ops.conv2d(x, w(8, 1, 3, 3), w(8), 2, 1, group=4),
        ],
        [f32(2, 4, 6, 6)],
    ),
    (
        "conv1d_transpose",
        lambda x, y: [
            ops.conv1d(x, w(5, 3, 3), w(5), 2, (1, 2), 1),
            ops.conv_transpose2d(y, w(4, 2, 3, 3), w(4), 2, 1, 1, group=2),
            ops.conv_transpose2d(y, w(4, 3, 2, 3), None, (1, 2), (0, 1, 1, 0)),
            ops.conv_transpose2d(y, w(4, 3, 2, 3), w(3), 1, (0, 1, 1, 0), (1, 1), dilation=2),
        ],
        [f32(2, 3, 9), f32(1, 4, 4, 5)],
    ),
    (
        "conv3d",
        lambda x: [
            ops.conv_nd(x, w(6, 2, 3, 2, 3), w(6), (2, 1, 1), [(1, 0), (0, 1), (1, 1)], (1, 2, 1), group=2),
            ops.conv_transpose_nd(x, w(4, 3, 2, 3, 2), w(3), (2, 1, 2), 1, (1, 0, 1)),
            # output_padding past the stride (below the dilation): onnxruntime refuses it as an
            # attribute, so it is exported as end pads / a Pad and the bias added after
            ops.conv_transpose_nd(x, w(4, 2, 2, 2, 2), w(2), 1, [(0, 1), (0, 0), (1, 0)], (1, 1, 0), 2),
            ops.conv_transpose_nd(x, w(4, 2, 2, 2, 2), None, 1, 0, (1, 0, 1), 2),
        ],
        [f32(2, 4, 5, 6, 4)],
    ),
    (
        "maxpool",
        lambda x: [
            ops.max_pool2d(x, 3, 2, 1),
            ops.max_pool2d(x, 2, 2, 0, ceil_mode=True),
            ops.max_pool2d(x, (2, 3), 1, (0, 1, 1, 0), dilation=2),
            ops.max_pool1d(ops.getitem(x, (slice(None), slice(None), 0)), 3, 2),
        ],
        [f32(2, 3, 7, 8)],
    ),
    (
        "avgpool",
        lambda x: [
            ops.avg_pool2d(x, 3, 2, 1),
            ops.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
            ops.avg_pool2d(x, 2, 2, 0, ceil_mode=True),
            ops.avg_pool1d(ops.getitem(x, (slice(None), slice(None), 0)), 3, 2, 1, count_include_pad=False),
        ],
        [f32(2, 3, 7, 8)],
    ),
    ("global_pool", lambda x: [ops.global_average_pool(x), ops.global_max_pool(x)], [f32(2, 3, 4, 5)]),
    # normalisation
    ("batchnorm", lambda x: ops.batchnorm_2d(x, w(3), w(3), w(3), _t(VAR3)), [f32(2, 3, 4, 4)]),
    (
        "batchnorm_relu",
        lambda x: ops.batchnorm_2d(x, w(3), w(3), w(3), _t(VAR3), relu=True),
        [f32(2, 3, 4, 4)],
    ),
    (
        "layernorm",
        lambda x: [ops.layer_norm(x, w(4), w(4)), ops.layer_norm(x, w(3, 4), None, -2)],
        [f32(2, 3, 4)],
    ),
    (
        "instance_lrn_dropout",
        lambda x: [ops.instance_norm(x, w(3), w(3)), ops.lrn(x, 3, 0.1, 0.7, 2.0), ops.dropout(x, 0.4)],
        [f32(2, 3, 4, 4)],
    ),
    # resize
    (
        "resize",
        lambda x: [
            ops.resize(x, scales=[1, 1, 2, 3]),
            ops.upsample(x, [1, 1, 2, 2], "linear"),
            ops.resize(x, sizes=[2, 3, 5, 7], mode="linear"),
            ops.resize(x, sizes=[2, 3, 6, 6], mode="cubic", coordinate_transformation_mode="align_corners"),
            ops.resize(
                x,
                scales=[1, 1, 0.5, 0.5],
                mode="nearest",
                nearest_mode="floor",
                coordinate_transformation_mode="asymmetric",
            ),
        ],
        [f32(2, 3, 4, 4)],
    ),
    # losses
    (
        "losses",
        lambda x, p, t, s: [
            ops.softmax_cross_entropy(x, t),
            ops.softmax_cross_entropy(x, s),
            ops.nll_loss(ops.log_softmax(x), t),
            ops.cross_entropy(p, t),
            ops.cross_entropy(p, s),
            ops.binary_cross_entropy(p, s),
            ops.mse_loss(x, s),
        ],
        [f32(3, 4), f32(3, 4, lo=0.05, hi=0.95), np.array([0, 3, 1], np.int32), f32(3, 4, lo=0, hi=1)],
    ),
]


def _rnn_cases():
    T, N, I, H = 4, 2, 3, 5
    x, h0, c0 = f32(T, N, I), f32(N, H), f32(N, H)
    w = {
        k: (f32(I, k * H, lo=-0.5, hi=0.5), f32(H, k * H, lo=-0.5, hi=0.5), f32(k * H), f32(k * H))
        for k in (1, 3, 4)
    }

    peep = f32(3 * H)  # i, f, o blocks of different values: a gate-order slip shows

    def p(k):
        return [_t(a) for a in w[k]]

    return [
        (
            "rnn",
            lambda x, h: [
                *ops.rnn(x, h, *p(1)),
                *ops.rnn(x, h, *p(1), nonlinearity="relu", reverse=True),
                ops.rnn_cell(ops.getitem(x, 0), h, *p(1)),
            ],
            [x, h0],
        ),
        (
            "lstm",
            lambda x, h, c: [
                *ops.lstm(x, h, c, *p(4)),
                *ops.lstm(x, h, c, *p(4), reverse=True),
                *ops.lstm_cell(ops.getitem(x, 1), h, c, *p(4)),
            ],
            [x, h0, c0],
        ),
        (
            "lstm_peephole",
            lambda x, h, c: [
                *ops.lstm(x, h, c, *p(4), P=_t(peep)),
                *ops.lstm(x, h, c, *p(4), reverse=True, P=_t(peep)),
                *ops.lstm_cell(ops.getitem(x, 1), h, c, *p(4), P=_t(peep)),
            ],
            [x, h0, c0],
        ),
        (
            "gru",
            lambda x, h: [
                *ops.gru(x, h, *p(3)),
                *ops.gru(x, h, *p(3), linear_before_reset=False, reverse=True),
                ops.gru_cell(ops.getitem(x, 2), h, *p(3), linear_before_reset=False),
            ],
            [x, h0],
        ),
    ]


CASES += _rnn_cases()
IDS = [c[0] for c in CASES]


NEEDS_OPSET = {"scatter": 16}  # ScatterElements reduction="add"


@pytest.mark.parametrize("opset", [13, DEFAULT_OPSET])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_export_matches_onnxruntime(case, opset):
    name, fn, arrays = case
    _, expected, got = export_and_run(fn, arrays, max(opset, NEEDS_OPSET.get(name, 0)))
    assert_close(got, expected)


# Cases whose ONNX form differs below opset 13 (attributes instead of inputs, decompositions).
OLD_OPSET = [
    "softmax",
    "reduce",
    "reshape_family",
    "cat_split",
    "layernorm",
    "gelu",
    "instance_lrn_dropout",
    "resize",
    "rnn",
    "lstm",
    "losses",
]


@pytest.mark.parametrize("opset", [11, 12, 17])
@pytest.mark.parametrize("case", [c for c in CASES if c[0] in OLD_OPSET], ids=lambda c: c[0])
def test_export_older_opsets(case, opset):
    _, fn, arrays = case
    _, expected, got = export_and_run(fn, arrays, opset)
    assert_close(got, expected)


# Exports whose ONNX operators the importer does not run yet; strict, so a new handler shows up.
IMPORTER_LACKS: dict[str, str] = {}  # case name -> why the importer cannot take it back
PREPARE_CASES = [
    pytest.param(
        c, marks=pytest.mark.xfail(strict=True, raises=UnsupportedOperatorError, reason=IMPORTER_LACKS[c[0]])
    )
    if c[0] in IMPORTER_LACKS
    else c
    for c in CASES
]


@pytest.mark.parametrize("case", PREPARE_CASES, ids=IDS)
def test_export_then_prepare_gives_same_outputs(case):
    """singa_lite -> ONNX -> sonnx.prepare -> singa_lite reproduces the traced outputs."""
    sonnx = pytest.importorskip("singa_lite.sonnx", reason="the ONNX importer is not available")
    if not hasattr(sonnx, "prepare"):
        pytest.skip("singa_lite.sonnx.prepare is not available yet")
    _, fn, arrays = case
    xs = [tensor.Tensor(data=a, requires_grad=False) for a in arrays]
    _PARAMS[0] = np.random.default_rng(1)
    model = export_function(fn, xs)
    _PARAMS[0] = np.random.default_rng(1)
    expected = [np.asarray(t) for t in flat(fn(*xs))]
    rep = sonnx.prepare(model)
    got = rep.run([tensor.Tensor(data=a, requires_grad=False) for a in arrays])
    assert_close([np.asarray(t) for t in got], expected)


def test_graph_is_pruned_and_named():
    x = tensor.Tensor(data=f32(2, 3), requires_grad=False)
    w = tensor.Tensor(data=f32(3, 4), requires_grad=True, stores_grad=True, name="fc.W")

    def fn(a):
        ops.exp(a)  # traced but unused: pruned
        return ops.relu(ops.matmul(a, w))

    model = export_function(fn, [x], model_name="tiny", input_names=["x"], output_names=["y"])
    assert [n.op_type for n in model.graph.node] == ["MatMul", "Relu"]
    assert [i.name for i in model.graph.initializer] == ["fc.W"]
    assert [i.name for i in model.graph.input] == ["x"] and [o.name for o in model.graph.output] == ["y"]
    assert model.graph.name == "tiny" and model.opset_import[0].version == DEFAULT_OPSET


def test_outputs_that_are_inputs_or_repeated():
    a = f32(2, 2)
    model, expected, got = export_and_run(lambda x: [x, ops.relu(x), ops.relu(x)[0]], [a])
    assert_close(got, expected)
    assert [o.name for o in model.graph.output] == ["output_0", "output_1", "output_2"]
    y = [None]

    def twice(x):
        y[0] = ops.relu(x)
        return [y[0], y[0]]

    _, expected, got = export_and_run(twice, [a])
    assert_close(got, expected)


def test_to_onnx_walks_creators():
    """SINGA's form: the graph recorded in training mode, from the input and output tensors."""
    x = tensor.Tensor(data=f32(2, 3, 5, 5), requires_grad=False)
    x.requires_grad = True
    W = tensor.Tensor(data=f32(4, 3, 3, 3), requires_grad=True, stores_grad=True, name="conv.W")
    autograd.training = True
    h = ops.max_pool2d(ops.relu(ops.conv2d(x, W, padding=1)), 2)
    y1, y2 = ops.flatten(h), ops.reduce_mean(h, (2, 3))
    autograd.training = False
    from singa_lite.sonnx.exporter import to_onnx

    model = to_onnx([x], [y1, y2], model_name="two_outputs")
    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"input_0": np.asarray(x)})
    assert_close(got, [np.asarray(y1), np.asarray(y2)])
    assert "conv.W" in [i.name for i in model.graph.initializer]


def test_to_onnx_after_backward_and_the_next_step_is_an_error():
    x = tensor.Tensor(data=f32(2, 3), requires_grad=False)
    w = tensor.Tensor(data=f32(3, 1), requires_grad=True, stores_grad=True, name="w")
    autograd.training = True
    y = ops.reduce_sum(ops.matmul(ops.relu(x), w))
    autograd.gradients(y)
    from singa_lite.sonnx.exporter import to_onnx

    to_onnx([x], [y])  # right after backward the graph is still there, as in SINGA
    ops.relu(w)  # the next step records: the walked graph is released
    autograd.training = False
    with pytest.raises(OnnxError, match="released"):
        to_onnx([x], [y])


def test_to_onnx_of_unrecorded_outputs_is_an_error():
    """An output computed in eval mode has no recorded ops: exported it would be a constant."""
    x = tensor.Tensor(data=f32(2, 3), requires_grad=False)
    w = tensor.Tensor(data=f32(3, 1), requires_grad=True, stores_grad=True, name="w")
    autograd.training = False
    y = ops.matmul(x, w)
    from singa_lite.sonnx.exporter import to_onnx

    with pytest.raises(OnnxError, match=r"output 0 \(2, 1\) was computed by no recorded operator"):
        to_onnx([x], [y])
    assert len(to_onnx([x], [x]).graph.node) == 1  # an input given back as an output is fine
    assert "w" in [i.name for i in to_onnx([x], [w]).graph.initializer]  # so is a param


def test_unsupported_cases_raise_typed_errors():
    x = tensor.Tensor(data=f32(3, 4), requires_grad=False)
    with pytest.raises(UnsupportedOperatorError, match="GetItem"):
        export_function(lambda a: a[a > 0], [x])
    with pytest.raises(UnsupportedOperatorError, match="opset 11"):
        export_function(lambda a: ops.einsum("ij->j", a), [x], opset=11)
    with pytest.raises(OnnxError, match="opset 7"):
        export_function(ops.relu, [x], opset=7)

    class Odd(autograd.Operator):
        def forward(self, a):
            return a

    with pytest.raises(UnsupportedOperatorError, match="Odd"):
        export_function(lambda a: Odd()(a)[0], [x])


def test_float16_and_float64_graphs():
    for dt in (np.float16, np.float64):
        a = f32(2, 3).astype(dt)
        _, expected, got = export_and_run(lambda x: ops.tanh(x * 2 + 1), [a])
        assert_close(got, expected, tol=1e-3 if dt == np.float16 else 1e-12)

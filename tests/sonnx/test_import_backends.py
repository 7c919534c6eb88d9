"""The importer on any backend: inputs of any backend, host reads counted, and handlers that do
not lean on NumPy-only signatures or on corner cases where NumPy and CuPy disagree.

Without a GPU, the CuPy side is played by ``CupyLikeNumpy``: NumPy with CuPy's signatures and
corner-case results where the two differ (``lexsort``, ``arange``, float ``%``), set as a
device's ``xp``. A handler that passes under it uses only what both libraries define alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from pretend_device import BoxBackend, Boxed

from singa_lite import autograd, backend, device, tensor
from singa_lite.errors import OnnxError
from singa_lite.sonnx import prepare
from singa_lite.sonnx.import_ops import HANDLERS, HOST_INPUTS
from singa_lite.sonnx.import_ops.base import Node
from singa_lite.sonnx.import_ops.math import LogSoftmax, Mod, Softmax
from singa_lite.sonnx.import_ops.shape import Range, TopK
from singa_lite.tensor import Tensor


def _model(nodes: list, inputs: list, outputs: list, inits: list = (), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _info(name: str, shape: list, dtype: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _const(name: str, values: Any, dtype: Any = np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype), name)


# -- host reads: a constant argument is read at prepare, never per run --------------------------
def small_cnn() -> onnx.ModelProto:
    """Conv -> Relu -> Pad -> MaxPool -> Reshape -> Slice -> Gemm -> Clip -> Unsqueeze ->
    ReduceMean, with every shape, pad, slice bound, clip bound and axis list a constant
    initializer or a Constant node."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B"),
        numpy_helper.from_array(rng.standard_normal((5, 16)).astype(np.float32), "W2"),
        _const("pads", [0, 0, 1, 1, 0, 0, 1, 1]),
        _const("shape", [0, -1]),
        _const("starts", [0]),
        _const("ends", [16]),
        _const("axes", [1]),
        _const("lo", 0.0, np.float32),
        _const("mean_axes", [2]),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Pad", ["r", "pads"], ["p"]),
        helper.make_node("MaxPool", ["p"], ["m"], kernel_shape=[3, 3], strides=[3, 3]),
        helper.make_node("Reshape", ["m", "shape"], ["f"]),
        helper.make_node("Slice", ["f", "starts", "ends", "axes"], ["s"]),
        helper.make_node("Gemm", ["s", "W2"], ["g"], transB=1),
        helper.make_node("Constant", [], ["hi"], value=numpy_helper.from_array(np.float32(2.0))),
        helper.make_node("Clip", ["g", "lo", "hi"], ["y"]),
        helper.make_node("Unsqueeze", ["y", "axes"], ["u"]),
        helper.make_node("ReduceMean", ["u", "mean_axes"], ["z"], keepdims=0),
    ]
    outputs = [_info("y", [2, 5]), _info("z", [2, 1])]
    return _model(nodes, [_info("x", [2, 1, 6, 6])], outputs, inits, opset=18)


def test_a_cnn_reads_its_constant_arguments_at_prepare_and_nothing_per_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with backend.count_host_reads() as at_prepare:
        rep = prepare(small_cnn())
    assert sum(at_prepare.values()) >= 8  # pads, shape, starts, ends, axes, lo, hi, mean_axes
    calls = []

    def host_values(t: Tensor) -> Any:  # the per-run read of a computed argument
        calls.append(t)
        return np.asarray(t)

    monkeypatch.setattr(autograd, "host_values", host_values)
    x = np.random.default_rng(1).standard_normal((2, 1, 6, 6)).astype(np.float32)
    with backend.count_host_reads() as per_run:
        outs = [rep.run([x]) for _ in range(3)]
    assert sum(per_run.values()) == 0 and not calls, (dict(per_run), len(calls))
    y, z = (t.numpy() for t in outs[-1])
    assert y.shape == (2, 5) and y.min() >= 0 and y.max() <= 2
    np.testing.assert_allclose(z, y.mean(axis=1, keepdims=True), rtol=1e-6)


def test_topk_reads_its_constant_k_at_prepare() -> None:
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"])]
    outputs = [_info("v", [4, 2]), _info("i", [4, 2], TensorProto.INT64)]
    rep = prepare(_model(nodes, [_info("x", [4, 5])], outputs, [_const("k", [2])]))
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    with backend.count_host_reads() as reads:
        v, i = (t.numpy() for t in rep.run(x))
    assert not [site for site in reads if site.startswith("sonnx/")], dict(reads)
    np.testing.assert_array_equal(v, -np.sort(-x, axis=1)[:, :2])
    np.testing.assert_array_equal(np.take_along_axis(x, i, axis=1), v)


def test_a_computed_argument_is_still_read_on_every_run() -> None:
    """Shape -> Reshape: the shape depends on the input (whose first dim the graph leaves
    open), so it is read each time (and noted for graph mode through ``autograd.host_values``).
    With the input's dims declared, the whole-graph run folds it (fusion.StaticShapes)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["z", "s"], ["y"])]
    x, z = np.zeros((2, 3), np.float32), np.arange(6, dtype=np.float32)
    for dims, host_reads in ((["n", 3], 1), ([2, 3], 0)):
        rep = prepare(_model(nodes, [_info("x", dims), _info("z", [6])], [_info("y", [None, 3])]))
        for _ in range(2):
            with backend.count_host_reads() as reads:
                (y,) = rep.run([x, z])
            assert sum(reads.values()) == host_reads
        np.testing.assert_array_equal(y.numpy(), z.reshape(2, 3))


def test_host_inputs_name_handled_operators_and_real_inputs() -> None:
    assert set(HOST_INPUTS) <= set(HANDLERS)
    assert all(positions and min(positions) >= 0 for positions in HOST_INPUTS.values())


def test_constant_host_values_are_read_only_views() -> None:
    """A memoized constant is shared by every run: a handler cannot change it by accident,
    and the constant tensor itself stays writable."""
    rep = prepare(small_cnn())
    program = rep.program
    shape = program.constants["shape"]
    values = program.host_constants.get(shape)
    assert values is not None and values.tolist() == [0, -1] and not values.flags.writeable
    assert shape.data.flags.writeable
    assert (
        program.host_constants.get(tensor.Tensor(data=np.array([0, -1]), requires_grad=False)) is None
    )  # not a constant


# -- inputs of any backend, one array or a list --------------------------------------------------
def _double() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["x", "x"], ["y"])]
    return _model(nodes, [_info("x", [2, 3])], [_info("y", [2, 3])])


@pytest.mark.parametrize("wrap", ["array", "list", "tuple", "dict", "tensor"])
def test_one_input_may_be_given_alone_or_in_a_sequence(wrap: str) -> None:
    """A single array is one input (not a sequence of its rows), like a list of one."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    given = {
        "array": x,
        "list": [x],
        "tuple": (x,),
        "dict": {"x": x},
        "tensor": tensor.Tensor(data=x, requires_grad=False),
    }[wrap]
    (y,) = prepare(_double()).run(given)
    np.testing.assert_array_equal(y.numpy(), 2 * x)


def test_a_single_array_is_not_taken_for_several_inputs() -> None:
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    model = _model(nodes, [_info("a", [2]), _info("b", [2])], [_info("y", [2])])
    with pytest.raises(OnnxError, match="missing graph inputs \\['b'\\]"):
        prepare(model).run(np.ones(2, np.float32))


def test_inputs_are_copied_so_a_run_never_writes_into_them() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    (y,) = prepare(_model(nodes, [_info("x", [2, 3])], [_info("y", [2, 3])])).run(x)
    assert not np.shares_memory(y.numpy(), x)


@pytest.mark.parametrize("as_list", [False, True])
def test_arrays_of_another_backend_are_accepted(monkeypatch: pytest.MonkeyPatch, as_list: bool) -> None:
    """A CuPy array given for a run elsewhere (here: a pretend device's array for a CPU run)
    goes through its backend, never through ``np.asarray``, and is one input when alone."""
    monkeypatch.setitem(backend._BACKENDS, BoxBackend.name, BoxBackend())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = prepare(_double()).run([Boxed(x)] if as_list else Boxed(x))
    np.testing.assert_array_equal(y.numpy(), 2 * x)


# -- handlers under CuPy's signatures and corner cases ------------------------------------------
class CupyLikeNumpy:
    """NumPy, except where CuPy's functions differ from NumPy's in what a handler might use."""

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    @staticmethod
    def lexsort(keys: Any) -> Any:  # one stacked array of keys, no ``axis``
        return np.lexsort(keys)

    @staticmethod
    def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None) -> Any:
        if any(isinstance(v, np.ndarray) for v in (start, stop, step)):
            raise TypeError("Implicit conversion to a NumPy array is not allowed")  # device scalars
        return np.arange(start, stop, step, dtype)

    @staticmethod
    def mod(x: Any, y: Any) -> Any:
        """CuPy's float ``%``: ``x - floor(x / y) * y`` (NaN for ``3 % inf``, +0 for ``0 % -2``)."""
        if x.dtype.kind == "f":
            with np.errstate(all="ignore"):
                return x - np.floor(x / y) * y
        return np.mod(x, y)

    remainder = mod


@pytest.fixture
def cupy_like() -> device.Device:
    dev = device.Device(-1, "numpy")
    dev.xp = CupyLikeNumpy()
    return dev


def _on(dev: device.Device, arr: Any) -> Tensor:
    return tensor.Tensor(data=np.asarray(arr), device=dev, requires_grad=False)


def _node(op: str, inputs: int, outputs: int = 1, **attrs: Any) -> Node:
    proto = helper.make_node(op, [f"i{k}" for k in range(inputs)], [f"o{k}" for k in range(outputs)], **attrs)
    return Node(proto, 21)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_range_takes_its_scalars_as_host_values(cupy_like: device.Device, dtype: Any) -> None:
    start, limit, delta = (_on(cupy_like, dtype(v)) for v in (1, 10, 3))
    got = Range(_node("Range", 3), start, limit, delta)
    assert got.dtype == dtype and got.numpy().tolist() == [1, 4, 7]


def _lexsort_topk(x: np.ndarray, k: int, axis: int, largest: bool) -> np.ndarray:
    """The indices the previous NumPy-only TopK gave (``np.lexsort`` along ``axis``)."""
    if not largest:
        order = np.argsort(x, axis=axis, kind="stable")
    elif x.dtype.kind != "f":
        order = np.argsort(~x, axis=axis, kind="stable")
    else:
        nan = np.isnan(x)
        order = np.lexsort((np.where(nan, 0, -x), ~nan), axis=axis)
    return np.take(order, np.arange(k), axis=axis)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_topk_without_lexsort_gives_the_same_indices(
    cupy_like: device.Device, dtype: Any, largest: int, axis: int
) -> None:
    """Ties by lower index, NaN first for largest and last for smallest, -0.0 tied with 0.0:
    the same indices as the lexsort it replaces, with only argsort and take_along_axis."""
    rng = np.random.default_rng(3)
    x = rng.integers(-3, 4, size=(7, 6, 5)).astype(dtype)
    if x.dtype.kind == "f":
        flat = x.reshape(-1)
        picks = rng.choice(flat.size, 40, replace=False)
        flat[picks[:10]] = np.nan
        flat[picks[10:18]] = np.inf
        flat[picks[18:26]] = -np.inf
        flat[picks[26:]] = -0.0
    k = x.shape[axis] - 1
    node = _node("TopK", 2, 2, axis=axis, largest=largest)
    values, indices = TopK(node, _on(cupy_like, x), _on(cupy_like, np.array([k])))
    want = _lexsort_topk(x, k, axis, bool(largest))
    np.testing.assert_array_equal(indices.numpy(), want)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, want, axis=axis))


def test_topk_refuses_a_k_larger_than_the_axis() -> None:
    node = _node("TopK", 2, 2)
    with pytest.raises(OnnxError, match="k = 4 must lie in \\[0, 3\\]"):
        TopK(
            node,
            tensor.Tensor(data=np.zeros(3, np.float32), requires_grad=False),
            tensor.Tensor(data=np.array([4]), requires_grad=False),
        )


# onnx's test_mod_float_edge_cases_fmod_0: Python's % (the divisor's sign), NaN where undefined.
_X = [0.0, -0.0, 0.0, -0.0, -3.0, 3.0, -1.0, 1.0, np.inf, -np.inf, 1.0, 1.0, np.nan, 1.0]
_Y = [-2.0, 2.0, 2.0, -2.0, np.inf, np.inf, -np.inf, -np.inf, 2.0, 2.0, 0.0, -0.0, 2.0, np.nan]
_FLOOR = [-0.0, 0.0, 0.0, -0.0, np.inf, 3.0, -1.0, -np.inf] + [np.nan] * 6
_TRUNC = [0.0, -0.0, 0.0, -0.0, -3.0, 3.0, -1.0, 1.0] + [np.nan] * 6  # C's fmod


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_spells_out_its_special_cases(cupy_like: device.Device, dtype: Any, fmod: int) -> None:
    """Infinite divisors, zeros, NaN: the same results (signed zeros included) whatever the
    library's ``%`` does with them; CuPy's gives NaN for ``3 % inf``."""
    x, y = _on(cupy_like, np.array(_X, dtype)), _on(cupy_like, np.array(_Y, dtype))
    got = Mod(_node("Mod", 2, fmod=fmod), x, y).numpy()
    want = np.array(_TRUNC if fmod else _FLOOR, dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_of_integers_by_zero_or_minus_one(cupy_like: device.Device, fmod: int) -> None:
    """0, without NumPy's divide-by-zero warning and without C's INT_MIN % -1 overflow."""
    x = _on(cupy_like, np.array([7, -7, 5, np.iinfo(np.int64).min, 7], np.int64))
    y = _on(cupy_like, np.array([3, 3, 0, -1, -2], np.int64))
    got = Mod(_node("Mod", 2, fmod=fmod), x, y).numpy()
    assert got.tolist() == ([1, -1, 0, 0, 1] if fmod else [1, 2, 0, 0, -1])


def test_mod_matches_numpy_bitwise_on_random_values() -> None:
    rng = np.random.default_rng(0)
    for dtype in (np.float16, np.float32, np.float64):
        x = (rng.standard_normal(5000) * 100).astype(dtype)
        y = (rng.standard_normal(5000) * 3).astype(dtype)
        for fmod, fn in ((0, np.mod), (1, np.fmod)):
            got = Mod(
                _node("Mod", 2, fmod=fmod),
                tensor.Tensor(data=x, requires_grad=False),
                tensor.Tensor(data=y, requires_grad=False),
            ).numpy()
            np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), fn(x, y).view(f"u{got.itemsize}"))


# -- float16 softmax: float16 exps and quotient, a float32 sum -----------------------------------
def _softmax16(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    y = x - x.max(axis=axis, keepdims=True)
    e = np.exp(y)
    total = e.astype(np.float32).sum(axis=axis, keepdims=True).astype(np.float16)
    return y - np.log(total) if log else e / total


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("handler", [Softmax, LogSoftmax])
def test_float16_softmax_sums_in_float32_along_any_axis(axis: int, handler: Any) -> None:
    """Along the last axis this is what NumPy's float16 arithmetic gives (bitwise); along
    another NumPy would add in float16, and CuPy's CUB sum does along the last one."""
    x = (np.random.default_rng(2).standard_normal((300, 4, 40)) * 3).astype(np.float16)
    node = Node(helper.make_node(handler.__name__, ["x"], ["y"], axis=axis), 13)
    got = handler(node, tensor.Tensor(data=x, requires_grad=False)).numpy()
    want = _softmax16(x, axis, handler is LogSoftmax)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_float16_softmax_still_trains() -> None:
    x = Tensor(data=np.array([[0.5, -1.0, 2.0]], np.float16), stores_grad=True)
    autograd.training = True
    y = Softmax(Node(helper.make_node("Softmax", ["x"], ["y"]), 13), x)
    pick = tensor.Tensor(data=np.array([[1.0, 0.0, 0.0]], np.float16), requires_grad=False)
    (g,) = autograd.gradients(autograd.reduce_sum(autograd.mul(y, pick))).values()
    p = np.exp(x.numpy().astype(np.float64))
    p /= p.sum()
    want = p[0, 0] * ((np.arange(3) == 0) - p[0])  # d softmax_0 / d x
    np.testing.assert_allclose(g.numpy()[0].astype(np.float64), want, atol=2e-3)

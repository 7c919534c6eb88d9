"""The ``onednn`` convolution strategy (``backend.onednn`` through ``ops.conv_onednn``) against
the NumPy strategy it replaces, the blocked im2col GEMM: forward, both gradients and the bias
gradient over hypothesis-drawn shapes, strides, paddings, dilations and groups; the selection;
the fallback; and the OpenBLAS spin setting it comes with."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from singa_lite import ops
from singa_lite.backend import onednn
from singa_lite.backend.cpu_kernels import threads
from singa_lite.ops import conv_onednn
from singa_lite.ops.conv_blocks import BlockedGemm, Geometry2d

needs_onednn = pytest.mark.skipif(
    not onednn.usable(np, np.zeros(1, np.float32)),
    reason="oneDNN not loaded or switched off: "
    + (onednn.why_unavailable() or "SINGA_LITE_ONEDNN or SINGA_LITE_CPU_KERNELS is 0"),
)


def _rand(shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == np.float32
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)


@st.composite
def cases(draw: st.DrawFn) -> dict:
    rank = draw(st.sampled_from([1, 2]))
    group = draw(st.integers(1, 3))
    c, o = group * draw(st.integers(1, 4)), group * draw(st.integers(1, 4))
    kernel = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(rank))
    pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(rank))
    span = [d * (k - 1) + 1 - pb - pe for k, d, (pb, pe) in zip(kernel, dilation, pads)]
    size = tuple(max(1, s) + draw(st.integers(0, 6)) for s in span)  # at least one output
    return dict(
        x=(draw(st.integers(0, 3)), c, *size), w=(o, c // group, *kernel), group=group,
        stride=stride, dilation=dilation, pads=pads, bias=draw(st.booleans()),
    )  # fmt: skip


def _geometry(case: dict) -> tuple[Geometry2d, np.ndarray, np.ndarray]:
    """The case as a 2-D geometry (a 1-D case as height 1), with its x and W in 2-D."""
    x, w = _rand(case["x"], 1), _rand(case["w"], 2)
    stride, dilation, pads = case["stride"], case["dilation"], case["pads"]
    if len(case["x"]) == 3:
        x, w = x[:, :, None], w[:, :, None]
        stride, dilation, pads = (1, *stride), (1, *dilation), ((0, 0), *pads)
    out = tuple(
        (m + pb + pe - d * (k - 1) - 1) // s + 1
        for m, k, s, d, (pb, pe) in zip(x.shape[2:], w.shape[2:], stride, dilation, pads)
    )
    flat = (pads[0][0], pads[0][1], pads[1][0], pads[1][1])
    return Geometry2d(w.shape[2:], stride, dilation, flat, out, case["group"]), x, w


@needs_onednn
@settings(max_examples=120, deadline=None)
@given(case=cases())
def test_onednn_equals_the_blocked_gemm(case: dict) -> None:
    """Forward, dx, dW and db of the oneDNN plan equal the blocked im2col GEMM's (float32 within
    1e-5), empty batches, asymmetric pads, dilations, strides and groups included."""
    geo, x, w = _geometry(case)
    b = _rand((w.shape[0],), 3) if case["bias"] else None
    got_plan, want_plan = conv_onednn.OneDnn(np, geo), BlockedGemm(np, geo)
    y, want = got_plan.forward(x, w, b), want_plan.forward(x, w, b)
    assert got_plan.fallback is None  # oneDNN ran it
    _close(y, want)
    dy = _rand(y.shape, 4)
    got, exp = got_plan.backward(dy, True, True), want_plan.backward(dy, True, True)
    for a, e in zip(got, exp):
        _close(a, e)
    if b is not None:
        _close(got_plan.db, dy.sum(axis=(0, 2, 3)))


@needs_onednn
@pytest.mark.parametrize("need_x, need_w", [(True, False), (False, True), (False, False)])
def test_onednn_backward_gives_only_what_is_asked(need_x: bool, need_w: bool) -> None:
    geo = Geometry2d((3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (6, 6), 1)
    x, w, b = _rand((2, 4, 6, 6), 5), _rand((5, 4, 3, 3), 6), _rand((5,), 7)
    plan, ref = conv_onednn.OneDnn(np, geo), BlockedGemm(np, geo)
    dy = _rand(plan.forward(x, w, b).shape, 8)
    ref.forward(x, w, b)
    dx, dw = plan.backward(dy, need_x, need_w)
    want_dx, want_dw = ref.backward(dy, True, True)
    assert (dx is None) != need_x and (dw is None) != need_w
    if need_x:
        _close(dx, want_dx)
    if need_w:
        _close(dw, want_dw)
    _close(plan.db, dy.sum(axis=(0, 2, 3)))  # the bias gradient comes with either pass


@needs_onednn
def test_a_recorded_float32_conv_takes_onednn_and_its_gradients_are_the_engines() -> None:
    """Through the op: a float32 conv with a backward runs ``onednn`` (float64 keeps the NumPy
    strategies), strided and channels-last inputs included, and gives the NumPy strategy's
    output and gradients, the bias gradient included."""
    x = _rand((3, 5, 7, 4), 9).transpose(0, 3, 1, 2)  # channels-last: not C-contiguous
    w, b = _rand((6, 4, 3, 3), 10), _rand((6,), 11)
    results = {}
    for strategy in ("onednn", "blocks"):
        op = ops.Conv2d(2, 1, 1)
        op.needs_grad = (True, True, True)
        op.xp = np
        os.environ[onednn.ENV] = "1" if strategy == "onednn" else "0"
        try:
            y = op.forward(x, w, b)
            results[strategy] = (y, *op.backward(_rand(y.shape, 12)))
        finally:
            del os.environ[onednn.ENV]
        assert op.strategy == strategy
    for got, want in zip(results["onednn"], results["blocks"]):
        _close(got, want)
    op = ops.Conv2d()
    op.needs_grad = (True, True)
    op.xp = np
    op.forward(x.astype(np.float64), w.astype(np.float64))
    assert op.strategy == "blocks"


@needs_onednn
def test_a_geometry_onednn_refuses_runs_the_blocked_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where oneDNN has no kernel (an error status from a primitive descriptor), the plan runs
    the blocked GEMM for that call: same output, same gradients."""

    def refuse(*args: object) -> None:
        raise onednn.OneDnnError("oneDNN convolution forward failed with status 3")

    monkeypatch.setattr(onednn, "convolution", refuse)
    geo = Geometry2d((3, 3), (2, 2), (1, 1), (1, 0, 1, 0), (3, 3), 1)
    x, w = _rand((2, 3, 6, 6), 13), _rand((4, 3, 3, 3), 14)
    plan, ref = conv_onednn.OneDnn(np, geo), BlockedGemm(np, geo)
    np.testing.assert_array_equal(plan.forward(x, w, None), ref.forward(x, w, None))
    assert isinstance(plan.fallback, BlockedGemm)
    dy = _rand((2, 4, 3, 3), 15)
    for a, e in zip(plan.backward(dy, True, True), ref.backward(dy, True, True)):
        np.testing.assert_array_equal(a, e)


@needs_onednn
def test_convolutions_of_one_geometry_share_their_primitives() -> None:
    key = ((2, 3, 8, 8), (4, 3, 3, 3), True, (1, 1), (1, 1), ((1, 1), (1, 1)), (8, 8), 1, True)
    first = onednn.convolution(*key)
    assert onednn.convolution(*key) is first
    assert onednn.convolution(*key[:-1], False) is not first  # inference: its own primitive
    assert first.impl()  # oneDNN names the kernel it chose


def test_usable_asks_for_float32_numpy_arrays_and_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not onednn.usable(np, np.zeros(2, np.float64))
    assert not onednn.usable(object(), np.zeros(2, np.float32))
    monkeypatch.setenv(onednn.ENV, "0")
    assert not onednn.usable(np, np.zeros(2, np.float32))
    monkeypatch.setenv(onednn.ENV, "1")
    monkeypatch.setenv("SINGA_LITE_CPU_KERNELS", "0")  # the kernels' switch turns it off too
    assert not onednn.usable(np, np.zeros(2, np.float32))


def test_a_library_that_does_not_load_leaves_the_numpy_strategies(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``libdnnl`` (or one whose dependencies are missing): not usable, the loader's message
    kept, and a float32 training conv runs the blocked GEMM."""
    monkeypatch.setattr(onednn, "_state", {})
    monkeypatch.setattr(onednn, "_candidates", lambda: iter(["/nonexistent/libdnnl.so.3"]))
    assert not onednn.available()
    assert "/nonexistent/libdnnl.so.3" in onednn.why_unavailable()
    assert not onednn.usable(np, np.zeros(2, np.float32))
    op = ops.Conv2d(1, 1)
    op.needs_grad = (True, True)
    op.xp = np
    op.forward(_rand((2, 3, 5, 5), 16), _rand((4, 3, 3, 3), 17))
    assert op.strategy == "blocks"


def test_inference_takes_onednn_on_one_thread_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """On more threads an inference conv keeps the NumPy strategies, and the question does not
    load the library (which would shorten OpenBLAS's spin for nothing)."""
    monkeypatch.setattr(onednn, "_state", {})
    monkeypatch.setattr(threads, "count", lambda: 2)
    f32 = np.zeros(2, np.float32)
    assert not onednn.usable(np, f32, inference=True)
    assert onednn._state == {}
    op = ops.Conv2d(1, 1)
    op.xp = np
    op.forward(_rand((2, 3, 5, 5), 18), _rand((4, 3, 3, 3), 19))  # no backward follows
    assert op.strategy == "blocks" and onednn._state == {}
    monkeypatch.setattr(threads, "count", lambda: 1)
    assert onednn.usable(np, f32, inference=True) == onednn.available()


def test_without_the_library_convolution_raises_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onednn, "_state", {"error": "libdnnl.so.3: cannot open shared object file"})
    assert not onednn.available()
    assert "cannot open" in onednn.why_unavailable()
    with pytest.raises(onednn.OneDnnError, match="not loaded"):
        onednn.convolution(
            (1, 1, 3, 3), (1, 1, 1, 1), False, (1, 1), (1, 1), ((0, 0), (0, 0)), (3, 3), 1, True
        )


@pytest.mark.parametrize(
    "x, w, group, grad, want",
    [
        ((4, 8, 9, 9), (16, 8, 3, 3), 1, True, "onednn"),
        ((4, 8, 9, 9), (16, 8, 3, 3), 1, False, "onednn"),  # inference, a 3x3 kernel
        ((1, 8, 9, 9), (16, 8, 3, 3), 1, False, "onednn"),
        ((1, 8, 9, 9), (16, 8, 1, 1), 1, False, "one_image"),  # 1x1 inference: the reorders lose
        ((4, 8, 9, 9), (16, 8, 1, 1), 1, True, "onednn"),
        ((4, 8, 9, 9), (16, 4, 3, 3), 2, True, "onednn"),  # grouped
        ((4, 8, 9, 9), (8, 1, 3, 3), 8, True, "depthwise"),  # depthwise keeps its own loops
    ],
)
def test_select_with_onednn(x: tuple, w: tuple, group: int, grad: bool, want: str) -> None:
    from singa_lite.ops.conv_select import select

    args = (2, x, w, group, "float32", "numpy")
    assert select(*args, grad=grad, onednn=True) == want
    assert select(*args, grad=grad, onednn=False) != "onednn"


def test_the_blas_spin_is_left_alone_when_the_user_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A timeout in the environment is the user's: nothing is re-read or restarted."""
    monkeypatch.setattr(threads, "_blas_spin_set", False)
    monkeypatch.setenv(threads.BLAS_SPIN_ENV, "7")
    monkeypatch.setattr(threads, "blas_info", lambda: pytest.fail("OpenBLAS was touched"))
    assert threads.shorten_blas_spin()
    assert os.environ[threads.BLAS_SPIN_ENV] == "7"


def test_the_blas_spin_needs_openblas_pthreads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "_blas_spin_set", False)
    monkeypatch.delenv(threads.BLAS_SPIN_ENV, raising=False)
    monkeypatch.setattr(threads, "blas_info", lambda: [{"internal_api": "mkl", "threading_layer": "intel"}])
    assert not threads.shorten_blas_spin()
    assert threads.BLAS_SPIN_ENV not in os.environ


def _conv_model() -> tuple:
    """A Conv 3x3 + Relu, then a strided 5x5 Conv with asymmetric pads + Clip(0, 6), then a
    1x1 Conv: ONNX, with its input."""
    from onnx import TensorProto, helper, numpy_helper

    w1, b1 = _rand((8, 3, 3, 3), 20), _rand((8,), 21)
    w2, b2 = _rand((6, 8, 5, 5), 22), _rand((6,), 23)
    w3, b3 = _rand((4, 6, 1, 1), 24), _rand((4,), 25)
    lo, hi = numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node(
            "Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[5, 5], strides=[2, 2], pads=[2, 1, 0, 2]
        ),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["y"], kernel_shape=[1, 1]),
    ]
    inits = [
        numpy_helper.from_array(a, n)
        for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (w3, "w3"), (b3, "b3"))
    ]
    graph = helper.make_graph(
        nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 11, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 6])], [*inits, lo, hi],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model, _rand((1, 3, 11, 10), 26) * 3


@needs_onednn
def test_an_onnx_models_convs_run_onednn_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch-1 inference on one thread: the packed 3x3 and 5x5 convs (activations fused) run
    oneDNN with their weights reordered once, the 1x1 conv the NumPy GEMM; the outputs are the
    NumPy strategies' within 1e-5, at the first run and the next."""
    from singa_lite import tensor
    from singa_lite.sonnx import prepare

    model, x = _conv_model()
    monkeypatch.setenv(onednn.ENV, "0")
    want = prepare(model).run([tensor.from_numpy(x)])[0].numpy()
    monkeypatch.setenv(onednn.ENV, "1")
    monkeypatch.setattr(threads, "count", lambda: 1)
    calls: list[tuple] = []
    forward = onednn.Convolution.forward

    def counted(self, x, W, b, wm=None):
        calls.append((self.w_shape, W is None and wm is not None))
        return forward(self, x, W, b, wm)

    monkeypatch.setattr(onednn.Convolution, "forward", counted)
    rep = prepare(model)
    for _ in range(2):
        _close(rep.run([tensor.from_numpy(x)])[0].numpy(), want)
    assert calls == [((8, 3, 3, 3), True), ((6, 8, 5, 5), True)] * 2

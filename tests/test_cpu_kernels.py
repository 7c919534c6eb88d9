"""The compiled CPU kernels (backend/cpu_kernels) against their NumPy references.

Each op runs twice on the same inputs, kernels on and off (``SINGA_LITE_CPU_KERNELS``), and the
outputs and gradients must agree: float32 within 1e-5 and float64 within 1e-12, relative to
the largest magnitude of the reference array (an elementwise relative bound would fail where
the reference itself cancels, e.g. GELU's derivative near its zero). The optimizer updates
must agree bit for bit. Shapes, strides, dtypes and value scales come from hypothesis,
with empty and odd sizes; half of the examples force the parallel form of each loop.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

pytest.importorskip(
    "numba", reason="the compiled CPU kernels need numba: pip install 'singa_lite[cpu-kernels]'"
)

from singa_lite import autograd, device, ops, opt, tensor
from singa_lite.backend import cpu_kernels
from singa_lite.backend.cpu_kernels import _jit, threads

DEV = device.get_default_device()
TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}
SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

pytestmark = pytest.mark.skipif(
    not cpu_kernels.enabled(), reason="SINGA_LITE_CPU_KERNELS=0: the kernels are switched off"
)


@contextlib.contextmanager
def kernels(on: bool, parallel: bool = False) -> Iterator[None]:
    """Kernels on or off inside the block; ``parallel`` forces the parallel form of every loop
    (on two threads, whatever the machine), to test it on small arrays too."""
    saved = os.environ.get(cpu_kernels.ENV), _jit.PARALLEL_MIN, threads._count
    os.environ[cpu_kernels.ENV] = "1" if on else "0"
    if parallel:
        _jit.PARALLEL_MIN, threads._count = 0, 2
    try:
        yield
    finally:
        if saved[0] is None:
            os.environ.pop(cpu_kernels.ENV, None)
        else:
            os.environ[cpu_kernels.ENV] = saved[0]
        _jit.PARALLEL_MIN, threads._count = saved[1], saved[2]


def assert_close(got: Any, ref: Any, what: str = "") -> None:
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape and got.dtype == ref.dtype, (
        what,
        got.shape,
        ref.shape,
        got.dtype,
        ref.dtype,
    )
    tol = TOL[ref.dtype]
    finite = ref[np.isfinite(ref)]
    scale = float(np.abs(finite).max()) if finite.size else 1.0
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * scale, err_msg=what)


def run_op(fn: Callable, arrays: list, dy: np.ndarray, on: bool, parallel: bool = False) -> list:
    """``fn`` on tensors of ``arrays`` and the gradient of every input for output gradient
    ``dy``: ``[y, *grads]`` as NumPy arrays (None for an input without a gradient)."""
    with kernels(on, parallel), autograd.training_mode(True):
        ts = [tensor.Tensor(device=DEV, data=a, requires_grad=True, stores_grad=True) for a in arrays]
        y = fn(*ts)
        grads = autograd.gradients(y, tensor.Tensor(device=DEV, data=dy))
        return [tensor.to_numpy(y)] + [tensor.to_numpy(grads[t]) if t in grads else None for t in ts]


def compare_op(fn: Callable, arrays: list, dy: np.ndarray, parallel: bool) -> list:
    """``fn`` with the kernels against ``fn`` without; returns the reference results. Where
    the reference raises (a softmax over an empty axis), the kernel path must raise the same."""
    try:
        ref = run_op(fn, arrays, dy, False)
    except Exception as e:
        with pytest.raises(type(e)):
            run_op(fn, arrays, dy, True, parallel)
        return []
    got = run_op(fn, arrays, dy, True, parallel)
    for i, (g, r) in enumerate(zip(got, ref)):
        if r is None:
            assert g is None
        else:
            assert_close(g, r, f"output {i}" if i == 0 else f"gradient of input {i - 1}")
    return ref


@st.composite
def arrays(draw: st.DrawFn, shape: tuple, dtype: Any, strided: bool = False) -> np.ndarray:
    """Normal values at a drawn scale (small, unit, or large enough to reach the tails of
    tanh, erf and exp), with some zeros; a strided view when ``strided``."""
    seed = draw(st.integers(0, 2**32 - 1))
    scale = draw(st.sampled_from([0.05, 1.0, 6.0, 30.0]))
    rng = np.random.default_rng(seed)
    full = shape[:-1] + (2 * shape[-1],) if strided and shape else shape
    a = (rng.standard_normal(full) * scale).astype(dtype)
    a[rng.random(full) < 0.05] = 0
    return a[..., ::2] if strided and shape else a


dtypes = st.sampled_from([np.float32, np.float64])
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=9)


# -- elementwise and row kernels, through the ops ---------------------------------------------
@SETTINGS
@given(st.data(), dtypes, shapes, st.sampled_from(["tanh", "none"]), st.booleans())
def test_gelu(data: Any, dtype: Any, shape: tuple, approximate: str, parallel: bool) -> None:
    x = data.draw(arrays(shape, dtype))
    dy = data.draw(arrays(shape, dtype))
    compare_op(lambda t: ops.gelu(t, approximate), [x], dy, parallel)
    # strided input straight into the kernel: the same values as its contiguous copy
    xs = data.draw(arrays(shape, dtype, strided=True))
    with kernels(True, parallel):
        got = cpu_kernels.activation.gelu_forward(xs, approximate)
        dx = cpu_kernels.activation.gelu_backward(xs, xs, approximate)
    ref = run_op(
        lambda t: ops.gelu(t, approximate), [np.ascontiguousarray(xs)], np.ascontiguousarray(xs), False
    )
    assert_close(got, ref[0])
    assert_close(dx, ref[1])


@SETTINGS
@given(st.data(), dtypes, shapes, st.booleans())
def test_softmax_last_axis(data: Any, dtype: Any, shape: tuple, parallel: bool) -> None:
    x = data.draw(arrays(shape, dtype))
    dy = data.draw(arrays(shape, dtype))
    compare_op(lambda t: ops.softmax(t, axis=-1), [x], dy, parallel)


@SETTINGS
@given(
    st.data(),
    dtypes,
    shapes,
    st.sampled_from([1, 2]),
    st.sampled_from(["full", "broadcast", "none"]),
    st.booleans(),
)
def test_layer_norm(data: Any, dtype: Any, shape: tuple, axes: int, params: str, parallel: bool) -> None:
    axes = min(axes, len(shape))
    norm = shape[len(shape) - axes :]
    x = data.draw(arrays(shape, dtype))
    dy = data.draw(arrays(shape, dtype))
    pshape = norm if params != "broadcast" else norm[1:] or (1,)
    scale = data.draw(arrays(pshape, dtype)) + dtype(1)
    bias = data.draw(arrays(pshape, dtype))
    if params == "none":
        fn, inputs = (lambda t, s: ops.layer_norm(t, s, None, axis=-axes)), [x, scale]
    else:
        fn, inputs = (lambda t, s, b: ops.layer_norm(t, s, b, axis=-axes)), [x, scale, bias]
    compare_op(fn, inputs, dy, parallel)


@SETTINGS
@given(
    st.data(),
    dtypes,
    st.tuples(
        st.integers(0, 3), st.sampled_from([(1, 1), (2, 1), (4, 2)]), st.integers(1, 9), st.integers(1, 9)
    ),
    st.integers(1, 8),
    st.booleans(),
    st.booleans(),
)
def test_attention(data: Any, dtype: Any, dims: tuple, features: int, causal: bool, parallel: bool) -> None:
    batch, (hq, hk), length, keys = dims
    q = data.draw(arrays((batch, hq, length, features), dtype))
    k = data.draw(arrays((batch, hk, keys, features), dtype))
    v = data.draw(arrays((batch, hk, keys, features), dtype))
    dy = data.draw(arrays((batch, hq, length, features), dtype))
    fn = lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    compare_op(fn, [q, k, v], dy, parallel)


@SETTINGS
@given(st.data(), dtypes, shapes, st.sampled_from(cpu_kernels.activation.ACTIVATIONS), st.booleans())
def test_bias_activation(data: Any, dtype: Any, shape: tuple, activation: str, parallel: bool) -> None:
    axis = data.draw(st.integers(0, len(shape) - 1))
    x = data.draw(arrays(shape, dtype))
    b = data.draw(arrays((shape[axis],), dtype))
    dy = data.draw(arrays(shape, dtype))
    compare_op(lambda t, u: ops.bias_activation(t, u, activation, axis), [x, b], dy, parallel)


BOUNDS = st.sampled_from([None, (0.0, 6.0), (0.0, math.inf), (-1.0, 0.5)])
CONV_SHAPES = hnp.array_shapes(min_dims=3, max_dims=4, min_side=0, max_side=9)
SIDES = st.integers(1, 9)


@SETTINGS
@given(st.data(), dtypes, CONV_SHAPES, BOUNDS, st.booleans())
def test_bias_clamp_in_place(data: Any, dtype: Any, shape: tuple, bounds: Any, parallel: bool) -> None:
    """A conv's epilogue, ``y += b`` then the clamp, in one pass: bit for bit NumPy's two
    passes, NaN and inf included."""
    y = data.draw(arrays(shape, dtype))
    y.reshape(-1)[::9] = np.nan
    y.reshape(-1)[4::13] = -np.inf
    b = data.draw(arrays((shape[1],), dtype))
    ref = y + b.reshape(1, -1, *(1,) * (len(shape) - 2))
    if bounds is not None:
        ref = np.clip(ref, dtype(bounds[0]), dtype(bounds[1]))
    with kernels(True, parallel):
        cpu_kernels.activation.bias_clamp_(y, b, bounds)
    np.testing.assert_array_equal(y, ref)


@SETTINGS
@given(st.data(), dtypes, shapes, st.booleans(), st.booleans())
def test_relu_is_numpys_maximum(data: Any, dtype: Any, shape: tuple, strided: bool, parallel: bool) -> None:
    """The ReLU forward's kernel: ``np.maximum(x, 0)``'s bits (-0.0 made +0.0, NaN and inf
    kept) in a new C-contiguous array, from a strided input too; the input untouched."""
    x = data.draw(arrays(shape, dtype, strided))
    if x.size:  # through indices: x may be a strided view
        x[np.unravel_index(np.arange(0, x.size, 7), x.shape)] = -0.0
        x[(0,) * x.ndim] = np.nan
    before = x.copy()
    ref = np.maximum(x, 0)
    with kernels(True, parallel):
        y = cpu_kernels.activation.relu(x)
    assert y.dtype == ref.dtype and y.flags.c_contiguous
    np.testing.assert_array_equal(y.view(f"u{y.itemsize}"), ref.view(f"u{y.itemsize}"))
    np.testing.assert_array_equal(x, before)


@SETTINGS
@given(st.data(), dtypes, shapes, st.sampled_from([(0.0, 6.0), (0.0, math.inf), (-1.0, 0.5)]), st.booleans())
def test_clamp_in_place_is_numpys_maximum_or_clip(
    data: Any, dtype: Any, shape: tuple, bounds: tuple, parallel: bool
) -> None:
    """The conv epilogue's clamp and the ONNX in-place Relu: ``np.maximum`` (an infinite upper
    bound) or ``np.clip``, the same bits, a negative zero (which the maximum makes +0.0 and
    the clip keeps), NaN and inf included."""
    y = data.draw(arrays(shape, dtype))
    y.reshape(-1)[::7] = -0.0
    y.reshape(-1)[3::9] = np.nan
    y.reshape(-1)[5::11] = -np.inf
    y.reshape(-1)[6::13] = np.inf
    lo, hi = (dtype(v) for v in bounds)
    ref = np.maximum(y, lo) if bounds[1] == math.inf else np.clip(y, lo, hi)
    with kernels(True, parallel):
        cpu_kernels.activation.clamp_(y, *bounds)
    assert y.dtype == ref.dtype
    np.testing.assert_array_equal(y.view(f"u{y.itemsize}"), ref.view(f"u{y.itemsize}"))


@SETTINGS
@given(st.data(), dtypes, st.integers(1, 12), st.integers(1, 12), SIDES, SIDES, BOUNDS)
def test_one_image_pointwise_conv(data: Any, dtype: Any, C: int, O: int, H: int, W: int, bounds: Any) -> None:
    """A batch-1 1x1 conv through ``conv2d_one_image`` (sonnx's packed conv), bias and clamp
    after the GEMM in one pass (kernels on) against the bias in the GEMM or in a pass of its
    own and a clamp pass (kernels off), narrowing and widening."""
    from singa_lite.ops import conv_infer

    x = data.draw(arrays((1, C, H, W), dtype))
    w = data.draw(arrays((O, C, 1, 1), dtype))
    b = data.draw(arrays((O,), dtype))
    wb = conv_infer.one_image_weight(np, w, b, 1)
    runs = []
    for on in (False, True):
        with kernels(on):
            runs.append(conv_infer.conv2d_one_image(np, x, w, b, wb, (1, 1), (0, 0, 0, 0), (1, 1), 1, bounds))
    assert_close(runs[1], runs[0])
    if bounds is not None:
        assert runs[1].min() >= bounds[0] and runs[1].max() <= bounds[1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_odd_arrays_run_in_parallel(dtype: Any) -> None:
    """Sizes past PARALLEL_MIN with odd rows and row counts: the parallel forms as the ops
    pick them, not forced."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, 1031, 293)).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    assert x.size >= _jit.PARALLEL_MIN
    compare_op(lambda t: ops.gelu(t, "tanh"), [x], dy, False)
    compare_op(lambda t: ops.softmax(t, axis=-1), [x], dy, False)
    s, b = rng.standard_normal(257).astype(dtype), rng.standard_normal(257).astype(dtype)
    compare_op(lambda t, u, w: ops.layer_norm(t, u, w), [x, s, b], dy, False)


@SETTINGS
@given(
    st.data(),
    dtypes,
    st.integers(0, 5),
    st.integers(1, 5),
    hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=9),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_batch_norm(
    data: Any, dtype: Any, n: int, c: int, spatial: tuple, training: bool, strided: bool, parallel: bool
) -> None:
    """Training and inference, (N, C) and (N, C, *spatial), with the running statistics the
    training forward updates; empty batches and spatial sizes raise or pass as the reference."""
    shape = (n, c, *spatial)
    x = data.draw(arrays(shape, dtype, strided=strided)) + dtype(data.draw(st.sampled_from([0.0, 3.0])))
    dy = data.draw(arrays(shape, dtype))
    scale = data.draw(arrays((c,), dtype)) + dtype(1)
    bias = data.draw(arrays((c,), dtype))
    running = (data.draw(arrays((c,), dtype)), np.abs(data.draw(arrays((c,), dtype))) + dtype(0.5))
    stats: dict[bool, list] = {}

    def fn(on: bool) -> Callable:
        def bn(t: Any, s: Any, b: Any) -> Any:
            rm, rv = (tensor.Tensor(device=DEV, data=r.copy()) for r in running)
            stats[on] = [rm, rv]
            return ops.batchnorm_2d(t, s, b, rm, rv, momentum=0.8, training=training)

        return bn

    try:
        ref = run_op(fn(False), [x, scale, bias], dy, False)
    except Exception as e:
        with pytest.raises(type(e)):
            run_op(fn(True), [x, scale, bias], dy, True, parallel)
        return
    got = run_op(fn(True), [x, scale, bias], dy, True, parallel)
    for i, (g, r) in enumerate(zip(got, ref)):
        assert_close(g, r, f"output {i}")
    for g, r in zip(stats[True], stats[False]):
        assert_close(tensor.to_numpy(g), tensor.to_numpy(r), "running statistics")


@SETTINGS
@given(st.data(), dtypes, shapes, st.booleans())
def test_piecewise_linear(data: Any, dtype: Any, shape: tuple, parallel: bool) -> None:
    """ReLU, clip (both ends, one end) and hard sigmoid, with values on the kinks."""
    x = data.draw(arrays(shape, dtype))
    x.reshape(-1)[::7] = dtype(6)  # on clip's upper bound
    x.reshape(-1)[3::11] = dtype(-3)  # on the hard sigmoid's lower kink (alpha 1/6)
    dy = data.draw(arrays(shape, dtype))
    compare_op(ops.relu, [x], dy, parallel)
    compare_op(lambda t: ops.clip(t, 0.0, 6.0), [x], dy, parallel)
    compare_op(lambda t: ops.clip(t, None, 0.5), [x], dy, parallel)
    compare_op(lambda t: ops.clip(t, -1.0, None), [x], dy, parallel)
    compare_op(lambda t: ops.hardsigmoid(t, 1 / 6, 0.5), [x], dy, parallel)
    compare_op(lambda t: ops.hardsigmoid(t, 0.2, 0.5), [x], dy, parallel)
    # nan and inf in dy come through as in the reference (dy * mask, not a choice)
    dy.reshape(-1)[::5] = np.nan
    compare_op(ops.relu, [x], dy, parallel)


@SETTINGS
@given(
    st.data(),
    st.sampled_from([np.float32, np.float64, np.float16]),
    st.integers(0, 5),
    st.integers(1, 5),
    hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=9),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_batch_norm_with_relu_is_relu_of_batch_norm(
    data: Any, dtype: Any, n: int, c: int, spatial: tuple, training: bool, on: bool, parallel: bool
) -> None:
    """``batchnorm_2d(..., relu=True)`` (graph mode's fusion; in training with the kernels, one
    pass each way with the mask recomputed) against ``relu(batchnorm_2d(...))`` bit for bit:
    outputs, all three gradients, the running statistics. Inputs where the normalised value is
    exactly 0 (one value per channel, bias 0) and nan and inf in ``dy`` included."""
    shape = (n, c, *spatial)
    x = data.draw(arrays(shape, dtype))
    if n and x.size:
        x[:, 0] = dtype(data.draw(st.sampled_from([0.0, 2.0])))  # channel 0: x == mean
    dy = data.draw(arrays(shape, dtype))
    if dy.size and data.draw(st.booleans()):
        dy.reshape(-1)[::3] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    scale = data.draw(arrays((c,), dtype)) + dtype(1)
    bias = data.draw(arrays((c,), dtype))
    bias[0] = dtype(-0.0)  # with a negative scale: -0.0 normalised values, made +0.0 by ReLU
    runs: dict[bool, list] = {}

    def fn(fused: bool) -> Callable:
        def bn(t: Any, s: Any, b: Any) -> Any:
            rm, rv = (tensor.Tensor(device=DEV, data=np.full(c, v, dtype)) for v in (0.5, 2.0))
            runs[fused] = [rm, rv]
            if fused:
                y = ops.batchnorm_2d(t, s, b, rm, rv, training=training, relu=True)
                runs["one pass"] = [y.creator.fused]
                return y
            return ops.relu(ops.batchnorm_2d(t, s, b, rm, rv, training=training))

        return bn

    with np.errstate(invalid="ignore"):  # inf * 0 in NumPy's ReLU gradient
        try:
            ref = run_op(fn(False), [x, scale, bias], dy, on, parallel)
        except Exception as e:
            with pytest.raises(type(e)):
                run_op(fn(True), [x, scale, bias], dy, on, parallel)
            return
        got = run_op(fn(True), [x, scale, bias], dy, on, parallel)
    assert runs["one pass"] == [on and training and dtype != np.float16]
    for i, (g, r) in enumerate(zip(got, ref)):
        np.testing.assert_array_equal(g, r, f"output {i}")
        np.testing.assert_array_equal(np.signbit(g), np.signbit(r), f"signs of output {i}")
    for g, r in zip(runs[True], runs[False]):
        np.testing.assert_array_equal(tensor.to_numpy(g), tensor.to_numpy(r), "running statistics")


@pytest.mark.parametrize("shape", [(3, 2, 1500), (2, 3, 37, 71), (5, 700, 3), (300, 1100)])
def test_batch_norm_chunks(shape: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch norm statistics over chunks of columns: channels longer than a chunk (split into
    segments), many short channels per chunk, (N, C); bit for bit the same on one thread as on
    two."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) * 2 + 5).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    c = shape[1]
    params = [rng.standard_normal(c).astype(np.float32) + 1, rng.standard_normal(c).astype(np.float32)]

    def fn(t: Any, s: Any, b: Any) -> Any:
        rm, rv = (tensor.Tensor(device=DEV, data=np.full(c, v, np.float32)) for v in (0.0, 1.0))
        return ops.batchnorm_2d(t, s, b, rm, rv, training=True)

    compare_op(fn, [x, *params], dy, False)
    two = run_op(fn, [x, *params], dy, True, True)
    monkeypatch.setattr(_jit, "PARALLEL_MIN", 1 << 62)  # every loop serial
    one = run_op(fn, [x, *params], dy, True, False)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


@SETTINGS
@given(st.data(), dtypes, shapes, st.booleans())
def test_fused_chains(data: Any, dtype: Any, shape: tuple, parallel: bool) -> None:
    """SiLU, hard swish and add + ReLU, the kernels for the fused chains, against the ops they
    stand for (``swish``, ``hardswish``, ``relu(add)``) run on the NumPy path."""
    x = data.draw(arrays(shape, dtype, strided=True))
    x.reshape(-1)[::7] = dtype(-3)  # on the hard sigmoid's lower kink
    dy = data.draw(arrays(shape, dtype))
    b = data.draw(arrays(shape, dtype))
    xc = np.ascontiguousarray(x)
    act = cpu_kernels.activation
    for op, fwd, bwd in [
        (ops.swish, act.silu_forward, act.silu_backward),
        (ops.hardswish, act.hardswish_forward, act.hardswish_backward),
    ]:
        ref = run_op(op, [xc], dy, False)
        with kernels(True, parallel):
            assert_close(fwd(x), ref[0], f"{op.__name__} forward")
            assert_close(bwd(x, dy), ref[1], f"{op.__name__} backward")
    ref = run_op(lambda t, u: ops.relu(ops.add(t, u)), [xc, b], dy, False)
    with kernels(True, parallel):
        assert_close(act.add_relu_forward(x, b), ref[0], "add + relu")
        out = b.copy()
        assert act.add_relu_forward(xc, out, out=out) is out  # in place, into an input
        assert_close(out, ref[0], "add + relu in place")


# -- optimizer updates: bit for bit ------------------------------------------------------------
def _train(make: Callable[[], Any], params: list, grads: list, on: bool) -> list:
    """Three updates of ``params`` (copies) with ``grads``; the final values and slots."""
    with kernels(on):
        ts = {
            f"p{i}": tensor.Tensor(device=DEV, data=p.copy(), requires_grad=True)
            for i, p in enumerate(params)
        }
        o = make()
        for step in range(3):
            for (name, t), g in zip(ts.items(), grads):
                o.apply(name, t, tensor.Tensor(device=DEV, data=g * (step + 1)))
            o.step()
        return [tensor.to_numpy(t) for t in ts.values()] + [
            tensor.to_numpy(v) for name in o.slot_names for v in getattr(o, name).values()
        ]


OPTIMIZERS: dict[str, tuple[Any, dict]] = {
    "sgd": (opt.SGD, {"lr": 0.1}),
    "sgd_momentum": (opt.SGD, {"lr": 0.1, "momentum": 0.9}),
    "sgd_dampened_decay": (opt.SGD, {"lr": 0.05, "momentum": 0.8, "dampening": 0.3, "weight_decay": 0.01}),
    "sgd_nesterov": (opt.SGD, {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}),
    "adam": (opt.Adam, {"lr": 0.01}),
    "adam_l2": (opt.Adam, {"lr": 0.01, "weight_decay": 0.1}),
    "adamw": (opt.AdamW, {"lr": 0.01, "weight_decay": 0.1}),
}


def optimizer(name: str, dtype: Any = np.float32) -> Callable[[], Any]:
    cls, kwargs = OPTIMIZERS[name]
    return lambda: cls(dtype=dtype, **kwargs)


@SETTINGS
@given(st.data(), st.sampled_from(sorted(OPTIMIZERS)), dtypes)
def test_updates_bit_for_bit(data: Any, name: str, dtype: Any) -> None:
    shapes_ = data.draw(
        st.lists(hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=9), max_size=3)
    )
    params = [data.draw(arrays(s, dtype)) for s in shapes_]
    grads = [data.draw(arrays(s, dtype)) for s in shapes_]
    ref = _train(optimizer(name, dtype), params, grads, False)
    got = _train(optimizer(name, dtype), params, grads, True)
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


def test_updates_bit_for_bit_parallel() -> None:
    """A parameter large enough for the parallel form."""
    rng = np.random.default_rng(5)
    p = [rng.standard_normal(70001).astype(np.float32)]
    g = [rng.standard_normal(70001).astype(np.float32)]
    for name in ("sgd_nesterov", "adamw"):
        ref = _train(optimizer(name), p, g, False)
        got = _train(optimizer(name), p, g, True)
        for a, b in zip(got, ref):
            np.testing.assert_array_equal(a, b)


# -- the math and the machinery ----------------------------------------------------------------
def test_exp32_and_tanh32_within_a_few_ulp() -> None:
    import numba

    from singa_lite.backend.cpu_kernels import _math

    @numba.njit
    def apply(x: Any, e: Any, t: Any) -> None:
        for i in range(x.size):
            e[i] = _math.exp32(x[i])
            t[i] = _math.tanh32(x[i])

    x = np.concatenate([np.linspace(-110, 95, 400_001), np.linspace(-1, 1, 100_001)]).astype(np.float32)
    e, t = np.empty_like(x), np.empty_like(x)
    apply(x, e, t)
    exact = np.exp(x.astype(np.float64))
    normal = (exact > np.finfo(np.float32).tiny) & (exact < np.finfo(np.float32).max)
    ulp = np.spacing(exact[normal].astype(np.float32)).astype(np.float64)
    assert (np.abs(e[normal] - exact[normal]) / ulp).max() <= 1.5
    assert np.all(e[exact >= 2 * float(np.finfo(np.float32).max)] == np.inf)
    assert np.all(e[exact < 1e-46] == 0)
    th = np.tanh(x.astype(np.float64))
    nz = th != 0
    assert (np.abs(t[nz] - th[nz]) / np.spacing(np.abs(th[nz]).astype(np.float32))).max() <= 1.5
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32)
    e, t = np.empty_like(special), np.empty_like(special)
    apply(special, e, t)
    np.testing.assert_array_equal(e, [np.inf, 0, np.nan, 1, 1])
    np.testing.assert_array_equal(t, [1, -1, np.nan, 0, 0])


def test_usable_says_no_to_what_it_cannot_take() -> None:
    f32 = np.zeros(3, np.float32)
    assert cpu_kernels.usable(np, f32)
    assert not cpu_kernels.usable(np, f32.astype(np.float16))
    assert not cpu_kernels.usable(np, np.zeros(3, np.int32))
    assert not cpu_kernels.usable(np, f32, f32.astype(np.float64))
    assert not cpu_kernels.usable_in_place(np, np.zeros((3, 2), np.float32).T)
    with kernels(False):
        assert not cpu_kernels.usable(np, f32)


def test_a_failing_cache_compiles_again_without_it() -> None:
    def twice(x: Any, y: Any) -> None:
        for i in range(x.size):
            y[i] = 2 * x[i]

    k = _jit.Kernel(twice)

    class Broken:
        def __call__(self, *args: Any) -> None:
            raise OSError("disk full")

    k._forms[False] = Broken()
    x = np.arange(4.0)
    y = np.empty_like(x)
    with pytest.warns(RuntimeWarning, match="without it"):
        k(1, x, y)
    np.testing.assert_array_equal(y, 2 * x)


def test_thread_count() -> None:
    assert 1 <= threads.count() <= max(threads.cores(), 1)
    with pytest.raises(ValueError):
        threads.set_num_threads(0)


def test_num_threads_sets_blas_and_kernels() -> None:
    """SINGA_LITE_NUM_THREADS=1 at import: BLAS (through threadpoolctl) and the kernels on one."""
    pytest.importorskip("threadpoolctl")
    code = (
        "import numpy as np, singa_lite\n"
        "from singa_lite.backend.cpu_kernels import threads\n"
        "print(threads.count(), threads.blas_threads())\n"
    )
    env = dict(os.environ, SINGA_LITE_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "1"]


def test_works_without_numba() -> None:
    """With numba unimportable the package imports, says the kernels are unusable, and the ops
    run their NumPy code."""
    code = (
        "import sys; sys.modules['numba'] = None\n"
        "import numpy as np\n"
        "from singa_lite import ops, tensor\n"
        "from singa_lite.backend import cpu_kernels\n"
        "x = tensor.from_numpy(np.linspace(-3, 3, 7, dtype=np.float32))\n"
        "y = tensor.to_numpy(ops.gelu(x, 'tanh'))\n"
        "print(cpu_kernels.usable(np, np.zeros(2, np.float32)), round(float(y[-1]), 4))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != cpu_kernels.ENV}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "2.9964"]


def test_kernel_calls_free_what_they_allocate() -> None:
    """Numba's runtime frees every allocation of a kernel call (its bookkeeping of the arrays
    passed in, the layer norm's row buffers): counted with NUMBA_NRT_STATS."""
    code = (
        "import numpy as np\n"
        "from numba.core.runtime import rtsys\n"
        "from singa_lite.backend.cpu_kernels import activation, normalization, optim, softmax\n"
        "x = np.ones((7, 9), np.float32)\n"
        "p, g, b = np.zeros(30, np.float32), np.ones(30, np.float32), np.zeros(30, np.float32)\n"
        "def calls():\n"
        "    optim.sgd_update(p, g, b, 0.01, weight_decay=0, momentum=0.9, undampened=None,\n"
        "                     nesterov=False, first=False)\n"
        "    activation.gelu_backward(x, x, 'tanh')\n"
        "    softmax.softmax_forward(x)\n"
        "    y, gm, m, r = normalization.layer_norm_forward(x, x[0], x[0], 1e-5, (9,))\n"
        "    normalization.layer_norm_backward(x, x, gm, m, r, True)\n"
        "    x3 = x.reshape(7, 3, 3)\n"
        "    mu, var = normalization.batch_norm_moments(x3)\n"  # buffers allocated per chunk
        "    normalization.batch_norm_grad_sums(x3, x3, mu)\n"
        "    activation.relu_backward(x, x)\n"
        "calls()\n"
        "s0 = rtsys.get_allocation_stats()\n"
        "for _ in range(200):\n"
        "    calls()\n"
        "s1 = rtsys.get_allocation_stats()\n"
        "print(s1.alloc - s0.alloc > 0, s1.alloc - s0.alloc == s1.free - s0.free)\n"
    )
    env = dict(os.environ, NUMBA_NRT_STATS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]

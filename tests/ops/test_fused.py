"""bias_activation: NumPy references over a shape x axis x dtype x activation grid, float64
gradient checks, bitwise agreement with the separate ops, the CuPy kernels against the plain path
(switched on and off), their launch arguments, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from opcheck import check_forward, check_grad, to_tensors

from singa_lite import autograd, ops, tensor
from singa_lite.backend import cpu_kernels, cupy_kernels
from singa_lite.errors import DTypeError, ShapeError

ACTIVATIONS = ("identity", "relu", "sigmoid", "tanh", "gelu")
_erf = np.vectorize(math.erf)


def ref_bias_activation(x, b, activation="relu", axis=1):
    """The formulas, in float64."""
    axis %= x.ndim
    z = x.astype(np.float64) + b.astype(np.float64).reshape((-1,) + (1,) * (x.ndim - axis - 1))
    y = {
        "identity": lambda: z,
        "relu": lambda: np.maximum(z, 0),
        "sigmoid": lambda: 1 / (1 + np.exp(-z)),
        "tanh": lambda: np.tanh(z),
        "gelu": lambda: z * 0.5 * (1 + _erf(z / math.sqrt(2))),
    }[activation]()
    return y.astype(x.dtype)


@st.composite
def cases(draw, dtypes=(np.float16, np.float32, np.float64)):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=5))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    dtype = draw(st.sampled_from(dtypes))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    b = rng.standard_normal(shape[axis]).astype(dtype)
    return x, b, axis


@given(case=cases(), activation=st.sampled_from(ACTIVATIONS))
def test_forward(dev, case, activation):
    x, b, axis = case
    lowp = x.dtype == np.float16
    tol = 2e-2 if lowp else 1e-5 if x.dtype == np.float32 else 1e-12
    check_forward(
        lambda *ts: ops.bias_activation(*ts, activation, axis),
        lambda *a: ref_bias_activation(*a, activation, axis),
        [x, b],
        dev,
        tol,
        tol,
    )


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("shape, axis", [((3, 4), 1), ((2, 3, 2, 2), 1), ((2, 2, 3), -1), ((4,), 0)])
def test_grad(dev, activation, shape, axis):
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, shape)
    b = rng.uniform(-0.5, 0.5, shape[axis])
    if activation == "relu":  # away from the kink
        z = x + b.reshape((-1,) + (1,) * (len(shape) - axis % len(shape) - 1))
        x = np.where(np.abs(z) < 0.1, x + 0.3, x)
    check_grad(lambda *ts: ops.bias_activation(*ts, activation, axis), [x, b], dev)


@pytest.mark.parametrize("activation", ["relu", "sigmoid", "tanh", "gelu"])
def test_same_bits_as_the_separate_ops(dev, monkeypatch, activation):
    # The plain path computes each activation as ops/activation.py does.
    monkeypatch.setenv(cupy_kernels.ENV, "0")
    monkeypatch.setenv(cpu_kernels.ENV, "0")
    rng = np.random.default_rng(2)
    for dtype in (np.float16, np.float32, np.float64):
        x, b = rng.standard_normal((2, 3, 4, 5)).astype(dtype) * 4, rng.standard_normal(3).astype(dtype)
        xt, bt, b4 = to_tensors([x, b, b.reshape(1, 3, 1, 1)], dev)
        separate = getattr(ops, activation)(ops.add(xt, b4))
        fused = ops.bias_activation(xt, bt, activation)
        assert tensor.to_numpy(fused).tobytes() == tensor.to_numpy(separate).tobytes()


def _run(x, b, dy, activation, axis, dev, monkeypatch, switch, wrt):
    monkeypatch.setenv(cupy_kernels.ENV, switch)
    autograd.training = True
    xt, bt = to_tensors([x, b], dev)
    xt.requires_grad = xt.stores_grad = 0 in wrt
    bt.requires_grad = bt.stores_grad = 1 in wrt
    y = ops.bias_activation(xt, bt, activation, axis)
    grads = autograd.gradients(y, dev.xp.asarray(dy))
    return [tensor.to_numpy(y)] + [tensor.to_numpy(grads[t]) if t in grads else None for t in (xt, bt)]


@given(
    case=cases(dtypes=(np.float32, np.float64)),
    activation=st.sampled_from(ACTIVATIONS),
    wrt=st.sampled_from([(0, 1), (0,), (1,)]),
)
def test_kernels_match_the_plain_path(dev, monkeypatch, case, activation, wrt):
    """On a GPU, SINGA_LITE_RAW_KERNELS=1 runs bias_act.cu: relu and identity give the plain
    path's bits for y and dx; the transcendental ones and db (summed in another order) agree to
    rounding. On the CPU both runs are the plain path."""
    x, b, axis = case
    dy = np.random.default_rng(3).standard_normal(x.shape).astype(x.dtype)
    calls = []
    for name in ("bias_activation_forward", "bias_activation_backward"):
        orig = getattr(cupy_kernels, name)
        monkeypatch.setattr(cupy_kernels, name, lambda *a, orig=orig: calls.append(1) or orig(*a))
    on = _run(x, b, dy, activation, axis, dev, monkeypatch, "1", wrt)
    assert len(calls) == (2 if dev.is_gpu() else 0)
    off = _run(x, b, dy, activation, axis, dev, monkeypatch, "0", wrt)
    assert len(calls) == (2 if dev.is_gpu() else 0)  # switched off: the plain path
    eps = np.finfo(x.dtype).eps
    for i, (kernel, plain) in enumerate(zip(on, off)):
        if i > 0 and i - 1 not in wrt:
            assert kernel is None and plain is None
            continue
        assert kernel.dtype == plain.dtype == x.dtype and kernel.shape == plain.shape
        if activation in ("relu", "identity") and i < 2:
            np.testing.assert_array_equal(kernel, plain)
        else:  # tanh's 1 - y^2 cancels near |y| = 1: an absolute bound scaled to the terms
            scale = np.abs(dy).sum() / max(b.size, 1) if i == 2 else np.abs(dy).max(initial=1)
            np.testing.assert_allclose(kernel, plain, rtol=64 * eps, atol=64 * eps * scale)
    np.testing.assert_allclose(on[0], ref_bias_activation(x, b, activation, axis), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("shape, axis", [((70, 37), 1), ((3, 5, 40, 41), 1), ((2, 4, 3), 2)])
def test_kernel_grad_over_chunks(dev, monkeypatch, activation, shape, axis):
    # Shapes whose db is summed in several chunks (bias_grid) on a GPU, with small chunks.
    monkeypatch.setenv(cupy_kernels.ENV, "1")
    monkeypatch.setattr(cupy_kernels, "_BIAS_LEAST", (8, 256))
    rng = np.random.default_rng(4)
    x, b = rng.uniform(-2, 2, shape), rng.uniform(-0.5, 0.5, shape[axis])
    dy = rng.standard_normal(shape)
    _, dx, db = _run(x, b, dy, activation, axis, dev, monkeypatch, "1", (0, 1))
    z = x + b.reshape((-1,) + (1,) * (len(shape) - axis - 1))
    if activation == "relu":
        want = dy * (z > 0)
    else:
        want = dy * (0.5 * (1 + _erf(z / math.sqrt(2))) + z * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi))
    np.testing.assert_allclose(dx, want, rtol=1e-12, atol=1e-12)
    other = tuple(i for i in range(len(shape)) if i != axis)
    np.testing.assert_allclose(db, want.sum(axis=other), rtol=1e-10, atol=1e-10)


def test_empty_and_float32(dev):
    for shape in ((0, 3), (2, 3, 0)):
        xt, bt = to_tensors([np.zeros(shape, np.float32), np.ones(3, np.float32)], dev)
        autograd.training = True
        y = ops.bias_activation(xt, bt, "gelu")
        grads = autograd.gradients(y, dev.xp.ones(y.shape, np.float32))
        assert y.shape == shape and y.dtype == np.float32
        assert grads[xt].shape == shape and tensor.to_numpy(grads[bt]).tolist() == [0, 0, 0]


def test_bad_input(dev):
    x, b = (
        tensor.Tensor(data=a, device=dev, requires_grad=False)
        for a in (np.zeros((2, 3), np.float32), np.zeros(3, np.float32))
    )
    with pytest.raises(ValueError, match="activation must be one of"):
        ops.bias_activation(x, b, "swish")
    with pytest.raises(ShapeError, match="BiasActivation"):
        ops.bias_activation(x, b, axis=0)
    with pytest.raises(ShapeError, match="out of range"):
        ops.bias_activation(x, b, axis=2)
    with pytest.raises(ShapeError, match="1-d"):
        ops.bias_activation(
            x, tensor.Tensor(data=np.zeros((1, 3), np.float32), device=dev, requires_grad=False)
        )
    with pytest.raises(DTypeError, match="share a dtype"):
        ops.bias_activation(x, tensor.Tensor(data=np.zeros(3, np.float64), device=dev, requires_grad=False))
    with pytest.raises(DTypeError, match="floating-point"):
        ops.bias_activation(
            tensor.Tensor(data=np.zeros((2, 3), np.int32), device=dev, requires_grad=False), b
        )


# -- launch arguments, against a recording stand-in for CuPy ----------------------------------------
@pytest.fixture
def fake_cupy(monkeypatch):
    from test_kernel_compile import FakeCupy

    monkeypatch.setattr(cupy_kernels, "_modules", {})
    monkeypatch.setattr(cupy_kernels, "_functions", {})
    fake = FakeCupy()
    fake.empty, fake.empty_like = np.zeros, np.zeros_like  # the launches write nothing
    return fake


def test_bias_grid():
    assert cupy_kernels.bias_grid(128, 512, 1) == (16, 1, 128)  # a Dense layer: 32-channel tiles
    assert cupy_kernels.bias_grid(32, 16, 1024) == (16, 8, 4096)  # a conv: one channel a tile
    assert cupy_kernels.bias_grid(65536, 512, 1) == (16, 64, 1024)
    assert cupy_kernels.bias_grid(0, 3, 1) == (1, 1, 1)
    for outer, channels, inner in ((7, 3, 1), (1000, 5, 77), (3, 2000, 4096), (10**6, 1, 1)):
        tiles, chunks, chunk = cupy_kernels.bias_grid(outer, channels, inner)
        items = outer * (1 if inner == 1 else inner)
        assert tiles == (-(-channels // 32) if inner == 1 else channels)
        assert (chunks - 1) * chunk < items <= chunks * chunk and chunks <= 65535  # no empty chunk


def test_bias_activation_arguments(fake_cupy):
    x, b = np.zeros((4, 3, 5, 6), np.float32), np.zeros(3, np.float32)
    y = cupy_kernels.bias_activation_forward(fake_cupy, x, b, "sigmoid", 1)
    name, grid, block, args = fake_cupy.launches[-1]
    assert name == "singa_bias_act_fwd<float>" and grid == (2,) and block == (256,) and y.shape == x.shape
    assert args[:3] == (x, b, y) and args[3] == 2 and args[5:] == (3, 30, x.size)
    assert type(args[4]) is np.float32 and args[4] == np.float32(math.log(np.finfo(np.float32).max) - 1)
    assert [type(a) for a in args[5:]] == [np.int32, np.uint32, np.uint32]
    dy = np.ones_like(x)
    dx, db = cupy_kernels.bias_activation_backward(fake_cupy, dy, y, b, "sigmoid", 1, True, True)
    name, grid, block, args = fake_cupy.launches[-1]
    assert name == "singa_bias_act_bwd<float>" and grid == (3, 1) and block == (32, 8)
    assert args[:5] == (dy, y, b, dx, db) and args[5:] == (2, 3, 30, 4, 120)
    assert dx.shape == x.shape and db.shape == (3,)
    # identity: dx is dy itself, the kernel only sums db; dx alone: no db pointer
    n = len(fake_cupy.launches)
    dx, db = cupy_kernels.bias_activation_backward(fake_cupy, dy, None, b, "identity", 1, True, True)
    assert dx is dy and fake_cupy.launches[-1][3][1] is dy and fake_cupy.launches[-1][3][3] == 0
    dx, db = cupy_kernels.bias_activation_backward(fake_cupy, dy, x, b, "gelu", -1 % 4, True, False)
    assert db is None and fake_cupy.launches[-1][3][4] == 0 and fake_cupy.launches[-1][3][5] == 4
    assert cupy_kernels.bias_activation_backward(fake_cupy, dy, None, b, "identity", 1, True, False) == (
        dy,
        None,
    )
    assert len(fake_cupy.launches) == n + 2
    # a big batch: db in chunks, then their sum in chunk order
    x64 = np.zeros((64, 16, 32, 32), np.float64)
    b64 = np.zeros(16, np.float64)
    _, db = cupy_kernels.bias_activation_backward(fake_cupy, x64, x64, b64, "relu", 1, True, True)
    (_, grid, _, args), (name, _, _, sums) = fake_cupy.launches[-2:]
    assert grid == (16, 16) and args[4].shape == (16, 16) and args[-1] == 64 * 1024 // 16
    assert name == "singa_bias_grad_sum<double>" and sums[:4] == (args[4], db, 16, 16)

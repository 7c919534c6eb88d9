"""Elementwise and activation ops against PyTorch: forward values and input gradients."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import to_tensors

from singa_lite import autograd, ops, tensor

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
F = torch.nn.functional

SHAPES = [(5,), (3, 4), (2, 3, 4)]


def tmax(*xs):
    y = xs[0]
    for x in xs[1:]:
        y = torch.maximum(y, x)
    return y


def tmin(*xs):
    y = xs[0]
    for x in xs[1:]:
        y = torch.minimum(y, x)
    return y


# name: (singa_lite function, torch function, input domain)
UNARY = {
    "abs": (autograd.abs, torch.abs, (-3, 3)),
    "exp": (autograd.exp, torch.exp, (-3, 3)),
    "log": (autograd.log, torch.log, (0.1, 5)),
    "sqrt": (autograd.sqrt, torch.sqrt, (0.1, 5)),
    "square": (autograd.square, torch.square, (-3, 3)),
    "reciprocal": (autograd.reciprocal, torch.reciprocal, (0.2, 3)),
    "sign": (autograd.sign, torch.sign, (-3, 3)),
    "ceil": (autograd.ceil, torch.ceil, (-3, 3)),
    "floor": (autograd.floor, torch.floor, (-3, 3)),
    "round": (ops.round, torch.round, (-3, 3)),  # ONNX's halves-to-even, as torch.round
    "sin": (autograd.sin, torch.sin, (-3, 3)),
    "cos": (autograd.cos, torch.cos, (-3, 3)),
    "tan": (autograd.tan, torch.tan, (-1.2, 1.2)),
    "asin": (autograd.asin, torch.asin, (-0.9, 0.9)),
    "acos": (autograd.acos, torch.acos, (-0.9, 0.9)),
    "atan": (autograd.atan, torch.atan, (-3, 3)),
    "sinh": (autograd.sinh, torch.sinh, (-3, 3)),
    "cosh": (autograd.cosh, torch.cosh, (-3, 3)),
    "asinh": (autograd.asinh, torch.asinh, (-3, 3)),
    "acosh": (autograd.acosh, torch.acosh, (1.1, 4)),
    "atanh": (autograd.atanh, torch.atanh, (-0.9, 0.9)),
    "erf": (autograd.erf, torch.erf, (-4, 4)),
    "clip": (lambda x: autograd.clip(x, -1.0, 0.5), lambda x: torch.clamp(x, -1.0, 0.5), (-3, 3)),
    "relu": (autograd.relu, torch.relu, (-3, 3)),
    "leakyrelu": (lambda x: autograd.leakyrelu(x, 0.2), lambda x: F.leaky_relu(x, 0.2), (-3, 3)),
    "elu": (lambda x: autograd.elu(x, 0.7), lambda x: F.elu(x, 0.7), (-3, 3)),
    # singa_lite's defaults are ONNX's float32-rounded constants; torch uses double ones.
    "selu": (lambda x: autograd.selu(x, 1.6732632423543772, 1.0507009873554805), torch.selu, (-3, 3)),
    "sigmoid": (autograd.sigmoid, torch.sigmoid, (-8, 8)),
    # F.hardsigmoid's backward multiplies by a float32 1/6 even in float64: use the formula.
    "hardsigmoid": (
        lambda x: autograd.hardsigmoid(x, 0.3, 0.4),
        lambda x: torch.clamp(0.3 * x + 0.4, 0, 1),
        (-5, 5),
    ),
    "hardsigmoid_torch": (lambda x: autograd.hardsigmoid(x, 1 / 6, 0.5), F.hardsigmoid, (-5, 5)),
    "hardswish": (autograd.hardswish, F.hardswish, (-5, 5)),
    "tanh": (autograd.tanh, torch.tanh, (-3, 3)),
    "softplus": (autograd.softplus, F.softplus, (-8, 8)),
    "softsign": (autograd.softsign, F.softsign, (-3, 3)),
    "gelu": (autograd.gelu, F.gelu, (-4, 4)),
    "gelu_tanh": (lambda x: autograd.gelu(x, "tanh"), lambda x: F.gelu(x, approximate="tanh"), (-4, 4)),
    "softmax": (autograd.softmax, lambda x: torch.softmax(x, 1), (-5, 5)),
    "softmax_last": (lambda x: autograd.softmax(x, -1), lambda x: torch.softmax(x, -1), (-5, 5)),
    "log_softmax": (autograd.log_softmax, lambda x: torch.log_softmax(x, 1), (-5, 5)),
}
BINARY = {
    "add": (autograd.add, torch.add),
    "sub": (autograd.sub, torch.sub),
    "mul": (autograd.mul, torch.mul),
    "div": (autograd.div, torch.div),
    "pow": (autograd.pow, torch.pow),
    "max": (autograd.max, tmax),
    "min": (autograd.min, tmin),
    "sum": (autograd.sum, lambda *xs: sum(xs[1:], xs[0])),
    "mean": (autograd.mean, lambda *xs: sum(xs[1:], xs[0]) / len(xs)),
}
TOL = {np.float32: {"rtol": 2e-5, "atol": 1e-6}, np.float64: {"rtol": 1e-10, "atol": 1e-12}}
LOOSE = {"hardsigmoid_torch"}  # torch itself is float32-accurate here


def compare(ours, theirs, arrays: list[np.ndarray], tol, dtype=None) -> None:
    """Forward values and the gradient of sum(y * w) with respect to every input agree.

    ``tol`` names the dtype whose tolerances apply; ``dtype`` is the inputs' (default: ``tol``).
    """
    dtype = dtype or tol
    rng = np.random.default_rng(1)
    ts = to_tensors(arrays, tensor.Tensor(data=arrays[0], requires_grad=False).device)
    autograd.training = True
    y = ours(*ts)
    w = rng.standard_normal(y.shape).astype(dtype)
    loss = autograd.mul(y, tensor.Tensor(data=w, requires_grad=False))
    grads = autograd.gradients(loss)
    autograd.training = False

    txs = [torch.tensor(a, requires_grad=True) for a in arrays]
    ty = theirs(*txs)
    (ty * torch.tensor(w)).sum().backward()

    np.testing.assert_allclose(tensor.to_numpy(y), ty.detach().numpy(), **TOL[tol])
    for i, (t, tx) in enumerate(zip(ts, txs)):
        want = tx.grad.numpy() if tx.grad is not None else np.zeros_like(arrays[i])
        got = tensor.to_numpy(grads[t]) if t in grads else np.zeros_like(arrays[i])
        assert got.dtype == dtype, f"gradient {i} has dtype {got.dtype}"
        np.testing.assert_allclose(got, want, **TOL[tol], err_msg=f"gradient of input {i}")


def uniform(rng, lo, hi, shape, dtype):
    return rng.uniform(lo, hi, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_torch(name, shape, dtype):
    ours, theirs, (lo, hi) = UNARY[name]
    if name.startswith(("softmax", "log_softmax")) and len(shape) < 2:
        shape = (2, *shape)
    x = uniform(np.random.default_rng(0), lo, hi, shape, dtype)
    compare(ours, theirs, [x], np.float32 if name in LOOSE else dtype, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", [[(3, 4), (3, 4)], [(2, 3, 4), (4,)], [(3, 1), (1, 4), (2, 1, 1)]])
def test_broadcasting_ops_match_torch(name, shapes, dtype):
    if len(shapes) == 3 and name not in ("max", "min", "sum", "mean"):
        shapes = shapes[:2]
    rng = np.random.default_rng(0)
    lo = 0.5 if name in ("pow", "div") else -3  # pow's gradient in b needs a > 0; div keeps b off 0
    xs = [uniform(rng, lo, 3, s, dtype) for s in shapes]
    ours, theirs = BINARY[name]
    compare(ours, theirs, xs, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("xshape", "sshape"), [((2, 3, 4, 4), (3,)), ((4, 5), (5,)), ((4, 5), (1,))])
def test_prelu_matches_torch(xshape, sshape, dtype):
    # torch puts per-channel slopes on axis 1; ONNX (and singa_lite) broadcast from the right.
    rng = np.random.default_rng(0)
    x = uniform(rng, -3, 3, xshape, dtype)
    s = uniform(rng, -0.5, 0.5, sshape, dtype)
    ours_shape = sshape + (1,) * max(len(xshape) - 2, 0)
    compare(lambda a, b: autograd.prelu(a, autograd.reshape(b, ours_shape)), F.prelu, [x, s], dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", [0, 1])
def test_add_bias_matches_torch(axis, dtype):
    rng = np.random.default_rng(0)
    x = uniform(rng, -3, 3, (4, 5), dtype)
    b = uniform(rng, -3, 3, (5,) if axis == 0 else (4,), dtype)
    theirs = (lambda a, c: a + c[None, :]) if axis == 0 else (lambda a, c: a + c[:, None])
    compare(lambda a, c: autograd.add_bias(a, c, axis), theirs, [x, b], dtype)

"""The op test harness, the one place for what op tests share: reference forward check and
float64 numerical gradient check, hypothesis array strategies, small tensor helpers.

    check_forward(fn, ref, [x, w], dev)          # fn on Tensors vs ref on NumPy arrays
    check_grad(fn, [x, w], dev, wrt=[0, 1])      # autograd vs central differences (float64)

``fn`` takes Tensors and returns a Tensor or a tuple of Tensors; ``ref`` takes NumPy arrays and
returns an array or a tuple. Inputs are NumPy arrays; non-tensor arguments belong in a closure.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from singa_lite import autograd, tensor
from singa_lite.autograd import Operator


def to_tensors(arrays: Sequence[np.ndarray], dev: Any, stores_grad: bool = True) -> list[tensor.Tensor]:
    ts = []
    for a in arrays:
        # Tensor(data=...) keeps float64 and int64 (from_numpy narrows them, as SINGA does).
        t = tensor.Tensor(device=dev, data=np.asarray(a), requires_grad=True, stores_grad=stores_grad)
        ts.append(t)
    return ts


def _as_tuple(y: Any) -> tuple:
    return y if isinstance(y, (tuple, list)) else (y,)


def run(fn: Callable, arrays: Sequence[np.ndarray], dev: Any) -> tuple[np.ndarray, ...]:
    """``fn`` on ``arrays`` (as tensors on ``dev``), outputs back as NumPy arrays."""
    return tuple(tensor.to_numpy(y) for y in _as_tuple(fn(*to_tensors(arrays, dev))))


def check_forward(
    fn: Callable,
    ref: Callable,
    arrays: Sequence[np.ndarray],
    dev: Any,
    rtol: float | None = None,
    atol: float | None = None,
    check_dtype: bool = True,
) -> None:
    """``fn`` on tensors equals ``ref`` on the same NumPy arrays (dtype included)."""
    got = run(fn, arrays, dev)
    want = tuple(np.asarray(w) for w in _as_tuple(ref(*[np.asarray(a) for a in arrays])))
    assert len(got) == len(want), f"{len(got)} outputs, reference has {len(want)}"
    for g, w in zip(got, want):
        assert g.shape == w.shape, f"shape {g.shape} != reference {w.shape}"
        if check_dtype:
            assert g.dtype == w.dtype, f"dtype {g.dtype} != reference {w.dtype}"
        if w.dtype.kind in "f":
            lowp = w.dtype == np.float16
            r = rtol if rtol is not None else (1e-2 if lowp else 1e-5 if w.dtype == np.float32 else 1e-10)
            a = atol if atol is not None else (1e-2 if lowp else 1e-5 if w.dtype == np.float32 else 1e-10)
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=r, atol=a)
        else:
            np.testing.assert_array_equal(g, w)


class _WeightedSum(Operator):
    """sum_i <y_i, w_i>: turns any outputs into the scalar the gradient check differentiates."""

    def __init__(self, weights: list) -> None:
        super().__init__()
        self.weights = weights

    def forward(self, *ys: Any) -> Any:
        self.dtypes = [y.dtype for y in ys]
        total = sum((y.astype(np.float64) * w).sum() for y, w in zip(ys, self.weights))
        return self.xp.asarray(total, dtype=np.float64)

    def backward(self, dy: Any) -> tuple:
        return tuple((w * dy).astype(dt) for w, dt in zip(self.weights, self.dtypes))


def _weighted_sum(ys: tuple, weights: list) -> tensor.Tensor:
    return _WeightedSum(weights)(*ys)[0]


def check_grad(
    fn: Callable,
    arrays: Sequence[np.ndarray],
    dev: Any,
    wrt: Sequence[int] | None = None,
    eps: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    seed: int = 0,
) -> None:
    """Autograd's gradients of ``fn`` match central differences, in float64.

    The scalar differentiated is ``sum_i <fn(x)_i, w_i>`` with random weights ``w_i``, so every
    output element and every output contributes. ``wrt`` lists the input positions to check
    (default: every floating-point input).
    """
    arrays = [np.asarray(a) for a in arrays]
    if wrt is None:
        wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    for i in wrt:
        assert arrays[i].dtype == np.float64, f"input {i} must be float64 for the gradient check"
    rng = np.random.default_rng(seed)
    xp = dev.xp

    with _training():
        ts = to_tensors(arrays, dev)
        for j, t in enumerate(ts):
            t.stores_grad = t.requires_grad = j in wrt
        ys = _as_tuple(fn(*ts))
        float_ys = [y for y in ys if np.dtype(y.dtype).kind == "f"]
        weights = [xp.asarray(rng.standard_normal(y.shape)) for y in float_ys]
        loss = _weighted_sum(tuple(float_ys), weights)
        grads = autograd.gradients(loss)

    np_weights = [dev.backend.to_numpy(w) for w in weights]

    def scalar(xs: list[np.ndarray]) -> float:
        outs = [
            y for y in _as_tuple(fn(*to_tensors(xs, dev, stores_grad=False))) if np.dtype(y.dtype).kind == "f"
        ]
        return float(sum((tensor.to_numpy(y).astype(np.float64) * w).sum() for y, w in zip(outs, np_weights)))

    for i in wrt:
        t = ts[i]
        analytic = tensor.to_numpy(grads[t]) if t in grads else np.zeros_like(arrays[i])
        numeric = np.zeros_like(arrays[i])
        flat = numeric.reshape(-1)
        for k in range(arrays[i].size):
            xs_plus = [a.copy() for a in arrays]
            xs_minus = [a.copy() for a in arrays]
            xs_plus[i].reshape(-1)[k] += eps
            xs_minus[i].reshape(-1)[k] -= eps
            flat[k] = (scalar(xs_plus) - scalar(xs_minus)) / (2 * eps)
        np.testing.assert_allclose(
            analytic, numeric, rtol=rtol, atol=atol, err_msg=f"gradient of input {i} is wrong"
        )


@contextlib.contextmanager
def _training() -> Iterator[None]:
    """Record graphs inside the block (autograd.training on), then restore the flag."""
    old = autograd.training
    autograd.training = True
    try:
        yield
    finally:
        autograd.training = old


# -- arrays and tensors for op tests ------------------------------------------------------------
DTYPES = [np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_]
FLOATS = st.sampled_from([np.float16, np.float32, np.float64])


def elements(dtype: type) -> st.SearchStrategy:
    kind = np.dtype(dtype).kind
    if kind == "f":
        return st.floats(-4, 4, width=16)
    return st.booleans() if kind == "b" else st.integers(-20, 20)


@st.composite
def any_arrays(draw: st.DrawFn, min_dims: int = 0, max_dims: int = 3, min_side: int = 0) -> np.ndarray:
    """An array of any of ``DTYPES``, up to 4 per side."""
    dtype = draw(st.sampled_from(DTYPES))
    shape = hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=4)
    return draw(hnp.arrays(dtype, shape, elements=elements(dtype)))


def float_arrays(
    dtype: Any = np.float64, min_dims: int = 1, max_dims: int = 3, lo: float = -3.0, hi: float = 3.0
) -> st.SearchStrategy:
    """Arrays of values in ``[lo, hi]`` (drawn in float64, then cast to ``dtype``)."""
    return hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, max_side=4),
        elements=st.floats(lo, hi),
    ).map(lambda a: a.astype(dtype))


def away_from(a: np.ndarray, points: Sequence[float], gap: float = 1e-3) -> np.ndarray:
    """``a`` moved off the kinks at ``points`` (the gradient check needs smooth ground)."""
    for p in points:
        a = np.where(np.abs(a - p) < gap, p + 2 * gap, a)
    return a


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def t_(x: np.ndarray, dev: Any) -> tensor.Tensor:
    """A constant tensor on ``dev`` that keeps ``x``'s dtype."""
    return tensor.Tensor(data=np.asarray(x), device=dev, requires_grad=False)


def keep_dtype(a: Any) -> tensor.Tensor:
    """A constant tensor that keeps ``a``'s dtype (``from_numpy`` narrows float64 and int64)."""
    return tensor.Tensor(data=np.asarray(a), requires_grad=False)


def torch_or_skip() -> Any:
    return pytest.importorskip("torch", reason="PyTorch is not installed")


def value_and_grad(fn: Callable, x: np.ndarray, dev: Any) -> tuple[np.ndarray, np.ndarray]:
    """``fn(x)`` and the gradient of its sum with respect to ``x``, as NumPy arrays."""
    from singa_lite import ops

    with _training():
        (t,) = to_tensors([x], dev)
        y = fn(t)
        grads = autograd.gradients(ops.reduce_sum(y))
    return tensor.to_numpy(y), tensor.to_numpy(grads[t])

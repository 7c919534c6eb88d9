"""matmul, gemm, einsum, tensordot: NumPy references, float64 gradient checks, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import check_forward, check_grad

from singa_lite import autograd, tensor
from singa_lite.errors import ShapeError

DTYPES = [np.float16, np.float32, np.float64]


def _rand(shape: tuple, dtype: type = np.float64, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


# (a shape, b shape): 1-D operands, plain matrices, batched broadcasting both ways
MATMUL_SHAPES = [
    ((3,), (3,)),
    ((3,), (3, 2)),
    ((2, 3), (3,)),
    ((2, 3), (3, 4)),
    ((2, 2, 3), (3, 4)),
    ((3,), (2, 3, 4)),
    ((2, 1, 2, 3), (3, 3, 2)),
    ((2, 3, 4), (2, 4, 1)),
]


@pytest.mark.parametrize(("sa", "sb"), MATMUL_SHAPES)
def test_matmul_grad(dev, sa, sb):
    check_grad(autograd.matmul, [_rand(sa), _rand(sb, seed=1)], dev)


@given(
    m=st.integers(0, 5),
    k=st.integers(1, 5),
    n=st.integers(1, 5),
    batch=st.sampled_from([(), (2,), (3, 1)]),
    dtype=st.sampled_from(DTYPES),
)
def test_matmul_forward(dev, m, k, n, batch, dtype):
    a, b = _rand((*batch, m, k), dtype), _rand((k, n), dtype, seed=1)
    check_forward(autograd.matmul, np.matmul, [a, b], dev)
    check_forward(autograd.matmul, np.matmul, [b.T, a.swapaxes(-1, -2)], dev)


def test_matmul_keeps_float32_grads(dev):
    a, b = (
        tensor.Tensor(data=_rand((4, 3), np.float32), device=dev, requires_grad=False),
        tensor.Tensor(data=_rand((3, 2), np.float32), device=dev, requires_grad=False),
    )
    autograd.training = True
    a.stores_grad = b.stores_grad = a.requires_grad = b.requires_grad = True
    grads = autograd.gradients(autograd.matmul(a, b))
    assert grads[a].dtype == np.float32 and grads[b].dtype == np.float32


@pytest.mark.parametrize(("sa", "sb"), [((2, 3), (2, 3)), ((2, 3, 4), (2, 5, 4)), ((), (3,))])
def test_matmul_bad_shapes(dev, sa, sb):
    a, b = (
        tensor.Tensor(data=_rand(sa), device=dev, requires_grad=False),
        tensor.Tensor(data=_rand(sb), device=dev, requires_grad=False),
    )
    with pytest.raises(ShapeError, match="MatMul"):
        autograd.matmul(a, b)


def _gemm_ref(alpha, beta, ta, tb):
    def ref(A, B, C=None):
        y = alpha * ((A.T if ta else A) @ (B.T if tb else B))
        return (y if C is None else y + beta * C).astype(A.dtype)

    return ref


@given(
    ta=st.booleans(),
    tb=st.booleans(),
    alpha=st.sampled_from([1.0, 0.5, -2.0]),
    beta=st.sampled_from([1.0, 0.25]),
    c_shape=st.sampled_from([None, (3, 4), (4,), (1, 4), (3, 1), ()]),
    dtype=st.sampled_from(DTYPES),
)
def test_gemm_forward(dev, ta, tb, alpha, beta, c_shape, dtype):
    A = _rand((2, 3) if ta else (3, 2), dtype)
    B = _rand((4, 2) if tb else (2, 4), dtype, seed=1)
    arrays = [A, B] if c_shape is None else [A, B, _rand(c_shape, dtype, seed=2)]

    def fn(*ts):
        return autograd.gemm(*ts, alpha=alpha, beta=beta, transA=ta, transB=tb)

    check_forward(fn, _gemm_ref(alpha, beta, ta, tb), arrays, dev)


@pytest.mark.parametrize(
    ("ta", "tb", "c_shape"), [(False, False, (3, 4)), (True, True, (4,)), (True, False, None)]
)
def test_gemm_grad(dev, ta, tb, c_shape):
    A = _rand((2, 3) if ta else (3, 2))
    B = _rand((4, 2) if tb else (2, 4), seed=1)
    arrays = [A, B] if c_shape is None else [A, B, _rand(c_shape, seed=2)]
    check_grad(lambda *ts: autograd.gemm(*ts, alpha=0.7, beta=-1.5, transA=ta, transB=tb), arrays, dev)


def test_gemm_bad_shapes(dev):
    A, B = (
        tensor.Tensor(data=_rand((3, 2)), device=dev, requires_grad=False),
        tensor.Tensor(data=_rand((3, 4)), device=dev, requires_grad=False),
    )
    with pytest.raises(ShapeError, match="Gemm"):
        autograd.gemm(A, B)
    with pytest.raises(ShapeError, match="Gemm"):
        autograd.gemm(A, B, tensor.Tensor(data=_rand((5,)), device=dev, requires_grad=False), transA=True)
    with pytest.raises(ShapeError, match="Gemm"):
        autograd.gemm(tensor.Tensor(data=_rand((3,)), device=dev, requires_grad=False), B)


EINSUM_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
    ("ij->", [(2, 3)]),
    ("ij->j", [(2, 3)]),
    ("ij->ji", [(2, 3)]),
    ("i,j->ij", [(3,), (2,)]),
    ("ij,ij->i", [(2, 3), (2, 3)]),
    ("ijk,k->ij", [(2, 2, 3), (3,)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (3, 2)]),
    ("i...->...", [(2, 3, 2)]),
    ("ab,bc,cd->ad", [(2, 3), (3, 2), (2, 2)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("iji->j", [(2, 3, 2)]),
]


@pytest.mark.parametrize(("subs", "shapes"), EINSUM_CASES)
def test_einsum(dev, subs, shapes):
    arrays = [_rand(s, seed=i) for i, s in enumerate(shapes)]
    check_forward(lambda *ts: autograd.einsum(subs, *ts), lambda *a: np.einsum(subs, *a), arrays, dev)
    check_grad(lambda *ts: autograd.einsum(subs, *ts), arrays, dev)


@given(dtype=st.sampled_from(DTYPES), n=st.integers(0, 4))
def test_einsum_dtypes(dev, dtype, n):
    a, b = _rand((n, 3), dtype), _rand((3, 2), dtype, seed=1)
    check_forward(
        lambda x, y: tensor.einsum("ij,jk->ik", x, y), lambda x, y: np.einsum("ij,jk->ik", x, y), [a, b], dev
    )


def test_einsum_bad(dev):
    a = tensor.Tensor(data=_rand((2, 3)), device=dev, requires_grad=False)
    with pytest.raises(ShapeError, match="Einsum"):
        autograd.einsum("ij,jk->ik", a, a)
    with pytest.raises(ShapeError, match="Einsum"):
        autograd.einsum("ijk->i", a)
    with pytest.raises(ShapeError, match="Einsum"):
        autograd.einsum("ij,jk->ik", a)


TENSORDOT_CASES = [
    ((2, 3, 4), (3, 4, 2), 2),
    ((2, 3), (3, 2), 1),
    ((2, 3), (2, 2), 0),
    ((2, 3, 4), (4, 2, 3), ([1, 2], [2, 0])),
    ((3, 2), (2, 3), ([0, 1], [1, 0])),
    ((2, 3, 2), (2,), (0, 0)),
    # Contracting nothing, with 0-d operands: NumPy accepts these, CuPy's tensordot does not.
    ((), (2, 3), 0),
    ((2,), (), 0),
    ((), (), ([], [])),
]


@pytest.mark.parametrize(("sa", "sb", "axes"), TENSORDOT_CASES)
def test_tensordot(dev, sa, sb, axes):
    arrays = [_rand(sa), _rand(sb, seed=1)]
    check_forward(
        lambda a, b: tensor.tensordot(a, b, axes), lambda a, b: np.tensordot(a, b, axes), arrays, dev
    )
    check_grad(lambda a, b: autograd.tensordot(a, b, axes), arrays, dev)


@given(dtype=st.sampled_from(DTYPES))
def test_tensordot_dtypes(dev, dtype):
    a, b = _rand((2, 3, 4), dtype), _rand((4, 3, 2), dtype, seed=1)
    check_forward(
        lambda x, y: autograd.tensordot(x, y, ([1, 2], [1, 0])),
        lambda x, y: np.tensordot(x, y, ([1, 2], [1, 0])),
        [a, b],
        dev,
    )


def test_tensordot_bad(dev):
    a, b = (
        tensor.Tensor(data=_rand((2, 3)), device=dev, requires_grad=False),
        tensor.Tensor(data=_rand((2, 3)), device=dev, requires_grad=False),
    )
    with pytest.raises(ShapeError, match="Tensordot"):
        autograd.tensordot(a, b, 1)

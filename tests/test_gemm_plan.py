"""The cuBLAS call plans of ``backend.gemm_plan``, checked on the CPU by running the planned
column-major GEMM with NumPy over the operands' raw memory, as cuBLAS would read it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from singa_lite.backend import gemm_plan


def _colmajor(base: np.ndarray, arr: np.ndarray, rows: int, cols: int, ld: int, batch: int, stride: int):
    """The ``batch`` column-major (rows, cols) matrices with leading dimension ``ld`` starting
    where ``arr``'s data starts, read from ``base``'s memory (cuBLAS's view of a pointer)."""
    item = base.itemsize
    offset = arr.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    flat = base.reshape(-1)
    return np.lib.stride_tricks.as_strided(
        flat[offset // item :], shape=(batch, rows, cols), strides=(stride * item, item, ld * item)
    )


def _run_plan(p: gemm_plan.GemmPlan, base_a, a, base_b, b) -> np.ndarray:
    # C^T (n, m) = op(B^T) (n, k) @ op(A^T) (k, m): the call cupy_blas makes.
    def op_matrix(base, x, o: gemm_plan.Operand, rows: int, cols: int):
        if o.op == gemm_plan.OP_N:
            return _colmajor(base, x, rows, cols, o.ld, p.batch, o.batch_stride)
        return _colmajor(base, x, cols, rows, o.ld, p.batch, o.batch_stride).transpose(0, 2, 1)

    bt = op_matrix(base_b, b, p.b, p.n, p.k)
    at = op_matrix(base_a, a, p.a, p.k, p.m)
    ct = bt @ at  # (batch, n, m) column-major C == row-major (batch, m, n)
    return ct.transpose(0, 2, 1)


def _operand(rng, rows: int, cols: int, lead: tuple, layout: str):
    """An operand of shape lead + (rows, cols) laid out as asked, and the buffer it lives in."""
    if layout == "c":
        base = rng.standard_normal((*lead, rows, cols))
        return base, base
    if layout == "t":  # a transposed view of a contiguous array
        base = rng.standard_normal((*lead, cols, rows))
        return base, np.swapaxes(base, -1, -2)
    if layout == "rows":  # every other row of a taller array (row stride 2 * cols)
        base = rng.standard_normal((*lead, rows * 2, cols))
        return base, base[..., ::2, :]
    # "pad": rows of a wider array (ld > cols)
    base = rng.standard_normal((*lead, rows, cols + 3))
    return base, base[..., :, :cols]


@settings(max_examples=120, deadline=None)
@given(
    m=st.integers(1, 6),
    n=st.integers(1, 6),
    k=st.integers(1, 6),
    lead=st.sampled_from([(), (3,), (2, 2)]),
    where=st.sampled_from(["both", "a", "b"]),
    la=st.sampled_from(["c", "t", "rows", "pad"]),
    lb=st.sampled_from(["c", "t", "rows", "pad"]),
    seed=st.integers(0, 2**16),
)
def test_plan_reads_what_numpy_multiplies(m, n, k, lead, where, la, lb, seed):
    rng = np.random.default_rng(seed)
    base_a, a = _operand(rng, m, k, lead if where in ("both", "a") else (), la)
    base_b, b = _operand(rng, k, n, lead if where in ("both", "b") else (), lb)
    p = gemm_plan.plan(a.shape, a.strides, b.shape, b.strides, a.itemsize)
    want = np.matmul(a, b)
    if p is None:
        # Only layouts with batch axes that do not collapse to one stride may be refused.
        assert la in ("rows", "pad") or lb in ("rows", "pad") or len(lead) > 1
        return
    assert (p.m, p.n, p.k) == (m, n, k)
    got = _run_plan(p, base_a, a, base_b, b).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_contiguous_batches_are_always_planned():
    a = np.zeros((2, 3, 4, 5))
    b = np.zeros((2, 3, 5, 6))
    p = gemm_plan.plan(a.shape, a.strides, b.shape, b.strides, 8)
    assert p is not None and p.batch == 6 and p.a.batch_stride == 20 and p.b.batch_stride == 30


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((3,), (3, 2)), ((2, 3), (4, 2)), ((0, 3), (3, 2)), ((2, 2, 3), (3, 3, 2)), ((2, 3, 4), (2, 4, 0))],
)
def test_refused_shapes(a_shape, b_shape):
    a, b = np.zeros(a_shape), np.zeros(b_shape)
    assert gemm_plan.plan(a.shape, a.strides, b.shape, b.strides, 8) is None

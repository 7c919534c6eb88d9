"""How a row-major (batched) matrix product maps onto one column-major strided-batched GEMM.

cuBLAS multiplies column-major matrices. A row-major ``C (m, n) = A (m, k) @ B (k, n)`` is the
column-major ``C^T = B^T A^T``, and a row-major matrix is its transpose read column-major, so
the call is ``gemm(opB, opA, n, m, k, B, ldb, A, lda, C, ldc=n)`` with no copy. An operand
stored transposed (``W.T`` of a contiguous ``W``, what every backward pass multiplies by) is
column-major already and is passed with ``op = T``. Anything else (a strided slice, batch
axes that do not collapse to one stride) is not planned: the caller copies it or falls back.

Pure Python and NumPy-free, so the CPU test suite checks every plan against NumPy by running
the planned column-major GEMM with NumPy itself (``tests/test_gemm_plan.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

OP_N, OP_T = 0, 1


@dataclass(frozen=True)
class Operand:
    """One matrix operand as cuBLAS reads it: ``op``, leading dimension, batch stride (elements)."""

    op: int
    ld: int
    batch_stride: int


@dataclass(frozen=True)
class GemmPlan:
    """``C[i] = A[i] @ B[i]`` for ``i < batch`` as the column-major call described above."""

    m: int
    n: int
    k: int
    batch: int
    a: Operand
    b: Operand


def matrix_operand(shape: tuple, strides: tuple, itemsize: int, batch: int) -> Operand | None:
    """``shape[-2:]`` read as a row-major matrix (op N, ld = row stride) or as a transposed
    view of one (op T, ld = column stride), with the leading axes as one batch of ``batch``
    (stride 0 when the operand has no batch axes: it is broadcast). None when the layout does
    not fit (the caller makes the operand contiguous first)."""
    if len(shape) < 2 or any(s % itemsize for s in strides):
        return None
    rows, cols = shape[-2:]
    rs, cs = (s // itemsize for s in strides[-2:])
    if cols == 1 or cs == 1:  # row-major: column-major (cols, rows) with ld = the row stride
        op, ld = OP_N, rs if rows > 1 else cols
        if ld < cols:
            return None
    elif rows == 1 or rs == 1:  # a transposed view: column-major (rows, cols) as it is
        op, ld = OP_T, cs if cols > 1 else rows
        if ld < rows:
            return None
    else:
        return None
    lead, lead_strides = shape[:-2], strides[:-2]
    n_lead = 1
    for d in lead:
        n_lead *= d
    if n_lead == 1:
        return Operand(op, max(ld, 1), 0)  # one matrix, broadcast over the other's batch
    if n_lead != batch:
        return None
    # The batch axes must collapse to one stride: each axis steps over the next one's span.
    step = span = 0
    for d, st in zip(reversed(lead), reversed(lead_strides)):
        if d == 1:
            continue
        st //= itemsize
        if step == 0:
            step, span = st, st * d
        elif st != span:
            return None
        else:
            span = st * d
    if step <= 0:
        return None
    return Operand(op, max(ld, 1), step)


def plan(
    a_shape: tuple, a_strides: tuple, b_shape: tuple, b_strides: tuple, itemsize: int
) -> GemmPlan | None:
    """The GEMM for ``a @ b`` of two operands of at least 2 dimensions whose batch axes are
    equal or absent on one side (NumPy's broadcasting beyond that is left to the caller)."""
    if len(a_shape) < 2 or len(b_shape) < 2:
        return None
    m, k = a_shape[-2:]
    k2, n = b_shape[-2:]
    if k != k2 or 0 in (m, n, k):
        return None
    la, lb = a_shape[:-2], b_shape[:-2]
    if la and lb and la != lb:
        return None
    batch = 1
    for d in la or lb:
        batch *= d
    oa = matrix_operand(a_shape, a_strides, itemsize, batch)
    ob = matrix_operand(b_shape, b_strides, itemsize, batch)
    if oa is None or ob is None:
        return None
    return GemmPlan(m, n, k, batch, oa, ob)

"""Ops run on NumPy with the calls CuPy lacks taken away, so CPU-only CI catches their use.

``NoCupyGaps`` is NumPy (same values, same semantics) minus what the GPU run found missing or
different in CuPy 14: no ``ufunc.at`` (CuPy has no ``multiply.at`` and ``maximum/minimum.at``
only for 32/64-bit types), and no ``tensordot`` with a 0-d operand.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from opcheck import DTYPES

from singa_lite.ops.indexing import ScatterElements
from singa_lite.ops.linalg import Tensordot


class _UfuncWithoutAt:
    def __init__(self, ufunc: np.ufunc) -> None:
        self.ufunc = ufunc

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.ufunc(*args, **kwargs)

    @property
    def at(self) -> Any:
        raise NotImplementedError(f"{self.ufunc.__name__}.at is not available on every backend")


class NoCupyGaps:
    def __getattr__(self, name: str) -> Any:
        attr = getattr(np, name)
        return _UfuncWithoutAt(attr) if isinstance(attr, np.ufunc) else attr

    @staticmethod
    def tensordot(a: Any, b: Any, axes: Any = 2) -> Any:
        if (a.ndim == 0 or b.ndim == 0) and axes not in (0, ((), ())):
            raise ValueError("tensordot with a 0-d operand")
        return np.tensordot(a, b, axes)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_needs_no_ufunc_at(dtype, reduction):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, (3, 4)).astype(dtype)
    idx = rng.integers(0, 3, (30, 4))  # ten writes per element on average
    upd = rng.integers(1, 3, (30, 4)).astype(dtype)
    op = ScatterElements(0, reduction)
    op.xp = NoCupyGaps()
    y = op.forward(x, idx, upd)
    want = x.copy()
    if reduction == "none":
        for i, j in np.ndindex(idx.shape):
            want[idx[i, j], j] = upd[i, j]
    else:
        ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
        with np.errstate(over="ignore"):
            ufunc.at(want, (idx, np.arange(4)), upd)
    np.testing.assert_array_equal(y, want)
    if reduction in ("none", "add") and dtype == np.float64:
        op.needs_grad = (True, False, True)
        dx, _, du = op.backward(np.ones_like(y))
        assert dx.shape == x.shape and du.shape == upd.shape


@pytest.mark.parametrize(("sa", "sb"), [((), (2, 3)), ((2,), ()), ((), ())])
def test_tensordot_of_a_0d_operand(sa, sb):
    rng = np.random.default_rng(0)
    a, b = np.asarray(rng.standard_normal(sa)), np.asarray(rng.standard_normal(sb))
    op = Tensordot(0)
    op.xp = NoCupyGaps()
    y = op.forward(a, b)
    np.testing.assert_allclose(y, np.tensordot(a, b, 0))
    op.needs_grad = (True, True)
    da, db = op.backward(np.ones(y.shape))
    assert da.shape == sa and db.shape == sb
    np.testing.assert_allclose(da, np.full(sa, b.sum()))

"""Hypothesis array strategies and small helpers shared by the shape and indexing op tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from singa_lite import tensor

DTYPES = [np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_]


def elements(dtype: type) -> st.SearchStrategy:
    kind = np.dtype(dtype).kind
    if kind == "f":
        return st.floats(-4, 4, width=16)
    return st.booleans() if kind == "b" else st.integers(-20, 20)


@st.composite
def arrays(draw: st.DrawFn, min_dims: int = 0, max_dims: int = 3, min_side: int = 0) -> np.ndarray:
    """An array of any supported dtype, up to 4 per side."""
    dtype = draw(st.sampled_from(DTYPES))
    shape = hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=4)
    return draw(hnp.arrays(dtype, shape, elements=elements(dtype)))


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def t_(x: np.ndarray, dev) -> tensor.Tensor:
    return tensor.Tensor(data=np.asarray(x), device=dev, requires_grad=False)

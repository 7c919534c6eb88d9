"""Batch-1 inference conv: bands of output rows on the CPU, one GEMM on a GPU (G22)."""

from __future__ import annotations

import types

import numpy as np

from singa_lite.ops import conv_infer


def _counting_xp(name: str) -> tuple[types.ModuleType, list]:
    """NumPy under another module name, counting its matrix products."""
    calls: list = []
    xp = types.ModuleType(name)
    xp.__dict__.update(vars(np))
    xp.__name__ = name  # (vars(np) brought numpy's)

    def matmul(a, b, out=None):
        calls.append(a.shape)
        return np.matmul(a, b, out=out)

    xp.matmul = matmul
    return xp, calls


def test_gpu_takes_the_column_matrix_in_one_gemm():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    W = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    Wb = conv_infer.one_image_weight(np, W, b, 1)
    results = {}
    for name in ("numpy", "cupy"):
        xp, calls = _counting_xp(name)
        results[name] = conv_infer.conv2d_one_image(xp, x, W, b, Wb, (1, 1), (1, 1, 1, 1), (1, 1), 1)
        results[name + " gemms"] = len(calls)
    assert results["numpy gemms"] > 1  # bands the size of a core's cache
    assert results["cupy gemms"] == 1
    np.testing.assert_allclose(results["cupy"], results["numpy"], rtol=1e-5, atol=1e-4)

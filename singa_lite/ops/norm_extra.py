"""ONNX's further normalisations and reductions: ``lp_normalization``,
``mean_variance_normalization``, ``lp_pool`` and the determinant ``det``.

All but ``det`` are written with other ops and take their gradients from them; ``det`` is a
primitive whose gradient is the adjugate, computed through the SVD so that singular matrices
get their (finite) gradient too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from singa_lite import _args
from singa_lite.autograd import Operator
from singa_lite.errors import DTypeError
from singa_lite.ops import elementwise, pool, reduce, unary
from singa_lite.ops._util import normalize_axis
from singa_lite.tensor import Tensor

__all__ = ["Det", "det", "lp_normalization", "lp_pool", "mean_variance_normalization"]


def _float(x: Tensor, opname: str) -> None:
    if _args.tensor(opname, "x", x).dtype.kind != "f":
        raise DTypeError(f"{opname}: expects a floating-point tensor, got {x.dtype}")


def _const(v: float, like: Tensor) -> Tensor:
    return Tensor._wrap(like.device.xp.asarray(v, like.dtype), like.device, False, None, 0)


def lp_normalization(x: Tensor, axis: int = -1, p: int = 2) -> Tensor:
    """``x`` divided by its L1 (``p=1``) or L2 (``p=2``) norm along ``axis`` (ONNX
    LpNormalization; a zero vector stays zero).

    >>> import numpy as np; from singa_lite import tensor
    >>> lp_normalization(tensor.from_numpy(np.array([[3.0, 4.0]]))).numpy().astype(float).round(6).tolist()
    [[0.6, 0.8]]
    """
    _float(x, "lp_normalization")
    p = _args.choice("lp_normalization", "p", p, (1, 2))
    a = normalize_axis(_args.axis("lp_normalization", "axis", axis), x.ndim(), "lp_normalization")
    if p == 1:
        norm = reduce.reduce_sum(unary.abs(x), [a], True)
    else:
        norm = unary.sqrt(reduce.reduce_sum(unary.square(x), [a], True))
    # A zero vector stays zero (ONNX's choice): its norm is replaced by 1.
    zero = norm.data == 0
    norm = elementwise.add(norm, Tensor._wrap(zero.astype(norm.dtype), x.device, False, None, 0))
    return elementwise.div(x, norm)


def mean_variance_normalization(x: Tensor, axes: Sequence[int] = (0, 2, 3), eps: float = 1e-9) -> Tensor:
    """``(x - mean) / (std + eps)`` over ``axes`` (ONNX MeanVarianceNormalization; the
    standard deviation is the population one)."""
    _float(x, "mean_variance_normalization")
    axes = _args.ints("mean_variance_normalization", "axes", axes)
    eps = _args.number("mean_variance_normalization", "eps", eps, 0.0)
    ax = sorted({normalize_axis(a, x.ndim(), "mean_variance_normalization") for a in axes})
    centred = elementwise.sub(x, reduce.reduce_mean(x, ax, True))
    std = unary.sqrt(reduce.reduce_mean(unary.square(centred), ax, True))
    return elementwise.div(centred, elementwise.add(std, _const(eps, x)))


def lp_pool(
    x: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    p: float = 2.0,
) -> Tensor:
    """``(sum over each window of |x|^p)^(1/p)`` over every spatial axis of ``(N, C, *spatial)``
    (ONNX LpPool): padding counts as zeros. Arguments as :func:`~singa_lite.ops.avg_pool`.

    >>> import numpy as np; from singa_lite import tensor
    >>> x = tensor.from_numpy(np.array([[[3.0, 4.0, 0.0, 1.0]]]))
    >>> lp_pool(x, 2).numpy().tolist()
    [[[5.0, 1.0]]]
    """
    _float(x, "lp_pool")
    p = _args.positive("lp_pool", "p", p)
    n = max(x.ndim() - 2, 1)
    kernel = _args.per_axis("lp_pool", "kernel_size", kernel_size, n)
    if ceil_mode:
        # Ceil mode grows the end padding so the last windows fit; zeros add nothing to a sum.
        win = pool._Window(n, kernel, stride, padding, dilation, True, "lp_pool")
        out = win.out_size(x.shape[2:])
        padding = [v for pair in win.pad_widths(x.shape[2:], out) for v in pair]
    powered = unary.abs(x) if p == 1 else elementwise.pow(unary.abs(x), _const(p, x))
    # count_include_pad: every window is divided by the full kernel size, which is undone.
    mean = pool.avg_pool(powered, kernel, stride, padding, False, True, dilation)
    total = elementwise.mul(mean, _const(math.prod(kernel), x))
    return total if p == 1 else elementwise.pow(total, _const(1.0 / p, x))


class Det(Operator):
    """The determinant of each square matrix in the last two axes.

    The gradient is the transposed adjugate, ``det(U) det(V) U adj(S) V^T`` from the SVD
    ``A = U S V^T`` (``adj(S)`` holds the products of all but one singular value), which is
    also right for singular matrices, where ``det * inv^T`` is not defined.
    """

    def forward(self, x: Any) -> Any:
        if x.dtype.kind != "f":
            raise DTypeError(f"{self.name}: expects a floating-point tensor, got {x.dtype}")
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise self.error("expects square matrices in the last two axes", x)
        self.x = x
        xc = x.astype(np.float32) if x.dtype == np.float16 else x
        return self.xp.linalg.det(xc).astype(x.dtype, copy=False)

    def backward(self, dy: Any) -> Any:
        xp, x = self.xp, self.x
        xc = x.astype(np.float32) if x.dtype == np.float16 else x
        if x.shape[-1] == 0:
            return xp.zeros_like(x)
        u, s, vt = xp.linalg.svd(xc)
        # products of all singular values but the i-th, from running products on both sides
        ones = xp.ones_like(s[..., :1])
        left = xp.cumprod(xp.concatenate([ones, s[..., :-1]], axis=-1), axis=-1)
        right = xp.flip(xp.cumprod(xp.concatenate([ones, xp.flip(s[..., 1:], -1)], axis=-1), axis=-1), -1)
        sign = xp.linalg.det(u) * xp.linalg.det(vt)
        adj_t = (u * (left * right)[..., None, :]) @ vt  # U adj(S) V^T
        g = adj_t * (sign * dy.astype(xc.dtype, copy=False))[..., None, None]
        return g.astype(x.dtype, copy=False)


def det(x: Tensor) -> Tensor:
    """The determinant of each square matrix in the last two axes of ``x`` (``(..., M, M)`` ->
    ``(...)``).

    >>> import numpy as np; from singa_lite import tensor
    >>> round(float(det(tensor.from_numpy(np.array([[1.0, 2.0], [3.0, 4.0]]))).numpy()), 6)
    -2.0
    """
    return Det()(x)[0]

"""Fused operators: one op where a layer would run several, each a pass over its activations.

``bias_activation(x, b, activation, axis)`` is ``activation(x + b)`` with ``b`` along ``axis``:
a conv or Dense layer's bias add and its activation. The plain ``xp`` code below is the
reference and the fallback; it computes each activation as ``ops/activation.py`` does. On
CuPy with the backend's kernels on (``backend/cupy_kernels.py``, ``kernels/bias_act.cu``) the
forward is one launch, and the backward one launch for ``dx`` and ``db`` together (two when
``db`` is summed over chunks of a large batch), reading ``dy`` and the saved array once.

(The module is not named after its op: ``ops.bias_activation`` is the function.)
"""

from __future__ import annotations

import math
from typing import Any

from singa_lite import _args
from singa_lite.backend import cpu_kernels, cupy_kernels
from singa_lite.errors import DTypeError
from singa_lite.ops._util import normalize_axis
from singa_lite.ops.activation import sigmoid_array
from singa_lite.ops.unary import CheckedOp, erf_array
from singa_lite.tensor import Tensor

__all__ = ["BiasActivation", "bias_activation"]

ACTIVATIONS = cupy_kernels.ACTIVATIONS
_INV_SQRT2 = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_GELU_BOUND = 40.0  # gelu's derivative: beyond it x phi(x) is 0 in every dtype, and x^2 finite


def _activate(xp: Any, z: Any, activation: str) -> Any:
    """``activation(z)``, in place on the temporary ``z`` where the function allows."""
    if activation == "relu":
        return xp.maximum(z, 0, out=z)
    if activation == "sigmoid":
        return sigmoid_array(xp, z)
    if activation == "tanh":
        return xp.tanh(z, out=z)
    if activation == "gelu":
        cdf = erf_array(xp, z * _INV_SQRT2)
        cdf += 1
        cdf *= 0.5
        return xp.multiply(z, cdf, out=cdf)
    return z


def _gelu_grad(xp: Any, z: Any, dy: Any) -> Any:
    """``dy * (Phi(z) + z phi(z))``, as ``ops.activation.Gelu`` computes it."""
    cdf = erf_array(xp, z * _INV_SQRT2)
    cdf += 1
    cdf *= 0.5
    zc = xp.clip(z, -_GELU_BOUND, _GELU_BOUND, out=z)
    g = xp.multiply(zc, zc, out=xp.empty_like(zc))
    g *= -0.5
    xp.exp(g, out=g)
    g *= _INV_SQRT_2PI * zc
    g += cdf
    g *= dy
    return g


class BiasActivation(CheckedOp):
    """``activation(x + b)`` with a 1-d ``b`` along ``axis`` of ``x``; ``activation`` one of
    identity, relu, sigmoid, tanh, gelu (exact, with erf). Saves the output (relu, sigmoid,
    tanh) or the input (gelu) for backward, and ``b``."""

    def __init__(self, activation: str = "relu", axis: int = 1) -> None:
        super().__init__()
        self.activation = _args.choice(self.name, "activation", activation, tuple(ACTIVATIONS))
        self.axis = _args.axis(self.name, "axis", axis)

    def forward(self, x: Any, b: Any) -> Any:
        xp = self.xp
        a = normalize_axis(self.axis, x.ndim, self.name)
        if b.ndim != 1 or x.ndim < 1 or b.shape[0] != x.shape[a]:
            raise self.error(f"b must be 1-d and as long as axis {self.axis} of x", x, b)
        if b.dtype != x.dtype:
            raise DTypeError(f"{self.name}: x and b must share a dtype, got {x.dtype} and {b.dtype}")
        self.a, self.b = a, b
        self.kernel = x.size > 0 and cupy_kernels.usable_32bit(xp, x, b)
        self.cpu_kernel = cpu_kernels.usable(xp, x, b)
        if self.kernel:
            y = cupy_kernels.bias_activation_forward(xp, x, b, self.activation, a)
        elif self.cpu_kernel:
            y = cpu_kernels.activation.bias_activation_forward(x, b, self.activation, a)
        else:
            y = _activate(xp, x + b.reshape(b.shape + (1,) * (x.ndim - a - 1)), self.activation)
        # what the derivative is computed from: y for relu, sigmoid and tanh, x + b for gelu
        self.saved: Any = x if self.activation == "gelu" else None if self.activation == "identity" else y
        return y

    def backward(self, dy: Any) -> tuple:
        xp, a = self.xp, self.a
        need_x, need_b = self.needs_grad
        saved = () if self.saved is None else (self.saved,)
        if self.kernel and cupy_kernels.usable_32bit(xp, dy, self.b, *saved):
            return cupy_kernels.bias_activation_backward(
                xp, dy, self.saved, self.b, self.activation, a, need_x, need_b
            )
        if self.cpu_kernel and cpu_kernels.usable(xp, dy, self.b, *saved):
            dx, db = cpu_kernels.activation.bias_activation_backward(
                dy, self.saved, self.b, self.activation, a
            )
            return (dx if need_x else None), (db if need_b else None)
        dz = self._grad(dy)
        db = None
        if need_b:
            view = (math.prod(dy.shape[:a]), dy.shape[a], math.prod(dy.shape[a + 1 :]))
            db = dz.reshape(view).sum(axis=(0, 2))
        return (dz if need_x else None), db

    def _grad(self, dy: Any) -> Any:
        """``dy`` times the activation's derivative at ``x + b``."""
        xp, y = self.xp, self.saved
        if self.activation == "relu":
            return dy * (y > 0)
        if self.activation == "sigmoid":
            g = 1 - y
            g *= y
            g *= dy
            return g
        if self.activation == "tanh":
            g = xp.multiply(y, y, out=xp.empty_like(y))
            xp.subtract(1, g, out=g)
            g *= dy
            return g
        if self.activation == "gelu":
            b = self.b.reshape(self.b.shape + (1,) * (y.ndim - self.a - 1))
            return _gelu_grad(xp, y + b, dy)
        return dy


def bias_activation(x: Tensor, b: Tensor, activation: str = "relu", axis: int = 1) -> Tensor:
    """``activation(x + b)`` with ``b (x.shape[axis],)`` added along ``axis``: the bias and
    activation of a conv (``axis=1`` of NCHW) or Dense layer (``axis=-1``) in one op.
    ``activation``: ``"relu"``, ``"gelu"`` (exact), ``"tanh"``, ``"sigmoid"`` or ``"identity"``.

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> x = tensor.from_numpy(np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32))
    >>> b = tensor.from_numpy(np.array([0.5, 1.0], np.float32))
    >>> tensor.to_numpy(bias_activation(x, b))
    array([[0. , 3. ],
           [3.5, 0. ]], dtype=float32)
    """
    return BiasActivation(activation, axis)(x, b)[0]

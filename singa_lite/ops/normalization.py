"""Normalisation and regularisation: batch, layer, group, instance and RMS norm, LRN, dropout.

Batch norm, layer norm, group norm, instance norm and RMS norm are fused ops with hand-written backward passes
(the closed-form gradient of a standardisation), because composing them from primitives would
keep several input-sized temporaries alive and walk the data many more times.
Statistics of float16 inputs are computed in float32; outputs keep the input's dtype.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np  # dtype objects only; array math goes through self.xp

from singa_lite import _args
from singa_lite.autograd import Operator
from singa_lite.backend import cpu_kernels
from singa_lite.errors import DTypeError
from singa_lite.ops import _cupy_kernels
from singa_lite.ops._util import normalize_axis, unbroadcast
from singa_lite.ops.activation import relu_array, relu_grad
from singa_lite.tensor import Tensor

__all__ = [
    "LRN",
    "BatchNorm",
    "Dropout",
    "GroupNorm",
    "InstanceNorm",
    "LayerNorm",
    "RMSNorm",
    "batch_norm",
    "batchnorm_2d",
    "dropout",
    "group_norm",
    "instance_norm",
    "layer_norm",
    "lrn",
    "rms_norm",
]


def _acc_dtype(dtype: Any) -> Any:
    """The dtype statistics are computed in: float16 is too coarse for sums of many terms."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


def _check_float(op: Operator, x: Any) -> None:
    if x.dtype.kind != "f":
        raise DTypeError(f"{op.name}: needs a floating-point input, got {x.dtype}")


class BatchNorm(Operator):
    """Per-channel batch normalisation of ``(N, C, ...)`` with running statistics.

    Inputs: ``x, scale, bias, running_mean, running_var``. In training the batch statistics
    normalise ``x`` and the running ones are updated in place; in inference the running ones
    normalise. Gradients flow to ``x``, ``scale`` and ``bias`` only.

    With ``relu`` the output is ``relu`` of that, as a ``ReLU`` op after it would give it, bit
    for bit: graph mode fuses the pair so (``singa_lite/graph_fusion.py``). With the compiled
    kernels, in training, the ReLU runs inside the normalising pass and its backward inside
    the two gradient passes, which recompute its mask from the input they read anyway: two
    passes over the activations fewer each way, and no ReLU output kept.
    """

    def __init__(
        self, momentum: float = 0.9, eps: float = 1e-5, training: bool = False, relu: bool = False
    ) -> None:
        super().__init__("batchnorm_2d")
        self.momentum = _args.number(self.name, "momentum", momentum, 0.0, 1.0)
        self.eps = _args.number(self.name, "eps", eps, 0.0)
        self.training = bool(training)
        self.relu = bool(relu)

    def forward(self, x: Any, scale: Any, bias: Any, running_mean: Any, running_var: Any) -> Any:
        xp = self.xp
        _check_float(self, x)
        if x.ndim < 2:
            raise self.error("expects an (N, C, ...) input", x)
        c = x.shape[1]
        for p in (scale, bias, running_mean, running_var):
            if p.shape != (c,):
                raise self.error(f"scale, bias and running stats must have shape ({c},)", x, p)
        acc = _acc_dtype(x.dtype)
        # (N, C, S): one reduction over axes (0, 2) whatever the input's rank (S spelled out:
        # reshape cannot infer a -1 for an empty batch).
        x3 = x.reshape(x.shape[0], c, math.prod(x.shape[2:])).astype(acc, copy=False)
        self.m = x3.shape[0] * x3.shape[2]
        self.passes = _passes(xp, x3)
        if self.training:
            if self.m < 2:
                raise self.error("needs more than one value per channel in training", x)
            mean, var = self.passes.moments(x3)
            self._update_running(running_mean, running_var, mean, var)
        else:
            mean = running_mean.astype(acc, copy=False)
            var = running_var.astype(acc, copy=False)
            self.passes.centre(x3, mean)
        self.inv = 1 / xp.sqrt(var + acc.type(self.eps))
        self.scale = scale.astype(acc, copy=False)
        a = self.scale * self.inv
        b = bias.astype(acc, copy=False)
        # The ReLU inside the kernels' pass where its mask, recomputed in acc's dtype, is the
        # output's (not after a cast to float16, which can round a small positive to 0).
        self.fused = self.relu and self.training and isinstance(self.passes, _KernelPasses) and x.dtype == acc
        if self.fused:
            self.relu_coefs = (a, b)
            return self.passes.scale_shift(a, b, relu=True).reshape(x.shape)
        y = self.passes.scale_shift(a, b).astype(x.dtype, copy=False).reshape(x.shape)
        if self.relu:  # as a ReLU op after this one, after the cast
            y = self.relu_out = relu_array(xp, y)
        return y

    def _update_running(self, running_mean: Any, running_var: Any, mean: Any, var: Any) -> None:
        # SINGA's rule (momentum weighs the old value); the variance is the unbiased one, as in
        # PyTorch, so the running estimate does not shrink for small batches.
        mom = self.momentum
        unbiased = var * (self.m / (self.m - 1))
        running_mean *= running_mean.dtype.type(mom)
        running_mean += (mean * (1 - mom)).astype(running_mean.dtype)
        running_var *= running_var.dtype.type(mom)
        running_var += (unbiased * (1 - mom)).astype(running_var.dtype)

    def backward(self, dy: Any) -> tuple:
        inv, m = self.inv, self.m
        acc = inv.dtype
        fused = (self.relu_coefs,) if self.fused else ()  # the ReLU's mask, for the passes
        if self.relu and not self.fused:
            dy = relu_grad(self.xp, self.relu_out, dy)
        dy3 = dy.reshape(dy.shape[0], inv.shape[0], math.prod(dy.shape[2:])).astype(acc, copy=False)
        dbias, dot = self.passes.grad_sums(dy3, *fused)
        dscale = dot * inv  # sum(dy * xhat)
        dx = None
        if self.needs_grad[0]:
            a = self.scale * inv
            if self.training:
                # dx = scale*inv * (dy - mean(dy) - xhat * mean(dy*xhat)), folded into
                # per-channel coefficients: dx = a*dy + b*xc + c, with no xhat array.
                b = -a * inv * dscale / acc.type(m)
                c = -a * dbias / acc.type(m)
                dx = self.passes.grad_x(dy3, a, b, c, *fused)
            else:
                dx = dy3 * a[:, None]
            dx = dx.astype(dy.dtype, copy=False).reshape(dy.shape)
        dt = self.inputs[1].dtype
        return dx, dscale.astype(dt, copy=False), dbias.astype(self.inputs[2].dtype, copy=False), None, None


class _NumpyPasses:
    """Batch norm's passes over ``(N, C, S)`` in NumPy, the reference: einsum's
    sum-of-products loop reduces the centred input (about 2x faster than ``mean`` here),
    and the centred input is kept for backward."""

    def moments(self, x3: Any) -> tuple[Any, Any]:
        m = x3.dtype.type(x3.shape[0] * x3.shape[2])
        mean = np.einsum("ncs->c", x3) / m
        self.centre(x3, mean)
        return mean, np.einsum("ncs,ncs->c", self.xc, self.xc) / m

    def centre(self, x3: Any, mean: Any) -> None:
        self.xc = x3 - mean[:, None]

    def scale_shift(self, a: Any, b: Any) -> Any:
        y = self.xc * a[:, None]
        y += b[:, None]
        return y

    def grad_sums(self, dy3: Any) -> tuple[Any, Any]:
        """``sum(dy)`` and ``sum(dy * xc)`` per channel."""
        return np.einsum("ncs->c", dy3), np.einsum("ncs,ncs->c", dy3, self.xc)

    def grad_x(self, dy3: Any, a: Any, b: Any, c: Any) -> Any:
        """``a*dy + b*xc + c`` with per-channel coefficients."""
        dx = dy3 * a[:, None]
        dx += self.xc * b[:, None]
        dx += c[:, None]
        return dx


class _KernelPasses:
    """The same passes as compiled CPU kernels (``backend/cpu_kernels/normalization.py``): one
    pass each over the input (two for the statistics, the second in cache), centring on the
    fly, so only the input and the per-channel mean are kept; sums in float64."""

    def moments(self, x3: Any) -> tuple[Any, Any]:
        mean, var = cpu_kernels.normalization.batch_norm_moments(x3)
        self.centre(x3, mean)
        return mean, var

    def centre(self, x3: Any, mean: Any) -> None:
        self.x3, self.mean = x3, mean

    def scale_shift(self, a: Any, b: Any, relu: bool = False) -> Any:
        return cpu_kernels.normalization.batch_norm_normalize(self.x3, self.mean, a, b, relu)

    def grad_sums(self, dy3: Any, relu: tuple | None = None) -> tuple[Any, Any]:
        """``relu``: the forward's ``(a, b)`` when it fused a ReLU, whose mask the pass applies."""
        return cpu_kernels.normalization.batch_norm_grad_sums(self.x3, dy3, self.mean, relu)

    def grad_x(self, dy3: Any, a: Any, b: Any, c: Any, relu: tuple | None = None) -> Any:
        return cpu_kernels.normalization.batch_norm_grad_x(self.x3, dy3, self.mean, a, b, c, relu)


def _passes(xp: Any, x3: Any) -> Any:
    """The passes for ``x3``'s array module: CuPy kernels, compiled CPU kernels where
    :func:`cpu_kernels.usable` says so, else NumPy."""
    if xp is not np:
        return _CupyPasses(xp)
    return _KernelPasses() if cpu_kernels.usable(xp, x3) else _NumpyPasses()


class _CupyPasses:
    """The same passes as fused CuPy kernels (``ops/_cupy_kernels.py``): one launch each,
    centring on the fly, so only the input and the per-channel mean are kept. CuPy's einsum
    over channels copies both operands to a batched GEMM first (5x slower than a reduction)."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp

    def moments(self, x3: Any) -> tuple[Any, Any]:
        mean, var = _cupy_kernels.batch_moments(self.xp, x3)
        self.centre(x3, mean)
        return mean, var

    def centre(self, x3: Any, mean: Any) -> None:
        self.x3, self.mean = x3, mean

    def scale_shift(self, a: Any, b: Any) -> Any:
        return _cupy_kernels.normalize(self.xp, self.x3, self.mean, a, b)

    def grad_sums(self, dy3: Any) -> tuple[Any, Any]:
        return _cupy_kernels.grad_sums(self.xp, dy3, self.x3, self.mean)

    def grad_x(self, dy3: Any, a: Any, b: Any, c: Any) -> Any:
        return _cupy_kernels.grad_x(self.xp, dy3, self.x3, self.mean, a, b, c)


class _Standardize(Operator, ABC):
    """``(x - mean) / sqrt(var + eps) * scale + bias`` with statistics over some axes.

    Subclasses say which axes (``stats_axes``) and how ``scale``/``bias`` line up with ``x``
    (``param_view``: the shape a parameter is viewed as to broadcast against ``x``).
    """

    def __init__(self, eps: float, name: str) -> None:
        super().__init__(name)
        self.eps = _args.number(name, "eps", eps, 0.0)

    @abstractmethod
    def stats_axes(self, x: Any) -> tuple:
        """The axes the mean and variance are taken over."""

    @abstractmethod
    def param_view(self, p: Any, x: Any) -> tuple:
        """The shape ``scale``/``bias`` are viewed as to broadcast against ``x``."""

    def forward(self, x: Any, scale: Any, bias: Any = None) -> Any:
        xp = self.xp
        _check_float(self, x)
        self.axes = self.stats_axes(x)
        acc = _acc_dtype(x.dtype)
        xa = x.astype(acc, copy=False)
        mean = xa.mean(axis=self.axes, keepdims=True)
        xc = xa - mean
        var = (xc * xc).mean(axis=self.axes, keepdims=True)
        self.inv = 1 / xp.sqrt(var + acc.type(self.eps))
        self.xhat = xc * self.inv
        self.views = [self.param_view(p, x) for p in (scale, bias) if p is not None]
        self.scale = scale.astype(acc, copy=False).reshape(self.views[0])
        y = self.xhat * self.scale
        if bias is not None:
            y += bias.astype(acc, copy=False).reshape(self.views[1])
        return y.astype(x.dtype, copy=False)

    def backward(self, dy: Any) -> tuple:
        xhat, axes = self.xhat, self.axes
        dya = dy.astype(xhat.dtype, copy=False)
        dx = None
        if self.needs_grad[0]:
            g = dya * self.scale
            dx = g - g.mean(axis=axes, keepdims=True)
            dx -= xhat * (g * xhat).mean(axis=axes, keepdims=True)
            dx *= self.inv
            dx = dx.astype(dy.dtype, copy=False)
        grads = [dx]
        for p, view, d in zip(self.inputs[1:], self.views, (dya * xhat, dya)):
            grads.append(unbroadcast(d, view).reshape(p.shape).astype(p.dtype, copy=False))
        return tuple(grads)


class LayerNorm(_Standardize):
    """ONNX LayerNormalization: statistics over axes ``[axis, ndim)``."""

    def __init__(self, axis: int = -1, eps: float = 1e-5) -> None:
        super().__init__(eps, "layer_norm")
        self.axis = _args.axis(self.name, "axis", axis)

    def stats_axes(self, x: Any) -> tuple:
        self.norm_shape = x.shape[normalize_axis(self.axis, x.ndim, self.name) :]
        return tuple(range(x.ndim - len(self.norm_shape), x.ndim))

    def forward(self, x: Any, scale: Any, bias: Any = None) -> Any:
        params = (scale,) if bias is None else (scale, bias)
        self.kernel = cpu_kernels.usable(self.xp, x, *params)
        if not self.kernel:
            return super().forward(x, scale, bias)
        # One pass over the rows (backend/cpu_kernels/normalization.py), keeping a mean and a
        # 1/std per row instead of xhat and 1/std as the plain path does.
        self.axes = self.stats_axes(x)
        self.views = [self.param_view(p, x) for p in params]
        y, self.gamma, self.mean, self.rstd = cpu_kernels.normalization.layer_norm_forward(
            x, scale, bias, self.eps, self.norm_shape
        )
        self.x = x
        return y

    def backward(self, dy: Any) -> tuple:
        if not self.kernel:
            return super().backward(dy)
        dx, *dparams = cpu_kernels.normalization.layer_norm_backward(
            self.x, dy, self.gamma, self.mean, self.rstd, self.needs_grad[0]
        )
        grads = [None if dx is None else dx.astype(dy.dtype, copy=False)]
        lead = (1,) * (self.x.ndim - len(self.norm_shape))
        for p, view, d in zip(self.inputs[1:], self.views, dparams):
            grads.append(unbroadcast(d.reshape(lead + self.norm_shape), view).reshape(p.shape))
        return tuple(grads)

    def param_view(self, p: Any, x: Any) -> tuple:
        target = self.norm_shape
        fits = p.ndim <= len(target) and all(a in (1, b) for a, b in zip(p.shape[::-1], target[::-1]))
        if not fits:
            raise self.error(f"scale/bias must broadcast to the normalised shape {target}", x, p)
        return (1,) * (x.ndim - p.ndim) + tuple(p.shape)


class InstanceNorm(_Standardize):
    """ONNX InstanceNormalization: per sample and channel over the spatial axes."""

    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__(eps, "instance_norm")

    def stats_axes(self, x: Any) -> tuple:
        if x.ndim < 3:
            raise self.error("expects an (N, C, *spatial) input", x)
        return tuple(range(2, x.ndim))

    def param_view(self, p: Any, x: Any) -> tuple:
        if p.shape != (x.shape[1],):
            raise self.error(f"scale and bias must have shape ({x.shape[1]},)", x, p)
        return (1, x.shape[1]) + (1,) * (x.ndim - 2)


class GroupNorm(_Standardize):
    """ONNX GroupNormalization (opset 21): channels of ``(N, C, *spatial)`` split into ``groups``
    consecutive groups, statistics per (sample, group); per-channel ``scale`` and ``bias``."""

    def __init__(self, groups: int, eps: float = 1e-5) -> None:
        super().__init__(eps, "group_norm")
        self.groups = _args.count(self.name, "groups", groups)

    def forward(self, x: Any, scale: Any, bias: Any = None) -> Any:
        if x.ndim < 2 or x.shape[1] % self.groups:
            raise self.error(f"expects (N, C, ...) with C divisible by {self.groups} groups", x)
        self.shape = x.shape
        n, c = x.shape[:2]
        # (N, G, C/G, S): the statistics run over the last two axes, the params over axis 2.
        x4 = x.reshape(n, self.groups, c // self.groups, -1)
        return super().forward(x4, scale, bias).reshape(x.shape)

    def backward(self, dy: Any) -> tuple:
        grads = super().backward(dy.reshape(self.xhat.shape))
        return (None if grads[0] is None else grads[0].reshape(self.shape), *grads[1:])

    def stats_axes(self, x: Any) -> tuple:
        return (2, 3)

    def param_view(self, p: Any, x: Any) -> tuple:
        c = x.shape[1] * x.shape[2]
        if p.shape != (c,):
            raise self.error(f"scale and bias must have shape ({c},)", x, p)
        return (1, x.shape[1], x.shape[2], 1)


class RMSNorm(Operator):
    """ONNX RMSNormalization: ``x / sqrt(mean(x^2) + eps) * scale`` over axes ``[axis, ndim)``."""

    def __init__(self, axis: int = -1, eps: float | None = None) -> None:
        super().__init__("rms_norm")
        self.axis = _args.axis(self.name, "axis", axis)
        self.eps = None if eps is None else _args.number(self.name, "eps", eps, 0.0)

    def forward(self, x: Any, scale: Any) -> Any:
        xp = self.xp
        _check_float(self, x)
        a = normalize_axis(self.axis, x.ndim, self.name)
        self.axes = tuple(range(a, x.ndim))
        target = x.shape[a:]
        fits = scale.ndim <= len(target) and all(p in (1, t) for p, t in zip(scale.shape[::-1], target[::-1]))
        if not fits:
            raise self.error(f"scale must broadcast to the normalised shape {target}", x, scale)
        acc = _acc_dtype(x.dtype)
        # PyTorch's default epsilon: the machine epsilon of the input's dtype.
        self.eps_ = float(np.finfo(x.dtype).eps) if self.eps is None else self.eps
        xa = x.astype(acc, copy=False)
        self.inv = 1 / xp.sqrt((xa * xa).mean(axis=self.axes, keepdims=True) + acc.type(self.eps_))
        self.xhat = xa * self.inv
        self.view = (1,) * (x.ndim - scale.ndim) + tuple(scale.shape)
        self.scale = scale.astype(acc, copy=False).reshape(self.view)
        return (self.xhat * self.scale).astype(x.dtype, copy=False)

    def backward(self, dy: Any) -> tuple:
        xhat = self.xhat
        dya = dy.astype(xhat.dtype, copy=False)
        dx = None
        if self.needs_grad[0]:
            # d/dx of x * inv: inv * (g - xhat * mean(g * xhat)), with g = dy * scale.
            g = dya * self.scale
            dx = g - xhat * (g * xhat).mean(axis=self.axes, keepdims=True)
            dx *= self.inv
            dx = dx.astype(dy.dtype, copy=False)
        p = self.inputs[1]
        dscale = unbroadcast(dya * xhat, self.view).reshape(p.shape).astype(p.dtype, copy=False)
        return dx, dscale


class Dropout(Operator):
    """Inverted dropout: in training zero each element with probability ``ratio`` and scale the
    rest by ``1 / (1 - ratio)``, so inference is the identity."""

    def __init__(self, ratio: float = 0.5, training: bool = False) -> None:
        super().__init__("dropout")
        self.ratio = _args.fraction(self.name, "ratio", ratio)
        self.training = bool(training)

    def forward(self, x: Any) -> Any:
        self.mask = None
        if not self.training or self.ratio == 0:
            return x
        _check_float(self, x)
        keep = self.device.rng.random(x.shape, dtype=self.xp.float32) >= self.ratio
        self.mask = keep.astype(x.dtype) * x.dtype.type(1 / (1 - self.ratio))
        return x * self.mask

    def backward(self, dy: Any) -> Any:
        return dy if self.mask is None else dy * self.mask


class LRN(Operator):
    """ONNX LRN: ``x / (bias + alpha/size * sum of x**2 over nearby channels) ** beta``.

    The window of channel ``c`` spans ``[c - (size-1)//2, c + ceil((size-1)/2)]``.
    """

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> None:
        super().__init__("lrn")
        me = self.name
        self.size = _args.count(me, "size", size)
        self.alpha, self.beta = _args.number(me, "alpha", alpha), _args.number(me, "beta", beta)
        self.bias = _args.number(me, "bias", bias)
        self.lo, self.hi = (self.size - 1) // 2, self.size // 2  # channels before / after c

    def _window_sum(self, a: Any, before: int, after: int) -> Any:
        """``out[:, c] = sum(a[:, c - before : c + after + 1])`` with zero outside: one add per tap."""
        xp = self.xp
        pad = [(0, 0)] * a.ndim
        pad[1] = (before, after)
        ap = xp.pad(a, pad)
        c = a.shape[1]
        out = ap[:, 0:c].copy()
        for t in range(1, before + after + 1):
            out += ap[:, t : t + c]
        return out

    def forward(self, x: Any) -> Any:
        _check_float(self, x)
        if x.ndim < 3:
            raise self.error("expects an (N, C, *spatial) input", x)
        acc = _acc_dtype(x.dtype)
        xa = x.astype(acc, copy=False)
        d = self._window_sum(xa * xa, self.lo, self.hi)
        d *= acc.type(self.alpha / self.size)
        d += acc.type(self.bias)
        self.x, self.d = xa, d
        self.p = d ** acc.type(-self.beta)
        return (xa * self.p).astype(x.dtype, copy=False)

    def backward(self, dy: Any) -> Any:
        dya = dy.astype(self.x.dtype, copy=False)
        # Channel c' feeds the windows of the channels within (hi before, lo after) of it.
        t = dya * self.x * self.p / self.d
        back = self._window_sum(t, self.hi, self.lo)
        k = self.x.dtype.type(2 * self.alpha * self.beta / self.size)
        return (dya * self.p - k * self.x * back).astype(dy.dtype, copy=False)


def batchnorm_2d(
    x: Tensor,
    scale: Tensor,
    bias: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    momentum: float = 0.9,
    eps: float = 1e-5,
    training: bool = False,
    relu: bool = False,
) -> Tensor:
    """Batch normalisation of ``(N, C, ...)`` over every axis but the channel axis 1.

    With ``training`` the batch mean and (biased) variance normalise ``x`` and
    ``running_mean``/``running_var`` are updated in place:
    ``running = momentum * running + (1 - momentum) * batch``, with the unbiased batch
    variance (SINGA's momentum 0.9 equals PyTorch's momentum 0.1). Without it (inference) the
    running statistics normalise ``x``. ``layer.BatchNorm2d`` and ``autograd.batchnorm_2d``
    pass ``autograd.training``. With ``relu``, ``relu`` of the result in the same op (in one
    pass with the compiled kernels).
    """
    return BatchNorm(momentum, eps, training, relu)(x, scale, bias, running_mean, running_var)[0]


batch_norm = batchnorm_2d


def layer_norm(
    x: Tensor, scale: Tensor, bias: Tensor | None = None, axis: int = -1, eps: float = 1e-5
) -> Tensor:
    """ONNX LayerNormalization: normalise over axes ``[axis, ndim)``, then ``* scale + bias``.

    ``scale`` and ``bias`` have shape ``x.shape[axis:]`` (or broadcast to it); ``bias`` may be
    None.
    """
    op = LayerNorm(axis, eps)
    return op(x, scale)[0] if bias is None else op(x, scale, bias)[0]


def instance_norm(x: Tensor, scale: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """ONNX InstanceNormalization of ``(N, C, *spatial)``: per (sample, channel) statistics."""
    return InstanceNorm(eps)(x, scale, bias)[0]


def group_norm(
    x: Tensor, groups: int, scale: Tensor, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """Group normalisation of ``(N, C, *spatial)``: the channels fall into ``groups`` groups of
    ``C / groups`` consecutive channels, each normalised per sample over its channels and the
    spatial axes, then ``* scale + bias`` per channel (``scale``, ``bias``: ``(C,)``)."""
    op = GroupNorm(groups, eps)
    return op(x, scale)[0] if bias is None else op(x, scale, bias)[0]


def rms_norm(x: Tensor, scale: Tensor, axis: int = -1, eps: float | None = None) -> Tensor:
    """Root-mean-square normalisation over axes ``[axis, ndim)``: ``x / sqrt(mean(x^2) + eps)
    * scale`` (no centring, no bias). ``eps`` defaults to the dtype's machine epsilon, as in
    ``torch.nn.RMSNorm``; ``scale`` broadcasts to ``x.shape[axis:]``."""
    return RMSNorm(axis, eps)(x, scale)[0]


def dropout(x: Tensor, ratio: float = 0.5, training: bool = False) -> Tensor:
    """Inverted dropout with ``training``; the identity without it (inference).

    Elements are kept with probability ``1 - ratio`` (drawn from the device's seeded
    generator) and scaled by ``1 / (1 - ratio)``. ``ratio`` must lie in ``[0, 1)``.
    ``layer.Dropout`` and ``autograd.dropout`` pass ``autograd.training``.
    """
    return Dropout(ratio, training)(x)[0]


def lrn(x: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> Tensor:
    """ONNX LRN: local response normalisation across channels of ``(N, C, *spatial)``."""
    return LRN(size, alpha, beta, bias)(x)[0]

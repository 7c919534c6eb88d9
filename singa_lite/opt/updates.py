"""The update rules: SGD, Adam, AdamW, AdaGrad and RMSProp, as ``torch.optim`` computes them.

Each also takes the step options ``clip_norm``, ``accumulate`` and ``no_decay`` as keywords
(``**options``; see :class:`~singa_lite.opt.Optimizer`).
"""

from __future__ import annotations

import math
from typing import Any

from singa_lite import backend, tensor
from singa_lite.backend import cpu_kernels, cupy_kernels
from singa_lite.errors import OptimizerError
from singa_lite.opt.optimizer import Optimizer
from singa_lite.opt.schedules import _real
from singa_lite.tensor import Tensor

__all__ = ["SGD", "AdaGrad", "Adam", "AdamW", "RMSProp"]


class _CudaUpdates:
    """``cupy_kernels``' one-launch updates with the compiled CPU loops' signature."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp

    def sgd_update(self, *args: Any, **kwargs: Any) -> None:
        cupy_kernels.sgd_update(self.xp, *args, **kwargs)

    def adam_update(self, *args: Any, **kwargs: Any) -> None:
        cupy_kernels.adam_update(self.xp, *args, **kwargs)


def _fused_updates(xp: Any, *arrays: Any) -> Any:
    """Where an update of ``arrays`` runs as one pass: the CUDA RawKernels
    (``backend/kernels/optim.cu``), the compiled CPU loops (``cpu_kernels/optim.py``), or
    None for the NumPy/CuPy op sequence each optimizer spells out."""
    if cupy_kernels.usable(xp, *arrays):
        return _CudaUpdates(xp)
    if cpu_kernels.usable_in_place(xp, *arrays):
        return cpu_kernels.optim
    return None


def _decayed(xp: Any, p: Any, g: Any, wd: Any) -> Any:
    """A new array ``g + wd * p`` (L2 weight decay folded into the gradient)."""
    out = xp.multiply(p, wd)
    out += g
    return out


def _scaled_step(xp: Any, p: Any, num: Any, acc: Any, lr: Any, eps: Any, s: Any) -> None:
    """``p -= lr * num / (sqrt(acc) + eps)``, computed in the scratch array ``s`` (AdaGrad, RMSProp)."""
    xp.sqrt(acc, out=s)
    s += eps
    xp.divide(num, s, out=s)
    s *= lr
    p -= s


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, dampening, Nesterov and L2 decay.

    As ``torch.optim.SGD`` (and SINGA): ``g += weight_decay * p``; with momentum the buffer is
    ``g`` on its first step, then ``momentum * buf + (1 - dampening) * g``; the step direction
    is ``g + momentum * buf`` with Nesterov, else ``buf``; ``p -= lr * direction``.
    Slots: ``moments``.
    """

    slot_names = ("moments",)
    hyperparam_names = ("momentum", "dampening", "weight_decay", "nesterov")
    moments: dict[str, Any]
    momentum: float
    dampening: float
    weight_decay: float
    nesterov: bool

    def __init__(
        self,
        lr: Any = 0.1,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        dtype: Any = tensor.float32,
        **options: Any,
    ) -> None:
        super().__init__(lr, dtype, **options)
        self._set_hyperparams(
            {"momentum": momentum, "dampening": dampening, "weight_decay": weight_decay, "nesterov": nesterov}
        )

    def _check_hyperparams(self, hp: dict) -> dict:
        out = {k: _real("SGD", k, hp[k], 0.0) for k in ("momentum", "dampening", "weight_decay")}
        out["nesterov"] = bool(hp["nesterov"])
        if out["nesterov"] and (out["momentum"] <= 0 or out["dampening"] != 0):
            raise OptimizerError("SGD: Nesterov momentum needs momentum > 0 and dampening 0")
        return out

    def apply(self, param_name: str, param_value: Tensor, param_grad: Tensor) -> None:
        """``param_value -= lr * direction`` in place (see the class docstring)."""
        param_name, p, g, xp, c = self._prepare(param_name, param_value, param_grad)
        wd = self._weight_decay(param_name, param_value)
        buf = self.moments.get(param_name) if self.momentum else None
        fused = _fused_updates(xp, p, g, *(() if buf is None else (buf,)))
        if fused is not None:
            # One pass with the arithmetic of the lines below, bit for bit.
            first = bool(self.momentum) and buf is None
            if first:
                buf = self.moments[param_name] = xp.empty_like(p)
            fused.sgd_update(
                p,
                g,
                buf,
                self._lr_operand(xp, c),
                weight_decay=c(wd),
                momentum=c(self.momentum),
                undampened=c(1 - self.dampening) if self.dampening else None,
                nesterov=self.nesterov,
                first=first,
            )
            return
        if wd:
            g = _decayed(xp, p, g, c(wd))
        if self.momentum:
            if buf is None:
                buf = self.moments[param_name] = g.copy()
            else:
                buf *= c(self.momentum)
                # (1 - 0) * g == g exactly, so the common undampened case skips a temporary.
                buf += g if self.dampening == 0 else c(1 - self.dampening) * g
            if self.nesterov:
                d = xp.multiply(buf, c(self.momentum))
                d += g
                g = d
            else:
                g = buf
        p -= self._lr_operand(xp, c) * g


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction, as ``torch.optim.Adam``; L2 ``weight_decay``.

    ``m = beta_1 m + (1 - beta_1) g``, ``v = beta_2 v + (1 - beta_2) g^2`` and
    ``p -= lr / (1 - beta_1^t) * m / (sqrt(v) / sqrt(1 - beta_2^t) + epsilon)`` with
    ``t = step_counter + 1``. Slots: ``m``, ``v``.
    """

    slot_names = ("m", "v")
    hyperparam_names = ("beta_1", "beta_2", "epsilon", "weight_decay")
    m: dict[str, Any]
    v: dict[str, Any]
    beta_1: float
    beta_2: float
    epsilon: float
    weight_decay: float
    _decoupled_decay = False  # AdamW: decay the weights directly instead of the gradient

    def __init__(
        self,
        lr: Any = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-8,
        weight_decay: float = 0,
        dtype: Any = tensor.float32,
        **options: Any,
    ) -> None:
        super().__init__(lr, dtype, **options)
        self._set_hyperparams(
            {"beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon, "weight_decay": weight_decay}
        )

    def _check_hyperparams(self, hp: dict) -> dict:
        out = super()._check_hyperparams(hp)
        for k in ("beta_1", "beta_2"):
            if out[k] >= 1:
                raise OptimizerError(f"{type(self).__name__}: {k} must be in [0, 1), got {out[k]}")
        return out

    def apply(self, param_name: str, param_value: Tensor, param_grad: Tensor) -> None:
        """One Adam update of ``param_value`` in place (see the class docstring)."""
        param_name, p, g, xp, c = self._prepare(param_name, param_value, param_grad)
        b1, b2 = self.beta_1, self.beta_2
        m = self._slot(self.m, param_name, p, xp)
        v = self._slot(self.v, param_name, p, xp)
        wd = self._weight_decay(param_name, param_value)
        decoupled = bool(wd) and self._decoupled_decay
        fused = _fused_updates(xp, p, g, m, v)
        if fused is not None:
            # One pass with the arithmetic of the lines below, bit for bit.
            fused.adam_update(
                p,
                g,
                m,
                v,
                decay=self._decay(xp, c) if decoupled else c(1),
                bc2=self._bc2(xp, c),
                step=self._lr_bc1(xp, c),
                weight_decay=c(wd),
                betas=(c(b1), c(1 - b1), c(b2), c(1 - b2)),
                epsilon=c(self.epsilon),
                decoupled=decoupled,
            )
            return
        if decoupled:
            p *= self._decay(xp, c)
        elif wd:
            g = _decayed(xp, p, g, c(wd))
        s = xp.multiply(g, c(1 - b1))  # the one scratch array of this update
        m *= c(b1)
        m += s
        xp.multiply(g, g, out=s)
        s *= c(1 - b2)
        v *= c(b2)
        v += s
        xp.sqrt(v, out=s)
        s /= self._bc2(xp, c)
        s += c(self.epsilon)
        xp.divide(m, s, out=s)
        s *= self._lr_bc1(xp, c)
        p -= s

    # Per-step scalars (see _lr_operand); the bias corrections are those of t = step_counter + 1.
    def _decay(self, xp: Any, c: Any) -> Any:
        wd = self.weight_decay
        return backend.step_scalar(xp, c, ("decay", id(self)), lambda: 1 - self.lr_value * wd)

    def _bc2(self, xp: Any, c: Any) -> Any:
        b2 = self.beta_2
        return backend.step_scalar(
            xp, c, ("bc2", id(self)), lambda: math.sqrt(1 - b2 ** (self.step_counter + 1))
        )

    def _lr_bc1(self, xp: Any, c: Any) -> Any:
        b1 = self.beta_1
        return backend.step_scalar(
            xp, c, ("lr_bc1", id(self)), lambda: self.lr_value / (1 - b1 ** (self.step_counter + 1))
        )


class AdamW(Adam):
    """Adam with decoupled weight decay, as ``torch.optim.AdamW``: ``p *= 1 - lr * weight_decay``
    before the Adam step, which then sees the plain gradient. Slots: ``m``, ``v``."""

    _decoupled_decay = True

    def __init__(
        self,
        lr: Any = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-8,
        weight_decay: float = 0.01,
        dtype: Any = tensor.float32,
        **options: Any,
    ) -> None:
        super().__init__(lr, beta_1, beta_2, epsilon, weight_decay, dtype, **options)


class AdaGrad(Optimizer):
    """AdaGrad, as ``torch.optim.Adagrad`` (accumulator starts at 0, no lr decay).

    ``g += weight_decay * p``, ``history += g^2``, ``p -= lr * g / (sqrt(history) + epsilon)``.
    Slots: ``history``.
    """

    slot_names = ("history",)
    hyperparam_names = ("epsilon", "weight_decay")
    history: dict[str, Any]
    epsilon: float
    weight_decay: float

    def __init__(
        self,
        lr: Any = 0.01,
        epsilon: float = 1e-10,
        weight_decay: float = 0,
        dtype: Any = tensor.float32,
        **options: Any,
    ) -> None:
        super().__init__(lr, dtype, **options)
        self._set_hyperparams({"epsilon": epsilon, "weight_decay": weight_decay})

    def apply(self, param_name: str, param_value: Tensor, param_grad: Tensor) -> None:
        """One AdaGrad update of ``param_value`` in place (see the class docstring)."""
        param_name, p, g, xp, c = self._prepare(param_name, param_value, param_grad)
        wd = self._weight_decay(param_name, param_value)
        if wd:
            g = _decayed(xp, p, g, c(wd))
        h = self._slot(self.history, param_name, p, xp)
        s = xp.multiply(g, g)  # the one scratch array of this update
        h += s
        _scaled_step(xp, p, g, h, self._lr_operand(xp, c), c(self.epsilon), s)


class RMSProp(Optimizer):
    """RMSProp, as ``torch.optim.RMSprop`` with ``alpha=rho`` (not centered, no momentum).

    ``g += weight_decay * p``, ``running_average = rho * running_average + (1 - rho) g^2``,
    ``p -= lr * g / (sqrt(running_average) + epsilon)``. Slots: ``running_average``.
    """

    slot_names = ("running_average",)
    hyperparam_names = ("rho", "epsilon", "weight_decay")
    running_average: dict[str, Any]
    rho: float
    epsilon: float
    weight_decay: float

    def __init__(
        self,
        lr: Any = 0.01,
        rho: float = 0.99,
        epsilon: float = 1e-8,
        weight_decay: float = 0,
        dtype: Any = tensor.float32,
        **options: Any,
    ) -> None:
        super().__init__(lr, dtype, **options)
        self._set_hyperparams({"rho": rho, "epsilon": epsilon, "weight_decay": weight_decay})

    def _check_hyperparams(self, hp: dict) -> dict:
        out = super()._check_hyperparams(hp)
        if out["rho"] > 1:
            raise OptimizerError(f"RMSProp: rho must be in [0, 1], got {out['rho']}")
        return out

    def apply(self, param_name: str, param_value: Tensor, param_grad: Tensor) -> None:
        """One RMSProp update of ``param_value`` in place (see the class docstring)."""
        param_name, p, g, xp, c = self._prepare(param_name, param_value, param_grad)
        wd = self._weight_decay(param_name, param_value)
        if wd:
            g = _decayed(xp, p, g, c(wd))
        r = self._slot(self.running_average, param_name, p, xp)
        s = xp.multiply(g, g)  # the one scratch array of this update
        s *= c(1 - self.rho)
        r *= c(self.rho)
        r += s
        _scaled_step(xp, p, g, r, self._lr_operand(xp, c), c(self.epsilon), s)

"""Optimizers and learning-rate schedules with Apache SINGA's API.

An optimizer updates parameters in place from their gradients: ``opt(loss)`` (or
``opt.backward_and_update(loss)``) runs ``autograd.backward(loss)``, calls
``opt.apply(p.name, p, g)`` for every parameter, then ``opt.step()``, which advances
``step_counter``. The learning rate is a number or a schedule (a :class:`DecayScheduler`),
evaluated at ``step_counter``; Adam's bias correction counts the same steps.

Per-parameter state (momentum buffers, Adam's moments ...) lives in "slots" keyed by parameter
*name*, never by position, under SINGA's keys: ``moments`` (SGD), ``m``/``v`` (Adam, AdamW),
``history`` (AdaGrad), ``running_average`` (RMSProp). ``get_states()`` returns a snapshot of
everything needed to resume bit for bit (step counter, schedule, hyperparameters, slots);
``set_states()`` restores it, on any device.

Updates follow ``torch.optim`` exactly (SGD, Adam, AdamW, Adagrad, RMSprop with their defaults
for the options not listed here), run in each parameter's own dtype (float32 stays float32),
write the parameter's array in place, and never write the caller's gradient array: one
backward can hand the same array to several parameters (``a + b`` passes ``dy`` to both).
On CuPy, an SGD or Adam/AdamW update of a float32/float64 parameter is one fused kernel
(``backend/cupy_kernels.py``) doing the same operations in the same order, so the same bits.

>>> import numpy as np
>>> from singa_lite import opt, tensor
>>> w = tensor.from_numpy(np.ones(3, dtype=np.float32))
>>> w.name = "w"
>>> sgd = opt.SGD(lr=opt.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5), momentum=0.9)
>>> sgd.apply("w", w, tensor.from_numpy(np.full(3, 2.0, dtype=np.float32)))
>>> sgd.step()
>>> tensor.to_numpy(w).tolist(), sgd.step_counter
([0.800000011920929, 0.800000011920929, 0.800000011920929], 1)
"""

from __future__ import annotations

import abc
import inspect
import math
import weakref
from collections.abc import Mapping
from numbers import Integral, Real
from typing import Any

from singa_lite import autograd, backend, tensor
from singa_lite.backend import cupy_kernels
from singa_lite.device import device_of_array
from singa_lite.errors import ArgumentError, DTypeError, OptimizerError, ShapeError, StateMismatchError
from singa_lite.tensor import Tensor

__all__ = [
    "SGD",
    "AdaGrad",
    "Adam",
    "AdamW",
    "Constant",
    "CosineDecay",
    "DecayScheduler",
    "ExponentialDecay",
    "Optimizer",
    "OptimizerError",
    "RMSProp",
    "StepDecay",
]


def _real(name: str, value: Any, low: float = -math.inf, low_open: bool = False) -> float:
    """``value`` as a finite float no smaller than ``low`` (strictly larger if ``low_open``)."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise OptimizerError(f"{name} must be a finite number, got {value!r}")
    if value < low or (low_open and value == low):
        raise OptimizerError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}")
    return float(value)


def _count(name: str, value: Any, low: int) -> int:
    """``value`` as an int no smaller than ``low`` (step counts, step sizes)."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
        raise OptimizerError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _step_number(step: Any) -> int:
    """A step given as an int, a NumPy scalar or a one-element Tensor (SINGA passes Tensors)."""
    if isinstance(step, Tensor):
        step = step.data
    if getattr(step, "ndim", 0):  # SINGA keeps the counter in a one-element array
        step = step.reshape(-1)[0]
    try:
        value = float(step)
    except (TypeError, ValueError):
        raise OptimizerError(f"a step must be a non-negative integer, got {step!r}") from None
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise OptimizerError(f"a step must be a non-negative integer, got {step!r}")
    return int(value)


# -- schedules ---------------------------------------------------------------------------------
class DecayScheduler(abc.ABC):
    """A hyperparameter schedule: ``sched.value(step)`` is its value (a float) at optimizer step
    ``step``; ``sched(step)`` is that value as SINGA returns it, a float32 Tensor of shape (1,)
    on the step's device (``step`` may be a one-element Tensor, as SINGA passes, or an int).

    >>> import numpy as np
    >>> sched = ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    >>> sched.value(20), tensor.to_numpy(sched(tensor.from_numpy(np.array([20.0]))))
    (0.025, array([0.025], dtype=float32))

    A schedule is a pure function of the step, so its only position is the optimizer's
    ``step_counter``; ``get_states()`` holds its type and constructor arguments, which is all
    ``set_states``/``from_states`` need. A subclass stores each constructor argument under the
    argument's own name and defines ``call(step)``.
    """

    _kinds: dict[str, type[DecayScheduler]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        DecayScheduler._kinds[cls.__name__] = cls  # so from_states can rebuild any kind by name

    def __init__(self, init_value: float) -> None:
        self.init_value = _real("init_value", init_value)

    def __call__(self, step: Any) -> Tensor:
        dev = step.device if isinstance(step, Tensor) else None
        return tensor.full((1,), self.value(step), dev)

    def value(self, step: Any) -> float:
        """The value at ``step`` (an int, a NumPy scalar or a one-element Tensor) as a float."""
        return self.call(_step_number(step))

    @abc.abstractmethod
    def call(self, step: int) -> float:
        """The value at ``step`` (a non-negative int)."""

    def get_states(self) -> dict:
        """``{'type': class name, <constructor argument>: value, ...}``, JSON-able."""
        params = inspect.signature(type(self).__init__).parameters
        return {"type": type(self).__name__, **{k: getattr(self, k) for k in params if k != "self"}}

    def set_states(self, states: Mapping) -> None:
        """Restore the configuration saved by ``get_states`` (of the same schedule type)."""
        fresh = DecayScheduler.from_states(states)
        if type(fresh) is not type(self):
            raise OptimizerError(f"cannot load {type(fresh).__name__} states into {type(self).__name__}")
        self.__dict__.update(fresh.__dict__)

    @staticmethod
    def from_states(states: Mapping) -> DecayScheduler:
        """A new schedule of the type and configuration recorded by ``get_states``."""
        if not isinstance(states, Mapping):
            raise OptimizerError(
                f"schedule states must be a dict from get_states(), got {type(states).__name__}"
            )
        config = dict(states)
        kind = config.pop("type", None)
        cls = DecayScheduler._kinds.get(str(kind))
        if cls is None:
            raise OptimizerError(f"unknown schedule type {kind!r}; known: {sorted(DecayScheduler._kinds)}")
        try:
            return cls(**config)
        except TypeError as e:
            raise OptimizerError(f"bad {kind} schedule states {config}: {e}") from None

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_states().items() if k != "type")
        return f"{type(self).__name__}({args})"


class Constant(DecayScheduler):
    """The same value at every step."""

    def call(self, step: int) -> float:
        return self.init_value


class ExponentialDecay(DecayScheduler):
    """``init_value * decay_rate ** (step / decay_steps)``; the exponent is floored if ``staircase``.

    ``ExponentialDecay(lr, 1, gamma)`` is ``torch.optim.lr_scheduler.ExponentialLR(gamma)``.
    """

    def __init__(self, init_value: float, decay_steps: float, decay_rate: float, staircase: bool = False):
        super().__init__(init_value)
        self.decay_steps = _real("decay_steps", decay_steps, 0.0, low_open=True)
        self.decay_rate = _real("decay_rate", decay_rate, 0.0)
        self.staircase = bool(staircase)

    def call(self, step: int) -> float:
        p = step / self.decay_steps
        return self.init_value * self.decay_rate ** (math.floor(p) if self.staircase else p)


class StepDecay(DecayScheduler):
    """``init_value * gamma ** (step // step_size)``, as ``torch.optim.lr_scheduler.StepLR``."""

    def __init__(self, init_value: float, step_size: int, gamma: float = 0.1):
        super().__init__(init_value)
        self.step_size = _count("step_size", step_size, 1)
        self.gamma = _real("gamma", gamma, 0.0)

    def call(self, step: int) -> float:
        return self.init_value * self.gamma ** (step // self.step_size)


class CosineDecay(DecayScheduler):
    """Half a cosine from ``init_value`` down to ``alpha * init_value`` over ``decay_steps`` steps.

    Then it stays at ``alpha * init_value`` (``CosineAnnealingLR(T_max=decay_steps,
    eta_min=alpha * init_value)`` for the first ``decay_steps`` steps). With ``warmup_steps``
    the value first rises linearly from 0 (``init_value * step / warmup_steps``), and the
    cosine starts when the warm-up ends.
    """

    def __init__(self, init_value: float, decay_steps: int, alpha: float = 0.0, warmup_steps: int = 0):
        super().__init__(init_value)
        self.decay_steps = _count("decay_steps", decay_steps, 1)
        self.alpha = _real("alpha", alpha, 0.0)
        self.warmup_steps = _count("warmup_steps", warmup_steps, 0)

    def call(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.init_value * step / self.warmup_steps
        t = min(step - self.warmup_steps, self.decay_steps) / self.decay_steps
        return self.init_value * (self.alpha + (1 - self.alpha) * 0.5 * (1 + math.cos(math.pi * t)))


def _as_schedule(lr: Any) -> DecayScheduler:
    if isinstance(lr, DecayScheduler):
        return lr
    if isinstance(lr, Real) and not isinstance(lr, bool):
        return Constant(_real("lr", lr, 0.0))
    raise ArgumentError(f"lr must be a number or a DecayScheduler, got {type(lr).__name__} {lr!r:.60}")


# -- optimizer base ----------------------------------------------------------------------------
class Optimizer:
    """Base optimizer: step counter, learning-rate schedule, slots keyed by parameter name.

    Instantiable, as SINGA's is (its tests build ``opt.Optimizer(lr)`` to exercise the step
    counter and schedule); only ``apply`` needs a subclass.

    ``lr`` is a number or a :class:`DecayScheduler`. ``dtype`` is accepted for SINGA
    compatibility; updates always run in each parameter's own dtype. Subclasses list their
    slot dictionaries in ``slot_names`` and their hyperparameters in ``hyperparam_names``,
    validate them in ``_check_hyperparams`` and define ``apply``.
    """

    slot_names: tuple[str, ...] = ()
    hyperparam_names: tuple[str, ...] = ()

    def __init__(self, lr: Any, dtype: Any = tensor.float32) -> None:
        self.lr = lr
        self.dtype = tensor.as_dtype(dtype)
        self.step_counter = 0
        self._unplaced: set[str] = set()  # names whose loaded slots await their param's device
        self._owners: dict[str, Any] = {}  # slot key -> weakref to the tensor whose slots they are
        self._aliases: dict[int, tuple[Any, str]] = {}  # id(tensor) -> (weakref, slot key)
        for slot in self.slot_names:
            setattr(self, slot, {})

    @property
    def lr(self) -> DecayScheduler:
        """The learning-rate schedule; assigning a number makes it ``Constant``."""
        return self._lr

    @lr.setter
    def lr(self, value: Any) -> None:
        self._lr = _as_schedule(value)

    @property
    def lr_value(self) -> float:
        """The learning rate at the current ``step_counter``."""
        return self.lr.value(self.step_counter)

    def __call__(self, loss: Tensor) -> None:
        """Backward from ``loss``, update every parameter, advance the step (SINGA's ``opt(loss)``)."""
        self.backward_and_update(loss)

    def backward_and_update(self, loss: Tensor) -> None:
        """Backward from ``loss``, ``apply`` each ``(param, grad)`` as it comes, then ``step()``."""
        # Through run_step, so Model's graph mode records this update and replays it.
        autograd.run_step(self._backward_and_update, loss)

    def _backward_and_update(self, loss: Tensor) -> None:
        for p, g in autograd.backward(loss):
            self.apply(self._name_of(p), p, g)
        self.step()

    def update(self, param: Tensor, grad: Tensor) -> None:
        """SINGA's older per-parameter entry point: ``apply(param.name, param, grad)``."""
        self.apply(self._name_of(param), param, grad)

    def step(self) -> None:
        """Advance ``step_counter`` (and so the schedule and the bias corrections)."""
        self.step_counter += 1

    def apply(self, param_name: str, param_value: Tensor, param_grad: Tensor) -> None:
        """Update ``param_value`` in place from ``param_grad``, with the slots of ``param_name``."""
        raise OptimizerError(
            f"{type(self).__name__}.apply: the Optimizer base class updates nothing; "
            "use a subclass such as opt.SGD or opt.Adam, or define apply in your own"
        )

    # -- hyperparameters -----------------------------------------------------------------
    def _check_hyperparams(self, hp: dict) -> dict:
        """Validated, normalised copy of ``hp`` (every name in ``hyperparam_names``)."""
        return {k: _real(k, hp[k], 0.0) for k in self.hyperparam_names}

    def _set_hyperparams(self, hp: dict) -> None:
        for k, v in self._check_hyperparams(hp).items():
            setattr(self, k, v)

    def _hyperparams(self) -> dict:
        return {k: getattr(self, k) for k in self.hyperparam_names}

    # -- states ----------------------------------------------------------------------------
    def get_states(self) -> dict:
        """A snapshot: ``{'step_counter': n, 'lr': schedule states, 'hyperparams': {...},
        'optimizer': class name, <slot>: {param name: Tensor}}`` (slot tensors are copies)."""
        states: dict[str, Any] = {
            "optimizer": type(self).__name__,
            "step_counter": self.step_counter,
            "lr": self.lr.get_states(),
            "hyperparams": self._hyperparams(),
        }
        for slot in self.slot_names:
            states[slot] = {name: _snapshot(arr) for name, arr in getattr(self, slot).items()}
        return states

    def set_states(self, states: Mapping) -> None:
        """Restore what ``get_states`` returned; slots go to their param's device on its next apply.

        Slot values may be Tensors or arrays from any device. Absent ``lr``/``hyperparams``
        (as in SINGA's own states) keep the current ones; an absent slot key means no slots.
        """
        me = type(self).__name__
        if not isinstance(states, Mapping):
            raise ArgumentError(
                f"{me}.set_states: expects the dict get_states() returned, got {type(states).__name__}"
            )
        for key in ("hyperparams", *self.slot_names):
            if not isinstance(states.get(key, {}), Mapping):
                raise StateMismatchError(
                    f"{me}.set_states: {key!r} must be a dict, got {type(states[key]).__name__}"
                )
        kind = states.get("optimizer", me)
        if kind != type(self).__name__:
            raise StateMismatchError(f"cannot load {kind} optimizer states into {type(self).__name__}")
        known = {"optimizer", "step_counter", "lr", "hyperparams", *self.slot_names}
        unexpected = sorted(set(states) - known)
        if unexpected or "step_counter" not in states:
            raise StateMismatchError(
                f"{type(self).__name__}.set_states: unexpected keys {unexpected}, "
                f"step_counter {'present' if 'step_counter' in states else 'missing'}; "
                f"expected keys {sorted(known)}"
            )
        step = _step_number(states["step_counter"])
        lr = DecayScheduler.from_states(states["lr"]) if "lr" in states else self.lr
        hp_in = dict(states.get("hyperparams", {}))
        unknown = sorted(set(hp_in) - set(self.hyperparam_names))
        if unknown:
            raise StateMismatchError(f"{type(self).__name__}: unknown hyperparameters {unknown}")
        hp = self._check_hyperparams({**self._hyperparams(), **hp_in})
        slots = {s: {str(n): _copy_array(v) for n, v in states.get(s, {}).items()} for s in self.slot_names}
        # Everything is validated: commit.
        self.step_counter, self.lr = step, lr
        self._set_hyperparams(hp)
        for slot, values in slots.items():
            setattr(self, slot, values)
        self._unplaced = {name for values in slots.values() for name in values}
        self._owners, self._aliases = {}, {}  # loaded slots go to the first tensor of each name

    # -- helpers for apply -----------------------------------------------------------------
    @staticmethod
    def _name_of(param: Tensor) -> str:
        """The slot key of ``param``: its name.

        Layers name their params by attribute path; a bare tensor trained by ``opt(loss)`` or
        ``update`` (SINGA's autograd-only scripts) has its ``Dummy#N`` name, unique in this
        process, so its slots persist across steps. Such a name means nothing in another
        process: name the tensor yourself to save and restore its slots.
        """
        if not isinstance(param, Tensor):
            raise ArgumentError(f"an optimizer updates Tensors, got {type(param).__name__}")
        return param.name

    def _prepare(self, name: str | None, param: Tensor, grad: Any) -> tuple[str, Any, Any, Any, Any]:
        """``(slot key, param array, grad array, xp, scalar type)``, after the checks every
        apply needs."""
        me = type(self).__name__
        if not isinstance(param, Tensor):
            raise ArgumentError(f"{me}.apply: param_value must be a Tensor, got {type(param).__name__}")
        if name is None:
            raise OptimizerError(
                f"{me}.apply: param_name is None for a parameter of shape "
                f"{param.shape}; optimizer slots are keyed by name"
            )
        p = param.data
        g = grad.data if isinstance(grad, Tensor) else grad
        if not (hasattr(g, "shape") and hasattr(g, "dtype")):
            raise ArgumentError(
                f"{me}.apply: the gradient of {name!r} must be a Tensor or an array, "
                f"got {type(grad).__name__}"
            )
        if g.shape != p.shape:
            raise ShapeError(f"{type(self).__name__}: gradient shape {g.shape} != param {name!r} {p.shape}")
        if p.dtype.kind != "f":
            raise DTypeError(f"{type(self).__name__}: param {name!r} has dtype {p.dtype}; it must be float")
        key = self._slot_key(name, param)
        if key in self._unplaced:
            self._place(key, param)
        return key, p, g, param.device.xp, p.dtype.type

    def _slot_key(self, name: str, param: Tensor) -> str:
        """The key of ``param``'s slots: its name, unless another live tensor of that name has
        slots here already (two standalone layers both holding ``W``): then ``name#2``,
        ``name#3``... in the order the tensors first came. Slots are keyed by name, so they
        save and load, and told apart by identity, so two params never share them; a tensor
        whose name's first owner has died takes its slots over (a rebuilt model)."""
        owner = self._owners.get(name)
        first = owner() if owner is not None else None
        if first is param:
            return name
        if first is None:
            self._owners[name] = weakref.ref(param)
            return name
        alias = self._aliases.get(id(param))
        if alias is not None and alias[0]() is param:
            return alias[1]
        k = 2
        while f"{name}#{k}" in self._owners and self._owners[f"{name}#{k}"]() is not None:
            k += 1
        key = f"{name}#{k}"
        self._owners[key] = weakref.ref(param)
        self._aliases[id(param)] = (weakref.ref(param), key)
        return key

    def _place(self, name: str, param: Tensor) -> None:
        """Move the loaded slots of ``name`` to ``param``'s device and dtype, checking shapes."""
        for slot in self.slot_names:
            values = getattr(self, slot)
            if name in values:
                arr = values[name]
                if tuple(arr.shape) != param.shape:
                    raise StateMismatchError(
                        f"{type(self).__name__}: loaded slot {slot}[{name!r}] has shape "
                        f"{tuple(arr.shape)}, but the parameter has shape {param.shape}"
                    )
                values[name] = Tensor(device=param.device, data=arr, dtype=param.dtype).data
        self._unplaced.discard(name)

    def _lr_operand(self, xp: Any, c: Any) -> Any:
        """The learning rate as a kernel operand of type ``c``: a number, or inside a CUDA-graph
        capture a device scalar set before every launch (``backend.step_scalar``), so that a
        replayed step follows the schedule instead of the step it was captured in."""
        return backend.step_scalar(xp, c, ("lr", id(self)), lambda: self.lr_value)

    @staticmethod
    def _slot(values: dict, name: str, p: Any, xp: Any) -> Any:
        """The slot array of ``name``, created as zeros like ``p`` on first use."""
        arr = values.get(name)
        if arr is None:
            arr = values[name] = xp.zeros_like(p)
        return arr


def _snapshot(arr: Any) -> Tensor:
    return Tensor(device=device_of_array(arr), data=arr, requires_grad=False)  # Tensor copies


def _copy_array(value: Any) -> Any:
    """A private copy of a slot value (Tensor, NumPy/CuPy array or array-like) on its own device."""
    if isinstance(value, Tensor):
        return value.data.copy()
    return backend.get_array_module(value).array(value, copy=True)


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


# -- optimizers --------------------------------------------------------------------------------
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
    ) -> None:
        super().__init__(lr, dtype)
        self._set_hyperparams(
            {"momentum": momentum, "dampening": dampening, "weight_decay": weight_decay, "nesterov": nesterov}
        )

    def _check_hyperparams(self, hp: dict) -> dict:
        out = {k: _real(k, hp[k], 0.0) for k in ("momentum", "dampening", "weight_decay")}
        out["nesterov"] = bool(hp["nesterov"])
        if out["nesterov"] and (out["momentum"] <= 0 or out["dampening"] != 0):
            raise OptimizerError("SGD: Nesterov momentum needs momentum > 0 and dampening 0")
        return out

    def apply(self, param_name: str, param_value: Tensor, param_grad: Tensor) -> None:
        """``param_value -= lr * direction`` in place (see the class docstring)."""
        param_name, p, g, xp, c = self._prepare(param_name, param_value, param_grad)
        buf = self.moments.get(param_name) if self.momentum else None
        if cupy_kernels.usable(xp, p, g, *(() if buf is None else (buf,))):
            # One launch with the arithmetic of the lines below, bit for bit (kernels/optim.cu).
            first = bool(self.momentum) and buf is None
            if first:
                buf = self.moments[param_name] = xp.empty_like(p)
            cupy_kernels.sgd_update(
                xp,
                p,
                g,
                buf,
                self._lr_operand(xp, c),
                weight_decay=c(self.weight_decay),
                momentum=c(self.momentum),
                undampened=c(1 - self.dampening) if self.dampening else None,
                nesterov=self.nesterov,
                first=first,
            )
            return
        if self.weight_decay:
            g = _decayed(xp, p, g, c(self.weight_decay))
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
    ) -> None:
        super().__init__(lr, dtype)
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
        decoupled = bool(self.weight_decay) and self._decoupled_decay
        if cupy_kernels.usable(xp, p, g, m, v):
            # One launch with the arithmetic of the lines below, bit for bit (kernels/optim.cu).
            cupy_kernels.adam_update(
                xp,
                p,
                g,
                m,
                v,
                decay=self._decay(xp, c) if decoupled else c(1),
                bc2=self._bc2(xp, c),
                step=self._lr_bc1(xp, c),
                weight_decay=c(self.weight_decay),
                betas=(c(b1), c(1 - b1), c(b2), c(1 - b2)),
                epsilon=c(self.epsilon),
                decoupled=decoupled,
            )
            return
        if decoupled:
            p *= self._decay(xp, c)
        elif self.weight_decay:
            g = _decayed(xp, p, g, c(self.weight_decay))
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
    ) -> None:
        super().__init__(lr, beta_1, beta_2, epsilon, weight_decay, dtype)


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
        self, lr: Any = 0.01, epsilon: float = 1e-10, weight_decay: float = 0, dtype: Any = tensor.float32
    ) -> None:
        super().__init__(lr, dtype)
        self._set_hyperparams({"epsilon": epsilon, "weight_decay": weight_decay})

    def apply(self, param_name: str, param_value: Tensor, param_grad: Tensor) -> None:
        """One AdaGrad update of ``param_value`` in place (see the class docstring)."""
        param_name, p, g, xp, c = self._prepare(param_name, param_value, param_grad)
        if self.weight_decay:
            g = _decayed(xp, p, g, c(self.weight_decay))
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
    ) -> None:
        super().__init__(lr, dtype)
        self._set_hyperparams({"rho": rho, "epsilon": epsilon, "weight_decay": weight_decay})

    def _check_hyperparams(self, hp: dict) -> dict:
        out = super()._check_hyperparams(hp)
        if out["rho"] > 1:
            raise OptimizerError(f"RMSProp: rho must be in [0, 1], got {out['rho']}")
        return out

    def apply(self, param_name: str, param_value: Tensor, param_grad: Tensor) -> None:
        """One RMSProp update of ``param_value`` in place (see the class docstring)."""
        param_name, p, g, xp, c = self._prepare(param_name, param_value, param_grad)
        if self.weight_decay:
            g = _decayed(xp, p, g, c(self.weight_decay))
        r = self._slot(self.running_average, param_name, p, xp)
        s = xp.multiply(g, g)  # the one scratch array of this update
        s *= c(1 - self.rho)
        r *= c(self.rho)
        r += s
        _scaled_step(xp, p, g, r, self._lr_operand(xp, c), c(self.epsilon), s)


def __getattr__(name: str) -> Any:
    # DistOpt lives in singa_lite.dist, which imports this module: resolved on first use, no cycle.
    if name == "DistOpt":
        from singa_lite.dist.distopt import DistOpt

        return DistOpt
    raise AttributeError(f"module 'singa_lite.opt' has no attribute {name!r}")

"""Learning-rate schedules: pure functions of the optimizer's step, saved as their configuration."""

from __future__ import annotations

import abc
import inspect
import math
from collections.abc import Mapping
from numbers import Real
from typing import Any

from singa_lite import _args, tensor
from singa_lite.errors import OptimizerError
from singa_lite.tensor import Tensor

__all__ = ["Constant", "CosineDecay", "DecayScheduler", "ExponentialDecay", "StepDecay"]


def _real(owner: str, name: str, value: Any, low: float | None = None, **bounds: Any) -> float:
    """``value`` as a finite float within the bounds (``_args.number``), or ``OptimizerError``."""
    return _args.number(owner, name, value, low, error=OptimizerError, **bounds)


def _count(owner: str, name: str, value: Any, low: int) -> int:
    """``value`` as an int no smaller than ``low`` (step counts, step sizes)."""
    return _args.count(owner, name, value, low, error=OptimizerError)


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
        self.init_value = _real(type(self).__name__, "init_value", init_value)

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
        self.decay_steps = _real("ExponentialDecay", "decay_steps", decay_steps, 0.0, low_open=True)
        self.decay_rate = _real("ExponentialDecay", "decay_rate", decay_rate, 0.0)
        self.staircase = bool(staircase)

    def call(self, step: int) -> float:
        p = step / self.decay_steps
        return self.init_value * self.decay_rate ** (math.floor(p) if self.staircase else p)


class StepDecay(DecayScheduler):
    """``init_value * gamma ** (step // step_size)``, as ``torch.optim.lr_scheduler.StepLR``."""

    def __init__(self, init_value: float, step_size: int, gamma: float = 0.1):
        super().__init__(init_value)
        self.step_size = _count("StepDecay", "step_size", step_size, 1)
        self.gamma = _real("StepDecay", "gamma", gamma, 0.0)

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
        self.decay_steps = _count("CosineDecay", "decay_steps", decay_steps, 1)
        self.alpha = _real("CosineDecay", "alpha", alpha, 0.0, high=1.0)
        self.warmup_steps = _count("CosineDecay", "warmup_steps", warmup_steps, 0)

    def call(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.init_value * step / self.warmup_steps
        t = min(step - self.warmup_steps, self.decay_steps) / self.decay_steps
        return self.init_value * (self.alpha + (1 - self.alpha) * 0.5 * (1 + math.cos(math.pi * t)))


def _as_schedule(lr: Any, owner: str) -> DecayScheduler:
    """``lr`` as a schedule: a number becomes ``Constant``."""
    if isinstance(lr, DecayScheduler):
        return lr
    if isinstance(lr, Real) and not isinstance(lr, bool):
        return Constant(_real(owner, "lr", lr, 0.0))
    raise _args.bad(owner, "lr", "be a number or a DecayScheduler", lr, OptimizerError)

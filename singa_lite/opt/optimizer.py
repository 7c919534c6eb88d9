"""The optimizer base: step counter, schedule, slots keyed by parameter name, and the step.

A step (``opt(loss)``) runs backward, then updates every parameter through the subclass's
``apply``, then advances ``step_counter``. The options every optimizer shares live here:
gradient clipping by global norm (``clip_norm``), gradient accumulation over micro-batches
(``accumulate``) and weight-decay exclusion (``no_decay``); ``get_states`` holds everything a
resumed run needs to continue bit for bit.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from singa_lite import autograd, backend, tensor
from singa_lite.device import device_of_array
from singa_lite.errors import ArgumentError, DTypeError, OptimizerError, ShapeError, StateMismatchError
from singa_lite.opt.schedules import DecayScheduler, _as_schedule, _real, _step_number
from singa_lite.tensor import Tensor

__all__ = ["Optimizer"]


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

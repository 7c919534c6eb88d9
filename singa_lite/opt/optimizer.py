"""The optimizer base: step counter, schedule, slots keyed by parameter name, and the step.

A step (``opt(loss)``) runs backward, then updates every parameter through the subclass's
``apply``, then advances ``step_counter``. The options every optimizer shares live here:
gradient clipping by global norm (``clip_norm``), gradient accumulation over micro-batches
(``accumulate``) and weight-decay exclusion (``no_decay``); ``get_states`` holds everything a
resumed run needs to continue bit for bit.
"""

from __future__ import annotations

import fnmatch
import weakref
from collections.abc import Mapping
from typing import Any

from singa_lite import _args, autograd, backend, tensor
from singa_lite.clip_grad import clip_grad_norm
from singa_lite.device import device_of_array
from singa_lite.errors import ArgumentError, DTypeError, OptimizerError, ShapeError, StateMismatchError
from singa_lite.opt.schedules import DecayScheduler, _as_schedule, _count, _real, _step_number
from singa_lite.tensor import Tensor

__all__ = ["Optimizer", "biases_and_norms"]


class Optimizer:
    """Base optimizer: step counter, learning-rate schedule, slots keyed by parameter name.

    Instantiable, as SINGA's is (its tests build ``opt.Optimizer(lr)`` to exercise the step
    counter and schedule); only ``apply`` needs a subclass.

    ``lr`` is a number or a :class:`DecayScheduler`. ``dtype`` is accepted for SINGA
    compatibility; updates always run in each parameter's own dtype. Subclasses list their
    slot dictionaries in ``slot_names`` and their hyperparameters in ``hyperparam_names``,
    validate them in ``_check_hyperparams`` and define ``apply``.

    Every optimizer takes three keyword-only step options, saved and restored by
    ``get_states``/``set_states`` (and so by checkpoints):

    - ``clip_norm``: before applying, scale all gradients together to a global L2 norm of at
      most this (as ``torch.nn.utils.clip_grad_norm_``); on the device, so graph mode and CUDA
      graphs keep it. ``last_norm`` holds the norm before scaling.
    - ``accumulate=k``: each ``opt(loss)`` adds its gradients into the ``accum`` slots and only
      every ``k``-th one updates, with their mean (``micro_step`` counts the micro-batches);
      ``step_counter`` and the schedule count updates. The per-step branch runs on the host, so
      graph mode replays such a step op by op instead of as a CUDA graph.
    - ``no_decay``: the params ``weight_decay`` leaves alone: name patterns (``"*.b"``) or a
      predicate ``(name, param) -> bool`` such as :func:`biases_and_norms`.

    ``opt.update``/``apply`` update one param at once: the options act on whole steps.
    """

    slot_names: tuple[str, ...] = ()
    hyperparam_names: tuple[str, ...] = ()

    def __init__(
        self,
        lr: Any,
        dtype: Any = tensor.float32,
        *,
        clip_norm: float | None = None,
        accumulate: int = 1,
        no_decay: Any = None,
    ) -> None:
        self.lr = lr
        self.dtype = tensor.as_dtype(dtype)
        self.step_counter = 0
        self._unplaced: set[str] = set()  # names whose loaded slots await their param's device
        self._owners: dict[str, Any] = {}  # slot key -> weakref to the tensor whose slots they are
        self._aliases: dict[int, tuple[Any, str]] = {}  # id(tensor) -> (weakref, slot key)
        self.last_norm: Tensor | None = None  # the global gradient norm of the latest clipped step
        me = type(self).__name__
        accumulate = _count(me, "accumulate", accumulate, 1)
        self._configure(_clip_norm(me, clip_norm), accumulate, _no_decay(me, no_decay))
        for slot in self.slot_names:
            setattr(self, slot, {})

    def _configure(self, clip_norm: float | None, accumulate: int, no_decay: Any) -> None:
        """Set the step options; accumulating adds the ``accum`` slot (saved like the others)."""
        self.clip_norm, self.accumulate, self.no_decay = clip_norm, accumulate, no_decay
        self.micro_step = 0  # micro-batches accumulated since the last update
        self._window: dict[str, Tensor] = {}  # slot key -> param, of this accumulation window
        self._exempt: dict[str, bool] = {}  # slot key -> excluded from weight decay (decided once)
        self._loaded_window: set[str] = set()  # keys whose sums a checkpoint restored mid-window
        own = type(self).slot_names
        self.slot_names = (*own, "accum") if accumulate > 1 else own
        if accumulate > 1 and not hasattr(self, "accum"):
            self.accum: dict[str, Any] = {}

    @property
    def lr(self) -> DecayScheduler:
        """The learning-rate schedule; assigning a number makes it ``Constant``."""
        return self._lr

    @lr.setter
    def lr(self, value: Any) -> None:
        self._lr = _as_schedule(value, type(self).__name__)

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
        if self.accumulate == 1 and self.clip_norm is None:
            # Each gradient is applied as the backward walk yields it, so it can be freed early.
            for p, g in autograd.backward(loss):
                self.apply(self._name_of(p), p, g)
            self.step()
            return
        self.update_all(list(autograd.backward(loss)))

    def update_all(self, pairs: list[tuple[Tensor, Any]]) -> None:
        """Accumulate, clip and apply one backward's ``(param, grad)`` pairs, then ``step()``.

        The end of every update path (``DistOpt`` calls it with the averaged gradients). With
        ``accumulate=k`` the first ``k - 1`` calls of a window only add the gradients into the
        ``accum`` slots; the ``k``-th applies their mean. With ``clip_norm`` the gradients
        applied are first scaled together to that global L2 norm (``last_norm`` keeps the norm
        before scaling, on the device).
        """
        if self.accumulate > 1:
            if backend.capturing():
                # A CUDA graph would freeze whichever branch the captured step took.
                raise OptimizerError(
                    f"{type(self).__name__}(accumulate={self.accumulate}) decides on the host "
                    "whether a step updates, so it cannot be captured into a CUDA graph"
                )
            pairs = self._accumulated(pairs)
            if not pairs:
                return
        if self.clip_norm is not None and pairs:
            grads, self.last_norm = clip_grad_norm([g for _, g in pairs], self.clip_norm)
            pairs = [(p, g) for (p, _), g in zip(pairs, grads)]
        for p, g in pairs:
            self.apply(self._name_of(p), p, g)
        self.step()

    def _accumulated(self, pairs: list[tuple[Tensor, Any]]) -> list[tuple[Tensor, Any]]:
        """Add ``pairs`` into the window's sums; at its last micro-batch, the mean gradients."""
        for p, g in pairs:
            key = self._slot_key(self._name_of(p), p)
            if key in self._unplaced:
                self._place(key, p)
            arr = g.data if isinstance(g, Tensor) else g
            acc = self.accum.get(key)
            if acc is None or acc.shape != arr.shape or acc.dtype != arr.dtype:
                acc = self.accum[key] = p.device.xp.zeros_like(arr)
            if key in self._window or key in self._loaded_window:
                acc += arr
            else:  # the first gradient of this window (a param may miss some micro-batches)
                acc[...] = arr
            self._window[key] = p
        self.micro_step += 1
        if self.micro_step < self.accumulate:
            return []
        window, self._window, self.micro_step = self._window, {}, 0
        self._loaded_window = set()  # a loaded sum whose param never came again is dropped
        out = []
        for key, p in window.items():
            acc = self.accum[key]
            acc /= acc.dtype.type(self.accumulate)
            out.append((p, Tensor._wrap(acc, p.device, False, None, 0)))
        return out

    def _weight_decay(self, key: str, param: Tensor) -> float:
        """This optimizer's ``weight_decay`` for the param of slot key ``key``: 0 where
        ``no_decay`` exempts it (decided by ``_prepare`` on the param's first update)."""
        wd = float(getattr(self, "weight_decay", 0.0))
        return 0.0 if wd and self._exempt.get(key) else wd

    def _decide_exemption(self, key: str, name: str, param: Tensor) -> None:
        rule = self.no_decay
        if callable(rule):
            self._exempt[key] = bool(rule(name, param))
        else:
            self._exempt[key] = any(fnmatch.fnmatchcase(name, pat) for pat in rule)

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
        return {k: _real(type(self).__name__, k, hp[k], 0.0) for k in self.hyperparam_names}

    def _set_hyperparams(self, hp: dict) -> None:
        for k, v in self._check_hyperparams(hp).items():
            setattr(self, k, v)

    def _hyperparams(self) -> dict:
        return {k: getattr(self, k) for k in self.hyperparam_names}

    # -- states ----------------------------------------------------------------------------
    def get_states(self) -> dict:
        """A snapshot: ``{'optimizer': class name, 'step_counter': n, 'lr': schedule states,
        'hyperparams': {...}, 'options': {...}, <slot>: {param name: Tensor}}`` (slot tensors
        are copies). ``options`` holds the step options and where an accumulation window is:
        ``clip_norm``, ``accumulate``, ``micro_step``, ``no_decay`` (the name patterns, or None
        for a predicate or none) and ``decay_exempt`` (the decision made for every param so far).
        """
        states: dict[str, Any] = {
            "optimizer": type(self).__name__,
            "step_counter": self.step_counter,
            "lr": self.lr.get_states(),
            "hyperparams": self._hyperparams(),
            "options": {
                "clip_norm": self.clip_norm,
                "accumulate": self.accumulate,
                "micro_step": self.micro_step,
                "no_decay": list(self.no_decay) if isinstance(self.no_decay, tuple) else None,
                "decay_exempt": dict(sorted(self._exempt.items())),
            },
        }
        for slot in self.slot_names:
            values = getattr(self, slot)
            if slot == "accum":  # only the sums of the window in progress mean anything
                pending = {*self._window, *self._loaded_window} if self.micro_step else set()
                values = {k: v for k, v in values.items() if k in pending}
            states[slot] = {name: _snapshot(arr) for name, arr in values.items()}
        return states

    def set_states(self, states: Mapping) -> None:
        """Restore what ``get_states`` returned; slots go to their param's device on its next apply.

        Slot values may be Tensors or arrays from any device. Absent ``lr``/``hyperparams``/
        ``options`` (as in SINGA's own states) keep the current ones; an absent slot key means no
        slots. Saved ``no_decay`` patterns replace the current ones; where a predicate was used
        the saved decisions hold for the params they name and the current predicate decides the
        rest.
        """
        me = type(self).__name__
        if not isinstance(states, Mapping):
            raise ArgumentError(
                f"{me}.set_states: expects the dict get_states() returned, got {type(states).__name__}"
            )
        options = self._options_in(states.get("options"))
        accumulate = options[1] if options else self.accumulate
        slot_names = (*type(self).slot_names, "accum") if accumulate > 1 else type(self).slot_names
        for key in ("hyperparams", *slot_names):
            if not isinstance(states.get(key, {}), Mapping):
                raise StateMismatchError(
                    f"{me}.set_states: {key!r} must be a dict, got {type(states[key]).__name__}"
                )
        kind = states.get("optimizer", me)
        if kind != type(self).__name__:
            raise StateMismatchError(f"cannot load {kind} optimizer states into {type(self).__name__}")
        known = {"optimizer", "step_counter", "lr", "hyperparams", "options", *slot_names}
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
        slots = {s: {str(n): _copy_array(v) for n, v in states.get(s, {}).items()} for s in slot_names}
        # Everything is validated: commit.
        if options is not None:
            clip_norm, accumulate, no_decay, micro_step, exempt = options
            self._configure(clip_norm, accumulate, self.no_decay if no_decay is None else no_decay)
            self.micro_step, self._exempt = micro_step, exempt
        self.step_counter, self.lr = step, lr
        self._set_hyperparams(hp)
        for slot, values in slots.items():
            setattr(self, slot, values)
        self._window, self._loaded_window = {}, set(slots.get("accum", ())) if self.micro_step else set()
        self._unplaced = {name for values in slots.values() for name in values}
        self._owners, self._aliases = {}, {}  # loaded slots go to the first tensor of each name

    def _options_in(self, saved: Any) -> tuple | None:
        """The validated ``options`` entry of saved states, or None where there is none."""
        if saved is None:
            return None
        me = type(self).__name__
        fields = {"clip_norm", "accumulate", "micro_step", "no_decay", "decay_exempt"}
        if not isinstance(saved, Mapping) or set(saved) != fields:
            got = sorted(saved) if isinstance(saved, Mapping) else type(saved).__name__
            raise StateMismatchError(f"{me}: saved 'options' need the keys {sorted(fields)}; got {got}")
        exempt = saved["decay_exempt"]
        if not isinstance(exempt, Mapping) or not all(isinstance(v, bool) for v in exempt.values()):
            raise StateMismatchError(f"{me}.set_states: 'decay_exempt' must map param names to booleans")
        try:
            accumulate = _count(me, "accumulate", saved["accumulate"], 1)
            micro_step = _count(me, "micro_step", saved["micro_step"], 0)
            if micro_step >= accumulate:
                raise OptimizerError(f"micro_step {micro_step} is not below accumulate {accumulate}")
            return (
                _clip_norm(me, saved["clip_norm"]),
                accumulate,
                None if saved["no_decay"] is None else _no_decay(me, saved["no_decay"]),
                micro_step,
                {str(k): v for k, v in exempt.items()},
            )
        except (ArgumentError, OptimizerError) as e:
            raise StateMismatchError(f"{me}.set_states: bad options: {e}") from None

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
        if self.no_decay is not None and key not in self._exempt:
            self._decide_exemption(key, name, param)
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


def _clip_norm(owner: str, value: Any) -> float | None:
    """``clip_norm`` checked: None (no clipping) or a positive finite number."""
    return None if value is None else _real(owner, "clip_norm", value, 0.0, low_open=True)


def _no_decay(owner: str, rule: Any) -> Any:
    """``no_decay`` checked: None, a predicate ``(name, param) -> bool``, or name patterns
    (``fnmatch`` globs such as ``"*.b"``; one string is one pattern) kept as a tuple."""
    if rule is None or callable(rule):
        return rule
    patterns = (rule,) if isinstance(rule, str) else rule
    try:
        patterns = tuple(patterns)
    except TypeError:
        patterns = None
    if patterns is None or not all(isinstance(pat, str) for pat in patterns):
        requirement = "be None, a predicate (name, param) -> bool or name patterns"
        raise _args.bad(owner, "no_decay", requirement, rule)
    return patterns


def biases_and_norms(name: str, param: Tensor) -> bool:
    """A ``no_decay`` predicate: exempt every param of fewer than two dimensions (biases, the
    scales and shifts of norm layers), the usual rule for training transformers."""
    return len(_args.tensor("biases_and_norms", "param", param).shape) < 2

"""``Layer``: lazily built, named by attribute path, with params and states kept apart.

Assigning a ``Layer`` or a ``Tensor`` to an attribute registers it under that name. A tensor
that ``stores_grad`` is a trainable parameter; any other tensor is a state (BatchNorm's running
statistics). Names are dot-separated attribute paths from the top-level model, which adds no
prefix: ``conv1.W``, ``blk1.conv1.W``, ``bn1.running_mean``. Attributes whose names start with
``_`` are never registered.

A layer creates its parameters in ``initialize(*inputs)``, called once with the first inputs
before ``forward``: shapes are learnt from the data (Keras's ``build``, SINGA's ``initialize``).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterator, Mapping
from typing import Any

from singa_lite.errors import ArgumentError, ShapeError, StateMismatchError
from singa_lite.layer._args import check_inputs
from singa_lite.tensor import Tensor

output_hook: Any = None
"""Called as ``output_hook(layer, output)`` after each layer's forward (``Model.summary`` uses it)."""


class Layer:
    """Base class of layers and models. Subclasses define ``initialize`` and ``forward``."""

    sep = "."
    _top_level = False  # Models set this: they are never adopted as sub-layers
    _adopter: Layer | None
    _layers: dict[str, Layer]
    _params: dict[str, Tensor]
    _states: dict[str, Tensor]
    _initialized: bool
    _parent: Layer | None
    name: str | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "forward" in cls.__dict__:
            cls.forward = _initializing(cls.__dict__["forward"])  # type: ignore[method-assign]

    def __init__(self) -> None:
        object.__setattr__(self, "_layers", {})
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_states", {})
        object.__setattr__(self, "_initialized", False)
        object.__setattr__(self, "_parent", None)
        object.__setattr__(self, "_adopter", None)  # the layer that adopted it from a closure
        object.__setattr__(self, "name", None)

    # -- registration -----------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if "_layers" not in self.__dict__:
            # Plain values may come first (SINGA's ResNet sets ``self.inplanes`` before calling
            # ``super().__init__()``); layers and tensors need the registries.
            if isinstance(value, (Layer, Tensor)):
                raise ArgumentError(
                    f"{type(self).__name__}.__init__ must call super().__init__() before assigning "
                    f"a {type(value).__name__} to self.{name}"
                )
            object.__setattr__(self, name, value)
            return
        if not name.startswith("_"):
            self._unregister(name)
            if isinstance(value, Layer):
                self._attach(name, value)
            elif isinstance(value, Tensor):
                (self._params if value.stores_grad else self._states)[name] = value
                value.name = self._prefix() + name
            elif isinstance(value, types.FunctionType) and value.__closure__:
                self._adopt_closure(name, value)
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._unregister(name)
        object.__delattr__(self, name)

    def _attach(self, name: str, lyr: Layer) -> None:
        # An attribute outranks a closure. If ``lyr`` holds this layer only through a closure
        # adoption (below) on the way down, that adoption gives way; any other containment
        # would be a cycle, refused before anything changes. Then a ``lyr`` adopted from a
        # closure elsewhere moves here.
        node: Layer | None = self
        while node is not None:
            adopter = getattr(node, "_adopter", None)
            if adopter is not None and (adopter is lyr or lyr._contains(adopter)):
                adopter._release(node)
                break
            node = node._parent
        if lyr is self or lyr._contains(self):
            raise ArgumentError(f"{type(self).__name__}.{name}: a layer cannot contain itself")
        previous = getattr(lyr, "_adopter", None)
        if previous is not None:
            previous._release(lyr)
        self._layers[name] = lyr
        object.__setattr__(lyr, "_parent", self)
        object.__setattr__(lyr, "name", name)
        lyr._rename()

    def _contains(self, other: Layer) -> bool:
        """Whether ``other`` is a layer somewhere below this one."""
        stack, seen = list(self._layers.values()), set()
        while stack:
            lyr = stack.pop()
            if lyr is other:
                return True
            if id(lyr) not in seen:
                seen.add(id(lyr))
                stack.extend(lyr._layers.values())
        return False

    def _release(self, lyr: Layer) -> None:
        """Drop ``lyr``, adopted from a closure, so that it can be registered elsewhere."""
        for key in [k for k, v in self._layers.items() if v is lyr]:
            del self._layers[key]
        object.__setattr__(lyr, "_parent", None)
        object.__setattr__(lyr, "_adopter", None)

    def _unregister(self, name: str) -> None:
        old = self._layers.pop(name, None)
        for registry in (self._params, self._states):
            registry.pop(name, None)
        if old is not None and old._parent is self and all(v is not old for v in self._layers.values()):
            object.__setattr__(old, "_parent", None)  # free to be adopted or attached again
        adopted = [k for k in self._layers if k.startswith(name + self.sep)]
        for key in adopted:
            self._release(self._layers[key])  # layers adopted from a function's closure (below)
        if adopted:  # another function attribute may close over the released layers too
            for attr, value in list(self.__dict__.items()):
                if attr != name and isinstance(value, types.FunctionType) and value.__closure__:
                    self._adopt_closure(attr, value)

    def _adopt_closure(self, name: str, fn: types.FunctionType) -> None:
        """Register the unowned layers a function attribute closes over as ``name.<variable>``.

        SINGA's ResNet builds its shortcut as ``def _downsample(x): return bn(conv(x))`` and
        stores the function: without this its conv and bn would train (the optimizer sees every
        parameter the loss reaches) but never be saved, and their unprefixed names (``W``,
        ``scale``) would collide in the optimizer's slots. Layers that already have an owner
        and models (which are never sub-layers) are left alone.
        """
        for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                lyr = cell.cell_contents
            except ValueError:  # an empty cell: the variable is assigned after the function
                continue
            if (
                isinstance(lyr, Layer)
                and lyr._parent is None
                and lyr is not self
                and not lyr._top_level
                and not lyr._contains(self)
            ):
                self._attach(name + self.sep + var, lyr)
                object.__setattr__(lyr, "_adopter", self)

    def register_layers(self, *layers: Layer) -> None:
        """Register layers held in a list: they are named by position (``0``, ``1``, ...)."""
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        for i, lyr in enumerate(layers):
            setattr(self, str(i), lyr)

    def _prefix(self) -> str:
        """``blk1.conv1.`` for a layer at that path; empty for the top-level model."""
        parts: list[str] = []
        node: Layer | None = self
        while node is not None and node._parent is not None:
            parts.append(str(node.name))
            node = node._parent
        return "".join(p + self.sep for p in reversed(parts))

    def _rename(self) -> None:
        """Give every tensor below this layer its full path (after the layer was attached):
        optimizer slots and checkpoints key on these names."""
        prefix = self._prefix()
        for kind in ("_params", "_states"):
            for path, t in self._walk(kind, prefix):
                t.name = path

    def named_layers(self, prefix: str = "") -> Iterator[tuple[str, Layer]]:
        """Every sub-layer with its path, depth first, in registration order."""
        for name, lyr in self._layers.items():
            path = prefix + name
            yield path, lyr
            yield from lyr.named_layers(path + self.sep)

    def _walk(self, kind: str, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        for name, t in getattr(self, kind).items():
            yield prefix + name, t
        for name, lyr in self._layers.items():
            yield from lyr._walk(kind, prefix + name + self.sep)

    # -- calling ----------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        check_inputs(self, args)
        if not self._initialized:
            _initialize(self, args, kwargs)
        out = self.forward(*args, **kwargs)
        if output_hook is not None:
            output_hook(self, out)
        return out

    def initialize(self, *inputs: Any, **kwargs: Any) -> None:
        """Create parameters from the first inputs' shapes (layers without params skip this)."""

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        raise ArgumentError(f"{type(self).__name__} must define forward to be called")

    # -- params and states ------------------------------------------------------------------
    def get_params(self) -> dict[str, Tensor]:
        """Trainable parameters by path, sorted by name. Refreshes each tensor's ``name``."""
        params = dict(sorted(self._walk("_params")))
        for name, t in params.items():
            t.name = name
        return params

    def get_states(self) -> dict[str, Tensor]:
        """Parameters and other states (running statistics) by path, sorted by name."""
        states = dict(self._walk("_params"))
        states.update(self._walk("_states"))
        for name, t in states.items():
            t.name = name
        return dict(sorted(states.items()))

    def set_params(self, parameters: dict[str, Any]) -> None:
        """Copy values (Tensors or arrays) into the parameters with those names."""
        self._assign(self.get_params(), parameters, "parameter")

    def set_states(self, states: dict[str, Any]) -> None:
        """Copy values into the parameters and states with those names."""
        self._assign(self.get_states(), states, "state")

    def _assign(self, targets: dict[str, Tensor], values: Any, what: str) -> None:
        if not isinstance(values, Mapping):
            raise ArgumentError(
                f"{type(self).__name__}.set_{what}s: expects a dict of name -> Tensor or array, "
                f"got {type(values).__name__}"
            )
        unknown = sorted(set(values) - set(targets))
        if unknown:
            raise StateMismatchError(
                f"{type(self).__name__} has no {what} named {unknown}; expected names: {sorted(targets)}"
                + ("" if targets else " (none yet: call the layer once, or compile the model, first)")
            )
        for name, value in values.items():
            t = targets[name]
            if not hasattr(value, "shape"):
                raise ArgumentError(
                    f"{what} {name!r}: expects a Tensor or an array, got {type(value).__name__}"
                )
            shape = tuple(value.shape)
            if shape != t.shape:
                raise ShapeError(f"{what} {name!r}: value of shape {shape} for a tensor of shape {t.shape}")
            t.copy_from(value)

    # -- checks -----------------------------------------------------------------------------
    def device_check(self, *inputs: Tensor) -> None:
        """Move this layer's tensors, sub-layers' included, to the first input's device."""
        dev = inputs[0].device
        for t in self.get_states().values():
            if t.device != dev:
                t.to_device(dev)

    def dtype_check(self, *inputs: Tensor) -> None:
        """Cast every input in place to the first input's dtype (SINGA's layers call this
        before combining inputs of mixed precision)."""
        if not inputs:
            return
        dt = inputs[0].dtype
        for t in inputs[1:]:
            if t.dtype != dt:
                t.data = t.data.astype(dt)

    def check_ndim(self, x: Tensor, ndim: int, layout: str) -> None:
        if x.ndim() != ndim:
            raise ShapeError(
                f"{self._prefix() or type(self).__name__}: expects a {ndim}-d input "
                f"{layout}, got shape {x.shape}"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _initializing(forward: Any) -> Any:
    """``forward`` that first runs ``initialize`` with its own arguments on an uninitialized layer.

    As SINGA's ``LayerMeta``: a model's ``train_one_batch`` calls ``self.forward`` directly, so
    a model that defines ``initialize`` (SINGA's CharRNN creates its hidden states there) is
    built on that first call even without ``compile``.
    """

    @functools.wraps(forward)
    def wrapper(self: Layer, *args: Any, **kwargs: Any) -> Any:
        if not self._initialized:
            _initialize(self, args, kwargs)
        return forward(self, *args, **kwargs)

    return wrapper


def _initialize(lyr: Layer, args: tuple, kwargs: dict) -> None:
    """``lyr.initialize(*args, **kwargs)``, marked done first: an ``initialize`` that calls
    ``self.forward`` (to learn an output shape) must not start it again. A failure unmarks it."""
    object.__setattr__(lyr, "_initialized", True)
    try:
        lyr.initialize(*args, **kwargs)
    except BaseException:
        object.__setattr__(lyr, "_initialized", False)
        raise

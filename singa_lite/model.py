"""``Model``: a layer that trains, with SINGA's compile / train_one_batch API and graph mode::

    model = MyModel()
    model.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    tx = tensor.Tensor((64, 1, 28, 28)); ty = tensor.Tensor((64,), dtype=tensor.int32)
    model.compile([tx], is_train=True, use_graph=True)
    for xb, yb in batches:
        tx.copy_from_numpy(xb); ty.copy_from_numpy(yb)
        out, loss = model(tx, ty)          # train_one_batch in training mode

Graph mode records the operators of the first training step and the optimizer step it runs;
later calls replay that record on the same placeholder tensors: no Python graph is rebuilt, no
Tensor or Operator objects are created. The results equal eager mode. Python code in
``train_one_batch`` that is not an op (printing, reading values into floats, data-dependent
branches) runs on the first step only; a call whose tensor shapes differ from the recorded ones
runs eagerly. Values read through ``autograd.host_values`` (the ONNX importer reads its shape,
length and index arguments so) are checked: where they differ from the recorded ones, the step
is recorded again.

Before its first replay the record is rewritten where one op does the work of two in fewer
passes over the activations (``singa_lite/graph_fusion.py``): a training BatchNorm and the ReLU
after it become one op, a Linear layer's MatMul and BiasAdd (and a ReLU after them) one Dense
op, and a ReLU before a max pool moves after it. Eager mode, which sees one op at a time,
cannot; the results stay equal to eager mode's, bit for bit.
"""

from __future__ import annotations

import os
import traceback
import warnings
from collections.abc import Sequence
from numbers import Integral
from typing import Any

import numpy as np

from singa_lite import autograd, graph_fusion
from singa_lite.errors import ArgumentError, OptimizerNotSetError
from singa_lite.layer import base as layer_base
from singa_lite.layer.base import Layer
from singa_lite.tensor import Tensor


class Model(Layer):
    """Base class of trainable models; subclasses define ``forward`` and ``train_one_batch``."""

    _top_level = True

    def __init__(self) -> None:
        super().__init__()
        self.training = True
        self.graph_mode = False
        self.sequential = False
        self.optimizer = None
        self._graph: _Graph | None = None
        self._warned_values = False  # graph mode has said that host-read values changed
        self._input_specs: list[tuple[tuple, str]] = []
        self._output_shapes: dict[int, tuple] = {}

    # -- configuration ----------------------------------------------------------------------
    def compile(
        self, inputs: list[Tensor], is_train: bool = True, use_graph: bool = False, sequential: bool = False
    ) -> None:
        """Build every layer from placeholder ``inputs`` and set the training and graph modes.

        The forward pass on the placeholders runs in inference behaviour and records nothing,
        so BatchNorm statistics and RNG streams are untouched.
        """
        if isinstance(inputs, Tensor):
            inputs = [inputs]
        is_list = isinstance(inputs, (list, tuple))
        if not is_list or not all(isinstance(x, Tensor) for x in inputs):
            got = f"a list of {[type(x).__name__ for x in inputs]}" if is_list else type(inputs).__name__
            raise ArgumentError(
                f"{type(self).__name__}.compile: inputs must be Tensors (placeholders), got {got}; "
                "wrap arrays with tensor.from_numpy(...)"
            )
        is_train = _flag(self, "compile", "is_train", is_train)
        use_graph = _flag(self, "compile", "use_graph", use_graph)
        sequential = _flag(self, "compile", "sequential", sequential)
        self._input_specs = [(tuple(x.shape), str(x.dtype)) for x in inputs]
        shapes: dict[int, tuple] = {}

        def hook(lyr: Layer, out: Any) -> None:
            shapes[id(lyr)] = _shapes_of(out)

        old_hook, layer_base.output_hook = layer_base.output_hook, hook
        try:
            with autograd.training_mode(False):
                out = self.forward(*inputs)
        finally:
            layer_base.output_hook = old_hook
        shapes[id(self)] = _shapes_of(out)
        self._output_shapes = shapes
        self.get_states()  # settle every tensor's name from its attribute path
        object.__setattr__(self, "_initialized", True)
        self.train(is_train)
        self.graph(use_graph, sequential)

    def train(self, mode: bool = True) -> None:
        """Training behaviour (graphs recorded, Dropout active, BatchNorm on batch statistics)."""
        self.training = _flag(self, "train", "mode", mode)
        # SINGA's persistent switch: code after model.train() records graphs, as in SINGA.
        autograd.training = self.training

    def eval(self) -> None:
        """Inference behaviour: ``model(x)`` runs ``forward``; nothing is recorded."""
        self.train(False)

    def graph(self, mode: bool = True, sequential: bool = False) -> None:
        """Turn graph mode on or off; any recorded step is dropped.

        ``sequential`` is SINGA's choice between its scheduler and recorded order; replays here
        always run in recorded order, so both values give the same (sequential) execution.
        """
        self.graph_mode = _flag(self, "graph", "mode", mode)
        self.sequential = _flag(self, "graph", "sequential", sequential)
        self._graph = None

    def set_optimizer(self, optimizer: Any) -> None:
        """Use ``optimizer`` (an ``opt.Optimizer`` or ``DistOpt``) for ``self.optimizer(loss)``."""
        self.optimizer = optimizer
        self._graph = None  # a recorded step would go on calling the old optimizer

    @property
    def optimizer(self) -> Any:
        """The optimizer given to ``set_optimizer`` (or assigned, as SINGA's scripts do).

        Reading it before one was set raises ``OptimizerNotSetError`` (an ``AttributeError``
        too, so ``getattr(model, "optimizer", None)`` still answers None) instead of letting
        ``self.optimizer(loss)`` fail inside ``train_one_batch`` as "'NoneType' is not callable".
        """
        opt = self.__dict__.get("_optimizer")
        if opt is None:
            raise OptimizerNotSetError(
                f"{type(self).__name__} has no optimizer: call set_optimizer(...) first, "
                "e.g. model.set_optimizer(opt.SGD(lr=0.1))"
            )
        return opt

    @optimizer.setter
    def optimizer(self, value: Any) -> None:
        # Duck-typed (DistOpt is no Optimizer subclass); a class is refused: opt.SGD, not opt.SGD().
        is_opt = not isinstance(value, type) and callable(getattr(value, "backward_and_update", None))
        if value is not None and not is_opt:
            raise ArgumentError(
                f"{type(self).__name__}: the optimizer must be an opt.Optimizer (or a DistOpt), "
                f"got {type(value).__name__} {value!r:.60}"
            )
        self.__dict__["_optimizer"] = value

    # -- running ----------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.training:
            return self.forward(*args, **kwargs)
        with autograd.training_mode(True):
            if self.graph_mode:
                return self._graph_step(args, kwargs)
            return self.train_one_batch(*args, **kwargs)

    def train_one_batch(self, *args: Any, **kwargs: Any) -> Any:
        raise ArgumentError(
            f"{type(self).__name__} must define train_one_batch to be called in training mode "
            "(or call model.eval() to run forward)"
        )

    def _graph_step(self, args: tuple, kwargs: dict) -> Any:
        # Keyword arguments (SINGA's MLP example passes ``spars=None``) are matched and replayed
        # as trailing positional ones, under their recorded names.
        keys = tuple(kwargs)
        flat = args + tuple(kwargs.values())
        g = self._graph
        if g is not None and not g.params_hold():
            g = self._graph = None  # a param was frozen or unfrozen: record the step again
        if g is not None and g.keys == keys and g.matches(flat):
            try:
                if g.values_hold(flat):
                    return g.replay(flat)
            except _StaleReadError:
                pass
            # Host-read values decided which ops the step runs (an ONNX sequence_lens) and they
            # differ now. A replay stopped at a changed computed value has run the ops before it
            # (a BatchNorm there has updated its statistics once more).
            if not self._warned_values:
                self._warned_values = True
                warnings.warn(
                    "graph mode: the recorded step read values on the host (e.g. an ONNX "
                    "sequence_lens) that differ now; the step is recorded again for each new value",
                    stacklevel=3,
                )
            g = self._graph = None
        if g is not None:
            warnings.warn(
                f"graph mode: this call's inputs {_describe(flat, keys)} differ from the recorded "
                f"{_describe(g.inputs, g.keys)}; running it eagerly",
                stacklevel=3,
            )
            return self.train_one_batch(*args, **kwargs)
        # Record on copies of the tensor arguments: they become the graph's own placeholders,
        # which replays fill in place, so the caller's tensors are never written to and arrays
        # captured inside ops (index tensors, views) see every new batch.
        placeholders = tuple(a.clone() if isinstance(a, Tensor) else a for a in flat)
        n = len(args)
        tape: list[autograd.TapeEntry] = []
        with autograd.recording(tape), autograd.retaining_graph():
            out = self.train_one_batch(*placeholders[:n], **dict(zip(keys, placeholders[n:])))
        if not any(isinstance(entry, autograd.StepCall) for entry in tape):
            warnings.warn(
                "graph mode recorded no optimizer step: train_one_batch should update through "
                "an optimizer (self.optimizer(loss)) for replays to train",
                stacklevel=3,
            )
        # The model's own tensors (states a layer set, as ``self.features = y``) are read outside
        # the tape as its outputs are: fusion leaves them to be made again each replay.
        held = list(self.get_states().values())
        self._graph = _Graph(placeholders, tape, out, keys, list(self.get_params().values()), held)
        return out

    # -- checkpoints (the format lives in singa_lite.checkpoint; models never touch files) ---
    def save_states(self, fpath: Any, aux_states: dict | None = None, blocking: bool = True) -> Any:
        """Write every state needed to resume to one HDF5 file (see ``singa_lite.checkpoint``).

        Params, layer states, the optimizer (counters, schedule, slots), RNG states, the
        placeholder input specs and ``aux_states``. With ``blocking=False`` the states are
        snapshotted to host memory and written on a background thread; the returned handle's
        ``wait()`` re-raises any write error.
        """
        from singa_lite import checkpoint

        return checkpoint.save_model_states(self, fpath, aux_states or {}, blocking=blocking)

    def load_states(self, fpath: Any, strict: bool = True) -> dict:
        """Restore what ``save_states`` wrote; returns the aux states.

        ``strict=True`` raises one ``StateMismatchError`` listing missing, unexpected and
        mis-shaped keys; ``strict=False`` loads what matches and puts that report under the
        returned dict's ``"__report__"`` key.
        """
        from singa_lite import checkpoint

        return checkpoint.load_model_states(self, fpath, strict=strict)

    def to_onnx(
        self,
        inputs: list[Tensor] | None = None,
        model_name: str | None = None,
        opset: int | None = None,
        input_names: list[str] | None = None,
        output_names: list[str] | None = None,
    ) -> Any:
        """This model as an ONNX model: ``forward`` traced on ``inputs`` (default: the compile
        placeholders) in inference behaviour; params and states become named initializers."""
        from singa_lite.sonnx.exporter import export_model

        return export_model(self, inputs, model_name, opset, input_names, output_names)

    # -- inspection -------------------------------------------------------------------------
    def summary(self, print_fn: Any = print) -> str:
        """A table of layers, output shapes (known after ``compile``) and parameter counts."""
        rows = [("layer", "type", "output shape", "params")]
        total = 0
        for path, lyr in self.named_layers():
            n = sum(t.size() for t in lyr._params.values())
            total += n
            rows.append((path, type(lyr).__name__, str(self._output_shapes.get(id(lyr), "?")), f"{n:,}"))
        own = sum(t.size() for t in self._params.values())
        if own:
            rows.append(("(model)", type(self).__name__, "", f"{own:,}"))
            total += own
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        line = "  ".join("-" * w for w in widths)
        fmt = [
            f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]:>{widths[3]}}"
            for r in rows
        ]
        text = "\n".join([fmt[0], line, *fmt[1:], line, f"total params: {total:,}"])
        print_fn(text)
        return text


class _StaleReadError(Exception):
    """A graph-mode replay reached a host-read value that differs from the recorded one."""


class _Graph:
    """One recorded training step: forward ops in call order and the update steps."""

    def __init__(
        self,
        inputs: tuple,
        tape: list[autograd.TapeEntry],
        out: Any,
        keys: tuple = (),
        params: Sequence = (),
        held: Sequence = (),
    ) -> None:
        self.inputs = inputs  # positional arguments, then the values of the keyword ones
        self.keys = keys  # the keyword arguments' names
        self.out = out
        # Which params train decides which ops were recorded: freezing or unfreezing one
        # after recording means recording again.
        self.param_flags = [(p, p.requires_grad, p.stores_grad) for p in params]
        # Values the step read on the host (autograd.host_values) decided what was recorded:
        # a replay holds only for the same values. An input's are checked before replaying;
        # a tensor the step computes (a shape, mostly) is checked where the replay has made it
        # again (``_StaleReadError``). Constants and params need no check.
        reads = [e for e in tape if isinstance(e, autograd.HostRead)]
        computed = {id(o) for e in tape if isinstance(e, autograd.OpCall) for o in e.outputs}
        index = {id(a): i for i, a in enumerate(inputs) if isinstance(a, Tensor)}
        self.value_guards = [(index[id(e.tensor)], e.values) for e in reads if id(e.tensor) in index]
        self.tape = [e for e in tape if not isinstance(e, autograd.HostRead) or id(e.tensor) in computed]
        self.tape = graph_fusion.fuse(self.tape, (out, held))  # op pairs one op runs faster
        # CUDA-graph capture (see _try_capture): the optimizers whose steps were recorded.
        steps = [e for e in tape if isinstance(e, autograd.StepCall)]
        self.optimizers = list({id(o): o for e in steps for o in [_owner(e.fn)] if o}.values())
        self.plan: list[tuple] | None = None  # the tape as a replay runs it (_make_plan)
        self.replays = 0
        self.cuda_graph: Any = None
        self.capture_refusal: str | None = None
        self._failed: Any = None

    def values_hold(self, args: tuple) -> bool:
        """Whether the inputs' host values the recorded step read are the same in ``args``."""
        return all(np.array_equal(np.asarray(args[i]), v) for i, v in self.value_guards)

    def params_hold(self) -> bool:
        return all(p.requires_grad == r and p.stores_grad == s for p, r, s in self.param_flags)

    def matches(self, args: tuple) -> bool:
        if len(args) != len(self.inputs):
            return False
        for a, r in zip(args, self.inputs):
            if isinstance(r, Tensor):
                if (
                    not isinstance(a, Tensor)
                    or a.shape != r.shape
                    or a.dtype != r.dtype
                    or a.device != r.device
                ):
                    return False
            elif not _same_arg(a, r):
                return False
        return True

    def replay(self, args: tuple) -> Any:
        for a, r in zip(args, self.inputs):
            if isinstance(r, Tensor):
                r.data[...] = a.data
        self.replays += 1
        if self.cuda_graph is None and self.replays >= _CAPTURE_AFTER and self.capture_refusal is None:
            self._try_capture()
        if self.cuda_graph is not None:
            self.cuda_graph.launch()
            return self.out
        self._run_tape()
        return self.out

    def _try_capture(self) -> None:
        """Capture the step into a CUDA graph (on a CuPy device), or note once why not."""
        reason = self._capture_blocker()
        if reason is None:
            from singa_lite.backend.cuda_graph import StepGraph

            dev = next(a.device for a in self.inputs if isinstance(a, Tensor))
            g = StepGraph(dev.xp)
            rngs = [d.rng for d in {a.device for a in self.inputs if isinstance(a, Tensor)}]
            counters = [(r, "counter") for r in rngs] + [(o, "step_counter") for o in self.optimizers]
            for r in rngs:
                r._capture_start = r.counter
            try:
                g.capture(self._run_tape, counters)
                self.cuda_graph = g
                return
            except Exception as e:  # any failure means: replay without a graph
                self._failed = g  # its memory may back arrays the failed capture made
                reason = f"{type(e).__name__}: {e}{_raised_at(e)}"
            finally:
                for r in rngs:
                    del r._capture_start
        self.capture_refusal = reason
        if reason != "":
            warnings.warn(
                f"graph mode: the step runs without a CUDA graph ({reason}); it is replayed op by op",
                stacklevel=4,
            )

    def _capture_blocker(self) -> str | None:
        """Why this step is not captured ("" when that needs no saying: not on a GPU, or
        turned off by SINGA_LITE_CUDA_GRAPH=0); None when it can be tried."""
        devices = {a.device for a in self.inputs if isinstance(a, Tensor)}
        if len(devices) != 1 or next(iter(devices)).backend.name != "cupy":
            return ""
        if os.environ.get("SINGA_LITE_CUDA_GRAPH", "1") == "0":
            return ""
        if self.value_guards or any(isinstance(e, autograd.HostRead) for e in self.tape):
            return "the step reads tensor values on the host"
        if not all(hasattr(r, "counter") for r in (d.rng for d in devices)):
            return "the device's generator has no counter"
        return None

    def _make_plan(self) -> list[tuple]:
        """The tape as what a replay runs, decided once: ``(0, op.forward_arrays, inputs,
        output)`` for an op with one output (most of them), ``(1, op.forward_arrays, inputs,
        outputs)`` for one with several, ``(2, step function, args, None)`` for an update step
        and ``(3, tensor, recorded values, None)`` for a host read to check."""
        plan: list[tuple] = []
        for entry in self.tape:
            if isinstance(entry, autograd.OpCall):
                op, xs, outs = entry
                if len(outs) == 1:
                    plan.append((0, op.forward_arrays, tuple(xs), outs[0]))
                else:
                    plan.append((1, op.forward_arrays, tuple(xs), tuple(outs)))
            elif isinstance(entry, autograd.StepCall):
                plan.append((2, entry.fn, entry.args, None))
            else:
                plan.append((3, entry.tensor, entry.values, None))
        return plan

    def _run_tape(self) -> None:
        plan = self.plan
        if plan is None:
            plan = self.plan = self._make_plan()
        with autograd.retaining_graph():
            for kind, fn, xs, outs in plan:
                if kind == 0:
                    outs.data = fn([x.data for x in xs])[0]
                elif kind == 1:
                    for o, y in zip(outs, fn([x.data for x in xs])):
                        o.data = y
                elif kind == 2:
                    fn(*xs)
                elif not np.array_equal(np.asarray(fn), xs):
                    raise _StaleReadError


_CAPTURE_AFTER = 2
"""Replays run op by op before a capture: the first ones create optimizer slots and
momentum buffers, which a captured step must find already made."""


def _owner(fn: Any) -> Any:
    """The optimizer a recorded update step belongs to (its ``step_counter`` advances)."""
    owner = getattr(fn, "__self__", None)
    return owner if hasattr(owner, "step_counter") else None


def _flag(model: Model, method: str, name: str, value: Any) -> bool:
    """``value`` as a bool: a bool, a NumPy bool, the integer 0 or 1, or the string ``'True'``
    or ``'False'`` (any case: SINGA's example scripts pass argparse strings, as in
    ``compile(..., use_graph=args.graph)``). Anything else (``"yes"``, which ``bool()`` would
    take as True) is an ``ArgumentError``."""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, Integral) and value in (0, 1)):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ArgumentError(f"{type(model).__name__}.{method}: {name} must be True or False, got {value!r}")


def _same_arg(a: Any, b: Any) -> bool:
    """Whether a non-tensor argument equals the recorded one (arrays and odd types: identity)."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # e.g. arrays, whose == is elementwise: replay only the very same object
        return False


def _shapes_of(out: Any) -> Any:
    if isinstance(out, Tensor):
        return tuple(out.shape)
    if isinstance(out, (list, tuple)):
        return tuple(_shapes_of(o) for o in out)
    return None


def _describe(args: tuple, keys: tuple = ()) -> str:
    names = [""] * (len(args) - len(keys)) + [k + "=" for k in keys]
    return (
        "("
        + ", ".join(n + (str(a.shape) if isinstance(a, Tensor) else repr(a)) for n, a in zip(names, args))
        + ")"
    )


def _raised_at(e: BaseException) -> str:
    """`` (at ops/attention.py:228 backward)``: the innermost singa_lite frame that raised ``e``,
    so that a refused capture names the operation to fix; empty when none is ours."""
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if "/singa_lite/" in f.filename.replace(os.sep, "/")]
    if not ours:
        return ""
    f = ours[-1]
    return f" (at {f.filename.replace(os.sep, '/').rsplit('/singa_lite/', 1)[-1]}:{f.lineno} {f.name})"


__all__ = ["Model"]

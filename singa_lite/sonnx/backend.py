"""ONNX import: ``prepare(model)`` -> ``SingaRep``, and ``SingaBackend`` for ``onnx.backend.test``.

``prepare`` checks the model, resolves a handler for every node (see
:mod:`singa_lite.sonnx.handlers`), turns initializers into tensors on the device and folds every
node whose inputs are all constants (weight re-layouts, shape arithmetic on constants) once.
``SingaRep.run`` then runs the remaining nodes eagerly, in graph order, on singa_lite ops.

>>> import numpy as np
>>> from onnx import helper, TensorProto
>>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
>>> rep = prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
>>> rep.run([np.array([-1.0, 2.0], np.float32)])[0].numpy().tolist()
[0.0, 2.0]
"""

from __future__ import annotations

import copy
import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, numpy_helper
from onnx.backend.base import Backend, BackendRep

from singa_lite import autograd
from singa_lite import device as _device
from singa_lite.errors import OnnxError, SingaLiteError, UnsupportedOperatorError
from singa_lite.sonnx.handlers import HANDLERS, MAX_OPSET
from singa_lite.sonnx.handlers_base import Node, storage_dtype
from singa_lite.sonnx.handlers_nn import PackedConv
from singa_lite.tensor import Tensor, from_numpy

_DEFAULT_DOMAINS = ("", "ai.onnx")


def load_model(model: Any) -> ModelProto:
    """``model`` (a ``ModelProto``, serialized bytes, or a file path) as a checked ``ModelProto``.

    Damaged bytes, truncated files and models that fail ``onnx.checker`` raise ``OnnxError``.
    """
    if isinstance(model, ModelProto):
        proto = model
    else:
        if isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            try:
                # Only regular files: opening a FIFO would block forever.
                if not stat.S_ISREG(os.stat(path).st_mode):
                    raise OnnxError(f"ONNX model {path!r} is not a regular file")
                with open(path, "rb") as f:
                    model = f.read()
            except OSError as e:
                raise OnnxError(f"cannot read ONNX model {path!r}: {e}") from e
        if not isinstance(model, (bytes, bytearray, memoryview)):
            raise TypeError(f"prepare: expected a ModelProto, bytes or a path, got {type(model).__name__}")
        try:
            proto = onnx.load_model_from_string(bytes(model))
        except Exception as e:  # protobuf raises DecodeError, and others on odd bytes
            raise OnnxError(f"not a valid ONNX model (damaged or truncated?): {e}") from e
    try:
        onnx.checker.check_model(proto)
    except Exception as e:  # ValidationError, or protobuf errors on half-parsed messages
        raise OnnxError(f"the ONNX model fails onnx.checker: {str(e).splitlines()[0]}") from e
    return proto


def model_opset(proto: ModelProto) -> int:
    """The model's default-domain opset, checked against what singa_lite accepts."""
    versions = [o.version for o in proto.opset_import if o.domain in _DEFAULT_DOMAINS]
    if not versions:
        raise OnnxError("the ONNX model imports no default-domain (ai.onnx) opset")
    opset = versions[0]
    if opset > MAX_OPSET:
        raise OnnxError(f"opset {opset} is newer than {MAX_OPSET}, the newest the installed onnx defines")
    return opset


def _legacy_semantics(node: Node) -> str | None:
    """What an old operator version asks that the handlers (written for opset 7 on) do not do."""
    if node.attr("broadcast") and "axis" in node.attrs:
        return "broadcasting with an axis attribute (before opset 7)"
    if node.attr("spatial", 1) == 0:
        return "per-activation batch normalisation (spatial=0)"
    return None


def _elem_dtype(value_info: Any) -> np.dtype | None:
    code = value_info.type.tensor_type.elem_type
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code)) if code else None
    except Exception:  # exotic element types (float8, int4, ...) have no NumPy equivalent
        return None


class Program:
    """A checked ONNX graph, its constants folded, ready to run on singa_lite ops.

    ``held`` names initializers that must stay variables (a ``SONNXModel``'s params and
    states): they are neither turned into constants nor folded into their consumers.
    """

    def __init__(self, proto: ModelProto, device: Any = None, held: Iterable[str] = ()) -> None:
        self.device = device if device is not None else _device.get_default_device()
        self.opset = model_opset(proto)
        graph = proto.graph
        held = set(held)
        self.initializers = {t.name: t for t in graph.initializer}
        self.inputs = [v.name for v in graph.input if v.name not in self.initializers]
        for v in graph.input:
            if v.type.WhichOneof("value") not in (None, "tensor_type"):
                raise OnnxError(
                    f"graph input {v.name!r} is a {v.type.WhichOneof('value')}; "
                    "singa_lite runs tensor graphs only"
                )
        self.outputs = [v.name for v in graph.output]
        self.output_types = [_elem_dtype(v) for v in graph.output]
        self.constants: dict[str, Tensor] = {
            name: self.tensor(numpy_helper.to_array(t), name)
            for name, t in self.initializers.items()
            if name not in held
        }
        # Constant nodes are folded and not counted as layers (SINGA's last_layers rule).
        self.nodes: list[Node] = []
        self.handlers: list[Callable] = []
        known = set(self.inputs) | set(self.initializers)
        for proto_node in graph.node:
            node = Node(proto_node, self.opset)
            self._check(proto_node, node, known)
            known.update(node.outputs)
            if node.op == "Constant":
                self.constants[node.outputs[0]] = self.tensor(HANDLERS["Constant"](node), node.outputs[0])
                continue
            self.nodes.append(node)
            self.handlers.append(HANDLERS[node.op])
        self.folded = [self._fold(node, fn) for node, fn in zip(self.nodes, self.handlers)]
        self.last_use = self._last_uses()

    def tensor(self, arr: Any, name: str) -> Tensor:
        """A constant or input from the model (array or TensorProto) on this program's device;
        narrow integer types are widened to int64 (see ``handlers_base.storage_dtype``)."""
        if isinstance(arr, onnx.TensorProto):
            arr = numpy_helper.to_array(arr)
        arr = np.asarray(arr)
        try:
            dtype = storage_dtype(arr.dtype)
        except SingaLiteError:
            raise OnnxError(
                f"tensor {name!r} has element type {arr.dtype}, which singa_lite does not support"
            ) from None
        return from_numpy(arr.astype(dtype, copy=False), self.device)

    def _check(self, proto_node: Any, node: Node, known: set) -> None:
        if proto_node.domain not in _DEFAULT_DOMAINS or node.op not in HANDLERS:
            domain = proto_node.domain or "ai.onnx"
            raise UnsupportedOperatorError(
                f"ONNX operator {domain}::{node.op} (opset {self.opset}) of node {node.name!r} "
                "has no singa_lite handler; see docs/onnx.md for the supported operators"
            )
        legacy = _legacy_semantics(node)
        if legacy:
            raise UnsupportedOperatorError(
                f"ONNX operator {node.op} (opset {self.opset}) of node {node.name!r}: {legacy} is not "
                "supported; convert the model to a newer opset with onnx.version_converter"
            )
        missing = [i for i in node.inputs if i and i not in known]
        if missing:
            raise OnnxError(f"{node}: inputs {missing} are produced by no earlier node, input or initializer")

    def _fold(self, node: Node, fn: Callable) -> bool:
        """Run ``node`` now if every input is a constant; its outputs become constants."""
        if node.op == "Dropout" or not all(i == "" or i in self.constants for i in node.inputs):
            return False
        # An RNG-free node of constants gives the same result at every run: compute it once.
        with autograd.no_grad():
            outs = self._call(node, fn, [self.constants.get(i) if i else None for i in node.inputs])
        for name, t in zip(node.outputs, outs):
            if name:
                self.constants[name] = t
        return True

    def _last_uses(self) -> dict[str, int]:
        last = {}
        for k, node in enumerate(self.nodes):
            for name in node.inputs:
                last[name] = k
        return last

    @staticmethod
    def _call(node: Node, fn: Callable, args: list) -> list[Tensor]:
        try:
            out = fn(node, *args)
        except SingaLiteError as e:  # keep the type (ShapeError, DTypeError...), name the node
            raise type(e)(f"{e} (while running ONNX {node})") from e
        except Exception as e:  # a raw NumPy/Python error: name the node instead of crashing
            raise OnnxError(f"{node}: {type(e).__name__}: {e}") from e
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def run(
        self,
        feeds: Mapping[str, Tensor],
        variables: Mapping[str, Tensor] | None = None,
        last_layers: int = -1,
        aux_output: Sequence[str] = (),
    ) -> list[Tensor]:
        """Run the graph on ``feeds`` (graph inputs by name) and ``variables`` (held initializers).

        ``last_layers=-1`` runs every node and returns the graph outputs; ``-k`` drops the last
        ``k - 1`` nodes and returns the outputs of the last node kept. ``aux_output`` names
        intermediate tensors to return as well.
        """
        n = len(self.nodes)
        if not isinstance(last_layers, int) or not -max(n, 1) <= last_layers <= -1:
            raise ValueError(f"last_layers must be an int in [-{n}, -1], got {last_layers!r}")
        stop = n + last_layers + 1
        env: dict[str, Tensor] = dict(self.constants)
        env.update(variables or {})
        env.update(feeds)
        keep = set(self.outputs) | set(aux_output)
        if stop < n:
            keep.update(self.nodes[stop - 1].outputs)
        for k in range(stop):
            if self.folded[k]:
                continue
            node = self.nodes[k]
            outs = self._call(node, self.handlers[k], [env[i] if i else None for i in node.inputs])
            for name, t in zip(node.outputs, outs):
                if name:
                    env[name] = t
            for name in node.inputs:  # free intermediates as soon as their last reader has run
                if self.last_use.get(name) == k and name not in keep and name not in self.constants:
                    env.pop(name, None)
        names = self.outputs if stop == n else [o for o in self.nodes[stop - 1].outputs if o]
        missing = [a for a in aux_output if a not in env]
        if missing:
            raise OnnxError(f"aux_output {missing} are not tensors computed before the cut")
        return [env[name] for name in [*names, *aux_output]]

    def fused(self) -> Program:
        """A copy of this program for inference only, with chains of per-channel affine nodes
        folded (see ``_AffineChains``). The copy shares this program's constants."""
        chains = _AffineChains(self)
        out = copy.copy(self)
        out.constants = dict(self.constants)
        out.nodes, out.handlers, out.folded = [], [], []
        for k, (node, fn, folded) in enumerate(zip(self.nodes, self.handlers, self.folded)):
            if k in chains.dropped:
                continue
            node, fn = chains.replaced.get(k, (node, fn))
            out.nodes.append(node)
            out.handlers.append(fn)
            out.folded.append(folded)
        out.constants.update(chains.constants)
        out._pack_convs()
        _InPlace.rewrite(out)
        out.last_use = out._last_uses()
        return out

    def _pack_convs(self) -> None:
        """Give each unfolded Conv with a constant float weight and bias a ``PackedConv``
        handler (weight and bias as one matrix, made here once)."""
        for k, node in enumerate(self.nodes):
            if self.folded[k] or self.handlers[k] is not HANDLERS["Conv"] or len(node.inputs) < 3:
                continue
            W, B = (self.constants.get(name) for name in node.inputs[1:3])
            if (
                W is not None
                and B is not None
                and W.ndim() == 4
                and W.dtype == B.dtype
                and W.dtype.kind == "f"
            ):
                self.handlers[k] = PackedConv(W, B, node.attr("group", 1))

    def feeds(self, inputs: Any) -> dict[str, Tensor]:
        """Graph inputs by name from a list (in graph order), a dict, or one array/tensor."""
        if isinstance(inputs, Mapping):
            items = dict(inputs)
            unknown = set(items) - set(self.inputs)
            if unknown:
                raise OnnxError(f"unknown inputs {sorted(unknown)}; the graph's inputs are {self.inputs}")
        else:
            if isinstance(inputs, (Tensor, np.ndarray)):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(self.inputs):
                raise OnnxError(
                    f"{len(inputs)} inputs given for the graph's {len(self.inputs)}: {self.inputs}"
                )
            items = dict(zip(self.inputs, inputs))
        absent = [name for name in self.inputs if name not in items]
        if absent:
            raise OnnxError(f"missing graph inputs {absent}")
        return {name: self._as_tensor(v, name) for name, v in items.items()}

    def _as_tensor(self, v: Any, name: str) -> Tensor:
        if isinstance(v, Tensor):
            return v if v.device == self.device else v.clone().to_device(self.device)
        return self.tensor(v, name)


class _AffineChains:
    """Chains of per-channel affine nodes found in a program, and what replaces them.

    An inference-mode BatchNormalization is ``y = a * x + c`` per channel, and so is a Mul or
    Add by a constant that varies along the channel axis only (caffe2 exports put one of each
    after every BN). A chain of them right after a Conv with constant weights is folded into
    the Conv: ``W' = a W`` and ``B' = a B + c`` (resnet, inception, shufflenet: one node left
    of each Conv + BN [+ Mul + Add]). A chain after anything else (densenet's pre-activation
    BNs) becomes one ``x * a + c`` node. Only ``SingaRep``'s inference program is rewritten: a
    ``SONNXModel`` keeps its BNs and weights separate and trainable.

    ``dropped`` are the indices of nodes to remove; ``replaced`` maps a node index to its new
    ``(node, handler)``; ``constants`` are the folded weights by their new names.
    """

    def __init__(self, program: Program) -> None:
        self.program = program
        self.dropped: set[int] = set()
        self.replaced: dict[int, tuple[Node, Callable]] = {}
        self.constants: dict[str, Tensor] = {}
        self.readers: dict[str, list[int]] = {}
        for k, node in enumerate(program.nodes):
            for name in node.inputs:
                self.readers.setdefault(name, []).append(k)
        for k, node in enumerate(program.nodes):
            if not program.folded[k] and k not in self.dropped:
                self._fold_from(k, node)

    def _const(self, name: str) -> np.ndarray | None:
        t = self.program.constants.get(name) if name else None
        return None if t is None else t.numpy()

    def _fold_from(self, k: int, node: Node) -> None:
        """Fold the chain of affine nodes after node ``k``, a Conv or a BatchNormalization."""
        W = self._const(node.inputs[1]) if node.op == "Conv" and len(node.inputs) > 1 else None
        if W is not None and W.dtype.kind == "f" and W.ndim == 4:
            if len(node.inputs) > 2 and node.inputs[2] and self._const(node.inputs[2]) is None:
                return
            a, c, chain = np.ones(W.shape[0]), np.zeros(W.shape[0]), []
        elif node.op == "BatchNormalization" and (step := self._bn(node, None)) is not None:
            (a, c), chain, W = step, [k], None
        else:
            return
        while True:
            out = self.program.nodes[chain[-1] if chain else k].outputs
            readers = self.readers.get(out[0], []) if len(out) == 1 else []
            if len(readers) != 1 or out[0] in self.program.outputs:
                break
            step = self._step(self.program.nodes[readers[0]], out[0], len(a), 4)
            if step is None:
                break
            a, c = a * step[0], c * step[0] + step[1]
            chain.append(readers[0])
        if W is not None and chain:
            self._into_conv(k, node, W, a, c, chain)
        elif chain:
            self._as_affine(chain, a, c)

    def _step(self, node: Node, x: str, channels: int, rank: int) -> tuple | None:
        """``(a, c)`` (float64, per channel) if ``node`` is ``a * x + c`` of input ``x``."""
        if node.op == "BatchNormalization":
            step = self._bn(node, x)
            return step if step is not None and len(step[0]) == channels else None
        if node.op not in ("Mul", "Add") or len(node.inputs) != 2 or node.inputs.count(x) != 1:
            return None
        other = self._const(node.inputs[1 - node.inputs.index(x)])
        v = None if other is None else _per_channel(other, channels, rank)
        if v is None:
            return None
        return (v, np.zeros(channels)) if node.op == "Mul" else (np.ones(channels), v)

    def _bn(self, node: Node, x: str | None) -> tuple | None:
        if node.attr("training_mode", 0) or node.n_outputs != 1 or (x is not None and node.inputs[0] != x):
            return None
        params = [self._const(name) for name in node.inputs[1:5]]
        if len(params) != 4 or any(p is None or p.ndim != 1 or p.dtype.kind != "f" for p in params):
            return None
        scale, bias, mean, var = (p.astype(np.float64) for p in params)  # type: ignore[union-attr]
        a = scale / np.sqrt(var + node.attr("epsilon", 1e-5))
        return a, bias - mean * a

    def _into_conv(self, k: int, node: Node, W: np.ndarray, a: Any, c: Any, chain: list[int]) -> None:
        B = self._const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        w_name, b_name = f"{node.outputs[0]}::folded_W", f"{node.outputs[0]}::folded_B"
        folded_W = W.astype(np.float64) * a.reshape(-1, 1, 1, 1)
        folded_B = c if B is None else B.astype(np.float64) * a + c
        self.constants[w_name] = self.program.tensor(folded_W.astype(W.dtype), w_name)
        self.constants[b_name] = self.program.tensor(folded_B.astype(W.dtype), b_name)
        new = copy.copy(node)
        new.inputs = [node.inputs[0], w_name, b_name]
        new.outputs = list(self.program.nodes[chain[-1]].outputs)
        self.replaced[k] = (new, self.program.handlers[k])
        self.dropped.update(chain)

    def _as_affine(self, chain: list[int], a: Any, c: Any) -> None:
        nodes = [self.program.nodes[k] for k in chain]
        first = nodes[0]
        new = copy.copy(first)
        new.inputs = [first.inputs[0]]
        new.outputs = list(nodes[-1].outputs)
        steps = [(n, self.program.handlers[k]) for n, k in zip(nodes, chain)]
        self.replaced[chain[0]] = (new, _AffineHandler(self.program, steps, a, c))
        self.dropped.update(chain[1:])


def _per_channel(v: np.ndarray, channels: int, rank: int) -> np.ndarray | None:
    """``v`` as ``(channels,)`` float64 if, broadcast against an ``(N, C, ...)`` array of
    ``rank`` dims, it varies along the channel axis only (and so leaves the shape as it is)."""
    if v.ndim > rank or v.dtype.kind != "f":
        return None
    shape = (1,) * (rank - v.ndim) + v.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(v.reshape(-1).astype(np.float64), (channels,)).copy()


class _AffineHandler:
    """``y = x * a + c`` per channel: a folded chain of BatchNormalization/Mul/Add nodes.

    The fold assumed a 4-D ``(N, C, H, W)`` input, which the graph does not promise: any other
    input runs the original nodes one after another.
    """

    def __init__(self, program: Program, steps: list[tuple[Node, Callable]], a: Any, c: Any) -> None:
        self.program, self.steps, self.channels = program, steps, len(a)
        dtype = program.constants[steps[0][0].inputs[1]].dtype
        self.a = program.tensor(a.astype(dtype).reshape(1, -1, 1, 1), "affine_scale").data
        self.c = program.tensor(c.astype(dtype).reshape(1, -1, 1, 1), "affine_shift").data

    def __call__(self, node: Node, x: Tensor) -> Tensor:
        if x.ndim() != 4 or x.shape[1] != self.channels or x.dtype != self.a.dtype:
            return self._unfused(x)
        y = x.data * self.a
        y += self.c
        return Tensor._wrap(y, x.device, False, None, 0)

    def _unfused(self, x: Tensor) -> Tensor:
        env, value = self.program.constants, x
        for node, fn in self.steps:
            args = [value if i == self._input_of(node) else env.get(i) if i else None for i in node.inputs]
            value = self.program._call(node, fn, args)[0]
        return value

    def _input_of(self, node: Node) -> str:
        first = self.steps[0][0]
        if node is first:
            return first.inputs[0]
        prev = self.steps[[n for n, _ in self.steps].index(node) - 1][0]
        return prev.outputs[0]


class _InPlace:
    """Relu and residual Add/Sum nodes of an inference program that may overwrite an input.

    A Conv (or a folded affine chain) returns a new array that nothing else holds; if its one
    reader is a Relu, or a two-input Add/Sum of equal shapes, that reader can write into it
    instead of allocating (a fresh multi-megabyte array costs its page faults on every run:
    measured 1.5-2x the in-place pass). An in-place node's output is its input's array, so it is
    a fresh producer in turn (resnet's Conv -> Sum -> Relu). Graph outputs are never written.
    """

    def __init__(self, fn: Callable, op: str, slot: int) -> None:
        self.fn, self.op, self.slot = fn, op, slot

    @classmethod
    def rewrite(cls, program: Program) -> None:
        """Swap in in-place handlers where ``program``'s reader counts allow it."""
        readers: dict[str, int] = {}
        for node in program.nodes:
            for name in node.inputs:
                readers[name] = readers.get(name, 0) + 1
        fresh: set[str] = set()  # arrays only their one reader will see
        for k, (node, fn) in enumerate(zip(program.nodes, program.handlers)):
            if program.folded[k] or len(node.outputs) != 1:
                continue
            owned = [
                i
                for i, name in enumerate(node.inputs)
                if name in fresh and readers[name] == 1 and name not in program.outputs
            ]
            if node.op == "Relu" and owned:
                program.handlers[k] = cls(fn, "Relu", 0)
            elif node.op in ("Add", "Sum") and len(node.inputs) == 2 and owned:
                program.handlers[k] = cls(fn, "Add", owned[0])
            elif not (fn is HANDLERS["Conv"] or isinstance(fn, (_AffineHandler, PackedConv))):
                continue
            fresh.add(node.outputs[0])

    def __call__(self, node: Node, *args: Tensor) -> Tensor:
        x = args[self.slot]
        a = x.data
        if a.dtype.kind != "f":
            return self.fn(node, *args)
        xp = x.device.xp
        if self.op == "Relu":
            xp.maximum(a, 0, out=a)
            return x
        other = args[1 - self.slot]
        if other.shape != x.shape or other.dtype != x.dtype:  # broadcasting would change the shape
            return self.fn(node, *args)
        xp.add(a, other.data, out=a)
        return x


class SingaRep(BackendRep):
    """A prepared ONNX model: ``run(inputs, last_layers=-1, aux_output=())`` -> list of Tensors."""

    def __init__(self, program: Program) -> None:
        self.program = program
        # BatchNorms (and per-channel Mul/Add) folded into Convs: the graph run when the whole
        # model is asked for; a cut (last_layers) or aux_output may name a tensor folded away.
        self.inference_program = program.fused()

    @property
    def inputs(self) -> list[str]:
        return list(self.program.inputs)

    @property
    def outputs(self) -> list[str]:
        return list(self.program.outputs)

    # Returns Tensors, as SINGA's SingaRep does; SingaBackend's rep answers with NumPy arrays.
    def run(  # type: ignore[override]
        self, inputs: Any, last_layers: int = -1, aux_output: Sequence[str] = (), **kwargs: Any
    ) -> list[Tensor]:
        """Run the model in inference behaviour (nothing recorded; BatchNorm uses running stats).

        ``inputs``: arrays or Tensors in the order of the graph's inputs, or a dict by name.
        """
        feeds = self.program.feeds(inputs)
        old = autograd.training
        autograd.training = False
        try:
            with autograd.no_grad():
                if last_layers == -1 and not aux_output:
                    return self.inference_program.run(feeds)
                return self.program.run(feeds, None, last_layers, aux_output)
        finally:
            autograd.training = old


class SingaBackend(Backend):
    """``onnx.backend.base.Backend`` over singa_lite, for ``onnx.backend.test.BackendTest``."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> _NumpyRep:  # type: ignore[override]
        return _NumpyRep(prepare(model, _device_for(device)))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:  # type: ignore[override]
        return cls.prepare(model, device).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        if device.upper().startswith("CPU"):
            return True
        try:
            _device.create_cuda_gpu()
        except SingaLiteError:
            return False
        return True


class _NumpyRep(BackendRep):
    """A ``SingaRep`` answering with NumPy arrays, as ``onnx.backend.test`` compares them."""

    def __init__(self, rep: SingaRep) -> None:
        self.rep = rep

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        outs = [t.numpy() for t in self.rep.run(inputs)]
        return tuple(_declared_type(o, v) for o, v in zip(outs, self.rep.program.output_types))


def _declared_type(arr: np.ndarray, declared: np.dtype | None) -> np.ndarray:
    """An int64 output cast back to the narrow integer type the graph declares for it."""
    if declared is not None and arr.dtype == np.int64 and declared.kind in "iu" and declared != arr.dtype:
        return arr.astype(declared)
    return arr


def _device_for(name: str) -> Any:
    return _device.create_cuda_gpu() if name.upper().startswith("CUDA") else _device.create_cpu_device()


def prepare(onnx_model: Any, device: Any = None, **kwargs: Any) -> SingaRep:
    """Check and compile ``onnx_model`` (ModelProto, bytes or path) for ``device``.

    Raises ``UnsupportedOperatorError`` for an operator without a handler and ``OnnxError`` for
    a malformed model.
    """
    return SingaRep(Program(load_model(onnx_model), device))


run_model = SingaBackend.run_model
supports_device = SingaBackend.supports_device

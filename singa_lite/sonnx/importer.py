"""ONNX import: ``prepare(model)`` -> ``SingaRep``, and ``SingaBackend`` for ``onnx.backend.test``.

``prepare`` checks the model, resolves a handler for every node (see
:mod:`singa_lite.sonnx.import_ops`), turns initializers into tensors on the device and folds every
node whose inputs are all constants (weight re-layouts, shape arithmetic on constants) once.
``SingaRep.run`` then runs the remaining nodes eagerly, in graph order, on singa_lite ops,
through a :class:`~singa_lite.sonnx.plan.Plan` made at the first run (slots instead of names,
frees and static checks worked out once); for a whole-graph run it takes a copy rewritten by
the passes of :mod:`~singa_lite.sonnx.fusion` (``prepare(..., optimize=False)`` runs the graph
as written).

The model is untrusted input: it is read by :mod:`~singa_lite.sonnx.reading` (file size,
external data), checked against the operator schemas by :mod:`~singa_lite.sonnx.validate`, and
every node's allocations are checked against :mod:`~singa_lite.sonnx.limits` before they happen.

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

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto
from onnx.backend.base import Backend, BackendRep

from singa_lite import _args, autograd, backend
from singa_lite import device as _device
from singa_lite.errors import DTypeError, OnnxError, ShapeError, SingaLiteError, UnsupportedOperatorError
from singa_lite.sonnx import fusion, validate
from singa_lite.sonnx import limits as _limits
from singa_lite.sonnx.import_ops import HANDLERS, HOST_INPUTS, MAX_OPSET
from singa_lite.sonnx.import_ops.base import (
    HELD_WIDER,
    HostConstants,
    Node,
    proto_array,
    storage_dtype,
    sub_byte_range,
)
from singa_lite.sonnx.plan import Plan
from singa_lite.sonnx.reading import read_model
from singa_lite.tensor import Tensor

_DEFAULT_DOMAINS = ("", "ai.onnx")


def load_model(model: Any, base_dir: Any = None, limits: _limits.Limits | None = None) -> ModelProto:
    """``model`` (a ``ModelProto``, serialized bytes, or a file path) as a checked ``ModelProto``.

    Damaged bytes, truncated files and models that fail ``onnx.checker`` raise ``OnnxError``.
    Externally stored tensors keep their external references here: :func:`reading.read_model`
    also returns their arrays, read safely against the model's directory (or ``base_dir``).
    """
    return read_model(model, base_dir, limits)[0]


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


def value_kind(t: Any, what: str) -> str:
    """What a value of ONNX type ``t`` is inside a program: ``"tensor"`` (a Tensor),
    ``"sequence"`` (a list of Tensors), ``"optional tensor"`` or ``"optional sequence"`` (the
    value, or ``None`` when empty); other types raise ``OnnxError`` naming ``what``."""
    kind = t.WhichOneof("value")
    if kind in (None, "tensor_type"):
        return "tensor"
    inner = t.sequence_type.elem_type if kind == "sequence_type" else t.optional_type.elem_type
    inner_kind = inner.WhichOneof("value")
    if kind == "sequence_type" and inner_kind in (None, "tensor_type"):
        return "sequence"
    if kind == "optional_type" and inner_kind in (None, "tensor_type", "sequence_type"):
        return "optional " + value_kind(inner, what)
    raise OnnxError(
        f"{what} is a {kind} of {inner_kind}; singa_lite holds tensors, sequences of tensors "
        "and optionals of either"
    )


def value_bytes(v: Any) -> int:
    """The bytes a program value holds: a Tensor, a sequence (list) of them, or ``None``."""
    if isinstance(v, Tensor):
        return v.nbytes()
    return sum(x.nbytes() for x in v) if isinstance(v, list) else 0


def _declared_types(proto: ModelProto) -> dict[str, np.dtype]:
    """The element types the graph declares: of its inputs, outputs, value_info, initializers
    and Constant nodes' values (types without a NumPy dtype left out). Where a QuantizeLinear's
    zero point has none of these (an int4 made by a Cast), shape inference is asked."""
    graph = proto.graph
    out = _value_types([*graph.input, *graph.value_info, *graph.output])
    tensors = [(t.name, t) for t in graph.initializer]
    tensors += [(n.output[0], a.t) for n in graph.node if n.op_type == "Constant" and n.output
                for a in n.attribute if a.name == "value" and a.HasField("t")]  # fmt: skip
    for name, t in tensors:
        try:
            out[name] = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
        except Exception:  # a data type onnx does not know: reading the tensor names it
            continue
    zero_points = {n.input[2] for n in graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 2}
    if zero_points - set(out) - {""}:
        try:
            inferred = onnx.shape_inference.infer_shapes(proto).graph.value_info
        except Exception:  # a hint only: the zero point's own dtype is used without it
            inferred = []
        out = {**_value_types(inferred), **out}
    return out


def _value_types(values: Iterable[Any]) -> dict[str, np.dtype]:
    out = {}
    for v in values:
        d = _elem_dtype(v) if v.type.HasField("tensor_type") else None
        if d is not None:
            out[v.name] = d
    return out


def _input_spec(value_info: Any) -> tuple[np.dtype | None, tuple | None]:
    """The declared element type and dims of a graph input: ``None`` where not declared, and
    ``None`` for each symbolic or unknown dim (also a 0, which old exporters wrote for those)."""
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return _elem_dtype(value_info), None
    dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim)
    return _elem_dtype(value_info), dims


def _static_shapes(proto: ModelProto, names: set[str]) -> dict[str, tuple]:
    """The shapes ONNX shape inference gives the tensors ``names`` (0 for an unknown dim), and
    those the graph declares for its inputs (which ``SingaRep.run`` checks); empty where
    inference fails (a model over 2 GB, an operator it does not know). The model's own
    ``value_info`` is left out of the inference (an exporter's may be stale), and put back."""
    if not names:
        return {}
    graph = proto.graph
    declared = list(graph.value_info)
    graph.ClearField("value_info")
    try:
        inferred = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:  # inference is a hint for the fused program only
        return {}
    finally:
        graph.value_info.extend(declared)
    shapes = {}
    for v in [*inferred.input, *inferred.value_info, *inferred.output]:
        t = v.type.tensor_type if v.type.HasField("tensor_type") else None
        if v.name in names and t is not None and t.HasField("shape"):
            shapes[v.name] = tuple(d.dim_value if d.HasField("dim_value") else 0 for d in t.shape.dim)
    return shapes


class Program:
    """A checked ONNX graph, its constants folded, ready to run on singa_lite ops.

    ``held`` names initializers that must stay variables (a ``SONNXModel``'s params and
    states): they are neither turned into constants nor folded into their consumers.
    Constants that handlers read as arguments (shapes, axes, pads...) are read to the host
    here, once (``host_constants``). The bodies of If, Loop and Scan are compiled with their
    nodes, as :class:`~singa_lite.sonnx.subgraph.Subgraph` programs. Values are Tensors, lists
    of Tensors (ONNX sequences) or ``None`` (empty optionals).
    """

    def __init__(
        self,
        proto: ModelProto,
        device: Any = None,
        held: Iterable[str] = (),
        limits: _limits.Limits | None = None,
        external: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self.device = device if device is not None else _device.get_default_device()
        self.limits = _limits.resolve(limits)
        validate.check_model(proto)
        self.opset = model_opset(proto)
        self.domain_opsets = {o.domain or "ai.onnx": o.version for o in proto.opset_import}
        graph = proto.graph
        held = set(held)
        self.initializers = {t.name: t for t in graph.initializer}
        self.inputs = [v.name for v in graph.input if v.name not in self.initializers]
        # tensor, sequence or optional: what run() takes for each input (subgraph.value_kind)
        self.input_kinds = {v.name: value_kind(v.type, f"graph input {v.name!r}") for v in graph.input}
        self.outputs = [v.name for v in graph.output]
        self.output_types = [_elem_dtype(v) for v in graph.output]
        self.input_specs = {v.name: _input_spec(v) for v in graph.input if v.name in self.inputs}
        external = dict(external or {})
        self.constants: dict[str, Tensor] = {
            name: self.tensor(proto_array(t, "initializer", external), name)
            for name, t in self.initializers.items()
            if name not in held
        }
        self.path, self.depth = "", 0  # where a subgraph sits (see subgraph.Subgraph)
        self.declared = _declared_types(proto)
        self._compile(graph.node, set(self.inputs) | set(self.initializers))
        concats = {n.outputs[0] for n in self.nodes if n.op == "Concat"}
        shaped = {n.inputs[0] for n in self.nodes if n.op in ("Shape", "Size") and n.inputs}
        static = _static_shapes(proto, concats | shaped)
        self.concat_shapes = {k: v for k, v in static.items() if k in concats}
        # what fusion.StaticShapes folds: the inferred shapes of what Shape and Size nodes read
        self.shape_inputs = {k: v for k, v in static.items() if k in shaped}

    def _compile(self, proto_nodes: Iterable[Any], known: set[str]) -> None:
        """Check the nodes and resolve their handlers (subgraphs compiled too), fold the
        constant ones; ``known`` names the values visible before the first node."""
        self.folded_bytes = 0  # what the constants folded at prepare time hold
        self.host_constants = HostConstants()
        # Constant nodes are folded and not counted as layers (SINGA's last_layers rule).
        self.nodes: list[Node] = []
        self.handlers: list[Callable] = []
        for proto_node in proto_nodes:
            node = Node(proto_node, self.opset)
            if self.path:
                node.name = f"{self.path}/{node.name}"
            node.constants = self.host_constants
            node.limits = self.limits
            node.device = self.device
            node.declared = getattr(self, "declared", {})
            self._check(proto_node, node, known)
            if any(isinstance(a, onnx.AttributeProto) for a in node.attrs.values()):
                from singa_lite.sonnx import subgraph  # it builds on Program

                subgraph.attach(self, node, known)
            known.update(node.outputs)
            if node.op == "Constant":
                self.constants[node.outputs[0]] = self.tensor(HANDLERS["Constant"](node), node.outputs[0])
                continue
            self.nodes.append(node)
            self.handlers.append(HANDLERS[node.op])
        self.folded = [self._fold(node, fn) for node, fn in zip(self.nodes, self.handlers)]
        for node, folded in zip(self.nodes, self.folded):
            if not folded:
                self._share_constants(node, HOST_INPUTS.get(node.op, ()))
        self.last_use = self._last_uses()

    def tensor(self, arr: Any, name: str) -> Tensor:
        """A constant or input from the model (TensorProto, or an array of any backend) on
        this program's device, as a copy; int4/int2 are held as int8 (uint4/uint2 as uint8),
        bfloat16 and the float8s as float32 (see ``import_ops.base.storage_dtype``). A host
        array for a device is uploaded once."""
        if isinstance(arr, onnx.TensorProto):
            arr = proto_array(arr, "tensor")
        elif not hasattr(arr, "dtype"):  # a list or a Python number
            arr = np.asarray(arr)
        try:
            dtype = storage_dtype(arr.dtype)
        except SingaLiteError:
            raise OnnxError(
                f"tensor {name!r} has element type {arr.dtype}, which singa_lite does not support"
            ) from None
        if dtype.itemsize > arr.dtype.itemsize:  # widened: bfloat16 held as float32 takes twice the bytes
            _limits.check(f"tensor {name!r}", arr.shape, dtype, self.limits, f"{dtype} copy")
        return Tensor(data=arr.astype(dtype, copy=False), device=self.device, requires_grad=False)

    def _check(self, proto_node: Any, node: Node, known: set) -> None:
        if proto_node.domain not in _DEFAULT_DOMAINS or node.op not in HANDLERS:
            domain = proto_node.domain or "ai.onnx"
            opset = self.domain_opsets.get(domain, self.opset)
            raise UnsupportedOperatorError(
                f"ONNX operator {domain}::{node.op} (opset {opset}) of node {node.name!r} "
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
        validate.check_version(node)
        validate.check_attributes(node)
        node.types = validate.InputTypes(node)

    def _fold(self, node: Node, fn: Callable) -> bool:
        """Run ``node`` now if every input is a constant; its outputs become constants."""
        # A subgraph that draws random numbers (subgraph.Subgraph.random) must run at every run.
        from singa_lite.sonnx.subgraph import RANDOM_OPS  # (it imports this module)

        random = node.op in RANDOM_OPS or any(getattr(a, "random", False) for a in node.attrs.values())
        if random or not all(i == "" or i in self.constants for i in node.inputs):
            return False
        # An RNG-free node of constants gives the same result at every run: compute it once.
        self._share_constants(node, ())
        with autograd.no_grad():
            outs = self._call(node, fn, [self.constants.get(i) if i else None for i in node.inputs])
        for name, t in zip(node.outputs, outs):
            if name:
                self.constants[name] = t
                self.folded_bytes += value_bytes(t)
        _limits.check_total(node, self.folded_bytes, self.limits, "the constants folded at prepare time")
        return True

    def _share_constants(self, node: Node, read_now: Sequence[int]) -> None:
        """Let ``node``'s handler find the host values of its constant inputs in
        ``host_constants``; read those at positions ``read_now`` (its arguments) now."""
        for i, name in enumerate(node.inputs):
            t = self.constants.get(name) if name else None
            if isinstance(t, Tensor):  # not a sequence or an empty optional
                self.host_constants.register(t)
                if i in read_now:
                    self.host_constants.get(t)

    def _last_uses(self) -> dict[str, int]:
        last = {}
        for k, node in enumerate(self.nodes):
            for name in node.inputs:
                last[name] = k
        return last

    @staticmethod
    def _call(node: Node, fn: Callable, args: list) -> list[Tensor]:
        """``fn(node, *args)`` after checking the input types and any size that the input
        shapes alone decide; every error comes out as a singa_lite error naming the node."""
        try:
            types = getattr(node, "types", None)
            if types is not None:
                types.check(args)
            _limits.precheck(node, args, node.limits)
            out = fn(node, *args)
        except SingaLiteError as e:  # keep the type (ShapeError, DTypeError...), name the node
            if str(e).startswith(str(node)):
                raise
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
        key = (last_layers, tuple(aux_output))
        plans = self.__dict__.setdefault("_plans", {})
        found = plans.get(key)
        if found is None or not found.fits(self):
            stop = n + last_layers + 1
            names = self.outputs if stop == n else [o for o in self.nodes[stop - 1].outputs if o]
            if len(plans) > 8:  # cuts are few; a caller walking through many keeps only the latest
                plans.clear()
            found = plans[key] = Plan(self, stop, names, list(aux_output))
        return found.run(feeds, variables)

    def feeds(self, inputs: Any, check: bool = True) -> dict[str, Tensor]:
        """Graph inputs by name from a list (in graph order), a dict, or one array (NumPy or
        CuPy) or tensor.

        With ``check`` (``SingaRep.run``), each is checked against the element type and dims
        the graph declares for it, as onnxruntime does: a wrong rank or dtype would otherwise
        run and give wrong shapes. ``SONNXModel`` does not check: fine-tuning runs other batch
        sizes than an exporter fixed, and its Tensors hold sub-byte and exotic types widened."""
        if inputs is None:
            raise OnnxError(f"no inputs given; the graph's inputs are {self.inputs}")
        if isinstance(inputs, Mapping):
            items = dict(inputs)
            unknown = set(items) - set(self.inputs)
            if unknown:
                raise OnnxError(f"unknown inputs {sorted(unknown)}; the graph's inputs are {self.inputs}")
        else:
            if isinstance(inputs, (Tensor, np.generic)) or backend.backend_of(inputs).is_array(inputs):
                inputs = [inputs]  # one input, not a sequence of them
            inputs = list(inputs)
            if len(inputs) > len(self.inputs):
                raise OnnxError(
                    f"{len(inputs)} inputs given for the graph's {len(self.inputs)}: {self.inputs}"
                )
            items = dict(zip(self.inputs, inputs))
        absent = [name for name in self.inputs if name not in items]
        if absent:
            raise OnnxError(f"missing graph inputs {absent}")
        return {name: self._as_value(v, name, check) for name, v in items.items()}

    def _as_value(self, v: Any, name: str, check: bool = True) -> Any:
        """A graph input as the program holds it: a Tensor, a list of Tensors (a sequence), or
        ``None`` (an empty optional)."""
        kind = self.input_kinds.get(name, "tensor")
        if kind.startswith("optional"):
            if v is None:
                return None
            kind = kind.split()[1]
        if kind == "sequence":
            if not isinstance(v, (list, tuple)):
                raise OnnxError(
                    f"graph input {name!r} is a sequence: give a list of arrays, got {type(v).__name__}"
                )
            return [self._as_tensor(x, name, check) for x in v]
        if v is None:
            raise OnnxError(f"graph input {name!r} is a tensor, got None")
        return self._as_tensor(v, name, check)

    def _as_tensor(self, v: Any, name: str, check: bool = True) -> Tensor:
        dtype, dims = self.input_specs.get(name, (None, None))
        if not hasattr(v, "dtype"):  # a list or a Python number: read it as the declared type
            v = np.asarray(v, dtype=dtype)
        if not check:  # SONNXModel: arrays of another float type are read as the declared one
            if dtype is not None and not isinstance(v, Tensor) and v.dtype.kind == dtype.kind == "f":
                v = v.astype(dtype, copy=False)
            dtype = dims = None
        # A Tensor holds a sub-byte or exotic declared type widened (storage_dtype).
        want = storage_dtype(dtype) if dtype is not None and isinstance(v, Tensor) else dtype
        if want is not None and np.dtype(v.dtype) != want:
            raise DTypeError(f"graph input {name!r} is declared {dtype}, got {np.dtype(v.dtype)}")
        if isinstance(v, Tensor) and dtype is not None:
            _check_range(v, dtype, name)
        shape = tuple(v.shape)
        if dims is not None and (
            len(shape) != len(dims) or any(d is not None and d != n for d, n in zip(dims, shape))
        ):
            declared = tuple("?" if d is None else d for d in dims)
            raise ShapeError(f"graph input {name!r} is declared with shape {declared}, got {shape}")
        if isinstance(v, Tensor):
            return v if v.device == self.device else v.clone().to_device(self.device)
        return self.tensor(v, name)


class SingaRep(BackendRep):
    """A prepared ONNX model: ``run(inputs, last_layers=-1, aux_output=())`` -> list of Tensors.

    ``program`` is the graph as written; ``inference_program`` the one whole-graph runs take:
    ``program`` rewritten by :func:`fusion.optimize`, or ``program`` itself without ``optimize``.
    """

    def __init__(self, program: Program, optimize: bool = True) -> None:
        self.program = program
        # BatchNorms (and per-channel Mul/Add) folded into Convs: the graph run when the whole
        # model is asked for; a cut (last_layers) or aux_output may name a tensor folded away.
        self.inference_program = fusion.optimize(program) if optimize else program

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
        with autograd.training_mode(False), autograd.no_grad():
            if last_layers == -1 and not aux_output:
                return self.inference_program.run(feeds)
            return self.program.run(feeds, None, last_layers, aux_output)


class SingaBackend(Backend):
    """``onnx.backend.base.Backend`` over singa_lite, for ``onnx.backend.test.BackendTest``.

    ``prepare`` and ``run_model`` take ``prepare``'s keywords: ``base_dir``, ``limits``, ``optimize``.
    """

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> _NumpyRep:  # type: ignore[override]
        keywords = {k: kwargs[k] for k in ("base_dir", "limits", "optimize") if k in kwargs}
        return _NumpyRep(prepare(model, _device_for(device), **keywords))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:  # type: ignore[override]
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        _args.instance("SingaBackend.supports_device", "device", device, str, "a device name such as 'CPU'")
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
        outs = self.rep.run(inputs)
        return tuple(_host_value(o, v) for o, v in zip(outs, self.rep.program.output_types))


def _host_value(value: Any, declared: np.dtype | None) -> Any:
    """A program value as ``onnx.backend.test`` compares it: an array, a list of arrays (a
    sequence) or ``None`` (an empty optional)."""
    if value is None:
        return None
    if isinstance(value, list):
        return [_host_value(v, declared) for v in value]
    return _declared_type(backend.to_host(value.data), declared)


def _declared_type(arr: np.ndarray, declared: np.dtype | None) -> np.ndarray:
    """An output held in a wider type (int8, uint8, float32) cast back to the type the graph
    declares for it (int4, bfloat16, a float8...; see ``import_ops.base.storage_dtype``)."""
    if declared is not None and declared != arr.dtype and declared in HELD_WIDER:
        return arr.astype(declared)
    return arr


def _check_range(v: Tensor, declared: np.dtype, name: str) -> None:
    """A Tensor fed for a sub-byte input (int4 held as int8) must hold values of that type."""
    bounds = sub_byte_range(declared)
    if bounds is None or v.size() == 0:
        return
    lo, hi = (int(b) for b in backend.to_host(v.device.xp.stack([v.data.min(), v.data.max()])))
    if lo < bounds[0] or hi > bounds[1]:
        raise DTypeError(
            f"graph input {name!r} is declared {declared}, whose values lie in {list(bounds)}; "
            f"the tensor given holds values in [{lo}, {hi}]"
        )


def _device_for(name: str) -> Any:
    _args.instance("SingaBackend", "device", name, str, "a device name such as 'CPU' or 'CUDA:0'")
    return _device.create_cuda_gpu() if name.upper().startswith("CUDA") else _device.create_cpu_device()


def prepare(
    onnx_model: Any,
    device: Any = None,
    base_dir: Any = None,
    limits: _limits.Limits | None = None,
    optimize: bool = True,
    **kwargs: Any,
) -> SingaRep:
    """Check and compile ``onnx_model`` (ModelProto, bytes or path) for ``device``.

    Raises ``UnsupportedOperatorError`` for an operator without a handler and ``OnnxError`` for
    a malformed model, or one that asks for more than ``limits`` (default: the current
    :mod:`~singa_lite.sonnx.limits`). External data is read from the model file's directory;
    for a ``ModelProto`` or bytes, from ``base_dir`` (without it, external data is refused).
    ``optimize=False`` turns off every inference rewrite (:mod:`~singa_lite.sonnx.fusion`):
    whole-graph runs then run the nodes as the model writes them.
    """
    _check_model_argument("prepare", onnx_model)
    if isinstance(device, str):  # SINGA's spelling: prepare(model, device="CPU")
        device = _device_for(device)
    elif device is not None:
        _args.instance("prepare", "device", device, _device.Device, "a Device or a name such as 'CPU'")
    if limits is not None:
        _args.instance("prepare", "limits", limits, _limits.Limits, "a sonnx.limits.Limits")
    _args.instance("prepare", "optimize", optimize, bool, "True or False")
    lim = _limits.resolve(limits)
    proto, external = read_model(onnx_model, base_dir, lim)
    return SingaRep(Program(proto, device, limits=lim, external=external), optimize)


def _check_model_argument(owner: str, model: Any) -> None:
    """An ONNX model is given as a ModelProto, its serialized bytes or a file path."""
    kinds = (ModelProto, bytes, bytearray, memoryview, str, os.PathLike)
    _args.instance(owner, "onnx_model", model, kinds, "a ModelProto, serialized bytes or a file path")


run_model = SingaBackend.run_model
supports_device = SingaBackend.supports_device

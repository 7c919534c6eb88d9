"""``SONNXModel``: an imported ONNX model as a trainable singa_lite ``Model``.

The initializers that feed trainable positions (convolution, Gemm and MatMul weights, biases,
normalisation scales and shifts, recurrent weights, embedding tables) become registered params,
named after their ONNX names; BatchNormalization's running statistics become states. The
integer weights of a quantized graph become float params holding their dequantized values,
quantized again at every forward with a straight-through gradient (quantization-aware
fine-tuning; ``import_ops.quant.quantized_weights``). So
``get_states``/``save_states`` hold the imported weights, any optimizer trains them, and
``forward(*x, last_layers=-k)`` cuts the graph for transfer learning (SINGA's API)::

    class MyModel(sonnx.SONNXModel):
        def __init__(self, onnx_model):
            super().__init__(onnx_model)
            self.linear = layer.Linear(10)

        def forward(self, *x):
            y = super().forward(*x, last_layers=-2)[0]   # drop the last node
            return self.linear(y)
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import ModelProto, helper

from singa_lite import _args, ops
from singa_lite import device as _device
from singa_lite.errors import OnnxError
from singa_lite.model import Model
from singa_lite.sonnx import limits as _limits
from singa_lite.sonnx.import_ops.base import proto_array
from singa_lite.sonnx.import_ops.quant import quantized_weights
from singa_lite.sonnx.importer import Program, _check_model_argument
from singa_lite.sonnx.reading import read_model
from singa_lite.sonnx.subgraph import all_nodes
from singa_lite.tensor import Tensor

PARAM_INPUTS: dict[str, tuple[int, ...]] = {
    "Conv": (1, 2),
    "ConvTranspose": (1, 2),
    "Gemm": (0, 1, 2),
    "MatMul": (0, 1),
    "Add": (0, 1),  # the bias of a MatMul + Add linear layer (only arrays of several values)
    "BatchNormalization": (1, 2),
    "LayerNormalization": (1, 2),
    "InstanceNormalization": (1, 2),
    "PRelu": (1,),
    "Gather": (0,),  # embedding tables (float data only)
    "LSTM": (1, 2, 3, 7),  # W, R, B and the peepholes P
    "GRU": (1, 2, 3),
    "RNN": (1, 2, 3),
}
"""Operator -> input positions whose float initializers are trainable parameters."""

STATE_INPUTS: dict[str, tuple[int, ...]] = {"BatchNormalization": (3, 4)}
"""Operator -> input positions whose initializers are non-trainable states (running stats)."""

# `train_one_batch`'s dist_option -> the optimizer method SINGA's guide calls for it.
_UPDATES = {
    "fp16": "backward_and_update_half",
    "partialUpdate": "backward_and_partial_update",
    "sparseTopK": "backward_and_sparse_update",
    "sparseThreshold": "backward_and_sparse_update",
}


def initializer_roles(proto: ModelProto) -> dict[str, str]:
    """ONNX initializer name -> ``"param"`` or ``"state"``, for those that are either.

    Models singa_lite exported say so in their metadata (``singa_lite.params`` and
    ``singa_lite.states``); that record wins, since some weights reach their node through
    other ops (RNN gate weights pass Gather/Transpose). Otherwise the roles are read from the
    input positions of the nodes that consume the initializers.
    """
    props = {p.key: p.value for p in proto.metadata_props}
    inits = {t.name: t for t in proto.graph.initializer}
    if "singa_lite.params" in props:
        recorded = {n: "param" for n in _recorded_names(props, "singa_lite.params", inits)}
        recorded.update({n: "state" for n in _recorded_names(props, "singa_lite.states", inits)})
        return recorded
    # Exporters pass some weights through Identity nodes (PyTorch does for running stats):
    # look through them to the initializer.
    # Nodes inside If/Loop/Scan bodies count too: they read the outer graph's weights by name.
    nodes = list(all_nodes(proto.graph))
    source = {n.output[0]: n.input[0] for n in nodes if n.op_type == "Identity" and n.input}
    roles: dict[str, str] = {}
    for node in nodes:
        for role, table in (("param", PARAM_INPUTS), ("state", STATE_INPUTS)):
            for i in table.get(node.op_type, ()):
                name = node.input[i] if i < len(node.input) else ""
                while name in source and name not in inits:
                    name = source[name]
                t = inits.get(name)
                if t is None or roles.get(name) == "param":
                    continue
                try:
                    arr_dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
                except KeyError:  # a data type onnx does not know: reading it names the tensor
                    continue
                if np.dtype(arr_dtype).kind != "f":
                    continue
                if node.op_type == "Add" and int(np.prod(t.dims)) < 2:
                    continue  # a scalar added is a constant of the formula, not a bias
                roles[name] = role
    return roles


def _recorded_names(props: dict[str, str], key: str, inits: dict[str, Any]) -> list[str]:
    """The initializer names a singa_lite export recorded under ``key`` (untrusted metadata:
    a JSON list of the names of existing initializers, or ``OnnxError`` saying what it is)."""
    text = props.get(key, "[]")
    try:
        names = json.loads(text)
    except (ValueError, RecursionError):
        raise OnnxError(f"metadata {key!r} is not valid JSON: {text[:80]!r}") from None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise OnnxError(f"metadata {key!r} must be a JSON list of initializer names, got {text[:80]!r}")
    unknown = [n for n in names if n not in inits]
    if unknown:
        raise OnnxError(f"metadata {key!r} names {unknown[:5]}, which are not initializers of the graph")
    return names


def param_name(onnx_name: str, taken: set[str]) -> str:
    """A registrable, unique attribute name for an ONNX initializer: characters other than
    letters, digits, ``_`` and ``.`` become ``_``; a leading ``_`` (never registered) gets a
    ``w`` in front; a clash with a taken name gets a numeric suffix."""
    name = re.sub(r"[^0-9A-Za-z_.]", "_", onnx_name) or "w"
    if name.startswith("_"):
        name = "w" + name
    base, k = name, 1
    while name in taken:
        name = f"{base}_{k}"
        k += 1
    taken.add(name)
    return name


class SONNXModel(Model):
    """A ``Model`` running an ONNX graph, with the graph's weights as named params and states."""

    def __init__(
        self, onnx_model: Any, device: Any = None, base_dir: Any = None, limits: _limits.Limits | None = None
    ) -> None:
        """``onnx_model``: a ``ModelProto``, bytes or a path, read as ``sonnx.prepare`` reads it
        (external data from the file's directory or ``base_dir``; ``limits`` on what it may
        allocate, kept for every run)."""
        super().__init__()
        _check_model_argument("SONNXModel", onnx_model)
        if limits is not None:
            _args.instance("SONNXModel", "limits", limits, _limits.Limits, "a sonnx.limits.Limits")
        lim = _limits.resolve(limits)
        proto, external = read_model(onnx_model, base_dir, lim)
        dev = device if device is not None else _device.get_default_device()
        roles = initializer_roles(proto)
        inits = {t.name: t for t in proto.graph.initializer}
        taken = set(dir(self))
        # ONNX name -> attribute name, in graph order so names are stable across loads.
        self._onnx_names: dict[str, str] = {}
        for onnx_name, role in roles.items():
            arr = proto_array(inits[onnx_name], "initializer", external)
            trainable = role == "param"
            if arr.dtype.kind != "f":
                raise OnnxError(
                    f"initializer {onnx_name!r} is a {role} but has element type {arr.dtype}, not a float"
                )
            t = Tensor(data=arr, device=dev, requires_grad=trainable, stores_grad=trainable)
            attr = param_name(onnx_name, taken)
            setattr(self, attr, t)
            self._onnx_names[onnx_name] = attr
        # Quantized weights train as their float values, quantized again at every forward (STE).
        self._quantized = {k: w for k, w in quantized_weights(proto, external).items() if k not in roles}
        for onnx_name, w in self._quantized.items():
            attr = param_name(onnx_name, taken)
            setattr(self, attr, Tensor(data=w.dequantized(), device=dev, stores_grad=True))
            self._onnx_names[onnx_name] = attr
        held = [*roles, *self._quantized]
        self._program = Program(proto, dev, held=held, limits=lim, external=external)

    @property
    def onnx_names(self) -> dict[str, str]:
        """ONNX initializer name -> the param/state name it is registered under."""
        return dict(self._onnx_names)

    @property
    def input_names(self) -> list[str]:
        return list(self._program.inputs)

    def forward(self, *x: Tensor, last_layers: int = -1, aux_output: Sequence[str] = ()) -> list[Tensor]:
        """Run the graph on the inputs ``x`` (graph order); returns a list of Tensors.

        ``last_layers=-k`` drops the last ``k - 1`` nodes (Constant nodes not counted) and
        returns the outputs of the last node kept; ``aux_output`` names extra tensors to return.
        Ops are recorded for backward while training, so the params get gradients.
        """
        variables = {name: getattr(self, attr) for name, attr in self._onnx_names.items()}
        for name, w in self._quantized.items():
            variables[name] = w.quantize(variables[name])
        feeds = self._program.feeds(list(x), check=False)  # any batch size (see Program.feeds)
        return self._program.run(feeds, variables, last_layers, aux_output)

    def train_one_batch(self, x: Tensor, y: Tensor, dist_option: str = "plain", spars: Any = None) -> tuple:
        """One step on ``softmax_cross_entropy(forward(x), y)``; returns ``(out, loss)``.

        ``dist_option`` picks the optimizer's update as in SINGA's guide (``plain``/``fp32``,
        ``fp16``, ``partialUpdate``, ``sparseTopK``, ``sparseThreshold``). Override for other
        losses or several outputs.
        """
        outs: Any = self.forward(x)  # subclasses often return one Tensor instead of a list
        out = outs[0] if isinstance(outs, (list, tuple)) else outs
        loss = ops.softmax_cross_entropy(out, y)
        if dist_option in ("plain", "fp32"):
            self.optimizer(loss)
        elif dist_option in _UPDATES:
            update = getattr(self.optimizer, _UPDATES[dist_option])
            if dist_option.startswith("sparse"):
                update(loss, topK=dist_option == "sparseTopK", spars=spars)
            else:
                update(loss)
        else:
            raise ValueError(
                f"train_one_batch: unknown dist_option {dist_option!r}; "
                f"use one of plain, fp32, {', '.join(_UPDATES)}"
            )
        return out, loss

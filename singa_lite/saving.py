"""Whole-model save and load: the traced graph as ONNX plus every state, in one checkpoint file.

``save(path, model)`` traces ``model.forward`` on the placeholders given to ``compile``,
exports it as an ONNX model (``sonnx.export_model``) and writes a normal checkpoint
(``Model.save_states``: params, states, optimizer, RNG, input specs, aux) whose aux states also
hold the ONNX bytes as a uint8 dataset. ``load(path)`` rebuilds a model from those bytes alone,
a :class:`~singa_lite.sonnx.SONNXModel` whose params carry the original names, recreates the
optimizer from its saved class name and hyperparameters, and loads every state into it: it
runs inference and trains on without the original class and without pickle.

>>> import numpy as np, os, tempfile
>>> from singa_lite import layer, model, opt, saving, tensor
>>> class Net(model.Model):
...     def __init__(self):
...         super().__init__()
...         self.fc = layer.Linear(2)
...     def forward(self, x):
...         return self.fc(x)
>>> net = Net(); net.set_optimizer(opt.SGD(lr=0.1))
>>> net.compile([tensor.Tensor((4, 3))])
>>> path = os.path.join(tempfile.mkdtemp(), "net.h5")
>>> _ = saving.save(path, net)
>>> again = saving.load(path)
>>> type(again.optimizer).__name__, sorted(again.get_params())
('SGD', ['fc.W', 'fc.b'])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from singa_lite import _args
from singa_lite.errors import (
    CheckpointError,
    CorruptCheckpointError,
    IncompatibleCheckpointError,
    OnnxError,
    SingaLiteError,
)
from singa_lite.tensor import Tensor

MODEL_KEY = "singa_lite.model"
"""The aux-states key under which ``save`` stores the model's ONNX graph (reserved)."""


def save(path: Any, model: Any, aux_states: dict | None = None, opset: int | None = None) -> str:
    """Write ``model`` whole to the checkpoint file ``path``: its traced ONNX graph and all states.

    ``model`` must have been compiled (``model.compile(placeholders)``): the graph is traced on
    those placeholders, so the loaded model takes inputs of the same shapes. ``aux_states`` are
    stored as by ``save_states``; ``opset`` picks the ONNX opset (default: the newest).
    """
    from singa_lite.sonnx.exporter import export_model

    _args.path("save", "path", path)
    _args.has("save", "model", model, ("get_params", "get_states"), "a compiled Model")
    if aux_states is not None:
        _args.instance("save", "aux_states", aux_states, Mapping, "a dict or None")
    if opset is not None:
        _args.count("save", "opset", opset)
    aux = dict(aux_states or {})
    if MODEL_KEY in aux:
        raise CheckpointError(f"save: the aux-states key {MODEL_KEY!r} is reserved for the model graph")
    if not getattr(model, "_input_specs", None):
        raise CheckpointError(
            f"save: {type(model).__name__} has not been compiled; call model.compile(placeholders) "
            "first so its graph can be traced"
        )
    proto = export_model(model, opset=opset)
    aux[MODEL_KEY] = {"onnx": np.frombuffer(proto.SerializeToString(), dtype=np.uint8).copy()}
    from singa_lite import checkpoint

    return str(checkpoint.save_model_states(model, path, aux, blocking=True, root={"whole_model": True}))


def load(path: Any, device: Any = None, limits: Any = None) -> Any:
    """The model saved by :func:`save`, ready for inference and further training.

    The result is a ``SONNXModel`` running the stored graph, with the saved params and states
    (under their original names), the saved optimizer (same class, hyperparameters, schedule,
    step counter and slots) and RNG state. It comes back in inference mode; after
    ``model.train()``, ``model(x, y)`` runs ``train_one_batch``, one optimizer step on
    ``softmax_cross_entropy(forward(x), y)`` (SONNXModel's; subclass it for another loss).
    The file's other aux states are in ``model.aux_states``.

    The file is checked as untrusted input: its graph as any ONNX model is (``limits``: a
    :class:`singa_lite.sonnx.limits.Limits`, default the current ones; external data is
    refused), its input specs before a placeholder is allocated, its optimizer entries before
    the optimizer is made.
    """
    from singa_lite import device as _device
    from singa_lite.checkpoint.loader import input_specs
    from singa_lite.sonnx import SONNXModel
    from singa_lite.sonnx import limits as _limits

    path = _args.path("load", "path", path)
    lim = _limits.resolve(limits)
    raw, specs, opt_states = _read_graph(path)
    checked = input_specs(path, specs, lim.max_tensor_bytes)
    if raw.nbytes > lim.max_model_bytes:
        raise OnnxError(f"{path}: the stored ONNX graph has {raw.nbytes} bytes, over Limits.max_model_bytes")
    dev = device if device is not None else _device.get_default_device()
    try:
        model = SONNXModel(raw.tobytes(), device=dev, limits=lim)
    except OnnxError as e:
        raise type(e)(f"{path}: the stored ONNX graph: {e}") from e
    if opt_states is not None:
        model.set_optimizer(_optimizer_from_states(path, opt_states))
    placeholders = [Tensor(shape, dev, dtype, requires_grad=False) for shape, dtype in checked]
    model.compile(placeholders, is_train=False)
    aux = model.load_states(path)
    aux.pop(MODEL_KEY, None)
    model.aux_states = aux
    return model


def _read_graph(path: str) -> tuple[np.ndarray, list, dict | None]:
    """The ONNX bytes, the input specs and the optimizer's JSON entries of a verified file."""
    from singa_lite import checkpoint
    from singa_lite.checkpoint import store

    with checkpoint.open_verified(path) as r:
        doc = r.attrs("aux").get("json", {})
        entry = doc.get(MODEL_KEY) if isinstance(doc, dict) else None
        ref = entry.get("onnx", {}).get("ref") if isinstance(entry, dict) else None
        if not isinstance(ref, str):
            raise CheckpointError(
                f"{path}: holds no model graph (it was written by save_states, not singa_lite.save); "
                "build the model's class and call model.load_states(path) instead"
            )
        ds = r.dataset(ref)
        if ds.dtype != np.uint8 or ds.ndim != 1:
            raise CorruptCheckpointError(f"{path}: {ref}: the model graph must be a 1-d uint8 array")
        raw = store.read_array(ds)
        specs = r.attrs("inputs").get("specs") or []
        opt_states = r.attrs("optimizer") or None
    return raw, specs, opt_states


def _optimizer_from_states(path: str, states: dict) -> Any:
    """A fresh optimizer of the saved class; ``load_states`` then restores all its states."""
    from singa_lite import opt

    kind = states.get("optimizer")
    cls = getattr(opt, str(kind), None)
    if not (isinstance(cls, type) and issubclass(cls, opt.Optimizer)) or cls is opt.Optimizer:
        raise CheckpointError(f"{path}: unknown optimizer class {kind!r} in optimizer@optimizer")
    hyper = states.get("hyperparams", {})
    if not isinstance(hyper, dict):
        raise CorruptCheckpointError(f"{path}: optimizer@hyperparams is not a JSON object: {hyper!r}"[:300])
    try:
        return cls(**hyper)
    except (TypeError, ValueError, SingaLiteError) as e:
        raise IncompatibleCheckpointError(
            f"{path}: optimizer@hyperparams {sorted(hyper)} do not make a {kind}: {e} "
            "(written by another singa_lite version, or damaged)"
        ) from e


__all__ = ["MODEL_KEY", "load", "save"]

"""Gradient clipping by global norm, and an optimizer wrapper that clips in every step.

Every optimizer clips when built with ``clip_norm`` (``opt.AdamW(..., clip_norm=1.0)``), using
:func:`clip_grad_norm`. ``ClipGradNorm(optimizer, max_norm)`` does the same for an optimizer
built elsewhere: a model is given it instead of the optimizer
(``model.set_optimizer(ClipGradNorm(adamw, 1.0))``); its step runs backward, scales
all gradients together so their global L2 norm is at most ``max_norm``, then lets the wrapped
optimizer apply them and advance. The step goes through ``autograd.run_step``, so graph mode
records and replays it whole; the norm is computed and applied on the device, with no host
read, so a CUDA-graph capture is not stopped by it. Checkpoints hold the wrapped optimizer's
states (the wrapper itself has none), as they do for ``DistOpt``.

>>> import numpy as np
>>> from singa_lite import tensor
>>> g = [tensor.from_numpy(np.array([3.0, 4.0], np.float32))]
>>> clipped, norm = clip_grad_norm(g, 1.0)
>>> float(tensor.to_numpy(norm)), [round(float(v), 4) for v in tensor.to_numpy(clipped[0])]
(5.0, [0.6, 0.8])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np  # dtype objects only; array math goes through the device's xp

from singa_lite import _args, autograd
from singa_lite.errors import ArgumentError, DeviceError
from singa_lite.tensor import Tensor

__all__ = ["ClipGradNorm", "clip_grad_norm"]

EPS = 1e-6
"""Added to the norm before dividing, as ``torch.nn.utils.clip_grad_norm_`` does."""


def _max_norm(owner: str, value: Any) -> float:
    return _args.positive(owner, "max_norm", value)


def clip_grad_norm(grads: Sequence[Tensor], max_norm: float) -> tuple[list[Tensor], Tensor]:
    """Scale ``grads`` together so that their global L2 norm is at most ``max_norm``.

    Each gradient is multiplied by ``min(1, max_norm / (norm + 1e-6))``, the rule of
    ``torch.nn.utils.clip_grad_norm_``. Returns the scaled gradients (new tensors: one backward
    may hand the same array to several parameters, so none is scaled in place) and the norm
    before clipping, as a 0-d tensor left on the device. Sums of float16 gradients run in
    float32; each result keeps its gradient's dtype.
    """
    limit = _max_norm("clip_grad_norm", max_norm)
    if isinstance(grads, Tensor) or not hasattr(grads, "__iter__"):  # a Tensor would iterate rows
        raise _args.bad("clip_grad_norm", "grads", "be a list of Tensors", grads)
    grads = list(grads)
    if not grads:
        raise ArgumentError("clip_grad_norm: grads is empty; pass at least one gradient")
    for g in grads:
        _args.tensor("clip_grad_norm", "each of grads", g)
    dev = grads[0].device
    if any(g.device != dev for g in grads):
        raise DeviceError("clip_grad_norm: the gradients are on different devices; move them to one first")
    xp = dev.xp
    acc = np.result_type(np.float32, *[g.dtype for g in grads])
    total = xp.zeros((), acc)
    for g in grads:
        flat = g.data.reshape(-1).astype(acc, copy=False)
        total += xp.dot(flat, flat)
    norm = xp.sqrt(total)
    coef = xp.minimum(acc.type(limit) / (norm + acc.type(EPS)), acc.type(1))
    scaled = [Tensor._wrap(g.data * coef.astype(g.dtype), dev, False, None, 0) for g in grads]
    return scaled, Tensor._wrap(norm, dev, False, None, 0)


class ClipGradNorm:
    """An optimizer whose every step clips the gradients to a global norm of ``max_norm``
    before ``optimizer`` applies them. ``last_norm`` holds the latest step's norm (before
    clipping) as a 0-d tensor on the device; read it only when you need it (a host read).

    It passes as a model's optimizer: ``opt`` is the wrapped optimizer (checkpoints save its
    states); ``lr``, ``step_counter``, ``get_states`` and ``set_states`` are the wrapped one's.
    """

    def __init__(self, optimizer: Any, max_norm: float) -> None:
        if not hasattr(optimizer, "update_all"):
            raise ArgumentError(
                f"ClipGradNorm: expects an opt.Optimizer to wrap, got {type(optimizer).__name__}"
            )
        self.opt = optimizer
        self.max_norm = _max_norm("ClipGradNorm", max_norm)
        self.last_norm: Tensor | None = None

    @property
    def step_counter(self) -> int:
        return self.opt.step_counter

    @step_counter.setter
    def step_counter(self, value: int) -> None:
        self.opt.step_counter = value

    @property
    def lr(self) -> Any:
        return self.opt.lr

    @property
    def lr_value(self) -> float:
        return self.opt.lr_value

    def __call__(self, loss: Tensor) -> None:
        """Backward from ``loss``, clip, update every parameter, advance the step."""
        self.backward_and_update(loss)

    def backward_and_update(self, loss: Tensor) -> None:
        # Through run_step, so graph mode records the whole clipped update and replays it.
        autograd.run_step(self._backward_and_update, loss)

    def _backward_and_update(self, loss: Tensor) -> None:
        pairs = list(autograd.backward(loss))
        if not pairs:
            return
        grads, self.last_norm = clip_grad_norm([g for _, g in pairs], self.max_norm)
        # The wrapped optimizer's own options (accumulation, its clip_norm) act on the result.
        self.opt.update_all([(p, g) for (p, _), g in zip(pairs, grads)])

    def get_states(self) -> dict:
        return self.opt.get_states()

    def set_states(self, states: Mapping) -> None:
        self.opt.set_states(states)

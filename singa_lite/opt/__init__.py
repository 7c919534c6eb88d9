"""Optimizers and learning-rate schedules with Apache SINGA's API.

An optimizer updates parameters in place from their gradients: ``opt(loss)`` (or
``opt.backward_and_update(loss)``) runs ``autograd.backward(loss)``, calls
``opt.apply(p.name, p, g)`` for every parameter, then ``opt.step()``, which advances
``step_counter``. The learning rate is a number or a schedule (a :class:`DecayScheduler`),
evaluated at ``step_counter``; Adam's bias correction counts the same steps.

Per-parameter state (momentum buffers, Adam's moments ...) lives in "slots" keyed by parameter
*name*, never by position, under SINGA's keys: ``moments`` (SGD), ``m``/``v`` (Adam, AdamW),
``history`` (AdaGrad), ``running_average`` (RMSProp). ``get_states()`` returns a snapshot of
everything needed to resume bit for bit (step counter, schedule, hyperparameters, slots);
``set_states()`` restores it, on any device.

Updates follow ``torch.optim`` exactly (SGD, Adam, AdamW, Adagrad, RMSprop with their defaults
for the options not listed here), run in each parameter's own dtype (float32 stays float32),
write the parameter's array in place, and never write the caller's gradient array: one
backward can hand the same array to several parameters (``a + b`` passes ``dy`` to both).
On CuPy, an SGD or Adam/AdamW update of a float32/float64 parameter is one fused kernel
(``backend/cupy_kernels.py``) doing the same operations in the same order, so the same bits.

>>> import numpy as np
>>> from singa_lite import opt, tensor
>>> w = tensor.from_numpy(np.ones(3, dtype=np.float32))
>>> w.name = "w"
>>> sgd = opt.SGD(lr=opt.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5), momentum=0.9)
>>> sgd.apply("w", w, tensor.from_numpy(np.full(3, 2.0, dtype=np.float32)))
>>> sgd.step()
>>> tensor.to_numpy(w).tolist(), sgd.step_counter
([0.800000011920929, 0.800000011920929, 0.800000011920929], 1)
"""

from __future__ import annotations

from typing import Any

from singa_lite.errors import OptimizerError
from singa_lite.opt.optimizer import Optimizer, biases_and_norms
from singa_lite.opt.schedules import Constant, CosineDecay, DecayScheduler, ExponentialDecay, StepDecay
from singa_lite.opt.updates import SGD, AdaGrad, Adam, AdamW, RMSProp

__all__ = [
    "SGD",
    "AdaGrad",
    "Adam",
    "AdamW",
    "Constant",
    "CosineDecay",
    "DecayScheduler",
    "ExponentialDecay",
    "Optimizer",
    "OptimizerError",
    "RMSProp",
    "StepDecay",
    "biases_and_norms",
]


def __getattr__(name: str) -> Any:
    # DistOpt lives in singa_lite.dist, which imports this module: resolved on first use, no cycle.
    if name == "DistOpt":
        from singa_lite.dist.distopt import DistOpt

        return DistOpt
    raise AttributeError(f"module 'singa_lite.opt' has no attribute {name!r}")

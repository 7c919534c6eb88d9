"""Graph mode's rewrites of a recorded training step: pairs of ops that run in fewer passes
over the activations when seen together.

Eager mode runs each op as a layer calls it and cannot see the next one; a recorded step
(``model._Graph``) shows the whole step, so before its first replay the pairs below are
rewritten, on both halves of what a replay runs: the tape (the forward) and the autograd
graph that the update step's ``backward`` walks (creators and inputs). A pair is rewritten
only where nothing else reads the tensor between its two ops: no other op, no update step,
no host read, and not one of the tensors the caller names (the step's outputs, the model's
states). The results stay the eager step's, bit for bit.

- A training ``BatchNorm`` and the ``ReLU`` after it become one ``BatchNorm`` with ``relu``
  (``ops/normalization.py``: with the compiled kernels the ReLU runs inside the normalising
  pass and its gradient inside the two backward passes).
- A ``MatMul`` and the ``BiasAdd`` after it (a ``Linear`` layer), and a ``ReLU`` after
  that, become one ``Dense`` op (``ops/linalg.py``), the ReLU in place on the product.
- A ``ReLU`` before a ``MaxPool`` moves after it, to run over the pooled array.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from singa_lite import autograd
from singa_lite.autograd import OpCall, TapeEntry
from singa_lite.ops.activation import ReLU
from singa_lite.ops.linalg import BiasAdd, Dense, MatMul
from singa_lite.ops.normalization import BatchNorm
from singa_lite.ops.pool import MaxPool
from singa_lite.tensor import Tensor


def fuse(tape: list[TapeEntry], outputs: Any) -> list[TapeEntry]:
    """``tape`` with each pair rewritten; ``outputs``: tensors read outside the tape (any
    nesting of tuples, lists and dicts of them), which stay as they are."""
    kept = {id(t) for t in _tensors(outputs)}
    for entry in tape:
        if isinstance(entry, autograd.StepCall):
            kept.update(id(t) for t in _tensors(entry.args))
        elif isinstance(entry, autograd.HostRead):
            kept.add(id(entry.tensor))
    out: list[TapeEntry | None] = list(tape)
    changed = False
    for first, second, rewrite in _RULES:
        for i, j in _pairs(out, kept, first, second):
            rewrite(out, i, j)
            changed = True
    if changed:
        # backward keeps a walk order on the root of a retained graph: made before the rewrite.
        autograd.forget_walks(e.op for e in tape if isinstance(e, OpCall))
    return [e for e in out if e is not None]


def _pairs(tape: list, kept: set, first: Callable, second: Callable) -> list[tuple[int, int]]:
    """``(i, j)``: entry ``i``'s op passes ``first``, makes one tensor, which only entry ``j``,
    whose op passes ``second``, reads, as its first input; both recorded for backward or
    neither."""
    uses: Counter[int] = Counter()
    makers = {}
    for i, e in enumerate(tape):
        if isinstance(e, OpCall):
            uses.update(id(x) for x in e.inputs)
            if len(e.outputs) == 1:
                makers[id(e.outputs[0])] = i
    found = []
    for j, e in enumerate(tape):
        if not (isinstance(e, OpCall) and e.inputs and len(e.outputs) == 1 and second(e.op)):
            continue
        y, (z,) = e.inputs[0], e.outputs
        k = makers.get(id(y))
        if k is None or uses[id(y)] != 1 or id(y) in kept or not first(tape[k].op):
            continue
        if (y.creator is tape[k].op and z.creator is e.op) or (y.creator is None and z.creator is None):
            found.append((k, j))
    return found


def _relu_inside(tape: list, i: int, j: int) -> None:
    """An op with a ``relu`` switch (BatchNorm, Dense) -> ReLU as that op with ``relu`` on,
    making the ReLU's output."""
    call, (z,) = tape[i], tape[j].outputs
    call.op.relu = True
    if z.creator is not None:
        z.creator, z._index = call.op, 0
    tape[i] = OpCall(call.op, call.inputs, (z,))
    tape[j] = None


def _dense(tape: list, i: int, j: int) -> None:
    """MatMul -> BiasAdd as one Dense op on the MatMul's operands and the bias."""
    mm, add = tape[i], tape[j]
    (z,), inputs = add.outputs, (*mm.inputs, add.inputs[1])
    dense = Dense(mm.op, add.op)
    dense.xp, dense.device = mm.op.xp, mm.op.device
    if z.creator is not None:  # as Operator.__call__ records an op (the walk narrows needs_grad)
        dense.inputs, dense.out_meta = inputs, add.op.out_meta
        dense.needs_grad = tuple(x.requires_grad for x in inputs)
        z.creator, z._index = dense, 0
    tape[i] = OpCall(dense, inputs, (z,))
    tape[j] = None


def _max_pool_first(tape: list, i: int, j: int) -> None:
    """ReLU -> MaxPool as MaxPool -> ReLU, the ReLU and its backward over the pooled array (a
    quarter of the input for 2x2 windows). The same values, max commuting with the monotone
    ReLU, and the same gradients: a window whose maximum is positive sends it to the same
    (first) maximum, one whose maximum is not sends none either way (only a nan or inf in the
    gradient, times ReLU's 0, can land on another cell of such a window)."""
    relu, pool = tape[i].op, tape[j].op
    (y,), (p,) = tape[i].inputs, tape[j].outputs  # (the ReLU's old output: read by nothing now)
    recorded = p.creator is not None
    q = Tensor._wrap(p.data, p.device, p.requires_grad, pool if recorded else None, 0)
    if recorded:  # the backward graph rewired as the tape: y -> pool -> q -> relu -> p
        pool.inputs, relu.inputs = (y,), (q,)
        relu.out_meta = list(pool.out_meta)
        p.creator, p._index = relu, 0
    tape[i] = OpCall(pool, (y,), (q,))
    tape[j] = OpCall(relu, (q,), (p,))


def _training_batch_norm(op: Any) -> bool:
    return type(op) is BatchNorm and op.training and not op.relu


def _dense_without_relu(op: Any) -> bool:
    return type(op) is Dense and not op.relu


def _is(cls: type) -> Callable[[Any], bool]:
    return lambda op: type(op) is cls


_RULES: list[tuple[Callable, Callable, Callable]] = [
    (_training_batch_norm, _is(ReLU), _relu_inside),
    (_is(MatMul), _is(BiasAdd), _dense),
    (_dense_without_relu, _is(ReLU), _relu_inside),
    (_is(ReLU), _is(MaxPool), _max_pool_first),
]
"""``(first, second, rewrite)``, in this order: a BatchNorm -> ReLU -> MaxPool fuses the first
pair (no ReLU pass left) rather than moving the ReLU, and a Dense takes its ReLU once made."""


def _tensors(obj: Any) -> Iterator[Tensor]:
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from _tensors(v)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)

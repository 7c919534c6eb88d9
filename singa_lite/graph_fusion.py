"""Graph mode's rewrites of a recorded training step: pairs of ops that one op runs in fewer
passes over the activations.

Eager mode runs each op as a layer calls it and cannot see the next one; a recorded step
(``model._Graph``) shows the whole step, so before its first replay the pairs below are
fused. A rewrite changes both halves of what a replay runs: the pair's two tape entries become
one (the forward) and the second op's output gets the fused op as its creator (the autograd
graph that the update step's ``backward`` walks). A pair is fused only where nothing else
reads the tensor between the two ops: no other op, no update step, no host read and not the
step's own outputs.

The pair fused now is a training ``BatchNorm`` followed by ``ReLU``, the body of most CNNs
(``ops/normalization.py``: with the compiled kernels the ReLU runs inside batch norm's
normalising pass and its gradient inside the two backward passes, bit for bit the pair's
results).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from singa_lite import autograd
from singa_lite.autograd import OpCall, TapeEntry
from singa_lite.ops.activation import ReLU
from singa_lite.ops.normalization import BatchNorm
from singa_lite.tensor import Tensor


def fuse(tape: list[TapeEntry], outputs: Any) -> list[TapeEntry]:
    """``tape`` with each fusable pair made one op; ``outputs``: what the step returns (any
    nesting of tuples, lists and dicts), whose tensors stay as they are."""
    kept = {id(t) for t in _tensors(outputs)}
    uses: Counter[int] = Counter()
    for entry in tape:
        if isinstance(entry, OpCall):
            uses.update(id(x) for x in entry.inputs)
        elif isinstance(entry, autograd.StepCall):
            kept.update(id(t) for t in _tensors(entry.args))
        else:
            kept.add(id(entry.tensor))
    makers = {id(y): i for i, e in enumerate(tape) if isinstance(e, OpCall) for y in e.outputs}
    out: list[TapeEntry | None] = list(tape)
    for j, entry in enumerate(tape):
        if not (isinstance(entry, OpCall) and type(entry.op) is ReLU and len(entry.inputs) == 1):
            continue
        (y,), (z,) = entry.inputs, entry.outputs
        i = makers.get(id(y))
        if i is None or uses[id(y)] != 1 or id(y) in kept:
            continue
        bn_call = tape[i]
        assert isinstance(bn_call, OpCall)
        bn = bn_call.op
        if type(bn) is not BatchNorm or not bn.training or bn.relu:
            continue
        # The backward graph must be the pair's too: both recorded, or neither.
        if not ((y.creator is bn and z.creator is entry.op) or (y.creator is None and z.creator is None)):
            continue
        bn.relu = True
        if z.creator is not None:
            z.creator, z._index = bn, 0
        out[i] = OpCall(bn, bn_call.inputs, (z,))
        out[j] = None
    fused = [e for e in out if e is not None]
    if len(fused) < len(tape):
        # backward keeps a walk order on the root of a retained graph: made before the rewrite.
        autograd.forget_walks(e.op for e in tape if isinstance(e, OpCall))
    return fused


def _tensors(obj: Any) -> Iterator[Tensor]:
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from _tensors(v)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)

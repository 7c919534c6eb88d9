"""What a :class:`~singa_lite.sonnx.importer.Program` run executes: a :class:`Plan`, made once.

A streaming speech or keyword model runs some 150 nodes on tensors of a few hundred elements
for every audio frame: its latency is the cost of dispatching nodes, not of arithmetic. So
everything about a run that the graph alone decides is worked out when the plan is made, and
:meth:`Plan.run` is one tight loop over precompiled steps:

- every value name has a slot in a list; a step reads and writes slots by index (no dict of
  names), and a run starts from a copy of the template list that holds the constants;
- the slots to free after each step (intermediates whose last reader it is, never the graph
  outputs, ``aux_output`` or constants) are listed per step;
- the type check (:class:`~singa_lite.sonnx.validate.InputTypes`) is kept only for the steps
  whose schema constrains some input, and only until a run has passed them all: ONNX types are
  static, so every value's dtype follows from the input dtypes, and later runs on inputs of
  the same dtypes skip the checks; the size precheck (:func:`limits.precheck`) is kept only for
  the operators it bounds;
- ``Limits.max_total_bytes`` is kept by a running total over a list of slot sizes;
- an error inside a step names its node as ``Program._call`` does (``while running ONNX ...``),
  caught once around the whole loop rather than around each step.

A program makes a plan per kind of run it is asked for (the whole graph; a cut at
``last_layers`` with ``aux_output``) and makes it again when its nodes, handlers or constants
were replaced (``fusion.optimize`` rewrites a copy before any run).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from singa_lite.errors import OnnxError, SingaLiteError
from singa_lite.sonnx import limits as _limits
from singa_lite.tensor import Tensor

if TYPE_CHECKING:
    from singa_lite.sonnx.importer import Program

# Operators whose output size ``limits.precheck`` works out from the input shapes.
_PRECHECKED = _limits.BROADCASTING | {"MatMul", "Gather", "Einsum"}


class _Unset:
    """The value of a slot no input, constant or step has filled yet."""

    def __repr__(self) -> str:
        return "<unset>"


UNSET: Any = _Unset()


class Plan:
    """Nodes ``0 .. stop - 1`` of ``program`` as steps over slots, returning the values of
    ``names`` (graph outputs, or the last kept node's outputs, then ``aux_output``).

    ``program`` is read as it is now; :meth:`fits` says whether it still is.
    """

    def __init__(self, program: Program, stop: int, names: Sequence[str], aux_output: Sequence[str]) -> None:
        self.nodes, self.handlers, self.constants = program.nodes, list(program.handlers), program.constants
        self.n_constants = len(program.constants)
        self.limits = program.limits
        slot: dict[str, int] = {"": 0}  # slot 0 always holds None: an omitted optional input
        template: list[Any] = [None]

        def slot_of(name: str) -> int:
            if name not in slot:
                slot[name] = len(template)
                template.append(program.constants.get(name, UNSET))
            return slot[name]

        keep = {*names, *aux_output}
        produced: set[str] = set()
        steps = []
        for k in range(stop):
            if program.folded[k]:  # its outputs are constants
                continue
            node = program.nodes[k]
            ins = tuple(slot_of(i) for i in node.inputs)
            outs = tuple((p, slot_of(o)) for p, o in enumerate(node.outputs) if o)
            produced.update(o for o in node.outputs if o)
            frees = tuple(
                dict.fromkeys(
                    slot[name]
                    for name in node.inputs
                    if name
                    and program.last_use.get(name) == k
                    and name not in keep
                    and name not in program.constants
                )
            )
            types = getattr(node, "types", None)
            if types is not None and not (types.allowed or types.groups):
                types = None  # the schema constrains none of its inputs
            # one named output, the first: the common case gets a shorter path in run()
            single = outs[0][1] if len(outs) == 1 and outs[0][0] == 0 else -1
            pre = _Precheck(node, program.limits) if node.op in _PRECHECKED else None
            steps.append((program.handlers[k], node, _getter(ins), outs, single, frees, types, pre))
        self.steps = steps
        # The same steps without their type checks, for runs on the input dtypes that passed them.
        self.unchecked = [(*step[:6], None, step[7]) for step in steps]
        self.checked_dtypes: tuple | None = None
        self.results = [slot_of(n) for n in names]
        self.aux = [(a, slot_of(a)) for a in aux_output]
        self.aux_names = set(aux_output)
        self.slot = slot
        self.template = template
        # Read from the feeds or variables: what no step makes and no constant holds.
        self.external = [
            (name, s)
            for name, s in slot.items()
            if name and name not in produced and name not in program.constants
        ]

    def fits(self, program: Program) -> bool:
        """Whether ``program`` still has the nodes, handlers and constants this plan was made of."""
        return (
            self.nodes is program.nodes
            and self.handlers == program.handlers
            and self.constants is program.constants
            and self.n_constants == len(program.constants)
            and self.limits is program.limits
        )

    def run(self, feeds: Mapping[str, Any], variables: Mapping[str, Any] | None) -> list[Any]:
        """Run the steps on ``feeds`` and ``variables`` (values by name; they take precedence
        over constants of the same name, feeds over variables); the values of the plan's names."""
        vals = list(self.template)
        slot = self.slot
        for values in (variables, feeds):
            for name, v in (values or {}).items():
                s = slot.get(name)
                if s is not None:
                    vals[s] = v
        missing = [name for name, s in self.external if vals[s] is UNSET and name not in self.aux_names]
        if missing:
            raise OnnxError(f"no value was given for {missing}, which the graph reads")
        dtypes = self._dtypes(vals)
        if dtypes is not None and dtypes == self.checked_dtypes:
            self._execute(vals, self.unchecked)
        else:
            self._execute(vals, self.steps)
            if dtypes is not None:  # every check passed
                self.checked_dtypes = dtypes
        absent = [a for a, s in self.aux if vals[s] is UNSET]
        if absent:
            raise OnnxError(f"aux_output {absent} are not tensors computed before the cut")
        return [vals[s] for s in self.results] + [vals[s] for _, s in self.aux]

    def _dtypes(self, vals: list[Any]) -> tuple | None:
        """The dtypes of the values a run reads from its feeds and variables, or None where
        one is not a tensor (a sequence: its checks are not skipped)."""
        dtypes = []
        for _, s in self.external:
            v = vals[s]
            if type(v) is not Tensor:
                return None
            dtypes.append(v.data.dtype)
        return tuple(dtypes)

    def _execute(self, vals: list[Any], steps: list[tuple]) -> None:
        sizes = [0] * len(vals)  # bytes of the values the steps made (limits.max_total_bytes)
        live = 0
        limits = self.limits
        most = limits.max_total_bytes
        node = None
        try:
            for fn, node, get, outs, single, frees, types, pre in steps:
                args = get(vals)
                if types is not None:
                    types.check(args)
                if pre is not None:
                    pre(args)
                out = fn(node, *args)
                if single >= 0 and type(out) is Tensor:
                    vals[single] = out
                    size = out.data.nbytes
                    live += size - sizes[single]
                    sizes[single] = size
                else:
                    out = list(out) if isinstance(out, (tuple, list)) else [out]
                    for p, s in outs:
                        if p < len(out):
                            v = vals[s] = out[p]
                            size = _value_bytes(v)
                            live += size - sizes[s]
                            sizes[s] = size
                for s in frees:
                    vals[s] = None
                    live -= sizes[s]
                    sizes[s] = 0
                if live > most:
                    vals.clear()
                    _limits.check_total(node, live, limits, "the tensors of this run")
        except SingaLiteError as e:  # keep the type (ShapeError, DTypeError...), name the node
            if node is None or str(e).startswith(str(node)):
                raise
            raise type(e)(f"{e} (while running ONNX {node})") from e
        except Exception as e:  # a raw NumPy/Python error: name the node instead of crashing
            if node is None:
                raise
            raise OnnxError(f"{node}: {type(e).__name__}: {e}") from e


def _getter(ins: tuple[int, ...]) -> Callable[[list], Sequence]:
    """A function of the slot list giving a step's arguments, one C call: ``itemgetter``
    answers a tuple for two slots or more, a slice a list for fewer."""
    if len(ins) >= 2:
        return itemgetter(*ins)
    return itemgetter(slice(ins[0], ins[0] + 1) if ins else slice(0, 0))


class _Precheck:
    """``limits.precheck`` of one node, remembering the input shapes and dtypes that passed
    last (the answer follows from them and the node's attributes alone)."""

    def __init__(self, node: Any, limits: _limits.Limits) -> None:
        self.node, self.limits = node, limits
        self.passed: tuple | None = None

    def __call__(self, args: Sequence[Any]) -> None:
        try:
            key = tuple([(a.data.shape, a.data.dtype) for a in args])
        except AttributeError:  # an omitted input, a sequence: checked each time
            _limits.precheck(self.node, args, self.limits)
            return
        if key != self.passed:
            _limits.precheck(self.node, args, self.limits)
            self.passed = key


def _value_bytes(v: Any) -> int:
    """The bytes a program value holds: a Tensor, a sequence (list) of them, or ``None``."""
    if isinstance(v, Tensor):
        return int(v.data.nbytes)
    return sum(int(x.data.nbytes) for x in v) if isinstance(v, list) else 0

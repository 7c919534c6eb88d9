"""Inference rewrites of an imported program, run once at prepare time: :data:`PASSES` and
:func:`optimize`.

``optimize(program)`` copies a :class:`~singa_lite.sonnx.importer.Program` for inference (the
nodes folded at prepare time dropped, the constants shared) and runs each pass on the copy, in
order. A pass has a ``name`` and one method, ``run(program)``: it finds a pattern in the
program's nodes, checks from the graph that rewriting it cannot change a result (readers, graph
outputs, constant weights), and swaps in other nodes or handlers; each new handler checks its
inputs at run time as well and runs the original nodes where they are not what the rewrite
assumed. A ``SONNXModel``, a cut (``last_layers``), ``aux_output`` and
``prepare(..., optimize=False)`` run the program as written.

- ``StaticShapes``: Shape and Size nodes of tensors whose shape ONNX shape inference fixes
  (from the graph inputs' declared dims, which ``SingaRep.run`` checks) become constants, and
  the nodes computing from them only (a channel split's Gather, Div, Slice arguments) are
  folded; each Shape node stays as a check of its tensor's shape.
- ``FoldAffineChains``: BatchNormalization / per-channel Mul / Add chains into the Conv before
  them, or into one ``x * a + c`` node.
- ``FoldAffineReluConv``: ``relu(x * a + c)`` read only by a 1x1 Conv: one ``max(x, t)`` pass.
- ``PoolBeforeConv``: an average pool after a 1x1 Conv runs before it, on 4x fewer pixels.
- ``PackConvs``: a Conv's constant weight and bias as one matrix, made once.
- ``ConvActivation``: a Relu or Clip read only from a packed Conv runs inside it.
- ``ConcatIntoBuffers``: densenet's growing Concats write into one buffer instead of copying.
- ``InPlace``: Relu and residual Add on fresh arrays overwrite them.
- ``ElementwiseChains`` (:mod:`~singa_lite.sonnx.chains`): SiLU, HardSwish and Add + Relu as
  exported node chains, one node each.
- ``DirectOps`` (:mod:`~singa_lite.sonnx.direct`): common small nodes run their operator's
  forward on the arrays, the operator built once.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from singa_lite import backend
from singa_lite.errors import OnnxError, SingaLiteError
from singa_lite.sonnx.chains import ElementwiseChains, _InPlaceHandler, _readers, clip_bounds, drop_nodes
from singa_lite.sonnx.direct import DirectOps
from singa_lite.sonnx.import_ops import HANDLERS, HOST_INPUTS
from singa_lite.sonnx.import_ops.base import Node
from singa_lite.sonnx.import_ops.nn import PackedConv
from singa_lite.tensor import Tensor

if TYPE_CHECKING:
    from singa_lite.sonnx.importer import Program


class Pass(Protocol):
    """One inference rewrite: ``run`` changes a program's nodes, handlers and constants in place."""

    name: str

    def run(self, program: Program) -> None: ...


def optimize(program: Program, passes: Sequence[Pass] | None = None) -> Program:
    """A copy of ``program`` for inference only, rewritten by ``passes`` (default: :data:`PASSES`)
    in order. The copy shares ``program``'s constants; ``program`` itself is left as it is."""
    out = copy.copy(program)
    out.constants = dict(program.constants)
    out.__dict__["_plans"] = {}  # its own run plans (see plan.Plan), not the original's
    kept = [k for k, folded in enumerate(program.folded) if not folded]  # their outputs are constants
    out.nodes = [program.nodes[k] for k in kept]
    out.handlers = [program.handlers[k] for k in kept]
    out.folded = [False] * len(kept)
    for p in PASSES if passes is None else passes:
        try:
            p.run(out)
        except SingaLiteError:
            raise
        except Exception as e:  # a rewrite met what its checks did not foresee: name it, never crash
            raise OnnxError(
                f"the inference rewrite {p.name!r} failed on this model: {type(e).__name__}: {e}"
            ) from e
    out.last_use = out._last_uses()
    return out


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
    ``(node, handler)``; ``constants`` are the folded weights by their new names
    (``FoldAffineChains`` applies them).
    """

    def __init__(self, program: Program) -> None:
        self.program = program
        self.dropped: set[int] = set()
        self.replaced: dict[int, tuple[Node, Callable]] = {}
        self.constants: dict[str, Tensor] = {}
        self.readers = _readers(program)
        for k, node in enumerate(program.nodes):
            if not program.folded[k] and k not in self.dropped:
                self._fold_from(k, node)

    def _const(self, name: str) -> np.ndarray | None:
        t = self.program.constants.get(name) if name else None
        return None if t is None else backend.to_host(t.data)

    def _fold_from(self, k: int, node: Node) -> None:
        """Fold the chain of affine nodes after node ``k``, a Conv or a BatchNormalization."""
        W = self._const(node.inputs[1]) if node.op == "Conv" and len(node.inputs) > 1 else None
        if W is not None and W.dtype.kind == "f" and W.ndim == 4:
            B = self._const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
            if len(node.inputs) > 2 and node.inputs[2] and (B is None or B.shape != (W.shape[0],)):
                return  # a bias of another shape: the Conv handler says what is wrong with it
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
        if len({p.shape for p in params if p is not None}) != 1:
            return None  # lengths that disagree: the BatchNormalization handler refuses them
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


class FoldAffineChains:
    """Each chain of per-channel affine nodes into the Conv before it, or into one node."""

    name = "fold_affine_chains"

    def run(self, program: Program) -> None:
        found = _AffineChains(program)
        nodes, handlers = [], []
        for k, (node, fn) in enumerate(zip(program.nodes, program.handlers)):
            if k not in found.dropped:
                node, fn = found.replaced.get(k, (node, fn))
                nodes.append(node)
                handlers.append(fn)
        program.nodes, program.handlers, program.folded = nodes, handlers, [False] * len(nodes)
        program.constants.update(found.constants)


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
        self.scale, self.shift = a, c  # float64, for the passes that fold further
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


class FoldAffineReluConv:
    """``Conv1x1(relu(x * a + c))`` with every ``a > 0`` as ``Conv1x1'(max(x, t))``.

    densenet runs BN -> Relu -> 1x1 Conv 59 times on the growing concatenation: the affine node
    and the Relu are three passes over it. Per channel, ``relu(a x + c) = a max(x, t) + c`` with
    ``t = -c / a`` when ``a > 0``; a 1x1 Conv without padding is a per-pixel matrix product, so
    ``a`` goes into its weight columns (``W' = W a``) and ``c`` into its bias (``B' = B + W c``),
    leaving one ``max(x, t)`` pass. Only where the affine output is read by the Relu alone, the
    Relu output by the Conv alone, and neither is a graph output. The Relu node stays in the
    program and passes its input on (``_Applied``).
    """

    name = "fold_affine_relu_conv"

    def run(self, program: Program) -> None:
        readers = _readers(program)
        for k, fn in enumerate(program.handlers):
            if isinstance(fn, _AffineHandler) and not program.folded[k]:
                self._fold(program, readers, k, fn)

    @staticmethod
    def _only_reader(program: Program, readers: dict, name: str) -> int | None:
        ks = readers.get(name, [])
        return ks[0] if len(ks) == 1 and name not in program.outputs else None

    def _fold(self, program: Program, readers: dict, k: int, affine: _AffineHandler) -> None:
        r = self._only_reader(program, readers, program.nodes[k].outputs[0])
        if r is None or program.nodes[r].op != "Relu" or program.handlers[r] is not HANDLERS["Relu"]:
            return
        q = self._only_reader(program, readers, program.nodes[r].outputs[0])
        if q is None or program.handlers[q] is not HANDLERS["Conv"] or program.folded[q]:
            return
        conv = program.nodes[q]
        W = program.constants.get(conv.inputs[1]) if len(conv.inputs) > 1 else None
        b_name = conv.inputs[2] if len(conv.inputs) > 2 else ""
        B = program.constants.get(b_name) if b_name else None
        if (
            W is None
            or (b_name and (B is None or B.shape != (W.shape[0],)))
            or W.ndim() != 4
            or conv.inputs[0] != program.nodes[r].outputs[0]
            or W.dtype.kind != "f"
            or W.shape[1:] != (affine.channels, 1, 1)
            or conv.attr("group", 1) != 1
            or any(conv.attr("pads", [0]))
            or conv.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID")
            or not (affine.scale > 0).all()
        ):
            return
        w = backend.to_host(W.data).astype(np.float64)
        b = np.zeros(W.shape[0]) if B is None else backend.to_host(B.data).astype(np.float64)
        w_name, bias_name = f"{conv.outputs[0]}::relu_folded_W", f"{conv.outputs[0]}::relu_folded_B"
        folded_w = w * affine.scale.reshape(1, -1, 1, 1)
        program.constants[w_name] = program.tensor(folded_w.astype(W.dtype), w_name)
        bias = b + w[:, :, 0, 0] @ affine.shift
        program.constants[bias_name] = program.tensor(bias.astype(W.dtype), bias_name)
        new = copy.copy(conv)
        new.inputs = [conv.inputs[0], w_name, bias_name]
        program.nodes[q] = new
        program.handlers[k] = _ClampHandler(affine)
        program.handlers[r] = _Applied()


class _ClampHandler:
    """``max(x, t)`` per channel: an affine node and its Relu whose scale and shift went into
    the 1x1 Conv reading them (see ``FoldAffineReluConv``)."""

    def __init__(self, affine: _AffineHandler) -> None:
        self.affine = affine
        t = -affine.shift / affine.scale
        self.t = affine.program.tensor(t.astype(affine.a.dtype).reshape(1, -1, 1, 1), "clamp").data

    def __call__(self, node: Node, x: Tensor) -> Tensor:
        if x.ndim() != 4 or x.shape[1] != self.affine.channels:
            # The Conv after this rejects such an input: let the original nodes say what is wrong.
            return HANDLERS["Relu"](node, self.affine._unfused(x))
        t = self.t if x.dtype == self.t.dtype else self.t.astype(x.dtype)
        return Tensor._wrap(x.device.xp.maximum(x.data, t), x.device, False, None, 0)


class _Applied:
    """The handler of a node whose work an earlier node did: passes its input on."""

    def __call__(self, node: Node, x: Tensor) -> Tensor:
        return x


class PoolBeforeConv:
    """``AveragePool(Conv1x1(x))`` run as ``Conv1x1(AveragePool(x))``: 4x fewer conv FLOPs.

    A 1x1 Conv with stride 1 and no padding maps each pixel on its own, linearly; an average
    pool without padding or partial windows averages pixels with weights that sum to one. The two
    commute, bias included (densenet's transitions: Conv 1x1 -> AveragePool 2x2 / 2). Only where
    the Conv output is read by the pool alone and is not a graph output. The pool moves to the
    Conv's place in the program and the Conv to the pool's, so both still run in graph order.
    """

    name = "pool_before_conv"

    def run(self, program: Program) -> None:
        readers = _readers(program)
        for k, node in enumerate(program.nodes):
            if (
                node.op != "Conv"
                or program.handlers[k] is not HANDLERS["Conv"]
                or not self._pointwise(program, node)
            ):
                continue
            ks = readers.get(node.outputs[0], [])
            if (
                len(ks) != 1
                or node.outputs[0] in program.outputs
                or not self._plain_average(program.nodes[ks[0]])
            ):
                continue
            p, pool = ks[0], program.nodes[ks[0]]
            pooled = f"{node.outputs[0]}::pooled"
            new_pool, new_conv = copy.copy(pool), copy.copy(node)
            new_pool.inputs, new_pool.outputs = [node.inputs[0]], [pooled]
            new_conv.inputs, new_conv.outputs = [pooled, *node.inputs[1:]], list(pool.outputs)
            program.nodes[k], program.nodes[p] = new_pool, new_conv
            program.handlers[k], program.handlers[p] = program.handlers[p], program.handlers[k]

    @staticmethod
    def _pointwise(program: Program, conv: Node) -> bool:
        W = program.constants.get(conv.inputs[1]) if len(conv.inputs) > 1 else None
        return (
            W is not None
            and W.ndim() == 4
            and W.shape[2:] == (1, 1)
            and all(s == 1 for s in conv.attr("strides", [1]))
            and not any(conv.attr("pads", [0]))
            and conv.attr("auto_pad", "NOTSET") in ("NOTSET", "VALID")
        )

    @staticmethod
    def _plain_average(pool: Node) -> bool:
        if pool.op == "GlobalAveragePool":
            return True
        return (
            pool.op == "AveragePool"
            and pool.n_outputs == 1
            and not any(pool.attr("pads", [0]))
            and pool.attr("auto_pad", "NOTSET") in ("NOTSET", "VALID")
            and not pool.attr("ceil_mode", 0)
            and all(d == 1 for d in pool.attr("dilations", [1]))
        )


class PackConvs:
    """Each Conv with a constant float weight and bias gets a ``PackedConv`` handler: weight and
    bias as one matrix, made here once instead of at every run."""

    name = "pack_convs"

    def run(self, program: Program) -> None:
        for k, node in enumerate(program.nodes):
            if program.folded[k] or program.handlers[k] is not HANDLERS["Conv"] or len(node.inputs) < 3:
                continue
            W, B = (program.constants.get(name) for name in node.inputs[1:3])
            if (
                W is not None
                and B is not None
                and W.dtype == B.dtype
                and W.dtype.kind == "f"
                and PackedConv.fits(W, B, node.attr("group", 1))
            ):
                program.handlers[k] = PackedConv(W, B, node.attr("group", 1))


class ConvActivation:
    """A Relu, or a Clip of constant bounds, whose input is a packed Conv's output and nothing
    else's: the Conv node clamps its own output and the activation node goes.

    A depthwise conv on the compiled kernels clamps each value as it writes it, so the
    activation costs no pass of its own (MobileNetV2's 112x112x96 ReLU alone is a 0.5 ms pass);
    the other paths clamp their fresh output in place, as the in-place Relu would, one node
    fewer to dispatch. Not where the Conv's output is a graph output or read elsewhere.
    """

    name = "conv_activation"

    def run(self, program: Program) -> None:
        readers = _readers(program)
        dropped: set[int] = set()
        for k, node in enumerate(program.nodes):
            fn = program.handlers[k]
            if not isinstance(fn, PackedConv) or fn.bounds is not None or len(node.outputs) != 1:
                continue
            out = node.outputs[0]
            ks = readers.get(out, [])
            if out in program.outputs or len(ks) != 1 or program.folded[ks[0]]:
                continue
            act = program.nodes[ks[0]]
            bounds = self._bounds(program, act, program.handlers[ks[0]])
            if bounds is None or act.n_outputs != 1 or act.inputs[0] != out:
                continue
            fused = copy.copy(node)
            fused.outputs = list(act.outputs)
            program.nodes[k], program.handlers[k] = fused, PackedConv.with_bounds(fn, bounds)
            dropped.add(ks[0])
        drop_nodes(program, dropped)

    @staticmethod
    def _bounds(program: Program, act: Node, fn: Callable) -> tuple[float, float] | None:
        """``(lo, hi)`` of a plain Relu or Clip node (``-inf``/``inf`` for an open end), else None."""
        if act.op == "Relu" and fn is HANDLERS["Relu"]:
            return 0.0, math.inf
        ends = clip_bounds(program, act) if act.op == "Clip" and fn is HANDLERS["Clip"] else None
        if ends is None:
            return None
        lo = -math.inf if ends[0] is None else ends[0]
        hi = math.inf if ends[1] is None else ends[1]
        return None if math.isnan(lo) or math.isnan(hi) or (lo, hi) == (-math.inf, math.inf) else (lo, hi)


class ConcatIntoBuffers:
    """Concats that extend the previous Concat's output, written into one buffer.

    In a densenet block every layer concatenates all features so far: ``c_j = Concat(c_{j-1},
    b_j)``, each copying everything again (quadratic in the block's depth). Here the block's
    first Concat allocates the last one's full size (from ONNX shape inference) and every
    ``c_j`` is a view of its leading channels, so each Concat copies only its new piece.

    A link ``c_{j-1} -> c_j`` needs ``c_{j-1}`` to be read by no Concat other than ``c_j``, and
    as its first input only, and not to be a graph output: two Concats extending one view would
    write the same channels. The views are never written afterwards: no handler writes into an
    input it does not own (``InPlace`` only takes fresh Conv/affine outputs). The buffer sizes
    are the static shapes of the Concat outputs (``Program.concat_shapes``).
    """

    name = "concat_into_buffers"

    def run(self, program: Program) -> None:
        sizes = program.concat_shapes
        readers = _readers(program)
        concat = HANDLERS["Concat"]
        member = {
            node.outputs[0]: k
            for k, node in enumerate(program.nodes)
            if program.handlers[k] is concat and not program.folded[k] and len(node.outputs) == 1
        }
        following: dict[int, int] = {}  # concat index -> the concat that extends its output
        for name, k in member.items():
            rs = readers.get(name, [])
            nxt = [j for j in rs if program.handlers[j] is concat]
            if (
                len(nxt) == 1
                and nxt[0] in member.values()
                and program.nodes[nxt[0]].inputs.index(name) == 0
                and program.nodes[nxt[0]].inputs.count(name) == 1
                and program.nodes[nxt[0]].attr("axis") == program.nodes[k].attr("axis")
                and name not in program.outputs
            ):
                following[k] = nxt[0]
        for start in sorted(set(following) - set(following.values())):
            chain = [start]
            while chain[-1] in following:
                chain.append(following[chain[-1]])
            last = program.nodes[chain[-1]]
            axis = last.attr("axis", 0)
            shape = sizes.get(last.outputs[0])
            if shape is None or not -len(shape) <= axis < len(shape) or not shape[axis]:
                continue
            for i, k in enumerate(chain):
                program.handlers[k] = _ConcatInto(shape[axis], extends=i > 0)


class _ConcatInto:
    """Concat into a buffer of ``total`` along the axis, as a view of its leading part.

    With ``extends``, the first input is the view the previous Concat of the chain returned:
    only the other inputs are copied, behind it. Anything unexpected at run time (a first input
    that is not such a view, shapes that do not fit the buffer) starts a new buffer or runs the
    plain Concat: the views hold the right values either way.
    """

    def __init__(self, total: int, extends: bool) -> None:
        self.total, self.extends = total, extends

    def __call__(self, node: Node, *xs: Tensor) -> Tensor:
        first = xs[0]
        ndim = first.ndim()
        axis = node.attr("axis", 0)
        axis = axis + ndim if axis < 0 else axis
        arrays = [x.data for x in xs]
        if not 0 <= axis < ndim or any(a.ndim != ndim or a.dtype != arrays[0].dtype for a in arrays):
            return HANDLERS["Concat"](node, *xs)
        outer = first.shape[:axis]
        inner = first.shape[axis + 1 :]
        if any(a.shape[:axis] != outer or a.shape[axis + 1 :] != inner for a in arrays):
            return HANDLERS["Concat"](node, *xs)
        buf = self._extendable(arrays[0], axis)
        if buf is None:
            if sum(a.shape[axis] for a in arrays) > self.total:
                return HANDLERS["Concat"](node, *xs)
            # `total` came from shape inference over the model's own declarations: check it
            node.check_size((*outer, self.total, *inner), arrays[0].dtype, "concatenation buffer")
            buf = first.device.xp.empty((*outer, self.total, *inner), arrays[0].dtype)
            start = 0
        else:
            start, arrays = arrays[0].shape[axis], arrays[1:]
            if start + sum(a.shape[axis] for a in arrays) > buf.shape[axis]:
                return HANDLERS["Concat"](node, *xs)
        lead = (slice(None),) * axis
        for a in arrays:
            end = start + a.shape[axis]
            buf[lead + (slice(start, end),)] = a
            start = end
        out = buf if start == buf.shape[axis] else buf[lead + (slice(0, start),)]
        return Tensor._wrap(out, first.device, False, None, 0)

    def _extendable(self, prev: Any, axis: int) -> Any:
        """The buffer ``prev`` is the leading part of along ``axis``, or ``None``."""
        buf = prev.base
        if not self.extends or buf is None or buf.ndim != prev.ndim or buf.strides != prev.strides:
            return None
        if buf.shape[:axis] != prev.shape[:axis] or buf.shape[axis + 1 :] != prev.shape[axis + 1 :]:
            return None
        return buf if _address(buf) == _address(prev) else None


def _address(a: Any) -> int:
    """The address of an array's first element (NumPy or CuPy)."""
    ptr = getattr(a.data, "ptr", None)
    return int(ptr) if ptr is not None else int(a.__array_interface__["data"][0])


class InPlace:
    """Relu and residual Add/Sum nodes of an inference program that may overwrite an input.

    A Conv (or a folded affine chain) returns a new array that nothing else holds; if its one
    reader is a Relu, or a two-input Add/Sum of equal shapes, that reader can write into it
    instead of allocating (a fresh multi-megabyte array costs its page faults on every run:
    measured 1.5-2x the in-place pass). An in-place node's output is its input's array, so it is
    a fresh producer in turn (resnet's Conv -> Sum -> Relu). Graph outputs are never written.
    """

    name = "in_place"

    def run(self, program: Program) -> None:
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
            if node.op == "Relu" and fn is HANDLERS["Relu"] and owned:
                program.handlers[k] = _InPlaceHandler(fn, "Relu", 0)
            elif node.op in ("Add", "Sum") and len(node.inputs) == 2 and owned:
                program.handlers[k] = _InPlaceHandler(fn, "Add", owned[0])
            elif not (fn is HANDLERS["Conv"] or isinstance(fn, (_AffineHandler, PackedConv))):
                continue
            fresh.add(node.outputs[0])


class StaticShapes:
    """Shape and Size nodes of statically shaped tensors as constants, and what follows from them
    folded (see the module docstring).

    A whole-graph run of a ``SingaRep`` has its inputs checked against the dims the graph
    declares, so a tensor whose shape ONNX shape inference gives in full from those dims has
    that shape at every run. The node's output becomes a constant; the nodes whose inputs are
    then all constants (the arithmetic on shapes that exporters write for a channel split or
    a reshape) are run once, here, and leave the program, as the importer folds constants.
    The Shape or Size node itself stays, as a check: its handler compares the tensor's shape
    with the inferred one and raises an ``OnnxError`` where they differ (a handler and shape
    inference disagreeing), rather than let a folded value be wrong."""

    name = "static_shapes"

    def run(self, program: Program) -> None:
        found = False
        for k, node in enumerate(program.nodes):
            shape = program.shape_inputs.get(node.inputs[0]) if node.inputs else None
            if node.op not in ("Shape", "Size") or program.folded[k] or not shape or 0 in shape:
                continue
            fn = program.handlers[k]
            xp = program.device.xp  # a view of one zero: no array of that shape is made
            zero = xp.broadcast_to(xp.zeros((), np.float32), shape)
            stand_in = Tensor(data=zero, device=program.device, requires_grad=False)
            (value,) = program._call(node, fn, [stand_in])
            program.constants[node.outputs[0]] = value
            program.handlers[k] = _ShapeCheck(fn, tuple(shape), value)
            found = True
        if found:
            self._fold_constants(program)

    @staticmethod
    def _fold_constants(program: Program) -> None:
        """Fold the nodes whose inputs are all constants now, and drop them."""
        keep = []
        for k, node in enumerate(program.nodes):
            if isinstance(program.handlers[k], _ShapeCheck) or not program._fold(node, program.handlers[k]):
                keep.append(k)
        program.nodes = [program.nodes[k] for k in keep]
        program.handlers = [program.handlers[k] for k in keep]
        program.folded = [False] * len(keep)
        for node in program.nodes:
            program._share_constants(node, HOST_INPUTS.get(node.op, ()))


class _ShapeCheck:
    """A Shape or Size node whose output was folded: checks that its input has the shape it
    was folded for and answers the folded value."""

    def __init__(self, fn: Callable, shape: tuple, value: Tensor) -> None:
        self.fn, self.shape, self.value = fn, shape, value

    def __call__(self, node: Node, x: Any) -> Tensor:
        if type(x) is not Tensor or tuple(x.shape) != self.shape:
            got = getattr(x, "shape", type(x).__name__)
            raise OnnxError(
                f"{node}: its input has shape {got}, where ONNX shape inference gave {self.shape} "
                "and the values computed from it were folded (prepare with optimize=False to run "
                "the graph as written)"
            )
        return self.value


PASSES: tuple[Pass, ...] = (
    StaticShapes(),
    FoldAffineChains(),
    FoldAffineReluConv(),
    PoolBeforeConv(),
    PackConvs(),
    ConvActivation(),
    ConcatIntoBuffers(),
    InPlace(),
    ElementwiseChains(),
    DirectOps(),
)
"""The passes ``optimize`` runs. The order matters: ``StaticShapes`` comes first, so that the
others see the constants it folds (``DirectOps`` builds a Slice of constant arguments in);
``FoldAffineReluConv`` looks for the affine nodes ``FoldAffineChains`` made and, like
``PoolBeforeConv``, for plain Conv handlers, which ``PackConvs`` then packs; ``ConvActivation``
takes a plain Relu or Clip into a packed Conv before ``InPlace`` would make it in-place;
``InPlace`` looks for what produces fresh arrays (Conv, packed or not, and affine nodes);
``ElementwiseChains`` takes in-place Add and Relu handlers into its Add + Relu node;
``DirectOps`` takes the plain handlers left."""

"""Converters from singa_lite operators to ONNX nodes, one per operator class.

A converter is ``convert(g, op, xs, ys)``: ``g`` is the :class:`GraphBuilder`, ``op`` the
traced operator (its attributes hold what its forward computed: ``op.perm``, ``op.axes_``...),
``xs``/``ys`` the :class:`Value` of each input and output. It appends the nodes that compute
``ys`` from ``xs`` and must write each output under ``ys[i].name``. Converters are looked up
by the op's class, then its base classes, so a subclass (``Mean`` of ``Sum``) registers its
own converter only where its ONNX form differs.

Layout conversions happen here: SINGA's conv padding ``(top, bottom, left, right)`` becomes
ONNX's ``[top, left, bottom, right]``; recurrent weights ``(in, gates * H)`` in SINGA's gate
order become ONNX's ``[1, gates * H, in]`` in ONNX's order, computed in the graph from the
parameter initializers so that they stay the named, trainable tensors on import.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from singa_lite import backend
from singa_lite.ops import (
    activation,
    conv,
    conv_general,
    elementwise,
    linalg,
    loss,
    normalization,
    pool,
    reduce,
    shape,
    unary,
)
from singa_lite.ops import indexing as ix
from singa_lite.ops.interpolate import Resize
from singa_lite.ops.recurrent import (
    GRUCell,
    GRUSequence,
    LSTMCell,
    LSTMSequence,
    RNNCell,
    RNNSequence,
)
from singa_lite.sonnx.frontend import GraphBuilder, Value, unsupported
from singa_lite.sonnx.handlers_base import GATE_ORDER, PEEPHOLE_ORDER

Converter = Callable[[GraphBuilder, Any, list[Value], list[Value]], None]
CONVERTERS: dict[type, Converter] = {}


def converts(*classes: type) -> Callable[[Converter], Converter]:
    """Register the decorated function as the converter of ``classes``."""

    def register(fn: Converter) -> Converter:
        for cls in classes:
            CONVERTERS[cls] = fn
        return fn

    return register


def converter_for(op: Any, opset: int) -> Converter:
    """The converter of ``op``'s class (or nearest base class); ``UnsupportedOperatorError`` if none."""
    for cls in type(op).__mro__:
        fn = CONVERTERS.get(cls)
        if fn is not None:
            return fn
    raise unsupported(op, opset, "no ONNX converter is registered for it")


def _to(g: GraphBuilder, x: Value, dtype: Any) -> str:
    """``x`` cast to ``dtype`` where it differs (NumPy promotes where ONNX needs equal types)."""
    return x.name if x.dtype == np.dtype(dtype) else g.cast(x.name, dtype)


def _scalar(g: GraphBuilder, value: float, dtype: Any) -> str:
    return g.const(np.asarray(value, dtype=dtype))


# -- elementwise ---------------------------------------------------------------------------------
def _same_type(onnx_type: str) -> Converter:
    """Ops whose inputs are cast to the output's dtype first (arithmetic)."""

    def convert(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
        g.one(onnx_type, [_to(g, x, ys[0].dtype) for x in xs], ys[0].name)

    return convert


_cls: type  # the loops below register table-driven converters
for _cls, _name in [
    (elementwise.Add, "Add"),
    (elementwise.Sub, "Sub"),
    (elementwise.Mul, "Mul"),
    (elementwise.Div, "Div"),
    (elementwise.Sum, "Sum"),
    (elementwise.Mean, "Mean"),
    (elementwise.Max, "Max"),
    (elementwise.Min, "Min"),
    (linalg.MatMul, "MatMul"),
]:
    converts(_cls)(_same_type(_name))


@converts(elementwise.Pow)
def _pow(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Pow", [_to(g, xs[0], ys[0].dtype), xs[1].name], ys[0].name)


def _compare(onnx_type: str, logical: bool = False) -> Converter:
    def convert(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
        common = np.dtype(np.bool_) if logical else np.result_type(*[x.dtype for x in xs])
        g.one(onnx_type, [_to(g, x, common) for x in xs], ys[0].name)

    return convert


for _cls, _name in [
    (elementwise.Equal, "Equal"),
    (elementwise.Less, "Less"),
    (elementwise.LessEqual, "LessOrEqual"),
    (elementwise.Greater, "Greater"),
    (elementwise.GreaterEqual, "GreaterOrEqual"),
]:
    converts(_cls)(_compare(_name))
for _cls, _name in [
    (elementwise.LogicalAnd, "And"),
    (elementwise.LogicalOr, "Or"),
    (elementwise.LogicalXor, "Xor"),
    (elementwise.LogicalNot, "Not"),
]:
    converts(_cls)(_compare(_name, logical=True))


def _unary(onnx_type: str, **attrs: Any) -> Converter:
    def convert(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
        g.one(onnx_type, [xs[0].name], ys[0].name, **attrs)

    return convert


for _cls, _name in [
    (unary.Abs, "Abs"),
    (unary.Acos, "Acos"),
    (unary.Acosh, "Acosh"),
    (unary.Asin, "Asin"),
    (unary.Asinh, "Asinh"),
    (unary.Atan, "Atan"),
    (unary.Atanh, "Atanh"),
    (unary.Ceil, "Ceil"),
    (unary.Cos, "Cos"),
    (unary.Cosh, "Cosh"),
    (unary.Erf, "Erf"),
    (unary.Exp, "Exp"),
    (unary.Floor, "Floor"),
    (unary.Log, "Log"),
    (unary.Reciprocal, "Reciprocal"),
    (unary.Round, "Round"),
    (unary.Sign, "Sign"),
    (unary.Sin, "Sin"),
    (unary.Sinh, "Sinh"),
    (unary.Sqrt, "Sqrt"),
    (unary.Tan, "Tan"),
    (elementwise.Neg, "Neg"),
    (activation.ReLU, "Relu"),
    (activation.Sigmoid, "Sigmoid"),
    (activation.Tanh, "Tanh"),
    (activation.SoftPlus, "Softplus"),
    (activation.SoftSign, "Softsign"),
    (activation.Identity, "Identity"),
    (shape.ShapeOf, "Shape"),
    (ix.NonZero, "NonZero"),
    (pool.GlobalAveragePool, "GlobalAveragePool"),
    (pool.GlobalMaxPool, "GlobalMaxPool"),
]:
    converts(_cls)(_unary(_name))


@converts(unary.Square)
def _square(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Mul", [xs[0].name, xs[0].name], ys[0].name)


@converts(unary.Clip)
def _clip(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    dt = xs[0].dtype
    lo = "" if op.lo is None else _scalar(g, op.lo, dt)
    hi = "" if op.hi is None else _scalar(g, op.hi, dt)
    g.one("Clip", [xs[0].name, lo, hi], ys[0].name)


# -- activations ---------------------------------------------------------------------------------
@converts(activation.LeakyRelu)
def _leaky(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("LeakyRelu", [xs[0].name], ys[0].name, alpha=float(op.a))


@converts(activation.Elu)
def _elu(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Elu", [xs[0].name], ys[0].name, alpha=float(op.alpha))


@converts(activation.SeLU)
def _selu(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Selu", [xs[0].name], ys[0].name, alpha=float(op.alpha), gamma=float(op.gamma))


@converts(activation.HardSigmoid)
def _hardsigmoid(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("HardSigmoid", [xs[0].name], ys[0].name, alpha=float(op.alpha), beta=float(op.gamma))


@converts(activation.PRelu)
def _prelu(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("PRelu", [xs[0].name, xs[1].name], ys[0].name)


@converts(activation.Gelu)
def _gelu(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x, dt = xs[0].name, xs[0].dtype
    if g.opset >= 20:
        g.one("Gelu", [x], ys[0].name, approximate=op.approximate)
        return
    # Before opset 20: x * 0.5 * (1 + erf(x / sqrt 2)), or the tanh form.
    if op.approximate == "tanh":
        cube = g.one("Mul", [g.one("Mul", [x, x]), x])
        inner = g.one("Add", [x, g.one("Mul", [cube, _scalar(g, 0.044715, dt)])])
        t = g.one("Tanh", [g.one("Mul", [inner, _scalar(g, math.sqrt(2 / math.pi), dt)])])
    else:
        t = g.one("Erf", [g.one("Mul", [x, _scalar(g, 1 / math.sqrt(2), dt)])])
    half = g.one("Mul", [g.one("Add", [t, _scalar(g, 1.0, dt)]), _scalar(g, 0.5, dt)])
    g.one("Mul", [x, half], ys[0].name)


@converts(activation.SoftMax, activation.LogSoftmax)
def _softmax(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    kind = "Softmax" if isinstance(op, activation.SoftMax) else "LogSoftmax"
    n, axis = xs[0].ndim, op.a
    if g.opset >= 13 or axis == n - 1:
        g.one(kind, [xs[0].name], ys[0].name, axis=axis)
        return
    # Opsets 11-12 flatten from `axis` to the end: move the axis last to get one-axis semantics.
    perm = [i for i in range(n) if i != axis] + [axis]
    back = [perm.index(i) for i in range(n)]
    t = g.one("Transpose", [xs[0].name], perm=perm)
    g.one("Transpose", [g.one(kind, [t], axis=n - 1)], ys[0].name, perm=back)


@converts(activation.AddBias)
def _add_bias(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x, b = xs
    bias = b.name if op.axis == 0 else g.reshape(b.name, [b.shape[0]] + [1] * (x.ndim - 1))
    g.one("Add", [x.name, bias], ys[0].name)


# -- reductions ----------------------------------------------------------------------------------
def _reduce(onnx_type: str) -> Converter:
    def convert(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
        x = _to(g, xs[0], ys[0].dtype)  # a bool sum counts in int64, as singa_lite's does
        if not op.axes:  # a 0-d input: nothing to reduce
            g.one("Identity", [x], ys[0].name)
            return
        g.reduce(onnx_type, x, op.axes, op.keepdims, ys[0].name)

    return convert


for _cls, _name in [
    (reduce.ReduceSum, "ReduceSum"),
    (reduce.ReduceMean, "ReduceMean"),
    (reduce.ReduceMax, "ReduceMax"),
    (reduce.ReduceMin, "ReduceMin"),
    (reduce.ReduceProd, "ReduceProd"),
]:
    converts(_cls)(_reduce(_name))


@converts(reduce.ArgMax, reduce.ArgMin)
def _arg(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    kind = "ArgMax" if isinstance(op, reduce.ArgMax) else "ArgMin"
    x, axis, keep = xs[0].name, op.axis, op.keepdims
    if axis is None or xs[0].ndim == 0:
        x, axis = g.reshape(x, [-1]), 0
        keep = keep and xs[0].ndim <= 1
    last = int(op.last) if op.last else None
    if last and g.opset < 12:
        raise unsupported(op, g.opset, "select_last_index needs opset 12")
    out = g.one(
        kind,
        [x],
        None if keep or ys[0].ndim else ys[0].name,
        axis=int(axis),
        keepdims=int(keep),
        select_last_index=last,
    )
    if out != ys[0].name:
        g.reshape(out, list(ys[0].shape), ys[0].name)


# -- shape ---------------------------------------------------------------------------------------
@converts(shape.Reshape, shape.Squeeze, shape.Unsqueeze)
def _reshape(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    # The traced output shape is exact; Squeeze/Unsqueeze get their own nodes for readability.
    x, y = xs[0], ys[0]
    if isinstance(op, shape.Squeeze):
        axes = (
            [i for i, s in enumerate(x.shape) if s == 1]
            if op.axes is None
            else sorted(a % x.ndim for a in shape._as_list(op.axes))
        )
        if axes:
            g.squeeze(x.name, axes, y.name)
            return
    elif isinstance(op, shape.Unsqueeze):
        g.unsqueeze(x.name, sorted(a % y.ndim for a in shape._as_list(op.axes)), y.name)
        return
    g.reshape(x.name, list(y.shape), y.name)


@converts(shape.Flatten)
def _flatten(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Flatten", [xs[0].name], ys[0].name, axis=int(op.axis))


@converts(shape.Transpose)
def _transpose(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Transpose", [xs[0].name], ys[0].name, perm=[int(p) for p in op.perm])


@converts(shape.Cat)
def _cat(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Concat", [x.name for x in xs], ys[0].name, axis=int(op.axis_))


@converts(shape.Split)
def _split(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.split(xs[0].name, op.axis_, [y.shape[op.axis_] for y in ys], [y.name for y in ys])


@converts(shape.Expand)
def _expand(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Expand", [xs[0].name, g.ints(op.shape)], ys[0].name)


@converts(shape.Tile)
def _tile(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x = xs[0].name
    if len(op.padded) != xs[0].ndim:  # ONNX needs one repeat per axis: add the leading 1s
        x = g.reshape(x, list(op.padded))
    g.one("Tile", [x, g.ints(op.reps)], ys[0].name)


@converts(shape.Pad)
def _pad(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    if op.mode == "wrap" and g.opset < 19:
        raise unsupported(op, g.opset, "mode 'wrap' needs opset 19")
    ins = [xs[0].name, g.ints(op.pads)]
    if op.mode == "constant":
        ins.append(_scalar(g, op.constant, xs[0].dtype))
    g.one("Pad", ins, ys[0].name, mode=op.mode)


@converts(shape.Cast)
def _cast(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.cast(xs[0].name, ys[0].dtype, ys[0].name)


@converts(ix.Slice)
def _slice(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    n = len(op.starts)
    axes = list(range(n)) if op.axes is None else op.axes
    steps = [1] * n if op.steps is None else op.steps
    ins = [xs[0].name, g.ints(op.starts), g.ints(op.ends), g.ints(axes), g.ints(steps)]
    g.one("Slice", ins, ys[0].name)


@converts(ix.GetItem)
def _getitem(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    """NumPy basic indexing (ints, slices, None, Ellipsis) plus at most one integer array,
    as Slice, Gather, Squeeze and Unsqueeze."""
    x = xs[0]
    key = list(op.k)
    arrays = [i for i, k in enumerate(key) if hasattr(k, "dtype") and getattr(k, "ndim", 0) > 0]
    if len(arrays) > 1 or any(key[i].dtype.kind not in "iu" for i in arrays):
        raise unsupported(op, g.opset, "only one integer-array index (no bool masks) can be exported")
    if arrays and any(_is_int(k) for k in key):
        raise unsupported(op, g.opset, "an integer-array index mixed with integer indices")
    if Ellipsis in [k for k in key if not hasattr(k, "dtype")]:
        at = next(i for i, k in enumerate(key) if k is Ellipsis)
        used = sum(1 for k in key if k is not None and k is not Ellipsis)
        key[at : at + 1] = [slice(None)] * (x.ndim - used)
    key += [slice(None)] * (x.ndim - sum(1 for k in key if k is not None))
    cuts: list[tuple[int, int, int, int]] = []  # (start, end, axis, step) per sliced axis
    squeeze, unsq, array_at, out_dim, axis = [], [], None, 0, 0
    for k in key:
        if k is None:
            unsq.append(out_dim)
            out_dim += 1
            continue
        dim = x.shape[axis]
        if isinstance(k, slice):
            start, stop, step = k.indices(dim)
            if step < 0 and stop < 0:
                stop = -(2**62)  # "before element 0", which no non-negative end can say
            if (start, stop, step) != (0, dim, 1):
                cuts.append((start, stop, axis, step))
            out_dim += 1
        elif _is_int(k):
            i = (int(backend.to_host(k)) if hasattr(k, "dtype") else int(k)) % dim
            cuts.append((i, i + 1, axis, 1))
            squeeze.append(axis)
        else:
            array_at = axis
            out_dim += k.ndim
        axis += 1
    t = x.name
    if cuts:
        t = g.one("Slice", [t, *(g.ints(column) for column in zip(*cuts))])
    if array_at is not None:
        index = key[array_at + sum(1 for k in key[: array_at + 1] if k is None)]
        idx = g.const(backend.to_host(index))  # GetItem holds its index arrays on the device
        t = g.one("Gather", [t, idx], axis=array_at)
    if squeeze:
        t = g.squeeze(t, squeeze)
    if unsq:
        t = g.unsqueeze(t, unsq)
    g.one("Identity", [t], ys[0].name)


def _is_int(k: Any) -> bool:
    return isinstance(k, (int, np.integer)) or (hasattr(k, "dtype") and getattr(k, "ndim", 1) == 0)


@converts(ix.Gather)
def _gather(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Gather", [xs[0].name, xs[1].name], ys[0].name, axis=int(op.axis_))


@converts(ix.GatherElements)
def _gather_elements(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("GatherElements", [xs[0].name, xs[1].name], ys[0].name, axis=int(op.axis))


@converts(ix.ScatterElements)
def _scatter_elements(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    need = {"none": 11, "add": 16, "mul": 16, "max": 18, "min": 18}[op.reduction]
    if g.opset < need:
        raise unsupported(op, g.opset, f"reduction {op.reduction!r} needs opset {need}")
    red = op.reduction if op.reduction != "none" else None
    g.one("ScatterElements", [x.name for x in xs], ys[0].name, axis=int(op.axis), reduction=red)


@converts(ix.Where)
def _where(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Where", [_to(g, xs[0], np.bool_), xs[1].name, xs[2].name], ys[0].name)


@converts(ix.OneHot)
def _onehot(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    depth = g.const(np.asarray([op.depth], dtype=np.int64))
    g.one("OneHot", [xs[0].name, depth, xs[1].name], ys[0].name, axis=int(op.axis))


# -- linear algebra ------------------------------------------------------------------------------
@converts(linalg.Gemm)
def _gemm(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one(
        "Gemm",
        [x.name for x in xs],
        ys[0].name,
        alpha=float(op.alpha),
        beta=float(op.beta),
        transA=int(op.transA),
        transB=int(op.transB),
    )


@converts(linalg.Einsum)
def _einsum(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    if g.opset < 12:
        raise unsupported(op, g.opset, "Einsum needs opset 12")
    eq = f"{','.join(op.ins)}->{op.out}"
    g.one("Einsum", [_to(g, x, ys[0].dtype) for x in xs], ys[0].name, equation=eq)


@converts(linalg.Tensordot)
def _tensordot(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    if g.opset < 12:
        raise unsupported(op, g.opset, "Tensordot is exported as Einsum, which needs opset 12")
    a, b = xs
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    sa = [next(letters) for _ in range(a.ndim)]
    sb = [next(letters) for _ in range(b.ndim)]
    for i, j in zip(op.axa, op.axb):
        sb[j] = sa[i]
    out = [c for i, c in enumerate(sa) if i not in op.axa] + [c for j, c in enumerate(sb) if j not in op.axb]
    eq = f"{''.join(sa)},{''.join(sb)}->{''.join(out)}"
    g.one("Einsum", [_to(g, x, ys[0].dtype) for x in xs], ys[0].name, equation=eq)


# -- convolution and pooling ---------------------------------------------------------------------
def _conv_geometry(op: Any) -> tuple[list[int], list[int], list[int], list[int]]:
    """``strides``, begin pads, end pads and ``dilations`` of a conv op, per ONNX spatial axis."""
    if isinstance(op, (conv_general.ConvNd, conv_general.ConvTransposeNd)):
        return list(op.stride), [b for b, _ in op.pads], [e for _, e in op.pads], list(op.dilation)
    t, b, left, r = op.pads
    if isinstance(op, conv.Conv1d):  # a conv2d of height 1
        return [op.stride[1]], [left], [r], [op.dilation[1]]
    return list(op.stride), [t, left], [b, r], list(op.dilation)


@converts(conv.Conv2d, conv.ConvTranspose2d, conv_general.ConvNd, conv_general.ConvTransposeNd)
def _conv(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    strides, begins, ends, dilations = _conv_geometry(op)
    attrs = {
        "kernel_shape": list(xs[1].shape[2:]),
        "strides": strides,
        "dilations": dilations,
        "group": op.group,
    }
    names = [x.name for x in xs]
    if not isinstance(op, (conv.ConvTranspose2d, conv_general.ConvTransposeNd)):
        g.one("Conv", names, ys[0].name, pads=begins + ends, **attrs)
        return
    out_pad = list(op.output_padding)
    if all(p < s for p, s in zip(out_pad, strides)):
        g.one("ConvTranspose", names, ys[0].name, pads=begins + ends, output_padding=out_pad, **attrs)
        return
    # singa_lite (like PyTorch) allows output_padding up to the dilation, onnxruntime only below
    # the stride. Output padding adds cells no window reaches, zero but for the bias: take them
    # off the end pads, zero-pad what is left, and add the bias after.
    y = g.one(
        "ConvTranspose", names[:2], pads=begins + [max(e - p, 0) for e, p in zip(ends, out_pad)], **attrs
    )
    extra = [max(p - e, 0) for e, p in zip(ends, out_pad)]
    if any(extra):
        y = g.one("Pad", [y, g.ints([0, 0] + [0] * len(extra) + [0, 0] + extra)])
    if len(names) < 3:
        g.one("Identity", [y], ys[0].name)
        return
    bias = g.one("Reshape", [names[2], g.ints([1, -1] + [1] * len(extra))])
    g.one("Add", [y, bias], ys[0].name)


@converts(pool.MaxPool, pool.AvgPool)
def _pool(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    w = op.win
    attrs: dict[str, Any] = {
        "kernel_shape": list(w.kernel),
        "strides": list(w.stride),
        "pads": list(w.begin) + list(w.end),
        "ceil_mode": int(w.ceil_mode),
    }
    dilated = any(d != 1 for d in w.dilation)
    if isinstance(op, pool.MaxPool):
        kind = "MaxPool"
    else:
        kind = "AveragePool"
        attrs["count_include_pad"] = int(op.count_include_pad)
        if dilated and g.opset < 19:
            raise unsupported(op, g.opset, "a dilated AveragePool needs opset 19")
    if dilated:
        attrs["dilations"] = list(w.dilation)
    g.one(kind, [xs[0].name], ys[0].name, **attrs)


# -- normalisation -------------------------------------------------------------------------------
@converts(normalization.BatchNorm)
def _batchnorm(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    # Always the inference form: running statistics normalise (ONNX's training_mode = 0).
    g.one("BatchNormalization", [x.name for x in xs], ys[0].name, epsilon=op.eps, momentum=op.momentum)


@converts(normalization.LayerNorm)
def _layernorm(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    axis = op.axes[0] if op.axes else xs[0].ndim
    if g.opset >= 17:
        g.one("LayerNormalization", [x.name for x in xs], ys[0].name, axis=axis, epsilon=op.eps)
        return
    x, dt = xs[0].name, xs[0].dtype
    xc = g.one("Sub", [x, g.reduce("ReduceMean", x, op.axes, True)])
    var = g.reduce("ReduceMean", g.one("Mul", [xc, xc]), op.axes, True)
    std = g.one("Sqrt", [g.one("Add", [var, _scalar(g, op.eps, dt)])])
    y = g.one("Mul", [g.one("Div", [xc, std]), xs[1].name])
    if len(xs) == 3:
        y = g.one("Add", [y, xs[2].name])
    g.one("Identity", [y], ys[0].name)


@converts(normalization.InstanceNorm)
def _instancenorm(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("InstanceNormalization", [x.name for x in xs], ys[0].name, epsilon=op.eps)


@converts(normalization.LRN)
def _lrn(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("LRN", [xs[0].name], ys[0].name, size=op.size, alpha=op.alpha, beta=op.beta, bias=op.bias)


@converts(normalization.Dropout)
def _dropout(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    # ONNX Dropout is the identity at inference and keeps the ratio for an importer that trains.
    if g.opset >= 12:
        g.one("Dropout", [xs[0].name, _scalar(g, op.ratio, np.float32)], ys[0].name)
    else:
        g.one("Dropout", [xs[0].name], ys[0].name, ratio=op.ratio)


# -- resize --------------------------------------------------------------------------------------
@converts(Resize)
def _resize(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    if op.coord == "half_pixel_symmetric" and g.opset < 19:
        raise unsupported(op, g.opset, "coordinate_transformation_mode half_pixel_symmetric needs opset 19")
    if op.scales is not None:
        scales, sizes = g.const(np.asarray(op.scales, np.float32)), ""
    else:
        scales, sizes = "", g.ints(op.sizes)
    roi = ""
    if g.opset < 13:  # roi and scales were required inputs: empty tensors stand for "not given"
        roi = g.const(np.zeros(0, np.float32))
        scales = scales or g.const(np.zeros(0, np.float32))
    ins = [xs[0].name, roi, scales] + ([sizes] if sizes else [])
    attrs: dict[str, Any] = {"mode": op.mode, "coordinate_transformation_mode": op.coord}
    if op.mode == "nearest":
        attrs["nearest_mode"] = op.nearest_mode
    if op.mode == "cubic":
        attrs["cubic_coeff_a"] = op.cubic_a
        attrs["exclude_outside"] = int(op.exclude_outside)
    g.one("Resize", ins, ys[0].name, **attrs)


# -- recurrent -----------------------------------------------------------------------------------


def _onnx_weight(g: GraphBuilder, w: Value, order: tuple[int, ...], hidden: int) -> str:
    """SINGA's ``(in, k*H)`` (or bias ``(k*H,)``) as ONNX's ``[1, k*H, in]`` (or ``[1, k*H]``),
    its ``k`` gate blocks taken in ``order``."""
    name = w.name
    if order != tuple(range(len(order))):
        idx = np.concatenate([np.arange(i * hidden, (i + 1) * hidden) for i in order]).astype(np.int64)
        name = g.one("Gather", [name, g.const(idx)], axis=w.ndim - 1)
    if w.ndim == 2:
        name = g.one("Transpose", [name], perm=[1, 0])
    return g.unsqueeze(name, [0])


def _recurrent(kind: str, cell: bool) -> Converter:
    def convert(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
        n_states = len(op.state_names)
        x, states, (Wx, Wh, Bx, Bh, *peephole) = xs[0], xs[1 : 1 + n_states], xs[1 + n_states :]
        hidden, order = Wh.shape[0], GATE_ORDER[kind]
        W, R = _onnx_weight(g, Wx, order, hidden), _onnx_weight(g, Wh, order, hidden)
        B = g.one("Concat", [_onnx_weight(g, Bx, order, hidden), _onnx_weight(g, Bh, order, hidden)], axis=1)
        xin = g.unsqueeze(x.name, [0]) if cell else x.name
        init = [g.unsqueeze(s.name, [0]) for s in states]
        ins = [xin, W, R, B, "", *init]  # "": no sequence_lens
        if peephole:  # LSTM's P, the input after the initial states
            ins.append(_onnx_weight(g, peephole[0], PEEPHOLE_ORDER, hidden))
        attrs: dict[str, Any] = {"hidden_size": hidden, "direction": "reverse" if op.reverse else None}
        if kind == "RNN":
            attrs["activations"] = ["Tanh" if op.nonlinearity == "tanh" else "Relu"]
        if kind == "GRU":
            attrs["linear_before_reset"] = int(op.linear_before_reset)
        outs = g.node(kind, ins, 1 + n_states, **attrs)
        if cell:  # the outputs are the final states only
            for o, y in zip(outs[1:], ys):
                g.squeeze(o, [0], y.name)
            return
        g.squeeze(outs[0], [1], ys[0].name)
        for o, y in zip(outs[1:], ys[1:]):
            g.squeeze(o, [0], y.name)

    return convert


converts(RNNSequence)(_recurrent("RNN", cell=False))
converts(LSTMSequence)(_recurrent("LSTM", cell=False))
converts(GRUSequence)(_recurrent("GRU", cell=False))
converts(RNNCell)(_recurrent("RNN", cell=True))
converts(LSTMCell)(_recurrent("LSTM", cell=True))
converts(GRUCell)(_recurrent("GRU", cell=True))


# -- losses (composed: ONNX's loss ops cover labels only and not SINGA's clipping) ---------------
def _loss_input(g: GraphBuilder, v: Value) -> tuple[str, Any]:
    """A loss input in the dtype the loss is computed in (float16 is widened, as in singa_lite)."""
    dt = np.dtype(np.float32) if v.dtype == np.float16 else v.dtype
    return _to(g, v, dt), dt


def _batch_mean(g: GraphBuilder, total: str, n: float, dt: Any, y: Value, negate: bool) -> None:
    """``(-)total / n`` as the loss's ``(1,)``-shaped output in its dtype."""
    scaled = g.reshape(g.one("Div", [total, _scalar(g, -n if negate else n, dt)]), [1])
    if np.dtype(dt) != y.dtype:
        scaled = g.cast(scaled, y.dtype)
    g.one("Identity", [scaled], y.name)


def _picked_sum(g: GraphBuilder, logp: str, t: Value, dt: Any) -> str:
    """``sum(t * logp)``: per-class targets multiply, labels pick their class."""
    if t.ndim == 1:
        idx = g.unsqueeze(_to(g, t, np.int64), [1])
        picked = g.one("GatherElements", [logp, idx], axis=1)
    else:
        picked = g.one("Mul", [logp, _to(g, t, dt)])
    return g.reduce("ReduceSum", picked, [0, 1], False)


@converts(loss.SoftMaxCrossEntropy, loss.NLLLoss, loss.CrossEntropy)
def _class_loss(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x, dt = _loss_input(g, xs[0])
    if isinstance(op, loss.SoftMaxCrossEntropy):
        logp = g.one("LogSoftmax", [x], axis=1)
    elif isinstance(op, loss.CrossEntropy):
        logp = g.one("Log", [g.one("Clip", [x, _scalar(g, loss.EPS, dt), _scalar(g, 1.0, dt)])])
    else:
        logp = x
    _batch_mean(g, _picked_sum(g, logp, xs[1], dt), xs[0].shape[0], dt, ys[0], negate=True)


@converts(loss.BinaryCrossEntropy)
def _bce(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    y, dt = _loss_input(g, xs[0])
    t = _to(g, xs[1], dt)
    c = g.one("Clip", [y, _scalar(g, loss.EPS, dt), _scalar(g, 1 - loss.EPS, dt)])
    one = _scalar(g, 1.0, dt)
    pos = g.one("Mul", [t, g.one("Log", [c])])
    neg = g.one("Mul", [g.one("Sub", [one, t]), g.one("Log", [g.one("Sub", [one, c])])])
    total = g.reduce("ReduceSum", g.one("Add", [pos, neg]), list(range(xs[0].ndim)), False)
    _batch_mean(g, total, xs[0].shape[0], dt, ys[0], negate=True)


@converts(loss.MeanSquareError)
def _mse(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x, dt = _loss_input(g, xs[0])
    err = g.one("Sub", [x, _to(g, xs[1], dt)])
    total = g.reduce("ReduceSum", g.one("Mul", [err, err]), list(range(xs[0].ndim)), False)
    _batch_mean(g, total, 2 * xs[0].shape[0], dt, ys[0], negate=False)


def supported_operators() -> list[str]:
    """Names of the singa_lite operator classes that export, sorted."""
    return sorted({cls.__name__ for cls in CONVERTERS})


# The transformer ops' converters live apart to keep this file small; importing registers them.
from singa_lite.sonnx import frontend_attention  # noqa: E402, F401

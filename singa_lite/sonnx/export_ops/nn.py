"""Converters of neural-network layers: convolution, pooling, normalisation, resizing, recurrent
layers and losses (the exporter's side of :mod:`singa_lite.sonnx.import_ops.nn`).

Layout conversions happen here: SINGA's conv padding ``(top, bottom, left, right)`` becomes
ONNX's ``[top, left, bottom, right]``; recurrent weights ``(in, gates * H)`` in SINGA's gate
order become ONNX's ``[1, gates * H, in]`` in ONNX's order, computed in the graph from the
parameter initializers so that they stay the named, trainable tensors on import.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite.ops import conv, conv_general, loss, normalization, pool
from singa_lite.ops.interpolate import Resize
from singa_lite.ops.recurrent import (
    GRUCell,
    GRUSequence,
    LSTMCell,
    LSTMSequence,
    RNNCell,
    RNNSequence,
)
from singa_lite.sonnx.export_ops.base import Converter, GraphBuilder, Value, converts, unsupported
from singa_lite.sonnx.import_ops.base import GATE_ORDER, PEEPHOLE_ORDER


# -- convolution and pooling ---------------------------------------------------------------------
def _conv_geometry(op: Any) -> tuple[list[int], list[int], list[int], list[int]]:
    """``strides``, begin pads, end pads and ``dilations`` of a conv op (every conv and transposed
    conv is a ``ConvNd``/``ConvTransposeNd``), per ONNX spatial axis."""
    return list(op.stride), [b for b, _ in op.pads], [e for _, e in op.pads], list(op.dilation)


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


@converts(pool.GlobalAveragePool, pool.GlobalMaxPool)
def _global_pool(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    kind = "GlobalAveragePool" if isinstance(op, pool.GlobalAveragePool) else "GlobalMaxPool"
    g.one(kind, [xs[0].name], ys[0].name)


# -- normalisation -------------------------------------------------------------------------------
@converts(normalization.BatchNorm)
def _batchnorm(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    # Always the inference form: running statistics normalise (ONNX's training_mode = 0).
    inputs = [x.name for x in xs]
    if op.relu:  # batchnorm_2d(..., relu=True): the pair it stands for
        g.one("Relu", [g.one("BatchNormalization", inputs, epsilon=op.eps, momentum=op.momentum)], ys[0].name)
        return
    g.one("BatchNormalization", inputs, ys[0].name, epsilon=op.eps, momentum=op.momentum)


@converts(normalization.LayerNorm)
def _layernorm(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    axis = op.axes[0] if op.axes else xs[0].ndim
    if g.opset >= 17:
        g.one("LayerNormalization", [x.name for x in xs], ys[0].name, axis=axis, epsilon=op.eps)
        return
    x, dt = xs[0].name, xs[0].dtype
    xc = g.one("Sub", [x, g.reduce("ReduceMean", x, op.axes, True)])
    var = g.reduce("ReduceMean", g.one("Mul", [xc, xc]), op.axes, True)
    std = g.one("Sqrt", [g.one("Add", [var, g.scalar(op.eps, dt)])])
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
        g.one("Dropout", [xs[0].name, g.scalar(op.ratio, np.float32)], ys[0].name)
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
    return g.as_type(v, dt), dt


def _batch_mean(g: GraphBuilder, total: str, n: float, dt: Any, y: Value, negate: bool) -> None:
    """``(-)total / n`` as the loss's ``(1,)``-shaped output in its dtype."""
    scaled = g.reshape(g.one("Div", [total, g.scalar(-n if negate else n, dt)]), [1])
    if np.dtype(dt) != y.dtype:
        scaled = g.cast(scaled, y.dtype)
    g.one("Identity", [scaled], y.name)


def _picked_sum(g: GraphBuilder, logp: str, t: Value, dt: Any) -> str:
    """``sum(t * logp)``: per-class targets multiply, labels pick their class."""
    if t.ndim == 1:
        idx = g.unsqueeze(g.as_type(t, np.int64), [1])
        picked = g.one("GatherElements", [logp, idx], axis=1)
    else:
        picked = g.one("Mul", [logp, g.as_type(t, dt)])
    return g.reduce("ReduceSum", picked, [0, 1], False)


@converts(loss.SoftMaxCrossEntropy, loss.NLLLoss, loss.CrossEntropy)
def _class_loss(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x, dt = _loss_input(g, xs[0])
    if isinstance(op, loss.SoftMaxCrossEntropy):
        logp = g.one("LogSoftmax", [x], axis=1)
    elif isinstance(op, loss.CrossEntropy):
        logp = g.one("Log", [g.one("Clip", [x, g.scalar(loss.EPS, dt), g.scalar(1.0, dt)])])
    else:
        logp = x
    _batch_mean(g, _picked_sum(g, logp, xs[1], dt), xs[0].shape[0], dt, ys[0], negate=True)


@converts(loss.BinaryCrossEntropy)
def _bce(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    y, dt = _loss_input(g, xs[0])
    t = g.as_type(xs[1], dt)
    c = g.one("Clip", [y, g.scalar(loss.EPS, dt), g.scalar(1 - loss.EPS, dt)])
    one = g.scalar(1.0, dt)
    pos = g.one("Mul", [t, g.one("Log", [c])])
    neg = g.one("Mul", [g.one("Sub", [one, t]), g.one("Log", [g.one("Sub", [one, c])])])
    total = g.reduce("ReduceSum", g.one("Add", [pos, neg]), list(range(xs[0].ndim)), False)
    _batch_mean(g, total, xs[0].shape[0], dt, ys[0], negate=True)


@converts(loss.MeanSquareError)
def _mse(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    x, dt = _loss_input(g, xs[0])
    err = g.one("Sub", [x, g.as_type(xs[1], dt)])
    total = g.reduce("ReduceSum", g.one("Mul", [err, err]), list(range(xs[0].ndim)), False)
    _batch_mean(g, total, 2 * xs[0].shape[0], dt, ys[0], negate=False)

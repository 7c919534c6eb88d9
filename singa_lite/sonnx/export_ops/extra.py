"""Converters for the further activations, ``det``, the ONNX-style class loss and the DFT.

The composites (``mish``, ``swish``, ``swiglu``, ``lp_normalization``, ``lp_pool``,
``mean_variance_normalization``, ``softmax_cross_entropy_loss``, ``stft``) are traced as the
primitives they are written with and need no converter of their own.
"""

from __future__ import annotations

from typing import Any

from singa_lite.ops import activation_extra, loss_nd, norm_extra, signal
from singa_lite.sonnx.export_ops.base import GraphBuilder, Value, converts, unsupported


@converts(activation_extra.Celu)
def _celu(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    if g.opset < 12:
        raise unsupported(op, g.opset, "ONNX Celu needs opset 12")
    x = xs[0]
    if x.dtype.name == "float32":
        g.one("Celu", [x.name], ys[0].name, alpha=op.alpha)
        return
    # ONNX Celu is defined for float32 only: compute there and cast back.
    y = g.one("Celu", [g.as_type(x, "float32")], alpha=op.alpha)
    g.cast(y, ys[0].dtype, ys[0].name)


@converts(activation_extra.ThresholdedRelu)
def _thresholded_relu(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("ThresholdedRelu", [xs[0].name], ys[0].name, alpha=op.alpha)


@converts(activation_extra.Shrink)
def _shrink(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Shrink", [xs[0].name], ys[0].name, lambd=op.lambd, bias=op.bias)


@converts(activation_extra.Hardmax)
def _hardmax(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    if g.opset < 13 and op.a != xs[0].ndim - 1:
        raise unsupported(op, g.opset, "before opset 13 ONNX Hardmax flattens from its axis on; use opset 13")
    g.one("Hardmax", [xs[0].name], ys[0].name, axis=op.a)


@converts(norm_extra.Det)
def _det(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    g.one("Det", [xs[0].name], ys[0].name)


@converts(loss_nd.NegativeLogLikelihoodLoss)
def _nll(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    if g.opset < 12:
        raise unsupported(op, g.opset, "ONNX NegativeLogLikelihoodLoss needs opset 12")
    inputs = [xs[0].name, g.as_type(xs[1], "int64")] + [x.name for x in xs[2:]]
    g.one(
        "NegativeLogLikelihoodLoss", inputs, ys[0].name, reduction=op.reduction, ignore_index=op.ignore_index
    )


@converts(signal.DFT)
def _dft(g: GraphBuilder, op: Any, xs: list[Value], ys: list[Value]) -> None:
    if g.opset < 17:
        raise unsupported(op, g.opset, "ONNX DFT needs opset 17")
    attrs = {"inverse": int(op.inverse), "onesided": int(op.onesided)}
    length = g.const(op.n, "int64")
    if g.opset < 20:
        g.one("DFT", [xs[0].name, length], ys[0].name, axis=op.a, **attrs)
    else:
        g.one("DFT", [xs[0].name, length, g.const(op.a, "int64")], ys[0].name, **attrs)

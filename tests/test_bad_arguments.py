"""One error path for bad arguments (issue 18, point 2).

Every public op, layer, optimizer, schedule, initializer, data loader and checkpoint entry point
is called here with bad arguments (zero or negative sizes, wrong types, unknown modes); each call
must raise :class:`ArgumentError` (a ``ValueError`` and a ``TypeError`` too) whose message names
the argument. Dtype problems keep ``DTypeError`` (the cases say so).

The public callables are enumerated from the modules' ``__all__``: one that appears with
neither cases here, nor a place in ``INPUTS_ONLY`` or ``SKIP``, fails
``test_every_public_callable_is_covered``, so the sweep stays complete.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from singa_lite import (
    autograd,
    checkpoint,
    clip_grad,
    data,
    initializer,
    layer,
    ops,
    opt,
    saving,
    sonnx,
    tensor,
)
from singa_lite.errors import ArgumentError, DTypeError, OptimizerError
from singa_lite.ops import singa_names


# -- inputs that are fine ---------------------------------------------------------------------
def T(*shape: int, dtype: Any = np.float32) -> tensor.Tensor:
    return tensor.from_numpy(np.ones(shape, dtype))


def x4() -> tensor.Tensor:
    return T(1, 2, 6, 6)


def w4() -> tensor.Tensor:
    return T(3, 2, 3, 3)


def x5() -> tensor.Tensor:
    return T(1, 2, 4, 4, 4)


def w5() -> tensor.Tensor:
    return T(3, 2, 2, 2, 2)


def idx() -> tensor.Tensor:
    return tensor.from_numpy(np.array([0, 1], np.int64))


def bn() -> tuple:
    return T(2, 3, 4, 4), T(3), T(3), T(3), T(3)


def six() -> tuple:  # x, h, Wx, Wh, Bx, Bh of a recurrent op (the checks come before shapes)
    return T(2, 1, 3), T(1, 4), T(3, 4), T(4, 4), T(4), T(4)


# A case: the argument the message must name, and a call that must fail on it.
Case = tuple[str, Callable[[], Any]]

CASES: dict[str, list[Case]] = {
    # ops: elementwise and activations
    "ops.Clip": [("min", lambda: ops.Clip(min="0")), ("max", lambda: ops.Clip(max=[1]))],
    "ops.clip": [("min", lambda: ops.clip(T(3), min="0")), ("max", lambda: ops.clip(T(3), 0, max="1"))],
    "ops.AddBias": [("axis", lambda: ops.AddBias(2))],
    "ops.add_bias": [("axis", lambda: ops.add_bias(T(2, 3), T(3), axis=-1))],
    "ops.Elu": [("alpha", lambda: ops.Elu("1"))],
    "ops.elu": [("alpha", lambda: ops.elu(T(3), math.nan))],
    "ops.Gelu": [("approximate", lambda: ops.Gelu("fast"))],
    "ops.gelu": [("approximate", lambda: ops.gelu(T(3), None))],
    "ops.HardSigmoid": [
        ("alpha", lambda: ops.HardSigmoid("a")),
        ("gamma", lambda: ops.HardSigmoid(0.2, math.inf)),
    ],
    "ops.hardsigmoid": [("gamma", lambda: ops.hardsigmoid(T(3), 0.2, [0.5]))],
    "ops.LeakyRelu": [("a", lambda: ops.LeakyRelu(None))],
    "ops.leakyrelu": [("a", lambda: ops.leakyrelu(T(3), "0.1"))],
    "ops.LogSoftmax": [("axis", lambda: ops.LogSoftmax(1.5))],
    "ops.log_softmax": [("axis", lambda: ops.log_softmax(T(2, 3), None))],
    "ops.SeLU": [("gamma", lambda: ops.SeLU(gamma=math.nan))],
    "ops.selu": [("alpha", lambda: ops.selu(T(3), alpha="1"))],
    "ops.SoftMax": [("axis", lambda: ops.SoftMax("1"))],
    "ops.softmax": [("axis", lambda: ops.softmax(T(2, 3), 0.5))],
    # ops: reductions
    "ops.ArgMax": [("axis", lambda: ops.ArgMax("0"))],
    "ops.ArgMin": [("axis", lambda: ops.ArgMin(0.5))],
    "ops.argmax": [("axis", lambda: ops.argmax(T(2, 3), "last"))],
    "ops.argmin": [("axis", lambda: ops.argmin(T(2, 3), [0]))],
    "ops.CumSum": [("axis", lambda: ops.CumSum(None))],
    "ops.cumsum": [("axis", lambda: ops.cumsum(T(3), "0"))],
    **{
        f"ops.{cls}": [
            ("axes", lambda c=cls: getattr(ops, c)("0")),
            ("axes", lambda c=cls: getattr(ops, c)([0.5])),
        ]
        for cls in ("ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum")
    },
    **{
        f"ops.{fn}": [("axes", lambda f=fn: getattr(ops, f)(T(2, 3), "0"))]
        for fn in ("reduce_max", "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum")
    },
    # ops: detection, N-d gather/scatter, sampling
    "ops.GatherND": [("batch_dims", lambda: ops.GatherND(-1))],
    "ops.gather_nd": [("batch_dims", lambda: ops.gather_nd(T(2, 3), [[0]], batch_dims="0"))],
    "ops.ScatterND": [("reduction", lambda: ops.ScatterND("avg"))],
    "ops.scatter_nd": [("reduction", lambda: ops.scatter_nd(T(2, 3), [[0]], T(1, 3), "sum"))],
    "ops.TensorScatter": [("mode", lambda: ops.TensorScatter(mode="ring"))],
    "ops.tensor_scatter": [("axis", lambda: ops.tensor_scatter(T(1, 4, 2), T(1, 1, 2), axis="1"))],
    "ops.Compress": [("axis", lambda: ops.Compress("0"))],
    "ops.compress": [("axis", lambda: ops.compress(T(2, 3), [True], axis=0.5))],
    "ops.Unique": [("axis", lambda: ops.Unique(axis="0"))],
    "ops.unique": [("axis", lambda: ops.unique(T(3), axis=[0]))],
    "ops.CumProd": [("axis", lambda: ops.CumProd(None))],
    "ops.cumprod": [("axis", lambda: ops.cumprod(T(3), "0"))],
    "ops.ReverseSequence": [("batch_axis", lambda: ops.ReverseSequence(2))],
    "ops.reverse_sequence": [("time_axis", lambda: ops.reverse_sequence(T(2, 2), [1, 1], 1, 1))],
    "ops.NonMaxSuppression": [("iou_threshold", lambda: ops.NonMaxSuppression(1, "0.5"))],
    "ops.non_max_suppression": [("max_output", lambda: ops.non_max_suppression(T(1, 2, 4), T(1, 1, 2), 1.5))],
    "ops.RoiAlign": [("mode", lambda: ops.RoiAlign(mode="sum"))],
    "ops.roi_align": [("output_height", lambda: ops.roi_align(x4(), T(1, 4), [0], (0, 1)))],
    "ops.GridSample": [("padding_mode", lambda: ops.GridSample(padding_mode="wrap"))],
    "ops.grid_sample": [("mode", lambda: ops.grid_sample(x4(), T(1, 2, 2, 2), "area"))],
    "ops.affine_grid": [("size", lambda: ops.affine_grid(T(1, 2, 3), (1, 1, 2)))],
    "ops.MaxUnpool": [("strides", lambda: ops.MaxUnpool((2, 2), strides=(0, 1)))],
    "ops.max_unpool": [("kernel_shape", lambda: ops.max_unpool(x4(), idx(), (0, 2)))],
    "ops.Col2Im": [("block_shape", lambda: ops.Col2Im((4, 4), (2,)))],
    "ops.col2im": [("pads", lambda: ops.col2im(T(1, 4, 9), (4, 4), (2, 2), pads=(-1, 0, 0, 0)))],
    "ops.center_crop_pad": [("shape", lambda: ops.center_crop_pad(T(2, 3), [1]))],
    # ops: shape and indexing
    "ops.Cast": [("dtype", lambda: ops.Cast("float48"))],  # DTypeError: see DTYPE_CASES
    "ops.cast": [("dtype", lambda: ops.cast(T(3), "float48"))],
    "ops.Cat": [("axis", lambda: ops.Cat("0"))],
    "ops.cat": [
        ("xs", lambda: ops.cat([])),
        ("xs", lambda: ops.cat(T(3))),
        ("axis", lambda: ops.cat([T(3)], 0.5)),
    ],
    "ops.Expand": [("shape", lambda: ops.Expand("23"))],
    "ops.expand": [("shape", lambda: ops.expand(T(3), 3.5))],
    "ops.Flatten": [("axis", lambda: ops.Flatten(None))],
    "ops.flatten": [("axis", lambda: ops.flatten(T(2, 3), "1"))],
    "ops.Gather": [("axis", lambda: ops.Gather(0.5))],
    "ops.gather": [
        ("axis", lambda: ops.gather(T(3), "0", [0])),
        ("x", lambda: ops.gather(np.ones(3), 0, [0])),
    ],
    "ops.GatherElements": [("axis", lambda: ops.GatherElements("0"))],
    "ops.gather_elements": [("axis", lambda: ops.gather_elements(T(3), idx(), None))],
    "ops.OneHot": [("depth", lambda: ops.OneHot(0)), ("axis", lambda: ops.OneHot(3, "last"))],
    "ops.onehot": [("depth", lambda: ops.onehot(idx(), -2)), ("indices", lambda: ops.onehot([0, 1], 3))],
    "ops.Pad": [
        ("mode", lambda: ops.Pad("mirror")),
        ("pads", lambda: ops.Pad(pads=[0.5])),
        ("constant", lambda: ops.Pad(constant="0")),
    ],
    "ops.pad": [("mode", lambda: ops.pad(T(3), "mirror", [1, 1]))],
    "ops.Reshape": [("shape", lambda: ops.Reshape("23"))],
    "ops.reshape": [
        ("shape", lambda: ops.reshape(T(6), None)),
        ("shape", lambda: ops.reshape(T(6), [2.5, 2])),
    ],
    "ops.RoundTo": [("fn", lambda: ops.RoundTo(3))],
    "ops.round_to": [("fn", lambda: ops.round_to(T(3), "floor"))],
    "ops.ScatterElements": [
        ("reduction", lambda: ops.ScatterElements(0, "sum")),
        ("axis", lambda: ops.ScatterElements("0")),
    ],
    "ops.scatter_elements": [("reduction", lambda: ops.scatter_elements(T(3), idx(), T(2), 0, "mean"))],
    "ops.Slice": [
        ("steps", lambda: ops.Slice([0], [1], [0], [0])),
        ("ends", lambda: ops.Slice([0, 0], [1])),
        ("starts", lambda: ops.Slice("0", [1])),
    ],
    "ops.slice": [("axes", lambda: ops.slice(T(3), [0], [1], [0, 1]))],
    "ops.Split": [("parts", lambda: ops.Split(0)), ("num_output", lambda: ops.Split(0, None, 0))],
    "ops.split": [
        ("parts", lambda: ops.split(T(3), 0, [2, -1])),
        ("axis", lambda: ops.split(T(3), "0", [3])),
    ],
    "ops.Squeeze": [("axes", lambda: ops.Squeeze("0"))],
    "ops.squeeze": [("axes", lambda: ops.squeeze(T(1, 3), [0.5]))],
    "ops.Tile": [("repeats", lambda: ops.Tile(-1))],
    "ops.tile": [("repeats", lambda: ops.tile(T(3), [2, -1]))],
    "ops.Transpose": [("axes", lambda: ops.Transpose(1))],
    "ops.transpose": [("axes", lambda: ops.transpose(T(2, 3), "10"))],
    "ops.Unsqueeze": [("axes", lambda: ops.Unsqueeze(None))],
    "ops.unsqueeze": [("axes", lambda: ops.unsqueeze(T(3), 0.5))],
    "ops.where": [("condition", lambda: ops.where(np.ones(3, bool), T(3), T(3)))],
    "ops.depth_to_space": [
        ("blocksize", lambda: ops.depth_to_space(T(1, 4, 2, 2), 0)),
        ("mode", lambda: ops.depth_to_space(T(1, 4, 2, 2), 2, "RDC")),
        ("x", lambda: ops.depth_to_space(np.ones((1, 4, 2, 2)), 2)),
    ],
    "ops.space_to_depth": [("blocksize", lambda: ops.space_to_depth(T(1, 1, 2, 2), -2))],
    # ops: linear algebra
    "ops.Einsum": [("subscripts", lambda: ops.Einsum(3))],
    "ops.einsum": [("subscripts", lambda: ops.einsum(None, T(3)))],
    "ops.Gemm": [("alpha", lambda: ops.Gemm("1")), ("beta", lambda: ops.Gemm(1.0, math.inf))],
    "ops.gemm": [("alpha", lambda: ops.gemm(T(2, 2), T(2, 2), alpha=None))],
    "ops.Tensordot": [("axes", lambda: ops.Tensordot(-1)), ("axes", lambda: ops.Tensordot(([0], [0, 1])))],
    "ops.tensordot": [("axes", lambda: ops.tensordot(T(2), T(2), "all"))],
    # ops: convolution
    "ops.Conv2d": [
        ("stride", lambda: ops.Conv2d(stride=0)),
        ("padding", lambda: ops.Conv2d(padding=-1)),
        ("padding", lambda: ops.Conv2d(padding=(1, 2, 3))),
        ("dilation", lambda: ops.Conv2d(dilation=(1,))),
        ("group", lambda: ops.Conv2d(group=0)),
        ("stride", lambda: ops.Conv2d(stride=1.5)),
    ],
    "ops.conv2d": [
        ("stride", lambda: ops.conv2d(x4(), w4(), stride=0)),
        ("group", lambda: ops.conv2d(x4(), w4(), group="1")),
    ],
    "ops.Conv1d": [
        ("stride", lambda: ops.Conv1d(stride=0)),
        ("padding", lambda: ops.Conv1d(padding=(1, 1, 1))),
    ],
    "ops.conv1d": [("dilation", lambda: ops.conv1d(T(1, 2, 6), T(3, 2, 3), dilation=-1))],
    "ops.ConvTranspose2d": [("output_padding", lambda: ops.ConvTranspose2d(output_padding=1))],
    "ops.conv_transpose2d": [
        ("output_padding", lambda: ops.conv_transpose2d(x4(), T(2, 3, 3, 3), output_padding=-1))
    ],
    "ops.conv_output_size": [
        ("in_size", lambda: ops.conv_output_size(-1, 3)),
        ("kernel", lambda: ops.conv_output_size(8, 0)),
        ("stride", lambda: ops.conv_output_size(8, 3, stride=0)),
        ("padding", lambda: ops.conv_output_size(8, 3, padding=-1)),
    ],
    "ops.same_padding": [
        ("mode", lambda: ops.same_padding((4, 4), 3, mode="SAME")),
        ("kernel", lambda: ops.same_padding((4, 4), 0)),
    ],
    "ops.ConvNd": [
        ("stride", lambda: ops.ConvNd(3, 0, 0, 1, 1)),
        ("group", lambda: ops.ConvNd(3, 1, 0, 1, 0)),
    ],
    "ops.ConvTransposeNd": [("output_padding", lambda: ops.ConvTransposeNd(3, output_padding=2))],
    "ops.conv_nd": [
        ("stride", lambda: ops.conv_nd(x5(), w5(), stride=(1, 1))),
        ("padding", lambda: ops.conv_nd(x5(), w5(), padding=[(0, 0), (0, -1), (0, 0)])),
        ("x", lambda: ops.conv_nd(np.ones((1, 2, 4, 4, 4)), w5())),
    ],
    "ops.conv_transpose_nd": [
        ("dilation", lambda: ops.conv_transpose_nd(x5(), T(2, 3, 2, 2, 2), dilation=0))
    ],
    # ops: pooling
    "ops.MaxPool": [("window", lambda: ops.MaxPool(2))],
    "ops.AvgPool": [("window", lambda: ops.AvgPool((2, 2)))],
    "ops.max_pool": [
        ("kernel_size", lambda: ops.max_pool(x5(), (2, 2))),
        ("x", lambda: ops.max_pool([1.0], 2)),
    ],
    "ops.avg_pool": [("padding", lambda: ops.avg_pool(x5(), 2, padding=2))],
    "ops.max_pool2d": [
        ("stride", lambda: ops.max_pool2d(x4(), 2, stride=0)),
        ("dilation", lambda: ops.max_pool2d(x4(), 2, dilation=0)),
    ],
    "ops.avg_pool2d": [
        ("kernel_size", lambda: ops.avg_pool2d(x4(), 0)),
        ("padding", lambda: ops.avg_pool2d(x4(), 2, padding=-1)),
    ],
    "ops.max_pool1d": [("kernel_size", lambda: ops.max_pool1d(T(1, 2, 6), (2, 2)))],
    "ops.avg_pool1d": [("stride", lambda: ops.avg_pool1d(T(1, 2, 6), 2, stride="1"))],
    "ops.pool_output_size": [
        ("input_size", lambda: ops.pool_output_size(-4, 2)),
        ("kernel_size", lambda: ops.pool_output_size(4, 0)),
    ],
    # ops: normalisation and dropout
    "ops.BatchNorm": [("momentum", lambda: ops.BatchNorm(1.5)), ("eps", lambda: ops.BatchNorm(0.9, -1e-5))],
    "ops.batchnorm_2d": [("momentum", lambda: ops.batchnorm_2d(*bn(), momentum="0.9"))],
    "ops.Dropout": [("ratio", lambda: ops.Dropout(1.0))],
    "ops.dropout": [("ratio", lambda: ops.dropout(T(3), -0.5))],
    "ops.GroupNorm": [("groups", lambda: ops.GroupNorm(0)), ("eps", lambda: ops.GroupNorm(2, math.nan))],
    "ops.group_norm": [("groups", lambda: ops.group_norm(T(2, 4), 2.5, T(4)))],
    "ops.InstanceNorm": [("eps", lambda: ops.InstanceNorm(-1.0))],
    "ops.instance_norm": [("eps", lambda: ops.instance_norm(x4(), T(2), T(2), eps="small"))],
    "ops.LayerNorm": [("axis", lambda: ops.LayerNorm("last")), ("eps", lambda: ops.LayerNorm(-1, -1e-5))],
    "ops.layer_norm": [("axis", lambda: ops.layer_norm(T(2, 3), T(3), axis=0.5))],
    "ops.LRN": [("size", lambda: ops.LRN(0)), ("beta", lambda: ops.LRN(3, beta="a"))],
    "ops.lrn": [("size", lambda: ops.lrn(x4(), -3))],
    "ops.RMSNorm": [("eps", lambda: ops.RMSNorm(eps=-1.0)), ("axis", lambda: ops.RMSNorm(None))],
    "ops.rms_norm": [("eps", lambda: ops.rms_norm(T(2, 3), T(3), eps="tiny"))],
    # ops: resize
    "ops.Resize": [
        ("scales", lambda: ops.Resize()),
        ("scales", lambda: ops.Resize(scales=[1, 1, 0, 2])),
        ("sizes", lambda: ops.Resize(sizes=[1, 1, 0, 2])),
        ("mode", lambda: ops.Resize(scales=[1, 2], mode="area")),
        ("nearest_mode", lambda: ops.Resize(scales=[1, 2], nearest_mode="round")),
        (
            "coordinate_transformation_mode",
            lambda: ops.Resize(scales=[1, 2], coordinate_transformation_mode="x"),
        ),
        ("roi", lambda: ops.Resize(scales=[1, 2], coordinate_transformation_mode="tf_crop_and_resize")),
    ],
    "ops.resize": [("cubic_coeff_a", lambda: ops.resize(x4(), scales=[1, 1, 2, 2], cubic_coeff_a="a"))],
    "ops.upsample": [
        ("mode", lambda: ops.upsample(x4(), [1, 1, 2, 2], "cubic")),
        ("scales", lambda: ops.upsample(x4(), "2")),
    ],
    # ops: recurrent, attention, embeddings, fused
    "ops.RNNCell": [("nonlinearity", lambda: ops.RNNCell("sigmoid"))],
    "ops.RNNSequence": [("nonlinearity", lambda: ops.RNNSequence(None))],
    "ops.rnn": [("nonlinearity", lambda: ops.rnn(*six(), nonlinearity="gelu"))],
    "ops.rnn_cell": [("nonlinearity", lambda: ops.rnn_cell(*six(), nonlinearity="RELU"))],
    "ops.ScaledDotProductAttention": [
        ("dropout", lambda: ops.ScaledDotProductAttention(dropout=1.0)),
        ("scale", lambda: ops.ScaledDotProductAttention(scale="1")),
        ("block", lambda: ops.ScaledDotProductAttention(block=0)),
    ],
    "ops.scaled_dot_product_attention": [
        ("block", lambda: ops.scaled_dot_product_attention(*(T(1, 2, 3),) * 3, block=-1))
    ],
    "ops.Embedding": [("padding_idx", lambda: ops.Embedding("0"))],
    "ops.embedding": [
        ("padding_idx", lambda: ops.embedding(idx(), T(3, 2), padding_idx=3)),
        ("weight", lambda: ops.embedding(idx(), np.ones((3, 2)))),
    ],
    "ops.BiasActivation": [
        ("activation", lambda: ops.BiasActivation("swish")),
        ("axis", lambda: ops.BiasActivation("relu", "1")),
    ],
    "ops.bias_activation": [("activation", lambda: ops.bias_activation(T(2, 3), T(3), "elu"))],
    # SINGA's functional names (singa_lite.autograd)
    "autograd.batchnorm_2d": [("momentum", lambda: singa_names.batchnorm_2d(*bn(), momentum=-0.1))],
    "autograd.constant_of_shape": [("x", lambda: singa_names.constant_of_shape([2, 3]))],
    "autograd.dropout": [("ratio", lambda: singa_names.dropout(T(3), 2.0))],
    "autograd.globalaveragepool": [("data_format", lambda: singa_names.globalaveragepool(x4(), "NHWC"))],
    "autograd.onehot": [("axis", lambda: singa_names.onehot(0.5, idx(), 3))],
    "autograd.scaled_dot_product_attention": [
        ("dropout", lambda: singa_names.scaled_dot_product_attention(*(T(1, 2, 3),) * 3, dropout=-0.1))
    ],
    "autograd.upsample": [("scales", lambda: singa_names.upsample(x4(), "nearest"))],
    "autograd.where": [("condition", lambda: singa_names.where(T(3), T(3), [True, False, True]))],
    "autograd.cossim": [("a", lambda: singa_names.cossim(np.ones((2, 3)), T(2, 3)))],
    # layers
    "layer.Linear": [("out_features", lambda: layer.Linear(0)), ("in_features", lambda: layer.Linear(-2, 4))],
    "layer.Gemm": [("nb_kernels", lambda: layer.Gemm(0)), ("alpha", lambda: layer.Gemm(4, alpha="1"))],
    "layer.Embedding": [
        ("input_dim", lambda: layer.Embedding(0, 4)),
        ("output_dim", lambda: layer.Embedding(10, "4")),
        ("padding_idx", lambda: layer.Embedding(10, 4, padding_idx=10)),
        ("initializer", lambda: layer.Embedding(10, 4, initializer="glorot")),
    ],
    "layer.Conv2d": [
        ("nb_kernels", lambda: layer.Conv2d(0, 3)),
        ("kernel_size", lambda: layer.Conv2d(4, (3, -1))),
        ("stride", lambda: layer.Conv2d(4, 3, stride=0)),
        ("padding", lambda: layer.Conv2d(4, 3, padding=(1, 2, 3))),
        ("pad_mode", lambda: layer.Conv2d(4, 3, pad_mode="same")),
        ("activation", lambda: layer.Conv2d(4, 3, activation="relu")),
    ],
    "layer.Conv1d": [
        ("kernel_size", lambda: layer.Conv1d(4, 0)),
        ("padding", lambda: layer.Conv1d(4, 3, padding=(1, 1, 1))),
    ],
    "layer.ConvTranspose2d": [("output_padding", lambda: layer.ConvTranspose2d(4, 3, output_padding=-1))],
    "layer.SeparableConv2d": [("stride", lambda: layer.SeparableConv2d(4, 3, stride=0))],
    "layer.Upsample": [
        ("size", lambda: layer.Upsample()),
        ("scale_factor", lambda: layer.Upsample(scale_factor=0)),
        ("size", lambda: layer.Upsample(size=(4, 0))),
        ("mode", lambda: layer.Upsample(size=4, mode="area")),
        ("align_corners", lambda: layer.Upsample(size=4, align_corners=True)),
    ],
    **{
        f"layer.{cls}": [
            ("kernel_size", lambda c=cls: getattr(layer, c)(0)),
            ("stride", lambda c=cls: getattr(layer, c)(2, stride=-1)),
            ("padding", lambda c=cls: getattr(layer, c)(2, padding=-1)),
            ("pad_mode", lambda c=cls: getattr(layer, c)(2, pad_mode="same")),
        ]
        for cls in ("MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "Pooling2d")
    },
    "layer.BatchNorm1d": [("momentum", lambda: layer.BatchNorm1d(momentum=1.5))],
    "layer.BatchNorm2d": [
        ("eps", lambda: layer.BatchNorm2d(eps=-1e-5)),
        ("momentum", lambda: layer.BatchNorm2d(3, "0.9")),
    ],
    "layer.LayerNorm": [
        ("axis", lambda: layer.LayerNorm("last")),
        ("eps", lambda: layer.LayerNorm(eps=-1.0)),
    ],
    "layer.RMSNorm": [("eps", lambda: layer.RMSNorm(eps=-1.0))],
    "layer.GroupNorm": [
        ("num_groups", lambda: layer.GroupNorm(0)),
        ("eps", lambda: layer.GroupNorm(2, eps=math.inf)),
    ],
    "layer.Dropout": [("ratio", lambda: layer.Dropout(1.5)), ("ratio", lambda: layer.Dropout("half"))],
    "layer.LeakyReLU": [("a", lambda: layer.LeakyReLU("0.1"))],
    "layer.SoftMax": [("axis", lambda: layer.SoftMax(None))],
    "layer.Flatten": [("axis", lambda: layer.Flatten("1"))],
    "layer.Cat": [("axis", lambda: layer.Cat(0.5))],
    "layer.Reshape": [("shape", lambda: layer.Reshape("2x3"))],
    "layer.RNN": [
        ("hidden_size", lambda: layer.RNN(0)),
        ("nonlinearity", lambda: layer.RNN(3, 4, nonlinearity="gelu")),
    ],
    "layer.LSTM": [
        ("dropout", lambda: layer.LSTM(3, 4, dropout=1.0)),
        ("num_layers", lambda: layer.LSTM(3, 4, num_layers=2)),
    ],
    "layer.GRU": [("input_size", lambda: layer.GRU(0, 4))],
    "layer.MultiHeadAttention": [
        ("embed_dim", lambda: layer.MultiHeadAttention(0, 2)),
        ("num_heads", lambda: layer.MultiHeadAttention(8, 0)),
        ("dropout", lambda: layer.MultiHeadAttention(8, 2, dropout=-0.1)),
    ],
    "layer.TransformerEncoderLayer": [
        ("nhead", lambda: layer.TransformerEncoderLayer(8, 0)),
        ("dim_feedforward", lambda: layer.TransformerEncoderLayer(8, 2, dim_feedforward=0)),
        ("activation", lambda: layer.TransformerEncoderLayer(8, 2, activation="swish")),
        ("layer_norm_eps", lambda: layer.TransformerEncoderLayer(8, 2, layer_norm_eps=-1.0)),
    ],
    "layer.TransformerDecoderLayer": [
        ("d_model", lambda: layer.TransformerDecoderLayer(0, 2)),
        ("dropout", lambda: layer.TransformerDecoderLayer(8, 2, dropout=1.0)),
    ],
    "layer.SinusoidalPositionalEmbedding": [("base", lambda: layer.SinusoidalPositionalEmbedding(1.0))],
    "layer.LearnedPositionalEmbedding": [
        ("max_len", lambda: layer.LearnedPositionalEmbedding(0)),
        ("std", lambda: layer.LearnedPositionalEmbedding(8, std=-0.02)),
    ],
    "layer.RotaryEmbedding": [
        ("base", lambda: layer.RotaryEmbedding("1e4")),
        ("rotary_dim", lambda: layer.RotaryEmbedding(rotary_dim=3)),
    ],
    # optimizers and schedules (OptimizerError is an ArgumentError)
    "opt.Optimizer": [
        ("lr", lambda: opt.Optimizer("fast")),
        ("clip_norm", lambda: opt.Optimizer(0.1, clip_norm=0)),
        ("accumulate", lambda: opt.Optimizer(0.1, accumulate=0)),
        ("no_decay", lambda: opt.Optimizer(0.1, no_decay=3)),
    ],
    "opt.SGD": [
        ("lr", lambda: opt.SGD(-0.1)),
        ("momentum", lambda: opt.SGD(0.1, momentum=-0.5)),
        ("nesterov", lambda: opt.SGD(0.1, nesterov=True)),
        ("weight_decay", lambda: opt.SGD(0.1, weight_decay=math.nan)),
    ],
    "opt.AdaGrad": [("epsilon", lambda: opt.AdaGrad(epsilon=-1))],
    "opt.biases_and_norms": [("param", lambda: opt.biases_and_norms("fc.b", 3))],
    "opt.Adam": [("beta_1", lambda: opt.Adam(beta_1=1.0)), ("beta_2", lambda: opt.Adam(beta_2="0.999"))],
    "opt.AdamW": [("weight_decay", lambda: opt.AdamW(weight_decay=-0.01))],
    "opt.RMSProp": [("rho", lambda: opt.RMSProp(rho=2.0))],
    "opt.Constant": [("init_value", lambda: opt.Constant("0.1"))],
    "opt.CosineDecay": [
        ("decay_steps", lambda: opt.CosineDecay(0.1, 0)),
        ("warmup_steps", lambda: opt.CosineDecay(0.1, 10, warmup_steps=-1)),
        ("alpha", lambda: opt.CosineDecay(0.1, 10, alpha=2)),
    ],
    "opt.ExponentialDecay": [
        ("decay_steps", lambda: opt.ExponentialDecay(0.1, 0, 0.5)),
        ("decay_rate", lambda: opt.ExponentialDecay(0.1, 10, -0.5)),
        ("step", lambda: opt.ExponentialDecay(0.1, 10, 0.5)(-1)),
    ],
    "opt.StepDecay": [
        ("step_size", lambda: opt.StepDecay(0.1, 0)),
        ("gamma", lambda: opt.StepDecay(0.1, 10, gamma=-1)),
    ],
    # gradient clipping and initialisers
    "clip_grad.clip_grad_norm": [
        ("max_norm", lambda: clip_grad.clip_grad_norm([T(2)], 0)),
        ("grads", lambda: clip_grad.clip_grad_norm([], 1.0)),
        ("grads", lambda: clip_grad.clip_grad_norm([np.ones(2)], 1.0)),
    ],
    "clip_grad.ClipGradNorm": [("max_norm", lambda: clip_grad.ClipGradNorm(opt.SGD(), -1.0))],
    "initializer.fans": [("shape", lambda: initializer.fans((3, -1)))],
    "initializer.uniform": [
        ("high", lambda: initializer.uniform(T(3), 1.0, -1.0)),
        ("t", lambda: initializer.uniform(np.ones(3))),
    ],
    "initializer.gaussian": [("std", lambda: initializer.gaussian(T(3), std=-1.0))],
    "initializer.xavier_uniform": [("gain", lambda: initializer.xavier_uniform(T(3, 4), gain="1"))],
    "initializer.xavier_normal": [("gain", lambda: initializer.xavier_normal(T(3, 4), gain=-1.0))],
    "initializer.he_uniform": [("fan_in", lambda: initializer.he_uniform(T(3, 4), fan_in=0))],
    "initializer.he_normal": [("fan_in", lambda: initializer.he_normal(T(3, 4), fan_in=2.5))],
    "initializer.get": [("initializer", lambda: initializer.get("xavier"))],
    # data
    "data.DataLoader": [("batch_size", lambda: data.DataLoader(np.ones(4), np.ones(4), batch_size=0))],
    "data.iterate_batches": [("batch_size", lambda: data.iterate_batches(np.ones(4), np.ones(4), 2.0))],
    "data.split_indices": [
        ("test_fraction", lambda: data.split_indices(np.zeros(4), 1.0)),
        ("seed", lambda: data.split_indices(np.zeros(4), 0.5, seed=-1)),
    ],
    "data.train_test_split": [
        ("test_fraction", lambda: data.train_test_split(np.ones(4), np.ones(4), test_fraction=0))
    ],
    "data.load_digits": [("split", lambda: data.load_digits("val"))],
    "data.load_mnist": [
        ("split", lambda: data.load_mnist(".", "val")),
        ("directory", lambda: data.load_mnist(None)),
    ],
    "data.load_cifar10": [
        ("split", lambda: data.load_cifar10(".", "train_batch")),
        ("directory", lambda: data.load_cifar10(3)),
    ],
    "data.read_idx": [("path", lambda: data.read_idx(3))],
    "data.char_vocab": [("text", lambda: data.char_vocab(3))],
    "data.encode_text": [("char_to_idx", lambda: data.encode_text("ab", ["a", "b"]))],
    "data.decode_text": [
        ("indices", lambda: data.decode_text([0, 9], ["a", "b"])),
        ("chars", lambda: data.decode_text([0], None)),
    ],
    # checkpoints and whole-model files
    "checkpoint.CheckpointManager": [
        ("directory", lambda: checkpoint.CheckpointManager(None)),
        ("max_to_keep", lambda: checkpoint.CheckpointManager(".", max_to_keep=0)),
        ("keep_best", lambda: checkpoint.CheckpointManager(".", keep_best=("loss", "lowest"))),
        ("save_every_steps", lambda: checkpoint.CheckpointManager(".", save_every_steps=-5)),
    ],
    "checkpoint.save_model_states": [
        ("model", lambda: checkpoint.save_model_states(object(), "unused.h5")),
        ("fpath", lambda: checkpoint.save_model_states(layer.Linear(2), None)),
        ("aux_states", lambda: checkpoint.save_model_states(layer.Linear(2), "unused.h5", aux_states=[1])),
    ],
    "checkpoint.load_model_states": [
        ("model", lambda: checkpoint.load_model_states("model", "unused.h5")),
        ("fpath", lambda: checkpoint.load_model_states(layer.Linear(2), 3)),
    ],
    "checkpoint.read_singa_zip": [
        ("path", lambda: checkpoint.read_singa_zip(3)),
        ("aux_limit", lambda: checkpoint.read_singa_zip("x.zip", aux_limit=-1)),
    ],
    "checkpoint.open_verified": [("path", lambda: checkpoint.open_verified(None).__enter__())],
    "checkpoint.read_root": [("path", lambda: checkpoint.read_root(3))],
    "checkpoint.verify": [("path", lambda: checkpoint.verify(3))],
    "checkpoint.inspect": [("path", lambda: checkpoint.inspect([]))],
    "checkpoint.diff": [("b", lambda: checkpoint.diff("a.h5", None))],
    "saving.save": [
        ("path", lambda: saving.save(3, layer.Linear(2))),
        ("model", lambda: saving.save("unused.h5", "model")),
        ("opset", lambda: saving.save("unused.h5", layer.Linear(2), opset=0)),
    ],
    "saving.load": [("path", lambda: saving.load(None))],
    # quantization
    "ops.quantize_linear": [
        ("block_size", lambda: ops.quantize_linear(_t(), _t(0.5), block_size=-1)),
        ("saturate", lambda: ops.quantize_linear(_t(), _t(0.5), saturate="yes")),
        ("axis", lambda: ops.quantize_linear(_t(), _t(0.5), axis="1")),
    ],
    "ops.dequantize_linear": [
        ("block_size", lambda: ops.dequantize_linear(_t(dtype=np.uint8), _t(0.5), block_size=-2)),
        ("axis", lambda: ops.dequantize_linear(_t(dtype=np.uint8), _t(0.5), axis=1.5)),
    ],
    "ops.conv_integer": [
        (
            "stride",
            lambda: ops.conv_integer(_t((1, 1, 3, 3), np.uint8), _t((1, 1, 2, 2), np.uint8), stride=0),
        ),
        ("group", lambda: ops.conv_integer(_t((1, 1, 3, 3), np.uint8), _t((1, 1, 2, 2), np.uint8), group=0)),
    ],
    "ops.qlinear_conv": [
        (
            "stride",
            lambda: ops.qlinear_conv(
                _t((1, 1, 3, 3), np.uint8),
                _t(0.5),
                _t(3, np.uint8),
                _t((1, 1, 2, 2), np.uint8),
                _t(0.5),
                _t(3, np.uint8),
                _t(0.5),
                _t(3, np.uint8),
                stride=0,
            ),
        )
    ],
    "ops.quant_storage": [("dtype", lambda: ops.quant_storage(np.float64))],
    "ops.quant_range": [("dtype", lambda: ops.quant_range("x"))],
    # ONNX entry points
    "sonnx.prepare": [
        ("onnx_model", lambda: sonnx.prepare(3)),
        ("device", lambda: sonnx.prepare(b"", device=3)),
        ("limits", lambda: sonnx.prepare(b"", limits=3)),
        ("optimize", lambda: sonnx.prepare(b"", optimize="no")),
    ],
    "sonnx.SONNXModel": [
        ("onnx_model", lambda: sonnx.SONNXModel(None)),
        ("limits", lambda: sonnx.SONNXModel(b"", limits={})),
    ],
    "sonnx.run_model": [("device", lambda: sonnx.run_model(b"", [], device=0))],
    "sonnx.supports_device": [("device", lambda: sonnx.supports_device(3))],
    "sonnx.to_onnx": [
        ("inputs", lambda: sonnx.to_onnx("x", _traced()[1])),
        ("outputs", lambda: sonnx.to_onnx(_traced()[0], [np.ones(2)])),
        ("opset", lambda: sonnx.to_onnx(*_traced(), opset="new")),
        ("model_name", lambda: sonnx.to_onnx(*_traced(), model_name=3)),
        ("input_names", lambda: sonnx.to_onnx(*_traced(), input_names=["a", "b"])),
    ],
}

# ops of ONNX's further activations, norms, losses, signal and stateful sequence operators
CASES.update(
    {
        "ops.Celu": [("alpha", lambda: ops.Celu(0.0))],
        "ops.celu": [("alpha", lambda: ops.celu(T(3), "1"))],
        "ops.ThresholdedRelu": [("alpha", lambda: ops.ThresholdedRelu(math.nan))],
        "ops.thresholded_relu": [("alpha", lambda: ops.thresholded_relu(T(3), None))],
        "ops.Shrink": [("lambd", lambda: ops.Shrink("0.5")), ("bias", lambda: ops.Shrink(0.5, [1]))],
        "ops.shrink": [("bias", lambda: ops.shrink(T(3), 0.5, math.inf))],
        "ops.swish": [("alpha", lambda: ops.swish(T(3), "2")), ("x", lambda: ops.swish(np.ones(3)))],
        "ops.swiglu": [("alpha", lambda: ops.swiglu(T(3), T(3), None)), ("b", lambda: ops.swiglu(T(3), [1]))],
        "ops.mish": [("x", lambda: ops.mish(np.ones(3)))],
        "ops.hardmax": [("axis", lambda: ops.hardmax(T(2, 3), "last"))],
        "ops.Hardmax": [("axis", lambda: ops.Hardmax(None))],
        "ops.lp_normalization": [
            ("p", lambda: ops.lp_normalization(T(2, 3), -1, 3)),
            ("axis", lambda: ops.lp_normalization(T(2, 3), 0.5)),
        ],
        "ops.mean_variance_normalization": [
            ("axes", lambda: ops.mean_variance_normalization(T(1, 2, 3, 3), "all")),
            ("eps", lambda: ops.mean_variance_normalization(T(1, 2, 3, 3), (0,), -1.0)),
        ],
        "ops.lp_pool": [
            ("p", lambda: ops.lp_pool(x4(), 2, p=0)),
            ("kernel_size", lambda: ops.lp_pool(x4(), 0)),
        ],
        "ops.NegativeLogLikelihoodLoss": [
            ("reduction", lambda: ops.NegativeLogLikelihoodLoss("avg")),
            ("ignore_index", lambda: ops.NegativeLogLikelihoodLoss("mean", 1.5)),
        ],
        "ops.negative_log_likelihood_loss": [
            ("reduction", lambda: ops.negative_log_likelihood_loss(T(2, 3), idx(), reduction=None)),
        ],
        "ops.softmax_cross_entropy_loss": [
            ("ignore_index", lambda: ops.softmax_cross_entropy_loss(T(2, 3), idx(), ignore_index="x")),
        ],
        "ops.DFT": [("axis", lambda: ops.DFT("1")), ("length", lambda: ops.DFT(1, 0))],
        "ops.dft": [("length", lambda: ops.dft(T(2, 3, 1), 1, -4))],
        "ops.stft": [
            ("frame_step", lambda: ops.stft(T(1, 8, 1), 0)),
            ("frame_length", lambda: ops.stft(T(1, 8, 1), 1, None, 9)),
            ("signal", lambda: ops.stft(np.ones((1, 8, 1)), 1)),
        ],
        "ops.hann_window": [("size", lambda: ops.hann_window(-1))],
        "ops.hamming_window": [("size", lambda: ops.hamming_window(2.5))],
        "ops.blackman_window": [("size", lambda: ops.blackman_window("4"))],
        "ops.mel_weight_matrix": [
            ("num_mel_bins", lambda: ops.mel_weight_matrix(0, 16, 8000, 0, 4000)),
            ("sample_rate", lambda: ops.mel_weight_matrix(4, 16, -1, 0, 4000)),
            ("upper_edge_hertz", lambda: ops.mel_weight_matrix(4, 16, 8000, 100, 50)),
        ],
        "ops.deform_conv2d": [
            ("offset_group", lambda: ops.deform_conv2d(x4(), w4(), T(1, 18, 4, 4), offset_group=0)),
            ("padding", lambda: ops.deform_conv2d(x4(), w4(), T(1, 18, 4, 4), padding=(1, 2, 3))),
        ],
        "ops.max_roi_pool": [
            ("pooled_shape", lambda: ops.max_roi_pool(x4(), T(1, 5), 0)),
            ("spatial_scale", lambda: ops.max_roi_pool(x4(), T(1, 5), 2, -1.0)),
        ],
        "ops.causal_conv_with_state": [
            ("activation", lambda: ops.causal_conv_with_state(T(1, 2, 4), T(2, 1, 2), activation="relu")),
            ("weight", lambda: ops.causal_conv_with_state(T(1, 2, 4), np.ones((2, 1, 2)))),
        ],
        "ops.linear_attention": [
            ("update_rule", lambda: ops.linear_attention(*[T(1, 2, 4)] * 3, 2, 2, update_rule="x")),
            ("kv_heads", lambda: ops.linear_attention(*[T(1, 2, 4)] * 3, 2, 0)),
            (
                "query",
                lambda: ops.linear_attention(np.ones(4), T(1, 2, 4), T(1, 2, 4), 2, 2, update_rule="linear"),
            ),
        ],
    }
)

# Errors of another typed kind: a dtype that is not one is a DTypeError (DESIGN §4).
DTYPE_CASES = {"ops.Cast", "ops.cast", "ops.quant_storage", "ops.quant_range"}


def _words(text: str) -> list[str]:
    return text.split()


# Callables whose only checkable arguments are tensors (flags such as ``reverse`` take any
# value's truth): each is called with an array where a Tensor goes and must refuse it.
INPUTS_ONLY = {
    *(f"ops.{n}" for n in _words("integer_as_real dynamic_quantize_linear matmul_integer qlinear_matmul")),
    *(
        f"ops.{n}"
        for n in _words(
            """
            Add Sub Mul Div Pow Neg add sub mul div pow neg eltwise_mult equal less less_equal
            greater greater_equal logical_and logical_or logical_xor logical_not Max Min Sum Mean
            max min sum mean maximum minimum Abs Acos Acosh Asin Asinh Atan Atanh Ceil Cos Cosh Erf
            Exp Floor Log Reciprocal Round Sign Sin Sinh Sqrt Square Tan abs acos acosh asin asinh
            atan atanh ceil cos cosh erf exp floor log reciprocal round sign sin sinh sqrt square tan
            Identity PRelu ReLU Sigmoid SoftPlus SoftSign Tanh hardswish identity prelu relu sigmoid
            softplus softsign tanh NonZero ShapeOf Where nonzero shape_of MatMul matmul
            GlobalAveragePool GlobalMaxPool global_average_pool global_max_pool
            GRUCell GRUSequence LSTMCell LSTMSequence gru gru_cell lstm lstm_cell
            BinaryCrossEntropy CrossEntropy MeanSquareError NLLLoss SoftMaxCrossEntropy
            binary_cross_entropy cross_entropy mse_loss nll_loss softmax_cross_entropy
            Rotary rotary_embedding Det det
            """
        )
    ),
    *(f"autograd.{n}" for n in _words("RoundAway _and _not _or _xor negative round rounde shape")),
    *(f"layer.{n}" for n in _words("Add ReLU Sigmoid Tanh Gelu GlobalAvgPool2d GlobalMaxPool2d")),
    *(f"layer.{n}" for n in _words("BinaryCrossEntropy CrossEntropy MeanSquareError SoftMaxCrossEntropy")),
}

SKIP = {
    "ops.GetItem": "a key follows NumPy's indexing rules; a bad one is NumPy's IndexError, which "
    "Python's iteration over a Tensor relies on",
    "ops.getitem": "as ops.GetItem",
    "layer.Layer": "the base class: what a layer takes is its subclass's to say",
    "opt.DecayScheduler": "the abstract base of the schedules, which have their own cases",
    "checkpoint.Restored": "a record the library returns, not an entry point",
    "checkpoint.SaveHandle": "a handle the library returns, not an entry point",
    "checkpoint.VerifyReport": "a report the library returns, not an entry point",
    "data.load_text": "takes no arguments",
    "sonnx.SingaBackend": "onnx.backend's class: its prepare, run_model and supports_device have cases",
    "sonnx.SingaRep": "a prepared model the library returns, not an entry point",
}


# -- the enumeration ----------------------------------------------------------------------------
def _public() -> dict[str, Any]:
    """Every public callable, by its qualified name (aliases appear under each of their names)."""
    found: dict[str, Any] = {}

    def add(prefix: str, module: Any, names: list[str]) -> None:
        for name in names:
            obj = getattr(module, name)
            if callable(obj) and not (isinstance(obj, type) and issubclass(obj, BaseException)):
                found[f"{prefix}.{name}"] = obj

    add("ops", ops, ops.__all__)
    add("autograd", singa_names, singa_names.__all__)
    add("layer", layer, layer.__all__)
    add("opt", opt, opt.__all__)
    add("clip_grad", clip_grad, clip_grad.__all__)
    own = [
        n
        for n, f in vars(initializer).items()
        if inspect.isfunction(f) and f.__module__ == initializer.__name__
    ]
    add("initializer", initializer, [n for n in own if not n.startswith("_")])
    add("data", data, data.__all__)
    add("checkpoint", checkpoint, checkpoint.__all__)
    add("saving", saving, saving.__all__)
    add("sonnx", sonnx, sonnx.__all__)
    return found


def _t(value: Any = (2, 3), dtype: Any = np.float32) -> tensor.Tensor:
    """A tensor of ones of shape ``value`` (a tuple), or holding the number ``value``."""
    arr = np.ones(value, dtype) if isinstance(value, tuple) else np.asarray(value, dtype)
    return tensor.Tensor(data=arr)


def _traced() -> tuple[tensor.Tensor, tensor.Tensor]:
    """An input and an output with a recorded op between them, for to_onnx."""
    x = tensor.Tensor(data=np.ones((2, 3), np.float32), requires_grad=True)
    with autograd.training_mode(True):
        return x, ops.relu(x)


def test_every_public_callable_is_covered():
    public = _public()
    listed = set(CASES) | INPUTS_ONLY | set(SKIP)
    stale = sorted(listed - set(public))
    assert not stale, f"cases for names that are not public (renamed or removed?): {stale}"
    # An alias (ops.concat is ops.cat) is covered by the cases of any of its names.
    covered = {id(public[name]) for name in listed}
    missing = sorted(name for name, obj in public.items() if id(obj) not in covered)
    assert not missing, (
        f"public callables with no bad-argument cases: {missing}; add cases to CASES, or put them "
        "in INPUTS_ONLY (only tensors to check) or SKIP (with the reason)"
    )
    assert not (set(CASES) & INPUTS_ONLY) and not (set(CASES) & set(SKIP))


def _names(arg: str, message: str) -> bool:
    return re.search(rf"\b{re.escape(arg)}\b", message, re.IGNORECASE) is not None


@pytest.mark.parametrize(
    "name, arg, call",
    [
        pytest.param(name, arg, call, id=f"{name}-{arg}")
        for name, cases in CASES.items()
        for arg, call in cases
    ],
)
def test_bad_argument_raises_argument_error_naming_it(name, arg, call, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the checkpoint cases name files: none may be written
    expected = DTypeError if name in DTYPE_CASES else ArgumentError
    with pytest.raises(expected) as info:
        call()
    assert _names(arg, str(info.value)), f"{name}: the message does not name {arg!r}: {info.value}"
    assert not list(tmp_path.iterdir()), "a refused call wrote a file"


def _array_call(name: str, obj: Any) -> Callable[[], Any]:
    """A call of ``obj`` with a NumPy array wherever a Tensor goes."""
    bad = np.ones((2, 3), np.float32)
    if isinstance(obj, type):  # an op class or a layer: build it, then call it on arrays
        target = obj()
        sig = inspect.signature(target.forward)
    else:
        target = obj
        sig = inspect.signature(obj)
    params = sig.parameters.values()
    n = sum(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    n = n or int(any(p.kind == p.VAR_POSITIONAL for p in params))
    return lambda: target(*[bad] * n)


@pytest.mark.parametrize("name", sorted(INPUTS_ONLY))
def test_an_array_where_a_tensor_goes_is_refused(name):
    with pytest.raises(ArgumentError, match="Tensor"):
        _array_call(name, _public()[name])()


# -- the error class is both builtins, and says where ----------------------------------------
def test_argument_errors_are_value_and_type_errors():
    for error in (ArgumentError, OptimizerError):
        assert issubclass(error, ValueError) and issubclass(error, TypeError)
    with pytest.raises(ValueError, match=r"^Conv2d: stride must be an integer >= 1 or 2 of them, got 0$"):
        ops.conv2d(x4(), w4(), stride=0)
    with pytest.raises(TypeError, match=r"^max_pool2d: stride must be an integer >= 1 or 2 of them, got 0$"):
        ops.max_pool2d(x4(), 2, stride=0)
    with pytest.raises(ArgumentError, match=r"^Conv2d: stride must be an integer >= 1, got 0$"):
        layer.Conv2d(4, 3, stride=0)


def test_valid_arguments_in_every_accepted_form_still_work():
    """What the old ``int(...)`` conversions took is still taken: NumPy ints, integral floats,
    0-d arrays, a shape held in a Tensor."""
    assert ops.conv2d(x4(), w4(), stride=np.int64(2), padding=(1.0, 1.0)).shape == (1, 3, 3, 3)
    assert ops.max_pool2d(x4(), np.array(2)).shape == (1, 2, 3, 3)
    assert ops.reshape(T(6), tensor.from_numpy(np.array([3, 2]))).shape == (3, 2)
    assert ops.softmax(T(2, 3), np.int32(-1)).shape == (2, 3)
    assert ops.leakyrelu(T(2), np.float32(0.2)).shape == (2,)


# -- hypothesis: every non-positive size, every non-number --------------------------------------
SIZES: list[
    tuple[str, Callable[[Any], Any]]
] = [  # (argument, call with the bad value) for arguments that are sizes >= 1
    ("stride", lambda v: ops.conv2d(x4(), w4(), stride=v)),
    ("group", lambda v: ops.Conv2d(group=v)),
    ("kernel_size", lambda v: ops.max_pool2d(x4(), v)),
    ("dilation", lambda v: ops.ConvNd(3, 1, 0, v, 1)),
    ("depth", lambda v: ops.OneHot(v)),
    ("size", lambda v: ops.LRN(v)),
    ("groups", lambda v: ops.GroupNorm(v)),
    ("block", lambda v: ops.ScaledDotProductAttention(block=v)),
    ("out_features", lambda v: layer.Linear(v)),
    ("nb_kernels", lambda v: layer.Conv2d(v, 3)),
    ("num_heads", lambda v: layer.MultiHeadAttention(8, v)),
    ("batch_size", lambda v: data.DataLoader(np.ones(4), np.ones(4), batch_size=v)),
    ("decay_steps", lambda v: opt.CosineDecay(0.1, v)),
]
NUMBERS: list[tuple[str, Callable[[Any], Any]]] = [  # arguments that are finite numbers
    ("ratio", lambda v: ops.dropout(T(3), v)),
    ("alpha", lambda v: ops.Elu(v)),
    ("eps", lambda v: ops.LayerNorm(-1, v)),
    ("momentum", lambda v: layer.BatchNorm2d(momentum=v)),
    ("max_norm", lambda v: clip_grad.clip_grad_norm([T(2)], v)),
    ("lr", lambda v: opt.SGD(v)),
]


@given(case=st.sampled_from(SIZES), value=st.integers(max_value=0))
def test_no_size_below_one_is_taken(case, value):
    arg, call = case
    with pytest.raises(ArgumentError, match=arg):
        call(value)


@given(
    case=st.sampled_from(NUMBERS),
    value=st.one_of(
        st.text(max_size=3),
        st.none(),
        st.lists(st.floats(), max_size=2),
        st.sampled_from([math.nan, math.inf, -math.inf]),
    ),
)
def test_no_non_number_is_taken(case, value):
    arg, call = case
    with pytest.raises(ArgumentError, match=arg):
        call(value)

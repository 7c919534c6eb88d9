"""The importer's handler table: ONNX operator name -> handler function (tinygrad's ``onnx.py``
layout).

Every handler is named exactly after its operator and lives in the module of its family:
:mod:`~singa_lite.sonnx.import_ops.math` (arithmetic, activations, reductions),
:mod:`~singa_lite.sonnx.import_ops.shape` (constants, shapes, indexing),
:mod:`~singa_lite.sonnx.import_ops.nn` (convolution, pooling, normalisation, resizing, RNNs),
:mod:`~singa_lite.sonnx.import_ops.attention` (attention, RMS and group norm, rotary embedding),
:mod:`~singa_lite.sonnx.import_ops.control` (If, Loop, Scan, sequences, optionals),
:mod:`~singa_lite.sonnx.import_ops.quant` (quantization),
:mod:`~singa_lite.sonnx.import_ops.detection` (detection and indexing),
:mod:`~singa_lite.sonnx.import_ops.signal` (DFT, STFT, windows) and
:mod:`~singa_lite.sonnx.import_ops.extra` (further normalisations, losses, bitwise operators).
A handler receives a :class:`~singa_lite.sonnx.import_ops.base.Node` (attributes and the model's
opset) and the node's input tensors, and branches on ``node.opset`` where the operator changed.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from singa_lite.sonnx.import_ops import attention, control, detection, extra, math, nn, quant, shape, signal

FAMILIES = (math, shape, nn, attention, control, quant, detection, signal, extra)

HANDLERS: dict[str, Callable] = {name: getattr(m, name) for m in FAMILIES for name in m.__all__}
"""ONNX operator (default domain) -> handler."""

HOST_INPUTS: dict[str, tuple[int, ...]] = {
    "Clip": (1, 2), "ConstantOfShape": (0,), "CumSum": (1,), "Dropout": (1, 2), "Expand": (1,),
    "GRU": (4,), "LSTM": (4,), "OneHot": (1,), "Pad": (1, 2, 3), "RNN": (4,), "Range": (0, 1, 2),
    "Reshape": (1,), "Resize": (1, 2, 3), "Slice": (1, 2, 3, 4), "Split": (1,), "Squeeze": (1,),
    "Tile": (1,), "TopK": (1,), "Trilu": (1,), "Unsqueeze": (1,), "Upsample": (1,),
    "NonMaxSuppression": (2, 3, 4), "AffineGrid": (1,), "CenterCropPad": (1,), "Col2Im": (1, 2),
    "CumProd": (1,), "MaxUnpool": (2,), "RoiAlign": (1,),
    "DFT": (1, 2), "STFT": (1, 3), "HannWindow": (0,), "HammingWindow": (0,), "BlackmanWindow": (0,),
    "MelWeightMatrix": (0, 1, 2, 3, 4), "ReduceLogSum": (1,),
    **{op: (1,) for op in ("ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                           "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")},
}  # fmt: skip
"""ONNX operator -> the input positions its handler reads as Python values (shapes, axes,
pads, counts, bounds). Where such an input is a constant, ``Program`` reads it to the host
once at prepare time instead of on every run."""

MAX_OPSET = onnx.defs.onnx_opset_version()
"""The newest opset the installed ``onnx`` defines; newer models are refused."""

_DESIGN_TEXT = """Abs Acos Acosh Add And Asin Asinh Atan Atanh AveragePool BatchNormalization Cast Ceil
    Clip Concat Constant ConstantOfShape Conv Cos Cosh DepthToSpace Div Dropout Elu Equal Erf Expand
    Flatten Floor Gather Gemm GlobalAveragePool Greater HardSigmoid Identity LeakyRelu Less Log
    MatMul Max MaxPool Mean Min Mul Neg NonZero Not OneHot Or PRelu Pad Pow Reciprocal ReduceMean
    ReduceSum Relu Reshape ScatterElements Selu Shape Sigmoid Sign Sin Sinh Slice Softmax
    Softplus Softsign SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh Tile Transpose Unsqueeze
    Upsample Where Xor Exp ConvTranspose Resize LayerNormalization ArgMax ReduceMax GlobalMaxPool
    LRN Gelu LSTM GRU"""
DESIGN_OPS = tuple(_DESIGN_TEXT.split())
"""The operators DESIGN §5 requires (SINGA's list plus what real models need)."""


def schema_versions(op: str) -> list[int]:
    """The opsets at which ``op``'s definition changed, as the installed ``onnx`` knows them."""
    versions = []
    for v in range(1, MAX_OPSET + 1):
        try:
            since = onnx.defs.get_schema(op, v).since_version
        except onnx.defs.SchemaError:
            continue
        if since not in versions:
            versions.append(since)
    return versions

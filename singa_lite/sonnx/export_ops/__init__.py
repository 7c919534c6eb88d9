"""The exporter's converter table: singa_lite operator class -> converter, the mirror of the
importer's :mod:`~singa_lite.sonnx.import_ops`.

Converters live in the module of their family and register themselves as it is imported:
:mod:`~singa_lite.sonnx.export_ops.math` (arithmetic, activations, reductions, linear algebra),
:mod:`~singa_lite.sonnx.export_ops.shape` (shapes, casts, indexing),
:mod:`~singa_lite.sonnx.export_ops.nn` (convolution, pooling, normalisation, resizing, RNNs,
losses) and :mod:`~singa_lite.sonnx.export_ops.attention` (attention, RMS and group norm,
rotary embedding). What a converter receives is described in
:mod:`~singa_lite.sonnx.export_ops.base`.
"""

from __future__ import annotations

from typing import Any

from singa_lite.sonnx.export_ops import attention, detection, extra, math, nn, quant, shape
from singa_lite.sonnx.export_ops.base import CONVERTERS, Converter, unsupported

FAMILIES = (math, shape, nn, attention, detection, extra, quant)


def converter_for(op: Any, opset: int) -> Converter:
    """The converter of ``op``'s class (or nearest base class); ``UnsupportedOperatorError`` if none."""
    for cls in type(op).__mro__:
        fn = CONVERTERS.get(cls)
        if fn is not None:
            return fn
    raise unsupported(op, opset, "no ONNX converter is registered for it")


def supported_operators() -> list[str]:
    """Names of the singa_lite operator classes that export, sorted."""
    return sorted({cls.__name__ for cls in CONVERTERS})

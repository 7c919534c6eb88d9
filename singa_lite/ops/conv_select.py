"""Which strategy runs a convolution: one function of explicit arguments, no global state.

The engine (``ops.conv_general``) asks :func:`select` once per forward, with the shapes, the
dtype, the backend, whether a backward will follow and whether the compiled CPU kernels take
the arrays, and runs the strategy it names:

* ``onednn``: oneDNN's kernels, where its library loads (``ops.conv_onednn``);
* ``one_image``: batch-1 inference, ``W @ col`` straight into NCHW, kn2row, 1x1 convs as one
  GEMM (``ops.conv_infer``);
* ``depthwise_infer``: depthwise inference without the compiled kernels, one ``einsum`` over
  channels-last windows (``ops.depthwise``);
* ``depthwise``: depthwise with a backward, the tap loop (``ops.depthwise``);
* ``depthwise_kernel``: the same by the compiled CPU kernels (``backend/cpu_kernels/conv.py``);
* ``pointwise``: a 1x1 kernel at stride 1, unpadded, one group: per-image products in NCHW
  (``ops.conv_pointwise``);
* ``blocks``: blocked im2col + GEMM, col2im or a conv of ``dy`` back (``ops.conv_blocks``);
* ``blocks_transpose``: 2-D transposed conv, a GEMM into columns and col2im (``ops.conv_blocks``);
* ``columns`` / ``columns_transpose``: any rank, one column matrix and a batched GEMM
  (``ops.conv_columns``).

1-D and 2-D convolutions run the image strategies (1-D as images of height 1); other ranks run
the column strategies. The CuPy backend's im2col/col2im kernels are not a separate choice: the
column-making steps of ``blocks`` and ``columns`` take them where they read the arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

IMAGE = (
    "onednn", "one_image", "depthwise_infer", "depthwise", "depthwise_kernel", "pointwise",
    "blocks", "blocks_transpose",
)  # fmt: skip
"""The strategies that run on ``(N, C, H, W)`` images (a 1-D input gets a unit height)."""
STRATEGIES = (*IMAGE, "columns", "columns_transpose")


def select(
    rank: int,
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    group: int,
    dtype: Any,
    backend: str,
    grad: bool,
    transposed: bool = False,
    kernels: bool = False,
    pointwise: bool = False,
    onednn: bool = False,
) -> str:
    """The strategy (one of ``STRATEGIES``) for a convolution of ``x_shape`` by ``w_shape`` over
    ``rank`` spatial axes with ``group`` groups; ``backend`` is the array module's name
    (``"numpy"``, ``"cupy"``), ``grad`` whether a backward will follow, ``kernels`` whether the
    compiled CPU kernels take arrays of this ``dtype`` (``cpu_kernels.usable``), ``pointwise``
    whether the kernel is 1x1 at stride 1 with no padding, ``onednn`` whether oneDNN takes the
    arrays (``backend.onednn.usable``: float32 on the host, and for inference one thread): then
    every conv with a backward and every inference conv with a kernel larger than 1x1 runs
    ``onednn``.

    >>> select(2, (1, 8, 9, 9), (16, 8, 3, 3), 1, "float32", "numpy", grad=False)
    'one_image'
    >>> select(2, (4, 8, 9, 9), (8, 1, 3, 3), 8, "float32", "numpy", grad=True, kernels=True)
    'depthwise_kernel'
    >>> select(3, (1, 2, 4, 4, 4), (3, 2, 3, 3, 3), 1, "float64", "numpy", grad=False)
    'columns'
    """
    if rank not in (1, 2):
        return "columns_transpose" if transposed else "columns"
    if transposed:
        return "blocks_transpose"
    depthwise = w_shape[1] == 1 and group > 1
    if depthwise:
        # The compiled loops (only the host has them) add the bias as they write the output.
        # Measured in the models at batch 1, one thread, interleaved, against the einsum on
        # planes under 28x28: MobileNetV2 21.3 vs 22.8 ms, ShuffleNetV2 14.5 vs 15.6, ShuffleNet
        # 16.5 vs 18.0 (the einsum had won the small planes before the bias moved into the loops).
        if kernels and backend == "numpy" and str(dtype) in ("float32", "float64"):
            return "depthwise_kernel"
        return "depthwise" if grad else "depthwise_infer"
    if onednn and (grad or prod(w_shape[2:]) > 1):
        # Measured at batch 1, one thread, against one_image (reorders to and from oneDNN's
        # blocked layout included): 3x3 convs of ResNet-50 1.3-1.9x faster; 1x1 convs
        # 0.6-1.1x (the two reorders cost what the kernel saves), so they stay here.
        return "onednn"
    if not grad and x_shape[0] == 1:
        return "one_image"
    if pointwise and group == 1:
        return "pointwise"
    return "blocks"

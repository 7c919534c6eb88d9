"""The ``onednn`` strategy: a 1-D or 2-D convolution by oneDNN's kernels (``backend.onednn``).

The engine runs it for float32 host convs with a backward, and, on one thread, for inference
convs with a kernel larger than 1x1 (``conv_select``, ``onednn.usable``); an inference call
builds the same (training) primitive, whose forward is the inference one's.

The forward keeps the source and weights in the layouts oneDNN chose, so that the backward
passes reorder only ``dy``; the backward-weights pass writes the bias gradient as it goes
(``db``, which the engine takes instead of summing ``dy``). A geometry oneDNN has no kernel for
runs :class:`~singa_lite.ops.conv_blocks.BlockedGemm` instead, decided at the forward.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite.backend import onednn
from singa_lite.ops.conv_blocks import BlockedGemm, Geometry2d, Plan


class OneDnn(Plan):
    """Forward and backward of one call by oneDNN's convolution primitives (float32, NumPy)."""

    def __init__(self, xp: Any, geo: Geometry2d) -> None:
        super().__init__(xp, geo)
        self.geo = geo
        self.fallback: Plan | None = None
        self.db: Any = None

    def forward(self, x: Any, W: Any, b: Any) -> Any:
        t, bo, l, r = self.pads
        x, W = np.ascontiguousarray(x), np.ascontiguousarray(W)
        b = None if b is None else np.ascontiguousarray(b)
        try:
            self.conv = onednn.convolution(
                x.shape, W.shape, b is not None, self.stride, self.dilation, ((t, bo), (l, r)),
                self.out_hw, self.group, True,  # a training primitive: keeps what a backward needs
            )  # fmt: skip
        except onednn.OneDnnError:
            self.fallback = BlockedGemm(self.xp, self.geo)
            return self.fallback.forward(x, W, b)
        y, self.xm, self.wm = self.conv.forward(x, W, b)
        self.x, self.W, self.has_bias = x, W, b is not None
        return y

    def backward(self, dy: Any, need_x: bool, need_W: bool) -> tuple[Any, Any]:
        if self.fallback is not None:
            return self.fallback.backward(dy, need_x, need_W)
        dy = np.ascontiguousarray(dy, dtype=np.float32)
        # the bias gradient comes with the weights' pass; with no bias, that pass runs for dW alone
        dx, dW, self.db = self.conv.backward(
            dy, self.x, self.xm, self.W, self.wm, need_x, need_W, self.has_bias
        )
        return dx, dW

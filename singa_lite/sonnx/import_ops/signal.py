"""ONNX handlers for signal processing: DFT, STFT, the window functions, MelWeightMatrix.

DFT and STFT go through ``ops.dft``/``ops.stft`` (differentiable in the signal); the windows
and the mel matrix are constants, their sizes checked against the program's allocation limit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite import ops
from singa_lite.sonnx.import_ops.base import Node, wrap
from singa_lite.tensor import Tensor

# ruff: noqa: N802

__all__ = ["DFT", "STFT", "BlackmanWindow", "HammingWindow", "HannWindow", "MelWeightMatrix"]


def DFT(n: Node, x: Tensor, dft_length: Tensor | None = None, axis: Tensor | None = None) -> Tensor:
    """The DFT along ``axis`` (an attribute, default 1, before opset 20; an input, default -2,
    since), of length ``dft_length`` (the input cut or zero-padded to it)."""
    length = n.scalar(dft_length)
    a = n.attr("axis", 1) if n.opset < 20 else n.scalar(axis, -2)
    if x.ndim() < 2 or x.shape[-1] not in (1, 2):
        raise n.fail(f"expects a last axis of 1 (real) or 2 (complex), got shape {x.shape}")
    if not -(x.ndim() - 1) <= a < x.ndim() - 1:
        raise n.fail(f"axis {a} is out of range for a signal of shape {x.shape}")
    if length is not None:
        if length < 1:
            raise n.fail(f"dft_length must be positive, got {length}")
        shape = list(x.shape)
        shape[a], shape[-1] = max(length, shape[a]), 2  # the padded input and the output
        n.check_size(shape, np.complex128)
    return ops.dft(x, a, length, bool(n.attr("inverse", 0)), bool(n.attr("onesided", 0)))


def STFT(
    n: Node,
    signal: Tensor,
    frame_step: Tensor,
    window: Tensor | None = None,
    frame_length: Tensor | None = None,
) -> Tensor:
    step = n.scalar(frame_step)
    length = n.scalar(frame_length)
    if signal.ndim() != 3 or signal.shape[-1] not in (1, 2):
        raise n.fail(f"expects a signal (batch, length, 1 or 2), got shape {signal.shape}")
    if step is None or step < 1:
        raise n.fail(f"frame_step must be positive, got {step}")
    frame = length if length is not None else (window.shape[0] if window is not None else signal.shape[1])
    if not 1 <= frame <= signal.shape[1]:
        raise n.fail(f"frame_length {frame} must lie in [1, {signal.shape[1]}]")
    frames = (signal.shape[1] - frame) // step + 1
    n.check_size([signal.shape[0], frames, frame, 2], signal.dtype)
    return ops.stft(signal, step, window, length, bool(n.attr("onesided", 1)))


def _window_handler(fn: Any, doc: str) -> Any:
    def handler(n: Node, size: Tensor) -> Tensor:
        from singa_lite.sonnx.import_ops.shape import onnx_dtype

        count = n.scalar(size)
        dtype = onnx_dtype(n, n.attr("output_datatype", 1))
        if count is None or count < 0:
            raise n.fail(f"the window size must be a non-negative count, got {count}")
        n.check_size([count], dtype)
        w = fn(int(count), bool(n.attr("periodic", 1)), np.float64)
        return wrap(w.data.astype(dtype), size)

    handler.__doc__ = doc
    return handler


HannWindow = _window_handler(ops.hann_window, "sin^2(pi n / N).")
HammingWindow = _window_handler(ops.hamming_window, "25/46 - 21/46 cos(2 pi n / N).")
BlackmanWindow = _window_handler(ops.blackman_window, "0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N).")


def MelWeightMatrix(
    n: Node, num_mel_bins: Tensor, dft_length: Tensor, sample_rate: Tensor, lower: Tensor, upper: Tensor
) -> Tensor:
    from singa_lite.sonnx.import_ops.shape import onnx_dtype

    mels, length, rate = (n.scalar(t) for t in (num_mel_bins, dft_length, sample_rate))
    dtype = onnx_dtype(n, n.attr("output_datatype", 1))
    if min(mels, length, rate) < 1:
        raise n.fail(
            f"num_mel_bins, dft_length and sample_rate must be positive, got {mels}, {length}, {rate}"
        )
    n.check_size([length // 2 + 1, mels], np.float64)
    w = ops.mel_weight_matrix(
        int(mels), int(length), rate, float(n.scalar(lower)), float(n.scalar(upper)), np.float64
    )
    return wrap(w.data.astype(dtype), num_mel_bins)

"""Signal processing as ONNX defines it: the discrete Fourier transform ``dft``, the short-time
transform ``stft``, the window functions and the mel filter bank.

Complex values are real tensors with a last axis of 2 (real, imaginary); a real signal may
have a last axis of 1. ``dft`` is a primitive whose gradient is the adjoint transform; ``stft``
is framing (a gather, differentiable), a window product and a ``dft``. The windows and the mel
matrix are constants.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa_lite import _args
from singa_lite import device as _device
from singa_lite.autograd import Operator
from singa_lite.errors import DTypeError
from singa_lite.ops import elementwise, indexing, shape
from singa_lite.ops._util import normalize_axis
from singa_lite.tensor import Tensor

__all__ = [
    "DFT",
    "blackman_window",
    "dft",
    "hamming_window",
    "hann_window",
    "mel_weight_matrix",
    "stft",
]


def _resize(xp: Any, z: Any, n: int, axis: int) -> Any:
    """``z`` cut or zero-padded to length ``n`` along ``axis``."""
    have = z.shape[axis]
    if have >= n:
        return z[(slice(None),) * axis + (slice(0, n),)]
    widths = [(0, 0)] * z.ndim
    widths[axis] = (0, n - have)
    return xp.pad(z, widths)


class DFT(Operator):
    """The DFT of ``x`` (``(..., 1)`` real or ``(..., 2)`` complex) along ``axis``, of length
    ``length`` (the input cut or zero-padded to it); ``inverse`` divides by the length;
    ``onesided`` keeps the first ``length // 2 + 1`` bins (for the inverse: the input holds those
    bins of a real signal, and the output is that real signal, ``(..., 1)``).
    """

    def __init__(
        self, axis: int, length: int | None = None, inverse: bool = False, onesided: bool = False
    ) -> None:
        super().__init__()
        self.axis = _args.axis(self.name, "axis", axis)
        self.length = None if length is None else _args.count(self.name, "length", length)
        self.inverse, self.onesided = bool(inverse), bool(onesided)

    def forward(self, x: Any) -> Any:
        xp = self.xp
        if x.dtype.kind != "f":
            raise DTypeError(f"{self.name}: expects a floating-point tensor, got {x.dtype}")
        if x.ndim < 2 or x.shape[-1] not in (1, 2):
            raise self.error("expects a last axis of 1 (real) or 2 (real, imaginary)", x)
        a = normalize_axis(self.axis, x.ndim - 1, self.name)
        size = x.shape[a]
        n = self.length or (2 * (size - 1) if self.inverse and self.onesided else size)
        if n < 1:
            raise self.error(f"the transform length must be positive, got {n}", x)
        self.a, self.n, self.in_shape, self.dtype = a, n, x.shape, x.dtype
        xc = x.astype(np.float32) if x.dtype == np.float16 else x
        z = xc[..., 0] if x.shape[-1] == 1 else xc[..., 0] + 1j * xc[..., 1]
        if self.inverse and self.onesided:  # the real signal of Hermitian bins 0 .. n//2
            return xp.fft.irfft(_resize(xp, z, n // 2 + 1, a), n, axis=a)[..., None].astype(x.dtype)
        z = _resize(xp, z, n, a)
        y = xp.fft.ifft(z, axis=a) if self.inverse else xp.fft.fft(z, axis=a)
        if self.onesided:
            y = y[(slice(None),) * a + (slice(0, n // 2 + 1),)]
        return xp.stack([y.real, y.imag], axis=-1).astype(x.dtype)

    def backward(self, dy: Any) -> Any:
        xp, a, n = self.xp, self.a, self.n
        g = dy.astype(np.float32) if dy.dtype == np.float16 else dy
        if self.inverse and self.onesided:
            # irfft weighs bin k by c_k / n (c = 1 for the DC and Nyquist bins, else 2).
            gz = xp.fft.rfft(g[..., 0], axis=a)
            c = xp.full(n // 2 + 1, 2.0)
            c[0] = 1.0
            if n % 2 == 0:
                c[-1] = 1.0
            gz = gz * (c / n).reshape([-1] + [1] * (gz.ndim - a - 1))
        else:
            gz = g[..., 0] + 1j * g[..., 1]
            if self.onesided:
                gz = _resize(xp, gz, n, a)
            # The adjoint of fft is n * ifft; of ifft, fft / n.
            gz = xp.fft.fft(gz, axis=a) / n if self.inverse else xp.fft.ifft(gz, axis=a) * n
        gz = _resize(xp, gz, self.in_shape[a], a)
        out = gz.real[..., None] if self.in_shape[-1] == 1 else xp.stack([gz.real, gz.imag], axis=-1)
        return out.astype(self.dtype)


def dft(
    x: Tensor, axis: int = -2, length: int | None = None, inverse: bool = False, onesided: bool = False
) -> Tensor:
    """The discrete Fourier transform of ``x`` along ``axis`` (ONNX DFT); complex values as a last
    axis of 2, a real input may have a last axis of 1. See :class:`DFT`.

    >>> import numpy as np; from singa_lite import tensor
    >>> x = tensor.from_numpy(np.array([[1.0], [0.0], [0.0], [0.0]]))
    >>> dft(x, axis=0).numpy()[:, 0].tolist()  # an impulse has a flat spectrum
    [1.0, 1.0, 1.0, 1.0]
    """
    return DFT(axis, length, inverse, onesided)(x)[0]


def stft(
    signal: Tensor,
    frame_step: int,
    window: Tensor | None = None,
    frame_length: int | None = None,
    onesided: bool = True,
) -> Tensor:
    """The short-time Fourier transform of ``signal`` ``(batch, length, 1 or 2)``: frames of
    ``frame_length`` every ``frame_step`` samples, each multiplied by ``window`` (rectangular if
    omitted) and transformed; ``(batch, frames, bins, 2)``, ``frames = (length - frame_length) //
    frame_step + 1`` (ONNX STFT).
    """
    _args.tensor("stft", "signal", signal)
    if signal.ndim() != 3 or signal.shape[-1] not in (1, 2):
        raise _args.bad("stft", "signal", "have shape (batch, length, 1 or 2)", signal.shape)
    step = _args.count("stft", "frame_step", frame_step)
    length = signal.shape[1]
    if frame_length is None:
        frame_length = length if window is None else window.shape[0]
    frame_length = _args.count("stft", "frame_length", frame_length)
    if window is not None and window.shape != (frame_length,):
        raise _args.bad("stft", "window", f"have shape ({frame_length},)", window.shape)
    if frame_length > length:
        raise _args.bad("stft", "frame_length", f"be at most the signal length {length}", frame_length)
    frames = (length - frame_length) // step + 1
    xp = signal.device.xp
    starts = xp.arange(frames) * step
    index = Tensor._wrap(starts[:, None] + xp.arange(frame_length), signal.device, False, None, 0)
    framed = indexing.gather(signal, 1, index)  # (batch, frames, frame_length, 1 or 2)
    if window is not None:
        framed = elementwise.mul(framed, shape.reshape(window, (1, 1, frame_length, 1)))
    return dft(framed, 2, None, False, onesided)


def _window(size: int, dtype: Any, periodic: bool, terms: tuple[float, ...], opname: str) -> Tensor:
    """``sum_k (-1)^k terms[k] cos(2 pi k n / N)``, ``N = size`` (periodic) or ``size - 1``; a
    window of one sample is ``[1]`` (as PyTorch and SciPy have it; ONNX's formula gives 0/0)."""
    size = _args.count(opname, "size", size, low=0)
    if size == 1:
        return _host_tensor(np.ones(1, dtype))
    n = np.arange(size, dtype=np.float64)
    period = size if periodic else size - 1
    w = np.zeros(size)
    for k, c in enumerate(terms):
        w += (-1) ** k * c * (np.cos(2 * math.pi * k * n / period) if k else 1.0)
    return _host_tensor(w.astype(dtype))


def _host_tensor(arr: np.ndarray) -> Tensor:
    dev = _device.get_default_device()
    return Tensor._wrap(dev.xp.asarray(arr), dev, False, None, 0)


def hann_window(size: int, periodic: bool = True, dtype: Any = np.float32) -> Tensor:
    """``sin^2(pi n / N)`` (ONNX HannWindow, ``torch.hann_window``).

    >>> hann_window(4).numpy().round(3).tolist()
    [0.0, 0.5, 1.0, 0.5]
    """
    return _window(size, dtype, periodic, (0.5, 0.5), "hann_window")


def hamming_window(size: int, periodic: bool = True, dtype: Any = np.float32) -> Tensor:
    """``25/46 - 21/46 cos(2 pi n / N)`` (ONNX HammingWindow; ``torch.hamming_window`` with
    ``alpha = 25/46``)."""
    return _window(size, dtype, periodic, (25 / 46, 21 / 46), "hamming_window")


def blackman_window(size: int, periodic: bool = True, dtype: Any = np.float32) -> Tensor:
    """``0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)`` (ONNX BlackmanWindow)."""
    return _window(size, dtype, periodic, (0.42, 0.5, 0.08), "blackman_window")


def mel_weight_matrix(
    num_mel_bins: int,
    dft_length: int,
    sample_rate: int,
    lower_edge_hertz: float,
    upper_edge_hertz: float,
    dtype: Any = np.float32,
) -> Tensor:
    """Triangular mel filters, ``(dft_length // 2 + 1, num_mel_bins)``, each peaking at 1
    (ONNX MelWeightMatrix): ``num_mel_bins + 2`` points evenly spaced on the mel scale
    ``2595 log10(1 + f / 700)`` between the edges (ONNX's step divides the range by
    ``num_mel_bins + 2``), placed on the bin ``floor((dft_length + 1) f / sample_rate)``.
    """
    mels = _args.count("mel_weight_matrix", "num_mel_bins", num_mel_bins)
    length = _args.count("mel_weight_matrix", "dft_length", dft_length)
    rate = _args.positive("mel_weight_matrix", "sample_rate", sample_rate)
    lower_edge_hertz = _args.number("mel_weight_matrix", "lower_edge_hertz", lower_edge_hertz, 0.0)
    upper_edge_hertz = _args.number("mel_weight_matrix", "upper_edge_hertz", upper_edge_hertz, 0.0)
    if not lower_edge_hertz < upper_edge_hertz:
        raise _args.bad(
            "mel_weight_matrix",
            "upper_edge_hertz",
            f"exceed lower_edge_hertz {lower_edge_hertz}",
            upper_edge_hertz,
        )
    bins = length // 2 + 1
    low, high = (2595 * math.log10(1 + f / 700) for f in (lower_edge_hertz, upper_edge_hertz))
    points = np.arange(mels + 2) * ((high - low) / (mels + 2)) + low
    hertz = 700 * (10 ** (points / 2595) - 1)
    edges = ((length + 1) * hertz // rate).astype(np.int64)
    j = np.arange(bins)[:, None]
    left, centre, right = edges[:-2], edges[1:-1], edges[2:]
    rise = np.where(centre > left, (j - left) / np.maximum(centre - left, 1), (j == centre) * 1.0)
    fall = (right - j) / np.maximum(right - centre, 1)
    up = (j >= left) & (j <= centre)
    down = (j >= centre) & (j < right) & (right > centre)
    w = np.where(down, fall, np.where(up, rise, 0.0))
    return _host_tensor(w.astype(dtype))

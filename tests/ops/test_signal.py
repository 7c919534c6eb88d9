"""Signal ops: ``dft`` and ``stft`` against NumPy's and PyTorch's FFTs with float64 gradient
checks, the windows against PyTorch's, the mel matrix's shape and peaks, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opcheck import check_forward, check_grad

from singa_lite import ops, tensor
from singa_lite.errors import ArgumentError, DTypeError, ShapeError


def T(a):
    """A tensor that keeps ``a``'s dtype (``from_numpy`` narrows float64)."""
    return tensor.Tensor(data=np.asarray(a), requires_grad=False)


def as_complex(x):
    return x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]


def pairs(z):
    return np.stack([z.real, z.imag], axis=-1)


def ref_dft(x, axis, length, inverse, onesided):
    z = as_complex(x)
    n = length or (2 * (z.shape[axis] - 1) if inverse and onesided else z.shape[axis])
    if inverse and onesided:
        return np.fft.irfft(z, n, axis=axis)[..., None]
    y = np.fft.ifft(z, n, axis=axis) if inverse else np.fft.fft(z, n, axis=axis)
    if onesided:
        y = np.take(y, np.arange(n // 2 + 1), axis=axis)
    return pairs(y)


SETTINGS = st.tuples(
    st.sampled_from([1, 2]),  # real or complex input
    st.sampled_from([0, 1, -2]),  # axis of the (batch, len, other) signal
    st.sampled_from([None, 3, 8]),  # length: cut, padded, or the input's
    st.booleans(),  # inverse
    st.booleans(),  # onesided
)


@given(settings=SETTINGS, seed=st.integers(0, 9))
def test_dft(dev, settings, seed):
    parts, axis, length, inverse, onesided = settings
    x = np.random.default_rng(seed).standard_normal((3, 5, 2, parts))
    a = axis % 3

    def fn(t):
        return ops.dft(t, axis, length, inverse, onesided)

    check_forward(fn, lambda v: ref_dft(v, a, length, inverse, onesided), [x], dev, rtol=1e-10, atol=1e-12)
    check_forward(
        fn,
        lambda v: ref_dft(v, a, length, inverse, onesided).astype(np.float32),
        [x.astype(np.float32)],
        dev,
        rtol=1e-4,
        atol=1e-5,
    )
    check_grad(fn, [x], dev)


def test_dft_torch_and_float16(dev):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    x = np.random.default_rng(0).standard_normal((2, 6, 1))
    got = ops.dft(T(x), 1, None, False, True).numpy()
    want = torch.view_as_real(torch.fft.rfft(torch.tensor(x[..., 0]), dim=1)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    back = ops.dft(T(got), 1, 6, True, True).numpy()
    np.testing.assert_allclose(back, x, rtol=1e-12, atol=1e-12)
    half = ops.dft(T(x.astype(np.float16)), 1)
    assert half.dtype == np.float16


def test_dft_errors():
    with pytest.raises(ShapeError):
        ops.dft(T(np.zeros((2, 3))), 0)  # the last axis must be 1 or 2
    with pytest.raises(ShapeError):
        ops.dft(T(np.zeros((2, 3, 1))), 2)  # the complex axis is not a signal axis
    with pytest.raises(DTypeError):
        ops.dft(T(np.zeros((2, 3, 1), np.int64)), 1)
    with pytest.raises(ArgumentError):
        ops.dft(T(np.zeros((2, 3, 1))), 1, 0)


def ref_stft(x, step, window, frame, onesided):
    frames = (x.shape[1] - frame) // step + 1
    w = np.ones(frame) if window is None else window
    segs = np.stack([x[:, f * step : f * step + frame] for f in range(frames)], axis=1)
    return ref_dft(segs * w[None, None, :, None], 2, None, False, onesided)


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("onesided", [True, False])
@pytest.mark.parametrize("windowed", [True, False])
def test_stft(dev, parts, onesided, windowed):
    rng = np.random.default_rng(parts)
    x = rng.standard_normal((2, 12, parts))
    window = np.hanning(5) + 0.1 if windowed else None

    def fn(t, *w):
        return ops.stft(t, 3, w[0] if w else None, 5, onesided)

    args = [x] + ([window] if windowed else [])
    check_forward(fn, lambda v, *w: ref_stft(v, 3, window, 5, onesided), args, dev, rtol=1e-10, atol=1e-12)
    check_grad(fn, args, dev)


def test_stft_torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    x = np.random.default_rng(5).standard_normal((2, 40))
    w = ops.hann_window(16, dtype=np.float64).numpy()
    got = ops.stft(T(x[..., None]), 4, T(w), 16).numpy()
    want = torch.stft(torch.tensor(x), 16, 4, window=torch.tensor(w), center=False, return_complex=True)
    np.testing.assert_allclose(got, torch.view_as_real(want.transpose(1, 2)).numpy(), rtol=1e-10, atol=1e-10)


def test_stft_errors():
    x = T(np.zeros((1, 8, 1)))
    with pytest.raises(ArgumentError):
        ops.stft(x, 0)
    with pytest.raises(ArgumentError):
        ops.stft(x, 1, None, 9)
    with pytest.raises(ArgumentError):
        ops.stft(x, 1, T(np.ones(3)), 4)
    with pytest.raises(ArgumentError):
        ops.stft(T(np.zeros((8, 1))), 1)


@pytest.mark.parametrize("periodic", [True, False])
@pytest.mark.parametrize("size", [1, 2, 10])
def test_windows_torch(periodic, size):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    d = torch.float64
    cases = [
        (ops.hann_window, torch.hann_window(size, periodic, dtype=d)),
        (ops.hamming_window, torch.hamming_window(size, periodic, 25 / 46, 21 / 46, dtype=d)),
        (ops.blackman_window, torch.blackman_window(size, periodic, dtype=d)),
    ]
    for ours, want in cases:
        got = ours(size, periodic, np.float64).numpy()
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)
    assert ops.hann_window(4).dtype == np.float32


def test_mel_weight_matrix():
    w = ops.mel_weight_matrix(8, 64, 8000, 0.0, 4000.0).numpy()
    assert w.shape == (33, 8) and w.dtype == np.float32
    assert np.allclose(w.max(axis=0), 1.0)  # each triangle peaks at 1
    peaks = w.argmax(axis=0)
    assert (np.diff(peaks) > 0).all()  # centres rise with the mel bin
    with pytest.raises(ArgumentError):
        ops.mel_weight_matrix(0, 64, 8000, 0.0, 4000.0)

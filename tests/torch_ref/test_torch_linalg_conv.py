"""conv2d, conv_transpose2d, matmul and gemm against PyTorch: forward and every gradient."""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite import autograd, tensor

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
F = torch.nn.functional


def _rand(shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _ours(fn, arrays: list, dy: np.ndarray, dev) -> tuple:
    """Output and gradients of ``fn`` (weighted by ``dy``) in singa_lite."""
    ts = [tensor.Tensor(data=a, device=dev, requires_grad=False) for a in arrays]
    for t in ts:
        t.requires_grad = t.stores_grad = True
    autograd.training = True
    y = fn(*ts)
    grads = dict(autograd.backward(y, tensor.Tensor(data=dy, device=dev, requires_grad=False)))
    return tensor.to_numpy(y), [tensor.to_numpy(grads[t]) for t in ts]


def _theirs(fn, arrays: list, dy: np.ndarray | None = None) -> tuple:
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*ts)
    if dy is None:
        return y.detach().numpy(), None
    y.backward(torch.tensor(dy))
    return y.detach().numpy(), [t.grad.numpy() for t in ts]


def _compare(ours, theirs, arrays: list, dev, tol: float = 1e-4) -> None:
    want, _ = _theirs(theirs, arrays)
    dy = _rand(want.shape, 99)
    y, grads = _ours(ours, arrays, dy, dev)
    want, want_grads = _theirs(theirs, arrays, dy)
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)
    for i, (g, w) in enumerate(zip(grads, want_grads)):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"gradient of input {i}")


CONV_GRID = [
    # (x shape, O, k, stride, padding, dilation, group)
    ((2, 3, 9, 9), 4, 3, 1, 1, 1, 1),
    ((2, 1, 12, 12), 6, 5, 1, 2, 1, 1),
    ((3, 4, 10, 9), 6, (3, 2), 2, (1, 0), 1, 2),
    ((2, 6, 8, 8), 6, 3, 2, 1, 1, 6),  # depthwise
    ((2, 4, 8, 8), 8, 3, 1, 2, 2, 4),  # depthwise, channel multiplier 2
    ((2, 4, 9, 7), 4, 3, (1, 2), (2, 1), (2, 1), 1),
    ((2, 8, 6, 6), 4, 1, 2, 0, 1, 1),
    ((0, 3, 5, 5), 2, 3, 1, 1, 1, 1),
]


@pytest.mark.parametrize(("xs", "O", "k", "s", "p", "d", "g"), CONV_GRID)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d(dev, xs, O, k, s, p, d, g, bias):
    kh, kw = (k, k) if isinstance(k, int) else k
    arrays = [_rand(xs, 0), _rand((O, xs[1] // g, kh, kw), 1)] + ([_rand((O,), 2)] if bias else [])
    _compare(
        lambda *ts: autograd.conv2d(*ts, stride=s, padding=p, dilation=d, group=g),
        lambda *ts: F.conv2d(*ts, stride=s, padding=p, dilation=d, groups=g),
        arrays,
        dev,
    )


def test_conv2d_asymmetric_padding(dev):
    pads = (1, 0, 2, 1)  # SINGA: top, bottom, left, right; F.pad takes left, right, top, bottom
    arrays = [_rand((2, 3, 7, 6), 0), _rand((5, 3, 3, 3), 1), _rand((5,), 2)]
    _compare(
        lambda *ts: autograd.conv2d(*ts, stride=2, padding=pads),
        lambda x, w, b: F.conv2d(F.pad(x, (pads[2], pads[3], pads[0], pads[1])), w, b, stride=2),
        arrays,
        dev,
    )


TRANSPOSE_GRID = [
    # (x shape, C_out per group, k, stride, padding, output_padding, dilation, group)
    ((2, 4, 5, 5), 3, 3, 2, 1, 1, 1, 1),
    ((2, 4, 4, 6), 2, (2, 3), (2, 1), (0, 1), 0, 1, 2),
    ((2, 3, 4, 4), 4, 3, 1, 0, 0, 2, 1),
    ((1, 2, 3, 3), 2, 4, 3, 1, (2, 1), 1, 1),
]


@pytest.mark.parametrize(("xs", "og", "k", "s", "p", "op", "d", "g"), TRANSPOSE_GRID)
def test_conv_transpose2d(dev, xs, og, k, s, p, op, d, g):
    kh, kw = (k, k) if isinstance(k, int) else k
    arrays = [_rand(xs, 0), _rand((xs[1], og, kh, kw), 1), _rand((og * g,), 2)]
    _compare(
        lambda *ts: autograd.conv_transpose2d(
            *ts, stride=s, padding=p, output_padding=op, dilation=d, group=g
        ),
        lambda *ts: F.conv_transpose2d(*ts, stride=s, padding=p, output_padding=op, dilation=d, groups=g),
        arrays,
        dev,
    )


@pytest.mark.parametrize(
    ("sa", "sb"), [((4, 5), (5, 3)), ((5,), (5, 3)), ((4, 5), (5,)), ((2, 1, 4, 5), (3, 5, 2)), ((6,), (6,))]
)
def test_matmul(dev, sa, sb):
    _compare(autograd.matmul, torch.matmul, [_rand(sa, 0), _rand(sb, 1)], dev)


@pytest.mark.parametrize(
    ("ta", "tb", "cs"), [(False, False, (3,)), (True, False, (4, 3)), (True, True, (4, 1))]
)
def test_gemm(dev, ta, tb, cs):
    A, B = _rand((5, 4) if ta else (4, 5), 0), _rand((3, 5) if tb else (5, 3), 1)

    def ref(a, b, c):
        return 0.5 * ((a.T if ta else a) @ (b.T if tb else b)) + 2.0 * c

    _compare(
        lambda *ts: autograd.gemm(*ts, alpha=0.5, beta=2.0, transA=ta, transB=tb),
        ref,
        [A, B, _rand(cs, 2)],
        dev,
    )

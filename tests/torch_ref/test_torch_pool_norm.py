"""Pooling, normalisation and resize against PyTorch: forward, backward and running stats."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import to_tensors

from singa_lite import autograd, tensor

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
F = torch.nn.functional


def both(fn, tfn, arrays, dev, rtol=1e-5, atol=1e-5, dy_seed=0):
    """Run ``fn`` (singa_lite) and ``tfn`` (torch) on ``arrays``; compare outputs and input grads."""
    autograd.training = True
    try:
        ts = to_tensors(arrays, dev)
        y = fn(*ts)
        dy = np.random.default_rng(dy_seed).standard_normal(y.shape).astype(arrays[0].dtype)
        grads = autograd.gradients(y, dev.xp.asarray(dy))
    finally:
        autograd.training = False
    tts = [torch.tensor(a, requires_grad=True) for a in arrays]
    ty = tfn(*tts)
    ty.backward(torch.from_numpy(dy))
    np.testing.assert_allclose(tensor.to_numpy(y), ty.detach().numpy(), rtol=rtol, atol=atol)
    for t, tt in zip(ts, tts):
        np.testing.assert_allclose(tensor.to_numpy(grads[t]), tt.grad.numpy(), rtol=rtol, atol=atol)


def rand(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


POOL_CASES = [  # kernel, stride, padding, dilation, ceil_mode
    (2, 2, 0, 1, False),
    (3, 2, 1, 1, False),
    (3, 2, 1, 1, True),
    (3, 3, 0, 1, True),
    ((3, 2), (2, 1), (1, 0), 1, True),
    (2, 1, 1, 1, False),
    (3, 1, 1, 2, False),
    ((2, 3), 2, (1, 1), (2, 1), True),
]


@pytest.mark.parametrize("k, s, p, d, ceil_mode", POOL_CASES)
def test_max_pool2d(dev, k, s, p, d, ceil_mode):
    x = rand((2, 3, 7, 8))
    both(
        lambda t: autograd.max_pool2d(t, k, s, p, d, ceil_mode),
        lambda t: F.max_pool2d(t, k, s, p, d, ceil_mode),
        [x],
        dev,
    )


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("k, s, p, _, ceil_mode", POOL_CASES[:6])
def test_avg_pool2d(dev, k, s, p, _, ceil_mode, count_include_pad):
    x = rand((2, 3, 7, 8), seed=1)
    both(
        lambda t: autograd.avg_pool2d(t, k, s, p, ceil_mode, count_include_pad),
        lambda t: F.avg_pool2d(t, k, s, p, ceil_mode, count_include_pad),
        [x],
        dev,
    )


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_pool1d(dev, ceil_mode):
    x = rand((2, 3, 10), seed=2)
    both(
        lambda t: autograd.max_pool1d(t, 3, 2, 1, ceil_mode=ceil_mode),
        lambda t: F.max_pool1d(t, 3, 2, 1, ceil_mode=ceil_mode),
        [x],
        dev,
    )
    both(
        lambda t: autograd.avg_pool1d(t, 3, 2, 1, ceil_mode, False),
        lambda t: F.avg_pool1d(t, 3, 2, 1, ceil_mode, False),
        [x],
        dev,
    )


def test_global_pools(dev):
    x = rand((2, 3, 5, 4), seed=3)
    both(autograd.global_average_pool, lambda t: F.adaptive_avg_pool2d(t, 1), [x], dev)
    both(autograd.global_max_pool, lambda t: F.adaptive_max_pool2d(t, 1), [x], dev)


@pytest.mark.parametrize("shape", [(8, 4, 5, 5), (16, 6), (4, 3, 7)])
def test_batchnorm_train_and_running_stats(dev, shape):
    x = rand(shape, seed=4) * 3 + 1
    c = shape[1]
    scale, bias = rand((c,), 5) + 1, rand((c,), 6)
    rm, rv = rand((c,), 7), np.abs(rand((c,), 8)) + 0.5
    ours = [
        tensor.Tensor(data=rm.copy(), device=dev, requires_grad=False),
        tensor.Tensor(data=rv.copy(), device=dev, requires_grad=False),
    ]
    theirs = [torch.tensor(rm), torch.tensor(rv)]
    both(
        lambda *t: autograd.batchnorm_2d(*t, *ours, momentum=0.9),
        lambda *t: F.batch_norm(t[0], *theirs, t[1], t[2], training=True, momentum=0.1),
        [x, scale, bias],
        dev,
        rtol=1e-4,
        atol=1e-4,
    )
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(tensor.to_numpy(o), t.numpy(), rtol=1e-5, atol=1e-6)
    # Eval with the updated statistics.
    ty = F.batch_norm(torch.tensor(x), *theirs, torch.tensor(scale), torch.tensor(bias), training=False)
    y = autograd.batchnorm_2d(
        *[tensor.Tensor(data=a, device=dev, requires_grad=False) for a in (x, scale, bias)], *ours
    )
    np.testing.assert_allclose(tensor.to_numpy(y), ty.numpy(), rtol=1e-5, atol=1e-5)


def test_batchnorm_eval_backward(dev):
    x, scale, bias = rand((4, 3, 2, 2), 9), rand((3,), 10), rand((3,), 11)
    rm, rv = rand((3,), 12), np.abs(rand((3,), 13)) + 0.5
    running = [
        tensor.Tensor(data=rm, device=dev, requires_grad=False),
        tensor.Tensor(data=rv, device=dev, requires_grad=False),
    ]
    both(
        lambda *t: autograd.batchnorm_2d(*t, *running, training=False),
        lambda *t: F.batch_norm(t[0], torch.tensor(rm), torch.tensor(rv), t[1], t[2], training=False),
        [x, scale, bias],
        dev,
    )


@pytest.mark.parametrize("axis", [-1, 1, 2])
def test_layer_norm(dev, axis):
    x = rand((3, 4, 5), 14)
    norm = x.shape[axis:]
    scale, bias = rand(norm, 15), rand(norm, 16)
    both(
        lambda *t: autograd.layer_norm(*t, axis=axis),
        lambda *t: F.layer_norm(t[0], norm, t[1], t[2]),
        [x, scale, bias],
        dev,
        rtol=1e-4,
        atol=1e-5,
    )


def test_instance_norm(dev):
    x, scale, bias = rand((2, 3, 4, 5), 17), rand((3,), 18), rand((3,), 19)
    both(
        autograd.instance_norm,
        lambda *t: F.instance_norm(t[0], weight=t[1], bias=t[2]),
        [x, scale, bias],
        dev,
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("size", [1, 3, 5])  # odd sizes: torch centres even windows differently
def test_lrn(dev, size):
    x = rand((2, 6, 3, 3), 20)
    both(
        lambda t: autograd.lrn(t, size, 1e-2, 0.75, 2.0),
        lambda t: F.local_response_norm(t, size, 1e-2, 0.75, 2.0),
        [x],
        dev,
    )


RESIZE_CASES = [  # torch mode, align_corners, onnx mode, coordinate mode, nearest mode
    ("nearest", None, "nearest", "asymmetric", "floor"),
    ("nearest-exact", None, "nearest", "half_pixel", "round_prefer_ceil"),
    ("bilinear", False, "linear", "half_pixel", "round_prefer_floor"),
    ("bilinear", True, "linear", "align_corners", "round_prefer_floor"),
    ("bicubic", False, "cubic", "half_pixel", "round_prefer_floor"),
    ("bicubic", True, "cubic", "align_corners", "round_prefer_floor"),
]


@pytest.mark.parametrize("size", [(7, 9), (3, 2), (5, 4)])
@pytest.mark.parametrize("tmode, align, mode, coord, nearest", RESIZE_CASES)
def test_resize_vs_interpolate(dev, size, tmode, align, mode, coord, nearest):
    x = rand((2, 3, 5, 4), 21)
    both(
        lambda t: autograd.resize(
            t, sizes=[2, 3, *size], mode=mode, coordinate_transformation_mode=coord, nearest_mode=nearest
        ),
        lambda t: F.interpolate(t, size=size, mode=tmode, align_corners=align),
        [x],
        dev,
    )


def test_upsample_vs_interpolate_scale_factor(dev):
    x = rand((1, 2, 3, 4), 22)
    both(
        lambda t: autograd.upsample(t, [1, 1, 2, 3]),
        lambda t: F.interpolate(t, scale_factor=(2, 3), mode="nearest"),
        [x],
        dev,
    )

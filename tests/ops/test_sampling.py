"""GridSample, AffineGrid, MaxUnpool, Col2Im, CenterCropPad: forward against PyTorch or NumPy,
float64 gradient checks."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import check_forward, check_grad, rand, run, t_

from singa_lite import ops
from singa_lite.errors import ArgumentError, ShapeError

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
F = torch.nn.functional

TORCH_MODES = {"nearest": "nearest", "linear": "bilinear", "cubic": "bicubic"}


def grid_points(shape, seed=0, spread=1.3):
    """Grid positions in [-spread, spread], kept off the pixel lattice (no kinks)."""
    g = np.random.default_rng(seed).uniform(-spread, spread, shape)
    return g + 0.0123


def torch_grid_sample(x, g, mode, padding, align):
    return F.grid_sample(torch.from_numpy(x), torch.from_numpy(g), TORCH_MODES[mode], padding, align).numpy()


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_2d(dev, mode, padding, align):
    x, g = rand(2, 3, 4, 5), grid_points((2, 3, 6, 2))
    fn = lambda a, b: ops.grid_sample(a, b, mode, padding, align)  # noqa: E731
    check_forward(
        fn, lambda a, b: torch_grid_sample(a, b, mode, padding, align), [x, g], dev, rtol=1e-8, atol=1e-8
    )
    x32, g32 = x.astype(np.float32), g.astype(np.float32)
    check_forward(fn, lambda a, b: torch_grid_sample(a, b, mode, padding, align), [x32, g32], dev, atol=1e-5)
    check_grad(fn, [x, g], dev, wrt=[0] if mode == "nearest" else [0, 1])


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_3d(dev, mode, padding):
    x, g = rand(1, 2, 3, 4, 3), grid_points((1, 2, 3, 2, 3), seed=1)
    fn = lambda a, b: ops.grid_sample(a, b, mode, padding, False)  # noqa: E731
    check_forward(
        fn, lambda a, b: torch_grid_sample(a, b, mode, padding, False), [x, g], dev, rtol=1e-8, atol=1e-8
    )
    check_grad(fn, [x, g], dev, wrt=[0] if mode == "nearest" else [0, 1])


def test_grid_sample_errors(dev):
    x = t_(np.zeros((1, 1, 2, 2), np.float32), dev)
    with pytest.raises(ShapeError, match="grid must be"):
        ops.grid_sample(x, t_(np.zeros((1, 2, 2, 3), np.float32), dev))
    with pytest.raises(ArgumentError, match="mode"):
        ops.grid_sample(x, t_(np.zeros((1, 2, 2, 2), np.float32), dev), "area")


@pytest.mark.parametrize("align", [False, True])
def test_affine_grid(dev, align):
    theta2, theta3 = rand(2, 2, 3), rand(2, 3, 4, seed=1)
    for theta, size in ((theta2, (2, 3, 4, 5)), (theta3, (2, 1, 3, 4, 2))):
        want = F.affine_grid(torch.from_numpy(theta), list(size), align).numpy()
        check_forward(lambda t: ops.affine_grid(t, size, align), lambda a: want, [theta], dev)  # noqa: B023
        check_grad(lambda t: ops.affine_grid(t, size, align), [theta], dev)  # noqa: B023
    with pytest.raises(ArgumentError, match="theta"):
        ops.affine_grid(t_(theta2, dev), (3, 1, 2, 2))


def test_max_unpool_matches_torch(dev):
    x = rand(2, 3, 6, 4)
    pooled, idx = F.max_pool2d(torch.from_numpy(x), 2, 2, return_indices=True)
    plane = 6 * 4  # torch's indices count within each (n, c) plane; ONNX's over the whole tensor
    flat = idx.numpy() + (np.arange(6) * plane).reshape(2, 3, 1, 1)
    want = F.max_unpool2d(pooled, idx, 2, 2).numpy()
    fn = lambda p, i: ops.max_unpool(p, i, (2, 2), (2, 2))  # noqa: E731
    check_forward(fn, lambda p, i: want, [pooled.numpy(), flat], dev)
    check_grad(fn, [pooled.numpy(), flat], dev, wrt=[0])
    big = lambda p, i: ops.max_unpool(p, i, (2, 2), (2, 2), output_shape=(2, 3, 7, 5))  # noqa: E731
    got = run(big, [pooled.numpy(), flat], dev)[0]
    np.testing.assert_array_equal(got[:, :, :6, :4], want)
    assert not got[:, :, 6:].any() and not got[:, :, :, 4:].any()
    with pytest.raises(ShapeError, match="outside"):
        run(fn, [pooled.numpy(), flat + 1000], dev)


@pytest.mark.parametrize(
    ("block", "dil", "pads", "strides"),
    [
        ((2, 2), (1, 1), (0, 0, 0, 0), (1, 1)),
        ((3, 2), (2, 1), (1, 0, 2, 1), (2, 1)),
        ((1, 3), (1, 2), (0, 1, 0, 1), (1, 2)),
    ],
)
def test_col2im_matches_fold(dev, block, dil, pads, strides):
    image = (5, 6)
    tp = (pads[0], pads[1])
    assert pads[:2] == pads[2:] or True
    # torch's fold pads symmetrically: compare there; asymmetric pads against the gradient of
    # unfold (col2im is its adjoint) through the gradient check below.
    sym = pads[:2] == pads[2:]
    blocks = [
        (image[d] + pads[d] + pads[2 + d] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(2)
    ]
    x = rand(2, 3 * block[0] * block[1], blocks[0] * blocks[1])
    fn = lambda a: ops.col2im(a, image, block, dil, pads, strides)  # noqa: E731
    if sym:
        want = F.fold(torch.from_numpy(x), image, block, dil, tp, strides).numpy()
        check_forward(fn, lambda a: want, [x], dev)
    check_grad(fn, [x], dev)


def test_col2im_5d_and_errors(dev):
    x = rand(1, 2 * 8, 3 * 2 * 2)
    y = run(lambda a: ops.col2im(a, (4, 3, 3), (2, 2, 2)), [x], dev)[0]
    assert y.shape == (1, 2, 4, 3, 3)
    np.testing.assert_allclose(y.sum(), x.sum())  # every block lands inside the image
    check_grad(lambda a: ops.col2im(a, (4, 3, 3), (2, 2, 2)), [x], dev)
    with pytest.raises(ShapeError, match="input must be"):
        run(lambda a: ops.col2im(a, (4, 3, 3), (2, 2, 2)), [rand(1, 16, 5)], dev)


def test_center_crop_pad(dev):
    x = rand(3, 6, 5)

    def ref(a, shape, axes):
        out = np.zeros([shape[axes.index(d)] if d in axes else s for d, s in enumerate(a.shape)], a.dtype)
        src, dst = [], []
        for d, s in enumerate(a.shape):
            o = out.shape[d]
            n = min(s, o)
            src.append(slice((s - n) // 2, (s - n) // 2 + n))
            dst.append(slice((o - n) // 2, (o - n) // 2 + n))
        out[tuple(dst)] = a[tuple(src)]
        return out

    for shape, axes in (((2, 9, 5), None), ((4, 3), (1, 2)), ((5,), (-2,))):
        ax = list(range(3)) if axes is None else [a % 3 for a in axes]
        check_forward(lambda t: ops.center_crop_pad(t, shape, axes), lambda a: ref(a, shape, ax), [x], dev)  # noqa: B023
        check_grad(lambda t: ops.center_crop_pad(t, shape, axes), [x], dev)  # noqa: B023


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_dtypes_are_kept(dev, dtype):
    x, g = rand(1, 2, 4, 5).astype(dtype), grid_points((1, 3, 2, 2)).astype(dtype)
    for mode in ("nearest", "linear", "cubic"):
        y = run(lambda a, b: ops.grid_sample(a, b, mode), [x, g], dev)[0]  # noqa: B023
        want = torch_grid_sample(x.astype(np.float64), g.astype(np.float64), mode, "zeros", False)
        assert y.dtype == dtype
        np.testing.assert_allclose(y, want, atol=2e-2 if dtype == np.float16 else 1e-5)
    cols = rand(1, 8, 12).astype(dtype)
    assert run(lambda a: ops.col2im(a, (4, 5), (2, 2)), [cols], dev)[0].dtype == dtype
    idx = np.array([[[[0, 3], [10, 15]], [[1, 2], [11, 13]]]]) + np.array([0, 16]).reshape(1, 2, 1, 1)
    assert (
        run(lambda a, i: ops.max_unpool(a, i, (2, 2), (2, 2)), [x[:, :, :2, :2], idx], dev)[0].dtype == dtype
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_grid_sample_non_finite_grid(dev):
    x = np.ones((1, 1, 3, 4), np.float32)
    g = np.array([[[[np.nan, 0.2], [np.inf, -np.inf]]]], np.float32)
    for mode in ("nearest", "linear", "cubic"):
        y = run(lambda a, b: ops.grid_sample(a, b, mode), [x, g], dev)[0]  # noqa: B023
        np.testing.assert_array_equal(y, 0)  # nothing on the image is read

"""ONNX's further activations, normalisations, losses and ``det``: NumPy and PyTorch references,
float64 gradient checks, dtypes and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from opcheck import _training, check_forward, check_grad, to_tensors

from singa_lite import autograd, ops, tensor
from singa_lite.errors import ArgumentError, DTypeError, ShapeError

FLOATS = st.sampled_from([np.float16, np.float32, np.float64])


def arrays(dtype=np.float64, min_dims=1, max_dims=3, lo=-3.0, hi=3.0):
    return hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, max_side=4),
        elements=st.floats(lo, hi),
    ).map(lambda a: a.astype(dtype))


def away_from(a, points, gap=1e-3):
    """``a`` moved off the kinks at ``points`` (the gradient check needs smooth ground)."""
    for p in points:
        a = np.where(np.abs(a - p) < gap, p + 2 * gap, a)
    return a


def torch_or_skip():
    return pytest.importorskip("torch", reason="PyTorch is not installed")


def T(a):
    """A tensor that keeps ``a``'s dtype (``from_numpy`` narrows float64 and int64)."""
    return tensor.Tensor(data=np.asarray(a), requires_grad=False)


def value_and_grad(fn, x, dev):
    """``fn(x)`` and the gradient of its sum with respect to ``x``, as NumPy arrays."""
    with _training():
        (t,) = to_tensors([x], dev)
        y = fn(t)
        grads = autograd.gradients(ops.reduce_sum(y))
    return tensor.to_numpy(y), tensor.to_numpy(grads[t])


# -- activations ----------------------------------------------------------------------------
@given(x=arrays(), dtype=FLOATS, alpha=st.sampled_from([0.5, 1.0, 2.0]))
def test_celu(dev, x, dtype, alpha):
    def ref(a):
        return (np.maximum(a, 0) + np.minimum(0, alpha * (np.exp(a / alpha) - 1))).astype(a.dtype)

    check_forward(lambda t: ops.celu(t, alpha), ref, [x.astype(dtype)], dev)
    check_grad(lambda t: ops.celu(t, alpha), [away_from(x, [0])], dev)


@given(x=arrays(), alpha=st.sampled_from([0.0, 1.0]))
def test_thresholded_relu(dev, x, alpha):
    check_forward(lambda t: ops.thresholded_relu(t, alpha), lambda a: np.where(a > alpha, a, 0), [x], dev)
    check_grad(lambda t: ops.thresholded_relu(t, alpha), [away_from(x, [alpha])], dev)


@given(x=arrays(), lambd=st.sampled_from([0.5, 1.5]), bias=st.sampled_from([0.0, 0.5]))
def test_shrink(dev, x, lambd, bias):
    def ref(a):
        return np.where(a > lambd, a - bias, np.where(a < -lambd, a + bias, 0)).astype(a.dtype)

    check_forward(lambda t: ops.shrink(t, lambd, bias), ref, [x], dev)
    check_grad(lambda t: ops.shrink(t, lambd, bias), [away_from(x, [lambd, -lambd])], dev)


def test_shrink_integers(dev):
    x = np.array([-3, -1, 0, 1, 3], np.int32)
    check_forward(lambda t: ops.shrink(t, 1.5, 1.0), lambda a: np.array([-2, 0, 0, 0, 2], np.int32), [x], dev)


@given(x=arrays(), dtype=FLOATS)
def test_swish_mish(dev, x, dtype):
    def swish(a, alpha=1.0):
        return a / (1 + np.exp(-alpha * a))

    check_forward(ops.swish, lambda a: swish(a).astype(a.dtype), [x.astype(dtype)], dev)
    check_forward(lambda t: ops.swish(t, 2.0), lambda a: swish(a, 2.0), [x], dev)
    check_forward(
        ops.mish, lambda a: (a * np.tanh(np.log1p(np.exp(a)))).astype(a.dtype), [x.astype(dtype)], dev
    )
    check_grad(ops.swish, [x], dev)
    check_grad(ops.mish, [x], dev)


@given(x=arrays(min_dims=2, max_dims=2))
def test_swiglu(dev, x):
    b = np.cos(x)
    check_forward(
        lambda a, v: ops.swiglu(a, v, 1.5), lambda a, v: a / (1 + np.exp(-1.5 * a)) * v, [x, b], dev
    )
    check_grad(lambda a, v: ops.swiglu(a, v), [x, b], dev)


def test_swiglu_needs_one_shape(dev):
    a, b = T(np.ones((2, 3))), T(np.ones((2, 1)))
    with pytest.raises(ShapeError):
        ops.swiglu(a, b)


def test_torch_activations(dev):
    torch = torch_or_skip()
    x = np.linspace(-4, 4, 17)
    cases = [
        (lambda t: ops.celu(t, 0.5), lambda t: torch.nn.functional.celu(t, 0.5)),  # exact in float32
        (ops.mish, torch.nn.functional.mish),
        (ops.swish, torch.nn.functional.silu),
        (lambda t: ops.shrink(t, 0.5, 0.5), lambda t: torch.nn.functional.softshrink(t, 0.5)),
        (lambda t: ops.shrink(t, 0.5, 0.0), lambda t: torch.nn.functional.hardshrink(t, 0.5)),
        (lambda t: ops.thresholded_relu(t, 1.0), lambda t: torch.nn.functional.threshold(t, 1.0, 0.0)),
    ]
    for ours, theirs in cases:
        y, g = value_and_grad(ours, x, dev)
        tx = torch.tensor(x, requires_grad=True)
        ty = theirs(tx)
        ty.sum().backward()
        np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g, tx.grad.numpy(), rtol=1e-12, atol=1e-12)


@given(x=arrays(min_dims=1, max_dims=3), axis=st.integers(-1, 0))
def test_hardmax(dev, x, axis):
    def ref(a):
        y = np.zeros_like(a)
        np.put_along_axis(y, np.expand_dims(a.argmax(axis=axis), axis), 1, axis=axis)
        return y

    check_forward(lambda t: ops.hardmax(t, axis), ref, [x], dev)


# -- normalisation ---------------------------------------------------------------------------
@given(x=arrays(min_dims=2), p=st.sampled_from([1, 2]), dtype=FLOATS)
def test_lp_normalization(dev, x, p, dtype):
    def ref(a):
        norm = (np.abs(a) ** p).sum(axis=-1, keepdims=True) ** (1 / p)
        return np.where(norm == 0, 0, a / np.where(norm == 0, 1, norm)).astype(a.dtype)

    check_forward(lambda t: ops.lp_normalization(t, -1, p), ref, [x.astype(dtype)], dev)
    smooth = away_from(x, [0], 0.05)
    check_grad(lambda t: ops.lp_normalization(t, 0, p), [smooth], dev)


def test_lp_normalization_torch():
    torch = torch_or_skip()
    x = np.random.default_rng(0).standard_normal((3, 4))
    for p, axis in ((1, 0), (2, 1)):
        want = torch.nn.functional.normalize(torch.tensor(x), p=p, dim=axis).numpy()
        np.testing.assert_allclose(ops.lp_normalization(T(x), axis, p).numpy(), want, rtol=1e-12)
    with pytest.raises(ArgumentError):
        ops.lp_normalization(T(x), 0, 3)


@given(x=arrays(min_dims=4, max_dims=4, lo=-2, hi=2))
def test_mean_variance_normalization(dev, x):
    def ref(a):
        m = a.mean(axis=(0, 2, 3), keepdims=True)
        return (a - m) / (np.sqrt(((a - m) ** 2).mean(axis=(0, 2, 3), keepdims=True)) + 1e-9)

    check_forward(ops.mean_variance_normalization, ref, [x], dev, rtol=1e-6, atol=1e-6)
    rng = np.random.default_rng(1)
    check_grad(ops.mean_variance_normalization, [rng.standard_normal((2, 2, 2, 2))], dev)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
def test_lp_pool_torch(dev, p):
    torch = torch_or_skip()
    x = np.random.default_rng(2).standard_normal((2, 3, 6, 5))
    got = ops.lp_pool(T(x), (2, 3), (2, 1), p=p).numpy()
    # torch's lp_pool sums x^p (not |x|^p) and works on |x| only for even p: compare on |x|.
    want = torch.nn.functional.lp_pool2d(torch.tensor(np.abs(x)), p, (2, 3), (2, 1)).numpy()
    np.testing.assert_allclose(ops.lp_pool(T(np.abs(x)), (2, 3), (2, 1), p=p).numpy(), want)
    assert got.shape == want.shape
    check_grad(lambda t: ops.lp_pool(t, 2, 1, p=p), [away_from(x[:1, :1, :3, :3], [0], 0.05)], dev)


def test_lp_pool_padding_and_ceil(dev):
    x = np.arange(1.0, 6.0).reshape(1, 1, 5)
    y = ops.lp_pool(T(x), 2, 2, (1, 1), ceil_mode=True, p=1).numpy()
    np.testing.assert_allclose(y, [[[1.0, 5.0, 9.0]]])
    y = ops.lp_pool(T(x), 2, 2, ceil_mode=True, p=1).numpy()
    np.testing.assert_allclose(y, [[[3.0, 7.0, 5.0]]])


# -- det ----------------------------------------------------------------------------------------
@given(shape=st.sampled_from([(1, 1), (3, 3), (2, 2, 2), (2, 1, 4, 4)]), seed=st.integers(0, 99))
def test_det(dev, shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape)
    check_forward(ops.det, np.linalg.det, [x], dev, rtol=1e-9, atol=1e-9)
    check_forward(ops.det, np.linalg.det, [x.astype(np.float32)], dev, rtol=1e-4, atol=1e-4)
    check_grad(ops.det, [x], dev)


def test_det_singular_gradient_and_torch(dev):
    # A singular matrix's gradient is its cofactor matrix (torch's det * inv^T gives 0 there).
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    check_grad(ops.det, [singular], dev)
    np.testing.assert_allclose(value_and_grad(ops.det, singular, dev)[1], [[4.0, -2.0], [-2.0, 1.0]])
    torch = torch_or_skip()
    x = np.random.default_rng(3).standard_normal((2, 3, 3))
    tx = torch.tensor(x, requires_grad=True)
    torch.linalg.det(tx).sum().backward()
    np.testing.assert_allclose(value_and_grad(ops.det, x, dev)[1], tx.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_det_errors():
    with pytest.raises(ShapeError):
        ops.det(T(np.ones((2, 3))))
    with pytest.raises(DTypeError):
        ops.det(T(np.ones((2, 2), np.int64)))


# -- losses -------------------------------------------------------------------------------------
LOSS_CASES = [
    dict(reduction="mean"),
    dict(reduction="sum"),
    dict(reduction="none"),
    dict(reduction="mean", weight=True),
    dict(reduction="mean", ignore_index=1),
    dict(reduction="mean", weight=True, ignore_index=-1),
    dict(reduction="none", weight=True, ignore_index=2),
    dict(reduction="sum", weight=True, ignore_index=4),
]


def _loss_inputs(spatial: tuple, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 4, *spatial))
    t = rng.integers(0, 4, (3, *spatial))
    t.reshape(-1)[0] = 1  # some labels are ignored in the ignore_index cases
    return x, t, rng.uniform(0.5, 2.0, 4)


@pytest.mark.parametrize("case", LOSS_CASES)
@pytest.mark.parametrize("spatial", [(), (2, 3)])
def test_losses_torch(dev, case, spatial):
    torch = torch_or_skip()
    x, t, w = _loss_inputs(spatial)
    weight = w if case.get("weight") else None
    ii = case.get("ignore_index")
    if ii == -1:
        t.reshape(-1)[1] = -1
    red = case["reduction"]
    tw = None if weight is None else torch.tensor(weight)
    targ = torch.tensor(t)
    tx = torch.tensor(x, requires_grad=True)
    torch_ii = -100 if ii is None else ii
    want_ce = torch.nn.functional.cross_entropy(tx, targ, tw, ignore_index=torch_ii, reduction=red)
    want_nll = torch.nn.functional.nll_loss(
        torch.tensor(x), targ, tw, ignore_index=torch_ii, reduction=red
    ).numpy()

    def sce(a, b, *ws):
        return ops.softmax_cross_entropy_loss(a, b, ws[0] if ws else None, red, ii)

    def nll(a, b, *ws):
        return ops.negative_log_likelihood_loss(a, b, ws[0] if ws else None, red, ii)

    args = [x, t] + ([weight] if weight is not None else [])
    tensors = [T(a) for a in args]
    loss, log_prob = sce(*tensors)
    np.testing.assert_allclose(loss.numpy(), want_ce.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(log_prob.numpy(), torch.log_softmax(torch.tensor(x), 1).numpy(), rtol=1e-10)
    np.testing.assert_allclose(nll(*tensors).numpy(), want_nll, rtol=1e-10, atol=1e-12)
    check_grad(lambda *ts: sce(*ts)[0], args, dev, wrt=[0])
    check_grad(nll, args, dev, wrt=[0])


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_losses_keep_dtype(dev, dtype):
    x, t, _ = _loss_inputs((2,))
    loss, log_prob = ops.softmax_cross_entropy_loss(T(x.astype(dtype)), T(t))
    assert loss.dtype == dtype and log_prob.dtype == dtype and loss.shape == ()


def test_loss_errors():
    x = T(np.zeros((2, 3)))
    with pytest.raises(DTypeError):
        ops.negative_log_likelihood_loss(x, T(np.zeros(2)))
    with pytest.raises(ShapeError):
        ops.negative_log_likelihood_loss(x, T(np.zeros(3, np.int64)))
    with pytest.raises(ShapeError):
        ops.negative_log_likelihood_loss(x, T(np.array([0, 3])))
    with pytest.raises(ShapeError):
        ops.negative_log_likelihood_loss(x, T(np.array([0, 1])), T(np.ones(2)))
    with pytest.raises(ArgumentError):
        ops.negative_log_likelihood_loss(x, T(np.array([0, 1])), reduction="max")


# -- stateful sequence ops ----------------------------------------------------------------------
def ref_causal_conv(x, w, b, past, act):
    k = w.shape[2]
    past = np.zeros((*x.shape[:2], k - 1)) if past is None else past
    padded = np.concatenate([past, x], axis=2)
    y = sum(padded[:, :, j : j + x.shape[2]] * w[None, :, 0, j : j + 1] for j in range(k))
    y = y + (0 if b is None else b[None, :, None])
    if act != "none":
        y = y / (1 + np.exp(-y))
    return y, padded[:, :, padded.shape[2] - (k - 1) :]


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("with_bias_past", [False, True])
@pytest.mark.parametrize("act", ["none", "silu"])
def test_causal_conv_with_state(dev, k, with_bias_past, act):
    rng = np.random.default_rng(k)
    x, w = rng.standard_normal((2, 3, 5)), rng.standard_normal((3, 1, k))
    extra = [rng.standard_normal(3), rng.standard_normal((2, 3, k - 1))] if with_bias_past else []

    def fn(*ts):
        return ops.causal_conv_with_state(*ts[:2], *(ts[2:] or (None, None)), activation=act)

    def ref(*arrays):
        return ref_causal_conv(*arrays[:2], *(arrays[2:] or (None, None)), act)

    check_forward(fn, ref, [x, w, *extra], dev)
    check_grad(lambda *ts: fn(*ts)[0], [x, w, *extra], dev)


def test_causal_conv_with_state_errors():
    with pytest.raises(ShapeError):
        ops.causal_conv_with_state(T(np.ones((1, 2, 4))), T(np.ones((3, 1, 2))))
    with pytest.raises(ShapeError):
        ops.causal_conv_with_state(T(np.ones((1, 2, 4))), T(np.ones((2, 1, 2))), None, T(np.ones((1, 2, 3))))
    with pytest.raises(ArgumentError):
        ops.causal_conv_with_state(T(np.ones((1, 2, 4))), T(np.ones((2, 1, 2))), activation="relu")


def ref_linear_attention(q, k, v, hq, hkv, past, decay, beta, rule):
    B, T_, _ = q.shape
    split = lambda a, h: a.reshape(B, T_, h, -1).transpose(0, 2, 1, 3)  # noqa: E731
    q4, k4, v4 = split(q, hq), split(k, hkv), split(v, hkv)
    dk, dv = k4.shape[3], v4.shape[3]
    s = np.zeros((B, hkv, dk, dv)) if past is None else past.copy()
    out = np.zeros((B, hq, T_, dv))
    for t in range(T_):
        if rule in ("gated", "gated_delta"):
            s = s * np.exp(split(decay, hkv)[:, :, t])[..., None]
        u = v4[:, :, t]
        if rule in ("delta", "gated_delta"):
            u = split(beta, beta.shape[2])[:, :, t] * (u - np.einsum("bhdm,bhd->bhm", s, k4[:, :, t]))
        s = s + k4[:, :, t, :, None] * u[:, :, None, :]
        out[:, :, t] = np.einsum("bhd,bhdm->bhm", q4[:, :, t], np.repeat(s, hq // hkv, axis=1)) / np.sqrt(dk)
    return out.transpose(0, 2, 1, 3).reshape(B, T_, -1), s


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2)])
def test_linear_attention(dev, rule, heads):
    hq, hkv = heads
    rng = np.random.default_rng(len(rule) + hq)
    B, T_, dk, dv = 1, 3, 2, 3
    q, k = rng.standard_normal((B, T_, hq * dk)) * 0.5, rng.standard_normal((B, T_, hkv * dk)) * 0.5
    v, past = rng.standard_normal((B, T_, hkv * dv)), rng.standard_normal((B, hkv, dk, dv)) * 0.3
    decay = -rng.uniform(0.1, 1.0, (B, T_, hkv * dk)) if "gated" in rule else None
    beta = rng.uniform(0.2, 0.9, (B, T_, 1)) if "delta" in rule else None
    extras = [a for a in (decay, beta) if a is not None]

    def fn(qt, kt, vt, pt, *rest):
        it = iter(rest)
        d = next(it) if decay is not None else None
        b = next(it) if beta is not None else None
        return ops.linear_attention(qt, kt, vt, hq, hkv, pt, d, b, None, rule)

    args = [q, k, v, past, *extras]
    check_forward(fn, lambda *a: ref_linear_attention(*a[:3], hq, hkv, a[3], decay, beta, rule), args, dev)
    check_grad(fn, args, dev)


def test_linear_attention_errors():
    x = T(np.ones((1, 2, 4)))
    with pytest.raises(ArgumentError):
        ops.linear_attention(x, x, x, 2, 2, update_rule="gated")  # no decay
    with pytest.raises(ArgumentError):
        ops.linear_attention(x, x, x, 3, 2, update_rule="linear")
    with pytest.raises(ShapeError):
        ops.linear_attention(x, x, x, 3, 3, update_rule="linear")  # 4 is not 3 heads


# -- deformable convolution, ROI pooling ---------------------------------------------------------
def _bilinear(img, y, x):
    """img (H, W) at (y, x), corners outside counting as 0."""
    H, W = img.shape
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    total = 0.0
    for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            if 0 <= yy < H and 0 <= xx < W:
                total += wy * wx * img[yy, xx]
    return total


def ref_deform_conv(x, w, offset, b, mask, stride, pads, dil, group, G):
    N, C = x.shape[:2]
    O, Cg, kh, kw = w.shape
    oh, ow = offset.shape[2:]
    off = offset.reshape(N, G, kh, kw, 2, oh, ow)
    m = np.ones((N, G, kh, kw, oh, ow)) if mask is None else mask.reshape(N, G, kh, kw, oh, ow)
    y = np.zeros((N, O, oh, ow))
    for n, o, i, j in np.ndindex(N, O, oh, ow):
        g = o // (O // group)
        for c in range(g * Cg, (g + 1) * Cg):
            og = c // (C // G)
            for a, bb in np.ndindex(kh, kw):
                py = i * stride - pads[0] + a * dil + off[n, og, a, bb, 0, i, j]
                px = j * stride - pads[1] + bb * dil + off[n, og, a, bb, 1, i, j]
                y[n, o, i, j] += w[o, c - g * Cg, a, bb] * m[n, og, a, bb, i, j] * _bilinear(x[n, c], py, px)
    return y + (0 if b is None else b[None, :, None, None])


@pytest.mark.parametrize(
    "stride, pads, dil, group, G, masked",
    [(1, (0, 0, 0, 0), 1, 1, 1, False), (2, (1, 1, 1, 1), 1, 2, 2, True), (1, (1, 0, 0, 1), 2, 1, 2, True)],
)
def test_deform_conv2d(dev, stride, pads, dil, group, G, masked):
    rng = np.random.default_rng(stride + group)
    N, C, H, W, O, k = 1, 4, 5, 5, 2, 2
    x, w = rng.standard_normal((N, C, H, W)), rng.standard_normal((O, C // group, k, k))
    oh = (H + pads[0] + pads[2] - (dil * (k - 1) + 1)) // stride + 1
    ow = (W + pads[1] + pads[3] - (dil * (k - 1) + 1)) // stride + 1
    # offsets away from whole numbers (the sampling weights have kinks there)
    offset = np.round(rng.uniform(-1.5, 1.5, (N, 2 * G * k * k, oh, ow)), 0) + rng.uniform(
        0.2, 0.8, (N, 2 * G * k * k, oh, ow)
    )
    b = rng.standard_normal(O)
    mask = rng.uniform(0.5, 1.0, (N, G * k * k, oh, ow)) if masked else None
    args = [x, w, offset, b] + ([mask] if masked else [])

    def fn(*ts):
        return ops.deform_conv2d(*ts[:4], ts[4] if masked else None, stride, pads, dil, group, G)

    check_forward(fn, lambda *a: ref_deform_conv(*a[:4], mask, stride, pads, dil, group, G), args, dev)
    check_grad(fn, args, dev)


def test_deform_conv2d_zero_offset_is_conv(dev):
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((4, 3, 3, 3))
    y = ops.deform_conv2d(T(x), T(w), T(np.zeros((2, 18, 4, 3))), None, None, 1, 0).numpy()
    np.testing.assert_allclose(y, ops.conv2d(T(x), T(w)).numpy(), rtol=1e-10, atol=1e-10)
    with pytest.raises(ShapeError):
        ops.deform_conv2d(T(x), T(w), T(np.zeros((2, 18, 4, 4))))


def ref_max_roi_pool(x, rois, ph, pw, scale):
    out = np.zeros((len(rois), x.shape[1], ph, pw))
    H, W = x.shape[2:]
    for r, (bi, x1, y1, x2, y2) in enumerate(rois):
        x1, y1, x2, y2 = (int(np.round(v * scale)) for v in (x1, y1, x2, y2))
        rh, rw = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        for i, j in np.ndindex(ph, pw):
            hs = min(max(int(np.floor(i * rh / ph)) + y1, 0), H)
            he = min(max(int(np.ceil((i + 1) * rh / ph)) + y1, 0), H)
            ws = min(max(int(np.floor(j * rw / pw)) + x1, 0), W)
            we = min(max(int(np.ceil((j + 1) * rw / pw)) + x1, 0), W)
            if he > hs and we > ws:
                out[r, :, i, j] = x[int(bi), :, hs:he, ws:we].max(axis=(1, 2))
    return out


def test_max_roi_pool(dev):
    rng = np.random.default_rng(3)
    x = rng.permutation(2 * 3 * 8 * 9).reshape(2, 3, 8, 9).astype(np.float64)  # no ties
    rois = np.array([[0, 0, 0, 8, 7], [1, 2, 1, 5, 6], [1, 7, 6, 20, 20], [0, 3, 3, 3, 3]], np.float64)
    check_forward(
        lambda a, r: ops.max_roi_pool(a, r, (2, 3), 0.9),
        lambda a, r: ref_max_roi_pool(a, r, 2, 3, 0.9),
        [x, rois],
        dev,
    )
    check_grad(lambda a, r: ops.max_roi_pool(a, r, (2, 3)), [x / 10, rois], dev, wrt=[0])
    with pytest.raises(ShapeError):
        ops.max_roi_pool(T(x), T(np.array([[2.0, 0, 0, 1, 1]])), (1, 1))


def test_max_roi_pool_onnxruntime():
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    from onnx import TensorProto, helper

    from singa_lite.sonnx import SingaBackend

    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 10, 12)).astype(np.float32)
    rois = np.array([[0, 1, 1, 9, 7], [0, 0, 2, 11, 9], [0, 4, 4, 4, 5]], np.float32)
    node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[3, 2], spatial_scale=0.8)
    g = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, rois.shape),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (3, 2, 3, 2))],
    )
    g.node[0].input[1] = "r"
    # onnxruntime has MaxRoiPool-1 only (opset 22 changed nothing but the types)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x, "r": rois})[0]
    np.testing.assert_allclose(SingaBackend.prepare(model).run([x, rois])[0], want)

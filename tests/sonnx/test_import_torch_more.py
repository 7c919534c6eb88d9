"""More architectures exported from PyTorch (legacy TorchScript exporter) through ``prepare``:
a UNet, an EfficientNet/MobileNetV3 block, normalisations, pixel shuffles, padding modes,
recurrent stacks, causal attention and an op-heavy head, each run at batch sizes 1 and 3 and
checked against onnxruntime within 1e-4 relative."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

from singa_lite.sonnx import prepare

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
torch = pytest.importorskip("torch", reason="PyTorch is not installed")
nn = torch.nn
F = torch.nn.functional


def _export(model: nn.Module, example: torch.Tensor, opset: int) -> bytes:
    """Export with a dynamic batch dimension (input ``x``, output ``y``). Constant folding is
    off so that BatchNormalization stays a node instead of being folded into the Conv."""
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model.eval(), (example,), f, opset_version=opset, dynamo=False, do_constant_folding=False,
            input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "n"}, "y": {0: "n"}},
        )  # fmt: skip
    return f.getvalue()


def _check(model: nn.Module, shape: tuple[int, ...], opset: int = 17, ints: int = 0) -> None:
    """Export ``model`` once; compare singa_lite with onnxruntime at batch sizes 1 and 3.

    ``ints`` > 0 feeds int64 tokens in ``[0, ints)`` instead of float32 noise."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)

    def sample(n: int) -> np.ndarray:
        if ints:
            return rng.integers(0, ints, (n, *shape)).astype(np.int64)
        return rng.standard_normal((n, *shape)).astype(np.float32)

    data = _export(model, torch.from_numpy(sample(2)), opset)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rep = prepare(data)
    for n in (1, 3):
        x = sample(n)
        expected = sess.run(None, {"x": x})
        got = rep.run([x])
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            g = g.numpy()
            assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, e.shape, g.dtype, e.dtype)
            tol = 1e-5 * max(1.0, float(np.abs(e).max())) if e.size else 0.0
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=tol)


def _randomize_norms(model: nn.Module) -> nn.Module:
    """Non-trivial affine parameters and running statistics for every normalisation layer."""
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm, nn.InstanceNorm2d, nn.LayerNorm)):
            if getattr(m, "weight", None) is not None:
                m.weight.data.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.data.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
            if getattr(m, "running_mean", None) is not None:
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
    return model


# -- UNet --------------------------------------------------------------------------------------
def _double_conv(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
    )  # fmt: skip


class UNet(nn.Module):
    """Two levels down, a ConvTranspose and an interpolation up, concat skip connections."""

    def __init__(self, up_mode: str, align_corners: bool | None) -> None:
        super().__init__()
        self.up_mode, self.align = up_mode, align_corners
        self.d1, self.d2, self.mid = _double_conv(3, 4), _double_conv(4, 8), _double_conv(8, 8)
        self.up2 = nn.ConvTranspose2d(8, 8, 2, stride=2)
        self.u2, self.u1 = _double_conv(16, 4), _double_conv(8, 4)
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s1 = self.d1(x)
        s2 = self.d2(F.max_pool2d(s1, 2))
        m = self.mid(F.max_pool2d(s2, 2))
        y = self.u2(torch.cat([self.up2(m), s2], 1))
        y = F.interpolate(y, scale_factor=2, mode=self.up_mode, align_corners=self.align)
        y = self.head(self.u1(torch.cat([y, s1], 1)))
        # Non-integer scales and an odd target size: Resize's coordinate rounding.
        up = F.interpolate(y, scale_factor=1.5, mode=self.up_mode, align_corners=self.align)
        down = F.interpolate(up, size=(5, 7), mode=self.up_mode, align_corners=self.align)
        return torch.cat([down, y[..., :5, :7]], 1)


@pytest.mark.parametrize(
    "up_mode,align", [("nearest", None), ("bilinear", False), ("bilinear", True)],
    ids=["nearest", "bilinear", "bilinear_aligned"],
)  # fmt: skip
@pytest.mark.parametrize("opset", [11, 17])
def test_unet(up_mode: str, align: bool | None, opset: int) -> None:
    torch.manual_seed(0)
    _check(_randomize_norms(UNet(up_mode, align)), (3, 8, 12), opset)


# -- EfficientNet / MobileNetV3 ----------------------------------------------------------------
class SqueezeExcite(nn.Module):
    def __init__(self, c: int, gate: nn.Module) -> None:
        super().__init__()
        self.fc1, self.fc2, self.gate = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1), gate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(F.silu(self.fc1(s))))


class MBConv(nn.Module):
    """Expand 1x1 -> depthwise kxk -> squeeze-and-excitation -> project 1x1, with a residual."""

    def __init__(self, c: int, act: nn.Module, gate: nn.Module, k: int = 3) -> None:
        super().__init__()
        mid = 4 * c
        self.body = nn.Sequential(
            nn.Conv2d(c, mid, 1, bias=False), nn.BatchNorm2d(mid), act,
            nn.Conv2d(mid, mid, k, 1, k // 2, groups=mid, bias=False), nn.BatchNorm2d(mid), act,
            SqueezeExcite(mid, gate), nn.Conv2d(mid, c, 1, bias=False), nn.BatchNorm2d(c),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def efficientnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, 2, 1), nn.SiLU(), MBConv(8, nn.SiLU(), nn.Sigmoid(), 5),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    )  # fmt: skip


def mobilenet_v3() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, 2, 1), nn.Hardswish(), MBConv(8, nn.Hardswish(), nn.Hardsigmoid()),
        MBConv(8, nn.ReLU(), nn.Hardsigmoid()), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, 4),
    )  # fmt: skip


@pytest.mark.parametrize("build", [efficientnet, mobilenet_v3], ids=["efficientnet", "mobilenet_v3"])
@pytest.mark.parametrize("opset", [13, 17, 20])
def test_mbconv_networks(build: object, opset: int) -> None:
    torch.manual_seed(0)
    _check(_randomize_norms(build()), (3, 16, 16), opset)  # type: ignore[operator]


# -- normalisations ----------------------------------------------------------------------------
class Norms(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.gn = nn.GroupNorm(2, 8)
        self.inorm = nn.InstanceNorm2d(8, affine=True)
        self.inorm_plain = nn.InstanceNorm2d(8)
        self.ln = nn.LayerNorm([5, 6])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.gn(self.conv(x))
        return self.ln(self.inorm_plain(self.inorm(y)) + y)


@pytest.mark.parametrize("opset", [13, 17, 20])
def test_group_instance_layer_norm(opset: int) -> None:
    torch.manual_seed(0)
    _check(_randomize_norms(Norms()), (4, 5, 6), opset)


# -- pixel shuffles, padding modes, channel shuffle --------------------------------------------
class Rearrange(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 16, 3, padding=1, padding_mode="reflect")
        self.conv2 = nn.Conv2d(16, 8, 3, padding=1, padding_mode="replicate")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)  # (n, 16, 6, 8)
        y = F.pixel_shuffle(y, 2)  # (n, 4, 12, 16)
        y = F.pixel_unshuffle(F.pad(y, (1, 1, 2, 2), mode="reflect"), 2)  # (n, 16, 8, 9)
        n, c, h, w = y.shape
        y = y.view(n, 4, c // 4, h, w).transpose(1, 2).reshape(n, c, h, w)  # channel shuffle
        y = self.conv2(y)
        return F.pad(y, (2, 0, 0, 1), mode="replicate") + F.pad(y, (1, 1, 1, 0), value=0.5)


@pytest.mark.parametrize("opset", [11, 13, 17, 20])
def test_pixel_shuffle_padding_channel_shuffle(opset: int) -> None:
    _check(Rearrange(), (4, 6, 8), opset)


# -- recurrent stacks --------------------------------------------------------------------------
class Recurrent(nn.Module):
    def __init__(self, cell: type) -> None:
        super().__init__()
        self.rnn = cell(5, 6, num_layers=2, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        return self.fc(y).log_softmax(-1)


@pytest.mark.parametrize("cell", [nn.GRU, nn.LSTM, nn.RNN], ids=["gru", "lstm", "rnn"])
@pytest.mark.parametrize("opset", [13, 17])
def test_bidirectional_two_layer_rnn(cell: type, opset: int) -> None:
    _check(Recurrent(cell), (7, 5), opset)


# -- causal attention --------------------------------------------------------------------------
class CausalAttention(nn.Module):
    """Multi-query attention: one key/value head broadcast over the query heads by MatMul, a
    causal mask built in the graph (``triu`` -> Trilu, or ``arange`` comparisons -> Range,
    Greater) and a key padding mask (tokens == 0 -> Equal, Expand)."""

    def __init__(self, mask: str, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.mask, self.heads, self.hd = mask, heads, d // heads
        self.emb = nn.Embedding(30, d)
        self.q, self.kv = nn.Linear(d, d), nn.Linear(d, 2 * self.hd)
        self.out = nn.Linear(d, d)
        self.drop = nn.Dropout(0.1)
        self.ln = nn.LayerNorm(d)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens)
        n, t, d = x.shape
        q = self.q(x).reshape(n, t, self.heads, self.hd).transpose(1, 2)  # (n, h, t, hd)
        k, v = self.kv(x).unsqueeze(1).chunk(2, -1)  # (n, 1, t, hd): shared by the heads
        scores = torch.einsum("bhqd,bxkd->bhqk", q, k) / self.hd**0.5
        if self.mask == "triu":
            causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        else:
            pos = torch.arange(t)
            causal = pos[None, :] > pos[:, None]
        scores = scores.masked_fill(causal, float("-inf"))
        pad = (tokens == 0)[:, None, None, :].expand(n, self.heads, t, t)
        scores = scores.masked_fill(pad, -1e9)  # finite: a row may be all padding
        attn = self.drop(scores.softmax(-1))
        y = (attn @ v).transpose(1, 2).reshape(n, t, d)
        return self.ln(x + self.out(y)) @ self.emb.weight.T


@pytest.mark.parametrize("mask", ["triu", "arange"])
@pytest.mark.parametrize("opset", [14, 17, 20])
def test_causal_attention(mask: str, opset: int) -> None:
    """Trilu was unsupported: every ``torch.triu``/``tril`` mask failed to import."""
    _check(CausalAttention(mask), (9,), opset, ints=30)


# -- a head full of indexing and elementwise ops -----------------------------------------------
class OpHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.register_buffer("pick", torch.tensor([3, 0, 5]))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.fc(x)  # (n, 4, 8)
        top_v, top_i = h.topk(3, dim=-1)
        arg = h.argmax(-1)
        gathered = torch.gather(h, -1, top_i.flip(-1))
        sel = h.index_select(-1, self.pick)
        cs = h.cumsum(1)
        c = torch.clamp(h, -0.5, 0.7)
        w = torch.where(h > 0, h.abs().sqrt(), h.pow(2) + torch.erf(h))
        y = F.log_softmax(c + w, -1) + cs.amax(1, keepdim=True) - h.amin(-1, keepdim=True)
        z = F.gelu(sel, approximate="tanh") * F.softplus(gathered) + F.leaky_relu(top_v, 0.1)
        return y, z, arg, top_i, F.elu(h).mean(-1).norm(dim=-1)


@pytest.mark.parametrize("opset", [13, 17, 20])
def test_op_head(opset: int) -> None:
    _check(OpHead(), (4, 6), opset)


# -- gradients through the handlers added for these models -----------------------------------
class _Biased(nn.Module):
    """``fn(x + b)``: ``b`` becomes a SONNXModel param, so its gradient crosses ``fn``."""

    def __init__(self, fn: object) -> None:
        super().__init__()
        self.b, self.fn = nn.Parameter(torch.randn(8)), fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x + self.b)  # type: ignore[operator]


@pytest.mark.parametrize(
    "fn",
    [lambda h: h.cumsum(1), lambda h: h.flip(1).cumsum(1).flip(1), lambda h: h.topk(3, -1)[0],
     lambda h: h.topk(2, 1, largest=False)[0], lambda h: torch.triu(h, 1), lambda h: torch.tril(h)],
    ids=["cumsum", "cumsum_reversed", "topk", "topk_smallest", "triu", "tril"],
)  # fmt: skip
def test_new_handlers_pass_gradients(fn: object) -> None:
    """CumSum, TopK and Trilu go through differentiable ops: a SONNXModel trains through them."""
    from singa_lite import autograd, ops, sonnx, tensor

    torch.manual_seed(0)
    model, x = _Biased(fn), torch.randn(2, 4, 8)
    imported = sonnx.SONNXModel(_export(model, x, 17))
    weight = torch.randn(model(x).shape)
    (model(x) * weight).sum().backward()
    old = autograd.training
    autograd.training = True
    try:
        (y,) = imported.forward(tensor.Tensor(data=x.numpy(), requires_grad=False))
        grads = autograd.gradients(
            ops.reduce_sum(ops.mul(y, tensor.Tensor(data=weight.numpy(), requires_grad=False)))
        )
    finally:
        autograd.training = old
    (b,) = imported.get_params().values()
    np.testing.assert_allclose(grads[b].numpy(), model.b.grad.numpy(), rtol=1e-4, atol=1e-5)

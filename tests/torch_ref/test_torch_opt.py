"""Optimizers and schedules against torch.optim: 20 steps on the same params and gradients."""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite import opt, tensor

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
lr_sched = torch.optim.lr_scheduler

SHAPES = {"fc.W": (3, 4), "fc.b": (5,)}
STEPS = 20

# name: (our optimizer, torch optimizer + scheduler for a list of torch params)
CASES = {
    "sgd": (lambda: opt.SGD(0.1), lambda ps: (torch.optim.SGD(ps, lr=0.1), None)),
    "sgd_wd": (
        lambda: opt.SGD(0.1, weight_decay=0.01),
        lambda ps: (torch.optim.SGD(ps, lr=0.1, weight_decay=0.01), None),
    ),
    "sgd_momentum": (
        lambda: opt.SGD(0.05, momentum=0.9),
        lambda ps: (torch.optim.SGD(ps, lr=0.05, momentum=0.9), None),
    ),
    "sgd_dampening": (
        lambda: opt.SGD(0.05, momentum=0.9, dampening=0.3, weight_decay=1e-3),
        lambda ps: (torch.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.3, weight_decay=1e-3), None),
    ),
    "sgd_nesterov": (
        lambda: opt.SGD(0.05, momentum=0.9, weight_decay=0.01, nesterov=True),
        lambda ps: (torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=0.01, nesterov=True), None),
    ),
    "sgd_steplr": (
        lambda: opt.SGD(opt.StepDecay(0.1, step_size=5, gamma=0.5), momentum=0.9),
        lambda ps: _with(torch.optim.SGD(ps, lr=0.1, momentum=0.9), lr_sched.StepLR, step_size=5, gamma=0.5),
    ),
    "adam": (lambda: opt.Adam(0.01), lambda ps: (torch.optim.Adam(ps, lr=0.01), None)),
    "adam_wd": (
        lambda: opt.Adam(0.01, beta_1=0.8, beta_2=0.95, epsilon=1e-6, weight_decay=0.1),
        lambda ps: (torch.optim.Adam(ps, lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1), None),
    ),
    "adam_exponentiallr": (
        lambda: opt.Adam(opt.ExponentialDecay(0.01, decay_steps=1, decay_rate=0.9)),
        lambda ps: _with(torch.optim.Adam(ps, lr=0.01), lr_sched.ExponentialLR, gamma=0.9),
    ),
    "adamw": (
        lambda: opt.AdamW(0.01, weight_decay=0.1),
        lambda ps: (torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1), None),
    ),
    "adamw_cosine": (
        lambda: opt.AdamW(opt.CosineDecay(0.01, decay_steps=STEPS, alpha=0.1)),
        lambda ps: _with(
            torch.optim.AdamW(ps, lr=0.01), lr_sched.CosineAnnealingLR, T_max=STEPS, eta_min=1e-3
        ),
    ),
    "adagrad": (lambda: opt.AdaGrad(0.1), lambda ps: (torch.optim.Adagrad(ps, lr=0.1), None)),
    "adagrad_wd": (
        lambda: opt.AdaGrad(0.1, epsilon=1e-6, weight_decay=0.05),
        lambda ps: (torch.optim.Adagrad(ps, lr=0.1, eps=1e-6, weight_decay=0.05), None),
    ),
    "rmsprop": (lambda: opt.RMSProp(0.01), lambda ps: (torch.optim.RMSprop(ps, lr=0.01), None)),
    "rmsprop_wd": (
        lambda: opt.RMSProp(0.01, rho=0.9, epsilon=1e-6, weight_decay=0.05),
        lambda ps: (torch.optim.RMSprop(ps, lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.05), None),
    ),
}


def _with(optimizer, scheduler, **kw):
    return optimizer, scheduler(optimizer, **kw)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_torch(dev, case, dtype):
    ours_factory, torch_factory = CASES[case]
    rng = np.random.default_rng(0)
    init = {n: rng.standard_normal(s).astype(dtype) for n, s in SHAPES.items()}
    grads = [{n: rng.standard_normal(s).astype(dtype) for n, s in SHAPES.items()} for _ in range(STEPS)]

    ours = ours_factory()
    params = {n: tensor.Tensor(data=a, device=dev, requires_grad=False) for n, a in init.items()}
    tparams = {n: torch.tensor(a, requires_grad=True) for n, a in init.items()}
    topt, tsched = torch_factory(list(tparams.values()))
    for gs in grads:
        for n, p in params.items():
            ours.apply(n, p, tensor.Tensor(data=gs[n], device=dev, requires_grad=False))
            tparams[n].grad = torch.from_numpy(gs[n])
        ours.step()
        topt.step()
        if tsched is not None:
            tsched.step()

    rtol = 1e-6 if dtype == np.float32 else 1e-12
    for n, p in params.items():
        got, want = tensor.to_numpy(p), tparams[n].detach().numpy()
        assert got.dtype == dtype
        # atol covers entries that pass near 0, where any rounding difference is a large ratio.
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max(), err_msg=n)


@pytest.mark.parametrize(
    ("ours", "make_torch"),
    [
        (opt.StepDecay(0.3, step_size=7, gamma=0.2), lambda o: lr_sched.StepLR(o, step_size=7, gamma=0.2)),
        (opt.ExponentialDecay(0.3, 1, 0.93), lambda o: lr_sched.ExponentialLR(o, gamma=0.93)),
        (
            opt.CosineDecay(0.3, 50, alpha=0.05),
            lambda o: lr_sched.CosineAnnealingLR(o, T_max=50, eta_min=0.015),
        ),
        (opt.CosineDecay(0.3, 50), lambda o: lr_sched.CosineAnnealingLR(o, T_max=50)),
    ],
    ids=["StepLR", "ExponentialLR", "CosineAnnealingLR", "CosineAnnealingLR_eta0"],
)
def test_schedule_matches_torch(ours, make_torch):
    topt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.3)
    sched = make_torch(topt)
    for step in range(50):
        want = topt.param_groups[0]["lr"]
        assert ours.value(step) == pytest.approx(want, rel=1e-12, abs=1e-15), step
        topt.step()
        sched.step()

"""Every optimizer and schedule trains the same model from the same weights as ``torch.optim``.

test_torch_opt.py feeds both frameworks a fixed sequence of gradients; here the gradients come
from the models themselves (an MLP, and a CNN with batch norm), so each step's update feeds the
next step's forward pass, as in real training. For every optimizer x schedule, 20 steps of
softmax cross-entropy on the same batches must give the same loss at every step and the same
parameters (and batch-norm running statistics) at the end.

singa_lite's RMSProp has no ``momentum``/``centered`` options (torch's RMSprop does), so
those are not covered here; every option singa_lite does have maps to a torch option.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest

from singa_lite import layer, opt, tensor

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
nn = torch.nn

from test_torch_training import Net  # noqa: E402  (the same layer stack + cross-entropy model)

lr_sched = torch.optim.lr_scheduler

STEPS = 20
CLASSES = 3
# The frameworks differ only in rounding (summation order and the like). In float64 the worst
# case seen is 2.4e-14 relative (a Linear weight after 20 RMSProp steps), so 1e-11 leaves a wide
# margin while still catching any difference in the update formulas.
RTOL = {np.float32: 1e-4, np.float64: 1e-11}

# name: (base learning rate, our optimizer for a learning rate or schedule, torch optimizer for
# params and a float lr). Each base rate makes 20 steps of progress without diverging.
OPTIMIZERS: dict[str, tuple[float, Callable, Callable]] = {
    "sgd": (0.05, lambda lr: opt.SGD(lr), lambda ps, lr: torch.optim.SGD(ps, lr=lr)),
    "sgd_nesterov_wd": (
        0.05,
        lambda lr: opt.SGD(lr, momentum=0.9, weight_decay=1e-3, nesterov=True),
        lambda ps, lr: torch.optim.SGD(ps, lr=lr, momentum=0.9, weight_decay=1e-3, nesterov=True),
    ),
    "sgd_dampening": (
        0.05,
        lambda lr: opt.SGD(lr, momentum=0.8, dampening=0.3),
        lambda ps, lr: torch.optim.SGD(ps, lr=lr, momentum=0.8, dampening=0.3),
    ),
    "adam": (0.01, lambda lr: opt.Adam(lr), lambda ps, lr: torch.optim.Adam(ps, lr=lr)),
    "adam_wd": (
        0.01,
        lambda lr: opt.Adam(lr, beta_1=0.8, beta_2=0.95, epsilon=1e-6, weight_decay=0.05),
        lambda ps, lr: torch.optim.Adam(ps, lr=lr, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.05),
    ),
    "adamw": (
        0.01,
        lambda lr: opt.AdamW(lr, weight_decay=0.1),
        lambda ps, lr: torch.optim.AdamW(ps, lr=lr, weight_decay=0.1),
    ),
    "adagrad_wd": (
        0.05,
        lambda lr: opt.AdaGrad(lr, epsilon=1e-8, weight_decay=1e-3),
        lambda ps, lr: torch.optim.Adagrad(ps, lr=lr, eps=1e-8, weight_decay=1e-3),
    ),
    "rmsprop_wd": (
        0.005,
        lambda lr: opt.RMSProp(lr, rho=0.9, epsilon=1e-6, weight_decay=1e-3),
        lambda ps, lr: torch.optim.RMSprop(ps, lr=lr, alpha=0.9, eps=1e-6, weight_decay=1e-3),
    ),
}

# name: (our schedule for a base lr, torch scheduler for an optimizer and the base lr)
SCHEDULES: dict[str, tuple[Callable, Callable]] = {
    "constant": (lambda lr: lr, lambda o, lr: None),
    "StepLR": (
        lambda lr: opt.StepDecay(lr, step_size=6, gamma=0.5),
        lambda o, lr: lr_sched.StepLR(o, step_size=6, gamma=0.5),
    ),
    "ExponentialLR": (
        lambda lr: opt.ExponentialDecay(lr, decay_steps=1, decay_rate=0.9),
        lambda o, lr: lr_sched.ExponentialLR(o, gamma=0.9),
    ),
    "CosineAnnealingLR": (
        lambda lr: opt.CosineDecay(lr, decay_steps=STEPS, alpha=0.1),
        lambda o, lr: lr_sched.CosineAnnealingLR(o, T_max=STEPS, eta_min=0.1 * lr),
    ),
}


def _mlp():
    ours = [layer.Linear(16), layer.ReLU(), layer.Linear(8), layer.ReLU(), layer.Linear(CLASSES)]
    theirs = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, CLASSES))
    return ours, theirs, (16, 12)


def _cnn():
    ours = [
        # No conv bias before batch norm: its true gradient is 0, so the gradient is rounding
        # noise, which Adam and AdaGrad scale up to full-size steps that differ between the
        # frameworks (a real model drops it for the same reason).
        layer.Conv2d(4, 3, padding=1, bias=False),
        layer.BatchNorm2d(),  # SINGA's momentum 0.9 is torch's default momentum 0.1
        layer.ReLU(),
        layer.MaxPool2d(2),
        layer.Flatten(),
        layer.Linear(CLASSES),
    ]
    theirs = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, bias=False),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, CLASSES),
    )
    return ours, theirs, (8, 1, 8, 8)


def _pairs(theirs) -> Iterator[tuple[str, object, bool]]:
    """``(our state name, torch tensor, transposed?)`` for every param and batch-norm statistic.

    torch's Linear weight is (out, in); singa_lite's is (in, out).
    """
    for i, mod in enumerate(theirs):
        if isinstance(mod, (nn.Linear, nn.Conv2d)):
            yield f"{i}.W", mod.weight, isinstance(mod, nn.Linear)
            if mod.bias is not None:
                yield f"{i}.b", mod.bias, False
        elif isinstance(mod, nn.BatchNorm2d):
            yield f"{i}.scale", mod.weight, False
            yield f"{i}.bias", mod.bias, False
            yield f"{i}.running_mean", mod.running_mean, False
            yield f"{i}.running_var", mod.running_var, False


def _torch_array(t, transposed: bool) -> np.ndarray:
    a = t.detach().numpy()
    return a.T if transposed else a


def _batches(shape: tuple, dtype) -> list[tuple[np.ndarray, np.ndarray]]:
    """20 batches cycling through 4 fixed ones, so the nets can fit them and the loss falls."""
    rng = np.random.default_rng(0)
    data = [
        (rng.standard_normal(shape).astype(dtype), rng.integers(0, CLASSES, shape[0]).astype(np.int32))
        for _ in range(4)
    ]
    return [data[i % 4] for i in range(STEPS)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("make", [_mlp, _cnn], ids=["mlp", "cnn"])
def test_training_matches_torch_optim(make, optimizer, schedule, dtype):
    torch.manual_seed(0)
    body, ref, shape = make()
    ref = ref.to(torch.float64 if dtype == np.float64 else torch.float32)
    lr, ours_opt, torch_opt = OPTIMIZERS[optimizer]
    ours_sched, torch_sched = SCHEDULES[schedule]

    net = Net(body)
    net.set_optimizer(ours_opt(ours_sched(lr)))
    tx = tensor.Tensor(shape, dtype=tensor.as_dtype(dtype))
    ty = tensor.Tensor((shape[0],), dtype=tensor.int32)
    # Graph mode runs step 0 eagerly while recording it and replays the record for steps 1-19
    # (the replay calls the optimizer again), so both paths are covered, and so is a replayed
    # step reading the schedule's current learning rate rather than the recorded one.
    net.compile([tx], is_train=True, use_graph=True)
    states = net.get_states()
    for name, t, transposed in _pairs(ref):
        states[name].copy_from_numpy(np.ascontiguousarray(_torch_array(t, transposed)))
    t_opt = torch_opt(ref.parameters(), lr)
    t_sched = torch_sched(t_opt, lr)

    rtol = RTOL[dtype]
    losses = []
    for step, (xb, yb) in enumerate(_batches(shape, dtype)):
        tx.copy_from_numpy(xb)
        ty.copy_from_numpy(yb)
        _, loss = net(tx, ty)
        t_opt.zero_grad()
        t_loss = nn.functional.cross_entropy(ref(torch.from_numpy(xb)), torch.from_numpy(yb).long())
        t_loss.backward()
        t_opt.step()
        if t_sched is not None:
            t_sched.step()
        ours = tensor.to_numpy(loss)[0]
        np.testing.assert_allclose(ours, t_loss.item(), rtol=rtol, err_msg=f"loss at step {step}")
        losses.append(ours)
    assert np.mean(losses[-4:]) < np.mean(losses[:4])  # it trained: the comparison is not vacuous

    states = net.get_states()
    for name, t, transposed in _pairs(ref):
        got, want = tensor.to_numpy(states[name]), _torch_array(t, transposed)
        assert got.dtype == dtype, name
        # Relative to the tensor's scale: an entry that passes near 0 makes any rounding
        # difference a large ratio of itself.
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max(), err_msg=name)

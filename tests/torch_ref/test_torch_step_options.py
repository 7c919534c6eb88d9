"""The optimizers' step options against what PyTorch users write by hand: gradient accumulation
(``loss / k`` backward k times, then step), ``torch.nn.utils.clip_grad_norm_`` and parameter
groups with ``weight_decay=0`` for biases and norm parameters. Same model, weights and batches;
the parameters must agree after every update (float64 within 1e-11, float32 within 1e-4).
"""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite import opt, tensor

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
nn = torch.nn

from test_torch_opt_models import CLASSES, _cnn, _mlp, _pairs, _torch_array  # noqa: E402
from test_torch_training import Net  # noqa: E402

UPDATES = 5
RTOL = {np.float32: 1e-4, np.float64: 1e-11}

# name: (ours for a no_decay rule and the step options, torch for two param groups)
OPTIMIZERS = {
    "sgd": (
        lambda **o: opt.SGD(opt.ExponentialDecay(0.05, 1, 0.9), momentum=0.9, weight_decay=0.05, **o),
        lambda groups: torch.optim.SGD(groups, lr=0.05, momentum=0.9, weight_decay=0.05),
    ),
    "adamw": (
        lambda **o: opt.AdamW(opt.ExponentialDecay(0.01, 1, 0.9), weight_decay=0.1, **o),
        lambda groups: torch.optim.AdamW(groups, lr=0.01, weight_decay=0.1),
    ),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("make", [_mlp, _cnn], ids=["mlp", "cnn"])
def test_accumulate_clip_and_no_decay_match_torch(make, optimizer, k, dtype):
    torch.manual_seed(0)
    body, ref, shape = make()
    ref = ref.to(torch.float64 if dtype == np.float64 else torch.float32)
    ours_opt, torch_opt = OPTIMIZERS[optimizer]
    ours = ours_opt(accumulate=k, clip_norm=0.2, no_decay=opt.biases_and_norms)

    net = Net(body)
    net.set_optimizer(ours)
    tx = tensor.Tensor(shape, dtype=tensor.as_dtype(dtype))
    ty = tensor.Tensor((shape[0],), dtype=tensor.int32)
    net.compile([tx], is_train=True, use_graph=True)
    states = net.get_states()
    for name, t, transposed in _pairs(ref):
        states[name].copy_from_numpy(np.ascontiguousarray(_torch_array(t, transposed)))
    decay = [p for p in ref.parameters() if p.ndim >= 2]
    exempt = [p for p in ref.parameters() if p.ndim < 2]
    t_opt = torch_opt([{"params": decay}, {"params": exempt, "weight_decay": 0.0}])
    t_sched = torch.optim.lr_scheduler.ExponentialLR(t_opt, gamma=0.9)

    rng = np.random.default_rng(0)
    norms = []
    for update in range(UPDATES):
        t_opt.zero_grad()
        for _ in range(k):
            xb = rng.standard_normal(shape).astype(dtype)
            yb = rng.integers(0, CLASSES, shape[0]).astype(np.int32)
            tx.copy_from_numpy(xb)
            ty.copy_from_numpy(yb)
            net(tx, ty)
            t_loss = nn.functional.cross_entropy(ref(torch.from_numpy(xb)), torch.from_numpy(yb).long())
            (t_loss / k).backward()
        norms.append(float(nn.utils.clip_grad_norm_(ref.parameters(), 0.2)))
        t_opt.step()
        t_sched.step()
        assert ours.step_counter == update + 1 and ours.micro_step == 0
        rtol = RTOL[dtype]
        np.testing.assert_allclose(float(tensor.to_numpy(ours.last_norm)), norms[-1], rtol=rtol)
        states = net.get_states()
        for name, t, transposed in _pairs(ref):
            got, want = tensor.to_numpy(states[name]), _torch_array(t, transposed)
            np.testing.assert_allclose(
                got, want, rtol=rtol, atol=rtol * np.abs(want).max(), err_msg=f"{name} after update {update}"
            )
    assert max(norms) > 0.2  # clipping took effect at least once: the comparison is not vacuous

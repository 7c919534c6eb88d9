"""ops/loss_nd.py (softmax cross-entropy and negative log-likelihood over (N, C, d...)):
references, float64 gradients, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import (
    check_grad,
    keep_dtype,
    torch_or_skip,
)

from singa_lite import ops
from singa_lite.errors import ArgumentError, DTypeError, ShapeError

K = keep_dtype  # a constant tensor that keeps its array's dtype

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
    tensors = [K(a) for a in args]
    loss, log_prob = sce(*tensors)
    np.testing.assert_allclose(loss.numpy(), want_ce.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(log_prob.numpy(), torch.log_softmax(torch.tensor(x), 1).numpy(), rtol=1e-10)
    np.testing.assert_allclose(nll(*tensors).numpy(), want_nll, rtol=1e-10, atol=1e-12)
    check_grad(lambda *ts: sce(*ts)[0], args, dev, wrt=[0])
    check_grad(nll, args, dev, wrt=[0])


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_losses_K(dev, dtype):
    x, t, _ = _loss_inputs((2,))
    loss, log_prob = ops.softmax_cross_entropy_loss(K(x.astype(dtype)), K(t))
    assert loss.dtype == dtype and log_prob.dtype == dtype and loss.shape == ()


def test_loss_errors():
    x = K(np.zeros((2, 3)))
    with pytest.raises(DTypeError):
        ops.negative_log_likelihood_loss(x, K(np.zeros(2)))
    with pytest.raises(ShapeError):
        ops.negative_log_likelihood_loss(x, K(np.zeros(3, np.int64)))
    with pytest.raises(ShapeError):
        ops.negative_log_likelihood_loss(x, K(np.array([0, 3])))
    with pytest.raises(ShapeError):
        ops.negative_log_likelihood_loss(x, K(np.array([0, 1])), K(np.ones(2)))
    with pytest.raises(ArgumentError):
        ops.negative_log_likelihood_loss(x, K(np.array([0, 1])), reduction="max")

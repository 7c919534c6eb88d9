"""Reduction, shape and indexing ops against PyTorch: forward values and input gradients."""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite import autograd, tensor
from singa_lite.ops import reduce as R
from singa_lite.ops import shape as S

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
F = torch.nn.functional

IDX = np.array([[2, 0], [1, 2]])  # repeated values: gradients must accumulate
UNIQUE = np.array([[1, 0, 2], [2, 1, 0]])


def ti(a: np.ndarray):  # a torch index tensor
    return torch.from_numpy(a)


# (name, singa_lite fn, torch fn, input shapes); every input is random float64.
CASES = [
    ("reduce_sum", lambda x: R.reduce_sum(x, (0, 2)), lambda x: x.sum((0, 2)), [(3, 2, 4)]),
    ("reduce_sum_all", lambda x: R.reduce_sum(x, None, True), lambda x: x.sum().reshape(1, 1), [(3, 4)]),
    ("reduce_mean", lambda x: R.reduce_mean(x, -1, True), lambda x: x.mean(-1, keepdim=True), [(3, 2, 4)]),
    ("reduce_max", lambda x: R.reduce_max(x, (1, 2)), lambda x: x.amax((1, 2)), [(3, 2, 4)]),
    ("reduce_min", lambda x: R.reduce_min(x, 0, True), lambda x: x.amin(0, keepdim=True), [(3, 4)]),
    ("reduce_prod", lambda x: R.reduce_prod(x, 1), lambda x: x.prod(1), [(3, 4)]),
    ("reshape", lambda x: S.reshape(x, (4, -1)), lambda x: x.reshape(4, -1), [(2, 3, 4)]),
    ("transpose", lambda x: S.transpose(x, (2, 0, 1)), lambda x: x.permute(2, 0, 1), [(2, 3, 4)]),
    ("flatten", lambda x: S.flatten(x, 2), lambda x: x.reshape(6, -1), [(2, 3, 4)]),
    ("squeeze", lambda x: S.squeeze(x, [0, 2]), lambda x: x.squeeze(2).squeeze(0), [(1, 3, 1, 2)]),
    ("unsqueeze", lambda x: S.unsqueeze(x, [0, -1]), lambda x: x.unsqueeze(0).unsqueeze(-1), [(3, 2)]),
    ("cat", lambda a, b: S.cat([a, b, a], 1), lambda a, b: torch.cat([a, b, a], 1), [(2, 3), (2, 1)]),
    ("split", lambda x: S.split(x, 1, [1, 3]), lambda x: torch.split(x, [1, 3], 1), [(2, 4)]),
    ("split_equal", lambda x: S.split(x, 0, None, 2), lambda x: torch.split(x, 2, 0), [(3, 2)]),
    ("slice", lambda x: S.slice(x, [1, 0], [100, 4], [0, 2], [1, 2]), lambda x: x[1:, :, 0:4:2], [(3, 2, 5)]),
    ("getitem_basic", lambda x: x[1:, None, ..., ::2], lambda x: x[1:, None, ..., ::2], [(3, 2, 5)]),
    ("getitem_advanced", lambda x: x[:, [2, 0, 2]], lambda x: x[:, [2, 0, 2]], [(2, 3, 2)]),
    ("getitem_mask", lambda x: x[x > 0], lambda x: x[x > 0], [(3, 4)]),
    (
        "gather",
        lambda x: S.gather(x, 1, [2, 0, 2]),
        lambda x: x.index_select(1, ti(np.array([2, 0, 2]))),
        [(2, 3, 2)],
    ),
    (
        "gather_elements",
        lambda x: S.gather_elements(x, IDX, 1),
        lambda x: torch.gather(x, 1, ti(IDX)),
        [(2, 3)],
    ),
    (
        "scatter_elements",
        lambda x, u: S.scatter_elements(x, UNIQUE, u, 0),
        lambda x, u: x.scatter(0, ti(UNIQUE), u),
        [(3, 3), (2, 3)],
    ),
    (
        "scatter_elements_add",
        lambda x, u: S.scatter_elements(x, IDX, u, 1, "add"),
        lambda x, u: x.scatter_add(1, ti(IDX), u),
        [(2, 3), (2, 2)],
    ),
    ("expand", lambda x: S.expand(x, (2, 3, 4)), lambda x: x.expand(2, 3, 4), [(3, 1)]),
    ("tile", lambda x: S.tile(x, (2, 1, 3)), lambda x: x.tile(2, 1, 3), [(2, 2)]),
    (
        "pad_constant",
        lambda x: S.pad(x, "constant", [0, 1, -1, 0, 2, 1], 0.5),
        lambda x: F.pad(x, (-1, 1, 1, 2, 0, 0), value=0.5),
        [(2, 3, 4)],
    ),
    (
        "pad_reflect",
        lambda x: S.pad(x, "reflect", [0, 0, 1, 0, 2, 2]),
        lambda x: F.pad(x, (1, 2, 0, 2), "reflect"),
        [(2, 3, 4)],
    ),
    (
        "pad_edge",
        lambda x: S.pad(x, "edge", [0, 0, 2, 0, 1, 3]),
        lambda x: F.pad(x, (2, 3, 0, 1), "replicate"),
        [(2, 3, 4)],
    ),
    (
        "pad_wrap",
        lambda x: S.pad(x, "wrap", [0, 0, 1, 0, 2, 1]),
        lambda x: F.pad(x, (1, 1, 0, 2), "circular"),
        [(2, 3, 4)],
    ),
    (
        "depth_to_space_crd",
        lambda x: S.depth_to_space(x, 2, "CRD"),
        lambda x: F.pixel_shuffle(x, 2),
        [(1, 8, 2, 3)],
    ),
    (
        "where",
        lambda c, x, y: S.where(c > 0, x, y),
        lambda c, x, y: torch.where(c > 0, x, y),
        [(2, 1), (2, 3), (3,)],
    ),
    ("cast", lambda x: S.cast(x, np.float32), lambda x: x.to(torch.float32), [(2, 3)]),
]


def _loss_sl(ys, ws):
    out = None
    for y, w in zip(ys, ws):
        term = R.reduce_sum(y * tensor.Tensor(data=w.astype(y.dtype), requires_grad=False))
        term = S.cast(term, np.float64)
        out = term if out is None else out + term
    return out


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name, fn, torch_fn, shapes", CASES, ids=[c[0] for c in CASES])
def test_against_torch(name, fn, torch_fn, shapes, seed):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(s) for s in shapes]
    autograd.training = True
    ts = [tensor.Tensor(data=x, requires_grad=False) for x in xs]
    for t in ts:
        t.requires_grad = t.stores_grad = True
    ys = fn(*ts)
    ys = ys if isinstance(ys, tuple) else (ys,)
    ws = [rng.standard_normal(y.shape) for y in ys]
    grads = autograd.gradients(_loss_sl(ys, ws))
    autograd.training = False

    txs = [torch.tensor(x, requires_grad=True) for x in xs]
    tys = torch_fn(*txs)
    tys = tys if isinstance(tys, tuple) else (tys,)
    sum(((ty.double() * torch.from_numpy(w)).sum() for ty, w in zip(tys, ws))).backward()

    assert len(ys) == len(tys)
    for y, ty in zip(ys, tys):
        np.testing.assert_allclose(tensor.to_numpy(y), ty.detach().numpy(), rtol=1e-6, atol=1e-6)
    for t, tx in zip(ts, txs):
        got = tensor.to_numpy(grads[t]) if t in grads else np.zeros(t.shape)
        want = tx.grad.numpy() if tx.grad is not None else np.zeros(t.shape)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"{name}: gradient")


def test_max_ties_split_like_torch_amax():
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, -1.0]])
    autograd.training = True
    t = tensor.Tensor(data=x, requires_grad=False)
    t.requires_grad = t.stores_grad = True
    g = autograd.gradients(R.reduce_sum(R.reduce_max(t, 1)))[t]
    tx = torch.tensor(x, requires_grad=True)
    tx.amax(1).sum().backward()
    np.testing.assert_allclose(tensor.to_numpy(g), tx.grad.numpy())


@pytest.mark.parametrize("seed", [0, 1])
def test_index_ops_against_torch(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 3, (3, 4)).astype(np.float32)
    t = tensor.Tensor(data=x, requires_grad=False)
    tx = torch.from_numpy(x)
    for axis in (0, 1, -1):
        np.testing.assert_array_equal(tensor.to_numpy(R.argmax(t, axis)), tx.argmax(axis).numpy())
        np.testing.assert_array_equal(
            tensor.to_numpy(R.argmin(t, axis, True)), tx.argmin(axis, keepdim=True).numpy()
        )
    np.testing.assert_array_equal(tensor.to_numpy(S.nonzero(t)), torch.nonzero(tx).T.numpy())
    idx = rng.integers(0, 5, (2, 3))
    np.testing.assert_array_equal(
        tensor.to_numpy(S.onehot(tensor.Tensor(data=idx, requires_grad=False), 5)),
        F.one_hot(torch.from_numpy(idx), 5).numpy(),
    )

"""Training the same MLP and CNN from the same weights gives PyTorch's loss curve.

20 steps of SGD with momentum and weight decay on the same batches; the losses agree within
1e-4 relative at every step, so forward, backward and the update all match.
"""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite import layer, model, opt, tensor

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
nn = torch.nn


class Net(model.Model):
    def __init__(self, body: list) -> None:
        super().__init__()
        self.body = body  # a plain list; register_layers names its layers 0, 1, ...
        self.register_layers(body)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        for lyr in self.body:
            x = lyr(x)
        return x

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def _mlp():
    ours = [layer.Linear(32), layer.ReLU(), layer.Linear(16), layer.ReLU(), layer.Linear(10)]
    theirs = nn.Sequential(nn.Linear(48, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 10))
    return ours, theirs, (16, 48)


def _cnn():
    ours = [
        layer.Conv2d(4, 3, padding=1),
        layer.ReLU(),
        layer.MaxPool2d(2),
        layer.Conv2d(8, 3, padding=1),
        layer.ReLU(),
        layer.MaxPool2d(2),
        layer.Flatten(),
        layer.Linear(10),
    ]
    theirs = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * 3 * 3, 10),
    )
    return ours, theirs, (16, 1, 12, 12)


def _copy_weights(ours: Net, theirs) -> None:
    """torch Linear weights are (out, in); singa_lite's are (in, out)."""
    params = ours.get_params()
    for i, mod in enumerate(theirs):
        if isinstance(mod, (nn.Linear, nn.Conv2d)):
            W = mod.weight.detach().numpy()
            params[f"{i}.W"].copy_from_numpy(W.T if isinstance(mod, nn.Linear) else W)
            params[f"{i}.b"].copy_from_numpy(mod.bias.detach().numpy())


@pytest.mark.parametrize("use_graph", [False, True])
@pytest.mark.parametrize("make", [_mlp, _cnn], ids=["mlp", "cnn"])
def test_loss_curve_matches_torch(make, use_graph):
    torch.manual_seed(0)
    body, ref, shape = make()
    rng = np.random.default_rng(0)
    data = [
        (rng.standard_normal(shape).astype(np.float32), rng.integers(0, 10, shape[0]).astype(np.int32))
        for _ in range(4)
    ]
    batches = [data[i % 4] for i in range(20)]  # a cycle the nets can fit, so the loss falls
    net = Net(body)
    net.set_optimizer(opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4))
    tx = tensor.Tensor(shape)
    ty = tensor.Tensor((shape[0],), dtype=tensor.int32)
    net.compile([tx], is_train=True, use_graph=use_graph)
    _copy_weights(net, ref)

    sgd = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    ours, theirs = [], []
    for xb, yb in batches:
        tx.copy_from_numpy(xb)
        ty.copy_from_numpy(yb)
        _, loss = net(tx, ty)
        ours.append(tensor.to_numpy(loss)[0])
        sgd.zero_grad()
        t_loss = nn.functional.cross_entropy(ref(torch.from_numpy(xb)), torch.from_numpy(yb).long())
        t_loss.backward()
        sgd.step()
        theirs.append(t_loss.item())
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
    assert ours[-1] < ours[0]

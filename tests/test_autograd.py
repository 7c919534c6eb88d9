"""The backward engine: accumulation, multi-output ops, release, flags, errors, memory."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

from singa_lite import autograd, tensor
from singa_lite.autograd import Operator


def param(arr, name=None):
    t = tensor.Tensor(data=np.asarray(arr, np.float64), requires_grad=False)
    t.requires_grad = t.stores_grad = True
    t.name = name
    return t


class SplitHalves(Operator):
    """Two outputs: the first and second half of a vector."""

    def forward(self, x):
        self.n = x.shape[0] // 2
        return x[: self.n].copy(), x[self.n :].copy()

    def backward(self, d1, d2):
        return self.xp.concatenate([d1, d2])


def test_reused_tensor_gradients_are_summed():
    autograd.training = True
    x = param([1.0, 2.0, 3.0])
    y = x * x + x  # x used three times
    g = autograd.gradients(y)
    np.testing.assert_allclose(tensor.to_numpy(g[x]), 2 * np.array([1, 2, 3]) + 1)


def test_paths_of_different_depth_are_ordered():
    """y = a + 3a with a = 2x: the op feeding `a` must wait for both paths (dy/dx = 8)."""
    autograd.training = True
    x = param([1.0])
    a = x * 2
    b = a * 3
    g = autograd.gradients(a + b)
    np.testing.assert_array_equal(tensor.to_numpy(g[x]), [8.0])


def test_deep_residual_chain_matches_closed_form():
    autograd.training = True
    x = param([0.5])
    h = x
    for _ in range(10):
        h = h + h * 0.5  # each block multiplies by 1.5
    g = autograd.gradients(h)
    np.testing.assert_allclose(tensor.to_numpy(g[x]), [1.5**10])


def test_each_param_yielded_once_with_its_total():
    autograd.training = True
    w = param([2.0], "w")
    x = tensor.Tensor(data=np.array([3.0]), requires_grad=False)
    y = (w * x) * (w + x)
    pairs = list(autograd.backward(y))
    assert [p.name for p, _ in pairs] == ["w"]
    # d/dw (w x (w + x)) = 2 w x + x^2
    np.testing.assert_allclose(tensor.to_numpy(pairs[0][1]), [2 * 2 * 3 + 9])


def test_unused_output_of_multi_output_op_gets_zero_gradient():
    autograd.training = True
    x = param([1.0, 2.0, 3.0, 4.0])
    a, _ = SplitHalves()(x)
    g = autograd.gradients(a * 3)
    np.testing.assert_array_equal(tensor.to_numpy(g[x]), [3, 3, 0, 0])


def test_explicit_dy():
    autograd.training = True
    x = param([1.0, 2.0])
    y = x * 2
    g = autograd.gradients(y, tensor.Tensor(data=np.array([10.0, 100.0]), requires_grad=False))
    np.testing.assert_array_equal(tensor.to_numpy(g[x]), [20, 200])


def test_inputs_without_requires_grad_get_nothing():
    autograd.training = True
    x = param([1.0])
    c = tensor.Tensor(data=np.array([5.0]), requires_grad=False)
    c.stores_grad = True  # stores_grad without requires_grad: no gradient flows
    c.requires_grad = False
    g = autograd.gradients(x * c)
    assert set(g) == {x}


def test_no_recording_outside_training_or_inside_no_grad():
    x = param([1.0])
    assert (x * 2).creator is None  # training is off
    autograd.training = True
    with autograd.no_grad():
        assert (x * 2).creator is None
    assert (x * 2).creator is not None


def test_backward_without_graph_explains_how_to_fix():
    x = param([1.0])
    with pytest.raises(RuntimeError, match=r"autograd\.training = True"):
        list(autograd.backward(x * 2))


def test_graph_is_released_once_the_next_op_is_recorded():
    autograd.training = True
    x = param([1.0, 2.0])
    h = x * 2
    y = h + 1
    list(autograd.backward(y))
    assert h.creator.inputs != ()  # kept for another backward, as SINGA allows
    x * 3  # the next step has begun
    assert h.creator.inputs == () and y.creator.inputs == ()


def test_graph_is_released_when_another_graph_is_walked():
    autograd.training = True
    x = param([1.0, 2.0])
    y1 = autograd.reduce_sum(x * 2)
    y2 = autograd.reduce_sum(x * 3)
    list(autograd.backward(y1))
    list(autograd.backward(y2))
    assert y1.creator.inputs == () and y2.creator.inputs != ()


def test_graph_is_released_as_walked_with_retain_graph_false():
    autograd.training = True
    x = param([1.0, 2.0])
    y = autograd.reduce_sum(x * 2)
    list(autograd.backward(y, retain_graph=False))
    assert y.creator.inputs == ()


def test_ops_recorded_during_a_walk_do_not_free_it():
    """An optimizer written SINGA's way does tensor arithmetic on params inside the loop over
    backward's pairs: that records ops, which must not free the graph being walked."""
    autograd.training = True
    a, b = param([1.0, 2.0], "a"), param([3.0], "b")
    loss = autograd.reduce_sum(autograd.relu(a * b))
    seen = []
    for p, g in autograd.backward(loss):
        p.copy_from(p - g * 0.1)  # records ops while the walk goes on
        seen.append(p.name)
    assert sorted(seen) == ["a", "b"]


def test_functional_api_is_reachable_from_autograd():
    assert autograd.add is not None
    with pytest.raises(AttributeError):
        autograd.no_such_op


def test_memory_stays_flat_over_1000_steps():
    """1,000 forward+backward steps of a small MLP leave traced memory flat."""
    from singa_lite import ops

    rng = np.random.default_rng(0)
    w1 = param(rng.standard_normal((16, 32)) * 0.1, "w1")
    w2 = param(rng.standard_normal((32, 4)) * 0.1, "w2")
    x = tensor.Tensor(data=rng.standard_normal((8, 16)), requires_grad=False)
    labels = tensor.Tensor(data=rng.integers(0, 4, 8).astype(np.int32), requires_grad=False)
    autograd.training = True

    def step():
        h = ops.relu(ops.matmul(x, w1))
        loss = ops.softmax_cross_entropy(ops.matmul(h, w2), labels)
        for p, g in autograd.backward(loss):
            p.data -= 0.01 * g.data

    for _ in range(50):
        step()
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(1000):
            step()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"memory grew by {grown} bytes over 1000 steps"


def test_backward_runs_twice_over_one_graph_as_in_singa():
    autograd.training = True
    x = param([1.0, 2.0])
    loss = autograd.reduce_sum(x * x)
    g1 = autograd.gradients(loss)
    g2 = autograd.gradients(loss)
    np.testing.assert_array_equal(tensor.to_numpy(g1[x]), [2.0, 4.0])
    np.testing.assert_array_equal(tensor.to_numpy(g2[x]), [2.0, 4.0])


def test_second_backward_through_a_freed_graph_says_so():
    from singa_lite import AutogradError

    autograd.training = True
    x = param([1.0, 2.0])
    loss = autograd.reduce_sum(x * x)
    autograd.gradients(loss)
    x + 1  # a new op: the walked graph is released
    with pytest.raises(AutogradError, match="retain_graph=True"):
        autograd.gradients(loss)
    loss2 = autograd.reduce_sum(x * x)
    g1 = dict(autograd.backward(loss2, retain_graph=True))
    g2 = dict(autograd.backward(loss2))
    np.testing.assert_array_equal(tensor.to_numpy(g1[x]), tensor.to_numpy(g2[x]))


class RecordsGrads(Operator):
    """``a * b``, remembering which input gradients backward was asked for."""

    def forward(self, a, b):
        self.a, self.b = a, b
        return a * b

    def backward(self, dy):
        self.asked = self.needs_grad
        return (dy * self.b if self.needs_grad[0] else None, dy * self.a if self.needs_grad[1] else None)


def test_backward_walks_only_paths_to_params():
    """A data tensor with requires_grad=True (Tensor's default, as in SINGA) gets no gradient
    computed for it, and a cast of it made once before the loop is not walked again."""
    autograd.training = True
    w = param([2.0, 3.0])
    data = tensor.Tensor(data=np.array([1.0, 4.0]))  # requires_grad=True, stores_grad=False
    assert data.requires_grad and not data.stores_grad
    x = data.as_type(tensor.float64)  # recorded once, outside the "loop"
    for _ in range(2):
        op = RecordsGrads()
        (y,) = op(x, w)
        g = autograd.gradients(autograd.reduce_sum(y))
        assert set(g) == {w} and op.asked == (False, True)
        np.testing.assert_array_equal(tensor.to_numpy(g[w]), [1.0, 4.0])
    assert x.creator is not None and not x.creator.released  # never on a path to a param
    assert list(autograd.backward(autograd.reduce_sum(x * 2))) == []  # no param: nothing to do


def test_retained_graph_follows_a_param_frozen_between_backwards():
    autograd.training = True
    w, b = param([[1.0, 2.0], [3.0, 4.0]], "w"), param([1.0, 1.0], "b")
    x = tensor.Tensor(data=np.ones((1, 2)), requires_grad=False)
    y = autograd.reduce_sum(autograd.add(autograd.matmul(x, w), b))
    assert set(dict(autograd.backward(y, retain_graph=True))) == {w, b}
    b.requires_grad = b.stores_grad = False
    assert set(dict(autograd.backward(y, retain_graph=True))) == {w}

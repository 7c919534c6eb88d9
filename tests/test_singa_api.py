"""SINGA's API as its scripts and tests call it (issue 17): build flags, defaults, names and
argument orders. Each test is written here, in SINGA's calling style: numpy arrays in through
``tensor.from_numpy``, ``autograd.training = True``, ``y.creator.backward(dy.data)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from singa_lite import autograd, device, layer, model, opt, singa_wrap, sonnx, tensor
from singa_lite.errors import ArgumentError, OptimizerError, ShapeError, UnsupportedApiError

cpu_dev = device.get_default_device()


@pytest.fixture(autouse=True)
def _training():
    old = autograd.training
    autograd.training = True
    yield
    autograd.training = old


# -- 1. singa_wrap -------------------------------------------------------------------------------
def test_singa_wrap_flags_say_what_singa_lite_can_do():
    assert (device.get_num_gpus() > 0) == singa_wrap.USE_CUDA
    assert singa_wrap.USE_NCCL <= singa_wrap.USE_CUDA
    assert singa_wrap.USE_DNNL is False and singa_wrap.USE_OPENCL is False and singa_wrap.USE_PYTHON3
    if singa_wrap.USE_CUDA:
        assert device.create_cuda_gpu().id() == 0
    dev = device.create_cuda_gpu() if singa_wrap.USE_CUDA else device.get_default_device()
    assert isinstance(dev, device.Device)


def test_singa_wrap_is_no_cpp_api():
    assert not hasattr(singa_wrap, "Tensor")
    with pytest.raises(UnsupportedApiError, match="only SINGA's build flags"):
        singa_wrap.Mult


# -- 2. defaults -----------------------------------------------------------------------------------
def test_from_numpy_gives_a_recorded_float32_tensor():
    x = tensor.from_numpy(np.array([[0.5, -1.0]]))  # float64 in, as numpy makes it
    assert x.dtype == tensor.float32 and x.requires_grad
    y = autograd.relu(x)
    assert y.creator is not None  # recorded: SINGA's tests differentiate and export such graphs
    dx = y.creator.backward(np.ones((1, 2), np.float32))
    np.testing.assert_array_equal(dx, [[1.0, 0.0]])
    assert tensor.from_numpy(np.arange(3)).dtype == tensor.int32
    assert tensor.from_numpy(np.zeros(3, np.float16)).dtype == tensor.float16  # others are kept


def test_tensor_data_and_explicit_dtypes_keep_what_they_are_given():
    assert tensor.Tensor(data=np.zeros(2)).dtype == tensor.float64
    assert tensor.Tensor(data=np.zeros(2, np.int64)).dtype == tensor.int64
    assert tensor.Tensor(data=np.zeros(2), dtype=tensor.float16).dtype == tensor.float16


def test_as_type_takes_singas_type_names():
    x = tensor.from_numpy(np.array([1.7, -2.2], np.float32))
    assert x.as_type("int").dtype == tensor.int32
    np.testing.assert_array_equal(tensor.to_numpy(x.as_type("int")), [1, -2])
    assert x.as_type("int").as_type("float").dtype == tensor.float32


def test_round_halves_away_from_zero_and_rounde_to_even():
    x = tensor.from_numpy(np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, 2.4], np.float32))
    np.testing.assert_array_equal(tensor.to_numpy(autograd.round(x)), [-3, -2, -1, 1, 2, 3, 0, 2])
    np.testing.assert_array_equal(tensor.to_numpy(autograd.rounde(x)), [-2, -2, -0, 0, 2, 2, 0, 2])
    dx = autograd.round(x).creator.backward(np.ones(8, np.float32))
    np.testing.assert_array_equal(dx, np.zeros(8))


def test_unnamed_tensors_get_unique_names_for_opt_apply():
    w = tensor.from_numpy(np.ones(3, np.float32))
    w.stores_grad = True
    u = tensor.Tensor((3,))
    assert w.name.startswith("Dummy#") and u.name.startswith("Dummy#") and w.name != u.name
    assert w.is_dummy() and w.name == w.name  # stable once made
    sgd = opt.SGD(lr=0.1, momentum=0.9)
    g = tensor.from_numpy(np.full(3, 2.0, np.float32))
    sgd.apply(w.name, w, g)
    sgd.apply(u.name, u, g)
    assert set(sgd.moments) == {w.name, u.name}
    np.testing.assert_allclose(tensor.to_numpy(w), [0.8, 0.8, 0.8])


def test_layer_names_win_over_dummy_names():
    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(2)

        def forward(self, x):
            return self.fc(x)

    w = tensor.from_numpy(np.ones((3, 2), np.float32))
    w.stores_grad = True
    dummy = w.name  # read (and so made up) before any layer names it
    net = Net()
    net.compile([tensor.Tensor((4, 3))], is_train=True)
    net.fc.W = w
    assert dummy.startswith("Dummy#") and w.name == "fc.W" and not w.is_dummy()
    assert set(net.get_params()) == {"fc.W", "fc.b"}


def test_clone_keeps_own_names_only():
    named = tensor.Tensor((2,), name="h")
    assert named.clone().name == "h"
    anon = tensor.Tensor((2,))
    assert anon.clone().name != anon.name


def test_backward_twice_over_the_same_graph():
    w = tensor.Tensor(data=np.array([1.0, -2.0], np.float32), stores_grad=True, name="w")
    x = tensor.from_numpy(np.array([3.0, 4.0]))
    loss = autograd.reduce_sum(autograd.mul(x, w))
    first = {p.name: tensor.to_numpy(g) for p, g in autograd.backward(loss)}
    second = {p.name: tensor.to_numpy(g) for p, g in autograd.backward(loss)}
    np.testing.assert_array_equal(first["w"], [3.0, 4.0])
    np.testing.assert_array_equal(second["w"], first["w"])


def test_compile_takes_argparse_strings():
    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(2)

        def forward(self, x):
            return self.fc(x)

    net = Net()
    net.compile([tensor.Tensor((4, 3))], is_train=True, use_graph="True", sequential="False")
    assert net.graph_mode is True and net.sequential is False
    net.compile([tensor.Tensor((4, 3))], is_train="true", use_graph="False")
    assert net.graph_mode is False and net.training is True


def test_decay_scheduler_returns_a_tensor():
    step = tensor.Tensor((1,))
    step.set_value(4)
    lr = opt.ExponentialDecay(0.5, 2, 0.5, staircase=True)(step)
    assert isinstance(lr, tensor.Tensor) and lr.shape == (1,)
    np.testing.assert_allclose(tensor.to_numpy(lr), [0.125])


# -- 3. names SINGA has ------------------------------------------------------------------------
def test_tensor_module_functions():
    a = tensor.from_numpy(np.array([[1.0, 2.0], [3.0, 6.0]], np.float32))
    assert tensor.average(a) == 3.0
    np.testing.assert_allclose(tensor.to_numpy(tensor.average(a, 1)), [1.5, 4.5])
    np.testing.assert_array_equal(
        tensor.to_numpy(tensor.repeat(a, 2, 0)), np.repeat(tensor.to_numpy(a), 2, 0)
    )
    np.testing.assert_array_equal(
        tensor.to_numpy(tensor.repeat(a, [1, 3], 1)), np.repeat([[1, 2], [3, 6]], [1, 3], 1)
    )
    np.testing.assert_array_equal(tensor.to_numpy(tensor.repeat(a, 2)), np.repeat([1, 2, 3, 6], 2))
    assert tensor.product((2, 3, 4)) == 24
    np.testing.assert_array_equal(tensor.to_numpy(tensor.ceil(a / 4)), [[1, 1], [1, 2]])
    for fn, ref in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal)]:
        np.testing.assert_array_equal(
            tensor.to_numpy(getattr(tensor, fn)(a, 2.0)), ref(tensor.to_numpy(a), 2.0)
        )
    np.testing.assert_array_equal(tensor.to_numpy(tensor.eq(a, a)), np.ones((2, 2), bool))
    with pytest.raises(ArgumentError, match="repeat"):
        tensor.repeat(a, [1, 2, 3], 1)


def test_repeat_is_differentiable():
    w = tensor.Tensor(data=np.array([1.0, 2.0], np.float32), stores_grad=True, name="w")
    grads = autograd.gradients(autograd.reduce_sum(tensor.repeat(w, [2, 3])))
    np.testing.assert_array_equal(tensor.to_numpy(grads[w]), [2.0, 3.0])


def test_copy_shares_memory_and_copy_data_to_from_copies_a_range():
    a = tensor.from_numpy(np.arange(6, dtype=np.float32))
    b = a.copy()
    b += 1
    np.testing.assert_array_equal(tensor.to_numpy(a), np.arange(6) + 1)
    dst = tensor.Tensor((2, 3))
    tensor.copy_data_to_from(dst, a, 3, dst_offset=2, src_offset=1)
    np.testing.assert_array_equal(tensor.to_numpy(dst).reshape(-1), [0, 0, 2, 3, 4, 0])
    with pytest.raises(ShapeError):
        tensor.copy_data_to_from(dst, a, 6, dst_offset=2)


def test_from_raw_tensor_wraps_what_backward_returns():
    x = tensor.from_numpy(np.array([[-1.0, 2.0]], np.float32))
    y = autograd.relu(x)
    dx = tensor.from_raw_tensor(y.creator.backward(np.ones((1, 2), np.float32)))
    assert isinstance(dx, tensor.Tensor) and dx.device == x.device
    np.testing.assert_array_equal(tensor.to_numpy(dx), [[0.0, 1.0]])


def test_autograd_singa_names():
    a = tensor.from_numpy(np.array([[1.0, 0.0], [2.0, 3.0]], np.float32))
    b = tensor.from_numpy(np.array([[1.0, 1.0], [0.0, 3.0]], np.float32))
    na, nb = tensor.to_numpy(a), tensor.to_numpy(b)
    np.testing.assert_array_equal(tensor.to_numpy(autograd._and(a, b)), np.logical_and(na, nb))
    np.testing.assert_array_equal(tensor.to_numpy(autograd._or(a, b)), np.logical_or(na, nb))
    np.testing.assert_array_equal(tensor.to_numpy(autograd._xor(a, b)), np.logical_xor(na, nb))
    np.testing.assert_array_equal(tensor.to_numpy(autograd._not(a)), np.logical_not(na))
    assert autograd._and(a, b).dtype == tensor.float32  # SINGA's logic gives 0.0/1.0
    np.testing.assert_array_equal(tensor.to_numpy(autograd.negative(a)), -na)
    cos = (na * nb).sum(1) / np.linalg.norm(na, axis=1) / np.linalg.norm(nb, axis=1)
    np.testing.assert_allclose(tensor.to_numpy(autograd.cossim(a, b)), cos, rtol=1e-6)
    np.testing.assert_array_equal(tensor.to_numpy(autograd.shape(a)), [2, 2])
    filled = autograd.constant_of_shape(tensor.from_numpy(np.array([2, 3])), 1.5)
    np.testing.assert_array_equal(tensor.to_numpy(filled), np.full((2, 3), 1.5))
    x4 = tensor.from_numpy(np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4))
    np.testing.assert_allclose(
        tensor.to_numpy(autograd.globalaveragepool(x4)), tensor.to_numpy(x4).mean((2, 3), keepdims=True)
    )
    np.testing.assert_allclose(
        tensor.to_numpy(autograd.globalaveragepool(x4, "channels_last")),
        tensor.to_numpy(x4).mean((1, 2), keepdims=True),
    )
    np.testing.assert_array_equal(tensor.to_numpy(autograd.Concat(1)(a, b)[0]), np.concatenate([na, nb], 1))
    np.testing.assert_array_equal(tensor.to_numpy(autograd.Matmul()(a, b)[0]), na @ nb)


def test_cossim_gradient_matches_a_numerical_one():
    rng = np.random.default_rng(0)
    a0, b0 = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    a = tensor.Tensor(data=a0, stores_grad=True, name="a")
    b = tensor.Tensor(data=b0, requires_grad=False)
    grad = tensor.to_numpy(autograd.gradients(autograd.reduce_sum(autograd.cossim(a, b)))[a])

    def f(v):
        return ((v * b0).sum(1) / np.linalg.norm(v, axis=1) / np.linalg.norm(b0, axis=1)).sum()

    eps, num = 1e-6, np.zeros_like(a0)
    for i in np.ndindex(a0.shape):
        d = np.zeros_like(a0)
        d[i] = eps
        num[i] = (f(a0 + d) - f(a0 - d)) / (2 * eps)
    np.testing.assert_allclose(grad, num, rtol=1e-6, atol=1e-8)


def test_device_graph_calls_are_accepted():
    dev = device.get_default_device()
    dev.EnableGraph(True)
    assert dev.graph_enabled
    y = autograd.relu(tensor.from_numpy(np.array([-1.0, 1.0])))
    dev.RunGraph(False)
    dev.ResetGraph()
    dev.EnableGraph(False)
    np.testing.assert_array_equal(tensor.to_numpy(y), [0.0, 1.0])  # ran when called


def test_optimizer_base_is_instantiable():
    o = opt.Optimizer(0.1)
    o.step()
    assert o.step_counter == 1 and o.lr_value == pytest.approx(0.1)
    with pytest.raises(OptimizerError, match="base class"):
        o.apply("w", tensor.Tensor((2,)), tensor.Tensor((2,)))


# -- 4. SINGA's signatures -------------------------------------------------------------------------
def test_where_takes_the_condition_last():
    x = tensor.from_numpy(np.array([1.0, 2.0, 3.0], np.float32))
    y = tensor.from_numpy(np.array([-1.0, -2.0, -3.0], np.float32))
    cond = tensor.from_numpy(np.array([1.0, 0.0, 1.0], np.float32))  # SINGA's float masks
    np.testing.assert_array_equal(tensor.to_numpy(autograd.where(x, y, cond)), [1.0, -2.0, 3.0])
    # The recorded op is ONNX Where (condition, x, y): one gradient per input, None for the mask.
    dc, dx, dy = autograd.where(x, y, cond).creator.backward(np.ones(3, np.float32))
    assert dc is None
    np.testing.assert_array_equal(dx, [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(dy, [0.0, 1.0, 0.0])


def test_upsample_takes_mode_then_scales():
    x = tensor.from_numpy(np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2))
    y = autograd.upsample(x, "nearest", [1.0, 1.0, 2.0, 2.0])
    ref = tensor.to_numpy(x).repeat(2, 2).repeat(2, 3)
    np.testing.assert_array_equal(tensor.to_numpy(y), ref)
    np.testing.assert_array_equal(tensor.to_numpy(autograd.upsample(x, [1, 1, 2, 2])), ref)


def test_onehot_takes_axis_first():
    idx = tensor.from_numpy(np.array([0, 2, 1]))
    y = autograd.onehot(-1, idx, 3, [0.0, 1.0])
    np.testing.assert_array_equal(tensor.to_numpy(y), np.eye(3)[[0, 2, 1]])
    y0 = autograd.onehot(0, idx, 3, [-1.0, 5.0])
    np.testing.assert_array_equal(tensor.to_numpy(y0), np.where(np.eye(3)[[0, 2, 1]].T > 0, 5.0, -1.0))


def test_backward_returns_one_grad_per_input():
    x = tensor.from_numpy(np.array([[1.0, -2.0]], np.float32))
    w = tensor.from_numpy(np.array([[3.0], [4.0]], np.float32))
    dy = tensor.from_numpy(np.ones((1, 1), np.float32))
    dx = autograd.relu(x).creator.backward(dy.data.reshape(1, 1).repeat(2, 1))
    assert not isinstance(dx, tuple)  # one input: the gradient itself
    dx, dw = autograd.matmul(x, w).creator.backward(dy.data)
    assert dx.shape == (1, 2) and dw.shape == (2, 1)


def test_mse_loss_as_singa_computes_it():
    x = tensor.from_numpy(np.array([[1.0, 2.0], [3.0, 5.0]], np.float32))
    t = tensor.from_numpy(np.array([[0.0, 2.0], [3.0, 3.0]], np.float32))
    loss = autograd.mse_loss(x, t)
    np.testing.assert_allclose(tensor.to_numpy(loss), [(1 + 4) / (2 * 2)])
    loss2 = autograd.MeanSquareError()(x, t)[0]
    np.testing.assert_allclose(tensor.to_numpy(loss2), tensor.to_numpy(loss))
    dx, _ = loss2.creator.backward(np.ones(1, np.float32))
    np.testing.assert_allclose(dx, (tensor.to_numpy(x) - tensor.to_numpy(t)) / 2)


def test_to_onnx_argument_forms():
    x = tensor.from_numpy(np.random.default_rng(0).standard_normal((2, 3)))
    y = autograd.relu(autograd.matmul(x, tensor.from_numpy(np.ones((3, 2), np.float32))))
    for m in (sonnx.to_onnx([x], [y]), sonnx.to_onnx(x, y), sonnx.to_onnx([x], y, "named")):
        out = sonnx.prepare(m, device=cpu_dev).run([x])
        np.testing.assert_allclose(tensor.to_numpy(out[0]), tensor.to_numpy(y), rtol=1e-6)


# -- 5. standalone layers share no optimizer slots ---------------------------------------------
def test_two_standalone_layers_keep_separate_slots():
    """Layers outside a model both name their params ``W`` and ``b``: the optimizer keys the
    second one's slots ``W#2``/``b#2`` (told apart by identity), so neither sees the other's."""
    fc1, fc2 = layer.Linear(3, 3), layer.Linear(3, 2)
    x = tensor.from_numpy(np.ones((2, 3), np.float32))
    y = tensor.from_numpy(np.array([0, 1], np.int32))
    sgd = opt.SGD(lr=0.1, momentum=0.9)
    for _ in range(2):
        loss = autograd.softmax_cross_entropy(fc2(autograd.relu(fc1(x))), y)
        sgd(loss)
    assert fc1.W.name == fc2.W.name == "W"
    assert set(sgd.moments) == {"W", "b", "W#2", "b#2"}
    shapes = sorted(tuple(m.shape) for m in sgd.moments.values())
    assert shapes == [(2,), (3,), (3, 2), (3, 3)]
    states = sgd.get_states()
    fresh = opt.SGD(lr=0.1, momentum=0.9)
    fresh.set_states(states)
    loss = autograd.softmax_cross_entropy(fc2(autograd.relu(fc1(x))), y)
    fresh(loss)  # the loaded slots go to the same params, in the same order
    assert set(fresh.moments) == set(states["moments"])


# -- 7. the "coming from SINGA" page -----------------------------------------------------------
def test_singa_page_covers_the_flags_and_how_to_report():
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "singa.md").read_text()
    for flag in singa_wrap.FLAGS:
        assert f"`{flag}`" in page, flag
    for topic in ("## Differences that stay, and why", "## Reporting a difference", "Tensor[i]", "W#2"):
        assert topic in page, topic


def test_embedding_from_pretrained_and_freeze():
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    emb = layer.Embedding.from_pretrained(table)
    idx = tensor.Tensor(data=np.array([[3, 0]], np.int32), requires_grad=False)
    out = emb(idx)
    np.testing.assert_array_equal(tensor.to_numpy(out), table[[[3, 0]]])
    assert not emb.W.stores_grad  # frozen by default
    table[0] = -1  # the layer holds a copy
    np.testing.assert_array_equal(tensor.to_numpy(emb.W)[0], [0, 1, 2])
    trainable = layer.Embedding.from_pretrained(np.ones((4, 3)), freeze=False, padding_idx=1)
    trainable(idx)
    assert trainable.W.stores_grad and trainable.W.dtype == np.float64
    np.testing.assert_array_equal(tensor.to_numpy(trainable.W)[1], [1, 1, 1])  # kept, not zeroed
    with pytest.raises(ArgumentError, match="2-D float table"):
        layer.Embedding.from_pretrained(np.ones(3))


def test_layer_dtype_check_casts_to_the_first_inputs_dtype():
    a = tensor.Tensor(data=np.ones(2, np.float32), requires_grad=False)
    b = tensor.Tensor(data=np.ones(2, np.float64), requires_grad=False)
    layer.Linear(2).dtype_check(a, b)
    assert b.dtype == np.float32

"""Optimizers and schedules: textbook formulas, dtypes, in-place updates, states, errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from singa_lite import SingaLiteError, StateMismatchError, autograd, opt, tensor
from singa_lite.errors import DTypeError, ShapeError


def param(arr, dev=None, name="w"):
    p = tensor.Tensor(data=np.asarray(arr), device=dev, requires_grad=False)
    p.stores_grad = True
    p.requires_grad = True
    p.name = name
    return p


def grads_for(shape, n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for _ in range(n)]


def run(o, p, grads, name="w"):
    """Feed ``grads`` one per step through ``apply`` + ``step``; the final param as float64."""
    for g in grads:
        o.apply(name, p, tensor.Tensor(data=g.astype(p.dtype), device=p.device, requires_grad=False))
        o.step()
    return tensor.to_numpy(p).astype(np.float64)


# -- textbook references (float64 NumPy) -------------------------------------------------------
def sgd_ref(p, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    p, buf = p.copy(), None
    for g in grads:
        g = g + weight_decay * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
    return p


def adam_ref(p, grads, lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0, decoupled=False):
    p, m, v = p.copy(), np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p


def adagrad_ref(p, grads, lr, eps=1e-10, weight_decay=0.0):
    p, h = p.copy(), np.zeros_like(p)
    for g in grads:
        g = g + weight_decay * p
        h = h + g * g
        p = p - lr * g / (np.sqrt(h) + eps)
    return p


def rmsprop_ref(p, grads, lr, rho=0.99, eps=1e-8, weight_decay=0.0):
    p, r = p.copy(), np.zeros_like(p)
    for g in grads:
        g = g + weight_decay * p
        r = rho * r + (1 - rho) * g * g
        p = p - lr * g / (np.sqrt(r) + eps)
    return p


P0 = np.array([[0.5, -1.0, 2.0], [1.5, -0.25, 0.75]])

FORMULA_CASES = {
    "sgd": (lambda: opt.SGD(0.1), lambda p, gs: sgd_ref(p, gs, 0.1)),
    "sgd_wd": (lambda: opt.SGD(0.1, weight_decay=0.05), lambda p, gs: sgd_ref(p, gs, 0.1, weight_decay=0.05)),
    "sgd_momentum": (
        lambda: opt.SGD(0.1, momentum=0.9),
        lambda p, gs: sgd_ref(p, gs, 0.1, momentum=0.9),
    ),
    "sgd_dampening_wd": (
        lambda: opt.SGD(0.05, momentum=0.8, dampening=0.3, weight_decay=0.01),
        lambda p, gs: sgd_ref(p, gs, 0.05, momentum=0.8, dampening=0.3, weight_decay=0.01),
    ),
    "sgd_nesterov": (
        lambda: opt.SGD(0.05, momentum=0.9, weight_decay=0.02, nesterov=True),
        lambda p, gs: sgd_ref(p, gs, 0.05, momentum=0.9, weight_decay=0.02, nesterov=True),
    ),
    "adam": (lambda: opt.Adam(0.01), lambda p, gs: adam_ref(p, gs, 0.01)),
    "adam_wd": (
        lambda: opt.Adam(0.02, beta_1=0.8, beta_2=0.9, epsilon=1e-6, weight_decay=0.1),
        lambda p, gs: adam_ref(p, gs, 0.02, 0.8, 0.9, 1e-6, weight_decay=0.1),
    ),
    "adamw": (
        lambda: opt.AdamW(0.02, weight_decay=0.1),
        lambda p, gs: adam_ref(p, gs, 0.02, weight_decay=0.1, decoupled=True),
    ),
    "adagrad": (lambda: opt.AdaGrad(0.1), lambda p, gs: adagrad_ref(p, gs, 0.1)),
    "adagrad_wd": (
        lambda: opt.AdaGrad(0.1, epsilon=1e-6, weight_decay=0.05),
        lambda p, gs: adagrad_ref(p, gs, 0.1, 1e-6, weight_decay=0.05),
    ),
    "rmsprop": (lambda: opt.RMSProp(0.01), lambda p, gs: rmsprop_ref(p, gs, 0.01)),
    "rmsprop_wd": (
        lambda: opt.RMSProp(0.01, rho=0.9, epsilon=1e-6, weight_decay=0.05),
        lambda p, gs: rmsprop_ref(p, gs, 0.01, 0.9, 1e-6, weight_decay=0.05),
    ),
}


@pytest.mark.parametrize("case", sorted(FORMULA_CASES))
def test_update_matches_formula(dev, case):
    make, ref = FORMULA_CASES[case]
    grads = grads_for(P0.shape, 5)
    got = run(make(), param(P0.astype(np.float32), dev), grads)
    np.testing.assert_allclose(
        got, ref(P0, [g.astype(np.float32).astype(np.float64) for g in grads]), rtol=1e-5
    )
    got64 = run(make(), param(P0, dev), grads)
    np.testing.assert_allclose(got64, ref(P0, grads), rtol=1e-13)


def test_hand_computed_steps():
    # SGD momentum 0.9, lr 0.1, g = 1 twice: buf 1 -> p 0.9; buf 1.9 -> p 0.71.
    p = param(np.array([1.0]))
    assert run(opt.SGD(0.1, momentum=0.9), p, [np.ones(1)] * 2)[0] == pytest.approx(0.71, abs=1e-15)
    # Adam's first step moves each weight by lr * sign(g) (up to epsilon).
    p = param(np.array([1.0, 1.0]))
    got = run(opt.Adam(0.001), p, [np.array([3.0, -0.5])])
    np.testing.assert_allclose(got, [1 - 0.001 * 3 / (3 + 1e-8), 1 + 0.001 * 0.5 / (0.5 + 1e-8)], rtol=1e-15)
    # AdaGrad's first step: lr * g / |g|; RMSProp's: lr * g / (sqrt(1 - rho) |g|).
    assert run(opt.AdaGrad(0.5), param(np.array([2.0])), [np.array([4.0])])[0] == pytest.approx(1.5)
    got = run(opt.RMSProp(0.01, rho=0.75), param(np.array([0.0])), [np.array([2.0])])[0]
    assert got == pytest.approx(-0.01 / math.sqrt(0.25))


@pytest.mark.parametrize("case", ["sgd_nesterov", "adam_wd", "adamw", "adagrad_wd", "rmsprop_wd"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_dtype_is_kept(dev, case, dtype):
    make, ref = FORMULA_CASES[case]
    o = make()
    grads = grads_for(P0.shape, 3, seed=1)
    p = param(P0.astype(dtype), dev)
    got = run(o, p, grads)
    assert p.dtype == dtype
    for slot in o.slot_names:
        assert getattr(o, slot)["w"].dtype == dtype
    tol = {np.float16: 1e-2, np.float32: 1e-5, np.float64: 1e-12}[dtype]
    want = ref(P0.astype(dtype).astype(np.float64), [g.astype(dtype).astype(np.float64) for g in grads])
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", sorted(FORMULA_CASES))
def test_update_is_in_place_and_leaves_grad_alone(dev, case):
    o = FORMULA_CASES[case][0]()
    p = param(P0.astype(np.float32), dev)
    arr = p.data
    g = tensor.Tensor(data=np.full(P0.shape, 0.5, np.float32), device=dev, requires_grad=False)
    g_before = tensor.to_numpy(g)
    o.apply("w", p, g)
    o.step()
    slots = {s: getattr(o, s)["w"] for s in o.slot_names if "w" in getattr(o, s)}
    o.apply("w", p, g)
    assert p.data is arr
    assert all(getattr(o, s)["w"] is a for s, a in slots.items())
    np.testing.assert_array_equal(tensor.to_numpy(g), g_before)
    assert not np.array_equal(tensor.to_numpy(p), P0.astype(np.float32))


def test_shared_grad_array_is_not_corrupted():
    # `a + b` hands the same dy array to both params: updating a must not change b's gradient.
    autograd.training = True
    a, b = param(np.ones(3, np.float32), name="a"), param(np.ones(3, np.float32), name="b")
    o = opt.SGD(0.1, momentum=0.9, weight_decay=0.5, nesterov=True)
    o(a + b)
    np.testing.assert_array_equal(tensor.to_numpy(a), tensor.to_numpy(b))


def test_backward_and_update(dev):
    autograd.training = True
    w0 = np.array([1.0, -2.0, 3.0], np.float32)
    p = param(w0, dev)
    o = opt.SGD(0.1)
    o.backward_and_update(p * p)  # grad 2p
    np.testing.assert_allclose(tensor.to_numpy(p), w0 - np.float32(0.1) * 2 * w0, rtol=1e-6)
    assert o.step_counter == 1
    o(p * p)
    np.testing.assert_allclose(tensor.to_numpy(p), w0 * 0.8 * 0.8, rtol=1e-6)
    assert o.step_counter == 2


FUSED_CASES = {
    **{k: FORMULA_CASES[k][0] for k in FORMULA_CASES if k.startswith(("sgd", "adam"))},
    "sgd_schedule": lambda: opt.SGD(opt.ExponentialDecay(0.1, 3, 0.6), momentum=0.9, dampening=0.1),
    "adam_schedule": lambda: opt.Adam(opt.CosineDecay(0.02, 4, warmup_steps=2), weight_decay=0.01),
    "adamw_schedule": lambda: opt.AdamW(opt.StepDecay(0.05, 2), beta_1=0.8, weight_decay=0.1),
}


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("case", sorted(FUSED_CASES))
def test_fused_update_is_the_op_sequence_bit_for_bit(dev, case, dtype, monkeypatch):
    """On CuPy, SGD and Adam/AdamW update a float32/float64 param in one kernel; switching the
    kernels off (SINGA_LITE_RAW_KERNELS=0) runs the op-by-op sequence, which must give the
    same bits. NumPy and float16 run the sequence either way."""
    from singa_lite.backend import cupy_kernels

    launches = []
    for kernel in ("sgd_update", "adam_update"):
        fn = getattr(cupy_kernels, kernel)
        monkeypatch.setattr(cupy_kernels, kernel, lambda *a, fn=fn, **k: launches.append(1) or fn(*a, **k))
    results = []
    for switch in ("1", "0"):
        monkeypatch.setenv("SINGA_LITE_RAW_KERNELS", switch)
        o = FUSED_CASES[case]()
        p = param((P0 * 3).astype(dtype), dev)
        with np.errstate(all="ignore"):  # float16 Adam: epsilon 1e-8 is 0 there
            for g in grads_for(P0.shape, 6, seed=7):
                o.apply("w", p, tensor.Tensor(data=g.astype(dtype), device=dev, requires_grad=False))
                o.step()
        slots = [tensor.to_numpy(getattr(o, s)["w"]) for s in o.slot_names if "w" in getattr(o, s)]
        results.append([tensor.to_numpy(p), *slots])
    for fused, plain in zip(*results):
        assert fused.dtype == plain.dtype == dtype
        assert fused.tobytes() == plain.tobytes(), f"{case}: fused {fused} != op by op {plain}"
    assert len(launches) == (6 if dev.is_gpu() and dtype != np.float16 else 0)


def test_update_runs_as_one_recorded_step(monkeypatch):
    # Model's graph mode replays what goes through autograd.run_step: the whole update.
    steps = []
    monkeypatch.setattr(autograd, "run_step", lambda fn, *args: steps.append(args) or fn(*args))
    autograd.training = True
    p = param(np.ones(2, np.float32))
    loss = p * p
    opt.Adam(0.1)(loss)
    assert len(steps) == 1 and steps[0][0] is loss


def test_update_alias_uses_param_name():
    p = param(np.ones(2, np.float32), name="layer.W")
    o = opt.SGD(0.5, momentum=0.5)
    o.update(p, tensor.Tensor(data=np.ones(2, np.float32), requires_grad=False))
    assert list(o.moments) == ["layer.W"]
    np.testing.assert_array_equal(tensor.to_numpy(p), [0.5, 0.5])


# -- schedules ---------------------------------------------------------------------------------
def test_schedule_values():
    assert [opt.Constant(0.3).value(s) for s in (0, 7)] == [0.3, 0.3]
    e = opt.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    assert e.value(0) == 0.1
    assert e.value(5) == pytest.approx(0.1 * 0.5**0.5, rel=1e-15)
    assert e.value(20) == pytest.approx(0.025, rel=1e-15)
    s = opt.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5, staircase=True)
    assert [s.value(i) for i in (0, 9, 10, 25)] == pytest.approx([0.1, 0.1, 0.05, 0.025], rel=1e-15)
    st = opt.StepDecay(1.0, step_size=3, gamma=0.1)
    assert [st.value(i) for i in (0, 2, 3, 6)] == pytest.approx([1.0, 1.0, 0.1, 0.01], rel=1e-15)
    c = opt.CosineDecay(1.0, decay_steps=4, alpha=0.2)
    assert [c.value(i) for i in (0, 2, 4, 9)] == pytest.approx([1.0, 0.6, 0.2, 0.2], rel=1e-15)
    w = opt.CosineDecay(1.0, decay_steps=4, warmup_steps=2)
    assert [w.value(i) for i in (0, 1, 2, 4, 6, 10)] == pytest.approx(
        [0.0, 0.5, 1.0, 0.5, 0.0, 0.0], abs=1e-15
    )


def test_schedule_accepts_tensor_step_as_singa_does():
    step = tensor.Tensor(data=np.array([20.0], np.float32), requires_grad=False)
    assert opt.ExponentialDecay(0.1, 10, 0.5).value(step) == pytest.approx(0.025)


def test_schedule_call_returns_a_tensor_as_singa_does():
    step = tensor.Tensor((1,))
    step.set_value(20)
    lr = opt.ExponentialDecay(0.1, 10, 0.5)(step)
    assert isinstance(lr, tensor.Tensor) and lr.shape == (1,) and lr.dtype == tensor.float32
    np.testing.assert_allclose(tensor.to_numpy(lr), [0.025], rtol=1e-6)
    assert lr.device == step.device
    assert float(opt.Constant(0.3)(7)) == pytest.approx(0.3)


@pytest.mark.parametrize(
    "sched",
    [
        opt.Constant(0.3),
        opt.ExponentialDecay(0.1, 7, 0.5, staircase=True),
        opt.StepDecay(0.2, 3, 0.5),
        opt.CosineDecay(0.1, 100, alpha=0.01, warmup_steps=5),
    ],
    ids=lambda s: type(s).__name__,
)
def test_schedule_states_round_trip(sched):
    states = json.loads(json.dumps(sched.get_states()))
    assert states["type"] == type(sched).__name__
    fresh = opt.DecayScheduler.from_states(states)
    assert type(fresh) is type(sched)
    assert [fresh.value(i) for i in range(0, 120, 7)] == [sched.value(i) for i in range(0, 120, 7)]
    same_kind = type(sched)(**{**{k: v for k, v in states.items() if k != "type"}, "init_value": 9.0})
    same_kind.set_states(states)
    assert same_kind.value(13) == sched.value(13)


def test_optimizer_follows_schedule():
    o = opt.SGD(opt.StepDecay(1.0, step_size=2, gamma=0.5))
    p = param(np.zeros(1))
    values = []
    for _ in range(5):
        values.append(o.lr_value)
        o.apply("w", p, tensor.Tensor(data=np.ones(1), requires_grad=False))
        o.step()
    assert values == [1.0, 1.0, 0.5, 0.5, 0.25]
    assert tensor.to_numpy(p)[0] == -sum(values)


def test_lr_can_be_reassigned():
    o = opt.SGD(opt.StepDecay(1.0, 2))
    o.lr = 0.25
    assert isinstance(o.lr, opt.Constant) and o.lr_value == 0.25
    o.set_states({"step_counter": np.array([3.0], np.float32)})  # SINGA's one-element counter
    assert o.step_counter == 3


def test_schedule_errors():
    with pytest.raises(SingaLiteError, match="decay_steps"):
        opt.ExponentialDecay(0.1, 0, 0.5)
    with pytest.raises(SingaLiteError, match="step_size"):
        opt.StepDecay(0.1, 1.5)
    with pytest.raises(SingaLiteError, match="init_value"):
        opt.Constant(float("nan"))
    with pytest.raises(SingaLiteError, match="step"):
        opt.Constant(0.1)(-1)
    with pytest.raises(SingaLiteError, match="unknown schedule type 'Linear'"):
        opt.DecayScheduler.from_states({"type": "Linear", "init_value": 0.1})
    with pytest.raises(SingaLiteError, match="bad StepDecay"):
        opt.DecayScheduler.from_states({"type": "StepDecay", "init_value": 0.1, "steps": 3})
    with pytest.raises(SingaLiteError, match="cannot load StepDecay"):
        opt.Constant(0.1).set_states(opt.StepDecay(0.1, 2).get_states())


# -- states ------------------------------------------------------------------------------------
STATE_CASES = {
    "sgd": lambda: opt.SGD(opt.ExponentialDecay(0.1, 4, 0.5), momentum=0.9, weight_decay=0.01, nesterov=True),
    "adam": lambda: opt.Adam(opt.CosineDecay(0.01, 10, warmup_steps=2), weight_decay=0.01),
    "adamw": lambda: opt.AdamW(opt.StepDecay(0.01, 2)),
    "adagrad": lambda: opt.AdaGrad(0.1, weight_decay=0.01),
    "rmsprop": lambda: opt.RMSProp(0.01, rho=0.9),
}


def _two_params(dev):
    rng = np.random.default_rng(3)
    return {
        n: param(rng.standard_normal(s).astype(np.float32), dev, n) for n, s in (("a", (2, 3)), ("b", (4,)))
    }


def _steps(o, params, grads):
    for gs in grads:
        for name, p in params.items():
            o.apply(name, p, tensor.Tensor(data=gs[name], device=p.device, requires_grad=False))
        o.step()


@pytest.mark.parametrize("case", sorted(STATE_CASES))
def test_states_round_trip_is_bitwise(dev, case):
    rng = np.random.default_rng(4)
    shapes = {"a": (2, 3), "b": (4,)}
    grads = [{n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()} for _ in range(6)]
    o, params = STATE_CASES[case](), _two_params(dev)
    _steps(o, params, grads[:3])
    states = o.get_states()
    saved = {n: tensor.to_numpy(p) for n, p in params.items()}
    _steps(o, params, grads[3:])

    # The JSON-able part survives JSON; slots are Tensors keyed by param name.
    scalars = {k: v for k, v in states.items() if k not in o.slot_names}
    assert json.loads(json.dumps(scalars)) == scalars
    assert states["step_counter"] == 3
    for slot in o.slot_names:
        assert sorted(states[slot]) == ["a", "b"]
        assert all(isinstance(t, tensor.Tensor) for t in states[slot].values())

    fresh = type(o)(lr=0.5)  # other hyperparameters and schedule: set_states must restore them
    fresh.set_states(states)
    resumed = {n: param(a, dev, n) for n, a in saved.items()}
    _steps(fresh, resumed, grads[3:])
    assert fresh.step_counter == o.step_counter == 6
    for n in params:
        np.testing.assert_array_equal(tensor.to_numpy(resumed[n]), tensor.to_numpy(params[n]))
    assert fresh.get_states()["hyperparams"] == o.get_states()["hyperparams"]


def test_get_states_is_a_snapshot():
    o, p = opt.Adam(0.1), param(np.ones(3, np.float32))
    o.apply("w", p, tensor.Tensor(data=np.ones(3, np.float32), requires_grad=False))
    states = o.get_states()
    m = tensor.to_numpy(states["m"]["w"])
    o.apply("w", p, tensor.Tensor(data=np.full(3, 5.0, np.float32), requires_grad=False))
    np.testing.assert_array_equal(tensor.to_numpy(states["m"]["w"]), m)
    states["m"]["w"].set_value(7.0)
    o.set_states(states)
    states["m"]["w"].set_value(0.0)  # the optimizer holds its own copy
    assert float(o.m["w"][0]) == 7.0


def test_loaded_numpy_slots_move_to_param_device_and_dtype(dev):
    o = opt.SGD(0.1, momentum=0.5)
    # SINGA's own states: step counter as a float32 scalar, float64 host arrays, nothing else.
    o.set_states({"step_counter": np.float32(4), "moments": {"w": np.full(3, 2.0)}})
    assert o.step_counter == 4
    p = param(np.zeros(3, np.float32), dev)
    o.apply("w", p, tensor.Tensor(data=np.ones(3, np.float32), device=dev, requires_grad=False))
    buf = o.moments["w"]
    assert buf.dtype == np.float32 and type(buf) is type(p.data)
    np.testing.assert_allclose(tensor.to_numpy(p), -0.1 * (0.5 * 2.0 + 1.0) * np.ones(3))


def test_state_errors():
    o = opt.SGD(0.1, momentum=0.9)
    with pytest.raises(StateMismatchError, match="Adam optimizer states into SGD"):
        o.set_states(opt.Adam().get_states())
    with pytest.raises(StateMismatchError, match=r"unexpected keys \['m'\]"):
        o.set_states({"step_counter": 1, "m": {}})
    with pytest.raises(StateMismatchError, match="step_counter missing"):
        o.set_states({"moments": {}})
    with pytest.raises(StateMismatchError, match="unknown hyperparameters"):
        o.set_states({"step_counter": 1, "hyperparams": {"beta_1": 0.9}})
    with pytest.raises(SingaLiteError, match="Nesterov"):
        o.set_states({"step_counter": 1, "hyperparams": {"nesterov": True, "momentum": 0.0}})
    assert o.momentum == 0.9 and o.step_counter == 0  # a failed load changes nothing
    o.set_states({"step_counter": 2, "moments": {"w": np.zeros((2, 2), np.float32)}})
    with pytest.raises(StateMismatchError, match=r"moments\['w'\] has shape \(2, 2\)"):
        o.apply(
            "w",
            param(np.zeros(3, np.float32)),
            tensor.Tensor(data=np.ones(3, np.float32), requires_grad=False),
        )


# -- argument and parameter errors -------------------------------------------------------------
def test_unnamed_param_gets_a_name_and_keeps_its_slots():
    """As in SINGA: a bare tensor trained by opt(loss) has a unique Dummy#N name, so its
    momentum persists across steps; apply() with no name at all is still an error."""
    p = param(np.ones(2, np.float32), name=None)
    with pytest.raises(SingaLiteError, match=r"param_name is None"):
        opt.Adam().apply(None, p, tensor.Tensor(data=np.ones(2, np.float32), requires_grad=False))
    autograd.training = True
    sgd = opt.SGD(0.1, momentum=0.5)
    sgd(p * p)  # grad 2p = 2: buf = 2, p = 1 - 0.2
    assert p.name.startswith("Dummy#") and set(sgd.moments) == {p.name}
    sgd(p * p)  # grad 1.6: buf = 0.5 * 2 + 1.6 = 2.6, p = 0.8 - 0.26
    np.testing.assert_allclose(tensor.to_numpy(p), [0.54, 0.54], rtol=1e-6)


def test_bad_arguments():
    with pytest.raises(SingaLiteError, match="Nesterov"):
        opt.SGD(0.1, nesterov=True)
    with pytest.raises(SingaLiteError, match="Nesterov"):
        opt.SGD(0.1, momentum=0.9, dampening=0.1, nesterov=True)
    with pytest.raises(SingaLiteError, match="momentum"):
        opt.SGD(0.1, momentum=-0.1)
    with pytest.raises(SingaLiteError, match="lr"):
        opt.Adam(-0.001)
    with pytest.raises(TypeError, match="DecayScheduler"):
        opt.SGD("0.1")
    with pytest.raises(SingaLiteError, match="beta_2"):
        opt.Adam(beta_2=1.0)
    with pytest.raises(SingaLiteError, match="rho"):
        opt.RMSProp(rho=1.5)
    with pytest.raises(SingaLiteError, match="epsilon"):
        opt.AdaGrad(epsilon=float("inf"))
    with pytest.raises(DTypeError):
        opt.SGD(0.1, dtype=np.complex64)


def test_bad_params():
    p = param(np.ones(3, np.float32))
    with pytest.raises(ShapeError, match=r"gradient shape \(2,\)"):
        opt.SGD(0.1).apply("w", p, tensor.Tensor(data=np.ones(2, np.float32), requires_grad=False))
    q = param(np.ones(3, np.int32))
    with pytest.raises(DTypeError, match="int32"):
        opt.Adam().apply("q", q, tensor.Tensor(data=np.ones(3, np.int32), requires_grad=False))

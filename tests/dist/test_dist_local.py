"""singa_lite.dist in one process: discovery, fusion plans, sparsification, DistOpt as a world of one."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from dist_helpers import build, digits_flat, params_of

from singa_lite import DistributedError, OptimizerError, dist, opt, tensor
from singa_lite.dist import buckets, communicator


# -- discovery ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "expect"),
    [
        (
            {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
            (3, 4, 1, "openmpi"),
        ),
        ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}, (1, 2, 1, "hydra")),
        ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}, (5, 8, 1, "slurm")),
        ({"RANK": "2", "WORLD_SIZE": "4"}, (2, 4, 0, "torchrun")),
        ({"PATH": "/bin"}, (0, 1, 0, None)),
    ],
)
def test_detect_world(env: dict, expect: tuple) -> None:
    info = dist.detect_world(env)
    assert (info.global_rank, info.world_size, info.local_rank, info.launcher) == expect
    assert info.launched == (expect[3] is not None)


def test_launch_command_uses_the_mpi4py_wrapper() -> None:
    pytest.importorskip("mpi4py", reason="needs the dist extra (mpi4py)")
    cmd = dist.launch_command(2, "pkg.mod", "--x", module=True)
    assert cmd[1:3] == ["-n", "2"] and cmd[3] == sys.executable
    assert cmd[4:] == ["-m", "mpi4py", "-m", "pkg.mod", "--x"]
    assert dist.launch_env({})["OMP_NUM_THREADS"] == "1"


def test_importing_opt_and_dist_does_not_import_mpi4py() -> None:
    code = "import sys, singa_lite.opt as o, singa_lite.dist; o.DistOpt; assert 'mpi4py' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_launcher_with_a_foreign_mpi_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    class Singleton:  # what mpi4py sees when a different MPI's launcher started it
        world_size, global_rank, local_rank = 1, 0, 0

        def __init__(self) -> None: ...

    monkeypatch.setattr(communicator, "_world", None)
    monkeypatch.setattr(communicator, "MPICommunicator", Singleton)
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "2")
    with pytest.raises(DistributedError, match="different MPI"):
        dist.get_communicator()


# -- fusion plans and buckets --------------------------------------------------------------------------------
def test_plan_groups_follows_singa() -> None:
    f, d = np.float32, np.float64
    # large alone; small ones fused until they pass the threshold
    assert buckets.plan_groups([(3, f), (10, f), (3, f), (3, f), (1, f)], 5, 100) == [[1], [0, 2], [3, 4]]
    # a dtype change or a full buffer closes the pending group
    assert buckets.plan_groups([(2, f), (2, d), (2, d)], 5, 100) == [[0], [1, 2]]
    assert buckets.plan_groups([(4, f), (4, f), (4, f)], 10, 6) == [[0], [1], [2]]
    assert buckets.plan_groups([], 5, 10) == []
    with pytest.raises(ValueError):
        buckets.plan_groups([(1, f)], 5, 0)


def test_bucket_pack_views_unpack() -> None:
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([7.0, 8.0], np.float32)
    bucket = buckets.Bucket(np, np.float32, [a.shape, b.shape])
    np.testing.assert_array_equal(bucket.pack([a, b[::-1]]), [0, 1, 2, 3, 4, 5, 8, 7])
    v = bucket.views()
    np.testing.assert_array_equal(v[0], a)
    bucket.buf *= 2
    out = [np.zeros_like(a), np.zeros_like(b)]
    bucket.unpack_into(out)
    np.testing.assert_array_equal(out[1], [16, 14])


def test_select_sparse() -> None:
    v = np.array([0.5, -3.0, 0.01, 2.0, -0.2], np.float32)
    np.testing.assert_array_equal(buckets.select_sparse(np, v, 0.5, top_k=False), [0, 1, 3])
    assert sorted(buckets.select_sparse(np, v, 0.4, top_k=True).tolist()) == [1, 3]  # int(0.4 * 5) = 2
    assert buckets.select_sparse(np, v, 1e-6, top_k=True).tolist() == [1]  # at least one
    assert sorted(buckets.select_sparse(np, v, 1.0, top_k=True).tolist()) == [0, 1, 2, 3, 4]


def test_describe_mismatch_names_the_first_difference() -> None:
    a = (("w", (2, 3), "float32"), ("b", (3,), "float32"))
    b = (("w", (2, 4), "float32"), ("b", (3,), "float32"))
    assert "rank 0 has 'w' (2, 3) float32 where rank 1 has 'w' (2, 4)" in buckets.describe_mismatch([a, b])
    assert "rank 0 has 2 arrays and rank 1 has 1" in buckets.describe_mismatch([a, a[:1]])


# -- the single-process communicator ------------------------------------------------------------------
def test_single_process_communicator() -> None:
    c = dist.SingleProcessCommunicator()
    a = np.array([1.0, 1e-4 + 1.0], np.float32)
    c.all_reduce(a)
    np.testing.assert_array_equal(a, np.array([1.0, 1e-4 + 1.0], np.float32))
    c.all_reduce_half(a)
    np.testing.assert_array_equal(a, [1.0, 1.0])  # rounded to float16 as on the wire
    assert c.all_gather(a).shape == (1, 2)
    assert c.all_gather_v(a)[1] == [2]
    assert c.all_gather_object({"x": 1}) == [{"x": 1}]
    with pytest.raises(DistributedError, match="C-contiguous"):
        c.all_reduce(np.zeros((3, 3), np.float32)[:, 0])
    with pytest.raises(DistributedError, match="bool"):
        c.all_reduce(np.zeros(3, bool))
    with pytest.raises(DistributedError, match="root rank 1"):
        c.broadcast(a, root=1)


# -- DistOpt as a world of one ------------------------------------------------------------------------
def _train(optimizer: object, graph: bool, call: str = "plain", steps: int = 4, **kw: object) -> dict:
    x, y = digits_flat()
    m, tx, ty = build(batch=16, seed=3, graph=graph)
    m.set_optimizer(optimizer)
    for step in range(steps):
        tx.copy_from_numpy(x[16 * step : 16 * (step + 1)])
        ty.copy_from_numpy(y[16 * step : 16 * (step + 1)])
        if call == "plain":
            m(tx, ty)
        else:  # call a DistOpt path directly from an eager step
            out = m.forward(tx)
            getattr(optimizer, call)(m.loss(out, ty), **kw)
    return params_of(m)


@pytest.mark.parametrize("graph", [False, True])
def test_distopt_of_one_equals_the_plain_optimizer(graph: bool) -> None:
    ref = _train(opt.Adam(lr=0.01), graph)
    got = _train(opt.DistOpt(opt.Adam(lr=0.01), buffSize=500), graph)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)


@pytest.mark.parametrize(
    ("call", "kw"),
    [
        ("backward_and_partial_update", {"threshold": 100}),
        ("backward_and_sparse_update", {"spars": 1.0, "topK": True}),  # every entry: dense
        ("backward_and_sparse_update", {"spars": 1e-30, "topK": False}),
    ],
)
def test_distopt_paths_of_one_equal_plain_when_nothing_is_dropped(call: str, kw: dict) -> None:
    from singa_lite import autograd

    autograd.training = True
    ref = _train(opt.SGD(lr=0.1, momentum=0.9), graph=False)
    got = _train(opt.DistOpt(opt.SGD(lr=0.1, momentum=0.9)), graph=False, call=call, **kw)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-7, err_msg=k)


def _toy_sparse(corr: bool, top_k: bool, spars: float, steps: int = 3) -> np.ndarray:
    """w with the constant gradient c = [1, 0.5, 2.2]; SGD with lr 1: w moves by minus what was sent."""
    from singa_lite import autograd

    autograd.training = True
    w = tensor.Tensor(data=np.zeros(3, np.float32), requires_grad=False)
    w.requires_grad, w.stores_grad, w.name = True, True, "w"
    c = tensor.Tensor(data=np.array([1.0, 0.5, 2.2], np.float32), requires_grad=False)
    c.requires_grad = False
    d = opt.DistOpt(opt.SGD(lr=1.0))
    for _ in range(steps):
        d.backward_and_sparse_update(
            autograd.reduce_sum(autograd.mul(w, c)), spars=spars, topK=top_k, corr=corr
        )
    return -tensor.to_numpy(w)


def test_sparse_update_residual_correction() -> None:
    # |accumulated| >= 1.5: sends [0,0,2.2], [2,0,2.2], [0,1.5,2.2]; the residual keeps the rest
    np.testing.assert_allclose(_toy_sparse(corr=True, top_k=False, spars=1.5), [2.0, 1.5, 6.6], rtol=1e-6)
    np.testing.assert_allclose(_toy_sparse(corr=False, top_k=False, spars=1.5), [0.0, 0.0, 6.6], rtol=1e-6)
    # top-1 (int(0.2 * 3) = 0, so one entry): accumulations [1,.5,2.2], [2,1,2.2], [3,1.5,2.2]
    np.testing.assert_allclose(_toy_sparse(corr=True, top_k=True, spars=0.2), [3.0, 0.0, 4.4], rtol=1e-6)
    np.testing.assert_allclose(_toy_sparse(corr=False, top_k=True, spars=0.2), [0.0, 0.0, 6.6], rtol=1e-6)


def test_distopt_delegates_states_and_checks_arguments() -> None:
    sgd = opt.SGD(lr=0.1, momentum=0.9)
    d = opt.DistOpt(sgd)
    assert (d.world_size, d.global_rank, d.local_rank) == (1, 0, 0)
    _train(d, graph=False, steps=2)
    assert d.step_counter == 2 and d.get_states()["step_counter"] == 2
    d.set_states({**sgd.get_states(), "step_counter": 7})
    assert sgd.step_counter == 7
    d.step_counter = 5  # graph mode sets it back after capturing a step
    assert sgd.step_counter == 5
    with pytest.raises(TypeError, match="DistOpt: opt must be an optimizer to wrap"):
        opt.DistOpt("sgd")  # type: ignore[arg-type]
    with pytest.raises(OptimizerError, match="buffSize"):
        opt.DistOpt(sgd, buffSize=0)
    with pytest.raises(DistributedError, match="world_size=2"):
        opt.DistOpt(sgd, world_size=2)
    with pytest.raises(OptimizerError, match="spars"):
        d.backward_and_sparse_update(tensor.zeros((1,)), spars=0)


def test_all_reduce_helpers_and_broadcast_in_one_process() -> None:
    d = opt.DistOpt(opt.SGD(lr=0.1))
    t = tensor.Tensor(data=np.arange(4, dtype=np.float32), requires_grad=False)
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1]
    d.all_reduce(t)
    d.fused_all_reduce([t, tensor.Tensor(data=np.ones(2, np.float32), requires_grad=False)])
    d.fused_all_reduce_half([strided])  # a strided array goes through a packed buffer
    np.testing.assert_array_equal(tensor.to_numpy(t), np.arange(4))
    np.testing.assert_array_equal(strided, [1, 5, 9])
    with pytest.raises(DistributedError, match="one dtype"):
        d.fused_all_reduce([t, np.zeros(2, np.float64)])
    m, _, _ = build(batch=4, seed=0, graph=False)
    before = params_of(m)
    d.broadcast_params(m)
    d.wait()
    d.barrier()
    for k, v in params_of(m).items():
        np.testing.assert_array_equal(v, before[k])

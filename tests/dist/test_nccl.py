"""NCCL on CuPy arrays: a one-rank clique (NCCL refuses two ranks on one GPU), where a GPU exists."""

from __future__ import annotations

import numpy as np
import pytest
from dist_helpers import build, digits_flat, params_of

from singa_lite import DistributedError, device, opt
from singa_lite.dist import NcclCommunicator, nccl_unique_id


def _no_gpu() -> str:
    if device.get_num_gpus() > 0:
        return ""
    from singa_lite.backend import cupy as cupy_backend

    return f"needs a CUDA GPU with NCCL: {cupy_backend.UNAVAILABLE_REASON}"


needs_gpu = pytest.mark.skipif(bool(_no_gpu()), reason=_no_gpu() or "gpu available")


def test_nccl_without_a_gpu_says_why() -> None:
    if not _no_gpu():
        pytest.skip("a GPU is present: this checks the error where there is none")
    with pytest.raises(DistributedError, match="NCCL needs a CUDA GPU"):
        nccl_unique_id()
    with pytest.raises(DistributedError, match="NCCL needs a CUDA GPU"):
        opt.DistOpt(opt.SGD(lr=0.1), nccl_id=b"x", world_size=1, local_rank=0)


@needs_gpu
def test_one_rank_nccl_collectives() -> None:
    dev = device.create_cuda_gpu()
    cp = dev.xp
    nc = NcclCommunicator(1, nccl_unique_id(), 0)
    a = cp.arange(6, dtype=cp.float32)
    nc.all_reduce(a)
    h = cp.asarray([1.0, 1.0001], dtype=cp.float32)
    nc.all_reduce_half(h)
    nc.broadcast(a, root=0)
    g, counts = nc.all_gather_v(cp.arange(3, dtype=cp.int32))
    nc.wait()
    np.testing.assert_array_equal(cp.asnumpy(a), np.arange(6))
    np.testing.assert_array_equal(cp.asnumpy(h), [1.0, 1.0])  # float16 on the wire
    assert counts == [3] and cp.asnumpy(g).tolist() == [0, 1, 2]
    assert nc.all_gather_object("x") == ["x"]
    with pytest.raises(DistributedError, match="cupy arrays"):
        nc.all_reduce(np.zeros(3, np.float32))


@needs_gpu
@pytest.mark.parametrize("graph", [False, True])
def test_distopt_trains_on_nccl(graph: bool) -> None:
    dev = device.create_cuda_gpu()
    old = device.get_default_device()
    device.set_default_device(dev)
    try:
        x, y = digits_flat()

        def train(optimizer: object) -> dict:
            m, tx, ty = build(batch=16, seed=1, graph=graph)
            m.set_optimizer(optimizer)
            for step in range(4):
                tx.copy_from_numpy(x[16 * step : 16 * (step + 1)])
                ty.copy_from_numpy(y[16 * step : 16 * (step + 1)])
                m(tx, ty)
            return params_of(m)

        ref = train(opt.SGD(lr=0.1, momentum=0.9))
        # SINGA's constructor for one process per GPU: an nccl_id and the ranks
        got = train(
            opt.DistOpt(opt.SGD(lr=0.1, momentum=0.9), nccl_id=nccl_unique_id(), local_rank=0, world_size=1)
        )
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-7, err_msg=k)
    finally:
        device.set_default_device(old)

"""Two-rank MPI jobs: collectives, equivalence with one process, failures, checkpoints.

Each test launches ``mpiexec -n 2 python -m mpi4py mpi_worker.py <scenario>`` (about a second
per job) and skips, with the reason, when the dist extra (mpi4py + an mpiexec) is missing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from dist_helpers import CONFIGS, STEPS, build, digits_flat

from singa_lite import dist, tensor

HERE = Path(__file__).parent
WORKER = HERE / "mpi_worker.py"


def _mpi_missing() -> str:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "needs the dist extra: mpi4py is not installed (pip install 'singa_lite[dist]')"
    try:
        dist.find_mpiexec()
    except FileNotFoundError as e:
        return str(e)
    return ""


pytestmark = pytest.mark.skipif(bool(_mpi_missing()), reason=_mpi_missing() or "mpi available")


def launch(*args: str, timeout: float = 60, cwd: Path = HERE) -> subprocess.CompletedProcess:
    """Run a two-rank job; the timeout turns a hang into a failure instead of a stuck suite."""
    cmd = dist.launch_command(2, *args)
    return subprocess.run(
        cmd, env=dist.launch_env(), cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def run_ok(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    proc = launch(*args, timeout=timeout)
    assert proc.returncode == 0, f"job failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_collectives_on_two_ranks(tmp_path: Path) -> None:
    proc = run_ok(str(WORKER), "collectives", str(tmp_path))
    assert proc.stdout.count("collectives ok") == 2


# -- DistOpt equals one process on the concatenated batches ------------------------------------------
@pytest.fixture(scope="module")
def exact_run(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, np.ndarray]]:
    out = tmp_path_factory.mktemp("exact")
    run_ok(str(WORKER), "exact", str(out))
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(2)]


def reference(name: str, init: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One process, one optimizer, each step on both ranks' batches concatenated."""
    make_opt = CONFIGS[name][2]
    x, y = digits_flat()
    m, tx, ty = build(batch=32, seed=0, graph=False)
    m.set_params(init)
    m.set_optimizer(make_opt())
    for step in range(STEPS):
        tx.copy_from_numpy(x[step * 32 : (step + 1) * 32])
        ty.copy_from_numpy(y[step * 32 : (step + 1) * 32])
        m(tx, ty)  # the plain optimizer: opt(loss)
    return {k: tensor.to_numpy(v) for k, v in m.get_params().items()}


def split(result: dict[str, np.ndarray], name: str, part: str) -> dict[str, np.ndarray]:
    prefix = f"{name}/{part}/"
    return {k[len(prefix) :]: v for k, v in result.items() if k.startswith(prefix)}


@pytest.mark.parametrize("name", ["sgd_eager", "adam_graph_fused"])
def test_backward_and_update_matches_one_process(exact_run: list, name: str) -> None:
    rank0, rank1 = (split(r, name, "final") for r in exact_run)
    init0, init1 = (split(r, name, "init") for r in exact_run)
    for k in init0:  # different seeds, made identical by broadcast_params
        np.testing.assert_array_equal(init0[k], init1[k], err_msg=k)
    ref = reference(name, init0)
    assert sorted(ref) == sorted(rank0)
    for k in ref:
        np.testing.assert_array_equal(rank0[k], rank1[k], err_msg=f"ranks differ at {k}")
        np.testing.assert_allclose(rank0[k], ref[k], rtol=1e-5, atol=1e-5, err_msg=k)
        assert not np.allclose(rank0[k], init0[k]), f"{k} did not train"


def test_backward_and_update_half_within_fp16_tolerance(exact_run: list) -> None:
    rank0, rank1 = (split(r, "sgd_half", "final") for r in exact_run)
    ref = reference("sgd_half", split(exact_run[0], "sgd_half", "init"))
    for k in ref:
        np.testing.assert_array_equal(rank0[k], rank1[k], err_msg=f"ranks differ at {k}")
        # float16 keeps 11 significant bits: ~5e-4 relative error per gradient per step.
        np.testing.assert_allclose(rank0[k], ref[k], rtol=1e-3, atol=2e-4, err_msg=k)


# -- failures --------------------------------------------------------------------------------------------
def test_exception_on_one_rank_ends_the_job(tmp_path: Path) -> None:
    # The healthy rank waits in a collective: without the abort it would hang until the
    # timeout, which fails the test. No wall-clock bound beyond that (the machine is shared).
    proc = launch(str(WORKER), "fail", str(tmp_path), timeout=60)
    assert proc.returncode != 0
    assert "deliberate failure on rank 1" in (tmp_path / "rank1.stderr").read_text()


def test_exception_ends_the_job_without_the_mpi4py_wrapper(tmp_path: Path) -> None:
    """dist.get_communicator() installs an excepthook that aborts the job, as -m mpi4py does."""
    import sys

    cmd = [dist.find_mpiexec(), "-n", "2", sys.executable, str(WORKER), "fail", str(tmp_path)]
    proc = subprocess.run(cmd, env=dist.launch_env(), cwd=HERE, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    err = (tmp_path / "rank1.stderr").read_text()
    assert "deliberate failure on rank 1" in err
    assert "[rank 1] uncaught RuntimeError: aborting the MPI job" in err


def test_mismatched_shapes_raise_on_every_rank(tmp_path: Path) -> None:
    proc = run_ok(str(WORKER), "mismatch", str(tmp_path))
    out = proc.stdout  # the ranks' lines may interleave
    assert "rank 0: DistributedError" in out and "rank 1: DistributedError" in out, out
    assert out.count("rank 0 has 'fc2.W' (32, 10) float32 where rank 1 has 'fc2.W' (48, 10) float32") == 2, (
        out
    )


def test_checkpoint_rank0_writes_and_all_ranks_resume_identically(tmp_path: Path) -> None:
    checkpoint = pytest.importorskip("singa_lite.checkpoint")
    if not hasattr(checkpoint, "save_model_states"):
        pytest.skip("singa_lite.checkpoint has no save_model_states yet (Model.save_states needs it)")
    proc = run_ok(str(WORKER), "checkpoint", str(tmp_path))
    assert proc.stdout.count("checkpoint ok") == 2
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]
    for k in ranks[0].files:
        np.testing.assert_array_equal(ranks[0][k], ranks[1][k], err_msg=k)


# -- the example: partial and sparse updates train the demo CNN ---------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    ("option", "extra"),
    [("partialUpdate", []), ("sparseTopK", ["--spars", "0.05"]), ("sparseThreshold", ["--spars", "0.01"])],
)
def test_example_trains_demo_cnn(tmp_path: Path, option: str, extra: list[str]) -> None:
    script = HERE.parents[1] / "examples" / "dist" / "train_mpi.py"
    result = tmp_path / "result.json"
    run_ok(str(script), "--dist-option", option, "--epochs", "4", "--json", str(result), *extra, timeout=90)
    import json

    report = json.loads(result.read_text())
    assert report["world_size"] == 2
    assert min(report["test_acc"]) >= 0.90, report

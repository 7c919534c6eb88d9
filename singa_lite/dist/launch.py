"""Who am I in the job: launcher discovery from the environment, and the launch command.

``mpiexec -n N python -m mpi4py train.py`` starts N copies of a script; each copy learns its
rank from variables the launcher sets. Reading them first lets a script that was started
without a launcher run as one process without ever initialising MPI.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from singa_lite import _args

# (launcher, rank variable, size variable, local-rank variable), most specific first: srun
# started under Slurm sets both the Slurm and the PMI variables, and so does Hydra.
_LAUNCHER_VARS = (
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
)


@dataclass(frozen=True)
class WorldInfo:
    """This process's place in the job, as the launcher announced it."""

    global_rank: int
    world_size: int
    local_rank: int
    launcher: str | None  # None: no launcher, a single process

    @property
    def launched(self) -> bool:
        return self.launcher is not None


def detect_world(environ: Mapping[str, str] | None = None) -> WorldInfo:
    """Rank, world size and local rank from the launcher's variables; ``(0, 1, 0, None)`` without one.

    >>> detect_world({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"})
    WorldInfo(global_rank=1, world_size=2, local_rank=1, launcher='hydra')
    >>> detect_world({}).launched
    False
    """
    env = os.environ if environ is None else environ
    for name, rank_var, size_var, local_var in _LAUNCHER_VARS:
        if rank_var in env and size_var in env:
            rank, size = int(env[rank_var]), int(env[size_var])
            # Without a local-rank variable every rank is assumed to have a node to itself.
            local = int(env.get(local_var, "0"))
            return WorldInfo(rank, size, local, name)
    return WorldInfo(0, 1, 0, None)


def find_mpiexec() -> str:
    """The ``mpiexec`` to launch with: the one installed next to this Python first.

    A launcher from a different MPI than mpi4py's starts N independent singletons that each
    see a world of size 1, so the one the ``mpich`` wheel put in this environment wins.
    """
    beside = Path(sys.executable).with_name("mpiexec")
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if found is None:
        raise FileNotFoundError(
            "no mpiexec found: install the dist extra (`pip install singa_lite[dist]`, "
            "which brings mpi4py and the mpich wheel with its mpiexec)"
        )
    return found


def launch_command(n: int, *args: str, module: bool = False) -> list[str]:
    """``mpiexec -n n python -m mpi4py <args>``: the command that starts ``n`` ranks.

    ``-m mpi4py`` turns an uncaught exception on one rank into ``MPI_Abort``, so the job ends
    instead of the other ranks waiting forever in their next collective. With ``module=True``
    ``args[0]`` is a module name (run as ``-m module``) rather than a script path.

    >>> launch_command(2, "train.py", "--epochs", "3")[-5:]
    ['-m', 'mpi4py', 'train.py', '--epochs', '3']
    """
    n = _args.count("launch_command", "n", n)
    target = ["-m", *args] if module else list(args)
    return [find_mpiexec(), "-n", str(n), sys.executable, "-m", "mpi4py", *target]


def launch_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of the environment with what an MPI launcher needs when run as root or oversubscribed.

    Open MPI refuses root and more ranks than cores unless told; MPICH needs nothing and
    ignores these variables.
    """
    env = dict(os.environ if environ is None else environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")
    # One BLAS thread per rank: N ranks on N cores each spinning N threads thrash.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env

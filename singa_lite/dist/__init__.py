"""Synchronous data-parallel training: communicators and ``DistOpt`` (DESIGN §6).

Run the same script on N processes with ``mpiexec -n N python -m mpi4py train.py``; wrap the
optimizer in :class:`DistOpt` and each rank trains on its shard of the data while the ranks'
parameters stay identical. Host (NumPy) arrays travel over MPI through mpi4py, GPU (CuPy)
arrays over NCCL. Installed by the ``dist`` extra (``mpi4py`` and the ``mpich`` wheel); without
a launcher a script runs as a world of one and mpi4py is never imported.

>>> from singa_lite import dist, opt
>>> sgd = dist.DistOpt(opt.SGD(lr=0.1))     # no launcher here: a world of one
>>> sgd.world_size, sgd.global_rank, sgd.local_rank
(1, 0, 0)
"""

from singa_lite.dist.checkpoint import load_states, save_states
from singa_lite.dist.communicator import (
    Communicator,
    MPICommunicator,
    SingleProcessCommunicator,
    get_communicator,
    import_mpi,
)
from singa_lite.dist.distopt import DistOpt
from singa_lite.dist.launch import WorldInfo, detect_world, find_mpiexec, launch_command, launch_env
from singa_lite.dist.nccl import NcclCommunicator, nccl_unique_id

__all__ = [
    "Communicator",
    "DistOpt",
    "MPICommunicator",
    "NcclCommunicator",
    "SingleProcessCommunicator",
    "WorldInfo",
    "detect_world",
    "find_mpiexec",
    "get_communicator",
    "import_mpi",
    "launch_command",
    "launch_env",
    "load_states",
    "nccl_unique_id",
    "save_states",
]

"""SINGA's build flags, answered for singa_lite (``from singa import singa_wrap``).

SINGA scripts read flags of their C++ build to choose a device or skip a test:
``if singa_wrap.USE_CUDA: dev = device.create_cuda_gpu()``. Here each flag says what
singa_lite can actually do in this process, found once when this module is imported:

- ``USE_CUDA``: CuPy imports and sees a usable GPU, so ``device.create_cuda_gpu()`` works.
- ``USE_NCCL``: ``USE_CUDA`` and CuPy can load NCCL, so ``DistOpt`` reduces GPU arrays.
- ``USE_DIST``: mpi4py is installed, so ``DistOpt`` runs on several processes
  (``mpiexec -n N python train.py``); without it a script runs as a world of one.
- ``USE_CUDNN``, ``USE_DNNL``/``USE_MKLDNN``, ``USE_OPENCL``: False. singa_lite has no
  cuDNN, oneDNN or OpenCL code paths of its own (its GPU ops are CuPy's and its own kernels).
- ``USE_PYTHON``, ``USE_PYTHON3``: True.

Nothing else is here: SINGA's C++ tensor and device bindings (``singa_wrap.Tensor``,
``singa_wrap.Mult`` ...) have no counterpart, and asking for one raises
``UnsupportedApiError``, which says what to use instead.

>>> from singa_lite import device, singa_wrap
>>> singa_wrap.USE_CUDA == (device.get_num_gpus() > 0)
True
"""

from __future__ import annotations

import importlib.util
from typing import Any

from singa_lite import device as _device
from singa_lite.errors import UnsupportedApiError


def _nccl_loads() -> bool:
    try:
        from cupy.cuda import nccl
    except Exception:  # CuPy without NCCL raises ImportError or a CUDA error, by version
        return False
    return bool(getattr(nccl, "available", True))


USE_CUDA: bool = _device.get_num_gpus() > 0
USE_NCCL: bool = USE_CUDA and _nccl_loads()
USE_DIST: bool = importlib.util.find_spec("mpi4py") is not None
USE_CUDNN = False
USE_DNNL = False
USE_MKLDNN = False
USE_OPENCL = False
USE_PYTHON = True
USE_PYTHON3 = True

FLAGS = (
    "USE_CUDA",
    "USE_NCCL",
    "USE_DIST",
    "USE_CUDNN",
    "USE_DNNL",
    "USE_MKLDNN",
    "USE_OPENCL",
    "USE_PYTHON",
    "USE_PYTHON3",
)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise UnsupportedApiError(
        f"singa_wrap.{name}: singa_lite's singa_wrap holds only SINGA's build flags "
        f"({', '.join(FLAGS)}), not SINGA's C++ bindings; use singa_lite.tensor / "
        "singa_lite.autograd functions on Tensors instead"
    )


__all__ = list(FLAGS)

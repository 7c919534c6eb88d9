"""The CuPy backend: CUDA arrays. The only module of singa_lite that imports CuPy.

``AVAILABLE`` is true only when CuPy imports *and* a GPU answers; the registry in
``backend/__init__.py`` registers this module only then. ``UNAVAILABLE_REASON`` says why not,
for error messages and test skips.
"""

from __future__ import annotations

import types
from typing import Any

import numpy

from singa_lite.backend.counter_rng import CounterRNG
from singa_lite.backend.deferred import DeferredChecks

name = "cupy"
xp: Any = None
_checks: Any = None  # deferred.DeferredChecks over xp
AVAILABLE = False
UNAVAILABLE_REASON = ""


def _ops_module(cupy: Any) -> Any:
    """CuPy as the ops see it: the module's own namespace, with the matrix products going
    through ``cupy_blas`` (cuBLAS called directly, which a CUDA graph can capture). A module
    object named ``cupy``, so attribute lookups cost what they cost on CuPy itself."""
    from singa_lite.backend.cupy_blas import Blas

    mod = types.ModuleType("cupy", cupy.__doc__)
    mod.__dict__.update(vars(cupy))
    mod.__dict__["__getattr__"] = lambda name: getattr(cupy, name)  # CuPy's lazy submodules
    blas = Blas(cupy)
    mod.__dict__.update(matmul=blas.matmul, dot=blas.dot, tensordot=blas.tensordot, blas=blas)
    return mod


try:
    import cupy as _cupy

    try:
        _count = _cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDA driver missing or broken: CuPy imports but cannot run
        _count = 0
        UNAVAILABLE_REASON = f"CuPy is installed but CUDA is not usable: {e}"
    if _count > 0:
        xp = _ops_module(_cupy)
        _checks = DeferredChecks(xp)
        AVAILABLE = True
    elif not UNAVAILABLE_REASON:
        UNAVAILABLE_REASON = "CuPy is installed but sees no GPU"
except ImportError:
    UNAVAILABLE_REASON = (
        "CuPy is not installed; install the GPU extra: "
        "pip install 'singa_lite[gpu]' (CUDA 12) or 'singa_lite[gpu-cuda13]' (CUDA 13)"
    )


def is_array(a: Any) -> bool:
    return AVAILABLE and isinstance(a, xp.ndarray)


def to_numpy(a: Any) -> numpy.ndarray:
    return xp.asnumpy(a)


def defer_check(bad: Any, key: str, make_error: Any) -> None:
    """Keep ``bad`` (a 0-d bool device array) for the next host read; see ``backend.check``."""
    _checks.add(bad, key, make_error)


def raise_deferred() -> None:
    _checks.raise_pending()


def from_numpy(a: numpy.ndarray, device_id: int = 0) -> Any:
    with xp.cuda.Device(device_id):
        return xp.asarray(a)  # one host-to-device copy (CuPy stages it through pinned memory)


def new_rng(seed: int | None, device_id: int = 0) -> Any:
    # cuRAND states cannot be saved, so GPU devices use a counter-based generator whose state
    # is two integers: checkpoints can then resume a GPU run exactly.
    return CounterRNG(xp, seed)


def rng_state(rng: Any) -> dict:
    return rng.state


def set_rng_state(rng: Any, state: dict) -> None:
    rng.state = state


def synchronize(device_id: int = 0) -> None:
    # The whole device, every stream: the legacy stream's synchronize alone returns while work
    # queued on a non-blocking stream (CUDA-graph replay, user streams) still runs.
    xp.cuda.Device(device_id).synchronize()
    raise_deferred()


def activate(device_id: int) -> None:
    """Make ``device_id`` the calling thread's current CUDA device, so that arrays an op or an
    optimizer allocates land on the device of its tensors (a cheap runtime query when it
    already is, the case of every one-GPU process)."""
    if xp.cuda.runtime.getDevice() != device_id:
        xp.cuda.runtime.setDevice(device_id)


def device_count() -> int:
    return int(xp.cuda.runtime.getDeviceCount()) if AVAILABLE else 0

"""The CuPy backend: CUDA arrays. The only module of singa_lite that imports CuPy.

``AVAILABLE`` is true only when CuPy imports *and* a GPU answers; the registry in
``backend/__init__.py`` registers this module only then. ``UNAVAILABLE_REASON`` says why not,
for error messages and test skips.
"""

from __future__ import annotations

from typing import Any

import numpy

from singa_lite.backend.counter_rng import CounterRNG

name = "cupy"
xp: Any = None
AVAILABLE = False
UNAVAILABLE_REASON = ""

try:
    import cupy as _cupy

    try:
        _count = _cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDA driver missing or broken: CuPy imports but cannot run
        _count = 0
        UNAVAILABLE_REASON = f"CuPy is installed but CUDA is not usable: {e}"
    if _count > 0:
        xp = _cupy
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


def from_numpy(a: numpy.ndarray, device_id: int = 0) -> Any:
    with xp.cuda.Device(device_id):
        return xp.asarray(a)


def new_rng(seed: int | None, device_id: int = 0) -> Any:
    # cuRAND states cannot be saved, so GPU devices use a counter-based generator whose state
    # is two integers: checkpoints can then resume a GPU run exactly.
    return CounterRNG(xp, seed)


def rng_state(rng: Any) -> dict:
    return rng.state


def set_rng_state(rng: Any, state: dict) -> None:
    rng.state = state


def synchronize(device_id: int = 0) -> None:
    with xp.cuda.Device(device_id):
        xp.cuda.Stream.null.synchronize()


def device_count() -> int:
    return int(xp.cuda.runtime.getDeviceCount()) if AVAILABLE else 0

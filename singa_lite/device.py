"""Devices: where a tensor's array lives, which array module runs it, and its RNG.

SINGA's API: ``create_cpu_device()``, ``get_default_device()``, ``create_cuda_gpu()``,
``create_cuda_gpu_on(id)``, ``get_num_gpus()``; a device has ``id()`` (-1 for the CPU),
``SetRandSeed(seed)`` and ``Sync()``. A device also carries ``xp``, the NumPy-like module its
arrays belong to, and one seeded generator used by every random op on it.
"""

from __future__ import annotations

from typing import Any

from singa_lite import backend
from singa_lite.errors import DeviceError


class Device:
    """One place arrays live: the host (id -1) or a CUDA GPU (id 0..)."""

    def __init__(self, device_id: int, backend_name: str, seed: int | None = None) -> None:
        self._id = device_id
        self.backend = backend.get(backend_name)
        self.xp = self.backend.xp
        self.rng = self.backend.new_rng(seed, device_id)

    def id(self) -> int:
        """-1 for the CPU, the CUDA ordinal for a GPU."""
        return self._id

    def is_gpu(self) -> bool:
        return self._id >= 0

    def SetRandSeed(self, seed: int) -> None:  # noqa: N802 (SINGA's name)
        """Re-seed this device's generator so random ops become reproducible."""
        self.rng = self.backend.new_rng(int(seed), self._id)

    set_rand_seed = SetRandSeed

    def Sync(self) -> None:  # noqa: N802 (SINGA's name)
        """Block until all queued work on this device has finished, on every stream."""
        self.backend.synchronize(self._id)

    def activate(self) -> None:
        """Make this the current CUDA device of the calling thread (nothing on the CPU): ops,
        tensors and optimizer slots call it before allocating, so a tensor on ``cuda:1``
        gets outputs, gradients and slots on ``cuda:1`` whatever device CuPy had current."""
        self.backend.activate(self._id)

    sync = Sync

    def SetVerbosity(self, level: int) -> None:  # noqa: N802 (SINGA's name)
        """Accepted for SINGA scripts; singa_lite keeps the level in ``verbosity`` and logs nothing."""
        self.verbosity = int(level)

    def SetSkipIteration(self, n: int) -> None:  # noqa: N802 (SINGA's name)
        """Accepted for SINGA scripts (its profiler skips the first ``n`` iterations)."""
        self.skip_iteration = int(n)

    def PrintTimeProfiling(self) -> None:  # noqa: N802 (SINGA's name)
        """SINGA prints per-op device timings here; singa_lite has no per-op profiler, and says so."""
        print("singa_lite: no per-operator time profile (use benchmarks/ or cProfile)")

    # SINGA buffers ops on the device between EnableGraph(True) and RunGraph(); its examples
    # call these around every step. singa_lite runs every op eagerly, when it is called, and
    # its graph mode (record once, replay) is Model.compile(use_graph=True)'s, so these only
    # keep the flag a script may read back.
    graph_enabled = False

    def EnableGraph(self, enable: bool = True) -> None:  # noqa: N802 (SINGA's name)
        """Note ``enable`` in ``graph_enabled``. Ops still run eagerly: in singa_lite graph
        mode is ``Model.compile(..., use_graph=True)``, which records and replays whole steps."""
        self.graph_enabled = bool(enable)

    def ResetGraph(self) -> None:  # noqa: N802 (SINGA's name)
        """Nothing to drop: singa_lite buffers no ops on a device."""

    def RunGraph(self, sequential: bool = False) -> None:  # noqa: N802 (SINGA's name)
        """Nothing to run: every op ran when it was called. ``sequential`` is accepted."""

    def get_rng_state(self) -> dict:
        return self.backend.rng_state(self.rng)

    def set_rng_state(self, state: dict) -> None:
        self.backend.set_rng_state(self.rng, state)

    def __repr__(self) -> str:
        return "Device(cpu)" if self._id < 0 else f"Device(cuda:{self._id})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other._id == self._id

    def __hash__(self) -> int:
        return hash(self._id)


_cpu: Device | None = None
_gpus: dict[int, Device] = {}
_default: Device | None = None


def create_cpu_device() -> Device:
    """The host device (one per process)."""
    global _cpu
    if _cpu is None:
        _cpu = Device(-1, "numpy")
    return _cpu


def get_default_device() -> Device:
    """The device tensors are created on when none is given (the CPU unless changed)."""
    return _default if _default is not None else create_cpu_device()


def set_default_device(dev: Device) -> None:
    global _default
    _default = dev


def get_num_gpus() -> int:
    """How many CUDA GPUs CuPy sees (0 when CuPy or a GPU is missing)."""
    try:
        return backend.get("cupy").device_count()
    except KeyError:
        return 0


def _gpu_unavailable_reason() -> str:
    from singa_lite.backend import cupy as cupy_backend

    return cupy_backend.UNAVAILABLE_REASON


def create_cuda_gpu_on(device_id: int) -> Device:
    """The CUDA device ``device_id``; ``DeviceError`` says why when there is none."""
    n = get_num_gpus()
    if n == 0:
        raise DeviceError(f"no CUDA GPU available: {_gpu_unavailable_reason()}")
    if not 0 <= device_id < n:
        raise DeviceError(f"CUDA device {device_id} requested but only {n} GPU(s) are visible")
    if device_id not in _gpus:
        _gpus[device_id] = Device(device_id, "cupy")
    return _gpus[device_id]


def create_cuda_gpu() -> Device:
    """The first CUDA device."""
    return create_cuda_gpu_on(0)


def create_cuda_gpus(num: int) -> list[Device]:
    return [create_cuda_gpu_on(i) for i in range(num)]


def create_cuda_gpus_on(device_ids: list[int]) -> list[Device]:
    return [create_cuda_gpu_on(i) for i in device_ids]


def device_of_array(array: Any) -> Device:
    """The device an existing backend array lives on."""
    b = backend.backend_of(array)
    if b.name == "numpy":
        return create_cpu_device()
    return create_cuda_gpu_on(int(array.device.id))

"""The NumPy backend: host arrays, always available."""

from __future__ import annotations

from typing import Any

import numpy

name = "numpy"
xp = numpy
AVAILABLE = True


def is_array(a: Any) -> bool:
    return isinstance(a, numpy.ndarray)


def to_numpy(a: Any) -> numpy.ndarray:
    return numpy.asarray(a)


def from_numpy(a: numpy.ndarray, device_id: int = -1) -> numpy.ndarray:
    return numpy.asarray(a)


def new_rng(seed: int | None, device_id: int = -1) -> numpy.random.Generator:
    return numpy.random.default_rng(seed)


def rng_state(rng: numpy.random.Generator) -> dict:
    """A JSON-able snapshot of the generator (for checkpoints)."""
    return dict(rng.bit_generator.state)


def set_rng_state(rng: numpy.random.Generator, state: dict) -> None:
    rng.bit_generator.state = state


def synchronize(device_id: int = -1) -> None:
    """Host arrays are always in sync."""


def device_count() -> int:
    return 0

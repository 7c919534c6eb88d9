"""A counter-based random generator written against ``xp``, with a state that serialises.

CuPy's generators keep their state inside cuRAND and cannot be saved, which would make a GPU
run impossible to resume exactly. This generator needs no hidden state: sample ``i`` of the
stream is ``splitmix64(key + i * golden)``, so the whole state is ``(seed, counter)`` and the
same seed gives the same bits on NumPy and on CuPy. Each draw is a handful of elementwise
passes over the output, cheap next to the ops that consume it (dropout masks, initialisers).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from singa_lite import backend

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB
NAME = "singa_lite.CounterRNG"


def _mix(z: int) -> int:
    """splitmix64's finaliser on a Python int (derives the key from the seed)."""
    z = (z ^ (z >> 30)) * _C1 & _MASK
    z = (z ^ (z >> 27)) * _C2 & _MASK
    return z ^ (z >> 31)


class CounterRNG:
    """The subset of ``numpy.random.Generator`` singa_lite uses: ``random``, ``standard_normal``."""

    def __init__(self, xp: Any, seed: int | None = None) -> None:
        self.xp = xp
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little")
        self.seed = int(seed) & _MASK
        self.counter = 0
        self._key = _mix(self.seed)

    def _bits(self, n: int) -> Any:
        xp = self.xp
        u64 = xp.uint64
        # The counter as a per-step scalar: inside a CUDA-graph capture a device value set
        # before every launch, so each replayed step draws new numbers.
        start, offset = self.counter, self.counter - getattr(self, "_capture_start", self.counter)
        base = backend.step_scalar(
            xp, u64, ("rng", id(self), offset), lambda: (self.counter + offset) & _MASK
        )
        i = xp.arange(n, dtype=u64) + base
        self.counter = (start + n) & _MASK
        z = i * u64(_GOLDEN) + u64(self._key)  # uint64 arithmetic wraps modulo 2**64
        z = (z ^ (z >> u64(30))) * u64(_C1)
        z = (z ^ (z >> u64(27))) * u64(_C2)
        return z ^ (z >> u64(31))

    def random(self, shape: Any = None, dtype: Any = np.float64) -> Any:
        """Uniform samples in [0, 1)."""
        shape = () if shape is None else (tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),))
        n = math.prod(shape)
        z = self._bits(n)
        if np.dtype(dtype) == np.float32:
            out = (z >> self.xp.uint64(40)).astype(np.float32) * np.float32(2.0**-24)
        else:
            out = (z >> self.xp.uint64(11)).astype(np.float64) * (2.0**-53)
        return out.reshape(shape)

    def standard_normal(self, shape: Any = None, dtype: Any = np.float64) -> Any:
        """Normal samples (Box-Muller on two uniform streams)."""
        xp = self.xp
        u1 = 1.0 - self.random(shape, np.float64)  # (0, 1]: log is finite
        u2 = self.random(shape, np.float64)
        out = xp.sqrt(-2.0 * xp.log(u1)) * xp.cos(2.0 * math.pi * u2)
        return out.astype(dtype, copy=False)

    @property
    def state(self) -> dict:
        return {"bit_generator": NAME, "seed": self.seed, "counter": self.counter}

    @state.setter
    def state(self, value: dict) -> None:
        if value.get("bit_generator") != NAME:
            raise ValueError(f"not a {NAME} state: {value.get('bit_generator')!r}")
        self.seed = int(value["seed"]) & _MASK
        self.counter = int(value["counter"]) & _MASK
        self._key = _mix(self.seed)

"""A training step captured into a CUDA graph and launched as one unit (graph mode on CuPy).

``Model``'s graph mode replays a recorded step op by op; on a GPU each op costs a few kernel
launches of ~5-20 us of host time, so small models are bound by the host. ``StepGraph``
captures one replay into a CUDA graph and then launches the whole step with one call.

What a captured step needs, and how it gets it:

* **No host synchronisation inside** (a capture cannot contain one): labels are checked
  through ``backend.check`` (a device flag), matrix products go through ``cupy_blas``.
* **Fixed addresses**: a graph replays its kernels on the pointers it captured. Params,
  optimizer slots and BatchNorm statistics are updated in place; everything the captured step
  allocates comes from a memory pool private to the graph, which nothing else allocates from,
  so it stays the graph's. Inputs are copied into the recorded placeholders before a launch.
* **Values that change every step are not frozen**: the learning rate of a schedule, Adam's
  bias corrections and the random generator's counter are read by the kernels from 0-d
  device arrays (``backend.step_scalar``), which ``launch`` sets from the host state before
  each launch in one asynchronous copy from pinned memory. The host state itself (optimizer
  step counters, generator counters) advances by what the captured step advanced it.

Capture runs the Python of the step without executing kernels; a step that cannot be captured
(an op reads values on the host, calls a library CuPy cannot capture...) raises, and the
caller replays without a graph from then on, saying why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

_RING = 8  # pinned staging buffers for the per-step scalars, reused round-robin


class StepGraph:
    """One captured step on CuPy's current device. ``capture(run, counters)`` then ``launch()``.

    ``counters`` are ``(object, attribute)`` pairs of host integers the step advances (an
    optimizer's ``step_counter``, a generator's ``counter``): capture measures how much one
    step advances each and restores them; every ``launch`` then advances them by that much.
    """

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        cp = xp
        self.stream = cp.cuda.Stream(non_blocking=False)  # ordered with the legacy stream
        self.pool = cp.cuda.MemoryPool()
        self.graph: Any = None
        self.scalars: dict[Any, tuple[int, Any, Callable[[], Any]]] = {}  # key -> (slot, dtype, fn)
        self.buffer: Any = None  # device float64/uint64 words the scalars are views of
        self.views: dict[Any, Any] = {}
        self.deltas: list[tuple[Any, str, int]] = []
        self._ring: list[tuple[Any, Any, Any]] = []  # (host words, event, pinned block)
        self._next = 0

    # -- used by backend.step_scalar during capture ------------------------------------------
    def scalar(self, dtype: Any, key: Any, fn: Callable[[], Any]) -> Any:
        """The 0-d device array of ``key`` (made on first use), read by the captured kernels."""
        dtype = np.dtype(dtype)
        key = (key, dtype.str)
        view = self.views.get(key)
        if view is None:
            slot = len(self.scalars)
            if slot >= 64:
                raise RuntimeError("more than 64 per-step scalars in one captured step")
            self.scalars[key] = (slot, dtype, fn)
            # Each scalar owns one 8-byte word of the buffer, viewed as its dtype.
            view = self.views[key] = self.buffer[slot : slot + 1].view(dtype)[:1].reshape(())
        return view

    # -- capture and launch -------------------------------------------------------------------
    def capture(self, run: Callable[[], Any], counters: list[tuple[Any, str]]) -> None:
        cp = self.xp
        self.buffer = cp.zeros(64, dtype=cp.uint64)  # before capture: a fixed address
        before = [(o, a, getattr(o, a)) for o, a in counters]
        try:
            with self.stream, cp.cuda.using_allocator(self.pool.malloc), _capturing(self):
                self.stream.begin_capture()
                try:
                    run()
                finally:
                    graph = self.stream.end_capture()
        finally:
            after = [getattr(o, a) for o, a, _ in before]
            for o, a, v in before:
                setattr(o, a, v)  # capture ran no kernels: the step has not happened yet
        self.deltas = [(o, a, n1 - n0) for (o, a, n0), n1 in zip(before, after)]
        self.graph = graph
        for _ in range(_RING):
            host = cp.cuda.alloc_pinned_memory(64 * 8)
            self._ring.append((np.frombuffer(host, np.uint64, 64), cp.cuda.Event(disable_timing=True), host))

    def launch(self) -> None:
        """Set the per-step scalars from the host state, launch the step, advance the host state."""
        if self.scalars:
            words, event = self._ring[self._next][:2]
            self._next = (self._next + 1) % _RING
            event.synchronize()  # the copy that last read this buffer has run (rarely waits)
            for slot, dtype, fn in self.scalars.values():
                words[slot : slot + 1].view(dtype)[0] = fn()
            self.buffer.set(words, stream=self.stream)
            event.record(self.stream)
        self.graph.launch(self.stream)
        for o, a, d in self.deltas:
            setattr(o, a, getattr(o, a) + d)


@contextlib.contextmanager
def _capturing(g: StepGraph) -> Iterator[None]:
    from singa_lite import backend

    old, backend._capture = backend._capture, g
    try:
        yield
    finally:
        backend._capture = old

"""``DistOpt``: synchronous data-parallel training around any optimizer (SINGA's ``opt.DistOpt``).

Every rank runs the same script on its own shard of the data. ``DistOpt(opt)`` wraps the
rank's optimizer; each training step it computes the local gradients, combines them across
ranks through a communicator (MPI for host arrays, NCCL for CuPy arrays) and lets the wrapped
optimizer apply the result, so the ranks' parameters stay identical. Four update paths, as in
SINGA (a model's ``train_one_batch`` picks one, e.g. from a ``dist_option`` argument):

* :meth:`DistOpt.backward_and_update`: gradients averaged over ranks; small ones are fused
  into buffers of about ``threshold`` elements first (one all-reduce per buffer).
* :meth:`DistOpt.backward_and_update_half`: the same with float16 on the wire.
* :meth:`DistOpt.backward_and_partial_update`: each rank updates with its own gradient, and one
  group of parameters per step (round robin) is averaged across ranks.
* :meth:`DistOpt.backward_and_sparse_update`: only the largest gradient entries (top-K or
  above a threshold) are exchanged, as (index, value) pairs; what is not sent is kept and
  added to the next step's gradient (residual correction, ``corr=True``).

Every path goes through ``autograd.run_step``, so a Model in graph mode records the update and
replays it; the step's Python code (choice of buffers, round-robin counter) runs each replay.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from singa_lite import _args, autograd
from singa_lite.dist.buckets import (
    Bucket,
    FusionPlan,
    describe_mismatch,
    layout_digest,
    layout_of,
    select_sparse,
)
from singa_lite.dist.communicator import Communicator, get_communicator
from singa_lite.errors import DistributedError, OptimizerError
from singa_lite.opt import Optimizer
from singa_lite.tensor import Tensor

_THRESHOLD = 2097152  # SINGA's default: arrays above this many elements are reduced on their own


class DistOpt:
    """Data-parallel wrapper of the optimizer ``opt``; ``world_size``, ``global_rank``, ``local_rank``.

    The communicator is, in order: ``communicator`` if given; an NCCL communicator over
    ``nccl_id`` (SINGA's constructor for one process per GPU started without MPI: give
    ``world_size`` and ``global_rank`` or ``local_rank``); else the job's own, discovered from
    the launcher (:func:`singa_lite.dist.get_communicator`; one process without a launcher).
    Rank arguments given together with a discovered communicator must agree with it.
    ``buffSize`` caps a fused buffer, in elements.
    """

    def __init__(
        self,
        opt: Optimizer,
        nccl_id: Any = None,
        local_rank: int | None = None,
        world_size: int | None = None,
        global_rank: int | None = None,
        buffSize: int = 4194304,
        communicator: Communicator | None = None,
    ) -> None:
        _args.instance("DistOpt", "opt", opt, Optimizer, "an optimizer to wrap (singa_lite.opt.Optimizer)")
        if not isinstance(buffSize, int):  # a count of elements: 4e6 is a slip, not a size
            raise _args.bad(
                "DistOpt", "buffSize", "be a positive number of elements", buffSize, OptimizerError
            )
        _args.count("DistOpt", "buffSize", buffSize, error=OptimizerError)
        self.opt = opt
        self.buffSize = buffSize
        self.communicator = _make_communicator(nccl_id, local_rank, world_size, global_rank, communicator)
        self.world_size = self.communicator.world_size
        self.global_rank = self.communicator.global_rank
        self.local_rank = self.communicator.local_rank
        self.comm_seconds = 0.0  # time spent in collectives (benchmarks read it)
        self._plans: dict[tuple, FusionPlan] = {}
        self._checked: set[bytes] = set()
        self._partial = 0  # the group that backward_and_partial_update averages next
        self._last_comm = self.communicator

    # -- the four update paths ----------------------------------------------------------------------
    def __call__(self, loss: Tensor) -> None:
        """``backward_and_update(loss)`` (SINGA's ``opt(loss)``)."""
        self.backward_and_update(loss)

    def backward_and_update(self, loss: Tensor, threshold: int = _THRESHOLD) -> None:
        """Backward from ``loss``, average every gradient over the ranks, apply them, ``step()``.

        Gradients up to ``threshold`` elements are packed together into buffers of more than
        ``threshold`` elements (at most ``buffSize``) and each buffer is all-reduced once.
        """
        autograd.run_step(self._reduce_and_apply, loss, threshold, False, None)

    def backward_and_update_half(
        self, loss: Tensor, threshold: int = _THRESHOLD, clipping: bool = False, clip_Value: float = 100
    ) -> None:
        """As :meth:`backward_and_update`, with the gradients sent as float16.

        With ``clipping`` each gradient is first clipped to ``[-clip_Value, clip_Value]`` so it
        fits float16's range (max 65504). On MPI float16 travels as raw 16-bit words that every
        rank gathers and sums in float32 (see :class:`~singa_lite.dist.MPICommunicator`); NCCL
        sums float16 natively.
        """
        autograd.run_step(self._reduce_and_apply, loss, threshold, True, clip_Value if clipping else None)

    def backward_and_partial_update(self, loss: Tensor, threshold: int = _THRESHOLD) -> None:
        """Update with the local gradients, then average one group of parameters across ranks.

        The parameters are grouped as the gradients are fused (``threshold``); step ``t``
        averages group ``t mod groups``, so every parameter is averaged once per cycle and
        communication per step is a fraction of a full all-reduce (SINGA's experimental
        asynchronous-style training).
        """
        autograd.run_step(self._partial_update, loss, threshold)

    def backward_and_sparse_update(
        self,
        loss: Tensor,
        threshold: int = _THRESHOLD,
        spars: float = 0.05,
        topK: bool = False,
        corr: bool = True,
    ) -> None:
        """Exchange only the significant gradient entries, as (index, value) pairs.

        With ``topK`` each fused buffer sends its ``spars`` fraction of entries largest in
        magnitude, otherwise every entry with ``|g| >= spars``. With ``corr`` the entries not
        sent accumulate locally and are added to later gradients (residual error correction),
        so nothing is lost, only delayed. Ranks gather every rank's count, then the pairs
        (``Allgatherv``), and sum them into a dense gradient that is averaged and applied.
        """
        _args.number("backward_and_sparse_update", "spars", spars, 0.0, low_open=True, error=OptimizerError)
        autograd.run_step(self._sparse_update, loss, threshold, float(spars), bool(topK), bool(corr))

    # -- step bodies (recorded and replayed by graph mode) ----------------------------------------------
    def _reduce_and_apply(self, loss: Tensor, threshold: int, half: bool, clip: float | None) -> None:
        params, grads, comm, plan = self._gradients(loss, threshold, "grad")
        reduce = comm.all_reduce_half if half else comm.all_reduce
        for group, bucket in plan:
            buf = bucket.pack([grads[i] for i in group])
            if clip is not None:
                bucket.xp.clip(buf, -clip, clip, out=buf)
            self._timed(reduce, buf)
            self._average(buf)
        self._apply_all(params, plan)

    def _partial_update(self, loss: Tensor, threshold: int) -> None:
        if self.opt.accumulate > 1 or self.opt.clip_norm is not None:
            raise OptimizerError(
                "backward_and_partial_update applies each rank's own gradients at once; it cannot "
                "clip or accumulate them (build the optimizer without clip_norm/accumulate)"
            )
        params = []
        for p, g in autograd.backward(loss):
            self.opt.apply(_name_of(p), p, g)
            params.append(p)
        if params:
            arrays = [p.data for p in params]
            comm, plan = self._plan_for(params, arrays, threshold, "param")
            k = self._partial % len(plan.groups)
            group, bucket = plan.groups[k], plan.buckets[k]
            buf = bucket.pack([arrays[i] for i in group])
            self._timed(comm.all_reduce, buf)
            self._average(buf)
            bucket.unpack_into([arrays[i] for i in group])
            self._partial = (k + 1) % len(plan.groups)
        self.opt.step()

    def _sparse_update(self, loss: Tensor, threshold: int, spars: float, top_k: bool, corr: bool) -> None:
        params, grads, comm, plan = self._gradients(loss, threshold, "grad")
        for k, (group, bucket) in enumerate(plan):
            flat = bucket.pack([grads[i] for i in group])
            xp = bucket.xp
            source = flat
            if corr:
                if plan.residuals[k] is None:
                    plan.residuals[k] = xp.zeros_like(flat)
                source = plan.residuals[k]
                source += flat
            idx = select_sparse(xp, source, spars, top_k)
            vals = source[idx]  # fancy indexing copies, so zeroing the residual below is safe
            if corr:
                source[idx] = 0
            index_type = np.int32 if flat.size < 2**31 else np.int64
            t0 = time.perf_counter()
            all_idx, counts = comm.all_gather_v(idx.astype(index_type))
            all_vals, _ = comm.all_gather_v(vals, counts)
            self.comm_seconds += time.perf_counter() - t0
            flat[...] = 0
            start = 0
            for c in counts:  # each rank's indices are distinct, so += never drops a duplicate
                flat[all_idx[start : start + c]] += all_vals[start : start + c]
                start += c
            self._average(flat)
        self._apply_all(params, plan)

    # -- plumbing -------------------------------------------------------------------------------------
    def _gradients(
        self, loss: Tensor, threshold: int, kind: str
    ) -> tuple[list, list, Communicator, FusionPlan]:
        pairs = list(autograd.backward(loss))
        params = [p for p, _ in pairs]
        grads = [g.data for _, g in pairs]
        comm, plan = self._plan_for(params, grads, threshold, kind)
        return params, grads, comm, plan

    def _plan_for(
        self, params: list, arrays: list, threshold: int, kind: str
    ) -> tuple[Communicator, FusionPlan]:
        """The communicator and fusion plan for these arrays; checks the layout across ranks once."""
        dev = _one_device(params)
        comm = self.communicator.for_device(dev) if dev is not None else self.communicator
        self._last_comm = comm
        layout = layout_of([(_name_of(p), a) for p, a in zip(params, arrays)])
        key = (kind, layout, int(threshold), dev)
        plan = self._plans.get(key)
        if plan is None:
            self.check_layout(layout, what=f"{kind}ients" if kind == "grad" else "parameters", comm=comm)
            xp = dev.xp if dev is not None else np
            plan = self._plans[key] = FusionPlan(layout, xp, threshold, self.buffSize)
        return comm, plan

    def _apply_all(self, params: list, plan: FusionPlan) -> None:
        # The wrapped optimizer's step options (clipping, accumulation) act on the averages.
        pairs = [
            (params[i], Tensor._wrap(g, params[i].device, False, None, 0))
            for group, bucket in plan
            for i, g in zip(group, bucket.views())
        ]
        self.opt.update_all(pairs)

    def _average(self, buf: Any) -> None:
        if self.world_size > 1:
            buf *= buf.dtype.type(1.0 / self.world_size)

    def _timed(self, collective: Callable, buf: Any) -> None:
        t0 = time.perf_counter()
        collective(buf)
        self.comm_seconds += time.perf_counter() - t0

    def check_layout(self, layout: tuple, what: str = "parameters", comm: Communicator | None = None) -> None:
        """Raise ``DistributedError`` on every rank unless all ranks hold the same ``layout``.

        ``layout`` is ``((name, shape, dtype), ...)``; ranks exchange a 32-byte digest, and only
        when the digests differ the layouts themselves, to name the first difference.
        """
        comm = comm or self.communicator
        digest = layout_digest(layout)
        if digest in self._checked:
            return
        digests = comm.all_gather_bytes(digest)
        if any(d != digests[0] for d in digests):
            layouts = comm.all_gather_object(layout)
            raise DistributedError(
                f"DistOpt: the {what} differ across ranks, so their buffers cannot be combined: "
                f"{describe_mismatch(layouts)}. Every rank must build the same model."
            )
        self._checked.add(digest)

    # -- start-up and checkpoints -------------------------------------------------------------------
    def broadcast_params(self, model_or_params: Any, root: int = 0) -> None:
        """Overwrite every rank's parameters (and states, for a model) with rank ``root``'s.

        Call once after ``model.compile`` (or after loading a checkpoint) so all ranks start
        from identical values whatever their seeds. Accepts a Model/Layer (its ``get_states()``:
        parameters and running statistics), a ``{name: Tensor}`` dict or Tensors.
        """
        named = _named_tensors(model_or_params)
        if not named:
            return
        tensors = [t for _, t in named]
        dev = _one_device(tensors)
        comm = self.communicator.for_device(dev) if dev is not None else self.communicator
        arrays = [t.data for t in tensors]
        layout = layout_of([(n, a) for (n, _), a in zip(named, arrays)])
        self.check_layout(layout, what="parameters to broadcast", comm=comm)
        plan = FusionPlan(layout, dev.xp if dev is not None else np, self.buffSize // 2, self.buffSize)
        for group, bucket in plan:
            buf = bucket.pack([arrays[i] for i in group])
            comm.broadcast(buf, root)
            bucket.unpack_into([arrays[i] for i in group])
        comm.wait()

    def save_checkpoint(self, model: Any, fpath: Any, aux_states: dict | None = None) -> None:
        """Rank 0 writes ``model.save_states(fpath, aux_states)``; every rank returns once it is on disk."""
        from singa_lite.dist.checkpoint import save_states

        save_states(model, fpath, aux_states, communicator=self.communicator)

    def load_checkpoint(self, model: Any, fpath: Any, strict: bool = True) -> dict:
        """Every rank loads ``fpath``; rank 0's parameters are then broadcast so all ranks agree."""
        from singa_lite.dist.checkpoint import load_states

        aux = load_states(model, fpath, strict=strict, communicator=self.communicator)
        self.broadcast_params(model)
        return aux

    # -- SINGA's lower-level API --------------------------------------------------------------------------
    def all_reduce(self, tensor: Any) -> None:
        """Sum ``tensor`` (a Tensor or contiguous array) over the ranks, in place (not averaged)."""
        self._reduce_in_place([tensor], half=False)

    def all_reduce_half(self, tensor: Any) -> None:
        """As :meth:`all_reduce`, with float16 on the wire."""
        self._reduce_in_place([tensor], half=True)

    def fused_all_reduce(self, tensors: Iterable[Any]) -> None:
        """Sum each of ``tensors`` over the ranks, in place, with one collective for all of them."""
        self._reduce_in_place(list(tensors), half=False)

    def fused_all_reduce_half(self, tensors: Iterable[Any]) -> None:
        """As :meth:`fused_all_reduce`, with float16 on the wire."""
        self._reduce_in_place(list(tensors), half=True)

    def _reduce_in_place(self, items: list, half: bool) -> None:
        arrays = [t.data if isinstance(t, Tensor) else t for t in items]
        if not arrays:
            return
        dtypes = {str(a.dtype) for a in arrays}
        if len(dtypes) > 1:
            raise DistributedError(f"fused_all_reduce: the arrays must share one dtype, got {sorted(dtypes)}")
        xp = _module_of(arrays[0])
        comm = self._comm_for_module(xp)
        collective = comm.all_reduce_half if half else comm.all_reduce
        if len(arrays) == 1 and arrays[0].flags.c_contiguous:
            self._timed(collective, arrays[0])
            return
        # Several arrays (or a strided one): pack into one buffer, reduce it once, unpack.
        bucket = Bucket(xp, arrays[0].dtype, [a.shape for a in arrays])
        self._timed(collective, bucket.pack(arrays))
        bucket.unpack_into(arrays)

    def _comm_for_module(self, xp: Any) -> Communicator:
        if self.communicator.accepts(xp):
            return self.communicator
        from singa_lite import device

        return self.communicator.for_device(device.create_cuda_gpu_on(xp.cuda.Device().id))

    def update(self, param: Tensor, grad: Tensor) -> None:
        """Apply a gradient already summed over the ranks: ``opt.apply(name, param, grad / world_size)``."""
        g = grad.data if isinstance(grad, Tensor) else grad
        self.opt.apply(_name_of(param), param, g * g.dtype.type(1.0 / self.world_size))

    def step(self) -> None:
        """Advance the wrapped optimizer's step counter (and so its schedules)."""
        self.opt.step()

    def wait(self) -> None:
        """Block until every queued collective has finished (NCCL runs asynchronously on the stream)."""
        self._last_comm.wait()

    def barrier(self) -> None:
        """Return once every rank has reached this call."""
        self.communicator.barrier()

    # -- states: the wrapped optimizer's ------------------------------------------------------------------
    @property
    def step_counter(self) -> int:
        return self.opt.step_counter

    @step_counter.setter
    def step_counter(self, value: int) -> None:  # graph mode rewinds it around a CUDA graph capture
        self.opt.step_counter = value

    def get_states(self) -> dict:
        """The wrapped optimizer's ``get_states()`` (identical on every rank for the averaging paths)."""
        return self.opt.get_states()

    def set_states(self, states: Any) -> None:
        """Restore the wrapped optimizer's states (``get_states``' format)."""
        self.opt.set_states(states)

    def __repr__(self) -> str:
        return f"DistOpt({self.opt!r}, {self.communicator!r})"


# -- helpers ----------------------------------------------------------------------------------------------
def _make_communicator(
    nccl_id: Any,
    local_rank: int | None,
    world_size: int | None,
    global_rank: int | None,
    communicator: Communicator | None,
) -> Communicator:
    if communicator is None and nccl_id is not None:
        from singa_lite.dist.nccl import NcclCommunicator

        if world_size is None or (global_rank is None and local_rank is None):
            raise DistributedError("DistOpt with an nccl_id needs world_size and global_rank (or local_rank)")
        rank = global_rank if global_rank is not None else local_rank
        assert rank is not None
        return NcclCommunicator(world_size, nccl_id, rank, local_rank=local_rank)
    comm = communicator if communicator is not None else get_communicator()
    for name, given in (("world_size", world_size), ("global_rank", global_rank), ("local_rank", local_rank)):
        if given is not None and given != getattr(comm, name):
            raise DistributedError(
                f"DistOpt: {name}={given} was given but the communicator has {name}={getattr(comm, name)}"
            )
    return comm


def _name_of(p: Tensor) -> str:
    if p.is_dummy():  # a Dummy#N name depends on each process's creation order
        raise OptimizerError(
            f"DistOpt: a parameter of shape {p.shape} has no name; ranks match parameters by name, "
            "so set `param.name` (layers name their params automatically)"
        )
    return p.name


def _one_device(tensors: list) -> Any:
    devs = {t.device for t in tensors}
    if len(devs) > 1:
        raise DistributedError(f"DistOpt: parameters on several devices {sorted(map(str, devs))}")
    return next(iter(devs), None)


def _named_tensors(obj: Any) -> list[tuple[str, Tensor]]:
    if hasattr(obj, "get_states") and callable(obj.get_states) and not isinstance(obj, dict):
        return list(obj.get_states().items())
    if isinstance(obj, dict):
        return [(str(k), v) for k, v in obj.items()]
    if isinstance(obj, Tensor):
        obj = [obj]
    return [(f"#{i}" if t.is_dummy() else t.name, t) for i, t in enumerate(obj)]


def _module_of(arr: Any) -> Any:
    from singa_lite import backend

    return backend.get_array_module(arr)

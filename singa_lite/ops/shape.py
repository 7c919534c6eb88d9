"""Shape ops: reshape, transpose, concatenation and splitting, broadcasting, padding, casts.

Every op keeps its input's dtype (float16/32/64, int32/64, bool) and returns a view where NumPy
does (reshape, transpose, squeeze, split), since reshape and transpose run in every training
step. Indexing ops (slice, getitem, gather, scatter, where, onehot, nonzero) live in
:mod:`singa_lite.ops.indexing` and are re-exported here, so the whole family is one import.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from numbers import Real
from typing import Any

import numpy as np

from singa_lite import _args, backend
from singa_lite.autograd import Operator
from singa_lite.errors import ArgumentError, DTypeError, ShapeError
from singa_lite.ops._util import normalize_axis, unbroadcast
from singa_lite.ops.indexing import (
    Gather,
    GatherElements,
    GetItem,
    NonZero,
    OneHot,
    ScatterElements,
    Slice,
    Where,
    gather,
    gather_elements,
    getitem,
    nonzero,
    onehot,
    scatter_elements,
    slice,  # noqa: A004 (ONNX's name; this module uses builtins.slice)
    where,
)
from singa_lite.tensor import Tensor, as_dtype

__all__ = [
    "Cast",
    "Cat",
    "Expand",
    "Flatten",
    "Gather",
    "GatherElements",
    "GetItem",
    "NonZero",
    "OneHot",
    "Pad",
    "Reshape",
    "RoundTo",
    "ScatterElements",
    "ShapeOf",
    "Slice",
    "Split",
    "Squeeze",
    "Tile",
    "Transpose",
    "Unsqueeze",
    "Where",
    "broadcast_to",
    "cast",
    "cat",
    "concat",
    "depth_to_space",
    "expand",
    "flatten",
    "gather",
    "gather_elements",
    "getitem",
    "nonzero",
    "onehot",
    "pad",
    "reshape",
    "round_to",
    "scatter_elements",
    "shape_of",
    "slice",
    "space_to_depth",
    "split",
    "squeeze",
    "tile",
    "transpose",
    "unsqueeze",
    "where",
]


# -- reshapes: one class, each variant says how the target shape follows from the input's -------
class Reshape(Operator):
    """Reshape to ``shape`` (NumPy rules, one ``-1`` allowed); a view wherever NumPy gives one."""

    def __init__(self, shape: Sequence[int] = ()) -> None:
        super().__init__()
        # A -1 or other negatives are judged against the input (a ShapeError), not here.
        self.shape = _args.ints(self.name, "shape", shape, scalar=False)

    def target(self, x: Any) -> tuple[int, ...]:
        shape = self.shape
        if shape.count(-1) > 1 or any(s < -1 for s in shape):
            raise self.error(f"bad target shape {shape}: at most one -1 and no other negatives", x)
        known = math.prod(s for s in shape if s != -1)
        if -1 in shape:
            if known == 0 or x.size % known:
                raise self.error(f"cannot reshape {x.size} elements to {shape}", x)
            return tuple(x.size // known if s == -1 else s for s in shape)
        if known != x.size:
            raise self.error(f"cannot reshape {x.size} elements to {shape}", x)
        return shape

    def forward(self, x: Any) -> Any:
        self.in_shape = x.shape
        return x.reshape(self.target(x))

    def backward(self, dy: Any) -> Any:
        return dy.reshape(self.in_shape)


class Flatten(Reshape):
    """ONNX Flatten: ``(prod(shape[:axis]), prod(shape[axis:]))``."""

    def __init__(self, axis: int = 1) -> None:
        super().__init__()
        self.axis = _args.axis(self.name, "axis", axis)

    def target(self, x: Any) -> tuple[int, ...]:
        if not -x.ndim <= self.axis <= x.ndim:
            raise self.error(f"axis {self.axis} is out of range [-{x.ndim}, {x.ndim}]", x)
        axis = self.axis + x.ndim if self.axis < 0 else self.axis
        return math.prod(x.shape[:axis]), math.prod(x.shape[axis:])


class Squeeze(Reshape):
    """Drop the size-1 ``axes`` (every size-1 axis when ``None``)."""

    def __init__(self, axes: int | Sequence[int] | None = None) -> None:
        super().__init__()
        if axes is not None:
            _args.ints(self.name, "axes", axes)
        self.axes = axes

    def target(self, x: Any) -> tuple[int, ...]:
        if self.axes is None:
            return tuple(s for s in x.shape if s != 1)
        axes = {normalize_axis(a, x.ndim, self.name) for a in _as_list(self.axes)}
        bad = [a for a in axes if x.shape[a] != 1]
        if bad:
            raise self.error(f"cannot squeeze axes {bad}: their size is not 1", x)
        return tuple(s for i, s in enumerate(x.shape) if i not in axes)


class Unsqueeze(Reshape):
    """Insert size-1 axes at ``axes``, positions in the *output* (ONNX Unsqueeze)."""

    def __init__(self, axes: int | Sequence[int] = 0) -> None:
        super().__init__()
        _args.ints(self.name, "axes", axes)
        self.axes = axes

    def target(self, x: Any) -> tuple[int, ...]:
        raw = _as_list(self.axes)
        ndim = x.ndim + len(raw)
        axes = {normalize_axis(a, ndim, self.name) for a in raw}
        if len(axes) != len(raw):
            raise self.error(f"repeated axis in {raw}", x)
        rest = iter(x.shape)
        return tuple(1 if i in axes else next(rest) for i in range(ndim))


def _as_list(axes: int | Sequence[int]) -> list[int]:
    return [int(axes)] if isinstance(axes, (int, np.integer)) else [int(a) for a in axes]


class Transpose(Operator):
    """Permute axes (reverse them when ``axes`` is ``None``); a view."""

    def __init__(self, axes: Sequence[int] | None = None) -> None:
        super().__init__()
        self.axes = None if axes is None else _args.ints(self.name, "axes", axes, scalar=False)

    def forward(self, x: Any) -> Any:
        if self.axes is None:
            self.perm = tuple(range(x.ndim))[::-1]
        else:
            perm = tuple(a + x.ndim if a < 0 else a for a in self.axes)
            if sorted(perm) != list(range(x.ndim)):
                raise self.error(f"axes {self.axes} are not a permutation of {x.ndim} axes", x)
            self.perm = perm
        return x.transpose(self.perm)

    def backward(self, dy: Any) -> Any:
        return dy.transpose(np.argsort(self.perm))


# -- concatenation and splitting ---------------------------------------------------------------
class Cat(Operator):
    def __init__(self, axis: int = 0) -> None:
        super().__init__()
        self.axis = _args.axis(self.name, "axis", axis)

    def forward(self, *xs: Any) -> Any:
        first = xs[0]
        axis = normalize_axis(self.axis, first.ndim, self.name)
        shape = first.shape
        before, after = shape[:axis], shape[axis + 1 :]  # tuple slices compare in C
        for x in xs[1:]:
            s = x.shape
            if len(s) != len(shape) or s[:axis] != before or s[axis + 1 :] != after:
                raise self.error(f"shapes differ outside axis {self.axis}", *xs)
            if x.dtype != first.dtype:
                raise DTypeError(f"{self.name}: inputs have different dtypes {[str(x.dtype) for x in xs]}")
        self.axis_, self.sizes = axis, [x.shape[axis] for x in xs]
        return self.xp.concatenate(xs, axis=axis)

    def backward(self, dy: Any) -> tuple:
        cuts = np.cumsum(self.sizes)[:-1].tolist()
        return tuple(self.xp.split(dy, cuts, axis=self.axis_))


class Split(Operator):
    """Split along ``axis`` into pieces of the given sizes (views)."""

    def __init__(self, axis: int, parts: Sequence[int] | None = None, num_output: int | None = None) -> None:
        super().__init__()
        me = self.name
        if parts is None and num_output is None:
            raise ArgumentError(f"{me}: give parts (the piece sizes) or num_output, got neither")
        self.axis = _args.axis(me, "axis", axis)
        self.parts = None if parts is None else _args.ints(me, "parts", parts, low=0, scalar=False)
        self.num_output = None if num_output is None else _args.count(me, "num_output", num_output)

    def sizes(self, x: Any, axis: int) -> list[int]:
        n = x.shape[axis]
        if self.parts is not None:
            parts = list(self.parts)
            if sum(parts) != n:
                raise self.error(f"part sizes {parts} do not sum to {n}, the size of axis {axis}", x)
            return parts
        k = self.num_output
        if k is None or k < 1 or k > max(n, 1):
            raise self.error(f"cannot split an axis of size {n} into num_output={k} parts", x)
        # ONNX (opset 18): equal parts of ceil(n / k), the last one smaller when k does not divide n.
        step = -(-n // k)
        sizes = [min(step, n - i * step) for i in range(k)]
        if min(sizes) < 0:
            raise self.error(f"cannot split an axis of size {n} into num_output={k} parts", x)
        return sizes

    def forward(self, x: Any) -> tuple:
        self.axis_ = normalize_axis(self.axis, x.ndim, self.name)
        sizes = self.sizes(x, self.axis_)
        return tuple(self.xp.split(x, np.cumsum(sizes)[:-1].tolist(), axis=self.axis_))

    def backward(self, *dys: Any) -> Any:
        return self.xp.concatenate(dys, axis=self.axis_)


# -- broadcasting and repetition -----------------------------------------------------------------
class Expand(Operator):
    """ONNX Expand: broadcast ``x`` and ``shape`` against each other."""

    def __init__(self, shape: Sequence[int]) -> None:
        super().__init__()
        self.shape = _args.ints(self.name, "shape", shape, scalar=False)

    def forward(self, x: Any) -> Any:
        try:
            out = np.broadcast_shapes(x.shape, self.shape)
        except ValueError:
            raise self.error(f"cannot broadcast to {self.shape}", x) from None
        self.in_shape = x.shape
        # A copy, not NumPy's read-only broadcast view, so in-place ops on the result work.
        return self.xp.broadcast_to(x, out).copy()

    def backward(self, dy: Any) -> Any:
        return unbroadcast(dy, self.in_shape)


class Tile(Operator):
    """Repeat ``x`` ``repeats[i]`` times along axis ``i`` (NumPy ``tile`` rules)."""

    def __init__(self, repeats: int | Sequence[int]) -> None:
        super().__init__()
        self.repeats = _args.ints(self.name, "repeats", repeats, low=0)

    def forward(self, x: Any) -> Any:
        n = max(x.ndim, len(self.repeats))
        self.reps = (1,) * (n - len(self.repeats)) + self.repeats
        self.padded = (1,) * (n - x.ndim) + x.shape
        self.in_shape = x.shape
        return self.xp.tile(x, self.reps)

    def backward(self, dy: Any) -> Any:
        # Output axis i holds reps[i] copies of the input axis: split it in two and sum the copies.
        interleaved = [d for pair in zip(self.reps, self.padded) for d in pair]
        g = dy.reshape(interleaved).sum(axis=tuple(range(0, 2 * len(self.reps), 2)))
        return g.reshape(self.in_shape)


class Pad(Operator):
    """ONNX/SINGA Pad: ``pads = [x1_begin, x2_begin, ..., x1_end, x2_end]``; negative pads crop."""

    MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}

    def __init__(self, mode: str = "constant", pads: Sequence[int] = (), constant: float = 0.0) -> None:
        super().__init__()
        self.mode = _args.choice(self.name, "mode", mode, tuple(self.MODES))
        self.pads = list(_args.ints(self.name, "pads", pads, scalar=False))  # negative pads crop
        # Any number, infinities included: -inf pads a mask.
        self.constant = _args.instance(self.name, "constant", constant, Real, "a number")

    def forward(self, x: Any) -> Any:
        n = x.ndim
        if len(self.pads) != 2 * n:
            raise self.error(f"needs 2 * ndim = {2 * n} pads, got {self.pads}", x)
        begin, end = self.pads[:n], self.pads[n:]
        self.in_shape = x.shape
        # Crop first (negative pads), then pad the rest.
        self.crop = tuple(builtins.slice(-min(b, 0), s + min(e, 0)) for b, e, s in zip(begin, end, x.shape))
        if any(c.start > c.stop for c in self.crop):
            raise self.error(f"pads {self.pads} crop more than the input holds", x)
        core = x[self.crop]
        self.widths = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
        self.core_shape = core.shape
        if not any(b or e for b, e in self.widths):
            return core.copy()
        if self.mode != "constant" and any((b or e) and s == 0 for (b, e), s in zip(self.widths, core.shape)):
            raise self.error(f"mode {self.mode!r} cannot pad an empty axis", x)
        if self.mode == "constant":
            return self.xp.pad(
                core, self.widths, mode="constant", constant_values=x.dtype.type(self.constant)
            )
        return self.xp.pad(core, self.widths, mode=self.MODES[self.mode])

    def backward(self, dy: Any) -> Any:
        xp = self.xp
        g = dy
        for axis, (b, e) in enumerate(self.widths):
            if not (b or e):
                continue
            size = self.core_shape[axis]
            if self.mode == "constant":
                g = g[(builtins.slice(None),) * axis + (builtins.slice(b, b + size),)]
                continue
            # Each output position along this axis copies one input position: pad an arange
            # with the same mode to find which, then add the gradients of all copies.
            src = xp.pad(xp.arange(size), (b, e), mode=self.MODES[self.mode])
            acc = xp.zeros(g.shape[:axis] + (size,) + g.shape[axis + 1 :], dtype=g.dtype)
            xp.add.at(acc, (builtins.slice(None),) * axis + (src,), g)
            g = acc
        dx = xp.zeros(self.in_shape, dtype=dy.dtype)
        dx[self.crop] = g
        return dx


class Cast(Operator):
    """Convert to ``dtype``; float-to-float casts pass the gradient back (cast back)."""

    def __init__(self, dtype: Any) -> None:
        super().__init__()
        self.dtype = as_dtype(dtype)

    def forward(self, x: Any) -> Any:
        self.in_dtype = x.dtype
        return x.astype(self.dtype, copy=False)

    def backward(self, dy: Any) -> Any:
        if self.in_dtype.kind == "f" and self.dtype.kind == "f":
            return dy.astype(self.in_dtype, copy=False)
        return None


class RoundTo(Operator):
    """Values rounded by ``fn``, an elementwise function on host (NumPy) arrays that keeps the
    shape and dtype; the gradient passes straight through, as a float cast's does. ONNX import
    rounds casts to the types it holds widened (bfloat16, float8) with it, so that a model
    exported with such casts still trains."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        if not callable(fn):
            raise _args.bad(self.name, "fn", "be a function of a host array", fn)
        self.fn = fn

    def forward(self, x: Any) -> Any:
        self.float_in = x.dtype.kind == "f"
        y = self.fn(backend.to_host(x))  # ml_dtypes' types exist on the host only
        return self.xp.asarray(y, dtype=x.dtype)

    def backward(self, dy: Any) -> Any:
        return dy if self.float_in else None


class ShapeOf(Operator):
    """ONNX Shape: the input's shape as an int64 vector; no gradient."""

    def forward(self, x: Any) -> Any:
        return self.xp.asarray(x.shape, dtype=np.int64)

    def backward(self, dy: Any) -> Any:
        return None


# -- functions ---------------------------------------------------------------------------------
def reshape(x: Tensor, shape: Sequence[int]) -> Tensor:
    """``x`` with a new shape of the same size; one entry may be ``-1`` (inferred).

    >>> import numpy as np; from singa_lite import tensor
    >>> reshape(tensor.from_numpy(np.zeros((2, 3), np.float32)), (3, -1)).shape
    (3, 2)
    """
    return Reshape(shape)(x)[0]


def flatten(x: Tensor, axis: int = 1) -> Tensor:
    """2-D ``(prod(shape[:axis]), prod(shape[axis:]))`` (ONNX Flatten)."""
    return Flatten(axis)(x)[0]


def squeeze(x: Tensor, axis: int | Sequence[int] | None = None) -> Tensor:
    """Drop the size-1 axes ``axis`` (every size-1 axis when ``None``)."""
    return Squeeze(axis)(x)[0]


def unsqueeze(x: Tensor, axis: int | Sequence[int]) -> Tensor:
    """Insert size-1 axes so that they sit at ``axis`` in the output (ONNX Unsqueeze)."""
    return Unsqueeze(axis)(x)[0]


def transpose(x: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    """Permute the axes (reverse them when ``axes`` is ``None``)."""
    return Transpose(axes)(x)[0]


def cat(xs: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Concatenate tensors of one dtype whose shapes agree except along ``axis``."""
    if isinstance(xs, Tensor) or not isinstance(xs, Sequence) or not len(xs):
        raise _args.bad("cat", "xs", "be a non-empty list of tensors", xs)
    return Cat(axis)(*xs)[0]


concat = cat


def split(
    x: Tensor, axis: int, parts: Sequence[int] | None, num_output: int | None = None
) -> tuple[Tensor, ...]:
    """Split along ``axis`` into pieces of sizes ``parts``, or into ``num_output`` equal pieces
    (the last one smaller when they do not divide the axis, as ONNX Split)."""
    return Split(axis, parts, num_output)(x)


def expand(x: Tensor, shape: Sequence[int]) -> Tensor:
    """Broadcast ``x`` against ``shape`` (ONNX Expand: either side may hold the 1s)."""
    return Expand(shape)(x)[0]


broadcast_to = expand


def tile(x: Tensor, repeats: int | Sequence[int]) -> Tensor:
    """Repeat ``x`` along each axis (ONNX Tile; NumPy ``tile`` rules for short ``repeats``)."""
    return Tile(repeats)(x)[0]


def pad(x: Tensor, mode: str = "constant", pads: Sequence[int] = (), constant: float = 0.0) -> Tensor:
    """Pad (or, with negative pads, crop) each axis; ``pads`` is ONNX's ``[begins..., ends...]``.

    ``mode`` is ``constant`` (fill with ``constant``), ``reflect``, ``edge`` or ``wrap``.
    """
    return Pad(mode, pads, constant)(x)[0]


def depth_to_space(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
    """ONNX DepthToSpace on NCHW: move channel blocks into ``blocksize`` x ``blocksize`` tiles."""
    me = "depth_to_space"
    _args.tensor(me, "x", x)
    blocksize = _args.count(me, "blocksize", blocksize)
    _args.choice(me, "mode", mode, ("DCR", "CRD"))
    if x.ndim() != 4 or x.shape[1] % (blocksize * blocksize):
        raise ShapeError(
            f"depth_to_space: needs NCHW input with channels divisible by blocksize^2 = "
            f"{blocksize * blocksize}; got shape {x.shape}"
        )
    b, c, h, w = x.shape
    bs = blocksize
    if mode == "DCR":
        t = transpose(reshape(x, (b, bs, bs, c // bs**2, h, w)), (0, 3, 4, 1, 5, 2))
    else:
        t = transpose(reshape(x, (b, c // bs**2, bs, bs, h, w)), (0, 1, 4, 2, 5, 3))
    return reshape(t, (b, c // bs**2, h * bs, w * bs))


def space_to_depth(x: Tensor, blocksize: int) -> Tensor:
    """ONNX SpaceToDepth on NCHW: the inverse of ``depth_to_space`` in DCR mode."""
    _args.tensor("space_to_depth", "x", x)
    blocksize = _args.count("space_to_depth", "blocksize", blocksize)
    if x.ndim() != 4 or x.shape[2] % blocksize or x.shape[3] % blocksize:
        raise ShapeError(
            f"space_to_depth: needs NCHW input with H and W divisible by blocksize {blocksize}; "
            f"got shape {x.shape}"
        )
    b, c, h, w = x.shape
    bs = blocksize
    t = transpose(reshape(x, (b, c, h // bs, bs, w // bs, bs)), (0, 3, 5, 1, 2, 4))
    return reshape(t, (b, c * bs * bs, h // bs, w // bs))


def cast(x: Tensor, dtype: Any) -> Tensor:
    """``x`` converted to ``dtype``; differentiable between float dtypes."""
    return Cast(dtype)(x)[0]


def round_to(x: Tensor, fn: Any) -> Tensor:
    """``x`` rounded by the host function ``fn`` (same shape and dtype); the gradient passes
    straight through. See ``RoundTo``."""
    return RoundTo(fn)(x)[0]


def shape_of(x: Tensor) -> Tensor:
    """The shape of ``x`` as an int64 tensor (ONNX Shape)."""
    return ShapeOf()(x)[0]

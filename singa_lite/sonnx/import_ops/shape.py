"""ONNX handlers for constants, casts, shapes, indexing and data movement.

Arguments ONNX passes as tensors (shapes, axes, pads, repeats, split sizes) are read into Python
values with ``Node.ints``; the opset decides whether they come as attributes or inputs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import helper

from singa_lite import autograd, ops
from singa_lite.sonnx import limits
from singa_lite.sonnx.import_ops.base import HELD_WIDER, Node, storage_dtype, wrap
from singa_lite.tensor import Tensor

# ruff: noqa: N802  (handlers are named exactly after the ONNX operators)

__all__ = [
    "Cast", "CastLike", "Concat", "Constant", "ConstantOfShape", "DepthToSpace", "Dropout", "Expand",
    "Flatten", "Gather", "GatherElements", "NonZero", "OneHot", "Pad", "Range", "Reshape",
    "ScatterElements", "Shape", "Size", "Slice", "SpaceToDepth", "Split", "Squeeze", "Tile", "TopK",
    "Transpose", "Trilu", "Unsqueeze", "Where",
]  # fmt: skip


def onnx_dtype(n: Node, code: int) -> np.dtype:
    """The NumPy dtype of an ONNX ``TensorProto`` element type that singa_lite supports."""
    try:
        return storage_dtype(helper.tensor_dtype_to_np_dtype(code))
    except Exception:
        name = helper.tensor_dtype_to_string(code) if code else "UNDEFINED"
        raise n.fail(f"element type {name} has no singa_lite dtype") from None


# -- constants and casts ---------------------------------------------------------------------------
def Constant(n: Node) -> Any:
    """The constant given by one of ``value``, ``value_float(s)``, ``value_int(s)``.

    Returns a NumPy array: the backend folds it into a tensor on the model's device.
    """
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):  # fmt: skip
        if key in n.attrs:
            return np.asarray(n.attrs[key], dtype=dtype)
    if isinstance(n.attr("value"), np.ndarray):
        return n.attrs["value"]
    raise n.fail(f"only tensor, float and int constants are supported; got {sorted(n.attrs)}")


def ConstantOfShape(n: Node, shape: Tensor) -> Tensor:
    """A tensor of ``shape`` filled with ``value`` (float32 0 by default)."""
    value = n.attr("value")
    value = np.zeros(1, np.float32) if value is None else value
    if value.size != 1:
        raise n.fail(f"attribute value must hold one element, got {value.size}")
    dtype = storage_dtype(value.dtype)
    dims = n.check_size(n.ints(shape), dtype)
    return wrap(shape.device.xp.full(dims, value.reshape(-1)[0], dtype=dtype), shape)


def Cast(n: Node, x: Tensor) -> Tensor:
    """``x`` converted to the element type ``to`` (float casts stay differentiable).

    To a type held in a wider one (bfloat16, float8, float4, int4...: see
    ``import_ops.base.storage_dtype``) the values are rounded as ONNX defines, with ``saturate``
    and ``round_mode``, by onnx's reference cast, and kept in the wider type; from a float the
    gradient passes straight through (``ops.round_to``), so such a model still trains.
    """
    to = n.attr("to")
    held = onnx_dtype(n, to)
    n.check_size(x.shape, held)  # int8 to float64 takes 8 times the bytes
    if held.kind == "f" and getattr(x.creator, "real_valued", False):
        # A quantized integer of a graph being fine-tuned: its gradient passes (ops.quantize).
        return ops.cast(ops.integer_as_real(x), held)
    target = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    if target not in HELD_WIDER or target.kind in "iu":  # numpy's own casts (int8...) are exact
        return ops.cast(x, held)
    from onnx.reference.ops.op_cast import cast_to  # the spec's rounding, saturation, round modes

    saturate, mode = bool(n.attr("saturate", 1)), n.attr("round_mode", "up")
    widened = ops.cast(_integral(x, held), held)  # float32 for the floats, (u)int8 for (u)int4
    return ops.round_to(widened, lambda a: cast_to(a, to, saturate, mode).astype(held))


def CastLike(n: Node, x: Tensor, like: Tensor) -> Tensor:
    n.check_size(x.shape, like.dtype)
    return ops.cast(_integral(x, like.dtype), like.dtype)


def _integral(x: Tensor, to: np.dtype) -> Tensor:
    """``x`` as int64 where a float goes to an integer type: a float out of that type's range
    has no defined conversion (x86 wraps, CUDA saturates), an int64 one wraps everywhere (as
    ONNX's int4/int2 casts do). Anything else as it is."""
    return ops.cast(x, np.int64) if to.kind in "iu" and x.dtype.kind == "f" else x


# -- shapes ------------------------------------------------------------------------------------------
def Shape(n: Node, x: Tensor) -> Tensor:
    """The shape as int64; ``start``/``end`` (opset 15) select a part of it."""
    shape = list(x.shape)[slice(n.attr("start", 0), n.attr("end"))]
    return wrap(np.asarray(shape, np.int64), x)


def Size(n: Node, x: Tensor) -> Tensor:
    return wrap(np.asarray(x.size(), np.int64), x)


def Reshape(n: Node, x: Tensor, shape: Tensor | None = None) -> Tensor:
    """Reshape to ``shape``: 0 copies the input's size at that axis unless ``allowzero``."""
    target = n.ints(shape) if shape is not None else n.attr("shape")  # an attribute before opset 5
    if not n.attr("allowzero", 0):
        target = [x.shape[i] if s == 0 else s for i, s in enumerate(target)]
    return ops.reshape(x, target)


def Flatten(n: Node, x: Tensor) -> Tensor:
    return ops.flatten(x, n.attr("axis", 1))


def Squeeze(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
    return ops.squeeze(x, n.arg("axes", axes, 13))


def Unsqueeze(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
    return ops.unsqueeze(x, n.arg("axes", axes, 13))


def Transpose(n: Node, x: Tensor) -> Tensor:
    return ops.transpose(x, n.attr("perm"))


def Expand(n: Node, x: Tensor, shape: Tensor) -> Tensor:
    dims = n.ints(shape)
    limits.element_count(n, dims, "shape")  # no negative dims
    n.check_size(limits.broadcast(n, x.shape, dims), x.dtype)
    return ops.expand(x, dims)


def Tile(n: Node, x: Tensor, repeats: Tensor) -> Tensor:
    reps = n.ints(repeats)
    if len(reps) != x.ndim():
        raise n.fail(f"repeats {reps} must have one value per axis of the input {x.shape}")
    limits.element_count(n, reps, "repeats")
    n.check_size([d * r for d, r in zip(x.shape, reps)], x.dtype)
    return ops.tile(x, reps)


def Concat(n: Node, *xs: Tensor) -> Tensor:
    """Join along ``axis``; the output's size (a doubling chain grows it fast) is checked first."""
    parts = [x for x in xs if x is not None]
    if parts:
        n.check_size((sum(x.size() for x in parts),), max(x.dtype.itemsize for x in parts))
    return ops.cat(list(xs), n.attr("axis", 0))


def Split(n: Node, x: Tensor, split: Tensor | None = None) -> tuple[Tensor, ...]:
    """Split along ``axis`` by sizes (attribute before 13, input since) or into equal parts
    (``num_outputs`` since 18, otherwise the node's output count)."""
    sizes = n.arg("split", split, 13)
    count = n.attr("num_outputs", n.n_outputs)
    return ops.split(x, n.attr("axis", 0), sizes or None, count)


def Slice(
    n: Node,
    x: Tensor,
    starts: Tensor | None = None,
    ends: Tensor | None = None,
    axes: Tensor | None = None,
    steps: Tensor | None = None,
) -> Tensor:
    """``x[starts:ends:steps]`` along ``axes``: attributes before opset 10, inputs since."""
    if n.opset < 10:
        return ops.slice(x, n.attr("starts"), n.attr("ends"), n.attr("axes"))
    assert starts is not None and ends is not None  # required since opset 10
    return ops.slice(x, n.ints(starts), n.ints(ends), n.opt_ints(axes), n.opt_ints(steps))


def Pad(
    n: Node,
    x: Tensor,
    pads: Tensor | None = None,
    value: Tensor | None = None,
    axes: Tensor | None = None,
) -> Tensor:
    """Pad with ``mode`` constant/reflect/edge/wrap; pads and value are inputs since opset 11,
    and ``axes`` (opset 18) pads only some axes."""
    if n.opset < 11:
        widths, fill = n.attr("pads"), n.attr("value", 0.0)
    else:
        assert pads is not None  # required since opset 11
        widths, fill = n.ints(pads), n.scalar(value, 0)
    picked = n.opt_ints(axes)
    nd = x.ndim()
    if picked is not None:
        k = len(picked)
        if len(widths) != 2 * k or any(not -nd <= a < nd for a in picked):
            raise n.fail(f"pads {widths} and axes {picked} do not fit each other and the input {x.shape}")
        full = [0] * (2 * nd)
        for i, a in enumerate(picked):
            full[a % nd], full[a % nd + nd] = widths[i], widths[i + k]
        widths = full
    if widths is None or len(widths) != 2 * nd:
        raise n.fail(f"pads {widths} must have two values (begin, end) per axis of the input {x.shape}")
    n.check_size([d + widths[i] + widths[i + nd] for i, d in enumerate(x.shape)], x.dtype)
    return ops.pad(x, n.attr("mode", "constant"), widths, fill)


def DepthToSpace(n: Node, x: Tensor) -> Tensor:
    return ops.depth_to_space(x, n.attr("blocksize"), n.attr("mode", "DCR"))


def SpaceToDepth(n: Node, x: Tensor) -> Tensor:
    """Move ``blocksize`` x ``blocksize`` tiles into channels (DCR order; CRD since opset 25)."""
    bs = n.attr("blocksize")
    if n.attr("mode", "DCR") == "DCR":
        return ops.space_to_depth(x, bs)
    b, c, h, w = x.shape
    t = ops.transpose(ops.reshape(x, (b, c, h // bs, bs, w // bs, bs)), (0, 1, 3, 5, 2, 4))
    return ops.reshape(t, (b, c * bs * bs, h // bs, w // bs))


def Range(n: Node, start: Tensor, limit: Tensor, delta: Tensor) -> Tensor:
    """``start, start + delta, ...`` up to ``limit`` (exclusive), in ``start``'s dtype.

    The three scalars are host arguments (the output's length depends on them), so the
    sequence is made on the host, by NumPy's rules for the inputs' own dtype, and uploaded.
    """
    for what, t in (("start", start), ("limit", limit), ("delta", delta)):
        if t.size() != 1:
            raise n.fail(f"{what} must be a scalar, got shape {t.shape}")
    first, last, step = (n.values(t).reshape(-1)[0] for t in (start, limit, delta))
    count = _range_count(n, first.item(), last.item(), step.item())
    n.check_size((count,), start.dtype)
    return wrap(np.arange(first, last, step).astype(start.dtype), start)


def _range_count(n: Node, first: Any, last: Any, step: Any) -> int:
    """``max(ceil((limit - start) / delta), 0)``, exactly for integers."""
    if step == 0:
        raise n.fail("delta must not be 0")
    if all(isinstance(v, int) for v in (first, last, step)):
        return max(-((first - last) // step), 0)
    span = (float(last) - float(first)) / float(step)
    if not math.isfinite(span):
        raise n.fail(f"start {first}, limit {last} and delta {step} give no finite number of elements")
    return max(math.ceil(span), 0)


# -- indexing ----------------------------------------------------------------------------------------
def Gather(n: Node, x: Tensor, indices: Tensor) -> Tensor:
    return ops.gather(x, n.attr("axis", 0), indices)


def GatherElements(n: Node, x: Tensor, indices: Tensor) -> Tensor:
    return ops.gather_elements(x, indices, n.attr("axis", 0))


def ScatterElements(n: Node, x: Tensor, indices: Tensor, updates: Tensor) -> Tensor:
    return ops.scatter_elements(x, indices, updates, n.attr("axis", 0), n.attr("reduction", "none"))


def Where(n: Node, cond: Tensor, x: Tensor, y: Tensor) -> Tensor:
    return ops.where(cond, x, y)


def Trilu(n: Node, x: Tensor, k: Tensor | None = None) -> Tensor:
    """The upper (``upper=1``) or lower triangle of the last two axes, from diagonal ``k``
    (positive above the main one); zeros elsewhere. PyTorch exports ``triu``/``tril``, and so
    every in-graph causal mask, as this operator."""
    xp = x.device.xp
    rows, cols = x.shape[-2:]
    offset = xp.arange(cols)[None, :] - xp.arange(rows)[:, None]  # column minus row
    diag = int(n.scalar(k, 0))
    keep = offset >= diag if n.attr("upper", 1) else offset <= diag
    return ops.where(wrap(keep, x), x, 0)


def TopK(n: Node, x: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (``largest=1``) or smallest values along ``axis``, sorted, and their
    int64 indices; of equal values the lower index comes first, as ONNX requires, and NaN
    ranks above every number (as in onnxruntime) for ``largest`` and below them otherwise."""
    if not -x.ndim() <= n.attr("axis", -1) < x.ndim():
        raise n.fail(f"axis {n.attr('axis', -1)} is out of range for the input of shape {x.shape}")
    axis = n.attr("axis", -1) % x.ndim()
    if k.size() != 1:
        raise n.fail(f"k must hold one value, got shape {k.shape}")
    count = int(n.scalar(k))
    if not 0 <= count <= x.shape[axis]:
        raise n.fail(f"k = {count} must lie in [0, {x.shape[axis]}], the size of axis {axis}")
    order = _ranking(x.device.xp, x.data, axis, bool(n.attr("largest", 1)))
    first_k = (slice(None),) * axis + (slice(0, count),)
    indices = wrap(order[first_k].astype(np.int64), x)
    return ops.gather_elements(x, indices, axis), indices


def _ranking(xp: Any, data: Any, axis: int, largest: bool) -> Any:
    """The indices that sort ``data`` along ``axis`` (descending for ``largest``), ties by
    lower index, NaN first when descending and last when ascending.

    Only stable ``argsort`` and ``take_along_axis``, which NumPy and CuPy define alike (CuPy's
    ``lexsort`` takes no axis): a stable sort by a secondary key, then a stable sort of the
    primary key gathered in that order, sorts by both (lexsort in two passes).
    """
    if data.dtype.kind != "f":
        # ``~`` reverses the order of integers (and bools) without the overflow of ``-INT_MIN``.
        return xp.argsort(~data if largest else data, axis=axis, kind="stable")
    nan = xp.isnan(data)
    # NaN is given a rank among the numbers by the first pass and moved by the second.
    key = xp.where(nan, 0, -data if largest else data)
    first = xp.argsort(key, axis=axis, kind="stable")
    # int8 keys: NaN 0 first when descending, 1 last when ascending.
    rank = (nan != largest).astype(np.int8)
    second = xp.argsort(xp.take_along_axis(rank, first, axis=axis), axis=axis, kind="stable")
    return xp.take_along_axis(first, second, axis=axis)


def NonZero(n: Node, x: Tensor) -> Tensor:
    return ops.nonzero(x)


def OneHot(n: Node, indices: Tensor, depth: Tensor, values: Tensor) -> Tensor:
    """``values[1]`` at each index along a new ``axis`` of size ``depth``, else ``values[0]``."""
    if indices.dtype.kind == "f":
        indices = ops.cast(indices, np.int64)
    if depth.size() != 1 or values.size() != 2:
        raise n.fail(f"depth must hold one value and values two, got shapes {depth.shape} and {values.shape}")
    d = n.scalar(depth)
    if not float(d).is_integer() or d < 1:
        raise n.fail(f"depth must be a positive integer, got {d}")
    axis = n.attr("axis", -1)
    if not -indices.ndim() - 1 <= axis <= indices.ndim():
        raise n.fail(f"axis {axis} is out of range for indices of rank {indices.ndim()}")
    # the one-hot comparison is made in int64 before the values are placed
    n.check_size((indices.size(), int(d)), max(8, values.dtype.itemsize))
    return ops.onehot(indices, int(d), values, axis)


# -- dropout: inference is the identity; a mask output reports every element as kept ---------------
def Dropout(
    n: Node, x: Tensor, ratio: Tensor | None = None, training_mode: Tensor | None = None
) -> Tensor | tuple[Tensor, Tensor]:
    """Identity in inference; inverted dropout while training (``training_mode`` input since
    opset 12, or a SONNXModel in training). The optional mask says which elements were kept."""
    rate = n.scalar(ratio, n.attr("ratio", 0.5)) if n.opset >= 12 else n.attr("ratio", 0.5)
    train = bool(n.scalar(training_mode, False))
    if (train or autograd.is_recording()) and rate > 0:
        y = ops.dropout(x, rate, training=True)
        mask = wrap(y.data != 0, x)
    else:
        y = ops.identity(x)
        mask = wrap(x.device.xp.ones(x.shape, dtype=np.bool_), x)
    return (y, mask) if n.n_outputs > 1 else y

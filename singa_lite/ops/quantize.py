"""Linear quantization (ONNX's QuantizeLinear/DequantizeLinear) and exact integer products.

A quantized value is ``q = saturate(round(x / scale) + zero_point)`` (round half to even) and
dequantizes to ``(q - zero_point) * scale``. ``scale`` and ``zero_point`` are one value (per
tensor), one per index of ``axis`` (per axis), or ``block_size`` consecutive indices of ``axis``
sharing one (blocked: they have ``x``'s rank, ``ceil(x.shape[axis] / block_size)`` along
``axis``).

Target types: int8, uint8, int16, uint16, int32; int4/uint4 and int2/uint2 (held as int8/uint8,
saturated to their own range); the float8s and float4 (``ml_dtypes`` types, held as float32
values of that type, rounded on the host).

Integer products (``matmul_integer``, ``conv_integer``) subtract the zero points and multiply
in float64, which is exact for integer sums below 2**53 (any 8- or 16-bit operands with a
reduction length under 2**21), then wrap to int32 as an int32 accumulator does.

Gradients: the rounding passes the gradient straight through (STE), zero where the value
saturated; ``dequantize_linear`` passes ``dy * scale`` to its integer input, and the integer
products pass gradients to their integer inputs as if the integers were real numbers, so a
quantized graph fine-tunes through its quantized weights (scales and zero points are
constants: they get no gradient).

>>> import numpy as np
>>> from singa_lite import tensor
>>> x = tensor.from_numpy(np.array([-1.0, 0.26, 3.0], np.float32))
>>> q = quantize_linear(x, tensor.from_numpy(np.array(0.02, np.float32)), dtype=np.int8)
>>> q.numpy().tolist()
[-50, 13, 127]
>>> dequantize_linear(q, tensor.from_numpy(np.array(0.02, np.float32))).numpy().tolist()
[-1.0, 0.25999999046325684, 2.5399999618530273]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa_lite import _args, backend
from singa_lite.autograd import Operator
from singa_lite.errors import DTypeError, ShapeError
from singa_lite.ops import _util
from singa_lite.tensor import Tensor

__all__ = [
    "conv_integer",
    "dequantize_linear",
    "dynamic_quantize_linear",
    "integer_as_real",
    "matmul_integer",
    "qlinear_conv",
    "qlinear_matmul",
    "quant_range",
    "quant_storage",
    "quantize_linear",
]

_INT_TYPES = tuple(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32))


def _ml_dtypes() -> Any:
    import ml_dtypes  # a dependency of onnx; needed only for the float8/sub-byte types

    return ml_dtypes


def _sub_byte(dtype: np.dtype) -> bool:
    return dtype.kind == "V" and dtype.itemsize == 1 and "int" in dtype.name


def _float_target(dtype: np.dtype) -> bool:
    """A float8 or float4 (``ml_dtypes``; some report kind "f", others "V")."""
    return dtype.itemsize == 1 and dtype.name.startswith("float")


def _target_dtype(owner: str, dtype: Any) -> np.dtype:
    """``dtype`` as a NumPy dtype, or ``DTypeError`` naming the argument."""
    try:
        return np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"{owner}: dtype must be a data type, got {dtype!r:.60}") from None


def quant_storage(dtype: Any) -> np.dtype:
    """The singa_lite dtype holding quantized values of ``dtype`` (int4 -> int8, uint4 -> uint8,
    a float8 -> float32; the others are themselves)."""
    d = _target_dtype("quant_storage", dtype)
    if d in _INT_TYPES:
        return d
    if _sub_byte(d):
        return np.dtype(np.uint8 if d.name.startswith("u") else np.int8)
    if _float_target(d):
        return np.dtype(np.float32)
    raise DTypeError(
        f"quantization to dtype {d} is not supported; use int8, uint8, int16, uint16, int32, int4, uint4, "
        "int2, uint2, a float8 or float4"
    )


def quant_range(dtype: Any) -> tuple[float, float]:
    """The lowest and highest value of the quantized type ``dtype`` (int4: -8, 7; a float8: its
    largest finite magnitude)."""
    d = _target_dtype("quant_range", dtype)
    if d in _INT_TYPES:
        info = np.iinfo(d)
        return float(info.min), float(info.max)
    quant_storage(d)  # refuses types that are not quantization targets
    ml = _ml_dtypes()
    info = ml.iinfo(d) if _sub_byte(d) else ml.finfo(d)
    return float(info.min), float(info.max)


def expand_param(xp: Any, p: Any, shape: tuple, axis: int, block_size: int, what: str) -> Any:
    """A scale or zero point ``p`` shaped to broadcast against an input of ``shape``: a single
    value as it is, a 1-D one along ``axis``, a blocked one repeated ``block_size`` times along
    ``axis`` (and cut to its length)."""
    if p.size == 1 and block_size == 0:
        return p.reshape(())
    if not shape:
        raise ShapeError(f"{what}: a 0-d input takes one {what.split()[-1]} value, got shape {p.shape}")
    ax = _util.normalize_axis(axis, len(shape), what)
    n = shape[ax]
    if block_size <= 0:
        if p.ndim != 1 or p.shape[0] != n:
            raise ShapeError(
                f"{what}: per-axis values must have shape ({n},) for axis {ax} of {shape}, got {p.shape}"
            )
        return p.reshape((1,) * ax + (n,) + (1,) * (len(shape) - ax - 1))
    blocks = -(-n // block_size)
    want = shape[:ax] + (blocks,) + shape[ax + 1 :]
    if tuple(p.shape) != want:
        raise ShapeError(
            f"{what}: blocked values of block_size {block_size} along axis {ax} of {shape} must have "
            f"shape {want}, got {p.shape}"
        )
    return xp.repeat(p, block_size, axis=ax)[(slice(None),) * ax + (slice(0, n),)]


def _round_float8(xp: Any, v: Any, dtype: np.dtype, saturate: bool) -> Any:
    """``v`` rounded to the float8/float4 type ``dtype`` (to nearest even, on the host since
    ``ml_dtypes`` is NumPy-only), kept as float32; ``saturate`` clips to the finite range first."""
    host = backend.to_host(v).astype(np.float32)
    if saturate:
        lo, hi = quant_range(dtype)
        host = np.where(np.isnan(host), host, np.clip(host, lo, hi))
    return xp.asarray(host.astype(dtype).astype(np.float32))


class QuantizeLinear(Operator):
    """``saturate(round(x / scale) + zero_point)`` in ``dtype``; the STE gradient ``dq / scale``
    where the value did not saturate."""

    real_valued = True  # its integer outputs take gradients (see integer_as_real)

    def __init__(self, dtype: Any, axis: int = 1, block_size: int = 0, saturate: bool = True) -> None:
        super().__init__()
        self.target = _target_dtype(self.name, dtype)
        self.storage = quant_storage(self.target)
        self.axis = _args.integer(self.name, "axis", axis)
        self.block_size = _args.count(self.name, "block_size", block_size, 0)
        flag = _args.instance(self.name, "saturate", saturate, (bool, np.bool_), "True or False")
        self.saturate = bool(flag)

    def forward(self, x: Any, scale: Any, zero_point: Any = None) -> Any:
        xp = self.xp
        work = x.dtype if x.dtype in (np.float32, np.float64) else np.dtype(np.float32)
        s = expand_param(xp, scale, x.shape, self.axis, self.block_size, f"{self.name} scale").astype(work)
        v = x.astype(work, copy=False) / s
        z = None
        if zero_point is not None:
            z = expand_param(xp, zero_point, x.shape, self.axis, self.block_size, f"{self.name} zero point")
        lo, hi = quant_range(self.target)
        if _float_target(self.target):
            if z is not None:
                v = v + z.astype(work)
            q = _round_float8(xp, v, self.target, self.saturate)
            self.keep = xp.isfinite(v) & (v >= lo) & (v <= hi)
        else:
            v = xp.rint(v)
            if z is not None:
                v = v + z.astype(work)
            self.keep = (v >= lo) & (v <= hi)
            q = xp.clip(v, lo, hi).astype(self.storage)
        self.scale, self.in_dtype = s, x.dtype
        return q

    def backward(self, dq: Any) -> Any:
        dx = None
        if self.needs_grad[0] and self.in_dtype.kind == "f":
            dx = (dq / self.scale * self.keep).astype(self.in_dtype, copy=False)
        return (dx, None, None) if len(self.needs_grad) == 3 else (dx, None)


class DequantizeLinear(Operator):
    """``(q - zero_point) * scale``, the difference taken exactly (as integers) and rounded once
    to the output type; the gradient ``dy * scale`` goes to ``q``."""

    def __init__(self, axis: int = 1, block_size: int = 0, dtype: Any = None) -> None:
        super().__init__()
        self.axis = _args.integer(self.name, "axis", axis)
        self.block_size = _args.count(self.name, "block_size", block_size, 0)
        self.dtype = None if dtype is None else _target_dtype(self.name, dtype)

    def forward(self, q: Any, scale: Any, zero_point: Any = None) -> Any:
        xp = self.xp
        out = self.dtype or scale.dtype
        s = expand_param(xp, scale, q.shape, self.axis, self.block_size, f"{self.name} scale")
        exact = np.float64 if q.dtype.kind in "iu" or q.dtype == np.float64 else np.float32
        d = q.astype(exact)
        if zero_point is not None:
            z = expand_param(xp, zero_point, q.shape, self.axis, self.block_size, f"{self.name} zero point")
            d = d - z.astype(exact)
        self.scale = s.astype(out, copy=False)
        return (d.astype(out) * self.scale).astype(out, copy=False)

    def backward(self, dy: Any) -> Any:
        dq = dy * self.scale if self.needs_grad[0] else None
        return (dq, None, None) if len(self.needs_grad) == 3 else (dq, None)


class DynamicQuantizeLinear(Operator):
    """uint8 quantization with the scale and zero point of ``x``'s range (widened to hold 0);
    outputs ``(q, scale, zero_point)``. The gradient goes straight through to ``x``."""

    real_valued = True  # its integer outputs take gradients (see integer_as_real)

    optional_grads = (1, 2)

    def forward(self, x: Any) -> Any:
        xp = self.xp
        f32 = np.float32
        lo = xp.minimum(x.min(), f32(0)).astype(f32) if x.size else xp.asarray(0, f32)
        hi = xp.maximum(x.max(), f32(0)).astype(f32) if x.size else xp.asarray(0, f32)
        scale = ((hi - lo) / f32(255)).astype(f32)
        safe = xp.where(scale == 0, f32(1), scale)
        zp = xp.clip(xp.rint((f32(0) - lo) / safe), 0, 255)
        v = xp.rint(x.astype(f32) / safe) + zp
        self.keep, self.scale = (v >= 0) & (v <= 255), safe
        return xp.clip(v, 0, 255).astype(np.uint8), scale, zp.astype(np.uint8)

    def backward(self, dq: Any, ds: Any = None, dz: Any = None) -> Any:
        return (dq / self.scale * self.keep).astype(np.float32)


class IntegerAsReal(Operator):
    """An integer tensor as float64 (exact), the gradient passed back to it unchanged: the
    integers of a quantized graph are treated as real numbers for training."""

    def forward(self, q: Any) -> Any:
        return q.astype(np.float64)

    def backward(self, dy: Any) -> Any:
        return dy


class Requantize(Operator):
    """An int32 accumulator to ``dtype``: ``saturate(round(acc * multiplier) + zero_point)``
    with ``multiplier = in_scale / y_scale`` in float32, as onnxruntime computes it; the
    gradient ``dq * multiplier`` where the value did not saturate."""

    real_valued = True

    def __init__(self, multiplier: Any, zero_point: Any, dtype: Any) -> None:
        super().__init__()
        self.multiplier, self.zero_point = multiplier, zero_point
        self.target = np.dtype(dtype)

    def forward(self, acc: Any) -> Any:
        xp = self.xp
        lo, hi = quant_range(self.target)
        m = xp.asarray(self.multiplier, dtype=np.float32)
        v = xp.rint(acc.astype(np.float32) * m) + xp.asarray(self.zero_point, dtype=np.float32)
        self.keep, self.m = (v >= lo) & (v <= hi), m
        return xp.clip(v, lo, hi).astype(quant_storage(self.target))

    def backward(self, dq: Any) -> Any:
        return dq * self.m * self.keep


class RoundToInt32(Operator):
    """An integer-valued float64 tensor as int32, wrapping as an int32 accumulator does; the
    gradient passes straight through."""

    real_valued = True

    def forward(self, y: Any) -> Any:
        return self.xp.rint(y).astype(np.int64).astype(np.int32)

    def backward(self, dy: Any) -> Any:
        return dy.astype(np.float64)


def integer_as_real(q: Tensor) -> Tensor:
    """An integer tensor as float64 (exact) whose gradient passes back to ``q`` unchanged: how
    a quantized graph's integers (outputs of ops marked ``real_valued``) train as reals."""
    _check_int("integer_as_real", q)
    return IntegerAsReal()(q)[0]


def _check_int(name: str, *ts: Tensor | None) -> None:
    for t in ts:
        if t is not None:
            _args.tensor(name, "each input", t)
        if t is not None and t.dtype.kind not in "iu":
            raise DTypeError(f"{name}: expects integer tensors, got {t.dtype}")


def quantize_linear(
    x: Tensor,
    scale: Tensor,
    zero_point: Tensor | None = None,
    axis: int = 1,
    block_size: int = 0,
    dtype: Any = None,
    saturate: bool = True,
) -> Tensor:
    """``saturate(round(x / scale) + zero_point)`` (ONNX QuantizeLinear). ``dtype``: the target
    type (default: ``zero_point``'s, else uint8); int4/uint4/int2/uint2 come back as int8/uint8
    values in their range, float8s as float32 values of the float8 type."""
    target = (
        _target_dtype("quantize_linear", dtype)
        if dtype is not None
        else (zero_point.dtype if zero_point is not None else np.uint8)
    )
    op = QuantizeLinear(target, axis, block_size, saturate)
    return (op(x, scale) if zero_point is None else op(x, scale, zero_point))[0]


def dequantize_linear(
    q: Tensor,
    scale: Tensor,
    zero_point: Tensor | None = None,
    axis: int = 1,
    block_size: int = 0,
    dtype: Any = None,
) -> Tensor:
    """``(q - zero_point) * scale`` in ``dtype`` (default ``scale``'s) (ONNX DequantizeLinear)."""
    op = DequantizeLinear(axis, block_size, dtype)
    return (op(q, scale) if zero_point is None else op(q, scale, zero_point))[0]


def dynamic_quantize_linear(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(q, scale, zero_point)``: ``x`` quantized to uint8 over its own range (which is widened
    to hold 0) (ONNX DynamicQuantizeLinear)."""
    if x.dtype.kind != "f":
        raise DTypeError(f"dynamic_quantize_linear: expects a float tensor, got {x.dtype}")
    q, s, z = DynamicQuantizeLinear()(x)
    return q, s, z


def _shifted(t: Tensor, zp: Tensor | None, axis: int) -> Tensor:
    """``t - zp`` in float64 (exact), ``zp`` one value or one per index of ``axis``. The zero
    point goes through recorded ops: it may be computed (DynamicQuantizeLinear's)."""
    from singa_lite.ops.shape import reshape

    real = IntegerAsReal()(t)[0]
    if zp is None:
        return real
    shape = [1] * t.ndim()
    if zp.size() > 1:
        shape[axis] = zp.size()
    return real - reshape(IntegerAsReal()(zp)[0], shape if zp.size() > 1 else ())


def matmul_integer(
    a: Tensor, b: Tensor, a_zero_point: Tensor | None = None, b_zero_point: Tensor | None = None
) -> Tensor:
    """``(a - a_zero_point) @ (b - b_zero_point)`` accumulated exactly in int32 (ONNX
    MatMulInteger). ``a_zero_point``: one value or one per row of ``a``; ``b_zero_point``: one
    value or one per column of ``b``."""
    from singa_lite.ops.linalg import matmul

    _check_int("matmul_integer", a, b, a_zero_point, b_zero_point)
    if a.ndim() < 1 or b.ndim() < 1:
        raise ShapeError(f"matmul_integer: expects tensors of rank 1 or more, got {a.shape}, {b.shape}")
    for zp, t, axis, what in ((a_zero_point, a, -2, "rows of a"), (b_zero_point, b, -1, "columns of b")):
        if zp is not None and zp.size() > 1 and (t.ndim() < 2 or zp.shape != (t.shape[axis],)):
            raise ShapeError(
                f"matmul_integer: a zero point of shape {zp.shape} is not one per {what} {t.shape}"
            )
    y = matmul(_shifted(a, a_zero_point, max(a.ndim() - 2, 0)), _shifted(b, b_zero_point, b.ndim() - 1))
    return RoundToInt32()(y)[0]


def conv_integer(
    x: Tensor,
    W: Tensor,
    x_zero_point: Tensor | None = None,
    w_zero_point: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    group: int = 1,
) -> Tensor:
    """``conv(x - x_zero_point, W - w_zero_point)`` accumulated exactly in int32 (ONNX
    ConvInteger); padding adds zero point values (zeros after the shift). ``w_zero_point``:
    one value or one per output channel. ``padding``: one int, one per spatial axis, or
    ``(begin, end)`` pairs per axis."""
    from singa_lite.ops.conv_general import conv_nd

    _check_int("conv_integer", x, W, x_zero_point, w_zero_point)
    if x_zero_point is not None and x_zero_point.size() != 1:
        raise ShapeError(f"conv_integer: x_zero_point must be one value, got shape {x_zero_point.shape}")
    if w_zero_point is not None and w_zero_point.size() > 1 and w_zero_point.shape != (W.shape[0],):
        raise ShapeError(
            f"conv_integer: w_zero_point of shape {w_zero_point.shape} is not one per output"
            f" channel of {W.shape}"
        )
    y = conv_nd(
        _shifted(x, x_zero_point, 1), _shifted(W, w_zero_point, 0), None, stride, padding, dilation, group
    )
    return RoundToInt32()(y)[0]


def _requantize(acc: Tensor, multiplier: Any, y_zero_point: Tensor, axis: int) -> Tensor:
    """The int32 accumulator ``acc`` as ``y_zero_point``'s type; ``multiplier`` (float32, one
    value or one per index of ``axis``) takes it to the output scale."""
    z = y_zero_point.data
    if z.size != 1:
        raise ShapeError(f"the output zero point must be one value, got shape {z.shape}")
    m = multiplier
    if m.size > 1:
        shape = [1] * acc.ndim()
        shape[axis] = m.size
        m = m.reshape(shape)
    return Requantize(m.reshape(()) if m.size == 1 else m, z.reshape(()), y_zero_point.dtype)(acc)[0]


def _multiplier(in_scale: Tensor, w_scale: Tensor, y_scale: Tensor) -> Any:
    """``in_scale * w_scale / y_scale`` in float32 (one value, or one per ``w_scale`` value)."""
    f32 = np.float32
    a = in_scale.data.astype(f32).reshape(())
    return (a * w_scale.data.astype(f32).reshape(-1) / y_scale.data.astype(f32).reshape(())).astype(f32)


def qlinear_matmul(
    a: Tensor,
    a_scale: Tensor,
    a_zero_point: Tensor,
    b: Tensor,
    b_scale: Tensor,
    b_zero_point: Tensor,
    y_scale: Tensor,
    y_zero_point: Tensor,
) -> Tensor:
    """The quantized product ``quantize(dequantize(a) @ dequantize(b))`` through an exact int32
    accumulator (ONNX QLinearMatMul); ``b``'s scale and zero point per tensor or per column."""
    for t in (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
        _args.tensor("qlinear_matmul", "each input", t)
    for t in (a_scale, a_zero_point, y_scale):
        if t.size() != 1:
            raise ShapeError(
                f"qlinear_matmul: a's and y's scale and zero point must be one value, got {t.shape}"
            )
    acc = matmul_integer(a, b, a_zero_point, b_zero_point)
    return _requantize(acc, _multiplier(a_scale, b_scale, y_scale), y_zero_point, acc.ndim() - 1)


def qlinear_conv(
    x: Tensor,
    x_scale: Tensor,
    x_zero_point: Tensor,
    W: Tensor,
    w_scale: Tensor,
    w_zero_point: Tensor,
    y_scale: Tensor,
    y_zero_point: Tensor,
    B: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    group: int = 1,
) -> Tensor:
    """The quantized convolution (ONNX QLinearConv): an exact int32 accumulator plus the int32
    bias ``B`` (scale ``x_scale * w_scale``), requantized to ``y_scale``/``y_zero_point``;
    ``w_scale``/``w_zero_point`` per tensor or per output channel."""
    acc = conv_integer(x, W, x_zero_point, w_zero_point, stride, padding, dilation, group)
    if B is not None:
        if B.dtype != np.int32 or B.shape != (W.shape[0],):
            raise ShapeError(
                f"qlinear_conv: the bias must be int32 of shape ({W.shape[0]},), got {B.dtype} {B.shape}"
            )
        from singa_lite.ops.shape import reshape

        b = IntegerAsReal()(reshape(B, (1, -1) + (1,) * (acc.ndim() - 2)))[0]
        acc = RoundToInt32()(IntegerAsReal()(acc)[0] + b)[0]
    return _requantize(acc, _multiplier(x_scale, w_scale, y_scale), y_zero_point, 1)

"""``Tensor``: an array on a device, with the links autograd records.

A tensor wraps one backend array (``numpy.ndarray`` or ``cupy.ndarray``) in ``data``. Arithmetic,
comparison, indexing, ``reshape`` and ``transpose`` go through differentiable operators, so
``y = x * w + b`` is recorded while ``autograd.training`` is on. In-place methods
(``copy_from_numpy``, ``gaussian``, ``+=`` ...) change ``data`` and are not recorded, as in SINGA.

>>> import numpy as np
>>> from singa_lite import tensor
>>> t = tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
>>> (t * 2 + 1).shape
(2, 3)
>>> tensor.to_numpy(t.T())[0].tolist()
[0.0, 3.0]
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np

from singa_lite import backend as _backend
from singa_lite import device as _device
from singa_lite.errors import ArgumentError, DTypeError, ShapeError

float16 = np.float16
float32 = np.float32
float64 = np.float64
int32 = np.int32
int64 = np.int64
bool_ = np.bool_
int8 = np.int8
int16 = np.int16
uint8 = np.uint8
uint16 = np.uint16
uint32 = np.uint32
uint64 = np.uint64

_SINGA_TYPE_NAMES = {"float": float32, "int": int32}  # SINGA's as_type('float'/'int')

SINGA_DTYPES = tuple(np.dtype(t) for t in (float16, float32, float64, int32, int64, bool_))
"""The six types SINGA's C++ tensors hold."""
SUPPORTED_DTYPES = (*SINGA_DTYPES, *(np.dtype(t) for t in (int8, int16, uint8, uint16, uint32, uint64)))
"""SINGA's six and the other integer types ONNX models carry (quantized weights, indices,
masks). Arithmetic on them follows NumPy's (and ONNX's) rules: ``int8 + int8`` is int8 and
wraps around; mixing types promotes as NumPy does."""


def as_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as a NumPy dtype, or ``DTypeError`` if singa_lite does not support it."""
    if dtype is bool:
        dtype = np.bool_
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"{dtype!r} is not a dtype") from None
    if d not in SUPPORTED_DTYPES:
        names = ", ".join(str(t) for t in SUPPORTED_DTYPES)
        raise DTypeError(f"dtype {d} is not supported; use one of {names} (e.g. arr.astype('float32'))")
    return d


_dummy_count = itertools.count()


class Tensor:
    """An n-dimensional array on a device (SINGA's constructor signature).

    ``requires_grad``: ops on this tensor are recorded for backward (SINGA's default: True).
    ``stores_grad``: ``autograd.backward`` yields this tensor's gradient (parameters).
    """

    __array_priority__ = 1000  # so `ndarray + tensor` defers to Tensor.__radd__
    data: Any  # the backend array (numpy.ndarray or cupy.ndarray)
    _dummy = False  # the name was made up when first read (see ``name``)

    def __init__(
        self,
        shape: tuple = (),
        device: _device.Device | None = None,
        dtype: Any = None,
        data: Any = None,
        requires_grad: bool = True,
        stores_grad: bool = False,
        creator: Any = None,
        name: str | None = None,
    ) -> None:
        dev = device if device is not None else _device.get_default_device()
        dev.activate()
        arr: Any
        if data is None:
            d = as_dtype(float32 if dtype is None else dtype)
            arr = dev.xp.zeros(_shape(shape), dtype=d)
        else:
            # The tensor owns a copy, as SINGA's constructor does: writing into it (placeholders
            # filled with copy_from_numpy, in-place updates) never touches the caller's data.
            src = data.data if isinstance(data, Tensor) else data
            if _backend.backend_of(src).name == "numpy":
                src = np.array(src)  # a copy; also takes lists and Python scalars
                if src.dtype == object:
                    raise DTypeError("Tensor: object arrays are not supported")
            arr = _to_device_array(src, dev)
            if arr is src and not isinstance(arr, np.ndarray):
                arr = arr.copy()  # a device array already on `dev`
            as_dtype(arr.dtype)
            if dtype is not None and arr.dtype != as_dtype(dtype):
                arr = arr.astype(as_dtype(dtype))
        self.data = arr
        self.device = dev
        self.requires_grad = requires_grad
        self.stores_grad = stores_grad
        self.creator = creator
        self._index = 0
        self._name = name

    @classmethod
    def _wrap(cls, data: Any, dev: Any, requires_grad: bool, creator: Any, index: int) -> Tensor:
        """Fast path for op outputs: no checks, no copies."""
        t = cls.__new__(cls)
        t.data = data
        t.device = dev
        t.requires_grad = requires_grad
        t.stores_grad = False
        t.creator = creator
        t._index = index
        t._name = None
        return t

    # -- name -------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """This tensor's name. A tensor given none is named ``Dummy#N`` (unique in this process,
        as SINGA names it) when the name is first read, so ``opt.apply(p.name, p, g)`` works on
        any tensor. Assigning a tensor to a layer attribute renames it by its path (``conv1.W``),
        whatever name it had."""
        if self._name is None:
            self._name = f"Dummy#{next(_dummy_count)}"
            self._dummy = True
        return self._name

    @name.setter
    def name(self, value: str | None) -> None:
        self._name = value
        self._dummy = False

    def is_dummy(self) -> bool:
        """True while this tensor has no name of its own (SINGA's test): it was never named,
        or only given a ``Dummy#N`` one."""
        return self._name is None or self._dummy

    # -- properties -------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    def ndim(self) -> int:
        return self.data.ndim

    def size(self) -> int:
        return int(self.data.size)

    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def is_empty(self) -> bool:
        return self.data.size == 0

    def __len__(self) -> int:
        if not self.data.ndim:
            # A TypeError, as len() of a 0-d NumPy array; typed so SingaLiteError catches it too.
            raise ArgumentError("len() of a 0-d tensor")
        return self.data.shape[0]

    def __iter__(self) -> Any:
        """The rows along the first axis, each without that axis (NumPy's rows: what a loop
        over a (T, N, D) sequence expects; SINGA's ``t[i]`` keeps the axis, see ``__getitem__``)."""
        from singa_lite.ops.shape import getitem

        for i in range(len(self)):
            yield getitem(self, i)

    def __repr__(self) -> str:
        name = "" if self.is_dummy() else f", name={self._name!r}"
        return f"Tensor(shape={self.shape}, dtype={self.dtype}, device={self.device}{name})"

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = _backend.to_host(self.data)
        return arr if dtype is None else arr.astype(dtype)

    def _scalar(self) -> Any:
        """The one value of a one-element tensor, as a Python scalar (one counted host read)."""
        return _backend.to_host(self.data.reshape(())).item()

    def __bool__(self) -> bool:
        """A one-element tensor is as true as its value (NumPy's rule). Any other tensor is true,
        as every tensor object is in SINGA, whose scripts write ``if labels:`` for "is not None";
        NumPy would call that ambiguous, so it warns once per call site."""
        if self.size() == 1:
            return bool(self._scalar())
        warnings.warn(
            f"bool() of a Tensor of shape {self.shape} is True, as any tensor object is in SINGA; "
            "test `is not None`, or reduce first (e.g. `(t > 0).all()`) to test the values",
            stacklevel=2,
        )
        return True

    def __float__(self) -> float:
        return float(self._scalar())

    def __int__(self) -> int:
        return int(self._scalar())

    __hash__ = object.__hash__

    # -- copies and conversions (not recorded) ----------------------------------------------
    def copy_from_numpy(self, np_array: Any, offset: int = 0) -> None:
        """Copy an array's values into this tensor's memory, from element ``offset`` on.

        ``np_array`` may be a NumPy array (or anything ``np.asarray`` takes) or a device array
        (CuPy), which is copied without a round trip through the host when it is on this
        tensor's device. The values are copied (never shared with ``np_array``) and cast to
        this tensor's dtype; the tensor keeps its array, so placeholders and parameters stay
        the same objects.
        """
        src = _host_or_device_array(np_array)
        n = src.size
        if offset < 0 or offset + n > self.size():
            raise ShapeError(
                f"copy_from_numpy: {n} values at offset {offset} do not fit a tensor of shape {self.shape}"
            )
        if not self.data.flags.c_contiguous:
            self.data = self.device.xp.ascontiguousarray(self.data)
        dst = self.data.reshape(-1)  # a view: the data is contiguous
        dst[offset : offset + n] = _to_device_array(src.reshape(-1), self.device)

    def copy_from(self, t: Tensor | Any) -> None:
        """Copy another tensor's (or array's) values into this one, across devices if needed."""
        src = t.data if isinstance(t, Tensor) else t
        if not hasattr(src, "shape"):
            raise ArgumentError(f"copy_from: expects a Tensor or an array, got {type(t).__name__}")
        if tuple(src.shape) != self.shape:
            if isinstance(src, np.ndarray) and src.size == self.size():
                self.copy_from_numpy(src)  # SINGA copies by size: a host array of any shape
                return
            raise ShapeError(f"copy_from: source shape {tuple(src.shape)} != target shape {self.shape}")
        arr = _to_device_array(src, self.device)
        if arr.dtype != self.dtype:
            arr = arr.astype(self.dtype)
        self.data[...] = arr

    copy_data = copy_from

    def clone(self) -> Tensor:
        """A deep copy with the same flags and name, if it has one of its own (not recorded)."""
        t = Tensor._wrap(self.data.copy(), self.device, self.requires_grad, None, 0)
        t.stores_grad = self.stores_grad
        if not self.is_dummy():  # a made-up name stays unique to its tensor
            t._name = self._name
        return t

    def copy(self) -> Tensor:
        """A shallow copy, as SINGA's: a new tensor object sharing this one's memory (writes
        through either show in both), with the same flags and no recorded creator."""
        t = Tensor._wrap(self.data, self.device, self.requires_grad, None, 0)
        t.stores_grad = self.stores_grad
        return t

    def to_device(self, dev: _device.Device) -> Tensor:
        """Move this tensor to ``dev`` in place; returns ``self``."""
        if dev != self.device:
            self.data = _to_device_array(self.data, dev)
            self.device = dev
        return self

    def to_host(self) -> Tensor:
        """Move this tensor to the CPU in place; returns ``self``."""
        return self.to_device(_device.create_cpu_device())

    def numpy(self) -> np.ndarray:
        return self.__array__()

    def as_type(self, dtype: Any) -> Tensor:
        """A new tensor cast to ``dtype`` (recorded: float casts are differentiable). SINGA's
        names ``'float'`` and ``'int'`` mean float32 and int32.

        >>> from_numpy(np.array([1.7, -2.2])).as_type("int").dtype
        dtype('int32')
        """
        from singa_lite.ops.shape import cast

        if isinstance(dtype, str) and dtype in _SINGA_TYPE_NAMES:
            dtype = _SINGA_TYPE_NAMES[dtype]
        return cast(self, as_dtype(dtype))

    astype = as_type

    # -- in-place fills (not recorded) ------------------------------------------------------
    def set_value(self, x: Any) -> Tensor:
        """Fill every element with ``x`` (a scalar, or an array or tensor that broadcasts)."""
        self.data[...] = self._value_for(x)
        return self

    def _value_for(self, x: Any) -> Any:
        """``x`` made assignable into ``self.data``: scalars as they are (a kernel argument,
        no transfer), tensors' and arrays' values moved to this tensor's device (CuPy refuses
        host arrays in assignments, and NumPy device arrays)."""
        if isinstance(x, Tensor):
            x = x.data
        if isinstance(x, (bool, int, float, complex, np.generic)):
            return x
        return _to_device_array(_host_or_device_array(x), self.device)

    def gaussian(self, mean: float = 0.0, std: float = 1.0) -> Tensor:
        """Fill with normal samples from this device's seeded generator."""
        rng = self.device.rng
        self.data[...] = rng.standard_normal(self.shape, dtype=_float_for(self.dtype)) * std + mean
        return self

    def uniform(self, low: float = 0.0, high: float = 1.0) -> Tensor:
        """Fill with uniform samples in [low, high) from this device's seeded generator."""
        rng = self.device.rng
        self.data[...] = rng.random(self.shape, dtype=_float_for(self.dtype)) * (high - low) + low
        return self

    def bernoulli(self, p: float) -> Tensor:
        """Fill with 1 with probability ``p``, else 0."""
        rng = self.device.rng
        self.data[...] = rng.random(self.shape, dtype=_float_for(self.dtype)) < p
        return self

    # -- recorded shape ops -----------------------------------------------------------------
    def reshape(self, *shape: Any) -> Tensor:
        from singa_lite.ops.shape import reshape

        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return reshape(self, shape)

    def transpose(self, axes: Any = None) -> Tensor:
        from singa_lite.ops.shape import transpose

        return transpose(self, axes)

    def T(self) -> Tensor:  # noqa: N802 (SINGA's name: a method, not a property)
        """The transpose (reversed axes), as SINGA's ``Tensor.T()``."""
        return self.transpose()

    def __getitem__(self, key: Any) -> Tensor:
        """Indexing, recorded (differentiable). As in SINGA, an integer keeps its axis in
        basic indexing: ``t[1]`` of a (3, 4) tensor has shape (1, 4) and ``t[:, -1]`` shape
        (3, 1). Keys with index arrays, lists or masks follow NumPy's advanced indexing, and
        ``ops.getitem(t, key)`` gives NumPy's rules throughout (an integer drops its axis)."""
        from singa_lite.ops.shape import getitem

        return getitem(self, _keep_int_axes(key, self.shape))

    def __setitem__(self, key: Any, value: Any) -> None:
        """In-place, unrecorded assignment (for filling inputs, not for training graphs).
        ``value`` and index arrays in ``key`` may live on any device: they are moved to this
        tensor's."""
        self.data[self._key_for(key)] = self._value_for(value)

    def _key_for(self, key: Any) -> Any:
        if isinstance(key, tuple):
            return tuple(self._key_for(k) for k in key)
        if isinstance(key, Tensor):
            key = key.data
        if isinstance(key, list) or (hasattr(key, "shape") and hasattr(key, "dtype") and key.ndim > 0):
            return _to_device_array(_host_or_device_array(key), self.device)
        return key

    # -- arithmetic (recorded) --------------------------------------------------------------
    def _other(self, x: Any) -> Tensor:
        if isinstance(x, Tensor):
            return x
        if isinstance(x, (bool, int, float, np.number)) or (isinstance(x, np.ndarray) and x.ndim == 0):
            dt = self.dtype
            if dt.kind in "iub" and not isinstance(x, (bool, int, np.integer)):
                dt = np.dtype(float32)
            arr = _scalar_array(self.device, x, dt)
        else:
            arr = _to_device_array(x, self.device)
        return Tensor._wrap(arr, self.device, False, None, 0)

    def __add__(self, x: Any) -> Tensor:
        return _ew().add(self, self._other(x))

    def __radd__(self, x: Any) -> Tensor:
        return _ew().add(self._other(x), self)

    def __sub__(self, x: Any) -> Tensor:
        return _ew().sub(self, self._other(x))

    def __rsub__(self, x: Any) -> Tensor:
        return _ew().sub(self._other(x), self)

    def __mul__(self, x: Any) -> Tensor:
        return _ew().mul(self, self._other(x))

    def __rmul__(self, x: Any) -> Tensor:
        return _ew().mul(self._other(x), self)

    def __truediv__(self, x: Any) -> Tensor:
        return _ew().div(self, self._other(x))

    def __rtruediv__(self, x: Any) -> Tensor:
        return _ew().div(self._other(x), self)

    def __pow__(self, x: Any) -> Tensor:
        return _ew().pow(self, self._other(x))

    def __rpow__(self, x: Any) -> Tensor:
        return _ew().pow(self._other(x), self)

    def __matmul__(self, x: Any) -> Tensor:
        from singa_lite.ops.linalg import matmul

        return matmul(self, self._other(x))

    def __neg__(self) -> Tensor:
        return _ew().neg(self)

    def __abs__(self) -> Tensor:
        return _ew().abs(self)

    def __lt__(self, x: Any) -> Tensor:
        return _ew().less(self, self._other(x))

    def __le__(self, x: Any) -> Tensor:
        return _ew().less_equal(self, self._other(x))

    def __gt__(self, x: Any) -> Tensor:
        return _ew().greater(self, self._other(x))

    def __ge__(self, x: Any) -> Tensor:
        return _ew().greater_equal(self, self._other(x))

    def __eq__(self, x: Any) -> Tensor:  # type: ignore[override]
        return _ew().equal(self, self._other(x))

    def __ne__(self, x: Any) -> Tensor:  # type: ignore[override]
        return _ew().logical_not(_ew().equal(self, self._other(x)))

    # In-place arithmetic changes `data` without recording, as SINGA's does.
    def __iadd__(self, x: Any) -> Tensor:
        self.data += self._other(x).data
        return self

    def __isub__(self, x: Any) -> Tensor:
        self.data -= self._other(x).data
        return self

    def __imul__(self, x: Any) -> Tensor:
        self.data *= self._other(x).data
        return self

    def __itruediv__(self, x: Any) -> Tensor:
        self.data /= self._other(x).data
        return self


def _shape(shape: Any) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints, or an ``ArgumentError`` naming it."""
    try:
        dims = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise ArgumentError(f"Tensor: shape must be a tuple of integers, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ArgumentError(f"Tensor: shape must not have negative dimensions, got {shape!r}")
    return dims


def _ew() -> Any:
    from singa_lite.ops import elementwise

    return elementwise


def _float_for(dtype: np.dtype) -> Any:
    # Generators sample float32/float64 only; float16 and integer tensors sample float32.
    return dtype if dtype in (np.float32, np.float64) else np.float32


_SCALARS: dict[tuple, Any] = {}
"""0-d device arrays of the scalar operands of tensor arithmetic (``t * 2.0``), by device,
dtype and value. On a GPU each new 0-d array costs an allocation and a fill kernel (~10 us);
a loop's scalars repeat, so each is made once. Ops never write into their inputs."""


def _scalar_array(dev: _device.Device, x: Any, dt: np.dtype) -> Any:
    if dev.backend.name == "numpy":
        return np.asarray(x, dtype=dt)  # a host 0-d array costs next to nothing
    value = np.asarray(x).item()
    key = (dev.id(), dt.str, type(value), value)
    arr = _SCALARS.get(key)
    if arr is None:
        if len(_SCALARS) >= 1024:  # scalars that never repeat (NaN among them) must not pile up
            _SCALARS.clear()
        dev.activate()
        arr = _SCALARS[key] = dev.xp.asarray(x, dtype=dt)
    return arr


def _keep_int_axes(key: Any, shape: tuple) -> Any:
    """``key`` with each plain integer ``i`` as the slice ``i:i+1`` (SINGA's ``Tensor[int]``
    keeps the axis; -1 becomes ``-1:None``), after checking it against its axis as NumPy
    would (a slice never raises); anything else as it is."""
    from singa_lite.ops.indexing import _key_axes

    keys = key if isinstance(key, tuple) else (key,)
    basic = (int, np.integer, slice, type(None), type(Ellipsis))
    if not all(isinstance(k, basic) for k in keys):
        return key  # index arrays, lists, masks: NumPy's advanced indexing as it is
    out = []
    for k, axis in zip(keys, _key_axes(keys, len(shape))):
        if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
            k = int(k)
            if axis is None or axis >= len(shape) or not -shape[axis] <= k < shape[axis]:
                n = shape[axis] if axis is not None and axis < len(shape) else 0
                raise IndexError(
                    f"GetItem: index {k} is out of range [{-n}, {n}) for axis {axis} (input shape {shape})"
                )
            k = slice(k, k + 1 if k != -1 else None)
        out.append(k)
    return tuple(out) if isinstance(key, tuple) else out[0]


def _host_or_device_array(data: Any) -> Any:
    """``data`` as an array: device arrays as they are, anything else through ``np.asarray``
    (which CuPy arrays refuse: implicit device-to-host conversion is an error there)."""
    if _backend.backend_of(data).name != "numpy":
        return data
    arr = np.asarray(data)
    if arr.dtype == object:
        raise DTypeError(f"object arrays are not supported (got {type(data).__name__})")
    return arr


def _to_device_array(data: Any, dev: _device.Device) -> Any:
    """``data`` (any array-like, any device) as an array of ``dev``'s backend: itself when it
    already is one, else one transfer (a device-to-device copy between two GPUs goes through
    the host, counted as a host read)."""
    src = _backend.backend_of(data)
    if src is dev.backend and (src.name == "numpy" or int(data.device.id) == dev.id()):
        return data
    host = _backend.to_host(data) if src.name != "numpy" else np.asarray(data)
    return dev.backend.from_numpy(host, dev.id())


# -- module functions (SINGA's tensor API) ---------------------------------------------------
PlaceHolder = Tensor


def from_numpy(np_array: Any, dev: _device.Device | None = None) -> Tensor:
    """A tensor holding a copy of ``np_array`` (on ``dev``, the default device if omitted), as
    SINGA makes it: ``requires_grad=True``, so ops on it are recorded while
    ``autograd.training`` is on, and float64 becomes float32 and int64 int32 (SINGA's C++
    tensors hold neither). Other dtypes are kept. To keep float64 or int64, or to make a
    tensor that ops never record, write ``Tensor(data=arr, requires_grad=False)`` or pass a
    ``dtype``. A CuPy array is accepted too: copied on its GPU, or moved to ``dev``.

    >>> import numpy as np
    >>> t = from_numpy(np.zeros(3))
    >>> t.dtype, t.requires_grad
    (dtype('float32'), True)
    """
    arr = _host_or_device_array(np_array)
    dtype = _SINGA_NARROWED.get(np.dtype(arr.dtype))
    return Tensor(device=dev, data=arr, dtype=dtype)  # the constructor copies


_SINGA_NARROWED = {np.dtype(np.float64): np.dtype(np.float32), np.dtype(np.int64): np.dtype(np.int32)}


def to_numpy(t: Tensor | Any) -> np.ndarray:
    """A NumPy copy of ``t``'s values: a Tensor's, or an array's (an optimizer's state) from
    any device."""
    if isinstance(t, Tensor):
        return np.array(t.__array__(), copy=True)
    return np.array(_backend.to_host(t), copy=True)


def to_host(t: Tensor) -> Tensor:
    return t.clone().to_host()


def zeros(shape: tuple, device: _device.Device | None = None, dtype: Any = float32) -> Tensor:
    return Tensor(tuple(shape), device, dtype)


def ones(shape: tuple, device: _device.Device | None = None, dtype: Any = float32) -> Tensor:
    return Tensor(tuple(shape), device, dtype).set_value(1)


def random(shape: tuple, device: _device.Device | None = None) -> Tensor:
    """Uniform samples in [0, 1) from the device's generator."""
    return Tensor(tuple(shape), device).uniform(0.0, 1.0)


def zeros_like(t: Tensor) -> Tensor:
    return Tensor(t.shape, t.device, t.dtype)


def ones_like(t: Tensor) -> Tensor:
    return Tensor(t.shape, t.device, t.dtype).set_value(1)


def full(shape: tuple, value: Any, device: _device.Device | None = None, dtype: Any = float32) -> Tensor:
    return Tensor(tuple(shape), device, dtype).set_value(value)


def reshape(t: Tensor, shape: tuple) -> Tensor:
    return t.reshape(shape)


def transpose(t: Tensor, axes: Any = None) -> Tensor:
    return t.transpose(axes)


def concatenate(tensors: list[Tensor], axis: int = 0) -> Tensor:
    from singa_lite.ops.shape import cat

    return cat(list(tensors), axis)


def sum(t: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    from singa_lite.ops.reduce import reduce_sum

    return reduce_sum(t, axis, keepdims)


def einsum(subscripts: str, *operands: Tensor) -> Tensor:
    from singa_lite.ops.linalg import einsum as _einsum

    return _einsum(subscripts, *operands)


def tensordot(a: Tensor, b: Tensor, axes: Any = 2) -> Tensor:
    from singa_lite.ops.linalg import tensordot as _tensordot

    return _tensordot(a, b, axes)


def _unary(opname: str) -> Any:
    def f(t: Tensor) -> Tensor:
        from singa_lite import ops

        return getattr(ops, opname)(t)

    f.__name__ = opname
    f.__doc__ = f"Elementwise {opname} (recorded by autograd)."
    return f


exp = _unary("exp")
ceil = _unary("ceil")
log = _unary("log")
sqrt = _unary("sqrt")
abs = _unary("abs")  # noqa: A001
sign = _unary("sign")
sigmoid = _unary("sigmoid")
relu = _unary("relu")
tanh = _unary("tanh")
square = _unary("square")


def pow(t: Tensor, x: Any) -> Tensor:  # noqa: A001
    return t**x


def add(a: Tensor, b: Any) -> Tensor:
    return a + b


def sub(a: Tensor, b: Any) -> Tensor:
    return a - b


def eltwise_mult(a: Tensor, b: Any) -> Tensor:
    return a * b


def div(a: Tensor, b: Any) -> Tensor:
    return a / b


def mult(a: Tensor, b: Tensor) -> Tensor:
    """Matrix product (SINGA's ``tensor.mult``)."""
    return a @ b


def softmax(t: Tensor, axis: int = -1) -> Tensor:
    from singa_lite.ops.activation import softmax as _softmax

    return _softmax(t, axis)


def lt(t: Tensor, x: Any) -> Tensor:
    """``t < x`` elementwise (SINGA's function form of the operator)."""
    return t < x


def le(t: Tensor, x: Any) -> Tensor:
    """``t <= x`` elementwise."""
    return t <= x


def gt(t: Tensor, x: Any) -> Tensor:
    """``t > x`` elementwise."""
    return t > x


def ge(t: Tensor, x: Any) -> Tensor:
    """``t >= x`` elementwise."""
    return t >= x


def eq(t: Tensor, x: Any) -> Tensor:
    """``t == x`` elementwise."""
    return t == x


def average(t: Tensor, axis: int | None = None) -> Any:
    """The mean of ``t``: a Python float over all elements when ``axis`` is None (as SINGA
    returns it), else a tensor averaged along ``axis`` (recorded).

    >>> average(from_numpy(np.array([[1.0, 2.0], [3.0, 6.0]])))
    3.0
    """
    from singa_lite.ops.reduce import reduce_mean

    if axis is None:
        return float(_backend.to_host(t.data).mean())
    return reduce_mean(t, axis)


def repeat(t: Tensor, repeats: Any, axis: int | None = None) -> Tensor:
    """Each element of ``t`` repeated ``repeats`` times along ``axis`` (NumPy's ``repeat``;
    ``repeats`` an int or one count per element of that axis); with ``axis=None`` the result
    is flat. Recorded, so gradients flow back to ``t``.

    >>> to_numpy(repeat(from_numpy(np.array([1.0, 2.0])), 2)).tolist()
    [1.0, 1.0, 2.0, 2.0]
    """
    from singa_lite.ops.indexing import gather

    if axis is None:
        t, axis = t.reshape((-1,)), 0
    n = t.shape[axis]
    counts = np.asarray(repeats)
    if counts.dtype.kind not in "iu" or (counts.ndim and counts.shape != (n,)) or (counts < 0).any():
        raise ArgumentError(
            f"repeat: repeats must be a non-negative int or {n} of them for axis {axis}, got {repeats!r}"
        )
    return gather(t, axis, np.repeat(np.arange(n), counts))


def product(shape: Any) -> int:
    """The product of the numbers in ``shape`` (the size of a tensor of that shape)."""
    out = 1
    for d in shape:
        out *= int(d)
    return out


def copy_data_to_from(dst: Tensor, src: Tensor, size: int, dst_offset: int = 0, src_offset: int = 0) -> None:
    """Copy ``size`` elements of ``src`` (flat, from ``src_offset``) into ``dst`` (flat, from
    ``dst_offset``), across devices if needed; not recorded."""
    if (
        min(size, dst_offset, src_offset) < 0
        or src_offset + size > src.size()
        or dst_offset + size > dst.size()
    ):
        raise ShapeError(
            f"copy_data_to_from: {size} elements from offset {src_offset} of a tensor of {src.size()} "
            f"into offset {dst_offset} of one of {dst.size()} do not fit"
        )
    part = src.data.reshape(-1)[src_offset : src_offset + size]
    dst.copy_from_numpy(_to_device_array(part, dst.device).astype(dst.dtype, copy=False), dst_offset)


def from_raw_tensor(data: Any) -> Tensor:
    """A tensor wrapping a backend array (what ``Tensor.data`` and ``Operator.backward`` hold
    here, where SINGA has its C++ tensor), sharing its memory; ``requires_grad`` as SINGA's."""
    if isinstance(data, Tensor):
        return data.copy()
    if not (hasattr(data, "shape") and hasattr(data, "dtype")):
        raise ArgumentError(f"from_raw_tensor: expects a NumPy or CuPy array, got {type(data).__name__}")
    as_dtype(data.dtype)
    return Tensor._wrap(data, _device.device_of_array(data), True, None, 0)

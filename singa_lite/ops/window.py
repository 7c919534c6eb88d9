"""Window geometry shared by convolution, pooling and the ONNX importer, over any number of axes.

A *window sweep* along one axis is given by the input length, the kernel length, the stride,
the padding at the axis' begin and end, and the dilation. Everything that turns arguments into
that geometry lives here, so that conv, pooling, the layers and ``sonnx`` agree on it:

* :func:`axis_out` / :func:`out_size`: the number of windows (with pooling's ``ceil_mode``);
* :func:`same_pads` / :func:`auto_pads`: ONNX ``auto_pad`` (``SAME_UPPER``, ``SAME_LOWER``,
  ``VALID``) as explicit ``(begin, end)`` pads;
* :func:`per_axis` / :func:`pads`: one int per axis and ``(begin, end)`` pads per axis from the
  forms users write, checked through ``singa_lite._args`` (a bad value raises
  :class:`~singa_lite.errors.ArgumentError` naming the callable and argument).

Pads are handled as ``((begin, end), ...)`` pairs, one per spatial axis. SINGA's 2-D order
``(top, bottom, left, right)`` is that list flattened (:func:`flat`); ONNX writes
``[b1, b2, ..., e1, e2, ...]`` (:func:`onnx_pairs`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from singa_lite import _args

__all__: list[str] = []  # helpers for other modules; the public names are ops.conv_output_size etc.

Pairs = tuple[tuple[int, int], ...]
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")

# ``as_strided`` reads ``x.__array_interface__``: a new dict each call, whose keys NumPy
# interns. A key no live object holds is interned and dropped again at every call, and each
# drop leaves a dead slot in the interpreter's table of interned strings; thousands of
# training steps later the table is rebuilt at twice its size, ~1 MB at once (seen by
# tests/test_long_run.py). Held here, the keys stay interned and nothing churns.
_INTERFACE_KEYS = tuple(sys.intern(k) for k in ("data", "strides", "descr", "typestr", "shape", "version"))


def strided(xp: Any, x: Any, shape: Sequence[int], strides: Sequence[int]) -> Any:
    """The view of ``x`` with ``shape`` and byte ``strides``: every window of a sweep as one
    array without a copy. Windows overlap, so the view is for reading (and for writing where
    the caller knows its elements are distinct, as a diagonal's are).

    A C-contiguous NumPy ``x`` is viewed through ``np.ndarray`` over its buffer, which also
    checks that the view stays inside it: 0.5 us against ``as_strided``'s 3.6 (which builds an
    ``__array_interface__`` dict in Python), a cost a batch-1 inference pays per conv."""
    if xp.__name__ == "numpy" and x.flags.c_contiguous:
        return xp.ndarray(tuple(shape), x.dtype, x, 0, tuple(strides))
    return xp.lib.stride_tricks.as_strided(x, shape=tuple(shape), strides=tuple(strides))


def axis_out(
    size: int,
    kernel: int,
    stride: int = 1,
    pad_begin: int = 0,
    pad_end: int = 0,
    dilation: int = 1,
    ceil_mode: bool = False,
) -> int:
    """Number of windows along one axis (not checked: callers pass normalised ints).

    ``ceil_mode`` (pooling) keeps a last partial window, but never one that would start in the
    end padding, i.e. at or past ``size + pad_begin`` (PyTorch's and ONNX's rule). The result
    may be below 1 when the kernel does not fit; callers raise their own error.

    >>> axis_out(28, 5, 1, 2, 2), axis_out(5, 2, 2, ceil_mode=True), axis_out(5, 2, 2)
    (28, 3, 2)
    """
    span = size + pad_begin + pad_end - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def out_size(
    sizes: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    pairs: Sequence[tuple[int, int]],
    dilation: Sequence[int],
    ceil_mode: bool = False,
) -> tuple[int, ...]:
    """:func:`axis_out` for every spatial axis; ``pairs`` are ``(begin, end)`` pads per axis."""
    return tuple(
        axis_out(n, k, s, pb, pe, d, ceil_mode)
        for n, k, s, (pb, pe), d in zip(sizes, kernel, stride, pairs, dilation)
    )


def same_pads(
    sizes: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    mode: str = "SAME_UPPER",
) -> Pairs:
    """``(begin, end)`` pads per axis for ONNX ``auto_pad`` SAME_UPPER / SAME_LOWER.

    The output length is ``ceil(size / stride)``; an odd total padding puts the extra cell at
    the end (SAME_UPPER) or at the beginning (SAME_LOWER). ``mode`` is not checked here.

    >>> same_pads((28, 5), (5, 2), (1, 1), (1, 1), "SAME_LOWER")
    ((2, 2), (1, 0))
    """
    pairs = []
    for n, k, s, d in zip(sizes, kernel, stride, dilation):
        total = max((-(-n // s) - 1) * s + d * (k - 1) + 1 - n, 0)
        small, big = total // 2, total - total // 2
        pairs.append((small, big) if mode == "SAME_UPPER" else (big, small))
    return tuple(pairs)


def auto_pads(
    mode: str,
    sizes: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    explicit: Sequence[tuple[int, int]],
) -> Pairs:
    """The pads an ONNX ``auto_pad`` mode asks for: ``explicit`` for NOTSET, zeros for VALID,
    :func:`same_pads` for the SAME modes. The caller has checked ``mode`` (``AUTO_PADS``)."""
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        return same_pads(sizes, kernel, stride, dilation, mode)
    if mode == "VALID":
        return ((0, 0),) * len(sizes)
    return tuple((int(b), int(e)) for b, e in explicit)


def transpose_pads(
    sizes: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    output_padding: Sequence[int],
    target: Sequence[int] | None = None,
    mode: str = "SAME_UPPER",
) -> Pairs:
    """``(begin, end)`` pads that make a transposed convolution's output ``target`` long (ONNX
    ``ConvTranspose``'s ``output_shape``, or ``size * stride`` for its SAME modes): the full
    output ``(size - 1)*stride + dilation*(kernel - 1) + 1 + output_padding`` less ``target``,
    split with the extra cell at the begin for SAME_UPPER, at the end otherwise. A pad may be
    negative (a target longer than the full output); the caller extends the output then.

    >>> transpose_pads((3,), (3,), (2,), (1,), (1,)), transpose_pads((3,), (3,), (2,), (1,), (0,), (8,))
    (((1, 1),), ((-1, 0),))
    """
    if target is None:
        target = [n * s for n, s in zip(sizes, stride)]
    pairs = []
    for n, k, s, d, op, t in zip(sizes, kernel, stride, dilation, output_padding, target):
        total = (n - 1) * s + d * (k - 1) + 1 + op - t
        begin = total // 2 if mode == "SAME_UPPER" else total - total // 2
        pairs.append((begin, total - begin))
    return tuple(pairs)


def per_axis(owner: str, name: str, value: Any, n: int, least: int = 1) -> tuple[int, ...]:
    """An int (the same for every axis) or ``n`` ints, each ``>= least``, as an ``n``-tuple:
    a kernel size, stride, dilation or output padding."""
    return _args.per_axis(owner, name, value, n, least)


def pads(owner: str, padding: Any, n: int, name: str = "padding") -> Pairs:
    """``(begin, end)`` pads for each of ``n`` axes from the forms users write: an int (every
    side), ``n`` ints (both sides of each axis), ``2n`` ints as begin/end per axis in axis order
    (``(top, bottom, left, right)`` in 2-D) or ``n`` ``(begin, end)`` pairs.

    >>> pads("f", 1, 2), pads("f", (1, 2), 2), pads("f", (1, 2, 3, 4), 2), pads("f", [(0, 1)], 1)
    (((1, 1), (1, 1)), ((1, 1), (2, 2)), ((1, 2), (3, 4)), ((0, 1),))
    """
    items = padding if isinstance(padding, (list, tuple)) else ()
    if items and len(items) == n and all(isinstance(p, (list, tuple)) for p in items):
        pairs = [_args.ints(owner, name, p, (2,), 0, scalar=False) for p in items]
        return tuple((b, e) for b, e in pairs)
    p = _args.ints(owner, name, padding, (n, 2 * n) if n > 1 else (1, 2), 0)
    if len(p) == 2 * n:
        return tuple(zip(p[0::2], p[1::2]))
    return tuple((v, v) for v in (p * n if len(p) == 1 else p))


def flat(pairs: Sequence[tuple[int, int]]) -> tuple[int, ...]:
    """Pairs as ``(b1, e1, b2, e2, ...)``: SINGA's ``(top, bottom, left, right)`` in 2-D."""
    return tuple(v for pair in pairs for v in pair)


def onnx_pairs(onnx_pads: Sequence[int]) -> Pairs:
    """ONNX ``[b1, b2, ..., e1, e2, ...]`` as ``((b1, e1), (b2, e2), ...)``."""
    n = len(onnx_pads) // 2
    return tuple((int(onnx_pads[i]), int(onnx_pads[i + n])) for i in range(n))


def to_onnx(pairs: Sequence[tuple[int, int]]) -> list[int]:
    """Pairs as ONNX ``[b1, b2, ..., e1, e2, ...]``."""
    return [int(b) for b, _ in pairs] + [int(e) for _, e in pairs]


def conv_output_size(
    in_size: int,
    kernel: int,
    stride: int = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int = 1,
    ceil_mode: bool = False,
) -> int:
    """Output length of a convolution or pooling window along one axis.

    ``padding`` is per side, or ``(begin, end)``. ``ceil_mode`` (pooling) keeps a last partial
    window, but never one that starts inside the end padding (PyTorch's and ONNX's rule).

    >>> conv_output_size(28, 5, padding=2), conv_output_size(32, 3, stride=2, padding=1)
    (28, 16)
    """
    me = "conv_output_size"
    in_size, kernel = _args.count(me, "in_size", in_size, 0), _args.count(me, "kernel", kernel)
    stride, dilation = _args.count(me, "stride", stride), _args.count(me, "dilation", dilation)
    p = _args.ints(me, "padding", padding, (2,), 0)
    return axis_out(in_size, kernel, stride, p[0], p[-1], dilation, bool(ceil_mode))


def same_padding(
    in_hw: tuple[int, int], kernel: Any, stride: Any = 1, dilation: Any = 1, mode: str = "SAME_UPPER"
) -> tuple[int, ...]:
    """``(top, bottom, left, right)`` padding for ONNX ``auto_pad`` SAME_UPPER / SAME_LOWER
    (SINGA's order; ``(begin, end)`` per axis for other ranks).

    The output size is ``ceil(in / stride)``; an odd total padding puts the extra row/column
    at the end (SAME_UPPER) or at the beginning (SAME_LOWER).

    >>> same_padding((28, 28), 5), same_padding((5, 5), 2, mode="SAME_LOWER")
    ((2, 2, 2, 2), (1, 0, 1, 0))
    """
    me = "same_padding"
    upper = mode.upper() if isinstance(mode, str) else mode  # ONNX spells it in capitals
    if upper not in ("SAME_UPPER", "SAME_LOWER"):
        raise _args.bad(me, "mode", "be 'SAME_UPPER' or 'SAME_LOWER'", mode)
    sizes = _args.ints(me, "in_hw", in_hw, None, 0, scalar=False)
    n = len(sizes)
    k, s = per_axis(me, "kernel", kernel, n), per_axis(me, "stride", stride, n)
    return flat(same_pads(sizes, k, s, per_axis(me, "dilation", dilation, n), upper))

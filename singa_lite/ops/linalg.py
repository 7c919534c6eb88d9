"""Linear algebra: matrix products, ONNX Gemm, einsum and tensordot.

``matmul`` follows NumPy's rules (1-D operands, batched broadcasting); its backward sums each
gradient back to its operand's shape. 2-D @ 2-D is the hot path of every MLP, so it skips
the general bookkeeping.
"""

from __future__ import annotations

import math
import string
from typing import Any

from singa_lite import _args
from singa_lite.autograd import Operator
from singa_lite.errors import ShapeError
from singa_lite.ops import window
from singa_lite.ops._util import column_sums, unbroadcast
from singa_lite.ops.activation import relu_grad
from singa_lite.ops.conv_infer import clamp_
from singa_lite.ops.elementwise import Add
from singa_lite.tensor import Tensor

__all__ = [  # BiasAdd is Linear's building block, not a public op of its own
    "Einsum",
    "Gemm",
    "MatMul",
    "Tensordot",
    "einsum",
    "gemm",
    "matmul",
    "tensordot",
]


def _cast(g: Any, dtype: Any) -> Any:
    """``g`` in ``dtype`` (mixed-dtype products promote; each gradient keeps its input's dtype)."""
    return g if g.dtype == dtype else g.astype(dtype)


def _folds(a: Any, b: Any) -> bool:
    """Whether ``a @ b`` is a stack of rows times one matrix (a Linear layer on a sequence),
    which runs as one product of the rows folded together, not one small product per leading
    index; backward folds too, so the weight gradient needs no stacked temporary to sum."""
    return a.ndim > 2 and b.ndim == 2 and a.shape[-1] == b.shape[0]


def matmul_array(xp: Any, a: Any, b: Any, folded: bool | None = None) -> Any:
    """``a @ b`` as ``MatMul`` computes it (ValueError where the shapes do not fit);
    ``folded``: ``_folds(a, b)`` where the caller has it already."""
    if _folds(a, b) if folded is None else folded:
        return xp.matmul(a.reshape(-1, a.shape[-1]), b).reshape(*a.shape[:-1], b.shape[1])
    return xp.matmul(a, b)


class MatMul(Operator):
    """``a @ b`` with NumPy semantics."""

    def forward(self, a: Any, b: Any) -> Any:
        self.a, self.b = a, b
        if a.ndim == 0 or b.ndim == 0:
            raise self.error("operands must have at least one dimension", a, b)
        self.folded = _folds(a, b)
        try:
            return matmul_array(self.xp, a, b, self.folded)
        except ValueError:
            raise self.error("inner dimensions do not match", a, b) from None

    def backward(self, dy: Any) -> tuple:
        a, b = self.a, self.b
        if self.folded:
            xp, dy2 = self.xp, dy.reshape(-1, dy.shape[-1])
            da = _cast(xp.matmul(dy2, b.T), a.dtype).reshape(a.shape) if self.needs_grad[0] else None
            db = _cast(xp.matmul(a.reshape(-1, a.shape[-1]).T, dy2), b.dtype) if self.needs_grad[1] else None
            return da, db
        if a.ndim == 2 and b.ndim == 2:
            da = _cast(self.xp.matmul(dy, b.T), a.dtype) if self.needs_grad[0] else None
            db = _cast(self.xp.matmul(a.T, dy), b.dtype) if self.needs_grad[1] else None
            return da, db
        # Promote 1-D operands to matrices as NumPy does, then reduce back.
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        if a.ndim == 1:
            dy = dy[..., None, :] if b.ndim > 1 else dy[..., None]
        if b.ndim == 1:
            dy = dy[..., None]
        xp = self.xp
        da = db = None
        if self.needs_grad[0]:
            g = xp.matmul(dy, xp.swapaxes(b2, -1, -2))
            da = _cast(unbroadcast(g, a2.shape).reshape(a.shape), a.dtype)
        if self.needs_grad[1]:
            g = xp.matmul(xp.swapaxes(a2, -1, -2), dy)
            db = _cast(unbroadcast(g, b2.shape).reshape(b.shape), b.dtype)
        return da, db


class BiasAdd(Add):
    """``y + b``, with ``b`` along ``y``'s last axis, written into ``y``'s own array.

    For an array nothing else reads: the fresh product of a ``Linear`` layer, whose own op
    keeps only its operands. Adding in place saves the output's allocation and a pass over
    it; backward is ``Add``'s (``dy`` for ``y``, its column sums for ``b``), and so is the
    ONNX export (an ``Add`` node). Other shapes or dtypes add out of place, as ``Add`` does.
    """

    def forward(self, a: Any, b: Any) -> Any:
        self.in_place = b.ndim == 1 and a.ndim >= 1 and a.shape[-1] == b.shape[0] and a.dtype == b.dtype
        if self.in_place:
            self.shapes = a.shape, b.shape
            a += b
            return a
        return super().forward(a, b)

    def backward(self, dy: Any) -> tuple:
        if not (self.in_place and dy.ndim >= 2):
            return super().backward(dy)
        db = column_sums(self.xp, dy.reshape(-1, dy.shape[-1])) if self.needs_grad[1] else None
        return dy, db


class Dense(Operator):
    """``a @ b + bias``, with a ReLU after it where ``relu``: a ``Linear`` layer's ``MatMul``
    and ``BiasAdd`` (and the ``ReLU`` after it) as one op, which graph mode makes of the
    recorded ops (``singa_lite/graph_fusion.py``) and whose forwards and backwards it runs in
    turn, bit for bit theirs. Saved: the dispatch and the backward walk of the ops it holds,
    and the ReLU's output array: the ReLU runs in place, on the product, which nothing else
    reads (``MatMul`` keeps its operands, ``BiasAdd`` the shapes)."""

    def __init__(self, matmul: MatMul, bias_add: BiasAdd, relu: bool = False) -> None:
        super().__init__("dense")
        self.matmul, self.bias_add, self.relu = matmul, bias_add, relu

    def forward(self, a: Any, b: Any, bias: Any) -> Any:
        xp = self.matmul.xp = self.bias_add.xp = self.xp
        y = self.bias_add.forward(self.matmul.forward(a, b), bias)
        if self.relu:
            y = self.y = clamp_(xp, y, (0.0, math.inf))  # np.maximum(y, 0)'s bits, in place
        return y

    def backward(self, dy: Any) -> tuple:
        if self.relu:
            dy = relu_grad(self.xp, self.y, dy)
        self.bias_add.needs_grad = (True, self.needs_grad[2])
        dz, dbias = self.bias_add.backward(dy)
        self.matmul.needs_grad = self.needs_grad[:2]
        da, db = self.matmul.backward(dz)
        return da, db, dbias


class Gemm(Operator):
    """ONNX Gemm: ``alpha * A' @ B' + beta * C`` with ``A' = A.T if transA`` (same for B)."""

    def __init__(
        self, alpha: float = 1.0, beta: float = 1.0, transA: bool = False, transB: bool = False
    ) -> None:
        super().__init__()
        _args.number(self.name, "alpha", alpha)
        _args.number(self.name, "beta", beta)
        self.alpha, self.beta = alpha, beta  # as given: a NumPy scalar's dtype counts
        self.transA, self.transB = bool(transA), bool(transB)

    def forward(self, A: Any, B: Any, C: Any = None) -> Any:
        if A.ndim != 2 or B.ndim != 2:
            raise self.error("A and B must be 2-D", A, B)
        a = A.T if self.transA else A
        b = B.T if self.transB else B
        if a.shape[1] != b.shape[0]:
            raise self.error(f"inner dimensions differ (transA={self.transA}, transB={self.transB})", A, B)
        self.a, self.b = a, b
        y = self.xp.matmul(a, b)
        if self.alpha != 1:
            y *= y.dtype.type(self.alpha)
        if C is not None:
            self.c_shape = C.shape
            try:
                self.xp.broadcast_shapes(C.shape, y.shape)
            except ValueError:
                raise self.error("C cannot be broadcast to the output", A, B, C) from None
            y += C if self.beta == 1 else C * C.dtype.type(self.beta)
        return y

    def backward(self, dy: Any) -> tuple:
        a, b = self.a, self.b
        g = dy if self.alpha == 1 else dy * dy.dtype.type(self.alpha)
        dA = dB = None
        if self.needs_grad[0]:
            da = self.xp.matmul(g, b.T)
            dA = _cast(da.T if self.transA else da, a.dtype)
        if self.needs_grad[1]:
            db = self.xp.matmul(a.T, g)
            dB = _cast(db.T if self.transB else db, b.dtype)
        if len(self.needs_grad) == 2:
            return dA, dB
        dC = None
        if self.needs_grad[2]:
            gc = dy if self.beta == 1 else dy * dy.dtype.type(self.beta)
            dC = unbroadcast(gc, self.c_shape)
        return dA, dB, dC


def _parse_einsum(subscripts: str, shapes: list[tuple]) -> tuple[list[str], str]:
    """Explicit per-operand subscripts and output, with any ellipsis spelled out in letters."""
    subscripts = subscripts.replace(" ", "")
    lhs, arrow, out = subscripts.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        raise ShapeError(f"Einsum: {len(ins)} operand subscripts for {len(shapes)} operands")
    free = [c for c in string.ascii_letters if c not in subscripts]
    n_ell = max((len(s) - len(t.replace("...", "")) for t, s in zip(ins, shapes) if "..." in t), default=0)
    ell = "".join(free[:n_ell])
    spelled = []
    for t, s in zip(ins, shapes):
        if "..." in t:
            k = len(s) - len(t.replace("...", ""))
            t = t.replace("...", ell[n_ell - k :] if k > 0 else "")
        if len(t) != len(s):
            raise ShapeError(f"Einsum: subscripts {t!r} do not fit an operand of shape {s}")
        spelled.append(t)
    if not arrow:
        joined = "".join(spelled)
        out = ell + "".join(sorted(c for c in set(joined) if joined.count(c) == 1 and c not in ell))
    else:
        out = out.replace("...", ell)
    return spelled, out


class Einsum(Operator):
    """Einstein summation; the gradient of each operand is another einsum."""

    def __init__(self, subscripts: str) -> None:
        super().__init__()
        self.subscripts = _args.instance(self.name, "subscripts", subscripts, str, "an einsum string")

    def forward(self, *xs: Any) -> Any:
        self.ins, self.out = _parse_einsum(self.subscripts, [x.shape for x in xs])
        self.xs = xs
        try:
            return self.xp.einsum(f"{','.join(self.ins)}->{self.out}", *xs, optimize=len(xs) > 1)
        except ValueError as e:
            raise self.error(f"{self.subscripts!r}: {e}", *xs) from None

    def backward(self, dy: Any) -> tuple:
        return tuple(self._grad(i, dy) if need else None for i, need in enumerate(self.needs_grad))

    def _grad(self, i: int, dy: Any) -> Any:
        xp, x, sub = self.xp, self.xs[i], self.ins[i]
        others = [s for j, s in enumerate(self.ins) if j != i]
        seen = self.out + "".join(others)
        uniq = "".join(dict.fromkeys(sub))
        # Letters of x that appear nowhere else were summed away: their gradient is a broadcast.
        kept = "".join(c for c in uniq if c in seen)
        ops = [dy] + [a for j, a in enumerate(self.xs) if j != i]
        g = xp.einsum(f"{','.join([self.out, *others])}->{kept}", *ops, optimize=len(ops) > 1)
        sizes = dict(zip(sub, x.shape))
        g = g.reshape([g.shape[kept.index(c)] if c in kept else 1 for c in uniq])
        g = unbroadcast(g, tuple(sizes[c] if c in kept else 1 for c in uniq))
        g = xp.broadcast_to(g, tuple(sizes[c] for c in uniq))
        if len(uniq) < len(sub):
            g = _scatter_diagonal(xp, g, uniq, sub, x.shape)
        return _cast(xp.ascontiguousarray(g), x.dtype)


def _scatter_diagonal(xp: Any, g: Any, uniq: str, sub: str, shape: tuple) -> Any:
    """Gradient of a repeated-index (diagonal) read: ``g`` written back onto the diagonal."""
    out = xp.zeros(shape, dtype=g.dtype)
    strides = [sum(st for c2, st in zip(sub, out.strides) if c2 == c) for c in uniq]
    diag = window.strided(xp, out, g.shape, strides)
    diag[...] = g
    return out


def _tensordot_axes(axes: Any, a_ndim: int, b_ndim: int) -> tuple[list[int], list[int]]:
    if isinstance(axes, int):
        return list(range(a_ndim - axes, a_ndim)), list(range(axes))
    axa, axb = axes
    axa = [axa] if isinstance(axa, int) else list(axa)
    axb = [axb] if isinstance(axb, int) else list(axb)
    return [x % a_ndim if a_ndim else x for x in axa], [x % b_ndim if b_ndim else x for x in axb]


def _check_tensordot_axes(owner: str, axes: Any) -> None:
    """An int (the last ``axes`` of a with the first of b) or a pair: a's axes, b's axes."""
    if not isinstance(axes, (list, tuple)) or len(axes) != 2:
        _args.count(owner, "axes", axes, 0)
        return
    axa, axb = (_args.ints(owner, "axes", half) for half in axes)
    if len(axa) != len(axb):
        raise _args.bad(owner, "axes", "pair as many axes of a as of b", axes)


def _tensordot(xp: Any, a: Any, b: Any, axa: list[int], axb: list[int]) -> Any:
    """``xp.tensordot(a, b, (axa, axb))``. Contracting no axes is the outer product, written
    as a broadcast product: CuPy's tensordot refuses a 0-d operand even then, NumPy's does not."""
    if not axa and not axb:
        return xp.asarray(a.reshape(a.shape + (1,) * b.ndim) * b)  # 0-d * 0-d is a NumPy scalar
    return xp.tensordot(a, b, axes=(axa, axb))


class Tensordot(Operator):
    """``xp.tensordot(a, b, axes)``; gradients are tensordots of ``dy`` with the other operand."""

    def __init__(self, axes: Any = 2) -> None:
        super().__init__()
        _check_tensordot_axes(self.name, axes)
        self.axes = axes

    def forward(self, a: Any, b: Any) -> Any:
        self.a, self.b = a, b
        try:
            self.axa, self.axb = _tensordot_axes(self.axes, a.ndim, b.ndim)
            return _tensordot(self.xp, a, b, self.axa, self.axb)
        except (ValueError, IndexError, TypeError):
            raise self.error(f"cannot contract over axes {self.axes}", a, b) from None

    def backward(self, dy: Any) -> tuple:
        xp, a, b, axa, axb = self.xp, self.a, self.b, self.axa, self.axb
        free_a = [i for i in range(a.ndim) if i not in axa]
        free_b = [i for i in range(b.ndim) if i not in axb]
        na = len(free_a)
        da = db = None
        if self.needs_grad[0]:
            g = _tensordot(xp, dy, b, list(range(na, dy.ndim)), free_b)
            order = free_a + [axa[axb.index(k)] for k in sorted(axb)]
            da = _cast(g.transpose(_argsort(order)), a.dtype)
        if self.needs_grad[1]:
            g = _tensordot(xp, a, dy, free_a, list(range(na)))
            order = [axb[axa.index(k)] for k in sorted(axa)] + free_b
            db = _cast(g.transpose(_argsort(order)), b.dtype)
        return da, db


def _argsort(order: list[int]) -> list[int]:
    return sorted(range(len(order)), key=order.__getitem__)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """Matrix product with NumPy's ``matmul`` rules (1-D operands, batched broadcasting).

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> a = tensor.from_numpy(np.ones((2, 3), np.float32))
    >>> matmul(a, tensor.from_numpy(np.ones((3, 4), np.float32))).shape
    (2, 4)
    """
    return MatMul()(a, b)[0]


def gemm(
    A: Tensor,
    B: Tensor,
    C: Tensor | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: bool = False,
    transB: bool = False,
) -> Tensor:
    """ONNX Gemm: ``alpha * op(A) @ op(B) + beta * C``; ``C`` broadcasts to the output."""
    op = Gemm(alpha, beta, transA, transB)
    return (op(A, B) if C is None else op(A, B, C))[0]


def einsum(subscripts: str, *operands: Tensor) -> Tensor:
    """Einstein summation (``numpy.einsum`` subscripts: implicit, explicit ``->``, ellipsis).

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> a = tensor.from_numpy(np.ones((2, 3), np.float32))
    >>> einsum("ij,kj->ik", a, a).shape
    (2, 2)
    """
    return Einsum(subscripts)(*operands)[0]


def tensordot(a: Tensor, b: Tensor, axes: Any = 2) -> Tensor:
    """``numpy.tensordot``: contract the last ``axes`` axes of ``a`` with the first of ``b``,
    or the explicit pair of axis lists ``axes = (axes_a, axes_b)``."""
    return Tensordot(axes)(a, b)[0]

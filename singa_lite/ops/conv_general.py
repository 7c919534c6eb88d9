"""The convolution engine: one operator family for convolutions and transposed convolutions
over any number of spatial axes (as ``jax.lax.conv_general_dilated`` is one op for all ranks).

:class:`ConvNd` and :class:`ConvTransposeNd` parse their geometry once (``ops.window``), check
their inputs, and per forward ask ``ops.conv_select.select`` which strategy runs the call, from
explicit arguments: the shapes, dtype, backend, group, whether a backward follows and whether
the compiled CPU kernels take the arrays. The strategy (a *plan*) computes the forward and keeps
what its backward needs; the op adds the bias gradient. ``Conv2d``, ``Conv1d`` and
``ConvTranspose2d`` (``ops.conv``) are this family at a fixed rank, under SINGA's names.

The strategies: ``ops.conv_blocks`` (blocked im2col + GEMM, 2-D transposed), ``ops.conv_infer``
(batch-1 inference), ``ops.depthwise`` (tap loop, einsum inference, compiled kernels) for 1-D
and 2-D inputs, a 1-D input running as an image of height 1; ``ops.conv_columns`` (one general
im2col) for every other rank.

Padding is given as an int, one value per axis, ``(begin, end)`` per axis in axis order
(SINGA's ``(top, bottom, left, right)`` in 2-D) or ``(begin, end)`` pairs per axis; it is kept
as pairs (``self.pads``).
"""

from __future__ import annotations

from typing import Any

from singa_lite import _args, autograd
from singa_lite.autograd import Operator
from singa_lite.backend import onednn
from singa_lite.errors import DTypeError, ShapeError
from singa_lite.ops import window
from singa_lite.ops.conv_blocks import BlockedGemm, Geometry2d, TransposeGemm
from singa_lite.ops.conv_columns import ColumnsConv, ColumnsTranspose, GeometryNd
from singa_lite.ops.conv_infer import OneImage
from singa_lite.ops.conv_onednn import OneDnn
from singa_lite.ops.conv_pointwise import Pointwise
from singa_lite.ops.conv_select import IMAGE, select
from singa_lite.ops.depthwise import Depthwise, DepthwiseInfer, kernels_take
from singa_lite.tensor import Tensor

__all__ = ["ConvNd", "ConvTransposeNd", "conv_nd", "conv_transpose_nd"]

_PLANS: dict[str, Any] = {
    "one_image": OneImage,
    "depthwise_infer": DepthwiseInfer,
    "depthwise": Depthwise,
    "depthwise_kernel": lambda xp, geo: Depthwise(xp, geo, compiled=True),
    "pointwise": Pointwise,
    "blocks": BlockedGemm,
    "columns": ColumnsConv,
    "onednn": OneDnn,
}


class _ConvEngine(Operator):
    """What a convolution and a transposed convolution share: geometry, checks, the choice of
    strategy, 1-D as 2-D, and the bias gradient."""

    transposed = False

    def __init__(self, n: int, stride: Any, padding: Any, dilation: Any, group: int) -> None:
        super().__init__()
        self.n = _args.count(self.name, "n", n)
        self.stride = window.per_axis(self.name, "stride", stride, n)
        self.dilation = window.per_axis(self.name, "dilation", dilation, n)
        self.pads = window.pads(self.name, padding, n)
        self.group = _args.count(self.name, "group", group)
        self.backward_follows = False
        self.plan: Any = None

    @property
    def begin(self) -> tuple[int, ...]:
        return tuple(pb for pb, _ in self.pads)

    @property
    def cols(self) -> Any:
        """The column blocks the ``blocks`` strategy keeps for backward (AttributeError when
        another strategy ran): lets tests see which path a call took."""
        return self.plan.cols

    def __call__(self, *xs: Tensor) -> tuple[Tensor, ...]:
        # The one question put to autograd: whether this call is recorded, so that a backward
        # may follow. forward hands the answer to select() as an argument; a graph replay
        # (forward_arrays alone) finds it in needs_grad, which recording set.
        self.backward_follows = autograd.is_recording()
        return super().__call__(*xs)

    def channels(self, W: Any) -> tuple[int, int]:
        """The input and output channels ``W`` expects and gives."""
        return W.shape[1] * self.group, W.shape[0]

    def _check(self, x: Any, W: Any, b: Any) -> None:
        n, g = self.n, self.group
        if x.ndim != n + 2 or W.ndim != n + 2:
            raise self.error(f"x must be (N, C, {n} spatial axes) and W {n + 2}-D", x, W)
        if 0 in x.shape[2:]:
            raise self.error("x has an empty spatial axis", x, W)
        if x.dtype.kind != "f" or x.dtype != W.dtype or (b is not None and b.dtype != x.dtype):
            got = ", ".join(str(a.dtype) for a in (x, W, b) if a is not None)
            raise DTypeError(f"{self.name}: x, W and b must share a float dtype, got {got}")
        in_channels, out_channels = self.channels(W)
        if x.shape[1] % g or out_channels % g:
            raise self.error(f"group={g} does not divide the channels", x, W)
        if x.shape[1] != in_channels:
            raise self.error(f"x has {x.shape[1]} channels, the weight expects {in_channels}", x, W)
        if b is not None and b.shape != (out_channels,):
            raise self.error(f"bias must have shape ({out_channels},)", x, W, b)

    def _run(self, x: Any, W: Any, b: Any, positions: tuple[int, ...]) -> Any:
        """Select a strategy and run its forward; ``positions`` are the window positions per
        axis (the output's size for a conv, the input's for a transposed conv)."""
        xp, g = self.xp, self.group
        grad = self.backward_follows or bool(self.needs_grad)
        depthwise = not self.transposed and W.shape[1] == 1 and g > 1
        kernels = depthwise and kernels_take(xp, x, W)
        dnnl = not depthwise and not self.transposed and onednn.usable(xp, x, W, inference=not grad)
        pointwise = (
            not self.transposed
            and all(k == 1 for k in W.shape[2:])
            and all(s == 1 for s in self.stride)
            and not any(pb or pe for pb, pe in self.pads)
        )
        shapes = (self.n, x.shape, W.shape, g, x.dtype, xp.__name__)
        self.strategy = select(*shapes, grad, self.transposed, kernels, pointwise, dnnl)
        self.has_bias = b is not None
        if self.strategy not in IMAGE:
            geo = GeometryNd(W.shape[2:], self.stride, self.dilation, self.pads, positions, g)
            self.plan = self._plan(GeometryNd, geo)
            self.lifted = False
            return self.plan.forward(x, W, b)
        self.lifted = self.n == 1
        if self.lifted:  # a 1-D conv is an image of height 1
            x, W = x[:, :, None], W[:, :, None]
            geo2 = Geometry2d(
                W.shape[2:], (1, *self.stride), (1, *self.dilation), (0, 0, *self.pads[0]), (1, *positions), g
            )
        else:
            geo2 = Geometry2d(W.shape[2:], self.stride, self.dilation, window.flat(self.pads), positions, g)
        self.plan = self._plan(Geometry2d, geo2)
        y = self.plan.forward(x, W, b)
        return y[:, :, 0] if self.lifted else y

    def _plan(self, kind: type, geo: Any) -> Any:
        return _PLANS[self.strategy](self.xp, geo)

    def backward(self, dy: Any) -> tuple:
        need_x, need_W = self.needs_grad[0], self.needs_grad[1]
        dx, dW = self.plan.backward(dy[:, :, None] if self.lifted else dy, need_x, need_W)
        if self.lifted:
            dx = None if dx is None else dx[:, :, 0]
            dW = None if dW is None else dW[:, :, 0]
        if not self.has_bias:
            return dx, dW
        db = None
        if self.needs_grad[2]:  # a plan that wrote the bias gradient in its backward leaves it in db
            db = getattr(self.plan, "db", None)
            if db is None:
                db = dy.sum(axis=(0, *range(2, dy.ndim)))
        return dx, dW, db


class ConvNd(_ConvEngine):
    """Convolution (cross-correlation) of ``x (N, C, *spatial)`` with ``W (O, C/group, *kernel)``
    and optional bias ``b (O,)``, over ``n`` spatial axes."""

    def __init__(self, n: int, stride: Any = 1, padding: Any = 0, dilation: Any = 1, group: int = 1) -> None:
        super().__init__(n, stride, padding, dilation, group)

    def forward(self, x: Any, W: Any, b: Any = None) -> Any:
        self._check(x, W, b)
        kernel = W.shape[2:]
        out = window.out_size(x.shape[2:], kernel, self.stride, self.pads, self.dilation)
        if min(out) < 1:
            raise self.error(f"kernel {kernel} (dilation {self.dilation}) exceeds the padded input", x, W)
        return self._run(x, W, b, out)


class ConvTransposeNd(_ConvEngine):
    """Transposed convolution (``ConvNd``'s gradient w.r.t. its input) of ``x (N, C_in, *spatial)``
    with ``W (C_in, C_out/group, *kernel)`` (PyTorch's and ONNX's layout), over ``n`` axes.

    Output length along an axis: ``(L - 1)*stride + dilation*(k - 1) + 1 + output_padding``
    minus its two pads."""

    transposed = True

    def __init__(
        self,
        n: int,
        stride: Any = 1,
        padding: Any = 0,
        output_padding: Any = 0,
        dilation: Any = 1,
        group: int = 1,
    ) -> None:
        super().__init__(n, stride, padding, dilation, group)
        self.output_padding = window.per_axis(self.name, "output_padding", output_padding, n, 0)
        for op, s, d in zip(self.output_padding, self.stride, self.dilation):
            if op >= max(s, d):
                raise _args.bad(self.name, "output_padding", "be < stride or dilation", output_padding)

    def channels(self, W: Any) -> tuple[int, int]:
        return W.shape[0], W.shape[1] * self.group

    def forward(self, x: Any, W: Any, b: Any = None) -> Any:
        self._check(x, W, b)
        size = x.shape[2:]
        geo = zip(size, W.shape[2:], self.stride, self.dilation, self.output_padding, self.pads)
        if any((m - 1) * s + d * (k - 1) + 1 + op - pb - pe < 1 for m, k, s, d, op, (pb, pe) in geo):
            raise self.error(f"padding {self.pads} leaves an empty output", x, W)
        return self._run(x, W, b, tuple(size))

    def _plan(self, kind: type, geo: Any) -> Any:
        if kind is Geometry2d:
            return TransposeGemm(
                self.xp, geo, (0, *self.output_padding) if self.n == 1 else self.output_padding
            )
        return ColumnsTranspose(self.xp, geo, self.output_padding)


def _spatial_axes(x: Tensor, what: str) -> int:
    _args.tensor(what, "x", x)
    if len(x.shape) < 3:
        raise ShapeError(f"{what}: x must be (N, C, spatial...), got shape {tuple(x.shape)}")
    return len(x.shape) - 2


def conv_nd(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    group: int = 1,
) -> Tensor:
    """Convolution of ``x (N, C, *spatial)`` with ``W (O, C/group, *kernel)`` over every spatial
    axis (3-D for ``(N, C, D, H, W)``). ``padding``: an int, one per axis, or ``(begin, end)``
    pairs per axis.

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> x = tensor.from_numpy(np.ones((1, 2, 4, 5, 6), np.float32))
    >>> conv_nd(x, tensor.from_numpy(np.ones((3, 2, 3, 3, 3), np.float32)), padding=1).shape
    (1, 3, 4, 5, 6)
    """
    op = ConvNd(_spatial_axes(x, "conv_nd"), stride, padding, dilation, group)
    return (op(x, W) if b is None else op(x, W, b))[0]


def conv_transpose_nd(
    x: Tensor,
    W: Tensor,
    b: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    dilation: Any = 1,
    group: int = 1,
) -> Tensor:
    """Transposed convolution of ``x (N, C_in, *spatial)`` with ``W (C_in, C_out/group, *kernel)``
    over every spatial axis; padding as in :func:`conv_nd`."""
    op = ConvTransposeNd(
        _spatial_axes(x, "conv_transpose_nd"), stride, padding, output_padding, dilation, group
    )
    return (op(x, W) if b is None else op(x, W, b))[0]

"""Recurrent layers with SINGA's call convention and per-gate parameter names.

``lstm(xs, (h0, c0))`` takes a list of time steps (each ``(N, I)``) or one ``(T, N, I)``
tensor and returns ``(outputs, h, c)``: a list when given a list, a tensor when given a tensor.
Parameters are held per gate, ``Wx_i Wx_f Wx_o Wx_g`` (I, H), ``Wh_*`` (H, H), ``Bx_*`` and
``Bh_*`` (H,), and concatenated on the fly for the fused sequence op.
"""

from __future__ import annotations

import math
from typing import Any

from singa_lite import ops
from singa_lite._args import choice, count, fraction
from singa_lite.errors import ArgumentError, ShapeError
from singa_lite.layer.base import Layer
from singa_lite.layer.dense import _param
from singa_lite.tensor import Tensor


class _Recurrent(Layer):
    gates: tuple[str, ...] = ("",)

    def __init__(
        self,
        input_size: int,
        hidden_size: int | None = None,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
    ) -> None:
        super().__init__()
        if hidden_size is None:  # RNN(hidden_size): the input size is learnt from the data
            input_size, hidden_size = None, input_size  # type: ignore[assignment]
        if num_layers != 1 or bidirectional:
            raise ArgumentError(
                f"{type(self).__name__}: one unidirectional layer per instance; stack layers for "
                f"depth (got num_layers={num_layers}, bidirectional={bidirectional})"
            )
        me = type(self).__name__
        fraction(me, "dropout", dropout)  # between stacked layers: with one layer, unused
        self.nonlinearity = choice(me, "nonlinearity", nonlinearity, ("tanh", "relu"))
        self.input_size = None if input_size is None else count(me, "input_size", input_size)
        self.hidden_size = count(me, "hidden_size", hidden_size)
        self.bias = bias
        self.batch_first = batch_first

    def initialize(self, xs: Any, *state: Any) -> None:
        x = xs[0] if isinstance(xs, (list, tuple)) else xs
        i = x.shape[-1]
        if self.input_size is not None and self.input_size != i:
            raise ShapeError(f"{type(self).__name__}: built for input size {self.input_size}, got {x.shape}")
        self.input_size = i
        h = self.hidden_size
        bound = 1.0 / math.sqrt(h)  # PyTorch's default for recurrent weights
        for g in self.gates:
            sfx = f"_{g}" if g else ""
            setattr(self, "Wx" + sfx, _param((i, h), x).uniform(-bound, bound))
            setattr(self, "Wh" + sfx, _param((h, h), x).uniform(-bound, bound))
            for name in ("Bx" + sfx, "Bh" + sfx):
                # Without bias the zero biases stay fixed: states (saved, never trained).
                b = _param((h,), x) if self.bias else Tensor((h,), x.device, x.dtype, requires_grad=False)
                setattr(self, name, b)

    def _stacked(self, prefix: str) -> Tensor:
        if self.gates == ("",):
            return getattr(self, prefix)
        return ops.cat([getattr(self, f"{prefix}_{g}") for g in self.gates], axis=-1)

    def _weights(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        return self._stacked("Wx"), self._stacked("Wh"), self._stacked("Bx"), self._stacked("Bh")

    def _sequence(self, xs: Any) -> tuple[Tensor, bool]:
        """The input as one (T, N, I) tensor, and whether it came as a list of steps."""
        if isinstance(xs, (list, tuple)):
            n, i = xs[0].shape
            return ops.cat([ops.reshape(x, (1, n, i)) for x in xs], 0), True
        if xs.ndim() != 3:
            raise ShapeError(f"{type(self).__name__}: expects (T, N, I) or a list of (N, I), got {xs.shape}")
        return (ops.transpose(xs, (1, 0, 2)) if self.batch_first else xs), False

    def _outputs(self, y: Tensor, as_list: bool) -> Any:
        if as_list:
            return list(y)  # rows without the time axis (Tensor.__iter__)
        return ops.transpose(y, (1, 0, 2)) if self.batch_first else y

    def _zeros(self, x: Tensor) -> Tensor:
        return Tensor((x.shape[1], self.hidden_size), x.device, x.dtype, requires_grad=False)


class RNN(_Recurrent):
    """Elman RNN: ``h = tanh(x Wx + Bx + h Wh + Bh)``; ``rnn(xs, h0)`` → ``(outputs, h)``."""

    def forward(self, xs: Any, h0: Tensor | None = None) -> tuple:
        x, as_list = self._sequence(xs)
        h0 = h0 if h0 is not None else self._zeros(x)
        y, h = ops.rnn(x, h0, *self._weights(), nonlinearity=self.nonlinearity)
        return self._outputs(y, as_list), h


class LSTM(_Recurrent):
    """LSTM with gates i, f, o, g; ``lstm(xs, (h0, c0))`` → ``(outputs, h, c)``."""

    gates = ("i", "f", "o", "g")

    def forward(self, xs: Any, h0_c0: tuple | None = None) -> tuple:
        x, as_list = self._sequence(xs)
        h0, c0 = h0_c0 if h0_c0 is not None else (self._zeros(x), self._zeros(x))
        y, h, c = ops.lstm(x, h0, c0, *self._weights())
        return self._outputs(y, as_list), h, c


class GRU(_Recurrent):
    """GRU with gates z, r, n (PyTorch's linear-before-reset form); ``gru(xs, h0)`` → ``(outputs, h)``."""

    gates = ("z", "r", "n")

    def forward(self, xs: Any, h0: Tensor | None = None) -> tuple:
        x, as_list = self._sequence(xs)
        h0 = h0 if h0 is not None else self._zeros(x)
        y, h = ops.gru(x, h0, *self._weights(), linear_before_reset=True)
        return self._outputs(y, as_list), h

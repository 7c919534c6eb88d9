"""Recurrent ops: Elman RNN, LSTM and GRU, as whole-sequence ops and single-step cells.

Each is one fused operator with a hand-written backward, because a graph of small ops per time
step costs far more in Python overhead than the arithmetic itself. A sequence op multiplies the
inputs of all time steps by ``Wx`` in one GEMM; only ``h @ Wh`` is left inside the time loop.
Backward walks the steps in reverse, collects the gate gradients of every step, then forms the
weight gradients with one GEMM each.

Layouts (row-major, ``x @ W``), for hidden size H:

- ``x`` (T, N, I) for sequences, (N, I) for cells; ``h``, ``c`` (N, H).
- ``Wx`` (I, kH), ``Wh`` (H, kH), ``Bx``, ``Bh`` (kH,), with the gate blocks side by side:
  k = 1 for RNN; k = 4 for LSTM in SINGA's order i, f, o, g; k = 3 for GRU in order z, r, n.

``reverse=True`` runs a sequence from its last step to its first (the backward half of a
bidirectional layer); ``y[t]`` is still the output for input ``x[t]``.
A cell is the sequence op over one step (same code), so the two cannot drift apart.
On NumPy with the compiled CPU kernels on, the LSTM without peepholes runs each step's gate
arithmetic as one compiled pass (``backend/cpu_kernels/recurrent.py``); the code here is the
reference and the fallback.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any

from singa_lite import _args
from singa_lite.autograd import Operator
from singa_lite.backend import cpu_kernels
from singa_lite.errors import DTypeError
from singa_lite.ops._util import column_sums
from singa_lite.tensor import Tensor

# The function `rnn` is re-exported as `singa_lite.ops.rnn`; this module is `ops.recurrent`.
__all__ = [
    "GRUCell",
    "GRUSequence",
    "LSTMCell",
    "LSTMSequence",
    "RNNCell",
    "RNNSequence",
    "gru",
    "gru_cell",
    "lstm",
    "lstm_cell",
    "rnn",
    "rnn_cell",
]


def _sigmoid_(xp: Any, a: Any) -> None:
    """In-place logistic function, in its tanh form: no overflow warnings for large |a|."""
    a *= 0.5
    _half_sigmoid_(xp, a)


def _half_sigmoid_(xp: Any, a: Any) -> None:
    """In place, the logistic function of ``2*a``: for pre-activations stored halved."""
    xp.tanh(a, out=a)
    a += 1
    a *= 0.5


class _RecurrentKernels:
    """The compiled step loops (``backend/cpu_kernels/recurrent.py``): called with arrays, says
    whether they can take them; ``module()`` imports them (and Numba) at the first use."""

    _module: Any = None

    def __call__(self, xp: Any, *arrays: Any) -> bool:
        return cpu_kernels.usable(xp, *arrays) and all(a.flags.c_contiguous for a in arrays[:1])

    def module(self) -> Any:
        if self._module is None:
            self._module = importlib.import_module("singa_lite.backend.cpu_kernels.recurrent")
        return self._module


_kernels = _RecurrentKernels()


class _Sequence(Operator, ABC):
    """What the three sequence ops share: argument checks, the input GEMM, time reversal and
    the gradients of ``x``, ``Wx``, ``Wh`` and the biases.

    A family defines ``_steps(xw, states, Wh, Bh)``, which runs the recurrence on the
    precomputed ``xw = x @ Wx + Bx`` and returns ``(y, *final_states)``, and
    ``_back_steps(dy, dfinal)``, which returns the gradients of the pre-activations fed by
    ``x`` (``dxw``) and by ``h @ Wh`` (``dhw``), both (T, N, kH), and of the initial states.
    """

    gates = 1
    state_names: tuple[str, ...] = ("h0",)
    optional_grads: tuple[int, ...] = (0,)  # `_back_steps` takes dy=None when only the final states were used
    hs: Any  # hidden states h[0..T] of the last forward, set by _steps

    def __init__(self, reverse: bool = False) -> None:
        super().__init__()
        self.reverse = reverse

    def forward(self, x: Any, *args: Any) -> tuple:
        k = len(self.state_names)
        states, (Wx, Wh, Bx, Bh) = args[:k], args[k:]
        self._check(x, states, Wx, Wh, Bx, Bh)
        T, N, I = x.shape
        if self.reverse:
            x = x[::-1]
        self.x2 = x.reshape(T * N, I)  # a copy when reversed; backward needs it either way
        self.Wx, self.Wh = Wx, Wh
        xw = self.xp.matmul(self.x2, Wx)
        xw += Bx
        y, *final = self._steps(xw.reshape(T, N, xw.shape[-1]), states, Wh, Bh)  # T may be 0
        if self.reverse:
            y = self.xp.ascontiguousarray(y[::-1])
        return (y, *final)

    def backward(self, dy: Any, *dfinal: Any) -> tuple:
        xp = self.xp
        if dy is not None and self.reverse:
            dy = dy[::-1]
        dxw, dhw, dstates = self._back_steps(dy, dfinal)
        T, N, G = dxw.shape
        dxw2, dhw2 = dxw.reshape(T * N, G), dhw.reshape(T * N, G)
        k = len(self.state_names)
        need_x, need_states, (need_wx, need_wh, need_bx, need_bh) = (
            self.needs_grad[0],
            self.needs_grad[1 : 1 + k],
            self.needs_grad[1 + k : 5 + k],
        )
        dx = None
        if need_x:
            dx = xp.matmul(dxw2, self.Wx.T).reshape(T, N, self.Wx.shape[0])  # T may be 0
            if self.reverse:
                dx = xp.ascontiguousarray(dx[::-1])
        dWx = xp.matmul(self.x2.T, dxw2) if need_wx else None
        dWh = self._grad_Wh(dhw2) if need_wh else None
        dBx = column_sums(xp, dxw2) if need_bx else None
        if need_bh and dBx is not None and dhw is dxw:  # (RNN, LSTM) the same sums: a copy
            dBh = dBx.copy()  # of its own, as an update may scale a gradient in place
        else:
            dBh = column_sums(xp, dhw2) if need_bh else None
        dstates = tuple(d if need else None for d, need in zip(dstates, need_states))
        return (dx, *dstates, dWx, dWh, dBx, dBh)

    def _transposed(self, w: Any) -> Any:
        """``w.T`` laid out contiguously: the per-step GEMMs run a quarter faster on it."""
        return self.xp.ascontiguousarray(w.T)

    def _grad_Wh(self, dhw2: Any) -> Any:  # noqa: N802
        """``dWh``: the inputs of ``@ Wh`` (the previous hidden states) times ``dhw``."""
        hprev = self.hs[:-1]
        return self.xp.matmul(hprev.reshape(-1, hprev.shape[-1]).T, dhw2)

    def _check(self, x: Any, states: tuple, Wx: Any, Wh: Any, Bx: Any, Bh: Any) -> None:
        arrays = (x, *states, Wx, Wh, Bx, Bh)
        dtypes = {a.dtype for a in arrays}
        if len(dtypes) != 1 or x.dtype.kind != "f":
            got = ", ".join(str(a.dtype) for a in arrays)
            raise DTypeError(f"{self.name}: inputs must share one float dtype, got {got}")
        if x.ndim != 3 or Wh.ndim != 2:
            raise self.error("expects x of shape (seq_len, batch, input_size) and a 2-d Wh", *arrays)
        _, N, I = x.shape
        H = Wh.shape[0]
        G = self.gates * H
        names = (*self.state_names, "Wx", "Wh", "Bx", "Bh")
        expected = (*[(N, H)] * len(states), (I, G), (H, G), (G,), (G,))
        for name, a, shape in zip(names, arrays[1:], expected):
            if a.shape != shape:
                raise self.error(f"{name} must have shape {shape}, got {a.shape}", *arrays)

    @abstractmethod
    def _steps(self, xw: Any, states: tuple, Wh: Any, Bh: Any) -> tuple: ...

    @abstractmethod
    def _back_steps(self, dy: Any, dfinal: tuple) -> tuple: ...


class RNNSequence(_Sequence):
    """Elman RNN over a sequence: ``h[t] = act(x[t] @ Wx + Bx + h[t-1] @ Wh + Bh)``."""

    def __init__(self, nonlinearity: str = "tanh", reverse: bool = False) -> None:
        super().__init__(reverse)
        self.nonlinearity = _args.choice(self.name, "nonlinearity", nonlinearity, ("tanh", "relu"))

    def _steps(self, xw: Any, states: tuple, Wh: Any, Bh: Any) -> tuple:
        xp = self.xp
        T, N, H = xw.shape
        xw += Bh  # both biases once, for all steps
        hs = xp.empty((T + 1, N, H), dtype=xw.dtype)
        hs[0] = states[0]
        act = xp.tanh if self.nonlinearity == "tanh" else None
        for t in range(T):
            a = xw[t]
            a += xp.matmul(hs[t], Wh)
            if act is not None:
                act(a, out=hs[t + 1])
            else:
                xp.maximum(a, 0, out=hs[t + 1])
        self.hs = hs
        return hs[1:], hs[T].copy()

    def _back_steps(self, dy: Any, dfinal: tuple) -> tuple:
        hs = self.hs
        T = hs.shape[0] - 1
        # The activation's derivative for all steps at once; the loop only scales it by dh.
        h = hs[1:]
        da = 1 - h * h if self.nonlinearity == "tanh" else (h > 0).astype(h.dtype)
        WhT = self._transposed(self.Wh)
        dh = dfinal[0]
        for t in reversed(range(T)):
            if dy is not None:
                dh = dh + dy[t]
            d = da[t]
            d *= dh
            dh = self.xp.matmul(d, WhT)
        return da, da, (dh,)


class LSTMSequence(_Sequence):
    """LSTM over a sequence, gates i, f, o, g: ``c = f*c + i*g``, ``h = o*tanh(c)``.

    An optional last input ``P`` (3H,) holds peephole weights in the order i, f, o (ONNX's
    LSTM ``P``, whose order is i, o, f, reordered by the importer): ``i`` and ``f`` add
    ``P_i*c[t-1]`` and ``P_f*c[t-1]`` to their pre-activations, ``o`` adds ``P_o*c[t]`` (the
    new cell state). Without ``P`` the op runs the plain recurrence, untouched.
    """

    gates = 4
    state_names = ("h0", "c0")
    P: Any = None  # peephole weights of the last forward, or None
    dz: Any = None  # pre-activation gradients, between the peephole backward and dP

    def forward(self, x: Any, *args: Any) -> tuple:
        k = len(self.state_names) + 4
        if len(args) not in (k, k + 1):
            raise self.error(f"expects {k + 1} or {k + 2} inputs, got {len(args) + 1}", x, *args)
        self.P = args[k] if len(args) > k else None
        return super().forward(x, *args[:k])

    def backward(self, dy: Any, *dfinal: Any) -> tuple:
        grads = super().backward(dy, *dfinal)
        if self.P is None:
            return grads
        dP = self._grad_P() if self.needs_grad[-1] else None
        self.dz = None  # (T, N, 4H): not kept alive with the graph
        return (*grads, dP)

    def _check(self, x: Any, states: tuple, Wx: Any, Wh: Any, Bx: Any, Bh: Any) -> None:
        super()._check(x, states, Wx, Wh, Bx, Bh)
        P = self.P
        if P is None:
            return
        if P.dtype != x.dtype:
            raise DTypeError(f"{self.name}: P must have the dtype of x ({x.dtype}), got {P.dtype}")
        if P.shape != (3 * Wh.shape[0],):
            raise self.error(f"P must have shape {(3 * Wh.shape[0],)}, got {P.shape}", x, Wh, P)

    def _steps(self, xw: Any, states: tuple, Wh: Any, Bh: Any) -> tuple:
        xp = self.xp
        T, N, G = xw.shape
        H = G // 4
        xw += Bh
        # sigmoid(a) = (1 + tanh(a/2)) / 2. Halving the i, f, o pre-activations up front (in xw,
        # for all steps, and in a copy of Wh) lets one tanh over the whole contiguous gate row
        # serve all four gates in each step, which is where the time goes at small sizes.
        xw[:, :, : 3 * H] *= 0.5
        Wh_half = Wh.copy()
        Wh_half[:, : 3 * H] *= 0.5
        hs = xp.empty((T + 1, N, H), dtype=xw.dtype)
        cs = xp.empty_like(hs)
        tcs = xp.empty_like(hs[1:])  # tanh(c[t]), reused by backward
        hs[0], cs[0] = states
        if self.P is not None:
            self._peephole_steps(xw, Wh_half, hs, cs, tcs)
        elif _kernels(xp, xw, Wh_half, hs):  # each step: the product and one compiled pass
            _kernels.module().lstm_forward(xw, Wh_half, hs, cs, tcs)
        else:
            for t in range(T):
                a = xw[t]  # pre-activations, turned into activations in place
                a += xp.matmul(hs[t], Wh_half)
                xp.tanh(a, out=a)
                sig = a[:, : 3 * H]
                sig += 1
                sig *= 0.5
                i, f, o, g = a[:, :H], a[:, H : 2 * H], a[:, 2 * H : 3 * H], a[:, 3 * H :]
                c = cs[t + 1]
                xp.multiply(f, cs[t], out=c)
                c += i * g
                xp.tanh(c, out=tcs[t])
                xp.multiply(o, tcs[t], out=hs[t + 1])
        self.acts, self.hs, self.cs, self.tcs = xw, hs, cs, tcs
        return hs[1:], hs[T].copy(), cs[T].copy()

    def _peephole_steps(self, xw: Any, Wh_half: Any, hs: Any, cs: Any, tcs: Any) -> None:
        """The recurrence with peepholes, on the halved pre-activations of ``_steps``.

        ``o`` sees the new cell state, so its activation waits until ``c[t]`` is known: the
        tanh runs on i, f and g first, then on o.
        """
        xp = self.xp
        H = hs.shape[-1]
        ph = self.P * 0.5  # halved like the pre-activations it adds to
        p_i, p_f, p_o = ph[:H], ph[H : 2 * H], ph[2 * H :]
        for t in range(xw.shape[0]):
            a = xw[t]
            a += xp.matmul(hs[t], Wh_half)
            a[:, :H] += p_i * cs[t]
            a[:, H : 2 * H] += p_f * cs[t]
            i_f, o, g = a[:, : 2 * H], a[:, 2 * H : 3 * H], a[:, 3 * H :]
            _half_sigmoid_(xp, i_f)
            xp.tanh(g, out=g)
            c = cs[t + 1]
            xp.multiply(a[:, H : 2 * H], cs[t], out=c)
            c += a[:, :H] * g
            o += p_o * c
            _half_sigmoid_(xp, o)
            xp.tanh(c, out=tcs[t])
            xp.multiply(o, tcs[t], out=hs[t + 1])

    def _back_steps(self, dy: Any, dfinal: tuple) -> tuple:
        xp, acts, cs, tcs = self.xp, self.acts, self.cs, self.tcs
        T, N, G = acts.shape
        H = G // 4
        dh, dc = dfinal
        if self.P is None and _kernels(xp, acts, dh, dc, *(() if dy is None else (dy,))):
            d, dh, dc = _kernels.module().lstm_backward(acts, cs, tcs, self._transposed(self.Wh), dy, dh, dc)
            return d, d, (dh, dc)
        # Whatever does not depend on the incoming gradients is done for all steps at once:
        # the gates' activation derivatives (into da, scaled in the loop) and o * tanh'(c).
        da = xp.empty_like(acts)
        s, g = acts[..., : 3 * H], acts[..., 3 * H :]
        xp.multiply(s, 1 - s, out=da[..., : 3 * H])
        xp.multiply(g, g, out=da[..., 3 * H :])
        xp.subtract(1, da[..., 3 * H :], out=da[..., 3 * H :])
        o_dtanh = acts[..., 2 * H : 3 * H] * (1 - tcs * tcs)
        WhT = self._transposed(self.Wh)
        if self.P is not None:
            dh, dc = self._peephole_back_steps(dy, dh, dc, da, o_dtanh, WhT)
            return da, da, (dh, dc)
        dact = xp.empty((N, G), dtype=acts.dtype)  # gradients w.r.t. the gate activations
        for t in reversed(range(T)):
            if dy is not None:
                dh = dh + dy[t]
            a, d = acts[t], da[t]
            dc = dc + dh * o_dtanh[t]
            xp.multiply(dc, a[:, 3 * H :], out=dact[:, :H])  # i
            xp.multiply(dc, cs[t], out=dact[:, H : 2 * H])  # f
            xp.multiply(dh, tcs[t], out=dact[:, 2 * H : 3 * H])  # o
            xp.multiply(dc, a[:, :H], out=dact[:, 3 * H :])  # g
            d *= dact
            dc = dc * a[:, H : 2 * H]
            dh = self.xp.matmul(d, WhT)
        return da, da, (dh, dc)

    def _peephole_back_steps(self, dy: Any, dh: Any, dc: Any, da: Any, o_dtanh: Any, WhT: Any) -> tuple:
        """``_back_steps``' loop with peepholes; turns ``da`` into the pre-activation gradients
        and returns the gradients of ``h0`` and ``c0``.

        Two extra paths reach the cell state: ``c[t]`` feeds o's pre-activation (so o's
        gradient joins ``dc`` before i, f and g use it), and ``c[t-1]`` feeds i's and f's.
        """
        acts, cs, tcs, P = self.acts, self.cs, self.tcs, self.P
        H = cs.shape[-1]
        p_i, p_f, p_o = P[:H], P[H : 2 * H], P[2 * H :]
        for t in reversed(range(acts.shape[0])):
            if dy is not None:
                dh = dh + dy[t]
            a, d = acts[t], da[t]
            d_o = d[:, 2 * H : 3 * H]
            d_o *= dh * tcs[t]
            dc = dc + dh * o_dtanh[t] + d_o * p_o
            d[:, :H] *= dc * a[:, 3 * H :]  # i
            d[:, H : 2 * H] *= dc * cs[t]  # f
            d[:, 3 * H :] *= dc * a[:, :H]  # g
            dc = dc * a[:, H : 2 * H] + d[:, :H] * p_i + d[:, H : 2 * H] * p_f
            dh = self.xp.matmul(d, WhT)
        self.dz = da
        return dh, dc

    def _grad_P(self) -> Any:  # noqa: N802
        """``dP``: each gate's pre-activation gradient times the cell state its peephole saw,
        summed over steps and batch (i, f saw ``c[t-1]``, o saw ``c[t]``)."""
        dz, cs = self.dz, self.cs
        H = cs.shape[-1]
        d_if = dz[..., : 2 * H].reshape(*dz.shape[:2], 2, H) * cs[:-1, :, None, :]
        d_o = dz[..., 2 * H : 3 * H] * cs[1:]
        return self.xp.concatenate([d_if.sum(axis=(0, 1)).reshape(-1), d_o.sum(axis=(0, 1))])


class GRUSequence(_Sequence):
    """GRU over a sequence, gates z, r, n: ``h = (1-z)*n + z*h_prev``.

    ``linear_before_reset=True`` (PyTorch, ONNX's flag 1): ``n = tanh(xn + r*(h@Wh_n + Bh_n))``;
    ``False`` (ONNX's default 0): ``n = tanh(xn + (r*h)@Wh_n + Bh_n)``, with ``xn = x@Wx_n + Bx_n``.
    """

    gates = 3

    def __init__(self, linear_before_reset: bool = True, reverse: bool = False) -> None:
        super().__init__(reverse)
        self.linear_before_reset = linear_before_reset

    def _steps(self, xw: Any, states: tuple, Wh: Any, Bh: Any) -> tuple:
        xp = self.xp
        T, N, G = xw.shape
        H = G // 3
        lbr = self.linear_before_reset
        hs = xp.empty((T + 1, N, H), dtype=xw.dtype)
        hs[0] = states[0]
        # The term r multiplies: h @ Wh_n + Bh_n (lbr) or h itself; backward needs it.
        self.rterm = xp.empty_like(hs[1:])
        Wh_zr = xp.ascontiguousarray(Wh[:, : 2 * H])
        Wh_n = xp.ascontiguousarray(Wh[:, 2 * H :])
        for t in range(T):
            a, h, rterm = xw[t], hs[t], self.rterm[t]
            if lbr:
                hw = xp.matmul(h, Wh)
                hw += Bh
                a[:, : 2 * H] += hw[:, : 2 * H]
                rterm[...] = hw[:, 2 * H :]
            else:
                a[:, : 2 * H] += xp.matmul(h, Wh_zr)
                a[:, : 2 * H] += Bh[: 2 * H]
                rterm[...] = h
            _sigmoid_(xp, a[:, : 2 * H])
            z, r, n = a[:, :H], a[:, H : 2 * H], a[:, 2 * H :]
            if lbr:
                n += r * rterm
            else:
                n += xp.matmul(r * rterm, Wh_n)
                n += Bh[2 * H :]
            xp.tanh(n, out=n)
            xp.multiply(z, h - n, out=hs[t + 1])
            hs[t + 1] += n
        self.acts, self.hs, self.Wh_zr, self.Wh_n = xw, hs, Wh_zr, Wh_n
        return hs[1:], hs[T].copy()

    def _back_steps(self, dy: Any, dfinal: tuple) -> tuple:
        xp, acts, hs = self.xp, self.acts, self.hs
        T, _, G = acts.shape
        H = G // 3
        lbr = self.linear_before_reset
        dxw = xp.empty_like(acts)
        # With lbr the n block fed by h @ Wh gets r * d(n pre-activation); otherwise the same
        # gradients as the x side, only multiplied by r*h instead of h (see _grad_Wh).
        dhw = xp.empty_like(acts) if lbr else dxw
        WhT, Wh_zrT, Wh_nT = (self._transposed(w) for w in (self.Wh, self.Wh_zr, self.Wh_n))
        dh = dfinal[0]
        for t in reversed(range(T)):
            if dy is not None:
                dh = dh + dy[t]
            a, d, h, rterm = acts[t], dxw[t], hs[t], self.rterm[t]
            z, r, n = a[:, :H], a[:, H : 2 * H], a[:, 2 * H :]
            dz, dr, dn = d[:, :H], d[:, H : 2 * H], d[:, 2 * H :]
            xp.multiply(dh, h - n, out=dz)
            dz *= z - z * z
            xp.multiply(dh, 1 - z, out=dn)
            dn *= 1 - n * n
            dh_prev = dh * z
            if lbr:
                xp.multiply(dn, rterm, out=dr)
                dr *= r - r * r
                dhw[t, :, : 2 * H] = d[:, : 2 * H]
                xp.multiply(dn, r, out=dhw[t, :, 2 * H :])
                dh_prev += self.xp.matmul(dhw[t], WhT)
            else:
                drh = self.xp.matmul(dn, Wh_nT)
                xp.multiply(drh, rterm, out=dr)
                dr *= r - r * r
                dh_prev += drh * r
                dh_prev += self.xp.matmul(d[:, : 2 * H], Wh_zrT)
            dh = dh_prev
        return dxw, dhw, (dh,)

    def _grad_Wh(self, dhw2: Any) -> Any:  # noqa: N802
        if self.linear_before_reset:
            return super()._grad_Wh(dhw2)
        xp = self.xp
        H = self.hs.shape[-1]
        hprev = self.hs[:-1].reshape(-1, H)
        rh = (self.acts[:, :, H : 2 * H] * self.rterm).reshape(-1, H)
        return xp.concatenate(
            [xp.matmul(hprev.T, dhw2[:, : 2 * H]), xp.matmul(rh.T, dhw2[:, 2 * H :])], axis=1
        )


class _Cell(_Sequence):
    """A sequence op over one time step: x (N, I) in, the new states out."""

    optional_grads = ()  # every output is a state: backward needs arrays for all

    def forward(self, x: Any, *args: Any) -> tuple:
        if x.ndim != 2:
            raise self.error("expects x of shape (batch, input_size)", x, *args)
        return super().forward(x[None], *args)[1:]

    def backward(self, *dstates: Any) -> tuple:
        dx, *rest = super().backward(None, *dstates)
        return (None if dx is None else dx[0], *rest)


class RNNCell(_Cell, RNNSequence):
    """One step of :class:`RNNSequence`."""


class LSTMCell(_Cell, LSTMSequence):
    """One step of :class:`LSTMSequence`."""


class GRUCell(_Cell, GRUSequence):
    """One step of :class:`GRUSequence`."""


def rnn_cell(
    x: Tensor, h: Tensor, Wx: Tensor, Wh: Tensor, Bx: Tensor, Bh: Tensor, nonlinearity: str = "tanh"
) -> Tensor:
    """One Elman RNN step: ``act(x @ Wx + Bx + h @ Wh + Bh)``, ``act`` tanh or relu.

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> z = lambda *s: tensor.from_numpy(np.zeros(s, np.float32))
    >>> rnn_cell(z(2, 3), z(2, 4), z(3, 4), z(4, 4), z(4), z(4)).shape
    (2, 4)
    """
    return RNNCell(nonlinearity)(x, h, Wx, Wh, Bx, Bh)[0]


def lstm_cell(
    x: Tensor,
    h: Tensor,
    c: Tensor,
    Wx: Tensor,
    Wh: Tensor,
    Bx: Tensor,
    Bh: Tensor,
    P: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """One LSTM step; returns ``(h_new, c_new)``. Gates i, f, o, g side by side in the weights;
    ``P`` (3H,): optional peephole weights, gates i, f, o (see :class:`LSTMSequence`)."""
    peephole = () if P is None else (P,)
    h_new, c_new = LSTMCell()(x, h, c, Wx, Wh, Bx, Bh, *peephole)
    return h_new, c_new


def gru_cell(
    x: Tensor,
    h: Tensor,
    Wx: Tensor,
    Wh: Tensor,
    Bx: Tensor,
    Bh: Tensor,
    linear_before_reset: bool = True,
) -> Tensor:
    """One GRU step (gates z, r, n); see :class:`GRUSequence` for ``linear_before_reset``."""
    return GRUCell(linear_before_reset)(x, h, Wx, Wh, Bx, Bh)[0]


def rnn(
    x: Tensor,
    h0: Tensor,
    Wx: Tensor,
    Wh: Tensor,
    Bx: Tensor,
    Bh: Tensor,
    nonlinearity: str = "tanh",
    reverse: bool = False,
) -> tuple[Tensor, Tensor]:
    """Elman RNN over ``x`` (T, N, I); returns ``(y, hT)`` with ``y`` (T, N, H)."""
    y, hT = RNNSequence(nonlinearity, reverse)(x, h0, Wx, Wh, Bx, Bh)
    return y, hT


def lstm(
    x: Tensor,
    h0: Tensor,
    c0: Tensor,
    Wx: Tensor,
    Wh: Tensor,
    Bx: Tensor,
    Bh: Tensor,
    reverse: bool = False,
    P: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """LSTM over ``x`` (T, N, I); returns ``(y, hT, cT)`` with ``y`` (T, N, H).

    ``P`` (3H,): optional peephole weights, gates i, f, o (ONNX's ``P`` in singa_lite's gate
    order); it gets a gradient like the other weights.

    >>> import numpy as np
    >>> from singa_lite import tensor
    >>> z = lambda *s: tensor.from_numpy(np.zeros(s, np.float32))
    >>> y, h, c = lstm(z(5, 2, 3), z(2, 4), z(2, 4), z(3, 16), z(4, 16), z(16), z(16))
    >>> y.shape, h.shape
    ((5, 2, 4), (2, 4))
    """
    peephole = () if P is None else (P,)
    y, hT, cT = LSTMSequence(reverse)(x, h0, c0, Wx, Wh, Bx, Bh, *peephole)
    return y, hT, cT


def gru(
    x: Tensor,
    h0: Tensor,
    Wx: Tensor,
    Wh: Tensor,
    Bx: Tensor,
    Bh: Tensor,
    linear_before_reset: bool = True,
    reverse: bool = False,
) -> tuple[Tensor, Tensor]:
    """GRU over ``x`` (T, N, I); returns ``(y, hT)`` with ``y`` (T, N, H)."""
    y, hT = GRUSequence(linear_before_reset, reverse)(x, h0, Wx, Wh, Bx, Bh)
    return y, hT

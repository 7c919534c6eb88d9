"""Attention and transformer layers over ``scaled_dot_product_attention``.

Layouts follow ``torch.nn``: inputs are ``(L, N, E)`` unless ``batch_first=True`` makes them
``(N, L, E)``. Masks follow ``scaled_dot_product_attention``, with one difference from
``torch.nn.MultiheadAttention`` to note when porting: a *boolean* ``attn_mask`` is True where a
query **may** attend (PyTorch's layer takes True as *masked*; its ``F.scaled_dot_product_attention``
agrees with us). ``key_padding_mask`` ``(N, S)`` is True at padding keys, as in PyTorch.
Float masks are added to the scores in both.

The projections are ``Linear`` layers, so the parameters are ``q_proj.W (E, E)``,
``k_proj.W``, ``v_proj.W``, ``out_proj.W`` and their biases (PyTorch's ``in_proj_weight`` is
the three ``W`` transposed and stacked).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from singa_lite import autograd, ops
from singa_lite._args import choice, count, fraction, number
from singa_lite.errors import ArgumentError, ShapeError
from singa_lite.layer.base import Layer
from singa_lite.layer.dense import Linear
from singa_lite.layer.norm import Dropout, LayerNorm
from singa_lite.layer.positional import RotaryEmbedding
from singa_lite.tensor import Tensor

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": ops.relu,
    "gelu": ops.gelu,
    "gelu_tanh": lambda x: ops.gelu(x, approximate="tanh"),
}


def _combine(a: Tensor | None, b: Tensor | None) -> Tensor | None:
    """One mask meaning both: bool masks ANDed, float ones added, a bool one made additive
    (0 where visible, -inf where hidden) to join a float one."""
    if a is None or b is None:
        return a if b is None else b
    if a.dtype.kind == "b" and b.dtype.kind == "b":
        return ops.logical_and(a, b)
    a, b = (_additive(m, b if m is a else a) for m in (a, b))
    return ops.add(a, b)


def _additive(m: Tensor, like: Tensor) -> Tensor:
    if m.dtype.kind != "b":
        return m
    dtype = like.dtype if like.dtype.kind == "f" else "float32"
    zero = Tensor((), m.device, dtype, requires_grad=False)
    hidden = Tensor((), m.device, dtype, requires_grad=False).set_value(float("-inf"))
    return ops.where(m, zero, hidden)


class MultiHeadAttention(Layer):
    """Multi-head attention: ``out_proj(attention(q_proj(query), k_proj(key), v_proj(value)))``
    with ``num_heads`` heads of ``embed_dim / num_heads`` features.

    ``num_kv_heads`` (default ``num_heads``) fewer key/value heads give grouped-query attention;
    ``rotary`` (a :class:`RotaryEmbedding`) rotates queries and keys by position; ``dropout``
    drops attention probabilities in training; ``bias`` switches every projection's bias.
    The key and value widths are learnt from the first inputs (PyTorch's ``kdim``/``vdim``).

    ``forward(query, key=None, value=None, key_padding_mask=None, attn_mask=None,
    is_causal=False)`` returns the output only (the attention weights are never formed whole).
    ``key`` defaults to ``query`` and ``value`` to ``key``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        batch_first: bool = False,
        num_kv_heads: int | None = None,
        rotary: RotaryEmbedding | None = None,
    ) -> None:
        super().__init__()
        self.embed_dim = count("MultiHeadAttention", "embed_dim", embed_dim)
        self.num_heads = count("MultiHeadAttention", "num_heads", num_heads)
        kv = (
            self.num_heads
            if num_kv_heads is None
            else count("MultiHeadAttention", "num_kv_heads", num_kv_heads)
        )
        if self.embed_dim % self.num_heads or self.num_heads % kv:
            raise ArgumentError(
                f"MultiHeadAttention: num_heads {num_heads} must divide embed_dim {embed_dim}, "
                f"and num_kv_heads {kv} must divide num_heads"
            )
        if rotary is not None and not isinstance(rotary, RotaryEmbedding):
            raise ArgumentError(
                f"MultiHeadAttention: rotary must be a RotaryEmbedding, got {type(rotary).__name__}"
            )
        self.num_kv_heads, self.head_dim = kv, self.embed_dim // self.num_heads
        self.dropout, self.batch_first = fraction("MultiHeadAttention", "dropout", dropout), bool(batch_first)
        self.q_proj = Linear(self.embed_dim, bias=bias)
        self.k_proj = Linear(kv * self.head_dim, bias=bias)
        self.v_proj = Linear(kv * self.head_dim, bias=bias)
        self.out_proj = Linear(self.embed_dim, bias=bias)
        self.rotary = rotary

    def _heads(self, x: Tensor, heads: int) -> Tensor:
        """``(N, T, heads * D)`` -> ``(N, heads, T, D)``."""
        n, t, _ = x.shape
        return ops.transpose(ops.reshape(x, (n, t, heads, self.head_dim)), (0, 2, 1, 3))

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        key = query if key is None else key
        value = key if value is None else value
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.ndim() != 3:
                layout = "(N, L, E)" if self.batch_first else "(L, N, E)"
                raise ShapeError(f"MultiHeadAttention: {name} must be {layout}, got {x.shape}")
        if query.shape[-1] != self.embed_dim:
            raise ShapeError(
                f"MultiHeadAttention: query has {query.shape[-1]} features, embed_dim is {self.embed_dim}"
            )
        if not self.batch_first:
            query, key, value = (
                ops.transpose(x, (1, 0, 2)) if x is not None else x for x in (query, key, value)
            )
        n, length, _ = query.shape
        s = key.shape[1]
        if key.shape[0] != n or value.shape[:2] != key.shape[:2]:
            raise ShapeError(
                f"MultiHeadAttention: query, key and value disagree in batch or key length "
                f"({query.shape}, {key.shape}, {value.shape}, batch first)"
            )
        q = self._heads(self.q_proj(query), self.num_heads)
        k = self._heads(self.k_proj(key), self.num_kv_heads)
        v = self._heads(self.v_proj(value), self.num_kv_heads)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        mask = _combine(self._padding_mask(key_padding_mask, n, s), self._attn_mask(attn_mask, n, length, s))
        y = ops.scaled_dot_product_attention(
            q, k, v, mask, is_causal, self.dropout, training=autograd.training
        )
        y = ops.reshape(ops.transpose(y, (0, 2, 1, 3)), (n, length, self.embed_dim))
        y = self.out_proj(y)
        return y if self.batch_first else ops.transpose(y, (1, 0, 2))

    def _padding_mask(self, m: Tensor | None, n: int, s: int) -> Tensor | None:
        if m is None:
            return None
        if m.shape != (n, s):
            raise ShapeError(f"MultiHeadAttention: key_padding_mask must be (N, S) = {(n, s)}, got {m.shape}")
        m = ops.reshape(m, (n, 1, 1, s))
        return ops.logical_not(m) if m.dtype.kind == "b" else m

    def _attn_mask(self, m: Tensor | None, n: int, length: int, s: int) -> Tensor | None:
        if m is None:
            return None
        if m.ndim() == 3 and m.shape == (n * self.num_heads, length, s):  # PyTorch's per-head form
            m = ops.reshape(m, (n, self.num_heads, length, s))
        return m


def _activation(owner: str, activation: Any) -> Callable[[Tensor], Tensor]:
    if callable(activation):
        return activation
    return _ACTIVATIONS[choice(owner, "activation", activation, tuple(_ACTIVATIONS))]


class _Block(Layer):
    """What the encoder and decoder layers share: the feed-forward part and the norm order."""

    def __init__(
        self,
        owner: str,
        d_model: int,
        nhead: int,
        dim_feedforward: int,
        dropout: float,
        activation: Any,
        layer_norm_eps: float,
        batch_first: bool,
        norm_first: bool,
        bias: bool,
    ) -> None:
        super().__init__()
        self.d_model = count(owner, "d_model", d_model)
        # Checked here too, so the message names this layer's arguments, not its parts'.
        count(owner, "nhead", nhead)
        fraction(owner, "dropout", dropout)
        number(owner, "layer_norm_eps", layer_norm_eps, 0.0)
        self.norm_first, self.batch_first = bool(norm_first), bool(batch_first)
        self._act = _activation(owner, activation)
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout, bias, batch_first)
        self.linear1 = Linear(count(owner, "dim_feedforward", dim_feedforward), bias=bias)
        self.linear2 = Linear(d_model, bias=bias)
        self.dropout = Dropout(dropout)
        self.norm1 = LayerNorm(eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(eps=layer_norm_eps, bias=bias)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)

    def _ff(self, x: Tensor, out_dropout: Dropout) -> Tensor:
        return out_dropout(self.linear2(self.dropout(self._act(self.linear1(x)))))

    def _residual(self, x: Tensor, norm: LayerNorm, sub: Callable[[Tensor], Tensor]) -> Tensor:
        """``x + sub(norm(x))`` (pre-norm) or ``norm(x + sub(x))`` (post-norm)."""
        if self.norm_first:
            return ops.add(x, sub(norm(x)))
        return norm(ops.add(x, sub(x)))


class TransformerEncoderLayer(_Block):
    """Self-attention then a feed-forward network, each with a residual connection and layer
    norm (after each, or before each with ``norm_first``), as ``torch.nn.TransformerEncoderLayer``.

    ``activation``: ``"relu"``, ``"gelu"``, ``"gelu_tanh"`` or a function of a Tensor.
    ``forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False)``.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Any = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__(
            "TransformerEncoderLayer", d_model, nhead, dim_feedforward, dropout, activation,
            layer_norm_eps, batch_first, norm_first, bias,
        )  # fmt: skip

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        def attend(x: Tensor) -> Tensor:
            return self.dropout1(self.self_attn(x, x, x, src_key_padding_mask, src_mask, is_causal))

        x = self._residual(src, self.norm1, attend)
        return self._residual(x, self.norm2, lambda h: self._ff(h, self.dropout2))


class TransformerDecoderLayer(_Block):
    """Self-attention, attention over ``memory`` (the encoder's output), then a feed-forward
    network, each with a residual connection and layer norm, as ``torch.nn.TransformerDecoderLayer``.

    ``forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False)``.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Any = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__(
            "TransformerDecoderLayer", d_model, nhead, dim_feedforward, dropout, activation,
            layer_norm_eps, batch_first, norm_first, bias,
        )  # fmt: skip
        self.multihead_attn = MultiHeadAttention(d_model, nhead, dropout, bias, batch_first)
        self.norm3 = LayerNorm(eps=layer_norm_eps, bias=bias)
        self.dropout3 = Dropout(dropout)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        def attend(x: Tensor) -> Tensor:
            return self.dropout1(self.self_attn(x, x, x, tgt_key_padding_mask, tgt_mask, tgt_is_causal))

        def cross(x: Tensor) -> Tensor:
            y = self.multihead_attn(x, memory, memory, memory_key_padding_mask, memory_mask, memory_is_causal)
            return self.dropout2(y)

        x = self._residual(tgt, self.norm1, attend)
        x = self._residual(x, self.norm2, cross)
        return self._residual(x, self.norm3, lambda h: self._ff(h, self.dropout3))

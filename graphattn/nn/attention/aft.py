"""The attention-free score (AFT, Zhai et al. 2021, "An Attention Free Transformer") on graph edges."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from graphattn.functional import EDGE_IMPLS, edge_attention_prechecked
from graphattn.nn.attention.dot import DotScore
from graphattn.nn.attention.explain import masked_edge_attention
from graphattn.nn.attention.projections import Parts
from graphattn.nn.attention.score import SCORES, stacked
from graphattn.ops.csr import EdgeCSR

__all__ = ["AFTScore"]


def _channels_as_heads(t: Tensor) -> Tensor:
    """``(rows, H, C)`` -> ``(rows, H*C, 1)``: every channel its own softmax."""
    return t.reshape(t.size(0), -1, 1)


@SCORES.register("aft")
class AFTScore(DotScore):
    r"""``y_i = σ(q_i) ⊙ Σ_j exp(k_j + w_ij) ⊙ v_j / Σ_j exp(k_j + w_ij)`` over the in-neighbours j of i,
    per channel: no query–key product. ``w_ij = W_e e_ij`` is the edge's learned bias (its features,
    e.g. a hop distance or relative position; 0 without ``edge_dim``: AFT-simple over the edges).

    Parameters as ``score="dot"`` (``lin_qkv`` or ``lin_query`` / ``lin_key`` / ``lin_value``,
    ``lin_edge``). It runs on the fused edge kernels by treating each of the ``H·C`` channels as a
    head of width 1 whose score is ``k_j + w_ij`` (a unit query): the kernels' max-subtracted softmax
    makes it stable where the published code overflows. ``attn_bias`` ``(E, H)`` is added to every
    channel of its head. The returned attention weights ``(E, H)`` are each head's mean over its
    channels (each channel's weights sum to 1 over a node's in-edges, so their mean does too).
    """

    kernel = "dot"
    impls = tuple(i for i in EDGE_IMPLS if i != "dense")
    normalizations = ("softmax",)
    edge_values = False
    weights_grad = False  # the returned weights are each head's mean over per-channel kernel weights

    def _bias(self, layer, edge_feat: Optional[Tensor], attn_bias: Optional[Tensor], E: int, like: Tensor):
        """The ``(E, H*C)`` per-channel bias ``w_ij`` (+ the user's ``attn_bias``), or None."""
        H, C = layer.heads, layer.out_channels
        bias = None if edge_feat is None else edge_feat.reshape(E, H * C)
        if attn_bias is not None:
            extra = attn_bias.to(like.dtype)[:, :, None].expand(E, H, C).reshape(E, H * C)
            bias = extra if bias is None else bias + extra
        return bias

    def attend(self, layer, parts: Parts, csr: EdgeCSR, edge_index: Tensor, edge_feat: Optional[Tensor],
               attn_bias: Optional[Tensor], batch: Optional[Tensor], want_alpha: bool,
               num_src: Optional[int]) -> Tuple[Tensor, Optional[Tensor]]:
        q = parts.dst
        N, H, C = q.shape
        k, v = self.key_value(parts)
        if num_src is not None:
            k, v = stacked(k, N, 0), stacked(v, N, 0)
        ones = k.new_ones(1, 1, 1).expand(k.size(0), H * C, 1)  # a unit query: the score is k_j (+ w_ij)
        bias = self._bias(layer, edge_feat, attn_bias, edge_index.size(1), k)
        res = edge_attention_prechecked(ones, _channels_as_heads(k), _channels_as_heads(v), csr=csr, bias=bias,
                                        impl=layer.impl, dropout=layer.dropout, training=layer.training,
                                        return_attention_weights=want_alpha)
        out, alpha = res if want_alpha else (res, None)
        out = out.reshape(-1, H, C)[:N] * torch.sigmoid(q)  # (N, H, C)
        if alpha is not None:
            alpha = alpha.reshape(-1, H, C).mean(-1)  # (E, H)
        return out, alpha

    def explain(self, layer, parts: Parts, ei: Tensor, edge_feat: Optional[Tensor], attn_bias: Optional[Tensor],
                N: int, mask: Tensor) -> Tuple[Tensor, Tensor]:
        q = parts.dst
        H, C = q.shape[1:]
        k, v = self.key_value(parts)
        s = k[ei[0]].reshape(-1, H * C)  # (E, H*C)
        bias = self._bias(layer, edge_feat, attn_bias, ei.size(1), k)
        if bias is not None:
            s = s + bias
        out, alpha = masked_edge_attention(s, _channels_as_heads(v[ei[0]]), ei[1], N, mask, dropout=layer.dropout,
                                           training=layer.training)
        return out.reshape(N, H, C) * torch.sigmoid(q), alpha.reshape(-1, H, C).mean(-1)

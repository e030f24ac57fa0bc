"""The attention step of :class:`~graphattn.nn.attention.GraphSelfAttention` on projected inputs:
the kernel call per score (``dot`` / ``additive``: :func:`attend`; ``gat``: :func:`attend_gat`),
attention weights with a gradient and PyG's dropout (``weights_grad``), and the per-edge path
that PyG's explainers need (:func:`explained`)."""
from __future__ import annotations

import math
from functools import partial
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from graphattn.functional import edge_attention
from graphattn.nn import attention_weights
from graphattn.nn.attention_parts import Parts
from graphattn.nn.attention_weights import aggregate, edge_softmax, gat_scores, weights_with_grad
from graphattn.nn.explain_masks import layer_edge_mask, masked_edge_attention
from graphattn.ops.csr import EdgeCSR, plain_tensor
from graphattn.ops.normalization import normalized_edge_attention

__all__ = ["attend", "attend_gat", "explained"]


def _stacked(t: Tensor, before: int, after: int) -> Tensor:
    """``t`` ``(n, H, C)`` with ``before`` zero rows above and ``after`` below."""
    H, C = t.shape[1:]
    return torch.cat([t.new_zeros(before, H, C), t, t.new_zeros(after, H, C)])


def attend(layer, parts: Parts, csr: EdgeCSR, edge_index: Tensor, edge_kv: Optional[Tensor],
           attn_bias: Optional[Tensor], batch: Optional[Tensor], want_alpha: bool,
           num_src: Optional[int]) -> Tuple[Tensor, Optional[Tensor]]:
    """Edge attention of the projected parts with the layer's normalization (``dot`` /
    ``additive``): ``(out (N, H, C), alpha (E, H) or None)``. ``num_src`` (bipartite): targets
    and sources are stacked as one node set ``[targets; sources]``, queries on targets, keys and
    values on sources. With ``weights_grad`` (PyG's convs): dropout in training scores the weights
    first, drops them by ``F.dropout`` in edge order (PyG's draws), then aggregates; the
    additive score of a small graph runs as plain per-edge torch ops."""
    q, src_parts = parts.dst, parts.src
    N, H, C = q.shape
    if num_src is not None:
        q = _stacked(q, 0, num_src)  # (N + N_src, H, C)
        src_parts = [_stacked(p, N, 0) for p in src_parts]
    k, v = src_parts if layer.score == "dot" else (src_parts[0], src_parts[0])
    edge_value = edge_kv if layer.score == "dot" else None
    kw = dict(csr=csr, bias=attn_bias, edge_key=edge_kv, batch=batch, impl=layer.impl)
    if layer.score == "additive":
        kw.update(score="additive", att=layer.att.view(H, C), negative_slope=layer.negative_slope)
    p_drop = layer.dropout if layer.training else 0.0
    if (layer.weights_grad and layer.score == "additive"
            and csr.num_edges * H * max(C, v.size(-1)) <= attention_weights.EXPLICIT_ELEMENTS):
        # small graphs: PyG's own per-edge ops beat the chunked kernel (Cora, 8 x 8: 0.7x its CPU
        # time with the recomputing backward, measured 2026-11-28); there is no fused additive kernel
        out, alpha, used = _explicit(layer, q, k, v, csr, edge_index, N, edge_kv, attn_bias, num_src)
        alpha = used if layer._returns_dropped_weights else alpha
    elif layer.weights_grad and p_drop > 0.0:
        no_values = v.new_zeros(1, 1, 1).expand(v.size(0), H, 1)  # (N, H, 1): only alpha is wanted
        _, alpha = edge_attention(q, k, no_values, return_attention_weights=True, _check=False, **kw)
        alpha = _alpha_grad(layer, alpha, q, k, csr, attn_bias, edge_kv)
        used = F.dropout(alpha, p_drop, True)
        ei = plain_tensor(edge_index).long()
        src = ei[0] if num_src is None else ei[0] + N  # stacked [targets; sources]
        out = aggregate(used, v, csr, src, ei[1], edge_value=edge_value, impl=layer.impl)
        alpha = used if layer._returns_dropped_weights else alpha
    else:
        run = (partial(edge_attention, _check=False) if layer.normalization == "softmax"
               else partial(normalized_edge_attention, normalization=layer.normalization))
        res = run(q, k, v, edge_value=edge_value, dropout=layer.dropout, training=layer.training,
                  return_attention_weights=want_alpha, **kw)
        out, alpha = (res if want_alpha else (res, None))
        if alpha is not None and layer.weights_grad and torch.is_grad_enabled():
            alpha = _alpha_grad(layer, alpha, q, k, csr, attn_bias, edge_kv)
    return (out[:N] if num_src is not None else out), alpha


def _explicit(layer, q: Tensor, k: Tensor, v: Tensor, csr: EdgeCSR, edge_index: Tensor, N: int,
              edge_kv: Optional[Tensor], attn_bias: Optional[Tensor], num_src: Optional[int]):
    """The attention in plain torch ops with ``(E, H, C)`` temporaries (PyG's own computation):
    ``(out, alpha before dropout, alpha after)``, differentiable. For small graphs only."""
    ei = plain_tensor(edge_index).long()
    src, dst = (ei[0] if num_src is None else ei[0] + N), ei[1]
    key = k.index_select(0, src)  # (E, H, C)
    if edge_kv is not None:
        key = key + edge_kv
    if layer.score == "dot":
        s = (q.index_select(0, dst) * key).sum(-1) / math.sqrt(q.size(-1))  # (E, H)
    else:
        s = (F.leaky_relu(q.index_select(0, dst) + key, layer.negative_slope) * layer.att.view(q.shape[1:])).sum(-1)
    if attn_bias is not None:
        s = s + attn_bias
    alpha = edge_softmax(s, dst, q.size(0))
    used = F.dropout(alpha, layer.dropout, True) if layer.training and layer.dropout > 0 else alpha
    out = aggregate(used, v, csr, src, dst, edge_value=edge_kv if layer.score == "dot" else None)
    return out, alpha, used


def _alpha_grad(layer, alpha: Tensor, q: Tensor, k: Tensor, csr: EdgeCSR, attn_bias: Optional[Tensor],
                edge_key: Optional[Tensor]) -> Tensor:
    """The kernel's detached ``alpha`` as a differentiable function of the score inputs."""
    H, C = q.shape[1:]
    return weights_with_grad(alpha, q, k, csr, bias=attn_bias, edge_key=edge_key,
                             att=layer.att.view(H, C) if layer.att is not None else None, score=layer.score,
                             scale=1.0 / math.sqrt(C), negative_slope=layer.negative_slope)


def _gat_edge_scores(layer, parts: Parts, src: Tensor, dst: Tensor, a_edge: Optional[Tensor],
                     attn_bias: Optional[Tensor]) -> Tensor:
    """GATConv's scores ``(E, H)`` from the per-node scalars ``a·W x`` ``(N, H)`` and the edge term."""
    (h_src,) = parts.src
    a_src = (h_src * layer.att_src).sum(-1)  # (N_src, H)
    a_dst = None if parts.dst is None else (parts.dst * layer.att_dst).sum(-1)  # (N, H)
    s = gat_scores(a_src, a_dst, a_edge, src, dst, layer.negative_slope)  # (E, H)
    return s if attn_bias is None else s + attn_bias


def attend_gat(layer, parts: Parts, csr: EdgeCSR, edge_index: Tensor, a_edge: Optional[Tensor],
               attn_bias: Optional[Tensor], want_alpha: bool,
               num_src: Optional[int]) -> Tuple[Tensor, Optional[Tensor]]:
    """GATConv's attention: the ``(E, H)`` scores are the kernel's score bias (zero queries and
    keys) for the softmax and the ``(E, H, C)`` aggregation. With dropout in training, or when
    alpha is wanted, alpha is computed explicitly ``(E, H)`` (PyG's softmax and dropout)."""
    (h_src,) = parts.src
    ei = plain_tensor(edge_index)
    src, dst = ei[0].long(), ei[1].long()
    s = _gat_edge_scores(layer, parts, src, dst, a_edge, attn_bias)
    N = csr.num_nodes - (num_src or 0)
    v = h_src if num_src is None else _stacked(h_src, N, 0)  # (N [+ N_src], H, C)
    p_drop = layer.dropout if layer.training else 0.0
    alpha = used = None
    if p_drop > 0.0 or want_alpha:
        alpha = edge_softmax(s, dst, N)  # (E, H)
        used = F.dropout(alpha, p_drop, True) if p_drop > 0.0 else alpha
    if p_drop > 0.0:
        out = aggregate(used, v, csr, src if num_src is None else src + N, dst, impl=layer.impl)
    else:
        zeros = v.new_zeros(1, 1, 1).expand(v.size(0), v.size(1), 1)  # (N, H, 1): no query-key term
        out = edge_attention(zeros, zeros, v, csr=csr, bias=s, impl=layer.impl, _check=False)
    if alpha is not None:  # returned: after dropout and differentiable with weights_grad
        alpha = (used if layer._returns_dropped_weights else alpha) if layer.weights_grad else alpha.detach()
    return (out[:N] if num_src is not None else out), alpha


def explained(layer, parts: Parts, edge_index: Tensor, edge_feat: Optional[Tensor],
              attn_bias: Optional[Tensor], N: int) -> Tuple[Tensor, Tensor]:
    """The attention with the explainer's edge mask on every message (PyG's
    ``explain_message``), by the differentiable per-edge path of :mod:`graphattn.nn.explain_masks`."""
    ei = plain_tensor(edge_index).long()
    mask = layer_edge_mask(layer._edge_mask, layer._loop_mask, layer._apply_sigmoid, ei, N,
                           loops_replaced=layer._explain_loops_replaced)
    common = dict(dropout=layer.dropout, training=layer.training)
    if layer.score == "gat":  # its scores as the bias of a zero query-key product
        (h_src,) = parts.src
        s = _gat_edge_scores(layer, parts, ei[0], ei[1], edge_feat, attn_bias)
        H = h_src.size(1)
        return masked_edge_attention(h_src.new_zeros(N, H, 1), h_src.new_zeros(h_src.size(0), H, 1), h_src,
                                     ei[0], ei[1], mask, bias=s, **common)
    k, v = parts.src if layer.score == "dot" else (parts.src[0], parts.src[0])
    att = None if layer.att is None else layer.att.view(layer.heads, -1)
    return masked_edge_attention(parts.dst, k, v, ei[0], ei[1], mask, edge_key=edge_feat,
                                 edge_value=edge_feat if layer.score == "dot" else None, bias=attn_bias,
                                 score=layer.score, att=att, negative_slope=layer.negative_slope, **common)

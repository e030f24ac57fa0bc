"""GATConv's score from per-node scalars (Veličković et al. 2018, GAT)."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.inits import glorot

from graphattn.functional import EDGE_IMPLS, edge_attention_prechecked
from graphattn.nn.attention.explain import masked_edge_attention
from graphattn.nn.attention.projections import Parts, glorot_linear
from graphattn.nn.attention.score import SCORES, EdgeScore, stacked
from graphattn.nn.attention.weights import aggregate, edge_softmax, gat_scores
from graphattn.ops.csr import EdgeCSR, plain_tensor

__all__ = ["GATScore"]


@SCORES.register("gat")
class GATScore(EdgeScore):
    r"""``s_ij = LeakyReLU(a_tᵀ W x_i + a_sᵀ W x_j + a_eᵀ W_e e_ij)``, values ``W x_j``.

    Parameters, all as ``GATConv`` (glorot initialisation, no projection bias): ``lin`` (one
    projection for both sides), or ``lin_src`` / ``lin_dst`` for ``(F_src, F_dst)`` or -1 widths,
    and ``att_src`` / ``att_dst`` / ``att_edge`` ``(1, H, C)``. The scores are per-node scalars
    ``(N, H)`` plus an ``(E, H)`` edge term: they reach the kernels as an ``(E, H)`` score bias of a
    zero query-key product, so no ``(E, H, C)`` tensor is formed.
    """

    kernel = None
    impls = tuple(i for i in EDGE_IMPLS if i != "dense")
    normalizations = ("softmax",)
    needs_targets = False

    def check(self, impl: str, normalization: str, share_weights: bool) -> None:
        if impl == "dense":
            raise ValueError("impl='dense' cannot take score='gat' (its scores are a per-edge bias): use "
                             "impl='auto', 'fused' or 'chunked'")
        super().check(impl, normalization, share_weights)

    def roles(self, layer):
        return (("lin",), ("lin",)) if layer.lin is not None else (("lin_dst",), ("lin_src",))

    def setup(self, layer, f_src: int, f_dst: int, bias: bool) -> None:
        # in the order PyG's GATConv builds them: a seeded run draws the same initial weights
        H, C = layer.heads, layer.out_channels
        if isinstance(layer.in_channels, int):  # one projection for both sides (also lazy), as GATConv
            layer.lin = glorot_linear(f_src, H * C, False)
        else:
            layer.lin_src, layer.lin_dst = glorot_linear(f_src, H * C, False), glorot_linear(f_dst, H * C, False)
        layer.att_src, layer.att_dst = (nn.Parameter(torch.empty(1, H, C)) for _ in range(2))
        if layer.edge_dim is not None:
            layer.lin_edge = glorot_linear(layer.edge_dim, H * C, False)
            layer.att_edge = nn.Parameter(torch.empty(1, H, C))

    def reset_parameters(self, layer) -> None:
        """PyG's order and initialisers: the projections, ``lin_edge``, ``res``, then the three
        ``att_*`` (glorot), then ``lin_skip``."""
        for lin in (layer.lin, layer.lin_src, layer.lin_dst, layer.lin_edge, layer.res):
            if lin is not None:
                lin.reset_parameters()
        for att in (layer.att_src, layer.att_dst, layer.att_edge):
            glorot(att)
        if layer.lin_skip is not None:
            layer.lin_skip.reset_parameters()

    def convert_state_dict(self, layer, state_dict: dict, prefix: str) -> None:
        """GATConv has one layout: nothing to convert."""

    def edge_features(self, layer, edge_attr: Tensor) -> Tensor:
        """The score term ``a_eᵀ W_e e`` ``(rows, H)``: ``a_e`` folded into ``W_e`` first, so no
        ``(E, H, C)`` tensor."""
        H, C = layer.heads, layer.out_channels
        w = torch.einsum("hcd,hc->hd", layer.lin_edge.weight.view(H, C, -1), layer.att_edge.view(H, C))  # (H, D)
        return F.linear(edge_attr, w)  # (rows, H)

    def scores(self, layer, parts: Parts, src: Tensor, dst: Tensor, a_edge: Optional[Tensor],
               attn_bias: Optional[Tensor]) -> Tensor:
        """GATConv's scores ``(E, H)`` from the per-node scalars ``a·W x`` ``(N, H)`` and the edge term."""
        (h_src,) = parts.src
        a_src = (h_src * layer.att_src).sum(-1)  # (N_src, H)
        a_dst = None if parts.dst is None else (parts.dst * layer.att_dst).sum(-1)  # (N, H)
        s = gat_scores(a_src, a_dst, a_edge, src, dst, layer.negative_slope)  # (E, H)
        return s if attn_bias is None else s + attn_bias

    def attend(self, layer, parts: Parts, csr: EdgeCSR, edge_index: Tensor, edge_feat: Optional[Tensor],
               attn_bias: Optional[Tensor], batch: Optional[Tensor], want_alpha: bool,
               num_src: Optional[int]) -> Tuple[Tensor, Optional[Tensor]]:
        """GATConv's attention: the ``(E, H)`` scores are the kernel's score bias (zero queries and
        keys) for the softmax and the ``(E, H, C)`` aggregation. With dropout in training, or when
        alpha is wanted, alpha is computed explicitly ``(E, H)`` (PyG's softmax and dropout)."""
        (h_src,) = parts.src
        ei = plain_tensor(edge_index)
        src, dst = ei[0].long(), ei[1].long()
        s = self.scores(layer, parts, src, dst, edge_feat, attn_bias)
        N = csr.num_nodes - (num_src or 0)
        v = h_src if num_src is None else stacked(h_src, N, 0)  # (N [+ N_src], H, C)
        p_drop = layer.dropout if layer.training else 0.0
        alpha = used = None
        if p_drop > 0.0 or want_alpha:
            alpha = edge_softmax(s, dst, N)  # (E, H)
            used = F.dropout(alpha, p_drop, True) if p_drop > 0.0 else alpha
        if p_drop > 0.0:
            out = aggregate(used, v, csr, src if num_src is None else src + N, dst, impl=layer.impl)
        else:
            zeros = v.new_zeros(1, 1, 1).expand(v.size(0), v.size(1), 1)  # (N, H, 1): no query-key term
            out = edge_attention_prechecked(zeros, zeros, v, csr=csr, bias=s, impl=layer.impl)
        if alpha is not None:  # returned: after dropout and differentiable with weights_grad
            alpha = (used if layer.returns_dropped_weights else alpha) if layer.weights_grad else alpha.detach()
        return (out[:N] if num_src is not None else out), alpha

    def explain(self, layer, parts: Parts, ei: Tensor, edge_feat: Optional[Tensor], attn_bias: Optional[Tensor],
                N: int, mask: Tensor) -> Tuple[Tensor, Tensor]:
        (h_src,) = parts.src
        s = self.scores(layer, parts, ei[0], ei[1], edge_feat, attn_bias)  # (E, H)
        return masked_edge_attention(s, h_src[ei[0]], ei[1], N, mask, dropout=layer.dropout, training=layer.training)

r"""Synthesizer: learned attention weights without queries or keys, for fixed-size inputs.

Tay et al. 2021 ("Synthesizer: Rethinking Self-Attention in Transformer Models") show that
attention weights need not come from token–token dot products: the *random synthesizer*
learns one logit per (query position, key position) pair and head directly::

    α_{h,i,·} = softmax over the keys j that i may see of  W_h[p_i, p_j]
    out_i = Σ_j α_{h,ij} (W_v x_j)_h ,         W_h ∈ R^{L_max × L_max}  (or A_h B_hᵀ, rank R)

where ``p_i`` is the position of node i in its graph (its index in node order, or ``pos``).
The weights depend on positions only, so inputs must have a fixed (at most ``max_nodes``)
size and a meaningful order: sequences, images, fixed grids. Without an ``edge_index`` every
node attends to every node of its graph (dense per graph); with one — any pattern of
:func:`~graphattn.patterns.sequence_graph` — the weights are normalized over the pattern's
edges only (:func:`~graphattn.ops.normalization.edge_normalize`, any normalization).

Cost: ``H·L_max²`` parameters (``2·H·L_max·R`` factorized); time ``O(B·H·L²·C)`` dense or
``O(E·H·C)`` on a pattern; memory ``O(B·H·L²)`` dense or ``O(E·H)``; no ``QKᵀ`` product.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphattn.ops.chunked import chunk_edges
from graphattn.ops.csr import to_csr
from graphattn.ops.normalization import NORMALIZATIONS, EdgeAggregate, edge_normalize
from graphattn.ops.padding import graph_layout
from graphattn.utils.memo import recall, remember
from graphattn.utils.validation import check_edge_index, check_features

__all__ = ["SynthesizerAttention"]


class SynthesizerAttention(nn.Module):
    r"""Random (optionally factorized) Synthesizer attention (module docstring).

    Args:
        channels (int): feature size in and out (divisible by ``heads``).
        heads (int, default 1): H.
        max_nodes (int, default 512): L_max, largest graph / sequence length accepted.
        rank (int, optional): R; logits ``A_h B_hᵀ`` with ``A_h, B_h ∈ R^{L_max×R}``
            (factorized random synthesizer) instead of a full ``L_max × L_max`` table.
        normalization (str, default "softmax"): over the allowed keys, see
            :func:`~graphattn.ops.normalization.edge_normalize` (the dense path is softmax-only).
        dropout (float, default 0.0): dropout on the attention weights.
        bias (bool, default True): biases of the projections.

    Shapes: x ``(N, channels)``, batch ``(N,)`` (None = one graph), edge_index ``(2, E)``
    (optional), pos ``(N,)`` (optional positions, default: rank in node order within the
    graph) -> ``(N, channels)``.
    """

    def __init__(self, channels: int, heads: int = 1, max_nodes: int = 512, rank: Optional[int] = None,
                 normalization: str = "softmax", dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if not isinstance(heads, int) or heads < 1 or channels % heads:
            raise ValueError(f"channels ({channels}) must be divisible by heads ({heads})")
        if not isinstance(max_nodes, int) or max_nodes < 1:
            raise ValueError(f"max_nodes must be a positive int, got {max_nodes!r}")
        if rank is not None and (not isinstance(rank, int) or rank < 1):
            raise ValueError(f"rank must be a positive int or None, got {rank!r}")
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
        self.channels, self.heads, self.max_nodes, self.rank = channels, heads, max_nodes, rank
        self.normalization, self.dropout = normalization, dropout
        if rank is None:
            self.logits = nn.Parameter(torch.empty(heads, max_nodes, max_nodes))  # (H, L, L)
            self.factor_a = self.factor_b = None
        else:
            self.logits = None
            self.factor_a = nn.Parameter(torch.empty(heads, max_nodes, rank))  # (H, L, R)
            self.factor_b = nn.Parameter(torch.empty(heads, max_nodes, rank))
        self.lin_value = nn.Linear(channels, channels, bias=bias)
        self.lin_out = nn.Linear(channels, channels, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_value.reset_parameters()
        self.lin_out.reset_parameters()
        if self.logits is not None:
            nn.init.normal_(self.logits, std=0.02)
        else:
            nn.init.normal_(self.factor_a, std=self.rank ** -0.25)
            nn.init.normal_(self.factor_b, std=self.rank ** -0.25)

    def weight_logits(self, length: Optional[int] = None) -> Tensor:
        """The ``(H, L, L)`` logit table for the first ``length`` positions."""
        L = self.max_nodes if length is None else length
        if self.logits is not None:
            return self.logits[:, :L, :L]
        return self.factor_a[:, :L] @ self.factor_b[:, :L].transpose(1, 2)

    def _edge_logits(self, pi: Tensor, pj: Tensor) -> Tensor:
        """Logits of edges ``(E, H)`` for query positions ``pi`` and key positions ``pj``."""
        if self.logits is not None:
            return self.logits.permute(1, 2, 0)[pi, pj]  # (E, H)
        return (self.factor_a[:, pi] * self.factor_b[:, pj]).sum(-1).t()  # (E, H)

    def forward(self, x: Tensor, batch: Optional[Tensor] = None, num_graphs: Optional[int] = None, *,
                edge_index: Optional[Tensor] = None, pos: Optional[Tensor] = None) -> Tensor:
        check_features(x, self.channels, "x")
        N, H = x.size(0), self.heads
        layout = graph_layout(batch, N, num_graphs, device=x.device)
        if pos is None:
            pos = layout.pos
        elif not isinstance(pos, Tensor) or pos.dtype.is_floating_point or pos.dtype.is_complex \
                or pos.dtype == torch.bool:
            raise TypeError(f"pos must be an integer tensor of shape ({N},), got "
                            f"{pos.dtype if isinstance(pos, Tensor) else type(pos).__name__}")
        elif pos.shape != (N,):
            raise ValueError(f"pos must have shape ({N},), got {tuple(pos.shape)}")
        if pos is layout.pos or not N:  # positions in the graphs: in [0, L), known without a read
            lo, hi = 0, layout.L - 1
        else:  # the caller's positions: read once per tensor (one sync), remembered for it
            lo, hi = (recall("value range", pos)
                      or remember("value range", torch.stack(torch.aminmax(pos)).tolist(), pos))
        if lo < 0:
            raise ValueError(f"pos must be >= 0 (positions in the graph), got {lo}")
        top = hi + 1
        if top > self.max_nodes:
            raise ValueError(f"position {top - 1} is out of range: the layer was built with "
                             f"max_nodes={self.max_nodes} (fixed-size inputs only)")
        v = self.lin_value(x).view(N, H, self.channels // H)  # (N, H, C)
        p = self.dropout if self.training else 0.0
        if edge_index is None:
            if pos is not layout.pos:
                raise ValueError("pos is only supported together with edge_index")
            valid = layout.mask | (layout.sizes == 0)[:, None]  # empty graphs: no NaN rows
            mask = valid[:, None, None, :]  # (B, 1, 1, L) valid keys
            logits = self.weight_logits(layout.L)[None].masked_fill(~mask, float("-inf"))  # (B, H, L, L)
            if self.normalization != "softmax":
                raise ValueError("the dense path (no edge_index) supports normalization='softmax' "
                                 "only; pass the pattern as edge_index")
            alpha = F.dropout(torch.softmax(logits, dim=-1), p, self.training)
            out = layout.unpad((alpha @ layout.pad(v).transpose(1, 2)).transpose(1, 2))  # (N, H, C)
        else:
            check_edge_index(edge_index, N)
            csr = to_csr(edge_index, N)
            scores = self._edge_logits(pos[csr.row], pos[csr.col])  # (E, H), CSR order
            alpha = F.dropout(edge_normalize(scores, csr.row, N, self.normalization), p, self.training)
            out = EdgeAggregate.apply(alpha, v.contiguous(), None, csr, chunk_edges(H, v.size(-1), v.element_size()))
        return self.lin_out(out.reshape(N, self.channels))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
                f"max_nodes={self.max_nodes}" + (f", rank={self.rank})" if self.rank else ")"))

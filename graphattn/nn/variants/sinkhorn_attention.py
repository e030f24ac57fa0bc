r"""Sparse Sinkhorn attention (Tay et al. 2020, "Sparse Sinkhorn Attention"): a learned pattern.

Per graph b of a batch (graphs never mix), with the graph's ``n_b`` nodes in node order cut into
``m = ⌈n_b / s⌉`` blocks of ``s`` nodes (block size s; the last one padded):

1. **Sort network.** Each block is summarised by the mean of its nodes' features, ``x̄_a``; a
   bilinear score between blocks, per head h, ``R_ab = (W_q x̄_a)_h · (W_k x̄_b)_h / √(C/H)``.
2. **Sinkhorn.** ``log P = R / τ``, then ``sinkhorn_iters`` rounds of row and column
   normalisation in log space: P tends to a doubly stochastic matrix, a soft permutation of the
   blocks (exactly stochastic in its columns after the last round; its rows converge).
3. **Attention.** The keys and values of block ``a``'s sorted partner are, slot by slot,
   ``K̃_a = Σ_b P_ab K_b``, ``Ṽ_a = Σ_b P_ab V_b`` (the values from the value projection, never from
   the keys). Each query of block ``a`` attends, in one softmax, to the ``s`` keys of its own block and
   the ``s`` keys of the block sorted next to it. Where the last, partial block is mixed in, a slot is
   the mean over the real nodes only (divided by ``m̃ = Σ_b P_ab m_b``, m = 1 at real nodes) and counts
   with their weight (``log m̃`` added to its score); a slot with no real node is masked.

Cost ``O(n·s·H·C)`` for the attention plus ``O((n/s)²·H·C)`` for the sort network per graph. With
one block (``s ≥ n_b``) P = [1] and the layer is full attention. Node order matters (it defines the
blocks); the sort network lets a block reach any other block by content, which fixed windows
cannot. No Gumbel noise is added (the paper's optional Gumbel–Sinkhorn sampling): the layer is
deterministic in eval and training alike.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphattn.ops.padding import graph_layout
from graphattn.utils.validation import check_features

__all__ = ["SinkhornAttention", "log_sinkhorn"]


def log_sinkhorn(log_p: Tensor, iters: int) -> Tensor:
    """``iters`` rounds of row then column normalisation of ``exp(log_p)`` in log space (last two dims).

    Entries at ``-inf`` stay zero; every row and column needs one finite entry."""
    for _ in range(iters):
        log_p = log_p - torch.logsumexp(log_p, dim=-1, keepdim=True)
        log_p = log_p - torch.logsumexp(log_p, dim=-2, keepdim=True)
    return log_p


class SinkhornAttention(nn.Module):
    r"""Block attention to the own block and a block chosen by a learned soft sort (module docstring).

    Args:
        channels (int): feature size in and out (divisible by ``heads``).
        heads (int, default 1): H.
        block_size (int, default 32): s, nodes per block.
        sinkhorn_iters (int, default 5): rounds of row and column normalisation (at least 1).
        temperature (float, default 0.75): τ > 0; smaller makes the permutation harder.
        dropout (float, default 0.0): dropout on the attention weights.
        bias (bool, default True): biases of the projections.

    Shapes: x ``(N, channels)``, batch ``(N,)`` (None = one graph) -> ``(N, channels)``.
    """

    def __init__(self, channels: int, heads: int = 1, block_size: int = 32, sinkhorn_iters: int = 5,
                 temperature: float = 0.75, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if not isinstance(heads, int) or heads < 1 or channels % heads:
            raise ValueError(f"channels ({channels}) must be divisible by heads ({heads})")
        for name, value in (("block_size", block_size), ("sinkhorn_iters", sinkhorn_iters)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0 \
                or not math.isfinite(temperature):
            raise ValueError(f"temperature must be a positive number, got {temperature!r}")
        self.channels, self.heads, self.dropout = channels, heads, dropout
        self.block_size, self.sinkhorn_iters, self.temperature = block_size, sinkhorn_iters, float(temperature)
        self.lin_qkv = nn.Linear(channels, 3 * channels, bias=bias)
        self.lin_sort = nn.Linear(channels, 2 * channels, bias=bias)  # block query / key of the sort network
        self.lin_out = nn.Linear(channels, channels, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in (self.lin_qkv, self.lin_sort, self.lin_out):
            m.reset_parameters()

    def _blocks(self, t: Tensor, layout, M: int) -> Tensor:
        """``(N, *F)`` -> ``(B, M, s, *F)``, empty slots zero."""
        s, L = self.block_size, layout.L
        grid = layout.pad(t)
        grid = torch.cat([grid, grid.new_zeros(grid.size(0), M * s - L, *grid.shape[2:])], 1)
        return grid.view(grid.size(0), M, s, *grid.shape[2:])

    def soft_permutation(self, x: Tensor, batch: Optional[Tensor] = None,
                         num_graphs: Optional[int] = None) -> Tensor:
        """The sort network's soft permutation ``P`` of every graph's blocks, ``(B, H, M, M)``.

        ``M = ⌈L / s⌉`` for the largest graph (L nodes); the blocks a graph does not fill map to
        themselves (``P`` is the identity there), so each graph's own ``⌈n_b / s⌉`` blocks are
        permuted among themselves only."""
        layout = graph_layout(batch, x.size(0), num_graphs, device=x.device)
        M = max(math.ceil(layout.L / self.block_size), 1)
        return self._permutation(x, layout, M)[0]

    def _permutation(self, x: Tensor, layout, M: int):
        H, C = self.heads, self.channels
        ones = x.new_ones(x.size(0), 1)
        count = self._blocks(ones, layout, M).sum(2)  # (B, M, 1) nodes per block
        mean = self._blocks(x, layout, M).sum(2) / count.clamp(min=1)  # (B, M, C)
        sq, sk = self.lin_sort(mean).view(mean.size(0), M, 2, H, C // H).unbind(2)  # (B, M, H, C/H)
        R = torch.einsum("bahc,bghc->bhag", sq, sk) / math.sqrt(C // H)  # (B, H, M, M)
        filled = count[..., 0] > 0  # (B, M)
        both = filled[:, None, :, None] & filled[:, None, None, :]
        eye = torch.eye(M, dtype=torch.bool, device=x.device)
        lonely = ~filled[:, None, :, None] & eye  # an empty block maps to itself
        log_p = torch.where(both, R / self.temperature, R.new_full((), -math.inf))
        log_p = torch.where(lonely, R.new_zeros(()), log_p)
        return log_sinkhorn(log_p, self.sinkhorn_iters).exp(), filled

    def forward(self, x: Tensor, batch: Optional[Tensor] = None, num_graphs: Optional[int] = None) -> Tensor:
        check_features(x, self.channels, "x")
        N, H, C, s = x.size(0), self.heads, self.channels, self.block_size
        layout = graph_layout(batch, N, num_graphs, device=x.device)
        M = max(math.ceil(layout.L / s), 1)
        P, filled = self._permutation(x, layout, M)  # (B, H, M, M), (B, M)
        q, k, v = self.lin_qkv(x).view(N, 3, H, C // H).unbind(1)  # 3 x (N, H, C/H)
        Q, K, V = (self._blocks(t, layout, M).permute(0, 3, 1, 2, 4) for t in (q, k, v))  # (B, H, M, s, C/H)
        occupied = self._blocks(x.new_ones(N), layout, M)  # (B, M, s): 1 at real nodes
        share = torch.einsum("bhag,bgt->bhat", P, occupied)  # (B, H, M, s) weight of real nodes in a sorted slot
        safe = torch.where(share > 0, share, torch.ones_like(share))  # no 0 in a division or log: finite gradients
        # the sorted slot: the P-weighted mean of the real nodes at that slot (padding is zero in K and V)
        Ks = torch.einsum("bhag,bhgtc->bhatc", P, K) / safe[..., None]
        Vs = torch.einsum("bhag,bhgtc->bhatc", P, V) / safe[..., None]
        # a query block that holds no node sees its own slots as keys (its rows are dropped; no NaN)
        own = (occupied > 0) | ~filled[..., None]  # (B, M, s)
        own_bias = torch.where(own, 0.0, -math.inf).to(x.dtype)[:, None].expand(-1, H, -1, -1)
        sorted_bias = torch.where(share > 0, safe.log(), share.new_full((), -math.inf))
        bias = torch.cat([own_bias, sorted_bias], -1)  # (B, H, M, 2s)
        B = Q.size(0)
        flat = lambda t: t.reshape(B, H * M, *t.shape[3:])  # noqa: E731 (B, H*M, s or 2s, C/H)
        p = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(flat(Q), flat(torch.cat([K, Ks], 3)), flat(torch.cat([V, Vs], 3)),
                                             attn_mask=bias.reshape(B, H * M, 1, 2 * s), dropout_p=p)
        out = out.view(B, H, M * s, C // H)[:, :, :layout.L].transpose(1, 2)  # (B, L, H, C/H)
        return self.lin_out(layout.unpad(out).reshape(N, C))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, block_size={self.block_size}, "
                f"sinkhorn_iters={self.sinkhorn_iters}, temperature={self.temperature})")

"""Dense fast path: batches of fully-connected graphs go through ``scaled_dot_product_attention``.

When every graph of a batch is complete (each node attends to every node of its graph,
itself included, exactly once), edge attention equals ordinary padded self-attention, and
torch's fused SDPA kernels beat any edge-wise kernel. :func:`complete_graph_sizes` detects
that case (cached per graph/batch tensors, failing fast on the edge count) and
:func:`sdpa_attention` runs it.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .csr import EdgeCSR

__all__ = ["complete_graph_sizes", "sdpa_attention"]


def complete_graph_sizes(csr: EdgeCSR, batch: Optional[Tensor] = None) -> Optional[Tensor]:
    """Graph sizes ``(B,)`` if every graph in the batch is complete (with self-loops), else None.

    Requires ``batch`` sorted (PyG's batching guarantees it); ``None`` means one graph.
    The answer is cached on ``csr`` for this ``batch`` tensor.
    """
    N, E = csr.num_nodes, csr.num_edges
    if batch is None:
        if E != N * N or N == 0:
            return None
        key = None
    else:
        key = (batch.data_ptr(), batch._version, batch.numel())
    cache = csr.__dict__.setdefault("_complete", {})
    if key in cache:
        return cache[key]
    sizes = _check_complete(csr, batch)
    if len(cache) > 8:
        cache.clear()
    cache[key] = sizes
    return sizes


def _check_complete(csr: EdgeCSR, batch: Optional[Tensor]) -> Optional[Tensor]:
    N, E = csr.num_nodes, csr.num_edges
    if batch is None:
        sizes = torch.tensor([N], device=csr.row.device)
        batch = torch.zeros(N, dtype=torch.long, device=csr.row.device)
    else:
        if batch.numel() != N or N == 0:
            return None
        if batch.numel() > 1 and not bool((batch[1:] >= batch[:-1]).all()):
            return None
        sizes = torch.bincount(batch)
        sizes = sizes[sizes > 0]
    if int((sizes * sizes).sum()) != E:
        return None
    gsize = torch.bincount(batch)[batch]  # (N,) size of each node's graph
    if not bool((csr.degree() == gsize).all()):
        return None
    if not bool((batch[csr.row] == batch[csr.col]).all()):
        return None
    # No duplicates => every pair exactly once. Linear pass: each edge's slot in its graph's
    # n_b x n_b block (a sort-based unique would cost O(E log E)).
    ptr = torch.zeros(sizes.numel() + 1, dtype=torch.long, device=batch.device)
    torch.cumsum(sizes, 0, out=ptr[1:])
    g = torch.searchsorted(ptr[1:], csr.row, right=True)  # graph of each edge (batch is sorted)
    block = torch.zeros_like(ptr)
    torch.cumsum(sizes * sizes, 0, out=block[1:])
    n_g, base = sizes[g], ptr[g]
    slot = block[g] + (csr.row - base) * n_g + (csr.col - base)
    seen = torch.zeros(E, dtype=torch.bool, device=batch.device)
    seen[slot] = True
    if not bool(seen.all()):
        return None
    return sizes


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, sizes: Tensor, dropout: float = 0.0) -> Tensor:
    """Full self-attention within each graph of a batch of consecutive node blocks.

    Args:
        q, k, v: ``(N, H, C)``, nodes of graph b are a consecutive block of ``sizes[b]`` rows.
        sizes: ``(B,)`` graph sizes summing to N.
    Returns:
        ``(N, H, C)``, equal to edge attention on the complete graphs.
    """
    N, H, C = q.shape
    B, L = sizes.numel(), int(sizes.max())
    if bool((sizes == L).all()):  # equal sizes: a free view, no padding
        to_b = lambda t: t.reshape(B, L, H, t.size(-1)).transpose(1, 2)  # noqa: E731 (B, H, L, C)
        out = F.scaled_dot_product_attention(to_b(q), to_b(k), to_b(v), dropout_p=dropout)
        return out.transpose(1, 2).reshape(N, H, v.size(-1))
    ptr = torch.zeros(B + 1, dtype=torch.long, device=q.device)
    torch.cumsum(sizes, 0, out=ptr[1:])
    graph = torch.repeat_interleave(torch.arange(B, device=q.device), sizes)  # (N,)
    pos = torch.arange(N, device=q.device) - ptr[graph]  # position inside its graph
    def pad(t):  # (N, H, C') -> (B, H, L, C')
        out = t.new_zeros(B, L, H, t.size(-1))
        out[graph, pos] = t
        return out.transpose(1, 2)
    key_ok = torch.arange(L, device=q.device)[None, :] < sizes[:, None]  # (B, L)
    out = F.scaled_dot_product_attention(pad(q), pad(k), pad(v), attn_mask=key_ok[:, None, None, :],
                                         dropout_p=dropout)
    return out.transpose(1, 2)[graph, pos]  # (N, H, C)

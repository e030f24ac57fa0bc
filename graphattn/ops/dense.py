"""Dense fast path: batches of fully-connected graphs go through ``scaled_dot_product_attention``.

When every graph of a batch is complete (each node attends to every node of its graph,
itself included, exactly once), edge attention equals ordinary padded self-attention, and
torch's fused SDPA kernels beat edge-wise kernels unless padding the graphs to one length
wastes too much work (:func:`prefer_dense` holds the measured rule). :func:`complete_graph_sizes`
detects that case (cached per graph/batch tensors, failing fast on the edge count) and
:func:`sdpa_attention` runs it. Without a ``batch`` the graphs are found from the edges alone:
an edge set that is exactly a union of complete blocks over consecutive node ranges (the CSR
row of every node holds exactly its block's range) is such a batch (:func:`complete_blocks`).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from graphattn.ops.csr import EdgeCSR
from graphattn.ops.padding import check_batch

__all__ = ["complete_blocks", "complete_graph_sizes", "dense_plan", "DensePlan", "sdpa_attention", "prefer_dense",
           "padded_length", "PAD_MULTIPLE"]

#: Graphs of unequal sizes are padded to the largest size rounded up to a multiple of this.
#: Measured with ``benchmarks/crossover.py`` (CPU, torch 2.13 flash attention with a key
#: mask): padded lengths 15 -> 16, 31 -> 32, 63 -> 64 made fwd+bwd 1.1-2.9x faster, never slower.
PAD_MULTIPLE = 8
#: :func:`prefer_dense`: one fused-kernel edge costs as much as ``L / DENSE_WASTE_SLOPE``
#: padded SDPA scores, at most ``MAX_DENSE_WASTE`` (measured on CPU, see there).
DENSE_WASTE_SLOPE, MAX_DENSE_WASTE = 12.0, 4.0


def padded_length(sizes: Tensor) -> int:
    """Length L the graphs are padded to: the largest size (rounded up to PAD_MULTIPLE
    unless all sizes are equal, which needs no padding)."""
    L = int(sizes.max())
    return L if bool((sizes == L).all()) else -(-L // PAD_MULTIPLE) * PAD_MULTIPLE


def prefer_dense(sizes: Tensor) -> bool:
    """Whether padded SDPA (:func:`sdpa_attention`) should beat the fused CPU edge kernel on
    a batch of complete graphs of these ``(B,)`` sizes.

    Padding to length L computes ``B·L²`` scores for the ``E = Σ n²`` edges; the padding
    waste is ``B·L² / E``. A padded score is cheaper than a kernel edge, the more so the
    longer the rows (SDPA's per-row overhead is spread over L keys). Measured with
    ``benchmarks/crossover.py`` (CPU, 1 thread, 4 heads x 32 channels, fwd+bwd, 128 graphs of
    mean size 8-128, size spreads from none to Tox21-like, 1x-12.7x waste), one edge of the
    fused kernel costs as much as ~0.9 padded scores at L = 8, ~2 at L = 16-24, ~3 at
    L = 32-48 and 3.5-6 at L >= 64. The rule follows that curve from below: SDPA iff
    ``waste <= min(L / DENSE_WASTE_SLOPE, MAX_DENSE_WASTE)``, i.e. equal sizes from 12
    nodes on, mildly spread sizes (~2.5x waste) from ~16-32 nodes on, Tox21-like spreads
    (~10-13x waste) never. It picked the faster path in every measured case that was not a
    tie (3 runs of 20 cases). It only decides against the fused CPU kernel (measured on the
    CPU only): the chunked path (no C++ kernel) never beat SDPA (a tie at 12.7x waste and 8
    nodes); on CUDA complete graphs take SDPA (the Triton crossover is not measured).
    """
    E = int((sizes * sizes).sum())
    L = padded_length(sizes)
    waste = sizes.numel() * L * L / max(E, 1)
    return waste <= min(L / DENSE_WASTE_SLOPE, MAX_DENSE_WASTE)


class DensePlan(NamedTuple):
    """How a batch of complete graphs runs on padded SDPA, read from the device once per graph:
    ``sizes`` ``(B,)`` graph sizes, ``length`` the padded length L (:func:`padded_length`),
    ``prefer`` whether SDPA should beat the fused CPU kernel (:func:`prefer_dense`)."""
    sizes: Tensor
    length: int
    prefer: bool


def dense_plan(csr: EdgeCSR, batch: Optional[Tensor] = None) -> Optional[DensePlan]:
    """:class:`DensePlan` if every graph in the batch is complete (with self-loops), else None.

    Requires ``batch`` sorted (PyG's batching guarantees it); ``None`` finds the graphs from the
    edges (:func:`complete_blocks`: complete blocks over consecutive node ranges, one graph if
    ``E = N²``). The answer is cached on ``csr`` for this ``batch`` tensor (or for none), so only
    the first call for a graph reads the device (the completeness test, L and the SDPA-or-kernel
    rule).
    """
    N, E = csr.num_nodes, csr.num_edges
    if batch is None:
        if N == 0 or E < N or E > N * N:  # every node needs its self-loop; no reads
            return None
        key = None
    else:
        check_batch(batch, N, check_range=False)  # type and shape (no sync); ids on a cache miss
        if batch.is_inference():  # no version counter: not cached
            return _plan(_check_complete(csr, batch))
        key = (batch.data_ptr(), batch._version, batch.numel())
    cache = csr.__dict__.setdefault("_complete", {})
    if key in cache:
        return cache[key]
    plan = _plan(complete_blocks(csr) if batch is None else _check_complete(csr, batch))
    if len(cache) > 8:
        cache.clear()
    cache[key] = plan
    return plan


def _plan(sizes: Optional[Tensor]) -> Optional[DensePlan]:
    return None if sizes is None else DensePlan(sizes, padded_length(sizes), prefer_dense(sizes))


def complete_graph_sizes(csr: EdgeCSR, batch: Optional[Tensor] = None) -> Optional[Tensor]:
    """Graph sizes ``(B,)`` if every graph in the batch is complete (with self-loops), else None
    (``sizes`` of :func:`dense_plan`, cached on ``csr`` for this ``batch`` tensor; without one,
    the complete blocks of :func:`complete_blocks`)."""
    plan = dense_plan(csr, batch)
    return None if plan is None else plan.sizes


def complete_blocks(csr: EdgeCSR) -> Optional[Tensor]:
    """Block sizes ``(B,)`` if the edges are exactly a union of complete graphs (self-loops
    included, every pair once) over consecutive node ranges ``[0, n_0), [n_0, n_0 + n_1), ...``,
    else None: the ``batch`` of such a batch of complete graphs, found from the edges alone.

    Linear in E, no sort: with ``lo_i`` / ``hi_i`` the smallest / largest source into node i,
    row i must hold ``hi_i - lo_i + 1 = deg_i`` distinct sources (each edge's slot
    ``col - lo_i`` in its row is hit once), contain i, and the ranges must tile ``[0, N)``:
    a row shares its predecessor's range or starts a new one at itself. Reads the device
    (two or three syncs): :func:`dense_plan` caches the answer per graph.
    """
    N, E = csr.num_nodes, csr.num_edges
    if N == 0 or E < N or E > N * N:
        return None
    row, col, deg = csr.row, csr.col, csr.degree()
    node = torch.arange(N, device=col.device)
    lo = torch.full((N,), N, dtype=col.dtype, device=col.device).scatter_reduce_(0, row, col, "amin")
    hi = torch.full((N,), -1, dtype=col.dtype, device=col.device).scatter_reduce_(0, row, col, "amax")
    same = (lo[1:] == lo[:-1]) & (hi[1:] == hi[:-1])  # (N-1,) row i+1 in row i's block
    starts = (lo[1:] == node[1:]) & (hi[:-1] == node[:-1])  # (N-1,) a new block begins at i+1
    ok = (hi - lo + 1 == deg) & (lo <= node) & (node <= hi)
    if not bool(ok.all() & (same | starts).all() & (lo[0] == 0) & (hi[-1] == N - 1)):
        return None
    # exactly deg_i distinct sources in [lo_i, hi_i]: every slot of the row is hit (no duplicates)
    seen = torch.zeros(E, dtype=torch.bool, device=col.device)
    seen[csr.rowptr[row] + (col - lo[row])] = True
    if not bool(seen.all()):
        return None
    return deg[lo == node]  # (B,) a block's size is the degree of its first node


def _check_complete(csr: EdgeCSR, batch: Tensor) -> Optional[Tensor]:
    N, E = csr.num_nodes, csr.num_edges
    if N == 0:
        return None
    check_batch(batch, N)  # ids >= 0 (one sync; once per batch tensor, the answer is cached)
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


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, sizes: Tensor, dropout: float = 0.0, *,
                   length: Optional[int] = None) -> Tensor:
    """Full self-attention within each graph of a batch of consecutive node blocks.

    Args:
        q, k, v: ``(N, H, C)``, nodes of graph b are a consecutive block of ``sizes[b]`` rows.
        sizes: ``(B,)`` graph sizes summing to N. Unequal sizes are padded to
            :func:`padded_length` with the padded keys masked.
        length: that padded length, if known (:attr:`DensePlan.length`): saves reading ``sizes``.
    Returns:
        ``(N, H, C)``, equal to edge attention on the complete graphs.
    """
    N, H, C = q.shape
    B, L = sizes.numel(), (padded_length(sizes) if length is None else length)
    if L * B == N:  # equal sizes: a free view, no padding
        to_b = lambda t: t.reshape(B, L, H, t.size(-1)).transpose(1, 2)  # noqa: E731 (B, H, L, C)
        out = F.scaled_dot_product_attention(to_b(q), to_b(k), to_b(v), dropout_p=dropout)
        return out.transpose(1, 2).reshape(N, H, v.size(-1))
    ptr = torch.zeros(B + 1, dtype=torch.long, device=q.device)
    torch.cumsum(sizes, 0, out=ptr[1:])
    graph = torch.repeat_interleave(torch.arange(B, device=q.device), sizes, output_size=N)  # (N,)
    slot = torch.arange(N, device=q.device) + graph * L - ptr[graph]  # (N,) row in the (B*L) padded rows

    def pad(t):  # (N, H, C') -> (B, H, L, C'); index_copy: cheap forward and backward
        out = t.new_zeros(B * L, H, t.size(-1)).index_copy_(0, slot, t)
        return out.view(B, L, H, t.size(-1)).transpose(1, 2)

    key_ok = torch.arange(L, device=q.device)[None, :] < sizes[:, None]  # (B, L)
    out = F.scaled_dot_product_attention(pad(q), pad(k), pad(v), attn_mask=key_ok[:, None, None, :],
                                         dropout_p=dropout)  # (B, H, L, C')
    return out.transpose(1, 2).reshape(B * L, H, v.size(-1)).index_select(0, slot)  # (N, H, C')

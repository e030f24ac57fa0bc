r"""Clustered attention: queries attend only to the keys of their own cluster (a content pattern).

Reformer (Kitaev et al. 2020) hashes queries and keys with angular LSH; the Routing
Transformer (Roy et al. 2021) assigns them to k-means centroids; either way a query attends
only to the keys that landed in its group. Here that group structure is just another
sparse pattern: :func:`cluster_graph` builds the ``edge_index`` of

    j -> i   iff   graph(j) = graph(i)  and  cluster(k_j) = cluster(q_i)

(plus the self-loop i -> i when a node's query and key fall in different clusters, so that
no node is left without keys), and :class:`ClusteredAttention` runs the ordinary
:func:`~graphattn.functional.edge_attention` on it. Queries and keys share the hash
(``"lsh"``: argmax of ``[x̂R, -x̂R]`` for ``x̂ = x/|x|`` and a fixed Gaussian ``R``) or the
centroids (``"kmeans"``: spherical k-means per graph on the normalized queries and keys,
``iters`` Lloyd steps from keys spread over the order of their projections on the graph's mean
key direction — independent of node order). Clusters come from all heads'
channels together (one edge set for all heads) and carry no gradient.

Shared queries and keys (Reformer's shared-QK attention, the default of
:class:`ClusteredAttention`): ``k_j = q_j / |q_j|``. With separate projections ``W_q x`` and
``W_k x`` of node states that share a large common component (usual after embeddings and
LayerNorm), the queries point around one direction and the keys around another, and k-means
(or LSH) puts them in *disjoint* clusters: on the copy task of ``benchmarks/variants.py`` at
initialisation (mean cosine 0.50 between queries, 0.58 between keys, -0.06 between a query
and a key), 0 of 4096 queries shared a cluster with any key but their own, so the layer
attended only to itself and never learned. Sharing them puts every node's key in its own
query's cluster.

Cost: building the pattern is ``O(N·K·D)`` (LSH) or ``O(iters·B·L·K·D)`` (k-means, run on the
padded ``(B, L)`` layout of the batch, ``L`` its largest graph: ``B·L = N`` for equal sizes,
more for graphs of very different sizes) plus a sort
of the ``E`` edges; attention is ``O(E·H·C)`` with ``E = Σ_groups |queries|·|keys|``, about
``N²/K`` per graph for balanced clusters (``N²`` in the worst case: one cluster gets all;
``block_size`` caps it at ``N·block_size`` by cutting big clusters into chunks, as Reformer does).
With ``num_clusters=1`` the pattern is the complete graph of every graph: full attention.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphattn.functional import edge_attention
from graphattn.ops.csr import to_csr
from graphattn.ops.padding import GraphLayout, check_batch, graph_layout
from graphattn.utils.validation import check_features, check_int, check_tensor_shape

__all__ = ["CLUSTER_METHODS", "cluster_codes", "cluster_graph", "ClusteredAttention"]

CLUSTER_METHODS = ("lsh", "kmeans")


def _lsh(x: Tensor, rotations: Tensor, k: int) -> Tensor:
    h = F.normalize(x, dim=-1) @ rotations  # (N, ceil(K/2))
    return torch.cat([h, -h], dim=-1)[:, :k].argmax(-1)


def _kmeans(q: Tensor, k: Tensor, layout: GraphLayout, num_clusters: int, iters: int):
    B, K = layout.B, num_clusters
    Qp, Kp = layout.pad(F.normalize(q, dim=-1)), layout.pad(F.normalize(k, dim=-1))  # (B, L, D)
    # initial centroids: keys spread over the order of their projections on the graph's mean key
    # direction, not over node order, so that relabelling the nodes permutes the clusters only
    mean = (Kp * layout.mask[..., None]).sum(1)  # (B, D)
    proj = torch.einsum("bld,bd->bl", Kp, mean).masked_fill(~layout.mask, float("inf"))  # padding last
    order = proj.argsort(dim=1, stable=True)  # (B, L)
    first = (torch.arange(K, device=q.device)[None, :] * layout.sizes[:, None]) // K  # (B, K) ranks
    first = order.gather(1, first.clamp(max=max(layout.L - 1, 0))) if layout.L else first
    cent = Kp[torch.arange(B, device=q.device)[:, None], first] if layout.L else q.new_zeros(B, K, q.size(1))
    pts = torch.cat([Qp, Kp], dim=1)  # (B, 2L, D)
    valid = torch.cat([layout.mask, layout.mask], dim=1)  # (B, 2L)
    for _ in range(iters):
        assign = torch.einsum("bld,bkd->blk", pts, cent).argmax(-1)  # (B, 2L)
        onehot = F.one_hot(assign, K).to(pts.dtype) * valid[..., None]  # (B, 2L, K)
        new = torch.einsum("blk,bld->bkd", onehot, pts)  # (B, K, D) sums
        norm = new.norm(dim=-1, keepdim=True)
        cent = torch.where(norm > 0, new / norm.clamp_min(1e-12), cent)  # empty cluster: keep
    code_q = layout.unpad(torch.einsum("bld,bkd->blk", Qp, cent).argmax(-1))
    code_k = layout.unpad(torch.einsum("bld,bkd->blk", Kp, cent).argmax(-1))
    return code_q, code_k


@torch.no_grad()
def cluster_codes(queries: Tensor, keys: Optional[Tensor] = None, batch: Optional[Tensor] = None,
                  num_clusters: int = 4, method: str = "kmeans", iters: int = 3,
                  rotations: Optional[Tensor] = None, num_graphs: Optional[int] = None,
                  generator: Optional[torch.Generator] = None):
    """Cluster id in ``[0, num_clusters)`` of every query and key (module docstring).

    Args:
        queries: ``(N, D)``; keys: ``(N, D)`` (default: the queries).
        batch: ``(N,)`` graph ids or None; k-means runs per graph, LSH is global.
        method: ``"lsh"`` or ``"kmeans"``.
        rotations: ``(D, ceil(K/2))`` LSH projection (default: drawn from ``generator``).

    Returns: ``(code_q, code_k)``, each ``(N,)`` int64.
    """
    if method not in CLUSTER_METHODS:
        raise ValueError(f"method must be one of {CLUSTER_METHODS}, got {method!r}")
    if not isinstance(num_clusters, int) or num_clusters < 1:
        raise ValueError(f"num_clusters must be a positive int, got {num_clusters!r}")
    check_tensor_shape(queries, (None, None), "queries")
    keys = queries if keys is None else keys
    check_tensor_shape(keys, tuple(queries.shape), "keys")
    N, D = queries.shape
    check_int("iters", iters, 0)
    if batch is not None:  # every method (k-means checks it again in its layout; cheap)
        check_batch(batch, N, num_graphs)
    if num_clusters == 1:
        zero = torch.zeros(N, dtype=torch.long, device=queries.device)
        return zero, zero
    if method == "lsh":
        half = -(-num_clusters // 2)
        if rotations is None:
            rotations = torch.randn(D, half, generator=generator).to(queries)
        check_tensor_shape(rotations, (D, half), "rotations")
        return _lsh(queries, rotations, num_clusters), _lsh(keys, rotations, num_clusters)
    layout = graph_layout(batch, N, num_graphs, device=queries.device)
    return _kmeans(queries, keys, layout, num_clusters, iters)


def _rank_in_group(group: Tensor) -> Tensor:
    """Rank of every element among the elements of its group, in index order."""
    order = torch.argsort(group, stable=True)
    count = torch.bincount(group)
    rank = torch.empty_like(group)
    rank[order] = torch.arange(group.numel(), device=group.device) - (torch.cumsum(count, 0) - count)[group[order]]
    return rank


def cluster_graph(queries: Tensor, keys: Optional[Tensor] = None, batch: Optional[Tensor] = None,
                  num_clusters: int = 4, method: str = "kmeans", iters: int = 3,
                  rotations: Optional[Tensor] = None, num_graphs: Optional[int] = None,
                  generator: Optional[torch.Generator] = None, block_size: Optional[int] = None) -> Tensor:
    r"""The clustered-attention pattern as an ``edge_index`` (see the module docstring).

    Arguments as :func:`cluster_codes`, and ``block_size``: bound on the cost. A group
    (graph, cluster) with more than ``block_size`` queries or keys is cut, in node order, into
    ``m = ⌈max(#queries, #keys) / block_size⌉`` aligned chunks (query of rank r goes to chunk
    ``⌊r·m/#queries⌋``, keys likewise) and queries attend to the keys of their chunk only, so
    ``E ≤ N·block_size`` (+ self-loops) however unbalanced the clusters are (Reformer's
    sort-and-chunk). Usable like any other pattern, e.g. joined with a window pattern.

    Shapes: returns ``(2, E)`` int64, row 0 = source j (key), row 1 = target i (query), sorted
    by (target, source), no duplicates, self-loops included, never across graphs.
    """
    if block_size is not None and (not isinstance(block_size, int) or block_size < 1):
        raise ValueError(f"block_size must be a positive int or None, got {block_size!r}")
    code_q, code_k = cluster_codes(queries, keys, batch, num_clusters, method, iters, rotations,
                                   num_graphs, generator)
    N, dev = queries.size(0), queries.device
    if N == 0:
        return torch.empty(2, 0, dtype=torch.long, device=dev)
    graph = torch.zeros(N, dtype=torch.long, device=dev) if batch is None else batch.long()
    gq, gk = graph * num_clusters + code_q, graph * num_clusters + code_k  # (N,) group ids
    G = int(torch.maximum(gq.max(), gk.max())) + 1
    if block_size is not None:  # split big groups into aligned chunks
        nq, nk = torch.bincount(gq, minlength=G), torch.bincount(gk, minlength=G)
        m = torch.div(torch.maximum(nq, nk) + block_size - 1, block_size, rounding_mode="floor").clamp(min=1)
        first = torch.cumsum(m, 0) - m  # first chunk id of every group
        gq = first[gq] + _rank_in_group(gq) * m[gq] // nq[gq].clamp(min=1)
        gk = first[gk] + _rank_in_group(gk) * m[gk] // nk[gk].clamp(min=1)
        G = int(m.sum())
    order = torch.argsort(gk, stable=True)  # keys grouped, node order inside a group
    count = torch.bincount(gk, minlength=G)
    start = torch.cumsum(count, 0) - count
    per_query = count[gq]  # (N,) keys in each query's group
    target = torch.repeat_interleave(torch.arange(N, device=dev), per_query)  # (E,)
    offset = torch.arange(target.numel(), device=dev) - (torch.cumsum(per_query, 0) - per_query)[target]
    source = order[start[gq[target]] + offset]
    lone = (gq != gk).nonzero().view(-1)  # query and key in different groups: add i -> i
    key = torch.cat([target * N + source, lone * N + lone]).sort().values
    return torch.stack([key % N, key // N])


class ClusteredAttention(nn.Module):
    r"""Multi-head attention within content clusters of each graph (Reformer / Routing
    Transformer idea; module docstring)::

        q, k, v = W_q x, W_k x, W_v x;   P = cluster_graph(q, k, batch)
        out = W_o · edge_attention(q, k, v, P)

    with ``k = q / |q|`` (per head) when ``shared_qk`` (default; see the module docstring).

    Args:
        channels (int): feature size in and out (divisible by ``heads``).
        heads (int, default 1): H.
        num_clusters (int, default 4): K clusters per graph.
        method (str, default "kmeans"): ``"kmeans"`` or ``"lsh"``.
        iters (int, default 3): k-means iterations.
        block_size (int, optional): cap on queries/keys per attended group, see
            :func:`cluster_graph` (``E ≤ N·block_size``); None = whole clusters.
        dropout (float, default 0.0): dropout on the attention weights.
        bias (bool, default True): biases of the projections.
        seed (int, default 0): seed of the fixed LSH projection (a buffer).
        shared_qk (bool, default True): keys are the unit-norm queries (Reformer), so queries
            and keys fall in the same clusters; False: separate ``W_k`` (often disjoint clusters).

    Cost: ``O(E·H·C)`` with ``E ≈ Σ_b n_b²/K`` for balanced clusters (``E ≤ N·block_size``
    with ``block_size``), plus the clustering.

    Shapes: x ``(N, channels)``, batch ``(N,)`` (None = one graph) -> ``(N, channels)``; with
    ``return_pattern=True`` also the ``(2, E)`` pattern used.
    """

    def __init__(self, channels: int, heads: int = 1, num_clusters: int = 4, method: str = "kmeans",
                 iters: int = 3, block_size: Optional[int] = None, dropout: float = 0.0,
                 bias: bool = True, seed: int = 0, shared_qk: bool = True):
        super().__init__()
        if method not in CLUSTER_METHODS:
            raise ValueError(f"method must be one of {CLUSTER_METHODS}, got {method!r}")
        if not isinstance(heads, int) or heads < 1 or channels % heads:
            raise ValueError(f"channels ({channels}) must be divisible by heads ({heads})")
        if not isinstance(num_clusters, int) or num_clusters < 1:
            raise ValueError(f"num_clusters must be a positive int, got {num_clusters!r}")
        self.channels, self.heads, self.num_clusters, self.method = channels, heads, num_clusters, method
        if block_size is not None and (not isinstance(block_size, int) or block_size < 1):
            raise ValueError(f"block_size must be a positive int or None, got {block_size!r}")
        check_int("channels", channels, 1)
        self.iters = check_int("iters", iters, 0)
        self.block_size, self.dropout, self.seed = block_size, dropout, seed
        self.shared_qk = bool(shared_qk)
        self.lin_qkv = nn.Linear(channels, (2 if self.shared_qk else 3) * channels, bias=bias)  # q[, k], v
        self.lin_out = nn.Linear(channels, channels, bias=bias)
        self.register_buffer("rotations", torch.empty(channels, -(-num_clusters // 2)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_qkv.reset_parameters()
        self.lin_out.reset_parameters()
        self.rotations.copy_(torch.randn(self.rotations.shape, generator=torch.Generator().manual_seed(self.seed)))

    def forward(self, x: Tensor, batch: Optional[Tensor] = None, num_graphs: Optional[int] = None,
                return_pattern: bool = False):
        check_features(x, self.channels, "x")
        N, H = x.size(0), self.heads
        if self.shared_qk:
            q, v = self.lin_qkv(x).view(N, 2, H, self.channels // H).unbind(1)  # 2 x (N, H, C)
            k = F.normalize(q, dim=-1)  # (N, H, C) unit keys (Reformer)
        else:
            q, k, v = self.lin_qkv(x).view(N, 3, H, self.channels // H).unbind(1)  # 3 x (N, H, C)
        pattern = cluster_graph(q.detach().reshape(N, self.channels), k.detach().reshape(N, self.channels), batch,
                                self.num_clusters, self.method, self.iters, self.rotations, num_graphs,
                                block_size=self.block_size)
        csr = to_csr(pattern, N, cache=False)
        out = edge_attention(q, k, v, csr=csr, dropout=self.dropout, training=self.training, batch=batch)
        out = self.lin_out(out.reshape(N, self.channels))  # (N, channels)
        return (out, pattern) if return_pattern else out

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
                f"num_clusters={self.num_clusters}, method={self.method!r}, shared_qk={self.shared_qk})")

"""Attention over k-hop neighbourhoods: the pairs of nodes 2..K hops apart as extra edges.

Graph self-attention only scores the pairs that are edges. :class:`AddHopEdges` widens that
pattern to every pair within K hops (a restricted pattern still, like a CNN's larger receptive
field) and tells the model how far apart each pair is through one more edge-feature column, the
hop distance. A layer that reads edge features in its keys (``edge_dim``, as PyG's
``TransformerConv``) then learns a query-dependent bias per hop distance, the sparse analogue
of Graphormer's shortest-path bias. PyG has no such transform (``torch_geometric.transforms``'
``TwoHop`` adds the 2-hop pairs without saying which pairs they are, and with zero features).
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from graphattn.utils.validation import check_edge_index, check_int

__all__ = ["hop_edges", "AddHopEdges"]


def hop_edges(edge_index: Tensor, num_nodes: int, max_hops: int) -> Tuple[Tensor, Tensor]:
    """The pairs ``j -> i`` whose shortest directed path from j to i has 2..``max_hops`` edges.

    Shapes: ``edge_index`` ``(2, E)`` (``edge_index[:, e] = (j, i)`` is an edge ``j -> i``,
    PyG's source-to-target convention) -> ``(pairs (2, E'), distance (E',))``, int64 on
    ``edge_index``'s device, ordered by distance then by ``(i, j)``. Breadth-first search by
    index joins on the CPU (``O(E')`` memory). Pairs ``i -> i`` are never returned, whatever
    cycles pass through i; duplicate edges count once; no edges or ``max_hops=1`` give empty
    tensors. Raises ``ValueError`` for ``max_hops < 1`` or an out-of-range ``edge_index``."""
    check_int("max_hops", max_hops, 1)
    check_edge_index(edge_index, num_nodes)
    n, device = int(num_nodes), edge_index.device
    empty = (torch.zeros(2, 0, dtype=torch.long, device=device), torch.zeros(0, dtype=torch.long, device=device))
    if max_hops < 2 or n == 0 or edge_index.size(1) == 0:
        return empty
    src, dst = edge_index[0].long().cpu(), edge_index[1].long().cpu()
    order = torch.argsort(src * n + dst)
    src, dst = src[order], dst[order]  # out-neighbours of each node, contiguous
    ptr = torch.zeros(n + 1, dtype=torch.long)
    ptr[1:] = torch.cumsum(torch.bincount(src, minlength=n), 0)
    diag = torch.arange(n)
    seen = torch.cat([dst * n + src, diag * n + diag]).unique()  # key target * n + source
    front_t, front_s = dst, src  # pairs (target i, source j) exactly d - 1 hops apart
    pairs, dist = [], []
    for d in range(2, max_hops + 1):
        # one more edge i -> k after each frontier pair: (k, j) is within d hops of j
        count = ptr[front_t + 1] - ptr[front_t]
        step = torch.arange(int(count.sum())) - torch.repeat_interleave(torch.cumsum(count, 0) - count, count)
        k = dst[torch.repeat_interleave(ptr[front_t], count) + step]
        j = torch.repeat_interleave(front_s, count)
        keys = (k * n + j).unique()
        keys = keys[~torch.isin(keys, seen)]
        if keys.numel() == 0:
            break
        front_t, front_s = keys // n, keys % n
        pairs.append(torch.stack([front_s, front_t]))
        dist.append(torch.full((keys.numel(),), d, dtype=torch.long))
        seen = torch.cat([seen, keys]).unique()
    if not pairs:
        return empty
    return torch.cat(pairs, 1).to(device), torch.cat(dist).to(device)


class AddHopEdges(BaseTransform):
    r"""Adds an edge ``j -> i`` for every pair of nodes 2..``max_hops`` hops apart
    (:func:`hop_edges`) and a last edge-feature column, the hop distance (1 for the graph's own
    edges, d for the added ones). The original edges keep their order and come first.

    ``data.edge_attr`` ``(E, D)`` (or ``(E,)``) gets the hop column; the rows of the added edges
    hold ``fill`` (one value per column; default 0). For categorical edge features give ``fill``
    = the columns' vocabulary sizes, so that "not an edge of the graph" is a category of its own
    and the vocabulary sizes grow by one (molecules: ``fill=BOND_FEATURE_DIMS``, then
    ``edge_vocab_sizes = [d + 1 for d in BOND_FEATURE_DIMS] + [max_hops + 1]``). Without
    ``edge_attr`` the hop column alone becomes ``edge_attr`` ``(E + E', 1)``. Positional
    encodings computed from the graph belong before this transform: afterwards the graph's
    own edges can no longer be told from the added ones but by the hop column.

    Args:
        max_hops (int): K >= 1 (1 adds no edge, only the hop column).
        fill (sequence of numbers, optional): the ``edge_attr`` row of an added edge.
    """

    def __init__(self, max_hops: int, fill: Optional[Sequence[float]] = None) -> None:
        self.max_hops = check_int("max_hops", max_hops, 1)
        self.fill = None if fill is None else list(fill)

    def forward(self, data: Data) -> Data:
        n, edge_index = data.num_nodes, data.edge_index
        if n is None or edge_index is None:
            raise ValueError("AddHopEdges needs data.edge_index and data.num_nodes (or data.x)")
        others = [k for k in data.edge_attrs() if k not in ("edge_index", "edge_attr")]
        if others:
            raise ValueError(f"AddHopEdges: data has other per-edge attributes {others} that it cannot extend; "
                             "drop them or apply the transform before adding them")
        extra, dist = hop_edges(edge_index, n, self.max_hops)
        e = edge_index.size(1)
        attr = data.edge_attr
        hop = torch.cat([torch.ones(e, dtype=torch.long, device=dist.device), dist])
        if attr is None:
            new_attr = hop.view(-1, 1)
        else:
            if attr.size(0) != e:
                raise ValueError(f"data.edge_attr has {attr.size(0)} rows for {e} edges")
            attr2 = attr if attr.dim() == 2 else attr.view(-1, 1)
            cols = attr2.size(1)
            fill = [0] * cols if self.fill is None else self.fill
            if len(fill) != cols:
                raise ValueError(f"fill has {len(fill)} values for {cols} edge_attr column(s)")
            rows = torch.tensor(fill, dtype=attr2.dtype, device=attr2.device).expand(extra.size(1), cols)
            new_attr = torch.cat([torch.cat([attr2, rows]), hop.to(attr2.dtype).view(-1, 1)], dim=1)
        data.edge_index = torch.cat([edge_index, extra.to(edge_index.dtype)], dim=1)
        data.edge_attr = new_attr
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(max_hops={self.max_hops}, fill={self.fill})"

"""Relative random-walk probabilities (RRWP, GRIT: Ma et al. 2023) as per-pair attention features.

For every attended pair ``j -> i`` (query i, key j) the vector ``[I, P, P², …, P^{K-1}]_{ij}``
(``P = D⁻¹A``: ``P^k_{ij}`` is the probability that a k-step random walk from i ends at j) tells the
attention how the two nodes are connected, beyond "is a bond" or "is d hops away"; its diagonal
``[P^k]_{ii}`` is the random-walk structural encoding (RWSE) of node i. GRIT feeds both into every
layer's score and value; here the pair vector becomes edge features of the attended pairs (the
graph's edges, or every pair within K hops after :class:`~graphattn.transforms.AddHopEdges`) and the
diagonal a node encoding. PyG has no such transform (its ``AddRandomWalkPE`` keeps the diagonal only).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from graphattn.utils.validation import check_edge_index, check_int

__all__ = ["relative_random_walk", "AddRRWP"]

#: graphs up to this many nodes take dense N x N products (molecules); larger ones sparse products
DENSE_MAX_NODES = 256


def _transition(walk_edges: Tensor, n: int, edge_weight: Optional[Tensor]):
    """``P = D⁻¹A`` as a scipy CSR matrix, ``A[u, v]`` the summed weight of the edges ``u -> v``
    (``walk_edges[:, e] = (u, v)``); a node without out-edges has a zero row."""
    import scipy.sparse as sp  # scipy: only where RRWP is computed, not on `import graphattn`

    src, dst = walk_edges[0].cpu().numpy(), walk_edges[1].cpu().numpy()
    if edge_weight is None:
        w = np.ones(src.shape[0])
    else:
        w = edge_weight.detach().cpu().double().numpy().reshape(-1)
        if w.shape[0] != src.shape[0]:
            raise ValueError(f"edge_weight must have one value per edge ({src.shape[0]}), got {w.shape[0]}")
        if not np.isfinite(w).all() or (w < 0).any():
            raise ValueError("edge_weight must be finite and non-negative for random-walk probabilities")
    adj = sp.csr_matrix((w, (src, dst)), shape=(n, n))  # duplicates summed
    deg = np.asarray(adj.sum(axis=1)).ravel()
    inv = np.divide(1.0, deg, out=np.zeros_like(deg), where=deg > 0)
    return sp.diags(inv) @ adj


def relative_random_walk(edge_index: Tensor, num_nodes: int, walk_length: int, pairs: Optional[Tensor] = None, *,
                         edge_weight: Optional[Tensor] = None, max_nonzeros: int = 50_000_000) -> Tuple[Tensor, Tensor]:
    r"""``(diag (N, K), pair values (E', K))``: :math:`[P^k]_{ii}` and :math:`[P^k]_{ij}` for
    k = 0..K-1 (``K = walk_length``; k = 0 is the identity), float32.

    The walk follows the edges of ``edge_index`` (``(2, E)``, ``edge_index[:, e] = (j, i)`` an edge
    ``j -> i``; ``edge_weight`` ``(E,)`` weights them, duplicates summed, ``D`` the weighted out-degree; a
    node without out-edges stops, its row of :math:`P^k` is 0 for k >= 1). ``pairs`` ``(2, E')`` (default
    ``edge_index``) names the attended pairs ``(j, i)``: row e of the result is
    :math:`[P^k]_{ij}`, the probability of a walk from the query i to the key j. Graphs up to
    :data:`DENSE_MAX_NODES` nodes use dense products, larger ones sparse products (no N x N tensor);
    ``max_nonzeros`` bounds the fill-in of :math:`P^k` there (a ``ValueError`` when a large, well
    connected graph would need more: lower ``walk_length``)."""
    n, K = int(num_nodes), check_int("walk_length", walk_length, 1)
    check_edge_index(edge_index, n, name="edge_index")
    pairs = edge_index if pairs is None else pairs
    check_edge_index(pairs, n, name="pairs")
    diag, vals = np.zeros((n, K)), np.zeros((pairs.size(1), K))
    key, query = pairs[0].cpu().numpy().copy(), pairs[1].cpu().numpy().copy()
    if n == 0:
        return torch.zeros(0, K), torch.from_numpy(vals).float()
    P = _transition(edge_index, n, edge_weight)
    if n <= DENSE_MAX_NODES:
        P, M = P.toarray(), np.eye(n)
    else:
        import scipy.sparse as sp

        M = sp.identity(n, format="csr")
    for k in range(K):
        if n <= DENSE_MAX_NODES:
            diag[:, k], vals[:, k] = np.diagonal(M), M[query, key]
        else:
            diag[:, k], vals[:, k] = M.diagonal(), np.asarray(M[query, key]).ravel()
        if k + 1 < K:
            M = M @ P
            if n > DENSE_MAX_NODES and M.nnz > max_nonzeros:
                raise ValueError(f"relative random walk: P^{k + 1} of this {n}-node graph has {M.nnz:,} non-zeros "
                                 f"(more than max_nonzeros={max_nonzeros:,}); use a smaller walk_length")
    return torch.from_numpy(diag).float(), torch.from_numpy(vals).float()


class AddRRWP(BaseTransform):
    r"""Relative random-walk probabilities (GRIT, Ma et al. 2023) of every edge and node.

    Adds ``data[edge_attr_name]`` ``(E, K)``, the vector :math:`[I, P, …, P^{K-1}]_{ij}` of each edge
    ``j -> i`` of ``data.edge_index`` (:func:`relative_random_walk`), and ``data[attr_name]`` ``(N, K)``,
    its diagonal :math:`[P^k]_{ii}` (RWSE with a leading column of ones). Batching concatenates both
    (the per-edge one along the edges, like ``edge_attr``).

    Apply it after :class:`~graphattn.transforms.AddHopEdges` to give every pair within K hops its
    vector, with ``hop_column`` = the hop-distance column that transform appended (``-1``): the walk
    then follows the graph's own edges only (hop distance 1), not the added pairs.

    Args:
        walk_length (int): K >= 1 (the pair vector's length; P⁰ … P^{K-1}).
        attr_name (str): node attribute. (default: ``"rrwp"``)
        edge_attr_name (str): per-edge attribute. (default: ``"edge_rrwp"``)
        hop_column (int, optional): ``data.edge_attr`` column of hop distances (walk on the edges of
            distance 1 only). (default: ``None``, walk on every edge)

    Example::

        >>> import torch
        >>> from torch_geometric.data import Data
        >>> from graphattn.transforms import AddRRWP
        >>> path = Data(edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), num_nodes=3)
        >>> data = AddRRWP(walk_length=3)(path)
        >>> data.edge_rrwp[0]          # edge 0 -> 1: P^0, P^1, P^2 from node 1 to node 0
        tensor([0.0000, 0.5000, 0.0000])
        >>> data.rrwp[1]               # node 1: returns after 0, 1, 2 steps
        tensor([1., 0., 1.])
    """

    def __init__(self, walk_length: int, attr_name: str = "rrwp", edge_attr_name: str = "edge_rrwp",
                 hop_column: Optional[int] = None) -> None:
        self.walk_length = check_int("walk_length", walk_length, 1)
        self.attr_name, self.edge_attr_name, self.hop_column = attr_name, edge_attr_name, hop_column

    def forward(self, data: Data) -> Data:
        n, edge_index = data.num_nodes, data.edge_index
        if n is None:
            raise ValueError("AddRRWP needs data.num_nodes (or data.x) to be known")
        if edge_index is None:
            edge_index = torch.zeros(2, 0, dtype=torch.long)
        walk, weight = edge_index, getattr(data, "edge_weight", None)
        if self.hop_column is not None:
            attr = data.edge_attr
            if attr is None or attr.dim() != 2 or attr.size(0) != edge_index.size(1):
                raise ValueError(f"AddRRWP(hop_column={self.hop_column}) needs data.edge_attr (E, D) with a hop "
                                 "column: apply AddHopEdges first")
            own = attr[:, self.hop_column] == 1
            walk, weight = edge_index[:, own], None if weight is None else weight[own]
        diag, pair = relative_random_walk(walk, n, self.walk_length, edge_index, edge_weight=weight)
        data[self.attr_name] = diag.to(edge_index.device)
        data[self.edge_attr_name] = pair.to(edge_index.device)
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(walk_length={self.walk_length})"

"""Target-sorted (CSR) view of an ``edge_index``, cached across layers and epochs.

Edge attention visits, for every target node i, its incoming edges j -> i. Sorting the
edges by target once gives a CSR layout (``rowptr`` over targets, ``col`` = sources) that
every layer and every epoch of a static graph can reuse. :func:`to_csr` caches the result
keyed on the identity and version of the ``edge_index`` tensor, so passing the same tensor
again (the normal PyG pattern: ``data.edge_index`` reused by every layer) costs nothing.

Why not PyG's ``EdgeIndex``/``SparseTensor``: their CSR conversion needs torch-sparse or
pyg-lib for parts of the API, which are not installable everywhere; this is 40 lines.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.utils import to_edge_index

from graphattn.utils.validation import check_bipartite_edge_index, check_edge_index, clear_checked_indices

__all__ = ["EdgeCSR", "adj_t_edges", "as_edge_index", "to_csr", "clear_csr_cache"]


@dataclass(frozen=True)
class EdgeCSR:
    """Edges sorted by target node.

    Attributes:
        num_nodes: N.
        perm: ``(E,)`` original edge id of each CSR position (``edge_index[:, perm]`` is sorted).
        rowptr: ``(N + 1,)`` int64; the edges into node i are CSR positions
            ``rowptr[i]:rowptr[i+1]``.
        row: ``(E,)`` target of each CSR position (non-decreasing).
        col: ``(E,)`` source of each CSR position.
    """

    num_nodes: int
    perm: Tensor
    rowptr: Tensor
    row: Tensor
    col: Tensor

    @property
    def num_edges(self) -> int:
        return self.col.numel()  # a SymInt when traced: int() would fix the edge count

    @property
    def csc(self) -> "EdgeCSR":
        """The same edges sorted by *source* (for source-major passes, e.g. grad of keys).

        Returned as an :class:`EdgeCSR` whose ``perm`` indexes CSR positions of ``self``,
        ``rowptr`` runs over sources, ``row`` holds sources and ``col`` targets. Cached.
        """
        cached = self.__dict__.get("_csc")
        if cached is None:
            order = torch.argsort(self.col, stable=True)
            counts = torch.bincount(self.col, minlength=self.num_nodes)
            ptr = _counts_to_ptr(counts)
            cached = EdgeCSR(self.num_nodes, order, ptr, self.col[order], self.row[order])
            object.__setattr__(self, "_csc", cached)
        return cached

    def degree(self) -> Tensor:
        """In-degree of every node, ``(N,)``."""
        return self.rowptr[1:] - self.rowptr[:-1]


def _counts_to_ptr(counts: Tensor) -> Tensor:
    ptr = torch.zeros(counts.numel() + 1, dtype=torch.long, device=counts.device)
    torch.cumsum(counts, 0, out=ptr[1:])
    return ptr


def plain_tensor(t: Tensor) -> Tensor:
    """``t`` as a plain ``torch.Tensor``: PyG's ``EdgeIndex`` / ``Index`` subclasses (and
    other tensor subclasses) are unwrapped, so C++ kernels and indexing see ordinary data."""
    if type(t) is Tensor or not isinstance(t, Tensor):
        return t
    if hasattr(t, "as_tensor"):  # torch_geometric.EdgeIndex / Index
        return t.as_tensor()
    if torch.compiler.is_compiling():  # torch.export's traced (fake) inputs: as_subclass would cut them from the graph
        return t
    return t.as_subclass(Tensor)


def _build(edge_index: Tensor, num_nodes: int, num_src: Optional[int] = None) -> EdgeCSR:
    edge_index = plain_tensor(edge_index)
    # once per graph: the result is cached
    if num_src is None:
        check_edge_index(edge_index, num_nodes)
    else:
        check_bipartite_edge_index(edge_index, num_src, num_nodes)
    src, dst = edge_index[0].long(), edge_index[1].long()
    if num_src is not None:  # bipartite: sources after the targets in one node set
        src = src + num_nodes
        num_nodes = num_nodes + num_src
    # already target-sorted: skip the sort (not under torch.compile, where the check would
    # break the graph on a data-dependent branch; a stable sort of sorted ids is the identity)
    if not torch.compiler.is_compiling() and (dst.numel() < 2 or bool((dst[1:] >= dst[:-1]).all())):
        perm = torch.arange(dst.numel(), device=dst.device)
    else:
        perm = torch.argsort(dst, stable=True)
    row, col = dst[perm], src[perm]
    if torch.compiler.is_compiling():  # bincount's output size depends on the data: count by index_add
        counts = torch.zeros(num_nodes, dtype=torch.long, device=dst.device).index_add_(0, dst, torch.ones_like(dst))
        return EdgeCSR(num_nodes, perm, torch.cat([counts.new_zeros(1), counts.cumsum(0)]), row, col)
    counts = torch.bincount(dst, minlength=num_nodes)
    return EdgeCSR(num_nodes, perm, _counts_to_ptr(counts), row, col)


_CACHE: "OrderedDict[tuple, tuple]" = OrderedDict()
_CACHE_SIZE = 16


def to_csr(edge_index: Tensor, num_nodes: int, cache: bool = True,
           num_src: Optional[int] = None) -> EdgeCSR:
    """Return the target-sorted CSR view of ``edge_index`` (shape ``(2, E)``).

    With ``cache=True`` the result is remembered for this exact tensor object (checked by
    identity, data pointer and in-place version counter), so it is computed once per static
    graph. Index type, shape and range are checked when the view is built.

    ``num_src`` makes the graph bipartite (PyG's ``x=(x_src, x_dst)``): ``edge_index[0]``
    indexes ``num_src`` source nodes, ``edge_index[1]`` the ``num_nodes`` targets. The view
    then runs over one node set of ``num_nodes + num_src`` nodes, targets first and source j
    as node ``num_nodes + j`` (which has no incoming edge), so every attention kernel computes
    bipartite attention on stacked ``[targets; sources]`` tensors unchanged.
    """
    if torch.compiler.is_compiling():
        # traced, the identity-keyed lookup would guard the compiled frame on this tensor
        # object and recompile for every new graph: the view is built inside the graph
        return _build(edge_index, num_nodes, num_src)
    if not cache or edge_index.is_inference():  # inference tensors have no version counter
        return _build(edge_index, num_nodes, num_src)
    return _cached(edge_index, num_nodes, num_src)


def _cached(edge_index: Tensor, num_nodes: int, num_src: Optional[int] = None) -> EdgeCSR:
    key = (id(edge_index), edge_index.data_ptr(), edge_index._version, tuple(edge_index.shape),
           int(num_nodes), None if num_src is None else int(num_src), str(edge_index.device))
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is edge_index:
        _CACHE.move_to_end(key)
        return hit[1]
    csr = _build(edge_index, num_nodes, num_src)
    try:  # the entry goes when the graph's tensor is freed, so dead graphs hold no memory
        ref = weakref.ref(edge_index, lambda _ref, key=key: _CACHE.pop(key, None))
    except TypeError:  # pragma: no cover - tensors are weak-referenceable
        return csr
    _CACHE[key] = (ref, csr)
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return csr



def clear_csr_cache() -> None:
    """Forget every cached CSR view and index range check: needed only after writes that
    bypass PyTorch's version counter (``edge_index.data[...] = ...``, edits through
    ``.numpy()``); ordinary in-place edits are detected."""
    _CACHE.clear()
    _ADJ_CACHE.clear()
    clear_checked_indices()


_ADJ_CACHE: "OrderedDict[tuple, tuple]" = OrderedDict()
_SPARSE_LAYOUTS = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc)


def adj_t_edges(adj_t: Tensor) -> Tuple[Tensor, Tensor]:
    """PyG's transposed sparse adjacency as edges: ``adj_t`` ``(N_dst, N_src)`` (a torch.sparse
    COO/CSR/CSC tensor, entry ``[i, j]`` present for an edge j -> i, e.g. from
    ``T.ToSparseTensor(layout=torch.sparse_csr)``; its values are ignored) -> ``(edge_index,
    adj)``: ``edge_index`` ``(2, E)`` (row 0 sources) in ``adj``'s storage order, and ``adj`` =
    ``adj_t`` (coalesced if it was an uncoalesced COO tensor) to carry per-edge values back in that
    order. Cached per tensor, so its CSR view is cached too."""
    if adj_t.layout not in _SPARSE_LAYOUTS or adj_t.sparse_dim() != 2:
        raise TypeError(f"edge_index as a sparse adjacency must be a 2-D torch.sparse COO/CSR/CSC tensor, "
                        f"got layout {adj_t.layout} with shape {tuple(adj_t.shape)}")
    key = (id(adj_t), tuple(adj_t.shape), adj_t.layout, int(adj_t._nnz()), str(adj_t.device),
           _index_versions(adj_t))  # an in-place edit of the indices is another graph
    hit = _ADJ_CACHE.get(key)
    if hit is not None and hit[0]() is adj_t:
        _ADJ_CACHE.move_to_end(key)
        return hit[1], (adj_t if hit[2] is None else hit[2])
    adj = adj_t.coalesce() if adj_t.layout == torch.sparse_coo and not adj_t.is_coalesced() else adj_t
    rows_cols, _ = to_edge_index(adj)  # (2, E): row = target i, col = source j
    edge_index = rows_cols.flip(0).contiguous()
    # adj_t itself only weakly (the entry goes with it); a coalesced copy is ours to keep
    _ADJ_CACHE[key] = (weakref.ref(adj_t, lambda _r, key=key: _ADJ_CACHE.pop(key, None)), edge_index,
                       None if adj is adj_t else adj)
    while len(_ADJ_CACHE) > _CACHE_SIZE:
        _ADJ_CACHE.popitem(last=False)
    return edge_index, adj


def as_edge_index(edge_index: Tensor, num_dst: int, num_src: Optional[int] = None,
                  per_edge: Tuple[Optional[Tensor], ...] = ()) -> Tuple[Tensor, Optional[Tensor]]:
    """``edge_index`` ``(2, E)`` as given, or PyG's transposed sparse adjacency ``adj_t``
    ``(num_dst, num_src)`` converted by :func:`adj_t_edges` -> ``(edge_index, adj or None)``.
    ``per_edge``: the caller's per-edge inputs (``edge_attr``, ``attn_bias``, ...); an
    uncoalesced COO ``adj_t`` is refused with them, as PyG's convs do: coalescing reorders (and
    merges duplicate) edges, so rows given in its storage order would meet other edges."""
    if not isinstance(edge_index, Tensor) or edge_index.layout == torch.strided:
        return edge_index, None
    num_src = num_dst if num_src is None else num_src
    if tuple(edge_index.shape[:2]) != (num_dst, num_src):
        raise ValueError(f"edge_index is a sparse adj_t of shape {tuple(edge_index.shape)}, expected "
                         f"({num_dst}, {num_src}) (targets, sources)")
    if (edge_index.layout == torch.sparse_coo and not edge_index.is_coalesced()
            and any(t is not None for t in per_edge)):
        raise ValueError("edge_index is an uncoalesced sparse COO adj_t, so per-edge inputs (edge_attr, "
                         "attn_bias, edge_attr_index) cannot be matched to its edges (coalescing reorders "
                         "and merges them): pass adj_t.coalesce() and give them in its order, as PyG's convs ask")
    return adj_t_edges(edge_index)


def _index_versions(adj: Tensor) -> tuple:
    """In-place version counters of a sparse tensor's index tensors."""
    if adj.layout == torch.sparse_coo:
        return (adj._indices()._version,)
    if adj.layout == torch.sparse_csr:
        return adj.crow_indices()._version, adj.col_indices()._version
    return adj.ccol_indices()._version, adj.row_indices()._version

"""Self-loops as PyG's ``GATConv`` / ``GATv2Conv`` add them, cached per graph.

Those convs remove every self-loop of the input and append one loop ``(i, i)`` for each of
the first ``num_nodes`` nodes (``torch_geometric.utils.remove_self_loops`` then
``add_self_loops``), on every call. :func:`add_loops` does the same with PyG's own functions,
so the edges come out in the same order (the order of the returned attention weights), but
only once per graph: the looped index is cached for the ``edge_index`` tensor (identity, data
pointer, shape and in-place version), like the CSR view of :mod:`graphattn.ops.csr`. Edge
features of the loops (``fill_value``) depend on the values of ``edge_attr`` and are computed
on each call, again by PyG's ``add_self_loops``.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.utils import add_self_loops, remove_self_loops

from graphattn.ops.csr import plain_tensor

__all__ = ["FILL_REDUCTIONS", "check_fill_value", "add_loops", "loop_count"]

#: The string ``fill_value`` choices: loop features reduced from the edges into each node.
FILL_REDUCTIONS = ("add", "sum", "mean", "min", "max", "mul")

_CACHE: "OrderedDict[tuple, tuple]" = OrderedDict()
_CACHE_SIZE = 16
_SPARSE_LAYOUTS = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc)


def check_fill_value(fill_value) -> None:
    """``ValueError`` / ``TypeError`` unless ``fill_value`` is a number, a tensor or one of
    :data:`FILL_REDUCTIONS` (PyG's choices for the edge features of added self-loops)."""
    if isinstance(fill_value, str):
        if fill_value not in FILL_REDUCTIONS:
            raise ValueError(f"fill_value must be a number, a tensor or one of {FILL_REDUCTIONS}, "
                             f"got {fill_value!r}")
    elif isinstance(fill_value, bool) or not isinstance(fill_value, (int, float, Tensor)):
        raise TypeError(f"fill_value must be a number, a tensor or one of {FILL_REDUCTIONS}, "
                        f"got {type(fill_value).__name__}")


def loop_count(num_src: int, num_dst: int, size: Optional[Tuple[int, int]] = None) -> int:
    """Nodes that get a self-loop: those present on both sides, ``min(N_src, N_dst)`` (PyG's
    rule; ``min(size)`` when an explicit ``size`` is given)."""
    return min(size) if size is not None else min(num_src, num_dst)


def _versions(t: Tensor) -> tuple:
    """In-place version counters of a (possibly sparse) tensor's index data."""
    if t.layout == torch.sparse_coo:
        return (t._indices()._version,)
    if t.layout == torch.sparse_csr:
        return t.crow_indices()._version, t.col_indices()._version
    if t.layout == torch.sparse_csc:
        return t.ccol_indices()._version, t.row_indices()._version
    return (t._version, t.data_ptr())


def _looped(edge_index: Tensor, num_nodes: int) -> Tuple[Tensor, Optional[Tensor], Tensor]:
    """``(looped, keep, kept)``: the graph without its self-loops plus one loop per node (PyG's
    functions, PyG's edge order), the ids of the input edges kept (None when there was no
    self-loop to remove; ids rather than a mask, so selecting the kept rows of ``edge_attr`` on
    every call reads nothing from the device) and the kept edges alone (what edge features are
    filled from)."""
    sparse = edge_index.layout in _SPARSE_LAYOUTS
    if torch.compiler.is_compiling() and not sparse:
        # traced: no branch on the data, and one size symbol for the kept edges (their ids select
        # both the edges and, in add_loops, their features)
        plain = plain_tensor(edge_index)
        ids = torch.arange(plain.size(1), device=plain.device)[plain[0] != plain[1]]  # (E',)
        kept = plain.index_select(1, ids)
        return add_self_loops(kept, num_nodes=num_nodes)[0], ids, kept
    kept, _ = remove_self_loops(edge_index)
    if sparse:  # the node count is the adjacency's min(size): PyG's rule for sparse input
        looped, _ = add_self_loops(kept)
        return looped, None, kept
    looped, _ = add_self_loops(kept, num_nodes=num_nodes)
    plain = plain_tensor(edge_index)
    keep = plain[0] != plain[1]
    return looped, (None if bool(keep.all()) else keep.nonzero().view(-1)), kept  # (E',) ids


def _cached_loops(edge_index: Tensor, num_nodes: int) -> Tuple[Tensor, Optional[Tensor], Tensor]:
    if edge_index.is_inference():  # no version counter to key on
        return _looped(edge_index, num_nodes)
    key = (id(edge_index), tuple(edge_index.shape), edge_index.layout, str(edge_index.device),
           int(num_nodes), _versions(edge_index))
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is edge_index and _versions(hit[1][0]) == hit[2]:
        _CACHE.move_to_end(key)  # (the looped graph handed out unchanged since)
        return hit[1]
    value = _looped(edge_index, num_nodes)
    try:  # the entry goes when the graph's tensor is freed
        ref = weakref.ref(edge_index, lambda _ref, key=key: _CACHE.pop(key, None))
    except TypeError:  # pragma: no cover - tensors are weak-referenceable
        return value
    _CACHE[key] = (ref, value, _versions(value[0]))
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return value


def add_loops(edge_index: Tensor, edge_attr: Optional[Tensor], num_nodes: int,
              fill_value: Union[float, Tensor, str]) -> Tuple[Tensor, Optional[Tensor]]:
    """``(edge_index, edge_attr)`` with every self-loop removed and one loop per node
    ``0 .. num_nodes - 1`` appended, exactly as PyG's ``GATConv`` computes them.

    ``edge_index``: ``(2, E)`` (a plain tensor or PyG's ``EdgeIndex``; cached per tensor) or a
    torch.sparse ``adj_t`` (its loops come from its own shape, ``min(adj_t.size())``, and it is
    returned as PyG's ``add_self_loops`` rebuilds it, sorted and coalesced). ``edge_attr``
    ``(E, D)`` or ``(E,)``: the kept edges' rows, then ``num_nodes`` loop rows from
    ``fill_value`` (a number, a tensor, or a reduction of :data:`FILL_REDUCTIONS` over the
    edges into each node). Edge features with a sparse ``adj_t`` raise ``NotImplementedError``
    (PyG's convs refuse that pair too)."""
    if edge_index.layout in _SPARSE_LAYOUTS and edge_attr is not None:
        raise NotImplementedError("add_self_loops=True with edge_attr and a sparse adj_t: the edge features "
                                  "cannot follow the rebuilt adjacency (PyG's GATConv refuses this too); "
                                  "pass a (2, E) edge_index, or add the loops to the input yourself and "
                                  "build the layer with add_self_loops=False")
    # traced (torch.compile), the identity-keyed cache would guard the compiled frame on this tensor
    # object (a recompile per graph): the looped graph is built inside the graph, as the CSR view is
    build = _looped if torch.compiler.is_compiling() else _cached_loops
    looped, keep, kept = build(edge_index, num_nodes)
    if edge_attr is None:
        return looped, None
    if keep is not None:
        edge_attr = edge_attr.index_select(0, keep)
    _, edge_attr = add_self_loops(plain_tensor(kept), edge_attr, fill_value=fill_value, num_nodes=num_nodes)
    return looped, edge_attr

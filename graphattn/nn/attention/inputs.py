"""The input checks of :class:`~graphattn.nn.attention.GraphSelfAttention`: its options, node counts, shapes and dtypes
of the node features, their values (one host read), and the graph the layer attends over (PyG's sparse
``adj_t`` converted, self-loops added)."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from graphattn.functional import EDGE_IMPLS, check_all_finite
from graphattn.nn.attention.projections import Parts, channel_pair
from graphattn.nn.self_loops import add_loops, loop_count
from graphattn.ops.csr import as_edge_index
from graphattn.ops.normalization import NORMALIZATIONS
from graphattn.utils.validation import check_dtype, check_edge_index, check_features

__all__ = ["check_options", "node_counts", "check_nodes", "check_values", "attention_graph"]


def check_options(score_fn, impl, normalization, share_weights, beta, root_weight, residual,
                   weights_grad) -> None:
    """``ValueError`` for an unknown or contradictory choice, naming the valid ones."""
    if impl not in EDGE_IMPLS:
        raise ValueError(f"impl must be one of {EDGE_IMPLS}, got {impl!r}")
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    if normalization != "softmax" and impl not in ("auto", "chunked"):
        raise ValueError(f"impl={impl!r} is softmax-only; normalization={normalization!r} "
                         "needs impl='auto' or 'chunked'")
    if normalization != "softmax" and weights_grad:
        raise ValueError(f"normalization={normalization!r} needs score='dot' or 'additive' and "
                         "weights_grad=False (both are softmax attention)")
    score_fn.check(impl, normalization, share_weights)
    if weights_grad and not score_fn.weights_grad:
        raise ValueError(f"score={score_fn.name!r} returns its attention weights without a gradient: "
                         "weights_grad=True needs score='dot', 'additive' or 'gat'")
    if beta and not root_weight:
        raise ValueError("beta=True gates the root term: it needs root_weight=True")
    if residual and root_weight:
        raise ValueError("residual=True and root_weight=True are two root terms: choose one")


def node_counts(x_src: Tensor, x_dst: Optional[Tensor], edge_index, size) -> Tuple[int, int]:
    """``(N_src, N_dst)``; ``size`` ``(N_src, N_dst)`` must agree with the node features."""
    if size is not None:
        if len(size) != 2 or size[0] != x_src.size(0) or (x_dst is not None and size[1] != x_dst.size(0)):
            raise ValueError(f"size={tuple(size)} does not match x: {x_src.size(0)} source nodes"
                             + ("" if x_dst is None else f", {x_dst.size(0)} target nodes"))
    if x_dst is not None:
        return x_src.size(0), x_dst.size(0)
    if size is not None:
        return x_src.size(0), int(size[1])
    if isinstance(edge_index, Tensor) and edge_index.layout != torch.strided:
        return x_src.size(0), edge_index.size(0)  # adj_t (N_dst, N_src)
    return x_src.size(0), x_src.size(0)  # PyG: targets = sources without x_dst and size


def check_nodes(x_src: Tensor, x_dst: Optional[Tensor], bipartite: bool, batch: Optional[Tensor], in_channels,
                wdtype: Optional[torch.dtype]) -> None:
    """Shapes and dtypes of the node features (values: one sync later) for a layer of ``in_channels``
    whose weights have dtype ``wdtype`` (None while lazy ``-1`` widths are uninitialised)."""
    f_src, f_dst = channel_pair(in_channels)
    check_features(x_src, f_src if f_src > 0 else None, "x[0] (x_src)" if bipartite else "x",
                   check_values=False)  # values: one sync in forward
    if bipartite:
        if x_dst is not None:
            check_features(x_dst, f_dst if f_dst > 0 else None, "x[1] (x_dst)", check_values=False)
        if batch is not None:
            raise ValueError("batch is not supported with a bipartite x=(x_src, x_dst)")
    elif f_dst != f_src and f_dst > 0:
        check_features(x_dst, f_dst, "x", check_values=False)
    if wdtype is not None:
        check_dtype(x_src, wdtype, "x[0] (x_src)" if bipartite else "x")
        if bipartite and x_dst is not None:
            check_dtype(x_dst, wdtype, "x[1] (x_dst)")


def check_values(x_src: Tensor, x_dst: Optional[Tensor], bipartite: bool, parts: Parts,
                 edge_attr: Optional[Tensor], attn_bias: Optional[Tensor]) -> None:
    """``ValueError`` naming the user's tensor that holds NaN or inf, one host read (on CPU
    tensors, or under anomaly detection: :func:`~graphattn.utils.validation.scans_values`;
    never under torch.compile); q, k, v and the projected edge features derive from them,
    so the attention call skips its checks. A NaN or inf anywhere in a row of ``x`` reaches
    every projection of that row, so the smaller of ``x`` and one of its projections is scanned;
    only when that finds one are the inputs themselves scanned, to name the culprit."""
    if torch.compiler.is_compiling():  # value scans: eager only (sizes may be data-dependent there)
        return

    def probe(x, proj):
        return proj if proj is not None and proj.numel() < x.numel() else x

    named = ([("x[0] (x_src)", x_src, parts.src[0]), ("x[1] (x_dst)", x_dst, parts.dst)] if bipartite
             else [("x", x_src, parts.src[0])])
    rest = [("edge_attr", edge_attr, False), ("attn_bias", attn_bias, True)]
    try:
        check_all_finite([(n, None if x is None else probe(x, p), False) for n, x, p in named] + rest)
    except ValueError:  # the inputs themselves (finite inputs whose projections overflow pass, as before)
        check_all_finite([(n, x, False) for n, x, _ in named] + rest)


def attention_graph(edge_index, edge_attr, attn_bias, edge_attr_index, N_src: int, N: int, size, add_self_loops: bool,
                    fill_value):
    """``(edge_index (2, E), edge_attr, adj or None)``: PyG's sparse adj_t converted (in its
    storage order, cached per tensor; ``adj`` is returned back), self-loops added with ``add_self_loops``
    (edge features of the loops: ``fill_value``)."""
    per_edge = (edge_attr, attn_bias, edge_attr_index)
    if type(edge_index).__name__ == "SparseTensor":  # torch_sparse's, an optional package: by name
        raise TypeError("edge_index is a torch_sparse.SparseTensor: pass a torch.sparse adjacency instead "
                        "(adj_t.to_torch_sparse_csr_tensor()) or a (2, E) edge_index")
    if not isinstance(edge_index, Tensor) or edge_index.layout == torch.strided:
        check_edge_index(edge_index, N, check_range=False)  # (2, E): type and shape
    elif add_self_loops:
        as_edge_index(edge_index, N, N_src, per_edge)  # adj_t: its shape, before the loops are added
    if add_self_loops:
        if edge_attr_index is not None or attn_bias is not None:
            raise ValueError("add_self_loops=True cannot extend edge_attr_index or attn_bias to the added "
                             "loops: add the loops to the graph yourself and pass add_self_loops=False")
        edge_index, edge_attr = add_loops(edge_index, edge_attr, loop_count(N_src, N, size), fill_value)
    edge_index, adj = as_edge_index(edge_index, N, N_src, per_edge)
    if adj is not None:
        check_edge_index(edge_index, N, check_range=False)
    return edge_index, edge_attr, adj

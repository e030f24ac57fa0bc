"""PyG ``Explainer`` edge masks for :class:`~graphattn.GraphSelfAttention`.

PyG's explainers (GNNExplainer, PGExplainer, ...) put a learnable mask on the edges of every
``MessagePassing`` layer (``torch_geometric.explain.algorithm.utils.set_masks``) and expect
each message ``α_ij·v_j`` to be multiplied by ``sigmoid(mask_ij)`` inside ``propagate``. The fused
kernels never form per-edge messages, so while a mask is set the layer computes its attention
here instead, in plain differentiable PyTorch with ``(E, H, C)`` temporaries (explanations run on
small graphs): the same softmax over incoming edges, then the masked messages summed per target.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["input_edge_alpha", "layer_edge_mask", "masked_edge_attention"]


def input_edge_alpha(alpha: Tensor, edge_index: Tensor) -> Tensor:
    """Attention weights ``(E', H)`` over a graph built by ``gcn_normalized_graph`` (the input's
    non-loop edges in order, then one loop per node, then e.g. global-token edges) as one row per
    edge of the input ``edge_index`` ``(2, E0)`` -> ``(E0, H)``: an input self-loop on node i reads
    the loop appended for i (so PyG's AttentionExplainer, which keeps ``alpha[:E0]``, lines up)."""
    loop = edge_index[0] == edge_index[1]
    pos = torch.cumsum(~loop, 0) - 1  # rank among the non-loop edges
    pos = torch.where(loop, (~loop).sum() + edge_index[0], pos)
    return alpha[pos.to(alpha.device)]


def layer_edge_mask(mask: Tensor, loop_mask: Optional[Tensor], apply_sigmoid: bool,
                    edge_index: Tensor, num_targets: int, loops_replaced: bool = False) -> Tensor:
    """The explainer's mask ``(E0,)``, set for the model's input edges, as one weight per edge of
    the ``edge_index`` ``(2, E)`` this layer sees. Handled: the same edges (E = E0); edges
    appended after them (global-token edges: weight 1); PyG's self-loop convention — the
    input's self-loops removed and one loop per node appended, as ``NodeClassifier(self_loops=
    True)`` and ``add_self_loops`` do (``loop_mask`` = the input edges that are not loops,
    the appended loops get weight 1) — and both (loops, then token edges). ``loops_replaced``:
    the caller knows it replaced the input's loops (``NodeClassifier(self_loops=True)``), so the
    loop run may cover fewer than ``num_targets`` nodes (global tokens get no loop); otherwise
    only exactly one loop per target in order counts as replaced (a graph given with its own
    loops at the end keeps their mask entries)."""
    m = mask.sigmoid() if apply_sigmoid else mask
    E0, E = m.size(0), edge_index.size(1)
    loops_ok = loop_mask is not None and loop_mask.numel() == E0
    if loops_ok and not bool(loop_mask.all()):
        # the input has self-loops: did the layer's graph replace them (non-loop input edges in
        # order, then exactly one loop per node, 0..N-1)? Then the loops' mask entries are dropped
        kept = m[loop_mask.to(m.device)]
        if _is_loop_replaced(edge_index, kept.size(0), num_targets, loops_replaced):
            return torch.cat([kept, m.new_ones(E - kept.size(0))])
    if E == E0:
        return m
    if E > E0 and (not loops_ok or torch.equal(edge_index[0, :E0] != edge_index[1, :E0],
                                               loop_mask.to(edge_index.device))):
        return torch.cat([m, m.new_ones(E - E0)])  # the input's edges first, extra edges after
    raise ValueError(f"the explainer's edge mask has {E0} entries but this GraphSelfAttention layer sees "
                     f"{E} edges that do not start with the explained ones: explain the graph the layer "
                     "attends over (pass that edge_index to the Explainer; the masks stay set after a failed "
                     "explanation: torch_geometric.explain.algorithm.utils.clear_masks(model))")


def _is_loop_replaced(edge_index: Tensor, n: int, N: int, partial: bool = False) -> bool:
    """``edge_index[:, :n]`` has no self-loop and is followed by the loops ``0→0, ..., N-1→N-1``
    in order (PyG's ``add_self_loops`` / ``NodeClassifier(self_loops=True)`` layout). With
    ``partial`` (the caller replaced the loops itself) the run may stop at K < N — the global-
    token nodes among the N targets get no loop — if it covers every node those edges touch."""
    head, seg = edge_index[:, :n], edge_index[:, n:n + N]
    if seg.size(1) == 0 or bool((head[0] == head[1]).any()):
        return False
    ids = torch.arange(seg.size(1), device=edge_index.device)
    run = (seg[0] == ids) & (seg[1] == ids)
    K = int(run.size(0) if bool(run.all()) else run.to(torch.int8).argmin())  # loops 0..K-1 in order
    if not partial:
        return K == N
    return K > 0 and (head.numel() == 0 or int(head.max()) < K)


def masked_edge_attention(scores: Tensor, value: Tensor, dst: Tensor, num_targets: int, edge_mask: Tensor, *,
                          dropout: float = 0.0, training: bool = False) -> Tuple[Tensor, Tensor]:
    """Softmax attention over incoming edges with every message scaled by ``edge_mask``.

    ``scores`` ``(E, H)`` (any score, a bias included; ``-inf`` hides an edge), ``value``
    ``(E, H, C')`` the message of each edge, ``dst`` ``(E,)`` its target, ``edge_mask`` ``(E,)``.
    Returns ``out`` ``(N, H, C')`` = Σ_e α_e·mask_e·value_e and ``alpha`` ``(E, H)`` (before the
    mask and dropout)."""
    s, N, H = scores, num_targets, scores.size(1)
    # softmax per target written out: torch_geometric.utils.softmax gives NaN for a target whose
    # edges are all hidden (-inf bias); here such a target gets zeros, as on the fused path
    idx = dst[:, None].expand(-1, H)
    smax = s.new_full((N, H), float("-inf")).scatter_reduce(0, idx, s.detach(), "amax")  # (N, H)
    smax = torch.where(torch.isfinite(smax), smax, torch.zeros_like(smax))
    e = torch.exp(s - smax[dst])  # (E, H); hidden edges give 0
    den = torch.zeros_like(smax).index_add(0, dst, e)  # (N, H)
    alpha = e / den[dst].clamp_min(torch.finfo(e.dtype).tiny)
    a = F.dropout(alpha, dropout, training) if dropout > 0 else alpha
    msg = (a * edge_mask[:, None].to(a.dtype))[..., None] * value  # (E, H, C')
    out = value.new_zeros(N, H, value.size(-1)).index_add(0, dst, msg)  # (N, H, C')
    return out, alpha.detach()

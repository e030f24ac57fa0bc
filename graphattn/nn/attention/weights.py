"""Attention weights as tensors of the autograd graph, and aggregation with given weights.

The edge kernels (:func:`graphattn.functional.edge_attention`) return the softmax weights
``alpha`` ``(E, H)`` detached. PyG's convs return them with a gradient, and apply attention
dropout as ``F.dropout`` on ``alpha`` in edge order. Three pieces give a layer the same:

- :func:`weights_with_grad`: the kernel's ``alpha`` made differentiable: its backward is the
  softmax backward followed by the chunked score backward of :mod:`graphattn.ops.chunked`
  (no ``(E, H, C)`` tensor is stored; the scores' inputs are saved, as for ``out``).
- :func:`gat_scores`: GATConv's scores ``LeakyReLU(a_j + a_i + a_ij)`` from per-node scalars
  ``(N, H)`` and a per-edge ``(E, H)`` term: an ``(E, H)`` score bias, never ``(E, H, C)``.
- :func:`aggregate`: ``out_i = Σ_e w_e (v_j + ev_e)`` for given weights ``w`` ``(E, H)`` (e.g.
  after dropout): on small graphs in plain torch ops, on larger ones by the same kernels (with
  score bias ``log w`` and zero queries and keys a kernel returns ``Σ_e (w_e / S_i)(v_j + ev_e)``,
  ``S_i = Σ_e w_e``, scaled back by ``S_i``).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch_geometric.utils import softmax as pyg_softmax

from graphattn.functional import edge_attention_prechecked
from graphattn.ops.chunked import chunk_edges, score_backward
from graphattn.ops.csr import EdgeCSR

__all__ = ["weights_with_grad", "gat_scores", "edge_softmax", "aggregate", "EXPLICIT_ELEMENTS"]


def _to_input_order(t: Tensor, perm: Tensor) -> Tensor:
    """Per-edge rows in CSR order -> the caller's edge order."""
    out = torch.empty_like(t)
    out[perm] = t
    return out


class _WeightsWithGrad(torch.autograd.Function):
    """Identity on ``alpha`` whose backward is that of ``softmax_i(s)``, ``s`` the edge scores
    of ``(q, k, bias, edge_key, att)``."""

    @staticmethod
    def forward(ctx, alpha, q, k, bias, edge_key, att, csr: EdgeCSR, score: str, scale: float, slope: float):
        ctx.save_for_backward(alpha, q, k, edge_key, att)
        ctx.csr, ctx.score, ctx.scale, ctx.slope = csr, score, scale, slope
        return alpha.clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        alpha, q, k, edge_key, att = ctx.saved_tensors
        csr: EdgeCSR = ctx.csr
        perm, row = csr.perm, csr.row
        a, g = alpha[perm], grad[perm]  # (E, H), CSR order
        dot = a.new_zeros(csr.num_nodes, a.size(1)).index_add_(0, row, a * g)  # (N, H)
        gs = a * (g - dot[row])  # dL/ds, (E, H)
        needs = ctx.needs_input_grad
        ek = None if edge_key is None else edge_key[perm]
        chunk = chunk_edges(q.size(1), q.size(2), q.element_size())
        gq, gk, gek, gatt = score_backward(gs, q, k, ek, att, csr, ctx.score, ctx.scale, ctx.slope, chunk,
                                           (needs[1], needs[2], needs[4], needs[5]))
        gb = _to_input_order(gs, perm) if needs[3] else None
        gek = _to_input_order(gek, perm) if gek is not None else None
        return None, gq, gk, gb, gek, gatt, None, None, None, None


def weights_with_grad(alpha: Tensor, q: Tensor, k: Tensor, csr: EdgeCSR, *, bias: Optional[Tensor] = None,
                      edge_key: Optional[Tensor] = None, att: Optional[Tensor] = None, score: str = "dot",
                      scale: float = 1.0, negative_slope: float = 0.2) -> Tensor:
    """``alpha`` ``(E, H)`` (a kernel's detached softmax weights, the caller's edge order) as a
    differentiable function of the score inputs: ``q`` ``(N, H, C)`` (targets), ``k``
    ``(N, H, C)`` (sources), ``bias`` ``(E, H)``, ``edge_key`` ``(E, H, C)``, ``att`` ``(H, C)``
    (``score="additive"``), as :func:`graphattn.functional.edge_attention` scores them.
    First derivatives only (``create_graph=True`` through it raises)."""
    return _WeightsWithGrad.apply(alpha, q, k, bias, edge_key, att, csr, score, scale, negative_slope)


def gat_scores(a_src: Tensor, a_dst: Optional[Tensor], a_edge: Optional[Tensor], src: Tensor, dst: Tensor,
               negative_slope: float) -> Tensor:
    """GATConv's edge scores ``LeakyReLU(a_src[j] + a_dst[i] + a_edge[e])`` ``(E, H)`` for the
    edges ``e = (j -> i)`` given as index vectors ``src``, ``dst``; ``a_dst`` may be None (PyG's
    bipartite input without target features)."""
    s = a_src.index_select(0, src)  # (E, H)
    if a_dst is not None:
        s = s + a_dst.index_select(0, dst)
    if a_edge is not None:
        s = s + a_edge
    return F.leaky_relu(s, negative_slope)


def edge_softmax(scores: Tensor, dst: Tensor, num_nodes: int) -> Tensor:
    """Softmax of ``scores`` ``(E, H)`` over the edges into each target (PyG's
    ``torch_geometric.utils.softmax``, so the weights are PyG's to the last bit)."""
    return pyg_softmax(scores, dst, num_nodes=num_nodes)


#: Up to this many elements (E * H * C) :func:`aggregate` gathers the weighted messages in plain
#: torch ops (what PyG computes): at Cora's size (13k edges, 8 x 8) that forward + backward takes
#: about half the CPU time of a kernel call through a score bias (1 thread).
EXPLICIT_ELEMENTS = 2 ** 22


def aggregate(weights: Tensor, v: Tensor, csr: EdgeCSR, src: Tensor, dst: Tensor, *,
              edge_value: Optional[Tensor] = None, impl: str = "auto") -> Tensor:
    """``out_i = Σ_{e=(j->i)} w_e (v_j + ev_e)`` ``(N, H, C)`` for weights ``w`` ``(E, H)``
    (the caller's edge order, ``src`` / ``dst`` its node ids), ``v`` ``(N, H, C)``, ``edge_value``
    ``(E, H, C)``. Differentiable in ``w``, ``v`` and ``edge_value``; a zero weight contributes
    nothing. Small graphs (at most :data:`EXPLICIT_ELEMENTS` per-edge elements): gather, scale and
    add the messages. Larger ones: an edge-attention kernel (``impl`` as there) with score bias
    ``log w`` and zero queries and keys returns ``Σ_e (w_e / S_i)(v_j + ev_e)``, times
    ``S_i = Σ_e w_e``; no ``(E, H, C)`` tensor."""
    N, H, C = v.shape
    if weights.numel() * C <= EXPLICIT_ELEMENTS:
        msg = v.index_select(0, src)  # (E, H, C)
        if edge_value is not None:
            msg = msg + edge_value
        return v.new_zeros(N, H, C).index_add(0, dst, msg * weights[..., None])
    tiny = torch.finfo(weights.dtype).tiny  # log(0): the kernel would see -inf, its gradient NaN
    log_w = weights.clamp_min(tiny).log()  # (E, H)
    zeros = v.new_zeros(1, 1, 1).expand(N, H, 1)  # (N, H, 1): no query-key term
    out = edge_attention_prechecked(zeros, zeros, v, csr=csr, bias=log_w, edge_value=edge_value, impl=impl)
    total = weights.new_zeros(N, H).index_add(0, dst, weights)  # S_i, (N, H)
    return out * total[..., None]  # (N, H, C)

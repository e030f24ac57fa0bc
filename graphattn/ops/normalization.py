r"""Score normalizations over incoming edges: softmax, ReLU and sigmoid attention.

Edge attention turns the scores ``s_e`` of the incoming edges ``e = (j -> i)`` of a target
node ``i`` (``deg_i`` of them, per head, not counting edges a ``-inf`` bias hides) into
weights ``α_e``. :func:`edge_normalize` offers::

    "softmax":  α_e = exp(s_e - m_i) / Σ_{e'->i} exp(s_e' - m_i),  m_i = max_{e'->i} s_e'
                (weights sum to 1; Vaswani et al. 2017)
    "relu":     α_e = ReLU(s_e) / deg_i
                (ReLU attention divided by the sequence length, Wortsman et al. 2023,
                "Replacing softmax with ReLU in Vision Transformers"; weights ≥ 0, sparse,
                do not sum to 1; all-negative scores give a zero output)
    "sigmoid":  α_e = σ(s_e - log deg_i)
                (sigmoid attention with the bias b = -log n of Ramapuram et al. 2024,
                "Theory, Analysis, and Best Practices for Sigmoid Self-Attention"; each weight
                in (0, 1) independently, Σ_e α_e ≈ 1 while scores are small)

None of them needs a per-node reduction other than a degree or a max/sum; all are
``O(E·H)`` time and memory. :func:`normalized_edge_attention` is the full attention
``out_i = Σ_e α_e v_j`` with any of them, on the same inputs as
:func:`graphattn.functional.edge_attention`: scores and the weighted sum are computed in
bounded chunks of edges by two custom autograd functions that keep only ``q, k, v`` and the
``(E, H)`` weights for backward, so memory stays ``O(E·H + N·H·C)``, never ``O(E·H·C)``.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from graphattn.ops.chunked import aggregate_backward, check_edge_attention_args, chunk_edges, score_backward
from graphattn.ops.csr import EdgeCSR
from graphattn.ops.dense import dense_plan
from graphattn.ops.padding import GraphLayout
from graphattn.utils.memo import recall, remember
from graphattn.utils.validation import check_tensor_shape

__all__ = ["NORMALIZATIONS", "EdgeAggregate", "edge_normalize", "normalized_edge_attention"]

NORMALIZATIONS = ("softmax", "relu", "sigmoid")


def _check_normalization(normalization: str) -> None:
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")


def edge_normalize(scores: Tensor, index: Tensor, num_nodes: int, normalization: str = "softmax") -> Tensor:
    """Normalize edge scores over the incoming edges of each target node (formulas above).

    Args:
        scores: ``(E, H)`` (or ``(E,)``) scores.
        index: ``(E,)`` target node of every edge (``edge_index[1]``); any order.
        num_nodes: N.
        normalization: ``"softmax"``, ``"relu"`` or ``"sigmoid"``.

    Returns: weights of the same shape as ``scores``; differentiable in ``scores``.
    """
    _check_normalization(normalization)
    squeeze = scores.dim() == 1
    if squeeze:
        scores = scores[:, None]
    check_tensor_shape(scores, (None, None), "scores")
    check_tensor_shape(index, (scores.size(0),), "index")
    index = index.long()
    E, H = scores.shape
    if normalization == "softmax":
        with torch.no_grad():  # the shift cancels; no gradient through the max
            rowmax = scores.new_full((num_nodes, H), float("-inf"))
            rowmax.scatter_reduce_(0, index[:, None].expand(E, H), scores.detach(), "amax")
            rowmax = torch.where(torch.isfinite(rowmax), rowmax, torch.zeros_like(rowmax))
        ex = torch.exp(scores - rowmax[index])
        denom = scores.new_zeros(num_nodes, H).index_add(0, index, ex)
        alpha = ex / denom.clamp_min(torch.finfo(scores.dtype).tiny)[index]
    else:
        # deg_i per head counts the edges a -inf score (bias) does not hide, as softmax would;
        # clamped to 1 where every edge of a node is hidden (its weights are 0 either way)
        visible = (scores > float("-inf")).to(scores.dtype)  # (E, H)
        deg = scores.new_zeros(num_nodes, H).index_add_(0, index, visible).clamp_min(1.0)  # (N, H)
        if normalization == "relu":
            alpha = F.relu(scores) / deg[index]
        else:
            alpha = torch.sigmoid(scores - torch.log(deg)[index])
    return alpha[:, 0] if squeeze else alpha


class _EdgeScores(torch.autograd.Function):
    """Per-edge scores ``(E, H)`` in CSR order, chunked; backward recomputes the gathers."""

    @staticmethod
    def forward(ctx, q, k, edge_key, att, csr: EdgeCSR, score: str, scale: float, slope: float, chunk: int):
        row, col = csr.row, csr.col
        out = q.new_empty(csr.num_edges, q.size(1))  # (E, H)
        for s in range(0, csr.num_edges, chunk):
            kk = k[col[s:s + chunk]]  # (chunk, H, C)
            if edge_key is not None:
                kk = kk + edge_key[s:s + chunk]
            if score == "dot":
                out[s:s + chunk] = (q[row[s:s + chunk]] * kk).sum(-1) * scale
            else:
                out[s:s + chunk] = (F.leaky_relu(q[row[s:s + chunk]] + kk, slope) * att).sum(-1)
        ctx.save_for_backward(q, k, edge_key, att)
        ctx.csr, ctx.score, ctx.scale, ctx.slope, ctx.chunk = csr, score, scale, slope, chunk
        return out

    @staticmethod
    def backward(ctx, gs):
        q, k, edge_key, att = ctx.saved_tensors
        gq, gk, gek, gatt = score_backward(gs.contiguous(), q, k, edge_key, att, ctx.csr, ctx.score, ctx.scale,
                                           ctx.slope, ctx.chunk, tuple(ctx.needs_input_grad[:4]))
        return gq, gk, gek, gatt, None, None, None, None, None


class EdgeAggregate(torch.autograd.Function):
    """``out_i = Σ_{e=(j->i)} α_e (v_j + ev_e)`` over CSR-ordered edges, chunked.

    ``EdgeAggregate.apply(alpha (E, H), v (N, H, C), edge_value (E, H, C) or None, csr, chunk)``
    -> ``(N, H, C)``; backward (:func:`~graphattn.ops.chunked.aggregate_backward`) recomputes the
    gathers, so only ``alpha``, ``v`` and ``edge_value`` are saved, never ``(E, H, C)`` messages."""

    @staticmethod
    def forward(ctx, alpha, v, edge_value, csr: EdgeCSR, chunk: int):
        row, col = csr.row, csr.col
        out = v.new_zeros(csr.num_nodes, v.size(1), v.size(2))  # (N, H, C)
        for s in range(0, csr.num_edges, chunk):
            msg = v[col[s:s + chunk]]  # (chunk, H, C)
            if edge_value is not None:
                msg = msg + edge_value[s:s + chunk]
            out.index_add_(0, row[s:s + chunk], msg * alpha[s:s + chunk, :, None])
        ctx.save_for_backward(alpha, v, edge_value)
        ctx.csr, ctx.chunk = csr, chunk
        return out

    @staticmethod
    def backward(ctx, go):
        alpha, v, edge_value = ctx.saved_tensors
        ga, gv, gev = aggregate_backward(go.contiguous(), alpha, v, edge_value, ctx.csr, ctx.chunk,
                                         tuple(ctx.needs_input_grad[:3]))
        return ga, gv, gev, None, None


def _dense_normalized(q: Tensor, k: Tensor, v: Tensor, sizes: Tensor, normalization: str,
                      dropout: float, training: bool) -> Tensor:
    """Complete graphs (every pair of a graph once): the same weights on padded ``(B, H, L, L)``
    score matrices with two batched matmuls instead of per-edge gathers."""
    lay = recall("complete graphs layout", sizes)  # sizes: cached per graph by dense_plan
    if lay is None:  # first call for this graph: the layout reads the sizes (device syncs)
        batch = torch.repeat_interleave(torch.arange(sizes.numel(), device=q.device), sizes, output_size=q.size(0))
        lay = remember("complete graphs layout", GraphLayout(batch, q.size(0), sizes.numel(), check_range=False), sizes)
    Q, K, V = (lay.pad(t).transpose(1, 2) for t in (q, k, v))  # (B, H, L, C)
    s = (Q @ K.transpose(-1, -2)) / math.sqrt(q.size(-1))  # (B, H, L, L)
    key_ok = lay.mask[:, None, None, :]  # (B, 1, 1, L)
    n = sizes.to(s.dtype)[:, None, None, None]  # deg of every node = its graph's size
    if normalization == "softmax":
        a = torch.softmax(s.masked_fill(~key_ok, float("-inf")), dim=-1).nan_to_num(0.0)
    elif normalization == "relu":
        a = F.relu(s) / n * key_ok
    else:
        a = torch.sigmoid(s - torch.log(n)) * key_ok
    a = F.dropout(a, dropout, training) if dropout > 0.0 else a
    return lay.unpad((a @ V).transpose(1, 2))  # (N, H, C')


def normalized_edge_attention(q: Tensor, k: Tensor, v: Tensor, edge_index: Optional[Tensor] = None, *,
                              normalization: str = "softmax", bias: Optional[Tensor] = None,
                              edge_key: Optional[Tensor] = None, edge_value: Optional[Tensor] = None,
                              score: str = "dot", att: Optional[Tensor] = None,
                              negative_slope: float = 0.2, dropout: float = 0.0, training: bool = True,
                              return_attention_weights: bool = False, csr: Optional[EdgeCSR] = None,
                              batch: Optional[Tensor] = None,
                              impl: str = "auto") -> Union[Tensor, Tuple[Tensor, Tensor]]:
    r"""Edge attention with a choice of score normalization (see the module docstring).

    Same inputs, scores and outputs as :func:`graphattn.functional.edge_attention`
    (``s_e = q_i·(k_j + ek_e)/√C + b_e`` or the additive form, ``out_i = Σ_e α_e (v_j + ev_e)``),
    with ``α = edge_normalize(s, normalization)``. ``normalization="softmax"`` gives the same
    numbers as ``edge_attention`` (slower: no fused kernel or dense path; use that instead).

    Args:
        normalization: ``"softmax"``, ``"relu"`` or ``"sigmoid"``.
        batch: optional ``(N,)`` sorted graph ids; with ``impl="auto"``, batches of complete
            graphs (all pairs incl. self-loops, as ``sequence_graph(L, "full")``) run on padded
            ``(B, H, L, L)`` scores with batched matmuls (``O(B·H·L²)`` memory, much faster).
        impl: ``"auto"`` (dense for complete graphs, as above, else chunked) or ``"chunked"``.
        others: as in :func:`~graphattn.functional.edge_attention`.

    Cost: ``O(E·H·C)`` time, ``O(E·H + N·H·C)`` memory (chunks of ``(chunk, H, C)``); about
    2-3x the time of the fused softmax kernel, since it runs ~20 gather/scatter passes over
    the edges per forward + backward in PyTorch ops.

    Shapes: q, k ``(N, H, C)``, v ``(N, H, C')``, edge_index ``(2, E)`` -> ``(N, H, C')``, and
    alpha ``(E, H)`` in the caller's edge order (before dropout) when requested.
    """
    _check_normalization(normalization)
    if impl not in ("auto", "chunked"):
        raise ValueError(f"impl must be one of ('auto', 'chunked') for normalization={normalization!r} "
                         f"(the dense and fused paths are softmax-only), got {impl!r}")
    csr = check_edge_attention_args(q, k, v, edge_index, csr, batch=batch, bias=bias, edge_key=edge_key,
                                    edge_value=edge_value, score=score, att=att, dropout=dropout,
                                    what="normalized_edge_attention")
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):  # compute in float32, return in input dtype
        up = lambda t: None if t is None else t.float()  # noqa: E731
        q, k, v, bias, edge_key, edge_value, att = map(up, (q, k, v, bias, edge_key, edge_value, att))
    perm = csr.perm  # per-edge inputs to CSR order
    shared_kv = edge_value is not None and edge_value is edge_key
    if edge_key is not None:
        edge_key = edge_key[perm]
    if edge_value is not None:
        edge_value = edge_key if shared_kv else edge_value[perm]
    plain = score == "dot" and bias is None and edge_key is None and edge_value is None
    if impl == "auto" and plain and not return_attention_weights:
        plan = dense_plan(csr, batch)
        if plan is not None:
            return _dense_normalized(q, k, v, plan.sizes, normalization, dropout if training else 0.0,
                                     training).to(dtype)
    out, alpha = _chunked_normalized(q, k, v, csr, bias, edge_key, edge_value, score, att, negative_slope,
                                     normalization, dropout, training)
    out = out.to(dtype)  # (N, H, C')
    if not return_attention_weights:
        return out
    alpha_orig = alpha.new_empty(alpha.shape).index_copy(0, perm, alpha)  # caller's edge order
    return out, alpha_orig.to(dtype)


def _chunked_normalized(q: Tensor, k: Tensor, v: Tensor, csr: EdgeCSR, bias: Optional[Tensor],
                        edge_key: Optional[Tensor], edge_value: Optional[Tensor], score: str,
                        att: Optional[Tensor], negative_slope: float, normalization: str, dropout: float,
                        training: bool) -> Tuple[Tensor, Tensor]:
    """The edge path: chunked scores, normalization and weighted sum. Per-edge ``edge_key`` /
    ``edge_value`` in CSR order, ``bias`` in the caller's order. Returns ``out`` ``(N, H, C')``
    and ``alpha`` ``(E, H)`` in CSR order (before dropout)."""
    N, H, C = q.shape
    chunk = chunk_edges(H, max(C, v.size(-1)), q.element_size())
    scores = _EdgeScores.apply(q.contiguous(), k.contiguous(), edge_key, att, csr, score,
                               1.0 / math.sqrt(C), negative_slope, chunk)  # (E, H) CSR order
    if bias is not None:
        scores = scores + bias[csr.perm].to(scores.dtype)  # a float64 bias must not promote the scores
    alpha = edge_normalize(scores, csr.row, N, normalization)  # (E, H)
    used = F.dropout(alpha, dropout, training) if dropout > 0.0 else alpha
    return EdgeAggregate.apply(used, v.contiguous(), edge_value, csr, chunk), alpha  # (N, H, C'), (E, H)

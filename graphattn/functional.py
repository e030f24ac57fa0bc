"""Attention math: one dense reference and the edge-restricted fast paths.

Graph self-attention restricts the attention matrix to the edges of a graph: node i
attends to node j only if there is an edge j -> i (``edge_index[0] = j`` source,
``edge_index[1] = i`` target, PyG's ``flow="source_to_target"``)::

    s_ij   = q_i · k_j / sqrt(C) + b_ij                    (scaled dot product)
    α_ij   = exp(s_ij) / Σ_{j' : j' -> i} exp(s_ij')        (softmax over incoming edges)
    out_i  = Σ_{j : j -> i} α_ij v_j                         (0 if i has no incoming edge)

:func:`dense_attention` is the readable reference on padded ``(B, H, N, C)`` tensors.
:func:`edge_attention` computes the same numbers on ``(N, H, C)`` tensors from an
``edge_index`` without ever materialising an ``(E, H, C)`` tensor for all edges: edges
are visited in target-sorted (CSR) order in bounded chunks, and the backward pass
recomputes the per-edge messages instead of storing them. On CPU a fused C++ kernel
(:mod:`graphattn.kernels`) is used when it can be built; the chunked pure-PyTorch path is
the portable fallback. Every path is tested against :func:`dense_attention`.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from .csr import EdgeCSR, to_csr
from .dense import complete_graph_sizes, prefer_dense, sdpa_attention
from .validation import check_edge_index, check_tensor_shape

__all__ = ["dense_attention", "edge_attention", "EDGE_IMPLS"]

#: Bytes of one chunk's per-edge ``(chunk, H, C)`` temporaries (bounds peak memory).
CHUNK_BYTES = 16 * 2**20
EDGE_IMPLS = ("auto", "dense", "fused", "chunked")
SCORES = ("dot", "additive")


def dense_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor,
                    bias: Optional[Tensor] = None) -> Tensor:
    r"""Reference masked attention: ``softmax(Q Kᵀ / √C + bias)·V`` over visible keys.

    Args:
        q, k, v: ``(B, H, N, C)`` queries, keys and values.
        mask: ``(B, N, N)`` bool, ``mask[b, i, j]`` True iff key j is visible to query i.
        bias: optional score bias broadcastable to ``(B, H, N, N)``; ``-inf`` hides a key.

    Returns:
        ``(B, H, N, C)``. A query row with no visible key returns zeros (never NaN).
    """
    if q.size(-2) == 0 or k.size(-2) == 0:  # no queries or no keys at all
        return q.new_zeros(*q.shape[:-1], v.size(-1))
    scale = 1.0 / math.sqrt(q.size(-1))
    scores = torch.einsum("bhic,bhjc->bhij", q, k) * scale  # (B, H, N, N)
    if bias is not None:
        scores = scores + bias
    visible = mask[:, None, :, :].expand_as(scores)  # (B, H, N, N)
    scores = scores.masked_fill(~visible, float("-inf"))
    rowmax = scores.amax(dim=-1, keepdim=True)
    empty = ~torch.isfinite(rowmax)  # no visible (finite) key in this row
    weights = torch.exp(scores - rowmax.masked_fill(empty, 0.0))
    denom = weights.sum(dim=-1, keepdim=True)
    weights = weights / denom.masked_fill(empty, 1.0)
    return weights @ v


def _leaky_grad(z: Tensor, slope: float) -> Tensor:
    return torch.where(z > 0, torch.ones_like(z), torch.full_like(z, slope))


def aggregate_backward(grad_out: Tensor, alpha: Tensor, v: Tensor, edge_value: Optional[Tensor],
                       csr: EdgeCSR, chunk: int, needs: Tuple[bool, bool, bool]):
    """Gradients of ``out_i = Σ_e α_e (v_j + ev_e)`` w.r.t. ``(α, v, edge_value)``, chunked.

    ``grad_out`` ``(N, H, C)``, ``alpha`` ``(E, H)`` in CSR order (the weights actually used).
    Shared by every autograd path that aggregates values over edges.
    """
    need_a, need_v, need_ev = needs
    ga = torch.empty_like(alpha) if need_a else None
    gv = torch.zeros_like(v) if need_v else None
    gev = torch.empty_like(edge_value) if need_ev else None
    row, col = csr.row, csr.col
    for s in range(0, csr.num_edges, chunk):
        r, c = row[s:s + chunk], col[s:s + chunk]
        go = grad_out[r]  # (chunk, H, C)
        if need_a:
            msg = v[c]
            if edge_value is not None:
                msg = msg + edge_value[s:s + chunk]
            ga[s:s + chunk] = (go * msg).sum(-1)
        if need_v or need_ev:
            gm = go * alpha[s:s + chunk, :, None]
            if need_v:
                gv.index_add_(0, c, gm)
            if need_ev:
                gev[s:s + chunk] = gm
    return ga, gv, gev


def score_backward(gs: Tensor, q: Tensor, k: Tensor, edge_key: Optional[Tensor], att: Optional[Tensor],
                   csr: EdgeCSR, score: str, scale: float, slope: float, chunk: int,
                   needs: Tuple[bool, bool, bool, bool]):
    """Gradients of the edge scores ``(E, H)`` w.r.t. ``(q, k, edge_key, att)``, chunked.

    ``gs`` is dL/ds in CSR order; ``needs`` says which of the four are wanted (None otherwise).
    Shared by every autograd path that computes dot or additive scores over edges.
    """
    need_q, need_k, need_ek, need_att = needs
    gq = torch.zeros_like(q) if need_q else None
    gk = torch.zeros_like(k) if need_k else None
    gek = torch.empty_like(edge_key) if need_ek else None
    gatt = torch.zeros_like(att) if need_att else None
    if not any(needs):
        return gq, gk, gek, gatt
    row, col = csr.row, csr.col
    for s in range(0, csr.num_edges, chunk):
        r, c = row[s:s + chunk], col[s:s + chunk]
        g = gs[s:s + chunk, :, None]  # (chunk, H, 1)
        kk = k[c]  # (chunk, H, C)
        if edge_key is not None:
            kk = kk + edge_key[s:s + chunk]
        if score == "dot":
            g = g * scale
            if need_q:
                gq.index_add_(0, r, g * kk)
            gkk = g * q[r] if (need_k or need_ek) else None
        else:
            z = q[r] + kk
            if need_att:
                gatt += (g * F.leaky_relu(z, slope)).sum(0)
            gkk = g * att * _leaky_grad(z, slope)  # dL/dz, (chunk, H, C)
            if need_q:
                gq.index_add_(0, r, gkk)
        if need_k:
            gk.index_add_(0, c, gkk)
        if need_ek:
            gek[s:s + chunk] = gkk
    return gq, gk, gek, gatt


def edge_attention_autograd(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor],
                            edge_key: Optional[Tensor], edge_value: Optional[Tensor],
                            att: Optional[Tensor], csr: EdgeCSR, score: str, scale: float,
                            slope: float, keep: Optional[Tensor] = None, p_drop: float = 0.0) -> Tensor:
    """Edge attention in plain differentiable torch ops (per-edge tensors in CSR order).

    Materialises ``(E, H, C)`` messages, so it is only used to build the graph of a
    *second-order* backward (``create_graph=True``) of the chunked and fused paths, whose
    first-order backward passes are hand-written. ``keep`` is the ``(E, H)`` dropout mask.
    """
    row, col = csr.row, csr.col
    N, H = q.shape[:2]
    E = row.numel()
    kk = k[col]  # (E, H, C)
    if edge_key is not None:
        kk = kk + edge_key
    if score == "dot":
        s = (q[row] * kk).sum(-1) * scale  # (E, H)
    else:
        s = (F.leaky_relu(q[row] + kk, slope) * att).sum(-1)  # (E, H)
    if bias is not None:
        s = s + bias
    with torch.no_grad():  # the shift cancels in the softmax: a constant for autograd
        m = s.new_full((N, H), float("-inf")).scatter_reduce_(0, row[:, None].expand(E, H), s, "amax")
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    ex = (s - m[row]).exp()  # (E, H)
    denom = ex.new_zeros(N, H).index_add(0, row, ex)
    alpha = ex / denom.clamp_min(torch.finfo(ex.dtype).tiny)[row]
    if keep is not None:
        alpha = alpha * keep / (1.0 - p_drop)
    msg = v[col]  # (E, H, C')
    if edge_value is not None:
        msg = msg + edge_value
    return msg.new_zeros(N, H, v.size(-1)).index_add(0, row, msg * alpha[..., None])  # (N, H, C')


def input_aliases(inputs) -> Tuple[int, ...]:
    """For each input, the index of the first input that is the same tensor (``k is v``...)."""
    return tuple(next(j for j in range(i + 1) if inputs[j] is t) if t is not None else i
                 for i, t in enumerate(inputs))


def differentiable_grads(inputs, needs, grad_out: Tensor, recompute, aliases):
    """Gradients of ``recompute()`` w.r.t. the ``inputs`` flagged in ``needs``, themselves
    differentiable (``create_graph=True``): the double-backward route of the autograd
    Functions here and in :mod:`graphattn.kernels`. An input passed in several slots
    (``aliases`` from :func:`input_aliases`) gets its whole gradient in its first slot only
    (autograd sums the slots)."""
    want = [False] * len(inputs)
    for i, n in enumerate(needs):
        if n and inputs[i] is not None:
            want[aliases[i]] = True
    with torch.enable_grad():
        out = recompute()
    idx = [i for i, w in enumerate(want) if w]
    grads = [None] * len(inputs)
    if idx:
        got = torch.autograd.grad(out, [inputs[i] for i in idx], grad_out, create_graph=True,
                                  allow_unused=True)
        for i, g in zip(idx, got):
            grads[i] = g if g is not None else torch.zeros_like(inputs[i])
    return grads


class _ChunkedEdgeAttention(torch.autograd.Function):
    """Softmax attention over CSR-ordered edges, chunked, with a recomputing backward.

    Saved for backward: inputs and the ``(E, H)`` attention weights (and dropout mask);
    never the ``(E, H, C)`` messages. The first-order backward is hand-written and chunked;
    under ``create_graph=True`` it is rebuilt from :func:`edge_attention_autograd`, so second
    derivatives (gradient penalties) are exact, at the cost of ``(E, H, C)`` temporaries.
    """

    @staticmethod
    def forward(ctx, q, k, v, bias, edge_key, edge_value, att, csr: EdgeCSR, score: str,
                scale: float, slope: float, p_drop: float, chunk: int):
        row, col = csr.row, csr.col
        N, H, C = q.shape
        E = col.numel()
        scores = q.new_empty(E, H)
        for s in range(0, E, chunk):  # scores (E, H), chunk by chunk
            r, c = row[s:s + chunk], col[s:s + chunk]
            kk = k[c]  # (chunk, H, C)
            if edge_key is not None:
                kk = kk + edge_key[s:s + chunk]
            if score == "dot":
                scores[s:s + chunk] = (q[r] * kk).sum(-1) * scale
            else:
                scores[s:s + chunk] = (F.leaky_relu(q[r] + kk, slope) * att).sum(-1)
        if bias is not None:
            scores += bias
        # Stable segment softmax: subtract the per-target max; -inf-only rows give 0.
        rowmax = scores.new_full((N, H), float("-inf"))
        rowmax.scatter_reduce_(0, row[:, None].expand(E, H), scores, "amax")
        rowmax = torch.where(torch.isfinite(rowmax), rowmax, torch.zeros_like(rowmax))
        alpha = scores.sub_(rowmax[row]).exp_()  # (E, H), reuses the scores buffer
        denom = q.new_zeros(N, H).index_add_(0, row, alpha)
        alpha.div_(denom.clamp_min(torch.finfo(alpha.dtype).tiny)[row])
        keep = None
        alpha_used = alpha
        if p_drop > 0.0:
            keep = torch.rand_like(alpha) >= p_drop  # (E, H) bool
            alpha_used = alpha * keep / (1.0 - p_drop)
        out = q.new_zeros(N, H, v.size(-1))  # (N, H, C'): v may have other channels than q, k
        for s in range(0, E, chunk):
            r, c = row[s:s + chunk], col[s:s + chunk]
            msg = v[c]  # (chunk, H, C')
            if edge_value is not None:
                msg = msg + edge_value[s:s + chunk]
            out.index_add_(0, r, msg * alpha_used[s:s + chunk, :, None])
        ctx.save_for_backward(q, k, v, bias, edge_key, edge_value, att, alpha, keep)
        ctx.csr, ctx.score, ctx.scale, ctx.slope, ctx.p_drop, ctx.chunk = csr, score, scale, slope, p_drop, chunk
        ctx.shared = edge_key is not None and edge_value is edge_key
        ctx.aliases = input_aliases((q, k, v, bias, edge_key, edge_value, att))
        ctx.mark_non_differentiable(alpha)
        return out, alpha

    @staticmethod
    def backward(ctx, grad_out, _grad_alpha):
        q, k, v, bias, edge_key, edge_value, att, alpha, keep = ctx.saved_tensors
        row, chunk, score = ctx.csr.row, ctx.chunk, ctx.score
        need_q, need_k, need_v, need_b, need_ek, need_ev, need_att = ctx.needs_input_grad[:7]
        if torch.is_grad_enabled():  # create_graph=True: differentiable recomputation
            ev = edge_key if ctx.shared else edge_value
            grads = differentiable_grads(
                (q, k, v, bias, edge_key, edge_value, att), ctx.needs_input_grad[:7], grad_out,
                lambda: edge_attention_autograd(q, k, v, bias, edge_key, ev, att, ctx.csr, score,
                                                ctx.scale, ctx.slope, keep, ctx.p_drop),
                ctx.aliases)
            return (*grads, None, None, None, None, None, None)
        grad_out = grad_out.contiguous()
        alpha_used = alpha if keep is None else alpha * keep / (1.0 - ctx.p_drop)
        g_alpha, gv, gev = aggregate_backward(grad_out, alpha_used, v, edge_value, ctx.csr, chunk,
                                              (True, need_v, need_ev))  # g_alpha = dL/d alpha_used
        if keep is not None:
            g_alpha = g_alpha * keep / (1.0 - ctx.p_drop)
        # Softmax backward: gs = α (gα − Σ_j α gα).
        dot = q.new_zeros(q.size(0), alpha.size(1)).index_add_(0, row, alpha * g_alpha)  # (N, H)
        gs = alpha * (g_alpha - dot[row])  # (E, H)
        gq, gk, gek, gatt = score_backward(gs, q, k, edge_key, att, ctx.csr, score, ctx.scale, ctx.slope,
                                           chunk, (need_q, need_k, need_ek, need_att))
        gb = gs if need_b else None
        return gq, gk, gv, gb, gek, gev, gatt, None, None, None, None, None, None


def check_finite(t: Optional[Tensor], name: str, allow_neg_inf: bool = False) -> None:
    """Raise ``ValueError`` naming ``name`` if ``t`` holds NaN or inf (``-inf`` kept when
    ``allow_neg_inf``: a masked score). One ``aminmax`` reduction (NaN propagates into it)."""
    if t is None or t.numel() == 0 or not t.is_floating_point():
        return
    lo, hi = torch.aminmax(t.detach())
    if allow_neg_inf:  # NaN shows in both; +inf only in hi (an all -inf tensor is fine)
        ok = ~torch.isnan(lo) & (hi != float("inf"))
    else:
        ok = torch.isfinite(lo) & torch.isfinite(hi)
    if not bool(ok):
        bad = torch.isnan(t) | (t == float("inf")) if allow_neg_inf else ~torch.isfinite(t)
        what = "NaN or +inf" if allow_neg_inf else "NaN or inf"
        raise ValueError(f"{name} contains {what} values ({int(bad.sum())} of {t.numel()} entries)")


def _fused_ready() -> bool:
    from . import kernels

    return kernels.fused_available()


def _chunk_edges(num_heads: int, channels: int, itemsize: int) -> int:
    return max(256, CHUNK_BYTES // max(1, num_heads * channels * itemsize))


def edge_attention(q: Tensor, k: Tensor, v: Tensor, edge_index: Optional[Tensor] = None, *,
                   bias: Optional[Tensor] = None, edge_key: Optional[Tensor] = None,
                   edge_value: Optional[Tensor] = None, score: str = "dot",
                   att: Optional[Tensor] = None, negative_slope: float = 0.2,
                   dropout: float = 0.0, training: bool = True,
                   return_attention_weights: bool = False, csr: Optional[EdgeCSR] = None,
                   batch: Optional[Tensor] = None,
                   impl: str = "auto") -> Union[Tensor, Tuple[Tensor, Tensor]]:
    r"""Multi-head attention restricted to the edges of a graph.

    For every target node i, a softmax over its incoming edges j -> i only::

        dot:       s_e = q_i · (k_j + ek_e) / √C + b_e
        additive:  s_e = Σ_c att_hc · LeakyReLU(q_i + k_j + ek_e)_c + b_e   (GATv2 form)
        out_i = Σ_{e = (j -> i)} α_e (v_j + ev_e),    α = softmax of s over i's incoming edges

    Args:
        q, k, v: ``(N, H, C)`` queries (target side) and keys, ``(N, H, C')`` values (source
            side; ``C'`` may differ from ``C``, e.g. wider values).
        edge_index: ``(2, E)`` source/target indices (may be omitted when ``csr`` is given).
        bias: optional ``(E, H)`` additive score bias per edge (original edge order);
            ``-inf`` hides that edge (a target whose edges are all hidden gets zeros).
        edge_key / edge_value: optional ``(E, H, C)`` / ``(E, H, C')`` per-edge additions to
            the key / value of that edge only (e.g. projected edge features).
        score: ``"dot"`` (scaled dot product, default) or ``"additive"`` (needs ``att``).
        att: ``(H, C)`` attention vector for ``score="additive"``.
        dropout: probability of dropping an attention weight (when ``training``).
        return_attention_weights: also return ``alpha`` ``(E, H)`` in the original edge order
            (before dropout). ``alpha`` is detached on every path (``requires_grad`` is
            False, unlike PyG's): a loss term on it gets no gradient; use ``out``.
        csr: a precomputed :class:`~graphattn.csr.EdgeCSR`; by default it is computed from
            ``edge_index`` once and cached for that tensor.
        batch: optional ``(N,)`` sorted graph id per node. Only used to detect batches of
            fully-connected graphs, which then run through SDPA (``None`` = one graph).
        impl: ``"auto"`` (SDPA for complete graphs without bias / edge features, else the
            fused C++ kernel for ``score="dot"`` on CPU float32/float64 without active dropout,
            else chunked), ``"dense"``, ``"fused"`` or ``"chunked"``. Under
            ``torch.compile`` the fused kernel runs eagerly behind a graph break
            (``torch.compiler.disable``); the other paths are traced.

    Returns:
        ``out`` ``(N, H, C')``, or ``(out, alpha)``. Nodes without incoming edges get zeros.
        float16/bfloat16 inputs are computed in float32 and returned in their dtype.

    Raises:
        ValueError: for bad shapes, and when ``q``, ``k``, ``v``, ``edge_key``,
            ``edge_value`` or ``att`` hold NaN/inf or ``bias`` holds NaN/+inf (one ``aminmax``
            per tensor): the fused kernel would zero a NaN row and the chunked path return
            NaN, so neither is allowed to happen silently.

    Gradients: first-order backward passes are hand-written (no ``(E, H, C)`` storage);
    second-order ones (``create_graph=True``, e.g. gradient penalties) are exact on the
    chunked and fused paths (their backward then rebuilds a differentiable graph with
    ``(E, H, C)`` temporaries). The SDPA path (``impl="dense"``, or ``"auto"`` on complete
    graphs) raises on double backward on CPU (PyTorch's flash kernel has no second
    derivative): pass ``impl="fused"`` or ``"chunked"`` there.
    """
    if impl not in EDGE_IMPLS:
        raise ValueError(f"impl must be one of {EDGE_IMPLS}, got {impl!r}")
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    check_tensor_shape(q, (None, None, None), "q")
    N, H, C = q.shape
    check_tensor_shape(k, (N, H, C), "k")
    check_tensor_shape(v, (N, H, None), "v")
    if csr is None:
        if edge_index is None:
            raise ValueError("edge_attention needs edge_index or csr")
        check_edge_index(edge_index, N, check_range=False)
        csr = to_csr(edge_index, N)  # range-checked when built, then cached
    elif csr.num_nodes != N:
        raise ValueError(f"csr has {csr.num_nodes} nodes but q has {N}")
    E = csr.num_edges
    if bias is not None:
        check_tensor_shape(bias, (E, H), "bias")
    for name, t in (("edge_key", edge_key), ("edge_value", edge_value)):
        if t is not None:
            check_tensor_shape(t, (E, H, C if name == "edge_key" else v.size(-1)), name)
    if score == "additive":
        if att is None:
            raise ValueError("score='additive' needs att of shape (H, C)")
        check_tensor_shape(att, (H, C), "att")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    for name, t in (("q", q), ("k", k), ("v", v), ("edge_key", edge_key), ("att", att)):
        check_finite(t, name)
    if edge_value is not edge_key:
        check_finite(edge_value, "edge_value")
    check_finite(bias, "bias", allow_neg_inf=True)
    p_drop = dropout if training else 0.0

    dtype = q.dtype
    shared_kv = edge_value is not None and edge_value is edge_key  # one tensor, one gradient
    if dtype in (torch.float16, torch.bfloat16):  # compute in float32, return in input dtype
        up = lambda t: None if t is None else t.float()  # noqa: E731
        q, k, v, bias, edge_key, att = map(up, (q, k, v, bias, edge_key, att))
        edge_value = edge_key if shared_kv else up(edge_value)

    plain = score == "dot" and edge_key is None and edge_value is None and not return_attention_weights
    # The fused kernel takes bias / edge_key / edge_value and returns weights in the caller's
    # edge order (it reads through csr.perm): no permuted per-edge copies on this path.
    fusable = (score == "dot" and p_drop == 0.0 and q.device.type == "cpu"
               and q.dtype in (torch.float32, torch.float64))
    if impl in ("auto", "dense") and plain and bias is None:
        sizes = complete_graph_sizes(csr, batch)
        # Complete graphs go to SDPA unless padding them would waste more than the fused
        # kernel costs (measured rule: dense.prefer_dense, benchmarks/crossover.py).
        if sizes is not None and (impl == "dense" or not fusable or prefer_dense(sizes)
                                  or not _fused_ready()):
            return sdpa_attention(q, k, v, sizes, dropout=p_drop).to(dtype)
    if impl == "dense":
        raise ValueError("impl='dense' needs every graph complete (all pairs incl. self-loops, "
                         "given batch), score='dot', no bias, edge features or returned weights")
    if impl == "fused" and not fusable:
        raise ValueError("impl='fused' supports only score='dot' on CPU float32/float64 with "
                         "no (active) dropout")
    if impl != "chunked" and fusable:
        from . import kernels

        if kernels.fused_available():
            res = kernels.fused_edge_attention(
                q, k, v, csr, bias=bias, scale=1.0 / math.sqrt(C), edge_key=edge_key,
                edge_value=edge_value, return_attention_weights=return_attention_weights,
                edge_order="input")
            if return_attention_weights:
                return res[0].to(dtype), res[1].to(dtype)
            return res.to(dtype)
        if impl == "fused":
            raise RuntimeError("impl='fused' requested but the C++ kernel could not be built")

    perm = csr.perm  # the chunked path works on CSR-ordered per-edge tensors
    if bias is not None:
        bias = bias[perm]
    if edge_key is not None:
        edge_key = edge_key[perm]
    if edge_value is not None:
        edge_value = edge_key if shared_kv else edge_value[perm]
    chunk = _chunk_edges(H, max(C, v.size(-1)), q.element_size())
    out, alpha = _ChunkedEdgeAttention.apply(
        q.contiguous(), k.contiguous(), v.contiguous(), bias, edge_key, edge_value, att, csr,
        score, 1.0 / math.sqrt(C), negative_slope, p_drop, chunk)
    out = out.to(dtype)
    if not return_attention_weights:
        return out
    alpha_orig = torch.empty_like(alpha)
    alpha_orig[perm] = alpha  # back to the caller's edge order
    return out, alpha_orig.to(dtype)

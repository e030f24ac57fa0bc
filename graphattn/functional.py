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
(:mod:`graphattn.ops.fused_cpp`) is used when it can be built, on CUDA (float32) fused Triton kernels
(:mod:`graphattn.ops.fused_triton`) when triton is installed; the chunked pure-PyTorch path
(:mod:`graphattn.ops.chunked`) is the portable fallback. Every path is tested against :func:`dense_attention`.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from graphattn.ops import extension, fused_triton
from graphattn.ops.chunked import ChunkedEdgeAttention, check_edge_attention_args, chunk_edges
from graphattn.ops.csr import EdgeCSR
from graphattn.ops.dispatch import fast_path, fused_kind
from graphattn.utils.validation import check_bias_dtype, check_tensor_shape, scans_values

__all__ = ["dense_attention", "edge_attention", "edge_attention_prechecked", "EDGE_IMPLS"]

#: The backends :func:`edge_attention` can be asked for (``impl=``).
EDGE_IMPLS = ("auto", "dense", "fused", "chunked")


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
    _check_float("q", q, "k", k, "v", v)
    check_tensor_shape(q, (None, None, None, None), "q")
    B, H, N, C = q.shape
    check_tensor_shape(k, (B, H, None, C), "k")
    M = k.size(2)
    check_tensor_shape(v, (B, H, M, None), "v")
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (B, N, M) (True = visible), got "
                        f"{mask.dtype if isinstance(mask, Tensor) else type(mask).__name__}")
    check_tensor_shape(mask, (B, N, M), "mask")
    if bias is not None:
        check_bias_dtype(bias, "bias")
    check_all_finite([("q", q, False), ("k", k, False), ("v", v, False), ("bias", bias, True)])
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


def _check_float(*named) -> None:
    """``TypeError`` unless every tensor of the ``name, tensor, ...`` pairs is floating point
    (integer queries/keys/values would fail deep inside with an overflow message)."""
    for name, t in zip(named[::2], named[1::2]):
        if isinstance(t, Tensor) and not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")


def _finite_flag(t: Tensor, allow_neg_inf: bool) -> Tensor:
    """0-d bool tensor, True iff ``t`` is free of NaN/inf (``-inf`` allowed with
    ``allow_neg_inf``). One ``aminmax`` pass (NaN propagates into it), no device sync."""
    lo, hi = torch.aminmax(t.detach())
    if allow_neg_inf:  # NaN shows in both; +inf only in hi (an all -inf tensor is fine)
        return ~torch.isnan(lo) & (hi != float("inf"))
    return torch.isfinite(lo) & torch.isfinite(hi)


def check_all_finite(items: Sequence[Tuple[str, Optional[Tensor], bool]]) -> None:
    """Raise ``ValueError`` naming the first tensor of ``items`` that holds NaN or inf.

    ``items``: ``(name, tensor or None, allow_neg_inf)`` triples (``allow_neg_inf``: ``-inf``
    is fine, e.g. a masked score). One ``aminmax`` pass per tensor and a single blocking
    ``bool()`` for all of them; the per-tensor counts are computed only when one fails.
    Only tensors :func:`~graphattn.utils.validation.scans_values` picks are scanned: CPU tensors,
    any device under ``torch.autograd.set_detect_anomaly(True)``, nothing under ``torch.compile``
    (so a CUDA forward or backward never waits on this check).
    """
    live = [(n, t, neg) for n, t, neg in items
            if t is not None and t.numel() > 0 and t.is_floating_point() and scans_values(t)]
    if not live:
        return
    flags = [_finite_flag(t, neg) for _, t, neg in live]
    ok = flags[0] if len(flags) == 1 else torch.stack([f.to(flags[0].device) for f in flags]).all()
    if bool(ok):  # the only sync on the success path
        return
    for (name, t, neg), flag in zip(live, flags):
        if not bool(flag):
            bad = torch.isnan(t) | (t == float("inf")) if neg else ~torch.isfinite(t)
            what = "NaN or +inf" if neg else "NaN or inf"
            raise ValueError(f"{name} contains {what} values ({int(bad.sum())} of {t.numel()} entries)")


def _native_half(q: Tensor, score: str, p_drop: float, return_weights: bool, impl: str) -> bool:
    """Whether a float16/bfloat16 call runs in its dtype: on a fused kernel that is available
    (float32 accumulation inside; complete graphs may take SDPA, which does the same); the
    chunked path computes in float32 instead."""
    if impl not in ("auto", "fused"):
        return False
    kind = fused_kind(q.device.type, q.dtype, score, p_drop, return_weights)
    if kind == "cpp":
        return extension.fused_available()
    return kind == "triton" and fused_triton.triton_available(q.device)


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
        csr: a precomputed :class:`~graphattn.ops.csr.EdgeCSR`; by default it is computed from
            ``edge_index`` once and cached for that tensor.
        batch: optional ``(N,)`` sorted graph id per node. Only used to detect batches of
            fully-connected graphs, which then run through SDPA (``None`` = one graph).
        impl: ``"auto"`` (SDPA for complete graphs without bias / edge features, else the
            fused C++ kernel for ``score="dot"`` on CPU (float32/64, float16, bfloat16) without
            active dropout, the fused Triton kernels for the same on CUDA (float32, float16,
            bfloat16) without returned weights,
            else chunked; on CUDA complete graphs always take SDPA), ``"dense"``, ``"fused"`` or
            ``"chunked"``. ``torch.compile`` traces every path; the fused kernels are custom ops
            (``graphattn::fused_attention_fwd``, ``graphattn::triton_attention_fwd``), and traced
            ``"auto"`` calls skip the complete-graph test (it reads the graph): they take the edge
            kernels, with the same result.

    Returns:
        ``out`` ``(N, H, C')``, or ``(out, alpha)``. Nodes without incoming edges get zeros.
        float16/bfloat16 inputs run in their dtype on the fused kernels and SDPA (float32
        accumulation and softmax statistics inside; ``bias`` and edge features are cast to the
        dtype of ``q``); on the chunked path they are computed in float32. Either way the
        result is in their dtype.

    Raises:
        ValueError: for bad shapes, and when ``q``, ``k``, ``v``, ``edge_key``,
            ``edge_value`` or ``att`` hold NaN/inf or ``bias`` holds NaN/+inf (one ``aminmax``
            per tensor; on CPU tensors, on CUDA only under ``torch.autograd.set_detect_anomaly``
            (it would be a device sync per call), never under ``torch.compile``): the fused
            kernel would zero a NaN row and the chunked path return NaN, so neither is allowed
            to happen silently. (:func:`edge_attention_prechecked` skips these value checks:
            internal callers such as :class:`~graphattn.nn.attention.GraphSelfAttention`, which
            check their own inputs once, use it.)

    Gradients: first-order backward passes are hand-written (no ``(E, H, C)`` storage);
    second-order ones (``create_graph=True``, e.g. gradient penalties) are exact on the
    chunked and fused paths (their backward then rebuilds a differentiable graph with
    ``(E, H, C)`` temporaries). The SDPA path (``impl="dense"``, or ``"auto"`` on complete
    graphs) raises on double backward on CPU (PyTorch's flash kernel has no second
    derivative): pass ``impl="fused"`` or ``"chunked"`` there.

    Example::

        >>> import torch
        >>> from graphattn import edge_attention
        >>> q, k, v = torch.randn(3, 3, 2, 4).unbind(0)               # (N, H, C) each, N = 3
        >>> edge_index = torch.tensor([[0, 1, 2, 0], [1, 2, 0, 2]])   # node 2 attends to 1 and 0
        >>> out, alpha = edge_attention(q, k, v, edge_index, return_attention_weights=True)
        >>> out.shape, alpha.shape
        (torch.Size([3, 2, 4]), torch.Size([4, 2]))
        >>> bool(torch.allclose(alpha[1] + alpha[3], torch.ones(2)))  # node 2's weights sum to 1
        True
    """
    return _edge_attention(q, k, v, edge_index, bias=bias, edge_key=edge_key, edge_value=edge_value, score=score,
                           att=att, negative_slope=negative_slope, dropout=dropout, training=training,
                           return_attention_weights=return_attention_weights, csr=csr, batch=batch, impl=impl,
                           check_values=True)


def edge_attention_prechecked(q: Tensor, k: Tensor, v: Tensor, edge_index: Optional[Tensor] = None,
                              **kwargs) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """:func:`edge_attention` (the same keyword arguments) without its NaN / inf scan of the values,
    for callers whose inputs derive from tensors they have checked already (the layers check ``x``
    and ``edge_attr`` once; a second scan of ``q``, ``k``, ``v`` would cost a pass and a host read)."""
    return _edge_attention(q, k, v, edge_index, check_values=False, **kwargs)


def _edge_attention(q: Tensor, k: Tensor, v: Tensor, edge_index: Optional[Tensor] = None, *,
                    bias: Optional[Tensor] = None, edge_key: Optional[Tensor] = None,
                    edge_value: Optional[Tensor] = None, score: str = "dot", att: Optional[Tensor] = None,
                    negative_slope: float = 0.2, dropout: float = 0.0, training: bool = True,
                    return_attention_weights: bool = False, csr: Optional[EdgeCSR] = None,
                    batch: Optional[Tensor] = None, impl: str = "auto",
                    check_values: bool = True) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    csr = _checked_csr(q, k, v, edge_index, csr, batch, bias, edge_key, edge_value, score, att, dropout, impl,
                       check_values=check_values)
    p_drop = dropout if training else 0.0
    dtype = q.dtype
    shared_kv = edge_value is not None and edge_value is edge_key  # one tensor, one gradient
    if dtype in (torch.float16, torch.bfloat16) and not _native_half(q, score, p_drop, return_attention_weights,
                                                                     impl):  # compute in float32
        up = lambda t: None if t is None else t.float()  # noqa: E731
        q, k, v, bias, edge_key, att = map(up, (q, k, v, bias, edge_key, att))
        edge_value = edge_key if shared_kv else up(edge_value)
    res = fast_path(q, k, v, csr, batch, bias, edge_key, edge_value, score, p_drop, return_attention_weights, impl)
    if res is None:
        res = _chunked_path(q, k, v, csr, bias, edge_key, edge_value, att, score, negative_slope, p_drop,
                            return_attention_weights)
    if return_attention_weights:
        return res[0].to(dtype), res[1].to(dtype)
    return res.to(dtype)


def _checked_csr(q: Tensor, k: Tensor, v: Tensor, edge_index: Optional[Tensor], csr: Optional[EdgeCSR],
                 batch: Optional[Tensor], bias: Optional[Tensor], edge_key: Optional[Tensor],
                 edge_value: Optional[Tensor], score: str, att: Optional[Tensor], dropout: float, impl: str,
                 check_values: bool) -> EdgeCSR:
    """Check the arguments of :func:`edge_attention` (``ValueError`` / ``TypeError`` naming the
    bad one; NaN/inf values too with ``check_values``) and return the graph's CSR view (built
    from ``edge_index`` and cached when ``csr`` is None)."""
    if impl not in EDGE_IMPLS:
        raise ValueError(f"impl must be one of {EDGE_IMPLS}, got {impl!r}")
    _check_float("q", q, "k", k, "v", v)
    csr = check_edge_attention_args(q, k, v, edge_index, csr, batch=batch, bias=bias, edge_key=edge_key,
                                    edge_value=edge_value, score=score, att=att, dropout=dropout,
                                    what="edge_attention", check_range=False)
    if check_values:  # edge_attention_prechecked: q, k, v, ... derive from inputs checked already
        check_all_finite([("q", q, False), ("k", k, False), ("v", v, False), ("edge_key", edge_key, False),
                          ("edge_value", None if edge_value is edge_key else edge_value, False),
                          ("att", att, False), ("bias", bias, True)])
    return csr


def _chunked_path(q: Tensor, k: Tensor, v: Tensor, csr: EdgeCSR, bias: Optional[Tensor],
                  edge_key: Optional[Tensor], edge_value: Optional[Tensor], att: Optional[Tensor], score: str,
                  negative_slope: float, p_drop: float, return_weights: bool):
    """The portable path, :class:`~graphattn.ops.chunked.ChunkedEdgeAttention` on CSR-ordered
    per-edge tensors: ``out``, or ``(out, alpha)`` with ``alpha`` back in the caller's edge order."""
    H, C = q.shape[1:]
    perm = csr.perm  # the chunked path works on CSR-ordered per-edge tensors
    shared_kv = edge_value is not None and edge_value is edge_key
    if bias is not None:
        bias = bias[perm]
    if edge_key is not None:
        edge_key = edge_key[perm]
    if edge_value is not None:
        edge_value = edge_key if shared_kv else edge_value[perm]
    chunk = chunk_edges(H, max(C, v.size(-1)), q.element_size())
    out, alpha = ChunkedEdgeAttention.apply(
        q.contiguous(), k.contiguous(), v.contiguous(), bias, edge_key, edge_value, att, csr,
        score, 1.0 / math.sqrt(C), negative_slope, p_drop, chunk)
    if not return_weights:
        return out
    alpha_orig = torch.empty_like(alpha)
    alpha_orig[perm] = alpha  # back to the caller's edge order
    return out, alpha_orig

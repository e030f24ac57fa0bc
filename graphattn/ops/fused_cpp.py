"""Fused C++ CPU kernel for edge-restricted attention, built on first use and cached.

``fused_edge_attention(q, k, v, csr, bias, scale, edge_key=, edge_value=)`` computes, for every
target node i and head h, ``sum_e softmax_e(scale * q[i,h]·(k[j,h] + ek[e,h]) + bias[e,h]) *
(v[j,h] + ev[e,h])`` over the incoming edges ``e = (j -> i)`` of ``csr`` in a single
OpenMP-parallel sweep per target row (per-head max subtracted, so huge logits stay finite),
and its backward without any per-edge ``(E, H, C)`` tensor except the gradients of the edge
key/value themselves (and, when the value width differs from the key width, zero-padded
copies of the given edge key/value): only the per-(node, head) log-sum-exp is saved; the backward
recomputes the scores, computes grad q (and the per-edge gradients) in a target-major pass
and grad k / grad v in a source-major pass over a compact int32 CSC copy (race-free, no
atomics). Per-edge tensors may be given in the caller's edge order (``edge_order="input"``):
the kernel reads them through ``csr.perm`` instead of permuting copies.

The extension is built and loaded by :mod:`graphattn.ops.extension`
(:func:`~graphattn.ops.extension.fused_available`).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from graphattn.ops import extension
from graphattn.ops.chunked import differentiable_backward, input_aliases
from graphattn.ops.csr import EdgeCSR

__all__ = ["fused_edge_attention", "set_pds_budget", "csc_arrays"]

_EMPTY = torch.empty(0)
EDGE_ORDERS = ("csr", "input")


def csc_arrays(csr: EdgeCSR):
    """Compact source-major copy of ``csr`` for the grad k / grad v pass, cached on ``csr``.

    ``(cptr (N+1,) int64, cperm (E,), ctgt (E,))`` with int32 ``cperm``/``ctgt`` when N and E
    fit (a third of the bytes of :attr:`EdgeCSR.csc`), built by a counting sort in C++.
    """
    cached = csr.__dict__.get("_fused_csc")
    if cached is None:
        cached = tuple(extension.ops().build_csc(csr.rowptr, csr.col))
        object.__setattr__(csr, "_fused_csc", cached)  # EdgeCSR is frozen; same as csr.csc
    return cached


class _FusedEdgeAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, edge_key, edge_value, csr, eid, scale, shared, need_weights):
        ev = edge_key if shared else edge_value
        out, lse, weights = extension.ops().forward(q, k, v, bias, edge_key, ev, eid, csr.rowptr, csr.col,
                                         scale, need_weights)
        # `out` is not saved: backward gets dout . out from the recomputed weights.
        ctx.save_for_backward(q, k, v, bias, edge_key, edge_value, lse)
        ctx.csr, ctx.eid, ctx.scale, ctx.shared = csr, eid, scale, shared
        ctx.aliases = input_aliases((q, k, v, bias, edge_key, edge_value))
        ctx.mark_non_differentiable(weights)
        return out, weights

    @staticmethod
    def backward(ctx, dout, _grad_weights):
        q, k, v, bias, edge_key, edge_value, lse = ctx.saved_tensors
        need_q, need_k, need_v, need_b, need_ek, need_ev = ctx.needs_input_grad[:6]
        nothing = (None,) * 5
        if not (need_q or need_k or need_v or need_b or need_ek or need_ev):
            return (None,) * 6 + nothing
        csr: EdgeCSR = ctx.csr
        if torch.is_grad_enabled():  # create_graph=True: a differentiable backward (exact 2nd order)
            return tuple(differentiable_backward(ctx, q, k, v, bias, edge_key, edge_value, dout)) + nothing
        need_kv = bool(need_k or need_v)
        cptr, cperm, ctgt = csc_arrays(csr) if need_kv else (_EMPTY.long(),) * 3
        dout = dout.to(q.dtype).contiguous()
        ev = edge_key if ctx.shared else edge_value
        gq, gk, gv, gb, gek, gev = extension.ops().backward(
            q, k, v, bias, edge_key, ev, ctx.eid, csr.rowptr, csr.col, cptr, cperm, ctgt, lse,
            dout, ctx.scale, bool(need_q), need_kv, bool(need_b), bool(need_ek), bool(need_ev),
            ctx.shared)
        pick = lambda need, g: g if need else None  # noqa: E731
        return (pick(need_q, gq), pick(need_k, gk), pick(need_v, gv), pick(need_b, gb),
                pick(need_ek, gek), pick(need_ev, gev)) + nothing


def set_pds_budget(elements: int) -> int:
    """Largest ``(E, 2H)`` buffer of softmax weights and score gradients (in elements) the
    backward pass keeps for graphs without edge features; returns the previous budget.

    Within it (default ``2**26``, 256 MB in float32) backward stores them in its first pass
    and its second (source-major) pass reads them: 6-21 % less backward time measured on
    40k-2M-edge graphs (idle machine, 1 thread; a layer's forward + backward 3-9 %). Above it, the second pass recomputes them from the per-node
    log-sum-exp, so the memory stays O(N) as for the 20M-edge graphs of the benchmarks.
    Both give bitwise-equal gradients; ``0`` forces recomputation (tests use it).
    """
    if not extension.fused_available():
        raise RuntimeError("graphattn fused C++ kernel is unavailable")
    return int(extension.ops().set_pds_budget(int(elements)))


def _edge_tensor(t: Optional[Tensor], shape, name: str, dtype) -> Optional[Tensor]:
    if t is None:
        return None
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}; got {tuple(t.shape)}")
    if t.device.type != "cpu":
        raise ValueError(f"{name} must be a CPU tensor")
    return t.to(dtype).contiguous()


def fused_edge_attention(q: Tensor, k: Tensor, v: Tensor, csr: EdgeCSR,
                         bias: Optional[Tensor] = None, scale: Optional[float] = None, *,
                         edge_key: Optional[Tensor] = None, edge_value: Optional[Tensor] = None,
                         return_attention_weights: bool = False, edge_order: str = "csr"):
    """Edge-restricted multi-head attention with the fused C++ kernel.

    ``s_e = scale · q_i·(k_j + edge_key_e) + bias_e``, ``out_i = Σ_e softmax_e(s) (v_j + edge_value_e)``
    over the incoming edges ``e = (j -> i)`` of ``csr``.

    Args:
        q, k, v: ``(N, H, C)`` queries and keys, ``(N, H, C')`` values: CPU float32/float64
            tensors (same dtype). With ``C' != C`` the narrower side is zero-padded for the
            kernel (same result, the output is ``(N, H, C')``).
        csr: :class:`~graphattn.ops.csr.EdgeCSR` of the graph (targets = rows, sources = ``col``).
        bias: optional ``(E, H)`` additive score bias.
        scale: score scale, default ``1 / sqrt(C)``.
        edge_key, edge_value: optional ``(E, H, C)`` / ``(E, H, C')`` per-edge additions to
            the key / value of that edge; may be the same tensor (one gradient, the sum of
            both roles).
        return_attention_weights: also return the softmax weights ``(E, H)``
            (detached: not differentiable).
        edge_order: order of every per-edge tensor (inputs, returned weights and gradients):
            ``"csr"`` (CSR positions, default) or ``"input"`` (the order of the ``edge_index``
            ``csr`` was built from; the kernel reads through ``csr.perm``, so no permuted copy
            is made).

    Returns ``out`` ``(N, H, C)`` (a node with no incoming edge gets exactly 0), or
    ``(out, weights)``. Differentiable w.r.t. ``q, k, v, bias, edge_key, edge_value``. With
    ``C' == C`` no ``(E, H, C)`` tensor is allocated apart from the gradients of
    ``edge_key``/``edge_value``; with ``C' != C`` the given ``edge_key``/``edge_value`` are
    first copied zero-padded to ``(E, H, max(C, C'))`` (one copy per distinct tensor),
    and their gradients have that width before being cut back.
    Second derivatives (``create_graph=True``) are exact: that backward is rebuilt from plain
    torch ops (with ``(E, H, C)`` temporaries) instead of the C++ one. Under
    ``torch.compile`` this function is not traced (``torch.compiler.disable``): it runs
    eagerly behind a graph break. Call :func:`graphattn.ops.extension.fused_available` first.
    """
    if torch.compiler.is_compiling():  # opaque C++ op: run eagerly behind a graph break
        return _fused_untraced(q, k, v, csr, bias, scale, edge_key=edge_key, edge_value=edge_value,
                               return_attention_weights=return_attention_weights, edge_order=edge_order)
    if not extension.fused_available():
        raise RuntimeError("graphattn fused C++ kernel is unavailable"
                           + (f" ({extension.build_error()})" if extension.build_error() else ""))
    if edge_order not in EDGE_ORDERS:
        raise ValueError(f"edge_order must be one of {EDGE_ORDERS}, got {edge_order!r}")
    if q.dim() != 3 or k.shape != q.shape or v.dim() != 3 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"q, k must be (N, H, C) and v (N, H, C'); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if q.device.type != "cpu" or k.device.type != "cpu" or v.device.type != "cpu":
        raise ValueError("fused_edge_attention runs on CPU tensors only")
    if q.dtype not in (torch.float32, torch.float64) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"fused_edge_attention needs float32/float64 q, k, v of one dtype; "
                        f"got {q.dtype}, {k.dtype}, {v.dtype}")
    N, H, C = q.shape
    Cv = v.size(-1)
    if csr.num_nodes != N or csr.rowptr.numel() != N + 1:
        raise ValueError(f"csr has {csr.num_nodes} nodes but q has {N}")
    E = csr.num_edges
    shared = edge_key is not None and edge_value is edge_key
    bias = _edge_tensor(bias, (E, H), "bias", q.dtype)
    edge_key = _edge_tensor(edge_key, (E, H, C), "edge_key", q.dtype)
    edge_value = None if shared else _edge_tensor(edge_value, (E, H, Cv), "edge_value", q.dtype)
    if scale is None:
        scale = 1.0 / math.sqrt(C) if C > 0 else 1.0
    if Cv != C:  # the kernel needs one C: zero channels change no dot product nor any value
        D = max(C, Cv)
        pad = lambda t: None if t is None else F.pad(t, (0, D - t.size(-1)))  # noqa: E731
        q, k, v, edge_key, edge_value = map(pad, (q, k, v, edge_key, edge_value))
    eid = csr.perm.contiguous() if edge_order == "input" else None
    out, weights = _FusedEdgeAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), bias,
                                             edge_key, edge_value, csr, eid, float(scale), shared,
                                             bool(return_attention_weights))
    if Cv != out.size(-1):
        out = out[..., :Cv]  # (N, H, C')
    return (out, weights) if return_attention_weights else out


# The same function hidden from torch.compile: traced calls take this route (a graph break
# around the opaque C++ op, which has no fake-tensor implementation); eager calls skip it.
_fused_untraced = torch.compiler.disable(fused_edge_attention)

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
(:func:`~graphattn.ops.extension.fused_available`). Its forward and backward are registered as
the custom ops ``graphattn::fused_attention_fwd`` / ``graphattn::fused_attention_bwd`` (and the
CSC build as ``graphattn::build_csc``) with fake implementations and an autograd formula, so
``torch.compile(model, fullgraph=True)`` traces through them.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.fx.experimental.symbolic_shapes import guard_or_true

from graphattn.ops import extension
from graphattn.ops.chunked import differentiable_backward, eager_function, fake_gradients, input_aliases
from graphattn.ops.csr import EdgeCSR

__all__ = ["DTYPES", "lse_dtype", "fused_edge_attention", "set_pds_budget", "csc_arrays", "fused_attention_fwd",
           "fused_attention_bwd", "build_csc", "csc_index_small"]

EDGE_ORDERS = ("csr", "input")
#: dtypes the kernel computes in: float16/bfloat16 load and store in their dtype and accumulate
#: (dot products, softmax, gradient sums) in float32; the saved log-sum-exp is float32 for them
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_INT32_MAX = 2**31 - 1


# ---------------------------------------------------------------------------- custom ops
# The C++ kernels as torch.library custom ops: opaque to torch.compile (which traces through
# them with the fake implementations below: output shapes from input sizes, no data read) and
# differentiable through register_autograd. Every argument is a tensor or a scalar; the
# EdgeCSR object is passed as its arrays (rowptr, col; eid = csr.perm for per-edge tensors in
# input order; the CSC arrays of csc_arrays, None to build them in the backward). Eager calls
# take the same functions through an autograd.Function (_FusedEdgeAttention), which is cheaper.

def _kernel():
    """The extension's operators, built or loaded first if this process has not yet (a compiled
    graph may call the ops before anything else asked for the kernel)."""
    if not extension.fused_available():
        raise RuntimeError("graphattn fused C++ kernel is unavailable"
                           + (f" ({extension.build_error()})" if extension.build_error() else ""))
    return extension.ops()


def _build_csc(rowptr: Tensor, col: Tensor, small: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """``(cptr (N+1,) int64, cperm (E,), ctgt (E,))``: the CSR ``rowptr``/``col`` sorted by source
    (counting sort in C++); ``cperm``/``ctgt`` int32 with ``small`` (N and E must fit), else
    int64. :func:`csc_index_small` gives ``small``."""
    cptr, cperm, ctgt = _kernel().build_csc(rowptr, col)
    if small != (cperm.dtype == torch.int32):
        if small:
            raise RuntimeError(f"build_csc: {col.numel()} edges do not fit int32 indices")
        cperm, ctgt = cperm.long(), ctgt.long()
    return cptr, cperm, ctgt


def _forward(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], edge_key: Optional[Tensor],
             edge_value: Optional[Tensor], eid: Optional[Tensor], rowptr: Tensor, col: Tensor,
             cptr: Optional[Tensor], cperm: Optional[Tensor], ctgt: Optional[Tensor], scale: float,
             shared: bool, need_weights: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """``(out (N, H, C), lse (N, H), weights (E or 0, H))`` of the C++ forward. ``q, k, v`` and the
    per-edge tensors have one width C; ``shared``: ``edge_key`` is also the edge value
    (``edge_value`` is None). ``cptr, cperm, ctgt`` (:func:`csc_arrays`) are not read here:
    they are kept for the backward, which builds them when they are None."""
    ev = edge_key if shared else edge_value
    return tuple(_kernel().forward(q, k, v, bias, edge_key, ev, eid, rowptr, col, scale, need_weights))


def _backward(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], edge_key: Optional[Tensor],
              edge_value: Optional[Tensor], eid: Optional[Tensor], rowptr: Tensor, col: Tensor,
              cptr: Tensor, cperm: Tensor, ctgt: Tensor, lse: Tensor, dout: Tensor, scale: float,
              shared: bool, need_q: bool, need_kv: bool, need_bias: bool, need_ek: bool,
              need_ev: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """``(gq, gk, gv, grad bias, grad edge_key, grad edge_value)`` of the C++ backward; those not
    requested are empty ``(0,)`` (with ``shared``, grad edge_key holds both roles)."""
    ev = edge_key if shared else edge_value
    return tuple(_kernel().backward(q, k, v, bias, edge_key, ev, eid, rowptr, col, cptr, cperm, ctgt, lse,
                                    dout, scale, need_q, need_kv, need_bias, need_ek, need_ev, shared))


build_csc = torch.library.custom_op("graphattn::build_csc", _build_csc, mutates_args=())
fused_attention_fwd = torch.library.custom_op("graphattn::fused_attention_fwd", _forward, mutates_args=())
fused_attention_bwd = torch.library.custom_op("graphattn::fused_attention_bwd", _backward, mutates_args=())


@build_csc.register_fake
def _build_csc_fake(rowptr, col, small):
    itype = torch.int32 if small else torch.int64
    E = col.size(0)
    return rowptr.new_empty(rowptr.size(0)), col.new_empty(E, dtype=itype), col.new_empty(E, dtype=itype)


def csc_index_small(num_nodes, num_edges) -> bool:
    """Whether the CSC arrays of a graph this size use int32 indices (as the C++ build picks:
    N and E up to 2**31 - 1). A size known only at run time (a traced graph whose edge count
    depends on the data) counts as fitting, without a guard."""
    return guard_or_true(num_nodes <= _INT32_MAX) and guard_or_true(num_edges <= _INT32_MAX)


def lse_dtype(dtype: torch.dtype) -> torch.dtype:
    """dtype of the saved log-sum-exp (the accumulation dtype): float64 for float64, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


@fused_attention_fwd.register_fake
def _fwd_fake(q, k, v, bias, edge_key, edge_value, eid, rowptr, col, cptr, cperm, ctgt, scale, shared,
              need_weights):
    N, H = q.shape[:2]
    return (q.new_empty(q.shape), q.new_empty(N, H, dtype=lse_dtype(q.dtype)),
            q.new_empty(col.size(0) if need_weights else 0, H))


@fused_attention_bwd.register_fake
def _bwd_fake(q, k, v, bias, edge_key, edge_value, eid, rowptr, col, cptr, cperm, ctgt, lse, dout, scale, shared,
              need_q, need_kv, need_bias, need_ek, need_ev):
    return fake_gradients(q, v, col.size(0), bias, edge_key, edge_value, shared,
                          (need_q, need_kv, need_bias, need_ek, need_ev))


def _setup_context(ctx, inputs, output):
    q, k, v, bias, edge_key, edge_value, eid, rowptr, col, cptr, cperm, ctgt, scale, shared, _ = inputs
    _, lse, weights = output
    # `out` is not saved: backward gets dout . out from the recomputed weights. The graph's index
    # arrays are kept as they are, not saved for backward: a CSR view cached under inference
    # mode holds inference tensors, which autograd refuses to save (and they need no version check)
    ctx.save_for_backward(q, k, v, bias, edge_key, edge_value, lse)
    ctx.graph = (eid, rowptr, col, cptr, cperm, ctgt)
    ctx.scale, ctx.shared = scale, shared
    ctx.aliases = input_aliases((q, k, v, bias, edge_key, edge_value))
    ctx.mark_non_differentiable(lse, weights)


def _gradients(ctx, dout: Tensor, backward, build_csc_fn):
    """The autograd formula of the forward: gradients of its 15 inputs, from ``backward`` (the C++
    backward) and ``build_csc_fn`` (the CSC build, when the forward got no cached arrays)."""
    q, k, v, bias, edge_key, edge_value, lse = ctx.saved_tensors
    eid, rowptr, col, cptr, cperm, ctgt = ctx.graph
    need_q, need_k, need_v, need_b, need_ek, need_ev = needs = ctx.needs_input_grad[:6]
    rest = (None,) * 9  # eid, rowptr, col, cptr, cperm, ctgt, scale, shared, need_weights
    if not any(needs):
        return (None,) * 6 + rest
    if torch.is_grad_enabled():  # create_graph=True: a differentiable backward (exact 2nd order)
        return tuple(differentiable_backward((q, k, v, bias, edge_key, edge_value), needs, dout, rowptr, col,
                                             eid, ctx.scale, ctx.shared, ctx.aliases)) + rest
    need_kv = bool(need_k or need_v)
    if not need_kv:
        cptr = cperm = ctgt = rowptr.new_empty(0)
    elif cptr is None:  # not cached (traced by torch.compile): built here, inside the graph
        cptr, cperm, ctgt = build_csc_fn(rowptr, col, csc_index_small(rowptr.size(0) - 1, col.size(0)))
    gq, gk, gv, gb, gek, gev = backward(
        q, k, v, bias, edge_key, edge_value, eid, rowptr, col, cptr, cperm, ctgt, lse,
        dout.to(q.dtype).contiguous(), ctx.scale, ctx.shared, bool(need_q), need_kv, bool(need_b),
        bool(need_ek), bool(need_ev))
    pick = lambda need, g: g if need else None  # noqa: E731
    return (pick(need_q, gq), pick(need_k, gk), pick(need_v, gv), pick(need_b, gb),
            pick(need_ek, gek), pick(need_ev, gev)) + rest


def _op_gradients(ctx, dout, _grad_lse, _grad_weights):
    return _gradients(ctx, dout, fused_attention_bwd, build_csc)  # the custom ops: traced by torch.compile


fused_attention_fwd.register_autograd(_op_gradients, setup_context=_setup_context)


#: Eager mode's route to the same forward and autograd formula (without the op's dispatch cost).
_FusedEdgeAttention = eager_function("_FusedEdgeAttention", lambda *inputs: _forward(*inputs),  # looked up per call
                                     _setup_context,
                                     lambda ctx, dout: _gradients(ctx, dout, _backward, _build_csc))


def csc_arrays(csr: EdgeCSR):
    """Compact source-major copy of ``csr`` for the grad k / grad v pass, cached on ``csr``.

    ``(cptr (N+1,) int64, cperm (E,), ctgt (E,))`` with int32 ``cperm``/``ctgt`` when N and E
    fit (a third of the bytes of :attr:`EdgeCSR.csc`), built by a counting sort in C++
    (:func:`build_csc`).
    """
    cached = csr.__dict__.get("_fused_csc")
    if cached is None:
        cached = tuple(extension.ops().build_csc(csr.rowptr, csr.col))
        object.__setattr__(csr, "_fused_csc", cached)  # EdgeCSR is frozen; same as csr.csc
    return cached


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
        q, k, v: ``(N, H, C)`` queries and keys, ``(N, H, C')`` values: CPU float32/float64/
            float16/bfloat16 tensors (same dtype; half types accumulate in float32, and the
            output, weights and gradients come back in their dtype). With ``C' != C`` the
            narrower side is zero-padded for the kernel (same result, the output is
            ``(N, H, C')``).
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
    torch ops (with ``(E, H, C)`` temporaries) instead of the C++ one (eager mode only:
    torch.compile's backward graphs are once-differentiable). ``torch.compile`` traces through
    it without a graph break: the kernels are the custom ops ``graphattn::fused_attention_fwd``
    / ``_bwd`` (:func:`fused_attention_fwd`). Call
    :func:`graphattn.ops.extension.fused_available` first.
    """
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
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"fused_edge_attention needs float32/float64/float16/bfloat16 q, k, v of one dtype; "
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
    # the source-major arrays of the grad k / grad v pass: cached on csr in eager mode; traced,
    # the backward builds them inside the graph (a cache on a Python object cannot be traced)
    kv_grad = torch.is_grad_enabled() and (k.requires_grad or v.requires_grad)
    csc = csc_arrays(csr) if kv_grad and not torch.compiler.is_compiling() else (None, None, None)
    run = fused_attention_fwd if torch.compiler.is_compiling() else _FusedEdgeAttention.apply
    out, _, weights = run(q.contiguous(), k.contiguous(), v.contiguous(), bias, edge_key, edge_value, eid,
                          csr.rowptr, csr.col, *csc, float(scale), shared, bool(return_attention_weights))
    if Cv != out.size(-1):
        out = out[..., :Cv]  # (N, H, C')
    return (out, weights) if return_attention_weights else out

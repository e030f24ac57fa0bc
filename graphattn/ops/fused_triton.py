"""Fused edge attention for CUDA tensors: Triton kernels for the forward and backward pass.

The GPU counterpart of the fused C++ CPU kernel (:mod:`graphattn.ops.fused_cpp`), same math and the
same memory contract: one program per (target node, head) walks that node's incoming edges in
CSR order with an online (running-max) softmax and writes the output and the per-(node, head)
log-sum-exp, nothing per edge. The backward recomputes the scores from q, k and the saved
log-sum-exp (FlashAttention's recipe): a target-major pass gives grad q (and the per-edge
gradients of bias / edge key / edge value, which are outputs and so unavoidable), a source-major
pass over the edges sorted by source (:attr:`EdgeCSR.csc`) gives grad k and grad v without
atomics, so the result is deterministic. Per-edge inputs are read in the caller's edge order
through ``csr.perm`` (no permuted copies).

Why Triton and not CUDA C++: Triton ships with every CUDA build of PyTorch (no CUDA toolkit
needed; Triton builds its small launcher with the system C compiler on first use — without one,
:func:`triton_available` warns and the chunked path runs), compiles for the GPU it finds, and its interpreter
(``TRITON_INTERPRET=1``) runs the same kernels on CPU tensors, which is how the CPU-only CI
checks them against the dense reference.

Scope: ``score="dot"``, float32 (half inputs are upcast by :func:`~graphattn.functional.edge_attention`),
no attention dropout, no returned weights; everything else takes the chunked path. One program
handles all of a node's incoming edges, so a hub with very many in-edges is one long serial walk
(measured only on random graphs and molecule batches).
"""
from __future__ import annotations

import contextlib
import math
import os
import warnings
from typing import Dict, Optional

import torch
from torch import Tensor

from graphattn.ops.chunked import differentiable_backward, input_aliases
from graphattn.ops.csr import EdgeCSR, to_csr

__all__ = ["triton_available", "triton_edge_attention"]

_TRITON = None  # the imported triton module, False when it cannot be imported
_PROBED: Dict[int, bool] = {}  # CUDA device index -> the kernels compiled and ran there


def _triton():
    global _TRITON
    if _TRITON is None:
        try:
            import triton  # noqa: F401
            import triton.language  # noqa: F401

            _TRITON = triton
        except Exception:  # not installed, or a broken install: the chunked path is used
            _TRITON = False
    return _TRITON


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``; the values
    Triton itself reads as true: 1, true, on, yes)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def _disabled() -> bool:
    return os.environ.get("GRAPHATTN_NO_TRITON", "").strip().lower() not in ("", "0", "false", "no")


def _probe_run(device: torch.device) -> Optional[str]:
    """Forward and backward on a 3-node graph on ``device``; a reason string if the result is wrong."""
    with torch.inference_mode(False), torch.enable_grad(), torch.cuda.device(device):
        # fixed values, not randn: the probe must not advance the caller's CUDA random stream
        q = torch.linspace(-1.0, 1.0, 12, device=device).view(3, 1, 4).requires_grad_(True)
        ei = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]], device=device)
        out = _TritonEdgeAttention.apply(q, q, q, None, None, None, to_csr(ei, 3, cache=False), 0.5, False)
        (g,) = torch.autograd.grad(out.sum(), [q])
        if not bool(torch.isfinite(out).all() and torch.isfinite(g).all()):
            return "non-finite result on a 3-node graph"
    return None


def _probe_impl(device: torch.device) -> bool:
    """Compile and run the kernels once on a 3-node graph (forward and backward) on ``device``.
    A GPU older than Volta, a missing C compiler (Triton builds its launcher with one on first
    use) or a Triton that cannot compile them gives a warning and ``False``: CUDA tensors then
    take the chunked path instead of failing."""
    major, _ = torch.cuda.get_device_capability(device)
    why = "compute capability < 7.0" if major < 7 else None
    if why is None:
        try:
            why = _probe_run(device)
        except Exception as exc:  # compile/launch failure: report it and use the chunked path
            why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
    if why is not None:
        warnings.warn(f"graphattn: the Triton edge-attention kernels cannot run on {device} ({why}); "
                      "CUDA tensors use the chunked PyTorch path", RuntimeWarning, stacklevel=3)
    return why is None


_probe = torch.compiler.disable(_probe_impl)


def triton_available(device: Optional[torch.device] = None) -> bool:
    """Whether the Triton kernels can run on ``device``: CUDA tensors with Triton installed
    (or any device under the Triton interpreter, which is how CPU tests run them), and
    ``GRAPHATTN_NO_TRITON`` not set (``=1`` sends CUDA tensors to the chunked path). The first
    call for a GPU compiles and runs the kernels once on a tiny graph; if that fails (old GPU,
    no C compiler for Triton's launcher, an incompatible Triton) it warns and returns False."""
    if device is not None and torch.device(device).type != "cuda" and not interpreting():
        return False
    if _disabled() or _triton() is False:
        return False
    if device is None or interpreting():
        return torch.cuda.is_available() or interpreting()
    if not torch.cuda.is_available():
        return False
    device = torch.device(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    ok = _PROBED.get(index)
    if ok is None:  # first use on this GPU: compile and run once, fall back if that fails
        ok = _PROBED[index] = _probe(torch.device("cuda", index))
    return ok


_KERNELS = None


def _kernels():
    """``(fwd, bwd_target, bwd_source)``: :mod:`graphattn.ops._triton_kernels`, imported on first
    use (``triton`` is imported only then)."""
    global _KERNELS
    if _KERNELS is None:
        from graphattn.ops import _triton_kernels as k  # imports triton: only where the Triton path runs

        _KERNELS = (k.fwd, k.bwd_target, k.bwd_source)
    return _KERNELS


def _blocks(E: int, N: int, C: int, CV: int):
    """``(BLOCK_E, BLOCK_C, BLOCK_CV)``: 16 edges per step. With 1 warp per program (see
    :func:`_num_warps`) this was the fastest on an H200 for 4 heads × 32 channels, on 20-edge-per-
    node random graphs and on molecule batches (sweep of 8/16/32/64 edges × 1/2/4/8 warps,
    ``benchmarks/triton_sweep.py``, ``benchmarks/README.md``)."""
    import triton  # optional: imported only where the Triton path runs

    return 16, triton.next_power_of_2(max(C, 1)), triton.next_power_of_2(max(CV, 1))


_NUM_WARPS = 1


def _num_warps(block_c: int, block_cv: int) -> int:
    """Warps per program: the measured 1 at up to 32 channels per head, one more warp per 32
    channels above that (so a 16 × 128 tile does not spill registers; not yet measured)."""
    return max(_NUM_WARPS, min(8, max(block_c, block_cv) // 32))


def _csc_arrays(csr: EdgeCSR):
    """``(cptr, cpos, ctgt)``: edges sorted by source (CSR positions, targets), cached on ``csr``."""
    cached = csr.__dict__.get("_triton_csc")
    if cached is None:
        csc = csr.csc
        cached = (csc.rowptr.contiguous(), csc.perm.contiguous(), csc.col.contiguous())
        object.__setattr__(csr, "_triton_csc", cached)  # EdgeCSR is frozen; same as csr.csc
    return cached


class _TritonEdgeAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, edge_key, edge_value, csr, scale, shared):
        fwd = _kernels()[0]
        N, H, C = q.shape
        CV = v.size(-1)
        E = csr.num_edges
        ev = edge_key if shared else edge_value
        out = torch.empty((N, H, CV), device=q.device, dtype=torch.float32)
        lse = torch.empty((N, H), device=q.device, dtype=torch.float32)
        eid = csr.perm
        dummy = q  # pointer for absent optional tensors (never read: constexpr flags)
        be, bc, bv = _blocks(E, N, C, CV)
        if N * H > 0:
            fwd[(N * H,)](q, k, v, _or(bias, dummy), _or(edge_key, dummy), _or(ev, dummy), eid,
                          csr.rowptr, csr.col, out, lse, scale, H, C, CV,
                          HAS_B=bias is not None, HAS_EK=edge_key is not None, HAS_EV=ev is not None,
                          BLOCK_E=be, BLOCK_C=bc, BLOCK_CV=bv, num_warps=_num_warps(bc, bv))
        # A copy of out (O(N·H·C')), not out itself: the caller may modify the returned output in
        # place (e.g. `h = layer(x, ei); h += x`), as it can on the CPU paths, which save no output.
        ctx.save_for_backward(q, k, v, bias, edge_key, edge_value, out.clone(), lse)
        ctx.csr, ctx.scale, ctx.shared = csr, scale, shared
        ctx.eid = eid
        ctx.aliases = input_aliases((q, k, v, bias, edge_key, edge_value))
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, bias, edge_key, edge_value, out, lse = ctx.saved_tensors
        needs = ctx.needs_input_grad[:6]
        rest = (None,) * 3
        if not any(needs):
            return (None,) * 6 + rest
        if torch.is_grad_enabled():  # create_graph=True: exact second order from plain torch ops
            return tuple(differentiable_backward(ctx, q, k, v, bias, edge_key, edge_value, dout)) + rest
        _, bwd_t, bwd_s = _kernels()
        if q.device.type == "cuda":  # autograd may run backward on another current device
            with torch.cuda.device(q.device):
                return _TritonEdgeAttention._backward(ctx, q, k, v, bias, edge_key, edge_value, out, lse,
                                                      dout, bwd_t, bwd_s) + rest
        return _TritonEdgeAttention._backward(ctx, q, k, v, bias, edge_key, edge_value, out, lse, dout,
                                              bwd_t, bwd_s) + rest

    @staticmethod
    def _backward(ctx, q, k, v, bias, edge_key, edge_value, out, lse, dout, bwd_t, bwd_s):
        need_q, need_k, need_v, need_b, need_ek, need_ev = ctx.needs_input_grad[:6]
        csr: EdgeCSR = ctx.csr
        shared = ctx.shared
        N, H, C = q.shape
        CV = v.size(-1)
        E = csr.num_edges
        ev = edge_key if shared else edge_value
        dout = dout.float().contiguous()
        delta = (dout * out).sum(-1).contiguous()  # (N, H): dout_i . out_i
        be, bc, bv = _blocks(E, N, C, CV)
        dummy = q
        flags = dict(HAS_B=bias is not None, HAS_EK=edge_key is not None, HAS_EV=ev is not None)
        gq = torch.empty_like(q) if need_q else None
        gb = torch.empty_like(bias) if need_b else None
        need_ek_buf = bool(need_ek or (shared and need_ev))
        gek = torch.empty_like(edge_key) if need_ek_buf else None
        gev = torch.empty_like(edge_value) if (need_ev and not shared) else None
        if N * H > 0 and (need_q or need_b or need_ek_buf or gev is not None):
            bwd_t[(N * H,)](q, k, v, _or(bias, dummy), _or(edge_key, dummy), _or(ev, dummy), ctx.eid,
                            csr.rowptr, csr.col, lse, delta, dout,
                            _or(gq, dummy), _or(gb, dummy), _or(gek, dummy), _or(gev, dummy),
                            ctx.scale, H, C, CV, **flags,
                            NEED_Q=bool(need_q), NEED_B=bool(need_b), NEED_EK=need_ek_buf,
                            NEED_EV=gev is not None, SHARED=bool(shared),
                            BLOCK_E=be, BLOCK_C=bc, BLOCK_CV=bv, num_warps=_num_warps(bc, bv))
        gk = gv = None
        if (need_k or need_v) and N * H > 0:
            cptr, cpos, ctgt = _csc_arrays(csr)
            gk = torch.empty_like(k)
            gv = torch.empty_like(v)
            bwd_s[(N * H,)](q, k, v, _or(bias, dummy), _or(edge_key, dummy), _or(ev, dummy), ctx.eid,
                            cptr, cpos, ctgt, lse, delta, dout, gk, gv, ctx.scale, H, C, CV, **flags,
                            BLOCK_E=be, BLOCK_C=bc, BLOCK_CV=bv, num_warps=_num_warps(bc, bv))
        elif need_k or need_v:
            gk, gv = torch.zeros_like(k), torch.zeros_like(v)
        if shared:
            gev_out = None
            gek_out = gek if (need_ek or need_ev) else None
        else:
            gek_out, gev_out = gek, gev
        return (gq if need_q else None, gk if need_k else None, gv if need_v else None,
                gb, gek_out if need_ek or (shared and need_ev) else None, gev_out)


def _or(t: Optional[Tensor], other: Tensor) -> Tensor:
    return other if t is None else t


def _check_edge(t: Optional[Tensor], shape, name: str, device) -> Optional[Tensor]:
    if t is None:
        return None
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}; got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but q is on {device}")
    return t.float().contiguous()


def triton_edge_attention(q: Tensor, k: Tensor, v: Tensor, csr: EdgeCSR,
                          bias: Optional[Tensor] = None, scale: Optional[float] = None, *,
                          edge_key: Optional[Tensor] = None, edge_value: Optional[Tensor] = None) -> Tensor:
    """Edge-restricted multi-head attention with the Triton kernels (CUDA).

    ``s_e = scale · q_i·(k_j + edge_key_e) + bias_e``, ``out_i = Σ_e softmax_e(s) (v_j + edge_value_e)``
    over the incoming edges ``e = (j -> i)`` of ``csr``; per-edge tensors in the order of the
    ``edge_index`` ``csr`` was built from. Same arguments and results as
    :func:`graphattn.ops.fused_cpp.fused_edge_attention` with ``edge_order="input"`` (no returned
    weights). ``q, k, v`` float32 on one CUDA device (any device under ``TRITON_INTERPRET=1``);
    ``C' != C`` is allowed. A node with no incoming edge gets exactly 0. Differentiable w.r.t.
    ``q, k, v, bias, edge_key, edge_value`` (second order exact, via plain torch ops). Under
    ``torch.compile`` it runs eagerly behind a graph break. Check :func:`triton_available` first.
    """
    if torch.compiler.is_compiling():
        return _untraced(q, k, v, csr, bias, scale, edge_key=edge_key, edge_value=edge_value)
    if not triton_available(q.device):
        why = ("GRAPHATTN_NO_TRITON is set" if _disabled() else
               f"q is on {q.device}; triton importable: {_triton() is not False}")
        raise RuntimeError(f"the Triton edge-attention kernels cannot run here ({why}); they need "
                           "triton and a CUDA tensor")
    if q.dim() != 3 or k.shape != q.shape or v.dim() != 3 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"q, k must be (N, H, C) and v (N, H, C'); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")
    if q.dtype != torch.float32 or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"triton_edge_attention needs float32 q, k, v; got {q.dtype}, {k.dtype}, {v.dtype}")
    N, H, C = q.shape
    CV = v.size(-1)
    if csr.num_nodes != N or csr.rowptr.numel() != N + 1:
        raise ValueError(f"csr has {csr.num_nodes} nodes but q has {N}")
    if csr.rowptr.device != q.device:
        raise ValueError(f"csr is on {csr.rowptr.device} but q is on {q.device}")
    E = csr.num_edges
    shared = edge_key is not None and edge_value is edge_key
    if shared and C != CV:
        raise ValueError("one tensor as edge_key and edge_value needs equal key and value widths")
    bias = _check_edge(bias, (E, H), "bias", q.device)
    edge_key = _check_edge(edge_key, (E, H, C), "edge_key", q.device)
    edge_value = edge_key if shared else _check_edge(edge_value, (E, H, CV), "edge_value", q.device)
    if scale is None:
        scale = 1.0 / math.sqrt(C) if C > 0 else 1.0
    # Triton launches on the current CUDA device: make it q's (e.g. cuda:1)
    guard = torch.cuda.device(q.device) if q.device.type == "cuda" else contextlib.nullcontext()
    with guard:
        return _TritonEdgeAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), bias, edge_key,
                                          edge_value, csr, float(scale), shared)


_untraced = torch.compiler.disable(triton_edge_attention)

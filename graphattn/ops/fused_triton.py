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

Scope: ``score="dot"``, float32, float16 or bfloat16 (loads and stores in the input dtype,
float32 accumulation and log-sum-exp), no attention dropout, no returned weights; everything
else takes the chunked path. One program handles all of a node's incoming edges, so a hub with
very many in-edges is one long serial walk (measured only on random graphs and molecule batches).

The launches are the custom ops ``graphattn::triton_attention_fwd`` / ``_bwd`` (fake
implementations and an autograd formula registered), so ``torch.compile(model, fullgraph=True)``
traces through them without a graph break; inductor does not see inside them.
"""
from __future__ import annotations

import contextlib
import math
import os
import warnings
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from graphattn.ops.chunked import differentiable_backward, eager_function, fake_gradients, input_aliases
from graphattn.ops.csr import EdgeCSR, to_csr

__all__ = ["DTYPES", "triton_available", "triton_edge_attention", "triton_attention_fwd", "triton_attention_bwd",
           "csc_tensors"]

#: dtypes of q, k, v the kernels take (float32 accumulation for all of them)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
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
        csr = to_csr(ei, 3, cache=False)
        out = triton_attention_fwd(q, q, q, None, None, None, csr.perm, csr.rowptr, csr.col, *_csc_arrays(csr),
                                   0.5, False)[0]
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


# torch.compile calls it while tracing (probing the GPU then, if needed) and keeps the answer as
# a constant of the graph, instead of a graph break around the probe
@torch.compiler.assume_constant_result
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


def csc_tensors(rowptr: Tensor, col: Tensor):
    """``(cptr, cpos, ctgt)`` of :func:`_csc_arrays` from the CSR arrays alone, in traceable torch
    ops with data-independent shapes (the backward builds them this way under torch.compile)."""
    N, E = rowptr.numel() - 1, col.numel()
    cpos = torch.argsort(col, stable=True)  # (E,) CSR positions sorted by source
    row = torch.repeat_interleave(torch.arange(N, device=col.device), rowptr.diff(), output_size=E)  # (E,)
    counts = torch.zeros(N, dtype=torch.long, device=col.device).index_add_(0, col, torch.ones_like(col))
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)]), cpos, row[cpos]


def _on_device(t: Tensor):
    """Triton launches on the current CUDA device: make it ``t``'s (e.g. cuda:1)."""
    return torch.cuda.device(t.device) if t.device.type == "cuda" else contextlib.nullcontext()


# ---------------------------------------------------------------------------- custom ops
# The kernel launches as torch.library custom ops (opaque to torch.compile, which traces them
# with the fake implementations: shapes from sizes only) with an autograd formula; the EdgeCSR
# is passed as its arrays (eid = csr.perm, rowptr, col; the CSC arrays, None to build them in
# the backward). ``shared``: edge_key is also the edge value (edge_value is None). Eager calls
# take the same functions through an autograd.Function (_TritonEdgeAttention), which is cheaper.

def _forward(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], edge_key: Optional[Tensor],
             edge_value: Optional[Tensor], eid: Tensor, rowptr: Tensor, col: Tensor, cptr: Optional[Tensor],
             cpos: Optional[Tensor], ctgt: Optional[Tensor], scale: float,
             shared: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """``(out (N, H, C'), lse (N, H), out32)`` of the Triton forward kernel: ``out`` in the dtype of
    ``q``, ``lse`` float32; for float16/bfloat16 ``out32`` is the output in float32 (the backward's
    ``dout · out`` from the rounded output would put its rounding error, times ``|k|``, into
    grad q at large logits), else empty. ``cptr, cpos, ctgt`` are not read here: they are kept
    for the backward."""
    fwd = _kernels()[0]
    N, H, C = q.shape
    CV = v.size(-1)
    ev = edge_key if shared else edge_value
    out = torch.empty((N, H, CV), device=q.device, dtype=q.dtype)
    out32 = torch.empty((N, H, CV) if q.dtype != torch.float32 else (0,), device=q.device, dtype=torch.float32)
    lse = torch.empty((N, H), device=q.device, dtype=torch.float32)
    dummy = q  # pointer for absent optional tensors (never read: constexpr flags)
    be, bc, bv = _blocks(col.numel(), N, C, CV)
    if N * H > 0:
        with _on_device(q):
            fwd[(N * H,)](q, k, v, _or(bias, dummy), _or(edge_key, dummy), _or(ev, dummy), eid,
                          rowptr, col, out, _or(out32 if out32.numel() else None, lse), lse, scale, H, C, CV,
                          HAS_B=bias is not None, HAS_EK=edge_key is not None, HAS_EV=ev is not None,
                          SAVE32=out32.numel() > 0,
                          BLOCK_E=be, BLOCK_C=bc, BLOCK_CV=bv, num_warps=_num_warps(bc, bv))
    return out, lse, out32


def _backward(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], edge_key: Optional[Tensor],
              edge_value: Optional[Tensor], eid: Tensor, rowptr: Tensor, col: Tensor, cptr: Tensor, cpos: Tensor,
              ctgt: Tensor, out: Tensor, lse: Tensor, dout: Tensor, scale: float, shared: bool, need_q: bool,
              need_kv: bool, need_bias: bool, need_ek: bool,
              need_ev: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """``(gq, gk, gv, grad bias, grad edge_key, grad edge_value)`` of the Triton backward kernels;
    those not requested are empty ``(0,)`` (with ``shared``, grad edge_key holds both roles)."""
    _, bwd_t, bwd_s = _kernels()
    N, H, C = q.shape
    CV = v.size(-1)
    ev = edge_key if shared else edge_value
    dout = dout.to(q.dtype).contiguous()
    delta = (dout.float() * out).sum(-1).contiguous()  # (N, H) float32: dout_i . out_i (out float32)
    be, bc, bv = _blocks(col.numel(), N, C, CV)
    dummy = q
    flags = dict(HAS_B=bias is not None, HAS_EK=edge_key is not None, HAS_EV=ev is not None)

    def grad(wanted: bool, like: Optional[Tensor]) -> Tensor:  # (0,) when not wanted: outputs never alias
        return torch.empty_like(like) if wanted and like is not None else q.new_empty(0)

    gq, gk, gv = grad(need_q, q), grad(need_kv, k), grad(need_kv, v)
    gb, gek = grad(need_bias, bias), grad(need_ek, edge_key)
    gev = grad(need_ev and not shared, edge_value)
    with _on_device(q):
        if N * H > 0 and (need_q or gb.numel() or gek.numel() or gev.numel()):
            bwd_t[(N * H,)](q, k, v, _or(bias, dummy), _or(edge_key, dummy), _or(ev, dummy), eid,
                            rowptr, col, lse, delta, dout,
                            _or(gq, dummy), _or(gb, dummy), _or(gek, dummy), _or(gev, dummy),
                            scale, H, C, CV, **flags,
                            NEED_Q=need_q, NEED_B=gb.numel() > 0, NEED_EK=gek.numel() > 0,
                            NEED_EV=gev.numel() > 0, SHARED=shared,
                            BLOCK_E=be, BLOCK_C=bc, BLOCK_CV=bv, num_warps=_num_warps(bc, bv))
        if need_kv and N * H > 0:
            bwd_s[(N * H,)](q, k, v, _or(bias, dummy), _or(edge_key, dummy), _or(ev, dummy), eid,
                            cptr, cpos, ctgt, lse, delta, dout, gk, gv, scale, H, C, CV, **flags,
                            BLOCK_E=be, BLOCK_C=bc, BLOCK_CV=bv, num_warps=_num_warps(bc, bv))
    return gq, gk, gv, gb, gek, gev


triton_attention_fwd = torch.library.custom_op("graphattn::triton_attention_fwd", _forward, mutates_args=())
triton_attention_bwd = torch.library.custom_op("graphattn::triton_attention_bwd", _backward, mutates_args=())


@triton_attention_fwd.register_fake
def _fwd_fake(q, k, v, bias, edge_key, edge_value, eid, rowptr, col, cptr, cpos, ctgt, scale, shared):
    N, H = q.shape[:2]
    CV = v.size(-1)
    return (q.new_empty(N, H, CV), q.new_empty(N, H, dtype=torch.float32),
            q.new_empty((N, H, CV) if q.dtype != torch.float32 else (0,), dtype=torch.float32))


@triton_attention_bwd.register_fake
def _bwd_fake(q, k, v, bias, edge_key, edge_value, eid, rowptr, col, cptr, cpos, ctgt, out, lse, dout, scale,
              shared, need_q, need_kv, need_bias, need_ek, need_ev):
    return fake_gradients(q, v, col.size(0), bias, edge_key, edge_value, shared,
                          (need_q, need_kv, need_bias, need_ek, need_ev))


def _setup_context(ctx, inputs, output):
    q, k, v, bias, edge_key, edge_value, eid, rowptr, col, cptr, cpos, ctgt, scale, shared = inputs
    out, lse, out32 = output
    # The float32 output of a half-precision call, else a copy of out (O(N·H·C')), not out itself:
    # the caller may modify the returned output in place (e.g. `h = layer(x, ei); h += x`), as it
    # can on the CPU paths, which save no output.
    # The graph's index arrays are kept as they are, not saved for backward (as the C++ path does).
    ctx.save_for_backward(q, k, v, bias, edge_key, edge_value, out32 if out32.numel() else out.clone(), lse)
    ctx.graph = (eid, rowptr, col, cptr, cpos, ctgt)
    ctx.scale, ctx.shared = scale, shared
    ctx.aliases = input_aliases((q, k, v, bias, edge_key, edge_value))
    ctx.mark_non_differentiable(lse, out32)


def _gradients(ctx, dout: Tensor, backward):
    """The autograd formula of the forward: gradients of its 14 inputs, from ``backward`` (the
    Triton backward; the CSC arrays are built here when the forward got no cached ones)."""
    q, k, v, bias, edge_key, edge_value, out, lse = ctx.saved_tensors
    eid, rowptr, col, cptr, cpos, ctgt = ctx.graph
    need_q, need_k, need_v, need_b, need_ek, need_ev = needs = ctx.needs_input_grad[:6]
    rest = (None,) * 8  # eid, rowptr, col, cptr, cpos, ctgt, scale, shared
    if not any(needs):
        return (None,) * 6 + rest
    if torch.is_grad_enabled():  # create_graph=True: exact second order from plain torch ops
        return tuple(differentiable_backward((q, k, v, bias, edge_key, edge_value), needs, dout, rowptr, col,
                                             eid, ctx.scale, ctx.shared, ctx.aliases)) + rest
    need_kv = bool(need_k or need_v)
    if not need_kv:
        cptr = cpos = ctgt = rowptr.new_empty(0)
    elif cptr is None:  # not cached (traced by torch.compile): built here, inside the graph
        cptr, cpos, ctgt = csc_tensors(rowptr, col)
    gq, gk, gv, gb, gek, gev = backward(
        q, k, v, bias, edge_key, edge_value, eid, rowptr, col, cptr, cpos, ctgt, out, lse, dout, ctx.scale,
        ctx.shared, bool(need_q), need_kv, bool(need_b), bool(need_ek), bool(need_ev))
    pick = lambda need, g: g if need else None  # noqa: E731
    return (pick(need_q, gq), pick(need_k, gk), pick(need_v, gv), pick(need_b, gb),
            pick(need_ek, gek), pick(need_ev, gev)) + rest


def _op_gradients(ctx, dout, _grad_lse, _grad_out32):
    return _gradients(ctx, dout, triton_attention_bwd)  # the custom op: traced by torch.compile


triton_attention_fwd.register_autograd(_op_gradients, setup_context=_setup_context)


#: Eager mode's route to the same forward and autograd formula (without the op's dispatch cost).
_TritonEdgeAttention = eager_function("_TritonEdgeAttention", lambda *inputs: _forward(*inputs),  # looked up per call
                                      _setup_context,
                                      lambda ctx, dout: _gradients(ctx, dout, _backward))


def _or(t: Optional[Tensor], other: Tensor) -> Tensor:
    return other if t is None else t


def _check_edge(t: Optional[Tensor], shape, name: str, device, dtype) -> Optional[Tensor]:
    if t is None:
        return None
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}; got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but q is on {device}")
    return t.to(dtype).contiguous()


def triton_edge_attention(q: Tensor, k: Tensor, v: Tensor, csr: EdgeCSR,
                          bias: Optional[Tensor] = None, scale: Optional[float] = None, *,
                          edge_key: Optional[Tensor] = None, edge_value: Optional[Tensor] = None) -> Tensor:
    """Edge-restricted multi-head attention with the Triton kernels (CUDA).

    ``s_e = scale · q_i·(k_j + edge_key_e) + bias_e``, ``out_i = Σ_e softmax_e(s) (v_j + edge_value_e)``
    over the incoming edges ``e = (j -> i)`` of ``csr``; per-edge tensors in the order of the
    ``edge_index`` ``csr`` was built from. Same arguments and results as
    :func:`graphattn.ops.fused_cpp.fused_edge_attention` with ``edge_order="input"`` (no returned
    weights). ``q, k, v`` float32, float16 or bfloat16 (one dtype; the output and gradients in
    it, float32 accumulation) on one CUDA device (any device under ``TRITON_INTERPRET=1``);
    ``C' != C`` is allowed. A node with no incoming edge gets exactly 0. Differentiable w.r.t.
    ``q, k, v, bias, edge_key, edge_value`` (second order exact, via plain torch ops, in eager
    mode). ``torch.compile`` traces through it without a graph break: the kernel launches are the
    custom ops ``graphattn::triton_attention_fwd`` / ``_bwd``. Check :func:`triton_available` first.
    """
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
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"triton_edge_attention needs float32/float16/bfloat16 q, k, v of one dtype; "
                        f"got {q.dtype}, {k.dtype}, {v.dtype}")
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
    bias = _check_edge(bias, (E, H), "bias", q.device, q.dtype)
    edge_key = _check_edge(edge_key, (E, H, C), "edge_key", q.device, q.dtype)
    edge_value = edge_key if shared else _check_edge(edge_value, (E, H, CV), "edge_value", q.device, q.dtype)
    if scale is None:
        scale = 1.0 / math.sqrt(C) if C > 0 else 1.0
    kv_grad = torch.is_grad_enabled() and (k.requires_grad or v.requires_grad)
    # the source-major arrays of grad k / grad v: cached on csr in eager mode; traced, the
    # backward builds them inside the graph (a cache on a Python object cannot be traced)
    csc = _csc_arrays(csr) if kv_grad and not torch.compiler.is_compiling() else (None, None, None)
    run = triton_attention_fwd if torch.compiler.is_compiling() else _TritonEdgeAttention.apply
    out = run(q.contiguous(), k.contiguous(), v.contiguous(), bias, edge_key, None if shared else edge_value,
                 csr.perm.contiguous(), csr.rowptr, csr.col, *csc, float(scale), shared)[0]
    return out

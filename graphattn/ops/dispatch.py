"""Which kernel computes an edge-attention call: SDPA for batches of complete graphs, the fused C++
(CPU) or Triton (CUDA) kernels, or None for the chunked path (:func:`graphattn.functional.edge_attention`
dispatches here). The kernels' choice by score kind lives here, beside them."""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from graphattn.ops import extension, fused_cpp, fused_triton
from graphattn.ops.csr import EdgeCSR
from graphattn.ops.dense import dense_plan, sdpa_attention

__all__ = ["fused_kind", "fast_path"]


def fused_kind(device_type: str, dtype: torch.dtype, score: str, p_drop: float,
               return_weights: bool) -> Optional[str]:
    """Which fused kernel may compute a call (before availability is checked): ``"cpp"`` (CPU
    float32/float64/float16/bfloat16), ``"triton"`` (CUDA float32/float16/bfloat16, no returned
    weights) or ``None`` (chunked). Both need ``score="dot"`` and no active dropout; both take
    half inputs in their dtype and accumulate in float32."""
    if score != "dot" or p_drop != 0.0:
        return None
    if device_type == "cpu" and dtype in fused_cpp.DTYPES:
        return "cpp"
    if device_type == "cuda" and dtype in fused_triton.DTYPES and not return_weights:
        return "triton"
    return None


def fast_path(q: Tensor, k: Tensor, v: Tensor, csr: EdgeCSR, batch: Optional[Tensor], bias: Optional[Tensor],
               edge_key: Optional[Tensor], edge_value: Optional[Tensor], score: str, p_drop: float,
               return_weights: bool, impl: str):
    """SDPA for batches of complete graphs, else the fused C++ / Triton kernel where one applies
    and runs here: its result (``out``, or ``(out, alpha)`` in the caller's edge order), or None
    for the chunked path. Raises when ``impl="dense"`` / ``"fused"`` cannot be honoured."""
    plain = score == "dot" and edge_key is None and edge_value is None and not return_weights
    kind = fused_kind(q.device.type, q.dtype, score, p_drop, return_weights)
    if impl in ("auto", "dense") and plain and bias is None:
        # read once per graph, cached on csr; traced (torch.compile), the completeness test would
        # branch on the graph's data: "auto" then takes the edge kernels (same result)
        plan = None if impl == "auto" and torch.compiler.is_compiling() else dense_plan(csr, batch)
        # Complete graphs go to SDPA unless padding them would waste more than the fused C++
        # kernel costs (measured rule: dense.prefer_dense, benchmarks/crossover.py, CPU only;
        # on CUDA complete graphs always take SDPA: that crossover has not been measured).
        if plan is not None and (impl == "dense" or kind != "cpp" or plan.prefer
                                 or not extension.fused_available()):
            return sdpa_attention(q, k, v, plan.sizes, dropout=p_drop, length=plan.length)
    if impl == "dense":
        raise ValueError("impl='dense' needs every graph complete (all pairs incl. self-loops, "
                         "given batch), score='dot', no bias, edge features or returned weights")
    if impl == "fused" and kind is None:
        raise ValueError("impl='fused' supports only score='dot' with no (active) dropout, on CPU "
                         "float32/float64/float16/bfloat16 (C++ kernel) or CUDA float32/float16/bfloat16 "
                         "without returned weights (Triton kernels)")
    if impl == "chunked" or kind is None:
        return None
    scale = 1.0 / math.sqrt(q.size(-1))
    if kind == "triton":
        if fused_triton.triton_available(q.device):
            return fused_triton.triton_edge_attention(q, k, v, csr, bias=bias, scale=scale, edge_key=edge_key,
                                                      edge_value=edge_value)
        if impl == "fused":
            raise RuntimeError("impl='fused' on CUDA needs the Triton kernels: triton installed "
                               "(pip install triton), GRAPHATTN_NO_TRITON unset, and a GPU they "
                               "compile and run on (see the warning of triton_available)")
        return None
    if extension.fused_available():
        # The C++ kernel takes bias / edge_key / edge_value and returns weights in the
        # caller's edge order (it reads through csr.perm): no permuted per-edge copies.
        return fused_cpp.fused_edge_attention(q, k, v, csr, bias=bias, scale=scale, edge_key=edge_key,
                                              edge_value=edge_value, return_attention_weights=return_weights,
                                              edge_order="input")
    if impl == "fused":
        raise RuntimeError("impl='fused' requested but the C++ kernel could not be built")
    return None

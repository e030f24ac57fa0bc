"""Worker-side device helpers: CPU/CUDA timing and peak memory, and which attention backend
actually ran (read off the autograd graph, so it is what ran, not what was asked for).

* CPU: peak memory is the peak extra RSS of :class:`_harness.PeakRSS`.
* CUDA: ``torch.cuda.reset_peak_memory_stats()`` at the start; peak memory is
  ``max_memory_allocated() - memory_allocated()`` at the start (tensors only, not the
  allocator's cache or the CUDA context). Timers are wrapped in ``torch.cuda.synchronize()``.
"""
from __future__ import annotations

from typing import Dict, List

import _harness as H

__all__ = ["DEVICES", "resolve_device", "synchronize", "PeakMemory", "memory_label",
           "attention_backends"]

DEVICES = ("cpu", "cuda")

# autograd node name fragment -> backend (first match wins); the custom ops' nodes (a direct call of
# graphattn::*_attention_fwd) are named GeneratedBackwardFor_graphattn_<op>_defaultBackward
_BACKEND_NODES = (("Triton", "fused Triton"), ("triton_attention", "fused Triton"), ("Fused", "fused C++"),
                  ("fused_attention", "fused C++"), ("ChunkedEdgeAttention", "chunked PyTorch"),
                  ("ScaledDotProduct", "SDPA"), ("EdgeAggregate", "chunked PyTorch (relu/sigmoid)"))


def resolve_device(name: str):
    """``torch.device`` for ``"cpu"``/``"cuda"``; a clear error when CUDA is not there."""
    import torch

    if name not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {name!r}")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: torch.cuda.is_available() is False "
                           f"(torch {torch.__version__})")
    return torch.device(name)


def synchronize(device) -> None:
    """Wait for queued GPU work, so a host timer covers it (no-op on CPU)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def memory_label(device: str) -> str:
    return "peak ΔCUDA (MB)" if device == "cuda" else "peak ΔRSS (MB)"


class PeakMemory:
    """Peak extra memory from ``start()`` on: host RSS on CPU, allocated tensors on CUDA."""

    def __init__(self, device):
        self.device = device
        self._rss = H.PeakRSS() if device.type == "cpu" else None

    def start(self) -> None:
        if self._rss is not None:
            return self._rss.start()
        import torch

        synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.baseline = torch.cuda.memory_allocated(self.device)

    def stop(self) -> Dict[str, object]:
        if self._rss is not None:
            return {**self._rss.stop(), "memory_kind": "RSS"}
        import torch

        synchronize(self.device)
        peak = torch.cuda.max_memory_allocated(self.device)
        return {"baseline_mb": self.baseline / 2**20, "peak_mb": peak / 2**20,
                "peak_delta_mb": max(0, peak - self.baseline) / 2**20,
                "memory_kind": "CUDA allocated"}


def attention_backends(out) -> List[str]:
    """Attention backends found in the autograd graph of ``out`` (sorted, unique), e.g.
    ``["fused C++"]``; ``[]`` when none of ours (e.g. a PyG layer)."""
    seen, stack, found = set(), [getattr(out, "grad_fn", None)], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        name = type(fn).__name__
        for frag, backend in _BACKEND_NODES:
            if frag in name:
                found.add(backend)
                break
        stack.extend(f for f, _ in fn.next_functions)
    return sorted(found)

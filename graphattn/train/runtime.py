"""What a training run needs from its process: seeds, the device, intra-op threads, the first-time
kernel build, and giving freed heap memory back to the system."""
from __future__ import annotations

import ctypes
import ctypes.util
import random
from typing import Optional

import numpy as np
import torch
from torch import nn

from graphattn.nn.attention import GraphSelfAttention
from graphattn.ops import extension

__all__ = ["set_seed", "resolve_device", "model_device", "release_free_heap", "build_kernels", "threads_for"]


def set_seed(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators (NumPy's with ``seed`` modulo 2**32)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resolve_device(device=None) -> torch.device:
    """The device to train on: ``None`` / ``"auto"`` = the GPU when CUDA is available, else the
    CPU; ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a :class:`torch.device` as given. Asking for a
    GPU that is not there is a ``ValueError`` (not a silent fall-back to the CPU)."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"--device must be auto, cpu, cuda or cuda:N, got {device!r}") from exc
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"--device must be auto, cpu, cuda or cuda:N, got {device!r}")
    if dev.type == "cpu":
        return torch.device("cpu")  # "cpu:N" is the same CPU
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ValueError(f"--device {device}: no CUDA GPU is available here (torch "
                         f"{torch.__version__}); use --device cpu or auto")
    if dev.index is not None and dev.index >= count:
        raise ValueError(f"--device {device}: only {count} CUDA GPU(s) here (cuda:0..cuda:{count - 1})")
    return dev


def model_device(model: nn.Module) -> torch.device:
    """The device of ``model``'s parameters (the CPU for a model without any)."""
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


_MALLOC_TRIM = None


def release_free_heap() -> None:
    """Give freed heap memory back to the system (glibc's ``malloc_trim(0)``; a no-op elsewhere).
    Mini-batches of varying sizes (neighbour sampling) fragment glibc's heap, which then keeps
    every freed block: resident memory grew ~300 MB per epoch on a 50k-node graph (0.5 -> 4.6 GB
    in 12 epochs) and stays at ~0.5 GB between epochs when :func:`fit` trims after each (epoch
    time unchanged). Within an epoch the heap still grows batch by batch (200k nodes / 2M edges,
    neighbour sampling: peak 2.3-2.5 GB, of which ~1.4 GB freed-but-kept heap); trimming
    after every batch cut the peak to 0.96 GB for ~35 % more time, so it is not done by default:
    call this from a batch loop, or run with ``MALLOC_TRIM_THRESHOLD_`` set, when memory binds."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            _MALLOC_TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc (macOS, musl without it, Windows)
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


def build_kernels(model: nn.Module) -> None:
    """Build (or load) the fused CPU attention kernel now when ``model`` has graph attention layers on the
    CPU: the one-time build takes about a minute, announced on stderr, and would otherwise land inside the
    first epoch (and its progress bar's time estimate)."""
    if model_device(model).type == "cpu" and any(isinstance(m, GraphSelfAttention) for m in model.modules()):
        extension.fused_available()


def threads_for(num_edges: int, threads: Optional[int] = None) -> None:
    """One intra-op thread for small graphs: thread start-up costs more than the work (and
    on a busy machine several threads per process make a 34-node epoch 50x slower); an
    explicit ``threads`` (``--threads``) wins."""
    if threads is None and num_edges < 20_000:
        torch.set_num_threads(1)

"""Cheap, vectorised input checks with messages that name the argument and the problem."""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

__all__ = ["check_edge_index", "check_features", "check_row_index", "check_tensor_shape"]

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def check_edge_index(edge_index: Tensor, num_nodes: int, name: str = "edge_index",
                     check_range: bool = True) -> None:
    """``edge_index`` must be an integer ``(2, E)`` tensor with entries in ``[0, num_nodes)``.

    ``check_range=False`` checks only type and shape (the range check scans all edges; the
    layers run it once per graph, when its CSR view is built and cached).
    """
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (2, E), got {type(edge_index).__name__}")
    if edge_index.dtype not in _INT_DTYPES:
        raise TypeError(f"{name} must have an integer dtype (torch.long), got {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{name} must have shape (2, E), got {tuple(edge_index.shape)}")
    if edge_index.numel() == 0 or not check_range:
        return
    lo, hi = torch.aminmax(edge_index)
    lo, hi = int(lo), int(hi)
    if lo < 0:
        raise ValueError(f"{name} contains negative node indices (min {lo})")
    if hi >= num_nodes:
        raise ValueError(f"{name} refers to node {hi} but there are only {num_nodes} nodes "
                         f"(valid indices are 0..{num_nodes - 1})")


def check_tensor_shape(t: Tensor, shape: Sequence[Optional[int]], name: str) -> None:
    """``t`` must be a tensor whose shape matches ``shape`` (``None`` = any size)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    ok = t.dim() == len(shape) and all(s is None or s == d for s, d in zip(shape, t.shape))
    if not ok:
        want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"{name} must have shape {want}, got {tuple(t.shape)}")


def check_row_index(index: Tensor, length: int, num_rows: int, name: str) -> None:
    """``index`` must be an integer ``(length,)`` tensor of row ids in ``[0, num_rows)``."""
    if not isinstance(index, Tensor) or index.dtype not in _INT_DTYPES:
        raise TypeError(f"{name} must be an integer tensor of shape ({length},), got "
                        f"{index.dtype if isinstance(index, Tensor) else type(index).__name__}")
    check_tensor_shape(index, (length,), name)
    if index.numel():
        lo, hi = (int(v) for v in torch.aminmax(index))
        if lo < 0 or hi >= num_rows:
            raise ValueError(f"{name} has row ids in [{lo}, {hi}] but the table has {num_rows} rows "
                             f"(valid ids are 0..{num_rows - 1})")


def check_features(x: Tensor, in_channels: int, name: str = "x") -> None:
    """Node features: a floating ``(N, in_channels)`` tensor without NaN or inf."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (N, {in_channels}), got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype} "
                        "(categorical features need an embedding first)")
    check_tensor_shape(x, (None, in_channels), name)
    if x.numel() == 0:
        return
    lo, hi = torch.aminmax(x)  # NaN propagates into min/max: one cheap reduction, no (N, F) mask
    if not bool(torch.isfinite(lo) & torch.isfinite(hi)):
        bad = int((~torch.isfinite(x)).any(dim=-1).sum())
        raise ValueError(f"{name} contains NaN or inf values (in {bad} of {x.size(0)} rows)")

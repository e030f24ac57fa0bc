"""Random graph generators and helpers shared by the tests and benchmarks."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Tuple

import torch
from torch import Tensor

__all__ = ["random_graph", "random_graph_batch", "dense_mask_and_bias", "shared_data_dir",
           "requires_data"]


def random_graph(num_nodes: int, num_edges: int, *, self_loops: bool = True,
                 duplicates: bool = True, isolated: int = 0,
                 generator: Optional[torch.Generator] = None) -> Tensor:
    """A random directed ``edge_index`` ``(2, E)`` on ``num_nodes`` nodes.

    ``isolated`` nodes (the last ones) get no edges at all. Without ``duplicates`` the
    edges are unique; without ``self_loops`` none is i -> i. E may come out below
    ``num_edges`` when duplicates/self-loops are removed.
    """
    active = num_nodes - isolated
    if active <= 0 or num_edges == 0:
        return torch.empty(2, 0, dtype=torch.long)
    ei = torch.randint(0, active, (2, num_edges), generator=generator)
    if not self_loops:
        ei = ei[:, ei[0] != ei[1]]
    if not duplicates:
        ei = torch.unique(ei, dim=1)
    return ei


def random_graph_batch(sizes, avg_degree: float = 2.0, generator=None) -> Tuple[Tensor, Tensor]:
    """Disjoint union of random graphs with the given node counts: ``(edge_index, batch)``."""
    parts, batch, offset = [], [], 0
    for b, n in enumerate(sizes):
        ei = random_graph(n, int(avg_degree * n), generator=generator)
        parts.append(ei + offset)
        batch.append(torch.full((n,), b, dtype=torch.long))
        offset += n
    edge_index = torch.cat(parts, 1) if parts else torch.empty(2, 0, dtype=torch.long)
    return edge_index, (torch.cat(batch) if batch else torch.empty(0, dtype=torch.long))


def dense_mask_and_bias(edge_index: Tensor, num_nodes: int,
                        edge_bias: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Turn an edge list into the ``(N, N)`` mask and ``(H, N, N)`` bias of the dense reference.

    Duplicate edges j -> i count once per copy in the edge softmax; that equals one key
    with bias ``logsumexp`` over the copies' biases (``log(count)`` without biases), which
    is what this returns, so ``dense_attention`` reproduces multigraph semantics exactly.
    """
    H = 1 if edge_bias is None else edge_bias.size(1)
    dtype = torch.float64 if edge_bias is None else edge_bias.dtype
    b = torch.zeros(edge_index.size(1), H, dtype=dtype) if edge_bias is None else edge_bias
    flat = edge_index[1] * num_nodes + edge_index[0]  # (E,) target-major cell id
    mx = torch.full((num_nodes * num_nodes, H), float("-inf"), dtype=dtype)
    mx.scatter_reduce_(0, flat[:, None].expand(-1, H), b, "amax")
    safe = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    s = torch.zeros_like(mx).index_add_(0, flat, torch.exp(b - safe[flat]))
    lse = torch.where(s > 0, safe + torch.log(s.clamp_min(1e-300)), torch.full_like(s, float("-inf")))
    mask = torch.isfinite(lse).any(-1).view(num_nodes, num_nodes)  # (N, N)
    bias = lse.t().reshape(H, num_nodes, num_nodes)  # (H, N, N)
    return mask, bias


def shared_data_dir() -> Optional[Path]:
    """``$GRAPHATTN_DATA`` if set and present, else ``../shared/data`` beside the checkout."""
    env = os.environ.get("GRAPHATTN_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[2] / "shared" / "data")
    for c in candidates:
        if c.is_dir():
            return c
    return None


def requires_data(*relpaths: str):
    """pytest decorator: skip unless every ``relpath`` exists under the shared data dir."""
    import pytest

    root = shared_data_dir()
    missing = [p for p in relpaths if root is None or not (root / p).exists()]
    return pytest.mark.skipif(bool(missing), reason=f"data not available: {missing} "
                              "(set GRAPHATTN_DATA to the shared data folder)")

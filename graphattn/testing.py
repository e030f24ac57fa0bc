"""Random graph generators and helpers shared by the tests and benchmarks."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data

from graphattn.utils.validation import check_int

__all__ = ["random_graph", "random_graph_batch", "dense_mask_and_bias", "shared_data_dir",
           "requires_data", "sbm_graph", "saved_tensor_bytes"]


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
    candidates = [Path(env).expanduser().resolve()] if env else []
    candidates.append(Path(__file__).resolve().parents[2] / "shared" / "data")
    for c in candidates:
        if c.is_dir():
            return c
    return None


def requires_data(*relpaths: str):
    """pytest decorator: skip unless every ``relpath`` exists under the shared data dir."""
    import pytest  # a test dependency: not needed to import this module

    root = shared_data_dir()
    missing = [p for p in relpaths if root is None or not (root / p).exists()]
    return pytest.mark.skipif(bool(missing), reason=f"data not available: {missing} "
                              "(set GRAPHATTN_DATA to the shared data folder)")


def sbm_graph(num_nodes: int, num_edges: int, num_blocks: int = 10, p_in: float = 0.7,
              num_features: int = 16, noise: float = 2.0, power: float = 2.5, seed: int = 0,
              chunk: int = 4_000_000) -> Data:
    """A synthetic social graph: degree-corrected stochastic block model, vectorised.

    ``num_blocks`` equal blocks of consecutive node ids (label = block); every node has a
    heavy-tailed propensity θ (Pareto, exponent ``power``). Each edge picks its first end
    ∝ θ, and with probability ``p_in`` its second end ∝ θ inside the same block, else ∝ θ
    anywhere (inverse-CDF sampling with ``searchsorted``, in chunks of ``chunk`` edges).
    Self-loops and duplicates are dropped and topped up until exactly ``num_edges``
    undirected edges remain (``2 * num_edges`` directed entries). Features: a random mean
    per block plus Gaussian noise of std ``noise`` (weak alone, so the graph matters).
    Masks: random 60/20/20. Peak memory ≈ 40 bytes per undirected edge.
    """
    N, B = check_int("num_nodes", num_nodes, 2), check_int("num_blocks", num_blocks, 1)
    num_edges, chunk = check_int("num_edges", num_edges, 0), check_int("chunk", chunk, 1)
    check_int("num_features", num_features, 1)
    if B > N:
        raise ValueError(f"num_blocks ({B}) must be <= num_nodes ({N})")
    for name, v, ok, what in (("p_in", p_in, lambda v: 0 <= v <= 1, "in [0, 1]"),
                              ("noise", noise, lambda v: v >= 0, ">= 0"), ("power", power, lambda v: v > 1, "> 1")):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and ok(v)):
            raise ValueError(f"{name} must be a finite number {what}, got {v!r}")
    sizes = torch.bincount(torch.arange(N) * B // N, minlength=B)
    inside = int((sizes * (sizes - 1) // 2).sum())
    most = inside if p_in == 1 else N * (N - 1) // 2  # distinct undirected pairs that can be drawn
    if num_edges > most:
        raise ValueError(f"num_edges ({num_edges:,}) exceeds the {most:,} distinct node pairs this graph can "
                         f"have ({N:,} nodes{', edges inside blocks only (p_in = 1)' if p_in == 1 else ''})")
    gen = torch.Generator().manual_seed(int(seed))
    y = torch.arange(N) * B // N  # (N,) contiguous blocks
    theta = (1.0 - torch.rand(N, generator=gen, dtype=torch.float64)).pow(-1.0 / (power - 1.0)).clamp(max=1e3)
    cum = torch.cumsum(theta, 0)  # (N,) float64
    starts = torch.searchsorted(y, torch.arange(B))  # first node of every block
    base = torch.where(starts > 0, cum[(starts - 1).clamp(min=0)], torch.zeros(B, dtype=torch.float64))
    mass = cum[torch.cat([starts[1:], torch.tensor([N])]) - 1] - base
    keys, idle = torch.zeros(0, dtype=torch.long), 0
    while keys.numel() < num_edges:
        before = keys.numel()
        m = min(chunk, int(1.1 * (num_edges - keys.numel())) + 1000)
        s = torch.searchsorted(cum, torch.rand(m, generator=gen, dtype=torch.float64) * cum[-1]).clamp(max=N - 1)
        u = torch.rand(m, generator=gen, dtype=torch.float64)
        inside = torch.rand(m, generator=gen) < p_in
        b = y[s]
        target = torch.where(inside, base[b] + u * mass[b], u * cum[-1])
        d = torch.searchsorted(cum, target).clamp(max=N - 1)
        ok = s != d
        lo, hi = torch.minimum(s[ok], d[ok]), torch.maximum(s[ok], d[ok])
        keys = torch.unique(torch.cat([keys, lo * N + hi]))
        del s, u, inside, b, target, d, ok, lo, hi
        idle = idle + 1 if keys.numel() == before else 0
        if idle >= 100:  # nearly every pair is taken and the heavy-tailed draws keep hitting them
            raise RuntimeError(f"sbm_graph: stuck at {keys.numel():,} of {num_edges:,} distinct edges; "
                               "ask for fewer edges (or a larger power: a flatter degree distribution)")
    keys = keys[torch.randperm(keys.numel(), generator=gen)[:num_edges]]
    row, col = keys // N, keys % N
    del keys
    edge_index = torch.stack([torch.cat([row, col]), torch.cat([col, row])])  # (2, 2 * num_edges)
    del row, col
    mu = torch.randn(B, num_features, generator=gen)
    x = mu[y] + noise * torch.randn(N, num_features, generator=gen)
    r = torch.rand(N, generator=gen)
    data = Data(x=x, edge_index=edge_index, y=y, num_nodes=N,
                train_mask=r < 0.6, val_mask=(r >= 0.6) & (r < 0.8), test_mask=r >= 0.8)
    data.class_names = [str(i) for i in range(B)]
    return data


def saved_tensor_bytes(step: Callable[[], Any]) -> Tuple[Any, int]:
    """Run ``step()`` and count the bytes autograd keeps for backward (distinct storages
    of all tensors saved by every op and custom Function): the activation memory of a
    training step, independent of the allocator and of other processes."""
    seen: Dict[int, int] = {}

    def pack(t: Tensor):
        st = t.untyped_storage()
        seen[st.data_ptr()] = max(seen.get(st.data_ptr(), 0), st.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = step()
    return out, sum(seen.values())

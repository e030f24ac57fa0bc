"""Benchmark inputs shared by the scripts: molecule-like graph batches and batches of
complete ("full" pattern) graphs with a chosen spread of sizes.

Only :func:`molecule_like_edges` and :func:`graph_sizes` are pure Python (the drivers call
them without importing torch); :func:`complete_graph_batch` builds tensors.
"""
from __future__ import annotations

import math
import random
from typing import List, Optional, Tuple

__all__ = ["molecule_like_edges", "SPREADS", "graph_sizes", "padding_waste", "complete_graph_batch"]


def molecule_like_edges(graphs: int, seed: int) -> Tuple[int, List[int], List[int]]:
    """Disjoint union of random molecule-sized graphs: 18-32 nodes (mean 25), a random
    spanning tree plus 3 ring closures (~27 bonds), both directions (~54 directed edges).

    Returns ``(N, src, dst)`` as Python lists (one entry per directed edge)."""
    rng = random.Random(seed)
    src, dst, offset = [], [], 0
    for _ in range(graphs):
        n = rng.randint(18, 32)
        bonds = {(rng.randrange(i), i) for i in range(1, n)}  # random tree
        while len(bonds) < n - 1 + 3:
            a, b = sorted(rng.sample(range(n), 2))
            bonds.add((a, b))
        for a, b in bonds:
            src += [a + offset, b + offset]
            dst += [b + offset, a + offset]
        offset += n
    return offset, src, dst


#: Size spreads around a mean size n: every graph n nodes; uniform on [n/2, 3n/2]; uniform on
#: [1, 2n - 1] (padding to the largest graph then costs ~3x the useful work); log-normal with
#: Tox21's shape (sd of log size 0.57; batches of 128 Tox21 molecules pad ~13x).
SPREADS = ("equal", "±50%", "1..2n", "log-normal")
LOG_SD = 0.57  # Tox21: sizes 1..132 atoms, mean 18.6, median 16, sd of log(size) 0.57


def graph_sizes(mean: int, graphs: int, spread: str, seed: int = 0) -> List[int]:
    """``graphs`` graph sizes with mean ~``mean`` drawn (seeded) under ``spread``."""
    if spread not in SPREADS:
        raise ValueError(f"spread must be one of {SPREADS}, got {spread!r}")
    if mean < 1 or graphs < 1:
        raise ValueError(f"mean and graphs must be >= 1, got {mean} and {graphs}")
    rng = random.Random(seed)
    if spread == "equal":
        return [mean] * graphs
    if spread == "log-normal":  # E[exp(N(mu, sd))] = exp(mu + sd^2 / 2) = mean
        mu = math.log(mean) - LOG_SD ** 2 / 2
        return [max(1, round(rng.lognormvariate(mu, LOG_SD))) for _ in range(graphs)]
    lo, hi = ((max(1, (mean + 1) // 2), max(1, 3 * mean // 2)) if spread == "±50%"
              else (1, max(1, 2 * mean - 1)))
    return [rng.randint(lo, hi) for _ in range(graphs)]


def padding_waste(sizes: List[int], length: Optional[int] = None) -> float:
    """Score entries of the padded dense batch over the useful ones: ``B·L² / Σ n²`` with L
    the padded ``length`` (default: the largest size)."""
    L = max(sizes) if length is None else length
    return len(sizes) * L * L / sum(n * n for n in sizes)


def complete_graph_batch(sizes: List[int], device=None):
    """Disjoint union of complete graphs (``sequence_graph(n, "full")``: all pairs, self-loops
    included), as PyG batches them.

    Returns ``edge_index`` ``(2, Σ n²)`` and ``batch`` ``(Σ n,)`` (sorted graph ids)."""
    import torch

    from graphattn.patterns import sequence_graph

    parts, offset = [], 0
    cache = {}
    for n in sizes:
        if n not in cache:
            cache[n] = sequence_graph(n, "full", device=device)
        parts.append(cache[n] + offset)
        offset += n
    batch = torch.repeat_interleave(torch.arange(len(sizes), device=device),
                                    torch.tensor(sizes, device=device))
    return torch.cat(parts, dim=1), batch

"""Mini-batch node classification on one graph too large for a full-batch step.

Pure PyTorch (no pyg-lib, torch-sparse or METIS): the nodes are split into ``P`` parts
(:func:`partition_nodes`: seeded BFS growth with a size cap, so parts are connected
regions and most edges stay inside a part; or uniformly ``"random"``), and each step trains
on the subgraph induced by ``q`` parts drawn at random (Cluster-GCN, Chiang et al. 2019:
re-drawing the groups every epoch brings back the edges between parts). A model built with
global tokens gets ``G`` tokens per mini-batch — they see, and are seen by, every node of
the batch. Evaluation runs over fixed groups of parts, so every node is predicted once.

Memory: the graph is held once as int32 edges sorted by the part of their source node;
a batch is cut out of it with slicing and one mask (``O(batch edges)``, never a pass over
all ``E`` edges), so activations and attention temporaries scale with the batch, not with
the graph.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data

__all__ = ["partition_nodes", "PartitionBatches", "node_loaders", "sbm_graph", "saved_tensor_bytes"]


def partition_nodes(edge_index: Tensor, num_nodes: int, num_parts: int, method: str = "bfs",
                    seed: int = 0, max_rounds: int = 50) -> Tensor:
    """Assign every node to one of ``num_parts`` parts of at most ``ceil(N / P)`` nodes.

    ``"bfs"``: ``P`` random seed nodes grow in parallel, one hop per round (each unassigned
    node joins the part of a random assigned neighbour, while that part has room); nodes
    left over (other components, or blocked by full parts) fill the remaining room at
    random. ``"random"``: a seeded random balanced assignment. Vectorised: ``O(E)`` work per
    round and ``O(N + E)`` memory. Returns ``part`` ``(N,)`` int64 in ``[0, P)``.
    """
    if method not in ("bfs", "random"):
        raise ValueError(f"method must be 'bfs' or 'random', got {method!r}")
    N = int(num_nodes)
    P = max(1, min(int(num_parts), N))
    gen = torch.Generator().manual_seed(int(seed))
    cap = -(-N // P)
    if method == "random" or P == 1:
        return (torch.randperm(N, generator=gen) % P).long()
    label = torch.full((N,), -1, dtype=torch.int32)
    label[torch.randperm(N, generator=gen)[:P]] = torch.arange(P, dtype=torch.int32)
    size = torch.ones(P, dtype=torch.long)
    row, col = edge_index[0], edge_index[1]
    grown = P
    for _ in range(max_rounds):
        lr = label[row]
        m = (lr >= 0) & (label[col] < 0)
        m &= (size < cap)[lr.clamp(min=0).long()]
        if not bool(m.any()):
            break
        c, lab = col[m].long(), lr[m].long()
        perm = torch.randperm(c.numel(), generator=gen)  # random winner among proposals
        c, lab = c[perm], lab[perm]
        c_sorted, idx = torch.sort(c, stable=True)
        first = torch.ones_like(c_sorted, dtype=torch.bool)
        first[1:] = c_sorted[1:] != c_sorted[:-1]
        c, lab = c_sorted[first], lab[idx[first]]
        lab_sorted, idx = torch.sort(lab, stable=True)  # cap: keep the first (cap - size) per part
        counts = torch.bincount(lab_sorted, minlength=P)
        rank = torch.arange(lab_sorted.numel()) - (torch.cumsum(counts, 0) - counts)[lab_sorted]
        ok = rank < (cap - size)[lab_sorted]
        c, lab = c[idx[ok]], lab_sorted[ok]
        label[c] = lab.to(torch.int32)
        size += torch.bincount(lab, minlength=P)
        if c.numel() < min(grown, max(1, N // 1000)):  # the frontier stalls against full parts
            break
        grown = c.numel()
    rest = (label < 0).nonzero().view(-1)
    if rest.numel():  # fill the remaining room at random
        slots = torch.repeat_interleave(torch.arange(P), (cap - size).clamp(min=0))
        slots = slots[torch.randperm(slots.numel(), generator=gen)[:rest.numel()]]
        label[rest] = slots.to(torch.int32)
    return label.long()


class PartitionBatches:
    """Iterable of induced subgraphs, each the union of ``parts_per_batch`` parts.

    Args:
        data: the whole graph (``x``, ``edge_index``, ``y``, masks, optional ``pe``).
        part: ``(N,)`` part of every node (:func:`partition_nodes`).
        parts_per_batch (int, default 1): q, parts per mini-batch.
        shuffle (bool, default False): draw new random groups every iteration (training),
            from the global torch RNG so that a resumed run continues identically.

    Yields ``Data(x, edge_index, y, train_mask, val_mask, test_mask[, pe], n_id, key)``
    with ``n_id`` the global ids of the batch's nodes and ``key`` the tuple of its parts.
    """

    node_keys: Sequence[str] = ("x", "y", "train_mask", "val_mask", "test_mask", "pe", "lap_pe")

    def __init__(self, data: Data, part: Tensor, parts_per_batch: int = 1, shuffle: bool = False):
        N = data.num_nodes
        if part.shape != (N,):
            raise ValueError(f"part must have shape ({N},), got {tuple(part.shape)}")
        self.data, self.shuffle = data, shuffle
        self.num_parts = int(part.max()) + 1 if N else 0
        self.parts_per_batch = max(1, min(int(parts_per_batch), self.num_parts))
        self.part = part.to(torch.int32)
        self.nodes_by_part = torch.argsort(part, stable=True)  # (N,)
        self.node_ptr = torch.cat([torch.zeros(1, dtype=torch.long),
                                   torch.cumsum(torch.bincount(part, minlength=self.num_parts), 0)])
        row, col = data.edge_index
        src_part = part[row]
        order = torch.argsort(src_part, stable=True)  # edges grouped by the part of their source
        self.edge_ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(
            torch.bincount(src_part, minlength=self.num_parts), 0)])
        del src_part
        self.row, self.col = row[order].to(torch.int32), col[order].to(torch.int32)  # (E,) each
        del order
        self._local = torch.full((N,), -1, dtype=torch.int64)  # global -> batch-local id
        self._in = torch.zeros(self.num_parts, dtype=torch.bool)

    def __len__(self) -> int:
        return math.ceil(self.num_parts / self.parts_per_batch)

    def groups(self) -> Sequence[Tensor]:
        order = torch.randperm(self.num_parts) if self.shuffle else torch.arange(self.num_parts)
        return list(order.split(self.parts_per_batch))

    def __iter__(self) -> Iterator[Data]:
        for parts in self.groups():
            yield self.subgraph(parts)

    def subgraph(self, parts: Tensor) -> Data:
        """The subgraph induced by the nodes of ``parts`` (local ids follow ``n_id``)."""
        parts = torch.as_tensor(parts, dtype=torch.long).view(-1)
        n_id = torch.cat([self.nodes_by_part[self.node_ptr[p]:self.node_ptr[p + 1]] for p in parts.tolist()])
        rows = torch.cat([self.row[self.edge_ptr[p]:self.edge_ptr[p + 1]] for p in parts.tolist()])
        cols = torch.cat([self.col[self.edge_ptr[p]:self.edge_ptr[p + 1]] for p in parts.tolist()])
        self._in[parts] = True
        keep = self._in[self.part[cols.long()].long()]
        self._in[parts] = False
        self._local[n_id] = torch.arange(n_id.numel())
        edge_index = torch.stack([self._local[rows[keep].long()], self._local[cols[keep].long()]])  # (2, E_b)
        self._local[n_id] = -1
        out = Data(edge_index=edge_index, num_nodes=n_id.numel(), n_id=n_id)
        for k in self.node_keys:
            v = getattr(self.data, k, None)
            if isinstance(v, Tensor) and v.size(0) == self.data.num_nodes:
                out[k] = v[n_id]
        out.key = tuple(parts.tolist())
        return out

    def coverage(self) -> Tuple[int, int]:
        """(edges kept inside parts, all edges): how much of the graph one part sees."""
        same = self.part[self.row.long()] == self.part[self.col.long()]
        return int(same.sum()), int(self.row.numel())


def default_partitioning(num_nodes: int, batch_nodes: int = 50_000, parts_per_batch: int = 4
                         ) -> Tuple[int, int]:
    """(P, q): about ``batch_nodes`` nodes per mini-batch, at least 2 mini-batches."""
    q = parts_per_batch
    P = max(2 * q, math.ceil(q * num_nodes / batch_nodes))
    return min(P, max(1, num_nodes)), q


def node_loaders(data: Data, model_spec: Dict[str, Any], seed: int = 0, num_parts: Optional[int] = None,
                 parts_per_batch: Optional[int] = None, batch_nodes: int = 50_000, method: str = "bfs"):
    """``(loaders, forward)`` for :func:`graphattn.train.fit` in mini-batch mode."""
    from .social_node import EvalCache, _call, node_inputs

    P, q = default_partitioning(data.num_nodes, batch_nodes)
    P, q = num_parts or P, parts_per_batch or q
    part = partition_nodes(data.edge_index, data.num_nodes, P, method=method, seed=seed)
    train = PartitionBatches(data, part, q, shuffle=True)
    evals = PartitionBatches(data, part, q, shuffle=False)
    inside, total = train.coverage()
    print(f"mini-batch: {train.num_parts} parts ({method}), {q} per batch, {len(train)} batches/epoch; "
          f"{inside / max(total, 1):.1%} of edges inside a part")
    cache = EvalCache()

    def forward(model, batch, split):
        inp = node_inputs(batch)
        logits = cache(model, batch.key, lambda: _call(model, model_spec, inp["x"], inp["edge_index"], inp["pe"]))
        mask = batch[f"{split}_mask"]
        return logits[mask], batch.y[mask]

    return {"train": train, "val": evals, "test": evals}, forward


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
    gen = torch.Generator().manual_seed(int(seed))
    N, B = int(num_nodes), int(num_blocks)
    y = torch.arange(N) * B // N  # (N,) contiguous blocks
    theta = (1.0 - torch.rand(N, generator=gen, dtype=torch.float64)).pow(-1.0 / (power - 1.0)).clamp(max=1e3)
    cum = torch.cumsum(theta, 0)  # (N,) float64
    starts = torch.searchsorted(y, torch.arange(B))  # first node of every block
    base = torch.where(starts > 0, cum[(starts - 1).clamp(min=0)], torch.zeros(B, dtype=torch.float64))
    mass = cum[torch.cat([starts[1:], torch.tensor([N])]) - 1] - base
    keys = torch.zeros(0, dtype=torch.long)
    while keys.numel() < num_edges:
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

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
from typing import Iterator, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data

from graphattn.utils.validation import check_edge_index, check_int

__all__ = ["partition_nodes", "PartitionBatches", "default_partitioning"]


def partition_nodes(edge_index: Tensor, num_nodes: int, num_parts: int, method: str = "bfs",
                    seed: int = 0, max_rounds: Optional[int] = None) -> Tensor:
    """Assign every node to one of ``num_parts`` parts of at most ``ceil(N / P)`` nodes.

    ``"bfs"``: ``P`` random seed nodes grow in parallel, one hop per round along the edges
    (source -> target; PyG's undirected graphs hold both directions): each unassigned
    neighbour of a node added in the last round joins that node's part (a random one among
    several), while the part has room. A part that can grow no further (its component is
    used up, or it is walled in) but still has room restarts from random unassigned nodes
    (up to 0.1 % of those left, shared by the stuck parts), so graphs made of many small
    components keep their components whole. Every part gets at least one node (P <= N).
    Work: ``O(E)`` for the growth (each node's edges are expanded once) plus ``O(P)`` per
    round; memory ``O(N + E)``.
    ``"random"``: a seeded random balanced assignment.

    Args:
        edge_index: ``(2, E)`` integer edges with ids in ``[0, num_nodes)``.
        num_nodes: N >= 0.  num_parts: P >= 1 (more parts than nodes: N parts of one node).
        max_rounds: stop growing after this many rounds (None = until every node is placed);
            nodes left then fill the remaining room at random.

    Returns ``part`` ``(N,)`` int64 in ``[0, min(P, N))``.
    """
    if method not in ("bfs", "random"):
        raise ValueError(f"method must be 'bfs' or 'random', got {method!r}")
    N, P = check_int("num_nodes", num_nodes, 0), check_int("num_parts", num_parts, 1)
    if max_rounds is not None:
        check_int("max_rounds", max_rounds, 0)
    check_edge_index(edge_index, N)
    P = max(1, min(P, N))
    gen = torch.Generator().manual_seed(int(seed))
    cap = -(-N // P) if N else 0
    if method == "random" or P == 1 or N == 0:
        return (torch.randperm(N, generator=gen) % P).long()
    order = torch.argsort(edge_index[0], stable=True)
    nbr = edge_index[1][order].to(torch.int32)  # (E,) targets grouped by source (CSR)
    del order
    ptr = torch.zeros(N + 1, dtype=torch.long)
    ptr[1:] = torch.cumsum(torch.bincount(edge_index[0].long(), minlength=N), 0)
    label = torch.full((N,), -1, dtype=torch.long)
    size = torch.zeros(P, dtype=torch.long)
    # (re)start nodes are taken in this random order, nodes with out-edges first (the others
    # grow nothing: they only seed a part when there are too few of the former)
    pool = torch.randperm(N, generator=gen)
    grows = ptr[pool + 1] > ptr[pool]
    pool, pos = torch.cat([pool[grows], pool[~grows]]), 0

    def restart(parts: Tensor) -> Tensor:  # one unassigned node for each entry of ``parts`` (while any)
        nonlocal pos
        k, seeds = parts.numel(), []
        while len(seeds) < k and pos < pool.numel():
            chunk = pool[pos:pos + max(4 * k, 1024)]
            free = (label[chunk] < 0).nonzero().view(-1)[:k - len(seeds)]
            seeds.extend(chunk[free].tolist())
            pos += int(free[-1]) + 1 if len(seeds) == k else chunk.numel()
        seeds_t = torch.tensor(seeds, dtype=torch.long)
        label[seeds_t] = parts[:seeds_t.numel()]
        size.add_(torch.bincount(parts[:seeds_t.numel()], minlength=P))
        return seeds_t

    frontier = restart(torch.arange(P))
    rounds = 0
    while frontier.numel() and (max_rounds is None or rounds < max_rounds):
        rounds += 1
        c, lab = _claim_neighbours(frontier, ptr, nbr, label, size, cap, gen)
        stuck = ((size < cap) & (torch.bincount(lab, minlength=P) == 0)).nonzero().view(-1)
        frontier = c
        if stuck.numel() and pos < pool.numel():  # parts that stopped growing start again elsewhere,
            # from up to 0.1 % of the unassigned nodes between them (at least one each): graphs of
            # many small components need few rounds, and seeds rarely share a component
            per = max(1, (N - int(size.sum())) // 1000 // stuck.numel())
            again = torch.repeat_interleave(stuck, (cap - size[stuck]).clamp(max=per))
            frontier = torch.cat([frontier, restart(again[torch.randperm(again.numel(), generator=gen)])])
    rest = (label < 0).nonzero().view(-1)
    if rest.numel():  # rounds ran out: fill the remaining room at random
        slots = torch.repeat_interleave(torch.arange(P), (cap - size).clamp(min=0))
        slots = slots[torch.randperm(slots.numel(), generator=gen)[:rest.numel()]]
        label[rest] = slots
    return label



def _claim_neighbours(frontier: Tensor, ptr: Tensor, nbr: Tensor, label: Tensor, size: Tensor, cap: int,
                      gen: torch.Generator) -> Tuple[Tensor, Tensor]:
    """One round of growth of :func:`partition_nodes`: the unassigned out-neighbours of ``frontier`` join
    its nodes' parts (a random winner among several proposals, at most the room left in each part).
    Updates ``label`` (N,) and ``size`` (P,) in place; returns the nodes placed and their parts."""
    P = size.numel()
    counts = ptr[frontier + 1] - ptr[frontier]
    total = int(counts.sum())
    starts = torch.repeat_interleave(ptr[frontier], counts)
    offs = torch.arange(total) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
    c = nbr[starts + offs].long()  # neighbours of the frontier
    lab = torch.repeat_interleave(label[frontier], counts)
    m = (label[c] < 0) & (size[lab] < cap)
    c, lab = c[m], lab[m]
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
    label[c] = lab
    size += torch.bincount(lab, minlength=P)
    return c, lab


class PartitionBatches:
    """Iterable of induced subgraphs, each the union of ``parts_per_batch`` parts.

    Args:
        data: the whole graph (``x``, ``edge_index``, ``y``, masks, optional ``pe``).
        part: ``(N,)`` part of every node (:func:`partition_nodes`).
        parts_per_batch (int, default 1): q, parts per mini-batch.
        shuffle (bool, default False): draw new random groups every iteration (training),
            from the global torch RNG so that a resumed run continues identically.

    Yields ``Data(x, edge_index[, edge_attr], y, train_mask, val_mask, test_mask[, pe], n_id,
    key)`` with ``n_id`` the global ids of the batch's nodes and ``key`` the tuple of its
    parts; ``edge_attr`` (one row per edge) is cut out with its edges.
    """

    node_keys: Sequence[str] = ("x", "y", "train_mask", "val_mask", "test_mask", "pe", "lap_pe")

    def __init__(self, data: Data, part: Tensor, parts_per_batch: int = 1, shuffle: bool = False):
        N = data.num_nodes
        if not isinstance(part, Tensor) or part.shape != (N,) or part.is_floating_point() or part.dtype == torch.bool:
            raise ValueError(f"part must be an integer tensor of shape ({N},), got "
                             f"{tuple(part.shape) if isinstance(part, Tensor) else type(part).__name__}"
                             f"{' ' + str(part.dtype) if isinstance(part, Tensor) else ''}")
        if N and int(part.min()) < 0:
            raise ValueError(f"part holds a negative part id ({int(part.min())})")
        check_int("parts_per_batch", parts_per_batch, 1)
        check_edge_index(data.edge_index, N)
        part = part.long()
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
        ea = getattr(data, "edge_attr", None)  # edge features follow their edges into the batches
        self.edge_attr = ea[order] if isinstance(ea, Tensor) and ea.size(0) == row.numel() else None
        del order
        self._local = torch.full((N,), -1, dtype=torch.int64)  # global -> batch-local id
        self._in = torch.zeros(self.num_parts, dtype=torch.bool)
        self._shard, self._epoch = (0, 1, 0), 0  # (rank, world, seed), see set_shard

    def set_shard(self, rank: int, world: int, seed: int = 0) -> None:
        """Under torch.distributed: every epoch, all ranks draw the same groups (from ``seed`` and
        the epoch) and rank r takes groups r, r + W, ...; cut to a multiple of W so that every
        rank takes the same number of steps."""
        self._shard = (check_int("rank", rank, 0), check_int("world", world, 1), int(seed))

    def set_epoch(self, epoch: int) -> None:
        """Under torch.distributed: the next pass draws epoch ``epoch``'s groups (1-based), as
        ``DistributedSampler.set_epoch`` does; a resumed run continues the same sequence."""
        self._epoch = check_int("epoch", epoch, 1) - 1

    def __len__(self) -> int:
        n = math.ceil(self.num_parts / self.parts_per_batch)
        return n // self._shard[1] if self._shard[1] > 1 else n

    def groups(self) -> Sequence[Tensor]:
        rank, world, seed = self._shard
        if world > 1:  # the same groups on every rank, new ones every epoch
            self._epoch += 1
            gen = torch.Generator().manual_seed(seed + self._epoch)
            order = torch.randperm(self.num_parts, generator=gen) if self.shuffle else torch.arange(self.num_parts)
            return list(order.split(self.parts_per_batch))[rank::world][:len(self)]
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
        attr = None if self.edge_attr is None else torch.cat(
            [self.edge_attr[self.edge_ptr[p]:self.edge_ptr[p + 1]] for p in parts.tolist()])
        self._in[parts] = True
        keep = self._in[self.part[cols.long()].long()]
        self._in[parts] = False
        self._local[n_id] = torch.arange(n_id.numel())
        edge_index = torch.stack([self._local[rows[keep].long()], self._local[cols[keep].long()]])  # (2, E_b)
        self._local[n_id] = -1
        out = Data(edge_index=edge_index, num_nodes=n_id.numel(), n_id=n_id)
        if attr is not None:
            out.edge_attr = attr[keep]
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
    q = check_int("parts_per_batch", parts_per_batch, 1)
    P = max(2 * q, math.ceil(q * num_nodes / check_int("batch_nodes", batch_nodes, 1)))
    return min(P, max(1, num_nodes)), q



"""Neighbour-sampled mini-batches (GraphSAGE, Hamilton et al. 2017) in pure PyTorch.

PyG's ``NeighborLoader`` needs pyg-lib or torch-sparse for its sampler; neither installs
everywhere (not on this project's CPU machines), and without them it fails. :class:`NeighborLoader`
here yields the same mini-batches from plain tensor ops: for a batch of seed nodes it samples,
hop by hop, up to ``num_neighbors[k]`` incoming edges (j -> i) of every node reached at hop k,
and returns the sampled subgraph as a PyG ``Data`` in PyG's layout — seed nodes first, local ids,
``n_id`` / ``e_id`` (global node / edge ids), ``batch_size``, ``input_id``, and
``num_sampled_nodes`` / ``num_sampled_edges`` per hop — so a loop written for PyG's loader
(``model(batch.x, batch.edge_index)[:batch.batch_size]``) runs unchanged, with any model.

Cost per batch: ``O(Σ min(in-degree, 8k))`` over the nodes expanded — a node with at most
``8k`` incoming edges gives each a random key and keeps the ``k`` smallest; a hub draws ``2k``
positions and keeps the first ``k`` distinct ones (both uniform without replacement) — plus an
``O(N)`` id map allocated once per loader. The graph is held once as edges sorted by target (CSR).
"""
from __future__ import annotations

import copy
import math
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from graphattn.utils.validation import check_edge_index, check_int

__all__ = ["NeighborLoader", "sample_neighbors"]


def sample_neighbors(rowptr: Tensor, col: Tensor, nodes: Tensor, num: int, replace: bool = False,
                     generator: Optional[torch.Generator] = None) -> Tuple[Tensor, Tensor]:
    """Up to ``num`` incoming edges of every node in ``nodes`` from a target-sorted CSR.

    Args:
        rowptr: ``(N + 1,)`` CSR over targets; col: ``(E,)`` sources in CSR order.
        nodes: ``(M,)`` node ids to expand.
        num: edges per node; ``-1`` = all of them. Without ``replace`` a node with fewer
            incoming edges keeps all of them, else ``num`` distinct ones uniformly at random;
            with ``replace``, ``num`` draws with replacement (none for a node without edges).

    Returns ``(pos, owner)``: ``pos`` CSR positions of the sampled edges, ``owner`` the index
    into ``nodes`` of the node each one was sampled for.
    """
    starts = rowptr[nodes]
    deg = rowptr[nodes + 1] - starts  # (M,)
    if num == 0:  # PyG: a fanout of 0 samples nothing at that hop
        empty = torch.zeros(0, dtype=torch.long, device=nodes.device)
        return empty, empty
    if replace and num >= 0:
        has = deg > 0
        owner = torch.arange(nodes.numel(), device=nodes.device)[has].repeat_interleave(num)
        draw = (torch.rand(owner.numel(), generator=generator, dtype=torch.float64) * deg[owner]).long()
        return starts[owner] + draw.clamp(max=torch.clamp(deg[owner] - 1, min=0)), owner
    if num < 0:
        return _by_keys(starts, deg, -1, generator)
    # hubs (more than 8 num edges): num distinct draws in O(num), not a key per edge
    hub = deg > 8 * num
    if not bool(hub.any()):
        return _by_keys(starts, deg, num, generator)
    small, hubs = torch.nonzero(~hub).view(-1), torch.nonzero(hub).view(-1)
    pos_s, own_s = _by_keys(starts[small], deg[small], num, generator)
    pos_h, own_h, short = _by_draws(starts[hubs], deg[hubs], num, generator)
    pieces = [(pos_s, small[own_s]), (pos_h, hubs[own_h])]
    if short.numel():  # a hub whose draws repeated too often (rare): by keys
        pos_f, own_f = _by_keys(starts[hubs[short]], deg[hubs[short]], num, generator)
        pieces.append((pos_f, hubs[short][own_f]))
    return torch.cat([p for p, _ in pieces]), torch.cat([o for _, o in pieces])


def _by_keys(starts: Tensor, deg: Tensor, num: int, generator) -> Tuple[Tensor, Tensor]:
    """Every candidate edge gets a random key; the ``num`` smallest per node are kept (all of
    them for ``num = -1`` or ``deg <= num``). ``O(Σ deg)``."""
    owner = torch.repeat_interleave(torch.arange(deg.numel(), device=deg.device), deg)  # (T,)
    first = torch.cumsum(deg, 0) - deg  # (M,) first candidate of each node
    pos = torch.arange(owner.numel(), device=deg.device) - first[owner] + starts[owner]  # (T,)
    if num < 0 or owner.numel() == 0 or bool((deg <= num).all()):
        return pos, owner
    # one sort by owner + key (key in [0, 1); in float64 the owner's integer part leaves the
    # key > 30 bits), then the rank within the owner
    keys = torch.rand(owner.numel(), generator=generator, dtype=torch.float64)
    order = torch.argsort(owner.to(torch.float64) + keys)  # grouped by owner, random within
    rank = torch.arange(owner.numel(), device=deg.device) - first[owner[order]]
    keep = order[rank < num]
    return pos[keep], owner[keep]


def _by_draws(starts: Tensor, deg: Tensor, num: int, generator) -> Tuple[Tensor, Tensor, Tensor]:
    """``num`` distinct edges per node (``deg > num``) from ``2 num`` uniform draws with
    replacement: the first ``num`` distinct values of an i.i.d. sequence are a uniform random
    ``num``-subset. ``O(num)`` per node. Returns ``(pos, owner, short)``, ``short`` the nodes whose
    draws held fewer than ``num`` distinct values (left out of ``pos``)."""
    h, m = deg.numel(), 2 * num
    draws = (torch.rand(h, m, generator=generator, dtype=torch.float64) * deg[:, None]).long()  # (h, m)
    draws = torch.minimum(draws, deg[:, None] - 1)
    vals, perm = torch.sort(draws, dim=1, stable=True)  # ties keep draw order: first one = first drawn
    repeat = torch.zeros_like(vals, dtype=torch.bool)
    repeat[:, 1:] = vals[:, 1:] == vals[:, :-1]
    fresh = torch.zeros_like(repeat).scatter_(1, perm, ~repeat)  # (h, m) first occurrences, draw order
    count = torch.cumsum(fresh, dim=1)
    ok = count[:, -1] >= num
    take = fresh & (count <= num) & ok[:, None]
    owner = torch.arange(h, device=deg.device)[:, None].expand(h, m)[take]
    return starts[owner] + draws[take], owner, torch.nonzero(~ok).view(-1)


class NeighborLoader:
    """Mini-batches of seed nodes with their sampled ``len(num_neighbors)``-hop neighbourhood.

    Args:
        data: the graph (``edge_index`` ``(2, E)``, node attributes such as ``x``, ``y``, masks;
            edge attributes such as ``edge_attr``) — a PyG ``Data``.
        num_neighbors: incoming edges sampled per node at each hop (``-1`` = all), e.g.
            ``[10, 10]`` for a 2-layer model.
        batch_size (int, default 1): seed nodes per mini-batch.
        input_nodes: the seed nodes, as a bool mask ``(N,)`` or ids; default every node.
        shuffle (bool, default False): new seed order every epoch.
        replace (bool, default False): sample with replacement.
        drop_last (bool, default False): drop a last, smaller batch.
        generator: a ``torch.Generator`` for the shuffling and sampling (default: the global
            RNG, so a seeded run — and a resumed one — draws the same batches).
        seed (int, optional): instead, every pass starts a fresh generator from this seed: the
            same batches on every pass (for evaluation).

    The graph is sampled on the CPU (keep ``data`` there; move each batch with
    ``batch.to(device)``).

    Yields PyG ``Data``: node attributes of ``data`` cut to the sampled nodes (``n_id``, the seeds
    first: the loss goes on the first ``batch_size`` rows), ``edge_index`` of the sampled edges
    in local ids (row 0 the neighbour j, row 1 the node i that sampled it), edge attributes cut to
    them (``e_id``), ``input_id`` (positions in ``input_nodes``), ``num_sampled_nodes`` /
    ``num_sampled_edges`` per hop, and graph-level attributes unchanged (numpy node / edge
    attributes are cut too, as in PyG; a fanout of 0 samples nothing at that hop).

    With every neighbour (``-1``) for as many hops as the model has layers, the seeds' outputs
    equal full-graph inference (eval mode). Global tokens are the exception by design: a batch
    is its own graph, so the tokens summarise the sampled subgraph, not the whole graph.
    """

    def __init__(self, data: Data, num_neighbors: Sequence[int], batch_size: int = 1,
                 input_nodes: Optional[Tensor] = None, shuffle: bool = False, replace: bool = False,
                 drop_last: bool = False, generator: Optional[torch.Generator] = None,
                 seed: Optional[int] = None):
        if isinstance(num_neighbors, int) or not len(num_neighbors):
            raise ValueError(f"num_neighbors must be a non-empty list of ints (per hop, -1 = all), "
                             f"got {num_neighbors!r}")
        self.num_neighbors = [check_int("num_neighbors[k]", k, -1) for k in num_neighbors]
        self.batch_size = check_int("batch_size", batch_size, 1)
        if not isinstance(data, Data):  # HeteroData (per-type fanouts) is not sampled here
            raise TypeError(f"NeighborLoader takes a homogeneous torch_geometric.data.Data, got "
                            f"{type(data).__name__}" + (": convert with data.to_homogeneous()"
                                                        if hasattr(data, "to_homogeneous") else ""))
        N = data.num_nodes
        check_edge_index(data.edge_index, N)
        if data.edge_index.device.type != "cpu":
            raise ValueError("NeighborLoader samples on the CPU: pass the graph on the CPU and move each "
                             "batch with batch.to(device)")
        if generator is not None and seed is not None:
            raise ValueError("give generator or seed, not both")
        self.data, self.shuffle, self.replace, self.drop_last = data, shuffle, replace, drop_last
        self.generator, self.seed = generator, None if seed is None else check_int("seed", seed, 0)
        self.input_nodes = _seed_ids(input_nodes, N)
        self._shard = (0, 1, 0)  # (rank, world, seed) under torch.distributed, see set_shard
        self._epoch = 0
        src, dst = data.edge_index[0].long(), data.edge_index[1].long()
        self.perm = torch.argsort(dst, stable=True)  # CSR position -> edge id
        self.col = src[self.perm]  # (E,) sources by target
        self.rowptr = torch.zeros(N + 1, dtype=torch.long)
        torch.cumsum(torch.bincount(dst, minlength=N), 0, out=self.rowptr[1:])
        self._local = torch.full((N,), -1, dtype=torch.long)  # global -> batch-local id, reset after use

    def with_seeds(self, input_nodes: Optional[Tensor], shuffle: bool = False,
                   seed: Optional[int] = None) -> "NeighborLoader":
        """A loader of other seed nodes over the same graph, sharing this one's CSR (no copy)."""
        other = copy.copy(self)
        other.input_nodes = _seed_ids(input_nodes, self.data.num_nodes)
        other.shuffle, other.generator = shuffle, None
        other.seed = None if seed is None else check_int("seed", seed, 0)
        other._shard, other._epoch = (0, 1, 0), 0
        return other

    def set_shard(self, rank: int, world: int, seed: int = 0) -> None:
        """Under torch.distributed: every epoch, all ranks draw the same batch order (from
        ``seed`` and the epoch) and rank r samples batches r, r + W, ...; the batch count is cut
        to a multiple of W so every rank takes the same number of steps."""
        self._shard = (check_int("rank", rank, 0), check_int("world", world, 1), int(seed))

    def set_epoch(self, epoch: int) -> None:
        """Under torch.distributed: the next pass draws epoch ``epoch``'s batch order (1-based),
        as ``DistributedSampler.set_epoch`` does; a resumed run continues the same sequence."""
        self._epoch = check_int("epoch", epoch, 1) - 1

    def __len__(self) -> int:
        n = self.input_nodes.numel()
        batches = n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        rank, world, _ = self._shard
        return batches // world if world > 1 else batches

    def __iter__(self) -> Iterator[Data]:
        n = self.input_nodes.numel()
        rank, world, shard_seed = self._shard
        gen = self.generator if self.seed is None else torch.Generator().manual_seed(self.seed)
        if world > 1:  # the same order on every rank
            self._epoch += 1
            order_gen = torch.Generator().manual_seed(shard_seed + self._epoch)
            order = torch.randperm(n, generator=order_gen) if self.shuffle else torch.arange(n)
        else:
            order = torch.randperm(n, generator=gen) if self.shuffle else torch.arange(n)
        for i in range(len(self)):
            b = i * world + rank
            input_id = order[b * self.batch_size:(b + 1) * self.batch_size]
            yield self.sample(self.input_nodes[input_id], input_id, generator=gen)

    def sample(self, seeds: Tensor, input_id: Optional[Tensor] = None,
               generator: Optional[torch.Generator] = None) -> Data:
        """The sampled subgraph of ``seeds`` (distinct node ids), as yielded by the iterator."""
        seeds = _seed_ids(torch.as_tensor(seeds).view(-1), self.data.num_nodes, what="seeds")
        gen = generator if generator is not None else self.generator
        local = self._local
        try:
            return self._sample(seeds, input_id, gen, local)
        except BaseException:  # the id map is shared by every batch: left clean after errors, Ctrl-C
            local.fill_(-1)
            raise

    def _sample(self, seeds: Tensor, input_id: Optional[Tensor], gen, local: Tensor) -> Data:
        local[seeds] = torch.arange(seeds.numel())
        nodes: List[Tensor] = [seeds]
        rows: List[Tensor] = []
        cols: List[Tensor] = []
        eids: List[Tensor] = []
        frontier, count = seeds, seeds.numel()
        num_nodes, num_edges = [seeds.numel()], []
        for k in self.num_neighbors:
            pos, owner = sample_neighbors(self.rowptr, self.col, frontier, k, self.replace, gen)
            nbr = self.col[pos]  # (S,) global ids of the sampled neighbours
            new = torch.unique(nbr[local[nbr] < 0])  # reached for the first time
            local[new] = torch.arange(count, count + new.numel())
            count += new.numel()
            rows.append(local[nbr])
            cols.append(local[frontier[owner]])
            eids.append(self.perm[pos])
            nodes.append(new)
            num_nodes.append(new.numel())
            num_edges.append(pos.numel())
            frontier = new
        n_id = torch.cat(nodes)
        local[n_id] = -1  # clean for the next batch (only the entries this one set)
        e_id = torch.cat(eids)
        out = Data(edge_index=torch.stack([torch.cat(rows), torch.cat(cols)]), num_nodes=n_id.numel())
        data = self.data
        for key, value in data.items():
            if key in ("edge_index", "num_nodes"):
                continue
            if isinstance(value, Tensor) and data.is_node_attr(key):
                out[key] = value[n_id]
            elif isinstance(value, Tensor) and data.is_edge_attr(key):
                out[key] = value[e_id]
            elif isinstance(value, np.ndarray) and value.ndim and data.is_node_attr(key):  # as PyG slices them
                out[key] = value[n_id.numpy()]
            elif isinstance(value, np.ndarray) and value.ndim and data.is_edge_attr(key):
                out[key] = value[e_id.numpy()]
            else:
                out[key] = value
        out.n_id, out.e_id, out.batch_size = n_id, e_id, seeds.numel()
        out.input_id = input_id if input_id is not None else torch.arange(seeds.numel())
        out.num_sampled_nodes, out.num_sampled_edges = num_nodes, num_edges
        return out


def _seed_ids(input_nodes: Optional[Tensor], N: int, what: str = "input_nodes") -> Tensor:
    if input_nodes is None:
        return torch.arange(N)
    t = torch.as_tensor(input_nodes).cpu()
    if t.dtype == torch.bool:
        if t.shape != (N,):
            raise ValueError(f"{what} as a mask must have shape ({N},), got {tuple(t.shape)}")
        return torch.nonzero(t).view(-1)
    if t.is_floating_point() or t.is_complex() or t.dim() != 1:
        raise ValueError(f"{what} must be a bool mask ({N},) or 1-D integer node ids, got "
                         f"{t.dtype} of shape {tuple(t.shape)}")
    t = t.long()
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= N):
        raise ValueError(f"{what} holds ids outside [0, {N}): min {int(t.min())}, max {int(t.max())}")
    if torch.unique(t).numel() != t.numel():
        raise ValueError(f"{what} holds duplicate node ids")
    return t



"""Mini-batches of many small graphs collated from an ``InMemoryDataset``'s storage.

PyG's ``DataLoader`` builds every batch from a list of ``Data`` objects: one ``dataset[i]``
(a slice per attribute) per graph, then a Python loop over graphs per attribute. For molecules
(~20 atoms each) that is most of the cost of a batch. :func:`in_memory_loader` collates a list
of graph positions straight from the dataset's concatenated tensors (``_data``, ``slices``)
with a handful of tensor ops per attribute: the rows of graph ``g`` are
``slices[key][g] : slices[key][g + 1]``, gathered for all graphs of a batch at once;
``edge_index``-like attributes (name contains ``"index"``) are shifted by the cumulative node
count of the graphs before them; ``batch`` is ``repeat_interleave`` of the node counts.
The result is a ``torch_geometric.data.Batch`` equal to the one PyG's ``DataLoader`` yields for
the same graphs in the same order (same tensors, ``ptr``, ``num_graphs``, ``to_data_list``).

It is a plain ``torch.utils.data.DataLoader`` over graph positions with a batch-level
``collate_fn``, so shuffling draws the same order as PyG's loader under the same seed or
``generator``, and a ``DistributedSampler`` can replace its sampler.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from torch_geometric.data import Batch, Data

__all__ = ["InMemoryCollater", "in_memory_loader"]


class _Positions(Dataset):
    """Positions ``0 .. n-1`` of a dataset's graphs; a batch of them is fetched as one list."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i

    def __getitems__(self, idx: List[int]) -> List[int]:  # the whole batch at once
        return idx


def _rows(slices: Tensor, graphs: Tensor):
    """``(positions, counts)``: the storage rows of ``graphs`` in order, and per graph its row count."""
    start, counts = slices[graphs], slices[graphs + 1] - slices[graphs]  # (B,), (B,)
    offsets = torch.cumsum(counts, 0) - counts  # first row of each graph in the batch, (B,)
    total = int(offsets[-1] + counts[-1]) if graphs.numel() else 0
    shift = torch.repeat_interleave(start - offsets, counts, output_size=total)  # (R,)
    return torch.arange(total, dtype=slices.dtype) + shift, counts


def _cumsum0(counts: Tensor) -> Tensor:
    """``[0, c0, c0 + c1, ...]``: PyG's ``ptr`` / slice vector of ``counts``."""
    return torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])


class InMemoryCollater:
    """``collate_fn`` turning a list of positions in ``dataset`` (an ``InMemoryDataset``, possibly
    an index subset such as ``ds[train_idx]``) into a :class:`~torch_geometric.data.Batch`.

    Args:
        dataset: the dataset; its ``transform`` must be None unless ``transform`` is given.
        transform (callable, optional): applied to every collated batch instead of the dataset's
            per-graph transform (only valid for a transform that acts row-wise on graph-level
            tensors, e.g. selecting label columns). (default: None)
    """

    def __init__(self, dataset, transform: Optional[Callable] = None):
        storage, slices = getattr(dataset, "_data", None), getattr(dataset, "slices", None)
        if not isinstance(storage, Data) or not isinstance(slices, dict):
            raise TypeError(f"dataset must be an InMemoryDataset of Data objects, got {type(dataset).__name__}")
        if dataset.transform is not None and transform is None:
            raise ValueError(f"dataset has a per-graph transform ({dataset.transform!r}): pass transform= "
                             "to apply an equivalent one to whole batches, or use PyG's DataLoader")
        bad = [k for k in slices if "batch" in k or k in ("ptr", "face", "num_nodes")]
        if bad or "x" not in slices:
            raise ValueError(f"dataset attributes {bad or sorted(slices)} are not supported: expected node "
                             "features 'x' and no batch/ptr/face/num_nodes attributes")
        self.storage, self.slices, self.transform = storage, slices, transform
        self.group: Dict[str, str] = {}  # key -> the first key with equal slices: they gather the same rows
        for key, s in slices.items():
            self.group[key] = next((k for k in dict.fromkeys(self.group.values())
                                    if slices[k].shape == s.shape and torch.equal(slices[k], s)), key)
        self.index = torch.as_tensor(list(dataset.indices()), dtype=torch.long)  # position -> storage graph

    def __call__(self, positions: Sequence[int]) -> Batch:
        graphs = self.index[torch.as_tensor(positions, dtype=torch.long)]  # (B,)
        batch = Batch(_base_cls=Data)
        slice_dict: Dict[str, Tensor] = {}
        inc_dict: Dict[str, Optional[Tensor]] = {}
        rows = {g: _rows(self.slices[g], graphs) for g in dict.fromkeys(self.group.values())}
        nodes = rows[self.group["x"]][1]  # (B,) node count per graph
        node_ptr = _cumsum0(nodes)  # (B + 1,)
        for key, value in self.storage.items():
            pos, counts = rows[self.group[key]]
            slice_dict[key], inc_dict[key] = _cumsum0(counts), None
            if not isinstance(value, Tensor):  # e.g. SMILES strings: one list entry per graph
                batch[key] = [value[i] for i in pos.tolist()]
                continue
            dim = self.storage.__cat_dim__(key, value) or 0
            out = value.index_select(dim, pos)
            inc_dict[key] = torch.zeros_like(counts)
            if "index" in key:  # local node ids -> ids in the batch
                inc_dict[key] = node_ptr[:-1]
                out = out + torch.repeat_interleave(node_ptr[:-1], counts, output_size=pos.numel())
            batch[key] = out
        total = int(node_ptr[-1])
        batch.batch = torch.repeat_interleave(torch.arange(graphs.numel()), nodes, output_size=total)  # (N,)
        batch.ptr = node_ptr
        batch._num_graphs, batch._slice_dict, batch._inc_dict = graphs.numel(), slice_dict, inc_dict
        return batch if self.transform is None else self.transform(batch)


def in_memory_loader(dataset, batch_size: int = 1, shuffle: bool = False, *, transform: Optional[Callable] = None,
                     generator: Optional[torch.Generator] = None, drop_last: bool = False) -> DataLoader:
    """A ``DataLoader`` over ``dataset`` (an ``InMemoryDataset``) whose batches equal PyG's
    ``DataLoader(dataset, batch_size, shuffle, generator=generator)``'s, collated from the
    dataset's storage by :class:`InMemoryCollater` (``transform``: see there)."""
    return DataLoader(_Positions(len(dataset)), batch_size=batch_size, shuffle=shuffle, generator=generator,
                      drop_last=drop_last, collate_fn=InMemoryCollater(dataset, transform))

"""Batches collated from an InMemoryDataset's storage equal PyG's DataLoader batches."""
import os
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import DistributedSampler
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.loader import DataLoader

from graphattn.loader.in_memory import InMemoryCollater, in_memory_loader
from graphattn.tasks.molecules.data import SelectTasks, descriptor_set, load_dataset, split_indices
from graphattn.tasks.molecules.pipeline import molecule_loader


class GraphList(InMemoryDataset):
    """A list of graphs as an InMemoryDataset (storage + slices), nothing on disk."""

    def __init__(self, graphs, transform=None):
        super().__init__(None, transform)
        self._data, self.slices = self.collate(graphs)


def random_graphs(n=23, seed=0):
    """Graphs of 1..12 nodes (one-node graphs and graphs without edges included), with node,
    edge and graph-level tensors, float labels with NaN, and a string per graph."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        N = 1 if i % 7 == 0 else int(torch.randint(2, 13, (1,), generator=g))
        E = 0 if i % 5 == 0 else int(torch.randint(1, 3 * N, (1,), generator=g))
        y = torch.rand(1, 3, generator=g)
        y[y < 0.2] = float("nan")
        out.append(Data(x=torch.randint(0, 5, (N, 4), generator=g), edge_index=torch.randint(0, N, (2, E), generator=g),
                        edge_attr=torch.randint(0, 3, (E, 2), generator=g), y=y, pe=torch.randn(N, 3, generator=g),
                        desc=torch.randn(1, 6, generator=g), smiles=f"C{i}"))
    return out


def assert_same_batch(a, b):
    assert set(a.keys()) == set(b.keys())
    for k in a.keys():
        u, v = a[k], b[k]
        if isinstance(u, torch.Tensor):
            assert u.dtype == v.dtype and u.shape == v.shape, k
            assert torch.equal(u.nan_to_num(-1.0) if u.is_floating_point() else u,
                               v.nan_to_num(-1.0) if v.is_floating_point() else v), k
        else:
            assert u == v, k
    assert a.num_graphs == b.num_graphs and a.num_nodes == b.num_nodes
    for x, y in zip(a.to_data_list(), b.to_data_list()):  # slice and increment records agree too
        assert torch.equal(x.edge_index, y.edge_index) and torch.equal(x.x, y.x)


def assert_same_loaders(a, b):
    a, b = list(a), list(b)
    assert len(a) == len(b) > 0
    for p, q in zip(a, b):
        assert_same_batch(p, q)


@pytest.mark.parametrize("batch_size", [1, 4, 7, 64])
def test_batches_equal_pyg_dataloader(batch_size):
    ds = GraphList(random_graphs())
    assert_same_loaders(DataLoader(ds, batch_size=batch_size), in_memory_loader(ds, batch_size=batch_size))


def test_index_subset_and_shuffled_order_equal_pyg_dataloader():
    ds = GraphList(random_graphs(40, seed=1))
    sub = ds[torch.randperm(40, generator=torch.Generator().manual_seed(3))[:29]]
    torch.manual_seed(7)
    pyg = list(DataLoader(sub, batch_size=6, shuffle=True))
    torch.manual_seed(7)
    ours = list(in_memory_loader(sub, batch_size=6, shuffle=True))
    assert_same_loaders(pyg, ours)
    gen = lambda: torch.Generator().manual_seed(11)  # noqa: E731
    assert_same_loaders(DataLoader(sub, batch_size=5, shuffle=True, generator=gen()),
                        in_memory_loader(sub, batch_size=5, shuffle=True, generator=gen()))
    assert [s for b in ours for s in b.smiles] != [sub[i].smiles for i in range(len(sub))]


def test_batch_edge_index_points_into_its_own_graph():
    ds = GraphList(random_graphs(30, seed=2))
    for b in in_memory_loader(ds, batch_size=8, shuffle=True):
        assert bool((b.batch[b.edge_index[0]] == b.batch[b.edge_index[1]]).all())
        assert torch.equal(b.ptr, torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(b.batch).cumsum(0)]))


def test_per_graph_transform_needs_a_batch_transform():
    ds = GraphList(random_graphs(), transform=SelectTasks([2, 0]))
    with pytest.raises(ValueError, match="transform"):
        InMemoryCollater(ds)
    assert_same_loaders(DataLoader(ds, batch_size=5), in_memory_loader(ds, batch_size=5, transform=ds.transform))


def test_rejects_what_it_cannot_collate():
    with pytest.raises(TypeError, match="InMemoryDataset"):
        InMemoryCollater(random_graphs())


def test_a_distributed_sampler_can_replace_the_sampler():
    """What graphattn.train.distributed.shard_loader does to a DataLoader: same dataset and collate_fn."""
    ds = GraphList(random_graphs(20, seed=4))
    loader = in_memory_loader(ds, batch_size=4, shuffle=True)
    sampler = DistributedSampler(loader.dataset, num_replicas=2, rank=1, shuffle=True, seed=0)
    sharded = TorchDataLoader(loader.dataset, batch_size=2, sampler=sampler, collate_fn=loader.collate_fn)
    expected = DataLoader(ds[list(sampler)], batch_size=2)
    assert_same_loaders(expected, sharded)


def _data_root():
    root = Path(os.environ.get("GRAPHATTN_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))
    return root if (root / "tox21").is_dir() else None


@pytest.mark.skipif(_data_root() is None, reason="Tox21 data not found ($GRAPHATTN_DATA or ../shared/data)")
def test_tox21_epoch_equals_pyg_dataloader(monkeypatch):
    monkeypatch.setenv("GRAPHATTN_DATA", str(_data_root()))
    ds = load_dataset("tox21", pe_dim=8, descriptors=descriptor_set(True), log=False, limit=600)
    train = ds[split_indices(ds, "scaffold", 0, check=False)[0]]
    torch.manual_seed(0)
    pyg = list(DataLoader(train, batch_size=64, shuffle=True))
    torch.manual_seed(0)
    loader = molecule_loader(train, 64, shuffle=True)
    assert isinstance(loader.collate_fn, InMemoryCollater)
    assert_same_loaders(pyg, loader)

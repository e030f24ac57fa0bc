"""NeighborLoader: PyG's neighbour-sampled mini-batches in pure PyTorch."""
import numpy as np
import pytest
import torch
from torch_geometric.data import Data, HeteroData

from graphattn import GraphSelfAttention, NeighborLoader, NodeClassifier
from graphattn.loader.neighbor_loader import sample_neighbors
from graphattn.loader.partition import PartitionBatches, partition_nodes
from graphattn.testing import sbm_graph
from graphattn.train import distributed


def _graph(n=60, e=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    return Data(x=torch.randn(n, 5, generator=g), y=torch.randint(0, 3, (n,), generator=g), edge_index=ei,
                edge_attr=torch.randn(e, 2, generator=g), train_mask=torch.rand(n, generator=g) < 0.5,
                name="toy")


def _in_degree(ei, n):
    return torch.bincount(ei[1], minlength=n)


@pytest.mark.parametrize("replace", [False, True])
def test_batches_have_pyg_layout_and_real_edges(replace):
    data = _graph()
    loader = NeighborLoader(data, [4, 3], batch_size=8, input_nodes=data.train_mask, shuffle=True,
                            replace=replace, generator=torch.Generator().manual_seed(1))
    seeds_seen = []
    deg = _in_degree(data.edge_index, 60)
    for batch in loader:
        bs, n_id, e_id = batch.batch_size, batch.n_id, batch.e_id
        seeds_seen.append(n_id[:bs])
        assert torch.equal(n_id[:bs], torch.nonzero(data.train_mask).view(-1)[batch.input_id])
        assert n_id.unique().numel() == n_id.numel() == batch.num_nodes == sum(batch.num_sampled_nodes)
        assert batch.edge_index.size(1) == e_id.numel() == sum(batch.num_sampled_edges)
        # every sampled edge is the original edge e_id, in local ids
        assert torch.equal(n_id[batch.edge_index], data.edge_index[:, e_id])
        assert torch.equal(batch.x, data.x[n_id]) and torch.equal(batch.y, data.y[n_id])
        assert torch.equal(batch.edge_attr, data.edge_attr[e_id]) and batch.name == "toy"
        # hop 1: every seed sampled min(deg, 4) distinct in-edges (4 draws with replacement)
        hop1 = batch.edge_index[:, :batch.num_sampled_edges[0]]
        got = _in_degree(hop1, batch.num_nodes)[:bs]
        want = deg[n_id[:bs]].clamp(max=4) if not replace else torch.where(deg[n_id[:bs]] > 0, 4, 0)
        assert torch.equal(got, want)
        if not replace:
            assert e_id.unique().numel() == e_id.numel()
        # hop 2 expands only the nodes first reached at hop 1
        hop2_targets = batch.edge_index[1, batch.num_sampled_edges[0]:]
        lo, hi = bs, bs + batch.num_sampled_nodes[1]
        assert bool(((hop2_targets >= lo) & (hop2_targets < hi)).all())
    seen = torch.cat(seeds_seen)
    assert torch.equal(seen.sort().values, torch.nonzero(data.train_mask).view(-1))  # each seed once
    assert len(loader) == len(seeds_seen) == -(-int(data.train_mask.sum()) // 8)


def test_full_neighbourhood_gives_the_full_graph_outputs_of_the_seeds():
    """With every neighbour sampled (-1) for L hops, an L-layer model's outputs at the seeds are
    exactly its outputs on the whole graph: the loader loses nothing."""
    data = _graph(80, 500)
    torch.manual_seed(0)
    model = NodeClassifier(5, 16, 3, num_layers=2, heads=2).eval()
    full = model(data.x, data.edge_index)
    loader = NeighborLoader(data, [-1, -1], batch_size=16)
    outs = [model(b.x, b.edge_index)[:b.batch_size] for b in loader]
    torch.testing.assert_close(torch.cat(outs), full, rtol=1e-5, atol=1e-5)
    layer = GraphSelfAttention(5, 4, heads=2, edge_dim=2).eval()  # edge features follow their edges
    b = next(iter(NeighborLoader(data, [-1], batch_size=10)))
    torch.testing.assert_close(layer(b.x, b.edge_index, b.edge_attr)[:10],
                               layer(data.x, data.edge_index, data.edge_attr)[:10], rtol=1e-5, atol=1e-6)


def test_sampling_is_uniform_and_seeded():
    # node 0 has 10 incoming edges; sample 3 of them many times: every edge about equally often
    ei = torch.stack([torch.arange(1, 11), torch.zeros(10, dtype=torch.long)])
    data = Data(edge_index=ei, num_nodes=11)
    loader = NeighborLoader(data, [3], batch_size=1, input_nodes=torch.tensor([0]),
                            generator=torch.Generator().manual_seed(0))
    counts = torch.zeros(10)
    for _ in range(2000):
        counts[next(iter(loader)).e_id] += 1
    assert counts.sum() == 6000 and counts.min() > 500 and counts.max() < 700  # 600 expected
    a = [b.n_id for b in NeighborLoader(_graph(), [5, 5], 7, shuffle=True, generator=torch.Generator().manual_seed(3))]
    b = [b.n_id for b in NeighborLoader(_graph(), [5, 5], 7, shuffle=True, generator=torch.Generator().manual_seed(3))]
    assert all(torch.equal(u, v) for u, v in zip(a, b))


def test_trains_a_node_classifier_on_a_block_graph():
    torch.manual_seed(0)
    data = sbm_graph(600, 6000, num_blocks=3, p_in=0.9)
    data.x = torch.randn(600, 4)  # no features: the blocks are learned from the neighbours' labels
    data.x[:, 0] = 0.0
    data.train_mask = torch.rand(600) < 0.5
    model = NodeClassifier(4 + 3, 16, 3, num_layers=2, heads=2)
    known = torch.where(data.train_mask[:, None], torch.nn.functional.one_hot(data.y, 3).float(), 0.0)
    data.x = torch.cat([data.x, known], 1)  # neighbours' training labels as input (label trick)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = NeighborLoader(data, [8, 8], batch_size=64, input_nodes=data.train_mask, shuffle=True)
    for _ in range(3):
        for b in loader:
            x = b.x.clone()
            x[:b.batch_size, 4:] = 0.0  # a seed never sees its own label
            loss = torch.nn.functional.cross_entropy(model(x, b.edge_index)[:b.batch_size], b.y[:b.batch_size])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    test = ~data.train_mask
    x = data.x.clone()
    acc = (model(x, data.edge_index).argmax(-1)[test] == data.y[test]).float().mean()
    assert acc > 0.9


def test_bad_arguments_are_clear_errors():
    data = _graph()
    for kwargs, match in [(dict(num_neighbors=[]), "non-empty"), (dict(num_neighbors=5), "non-empty"),
                          (dict(num_neighbors=[-2]), "num_neighbors"),
                          (dict(num_neighbors=[2], batch_size=0), "batch_size"),
                          (dict(num_neighbors=[2], input_nodes=torch.tensor([0, 60])), "outside"),
                          (dict(num_neighbors=[2], input_nodes=torch.tensor([1, 1])), "duplicate"),
                          (dict(num_neighbors=[2], input_nodes=torch.ones(5, dtype=torch.bool)), "mask"),
                          (dict(num_neighbors=[2], input_nodes=torch.tensor([0.5])), "integer")]:
        with pytest.raises(ValueError, match=match):
            NeighborLoader(data, **kwargs)
    loader = NeighborLoader(data, [2], batch_size=4)
    for bad, match in [([3, 3], "duplicate"), ([-1], "outside"), ([0.5], "integer"), ([60], "outside")]:
        with pytest.raises(ValueError, match=match):
            loader.sample(torch.tensor(bad))
    # an error inside a batch (here: interrupted sampling) leaves the shared id map clean
    real = loader.col
    loader.col = None
    with pytest.raises(TypeError):
        loader.sample(torch.tensor([3, 4]))
    loader.col = real
    assert bool((loader._local == -1).all())
    for b in loader:
        assert torch.equal(b.n_id[b.edge_index], data.edge_index[:, b.e_id])
    with pytest.raises(ValueError, match="on the CPU"):
        NeighborLoader(Data(edge_index=torch.empty(2, 0, dtype=torch.long, device="meta"), num_nodes=3), [2])
    empty = Data(edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=3, x=torch.randn(3, 2))
    (b,) = list(NeighborLoader(empty, [2, 2], batch_size=3))
    assert b.num_nodes == 3 and b.edge_index.shape == (2, 0) and b.num_sampled_edges == [0, 0]


def test_eval_seed_shared_csr_and_distributed_shards():
    data = _graph()
    train = NeighborLoader(data, [3, 3], batch_size=5, input_nodes=data.train_mask, shuffle=True)
    val = train.with_seeds(~data.train_mask, seed=7)
    assert val.col is train.col and val.rowptr is train.rowptr  # one CSR for both
    a, b = ([x.e_id for x in val] for _ in range(2))
    assert all(torch.equal(u, v) for u, v in zip(a, b))  # the same batches on every pass
    # two ranks: same order, disjoint seeds, a new order every epoch, equal step counts
    ranks = [train.with_seeds(data.train_mask, shuffle=True) for _ in range(2)]
    for r, loader in enumerate(ranks):
        loader.set_shard(r, 2, seed=3)
    epochs = [[torch.cat([x.n_id[:x.batch_size] for x in loader]) for loader in ranks] for _ in range(2)]
    for s0, s1 in epochs:
        assert len(s0) and not set(s0.tolist()) & set(s1.tolist())
        assert len(ranks[0]) == len(ranks[1]) == (-(-int(data.train_mask.sum()) // 5)) // 2
    assert not torch.equal(epochs[0][0], epochs[1][0])


def test_partition_batches_shard_across_ranks(monkeypatch):
    data = _graph()
    part = partition_nodes(data.edge_index, 60, 6, seed=0)
    ranks = [PartitionBatches(data, part, 1, shuffle=True) for _ in range(2)]
    for r, loader in enumerate(ranks):
        monkeypatch.setattr(distributed, "world_size", lambda: 2)
        monkeypatch.setattr(distributed, "rank", lambda r=r: r)
        assert distributed.shard_loader(loader, seed=4) == (loader, loader)  # fit sets its epoch
    for _ in range(2):
        keys = [[b.key for b in loader] for loader in ranks]
        assert len(keys[0]) == len(keys[1]) == 3 and not set(keys[0]) & set(keys[1])


@pytest.mark.parametrize("deg, num", [(100, 3), (9, 1)])
def test_hub_sampling_draws_distinct_uniform_edges(deg, num):
    """Nodes with more than 8 num edges draw num distinct edges in O(num) (first distinct values of
    uniform draws; when the draws repeat too often, by keys): uniform and exactly num per node."""
    rowptr = torch.tensor([0, 0, deg, deg + 2])  # node 1: the hub; node 2: two edges
    col = torch.arange(deg + 2)
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(deg)
    trials = 300 * deg // num
    for _ in range(trials):
        pos, owner = sample_neighbors(rowptr, col, torch.tensor([2, 1, 0]), num, generator=gen)
        hub = pos[owner == 1]
        assert hub.numel() == num and hub.unique().numel() == num and bool((hub < deg).all())
        small = pos[owner == 0]  # node 2 keeps min(2, num) of its two edges
        assert small.numel() == min(2, num) and set(small.tolist()) <= {deg, deg + 1}
        assert not bool((owner == 2).any())  # node 0 has no edges
        counts[hub] += 1
    assert counts.min() > 0.75 * 300 and counts.max() < 1.25 * 300  # 300 expected per edge


def test_fanout_zero_numpy_node_attributes_and_hetero_data_are_handled_as_pyg_users_expect():
    data = Data(x=torch.randn(4, 2), edge_index=torch.tensor([[1, 2, 3, 0], [0, 0, 2, 3]]))
    b = next(iter(NeighborLoader(data, [0], batch_size=1)))  # was an IndexError; PyG samples nothing
    assert b.edge_index.size(1) == 0 and b.n_id.tolist() == [0]
    data.names = np.array(["a", "b", "c", "d"])  # numpy node attributes are cut to the sample, as in PyG
    b = next(iter(NeighborLoader(data, [-1], batch_size=1, input_nodes=torch.tensor([2]))))
    assert b.names.tolist() == [data.names[i] for i in b.n_id.tolist()] and b.names[0] == "c"
    with pytest.raises(TypeError, match="homogeneous .*to_homogeneous"):
        NeighborLoader(HeteroData(), [-1], batch_size=1)

"""graphattn.transforms.hops: the k-hop pairs against networkx's shortest paths, and AddHopEdges'
edge features (the graph's own edges first, a "no bond" fill, the hop column)."""
import networkx as nx
import pytest
import torch
from torch_geometric.data import Batch, Data

from graphattn.transforms import AddHopEdges, hop_edges


def _expected(edge_index, n, k):
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edge_index.t().tolist())
    out = {}
    for j, lengths in nx.all_pairs_shortest_path_length(g, cutoff=k):
        for i, d in lengths.items():
            if 2 <= d <= k and i != j:
                out[(j, i)] = d
    return out


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_hop_pairs_are_the_shortest_path_distances(directed, seed):
    gen = torch.Generator().manual_seed(seed)
    n = 30
    ei = torch.randint(0, n, (2, 45), generator=gen)
    ei = torch.cat([ei, ei[:, :5]], 1)  # duplicate edges (and perhaps self-loops) count once
    if not directed:
        ei = torch.cat([ei, ei.flip(0)], 1)
    for k in (1, 2, 3, 5):
        pairs, dist = hop_edges(ei, n, k)
        got = {(j, i): d for (j, i), d in zip(pairs.t().tolist(), dist.tolist())}
        assert len(got) == pairs.size(1)  # no pair twice
        assert got == _expected(ei, n, k)
        assert torch.equal(dist, dist.sort().values)  # ordered by distance


def test_graphs_without_edges_or_nodes_and_bad_input():
    for ei, n in ((torch.zeros(2, 0, dtype=torch.long), 4), (torch.zeros(2, 0, dtype=torch.long), 0)):
        pairs, dist = hop_edges(ei, n, 3)
        assert pairs.shape == (2, 0) and dist.shape == (0,)
    with pytest.raises(ValueError, match="max_hops"):
        hop_edges(torch.tensor([[0], [1]]), 2, 0)
    with pytest.raises(ValueError, match="edge_index"):
        hop_edges(torch.tensor([[0], [5]]), 2, 2)


def test_add_hop_edges_keeps_the_graph_first_and_fills_the_new_rows():
    # path 0-1-2-3, categorical features with vocabularies (4, 2)
    ei = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    attr = torch.tensor([[1, 0], [1, 0], [2, 1], [2, 1], [3, 0], [3, 0]])
    g = AddHopEdges(3, fill=[4, 2])(Data(edge_index=ei, edge_attr=attr, num_nodes=4))
    assert torch.equal(g.edge_index[:, :6], ei)
    assert torch.equal(g.edge_attr[:6], torch.cat([attr, torch.ones(6, 1, dtype=torch.long)], 1))
    extra = {(j, i): row for (j, i), row in zip(g.edge_index[:, 6:].t().tolist(), g.edge_attr[6:].tolist())}
    assert extra == {(0, 2): [4, 2, 2], (2, 0): [4, 2, 2], (1, 3): [4, 2, 2], (3, 1): [4, 2, 2],
                     (0, 3): [4, 2, 3], (3, 0): [4, 2, 3]}
    # no edge_attr: the hop column alone; float features keep their dtype with fill 0
    g = AddHopEdges(2)(Data(edge_index=ei, num_nodes=4))
    assert g.edge_attr.shape == (10, 1) and g.edge_attr[:, 0].tolist() == [1] * 6 + [2] * 4
    g = AddHopEdges(2)(Data(edge_index=ei, edge_attr=torch.rand(6), num_nodes=4))
    assert g.edge_attr.dtype == torch.float32 and g.edge_attr.shape == (10, 2) and (g.edge_attr[6:, 0] == 0).all()
    # a single atom: nothing to add, the hop column on zero rows
    g = AddHopEdges(3, fill=[4, 2])(Data(edge_index=torch.zeros(2, 0, dtype=torch.long),
                                         edge_attr=torch.zeros(0, 2, dtype=torch.long), num_nodes=1))
    assert g.edge_index.shape == (2, 0) and g.edge_attr.shape == (0, 3)
    # batches of transformed graphs stay block-diagonal (PyG offsets edge_index)
    b = Batch.from_data_list([AddHopEdges(3)(Data(edge_index=ei, num_nodes=4)) for _ in range(2)])
    assert (b.batch[b.edge_index[0]] == b.batch[b.edge_index[1]]).all()


def test_add_hop_edges_refuses_what_it_cannot_extend():
    ei = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="edge_weight"):
        AddHopEdges(2)(Data(edge_index=ei, edge_weight=torch.ones(2), num_nodes=3))
    with pytest.raises(ValueError, match="fill has 1 values for 2"):
        AddHopEdges(2, fill=[1])(Data(edge_index=ei, edge_attr=torch.zeros(2, 2), num_nodes=3))
    with pytest.raises(ValueError, match="max_hops"):
        AddHopEdges(0)
    assert repr(AddHopEdges(3, fill=[4, 2])) == "AddHopEdges(max_hops=3, fill=[4, 2])"

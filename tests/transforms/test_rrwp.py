"""graphattn.transforms.rrwp: relative random-walk probabilities against a dense NumPy reference of
P^k (dense and sparse paths, weights, duplicates, directed edges, isolated nodes), AddRRWP's hop
column (the walk follows the graph's own edges), batching, and the model reading them as edge_pe."""
import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data

from graphattn import GraphClassifier
from graphattn.nn.encodings import pe_inputs
from graphattn.transforms import AddHopEdges, AddRRWP, relative_random_walk
from graphattn.transforms import rrwp as rrwp_module


def _reference(edge_index, n, K, weight=None):
    """[P^0 .. P^{K-1}] as a (K, N, N) array, P = D^-1 A with A[u, v] = weight of the edges u -> v."""
    A = np.zeros((n, n))
    w = np.ones(edge_index.size(1)) if weight is None else weight.double().numpy()
    for (u, v), x in zip(edge_index.t().tolist(), w):
        A[u, v] += x
    deg = A.sum(1)
    P = np.divide(A, deg[:, None], out=np.zeros_like(A), where=deg[:, None] > 0)
    return np.stack([np.linalg.matrix_power(P, k) for k in range(K)])


def _random_graph(n, m, seed, directed=False):
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, m), generator=gen)
    ei = torch.cat([ei, ei[:, :3]], 1)  # duplicate edges count with their multiplicity
    if not directed:
        ei = torch.cat([ei, ei.flip(0)], 1)
    return ei


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_pairs_and_diagonal_equal_dense_matrix_powers(directed, seed):
    n, K = 25, 6
    ei = _random_graph(n, 40, seed, directed)
    ref = _reference(ei, n, K)
    gen = torch.Generator().manual_seed(seed + 10)
    pairs = torch.randint(0, n, (2, 50), generator=gen)
    diag, vals = relative_random_walk(ei, n, K, pairs)
    assert diag.shape == (n, K) and vals.shape == (50, K) and diag.dtype == torch.float32
    np.testing.assert_allclose(diag.numpy(), np.stack([np.diagonal(r) for r in ref], 1), atol=1e-6)
    # row e of a pair (j, i): the walk from the query i to the key j
    np.testing.assert_allclose(vals.numpy(), ref[:, pairs[1], pairs[0]].T, atol=1e-6)


def test_sparse_path_equals_the_dense_path(monkeypatch):
    n, K = 60, 5
    ei = _random_graph(n, 150, 3)
    w = torch.rand(ei.size(1), generator=torch.Generator().manual_seed(0))
    dense = relative_random_walk(ei, n, K, edge_weight=w)
    monkeypatch.setattr(rrwp_module, "DENSE_MAX_NODES", 10)  # the large-graph path on the same graph
    sparse = relative_random_walk(ei, n, K, edge_weight=w)
    for a, b in zip(dense, sparse):
        torch.testing.assert_close(a, b)
    np.testing.assert_allclose(dense[1].numpy(), _reference(ei, n, K, w)[:, ei[1], ei[0]].T, atol=1e-6)


def test_sparse_fill_in_budget_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(rrwp_module, "DENSE_MAX_NODES", 10)
    ei = _random_graph(40, 200, 1)
    with pytest.raises(ValueError, match="non-zeros.*smaller walk_length"):
        relative_random_walk(ei, 40, 8, max_nonzeros=100)


def test_rows_of_each_power_are_distributions_and_isolated_nodes_are_finite():
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])  # node 3 isolated
    n, K = 4, 5
    diag, _ = relative_random_walk(ei, n, K)
    ref = _reference(ei, n, K)
    np.testing.assert_allclose(ref[:, :3].sum(-1), 1.0)  # the reference itself: rows of P^k sum to 1
    assert torch.equal(diag[3], torch.tensor([1.0, 0, 0, 0, 0]))  # P^0 = I, then the walk stops
    assert torch.isfinite(diag).all()


def test_degenerate_graphs():
    diag, vals = relative_random_walk(torch.zeros(2, 0, dtype=torch.long), 3, 4)
    assert torch.equal(diag, torch.eye(4)[0].expand(3, 4)) and vals.shape == (0, 4)
    diag, vals = relative_random_walk(torch.zeros(2, 0, dtype=torch.long), 0, 4)
    assert diag.shape == (0, 4) and vals.shape == (0, 4)
    with pytest.raises(ValueError, match="walk_length"):
        AddRRWP(0)
    with pytest.raises(ValueError, match="edge_weight"):
        relative_random_walk(torch.tensor([[0], [1]]), 2, 3, edge_weight=torch.tensor([-1.0]))


def test_after_hop_edges_the_walk_follows_the_graph_edges_only():
    path = Data(edge_index=torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]]), num_nodes=4,
                edge_attr=torch.zeros(6, 1, dtype=torch.long))
    hop = AddHopEdges(3, fill=[1])(path.clone())
    data = AddRRWP(4, hop_column=-1)(hop)
    ref = _reference(path.edge_index, 4, 4)
    ei = data.edge_index
    assert data.edge_rrwp.shape == (ei.size(1), 4)
    np.testing.assert_allclose(data.edge_rrwp.numpy(), ref[:, ei[1], ei[0]].T, atol=1e-6)
    np.testing.assert_allclose(data.rrwp.numpy(), np.stack([np.diagonal(r) for r in ref], 1), atol=1e-6)
    # without the hop column the added pairs would be walked as edges: other values
    assert not torch.allclose(AddRRWP(4)(AddHopEdges(3, fill=[1])(path.clone())).edge_rrwp, data.edge_rrwp)
    with pytest.raises(ValueError, match="AddHopEdges first"):
        AddRRWP(4, hop_column=-1)(Data(edge_index=path.edge_index, num_nodes=4))


def test_batching_keeps_each_graphs_values_and_the_model_reads_them():
    graphs = []
    for n, seed in ((5, 0), (7, 1)):
        ei = _random_graph(n, 6, seed)
        graphs.append(AddRRWP(4)(Data(x=torch.randn(n, 3), edge_index=ei, num_nodes=n)))
    batch = Batch.from_data_list(graphs)
    assert torch.equal(batch.edge_rrwp, torch.cat([g.edge_rrwp for g in graphs]))
    inputs = pe_inputs(batch)
    assert inputs["edge_pe"] is batch.edge_rrwp and inputs["pe"] is batch.rrwp
    torch.manual_seed(0)
    model = GraphClassifier(3, 16, 2, num_layers=2, pe_dim=4, pe_kind="linear", edge_pe_dim=4).eval()
    out = model(batch.x, batch.edge_index, batch.batch, num_graphs=2, **inputs)
    alone = model(graphs[1].x, graphs[1].edge_index, pe=graphs[1].rrwp, edge_pe=graphs[1].edge_rrwp)
    torch.testing.assert_close(out[1:], alone, atol=1e-5, rtol=1e-5)  # graphs do not mix
    out.sum().backward()
    assert model.backbone.edge_pe_encoder.weight.grad.abs().sum() > 0  # the pair vectors reach the loss


def test_model_refuses_missing_or_unexpected_edge_pe():
    x, ei = torch.randn(3, 4), torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="edge_pe of shape \\(2, 4\\).*required"):
        GraphClassifier(4, 8, 1, num_layers=1, edge_pe_dim=4)(x, ei)
    with pytest.raises(ValueError, match="edge_pe_dim=0"):
        GraphClassifier(4, 8, 1, num_layers=1)(x, ei, edge_pe=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="NaN|inf"):
        GraphClassifier(4, 8, 1, num_layers=1, edge_pe_dim=2)(x, ei, edge_pe=torch.tensor([[0, 1.0], [float("nan"), 0]]))

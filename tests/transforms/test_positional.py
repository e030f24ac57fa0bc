"""AddLaplacianPE and AddRandomWalkPE (graphattn.transforms): eigenpairs against dense references,
padding, determinism, PyG's RWSE where it is right, and bad input."""
import math
import time

import networkx as nx
import numpy as np
import pytest
import scipy.sparse.linalg as sla
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.transforms import AddRandomWalkPE as PygRandomWalkPE
from torch_geometric.utils import to_undirected

from graphattn.data import random_walk_pe
from graphattn.nn import LapPEEncoder
from graphattn.transforms import AddLaplacianPE, AddRandomWalkPE


def graph(edges, num_nodes):
    ei = torch.tensor(edges, dtype=torch.long).reshape(-1, 2).T
    return Data(edge_index=to_undirected(ei, num_nodes=num_nodes), num_nodes=num_nodes)


def path(n):
    return graph([(i, i + 1) for i in range(n - 1)], n)


def cycle(n):
    return graph([(i, (i + 1) % n) for i in range(n)], n)


def two_cliques(n):
    edges = [(i, j) for i in range(n) for j in range(i + 1, n)]
    edges += [(i + n, j + n) for i, j in edges] + [(0, n)]
    return graph(edges, 2 * n)


def ring_with_chords(n, seed=0):
    rng = np.random.default_rng(seed)
    edges = [(i, (i + 1) % n) for i in range(n)] + [tuple(e) for e in rng.integers(0, n, (2 * n, 2))]
    return graph([e for e in edges if e[0] != e[1]], n)


def sym_laplacian(data):
    """Dense reference: I - D^-1/2 A D^-1/2 with L_ii = 0 for isolated nodes (Chung)."""
    n = data.num_nodes
    a = np.zeros((n, n))
    a[data.edge_index[1].numpy(), data.edge_index[0].numpy()] = 1.0
    np.fill_diagonal(a, 0.0)
    deg = a.sum(1)
    dinv = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1e-12)), 0.0)
    return np.diag((deg > 0).astype(float)) - dinv[:, None] * a * dinv[None, :]


def check_eigenpairs(data, k):
    """Columns are orthonormal eigenvectors of L, orthogonal to the null space, ascending."""
    pe, lam, mask = data.lap_pe.double().numpy(), data.lap_eigval.double().numpy(), data.lap_pe_mask
    found = int(mask[0].sum()) if data.num_nodes else 0
    lap = sym_laplacian(data)
    v = pe[:, :found]
    assert np.allclose(lap @ v, v * lam[0, :found], atol=1e-5)
    assert np.allclose(v.T @ v, np.eye(found), atol=1e-5)
    assert np.all(lam[0, :found] > 1e-6) and np.all(np.diff(lam[0, :found]) >= -1e-6)
    assert np.all(pe[:, found:] == 0) and np.all(lam[:, found:] == 0)
    return found


def encoder_inputs(n=6, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(n, k, dtype=torch.bool)
    return torch.randn(n, k, generator=g), torch.rand(n, k, generator=g), mask


def test_repr_and_bad_k():
    assert repr(AddLaplacianPE(4)) == "AddLaplacianPE(k=4)"
    with pytest.raises(ValueError, match="k must be"):
        AddLaplacianPE(0)


def test_fiedler_vector_separates_two_cliques():
    data = AddLaplacianPE(3)(two_cliques(6))
    assert set(data.keys()) == {"edge_index", "num_nodes", "lap_pe", "lap_eigval", "lap_pe_mask"}
    first = data.lap_pe[:, 0]
    assert (first[:6] > 0).all() and (first[6:] < 0).all()  # sign fixed: largest entry positive
    assert data.lap_pe_mask.all()
    assert torch.allclose(data.lap_eigval, data.lap_eigval[:1].expand(12, 3))
    assert check_eigenpairs(data, 3) == 3


@pytest.mark.parametrize("n,k", [(1, 3), (2, 3), (3, 3), (3, 8), (4, 4)])
def test_padding_when_k_exceeds_nontrivial_eigenpairs(n, k):
    data = AddLaplacianPE(k)(path(n))
    assert data.lap_pe.shape == data.lap_eigval.shape == data.lap_pe_mask.shape == (n, k)
    assert data.lap_pe.dtype == torch.float32 and data.lap_pe_mask.dtype == torch.bool
    found = check_eigenpairs(data, k)
    assert found == min(k, n - 1)
    assert data.lap_pe_mask[:, :found].all() and not data.lap_pe_mask[:, found:].any()


def test_zero_nodes_and_no_edges():
    empty = AddLaplacianPE(4)(Data(edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=0))
    assert empty.lap_pe.shape == empty.lap_eigval.shape == empty.lap_pe_mask.shape == (0, 4)
    lonely = AddLaplacianPE(2)(Data(edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=5))
    assert (lonely.lap_pe == 0).all() and not lonely.lap_pe_mask.any()


def test_disconnected_graph_and_isolated_nodes():
    # two triangles, a 3-path and two isolated nodes (9, 10)
    data = graph([(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5), (6, 7), (7, 8)], 11)
    out = AddLaplacianPE(6)(data)
    assert torch.isfinite(out.lap_pe).all() and torch.isfinite(out.lap_eigval).all()
    assert (out.lap_pe[9:] == 0).all()
    # spectra: triangle {0, 1.5, 1.5} twice, path {0, 1, 2}; one zero dropped per component
    assert torch.allclose(out.lap_eigval[0], torch.tensor([1.0, 1.5, 1.5, 1.5, 1.5, 2.0]), atol=1e-5)
    labels = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 4])
    for j in range(6):  # every eigenvector lives on one component
        assert labels[out.lap_pe[:, j].abs() > 1e-6].unique().numel() == 1
    assert check_eigenpairs(out, 6) == 6


def test_eigenvalues_of_path_and_cycle_closed_form():
    n, k = 12, 5
    lam = AddLaplacianPE(k)(path(n)).lap_eigval[0].double()
    expected = 1 - torch.cos(math.pi * torch.arange(1, k + 1, dtype=torch.float64) / (n - 1))
    assert torch.allclose(lam, expected, atol=1e-6)
    data = AddLaplacianPE(k)(cycle(n))
    j = torch.tensor([1, 1, 2, 2, 3], dtype=torch.float64)  # each non-trivial value is double
    assert torch.allclose(data.lap_eigval[0].double(), 1 - torch.cos(2 * math.pi * j / n), atol=1e-6)
    check_eigenpairs(data, k)


def test_deterministic_small_and_sparse_large(monkeypatch):
    calls = []
    real_eigsh = sla.eigsh
    monkeypatch.setattr(sla, "eigsh", lambda *a, **kw: calls.append(1) or real_eigsh(*a, **kw))
    small = two_cliques(5)
    a, b = AddLaplacianPE(4)(small.clone()), AddLaplacianPE(4)(small.clone())
    assert torch.equal(a.lap_pe, b.lap_pe) and not calls
    big = ring_with_chords(1000)
    t = AddLaplacianPE(8)
    a, b = t(big.clone()), t(big.clone())
    assert len(calls) == 2  # 1000 > dense_threshold: sparse solver
    assert torch.equal(a.lap_pe, b.lap_pe) and torch.equal(a.lap_eigval, b.lap_eigval)
    check_eigenpairs(a, 8)


def test_dense_and_sparse_solutions_agree():
    data = ring_with_chords(400, seed=1)
    dense = AddLaplacianPE(6, dense_threshold=1000)(data.clone())
    sparse = AddLaplacianPE(6, dense_threshold=10)(data.clone())
    assert torch.allclose(dense.lap_eigval, sparse.lap_eigval, atol=1e-5)
    dots = (dense.lap_pe * sparse.lap_pe).sum(0).abs()
    assert torch.allclose(dots, torch.ones(6), atol=1e-4)  # same vectors up to sign
    assert torch.allclose(dense.lap_pe, sparse.lap_pe, atol=1e-4)  # and the sign rule agrees


def test_batching_with_pyg():
    t = AddLaplacianPE(4)
    batch = Batch.from_data_list([t(two_cliques(4)), t(path(3)), t(cycle(6))])
    assert batch.lap_pe.shape == batch.lap_eigval.shape == batch.lap_pe_mask.shape == (17, 4)
    assert batch.lap_pe_mask[8:11].sum(1).eq(2).all()  # the 3-path has 2 eigenpairs
    enc = LapPEEncoder(4, 8).train()
    out = enc(batch.lap_pe, batch.lap_eigval, batch.lap_pe_mask, batch.batch)
    assert out.shape == (17, 8) and torch.isfinite(out).all()


@pytest.mark.filterwarnings("ignore:Sparse")
def test_random_walk_pe_matches_pyg_where_pyg_is_right_and_fixes_weights_and_duplicates():
    small = AddRandomWalkPE(4)(cycle(11)).random_walk_pe
    large = AddRandomWalkPE(4)(cycle(2001)).random_walk_pe  # PyG's sparse path above 2000 nodes
    expected = torch.tensor([0.0, 0.5, 0.0, 0.375])  # return probabilities on a long cycle
    assert torch.allclose(small, expected.expand(11, 4)) and torch.allclose(large, expected.expand(2001, 4))
    g = torch.Generator().manual_seed(0)
    for n in (30, 2500):  # unweighted, no duplicates: PyG's values, dense and sparse
        ei = to_undirected(torch.randint(0, n, (2, 4 * n), generator=g), num_nodes=n)
        ours = AddRandomWalkPE(5)(Data(edge_index=ei, num_nodes=n)).random_walk_pe
        assert torch.allclose(ours, PygRandomWalkPE(5)(Data(edge_index=ei, num_nodes=n)).random_walk_pe, atol=1e-6)
    # a weighted path 0 - 1 - 2 (weights 1 and 3): P = [[0, 1, 0], [1/4, 0, 3/4], [0, 1, 0]]
    d = Data(edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), edge_weight=torch.tensor([1.0, 1, 3, 3]),
             num_nodes=3)
    assert torch.allclose(AddRandomWalkPE(2)(d).random_walk_pe[:, 1], torch.tensor([0.25, 1.0, 0.75]))
    x = AddRandomWalkPE(3, attr_name=None)(Data(x=torch.ones(3, 2), edge_index=d.edge_index)).x
    assert x.shape == (3, 5)  # concatenated to x, as PyG's
    assert AddRandomWalkPE(3)(Data(num_nodes=4)).random_walk_pe.eq(0).all()  # no edges: zeros
    with pytest.raises(ValueError, match="finite and non-negative"):
        AddRandomWalkPE(2)(Data(edge_index=d.edge_index, edge_weight=-d.edge_weight, num_nodes=3))


@pytest.mark.parametrize("kind", ["directed", "duplicates", "weighted"])
def test_random_walk_pe_above_the_exact_size_is_right_for_directed_duplicated_and_weighted_edges(kind):
    n = 4001  # above exact_max_nodes: closed forms for k = 1, 2, 3, estimates beyond
    g = torch.Generator().manual_seed(0)
    ei = torch.randint(0, n, (2, 3 * n), generator=g)
    weight = None
    if kind != "directed":
        ei = to_undirected(ei, num_nodes=n)
    if kind == "duplicates":
        ei = torch.cat([ei, ei[:, : ei.size(1) // 3]], 1)
    if kind == "weighted":
        weight = ((ei.min(0).values * 7 + ei.max(0).values * 13) % 5 + 1).float()  # symmetric
    exact = random_walk_pe(ei, n, 6, exact_max_nodes=10 ** 6, edge_weight=weight)
    fast = random_walk_pe(ei, n, 6, edge_weight=weight)
    assert (fast[:, :3] - exact[:, :3]).abs().max() < 1e-5  # was off by up to 1.0 (directed)
    assert (fast[:, 3:] - exact[:, 3:]).abs().mean() < 0.02  # the estimates are unbiased


def test_masked_columns_do_not_affect_output():
    torch.manual_seed(0)
    enc = LapPEEncoder(4, 6).eval()
    pe, lam, _ = encoder_inputs(n=5, k=4)
    mask = torch.tensor([True, True, False, False]).expand(5, 4)
    clean = enc(pe * mask, lam * mask, mask)
    noisy_pe, noisy_lam = pe.clone(), lam.clone()
    noisy_pe[:, 2], noisy_pe[:, 3], noisy_lam[:, 2:] = float("nan"), 7.0, 3.0
    assert torch.allclose(enc(noisy_pe, noisy_lam, mask), clean)
    assert not torch.allclose(enc(noisy_pe.nan_to_num(), noisy_lam), clean)  # unmasked they count


def test_directed_edges_self_loops_and_duplicates_follow_the_undirected_graph():
    undirected = AddLaplacianPE(3)(path(4)).lap_pe
    one_way = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=4)
    noisy = Data(edge_index=torch.tensor([[0, 1, 2, 0, 0, 3], [1, 2, 3, 0, 1, 3]]), num_nodes=4)
    assert torch.equal(AddLaplacianPE(3)(one_way).lap_pe, undirected)
    assert torch.equal(AddLaplacianPE(3)(noisy).lap_pe, undirected)
    weighted = path(4)
    weighted.edge_weight = torch.arange(1.0, 7.0)  # weights change the geometry
    assert not torch.allclose(AddLaplacianPE(3)(weighted).lap_pe, undirected)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_laplacian_pe_rejects_bad_edge_weights(bad):
    data = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=3, edge_weight=torch.tensor([bad, 1.0]))
    with pytest.raises(ValueError, match="edge_weight"):
        AddLaplacianPE(2)(data)


@pytest.mark.parametrize("ei", [[[0, 5], [5, 0]], [[0, -1], [1, 0]]])
def test_laplacian_pe_rejects_out_of_range_edges(ei):
    with pytest.raises(ValueError, match=r"^data.edge_index (refers to node 5|contains negative node indices).* num_nodes=3"):
        AddLaplacianPE(2)(Data(edge_index=torch.tensor(ei), num_nodes=3))
    with pytest.raises(ValueError, match=r"shape \(2, E\)"):
        AddLaplacianPE(2)(Data(edge_index=torch.tensor([0, 1]), num_nodes=3))


def test_laplacian_pe_fast_on_long_paths_and_matches_dense():
    n = 4000
    e = torch.tensor(list(nx.path_graph(n).edges())).t()
    t = time.perf_counter()
    sparse = AddLaplacianPE(4)(Data(edge_index=e, num_nodes=n))
    took = time.perf_counter() - t
    dense = AddLaplacianPE(4, dense_threshold=n)(Data(edge_index=e, num_nodes=n))
    torch.testing.assert_close(sparse.lap_eigval, dense.lap_eigval, atol=1e-9, rtol=1e-5)
    torch.testing.assert_close(sparse.lap_pe, dense.lap_pe, atol=1e-5, rtol=0)  # simple eigenvalues: same signs
    assert took < 60  # was ~35 s for this path with plain Lanczos (no timing target, a sanity bound)


def test_laplacian_pe_rejects_one_way_edges_declared_undirected():
    d = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=4)
    with pytest.raises(ValueError, match="not symmetric"):
        AddLaplacianPE(2, is_undirected=True)(d)
    both = Data(edge_index=torch.tensor([[0, 1, 2, 1, 2, 3], [1, 2, 3, 0, 1, 2]]), num_nodes=4)
    assert torch.isfinite(AddLaplacianPE(2, is_undirected=True)(both).lap_eigval).all()

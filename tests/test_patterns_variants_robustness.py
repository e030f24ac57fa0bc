"""Regressions from an audit of the encodings, global tokens, patterns and attention variants."""
import time

import networkx as nx
import pytest
import torch
from torch_geometric.data import Data

import graphattn as ga


@pytest.mark.parametrize("normalization", ["softmax", "relu", "sigmoid"])
def test_minus_inf_bias_hides_an_edge_for_every_normalization(normalization):
    # a causal mask written as a -inf bias on the full graph == the causal graph itself:
    # relu / sigmoid must not count hidden edges in deg_i
    torch.manual_seed(0)
    q, k, v = (torch.randn(5, 2, 4) for _ in range(3))
    full = ga.sequence_graph(5, "full")
    bias = torch.zeros(full.size(1), 2)
    bias[full[0] > full[1]] = float("-inf")
    bias[(full[0] == 0) & (full[1] == 3), 1] = float("-inf")  # one more edge hidden in head 1 only
    causal = ga.sequence_graph(5, "causal")
    masked = ga.normalized_edge_attention(q, k, v, full, normalization=normalization, bias=bias)
    cb = torch.zeros(causal.size(1), 2)
    cb[(causal[0] == 0) & (causal[1] == 3), 1] = float("-inf")
    ref = ga.normalized_edge_attention(q, k, v, causal, normalization=normalization, bias=cb)
    torch.testing.assert_close(masked, ref)
    # head 0 of target 3 sees 4 keys, head 1 sees 3: the relu weights are ReLU(s) / deg per head
    all_hidden = torch.full_like(bias, float("-inf"))
    out = ga.normalized_edge_attention(q, k, v, full, normalization=normalization, bias=all_hidden)
    assert torch.isfinite(out).all() and out.abs().max() == 0


def test_laplacian_pe_fast_on_long_paths_and_matches_dense():
    n = 4000
    e = torch.tensor(list(nx.path_graph(n).edges())).t()
    t = time.perf_counter()
    sparse = ga.AddLaplacianPE(4)(Data(edge_index=e, num_nodes=n))
    took = time.perf_counter() - t
    dense = ga.AddLaplacianPE(4, dense_threshold=n)(Data(edge_index=e, num_nodes=n))
    torch.testing.assert_close(sparse.lap_eigval, dense.lap_eigval, atol=1e-9, rtol=1e-5)
    torch.testing.assert_close(sparse.lap_pe, dense.lap_pe, atol=1e-5, rtol=0)  # simple eigenvalues: same signs
    assert took < 60  # was ~35 s for this path with plain Lanczos (no timing target, a sanity bound)


def test_laplacian_pe_rejects_one_way_edges_declared_undirected():
    d = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=4)
    with pytest.raises(ValueError, match="not symmetric"):
        ga.AddLaplacianPE(2, is_undirected=True)(d)
    both = Data(edge_index=torch.tensor([[0, 1, 2, 1, 2, 3], [1, 2, 3, 0, 1, 2]]), num_nodes=4)
    assert torch.isfinite(ga.AddLaplacianPE(2, is_undirected=True)(both).lap_eigval).all()


def test_batch_argument_is_validated():
    b = ga.sequences_to_batch([torch.randn(3, 6), torch.randn(5, 6)], "full", pe=None)
    att = ga.GraphSelfAttention(6, 4, heads=2)
    q = torch.randn(8, 2, 3)
    for bad, err in ((b.batch[:-1], ValueError), (b.batch - 1, ValueError), (b.batch[None], ValueError),
                     (b.batch.float(), TypeError)):
        with pytest.raises(err, match="batch"):
            att(b.x, b.edge_index, batch=bad)
        with pytest.raises(err, match="batch"):
            ga.normalized_edge_attention(q, q, q, b.edge_index, normalization="relu", batch=bad)
    assert att(b.x, b.edge_index, batch=b.batch).shape == (8, 8)


def test_synthesizer_positions_must_be_non_negative_integers():
    s = ga.SynthesizerAttention(8, 2, max_nodes=6)
    x, ei = torch.randn(5, 8), ga.sequence_graph(5, "window", window=1)
    with pytest.raises(ValueError, match="pos must be >= 0"):
        s(x, edge_index=ei, pos=torch.tensor([0, 1, 2, 3, -1]))
    with pytest.raises(TypeError, match="pos must be an integer"):
        s(x, edge_index=ei, pos=torch.arange(5.0))
    assert s(x, edge_index=ei, pos=torch.arange(5)).shape == (5, 8)


@pytest.mark.parametrize("make", [lambda: ga.LinearGlobalAttention(8, heads=2),
                                  lambda: ga.ReducedKeyAttention(8, heads=2, num_keys=4),
                                  lambda: ga.ClusteredAttention(8, heads=2),
                                  lambda: ga.SynthesizerAttention(8, 2, max_nodes=6)])
def test_global_modules_on_a_batch_of_no_graphs(make):
    out = make()(torch.zeros(0, 8), torch.zeros(0, dtype=torch.long), num_graphs=0)
    assert out.shape == (0, 8)


def test_small_argument_checks():
    with pytest.raises(TypeError, match="dtype"):
        ga.sinusoidal_pe(3, 4, dtype=torch.int64)
    with pytest.raises(TypeError, match="dtype"):
        ga.sinusoidal_pe_2d(2, 2, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match="hidden_channels"):
        ga.LapPEEncoder(3, 8, hidden_channels=0)
    for bad in (1.5, True, 0):
        with pytest.raises(ValueError, match="num_tokens"):
            ga.GlobalTokens(4, bad)
    with pytest.raises(ValueError, match="kernel_size"):
        ga.image_graph(3, 3, "full", kernel_size="x")
    assert ga.image_graph(3, 3, "full", kernel_size=4).shape == (2, 81)  # unused by "full": any size
    with pytest.raises(TypeError, match="device"):
        ga.sequences_to_batch(torch.randn(2, 3, 4), device="cpu")

"""Property-based tests: random (often hostile) graphs thrown at every public layer and transform.

Each must give finite outputs of the right shape, or raise a clear ValueError/TypeError —
never crash, hang or return NaN. Example counts are bounded so CI stays fast; the counts
used are reported in the README's reliability section.
"""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

from graphattn import AddLaplacianPE, GlobalTokens, GraphClassifier, GraphSelfAttention, NodeClassifier, edge_attention

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def graphs(draw, max_nodes=24, max_edges=80):
    """(num_nodes, edge_index) with self-loops, duplicates, isolated nodes, hubs, or no edges."""
    n = draw(st.integers(0, max_nodes))
    if n == 0:
        return 0, torch.empty(2, 0, dtype=torch.long)
    kind = draw(st.sampled_from(["random", "hub", "empty", "selfloops", "complete"]))
    if kind == "empty":
        ei = torch.empty(2, 0, dtype=torch.long)
    elif kind == "hub":  # one node with huge in-degree (all others, repeated)
        m = draw(st.integers(1, max_edges))
        ei = torch.stack([torch.arange(m) % n, torch.zeros(m, dtype=torch.long)])
    elif kind == "selfloops":
        ei = torch.arange(n).repeat(2, draw(st.integers(1, 3)))
    elif kind == "complete":
        r = torch.arange(n)
        ei = torch.stack([r.repeat(n), r.repeat_interleave(n)])
    else:
        m = draw(st.integers(0, max_edges))
        pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=m, max_size=m))
        ei = torch.tensor(pairs, dtype=torch.long).t().reshape(2, -1)
    return n, ei


features = st.sampled_from(["normal", "huge", "tiny", "zeros"])


def make_x(n, f, kind, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=g)
    return {"normal": x, "huge": x * 1e4, "tiny": x * 1e-20, "zeros": torch.zeros(n, f)}[kind]


@SETTINGS
@given(graphs(), features, st.sampled_from(["dot", "additive"]), st.integers(0, 2**16))
def test_layer_is_finite_on_any_graph(g, feat, score, seed):
    n, ei = g
    layer = GraphSelfAttention(6, 4, heads=2, score=score, edge_dim=3)
    torch.manual_seed(seed)
    out, (_, alpha) = layer(make_x(n, 6, feat, seed), ei, torch.randn(ei.size(1), 3),
                            return_attention_weights=True)
    assert out.shape == (n, 8) and torch.isfinite(out).all()
    assert torch.isfinite(alpha).all() and (alpha >= 0).all() and (alpha <= 1 + 1e-6).all()


@SETTINGS
@given(graphs(), st.integers(0, 2**16))
def test_functional_paths_agree_on_any_graph(g, seed):
    n, ei = g
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(n, 2, 3, dtype=torch.float64, generator=gen) for _ in range(3))
    ref = edge_attention(q, k, v, ei, impl="chunked")
    assert torch.isfinite(ref).all()
    assert torch.allclose(edge_attention(q, k, v, ei), ref, atol=1e-9)


@SETTINGS
@given(graphs(max_nodes=12), st.integers(0, 3), st.integers(1, 3))
def test_models_with_tokens_and_pe_are_finite(g, tokens, k):
    n, ei = g
    data = AddLaplacianPE(k)(Data(edge_index=ei, num_nodes=n))
    x = torch.randn(n, 5)
    model = NodeClassifier(5, 8, 3, num_layers=2, heads=2, num_global_tokens=tokens, pe_dim=k)
    out = model(x, ei, pe=data.lap_pe, pe_eigvals=data.lap_eigval, pe_mask=data.lap_pe_mask)
    assert out.shape == (n, 3) and torch.isfinite(out).all()
    gc = GraphClassifier(5, 8, 2, num_layers=1, heads=2, num_global_tokens=max(tokens, 1), readout="token")
    assert torch.isfinite(gc(x, ei, None)).all()


@SETTINGS
@given(graphs(max_nodes=30), st.integers(1, 8))
def test_laplacian_pe_any_graph(g, k):
    n, ei = g
    data = AddLaplacianPE(k)(Data(edge_index=ei, num_nodes=n))
    pe, lam, mask = data.lap_pe, data.lap_eigval, data.lap_pe_mask
    assert pe.shape == (n, k) and lam.shape == (n, k) and mask.shape == (n, k)
    assert torch.isfinite(pe).all() and torch.isfinite(lam).all()
    assert torch.all(pe[~mask] == 0)
    # eigenvalues of the normalised Laplacian lie in [0, 2]
    assert (lam >= -1e-6).all() and (lam <= 2 + 1e-6).all()
    again = AddLaplacianPE(k)(Data(edge_index=ei, num_nodes=n))
    assert torch.equal(again.lap_pe, pe)  # deterministic, sign included


@SETTINGS
@given(graphs(max_nodes=15), st.integers(1, 3))
def test_global_tokens_never_cross_graphs(g, num_tokens):
    n, ei = g
    half = n // 2
    batch = torch.cat([torch.zeros(half, dtype=torch.long), torch.ones(n - half, dtype=torch.long)])
    keep = batch[ei[0]] == batch[ei[1]] if ei.numel() else torch.ones(0, dtype=torch.bool)
    tg = GlobalTokens(4, num_tokens)(torch.randn(n, 4), ei[:, keep], batch, num_graphs=2)
    assert torch.all(tg.batch[tg.edge_index[0]] == tg.batch[tg.edge_index[1]])
    assert tg.x.size(0) == n + 2 * num_tokens


@SETTINGS
@given(st.sampled_from([float("nan"), float("inf"), -float("inf")]), st.integers(1, 10))
def test_non_finite_features_raise_clear_errors(bad, n):
    x = torch.randn(n, 4)
    x[n // 2, 1] = bad
    with pytest.raises(ValueError, match="NaN or inf"):
        GraphSelfAttention(4, 2)(x, torch.empty(2, 0, dtype=torch.long))


@SETTINGS
@given(st.integers(1, 10), st.integers(-5, 20), st.sampled_from([torch.long, torch.int32, torch.float32]))
def test_bad_edge_indices_raise_clear_errors(n, node, dtype):
    ei = torch.tensor([[0, node], [node, 0]]).to(dtype)
    layer = GraphSelfAttention(4, 2)
    if dtype == torch.float32:
        with pytest.raises(TypeError, match="integer dtype"):
            layer(torch.randn(n, 4), ei)
    elif node < 0 or node >= n:
        with pytest.raises(ValueError, match="negative|refers to node"):
            layer(torch.randn(n, 4), ei)
    else:
        assert torch.isfinite(layer(torch.randn(n, 4), ei)).all()


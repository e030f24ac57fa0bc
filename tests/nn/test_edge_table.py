"""Edge features given as a table of distinct rows plus a per-edge row index.

Categorical edge features (bond types) take few distinct values: the models encode and
project each distinct row once and gather per edge. This must be the same function as
projecting one row per edge, in values and gradients.
"""
import pytest
import torch
from torch_geometric.nn import global_mean_pool

from graphattn import FeatureEncoder, GlobalTokens, GraphClassifier, GraphSelfAttention

VOCAB = [5, 3, 2]


def _graph(n=30, e=120, seed=0):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    codes = torch.stack([torch.randint(0, v, (e,), generator=g) for v in VOCAB], 1)
    return ei, codes


def test_unique_rows_round_trip_and_fallback():
    enc = FeatureEncoder(3, 8, VOCAB)
    _, codes = _graph()
    table, index = enc.unique_rows(codes)
    assert torch.equal(table[index], codes) and len(table) == len({tuple(r) for r in codes.tolist()})
    assert torch.allclose(enc(table)[index], enc(codes))
    big = FeatureEncoder(3, 4, [2 ** 21, 2 ** 21, 2 ** 21])  # keys would overflow int64: row-unique path
    table, index = big.unique_rows(codes)
    assert torch.equal(table[index], codes)
    with pytest.raises(ValueError, match="column 1 has values outside"):
        enc.unique_rows(torch.tensor([[0, 3, 0]]))
    with pytest.raises(ValueError, match="categorical"):
        FeatureEncoder(3, 8).unique_rows(codes)
    assert enc.unique_rows(codes[:0])[1].shape == (0,)  # no edges


@pytest.mark.parametrize("score", ["dot", "additive"])
def test_layer_table_equals_per_edge_rows(score):
    torch.manual_seed(0)
    ei, codes = _graph()
    layer = GraphSelfAttention(16, 4, heads=2, edge_dim=6, score=score)
    x = torch.randn(30, 16, requires_grad=True)
    table = torch.randn(int(codes[:, 0].max()) + 1, 6, requires_grad=True)
    index = codes[:, 0]
    out_t = layer(x, ei, table, edge_attr_index=index)
    gx_t, gtab_t, *gw_t = torch.autograd.grad(out_t.square().sum(), [x, table, *layer.parameters()])
    rows = table[index].detach().requires_grad_()
    out_e = layer(x, ei, rows)
    gx_e, grows, *gw_e = torch.autograd.grad(out_e.square().sum(), [x, rows, *layer.parameters()])
    assert torch.allclose(out_t, out_e, atol=1e-6)
    assert torch.allclose(gx_t, gx_e, atol=1e-5)
    assert torch.allclose(gtab_t, torch.zeros_like(table).index_add_(0, index, grows), atol=1e-5)
    for a, b in zip(gw_t, gw_e):
        assert torch.allclose(a, b, atol=1e-4)


def test_layer_table_errors():
    ei, codes = _graph()
    layer = GraphSelfAttention(16, 4, heads=2, edge_dim=6)
    x, table = torch.randn(30, 16), torch.randn(5, 6)
    with pytest.raises(ValueError, match=r"edge_attr_index has row ids in \[0, 5\] but the table has 5 rows"):
        layer(x, ei, table, edge_attr_index=torch.full((120,), 5).index_fill(0, torch.tensor([0]), 0))
    with pytest.raises(ValueError, match=r"edge_attr_index must have shape \(120\), got \(119,\)"):
        layer(x, ei, table, edge_attr_index=codes[:-1, 0])
    with pytest.raises(TypeError, match="integer tensor"):
        layer(x, ei, table, edge_attr_index=codes[:, 0].float())
    with pytest.raises(ValueError, match="no edge_dim"):
        GraphSelfAttention(16, 4, heads=2)(x, ei, edge_attr_index=codes[:, 0])


def test_global_tokens_keep_the_table_form():
    torch.manual_seed(1)
    ei, codes = _graph()
    batch = torch.arange(30) // 15
    tok = GlobalTokens(8, num_tokens=2, edge_dim=4)
    x, table, index = torch.randn(30, 8), torch.randn(5, 4), codes[:, 0]
    a = tok(x, ei, batch, table, edge_attr_index=index)
    b = tok(x, ei, batch, table[index])
    assert a.edge_attr.shape == (7, 4) and b.edge_attr_index is None
    assert torch.equal(a.edge_attr[a.edge_attr_index], b.edge_attr) and torch.equal(a.edge_index, b.edge_index)
    with pytest.raises(ValueError, match="edge_attr_index needs"):
        GlobalTokens(8)(x, ei, batch, edge_attr_index=index)


@pytest.mark.parametrize("tokens", [0, 1])
def test_categorical_edge_model_is_the_per_edge_function(tokens):
    """GraphClassifier (which uses the table form for categorical edges) against the same
    weights run the per-edge way, by hand."""
    torch.manual_seed(2)
    ei, codes = _graph(n=40, e=150)
    x = torch.randint(0, 4, (40, 2))
    batch = torch.arange(40) // 20
    model = GraphClassifier(2, 16, 3, num_layers=2, heads=2, num_global_tokens=tokens, edge_dim=3,
                            node_vocab_sizes=[4, 4], edge_vocab_sizes=VOCAB).eval()
    bb = model.backbone
    with torch.no_grad():
        got = model(x, ei, batch, codes, num_graphs=2)
        h, e = bb.node_encoder(x), bb.edge_encoder(codes)  # (E, C): one row per edge
        ei2, batch2 = ei, batch
        if tokens:
            tg = bb.tokens(h, ei, batch, e, 2)
            h, ei2, e, batch2 = tg.x, tg.edge_index, tg.edge_attr, tg.batch
        for block in bb.blocks:
            h = block(h, ei2, e, batch2)
        want = model.head(global_mean_pool(bb.norm_out(h)[:40], batch, size=2))
    assert torch.allclose(got, want, atol=1e-5)

import pytest
import torch

from graphattn import GlobalTokens, GraphSelfAttention
from graphattn.testing import random_graph_batch


def test_tokens_connect_each_graph_and_never_cross():
    sizes = [3, 0, 5, 1]  # includes an empty graph
    ei, batch = random_graph_batch(sizes, avg_degree=2.0, generator=torch.Generator().manual_seed(0))
    x = torch.randn(sum(sizes), 8)
    gt = GlobalTokens(8, num_tokens=2)
    tg = gt(x, ei, batch, num_graphs=4)
    N, B, G = 9, 4, 2
    assert tg.x.shape == (N + B * G, 8) and tg.num_nodes == N and tg.num_graphs == B
    assert tg.edge_index.size(1) == ei.size(1) + 2 * N * G + B * G * G
    src, dst = tg.edge_index
    assert torch.all(tg.batch[src] == tg.batch[dst])  # never across graphs
    for t in range(N, N + B * G):  # each token: in- and out-edges to every node of its graph
        b = int(tg.batch[t])
        members = set((batch == b).nonzero().flatten().tolist()) | set(range(N + b * G, N + b * G + G))
        assert set(src[dst == t].tolist()) == members
        assert set(dst[src == t].tolist()) == members
    nodes, tokens = gt.split(tg.x, N)
    assert torch.equal(nodes, x) and tokens.shape == (B, G, 8)
    assert torch.equal(tokens[1], gt.tokens.detach())


def test_tokens_with_edge_features_and_errors():
    gt = GlobalTokens(4, edge_dim=3)
    x, ei = torch.randn(5, 4), torch.tensor([[0, 1], [1, 2]])
    tg = gt(x, ei, edge_attr=torch.randn(2, 3))
    assert tg.edge_attr.shape == (tg.edge_index.size(1), 3)
    with pytest.raises(ValueError, match="edge_attr is required"):
        gt(x, ei)
    with pytest.raises(ValueError, match="num_tokens"):
        GlobalTokens(4, num_tokens=0)
    with pytest.raises(ValueError, match="x must have shape"):
        gt(torch.randn(5, 3), ei, edge_attr=torch.randn(2, 3))


def test_attention_over_tokens_equals_per_graph():
    # A batch of two graphs with tokens gives the same node outputs as each graph alone.
    g = torch.Generator().manual_seed(1)
    gt, layer = GlobalTokens(8, num_tokens=1), GraphSelfAttention(8, 4, heads=2).eval()
    e1, _ = random_graph_batch([6], generator=g)
    e2, _ = random_graph_batch([4], generator=g)
    x1, x2 = torch.randn(6, 8), torch.randn(4, 8)
    tg = gt(torch.cat([x1, x2]), torch.cat([e1, e2 + 6], 1), torch.tensor([0] * 6 + [1] * 4))
    out = layer(tg.x, tg.edge_index)
    alone = [gt(x, e) for x, e in ((x1, e1), (x2, e2))]
    o1, o2 = (layer(a.x, a.edge_index) for a in alone)
    assert torch.allclose(out[:6], o1[:6], atol=1e-6) and torch.allclose(out[6:10], o2[:4], atol=1e-6)
    assert torch.allclose(out[10], o1[6], atol=1e-6) and torch.allclose(out[11], o2[4], atol=1e-6)


def test_global_tokens_validates_num_graphs_and_batch():
    x, ei, b = torch.randn(5, 4), torch.tensor([[0, 1], [1, 0]]), torch.tensor([0, 0, 2, 2, 2])
    tok = GlobalTokens(4, 2)
    with pytest.raises(ValueError, match=r"num_graphs=2 but batch holds graph id 2"):
        tok(x, ei, b, num_graphs=2)
    with pytest.raises(ValueError, match="batch must have shape"):
        tok(x, ei, b[:3])
    with pytest.raises(ValueError, match="negative graph ids"):
        tok(x, ei, -b)
    with pytest.raises(ValueError, match="edge_index refers to node 5"):
        tok(x, torch.tensor([[0], [5]]), b)  # would otherwise silently connect to a token
    tg = tok(x, ei, b, num_graphs=4)  # trailing empty graph: valid
    assert tg.num_graphs == 4 and int(tg.edge_index.max()) < tg.x.size(0) == 5 + 4 * 2


def test_global_tokens_validates_edge_attr():
    x, ei = torch.randn(5, 4), torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="edge_attr has 7 rows but edge_index has 2 edges"):
        GlobalTokens(4, 1, edge_dim=3)(x, ei, edge_attr=torch.randn(7, 3))
    with pytest.raises(ValueError, match=r"edge_attr must have shape \(E, 3\)"):
        GlobalTokens(4, 1, edge_dim=3)(x, ei, edge_attr=torch.randn(2, 2))
    with pytest.raises(ValueError, match="built without edge_dim"):
        GlobalTokens(4, 1)(x, ei, edge_attr=torch.randn(2, 3))
    with pytest.raises(ValueError, match="edge_attr_index"):
        GlobalTokens(4, 1, edge_dim=3)(x, ei, edge_attr=torch.randn(2, 3), edge_attr_index=torch.tensor([0, 2]))
    tok = GlobalTokens(4, 1, edge_dim=1)
    flat = torch.randn(2)
    a = tok(x, ei, edge_attr=flat)  # (E,) with edge_dim=1, as GraphSelfAttention accepts it
    col = tok(x, ei, edge_attr=flat[:, None])
    assert a.edge_attr.shape == (a.edge_index.size(1), 1) and torch.equal(a.edge_attr, col.edge_attr)

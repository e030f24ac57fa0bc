"""NodeClassifier (graphattn.nn.models.node_classifier): APPNP propagation, the GCN branch,
self-loops, its cached normalised graph (in-place edits, inference mode, float64, copies)."""
import copy
import io

import networkx as nx
import pytest
import torch

from graphattn import NodeClassifier
from graphattn.nn.features import gcn_normalized_graph
from graphattn.nn.models import node_classifier as nc

from tiny_inputs import path_batch


def test_node_classifier_overfits_karate_club():
    G = nx.karate_club_graph()
    ei = torch.tensor(list(G.edges)).t()
    ei = torch.cat([ei, ei.flip(0)], 1)
    y = torch.tensor([G.nodes[i]["club"] == "Officer" for i in G.nodes], dtype=torch.long)
    x = torch.eye(34)
    torch.manual_seed(0)
    model = NodeClassifier(34, 32, 2, num_layers=2, heads=4)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(60):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x, ei), y)
        loss.backward()
        opt.step()
    assert (model(x, ei).argmax(-1) == y).float().mean() == 1.0


def _dense_appnp(z0, ei, N, K, a):
    """Reference: K steps of z <- (1 - a) D^-1/2 (A + I) D^-1/2 z + a z0 on a dense matrix."""
    A = torch.zeros(N, N)
    A[ei[1], ei[0]] = 1.0  # row = target
    A.fill_diagonal_(1.0)
    d = A.sum(1).rsqrt()
    A_hat = d[:, None] * A * d[None, :]
    z = z0
    for _ in range(K):
        z = (1 - a) * A_hat @ z + a * z0
    return z


def test_node_classifier_propagation_matches_dense_appnp_and_widens_reach():
    torch.manual_seed(0)
    ei, batch = path_batch([9, 4])
    x = torch.randn(13, 5)
    plain = NodeClassifier(5, 16, 3, num_layers=1, heads=2).eval()
    prop = NodeClassifier(5, 16, 3, num_layers=1, heads=2, propagation=3, propagation_alpha=0.2).eval()
    prop.load_state_dict(plain.state_dict())  # no extra parameters
    ref = _dense_appnp(plain(x, ei), ei, 13, K=3, a=0.2)
    assert torch.allclose(prop(x, ei), ref, atol=1e-5)
    # 1 attention layer + 3 propagation steps: node 0 sees 4 hops of its own path, never the other graph
    xg = x.clone().requires_grad_()
    (prop(xg, ei)[0] * torch.randn(3)).sum().backward()
    assert set((xg.grad.abs().sum(-1) > 1e-7).nonzero().flatten().tolist()) == {0, 1, 2, 3, 4}
    # a = 1 teleports straight back: no propagation at all
    full_teleport = NodeClassifier(5, 16, 3, num_layers=1, heads=2, propagation=5, propagation_alpha=1.0).eval()
    full_teleport.load_state_dict(plain.state_dict())
    assert torch.allclose(full_teleport(x, ei), plain(x, ei), atol=1e-6)


def test_node_classifier_learned_propagation_starts_as_appnp_and_learns_hop_weights():
    torch.manual_seed(0)
    ei, _ = path_batch([7, 3])
    x, N, K, a = torch.randn(10, 5), 10, 4, 0.2
    appnp = NodeClassifier(5, 16, 3, num_layers=1, heads=2, propagation=K, propagation_alpha=a).eval()
    gpr = NodeClassifier(5, 16, 3, num_layers=1, heads=2, propagation=K, propagation_alpha=a,
                         propagation_learned=True).eval()
    missing = gpr.load_state_dict(appnp.state_dict(), strict=False).missing_keys
    assert missing == ["hop_weights"] and gpr.hop_weights.shape == (K + 1,)
    assert torch.allclose(gpr.hop_weights.sum(), torch.tensor(1.0))  # PPR weights sum to one
    assert torch.allclose(gpr(x, ei), appnp(x, ei), atol=1e-5)  # exactly APPNP at initialisation
    # other weights give other filters: gamma = e_2 is two plain steps of A_hat, gamma = e_0 none at all
    plain = NodeClassifier(5, 16, 3, num_layers=1, heads=2).eval()
    plain.load_state_dict(appnp.state_dict())
    z0 = plain(x, ei)
    with torch.no_grad():
        gpr.hop_weights.zero_()[2] = 1.0
    assert torch.allclose(gpr(x, ei), _dense_appnp(z0, ei, N, K=2, a=0.0), atol=1e-5)
    with torch.no_grad():
        gpr.hop_weights.zero_()[0] = 1.0
    assert torch.allclose(gpr(x, ei), z0, atol=1e-6)
    gpr.reset_hop_weights()
    assert torch.allclose(gpr(x, ei), appnp(x, ei), atol=1e-5)
    # the hop weights are trained (APPNP's fixed weights have no parameter at all)
    gpr.train()
    gpr(x, ei).pow(2).sum().backward()
    assert gpr.hop_weights.grad is not None and gpr.hop_weights.grad.abs().sum() > 0
    assert sum(p.numel() for p in gpr.parameters()) == sum(p.numel() for p in appnp.parameters()) + K + 1


def test_node_classifier_gcn_branch_is_the_gcn_formula_and_reaches_neighbours():
    torch.manual_seed(0)
    ei, _ = path_batch([5, 3])
    x, N, w = torch.randn(8, 4), 8, 0.8
    model = NodeClassifier(4, 6, 3, num_layers=0, heads=2, gcn_weight=w).eval()
    A = torch.zeros(N, N)
    A[ei[1], ei[0]] = 1.0
    A.fill_diagonal_(1.0)
    d = A.sum(1).rsqrt()
    gcn = torch.relu((d[:, None] * A * d[None, :]) @ model.gcn(x))  # (N, C)
    h, _ = model.backbone(x, ei)
    assert torch.allclose(model(x, ei), model.head((1 - w) * h + w * gcn), atol=1e-5)
    # without attention layers a node sees only itself; the GCN branch adds its neighbours
    for m, expected in ((NodeClassifier(4, 6, 3, num_layers=0, heads=2), {1}), (model, {0, 1, 2})):
        xg = x.clone().requires_grad_()
        (m(xg, ei)[1] * torch.randn(3)).sum().backward()
        assert set((xg.grad.abs().sum(-1) > 1e-7).nonzero().flatten().tolist()) == expected
    assert {"gcn.weight", "gcn.bias"} <= set(model.state_dict())


def test_node_classifier_self_loops_replace_existing_ones():
    torch.manual_seed(0)
    ei, _ = path_batch([6])
    ei = torch.cat([ei, torch.tensor([[5], [5]])], 1)  # node 5: one in-edge and no loop
    x = torch.randn(6, 4)
    model = NodeClassifier(4, 8, 2, num_layers=2, heads=2, self_loops=True, propagation=2).eval()
    with_loops = torch.cat([ei, torch.tensor([[0, 0, 3], [0, 0, 3]])], 1)  # duplicate and extra loops
    out = model(x, ei)
    assert torch.allclose(model(x, with_loops), out, atol=1e-6)  # loops are one per node, whatever the input
    plain = NodeClassifier(4, 8, 2, num_layers=2, heads=2, propagation=2).eval()
    plain.load_state_dict(model.state_dict())
    assert not torch.allclose(plain(x, ei), out, atol=1e-4)  # attending to oneself changes the output
    # an isolated node (6) attends to itself only; without loops its attention output is zero
    x7 = torch.cat([x, torch.randn(1, 4)])
    iso, iso_plain = model(x7, ei), plain(x7, ei)
    assert iso.shape == (7, 2) and torch.isfinite(iso).all()
    assert not torch.allclose(iso[6], iso_plain[6], atol=1e-4)


def test_node_classifier_option_errors():
    with pytest.raises(ValueError, match="propagation must be"):
        NodeClassifier(3, 8, 2, propagation=-1)
    with pytest.raises(ValueError, match="propagation_alpha must be"):
        NodeClassifier(3, 8, 2, propagation=2, propagation_alpha=0.0)
    with pytest.raises(ValueError, match="self_loops=True is not supported with edge_dim"):
        NodeClassifier(3, 8, 2, edge_dim=2, self_loops=True)
    with pytest.raises(ValueError, match="propagation_learned=True needs propagation >= 1"):
        NodeClassifier(3, 8, 2, propagation_learned=True)
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="gcn_weight must be in"):
            NodeClassifier(3, 8, 2, gcn_weight=bad)
    with pytest.raises(ValueError, match="gcn_weight > 0 needs float features"):
        NodeClassifier(3, 8, 2, gcn_weight=0.5, node_vocab_sizes=[4, 4, 4])


def ring(n=6):
    r = torch.arange(n)
    return torch.stack([r, (r + 1) % n])


@pytest.mark.parametrize("kw", [{"self_loops": True}, {"propagation": 2}, {"gcn_weight": 0.5}])
def test_node_classifier_cache_sees_in_place_edits(kw):
    torch.manual_seed(0)
    x, ei = torch.randn(6, 8), ring()
    m = NodeClassifier(8, 8, 3, heads=2, **kw).eval()
    before = m(x, ei)
    ei[0] = 5  # in place: same tensor object, new contents
    assert torch.allclose(m(x, ei), m(x, ei.clone()), atol=1e-6)
    ei[0] = torch.arange(6)  # and back
    assert torch.allclose(m(x, ei), before, atol=1e-6)


def test_node_classifier_cache_keyed_on_num_nodes_and_inference_tensors():
    m = NodeClassifier(4, 8, 2, heads=2, propagation=1, propagation_alpha=0.5).eval()
    ei = torch.tensor([[0], [1]])
    z2, z3 = torch.ones(2, 2), torch.ones(3, 2)
    out2, out3 = m.propagate(z2, ei), m.propagate(z3, ei)
    assert out2.shape == (2, 2) and out3.shape == (3, 2)
    assert torch.allclose(out3[2], torch.ones(2))  # isolated node 2: Â z = z
    with torch.inference_mode():  # no version counter on inference tensors: computed, not cached
        ei_inf = torch.tensor([[0], [1]])
        assert torch.allclose(m.propagate(z2, ei_inf), out2)
        ei_inf[0, 0] = 1
        assert torch.allclose(m.propagate(z2, ei_inf), m.propagate(z2, torch.tensor([[1], [1]])))


def test_node_classifier_float64_gcn_weights_in_float64():
    torch.manual_seed(0)
    n = 50
    ei = torch.randint(0, n, (2, 400))
    m = NodeClassifier(6, 8, 3, num_layers=1, heads=2, propagation=5, gcn_weight=0.5).double().eval()
    x = torch.randn(n, 6, dtype=torch.float64)
    out = m(x, ei)
    _, w64 = gcn_normalized_graph(ei, n, torch.float64)
    _, w32 = gcn_normalized_graph(ei, n)
    assert w64.dtype == torch.float64 and w32.dtype == torch.float32
    cached = m._graph(ei, n, torch.float64)[1]
    assert cached.dtype == torch.float64 and torch.equal(cached, w64)
    assert out.dtype == torch.float64 and torch.isfinite(out).all()


def test_pickled_or_copied_node_classifier_leaves_its_graph_cache_behind():
    model = NodeClassifier(4, 8, 3, self_loops=True, propagation=2).eval()
    ei = torch.randint(0, 2000, (2, 20000))
    x = torch.randn(2000, 4)
    out = model(x, ei)
    assert model._graph_cache is not None
    buf = io.BytesIO()
    torch.save(model, buf)
    assert buf.tell() < 200_000  # the cache (20k edges + loops + weights, ~0.6 MB) is not saved
    twin = copy.deepcopy(model)
    assert twin._graph_cache is None and model._graph_cache is not None
    torch.testing.assert_close(twin(x, ei), out)
    buf.seek(0)
    torch.testing.assert_close(torch.load(buf, weights_only=False)(x, ei), out)


def _und(ei):
    return torch.cat([ei, ei.flip(0)], 1)


@pytest.mark.parametrize("kw", [dict(propagation=3), dict(gcn_weight=0.5), dict(self_loops=True)])
def test_first_call_under_inference_mode_does_not_poison_training(kw):
    x, ei = torch.randn(6, 4), _und(torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]))
    model = NodeClassifier(4, 8, 2, num_layers=1, heads=2, **kw)
    with torch.inference_mode():
        model.eval()(x, ei)
    model.train()
    model(x, ei).sum().backward()  # not "Inference tensors cannot be saved for backward"
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())


def test_float64_node_classifier_builds_its_gcn_graph_once():
    calls = []
    real = nc.gcn_normalized_graph
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(nc, "gcn_normalized_graph", lambda *a, **k: calls.append(1) or real(*a, **k))
    try:
        m = NodeClassifier(4, 8, 2, num_layers=1, heads=2, self_loops=True, propagation=3).double().eval()
        x, ei = torch.randn(30, 4, dtype=torch.float64), torch.randint(0, 30, (2, 90))
        for _ in range(3):
            m(x, ei)
    finally:
        monkeypatch.undo()
    assert len(calls) == 1  # one cache entry serves the attention's loops and the propagation

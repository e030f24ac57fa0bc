import pytest
import torch

from graphattn import GraphClassifier, GraphTransformer, NodeClassifier
from graphattn.testing import random_graph_batch


def path_batch(sizes):
    parts, off = [], 0
    for n in sizes:
        r = torch.arange(n - 1)
        parts.append(torch.cat([torch.stack([r, r + 1]), torch.stack([r + 1, r])], 1) + off)
        off += n
    return torch.cat(parts, 1), torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))


def reach(model, x, ei, batch, target):
    """Set of input nodes whose features influence node `target`'s output."""
    x = x.clone().requires_grad_()
    h, _ = model(x, ei, batch=batch)
    (h[target] * torch.randn(h.size(-1))).sum().backward()  # not .sum(): LayerNorm makes it constant
    return set((x.grad.abs().sum(-1) > 1e-7).nonzero().flatten().tolist())


def test_receptive_field_with_and_without_global_tokens():
    ei, batch = path_batch([8, 5])
    x = torch.randn(13, 6)
    plain = GraphTransformer(6, 16, num_layers=2, heads=2)
    assert reach(plain, x, ei, batch, 0) == {0, 1, 2}  # 2 layers: 2-hop neighbourhood
    tok = GraphTransformer(6, 16, num_layers=2, heads=2, num_global_tokens=1)
    assert reach(tok, x, ei, batch, 0) == set(range(8))  # the whole graph, never the other one


@pytest.mark.parametrize("readout", ["mean", "sum", "max", "token"])
def test_graph_classifier_shapes_and_batch_isolation(readout):
    torch.manual_seed(0)
    ei, batch = random_graph_batch([5, 7, 1], avg_degree=2)
    x = torch.randint(0, 4, (13, 3))
    ea = torch.randint(0, 3, (ei.size(1), 2))
    model = GraphClassifier(3, 16, num_tasks=4, num_layers=2, heads=2, num_global_tokens=1, edge_dim=2,
                            readout=readout, node_vocab_sizes=[4, 4, 4], edge_vocab_sizes=[3, 3]).eval()
    out = model(x, ei, batch, ea)
    assert out.shape == (3, 4) and torch.isfinite(out).all()
    m = batch == 1
    sub_ei = ei[:, m[ei[0]]] - 5
    sub_ea = ea[m[ei[0]]]
    alone = model(x[m], sub_ei, None, sub_ea)
    assert torch.allclose(out[1], alone[0], atol=1e-5)


def test_node_classifier_overfits_karate_club():
    import networkx as nx
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


def test_model_errors():
    with pytest.raises(ValueError, match="readout must be one of"):
        GraphClassifier(3, 8, 1, readout="attention")
    with pytest.raises(ValueError, match="needs num_global_tokens"):
        GraphClassifier(3, 8, 1, readout="token")
    with pytest.raises(ValueError, match="pe_kind must be one of"):
        GraphTransformer(3, 8, 1, pe_kind="sinus")
    m = NodeClassifier(3, 8, 2, pe_dim=4, pe_kind="linear")
    with pytest.raises(ValueError, match="pe of shape"):
        m(torch.randn(5, 3), torch.empty(2, 0, dtype=torch.long))
    enc = GraphClassifier(2, 8, 1, node_vocab_sizes=[3, 3])
    with pytest.raises(ValueError, match="column 1 has values outside"):
        enc(torch.tensor([[0, 5]]), torch.empty(2, 0, dtype=torch.long))


def test_laplacian_pe_end_to_end_masks_padding():
    from torch_geometric.data import Batch, Data

    from graphattn import AddLaplacianPE
    t = AddLaplacianPE(4)
    graphs = [t(Data(x=torch.randn(n, 3), edge_index=path_batch([n])[0], num_nodes=n)) for n in (2, 7)]
    b = Batch.from_data_list(graphs)
    model = GraphClassifier(3, 16, 2, num_layers=1, heads=2, pe_dim=4).eval()
    out = model(b.x, b.edge_index, b.batch, pe=b.lap_pe, pe_eigvals=b.lap_eigval, pe_mask=b.lap_pe_mask)
    assert out.shape == (2, 2) and torch.isfinite(out).all()
    # garbage in padded (masked) columns must not change the output
    pe = b.lap_pe.clone()
    pe[~b.lap_pe_mask] = 123.0
    out2 = model(b.x, b.edge_index, b.batch, pe=pe, pe_eigvals=b.lap_eigval, pe_mask=b.lap_pe_mask)
    assert torch.allclose(out, out2, atol=1e-6)


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

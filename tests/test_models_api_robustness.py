"""Public-API edge cases of the models, encodings and global attention variants (QA, session 12):
mixed-size batches in linear attention, int32/uint8 batch vectors, feature redraws,
reset_parameters of the classifiers, constructor checks."""
import importlib
from unittest import mock

import pytest
import torch

from graphattn import GlobalTokens, GraphClassifier, LinearGlobalAttention, NodeClassifier
from graphattn.nn.variants.clustered_attention import ClusteredAttention, cluster_codes
from graphattn.nn.encodings import LapPEEncoder, sinusoidal_pe

la = importlib.import_module("graphattn.nn.variants.linear_attention")  # the module (the package exports the function)


@pytest.mark.parametrize("feature_map", ["elu", "favor"])
def test_linear_attention_mixed_sizes_pads_by_size_class_and_matches_each_graph(feature_map):
    sizes = [300, 3, 1, 40, 5, 2, 70, 9]  # one large graph among small ones, unsorted batch
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    batch = batch[torch.randperm(batch.numel(), generator=torch.Generator().manual_seed(0))]
    N, H, C = batch.numel(), 2, 4
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(N, H, C, generator=g, dtype=torch.float64) for _ in range(3))
    omega = la.orthogonal_features(H, 8, C, torch.Generator().manual_seed(2)).double()
    slots = []
    real = la._padded_linear_attention

    def spy(q_, k_, v_, layout, *args):
        slots.append(layout.B * layout.L)
        return real(q_, k_, v_, layout, *args)

    with mock.patch.object(la, "_padded_linear_attention", spy):
        out = la.linear_attention(q, k, v, batch, feature_map, omega)
    assert sum(slots) <= 2 * N and len(slots) > 1  # one padded block would take 8 x 300 slots
    for b in range(len(sizes)):
        idx = torch.nonzero(batch == b).flatten()
        alone = la.linear_attention(q[idx], k[idx], v[idx], None, feature_map, omega)
        torch.testing.assert_close(out[idx], alone, rtol=1e-10, atol=1e-12)
    # gradients reach every input through the size-class path
    q.requires_grad_(True)
    la.linear_attention(q, k, v, batch, feature_map, omega).sum().backward()
    assert torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0


def test_redraw_features_draws_new_ones_and_reset_restores_the_seeded_ones():
    m = LinearGlobalAttention(8, heads=2, feature_map="favor", seed=3)
    first = m.omega.clone()
    m.redraw_features()
    second = m.omega.clone()
    m.redraw_features()
    assert not torch.equal(first, second) and not torch.equal(second, m.omega)
    m.reset_parameters()
    assert torch.equal(m.omega, first)
    assert torch.equal(LinearGlobalAttention(8, heads=2, feature_map="favor", seed=3).omega, first)


@pytest.mark.parametrize("readout", ["mean", "sum", "max"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8])
def test_graph_classifier_takes_narrow_integer_batch(readout, dtype):
    x, ei = torch.randn(5, 4), torch.tensor([[0, 1, 3, 4], [1, 0, 4, 3]])
    batch = torch.tensor([0, 0, 1, 1, 1])
    model = GraphClassifier(4, 8, 2, num_layers=1, heads=2, pe_dim=2, readout=readout).train()
    pe = torch.randn(5, 2)
    torch.manual_seed(0)
    want = model(x, ei, batch, pe=pe)
    torch.manual_seed(0)  # same sign flips and dropout
    got = model(x, ei, batch.to(dtype), pe=pe)
    assert torch.equal(got, want)


def test_lappe_encoder_sign_flips_per_graph_and_checks_num_graphs():
    enc = LapPEEncoder(3, 4, use_eigvals=False).train()
    pe = torch.ones(6, 3)
    out = enc(pe, num_graphs=6)  # no batch: one graph, one sign row for all nodes
    assert torch.allclose(out, out[:1].expand_as(out))
    batch = torch.tensor([0, 0, 1, 1, 2, 2], dtype=torch.uint8)
    out = enc(pe, batch=batch)
    assert torch.equal(out[0], out[1]) and torch.equal(out[2], out[3])  # per graph, not a mask
    with pytest.raises(ValueError, match="num_graphs=2 but batch holds graph id 2"):
        enc(pe, batch=batch, num_graphs=2)


def test_classifiers_reset_parameters_resets_every_trained_weight():
    x, ei = torch.randn(6, 4), torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    models = [GraphClassifier(4, 8, 2, num_layers=1, heads=2, num_global_tokens=1),
              NodeClassifier(4, 8, 3, num_layers=1, heads=2, gcn_weight=0.5, gcn_layers=2, propagation=2,
                             propagation_learned=True)]
    for model in models:
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            model(x, ei).pow(2).sum().backward()
            opt.step()
        trained = {n: p.detach().clone() for n, p in model.named_parameters()}
        model.reset_parameters()
        same = [n for n, p in model.named_parameters() if torch.equal(p, trained[n])]
        assert not same, same
    node = models[1]
    assert torch.allclose(node.hop_weights.detach(),
                          torch.tensor([0.1, 0.09, 0.81]), atol=1e-6)  # PPR weights of alpha 0.1


@pytest.mark.parametrize("make", [
    lambda: GraphClassifier(5, 16, 2, num_layers=-1),
    lambda: GraphClassifier(5, 16, 2, num_global_tokens=-1),
    lambda: GraphClassifier(5, 16, 2, pe_dim=-1),
    lambda: GraphClassifier(5, 16, 0),
    lambda: GraphClassifier(0, 16, 2),
    lambda: GraphClassifier(5, 16, 2, heads=0),
    lambda: GraphClassifier(5, 16, 2, edge_dim=0),
    lambda: NodeClassifier(5, 16, 0),
    lambda: NodeClassifier(5, 16, 2, propagation=True),
    lambda: GlobalTokens(8, edge_dim=0),
    lambda: GlobalTokens(8, edge_dim=-1),
    lambda: LinearGlobalAttention(8, feature_map="favor", num_features=0),
    lambda: LinearGlobalAttention(0),
    lambda: ClusteredAttention(8, iters=-1),
    lambda: sinusoidal_pe(3, 4, base=float("inf")),
])
def test_bad_constructor_arguments_are_value_errors(make):
    with pytest.raises(ValueError, match="must be"):
        make()


def test_cluster_codes_check_batch_for_every_method():
    q = torch.randn(6, 4)
    for method, k in [("lsh", 3), ("kmeans", 1), ("lsh", 1)]:
        with pytest.raises(ValueError, match="num_graphs=2 but batch holds graph id 2"):
            cluster_codes(q, batch=torch.tensor([0, 0, 1, 1, 2, 2]), num_clusters=k, method=method, num_graphs=2)
        with pytest.raises(ValueError, match="negative graph ids"):
            cluster_codes(q, batch=torch.tensor([0, 0, 1, 1, -1, 2]), num_clusters=k, method=method)
        with pytest.raises(ValueError, match=r"batch must have shape \(6,\)"):
            cluster_codes(q, batch=torch.tensor([0, 0, 1]), num_clusters=k, method=method)


def test_model_errors_describe_the_users_tensors_not_the_encoded_ones():
    model = GraphClassifier(5, 16, 2, edge_dim=2)
    x, ei = torch.randn(3, 5), torch.tensor([[0, 1, 2, 0], [1, 2, 0, 2]])
    with pytest.raises(ValueError, match=r"edge_attr must have shape \(4, 2\) .* got \(5, 2\)"):
        model(x, ei, edge_attr=torch.randn(5, 2))
    x[1, 1] = float("nan")
    with pytest.raises(ValueError, match=r"^x contains NaN or inf values \(in 1 of 3 rows\)"):
        model(x, ei, edge_attr=torch.randn(4, 2))


def test_missing_node_features_and_fused_options_fail_early():
    from graphattn import GraphClassifier, GraphSelfAttention, GraphTransformer, NodeClassifier

    ei = torch.tensor([[0, 1], [1, 0]])
    for model in (GraphClassifier(8, 16, 2), NodeClassifier(8, 16, 2), GraphTransformer(8, 16, 2)):
        with pytest.raises(TypeError, match="x is None: the graphs have no node features"):
            model(None, ei)
    with pytest.raises(ValueError, match="impl='fused' supports only score='dot'"):
        GraphSelfAttention(4, 4, impl="fused", score="additive")
    x = torch.randn(2, 4)
    layer = GraphSelfAttention(4, 4, impl="fused", dropout=0.1).eval()  # dropout is inactive in eval
    assert torch.isfinite(layer(x, ei)).all()


def test_models_take_impl_for_gradient_penalties_on_complete_graphs():
    """Complete graphs route to SDPA under impl='auto' (no double backward on the CPU);
    GraphClassifier(impl='fused') reaches every layer and makes gradient penalties work."""
    from graphattn import GraphClassifier, GraphSelfAttention

    n = 16
    a = torch.arange(n)
    ei = torch.cartesian_prod(a, a).t().contiguous()
    torch.manual_seed(0)
    m = GraphClassifier(8, 16, 1, num_layers=2, heads=2, impl="fused")
    assert {mod.impl for mod in m.modules() if isinstance(mod, GraphSelfAttention)} == {"fused"}
    x = torch.randn(n, 8, requires_grad=True)
    g, = torch.autograd.grad(m(x, ei).sum(), x, create_graph=True)
    g.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    torch.manual_seed(0)
    auto = GraphClassifier(8, 16, 1, num_layers=2, heads=2)
    torch.testing.assert_close(auto(x, ei), m(x, ei), atol=1e-5, rtol=1e-5)  # same function
    with pytest.raises(ValueError, match="impl"):
        GraphClassifier(8, 16, 1, impl="magic")


def test_dtype_mismatch_is_named():
    from graphattn import GraphSelfAttention

    layer = GraphSelfAttention(4, 2, edge_dim=2)
    ei = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(TypeError, match="x has dtype torch.float64"):
        layer(torch.randn(3, 4, dtype=torch.float64), ei, torch.randn(2, 2))
    with pytest.raises(TypeError, match="edge_attr has dtype torch.float64"):
        layer(torch.randn(3, 4), ei, torch.randn(2, 2, dtype=torch.float64))
    with pytest.raises(TypeError, match="edge_attr must be a floating-point"):
        layer(torch.randn(3, 4), ei, torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"got \(2,\)"):  # the shape passed, not a reshaped one
        layer(torch.randn(3, 4), ei, torch.randn(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast casts: no error
        assert layer(torch.randn(3, 4).bfloat16(), ei, torch.randn(2, 2)).shape == (3, 2)


def test_node_classifier_float64_gcn_weights_in_float64():
    from graphattn import NodeClassifier
    from graphattn.nn.features import gcn_normalized_graph

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


def test_clear_csr_cache_after_writes_that_bypass_the_version_counter():
    from graphattn import GraphSelfAttention
    from graphattn.ops.csr import clear_csr_cache

    layer = GraphSelfAttention(4, 2, root_weight=False).eval()
    x = torch.randn(5, 4)
    ei = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    layer(x, ei)
    ei.data[0, 0] = 3  # not seen by the version counter
    clear_csr_cache()
    torch.testing.assert_close(layer(x, ei), layer(x, ei.clone()))
    layer(x, ei)
    ei.data[0, 0] = 9  # out of range: the range check must run again after clearing
    clear_csr_cache()
    with pytest.raises(ValueError, match="edge_index"):
        layer(x, ei)


@pytest.mark.parametrize("score", ["dot", "additive"])
def test_state_dicts_load_across_fused_lazy_and_pair_widths(score):
    # an int in_channels fuses q/k/v into lin_qkv, -1 / (F, F) keep PyG's per-role names: either loads into both
    from torch_geometric.nn import TransformerConv

    from graphattn import GraphSelfAttention

    torch.manual_seed(0)
    x, ei, ea = torch.randn(5, 4), torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]]), torch.randn(5, 2)
    fused = GraphSelfAttention(4, 3, heads=2, edge_dim=2, score=score).eval()
    lazy = GraphSelfAttention(-1, 3, heads=2, edge_dim=2, score=score).eval()
    lazy(x, ei, ea)  # materialise the lazy widths
    pair = GraphSelfAttention((4, 4), 3, heads=2, edge_dim=2, score=score).eval()
    lazy.load_state_dict(fused.state_dict())
    torch.testing.assert_close(lazy(x, ei, ea), fused(x, ei, ea))
    pair.load_state_dict(lazy.state_dict())
    fresh = GraphSelfAttention(4, 3, heads=2, edge_dim=2, score=score).eval()
    fresh.load_state_dict(pair.state_dict())
    torch.testing.assert_close(fresh(x, ei, ea), fused(x, ei, ea))
    if score == "dot":  # PyG's TransformerConv weights load into the fused form too
        tc = TransformerConv(4, 3, heads=2, edge_dim=2).eval()
        fresh.load_state_dict(tc.state_dict())
        torch.testing.assert_close(fresh(x, ei, ea), tc(x, ei, ea))
    with pytest.raises(RuntimeError, match="Missing key"):  # a truly incomplete dict still fails
        sd = pair.state_dict()
        sd.pop(next(k for k in sd if k.startswith("lin_") and k.endswith(".weight") and "skip" not in k))
        fresh.load_state_dict(sd)


def test_pickled_or_copied_node_classifier_leaves_its_graph_cache_behind():
    import copy
    import io

    from graphattn import NodeClassifier

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

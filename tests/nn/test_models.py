"""GraphTransformer and GraphClassifier (graphattn.nn.models): receptive fields, readouts, empty and
trailing empty graphs, narrow batch vectors, input checks, reset_parameters and constructor errors."""
import pytest
import torch
from torch_geometric.data import Batch, Data

from graphattn import (GLOBAL_ATTNS, AddLaplacianPE, ClusteredAttention, GlobalTokens, GraphClassifier,
                       GraphSelfAttention, GraphTransformer, LinearGlobalAttention, NodeClassifier, sinusoidal_pe)
from graphattn.testing import random_graph_batch

from tiny_inputs import path_batch

EMPTY_X, EMPTY_EI, EMPTY_B = torch.zeros(0, 8), torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long)


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


@pytest.mark.parametrize("kind", GLOBAL_ATTNS)
def test_models_with_global_attention_on_empty_batch(kind):
    torch.manual_seed(0)
    ref = GraphClassifier(8, 8, 2, num_layers=1, heads=2)
    m = GraphClassifier(8, 8, 2, num_layers=1, heads=2, global_attn=kind)
    assert m(EMPTY_X, EMPTY_EI, EMPTY_B).shape == ref(EMPTY_X, EMPTY_EI, EMPTY_B).shape == (1, 2)
    out = m(EMPTY_X, EMPTY_EI, EMPTY_B, num_graphs=3)
    assert out.shape == (3, 2) and torch.isfinite(out).all()
    assert torch.allclose(out, out[:1].expand(3, 2))  # every (empty) graph reads the same zero pool
    nc = NodeClassifier(8, 8, 3, num_layers=1, heads=2, global_attn=kind)
    assert nc(EMPTY_X, EMPTY_EI).shape == (0, 3)
    assert nc(EMPTY_X, EMPTY_EI, batch=EMPTY_B).shape == (0, 3)


def test_models_validate_batch():
    x, ei = torch.randn(5, 4), torch.tensor([[0, 1], [1, 0]])
    short = torch.tensor([0, 0, 1])
    for tokens in (0, 1):
        with pytest.raises(ValueError, match=r"batch must have shape \(5,\)"):
            GraphClassifier(4, 8, 2, num_layers=1, heads=2, num_global_tokens=tokens)(x, ei, short)
    with pytest.raises(ValueError, match=r"batch must have shape \(5,\)"):
        NodeClassifier(4, 8, 2, num_layers=1, heads=2)(x, ei, batch=short)
    with pytest.raises(ValueError, match="num_graphs=2 but batch holds graph id 2"):
        GraphClassifier(4, 8, 2, num_layers=1, heads=2)(x, ei, torch.tensor([0, 0, 2, 2, 2]), num_graphs=2)


@pytest.mark.parametrize("pe_kind", ["laplacian", "linear"])
def test_nan_in_pe_is_reported_as_pe(pe_kind):
    x, ei, b = torch.randn(5, 4), torch.tensor([[0, 1], [1, 0]]), torch.tensor([0, 0, 1, 1, 1])
    pe = torch.randn(5, 3)
    pe[1, 2] = float("nan")
    gc = GraphClassifier(4, 8, 2, num_layers=1, heads=2, pe_dim=3, pe_kind=pe_kind)
    with pytest.raises(ValueError, match="pe contains NaN"):
        gc(x, ei, b, pe=pe)
    with pytest.raises(ValueError, match="pe contains NaN"):
        NodeClassifier(4, 8, 2, num_layers=1, heads=2, pe_dim=3, pe_kind=pe_kind)(x, ei, pe=pe)
    if pe_kind == "laplacian":  # NaN in a padded (masked) column is allowed
        mask = torch.ones(5, 3, dtype=torch.bool)
        mask[:, 2] = False
        assert torch.isfinite(gc(x, ei, b, pe=pe, pe_mask=mask)).all()
        eig = torch.zeros(5, 3)
        eig[0, 0] = float("inf")
        with pytest.raises(ValueError, match="pe_eigvals contains inf"):
            gc(x, ei, b, pe=pe.nan_to_num(), pe_eigvals=eig)


def test_categorical_code_errors_name_the_input():
    ei = torch.tensor([[0, 1], [1, 0]])
    m = GraphClassifier(4, 8, 2, num_layers=1, heads=2, edge_dim=2, edge_vocab_sizes=[3, 4])
    with pytest.raises(ValueError, match="categorical edge feature: edge_attr column 1 has values outside"):
        m(torch.randn(2, 4), ei, edge_attr=torch.tensor([[0, 1], [1, 9]]))
    n = GraphClassifier(2, 8, 2, num_layers=1, heads=2, node_vocab_sizes=[3, 4])
    with pytest.raises(ValueError, match="categorical node feature: x column 1 has values outside"):
        n(torch.tensor([[0, 7], [0, 0]]), ei)


@pytest.mark.parametrize("global_attn", [None, *GLOBAL_ATTNS])
@pytest.mark.parametrize("tokens,readout", [(0, "mean"), (2, "mean"), (2, "token"), (1, "max")])
def test_trailing_empty_graphs_give_finite_outputs(global_attn, tokens, readout):
    torch.manual_seed(0)
    x, ei, b = torch.randn(5, 4), torch.tensor([[0, 1, 3], [1, 0, 4]]), torch.tensor([0, 0, 1, 1, 1])
    m = GraphClassifier(4, 8, 3, num_layers=2, heads=2, num_global_tokens=tokens, readout=readout,
                        global_attn=global_attn).eval()
    out = m(x, ei, b, num_graphs=4)
    assert out.shape == (4, 3) and torch.isfinite(out).all()
    assert torch.allclose(out[:2], m(x, ei, b, num_graphs=2), atol=1e-5)  # empties change nothing
    empty = m(x[:0], ei[:, :0], b[:0], num_graphs=2)
    assert empty.shape == (2, 3) and torch.isfinite(empty).all()
    nc = NodeClassifier(4, 8, 3, num_layers=1, heads=2, num_global_tokens=max(tokens, 1),
                        global_attn=global_attn).eval()
    assert torch.isfinite(nc(x, ei, batch=b)).all() and nc(x[:0], ei[:, :0], batch=b[:0]).shape == (0, 3)


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


def test_model_errors_describe_the_users_tensors_not_the_encoded_ones():
    model = GraphClassifier(5, 16, 2, edge_dim=2)
    x, ei = torch.randn(3, 5), torch.tensor([[0, 1, 2, 0], [1, 2, 0, 2]])
    with pytest.raises(ValueError, match=r"edge_attr must have shape \(4, 2\) .* got \(5, 2\)"):
        model(x, ei, edge_attr=torch.randn(5, 2))
    x[1, 1] = float("nan")
    with pytest.raises(ValueError, match=r"^x contains NaN or inf values \(in 1 of 3 rows\)"):
        model(x, ei, edge_attr=torch.randn(4, 2))


def test_missing_node_features_and_fused_options_fail_early():
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


def test_models_refuse_edge_attr_and_pe_they_were_not_built_for():
    x, ei = torch.randn(4, 8), torch.tensor([[0, 1, 2], [1, 2, 3]])
    for model in (NodeClassifier(8, 16, 2), GraphClassifier(8, 16, 2, num_layers=1)):
        with pytest.raises(ValueError, match="edge_dim"):
            model(x, ei, edge_attr=torch.randn(3, 3))
        with pytest.raises(ValueError, match="pe_dim"):
            model(x, ei, pe=torch.randn(4, 4))
        assert torch.isfinite(model(x, ei)).all()


@pytest.mark.slow
@pytest.mark.parametrize("tokens", [0, 1])
def test_categorical_graph_classifier_compiles_once_for_batches_of_any_size(tokens):
    """Molecule-like batches (categorical atom/bond codes, a global token) vary in N and E: one
    fullgraph trace with dynamic shapes serves all batches of as many graphs (``num_graphs`` is a
    Python int the trace specializes on: an epoch's shorter last batch compiles once more); the
    vocabulary check runs eagerly only."""
    from torch._dynamo.testing import CompileCounter

    torch.manual_seed(0)
    model = GraphClassifier(3, 16, num_tasks=2, num_layers=2, heads=2, num_global_tokens=tokens, edge_dim=2,
                            node_vocab_sizes=[4, 4, 4], edge_vocab_sizes=[3, 3]).eval()
    counter = CompileCounter()
    fast = torch.compile(model, backend=counter, fullgraph=True, dynamic=True)
    for sizes in ([5, 7, 1], [9, 2, 6], [1, 4, 12], [4, 4]):
        ei, batch = random_graph_batch(sizes, avg_degree=2)
        x, ea = torch.randint(0, 4, (sum(sizes), 3)), torch.randint(0, 3, (ei.size(1), 2))
        expected = model(x, ei, batch, ea, num_graphs=len(sizes))
        torch.testing.assert_close(fast(x, ei, batch, ea, num_graphs=len(sizes)), expected)
        assert counter.frame_count == (1 if len(sizes) == 3 else 2)
    with pytest.raises(ValueError, match="outside"):
        model(x + 4, ei, batch, ea, num_graphs=2)

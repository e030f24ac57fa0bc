"""Robustness of the models and global-attention variants: graph caches, empty batches,
input validation with clear messages (QA pass on the core models)."""
import pytest
import torch
from torch_geometric.data import Data

from graphattn import AddLaplacianPE, GlobalTokens, GraphClassifier, NodeClassifier
from graphattn.ops.padding import GraphLayout, check_batch
from graphattn.patterns import images_to_batch
from graphattn.nn.variants import GLOBAL_ATTNS, make_global_attention

EMPTY_X, EMPTY_EI, EMPTY_B = torch.zeros(0, 8), torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
VARIANT_OPTIONS = [("linear", {}), ("linear", {"feature_map": "favor"}), ("reduced", {}),
                   ("reduced", {"mode": "project", "max_nodes": 8}), ("clustered", {}),
                   ("clustered", {"method": "lsh", "shared_qk": False}), ("synthesizer", {}),
                   ("synthesizer", {"rank": 2})]


def ring(n=6):
    r = torch.arange(n)
    return torch.stack([r, (r + 1) % n])


# 1. NodeClassifier's cached GCN graph follows in-place edits of edge_index

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


# 2. Global-attention variants on empty batches

@pytest.mark.parametrize("kind,options", VARIANT_OPTIONS)
def test_global_variants_accept_empty_input(kind, options):
    m = make_global_attention(kind, 8, heads=2, **options)
    for batch, num_graphs in ((None, None), (EMPTY_B, None), (EMPTY_B, 3)):
        x = torch.zeros(0, 8, requires_grad=True)
        out = m(x, batch, num_graphs)
        assert out.shape == (0, 8)
        out.sum().backward()
        assert x.grad.shape == (0, 8)


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


# 3. GlobalTokens / model input validation

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


# 4. AddLaplacianPE input checks

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


# 5. images_to_batch with no images behaves like sequences_to_batch

def test_images_to_batch_empty():
    with pytest.raises(ValueError, match=r"no images \(B = 0\)"):
        images_to_batch(torch.zeros(0, 4, 4, 4))
    with pytest.raises(ValueError, match=r"no images \(B = 0\)"):
        images_to_batch(torch.zeros(0, 4, 4, 4), pe=None)


# 6. Trailing empty graphs (num_graphs > batch.max() + 1), with tokens and global branches

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


def test_check_batch_and_layout():
    b = torch.tensor([1, 0, 1])
    assert check_batch(b, 3) == 2 and check_batch(b, 3, 5) == 5 and check_batch(b[:0], 0) == 1
    assert check_batch(b, 3, torch.tensor(4)) == 4
    with pytest.raises(ValueError, match="num_graphs must be an int"):
        check_batch(b, 3, -1)
    with pytest.raises(TypeError, match="integer tensor"):
        check_batch(b.float(), 3)
    with pytest.raises(ValueError, match="negative graph ids"):
        GraphLayout(torch.tensor([0, -1]), 2)
    layout = GraphLayout(b, 3, 4)
    assert layout.sizes.tolist() == [1, 2, 0, 0] and layout.L == 2

"""PyG's EdgeIndex and sparse adj_t as edge_index, and the CSR cache forgetting freed graphs."""
import gc
import weakref

import pytest
import torch
from torch_geometric import EdgeIndex
from torch_geometric.nn import TransformerConv
from torch_geometric.utils import to_edge_index, to_torch_coo_tensor, to_torch_csc_tensor, to_torch_csr_tensor

import graphattn
from graphattn import GraphClassifier, GraphSelfAttention, NodeClassifier, edge_attention
from graphattn.ops import csr as C
from graphattn.ops.csr import clear_csr_cache
from graphattn.utils.validation import check_edge_index


def _graph():
    torch.manual_seed(0)
    x = torch.randn(6, 8)
    ei = torch.tensor([[0, 1, 2, 3, 4, 5, 0], [1, 2, 3, 4, 5, 0, 2]])
    return x, ei, EdgeIndex(ei, sparse_size=(6, 6))


def test_layer_and_models_accept_pyg_edge_index():
    x, ei, eidx = _graph()
    layer = GraphSelfAttention(8, 4, heads=2).eval()
    assert torch.equal(layer(x, ei), layer(x, eidx))
    full = torch.combinations(torch.arange(6), 2).t()
    full = torch.cat([full, full.flip(0)], 1)  # complete graph: the dense fast path
    assert torch.allclose(layer(x, full), layer(x, EdgeIndex(full, sparse_size=(6, 6))))
    out, (ei_back, alpha) = layer(x, eidx, return_attention_weights=True)
    assert alpha.shape == (7, 2) and torch.equal(ei_back.as_subclass(torch.Tensor), ei)
    batch = torch.zeros(6, dtype=torch.long)
    gc_model = GraphClassifier(8, 16, 2, num_layers=2, heads=2).eval()
    assert torch.allclose(gc_model(x, ei, batch), gc_model(x, eidx, batch))
    nc_model = NodeClassifier(8, 16, 3, num_layers=2, heads=2, self_loops=True, propagation=3).eval()
    assert torch.allclose(nc_model(x, ei), nc_model(x, eidx))


def test_csr_cache_drops_graphs_that_were_freed():
    C.clear_csr_cache()
    keep = torch.randint(0, 50, (2, 200))
    C.to_csr(keep, 50)
    for _ in range(5):
        tmp = torch.randint(0, 50, (2, 200))
        C.to_csr(tmp, 50)
        del tmp
    gc.collect()
    assert len(C._CACHE) == 1
    assert C.to_csr(keep, 50) is C.to_csr(keep, 50)


def test_models_run_under_inference_mode():
    x, ei, _ = _graph()
    batch = torch.zeros(6, dtype=torch.long)
    gc_model = GraphClassifier(8, 16, 2, num_layers=2, heads=2).eval()
    nc_model = NodeClassifier(8, 16, 3, num_layers=2, heads=2, self_loops=True, propagation=3).eval()
    with torch.no_grad():
        want = (gc_model(x, ei, batch), nc_model(x, ei))
    with torch.inference_mode():
        x2, ei2, b2 = x.clone(), ei.clone(), batch.clone()
        got = (gc_model(x2, ei2, b2), nc_model(x2, ei2))
    for a, b in zip(got, want):
        assert torch.allclose(a, b)


def _sparse(kind, edge_index, size):
    make = {"csr": to_torch_csr_tensor, "coo": to_torch_coo_tensor, "csc": to_torch_csc_tensor}[kind]
    return make(edge_index, size=size)


@pytest.mark.filterwarnings("ignore:Sparse")
@pytest.mark.parametrize("kind", ["csr", "coo", "csc"])
def test_sparse_adj_t_as_in_pyg(kind):
    """PyG's transposed adjacency (adj_t[i, j] for an edge j -> i, e.g. T.ToSparseTensor(layout=
    torch.sparse_csr)): the same outputs as the edge list, weights in adj_t's storage order."""
    torch.manual_seed(0)
    x, ei = torch.randn(6, 4), torch.randint(0, 6, (2, 20))
    ei = torch.unique(ei, dim=1)  # a sparse tensor merges duplicates
    adj_t = _sparse(kind, ei.flip(0), (6, 6))
    layer = GraphSelfAttention(4, 3, heads=2).eval()
    out, (adj_back, alpha) = layer(x, adj_t, return_attention_weights=True)
    want, (_, want_alpha) = layer(x, ei, return_attention_weights=True)
    assert adj_back is adj_t and alpha.shape == (ei.size(1), 2)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
    order = to_edge_index(adj_t)[0].flip(0)  # adj_t's storage order as (source, target)
    pos = {tuple(e): i for i, e in enumerate(ei.t().tolist())}
    torch.testing.assert_close(alpha, want_alpha[[pos[tuple(e)] for e in order.t().tolist()]])
    if kind != "csc":  # PyG's TransformerConv takes COO and CSR
        ref = TransformerConv(4, 3, heads=2)
        with torch.no_grad():
            W, b = layer.lin_qkv.weight.chunk(3), layer.lin_qkv.bias.chunk(3)
            for lin, w, bb in zip((ref.lin_query, ref.lin_key, ref.lin_value), W, b):
                lin.weight.copy_(w), lin.bias.copy_(bb)
            ref.lin_skip.load_state_dict(layer.lin_skip.state_dict())
        torch.testing.assert_close(ref(x, adj_t), out, rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("ignore:Sparse")
def test_sparse_adj_t_bipartite_and_shape_errors():
    xs, xd = torch.randn(5, 4), torch.randn(3, 4)
    ei = torch.tensor([[0, 4, 2, 1], [0, 0, 1, 2]])
    layer = GraphSelfAttention(4, 2).eval()
    adj_t = _sparse("csr", ei.flip(0), (3, 5))  # (targets, sources)
    torch.testing.assert_close(layer((xs, xd), adj_t), layer((xs, xd), ei))
    with pytest.raises(ValueError, match=r"sparse adj_t of shape \(5, 3\), expected \(3, 5\)"):
        layer((xs, xd), _sparse("csr", ei, (5, 3)))
    uncoalesced = torch.sparse_coo_tensor(ei.flip(0)[:, [1, 0, 3, 2]], torch.ones(4), (3, 5))
    out, (adj_back, alpha) = layer((xs, xd), uncoalesced, return_attention_weights=True)
    assert adj_back.is_coalesced() and alpha.shape == (4, 1)  # alpha in the coalesced order
    torch.testing.assert_close(out, layer((xs, xd), ei))


@pytest.mark.filterwarnings("ignore:Sparse")
def test_sparse_adj_t_cache_forgets_freed_tensors_and_sees_in_place_edits():
    x = torch.randn(6, 4)
    ei = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    layer = GraphSelfAttention(4, 2).eval()
    for kind in ("csr", "coo"):
        adj = _sparse(kind, ei.flip(0), (6, 6))
        ref = weakref.ref(adj)
        layer(x, adj)
        del adj
        gc.collect()
        assert ref() is None and not C._ADJ_CACHE  # the cache held it only weakly
    for kind in ("csr", "coo"):
        adj = _sparse(kind, ei.flip(0), (6, 6))
        before = layer(x, adj)
        cols = adj.col_indices() if kind == "csr" else adj._indices()[1]
        cols[0] = 3  # target 1 now hears node 3 instead of node 0
        moved = ei.clone()
        moved[0, 0] = 3
        after = layer(x, adj)
        assert not torch.allclose(before, after)
        torch.testing.assert_close(after, layer(x, moved))


@pytest.mark.filterwarnings("ignore:Sparse")
def test_uncoalesced_adj_t_with_per_edge_inputs_is_refused_as_in_pyg():
    # coalescing reorders the edges: edge_attr given in storage order would meet other edges
    torch.manual_seed(0)
    x, ea = torch.randn(5, 4), torch.randn(6, 2)
    ei = torch.tensor([[0, 3, 1, 2, 4, 0], [1, 0, 2, 3, 0, 2]])
    layer = GraphSelfAttention(4, 3, heads=2, edge_dim=2).eval()
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.ones(6), (5, 5))
    with pytest.raises(ValueError, match="uncoalesced sparse COO adj_t.*adj_t.coalesce"):
        layer(x, adj_t, ea)
    with pytest.raises(ValueError, match="uncoalesced"):
        GraphSelfAttention(4, 3, heads=2).eval()(x, adj_t, attn_bias=torch.zeros(6, 2))
    coalesced = adj_t.coalesce()  # per-edge inputs in its order: the (2, E) result
    order = [ei.t().tolist().index([s, d]) for d, s in coalesced.indices().t().tolist()]
    torch.testing.assert_close(layer(x, coalesced, ea[order]), layer(x, ei, ea))


@pytest.mark.filterwarnings("ignore:Sparse")
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_models_take_the_sparse_adj_t_the_layer_takes(layout):
    x, ei, _ = _graph()
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.size(1)), (6, 6)).coalesce()
    if layout == "csr":
        adj_t = adj_t.to_sparse_csr()
    for model in (NodeClassifier(8, 16, 3, num_layers=1, heads=2).eval(),
                  NodeClassifier(8, 16, 3, num_layers=1, heads=2, self_loops=True, propagation=2,
                                 gcn_weight=0.5).eval()):
        torch.testing.assert_close(model(x, adj_t), model(x, ei))
    gc_model = GraphClassifier(8, 16, 2, num_layers=1, heads=2, num_global_tokens=1).eval()
    torch.testing.assert_close(gc_model(x, adj_t), gc_model(x, ei))
    with pytest.raises(ValueError, match=r"sparse adj_t of shape \(6, 6\), expected \(7, 7\)"):
        NodeClassifier(8, 16, 3).eval()(torch.randn(7, 8), adj_t)


def test_sparse_edge_index_hint_does_not_reverse_pyg_adj_t():
    adj_t = torch.sparse_coo_tensor(torch.tensor([[1], [0]]), torch.ones(1), (2, 2))  # edge 0 -> 1
    with pytest.raises(TypeError, match=r"to_edge_index\(adj_t\)\[0\].flip\(0\)") as info:
        check_edge_index(adj_t, 2)
    assert "coalesce().indices()" not in str(info.value)
    assert to_edge_index(adj_t)[0].flip(0).tolist() == [[0], [1]]  # what the hint gives: the right direction


def test_node_classifier_with_self_loops_validates_edge_index_first():
    x = torch.randn(4, 8)
    model = NodeClassifier(8, 16, 3, self_loops=True).eval()
    with pytest.raises(TypeError, match="integer dtype"):
        model(x, torch.tensor([[True, False], [False, True]]))
    with pytest.raises(ValueError, match="refers to node 5 but num_nodes=4"):
        model(x, torch.tensor([[0, 5], [1, 2]]))
    with pytest.raises(ValueError, match=r"shape \(2, E\)"):
        model(x, torch.tensor([[0, 1], [1, 2], [2, 3]]))
    with pytest.raises(TypeError, match="torch.Tensor"):
        model(x, [[0, 1], [1, 2]])


@pytest.mark.parametrize("make", [lambda x, ei: torch.jit.trace(GraphSelfAttention(4, 3), (x, ei)),
                                  lambda x, ei: torch.jit.trace(NodeClassifier(4, 8, 3).eval(), (x, ei))])
def test_jit_trace_is_a_clear_error(make):
    x, ei = torch.randn(5, 4), torch.tensor([[0, 1, 2], [1, 2, 3]])
    with pytest.raises(NotImplementedError, match="torch.jit.trace.*torch.export.export"):
        make(x, ei)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("make", [lambda: GraphSelfAttention(4, 3, heads=2), lambda: NodeClassifier(4, 8, 3)])
def test_export_records_a_program_for_any_graph_size(make, strict):
    """torch.export (non-strict, its default, and strict) of a layer and a model with the node and edge
    counts dynamic: the program gives the module's outputs on graphs of other sizes (the CSR view is
    built inside the program, nothing is cached)."""
    from torch.export import Dim

    torch.manual_seed(0)
    module = make().eval()
    x, ei = torch.randn(6, 4), torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    program = torch.export.export(module, (x, ei), strict=strict,
                                  dynamic_shapes=({0: Dim("nodes", min=2)}, {1: Dim("edges", min=2)})).module()
    for n, e in ((9, 20), (3, 2)):
        x2, ei2 = torch.randn(n, 4), torch.randint(0, n, (2, e))
        assert torch.allclose(program(x2, ei2), module(x2, ei2), atol=1e-5)


def test_script_is_the_same_clear_error_for_every_public_module_and_a_users_model_holding_one():
    modules = {n: getattr(graphattn, n) for n in graphattn.__all__}
    classes = [c for c in modules.values() if isinstance(c, type) and issubclass(c, torch.nn.Module)]
    assert len(classes) >= 15
    for cls in classes:
        assert "__prepare_scriptable__" in vars(cls), f"{cls.__name__}: torch.jit.script would fail unclearly"

    class Mine(torch.nn.Module):  # a user's model with one of our layers inside
        def __init__(self):
            super().__init__()
            self.lin, self.attn = torch.nn.Linear(4, 4), GraphSelfAttention(4, 4)

        def forward(self, x, edge_index):
            return self.attn(self.lin(x), edge_index)

    for module in (GraphSelfAttention(4, 3), NodeClassifier(4, 8, 3), Mine()):
        with pytest.raises(NotImplementedError, match="nor torch.jit.script.*torch.compile"):
            torch.jit.script(module)


def test_clear_csr_cache_after_writes_that_bypass_the_version_counter():
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


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's notes on sparse tensors
def test_sparse_adjacency_is_adj_t_for_the_layer_and_a_clear_error_elsewhere():
    adj = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.ones(2), (2, 2))
    x = torch.randn(2, 4)
    layer = GraphSelfAttention(4, 4)
    for a in (adj, adj.to_sparse_csr()):  # the layer reads PyG's adj_t (edge j -> i at [i, j])
        torch.testing.assert_close(layer(x, a), layer(x, torch.tensor([[1, 0], [0, 1]])))
        model = NodeClassifier(4, 8, 2).eval()  # the models read it too; the functional API does not
        torch.testing.assert_close(model(x, a), model(x, torch.tensor([[1, 0], [0, 1]])))
        with pytest.raises(TypeError, match="sparse"):
            edge_attention(torch.randn(2, 1, 4), torch.randn(2, 1, 4), torch.randn(2, 1, 4), a)

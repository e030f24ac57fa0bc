"""graphattn.nn.GATConv / GATv2Conv / TransformerConv against PyG's classes of the same name.

Every option combination, with weights copied from PyG's layer (its state dict loads as is): the
outputs, the attention weights and the gradients of both (inputs, edge features, every parameter)
agree in float64 to 1e-6, on random graphs with isolated nodes, self-loops already present and
duplicate edges; bipartite inputs; edge features; torch.sparse ``adj_t`` (CSR and COO) and PyG's
``EdgeIndex``; in eval and in training with attention dropout (seeded: the same masks as PyG's).
The interface is PyG's: constructor and ``forward`` signatures, defaults, return conventions,
parameter names, seeded initial weights and ``repr``. PyG's own test files run in tests/nn/pyg/.
"""
import inspect
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric import EdgeIndex
from torch_geometric.explain import AttentionExplainer, Explainer, GNNExplainer
from torch_geometric.utils import to_edge_index, to_torch_coo_tensor, to_torch_csc_tensor

import graphattn.nn as ga_nn
import graphattn.nn.attention.weights as attention_weights
from graphattn.nn import GATConv, GATv2Conv, GraphSelfAttention, TransformerConv

ROOT = Path(__file__).resolve().parents[2]
CLASSES = ("GATConv", "GATv2Conv", "TransformerConv")
ATOL = 1e-6


def _options(name):
    """Every combination of the class's boolean options, plus its other settings."""
    if name == "TransformerConv":
        flags = dict(concat=[True, False], beta=[False, True], root_weight=[True, False], bias=[True, False])
        extra = [dict(edge_dim=3)]
    else:
        flags = dict(concat=[True, False], add_self_loops=[True, False], residual=[False, True],
                     bias=[True, False])
        if name == "GATv2Conv":
            flags["share_weights"] = [False, True]
        extra = [dict(edge_dim=3), dict(edge_dim=3, fill_value=0.5), dict(edge_dim=3, fill_value="max"),
                 dict(edge_dim=3, fill_value=torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)),
                 dict(negative_slope=0.05, heads=1)]
    combos = [dict(zip(flags, values)) for values in itertools.product(*flags.values())]
    return combos + [dict(c, **e) for c in combos[:2] for e in extra]


CASES = [(name, opts) for name in CLASSES for opts in _options(name)]


def _pair(name, in_channels, out_channels=4, heads=3, **kwargs):
    """(PyG's layer, ours) in float64 with ours loaded from PyG's state dict."""
    kwargs.setdefault("heads", heads)
    theirs = getattr(pyg_nn, name)(in_channels, out_channels, **kwargs).double()
    ours = getattr(ga_nn, name)(in_channels, out_channels, **kwargs).double()
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def _graph(num_src, num_dst, seed, isolated=2):
    """Random edges into all but the last ``isolated`` targets, three self-loops, three duplicates."""
    g = torch.Generator().manual_seed(seed)
    E = 4 * num_dst
    ei = torch.stack([torch.randint(0, num_src, (E,), generator=g),
                      torch.randint(0, num_dst - isolated, (E,), generator=g)])
    ei[:, :3] = torch.tensor([[0, 1, 2], [0, 1, 2]])
    return torch.cat([ei, ei[:, 3:6]], dim=1)


def _features(n, f, seed):
    return torch.randn(n, f, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _run(layer, x, edge_index, edge_attr, seed, **kw):
    """Forward (seeded, for dropout) with the weights, then the gradients of a loss on both."""
    xs = tuple(t.clone().requires_grad_() if t is not None else None for t in x)
    ea = edge_attr.clone().requires_grad_() if edge_attr is not None else None
    torch.manual_seed(seed)
    out, (ei, alpha) = layer(xs if len(xs) == 2 else xs[0], edge_index, ea, return_attention_weights=True, **kw)
    g = torch.Generator().manual_seed(seed)
    loss = ((out * torch.randn(out.shape, dtype=out.dtype, generator=g)).sum()
            + (alpha * torch.randn(alpha.shape, dtype=alpha.dtype, generator=g)).sum())
    loss.backward()
    grads = [t.grad for t in xs if t is not None] + ([ea.grad] if ea is not None else [])
    grads += [p.grad if p.grad is not None else torch.zeros_like(p) for p in layer.parameters()]
    return out, ei, alpha, grads


def _assert_same(theirs, ours, x, edge_index, edge_attr=None, seed=0, **kw):
    o1, e1, a1, g1 = _run(theirs, x, edge_index, edge_attr, seed, **kw)
    o2, e2, a2, g2 = _run(ours, x, edge_index, edge_attr, seed, **kw)
    torch.testing.assert_close(o2, o1, atol=ATOL, rtol=0)
    if e1.layout == torch.strided:
        assert torch.equal(torch.as_tensor(e2), torch.as_tensor(e1)) and type(e2) is type(e1)
    else:  # the adjacency (with alpha as values for GAT/GATv2)
        assert e2.layout == e1.layout and e2.shape == e1.shape
        torch.testing.assert_close(e2.to_dense(), e1.to_dense(), atol=ATOL, rtol=0)
    torch.testing.assert_close(a2, a1, atol=ATOL, rtol=0)
    assert a2.requires_grad and a1.requires_grad
    assert len(g1) == len(g2)
    for t1, t2 in zip(g1, g2):
        torch.testing.assert_close(t2, t1, atol=ATOL, rtol=0)
    return o2, a2


def _edge_attr(opts, E, seed):
    return _features(E, 3, seed) if opts.get("edge_dim") else None


# --------------------------------------------------------------------------------- interface
@pytest.mark.parametrize("name", CLASSES)
def test_signatures_and_defaults_are_pygs(name):
    for method in ("__init__", "forward"):
        theirs = inspect.signature(getattr(getattr(pyg_nn, name), method)).parameters
        ours = inspect.signature(getattr(getattr(ga_nn, name), method)).parameters
        assert list(ours) == list(theirs), method
        for p in theirs:
            assert ours[p].kind == theirs[p].kind, (method, p)
            assert ours[p].default == theirs[p].default or (ours[p].default is theirs[p].default), (method, p)


@pytest.mark.parametrize("name", CLASSES)
@pytest.mark.parametrize("kwargs", [dict(), dict(edge_dim=2, concat=False), dict(heads=2, bias=False)])
def test_parameters_repr_and_seeded_init_are_pygs(name, kwargs):
    for in_channels in (8, (8, 16), -1):
        torch.manual_seed(7)
        theirs = getattr(pyg_nn, name)(in_channels, 4, **kwargs)
        torch.manual_seed(7)
        ours = getattr(ga_nn, name)(in_channels, 4, **kwargs)
        assert repr(ours) == repr(theirs)
        after_ours = torch.rand(1)
        torch.manual_seed(7)
        getattr(pyg_nn, name)(in_channels, 4, **kwargs)
        assert torch.equal(after_ours, torch.rand(1))  # the same random draws were consumed
        assert list(ours.state_dict()) == list(theirs.state_dict())
        if in_channels == -1:
            continue  # lazy: the weights (and PyG's biases) are drawn on the first call
        for k, v in theirs.state_dict().items():
            assert torch.equal(ours.state_dict()[k], v), k  # same seed, same initial weights


# --------------------------------------------------------------------------------- equality
@pytest.mark.parametrize("name, opts", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_equal_to_pyg_with_copied_weights(name, opts):
    theirs, ours = _pair(name, 6, **opts)
    x, ei = _features(12, 6, 1), _graph(12, 12, seed=2)
    ea = _edge_attr(opts, ei.size(1), 3)
    theirs.eval(), ours.eval()
    out, alpha = _assert_same(theirs, ours, (x,), ei, ea)
    assert torch.isfinite(out).all() and (alpha >= 0).all() and (alpha <= 1).all()
    with torch.no_grad():  # inference: no autograd, the kernels' own paths
        o1, (_, a1) = theirs(x, ei, ea, return_attention_weights=True)
        o2, (_, a2) = ours(x, ei, ea, return_attention_weights=True)
    torch.testing.assert_close(o2, o1, atol=ATOL, rtol=0)
    torch.testing.assert_close(a2, a1, atol=ATOL, rtol=0)
    assert not a2.requires_grad


@pytest.mark.parametrize("name", CLASSES)
def test_equal_to_pyg_in_inference_on_the_kernel_paths(name, monkeypatch):
    monkeypatch.setattr(attention_weights, "EXPLICIT_ELEMENTS", 0)
    theirs, ours = _pair(name, 6, edge_dim=3)
    x, ei = _features(12, 6, 1), _graph(12, 12, seed=2)
    ea = _features(ei.size(1), 3, 3)
    theirs.eval(), ours.eval()
    with torch.no_grad():
        o1, (_, a1) = theirs(x, ei, ea, return_attention_weights=True)
        o2, (_, a2) = ours(x, ei, ea, return_attention_weights=True)
    torch.testing.assert_close(o2, o1, atol=ATOL, rtol=0)
    torch.testing.assert_close(a2, a1, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name, opts", CASES[::2], ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES[::2])])
def test_equal_to_pyg_on_the_kernel_paths_of_large_graphs(name, opts, monkeypatch):
    """Small graphs take per-edge torch ops for the additive score and for dropped weights;
    larger ones (here: every graph) the chunked kernel and the weights' own backward."""
    monkeypatch.setattr(attention_weights, "EXPLICIT_ELEMENTS", 0)
    theirs, ours = _pair(name, 6, **opts)
    x, ei = _features(12, 6, 1), _graph(12, 12, seed=2)
    theirs.eval(), ours.eval()
    _assert_same(theirs, ours, (x,), ei, _edge_attr(opts, ei.size(1), 3))


@pytest.mark.parametrize("name, opts", CASES[::3], ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES[::3])])
def test_equal_to_pyg_bipartite(name, opts):
    f_dst = 5 if opts.get("share_weights") else 7  # one projection for both sides: one width
    theirs, ours = _pair(name, (5, f_dst), **opts)
    x, ei = (_features(9, 5, 1), _features(6, f_dst, 2)), _graph(9, 6, seed=4)
    ea = _edge_attr(opts, ei.size(1), 5)
    theirs.eval(), ours.eval()
    _assert_same(theirs, ours, x, ei, ea)


@pytest.mark.parametrize("name, opts", CASES[1::3], ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES[1::3])])
def test_equal_to_pyg_in_training_with_attention_dropout(name, opts):
    """Seeded: PyG's masks (F.dropout on alpha in edge order) are drawn the same way."""
    theirs, ours = _pair(name, 6, dropout=0.5, **opts)
    x, ei = _features(12, 6, 1), _graph(12, 12, seed=6)
    ea = _edge_attr(opts, ei.size(1), 7)
    theirs.train(), ours.train()
    _assert_same(theirs, ours, (x,), ei, ea, seed=11)


@pytest.mark.parametrize("name", CLASSES)
def test_dropout_on_large_graphs_aggregates_through_the_kernel(name, monkeypatch):
    """Above EXPLICIT_ELEMENTS the dropped weights reach the kernel as a log-weight score bias."""
    monkeypatch.setattr(attention_weights, "EXPLICIT_ELEMENTS", 0)
    opts = dict(edge_dim=3) if name != "GATv2Conv" else dict(edge_dim=3, residual=True)
    theirs, ours = _pair(name, 6, dropout=0.5, **opts)
    x, ei = _features(12, 6, 1), _graph(12, 12, seed=6)
    theirs.train(), ours.train()
    _assert_same(theirs, ours, (x,), ei, _features(ei.size(1), 3, 7), seed=3)
    theirs, ours = _pair(name, (5, 7), dropout=0.5)  # bipartite: sources stacked after the targets
    _assert_same(theirs, ours, (_features(9, 5, 1), _features(6, 7, 2)), _graph(9, 6, seed=4), seed=4)


@pytest.mark.parametrize("name", CLASSES)
@pytest.mark.parametrize("layout", ["csr", "coo"])
@pytest.mark.parametrize("edge_dim", [None, 3])
def test_equal_to_pyg_with_sparse_adj_t(name, layout, edge_dim):
    x, ei = _features(10, 6, 1), _graph(10, 10, seed=8)
    adj = to_torch_csc_tensor(ei, size=(10, 10)).t()  # (targets, sources), CSR, as PyG's tests build it
    if layout == "coo":
        adj = to_torch_coo_tensor(ei.flip(0), size=(10, 10))
    E = to_edge_index(adj)[0].size(1)
    ea = _features(E, 3, 9) if edge_dim else None  # in the adjacency's storage order
    options = [{}] if name == "TransformerConv" else [dict(add_self_loops=False)]
    if name != "TransformerConv" and not edge_dim:  # with edge features PyG refuses the loops too
        options.append(dict(add_self_loops=True))
    for kw in options:
        theirs, ours = _pair(name, 6, edge_dim=edge_dim, **kw)
        theirs.eval(), ours.eval()
        _assert_same(theirs, ours, (x,), adj, ea)


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv"])
def test_sparse_adj_t_with_edge_attr_and_self_loops_is_refused(name):
    adj = to_torch_csc_tensor(_graph(6, 6, 0), size=(6, 6)).t()
    conv = getattr(ga_nn, name)(4, 2, edge_dim=3)
    with pytest.raises(NotImplementedError, match="add_self_loops"):
        conv(torch.randn(6, 4), adj, torch.randn(adj._nnz(), 3))


@pytest.mark.parametrize("name", CLASSES)
def test_equal_to_pyg_with_edge_index_tensor_subclass(name):
    x, ei = _features(10, 6, 1), _graph(10, 10, seed=10)
    theirs, ours = _pair(name, 6)
    theirs.eval(), ours.eval()
    _assert_same(theirs, ours, (x,), EdgeIndex(ei, sparse_size=(10, 10)), None)


def test_gat_without_target_features_and_size():
    theirs, ours = _pair("GATConv", (5, 7), residual=True)
    x_src, ei = _features(9, 5, 1), _graph(9, 6, seed=12)
    theirs.eval(), ours.eval()
    for size in [(9, 6), (9, 8)]:
        _assert_same(theirs, ours, (x_src, None), ei, size=size)
    adj = to_torch_csc_tensor(ei, size=(9, 6)).t()
    _assert_same(theirs, ours, (x_src, None), adj)
    with pytest.raises(ValueError, match="size"):
        ours((x_src, _features(6, 7, 2)), ei, size=(9, 5))


@pytest.mark.parametrize("name", CLASSES)
def test_equal_to_pyg_lazy_widths_and_empty_graph(name):
    torch.manual_seed(3)
    theirs = getattr(pyg_nn, name)(-1, 4, heads=2).double()
    ours = getattr(ga_nn, name)(-1, 4, heads=2).double()
    x, ei = _features(8, 5, 1), _graph(8, 8, seed=13)
    theirs(x, ei)  # build the lazy weights
    ours(x, ei)
    ours.load_state_dict(theirs.state_dict())
    theirs.eval(), ours.eval()
    _assert_same(theirs, ours, (x,), ei)
    empty = ours(x[:0], torch.empty(2, 0, dtype=torch.long))
    assert empty.shape == theirs(x[:0], torch.empty(2, 0, dtype=torch.long)).shape == (0, 8)


@pytest.mark.parametrize("name", ["GATConv", "TransformerConv"])
def test_pyg_explainers_give_pygs_explanations(name):
    """GNNExplainer (seeded) and AttentionExplainer on a 2-layer model: the same edge masks."""
    def model(mod):
        torch.manual_seed(0)
        return torch.nn.ModuleList([getattr(mod, name)(4, 3, heads=2), getattr(mod, name)(6, 2)])

    class Net(torch.nn.Module):
        def __init__(self, convs):
            super().__init__()
            self.convs = convs

        def forward(self, x, edge_index):
            return self.convs[1](self.convs[0](x, edge_index).relu(), edge_index)

    x, ei = torch.randn(8, 4), torch.randint(0, 8, (2, 20), generator=torch.Generator().manual_seed(1))
    config = dict(mode="multiclass_classification", task_level="node", return_type="raw")
    for algorithm, node_mask in ((GNNExplainer(epochs=20), "attributes"), (AttentionExplainer(), None)):
        masks = []
        for mod in (pyg_nn, ga_nn):
            explainer = Explainer(Net(model(mod)), algorithm, explanation_type="model", edge_mask_type="object",
                                  node_mask_type=node_mask, model_config=config)
            torch.manual_seed(2)
            masks.append(explainer(x, ei, index=0).edge_mask)
        torch.testing.assert_close(masks[1], masks[0], atol=1e-5, rtol=0)


# --------------------------------------------------------------------------------- conventions
def test_return_conventions_are_pygs():
    x, ei = torch.randn(5, 4), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    for cls in (GATConv, GATv2Conv):
        conv = cls(4, 2, heads=2)
        assert isinstance(conv(x, ei), torch.Tensor)
        assert isinstance(conv(x, ei, return_attention_weights=False), torch.Tensor)
        out, (loops, alpha) = conv(x, ei, return_attention_weights=True)
        assert loops.shape == (2, 9) and alpha.shape == (9, 2)  # the self-loops the layer added
    conv = TransformerConv(4, 2, heads=2)
    assert isinstance(conv(x, ei), torch.Tensor)
    out, (same, alpha) = conv(x, ei, return_attention_weights=False)  # a bool: PyG returns the tuple
    assert same is ei and alpha.shape == (4, 2)


def test_attention_weights_carry_a_gradient_and_can_be_regularised():
    x, ei = torch.randn(6, 4), torch.tensor([[0, 1, 2, 3, 4, 5, 1], [1, 2, 3, 4, 5, 0, 0]])
    for cls in (GATConv, GATv2Conv, TransformerConv):
        conv = cls(4, 3, heads=2)
        _, (_, alpha) = conv(x, ei, return_attention_weights=True)
        assert alpha.requires_grad
        (alpha ** 2).sum().backward()  # an attention regulariser
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in conv.parameters())
        with torch.no_grad():
            _, (_, alpha) = conv(x, ei, return_attention_weights=True)
        assert not alpha.requires_grad


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(aggr="mean"), NotImplementedError, "aggr"),
    (dict(flow="target_to_source"), NotImplementedError, "flow"),
    (dict(node_dim=1), TypeError, "node_dim"),
    (dict(unknown=1), TypeError, "unknown"),
    (dict(impl="nope"), ValueError, "impl"),
    (dict(fill_value="median"), ValueError, "fill_value"),
])
def test_options_that_would_compute_something_else_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        GATConv(4, 2, **kwargs)


def test_inputs_pyg_would_turn_into_nan_or_other_math_are_refused():
    x, ei = torch.randn(5, 4), torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="NaN"):
        GATConv(4, 2)(x.clone().fill_(float("nan")), ei)
    with pytest.raises(ValueError, match="edge_dim"):  # PyG's TransformerConv would add raw edge_attr to values
        TransformerConv(4, 2)(x, ei, torch.randn(2, 8))
    with pytest.raises(ValueError, match="x_dst"):
        GATv2Conv(4, 2)((x, None), ei)
    with pytest.raises(TypeError, match="SparseTensor|to_torch_sparse"):
        GATConv(4, 2)(x, type("SparseTensor", (), {})())


def test_impl_keyword_picks_the_backend():
    theirs, ours = _pair("GATConv", 6)
    chunked = GATConv(6, 4, heads=3, impl="chunked").double()
    chunked.load_state_dict(theirs.state_dict())
    x, ei = _features(12, 6, 1), _graph(12, 12, seed=2)
    torch.testing.assert_close(chunked(x, ei), theirs(x, ei), atol=ATOL, rtol=0)


# --------------------------------------------------------------------------------- GraphSelfAttention options
@pytest.mark.parametrize("kwargs, match", [
    (dict(share_weights=True), "share_weights"),
    (dict(beta=True, root_weight=False), "beta"),
    (dict(residual=True), "root terms"),
    (dict(score="gat", normalization="relu"), "normalization"),
    (dict(score="gat", impl="dense"), "dense"),
    (dict(score="nope"), "score"),
    (dict(add_self_loops=True, fill_value=object()), "fill_value"),
    (dict(in_channels=(4, 6), score="additive", share_weights=True), "share_weights"),
])
def test_graph_self_attention_options_are_checked(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        GraphSelfAttention(kwargs.pop("in_channels", 4), 2, **kwargs)


def test_graph_self_attention_defaults_are_unchanged():
    layer = GraphSelfAttention(4, 2, heads=2)
    assert not layer.add_self_loops and not layer.weights_grad and layer.lin_qkv is not None
    ei = torch.tensor([[0, 1, 1], [1, 2, 1]])
    out, (same, alpha) = layer(torch.randn(3, 4, requires_grad=True), ei, return_attention_weights=True)
    assert same is ei and alpha.shape == (3, 2) and not alpha.requires_grad


def test_graph_self_attention_options_are_the_convs():
    """The convs are configurations: GraphSelfAttention with the same options computes the same."""
    torch.manual_seed(0)
    conv = GATConv(6, 4, heads=2, residual=True, edge_dim=3).double().eval()
    layer = GraphSelfAttention(6, 4, heads=2, score="gat", root_weight=False, residual=True, edge_dim=3,
                               bias=False, out_bias=True, add_self_loops=True).double().eval()
    layer.load_state_dict(conv.state_dict())
    x, ei = _features(12, 6, 1), _graph(12, 12, 2)
    ea = _features(ei.size(1), 3, 3)
    torch.testing.assert_close(layer(x, ei, ea), conv(x, ei, ea))
    tc = TransformerConv(6, 4, heads=2, beta=True).double().eval()
    native = GraphSelfAttention(6, 4, heads=2, beta=True).double().eval()
    native.load_state_dict(tc.state_dict())  # fused lin_qkv loads PyG's per-role weights
    torch.testing.assert_close(native(x, ei), tc(x, ei))


# --------------------------------------------------------------------------------- scripts
def test_gat_swap_example_runs_one_epoch(tmp_path):
    data = Path(__import__("os").environ.get("GRAPHATTN_DATA", ROOT.parent / "shared" / "data"))
    if not (data / "cora" / "ind.cora.x").exists():
        pytest.skip(f"Cora not found under {data} (set GRAPHATTN_DATA)")
    out = tmp_path / "res.json"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "gat_swap.py"), "--conv", "both", "--seeds", "0",
                           "--epochs", "2", "--root", str(data), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())["results"]
    assert set(res) == {"pyg", "ours"} and "Epoch 002" in proc.stdout
    assert abs(res["pyg"]["mean_test_acc"] - res["ours"]["mean_test_acc"]) < 0.02  # same seed, same model


def test_benchmark_quick_runs(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pyg_convs.py"), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["rows"]
    assert {r["conv"] for r in rows} == set(CLASSES) and all(r["ratio"] > 0 for r in rows)

import pytest
import torch
from torch_geometric.nn import GATv2Conv, TransformerConv

from graphattn import (GraphSelfAttention, GraphTransformerBlock, dense_attention, normalized_edge_attention,
                       sequences_to_batch)
from graphattn.ops import extension
from graphattn.testing import dense_mask_and_bias, random_graph

FUSED = extension.fused_available()
IMPLS = ["chunked"] + (["fused"] if FUSED else [])
needs_fused = pytest.mark.skipif(not FUSED, reason="fused C++ kernel unavailable")
# 5 nodes: a cycle, a duplicate edge (0->2 twice), a self-loop (3->3), node 4 isolated.
EI = torch.tensor([[0, 1, 2, 3, 0, 0, 3], [1, 2, 0, 3, 2, 2, 1]])


def _graph(n=12, e=40, seed=0, isolated=2):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 16, generator=g), random_graph(n, e, isolated=isolated, generator=g)


def test_repr_and_attributes():
    layer = GraphSelfAttention(16, 8, heads=4, edge_dim=3, dropout=0.1)
    assert repr(layer) == "GraphSelfAttention(16, 8, heads=4)"
    assert (layer.in_channels, layer.out_channels, layer.heads, layer.edge_dim) == (16, 8, 4, 3)
    assert GraphSelfAttention(16, 8).lin_edge is None and GraphSelfAttention(16, 8).att is None


@pytest.mark.parametrize("score", ["dot", "additive"])
@pytest.mark.parametrize("concat", [True, False])
def test_output_shape_and_return_contract(score, concat):
    x, ei = _graph()
    layer = GraphSelfAttention(16, 8, heads=4, concat=concat, score=score)
    out = layer(x, ei)
    assert isinstance(out, torch.Tensor) and out.shape == (12, 32 if concat else 8)
    out2, (ei2, alpha) = layer(x, ei, return_attention_weights=True)
    assert torch.allclose(out, out2, atol=1e-6) and ei2 is ei and alpha.shape == (ei.size(1), 4)
    sums = torch.zeros(12, 4).index_add_(0, ei[1], alpha)
    has_in = torch.bincount(ei[1], minlength=12) > 0
    assert torch.allclose(sums[has_in], torch.ones_like(sums[has_in]), atol=1e-5)


@pytest.mark.parametrize("edge_dim", [None, 5])
def test_dot_equals_pyg_transformerconv(edge_dim):
    x, ei = _graph(isolated=0)
    ea = torch.randn(ei.size(1), 5) if edge_dim else None
    ours = GraphSelfAttention(16, 8, heads=3, edge_dim=edge_dim)
    ref = TransformerConv(16, 8, heads=3, edge_dim=edge_dim, root_weight=True)
    with torch.no_grad():
        ref.lin_query.weight.copy_(ours.lin_qkv.weight[:24]); ref.lin_query.bias.copy_(ours.lin_qkv.bias[:24])
        ref.lin_key.weight.copy_(ours.lin_qkv.weight[24:48]); ref.lin_key.bias.copy_(ours.lin_qkv.bias[24:48])
        ref.lin_value.weight.copy_(ours.lin_qkv.weight[48:]); ref.lin_value.bias.copy_(ours.lin_qkv.bias[48:])
        ref.lin_skip.weight.copy_(ours.lin_skip.weight); ref.lin_skip.bias.copy_(ours.lin_skip.bias)
        if edge_dim:
            ref.lin_edge.weight.copy_(ours.lin_edge.weight)
    a = ours(x, ei, ea)
    b = ref(x, ei, ea)
    assert torch.allclose(a, b, atol=1e-5)


def test_additive_equals_pyg_gatv2conv():
    x, ei = _graph(isolated=0)
    ea = torch.randn(ei.size(1), 4)
    ours = GraphSelfAttention(16, 8, heads=2, score="additive", edge_dim=4, root_weight=False, bias=False)
    ref = GATv2Conv(16, 8, heads=2, edge_dim=4, add_self_loops=False, bias=False, share_weights=False)
    with torch.no_grad():
        ref.lin_r.weight.copy_(ours.lin_qkv.weight[:16])  # target side
        ref.lin_l.weight.copy_(ours.lin_qkv.weight[16:])  # source side
        ref.att.copy_(ours.att[None])
        ref.lin_edge.weight.copy_(ours.lin_edge.weight)
    assert torch.allclose(ours(x, ei, ea), ref(x, ei, ea), atol=1e-5)


def test_batch_of_disjoint_graphs_equals_each_alone():
    layer = GraphSelfAttention(16, 8, heads=2, edge_dim=2).eval()
    x1, e1 = _graph(7, 20, seed=1)
    x2, e2 = _graph(9, 30, seed=2)
    a1, a2 = torch.randn(e1.size(1), 2), torch.randn(e2.size(1), 2)
    out = layer(torch.cat([x1, x2]), torch.cat([e1, e2 + 7], 1), torch.cat([a1, a2]))
    assert torch.allclose(out[:7], layer(x1, e1, a1), atol=1e-6)
    assert torch.allclose(out[7:], layer(x2, e2, a2), atol=1e-6)


@pytest.mark.parametrize("score", ["dot", "additive"])
def test_permutation_equivariance(score):
    x, ei = _graph(15, 50)
    layer = GraphSelfAttention(16, 4, heads=2, score=score).eval()
    perm = torch.randperm(15)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(15)
    out = layer(x, ei)
    out_p = layer(x[perm], inv[ei])  # node perm[i] becomes i
    assert torch.allclose(out_p, out[perm], atol=1e-5)


def test_locality_changing_one_node_changes_only_it_and_its_targets():
    x, ei = _graph(20, 40, isolated=3)
    layer = GraphSelfAttention(16, 4, heads=2).eval()
    base = layer(x, ei)
    u = int(ei[0, 0])
    x2 = x.clone()
    x2[u] += 1.0
    changed = (layer(x2, ei) - base).abs().amax(-1) > 1e-6
    allowed = torch.zeros(20, dtype=torch.bool)
    allowed[u] = True
    allowed[ei[1, ei[0] == u]] = True
    assert changed[u] and torch.all(changed <= allowed) and torch.equal(changed, allowed)


def test_isolated_node_keeps_its_root_term_and_degenerate_graphs_are_finite():
    layer = GraphSelfAttention(16, 4, heads=2)
    x = torch.randn(3, 16)
    ei = torch.tensor([[0], [1]])
    out = layer(x, ei)
    assert torch.allclose(out[2], layer.lin_skip(x[2]), atol=1e-6)  # node 2 has no incoming edge
    for n, e in [(0, torch.empty(2, 0, dtype=torch.long)), (1, torch.empty(2, 0, dtype=torch.long)),
                 (1, torch.tensor([[0], [0]]))]:
        out = layer(torch.randn(n, 16), e)
        assert out.shape == (n, 8) and torch.isfinite(out).all()
    no_root = GraphSelfAttention(16, 4, root_weight=False)
    assert torch.all(no_root(x, ei)[[0, 2]] == 0)


def test_bad_input_errors_name_the_argument():
    layer = GraphSelfAttention(16, 4, heads=2, edge_dim=3)
    x, ei = _graph()
    with pytest.raises(ValueError, match="score must be one of"):
        GraphSelfAttention(16, 4, score="cosine")
    with pytest.raises(ValueError, match=r"x must have shape \(\*, 16\)"):
        layer(torch.randn(12, 15), ei, torch.randn(ei.size(1), 3))
    with pytest.raises(ValueError, match="x contains NaN"):
        layer(torch.full((12, 16), float("nan")), ei, torch.randn(ei.size(1), 3))
    with pytest.raises(TypeError, match="floating-point"):
        layer(torch.ones(12, 16, dtype=torch.long), ei, torch.randn(ei.size(1), 3))
    with pytest.raises(ValueError, match="edge_attr is required"):
        layer(x, ei)
    with pytest.raises(ValueError, match=r"edge_attr must have shape"):
        layer(x, ei, torch.randn(ei.size(1) + 1, 3))
    with pytest.raises(ValueError, match="refers to node 12"):
        layer(x, torch.tensor([[0], [12]]), torch.randn(1, 3))
    with pytest.raises(ValueError, match="no edge_dim"):
        GraphSelfAttention(16, 4)(x, ei, torch.randn(ei.size(1), 3))


def test_gradcheck_layer_float64():
    x, ei = _graph(6, 14, isolated=1)
    layer = GraphSelfAttention(16, 2, heads=2, edge_dim=2).double()
    ea = torch.randn(ei.size(1), 2, dtype=torch.float64, requires_grad=True)
    xx = x.double().requires_grad_()
    assert torch.autograd.gradcheck(lambda x, e: layer(x, ei, e), (xx, ea))


def test_training_learns_a_simple_target():
    # Each node must output the mean of its in-neighbours' first feature: attention can do it.
    g = torch.Generator().manual_seed(0)
    x, ei = torch.randn(60, 16, generator=g), random_graph(60, 240, self_loops=False, generator=g)
    deg = torch.bincount(ei[1], minlength=60).clamp_min(1)
    target = torch.zeros(60).index_add_(0, ei[1], x[ei[0], 0]) / deg
    layer = GraphSelfAttention(16, 8, heads=2, root_weight=False)
    head = torch.nn.Linear(16, 1)
    opt = torch.optim.Adam([*layer.parameters(), *head.parameters()], lr=0.01)
    for _ in range(300):
        opt.zero_grad()
        loss = ((head(layer(x, ei)).squeeze(-1) - target) ** 2).mean()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 * target.var().item()


@pytest.mark.slow
def test_torch_compile_matches_eager():
    x, ei = _graph(30, 120)
    layer = GraphSelfAttention(16, 8, heads=2, impl="chunked").eval()
    compiled = torch.compile(layer)
    assert torch.allclose(compiled(x, ei), layer(x, ei), atol=1e-5)


def dense_ref(q, k, v, edge_index, bias=None):
    """Edge attention through the dense reference: (N, H, C) in, (N, H, C') out."""
    mask, dbias = dense_mask_and_bias(edge_index, q.size(0), bias)
    to_b = lambda t: t.permute(1, 0, 2)[None]  # noqa: E731  (N, H, C) -> (1, H, N, C)
    out = dense_attention(to_b(q), to_b(k), to_b(v), mask[None], dbias[None].to(q.dtype))
    return out[0].permute(1, 0, 2)  # (N, H, C')


def _grad_penalty_grad(model, x0, ei):
    x = x0.clone().requires_grad_()
    g, = torch.autograd.grad(model(x, ei).pow(2).sum(), x, create_graph=True)
    return torch.autograd.grad(g.pow(2).sum(), x)[0]


def test_additive_layer_gradient_penalty_matches_pyg_gatv2():
    torch.manual_seed(0)
    ei, x0 = EI[:, :6], torch.randn(5, 8, dtype=torch.float64)
    ours = GraphSelfAttention(8, 4, heads=2, score="additive", root_weight=False, bias=False).double()
    pyg = GATv2Conv(8, 4, heads=2, add_self_loops=False, bias=False, share_weights=False).double()
    with torch.no_grad():
        W = ours.lin_qkv.weight
        pyg.lin_r.weight.copy_(W[:8]); pyg.lin_l.weight.copy_(W[8:]); pyg.att.copy_(ours.att.view(1, 2, 4))  # noqa: E702
    torch.testing.assert_close(_grad_penalty_grad(ours, x0, ei), _grad_penalty_grad(pyg, x0, ei))


@pytest.mark.parametrize("impl", IMPLS)
def test_dot_layer_second_derivative_matches_dense_reference(impl):
    """Also with ``out.sum()`` (a grad_out that does not require grad): the second-order
    term through the attention weights is not silently dropped."""
    torch.manual_seed(1)
    layer = GraphSelfAttention(6, 3, heads=2, impl=impl, root_weight=False).double()
    x0 = torch.randn(5, 6, dtype=torch.float64)

    def ref(x, ei):
        q, k, v = layer.lin_qkv(x).view(5, 3, 2, 3).unbind(1)  # 3 x (N, H, C)
        return dense_ref(q, k, v, ei).reshape(5, 6)  # (N, H*C)

    x, xr = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    g, = torch.autograd.grad(layer(x, EI).sum(), x, create_graph=True)
    gr, = torch.autograd.grad(ref(xr, EI).sum(), xr, create_graph=True)
    torch.testing.assert_close(g, gr)
    torch.testing.assert_close(torch.autograd.grad(g.pow(2).sum(), x)[0],
                               torch.autograd.grad(gr.pow(2).sum(), xr)[0])
    torch.testing.assert_close(_grad_penalty_grad(layer, x0, EI), _grad_penalty_grad(ref, x0, EI))


@pytest.mark.slow
def test_torch_compile_default_layer_matches_eager():
    torch.manual_seed(0)
    x = torch.randn(12, 8)
    ei = torch.randint(0, 12, (2, 40))
    ea = torch.randn(40, 3)
    layer = GraphSelfAttention(8, 4, heads=2, edge_dim=3)  # impl="auto": fused C++ on CPU
    compiled = torch.compile(layer)
    out = compiled(x, ei, ea)
    torch.testing.assert_close(out, layer(x, ei, ea))
    out.square().sum().backward()
    got = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    layer(x, ei, ea).square().sum().backward()
    for a, b in zip(got, (p.grad for p in layer.parameters())):
        torch.testing.assert_close(a, b)


@pytest.mark.slow
def test_torch_compile_block_with_dropout_runs_and_matches_in_eval():
    torch.manual_seed(0)
    x, ei = torch.randn(10, 8), torch.randint(0, 10, (2, 30))
    block = GraphTransformerBlock(8, heads=2, dropout=0.2, attn_dropout=0.1)
    compiled = torch.compile(block)
    assert torch.isfinite(compiled(x, ei)).all()  # training: seeded C++ dropout is not traced
    block.eval()
    torch.testing.assert_close(compiled(x, ei), block(x, ei))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_layer_rejects_non_finite_edge_attr(bad):
    layer = GraphSelfAttention(4, 2, heads=2, edge_dim=3)
    ea = torch.randn(EI.size(1), 3)
    ea[2, 1] = bad
    with pytest.raises(ValueError, match="edge_attr"):
        layer(torch.randn(5, 4), EI, ea)
    with pytest.raises(ValueError, match="edge_attr"):  # table form too
        layer(torch.randn(5, 4), EI, ea[:3], edge_attr_index=torch.zeros(EI.size(1), dtype=torch.long) + 2)


@pytest.mark.parametrize("score", ["dot", "additive"])
def test_layer_rejects_nan_and_pos_inf_attn_bias_but_masks_with_neg_inf(score):
    layer = GraphSelfAttention(4, 2, heads=2, score=score, root_weight=False)
    x = torch.randn(5, 4)
    for bad in (float("nan"), float("inf")):
        b = torch.zeros(EI.size(1), 2)
        b[6, 1] = bad
        with pytest.raises(ValueError, match="attn_bias"):
            layer(x, EI, attn_bias=b)
    with pytest.raises(ValueError, match="attn_bias"):
        layer(x, EI, attn_bias=torch.zeros(EI.size(1), 3))
    b = torch.zeros(EI.size(1), 2)
    b[EI[1] == 1] = float("-inf")  # hide every edge into node 1: like an isolated node
    out = layer(x, EI, attn_bias=b)
    assert torch.isfinite(out).all() and (out[1] == 0).all() and (out[0] != 0).any()


@pytest.mark.parametrize("impl, score", [("chunked", "dot"), ("chunked", "additive"),
                                         pytest.param("fused", "dot", marks=needs_fused)])
def test_returned_attention_weights_are_detached(impl, score):
    layer = GraphSelfAttention(4, 2, heads=2, score=score, impl=impl)
    out, (ei, alpha) = layer(torch.randn(5, 4, requires_grad=True), EI, return_attention_weights=True)
    assert out.requires_grad and not alpha.requires_grad and alpha.grad_fn is None
    assert ei is EI and alpha.shape == (EI.size(1), 2)
    torch.testing.assert_close(torch.zeros(5, 2).index_add_(0, EI[1], alpha)[:4], torch.ones(4, 2))


def test_dtype_mismatch_is_named():
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


@pytest.mark.parametrize("score", ["dot", "additive"])
def test_state_dicts_load_across_fused_lazy_and_pair_widths(score):
    # an int in_channels fuses q/k/v into lin_qkv, -1 / (F, F) keep PyG's per-role names: either loads into both

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


def test_batch_argument_is_validated():
    b = sequences_to_batch([torch.randn(3, 6), torch.randn(5, 6)], "full", pe=None)
    att = GraphSelfAttention(6, 4, heads=2)
    q = torch.randn(8, 2, 3)
    for bad, err in ((b.batch[:-1], ValueError), (b.batch - 1, ValueError), (b.batch[None], ValueError),
                     (b.batch.float(), TypeError)):
        with pytest.raises(err, match="batch"):
            att(b.x, b.edge_index, batch=bad)
        with pytest.raises(err, match="batch"):
            normalized_edge_attention(q, q, q, b.edge_index, normalization="relu", batch=bad)
    assert att(b.x, b.edge_index, batch=b.batch).shape == (8, 8)

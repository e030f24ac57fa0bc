"""score="aft" (An Attention Free Transformer over graph edges) against a dense per-channel reference."""
import pytest
import torch

from graphattn import GraphSelfAttention


def reference(layer, x, ei, ea=None):
    """Per target i and channel c: σ(q_i) · Σ_j softmax_j(k_jc + w_ijc) v_jc over i's in-edges, in loops."""
    N, H, C = x.size(0), layer.heads, layer.out_channels
    q, k, v = layer.lin_qkv(x).view(N, 3, H, C).unbind(1)
    w = layer.lin_edge(ea).view(-1, H, C) if ea is not None else torch.zeros(ei.size(1), H, C, dtype=x.dtype)
    out = torch.zeros(N, H, C, dtype=x.dtype)
    for i in range(N):
        edges = (ei[1] == i).nonzero().flatten()
        if len(edges) == 0:
            continue
        s = k[ei[0, edges]] + w[edges]  # (deg, H, C)
        a = torch.softmax(s, dim=0)
        out[i] = torch.sigmoid(q[i]) * (a * v[ei[0, edges]]).sum(0)
    return out.reshape(N, H * C)


def graph(n=9, e=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    ei[1, ei[1] == n - 1] = 0  # node n-1 has no in-edges
    return ei


@pytest.mark.parametrize("impl", ["auto", "fused", "chunked"])
@pytest.mark.parametrize("edge_dim", [None, 3])
def test_aft_equals_its_dense_reference(impl, edge_dim):
    torch.manual_seed(0)
    layer = GraphSelfAttention(8, 4, heads=2, score="aft", edge_dim=edge_dim, root_weight=False, impl=impl).double()
    x, ei = torch.randn(9, 8, dtype=torch.float64), graph()
    ea = torch.randn(ei.size(1), 3, dtype=torch.float64) if edge_dim else None
    out, (_, alpha) = layer(x, ei, edge_attr=ea, return_attention_weights=True)
    assert torch.allclose(out, reference(layer, x, ei, ea), atol=1e-10)
    assert torch.allclose(out[8], torch.zeros(8, dtype=torch.float64))  # no in-edges: nothing to mix
    sums = torch.zeros(9, 2, dtype=torch.float64).index_add_(0, ei[1], alpha)
    has_in = torch.zeros(9, dtype=torch.bool)
    has_in[ei[1]] = True
    assert torch.allclose(sums[has_in], torch.ones_like(sums[has_in]))  # each head's channel-mean weights


def test_aft_is_stable_where_exp_overflows_and_has_gradients():
    layer = GraphSelfAttention(4, 4, heads=1, score="aft", root_weight=False).double()
    with torch.no_grad():
        layer.lin_qkv.weight.mul_(1e3)  # keys of ~1e3: exp(k) overflows float64 without the max shift
    x = torch.randn(6, 4, dtype=torch.float64)
    ei = graph(6, 20, seed=1)
    out = layer(x, ei)
    assert torch.isfinite(out).all()
    small = GraphSelfAttention(4, 2, heads=2, score="aft", edge_dim=2, root_weight=False).double()
    ea = torch.randn(ei.size(1), 2, dtype=torch.float64)
    xg = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: small(t, ei, edge_attr=ea), (xg,))


def test_aft_degenerate_graphs_and_options():
    layer = GraphSelfAttention(4, 4, heads=2, score="aft")
    empty = layer(torch.randn(3, 4), torch.zeros(2, 0, dtype=torch.long))
    assert empty.shape == (3, 8) and torch.isfinite(empty).all()
    with pytest.raises(ValueError, match="impl='dense' cannot take score='aft'"):
        GraphSelfAttention(4, 4, score="aft", impl="dense")
    with pytest.raises(ValueError, match="normalization"):
        GraphSelfAttention(4, 4, score="aft", normalization="relu")
    with pytest.raises(ValueError, match="score='aft' returns its attention weights without a gradient"):
        GraphSelfAttention(4, 4, score="aft", weights_grad=True)


def test_aft_under_a_pyg_explainer_mask():
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    torch.manual_seed(2)
    layer = GraphSelfAttention(8, 4, heads=2, score="aft", edge_dim=3, root_weight=False).double()
    x, ei = torch.randn(9, 8, dtype=torch.float64), graph()
    ea = torch.randn(ei.size(1), 3, dtype=torch.float64)
    plain = layer(x, ei, edge_attr=ea)
    mask = torch.nn.Parameter(torch.ones(ei.size(1), dtype=torch.float64))
    set_masks(layer, mask, ei, apply_sigmoid=False)
    try:
        masked = layer(x, ei, edge_attr=ea)
        assert torch.allclose(masked, plain, atol=1e-10)  # a mask of ones changes nothing
        masked.square().sum().backward()
        assert mask.grad is not None and torch.isfinite(mask.grad).all() and mask.grad.abs().sum() > 0
    finally:
        clear_masks(layer)

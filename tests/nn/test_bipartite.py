"""Bipartite input x=(x_src, x_dst), (F_src, F_dst) / lazy -1 widths, and PyG's heterogeneous
tools (to_hetero, HeteroConv) with GraphSelfAttention."""
import copy

import pytest
import torch
from torch import nn
from torch_geometric.data import HeteroData
from torch_geometric.nn import GATv2Conv, HeteroConv, TransformerConv, to_hetero

from graphattn import GraphSelfAttention, dense_attention


def _bipartite(n_src, n_dst, e, seed, f_src=5, f_dst=3, dtype=torch.float32, unique=True):
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(n_src, f_src, generator=g, dtype=dtype)
    xd = torch.randn(n_dst, f_dst, generator=g, dtype=dtype)
    if n_src == 0 or n_dst == 0 or e == 0:
        return xs, xd, torch.empty(2, 0, dtype=torch.long)
    ei = torch.stack([torch.randint(0, n_src, (e,), generator=g), torch.randint(0, n_dst, (e,), generator=g)])
    if unique:  # the dense reference sees each (j, i) pair once
        ei = torch.unique(ei, dim=1)
        ei = ei[:, torch.randperm(ei.size(1), generator=g)]  # not target-sorted
    return xs, xd, ei


def _copy(ours, ref, names):
    with torch.no_grad():
        for name in names:
            src, dst = getattr(ours, name), getattr(ref, name)
            dst.weight.copy_(src.weight)
            if src.bias is not None:
                dst.bias.copy_(src.bias)


@pytest.mark.parametrize("edge_dim", [None, 4])
@pytest.mark.parametrize("root_weight", [True, False])
def test_bipartite_dot_equals_pyg_transformerconv(edge_dim, root_weight):
    xs, xd, ei = _bipartite(9, 6, 25, seed=1)
    ea = torch.randn(ei.size(1), 4) if edge_dim else None
    ours = GraphSelfAttention((5, 3), 8, heads=3, edge_dim=edge_dim, root_weight=root_weight)
    ref = TransformerConv((5, 3), 8, heads=3, edge_dim=edge_dim, root_weight=root_weight)
    _copy(ours, ref, ["lin_query", "lin_key", "lin_value"] + (["lin_skip"] if root_weight else [])
          + (["lin_edge"] if edge_dim else []))
    out, (ei_back, alpha) = ours((xs, xd), ei, ea, return_attention_weights=True)
    ref_out, (_, ref_alpha) = ref((xs, xd), ei, ea, return_attention_weights=True)
    assert out.shape == (6, 24) and ei_back is ei
    assert torch.allclose(out, ref_out, atol=1e-5)
    assert torch.allclose(alpha, ref_alpha, atol=1e-5)  # same (caller's) edge order


def test_bipartite_additive_equals_pyg_gatv2conv():
    xs, xd, ei = _bipartite(8, 5, 20, seed=2)
    ea = torch.randn(ei.size(1), 2)
    ours = GraphSelfAttention((5, 3), 4, heads=2, score="additive", edge_dim=2, root_weight=False)
    ref = GATv2Conv((5, 3), 4, heads=2, edge_dim=2, add_self_loops=False, share_weights=False)
    _copy(ours, ref, ["lin_l", "lin_r", "lin_edge"])
    with torch.no_grad():
        ref.att.copy_(ours.att[None])
        ref.bias.zero_()
    targets = torch.unique(ei[1])  # GATv2Conv gives a target without edges its bias, we give zeros
    assert torch.allclose(ours((xs, xd), ei, ea)[targets], ref((xs, xd), ei, ea)[targets], atol=1e-5)


def _dense_bipartite(layer, xs, xd, ei):
    """Bipartite attention by the dense reference: (N_dst, N_src) mask, one graph."""
    H, C = layer.heads, layer.out_channels
    q = layer.lin_query(xd).view(-1, H, C).transpose(0, 1)[None]  # (1, H, N_dst, C)
    k = layer.lin_key(xs).view(-1, H, C).transpose(0, 1)[None]  # (1, H, N_src, C)
    v = layer.lin_value(xs).view(-1, H, C).transpose(0, 1)[None]
    mask = torch.zeros(1, xd.size(0), xs.size(0), dtype=torch.bool)
    mask[0, ei[1], ei[0]] = True
    out = dense_attention(q, k, v, mask)[0].transpose(0, 1).reshape(xd.size(0), H * C)
    return out + layer.lin_skip(xd)


@pytest.mark.parametrize("impl", ["auto", "fused", "chunked"])
def test_bipartite_equals_dense_reference_on_random_graphs(impl):
    for seed in range(40):
        g = torch.Generator().manual_seed(seed)
        n_src, n_dst = (int(v) for v in torch.randint(0, 12, (2,), generator=g))
        e = int(torch.randint(0, 40, (1,), generator=g))
        xs, xd, ei = _bipartite(n_src, n_dst, e, seed, dtype=torch.float64)
        layer = GraphSelfAttention((5, 3), 4, heads=2, impl=impl).double()
        xs.requires_grad_(True), xd.requires_grad_(True)
        out = layer((xs, xd), ei)
        ref = _dense_bipartite(layer, xs, xd, ei)
        assert out.shape == (n_dst, 8) and torch.isfinite(out).all()
        assert torch.allclose(out, ref, atol=1e-10), (seed, n_src, n_dst, e)
        if n_dst and n_src:
            w = torch.randn_like(out)
            g_ours = torch.autograd.grad((out * w).sum(), (xs, xd), allow_unused=True)
            g_ref = torch.autograd.grad((ref * w).sum(), (xs, xd), allow_unused=True)
            for a, b in zip(g_ours, g_ref):
                assert torch.allclose(a, b, atol=1e-10), seed


@pytest.mark.parametrize("impl", ["fused", "chunked"])
def test_bipartite_gradcheck(impl):
    xs, xd, ei = _bipartite(4, 3, 8, seed=3, dtype=torch.float64)
    ea = torch.randn(ei.size(1), 2, dtype=torch.float64, requires_grad=True)
    layer = GraphSelfAttention((5, 3), 2, heads=2, edge_dim=2, impl=impl).double()
    xs.requires_grad_(True), xd.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b, c: layer((a, b), ei, c), (xs, xd, ea))


def test_int_in_channels_takes_a_pair_of_equal_width_and_same_tensor_twice_is_plain():
    xs, xd, ei = _bipartite(7, 4, 18, seed=4, f_src=6, f_dst=6)
    layer = GraphSelfAttention(6, 4, heads=2).eval()
    assert layer.lin_query is None and layer.lin_qkv is not None  # fused projection kept
    split = GraphSelfAttention((6, 6), 4, heads=2).eval()
    with torch.no_grad():  # the same weights, split by role
        W, b = layer.lin_qkv.weight.chunk(3), layer.lin_qkv.bias.chunk(3)
        for lin, w_, b_ in zip((split.lin_query, split.lin_key, split.lin_value), W, b):
            lin.weight.copy_(w_), lin.bias.copy_(b_)
        split.lin_skip.load_state_dict(layer.lin_skip.state_dict())
    assert torch.allclose(layer((xs, xd), ei), split((xs, xd), ei), atol=1e-6)
    # (x, x) with one tensor is the ordinary graph: node ids index both sides
    x, e = torch.randn(7, 6), torch.randint(0, 7, (2, 20))
    assert torch.equal(layer((x, x), e), layer(x, e))
    assert torch.allclose(layer((x, x.clone()), e), layer(x, e), atol=1e-6)  # bipartite layout, same math


def test_bipartite_degenerate_sides_are_finite():
    layer = GraphSelfAttention((5, 3), 4, heads=2)
    for n_src, n_dst in [(0, 4), (4, 0), (0, 0), (1, 1)]:
        xs, xd, ei = _bipartite(n_src, n_dst, 0, seed=0)
        out = layer((xs, xd), ei)
        assert out.shape == (n_dst, 8) and torch.isfinite(out).all()
        assert torch.allclose(out, layer.lin_skip(xd), atol=1e-6)  # no edges: root term only
    xs, xd, ei = _bipartite(3, 5, 4, seed=5)
    out = GraphSelfAttention((5, 3), 4, heads=2, root_weight=False)((xs, xd), ei)
    no_in = torch.ones(5, dtype=torch.bool)
    no_in[ei[1]] = False
    assert no_in.any() and torch.all(out[no_in] == 0)
    with torch.inference_mode():
        assert torch.isfinite(layer((xs, xd), ei)).all()


def test_lazy_widths_are_inferred_and_round_trip():
    xs, xd, ei = _bipartite(6, 4, 12, seed=6, f_src=7, f_dst=2)
    for in_channels in [-1, (-1, -1), (7, -1), (-1, 2)]:
        layer = GraphSelfAttention(in_channels, 4, heads=2)
        out = layer((xs, xd), ei)
        assert out.shape == (4, 8)
        assert layer.lin_key.weight.shape == (8, 7) and layer.lin_query.weight.shape == (8, 2)
        assert layer.lin_skip.weight.shape == (8, 2)
        fresh = GraphSelfAttention(in_channels, 4, heads=2)  # still lazy: loads shapes from the state
        fresh.load_state_dict(layer.state_dict())
        assert torch.equal(fresh((xs, xd), ei), out)
        before = layer.lin_key.weight.clone()
        layer.reset_parameters()
        assert not torch.equal(before, layer.lin_key.weight)
    additive = GraphSelfAttention(-1, 4, heads=2, score="additive")
    assert additive((xs, xd), ei).shape == (4, 8) and additive.lin_l.weight.shape == (8, 7)
    assert repr(GraphSelfAttention((5, 3), 8, heads=2)) == "GraphSelfAttention((5, 3), 8, heads=2)"


def test_bipartite_bad_input_names_the_side():
    layer = GraphSelfAttention((5, 3), 4, heads=2)
    xs, xd, ei = _bipartite(6, 4, 12, seed=7)
    with pytest.raises(ValueError, match=r"edge_index\[0\] refers to node 6 but sources \(x_src\) has 6"):
        layer((xs, xd), torch.tensor([[6], [0]]))
    with pytest.raises(ValueError, match=r"edge_index\[1\] refers to node 4 but targets \(x_dst\) has 4"):
        layer((xs, xd), torch.tensor([[5], [4]]))
    with pytest.raises(ValueError, match=r"edge_index\[0\] contains negative"):
        layer((xs, xd), torch.tensor([[-1], [0]]))
    with pytest.raises(ValueError, match=r"x\[1\] \(x_dst\) must have shape \(\*, 3\)"):
        layer((xs, torch.randn(4, 5)), ei)
    with pytest.raises(ValueError, match=r"x\[0\] \(x_src\) must have shape \(\*, 5\)"):
        layer((torch.randn(6, 3), xd), ei)
    with pytest.raises(ValueError, match=r"x\[1\] \(x_dst\) is None"):
        layer((xs, None), ei)
    with pytest.raises(ValueError, match="pair"):
        layer((xs, xd, xd), ei)
    with pytest.raises(ValueError, match="batch is not supported"):
        layer((xs, xd), ei, batch=torch.zeros(4, dtype=torch.long))
    bad = xd.clone()
    bad[1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"x\[1\] \(x_dst\) contains NaN"):
        layer((xs, bad), ei)
    for width in [0, -2, (5,), (5, 3, 1), 2.0, True]:
        with pytest.raises(ValueError, match="in_channels must be"):
            GraphSelfAttention(width, 4)


def _user_item():
    d = HeteroData()
    d["user"].x = torch.randn(5, 3)
    d["item"].x = torch.randn(7, 6)
    buys = torch.tensor([[0, 1, 2, 4, 4], [0, 3, 6, 6, 1]])
    d["user", "buys", "item"].edge_index = buys
    d["item", "rev_buys", "user"].edge_index = buys.flip(0)
    return d


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = GraphSelfAttention((-1, -1), 8, heads=2)
        self.conv2 = GraphSelfAttention((-1, -1), 4)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def test_to_hetero_makes_one_layer_per_edge_type_and_trains():
    d = _user_item()
    model = to_hetero(_Net(), d.metadata(), aggr="sum")
    out = model(d.x_dict, d.edge_index_dict)  # the first call infers the lazy widths
    assert out["user"].shape == (5, 4) and out["item"].shape == (7, 4)
    # conv1 on "buys" is a bipartite user -> item layer: compare with calling it directly
    conv = model.conv1["user__buys__item"]
    assert conv.lin_key.weight.shape == (16, 3) and conv.lin_query.weight.shape == (16, 6)
    h_item = conv((d["user"].x, d["item"].x), d["user", "buys", "item"].edge_index)
    h_user = model.conv1["item__rev_buys__user"]((d["item"].x, d["user"].x),
                                                  d["item", "rev_buys", "user"].edge_index)
    conv2 = model.conv2["user__buys__item"]
    want = conv2((h_user.relu(), h_item.relu()), d["user", "buys", "item"].edge_index)
    assert torch.allclose(out["item"], want, atol=1e-6)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    target = torch.tensor([0, 1, 0, 1, 2])
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(d.x_dict, d.edge_index_dict)["user"], target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_heteroconv_and_deepcopy():
    d = _user_item()
    conv = HeteroConv({("user", "buys", "item"): GraphSelfAttention((3, 6), 8),
                       ("item", "rev_buys", "user"): GraphSelfAttention((6, 3), 8)})
    out = conv(d.x_dict, d.edge_index_dict)
    assert out["item"].shape == (7, 8) and out["user"].shape == (5, 8)
    layer = GraphSelfAttention(16, 8, heads=2)
    clone = copy.deepcopy(layer)
    x, ei = torch.randn(6, 16), torch.randint(0, 6, (2, 15))
    assert torch.equal(clone(x, ei), layer(x, ei))

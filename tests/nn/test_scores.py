"""The attention scores as classes: the registry, a score object passed in, and the bilinear score
against the dense reference on every backend (isolated nodes, self-loops, duplicate edges)."""
import pytest
import torch

from graphattn import GraphSelfAttention, dense_attention
from graphattn.nn.attention import SCORES, BilinearScore, DotScore, EdgeScore
from graphattn.ops import extension
from graphattn.testing import dense_mask_and_bias, random_graph

IMPLS = ["auto", "chunked"] + (["fused"] if extension.fused_available() else [])
# 5 nodes: a cycle, a duplicate edge (0->2 twice), a self-loop (3->3), node 4 isolated.
EI = torch.tensor([[0, 1, 2, 3, 0, 0, 3], [1, 2, 0, 3, 2, 2, 1]])


def _dense(q, k, v, edge_index, bias=None):
    mask, dbias = dense_mask_and_bias(edge_index, q.size(0), bias)
    to_b = lambda t: t.permute(1, 0, 2)[None]  # noqa: E731  (N, H, C) -> (1, H, N, C)
    return dense_attention(to_b(q), to_b(k), to_b(v), mask[None], dbias[None].to(q.dtype))[0].permute(1, 0, 2)


def _bilinear_reference(layer, x, ei, bias=None):
    """softmax_j(q_iᵀ B_h k_j / √C + b) v_j + root, from the layer's own weights."""
    N, H, C = x.size(0), layer.heads, layer.out_channels
    q, k, v = layer.lin_qkv(x).view(N, 3, H, C).unbind(1)  # 3 x (N, H, C)
    qb = torch.einsum("nhc,hcd->nhd", q, layer.bilinear)
    return _dense(qb, k, v, ei, bias).reshape(N, H * C) + layer.lin_skip(x)


def test_registry_names_and_errors():
    assert SCORES.names()[:4] == ("dot", "additive", "gat", "bilinear")
    assert isinstance(SCORES.make("bilinear"), BilinearScore)
    with pytest.raises(ValueError, match=r"score must be one of \('dot', 'additive', 'gat', 'bilinear'"):
        GraphSelfAttention(8, 4, score="cosine")
    with pytest.raises(ValueError, match="is registered already"):
        SCORES.register("dot")(DotScore)


@pytest.mark.parametrize("impl", IMPLS)
def test_bilinear_equals_the_dense_reference(impl):
    torch.manual_seed(0)
    layer = GraphSelfAttention(6, 4, heads=2, score="bilinear", impl=impl).double()
    with torch.no_grad():
        layer.bilinear.add_(0.3 * torch.randn_like(layer.bilinear))  # away from the identity it starts at
    x = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(EI.size(1), 2, dtype=torch.float64)
    out = layer(x, EI, attn_bias=bias)
    ref = _bilinear_reference(layer, x, EI, bias)
    torch.testing.assert_close(out, ref)
    assert torch.equal(out[4], layer.lin_skip(x)[4])  # the isolated node keeps its root term only
    g, gr = (torch.autograd.grad(t.pow(2).sum(), (x, layer.bilinear)) for t in (layer(x, EI, attn_bias=bias),
                                                                              _bilinear_reference(layer, x, EI, bias)))
    torch.testing.assert_close(g, gr)


def test_bilinear_starts_as_dot_and_loads_dot_weights():
    torch.manual_seed(1)
    x, ei = torch.randn(30, 8), random_graph(30, 90, isolated=3, generator=torch.Generator().manual_seed(0))
    dot = GraphSelfAttention(8, 4, heads=2, edge_dim=3).eval()
    bil = GraphSelfAttention(8, 4, heads=2, edge_dim=3, score="bilinear").eval()
    missing = bil.load_state_dict(dot.state_dict(), strict=False).missing_keys
    assert missing == ["bilinear"]
    ea = torch.randn(ei.size(1), 3)
    torch.testing.assert_close(bil(x, ei, ea), dot(x, ei, ea))
    out, (_, alpha) = bil(x, ei, ea, return_attention_weights=True)
    sums = torch.zeros(30, 2).index_add_(0, ei[1], alpha)
    has_in = torch.bincount(ei[1], minlength=30) > 0
    torch.testing.assert_close(sums[has_in], torch.ones_like(sums[has_in]))


def test_a_score_object_can_be_passed_and_its_name_recorded():
    class Halved(DotScore):
        name = "halved"

        def project(self, layer, x_src, x_dst):
            parts = super().project(layer, x_src, x_dst)
            return parts._replace(dst=parts.dst / 2)

    torch.manual_seed(0)
    layer = GraphSelfAttention(8, 4, heads=2, score=Halved())
    assert layer.score == "halved" and isinstance(layer.score_fn, EdgeScore)
    ref = GraphSelfAttention(8, 4, heads=2)
    ref.load_state_dict(layer.state_dict())
    x = torch.randn(5, 8)
    with torch.no_grad():  # halving the queries = halving their projection
        ref.lin_qkv.weight[:8].div_(2)
        ref.lin_qkv.bias[:8].div_(2)
    torch.testing.assert_close(layer(x, EI), ref(x, EI))


def test_score_specific_options_are_refused_by_the_score():
    with pytest.raises(ValueError, match="share_weights=True applies to score='additive'"):
        GraphSelfAttention(8, 4, score="bilinear", share_weights=True)
    with pytest.raises(ValueError, match="impl='dense' cannot take score='gat'"):
        GraphSelfAttention(8, 4, score="gat", impl="dense")
    with pytest.raises(ValueError, match="impl='fused' supports only"):
        GraphSelfAttention(8, 4, score="additive", impl="fused")
    with pytest.raises(ValueError, match=r"needs a score that takes it \(score='gat' takes \('softmax',\)"):
        GraphSelfAttention(8, 4, score="gat", normalization="relu")


@pytest.mark.parametrize("args, kwargs, expected", [
    ((4, 4), dict(score="additive"), ["att", "lin_l.weight", "lin_l.bias", "lin_r.weight", "lin_r.bias",
                                      "lin_skip.weight", "lin_skip.bias"]),
    ((4, 4), dict(), ["lin_query.weight", "lin_query.bias", "lin_key.weight", "lin_key.bias", "lin_value.weight",
                      "lin_value.bias", "lin_skip.weight", "lin_skip.bias"]),
    ((4, 5), dict(score="gat", edge_dim=2), ["att_src", "att_dst", "att_edge", "lin_src.weight", "lin_dst.weight",
                                             "lin_edge.weight", "lin_skip.weight", "lin_skip.bias"]),
    (4, dict(score="additive", share_weights=True, edge_dim=3, beta=True),
     ["att", "lin_qkv.weight", "lin_qkv.bias", "lin_edge.weight", "lin_skip.weight", "lin_skip.bias",
      "lin_beta.weight"]),
])
def test_parameter_order_is_that_of_the_layer_before_scores_were_classes(args, kwargs, expected):
    """parameters() order is what an optimizer's saved state maps onto (a checkpoint's Adam moments must
    land on the same tensors); these lists are the order of the single-file layer of commit 1179141."""
    assert [n for n, _ in GraphSelfAttention(args, 3, heads=2, **kwargs).named_parameters()] == expected

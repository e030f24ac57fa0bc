"""Numerical and input-type findings: FAVOR+ denominators, attention-bias dtypes, model dtypes,
TransformerConv(root_weight=False) state dicts."""
import pytest
import torch
from torch_geometric.nn import TransformerConv

from graphattn import GraphClassifier, GraphSelfAttention, LinearGlobalAttention, NodeClassifier, linear_attention
from graphattn.nn.variants.linear_attention import orthogonal_features


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [1.0, 8.0, 12.0])
def test_favor_weights_sum_to_one_at_any_query_key_scale(dtype, scale):
    # the features are shifted by maxima that cancel in the ratio: an absolute floor of the
    # denominator (1e-6) shrank outputs towards 0 for |q|, |k| entries around 6 and above
    g = torch.Generator().manual_seed(0)
    n, h, c = 50, 2, 8
    omega = orthogonal_features(h, 2 * c, c, torch.Generator().manual_seed(0)).to(dtype)
    q, k = (scale * torch.randn(n, h, c, generator=g, dtype=dtype) for _ in range(2))
    out = linear_attention(q, k, torch.ones(n, h, 1, dtype=dtype), feature_map="favor", omega=omega)
    assert torch.allclose(out, torch.ones_like(out), atol=1e-4)
    batch = torch.tensor([0] * 10 + [2] * 40)  # an empty graph (id 1) in between: finite, no 0/0
    assert torch.isfinite(linear_attention(q, k, q, batch, feature_map="favor", omega=omega, num_graphs=3)).all()


def _graph():
    return torch.randn(4, 6), torch.tensor([[0, 1, 2, 3, 1], [1, 2, 3, 0, 3]])


@pytest.mark.parametrize("normalization", ["softmax", "relu", "sigmoid"])
def test_attn_bias_must_be_float_and_any_float_dtype_is_cast(normalization):
    x, ei = _graph()
    layer = GraphSelfAttention(6, 4, heads=2, normalization=normalization)
    bias = torch.randn(5, 2)
    ref = layer(x, ei, attn_bias=bias)
    assert torch.allclose(layer(x, ei, attn_bias=bias.double()), ref, atol=1e-6)  # was an index_add_ dtype error
    with pytest.raises(TypeError, match="attn_bias must be a floating-point additive score bias.*keep-mask"):
        layer(x, ei, attn_bias=torch.ones(5, 2, dtype=torch.bool))  # SDPA's attn_mask convention
    with pytest.raises(TypeError, match="attn_bias must be a floating-point"):
        layer(x, ei, attn_bias=torch.ones(5, 2, dtype=torch.long))


def test_models_name_a_dtype_mismatch_of_their_inputs():
    x, ei = _graph()
    for make in (lambda: GraphClassifier(6, 8, 2)(x.double(), ei), lambda: NodeClassifier(6, 8, 2)(x.half(), ei),
                 lambda: GraphClassifier(6, 8, 2, edge_dim=2)(x, ei, edge_attr=torch.randn(5, 2).double())):
        with pytest.raises(TypeError, match="but the model's weights are torch.float32"):
            make()
    with pytest.raises(TypeError, match="pe has dtype torch.float64 but the model's weights"):
        GraphClassifier(6, 8, 2, pe_dim=2)(x, ei, pe=torch.randn(4, 2).double())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast casts both sides: still accepted
        assert GraphClassifier(6, 8, 2)(x.bfloat16(), ei).shape == (1, 2)


def test_transformerconv_state_dict_without_root_weight_loads():
    x, ei = _graph()
    ref = TransformerConv(6, 4, heads=2, root_weight=False)  # keeps an unused lin_skip
    ours = GraphSelfAttention(6, 4, heads=2, root_weight=False)
    with pytest.warns(UserWarning, match="lin_skip.* ignored"):
        ours.load_state_dict(ref.state_dict())
    assert torch.allclose(ours(x, ei), ref(x, ei), atol=1e-6)
    with pytest.raises(RuntimeError, match="lin_skip"):  # our own dict of a root_weight layer still mismatches
        ours.load_state_dict(GraphSelfAttention(6, 4, heads=2).state_dict())


def test_elu_linear_attention_of_very_negative_queries_still_sums_to_one():
    # features exp(-10) ~ 4.5e-5 per channel: the denominator (~4e-8) fell under the absolute 1e-6 floor
    q = torch.full((5, 1, 4), -10.0, requires_grad=True)
    out = linear_attention(q, q, torch.ones(5, 1, 1))
    out.sum().backward()
    assert torch.allclose(out, torch.ones_like(out)) and torch.isfinite(q.grad).all()


def test_favor_gradients_stay_finite_for_huge_scores():
    m = LinearGlobalAttention(16, heads=4, feature_map="favor")
    x = torch.randn(20, 16) * 200
    out = m(x, torch.tensor([0] * 8 + [1] * 12))
    out.sum().backward()
    assert torch.isfinite(out).all() and all(torch.isfinite(p.grad).all() for p in m.parameters())


def test_propagation_gradients_are_deterministic_with_several_threads():
    # z[ei[0]] backpropagated through index_put_(accumulate=True), which sums in a thread-dependent
    # order on CPU: the same seed would give other weights (Cora's best epoch could flip)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        def grads():
            torch.manual_seed(0)
            n = 3000
            ei, x = torch.randint(0, n, (2, 60000)), torch.randn(n, 16)
            model = NodeClassifier(16, 32, 4, propagation=10)
            model(x, ei).sum().backward()
            return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

        ref = grads()
        assert all(torch.equal(ref, grads()) for _ in range(5))
    finally:
        torch.set_num_threads(threads)


def test_elu_queries_whose_features_round_to_zero_get_zero_and_finite_gradients():
    q = torch.randn(6, 1, 4)
    q[0] = -20.0  # elu(x) + 1 is exactly 0 in float32: a 0/0 row
    q.requires_grad_()
    out = linear_attention(q, torch.randn(6, 1, 4), torch.randn(6, 1, 3))
    out.sum().backward()
    assert torch.equal(out[0], torch.zeros_like(out[0])) and torch.isfinite(q.grad).all()

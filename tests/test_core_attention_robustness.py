"""Core attention robustness: second derivatives, torch.compile, non-finite inputs, detached
weights and values with their own channel count, on every edge-attention backend."""
from __future__ import annotations

import pytest
import torch

from graphattn import GraphSelfAttention
from graphattn.ops import extension
from graphattn.nn.block import GraphTransformerBlock
from graphattn.functional import dense_attention, edge_attention
from graphattn.testing import dense_mask_and_bias

FUSED = extension.fused_available()
IMPLS = ["chunked"] + (["fused"] if FUSED else [])
needs_fused = pytest.mark.skipif(not FUSED, reason="fused C++ kernel unavailable")

# 5 nodes: a cycle, a duplicate edge (0->2 twice), a self-loop (3->3), node 4 isolated.
EI = torch.tensor([[0, 1, 2, 3, 0, 0, 3], [1, 2, 0, 3, 2, 2, 1]])


def _t(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_()


def dense_ref(q, k, v, edge_index, bias=None):
    """Edge attention through the dense reference: (N, H, C) in, (N, H, C') out."""
    mask, dbias = dense_mask_and_bias(edge_index, q.size(0), bias)
    to_b = lambda t: t.permute(1, 0, 2)[None]  # noqa: E731  (N, H, C) -> (1, H, N, C)
    out = dense_attention(to_b(q), to_b(k), to_b(v), mask[None], dbias[None].to(q.dtype))
    return out[0].permute(1, 0, 2)  # (N, H, C')


# ------------------------------------------------------------------ 1. second derivatives
@pytest.mark.parametrize("impl", IMPLS)
def test_gradgradcheck_dot_with_bias_and_edge_features(impl):
    E, H, C = EI.size(1), 2, 3
    q, k, v = _t(5, H, C, seed=1), _t(5, H, C, seed=2), _t(5, H, C, seed=3)
    bias, ek, ev = _t(E, H, seed=4), _t(E, H, C, seed=5), _t(E, H, C, seed=6)
    fn = lambda q, k, v, b, ek, ev: edge_attention(  # noqa: E731
        q, k, v, EI, bias=b, edge_key=ek, edge_value=ev, impl=impl)
    assert torch.autograd.gradgradcheck(fn, (q, k, v, bias, ek, ev))


@pytest.mark.parametrize("impl", IMPLS)
def test_gradgradcheck_aliased_inputs(impl):
    """One tensor in several roles (q = k = v, edge_key = edge_value): gradients add once."""
    x, e = _t(5, 1, 2, seed=7), _t(EI.size(1), 1, 2, seed=8)
    fn = lambda x, e: edge_attention(x, x, x, EI, edge_key=e, edge_value=e, impl=impl)  # noqa: E731
    assert torch.autograd.gradgradcheck(fn, (x, e))


def test_gradgradcheck_additive_and_dropout_chunked():
    q, k, att = _t(5, 2, 3, seed=9), _t(5, 2, 3, seed=10), _t(2, 3, seed=11)

    def fn(q, k, att):
        torch.manual_seed(0)  # the same dropout mask on every call
        return edge_attention(q, k, k, EI, score="additive", att=att, dropout=0.3, impl="chunked")

    assert torch.autograd.gradgradcheck(fn, (q, k, att))


def _grad_penalty_grad(model, x0, ei):
    x = x0.clone().requires_grad_()
    g, = torch.autograd.grad(model(x, ei).pow(2).sum(), x, create_graph=True)
    return torch.autograd.grad(g.pow(2).sum(), x)[0]


def test_additive_layer_gradient_penalty_matches_pyg_gatv2():
    from torch_geometric.nn import GATv2Conv

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


def test_sdpa_path_fails_loudly_on_double_backward():
    """Complete graphs through SDPA: PyTorch's CPU flash kernel has no 2nd derivative; it
    must raise, never return a wrong number."""
    ei = torch.cartesian_prod(torch.arange(3), torch.arange(3)).T.contiguous()
    q = _t(3, 1, 2, seed=12)
    g, = torch.autograd.grad(edge_attention(q, q, q, ei, impl="dense").pow(2).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="not implemented"):
        g.pow(2).sum().backward()


# ------------------------------------------------------------------ 2. torch.compile
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


# ------------------------------------------------------------------ 3. non-finite inputs
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


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", ["q", "k", "v", "bias", "edge_key", "edge_value"])
def test_edge_attention_rejects_nan_on_every_path(impl, name):
    E = EI.size(1)
    t = {"q": torch.randn(5, 1, 2), "k": torch.randn(5, 1, 2), "v": torch.randn(5, 1, 2),
         "bias": torch.randn(E, 1), "edge_key": torch.randn(E, 1, 2), "edge_value": torch.randn(E, 1, 2)}
    t[name].view(-1)[1] = float("nan")
    q, k, v = t.pop("q"), t.pop("k"), t.pop("v")
    with pytest.raises(ValueError, match=rf"^{name} contains NaN"):
        edge_attention(q, k, v, EI, impl=impl, **t)


@pytest.mark.parametrize("impl", IMPLS)
def test_fused_and_chunked_agree_on_neg_inf_bias(impl):
    q = torch.randn(5, 1, 2)
    b = torch.zeros(EI.size(1), 1)
    into2 = EI[1] == 2
    b[into2] = float("-inf")  # every edge into node 2 hidden
    out, a = edge_attention(q, q, q, EI, bias=b, impl=impl, return_attention_weights=True)
    assert (out[2] == 0).all() and (a[into2] == 0).all() and torch.isfinite(out).all()
    torch.testing.assert_close(out, edge_attention(q, q, q, EI, bias=b, impl="chunked"))


# ------------------------------------------------------------------ 4. detached weights
@pytest.mark.parametrize("impl, score", [("chunked", "dot"), ("chunked", "additive"),
                                         pytest.param("fused", "dot", marks=needs_fused)])
def test_returned_attention_weights_are_detached(impl, score):
    layer = GraphSelfAttention(4, 2, heads=2, score=score, impl=impl)
    out, (ei, alpha) = layer(torch.randn(5, 4, requires_grad=True), EI, return_attention_weights=True)
    assert out.requires_grad and not alpha.requires_grad and alpha.grad_fn is None
    assert ei is EI and alpha.shape == (EI.size(1), 2)
    torch.testing.assert_close(torch.zeros(5, 2).index_add_(0, EI[1], alpha)[:4], torch.ones(4, 2))


# ------------------------------------------------------------------ 5. values of C' channels
@pytest.mark.parametrize("impl", ["auto"] + IMPLS)
@pytest.mark.parametrize("cv", [1, 5])
def test_value_channels_differ_from_query_channels(impl, cv):
    E, H, C = EI.size(1), 2, 3
    q, k, v = _t(5, H, C, seed=13), _t(5, H, C, seed=14), _t(5, H, cv, seed=15)
    bias, ek, ev = _t(E, H, seed=16), _t(E, H, C, seed=17), _t(E, H, cv, seed=18)
    out, alpha = edge_attention(q, k, v, EI, bias=bias, impl=impl, return_attention_weights=True)
    assert out.shape == (5, H, cv)
    torch.testing.assert_close(out, dense_ref(q, k, v, EI, bias))
    gv = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v, bias), gv)
    want = torch.autograd.grad(dense_ref(q, k, v, EI, bias), (q, k, v, bias), gv)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    # per-edge key/value additions of their own widths: v_j + ev_e summed with the same weights
    out = edge_attention(q, k, v, EI, edge_key=ek, edge_value=ev, impl=impl)
    ref = edge_attention(q, k, v[:, :, :1].expand(5, H, C).contiguous(), EI, edge_key=ek, impl="chunked",
                         return_attention_weights=True)[1]  # weights depend on q, k, ek only
    msg = (v[EI[0]] + ev) * ref[..., None]  # (E, H, C')
    torch.testing.assert_close(out, torch.zeros(5, H, cv, dtype=out.dtype).index_add(0, EI[1], msg))
    assert torch.autograd.gradcheck(
        lambda q, v, ev: edge_attention(q, k, v, EI, edge_key=ek, edge_value=ev, impl=impl), (q, v, ev))


def test_value_channels_on_complete_graph_sdpa():
    ei = torch.cartesian_prod(torch.arange(4), torch.arange(4)).T.contiguous()
    q, v = torch.randn(4, 2, 3), torch.randn(4, 2, 6)
    out = edge_attention(q, q, v, ei, impl="dense")
    assert out.shape == (4, 2, 6)
    torch.testing.assert_close(out, dense_ref(q, q, v, ei), atol=1e-5, rtol=1e-5)

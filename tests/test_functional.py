import math

import pytest
import torch

import graphattn.ops.chunked as chunked
from graphattn import dense_attention, edge_attention, to_csr
from graphattn.ops import extension
from graphattn.ops.csr import clear_csr_cache
from graphattn.testing import dense_mask_and_bias, random_graph

IMPLS = ["chunked"] + (["fused"] if extension.fused_available() else [])
# 5 nodes: a cycle, a duplicate edge (0->2 twice), a self-loop (3->3), node 4 isolated.
EI = torch.tensor([[0, 1, 2, 3, 0, 0, 3], [1, 2, 0, 3, 2, 2, 1]])


def dense_ref(q, k, v, edge_index, bias=None):
    """Edge attention through the dense reference: (N, H, C) in, (N, H, C') out (values of their own width)."""
    N = q.size(0)
    mask, dbias = dense_mask_and_bias(edge_index, N, bias)
    to_b = lambda t: t.permute(1, 0, 2)[None]  # noqa: E731  (N,H,C) -> (1,H,N,C)
    out = dense_attention(to_b(q), to_b(k), to_b(v), mask[None], dbias[None].to(q.dtype))
    return out[0].permute(1, 0, 2)


def _cases():
    g = torch.Generator().manual_seed(1234)
    cases = [(0, 0), (1, 0), (1, 1), (1, 3), (2, 0), (3, 1), (5, 40)]
    for _ in range(200):
        n = int(torch.randint(1, 40, (1,), generator=g))
        e = int(torch.randint(0, 4 * n + 1, (1,), generator=g))
        cases.append((n, e))
    return cases


@pytest.fixture(params=[16 * 2**20, 64])  # default chunk, and tiny chunks (many chunks)
def chunk_bytes(request, monkeypatch):
    monkeypatch.setattr(chunked, "CHUNK_BYTES", request.param)
    return request.param


@pytest.mark.parametrize("impl", IMPLS)
def test_matches_dense_reference_on_random_graphs(impl, chunk_bytes):
    g = torch.Generator().manual_seed(0)
    for i, (n, e) in enumerate(_cases()):
        H, C = 1 + i % 3, 1 + i % 5
        iso = i % 4 if n > 4 else 0
        ei = random_graph(n, e, isolated=iso, generator=g)
        q, k, v = (torch.randn(n, H, C, dtype=torch.float64, generator=g) for _ in range(3))
        bias = torch.randn(ei.size(1), H, dtype=torch.float64, generator=g) if i % 2 else None
        out = edge_attention(q, k, v, ei, bias=bias, impl=impl)
        ref = dense_ref(q, k, v, ei, bias)
        assert torch.allclose(out, ref, atol=1e-10), (i, n, e)
        if iso:
            assert torch.all(out[n - iso:] == 0)


@pytest.mark.parametrize("impl", IMPLS)
def test_gradients_match_dense_reference(impl):
    g = torch.Generator().manual_seed(1)
    for n, e in [(6, 20), (12, 3), (20, 90), (1, 1)]:
        ei = random_graph(n, e, isolated=1 if n > 2 else 0, generator=g)
        ts = [torch.randn(n, 2, 3, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(3)]
        bias = torch.randn(ei.size(1), 2, dtype=torch.float64, generator=g, requires_grad=True)
        w = torch.randn(n, 2, 3, dtype=torch.float64, generator=g)
        g1 = torch.autograd.grad((edge_attention(*ts, ei, bias=bias, impl=impl) * w).sum(), ts + [bias])
        g2 = torch.autograd.grad((dense_ref(*ts, ei, bias) * w).sum(), ts + [bias])
        for a, b in zip(g1, g2):
            assert torch.allclose(a, b, atol=1e-9)


def test_gradcheck_all_options():
    g = torch.Generator().manual_seed(2)
    N, H, C, ei = 6, 2, 3, random_graph(6, 16, isolated=1, generator=g)
    E = ei.size(1)
    mk = lambda *s: torch.randn(*s, dtype=torch.float64, generator=g, requires_grad=True)  # noqa: E731
    q, k, v, b, ekv, att = mk(N, H, C), mk(N, H, C), mk(N, H, C), mk(E, H), mk(E, H, C), mk(H, C)
    for impl in IMPLS:
        assert torch.autograd.gradcheck(lambda q, k, v, b: edge_attention(q, k, v, ei, bias=b, impl=impl),
                                        (q, k, v, b))
    ev = mk(E, H, C)
    for impl in IMPLS:  # shared edge key/value, and separate ones
        assert torch.autograd.gradcheck(
            lambda q, k, v, b, e: edge_attention(q, k, v, ei, bias=b, edge_key=e, edge_value=e, impl=impl),
            (q, k, v, b, ekv))
        assert torch.autograd.gradcheck(
            lambda q, k, v, e1, e2: edge_attention(q, k, v, ei, edge_key=e1, edge_value=e2, impl=impl),
            (q, k, v, ekv, ev))
    assert torch.autograd.gradcheck(
        lambda q, k, b, e, a: edge_attention(q, k, k, ei, bias=b, edge_key=e, score="additive", att=a),
        (q, k, b, ekv, att))


@pytest.mark.parametrize("impl", IMPLS)
def test_attention_weights_are_a_distribution_per_target(impl):
    g = torch.Generator().manual_seed(3)
    ei = random_graph(30, 100, isolated=5, generator=g)
    q, k, v = (torch.randn(30, 4, 8, generator=g) for _ in range(3))
    out, alpha = edge_attention(q, k, v, ei, return_attention_weights=True, impl=impl)
    assert alpha.shape == (ei.size(1), 4) and torch.all(alpha >= 0) and torch.all(alpha <= 1)
    sums = torch.zeros(30, 4).index_add_(0, ei[1], alpha)
    has_in = torch.bincount(ei[1], minlength=30) > 0
    assert torch.allclose(sums[has_in], torch.ones_like(sums[has_in]), atol=1e-6)
    assert torch.all(sums[~has_in] == 0) and torch.all(out[~has_in] == 0)
    # alpha is in the caller's edge order: recompute edge by edge
    s = (q[ei[1]] * k[ei[0]]).sum(-1) / math.sqrt(8)
    num = torch.exp(s)
    den = torch.zeros(30, 4).index_add_(0, ei[1], num)
    assert torch.allclose(alpha, num / den[ei[1]], atol=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
def test_edge_features_enter_only_their_edge(impl):
    g = torch.Generator().manual_seed(4)
    N, H, C = 10, 2, 4
    ei = random_graph(N, 30, duplicates=False, generator=g)
    q, k, v = (torch.randn(N, H, C, dtype=torch.float64, generator=g) for _ in range(3))
    ekv = torch.randn(ei.size(1), H, C, dtype=torch.float64, generator=g)
    out = edge_attention(q, k, v, ei, edge_key=ekv, edge_value=ekv, impl=impl)
    kk, vv = k[ei[0]] + ekv, v[ei[0]] + ekv  # naive per-edge reference
    s = (q[ei[1]] * kk).sum(-1) / math.sqrt(C)
    m = torch.full((N, H), -torch.inf, dtype=s.dtype).scatter_reduce(0, ei[1][:, None].expand(-1, H), s, "amax")
    p = torch.exp(s - m[ei[1]])
    a = p / torch.zeros(N, H, dtype=s.dtype).index_add_(0, ei[1], p)[ei[1]]
    ref = torch.zeros(N, H, C, dtype=s.dtype).index_add_(0, ei[1], a[..., None] * vv)
    assert torch.allclose(out, ref, atol=1e-10)


def test_shared_edge_features_in_low_precision():
    g = torch.Generator().manual_seed(12)
    ei = random_graph(25, 90, isolated=2, generator=g)
    q, k, v = (torch.randn(25, 2, 8, generator=g) for _ in range(3))
    ekv = torch.randn(ei.size(1), 2, 8, generator=g)
    ref = edge_attention(q, k, v, ei, edge_key=ekv, edge_value=ekv, impl="chunked")
    for dt in (torch.bfloat16, torch.float16):
        e = ekv.to(dt).requires_grad_()
        low = edge_attention(q.to(dt), k.to(dt), v.to(dt), ei, edge_key=e, edge_value=e)
        assert low.dtype == dt and torch.allclose(low.float(), ref, atol=5e-2)
        low.float().sum().backward()
        assert e.grad.dtype == dt and torch.isfinite(e.grad.float()).all()


def test_additive_score_matches_naive():
    g = torch.Generator().manual_seed(5)
    N, H, C = 9, 3, 2
    ei = random_graph(N, 25, generator=g)
    q, k = (torch.randn(N, H, C, dtype=torch.float64, generator=g) for _ in range(2))
    att = torch.randn(H, C, dtype=torch.float64, generator=g)
    out, alpha = edge_attention(q, k, k, ei, score="additive", att=att, return_attention_weights=True)
    s = (torch.nn.functional.leaky_relu(q[ei[1]] + k[ei[0]], 0.2) * att).sum(-1)
    p = torch.exp(s)
    a = p / torch.zeros(N, H, dtype=s.dtype).index_add_(0, ei[1], p)[ei[1]]
    assert torch.allclose(alpha, a, atol=1e-10)
    assert torch.allclose(out, torch.zeros_like(out).index_add_(0, ei[1], a[..., None] * k[ei[0]]))


@pytest.mark.parametrize("impl", IMPLS)
def test_large_logits_and_low_precision_stay_finite(impl):
    g = torch.Generator().manual_seed(6)
    ei = random_graph(50, 300, isolated=3, generator=g)
    q, k, v = (torch.randn(50, 2, 16, generator=g) for _ in range(3))
    big = edge_attention(q * 1e3, k * 1e3, v, ei, impl=impl)  # scores ~ 1e6
    assert torch.isfinite(big).all()
    ref = edge_attention(q, k, v, ei)
    for dt in (torch.bfloat16, torch.float16):
        low = edge_attention(q.to(dt), k.to(dt), v.to(dt), ei)
        assert low.dtype == dt and torch.isfinite(low).all()
        assert torch.allclose(low.float(), ref, atol=5e-2)


def test_dropout_only_in_training():
    g = torch.Generator().manual_seed(7)
    ei = random_graph(20, 80, generator=g)
    q, k, v = (torch.randn(20, 2, 4, generator=g) for _ in range(3))
    ref = edge_attention(q, k, v, ei)
    assert torch.allclose(edge_attention(q, k, v, ei, dropout=0.5, training=False, impl="chunked"), ref, atol=1e-6)
    torch.manual_seed(0)
    out, alpha = edge_attention(q, k, v, ei, dropout=0.5, training=True, return_attention_weights=True)
    assert not torch.allclose(out, ref)
    sums = torch.zeros(20, 2).index_add_(0, ei[1], alpha)  # weights returned before dropout
    has_in = torch.bincount(ei[1], minlength=20) > 0
    assert torch.allclose(sums[has_in], torch.ones_like(sums[has_in]), atol=1e-5)
    # unbiased: averaging many dropout draws approaches the deterministic output
    mean = torch.stack([edge_attention(q, k, v, ei, dropout=0.5) for _ in range(400)]).mean(0)
    assert (mean - ref).abs().max() < 0.35


def test_bad_arguments_raise_clear_errors():
    q = torch.randn(4, 2, 3)
    ei = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="impl must be one of"):
        edge_attention(q, q, q, ei, impl="cuda-magic")
    with pytest.raises(ValueError, match="score must be one of"):
        edge_attention(q, q, q, ei, score="cosine")
    with pytest.raises(ValueError, match="k must have shape"):
        edge_attention(q, torch.randn(4, 2, 2), q, ei)
    with pytest.raises(ValueError, match="refers to node 7"):
        edge_attention(q, q, q, torch.tensor([[0, 7], [1, 2]]))
    with pytest.raises(ValueError, match="negative"):
        edge_attention(q, q, q, torch.tensor([[0, -1], [1, 2]]))
    with pytest.raises(TypeError, match="integer dtype"):
        edge_attention(q, q, q, ei.float())
    with pytest.raises(ValueError, match=r"shape \(2, E\)"):
        edge_attention(q, q, q, torch.tensor([[0, 1, 2]]))
    with pytest.raises(ValueError, match="bias must have shape"):
        edge_attention(q, q, q, ei, bias=torch.randn(3, 2))
    with pytest.raises(ValueError, match="needs att"):
        edge_attention(q, q, q, ei, score="additive")
    with pytest.raises(ValueError, match="impl='fused' supports only"):
        edge_attention(q, q, q, ei, score="additive", att=torch.randn(2, 3), impl="fused")
    with pytest.raises(ValueError, match="impl='fused' supports only"):
        edge_attention(q, q, q, ei, dropout=0.5, impl="fused")


def test_csr_is_cached_per_tensor_and_invalidated_by_inplace_edits():
    clear_csr_cache()
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    a = to_csr(ei, 3)
    assert to_csr(ei, 3) is a
    assert to_csr(ei.clone(), 3) is not a
    ei[0, 0] = 2  # in-place edit bumps the version counter
    b = to_csr(ei, 3)
    assert b is not a
    assert sorted(zip(b.row.tolist(), b.col.tolist())) == [(0, 2), (1, 2), (2, 1)]


def _t(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_()


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


def test_sdpa_path_fails_loudly_on_double_backward():
    """Complete graphs through SDPA: PyTorch's CPU flash kernel has no 2nd derivative; it
    must raise, never return a wrong number."""
    ei = torch.cartesian_prod(torch.arange(3), torch.arange(3)).T.contiguous()
    q = _t(3, 1, 2, seed=12)
    g, = torch.autograd.grad(edge_attention(q, q, q, ei, impl="dense").pow(2).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="not implemented"):
        g.pow(2).sum().backward()


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

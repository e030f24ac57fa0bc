import math

import pytest
import torch

import graphattn.ops.chunked as chunked
from graphattn.ops import extension
from graphattn.ops.csr import clear_csr_cache, to_csr
from graphattn.functional import dense_attention, edge_attention
from graphattn.testing import dense_mask_and_bias, random_graph

IMPLS = ["chunked"] + (["fused"] if extension.fused_available() else [])


def dense_ref(q, k, v, edge_index, bias=None):
    """Edge attention through the dense reference: (N, H, C) in, (N, H, C) out."""
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

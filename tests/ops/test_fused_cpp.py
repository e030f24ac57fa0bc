"""Fused C++ edge-attention kernel vs a plain torch reference (values and gradients)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from graphattn import GraphSelfAttention, dense_attention, edge_attention, to_csr
from graphattn.functional import edge_attention_prechecked
from graphattn.ops import extension
from graphattn.ops import fused_cpp as kernels
from graphattn.ops.chunked import ChunkedEdgeAttention

pytestmark = pytest.mark.skipif(
    not extension.fused_available(),
    reason=f"fused C++ kernel unavailable (no compiler/ninja or GRAPHATTN_NO_CPP=1): {extension.build_error()}",
)


# ----------------------------------------------------------------------------- reference
def reference_attention(q, k, v, csr, bias=None, scale=None):
    """Per-edge scores, softmax via scatter (max subtracted), aggregation with index_add."""
    N, H, C = q.shape
    if scale is None:
        scale = C ** -0.5
    row, col = csr.row, csr.col
    s = (q[row] * k[col]).sum(-1) * scale  # (E, H)
    if bias is not None:
        s = s + bias
    m = torch.full((N, H), float("-inf"), dtype=s.dtype)
    m = m.scatter_reduce(0, row[:, None].expand(-1, H), s.detach(), "amax", include_self=True)
    p = torch.exp(s - m[row])
    denom = torch.zeros(N, H, dtype=s.dtype).index_add(0, row, p)
    a = p / denom[row]
    return torch.zeros(N, H, C, dtype=q.dtype).index_add(0, row, a[..., None] * v[col])


# ----------------------------------------------------------------------------- graphs
def make_graph(kind: str, gen: torch.Generator):
    """Return (edge_index, N) for a named family of (degenerate) graphs."""
    r = lambda lo, hi: int(torch.randint(lo, hi, (1,), generator=gen))  # noqa: E731
    if kind == "zero_nodes":
        return torch.empty(2, 0, dtype=torch.long), 0
    if kind == "one_node":
        return torch.empty(2, 0, dtype=torch.long), 1
    if kind == "one_node_self_loop":
        return torch.zeros(2, r(1, 4), dtype=torch.long), 1
    if kind == "zero_edges":
        return torch.empty(2, 0, dtype=torch.long), r(1, 20)
    N = r(2, 40)
    E = r(1, 4 * N)
    ei = torch.randint(0, N, (2, E), generator=gen)
    if kind == "isolated":  # only the first half of the nodes receive/send edges
        ei = torch.randint(0, max(1, N // 2), (2, E), generator=gen)
    elif kind == "self_loops":
        loops = torch.arange(N).repeat(2, 1)
        ei = torch.cat([ei, loops], 1)
    elif kind == "duplicates":
        ei = torch.cat([ei, ei[:, : max(1, E // 2)], ei[:, :1].repeat(1, 5)], 1)
    elif kind == "hub":  # node 0 receives from everyone (many times), and sends to everyone
        srcs = torch.randint(0, N, (20 * N,), generator=gen)
        ei = torch.cat([ei, torch.stack([srcs, torch.zeros_like(srcs)]),
                        torch.stack([torch.zeros(N, dtype=torch.long), torch.arange(N)])], 1)
    # shuffle edge order so that the CSR permutation is exercised
    ei = ei[:, torch.randperm(ei.shape[1], generator=gen)]
    return ei, N


KINDS = ["random", "isolated", "self_loops", "duplicates", "hub", "zero_edges", "one_node",
         "one_node_self_loop", "zero_nodes", "huge_logits"]
CASES = [(kind, seed) for seed in range(6) for kind in KINDS]  # 60 graphs


def _inputs(N, E, H, C, gen, dtype=torch.float64, logit_scale=1.0, with_bias=True):
    q = (torch.randn(N, H, C, generator=gen, dtype=dtype) * logit_scale).requires_grad_()
    k = (torch.randn(N, H, C, generator=gen, dtype=dtype) * logit_scale).requires_grad_()
    v = torch.randn(N, H, C, generator=gen, dtype=dtype).requires_grad_()
    bias = torch.randn(E, H, generator=gen, dtype=dtype).requires_grad_() if with_bias else None
    return q, k, v, bias


def _run(fn, q, k, v, bias, csr, scale, dout):
    leaves = [q, k, v] + ([bias] if bias is not None else [])
    out = fn(q, k, v, csr, bias=bias, scale=scale)
    grads = torch.autograd.grad(out, leaves, dout, allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g for x, g in zip(leaves, grads)]
    return out.detach(), grads


@pytest.fixture(params=["stored", "recomputed"])
def pds(request):
    """Both ways backward gets (p, ds) in its second pass: stored by pass 1 or recomputed."""
    old = kernels.set_pds_budget(2 ** 26 if request.param == "stored" else 0)
    yield request.param
    kernels.set_pds_budget(old)


@pytest.mark.parametrize("kind,seed", CASES)
def test_matches_reference_float64(kind, seed, pds):
    gen = torch.Generator().manual_seed(1000 * seed + KINDS.index(kind))
    ei, N = make_graph("random" if kind == "huge_logits" else kind, gen)
    csr = to_csr(ei, N, cache=False)
    E = csr.num_edges
    H = [1, 2, 4][seed % 3]
    C = [3, 8, 16, 32][seed % 4]
    if kind == "huge_logits":
        # scores ~ 1e4 (q, k ~ 20 -> |q.k| ~ 400*sqrt(C)*... scaled up further by `scale`)
        q, k, v, bias = _inputs(N, E, H, C, gen, logit_scale=25.0)
        scale = 5.0
        bias = (bias.detach() * 1e4).requires_grad_()
    else:
        q, k, v, bias = _inputs(N, E, H, C, gen, with_bias=seed % 2 == 0)
        scale = None if seed % 3 else 0.7
    dout = torch.randn(N, H, C, generator=gen, dtype=torch.float64)

    out_f, g_f = _run(kernels.fused_edge_attention, q, k, v, bias, csr, scale, dout)
    out_r, g_r = _run(reference_attention, q, k, v, bias, csr, scale, dout)
    assert out_f.shape == (N, H, C)
    assert torch.isfinite(out_f).all()
    torch.testing.assert_close(out_f, out_r, rtol=1e-9, atol=1e-9)
    for name, a, b in zip("qkvb", g_f, g_r):
        assert torch.isfinite(a).all(), name
        # with huge logits gradients are O(1e4): compare relative to their magnitude
        tol = 1e-9 * max(1.0, float(b.abs().max()) if b.numel() else 1.0)
        torch.testing.assert_close(a, b, rtol=1e-10, atol=tol, msg=f"grad {name} ({kind})")

    # nodes without incoming edges get exactly 0, and no gradient flows into their q
    isolated = csr.degree() == 0
    if isolated.any():
        assert (out_f[isolated] == 0).all()
        assert (g_f[0][isolated] == 0).all()


def test_gradcheck_tiny():
    gen = torch.Generator().manual_seed(0)
    ei = torch.tensor([[0, 1, 2, 2, 3, 0, 1], [1, 0, 1, 1, 0, 3, 1]])
    N = 5  # node 2 and 4 receive nothing
    csr = to_csr(ei, N, cache=False)
    q, k, v, bias = _inputs(N, csr.num_edges, 2, 3, gen)
    fn = lambda q, k, v, b: kernels.fused_edge_attention(q, k, v, csr, bias=b)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v, bias), eps=1e-6, atol=1e-6)


def test_float32_close_to_float64():
    gen = torch.Generator().manual_seed(3)
    N, E, H, C = 500, 6000, 4, 32
    ei = torch.randint(0, N, (2, E), generator=gen)
    csr = to_csr(ei, N, cache=False)
    q, k, v, bias = _inputs(N, E, H, C, gen)
    dout = torch.randn(N, H, C, generator=gen, dtype=torch.float64)
    out_r, g_r = _run(reference_attention, q, k, v, bias, csr, None, dout)
    f32 = [x.detach().float().requires_grad_() for x in (q, k, v, bias)]
    out_f, g_f = _run(kernels.fused_edge_attention, *f32, csr, None, dout.float())
    assert out_f.dtype == torch.float32 and all(g.dtype == torch.float32 for g in g_f)
    torch.testing.assert_close(out_f.double(), out_r, rtol=1e-4, atol=1e-5)
    for name, a, b in zip("qkvb", g_f, g_r):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4, msg=f"grad {name}")


def test_partial_requires_grad_and_multithreaded_large():
    """Only some inputs need grad; a graph large enough to take the OpenMP path."""
    gen = torch.Generator().manual_seed(5)
    N, E, H, C = 3000, 40000, 2, 16
    ei = torch.randint(0, N, (2, E), generator=gen)
    csr = to_csr(ei, N, cache=False)
    q, k, v, _ = _inputs(N, E, H, C, gen)
    q.requires_grad_(False)
    dout = torch.randn(N, H, C, generator=gen, dtype=torch.float64)
    out_f = kernels.fused_edge_attention(q, k, v, csr)
    gk, gv = torch.autograd.grad(out_f, [k, v], dout)
    out_r = reference_attention(q, k, v, csr)
    rk, rv = torch.autograd.grad(out_r, [k, v], dout)
    torch.testing.assert_close(out_f, out_r, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(gk, rk, rtol=1e-8, atol=1e-9)
    torch.testing.assert_close(gv, rv, rtol=1e-8, atol=1e-9)
    # deterministic across calls (no atomics, no races)
    out_2 = kernels.fused_edge_attention(q, k, v, csr)
    assert torch.equal(out_f, out_2)
    assert torch.equal(torch.autograd.grad(out_2, [k], dout)[0], gk)


def test_masked_rows_are_zero_not_nan():
    """A target whose every incoming score is -inf (masked by bias) behaves like isolated."""
    ei = torch.tensor([[1, 2, 0, 2], [0, 0, 1, 1]])
    csr = to_csr(ei, 3, cache=False)
    gen = torch.Generator().manual_seed(1)
    q, k, v, _ = _inputs(3, 4, 1, 4, gen)
    bias = torch.zeros(4, 1, dtype=torch.float64)
    bias[csr.row == 0] = float("-inf")
    bias.requires_grad_()
    out = kernels.fused_edge_attention(q, k, v, csr, bias=bias)
    assert (out[0] == 0).all() and torch.isfinite(out).all()
    grads = torch.autograd.grad(out.sum(), [q, k, v, bias])
    assert all(torch.isfinite(g).all() for g in grads)


def test_overflowing_scores_give_nan_as_every_path_does():
    """A +inf or NaN score (finite inputs whose product overflows) is NaN in its row, as in the
    chunked and dense paths, not a silently zeroed head; other rows and masked rows are unchanged."""
    q = torch.full((2, 1, 1), 1e20)
    ei = torch.tensor([[0, 1], [1, 1]])
    outs = [edge_attention(q, q.clone(), torch.ones(2, 1, 1), ei, impl=impl).flatten() for impl in ("fused", "chunked")]
    for out in outs:
        assert out[0] == 0 and torch.isnan(out[1])
    ei = torch.tensor([[0, 1, 1], [1, 1, 0]])
    bias = torch.tensor([[float("nan")], [0.0], [0.0]])  # a NaN bias on one edge of target 1
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 1, 3, generator=gen) for _ in range(3))
    out = edge_attention_prechecked(q, k, v, ei, bias=bias, impl="fused")
    ref = edge_attention_prechecked(q, k, v, ei, bias=bias, impl="chunked")
    assert torch.isnan(out[1]).all() and torch.isfinite(out[0]).all()
    torch.testing.assert_close(out, ref, equal_nan=True)


def test_input_validation():
    csr = to_csr(torch.tensor([[0], [1]]), 2, cache=False)
    q = torch.randn(2, 1, 4)
    with pytest.raises(ValueError):
        kernels.fused_edge_attention(q, q, q[:1], csr)
    with pytest.raises(TypeError):  # float16/bfloat16 run (tests/ops/test_low_precision.py)
        kernels.fused_edge_attention(q.half(), q.half(), q.float(), csr)
    with pytest.raises(TypeError):
        kernels.fused_edge_attention(q.int(), q.int(), q.int(), csr)
    with pytest.raises(ValueError):
        kernels.fused_edge_attention(q, q, q, csr, bias=torch.zeros(2, 1))


def _python(code: str, timeout: float = 120, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, timeout=timeout)


#: where the direct-compiler build of the no-ninja test is kept between runs (next to the default build
#: folder; keyed on the sources like it): the compile happens once per machine, not once per test run
DIRECT_BUILD_DIR = extension.build_directory().parent.parent / "torch_extensions_direct"


def test_no_cpp_env_forces_fallback():
    res = _python("""
        import warnings
        from graphattn.ops import extension
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            a = extension.fused_available()  # must not even try (hence not warn)
        print("AVAILABLE", a, "WARNINGS", len(w), "TRIED", extension._TRIED)
    """, GRAPHATTN_NO_CPP="1")
    assert res.returncode == 0, res.stderr
    assert "AVAILABLE False WARNINGS 0 TRIED False" in res.stdout, res.stdout + res.stderr


def test_build_failure_returns_false_and_warns_once(tmp_path):
    res = _python("""
        import warnings
        from graphattn.ops import extension
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            a, b = extension.fused_available(), extension.fused_available()
        print("AVAILABLE", a, b, "WARNINGS", sum("fused C++" in str(x.message) for x in w))
    """, CXX="/nonexistent/c++", GRAPHATTN_BUILD_DIR=str(tmp_path), GRAPHATTN_NO_CPP="0")
    assert res.returncode == 0, res.stderr
    assert "AVAILABLE False False WARNINGS 1" in res.stdout, res.stdout + res.stderr


def test_build_without_ninja():
    """The direct-compiler route (used when ninja is missing) builds a working kernel (compiled once,
    then loaded from :data:`DIRECT_BUILD_DIR`; a first build on a loaded machine can take minutes)."""
    res = _python("""
        import torch
        from graphattn.ops import extension, fused_cpp as kernels
        from graphattn.ops.csr import to_csr
        assert extension.fused_available(), extension.build_error()
        csr = to_csr(torch.tensor([[0, 1, 2, 2], [1, 0, 1, 1]]), 4)
        q = torch.randn(4, 2, 3, dtype=torch.float64, requires_grad=True)
        out = kernels.fused_edge_attention(q, q * 2, q * 3, csr)
        out.sum().backward()
        print("OK", tuple(out.shape), bool(torch.isfinite(q.grad).all()), bool((out[2:] == 0).all()))
    """, timeout=900, GRAPHATTN_NO_NINJA="1", GRAPHATTN_BUILD_DIR=str(DIRECT_BUILD_DIR), GRAPHATTN_NO_CPP="0")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "OK (4, 2, 3) True True" in res.stdout, res.stdout + res.stderr
    assert list(DIRECT_BUILD_DIR.glob("*/graphattn_edge_attention_direct.so"))


# ------------------------------------------------------------------ per-edge key / value additions
def dense_edge_reference(q, k, v, edge_index, bias=None, edge_key=None, edge_value=None):
    """Through :func:`dense_attention`, with one key per *edge*: key_e = k_j + ek_e, value_e =
    v_j + ev_e, visible only to its target (exact for duplicate edges too). Also returns the
    weights (E, H), read off by attending to one-hot values."""
    N, H, C = q.shape
    src, dst = edge_index
    E = src.numel()
    keys = k[src] + (edge_key if edge_key is not None else 0)  # (E, H, C)
    vals = v[src] + (edge_value if edge_value is not None else 0)  # (E, H, C)
    onehot = (dst[None, :] == torch.arange(N)[:, None]).to(q.dtype)  # (N, E)
    mask = onehot.bool()[None]  # (1, N, E)
    dbias = None if bias is None else (bias.t()[:, None, :] * onehot[None])[None]  # (1, H, N, E)
    to_b = lambda t: t.permute(1, 0, 2)[None]  # noqa: E731  (X, H, C) -> (1, H, X, C)
    out = dense_attention(to_b(q), to_b(keys), to_b(vals), mask, dbias)[0].permute(1, 0, 2)
    eye = torch.eye(E, dtype=q.dtype).expand(1, H, E, E)
    alpha = dense_attention(to_b(q), to_b(keys), eye, mask, dbias)[0]  # (H, N, E)
    weights = alpha[:, dst, torch.arange(E)].t() if E else q.new_zeros(0, H)  # (E, H)
    return out, weights.detach()


EDGE_MODES = ["key", "value", "both", "shared"]
EDGE_KINDS = ["random", "isolated", "self_loops", "duplicates", "hub", "zero_edges", "one_node",
              "one_node_self_loop", "zero_nodes"]


def _edge_inputs(mode, N, E, H, C, gen, with_bias):
    q, k, v, bias = _inputs(N, E, H, C, gen, with_bias=with_bias)
    mk = lambda: torch.randn(E, H, C, generator=gen, dtype=torch.float64).requires_grad_()  # noqa: E731
    ek = mk() if mode in ("key", "both", "shared") else None
    ev = {"value": mk, "both": mk, "shared": lambda: ek}.get(mode, lambda: None)()
    return q, k, v, bias, ek, ev


@pytest.mark.parametrize("mode", EDGE_MODES)
@pytest.mark.parametrize("kind", EDGE_KINDS)
def test_edge_features_match_dense_reference(kind, mode):
    gen = torch.Generator().manual_seed(17 * EDGE_KINDS.index(kind) + EDGE_MODES.index(mode))
    ei, N = make_graph(kind, gen)
    csr = to_csr(ei, N, cache=False)
    E = csr.num_edges
    H, C = 1 + EDGE_KINDS.index(kind) % 3, [2, 5, 8][EDGE_MODES.index(mode) % 3]
    for with_bias in (False, True):
        q, k, v, bias, ek, ev = _edge_inputs(mode, N, E, H, C, gen, with_bias)
        leaves = [t for t in (q, k, v, bias, ek, ev if mode != "shared" else None) if t is not None]
        dout = torch.randn(N, H, C, generator=gen, dtype=torch.float64)
        out, w = kernels.fused_edge_attention(q, k, v, csr, bias=bias, edge_key=ek, edge_value=ev,
                                              return_attention_weights=True, edge_order="input")
        ref, ref_w = dense_edge_reference(q, k, v, ei, bias, ek, ev)
        torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(w, ref_w, rtol=1e-9, atol=1e-10)
        assert not w.requires_grad and w.shape == (E, H)
        g_f = torch.autograd.grad(out, leaves, dout, allow_unused=True)
        g_r = (torch.autograd.grad(ref, leaves, dout, allow_unused=True) if ref.requires_grad
               else [None] * len(leaves))  # no edges: the reference is constant zeros
        for i, (a, b) in enumerate(zip(g_f, g_r)):
            a = torch.zeros_like(leaves[i]) if a is None else a
            b = torch.zeros_like(leaves[i]) if b is None else b
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10, msg=f"grad {i} ({kind}, {mode})")
        isolated = csr.degree() == 0
        assert (out[isolated] == 0).all()


def test_edge_features_csr_order_equals_input_order():
    gen = torch.Generator().manual_seed(8)
    ei, N = make_graph("duplicates", gen)
    csr = to_csr(ei, N, cache=False)
    q, k, v, bias, ek, ev = _edge_inputs("both", N, csr.num_edges, 2, 4, gen, True)
    a, wa = kernels.fused_edge_attention(q, k, v, csr, bias=bias, edge_key=ek, edge_value=ev,
                                         return_attention_weights=True, edge_order="input")
    p = csr.perm
    b, wb = kernels.fused_edge_attention(q, k, v, csr, bias=bias[p], edge_key=ek[p], edge_value=ev[p],
                                         return_attention_weights=True)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-13)
    torch.testing.assert_close(wa[p], wb, rtol=0, atol=1e-13)
    with pytest.raises(ValueError, match="edge_order"):
        kernels.fused_edge_attention(q, k, v, csr, edge_order="sorted")
    with pytest.raises(ValueError, match="edge_key must have shape"):
        kernels.fused_edge_attention(q, k, v, csr, edge_key=ek[:1])


@pytest.mark.parametrize("mode", ["both", "shared"])
def test_edge_features_gradcheck(mode):
    gen = torch.Generator().manual_seed(9)
    ei = torch.tensor([[0, 1, 2, 2, 3, 0, 1, 1], [1, 0, 1, 1, 0, 3, 1, 1]])
    N = 5  # nodes 2 and 4 receive nothing; duplicates and a self-loop
    csr = to_csr(ei, N, cache=False)
    q, k, v, bias, ek, ev = _edge_inputs(mode, N, csr.num_edges, 2, 3, gen, True)
    if mode == "shared":
        fn = lambda q, k, v, b, e: kernels.fused_edge_attention(  # noqa: E731
            q, k, v, csr, bias=b, edge_key=e, edge_value=e, edge_order="input")
        args = (q, k, v, bias, ek)
    else:
        fn = lambda q, k, v, b, e1, e2: kernels.fused_edge_attention(  # noqa: E731
            q, k, v, csr, bias=b, edge_key=e1, edge_value=e2, edge_order="input")
        args = (q, k, v, bias, ek, ev)
    assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-6)


def test_edge_features_multithreaded_deterministic():
    """Large enough for the OpenMP path (and the int32 CSC); float32 close to float64."""
    gen = torch.Generator().manual_seed(10)
    N, E, H, C = 3000, 40000, 2, 16
    ei = torch.randint(0, N, (2, E), generator=gen)
    csr = to_csr(ei, N, cache=False)
    q, k, v, bias, ek, _ = _edge_inputs("key", N, E, H, C, gen, True)
    dout = torch.randn(N, H, C, generator=gen, dtype=torch.float64)
    run = lambda *t: torch.autograd.grad(  # noqa: E731
        kernels.fused_edge_attention(*t[:3], csr, bias=t[3], edge_key=t[4], edge_value=t[4],
                                     edge_order="input"), t, dout.to(t[0].dtype))
    g1, g2 = run(q, k, v, bias, ek), run(q, k, v, bias, ek)
    assert all(torch.equal(a, b) for a, b in zip(g1, g2))  # no atomics, no races
    f32 = [t.detach().float().requires_grad_() for t in (q, k, v, bias, ek)]
    for a, b in zip(run(*f32), g1):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)
    cptr, cperm, ctgt = kernels.csc_arrays(csr)
    assert cperm.dtype == torch.int32 and ctgt.dtype == torch.int32
    csc = csr.csc  # the int64 CSC of graphattn.ops.csr, for comparison
    assert torch.equal(cptr, csc.rowptr) and torch.equal(cperm.long(), csc.perm)
    assert torch.equal(ctgt.long(), csc.col)


def test_graph_self_attention_with_edge_dim_uses_fused_kernel(monkeypatch):
    calls = []
    real = kernels.fused_edge_attention
    monkeypatch.setattr(kernels, "fused_edge_attention", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    gen = torch.Generator().manual_seed(11)
    N, E, D = 40, 160, 6
    ei = torch.randint(0, N, (2, E), generator=gen)
    x, ea = torch.randn(N, 16, generator=gen), torch.randn(E, D, generator=gen)
    ab = torch.randn(E, 4, generator=gen)
    torch.manual_seed(0)
    layer = GraphSelfAttention(16, 8, heads=4, edge_dim=D)
    torch.manual_seed(0)
    ref_layer = GraphSelfAttention(16, 8, heads=4, edge_dim=D, impl="chunked")
    out, (_, alpha) = layer(x, ei, ea, return_attention_weights=True, attn_bias=ab)
    assert len(calls) == 1 and calls[0]["edge_key"] is not None and calls[0]["bias"] is not None
    ref, (_, ref_alpha) = ref_layer(x, ei, ea, return_attention_weights=True, attn_bias=ab)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(alpha, ref_alpha, rtol=1e-5, atol=1e-6)
    out.square().sum().backward()
    ref.square().sum().backward()
    for (name, p), p_ref in zip(layer.named_parameters(), ref_layer.parameters()):
        torch.testing.assert_close(p.grad, p_ref.grad, rtol=1e-4, atol=1e-5, msg=name)
    # active dropout is the one thing that still takes the chunked path
    monkeypatch.setattr(ChunkedEdgeAttention, "apply", lambda *a: pytest.fail("chunked used"))
    GraphSelfAttention(16, 8, heads=4, edge_dim=D, dropout=0.5).eval()(x, ei, ea)
    assert len(calls) == 2


# ------------------------------------------------------------------ stale build lock
def test_stale_lock_is_removed_fresh_lock_is_waited_for(tmp_path):
    assert extension.clear_stale_lock(tmp_path) is False  # no lock: nothing to do
    lock = tmp_path / "lock"
    lock.touch()
    old = os.path.getmtime(lock) - 3600
    os.utime(lock, (old, old))
    with pytest.warns(RuntimeWarning, match="stale build lock"):
        assert extension.clear_stale_lock(tmp_path) is True
    assert not lock.exists()
    lock.touch()  # a live build's lock: waited for until it is older than max_age
    with pytest.warns(RuntimeWarning, match="stale build lock"):
        assert extension.clear_stale_lock(tmp_path, max_age=0.3, poll=0.05) is True
    assert not lock.exists()


def test_load_does_not_hang_on_a_stale_lock(tmp_path):
    src = extension.build_directory()
    if not (src / "build.ninja").exists():
        pytest.skip("kernel was not built through ninja / cpp_extension.load")
    dst = tmp_path / src.name
    shutil.copytree(src, dst)  # the cached build (mtimes kept): ninja has nothing to redo
    (dst / "lock").touch()
    os.utime(dst / "lock", (0, 0))  # left behind by a build killed long ago
    res = _python("""
        from graphattn.ops import extension
        print("AVAILABLE", extension.fused_available(), extension.build_error())
    """, GRAPHATTN_BUILD_DIR=str(tmp_path), GRAPHATTN_NO_CPP="0")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "AVAILABLE True" in res.stdout and "stale build lock" in res.stderr, res.stdout + res.stderr
    assert not (dst / "lock").exists()


def test_build_directory_depends_on_the_sources_location(tmp_path, monkeypatch):
    """torch's build.ninja names the sources by absolute path: two copies of the package (a venv
    and a clone) must not share a build folder, or each switch recompiles (~20 s)."""
    here = extension.build_directory()
    copies = []
    for p in extension._SOURCES:
        q = tmp_path / p.name
        q.write_bytes(p.read_bytes())
        copies.append(q)
    monkeypatch.setattr(extension, "_SOURCES", copies)
    assert extension.build_directory() != here and extension.build_directory().parent == here.parent

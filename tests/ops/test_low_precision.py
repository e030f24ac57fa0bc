"""float16 / bfloat16 on the fused kernels: q, k, v, outputs and gradients in the input dtype,
float32 accumulation and log-sum-exp, against float64 references.

The low-precision inputs are float64 values rounded to the dtype, and the references run in
float64 on those very values: what is left is the kernels' own error (accumulation, the final
rounding of outputs and gradients), bounded relative to each tensor's magnitude: 2e-2 for
bfloat16 (8 significant bits), 2e-3 for float16 (11 bits).
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from graphattn import GraphSelfAttention, dense_attention, to_csr
from graphattn.ops import extension
from graphattn.ops import fused_cpp as kernels
from graphattn.ops import fused_triton as ta
from graphattn.testing import dense_mask_and_bias

CPP = pytest.mark.skipif(not extension.fused_available(),
                         reason=f"fused C++ kernel unavailable: {extension.build_error()}")
TOL = {torch.bfloat16: 2e-2, torch.float16: 2e-3}
HALF = [torch.bfloat16, torch.float16]


def per_edge_reference(q, k, v, ei, bias=None, edge_key=None, edge_value=None, scale=None):
    """float64 edge attention with per-edge tensors in ``ei``'s order (max subtracted)."""
    N, H, C = q.shape
    scale = C ** -0.5 if scale is None else scale
    src, dst = ei[0], ei[1]
    key = k[src] if edge_key is None else k[src] + edge_key  # (E, H, C)
    val = v[src] if edge_value is None else v[src] + edge_value  # (E, H, C)
    s = (q[dst] * key).sum(-1) * scale  # (E, H)
    if bias is not None:
        s = s + bias
    m = torch.full((N, H), float("-inf"), dtype=s.dtype)
    m = m.scatter_reduce(0, dst[:, None].expand(-1, H), s.detach(), "amax", include_self=True)
    p = torch.exp(s - m[dst])
    a = p / torch.zeros(N, H, dtype=s.dtype).index_add(0, dst, p)[dst]
    return torch.zeros(N, H, C, dtype=q.dtype).index_add(0, dst, a[..., None] * val)


def _graph(N, E, gen):
    """Random edges into the first N - 3 nodes (the last three receive nothing), shuffled."""
    return torch.stack([torch.randint(0, N, (E,), generator=gen), torch.randint(0, N - 3, (E,), generator=gen)])


def _assert_close(got, ref, dtype, what):
    assert got.dtype == dtype, f"{what}: dtype {got.dtype}"
    assert torch.isfinite(got).all(), what
    # at least 1e-2: with ~1e3 scores the weights are almost one-hot, gradients of k almost 0, and
    # the float32 cancellation in ds = p (dp - D) sets an absolute, not a relative, error floor
    scale = max(float(ref.abs().max()), 1e-2) if ref.numel() else 1.0
    err = float((got.detach().double() - ref).abs().max()) if ref.numel() else 0.0
    assert err <= TOL[dtype] * scale, f"{what}: max error {err:.3g} vs scale {scale:.3g} ({dtype})"


def _compare(fn, leaves64, names, dtype, dout64, ref_fn):
    """Run ``fn`` on ``leaves64`` rounded to ``dtype`` and ``ref_fn`` on the same values in
    float64; compare the outputs and every gradient."""
    low = [t.to(dtype).requires_grad_(True) for t in leaves64]
    ref_in = [t.detach().double().requires_grad_(True) for t in low]
    out = fn(*low)
    grads = torch.autograd.grad(out, low, dout64.to(dtype))
    ref = ref_fn(*ref_in)
    ref_grads = torch.autograd.grad(ref, ref_in, dout64.to(dtype).double())
    _assert_close(out, ref.detach(), dtype, "out")
    for name, g, r in zip(names, grads, ref_grads):
        _assert_close(g, r, dtype, f"grad {name}")
    return out


@CPP
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("features", ["plain", "bias", "edge_kv", "shared_kv"])
@pytest.mark.parametrize("pds", ["stored", "recomputed"])
def test_cpp_matches_float64(dtype, features, pds):
    """Forward and every gradient of the C++ kernel in half precision: close to float64, isolated
    nodes exactly 0; both ways backward gets (p, ds) (stored, recomputed from lse)."""
    gen = torch.Generator().manual_seed(HALF.index(dtype) * 10 + len(features))
    N, E, H, C = 60, 500, 2, 16
    ei = _graph(N, E, gen)
    csr = to_csr(ei, N, cache=False)
    rnd = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    leaves, names = [rnd(N, H, C), rnd(N, H, C), rnd(N, H, C)], ["q", "k", "v"]
    if features in ("bias",):
        leaves.append(rnd(E, H)), names.append("bias")
    if features in ("edge_kv", "shared_kv"):
        leaves.append(rnd(E, H, C)), names.append("edge_key")
    if features == "edge_kv":
        leaves.append(rnd(E, H, C)), names.append("edge_value")

    def kw(extra):
        if features == "bias":
            return dict(bias=extra[0])
        if features == "edge_kv":
            return dict(edge_key=extra[0], edge_value=extra[1])
        return dict(edge_key=extra[0], edge_value=extra[0]) if features == "shared_kv" else {}

    fused = lambda q, k, v, *x: kernels.fused_edge_attention(q, k, v, csr, edge_order="input", **kw(x))  # noqa: E731
    ref = lambda q, k, v, *x: per_edge_reference(q, k, v, ei, **kw(x))  # noqa: E731
    old = kernels.set_pds_budget(2 ** 26 if pds == "stored" else 0)
    try:
        out = _compare(fused, leaves, names, dtype, rnd(N, H, C), ref)
    finally:
        kernels.set_pds_budget(old)
    assert (out[-3:] == 0).all()  # no incoming edge: exactly zero


@CPP
@pytest.mark.parametrize("dtype", HALF)
def test_cpp_large_logits_match_dense_float64(dtype):
    """Scores of ~1e3 (exp overflows float16 above 11 and bfloat16 above 88 without the max
    subtracted): finite and close to the dense float64 reference, gradients too."""
    gen = torch.Generator().manual_seed(7)
    N, E, H, C = 40, 300, 2, 8
    ei = torch.unique(_graph(N, E, gen), dim=1)  # unique edges: the dense mask has one cell each
    E = ei.size(1)
    csr = to_csr(ei, N, cache=False)
    q, k = (30.0 * torch.randn(N, H, C, generator=gen, dtype=torch.float64) for _ in range(2))
    v = torch.randn(N, H, C, generator=gen, dtype=torch.float64)
    bias = 100.0 * torch.randn(E, H, generator=gen, dtype=torch.float64)
    s = (q[ei[1]] * k[ei[0]]).sum(-1) * C ** -0.5 + bias
    assert float(s.abs().max()) > 1e3

    def dense(q, k, v, b):
        mask, dbias = dense_mask_and_bias(ei, N, b)
        to_b = lambda t: t.permute(1, 0, 2)[None]  # noqa: E731  (1, H, N, C)
        return dense_attention(to_b(q), to_b(k), to_b(v), mask[None], dbias[None])[0].permute(1, 0, 2)

    fused = lambda q, k, v, b: kernels.fused_edge_attention(q, k, v, csr, bias=b, edge_order="input")  # noqa: E731
    _compare(fused, [q, k, v, bias], ["q", "k", "v", "bias"], dtype,
             torch.randn(N, H, C, generator=gen, dtype=torch.float64), dense)


@CPP
@pytest.mark.parametrize("dtype", HALF)
def test_cpp_lse_and_weights_dtypes(dtype):
    """The op's outputs: ``out`` and weights in the input dtype, lse float32 (float64 stays
    float64); the fake implementation (torch.compile's view of the op) says the same."""
    gen = torch.Generator().manual_seed(1)
    ei = _graph(10, 30, gen)
    csr = to_csr(ei, 10, cache=False)
    for dt in (dtype, torch.float64):
        q = torch.randn(10, 2, 4, generator=gen).to(dt)
        out, lse, w = kernels.fused_attention_fwd(q, q, q, None, None, None, None, csr.rowptr, csr.col,
                                                  None, None, None, 0.5, False, True)
        want_lse = torch.float64 if dt == torch.float64 else torch.float32
        assert (out.dtype, lse.dtype, w.dtype) == (dt, want_lse, dt)
        sums = torch.zeros(10, 2, dtype=torch.float64).index_add_(0, csr.row, w.double())  # (N, H), CSR order
        has = csr.degree() > 0
        torch.testing.assert_close(sums[has], torch.ones_like(sums[has]), atol=1e-2, rtol=0)
        with FakeTensorMode() as mode:
            fq, frp, fcol = (mode.from_tensor(t) for t in (q, csr.rowptr, csr.col))
            fout, flse, fw = kernels.fused_attention_fwd(fq, fq, fq, None, None, None, None, frp, fcol,
                                                         None, None, None, 0.5, False, True)
        assert (fout.dtype, flse.dtype, fw.dtype) == (dt, want_lse, dt)


def test_triton_fake_dtypes():
    """The Triton ops' fake implementations: output in the input dtype, lse and the output kept
    for the backward float32."""
    with FakeTensorMode():
        q = torch.empty(6, 2, 4, dtype=torch.bfloat16)
        rowptr, col = torch.zeros(7, dtype=torch.long), torch.zeros(0, dtype=torch.long)
        out, lse, out32 = ta.triton_attention_fwd(q, q, q, None, None, None, col, rowptr, col, None, None,
                                                  None, 0.5, False)
    assert (out.dtype, lse.dtype, out32.dtype) == (torch.bfloat16, torch.float32, torch.float32)
    assert out32.shape == out.shape


def _layer_runs(dtype_seen, monkeypatch):
    """Record the dtype of q at every C++ forward call."""
    forward = kernels._forward

    def spy(q, *args):
        dtype_seen.append(q.dtype)
        return forward(q, *args)

    monkeypatch.setattr(kernels, "_forward", spy)


@CPP
def test_layer_under_cpu_autocast_runs_bfloat16_kernel(monkeypatch):
    """Under ``torch.autocast("cpu", bfloat16)`` the projections give bfloat16 q, k, v and edge
    features, the attention runs the bfloat16 kernel (not upcast) and the output is bfloat16,
    close to float32 eager; parameter gradients stay float32 and close too."""
    torch.manual_seed(0)
    N, E = 80, 600
    x, ei, ea = torch.randn(N, 16), torch.randint(0, N, (2, E)), torch.randn(E, 8)
    attn_bias = torch.randn(E, 4)  # float32: cast to q's dtype for the kernel
    layer = GraphSelfAttention(16, 32, heads=4, edge_dim=8)
    ref = layer(x, ei, ea, attn_bias=attn_bias)
    ref_grads = torch.autograd.grad(ref.square().sum(), list(layer.parameters()))
    ref = ref.detach()
    seen = []
    _layer_runs(seen, monkeypatch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x, ei, ea, attn_bias=attn_bias)
    assert seen == [torch.bfloat16] and out.dtype == torch.bfloat16
    scale = float(ref.abs().max())
    assert float((out.detach().float() - ref).abs().max()) <= 3e-2 * scale
    grads = torch.autograd.grad(out.float().square().sum(), list(layer.parameters()))
    for g, r in zip(grads, ref_grads):
        assert g.dtype == torch.float32 and torch.isfinite(g).all()
        assert float((g - r).abs().max()) <= 5e-2 * max(float(r.abs().max()), 1e-3)


_TRITON_SCRIPT = textwrap.dedent("""
    import torch
    from graphattn import to_csr
    from graphattn.ops import fused_triton as ta
    from tests.ops.test_low_precision import HALF, _compare, _graph, per_edge_reference

    for dtype in HALF:
        gen = torch.Generator().manual_seed(5)
        N, E, H, C = 24, 120, 2, 8
        ei = _graph(N, E, gen)
        csr = to_csr(ei, N, cache=False)
        rnd = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
        for big in (1.0, 30.0):  # ordinary and ~1e3 scores
            q, k = big * rnd(N, H, C), big * rnd(N, H, C)
            leaves = [q, k, rnd(N, H, C), rnd(E, H), rnd(E, H, C)]
            fn = lambda q, k, v, b, ek: ta.triton_edge_attention(q, k, v, csr, bias=b, edge_key=ek, edge_value=ek)
            ref = lambda q, k, v, b, ek: per_edge_reference(q, k, v, ei, bias=b, edge_key=ek, edge_value=ek)
            out = _compare(fn, leaves, ["q", "k", "v", "bias", "edge_kv"], dtype, rnd(N, H, C), ref)
            assert (out[-3:] == 0).all()
    print("ok")
""")


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")
def test_triton_half_under_interpreter():
    """The Triton kernels in float16 and bfloat16 (Triton's CPU interpreter, in a child process:
    it must be on before triton is imported), with bias, a shared edge key/value and ~1e3
    scores, against the float64 reference."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run([sys.executable, "-c", _TRITON_SCRIPT], env=env, cwd=root, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0 and "ok" in res.stdout, res.stdout[-3000:] + res.stderr[-3000:]

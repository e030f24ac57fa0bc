"""The Triton edge-attention kernels (CUDA fast path) against the dense reference.

On a CUDA machine the kernels run on the GPU; elsewhere, when triton is installed, the same
kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``) on CPU tensors, so the
CPU-only CI checks the kernels' code too. Without triton the module is skipped.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import subprocess
import sys

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from graphattn import GraphSelfAttention, dense_attention, edge_attention, to_csr
from graphattn.ops import fused_triton as ta
from graphattn.ops.dispatch import fused_kind
from graphattn.testing import dense_mask_and_bias, random_graph

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")

CUDA = torch.cuda.is_available()
# Triton's interpreter must be on before triton is first imported (its standard library, e.g.
# the combine function of tl.sum, is compiled at import): without a GPU the kernel tests run in
# a child pytest with TRITON_INTERPRET=1 (test_kernels_under_interpreter below).
HERE = CUDA or ta.interpreting()


@pytest.fixture
def device():
    """``cuda`` with the compiled kernels, else ``cpu`` under the interpreter."""
    if not HERE:
        pytest.skip("runs in the TRITON_INTERPRET=1 child process")
    return torch.device("cuda" if CUDA else "cpu")


@pytest.mark.skipif(HERE, reason="the kernels run in this process")
def test_kernels_under_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
                         env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    # every kernel test must have RUN in the child (not skipped): only the two CPU-side ones skip
    ran = re.search(r"(\d+) passed", res.stdout)
    assert ran and int(ran.group(1)) >= 30 and "failed" not in res.stdout, res.stdout[-2000:]


def dense_ref(q, k, v, edge_index, bias=None):
    mask, dbias = dense_mask_and_bias(edge_index, q.size(0), bias)
    to_b = lambda t: t.permute(1, 0, 2)[None]  # noqa: E731
    out = dense_attention(to_b(q), to_b(k), to_b(v), mask[None], dbias[None].to(q.dtype))
    return out[0].permute(1, 0, 2)


def _graph(kind, gen):
    if kind == "empty":
        return torch.empty(2, 0, dtype=torch.long), 0
    if kind == "one_node":
        return torch.empty(2, 0, dtype=torch.long), 1
    if kind == "self_loop":
        return torch.zeros(2, 3, dtype=torch.long), 1
    if kind == "isolated":
        return random_graph(25, 60, isolated=6, generator=gen), 25
    if kind == "hub":  # one node with many more in-edges than a block
        src = torch.randint(0, 50, (150,), generator=gen)
        return torch.stack([src, torch.zeros_like(src)]), 50
    n = int(torch.randint(2, 40, (1,), generator=gen))
    return random_graph(n, int(torch.randint(0, 5 * n, (1,), generator=gen)), generator=gen), n


KINDS = ["random", "random", "random", "empty", "one_node", "self_loop", "isolated", "hub"]


@pytest.mark.parametrize("case", range(len(KINDS)))
@pytest.mark.parametrize("with_bias", [False, True])
def test_values_and_grads_match_dense_reference(device, case, with_bias):
    gen = torch.Generator().manual_seed(100 + case)
    ei, N = _graph(KINDS[case], gen)
    H, C = 2, 8
    E = ei.size(1)
    q, k, v = (torch.randn(N, H, C, generator=gen, dtype=torch.float64) for _ in range(3))
    bias = torch.randn(E, H, generator=gen, dtype=torch.float64) if with_bias else None
    if bias is not None and E > 2:
        bias[::3] = float("-inf")  # hidden edges (a node may end up with all its edges hidden)
    leaves = [t.requires_grad_(True) for t in (q, k, v) + ((bias,) if bias is not None else ())]
    ref = dense_ref(q, k, v, ei, bias)
    g = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    ref_grads = torch.autograd.grad(ref, leaves, g, allow_unused=True) if ref.numel() else None

    leaves32 = [t.detach().float().to(device).requires_grad_(True) for t in leaves]
    q2, k2, v2 = leaves32[:3]
    b2 = leaves32[3] if bias is not None else None
    out = ta.triton_edge_attention(q2, k2, v2, to_csr(ei.to(device), N), bias=b2)
    assert out.shape == (N, H, C) and out.dtype == torch.float32 and torch.isfinite(out).all()
    torch.testing.assert_close(out.double().cpu(), ref.detach(), atol=2e-5, rtol=1e-4)
    if ref.numel():
        grads = torch.autograd.grad(out, leaves32, g.float().to(device), allow_unused=True)
        for name, a, b in zip("qkvb", grads, ref_grads):
            a = torch.zeros_like(leaves32[0]) if a is None else a
            b = torch.zeros_like(leaves[0]) if b is None else b
            b = torch.where(torch.isfinite(b), b, torch.zeros_like(b))
            assert torch.isfinite(a).all(), name
            torch.testing.assert_close(a.double().cpu(), b, atol=5e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("mode", ["key_value", "shared", "value_only", "wide_values"])
def test_edge_features_match_chunked_path(device, mode):
    """Per-edge key/value additions (in the caller's edge order) against the chunked path in
    float64, which its own tests hold to the dense reference."""
    gen = torch.Generator().manual_seed(7)
    N, H, C = 30, 3, 8
    ei = random_graph(N, 140, isolated=3, generator=gen)
    E = ei.size(1)
    CV = 12 if mode == "wide_values" else C
    q, k = (torch.randn(N, H, C, generator=gen, dtype=torch.float64) for _ in range(2))
    v = torch.randn(N, H, CV, generator=gen, dtype=torch.float64)
    bias = torch.randn(E, H, generator=gen, dtype=torch.float64)
    ek = None if mode == "value_only" else torch.randn(E, H, C, generator=gen, dtype=torch.float64)
    ev = ek if mode == "shared" else torch.randn(E, H, CV, generator=gen, dtype=torch.float64)
    leaves = [t for t in (q, k, v, bias, ek, None if mode == "shared" else ev) if t is not None]
    for t in leaves:
        t.requires_grad_(True)
    ref = edge_attention(q, k, v, ei, bias=bias, edge_key=ek, edge_value=ev, impl="chunked")
    g = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    ref_grads = torch.autograd.grad(ref, leaves, g)

    leaves32 = [t.detach().float().to(device).requires_grad_(True) for t in leaves]
    it = iter(leaves32)
    q2, k2, v2, b2 = next(it), next(it), next(it), next(it)
    ek2 = None if ek is None else next(it)
    ev2 = ek2 if mode == "shared" else next(it)
    out = ta.triton_edge_attention(q2, k2, v2, to_csr(ei.to(device), N), bias=b2, edge_key=ek2,
                                   edge_value=ev2)
    torch.testing.assert_close(out.double().cpu(), ref.detach(), atol=2e-5, rtol=1e-4)
    for a, b in zip(torch.autograd.grad(out, leaves32, g.float().to(device)), ref_grads):
        torch.testing.assert_close(a.double().cpu(), b, atol=5e-5, rtol=1e-4)


def test_partial_grads_and_second_order(device):
    gen = torch.Generator().manual_seed(3)
    N, H, C = 12, 2, 4
    ei = random_graph(N, 40, generator=gen)
    csr = to_csr(ei.to(device), N)
    q, k, v = (torch.randn(N, H, C, generator=gen).to(device) for _ in range(3))
    v.requires_grad_(True)  # only v: the target-major pass is skipped
    out = ta.triton_edge_attention(q, k, v, csr)
    (gv,) = torch.autograd.grad(out.sum(), [v])
    vd = v.detach().cpu().double().requires_grad_(True)
    ref = edge_attention(q.cpu().double(), k.cpu().double(), vd, ei, impl="chunked")
    (gvd,) = torch.autograd.grad(ref.sum(), [vd])
    torch.testing.assert_close(gv.double().cpu(), gvd, atol=1e-5, rtol=1e-4)
    # create_graph=True: exact second derivative through plain torch ops
    q.requires_grad_(True)
    out = ta.triton_edge_attention(q, k, v, csr)
    (gq,) = torch.autograd.grad((out ** 2).sum(), [q], create_graph=True)
    (ggv,) = torch.autograd.grad(gq.sum(), [v])
    qd, kd, vd = (t.detach().cpu().double().requires_grad_(True) for t in (q, k, v))
    outd = edge_attention(qd, kd, vd, ei, impl="chunked")
    (gqd,) = torch.autograd.grad((outd ** 2).sum(), [qd], create_graph=True)
    (ggvd,) = torch.autograd.grad(gqd.sum(), [vd])
    torch.testing.assert_close(ggv.double().cpu(), ggvd, atol=1e-4, rtol=1e-3)


GRAD_MASKS = ["b", "ek", "ev", "k", "q,b", "ek,ev", "shared:ek", "shared:v,ek"]


@pytest.mark.parametrize("mask", GRAD_MASKS)
def test_any_subset_of_gradients(device, mask):
    """Gradients when only some inputs require them (each pass skipped or not), first and second
    order, against the float64 chunked path; ``shared:`` passes one tensor as edge key and value."""
    shared = mask.startswith("shared:")
    want = set(mask.split(":")[-1].split(","))
    gen = torch.Generator().manual_seed(len(mask))
    N, H, C = 14, 2, 4
    ei = random_graph(N, 50, isolated=2, generator=gen)
    E = ei.size(1)
    names = ["q", "k", "v", "b", "ek"] + ([] if shared else ["ev"])
    shapes = {"q": (N, H, C), "k": (N, H, C), "v": (N, H, C), "b": (E, H), "ek": (E, H, C), "ev": (E, H, C)}
    base = {n: torch.randn(shapes[n], generator=gen, dtype=torch.float64) for n in names}

    def run(fn, dtype, dev, create_graph):
        ts = {n: base[n].to(dtype).to(dev).requires_grad_(n in want) for n in names}
        ev = ts["ek"] if shared else ts["ev"]
        out = fn(ts["q"], ts["k"], ts["v"], ts["b"], ts["ek"], ev)
        g = torch.ones_like(out) * 0.5 + torch.arange(out.numel(), device=dev).view(out.shape).to(dtype) / out.numel()
        leaves = [ts[n] for n in names if n in want]
        first = torch.autograd.grad(out, leaves, g, create_graph=create_graph)
        if not create_graph:
            return [t.double().cpu() for t in first]
        total = sum((t ** 2).sum() for t in first)
        if not total.requires_grad:
            return []
        return [t.double().cpu() for t in torch.autograd.grad(total, leaves)]

    csr = to_csr(ei.to(device), N)
    ours = lambda q, k, v, b, ek, ev: ta.triton_edge_attention(q, k, v, csr, bias=b, edge_key=ek, edge_value=ev)  # noqa: E731
    ref = lambda q, k, v, b, ek, ev: edge_attention(q, k, v, ei, bias=b, edge_key=ek, edge_value=ev,  # noqa: E731
                                                    impl="chunked")
    for create_graph, tol in ((False, 5e-5), (True, 5e-4)):
        got = run(ours, torch.float32, device, create_graph)
        exp = run(ref, torch.float64, torch.device("cpu"), create_graph)
        assert len(got) == len(exp)
        for a, b in zip(got, exp):
            torch.testing.assert_close(a, b, atol=tol, rtol=tol)


def test_output_may_be_modified_in_place(device):
    """Like the CPU paths: `h = attention(...); h += x` must not break the backward."""
    gen = torch.Generator().manual_seed(5)
    N, H, C = 10, 2, 4
    ei = random_graph(N, 30, generator=gen)
    q, k, v = (torch.randn(N, H, C, generator=gen).to(device).requires_grad_(True) for _ in range(3))
    out = ta.triton_edge_attention(q, k, v, to_csr(ei.to(device), N))
    out.mul_(2.0)
    out.sum().backward()
    qd, kd, vd = (t.detach().cpu().double().requires_grad_(True) for t in (q, k, v))
    (2.0 * edge_attention(qd, kd, vd, ei, impl="chunked")).sum().backward()
    for a, b in zip((q, k, v), (qd, kd, vd)):
        torch.testing.assert_close(a.grad.double().cpu(), b.grad, atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("device_type,dtype,score,p_drop,weights,expected", [
    ("cpu", torch.float32, "dot", 0.0, False, "cpp"),
    ("cpu", torch.float64, "dot", 0.0, True, "cpp"),
    ("cuda", torch.float32, "dot", 0.0, False, "triton"),
    ("cuda", torch.float32, "dot", 0.0, True, None),       # returned weights: chunked
    ("cuda", torch.float64, "dot", 0.0, False, None),      # float64 on CUDA: chunked
    ("cuda", torch.bfloat16, "dot", 0.0, False, "triton"),  # float32 accumulation in the kernel
    ("cuda", torch.float16, "dot", 0.0, False, "triton"),
    ("cpu", torch.bfloat16, "dot", 0.0, True, "cpp"),
    ("cpu", torch.float16, "dot", 0.0, False, "cpp"),
    ("cuda", torch.float32, "additive", 0.0, False, None),
    ("cuda", torch.float32, "dot", 0.1, False, None),      # attention dropout: chunked
    ("cpu", torch.float32, "dot", 0.1, False, None),
    ("mps", torch.float32, "dot", 0.0, False, None),
])
def test_fused_kind_dispatch_rule(device_type, dtype, score, p_drop, weights, expected):
    assert fused_kind(device_type, dtype, score, p_drop, weights) == expected


def test_error_names_the_opt_out(device, monkeypatch):
    monkeypatch.setenv("GRAPHATTN_NO_TRITON", "1")
    q = torch.randn(3, 1, 2, device=device)
    with pytest.raises(RuntimeError, match="GRAPHATTN_NO_TRITON is set"):
        ta.triton_edge_attention(q, q, q, to_csr(torch.tensor([[0], [1]], device=device), 3))


def test_argument_errors(device):
    N, H, C = 4, 2, 3
    ei = torch.tensor([[0, 1], [1, 2]])
    csr = to_csr(ei.to(device), N)
    q = torch.randn(N, H, C, device=device)
    with pytest.raises(TypeError, match="float32"):
        ta.triton_edge_attention(q.double(), q.double(), q.double(), csr)
    with pytest.raises(TypeError, match="one dtype"):
        ta.triton_edge_attention(q.half(), q.half(), q, csr)
    with pytest.raises(ValueError, match="bias must have shape"):
        ta.triton_edge_attention(q, q, q, csr, bias=torch.randn(3, H, device=device))
    with pytest.raises(ValueError, match="csr has 5 nodes"):
        ta.triton_edge_attention(q, q, q, to_csr(ei.to(device), 5))
    with pytest.raises(ValueError, match="equal key and value widths"):
        ek = torch.randn(2, H, C, device=device)
        ta.triton_edge_attention(q, q, torch.randn(N, H, C + 1, device=device), csr, edge_key=ek,
                                 edge_value=ek)


@pytest.mark.parametrize("value,on", [("1", True), ("true", True), ("ON", True), ("0", False),
                                      ("false", False), ("no", False), ("", False)])
def test_interpreter_flag_read_like_triton(monkeypatch, value, on):
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert ta.interpreting() is on


def test_probe_falls_back_with_a_warning(monkeypatch):
    """An old GPU, or kernels that fail to compile / launch, give a warning and the chunked path."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (6, 1))
    with pytest.warns(RuntimeWarning, match="compute capability < 7.0"):
        assert ta._probe_impl(torch.device("cuda", 0)) is False

    def broken(*args, **kwargs):
        raise RuntimeError("Failed to find C compiler")

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(ta, "_probe_run", broken)
    with pytest.warns(RuntimeWarning, match="C compiler.*chunked PyTorch path"):
        assert ta._probe_impl(torch.device("cuda", 0)) is False


def test_probe_run_computes(device, monkeypatch):
    """The first-use probe itself (forward + backward on 3 nodes) succeeds where the kernels run."""
    if device.type != "cuda":
        monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    assert ta._probe_run(device) is None


def test_probe_runs_once_per_gpu(monkeypatch):
    calls = []
    monkeypatch.delenv("GRAPHATTN_NO_TRITON", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(ta, "_PROBED", {})
    monkeypatch.setattr(ta, "_probe", lambda device: calls.append(device) or device.index == 0)
    assert ta.triton_available(torch.device("cuda", 0)) is True
    assert ta.triton_available(torch.device("cuda", 0)) is True
    assert ta.triton_available(torch.device("cuda", 1)) is False
    assert calls == [torch.device("cuda", 0), torch.device("cuda", 1)]


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv("GRAPHATTN_NO_TRITON", "1")
    assert not ta.triton_available(torch.device("cuda"))
    monkeypatch.delenv("GRAPHATTN_NO_TRITON")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not ta.triton_available(torch.device("cpu"))  # CPU tensors: only the interpreter


@pytest.mark.skipif(not CUDA, reason="dispatch to the Triton kernels happens for CUDA tensors")
def test_layer_uses_triton_on_cuda():
    gen = torch.Generator().manual_seed(0)
    ei = random_graph(200, 1500, generator=gen)
    x = torch.randn(200, 16, generator=gen)
    layer = GraphSelfAttention(16, 8, heads=2)
    ref = layer(x, ei)
    layer = layer.cuda()
    out = layer(x.cuda().requires_grad_(True), ei.cuda())
    names, stack, seen = set(), [out.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        names.add(type(fn).__name__)
        stack.extend(f for f, _ in fn.next_functions)
    assert any("Triton" in n for n in names), names
    torch.testing.assert_close(out.cpu(), ref, atol=1e-4, rtol=1e-4)
    out.sum().backward()


def _compile_inputs(device, mode):
    """Float32 inputs on a 20-node graph with isolated nodes: ``plain`` (q, k, v), ``edge`` (bias,
    edge key and value, wider values) or ``shared`` (one tensor as edge key and value)."""
    gen = torch.Generator().manual_seed(11)
    N, H, C = 20, 2, 4
    CV = 6 if mode == "edge" else C
    ei = random_graph(N, 70, isolated=3, generator=gen)
    E = ei.size(1)
    q, k = (torch.randn(N, H, C, generator=gen) for _ in range(2))
    v = torch.randn(N, H, CV, generator=gen)
    bias = ek = ev = None
    if mode == "edge":
        bias, ek = torch.randn(E, H, generator=gen), torch.randn(E, H, C, generator=gen)
        ev = torch.randn(E, H, CV, generator=gen)
    elif mode == "shared":
        ek = torch.randn(E, H, C, generator=gen)
    return ei.to(device), N, [None if t is None else t.to(device).requires_grad_(True) for t in (q, k, v, bias, ek, ev)]


@pytest.mark.parametrize("mode", ["plain", "edge", "shared"])
def test_fullgraph_compile_matches_eager(device, mode):
    """``torch.compile(fullgraph=True)`` traces through the custom ops (the CSR view and, in the
    backward, the CSC arrays built inside the graph): one graph, outputs and gradients as eager."""
    ei, N, leaves = _compile_inputs(device, mode)

    def fn(q, k, v, bias, ek, ev, ei):
        return ta.triton_edge_attention(q, k, v, to_csr(ei, N), bias, edge_key=ek, edge_value=ek if ev is None else ev)

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    results = []
    for run in (fn, torch.compile(fn, backend=counter, fullgraph=True)):
        out = run(*leaves, ei)
        given = [t for t in leaves if t is not None]
        results.append((out, torch.autograd.grad(out.square().sum(), given)))
    torch._dynamo.reset()
    assert counter.frame_count == 1
    (want, want_grads), (got, got_grads) = results
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["plain", "edge", "shared"])
def test_custom_ops_pass_opcheck(device, mode):
    """Schema, fake implementations and autograd registration of the Triton custom ops; AOT
    dispatch of the forward (static and dynamic shapes, ``edge``) runs the registered backward."""
    ei, N, (q, k, v, bias, ek, ev) = _compile_inputs(device, mode)
    csr = to_csr(ei, N)
    shared = mode == "shared"
    args = (q, k, v, bias, ek, ev, csr.perm, csr.rowptr, csr.col)
    fast = ("test_schema", "test_autograd_registration", "test_faketensor")  # AOT: traced above, and once here
    torch.library.opcheck(ta.triton_attention_fwd, args + (None, None, None, 0.5, shared),
                          test_utils=fast + (("test_aot_dispatch_dynamic",) if mode == "edge" else ()))
    out, lse, _ = ta.triton_attention_fwd(*args, None, None, None, 0.5, shared)
    plain = [None if t is None else t.detach() for t in args[:6]]
    cptr, cpos, ctgt = ta.csc_tensors(csr.rowptr, csr.col)
    torch.library.opcheck(ta.triton_attention_bwd, (*plain, *args[6:], cptr, cpos, ctgt, out.detach(), lse,
                                                    torch.randn_like(out), 0.5, shared, True, True, True, True, True),
                          test_utils=("test_schema", "test_faketensor"))
    csc = csr.csc
    assert torch.equal(cptr, csc.rowptr) and torch.equal(cpos, csc.perm) and torch.equal(ctgt, csc.col)

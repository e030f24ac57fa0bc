"""Efficient attention variants: normalizations, linear, key-reduced, clustered, Synthesizer."""
import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch

from graphattn import (GLOBAL_ATTNS, ClusteredAttention, GraphSelfAttention, LinearGlobalAttention, NodeClassifier,
                       ReducedKeyAttention, SynthesizerAttention, cluster_graph, dense_attention, edge_attention,
                       edge_normalize, linear_attention, make_global_attention, normalized_edge_attention,
                       sequence_graph, sequences_to_batch)
from graphattn.nn.variants.clustered_attention import cluster_codes
from graphattn.nn.variants.linear_attention import orthogonal_features
from graphattn.ops.padding import GraphLayout
from graphattn.testing import random_graph, saved_tensor_bytes

ROOT = Path(__file__).resolve().parents[2]
EMPTY_B = torch.zeros(0, dtype=torch.long)  # the batch vector of no nodes
VARIANT_OPTIONS = [("linear", {}), ("linear", {"feature_map": "favor"}), ("reduced", {}),
                   ("reduced", {"mode": "project", "max_nodes": 8}), ("clustered", {}),
                   ("clustered", {"method": "lsh", "shared_qk": False}), ("synthesizer", {}),
                   ("synthesizer", {"rank": 2})]
la = importlib.import_module("graphattn.nn.variants.linear_attention")  # the module (the package exports the function)


def _qkv(n, h=2, c=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, h, c, generator=g, dtype=dtype) for _ in range(3)]


def _batch(sizes):
    return torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))


def _full_reference(q, k, v, batch):
    """Softmax attention of every node to every node of its graph, via the dense reference."""
    layout = GraphLayout(batch, q.size(0))
    pad = lambda t: layout.pad(t).transpose(1, 2)  # noqa: E731 (B, H, L, C)
    mask = layout.mask[:, None, :] & layout.mask[:, :, None]  # (B, L, L)
    return layout.unpad(dense_attention(pad(q), pad(k), pad(v), mask).transpose(1, 2))


# ----------------------------------------------------------------------------- normalization
def test_edge_normalize_formulas():
    ei = random_graph(10, 40, isolated=2, generator=torch.Generator().manual_seed(1))
    s = torch.randn(ei.size(1), 3, dtype=torch.float64)
    dst = ei[1]
    deg = torch.bincount(dst, minlength=10).double()[dst, None]
    soft = edge_normalize(s, dst, 10, "softmax")
    sums = torch.zeros(10, 3, dtype=torch.float64).index_add_(0, dst, soft)
    has_in = torch.bincount(dst, minlength=10) > 0
    assert torch.allclose(sums[has_in], torch.ones_like(sums[has_in]))
    assert torch.allclose(edge_normalize(s, dst, 10, "relu"), s.clamp(min=0) / deg)
    assert torch.allclose(edge_normalize(s, dst, 10, "sigmoid"), torch.sigmoid(s - deg.log()))
    assert torch.allclose(edge_normalize(s[:, 0] + 1e4, dst, 10, "softmax"), soft[:, 0])  # shift-free
    with pytest.raises(ValueError, match="softmax.*relu.*sigmoid"):
        edge_normalize(s, dst, 10, "tanh")


def _direct(q, k, v, ei, kind, bias=None):
    """Plain autograd reference: per-edge tensors, no chunking."""
    s = (q[ei[1]] * k[ei[0]]).sum(-1) / math.sqrt(q.size(-1))
    if bias is not None:
        s = s + bias
    a = edge_normalize(s, ei[1], q.size(0), kind)
    return torch.zeros_like(v).index_add(0, ei[1], a[..., None] * v[ei[0]]), a


@pytest.mark.parametrize("kind", ["softmax", "relu", "sigmoid"])
def test_normalized_attention_matches_direct_values_and_grads(kind):
    q, k, v = [t.requires_grad_() for t in _qkv(12)]
    ei = random_graph(12, 50, isolated=2, generator=torch.Generator().manual_seed(2))
    bias = torch.randn(ei.size(1), 2, dtype=torch.float64, requires_grad=True)
    out, alpha = normalized_edge_attention(q, k, v, ei, normalization=kind, bias=bias,
                                           return_attention_weights=True)
    ref, ref_a = _direct(q, k, v, ei, kind, bias)
    assert torch.allclose(out, ref) and torch.allclose(alpha, ref_a)
    assert torch.equal(out[-2:], torch.zeros_like(out[-2:]))  # isolated nodes: zeros, no NaN
    g1 = torch.autograd.grad(out.square().sum(), (q, k, v, bias))
    g2 = torch.autograd.grad(ref.square().sum(), (q, k, v, bias))
    assert all(torch.allclose(a, b) for a, b in zip(g1, g2))


@pytest.mark.parametrize("kind", ["softmax", "relu", "sigmoid"])
def test_normalized_dense_path_for_complete_graphs_equals_chunked(kind):
    q, k, v = [t.requires_grad_() for t in _qkv(11)]
    ei, batch = torch.cat([sequence_graph(5), sequence_graph(6) + 5], 1), _batch([5, 6])
    dense = normalized_edge_attention(q, k, v, ei, normalization=kind, batch=batch)
    chunked = normalized_edge_attention(q, k, v, ei, normalization=kind, batch=batch, impl="chunked")
    assert torch.allclose(dense, chunked)
    g1 = torch.autograd.grad(dense.square().sum(), (q, k, v))
    g2 = torch.autograd.grad(chunked.square().sum(), (q, k, v))
    assert all(torch.allclose(a, b) for a, b in zip(g1, g2))


def test_normalized_softmax_equals_edge_attention_with_edge_features_and_additive():
    q, k, v = _qkv(10)
    ei = random_graph(10, 40, generator=torch.Generator().manual_seed(3))
    ek = torch.randn(ei.size(1), 2, 8, dtype=torch.float64)
    a = edge_attention(q, k, v, ei, edge_key=ek, edge_value=ek, impl="chunked")
    b = normalized_edge_attention(q, k, v, ei, edge_key=ek, edge_value=ek)
    assert torch.allclose(a, b)
    att = torch.randn(2, 8, dtype=torch.float64)
    a = edge_attention(q, k, v, ei, score="additive", att=att, impl="chunked")
    b = normalized_edge_attention(q, k, v, ei, score="additive", att=att)
    assert torch.allclose(a, b)


@pytest.mark.parametrize("kind", ["relu", "sigmoid"])
def test_normalized_attention_gradcheck(kind):
    q, k, v = [t[:, :1, :3].contiguous().requires_grad_() for t in _qkv(5)]
    ei = random_graph(5, 12, generator=torch.Generator().manual_seed(4))
    ek = torch.randn(ei.size(1), 1, 3, dtype=torch.float64, requires_grad=True)
    att = torch.randn(1, 3, dtype=torch.float64, requires_grad=True)
    f = lambda q, k, v, ek, att: normalized_edge_attention(  # noqa: E731
        q, k, v, ei, normalization=kind, edge_key=ek, edge_value=ek, score="additive", att=att)
    assert torch.autograd.gradcheck(f, (q, k, v, ek, att))


def test_normalized_attention_memory_is_per_edge_not_per_channel():
    N, E, H, C = 300, 30000, 2, 64
    q, k, v = [t.float().requires_grad_() for t in _qkv(N, H, C)]
    ei = random_graph(N, E, generator=torch.Generator().manual_seed(5))
    out, saved = saved_tensor_bytes(lambda: normalized_edge_attention(q, k, v, ei, normalization="relu"))
    assert saved < 12 * E * H * 4 + 3 * N * H * C * 4 + 16 * E  # O(E·H + N·H·C)
    assert saved < E * H * C * 4 / 3  # far below one (E, H, C) tensor


def test_normalized_attention_batch_isolation_and_errors():
    q, k, v = _qkv(14)
    ei1 = random_graph(6, 20, generator=torch.Generator().manual_seed(6))
    ei2 = random_graph(8, 30, generator=torch.Generator().manual_seed(7))
    both = normalized_edge_attention(q, k, v, torch.cat([ei1, ei2 + 6], 1), normalization="sigmoid")
    one = normalized_edge_attention(q[:6], k[:6], v[:6], ei1, normalization="sigmoid")
    assert torch.allclose(both[:6], one)
    with pytest.raises(ValueError, match="softmax-only"):
        normalized_edge_attention(q, k, v, ei1, normalization="relu", impl="fused")
    bf = normalized_edge_attention(*(t.bfloat16() for t in (q, k, v)), ei1, normalization="relu")
    assert bf.dtype == torch.bfloat16 and torch.isfinite(bf).all()


# ----------------------------------------------------------------------------- linear attention
def _kernel_reference(fq, fk, v, batch):
    """O(N²) direct computation of Σ_j φ(q_i)·φ(k_j) v_j / Σ_j φ(q_i)·φ(k_j) within graphs."""
    w = torch.einsum("ihm,jhm->hij", fq, fk) * (batch[:, None] == batch[None, :])  # (H, N, N)
    return torch.einsum("hij,jhc->ihc", w / w.sum(-1, keepdim=True), v)


@pytest.mark.parametrize("batch", [_batch([5, 9, 1]), torch.tensor([2, 0, 1, 0, 2, 2, 1, 0, 0, 1])])
def test_linear_elu_equals_direct_quadratic_computation(batch):
    q, k, v = _qkv(batch.numel())
    fmap = lambda t: torch.nn.functional.elu(t) + 1  # noqa: E731
    out = linear_attention(q, k, v, batch, "elu")
    assert torch.allclose(out, _kernel_reference(fmap(q), fmap(k), v, batch))


def test_linear_favor_equals_its_kernel_and_approximates_softmax():
    batch = _batch([7, 12])
    q, k, v = _qkv(19, h=2, c=8)
    omega = orthogonal_features(2, 16, 8, torch.Generator().manual_seed(0)).double()
    xs = lambda t: t * 8 ** -0.25  # noqa: E731
    fmap = lambda t: torch.exp(torch.einsum("nhc,hmc->nhm", xs(t), omega)  # noqa: E731
                               - 0.5 * xs(t).square().sum(-1, keepdim=True))
    out = linear_attention(q, k, v, batch, "favor", omega)
    assert torch.allclose(out, _kernel_reference(fmap(q), fmap(k), v, batch))
    exact = _full_reference(q * 0.5, k * 0.5, v, batch)
    errs = [(linear_attention(q * 0.5, k * 0.5, v, batch, "favor", orthogonal_features(
        2, m, 8, torch.Generator().manual_seed(1)).double()) - exact).abs().mean() for m in (8, 2048)]
    assert errs[1] < 0.05 and errs[1] < errs[0] / 4  # unbiased; error shrinks like 1/sqrt(M)


def test_linear_favor_no_overflow_and_module_contract():
    m = LinearGlobalAttention(16, heads=4, feature_map="favor")
    x = torch.randn(20, 16) * 200  # huge scores
    batch = _batch([8, 12])
    out = m(x, batch)
    assert out.shape == (20, 16) and torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters())
    assert repr(m) == "LinearGlobalAttention(16, heads=4, feature_map='favor')"
    assert "omega" in m.state_dict() and m.num_features == 8
    with pytest.raises(ValueError, match="elu.*favor"):
        LinearGlobalAttention(16, feature_map="exp")


# ----------------------------------------------------------------------------- key reduction
def test_reduced_pool_with_one_node_per_bucket_is_full_attention():
    sizes = [6, 3, 6]
    m = ReducedKeyAttention(16, heads=2, num_keys=6, mode="pool").double()
    x = torch.randn(15, 16, dtype=torch.float64)
    batch = _batch(sizes)
    q, k, v = m.lin_qkv(x).view(15, 3, 2, 8).unbind(1)
    ref = m.lin_out(_full_reference(q, k, v, batch).reshape(15, 16))
    assert torch.allclose(m(x, batch), ref)  # r = n (graphs 0, 2) and r > n (graph 1)


def test_reduced_project_identity_is_full_attention_and_errors():
    m = ReducedKeyAttention(8, heads=2, num_keys=5, mode="project", max_nodes=5).double()
    with torch.no_grad():
        m.proj_key.copy_(torch.eye(5))
        m.proj_value.copy_(torch.eye(5))
    x, batch = torch.randn(10, 8, dtype=torch.float64), _batch([5, 5])
    q, k, v = m.lin_qkv(x).view(10, 3, 2, 4).unbind(1)
    assert torch.allclose(m(x, batch), m.lin_out(_full_reference(q, k, v, batch).reshape(10, 8)))
    with pytest.raises(ValueError, match="max_nodes=5"):
        m(torch.randn(6, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="project.*pool"):
        ReducedKeyAttention(8, mode="sample")


def test_reduced_pool_buckets_are_means():
    m = ReducedKeyAttention(4, num_keys=2, mode="pool")
    k = torch.arange(5.0)[:, None, None].expand(5, 1, 4)
    kr, vr, ok = m.reduce(k, k, GraphLayout(None, 5))
    assert kr[0, 0, :, 0].tolist() == [1.0, 3.5] and ok.all()  # buckets {0,1,2}, {3,4}


# ----------------------------------------------------------------------------- clustered
def test_cluster_graph_one_cluster_is_complete_and_pattern_is_valid():
    batch = _batch([4, 3])
    x = torch.randn(7, 6)
    ei = cluster_graph(x, batch=batch, num_clusters=1)
    ref = torch.cat([sequence_graph(4), sequence_graph(3) + 4], 1)
    assert torch.equal(ei, ref)
    for method in ("kmeans", "lsh"):
        q, k = torch.randn(40, 6), torch.randn(40, 6)
        batch = _batch([25, 15])
        rot = torch.randn(6, 2)  # LSH: the same hash for the pattern and the check
        ei = cluster_graph(q, k, batch, num_clusters=4, method=method, rotations=rot)
        cq, ck = cluster_codes(q, k, batch, num_clusters=4, method=method, rotations=rot)
        src, dst = ei
        assert (batch[src] == batch[dst]).all()
        assert ((ck[src] == cq[dst]) | (src == dst)).all()
        expected = sum(int(((batch == batch[i]) & (ck == cq[i])).sum()) + int(ck[i] != cq[i]) for i in range(40))
        assert ei.size(1) == expected and torch.unique(dst * 40 + src).numel() == ei.size(1)
        assert ((src == dst).sum() == 40)


def test_cluster_graph_block_size_bounds_edges():
    x = torch.randn(20, 4)
    src, dst = cluster_graph(x, num_clusters=1, block_size=4)  # one cluster cut into 5 chunks
    assert src.numel() == 5 * 16 and (src // 4 == dst // 4).all()
    q, k = torch.randn(50, 4), torch.randn(50, 4)
    ei = cluster_graph(q, k, num_clusters=2, method="kmeans", block_size=8)
    assert ei.size(1) <= 50 * 8 + 50 and torch.unique(ei[1] * 50 + ei[0]).numel() == ei.size(1)
    assert torch.equal(cluster_graph(x, num_clusters=1, block_size=20), cluster_graph(x, num_clusters=1))
    with pytest.raises(ValueError, match="block_size"):
        cluster_graph(x, block_size=0)


def test_kmeans_separates_two_directions():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.tensor([5.0, 0, 0]) + torch.randn(10, 3, generator=g),
                   torch.tensor([0, 5.0, 0]) + torch.randn(10, 3, generator=g)])
    src, dst = cluster_graph(x, num_clusters=2, method="kmeans")
    assert ((src < 10) == (dst < 10)).all() and src.numel() == 200


@pytest.mark.parametrize("method", ["kmeans", "lsh"])
def test_clustered_attention_is_permutation_equivariant(method):
    torch.manual_seed(0)
    m = ClusteredAttention(16, heads=2, num_clusters=4, method=method).double().eval()
    x, batch = torch.randn(200, 16, dtype=torch.float64), _batch([120, 80])
    perm = torch.cat([torch.randperm(120), 120 + torch.randperm(80)])  # relabel nodes within each graph
    assert torch.allclose(m(x[perm], batch), m(x, batch)[perm], atol=1e-10)  # k-means was off by 0.43


@pytest.mark.parametrize("method", ["kmeans", "lsh"])
def test_clustered_attention_exact_with_one_cluster_and_isolated(method):
    m = ClusteredAttention(16, heads=2, num_clusters=1, method=method, shared_qk=False).double()
    x, batch = torch.randn(12, 16, dtype=torch.float64), _batch([5, 7])
    q, k, v = m.lin_qkv(x).view(12, 3, 2, 8).unbind(1)
    assert torch.allclose(m(x, batch), m.lin_out(_full_reference(q, k, v, batch).reshape(12, 16)))
    m = ClusteredAttention(16, heads=2, num_clusters=1, method=method).double()  # shared QK: k = q / |q|
    q, v = m.lin_qkv(x).view(12, 2, 2, 8).unbind(1)
    ref = _full_reference(q, torch.nn.functional.normalize(q, dim=-1), v, batch)
    assert torch.allclose(m(x, batch), m.lin_out(ref.reshape(12, 16)))
    m4 = ClusteredAttention(16, heads=2, num_clusters=4, method=method)
    x = torch.randn(30, 16)
    both, pattern = m4(x, _batch([12, 18]), return_pattern=True)
    assert torch.allclose(both[:12], m4(x[:12]), atol=1e-6) and pattern.size(1) < 30 * 30 / 2 + 30


def test_clustered_attention_shared_qk_keeps_queries_with_their_keys():
    """Node states with a large common component: separate W_q / W_k send all queries and all
    keys to disjoint clusters (every node attends only to itself); shared QK never does."""
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        x = 2 * torch.randn(1, 32, generator=g) + torch.randn(256, 32, generator=g)  # (256, 32)
        seen = {}
        for shared in (True, False):
            torch.manual_seed(seed)
            m = ClusteredAttention(32, heads=2, num_clusters=4, shared_qk=shared)
            _, (src, dst) = m(x, return_pattern=True)
            seen[shared] = float((torch.bincount(dst[src != dst], minlength=256) > 0).float().mean())
        assert seen[True] == 1.0 and seen[False] < 0.1, seen


# ----------------------------------------------------------------------------- synthesizer
def test_synthesizer_dense_and_edge_paths_equal_reference():
    m = SynthesizerAttention(8, heads=2, max_nodes=6).double()
    with torch.no_grad():
        m.logits.normal_()
    x, batch = torch.randn(10, 8, dtype=torch.float64), _batch([6, 4])
    lay = GraphLayout(batch, 10)
    v = m.lin_value(x).view(10, 2, 4)
    zero = torch.zeros(2, 2, 6, 4, dtype=torch.float64)  # q = k = 0: scores are the bias alone
    for ei in (None, torch.cat([sequence_graph(6, "window", window=1), sequence_graph(4, "window", window=1) + 6], 1)):
        mask = torch.zeros(2, 6, 6, dtype=torch.bool)
        if ei is None:
            mask = lay.mask[:, None, :] & lay.mask[:, :, None]
        else:
            mask[batch[ei[1]], lay.pos[ei[1]], lay.pos[ei[0]]] = True
        ref = dense_attention(zero, zero, lay.pad(v).transpose(1, 2), mask,
                              bias=m.logits[None])
        ref = m.lin_out(lay.unpad(ref.transpose(1, 2)).reshape(10, 8))
        assert torch.allclose(m(x, batch, edge_index=ei), ref)
    full = torch.cat([sequence_graph(6), sequence_graph(4) + 6], 1)
    assert torch.allclose(m(x, batch, edge_index=full), m(x, batch))


def test_synthesizer_factorized_and_fixed_size_errors():
    m = SynthesizerAttention(8, heads=2, max_nodes=5, rank=3)
    assert m.weight_logits().shape == (2, 5, 5) and m.logits is None
    x, batch = torch.randn(9, 8), _batch([5, 4])
    both = m(x, batch)
    assert torch.allclose(both[5:], m(x[5:]), atol=1e-6) and torch.isfinite(both).all()
    with pytest.raises(ValueError, match="max_nodes=5"):
        m(torch.randn(6, 8))
    relu = SynthesizerAttention(8, max_nodes=5, normalization="relu")
    with pytest.raises(ValueError, match="softmax"):
        relu(x, batch)
    assert relu(x, batch, edge_index=sequence_graph(5)).shape == (9, 8)  # first graph's edges only


# ----------------------------------------------------------------------------- factory
@pytest.mark.parametrize("kind", GLOBAL_ATTNS)
def test_global_modules_isolate_graphs_and_train(kind):
    kwargs = {"synthesizer": {"max_nodes": 16}, "clustered": {"num_clusters": 2}}.get(kind, {})
    m = make_global_attention(kind, 16, heads=4, **kwargs)
    x, batch = torch.randn(24, 16), _batch([9, 15])
    out = m(x, batch)
    x2 = x.clone()
    x2[9:] = torch.randn(15, 16)  # change graph 1 only
    assert torch.allclose(m(x2, batch)[:9], out[:9], atol=1e-5)
    if not any(p.requires_grad for p in m.parameters()):  # FNet's mixing has no parameters: the input's gradient
        x = x.requires_grad_()
        m(x, batch).square().mean().backward()
        assert torch.isfinite(x.grad).all()
        return
    out.square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters() if p.requires_grad)


def test_factory_errors():
    with pytest.raises(ValueError, match="linear.*reduced.*clustered.*synthesizer"):
        make_global_attention("performer", 16)
    with pytest.raises(TypeError, match="global_attn='linear'"):
        make_global_attention("linear", 16, num_keys=3)


# ----------------------------------------------------------------------------- the layer's and models' options
@pytest.mark.parametrize("kind", ["relu", "sigmoid"])
def test_layer_normalization_option(kind):
    layer = GraphSelfAttention(16, 8, heads=2, normalization=kind, root_weight=False).double()
    x = torch.randn(12, 16, dtype=torch.float64)
    ei = random_graph(12, 40, isolated=1, generator=torch.Generator().manual_seed(0))
    out, (_, alpha) = layer(x, ei, return_attention_weights=True)
    q, k, v = layer.lin_qkv(x).view(12, 3, 2, 8).unbind(1)
    ref, ref_a = _direct(q, k, v, ei, kind)
    assert torch.allclose(out, ref.reshape(12, 16)) and torch.allclose(alpha, ref_a)
    with pytest.raises(ValueError, match="softmax.*relu.*sigmoid"):
        GraphSelfAttention(16, 8, normalization="entmax")
    with pytest.raises(ValueError, match="softmax-only"):
        GraphSelfAttention(16, 8, normalization=kind, impl="fused")


@pytest.mark.parametrize("options", [{"normalization": "sigmoid", "global_attn": "linear"},
                                     {"global_attn": "reduced", "global_attn_kwargs": {"num_keys": 8}},
                                     {"global_attn": "clustered", "num_global_tokens": 1},
                                     {"global_attn": "synthesizer", "global_attn_kwargs": {"max_nodes": 40}},
                                     {"global_attn": "compressed", "global_attn_kwargs": {"stride": 4}},
                                     {"global_attn": "fourier"},
                                     {"global_attn": "sinkhorn", "global_attn_kwargs": {"block_size": 8}},
                                     {"score": "aft"}])
def test_models_with_variants_on_sequence_patterns(options):
    torch.manual_seed(0)
    sym = torch.randint(0, 4, (16, 32))
    b = sequences_to_batch(torch.nn.functional.one_hot(sym, 4).float(), ["window", "global"],
                           pe_channels=8, window=2, num_global=1)
    y = sym[:, :1].expand(16, 32).reshape(-1)
    model = NodeClassifier(4, 32, 4, num_layers=2, heads=4, pe_dim=8, pe_kind="linear", **options)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(b.x, b.edge_index, batch=b.batch, pe=b.pe), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert math.isfinite(losses[-1]) and losses[-1] < 0.8 * losses[0]


def test_benchmark_quick_writes_png_and_tables(tmp_path):
    out = tmp_path / "variants.json"
    env = {**os.environ, "GRAPHATTN_NO_CPP": "1"}  # no cold C++ build in a smoke test
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "variants.py"), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    payload = json.loads(out.read_text())
    rows = payload["sequence"] + payload["graph"]
    assert rows and all("error" not in r for r in rows), [r.get("error") for r in rows]
    assert all(math.isfinite(r.get("tokens_per_s", r.get("nodes_per_s"))) for r in rows)
    assert out.with_suffix(".png").stat().st_size > 10_000 and out.with_suffix(".csv").exists()
    panels = sorted(p.name for p in tmp_path.glob("variants-*.png"))  # each panel on its own, page-width
    assert panels == sorted(f"variants-{s}.png" for s in ("sequence-accuracy", "sequence-throughput",
                                                          "sequence-curves", "sbm", "sbm-large"))
    assert all((tmp_path / p).stat().st_size > 10_000 for p in panels)
    large = [r for r in payload["graph"] if r["kind"] == "large"]
    assert large and all(r["mode"] == "mini-batch" and r["epochs"] == 1 for r in large)
    for r in large:  # real accuracy over every val / test node of the graph, by mini-batch inference
        assert r["eval_nodes"] == r["nodes"] and r["val_nodes"] + r["test_nodes"] < r["nodes"]
        assert 0 <= r["majority_acc"] < 0.2 and r["accuracy"] > 1.5 * r["majority_acc"]
        assert 0 < r["val_accuracy"] <= 1 and r["curve"][-1][1:] == [r["val_accuracy"], r["accuracy"]]
        assert r["partition"] == "bfs" and r["edges_in_parts"] > 1 / r["parts"]  # BFS beats random parts
    md = out.with_suffix(".md").read_text()
    assert "accuracy over all" in md and "(majority class" in md
    assert "| window+linear (elu)" in md and "| edges+clustered" in md and "| window+linear (elu)" in proc.stdout


def test_variants_report_large_rows_with_and_without_accuracy(tmp_path):
    """Speed-only sbm-large rows (``--large-epochs 0``, or merged older runs) still tabulate and
    plot as bars; rows with accuracy get the val / test columns and an accuracy scatter."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _variants_report import plot, tables

    base = {"kind": "large", "graph": "sbm-large", "nodes": 1000, "edges": 20000, "parts": 8,
            "parts_per_batch": 2, "partition": "bfs", "batch_nodes": 250, "batch_edges": 900,
            "edges_in_parts": 0.3, "steps": 3, "step_s": 0.1, "nodes_per_s": 2500.0, "epoch_s_est": 0.4,
            "peak_delta_mb": 10.0}
    acc = {"epochs": 1, "val_nodes": 200, "test_nodes": 200, "majority_acc": 0.1, "lr": 5e-3,
           "epoch_s": 0.5, "eval_s": 0.2}
    a = type("A", (), {"lengths": [], "variants": [], "threads": 1, "graph_epochs": 2})()
    names = ["edges (softmax)", "edges+global token"]
    for extra in ({}, acc):
        rows = [{**base, **extra, "variant": v, **({"accuracy": 0.8 - i / 10, "val_accuracy": 0.8} if extra else {})}
                for i, v in enumerate(names)]
        text = tables([], rows, a)
        line = next(x for x in text.splitlines() if x.startswith("| edges+global token"))
        assert ("0.700" in line) == bool(extra) and ("(est.)" in line) != bool(extra)
        assert ("no accuracy" in text) != bool(extra)
        plot([], rows, a, tmp_path / "v.png", names)
        assert (tmp_path / "v.png").stat().st_size > 5_000


@pytest.mark.parametrize("kind,options", VARIANT_OPTIONS)
def test_global_variants_accept_empty_input(kind, options):
    m = make_global_attention(kind, 8, heads=2, **options)
    for batch, num_graphs in ((None, None), (EMPTY_B, None), (EMPTY_B, 3)):
        x = torch.zeros(0, 8, requires_grad=True)
        out = m(x, batch, num_graphs)
        assert out.shape == (0, 8)
        out.sum().backward()
        assert x.grad.shape == (0, 8)


@pytest.mark.parametrize("feature_map", ["elu", "favor"])
def test_linear_attention_mixed_sizes_pads_by_size_class_and_matches_each_graph(feature_map):
    sizes = [300, 3, 1, 40, 5, 2, 70, 9]  # one large graph among small ones, unsorted batch
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    batch = batch[torch.randperm(batch.numel(), generator=torch.Generator().manual_seed(0))]
    N, H, C = batch.numel(), 2, 4
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(N, H, C, generator=g, dtype=torch.float64) for _ in range(3))
    omega = la.orthogonal_features(H, 8, C, torch.Generator().manual_seed(2)).double()
    slots = []
    real = la._padded_linear_attention

    def spy(q_, k_, v_, layout, *args):
        slots.append(layout.B * layout.L)
        return real(q_, k_, v_, layout, *args)

    with mock.patch.object(la, "_padded_linear_attention", spy):
        out = la.linear_attention(q, k, v, batch, feature_map, omega)
    assert sum(slots) <= 2 * N and len(slots) > 1  # one padded block would take 8 x 300 slots
    for b in range(len(sizes)):
        idx = torch.nonzero(batch == b).flatten()
        alone = la.linear_attention(q[idx], k[idx], v[idx], None, feature_map, omega)
        torch.testing.assert_close(out[idx], alone, rtol=1e-10, atol=1e-12)
    # gradients reach every input through the size-class path
    q.requires_grad_(True)
    la.linear_attention(q, k, v, batch, feature_map, omega).sum().backward()
    assert torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0


def test_redraw_features_draws_new_ones_and_reset_restores_the_seeded_ones():
    m = LinearGlobalAttention(8, heads=2, feature_map="favor", seed=3)
    first = m.omega.clone()
    m.redraw_features()
    second = m.omega.clone()
    m.redraw_features()
    assert not torch.equal(first, second) and not torch.equal(second, m.omega)
    m.reset_parameters()
    assert torch.equal(m.omega, first)
    assert torch.equal(LinearGlobalAttention(8, heads=2, feature_map="favor", seed=3).omega, first)


def test_cluster_codes_check_batch_for_every_method():
    q = torch.randn(6, 4)
    for method, k in [("lsh", 3), ("kmeans", 1), ("lsh", 1)]:
        with pytest.raises(ValueError, match="num_graphs=2 but batch holds graph id 2"):
            cluster_codes(q, batch=torch.tensor([0, 0, 1, 1, 2, 2]), num_clusters=k, method=method, num_graphs=2)
        with pytest.raises(ValueError, match="negative graph ids"):
            cluster_codes(q, batch=torch.tensor([0, 0, 1, 1, -1, 2]), num_clusters=k, method=method)
        with pytest.raises(ValueError, match=r"batch must have shape \(6,\)"):
            cluster_codes(q, batch=torch.tensor([0, 0, 1]), num_clusters=k, method=method)


@pytest.mark.parametrize("normalization", ["softmax", "relu", "sigmoid"])
def test_minus_inf_bias_hides_an_edge_for_every_normalization(normalization):
    # a causal mask written as a -inf bias on the full graph == the causal graph itself:
    # relu / sigmoid must not count hidden edges in deg_i
    torch.manual_seed(0)
    q, k, v = (torch.randn(5, 2, 4) for _ in range(3))
    full = sequence_graph(5, "full")
    bias = torch.zeros(full.size(1), 2)
    bias[full[0] > full[1]] = float("-inf")
    bias[(full[0] == 0) & (full[1] == 3), 1] = float("-inf")  # one more edge hidden in head 1 only
    causal = sequence_graph(5, "causal")
    masked = normalized_edge_attention(q, k, v, full, normalization=normalization, bias=bias)
    cb = torch.zeros(causal.size(1), 2)
    cb[(causal[0] == 0) & (causal[1] == 3), 1] = float("-inf")
    ref = normalized_edge_attention(q, k, v, causal, normalization=normalization, bias=cb)
    torch.testing.assert_close(masked, ref)
    # head 0 of target 3 sees 4 keys, head 1 sees 3: the relu weights are ReLU(s) / deg per head
    all_hidden = torch.full_like(bias, float("-inf"))
    out = normalized_edge_attention(q, k, v, full, normalization=normalization, bias=all_hidden)
    assert torch.isfinite(out).all() and out.abs().max() == 0


def test_synthesizer_positions_must_be_non_negative_integers():
    s = SynthesizerAttention(8, 2, max_nodes=6)
    x, ei = torch.randn(5, 8), sequence_graph(5, "window", window=1)
    with pytest.raises(ValueError, match="pos must be >= 0"):
        s(x, edge_index=ei, pos=torch.tensor([0, 1, 2, 3, -1]))
    with pytest.raises(TypeError, match="pos must be an integer"):
        s(x, edge_index=ei, pos=torch.arange(5.0))
    assert s(x, edge_index=ei, pos=torch.arange(5)).shape == (5, 8)


@pytest.mark.parametrize("make", [lambda: LinearGlobalAttention(8, heads=2),
                                  lambda: ReducedKeyAttention(8, heads=2, num_keys=4),
                                  lambda: ClusteredAttention(8, heads=2),
                                  lambda: SynthesizerAttention(8, 2, max_nodes=6)])
def test_global_modules_on_a_batch_of_no_graphs(make):
    out = make()(torch.zeros(0, 8), torch.zeros(0, dtype=torch.long), num_graphs=0)
    assert out.shape == (0, 8)

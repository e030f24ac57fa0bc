"""Sparse Sinkhorn attention against a dense, loop-by-loop reference: float64, per graph, batch isolation,
the soft permutation's sums, one block = full attention, values from the value projection, gradients, and
degenerate inputs (one node, empty graphs, n not a multiple of the block size)."""
import math

import pytest
import torch

from graphattn import GraphTransformerBlock, SinkhornAttention, make_global_attention


def _batch(sizes):
    return torch.cat([torch.full((n,), i, dtype=torch.long) for i, n in enumerate(sizes)])


def dense_sinkhorn(m, x, sizes):
    """One graph, one head, one query at a time, with plain (not log-space) Sinkhorn divisions."""
    C, H, s, tau = m.channels, m.heads, m.block_size, m.temperature
    d = C // H
    q, k, v = m.lin_qkv(x).view(-1, 3, C).unbind(1)
    outs, start = [], 0
    for n in sizes:
        if n == 0:
            continue
        sl = slice(start, start + n)
        xs, qs, ks, vs = x[sl], q[sl], k[sl], v[sl]
        M = math.ceil(n / s)
        means = torch.stack([xs[a * s:(a + 1) * s].mean(0) for a in range(M)])
        sq, sk = m.lin_sort(means).view(M, 2, C).unbind(1)
        occ = torch.zeros(M * s, dtype=x.dtype)
        occ[:n] = 1
        pad = lambda t: torch.cat([t, t.new_zeros(M * s - n, C)])  # noqa: E731
        kp, vp = pad(ks), pad(vs)
        out = torch.zeros(n, C, dtype=x.dtype)
        for h in range(H):
            hs = slice(h * d, (h + 1) * d)
            P = torch.exp(sq[:, hs] @ sk[:, hs].T / math.sqrt(d) / tau)
            for _ in range(m.sinkhorn_iters):
                P = P / P.sum(1, keepdim=True)
                P = P / P.sum(0, keepdim=True)
            for i in range(n):
                a = i // s
                w, vals = [], []
                for j in range(a * s, min((a + 1) * s, n)):  # the own block
                    w.append(torch.exp(qs[i, hs] @ ks[j, hs] / math.sqrt(d)))
                    vals.append(vs[j, hs])
                for t in range(s):  # the sorted block: a P-weighted mix of the t-th slot of every block
                    share = sum(P[a, g] * occ[g * s + t] for g in range(M))
                    if share > 0:
                        kt = sum(P[a, g] * kp[g * s + t, hs] for g in range(M)) / share  # real nodes only
                        vt = sum(P[a, g] * vp[g * s + t, hs] for g in range(M)) / share
                        w.append(share * torch.exp(qs[i, hs] @ kt / math.sqrt(d)))
                        vals.append(vt)
                w = torch.stack(w)
                out[i, hs] = (w[:, None] * torch.stack(vals)).sum(0) / w.sum()
        outs.append(out)
        start += n
    return m.lin_out(torch.cat(outs))


@pytest.mark.parametrize("block, heads, sizes", [(3, 2, [7, 1, 9]), (4, 1, [8]), (2, 4, [5, 6]), (5, 2, [2, 11, 3])])
def test_sinkhorn_attention_equals_its_dense_reference(block, heads, sizes):
    torch.manual_seed(0)
    m = SinkhornAttention(8, heads=heads, block_size=block, sinkhorn_iters=3, temperature=0.5).double()
    x = torch.randn(sum(sizes), 8, dtype=torch.float64)
    assert torch.allclose(m(x, _batch(sizes)), dense_sinkhorn(m, x, sizes), atol=1e-10)


def test_one_block_is_full_attention():
    torch.manual_seed(1)
    m = SinkhornAttention(8, heads=2, block_size=16).double()
    x, sizes = torch.randn(14, 8, dtype=torch.float64), [9, 5]
    q, k, v = m.lin_qkv(x).view(14, 3, 2, 4).unbind(1)
    ref = []
    for lo, hi in ((0, 9), (9, 14)):
        a = torch.softmax(torch.einsum("ihc,jhc->hij", q[lo:hi], k[lo:hi]) / 2.0, dim=-1)
        ref.append(torch.einsum("hij,jhc->ihc", a, v[lo:hi]).reshape(hi - lo, 8))
    assert torch.allclose(m(x, _batch(sizes)), m.lin_out(torch.cat(ref)), atol=1e-10)


def test_soft_permutation_is_doubly_stochastic_per_graph():
    torch.manual_seed(2)
    sizes = [12, 5, 0, 9]  # 4, 2, 0 and 3 blocks of 3; 4 block slots in all
    x = torch.randn(sum(sizes), 8, dtype=torch.float64)
    m = SinkhornAttention(8, heads=2, block_size=3, sinkhorn_iters=1).double()
    P = m.soft_permutation(x, _batch(sizes), num_graphs=4)
    assert P.shape == (4, 2, 4, 4)
    assert torch.allclose(P.sum(-2), torch.ones(4, 2, 4, dtype=torch.float64), atol=1e-12)  # the last round
    m.sinkhorn_iters = 60
    P = m.soft_permutation(x, _batch(sizes), num_graphs=4)
    assert torch.allclose(P.sum(-1), torch.ones(4, 2, 4, dtype=torch.float64), atol=1e-6)
    assert torch.allclose(P.sum(-2), torch.ones(4, 2, 4, dtype=torch.float64), atol=1e-12)
    # a graph's blocks are permuted among themselves; the slots it does not fill map to themselves
    eye = torch.eye(4, dtype=torch.float64)
    assert torch.equal(P[1, :, 2:, :], eye[2:].expand(2, 2, 4)) and torch.equal(P[1, :, :2, 2:], torch.zeros(2, 2, 2,
                                                                                                                dtype=torch.float64))
    assert torch.equal(P[2], eye.expand(2, 4, 4))
    # a lower temperature makes the permutation harder (larger largest entries)
    soft = m.soft_permutation(x, _batch(sizes), num_graphs=4)[0].amax(-1).mean()
    m.temperature = 0.05
    assert m.soft_permutation(x, _batch(sizes), num_graphs=4)[0].amax(-1).mean() > soft


def test_graphs_never_mix_and_batch_order_does_not_matter():
    torch.manual_seed(3)
    m = SinkhornAttention(8, heads=2, block_size=2).double()
    sizes = [6, 3, 7]
    x = torch.randn(16, 8, dtype=torch.float64)
    full = m(x, _batch(sizes))
    assert torch.allclose(full[6:9], m(x[6:9]), atol=1e-12)  # the graph alone
    y = x.clone()
    y[:6] += 5.0  # change another graph
    assert torch.allclose(m(y, _batch(sizes))[6:9], full[6:9], atol=1e-12)
    # interleaved graphs (unsorted batch), each graph's nodes still in their order: the same outputs
    batch = _batch(sizes)
    mixed = batch[torch.randperm(16)]
    xm, expected = torch.empty_like(x), torch.empty_like(full)
    for g in range(3):
        xm[mixed == g], expected[mixed == g] = x[batch == g], full[batch == g]
    assert torch.allclose(m(xm, mixed), expected, atol=1e-12)


def test_values_come_from_the_value_projection():
    torch.manual_seed(4)
    m = SinkhornAttention(8, heads=2, block_size=3).double()
    with torch.no_grad():
        m.lin_qkv.weight[16:].zero_()  # values are the value bias only
        m.lin_qkv.bias[16:].fill_(0.5)
    x = torch.randn(10, 8, dtype=torch.float64)
    expected = m.lin_out(torch.full((10, 8), 0.5, dtype=torch.float64))
    assert torch.allclose(m(x), expected, atol=1e-12)  # built from the keys, it would vary with x


def test_gradients_match_finite_differences():
    torch.manual_seed(5)
    m = SinkhornAttention(4, heads=2, block_size=2, sinkhorn_iters=2).double()
    x = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    batch = _batch([4, 3])
    assert torch.autograd.gradcheck(lambda t: m(t, batch), (x,))


def test_degenerate_inputs_give_finite_outputs_and_gradients():
    m = SinkhornAttention(8, heads=2, block_size=3)
    one = torch.randn(1, 8, requires_grad=True)
    out = m(one, torch.zeros(1, dtype=torch.long))
    assert out.shape == (1, 8) and torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(one.grad).all()
    x = torch.randn(5, 8, requires_grad=True)  # an empty graph in the middle of a batch
    out = m(x, torch.tensor([0, 0, 2, 2, 2]), num_graphs=3)
    assert out.shape == (5, 8) and torch.isfinite(out).all()
    out.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    assert m(torch.zeros(0, 8), torch.zeros(0, dtype=torch.long)).shape == (0, 8)
    big = SinkhornAttention(8, heads=2, block_size=4)  # large scores: the log-space iterations stay finite
    with torch.no_grad():
        big.lin_sort.weight.mul_(1e3)
    assert torch.isfinite(big(torch.randn(30, 8) * 10)).all()


def test_bad_options_are_refused_by_name():
    for kw, match in (({"block_size": 0}, "block_size must be a positive int"),
                      ({"sinkhorn_iters": 0}, "sinkhorn_iters must be a positive int"),
                      ({"temperature": 0.0}, "temperature must be a positive number"),
                      ({"temperature": float("inf")}, "temperature must be a positive number")):
        with pytest.raises(ValueError, match=match):
            SinkhornAttention(8, **kw)
    with pytest.raises(TypeError, match="bad options for global_attn='sinkhorn'"):
        make_global_attention("sinkhorn", 8, stride=2)


def test_plugs_into_a_block_as_a_global_branch():
    x, batch = torch.randn(12, 16), _batch([5, 7])
    ei = torch.tensor([[0, 1, 2, 5, 6, 7], [1, 2, 3, 6, 7, 8]])
    block = GraphTransformerBlock(16, heads=4, global_attn="sinkhorn", global_attn_kwargs={"block_size": 2})
    out = block(x, ei, batch=batch)
    assert out.shape == (12, 16) and torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in block.parameters() if p.grad is not None)

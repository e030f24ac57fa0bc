"""Memory-compressed attention and FNet's Fourier mixing against dense references: per graph, float64,
batch isolation, gradients, and degenerate inputs (one node, empty graphs, n not a multiple of the stride)."""
import math

import pytest
import torch

from graphattn import CompressedKeyAttention, FourierMixing, GraphTransformerBlock


def _batch(sizes):
    return torch.cat([torch.full((n,), i, dtype=torch.long) for i, n in enumerate(sizes)])


def dense_compressed(m, x, batch, sizes):
    """One graph at a time: pad to a multiple of s, the convolution as explicit sums, full softmax."""
    C, H, s = m.channels, m.heads, m.stride
    q, k, v = m.lin_qkv(x).view(-1, 3, C).unbind(1)
    outs, start = [], 0
    for n in sizes:
        if n == 0:
            continue
        qs, ks, vs = q[start:start + n], k[start:start + n], v[start:start + n]
        M = math.ceil(n / s)
        pad = lambda t: torch.cat([t, t.new_zeros(M * s - n, C)])  # noqa: E731
        def conv(t, lay):
            blocks = pad(t).view(M, s, C)  # summary j = sum_t W[:, :, t] x_{j*s+t} + b
            out = torch.einsum("oit,mti->mo", lay.weight, blocks)
            return out + lay.bias
        kc, vc = conv(ks, m.conv_key), conv(vs, m.conv_value)
        d = C // H
        heads = []
        for h in range(H):
            sl = slice(h * d, (h + 1) * d)
            a = torch.softmax(qs[:, sl] @ kc[:, sl].T / math.sqrt(d), dim=-1)
            heads.append(a @ vc[:, sl])
        outs.append(torch.cat(heads, 1))
        start += n
    return m.lin_out(torch.cat(outs))


@pytest.mark.parametrize("stride, sizes", [(3, [7, 1, 9]), (1, [5, 4]), (4, [8]), (5, [2, 11, 3])])
def test_compressed_attention_equals_its_dense_reference(stride, sizes):
    torch.manual_seed(0)
    m = CompressedKeyAttention(16, heads=4, stride=stride).double()
    x, batch = torch.randn(sum(sizes), 16, dtype=torch.float64), _batch(sizes)
    assert torch.allclose(m(x, batch), dense_compressed(m, x, batch, sizes), atol=1e-10)


def test_compressed_with_stride_one_and_identity_kernels_is_full_attention():
    torch.manual_seed(1)
    m = CompressedKeyAttention(8, heads=2, stride=1).double()
    with torch.no_grad():
        for conv in (m.conv_key, m.conv_value):
            conv.weight.copy_(torch.eye(8, dtype=torch.float64)[:, :, None])
            conv.bias.zero_()
    x, sizes = torch.randn(10, 8, dtype=torch.float64), [6, 4]
    q, k, v = m.lin_qkv(x).view(10, 3, 2, 4).unbind(1)
    ref = []
    for lo, hi in ((0, 6), (6, 10)):
        a = torch.softmax(torch.einsum("ihc,jhc->hij", q[lo:hi], k[lo:hi]) / 2.0, dim=-1)
        ref.append(torch.einsum("hij,jhc->ihc", a, v[lo:hi]).reshape(hi - lo, 8))
    assert torch.allclose(m(x, _batch(sizes)), m.lin_out(torch.cat(ref)), atol=1e-10)


def dense_fourier(x, sizes):
    out, start = [], 0
    for n in sizes:
        g = x[start:start + n].numpy()
        import numpy as np
        out.append(torch.from_numpy(np.fft.fft2(g).real))  # 2-D DFT over (nodes, channels)
        start += n
    return torch.cat(out) if out else x.new_zeros(0, x.size(1))


@pytest.mark.parametrize("sizes", [[6], [3, 7, 3, 1], [5, 5, 2]])
def test_fourier_mixing_equals_numpy_fft2_per_graph(sizes):
    x = torch.randn(sum(sizes), 6, dtype=torch.float64)
    m = FourierMixing(6)
    assert torch.allclose(m(x, _batch(sizes)), dense_fourier(x, sizes), atol=1e-10)
    if len(sizes) == 1:
        assert torch.allclose(m(x), dense_fourier(x, sizes), atol=1e-10)


@pytest.mark.parametrize("make", [lambda: CompressedKeyAttention(8, heads=2, stride=3), lambda: FourierMixing(8)],
                         ids=["compressed", "fourier"])
def test_degenerate_inputs_give_finite_outputs_and_gradients(make):
    m = make()
    one = torch.randn(1, 8, requires_grad=True)
    out = m(one, torch.zeros(1, dtype=torch.long))
    assert out.shape == (1, 8) and torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(one.grad).all()
    # an empty graph in the middle of a batch (num_graphs says it is there)
    x = torch.randn(5, 8)
    batch = torch.tensor([0, 0, 2, 2, 2])
    out = m(x, batch, num_graphs=3)
    assert out.shape == (5, 8) and torch.isfinite(out).all()
    assert m(torch.zeros(0, 8), torch.zeros(0, dtype=torch.long)).shape == (0, 8)


def test_both_plug_into_a_block_as_global_branches():
    x, batch = torch.randn(12, 16), _batch([5, 7])
    ei = torch.tensor([[0, 1, 2, 5, 6, 7], [1, 2, 3, 6, 7, 8]])
    for kind, kw in (("compressed", {"stride": 2}), ("fourier", {})):
        block = GraphTransformerBlock(16, heads=4, global_attn=kind, global_attn_kwargs=kw)
        out = block(x, ei, batch=batch)
        assert out.shape == (12, 16) and torch.isfinite(out).all()
    with pytest.raises(ValueError, match="stride must be a positive int"):
        CompressedKeyAttention(8, stride=0)

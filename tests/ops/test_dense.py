import pytest
import torch

from graphattn import GraphSelfAttention, edge_attention, to_csr
from graphattn.ops.dense import MAX_DENSE_WASTE, complete_graph_sizes, padded_length, prefer_dense


def complete_batch(sizes):
    parts, off = [], 0
    for n in sizes:
        r = torch.arange(n)
        parts.append(torch.stack([r.repeat(n), r.repeat_interleave(n)]) + off)
        off += n
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return torch.cat(parts, 1), batch


@pytest.mark.parametrize("sizes", [[7], [4, 4, 4], [3, 6, 1, 2]])
def test_dense_path_equals_edge_path(sizes):
    ei, batch = complete_batch(sizes)
    N = sum(sizes)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(N, 2, 4, dtype=torch.float64, generator=g) for _ in range(3))
    dense = edge_attention(q, k, v, ei, batch=batch, impl="dense")
    assert torch.allclose(dense, edge_attention(q, k, v, ei, impl="chunked"), atol=1e-10)
    assert torch.allclose(edge_attention(q, k, v, ei, batch=batch), dense, atol=1e-12)  # auto picks it
    layer = GraphSelfAttention(5, 4, heads=2).double().eval()
    x = torch.randn(N, 5, dtype=torch.float64)
    layer.impl = "chunked"
    ref = layer(x, ei)
    layer.impl = "auto"
    assert torch.allclose(layer(x, ei, batch=batch), ref, atol=1e-10)


def test_detection_rejects_incomplete_or_duplicated_graphs():
    ei, batch = complete_batch([3, 3])
    assert complete_graph_sizes(to_csr(ei, 6), batch).tolist() == [3, 3]
    assert complete_graph_sizes(to_csr(ei[:, 1:], 6), batch) is None  # one edge missing
    dup = ei.clone()
    dup[0, 0] = 1  # edge 1->0 twice, 0->0 missing: same count, not complete
    assert complete_graph_sizes(to_csr(dup, 6), batch) is None
    # without a batch the two complete blocks are found from the edges alone
    assert complete_graph_sizes(to_csr(ei, 6), None).tolist() == [3, 3]
    assert complete_graph_sizes(to_csr(dup, 6), None) is None
    with pytest.raises(ValueError, match="impl='dense' needs"):
        q = torch.randn(6, 1, 2)
        edge_attention(q, q, q, ei[:, 1:], batch=batch, impl="dense")


@pytest.mark.parametrize("sizes", [[3, 6, 1, 2], [15, 1, 9], [8, 7]])
def test_padded_dense_path_gradients_match_edge_path(sizes):
    """Unequal sizes go through the padded SDPA path (length rounded up to PAD_MULTIPLE):
    outputs and gradients of q, k, v equal the edge path's."""
    ei, batch = complete_batch(sizes)
    N = sum(sizes)
    g = torch.Generator().manual_seed(1)
    leaves = [torch.randn(N, 3, 4, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(3)]
    grad_out = torch.randn(N, 3, 4, dtype=torch.float64, generator=g)
    grads = {}
    for impl in ("dense", "chunked"):
        out = edge_attention(*leaves, ei, batch=batch, impl=impl)
        grads[impl] = (out.detach(), *torch.autograd.grad(out, leaves, grad_out))
    for a, b in zip(grads["dense"], grads["chunked"]):
        assert torch.allclose(a, b, atol=1e-10)


def test_padded_length_rounds_only_unequal_sizes():
    assert padded_length(torch.tensor([9, 9])) == 9  # equal: a free view, no padding
    assert padded_length(torch.tensor([3, 6, 1])) == 8
    assert padded_length(torch.tensor([9, 3])) == 16


@pytest.mark.parametrize("sizes, dense", [
    ([8] * 128, False),                          # equal sizes, 8 nodes: fused ~1.15x faster (measured)
    ([16] * 128, True),                          # equal, 16 nodes: SDPA ~1.6x faster
    ([64] * 128, True),                          # equal, 64 nodes: ~4x
    ([100], True),                               # one complete graph
    (list(range(4, 13)) * 14, False),            # 8 ± 50%: padded to 16, fused ~1.8x faster
    (list(range(16, 49)) * 4, True),             # 32 ± 50%: padded to 48 (2.1x waste), SDPA ~1.5x
    (list(range(1, 128)), True),                 # 1..127: padded to 128 (3x waste), SDPA ~1.8x
    ([16] * 127 + [64], False),                  # one large molecule in a batch: 14x waste
])
def test_prefer_dense_follows_the_measured_crossover(sizes, dense):
    assert prefer_dense(torch.tensor(sizes)) is dense


def test_prefer_dense_never_above_the_waste_cap():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        sizes = torch.randint(1, 300, (int(torch.randint(1, 64, (1,), generator=g)),), generator=g)
        L = padded_length(sizes)
        waste = sizes.numel() * L * L / float((sizes * sizes).sum())
        if prefer_dense(sizes):
            assert waste <= MAX_DENSE_WASTE
    for n in range(12, 300, 7):  # equal sizes (no padding) from 12 nodes on: always SDPA
        assert prefer_dense(torch.full((32,), n))

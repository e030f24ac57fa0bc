import pytest
import torch

from graphattn import GraphSelfAttention
from graphattn.csr import to_csr
from graphattn.dense import complete_graph_sizes
from graphattn.functional import edge_attention


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
    assert complete_graph_sizes(to_csr(ei, 6), None) is None  # as one graph of 6 it is not complete
    with pytest.raises(ValueError, match="impl='dense' needs"):
        q = torch.randn(6, 1, 2)
        edge_attention(q, q, q, ei[:, 1:], batch=batch, impl="dense")

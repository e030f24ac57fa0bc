"""Complete graphs given as a plain ``edge_index`` (no ``batch``) take the SDPA path.

An edge set that is exactly a union of complete blocks (self-loops included) over consecutive
node ranges is a batch of complete graphs: the layer finds the blocks from the edges once per
graph and runs padded SDPA, with the edge path's results. Anything else (one edge missing,
self-loops missing, blocks over interleaved nodes) stays on the edge kernels.
"""
import pytest
import torch

import graphattn.ops.dispatch
from graphattn import GraphSelfAttention, edge_attention, to_csr
from graphattn.ops.dense import complete_blocks


def blocks_edge_index(sizes, loops=True, seed=0):
    """Complete graphs over consecutive node ranges, edges in a shuffled order (2, E)."""
    parts, off = [], 0
    for n in sizes:
        r = torch.arange(n) + off
        ei = torch.stack([r.repeat(n), r.repeat_interleave(n)])  # (2, n²) source, target
        parts.append(ei if loops else ei[:, ei[0] != ei[1]])
        off += n
    ei = torch.cat(parts, 1)
    return ei[:, torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(seed))]


@pytest.fixture
def sdpa_calls(monkeypatch):
    """Counts the calls of the SDPA path (the dispatcher's ``sdpa_attention``)."""
    calls = []
    real = graphattn.ops.dispatch.sdpa_attention

    def counted(*args, **kwargs):
        calls.append(args[3].tolist())  # the block sizes
        return real(*args, **kwargs)

    monkeypatch.setattr(graphattn.ops.dispatch, "sdpa_attention", counted)
    return calls


def fwd_bwd(layer, x, ei, w):
    """Output and the gradients of x and of every parameter for the loss (out * w).sum()."""
    x = x.clone().requires_grad_(True)
    layer.zero_grad()
    out = layer(x, ei)
    (out * w).sum().backward()
    return [out.detach(), x.grad] + [p.grad.clone() for p in layer.parameters()]


def check_against_edge_path(sizes, impl="auto", **options):
    """The layer on the blocks (no batch) equals the chunked edge path, forward and backward."""
    torch.manual_seed(0)
    N = sum(sizes)
    layer = GraphSelfAttention(12, 8, heads=2, impl=impl, **options)
    edge = GraphSelfAttention(12, 8, heads=2, impl="chunked", **options)
    edge.load_state_dict(layer.state_dict())
    ei = blocks_edge_index(sizes, loops=not options.get("add_self_loops", False))
    x, w = torch.randn(N, 12), torch.randn(N, 16)
    for got, ref in zip(fwd_bwd(layer, x, ei, w), fwd_bwd(edge, x, ei, w)):
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("sizes", [[16, 16, 16], [40, 48], [64]], ids=["equal", "unequal", "one"])
def test_blocks_from_edge_index_take_sdpa_and_equal_the_edge_path(sizes, sdpa_calls):
    check_against_edge_path(sizes)
    assert sdpa_calls == [sizes]  # the layer under test only: the chunked one never calls it


def test_padded_blocks_on_the_dense_path(sdpa_calls):
    # sizes the CPU rule leaves to the fused kernel (too much padding): impl="dense" forces SDPA
    check_against_edge_path([3, 6, 1, 2], impl="dense")
    assert sdpa_calls == [[3, 6, 1, 2]]


def test_blocks_without_self_loops_take_sdpa_once_the_layer_adds_them(sdpa_calls):
    check_against_edge_path([16, 24], add_self_loops=True)
    assert sdpa_calls == [[16, 24]]


def test_second_call_reuses_the_detection(sdpa_calls, monkeypatch):
    ei, x = blocks_edge_index([16, 16]), torch.randn(32, 12)
    layer = GraphSelfAttention(12, 8, heads=2)
    layer(x, ei)
    monkeypatch.setattr("graphattn.ops.dense.complete_blocks", pytest.fail)  # cached on the CSR view
    layer(x, ei)
    assert sdpa_calls == [[16, 16], [16, 16]]


def interleaved(ei):
    """The blocks with their nodes interleaved: still complete graphs, but not over ranges."""
    N = int(ei.max()) + 1
    perm = torch.randperm(N, generator=torch.Generator().manual_seed(1))
    return perm[ei]


@pytest.mark.parametrize("case", ["one_edge_missing", "self_loops_missing", "duplicate", "interleaved"])
def test_other_graphs_stay_on_the_edge_path(case, sdpa_calls):
    sizes = [16, 16]
    ei = blocks_edge_index(sizes, loops=case != "self_loops_missing")
    if case == "one_edge_missing":
        ei = ei[:, (ei[0] != 3) | (ei[1] != 5)]
    elif case == "duplicate":  # 3 -> 5 twice, 4 -> 5 missing: same edge count
        ei = ei.clone()
        ei[0, (ei[0] == 4) & (ei[1] == 5)] = 3
    elif case == "interleaved":
        ei = interleaved(ei)
    assert complete_blocks(to_csr(ei, 32)) is None
    q, k, v = (torch.randn(32, 2, 4) for _ in range(3))
    out = edge_attention(q, k, v, ei)
    assert sdpa_calls == []
    torch.testing.assert_close(out, edge_attention(q, k, v, ei, impl="chunked"), atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="impl='dense' needs every graph complete"):
        edge_attention(q, k, v, ei, impl="dense")

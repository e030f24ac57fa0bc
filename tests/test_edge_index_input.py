"""PyG's EdgeIndex as edge_index, and the CSR cache forgetting freed graphs."""
import gc

import torch
from torch_geometric import EdgeIndex

from graphattn import GraphClassifier, GraphSelfAttention, NodeClassifier
from graphattn import csr as C


def _graph():
    torch.manual_seed(0)
    x = torch.randn(6, 8)
    ei = torch.tensor([[0, 1, 2, 3, 4, 5, 0], [1, 2, 3, 4, 5, 0, 2]])
    return x, ei, EdgeIndex(ei, sparse_size=(6, 6))


def test_layer_and_models_accept_pyg_edge_index():
    x, ei, eidx = _graph()
    layer = GraphSelfAttention(8, 4, heads=2).eval()
    assert torch.equal(layer(x, ei), layer(x, eidx))
    full = torch.combinations(torch.arange(6), 2).t()
    full = torch.cat([full, full.flip(0)], 1)  # complete graph: the dense fast path
    assert torch.allclose(layer(x, full), layer(x, EdgeIndex(full, sparse_size=(6, 6))))
    out, (ei_back, alpha) = layer(x, eidx, return_attention_weights=True)
    assert alpha.shape == (7, 2) and torch.equal(ei_back.as_subclass(torch.Tensor), ei)
    batch = torch.zeros(6, dtype=torch.long)
    gc_model = GraphClassifier(8, 16, 2, num_layers=2, heads=2).eval()
    assert torch.allclose(gc_model(x, ei, batch), gc_model(x, eidx, batch))
    nc_model = NodeClassifier(8, 16, 3, num_layers=2, heads=2, self_loops=True, propagation=3).eval()
    assert torch.allclose(nc_model(x, ei), nc_model(x, eidx))


def test_csr_cache_drops_graphs_that_were_freed():
    C.clear_csr_cache()
    keep = torch.randint(0, 50, (2, 200))
    C.to_csr(keep, 50)
    for _ in range(5):
        tmp = torch.randint(0, 50, (2, 200))
        C.to_csr(tmp, 50)
        del tmp
    gc.collect()
    assert len(C._CACHE) == 1
    assert C.to_csr(keep, 50) is C.to_csr(keep, 50)


def test_models_run_under_inference_mode():
    x, ei, _ = _graph()
    batch = torch.zeros(6, dtype=torch.long)
    gc_model = GraphClassifier(8, 16, 2, num_layers=2, heads=2).eval()
    nc_model = NodeClassifier(8, 16, 3, num_layers=2, heads=2, self_loops=True, propagation=3).eval()
    with torch.no_grad():
        want = (gc_model(x, ei, batch), nc_model(x, ei))
    with torch.inference_mode():
        x2, ei2, b2 = x.clone(), ei.clone(), batch.clone()
        got = (gc_model(x2, ei2, b2), nc_model(x2, ei2))
    for a, b in zip(got, want):
        assert torch.allclose(a, b)

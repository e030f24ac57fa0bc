"""Audit fixes (session 8): mini-batch mode on degenerate graphs, partition quality on
high-diameter and many-component graphs, argument checks of the large-graph API, and PyG
interop of the models (inference mode, int32 ids, sparse adjacency, edge_attr / pe misuse)."""
import pytest
import torch
from torch_geometric.data import Data

from graphattn import GraphClassifier, GraphSelfAttention, NodeClassifier
from graphattn.loader.partition import PartitionBatches, partition_nodes
from graphattn.tasks.social.minibatch import node_loaders
from graphattn.testing import sbm_graph
from graphattn.train import fit, task_loss


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _und(ei):
    return torch.cat([ei, ei.flip(0)], 1)


def _kept(ei, part):
    return float((part[ei[0]] == part[ei[1]]).float().mean())


def test_mini_batches_without_training_nodes_add_nothing():
    torch.manual_seed(0)
    N = 400
    a = torch.arange(N - 1)
    d = Data(x=torch.randn(N, 8), edge_index=_und(torch.stack([a, a + 1])), y=torch.randint(0, 2, (N,)))
    d.train_mask = torch.arange(N) < 40  # labels on one end of a path: most parts have none
    d.val_mask, d.test_mask = (torch.arange(N) >= 40) & (torch.arange(N) < 200), torch.arange(N) >= 200
    spec = {"class": "NodeClassifier", "input_dropout": 0.0,
            "kwargs": dict(in_channels=8, hidden_channels=8, num_classes=2, num_layers=1, heads=2)}
    loaders, fwd = node_loaders(d, spec, seed=2, num_parts=8, parts_per_batch=1)
    empty = sum(int(b.train_mask.sum()) == 0 for b in loaders["train"])
    assert empty >= 1
    res = fit(NodeClassifier(**spec["kwargs"]), loaders, fwd, kind="multiclass", epochs=2, progress=False,
              log=lambda s: None)
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in res["history"])
    z = torch.randn(0, 3, requires_grad=True)
    loss = task_loss("multiclass", z, torch.zeros(0))
    loss.backward()
    assert loss.item() == 0.0 and z.grad.shape == (0, 3)


@pytest.mark.parametrize("kw", [dict(propagation=3), dict(gcn_weight=0.5), dict(self_loops=True)])
def test_first_call_under_inference_mode_does_not_poison_training(kw):
    x, ei = torch.randn(6, 4), _und(torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]))
    model = NodeClassifier(4, 8, 2, num_layers=1, heads=2, **kw)
    with torch.inference_mode():
        model.eval()(x, ei)
    model.train()
    model(x, ei).sum().backward()  # used to fail: "Inference tensors cannot be saved for backward"
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())


def test_bfs_partitions_follow_paths_grids_and_small_components():
    N = 10_000
    a = torch.arange(N - 1)
    path = _und(torch.stack([a, a + 1]))
    for P in (2, 4):
        part = partition_nodes(path, N, P)
        assert torch.bincount(part).max() <= -(-N // P)
        assert _kept(path, part) > 0.99 > 0.6 > _kept(path, partition_nodes(path, N, P, method="random"))
    b = torch.arange(1000) * 3  # 1000 triangles, 10 parts of 300 nodes
    tri = _und(torch.stack([torch.cat([b, b + 1, b + 2]), torch.cat([b + 1, b + 2, b])]))
    part = partition_nodes(tri, 3000, 10)
    assert _kept(tri, part) > 0.95 and torch.bincount(part).max() <= 300
    n = 60
    idx = torch.arange(n * n).view(n, n)
    h, v = torch.stack([idx[:, :-1].reshape(-1), idx[:, 1:].reshape(-1)]), torch.stack([idx[:-1].reshape(-1),
                                                                                       idx[1:].reshape(-1)])
    grid = _und(torch.cat([h, v], 1))
    assert _kept(grid, partition_nodes(grid, n * n, 8)) > 0.85
    a = torch.arange(0, 20_000, 2)  # 10,000 separate pairs, few parts: whole pairs, few rounds
    pairs = _und(torch.stack([a, a + 1]))
    assert _kept(pairs, partition_nodes(pairs, 20_000, 4)) > 0.98
    # every part gets a node even when few nodes have edges; numpy integers are accepted
    import numpy as np

    for seed in range(5):
        sizes = torch.bincount(partition_nodes(torch.tensor([[0], [1]]), 21, np.int64(10), seed=seed), minlength=10)
        assert int(sizes.min()) >= 1 and int(sizes.max()) <= 3
    # isolated nodes and an empty edge set: every node placed, sizes capped
    iso = partition_nodes(torch.zeros(2, 0, dtype=torch.long), 50, 4)
    assert iso.shape == (50,) and torch.bincount(iso).max() <= 13
    # max_rounds=0: no growth at all, the random fill still places every node within the cap
    assert torch.bincount(partition_nodes(path, N, 4, max_rounds=0)).max() <= 2500


@pytest.mark.parametrize("call,match", [
    (lambda ei: partition_nodes(ei, 3, 0), "num_parts"),
    (lambda ei: partition_nodes(ei, 3, 2.5), "num_parts"),
    (lambda ei: partition_nodes(ei[0], 3, 2), r"\(2, E\)"),
    (lambda ei: partition_nodes(ei - 1, 3, 2), "negative node indices"),
    (lambda ei: partition_nodes(ei + 1, 3, 2), "refers to node 3"),
    (lambda ei: PartitionBatches(Data(edge_index=ei, num_nodes=3), torch.tensor([0, 1, 0]), 0), "parts_per_batch"),
    (lambda ei: PartitionBatches(Data(edge_index=ei, num_nodes=3), torch.tensor([0, -1, 0])), "negative"),
    (lambda ei: PartitionBatches(Data(edge_index=ei, num_nodes=3), torch.tensor([0.0, 1.0, 0.0])), "integer"),
    (lambda ei: node_loaders(Data(edge_index=ei, num_nodes=3), {}, num_parts=0), "num_parts"),
    (lambda ei: node_loaders(Data(edge_index=ei, num_nodes=3), {}, batch_nodes=0), "batch_nodes"),
    (lambda ei: sbm_graph(10, 46), "distinct node pairs"),
    (lambda ei: sbm_graph(10, 30, num_blocks=5, p_in=1.0), "inside blocks"),
    (lambda ei: sbm_graph(100, 200, chunk=0), "chunk"),
    (lambda ei: sbm_graph(0, 0), "num_nodes"),
    (lambda ei: sbm_graph(100, 200, num_blocks=0), "num_blocks"),
    (lambda ei: sbm_graph(5, 4, num_blocks=10), "num_blocks"),
    (lambda ei: sbm_graph(100, 200, power=1.0), "power"),
    (lambda ei: sbm_graph(100, 200, p_in=1.5), "p_in"),
    (lambda ei: sbm_graph(10, -5), "num_edges"),
])
def test_bad_arguments_name_themselves(call, match):
    with pytest.raises(ValueError, match=match):
        call(torch.tensor([[0, 1, 2], [1, 2, 0]]))


def test_float_edge_index_and_other_int_types():
    with pytest.raises(TypeError, match="integer dtype"):
        partition_nodes(torch.tensor([[0.0, 1.0], [1.0, 0.0]]), 2, 2)
    import numpy as np

    from graphattn.utils.validation import check_int

    assert check_int("k", np.int64(3), 1) == 3 and check_int("k", torch.tensor(2), 0) == 2
    for bad in (True, 2.5, torch.tensor(2.0), "3", 0):
        with pytest.raises(ValueError, match="k must be an int >= 1"):
            check_int("k", bad, 1)


def test_sbm_graph_can_be_complete():
    d = sbm_graph(10, 45, num_blocks=2)
    assert d.edge_index.shape == (2, 90) and len(d.class_names) == 2


def test_partition_batches_cut_edge_attr_with_their_edges():
    d = sbm_graph(300, 1500, num_blocks=3)
    d.edge_attr = torch.randn(d.edge_index.size(1), 3)
    lookup = {(int(s), int(t)): d.edge_attr[k] for k, (s, t) in enumerate(d.edge_index.t().tolist())}
    part = partition_nodes(d.edge_index, d.num_nodes, 6)
    seen = 0
    for b in PartitionBatches(d, part, parts_per_batch=2):
        assert b.edge_attr.shape == (b.edge_index.size(1), 3)
        for k, (s, t) in enumerate(b.edge_index.t().tolist()):
            assert torch.equal(b.edge_attr[k], lookup[(int(b.n_id[s]), int(b.n_id[t]))])
        seen += b.edge_index.size(1)
    assert seen > 0
    spec = {"class": "NodeClassifier", "input_dropout": 0.0,
            "kwargs": dict(in_channels=16, hidden_channels=8, num_classes=3, num_layers=1, heads=2, edge_dim=3)}
    loaders, fwd = node_loaders(d, spec, num_parts=4, parts_per_batch=2)
    res = fit(NodeClassifier(**spec["kwargs"]), loaders, fwd, kind="multiclass", epochs=1, progress=False,
              log=lambda s: None)  # the edge features reach the model
    assert res["epochs_run"] == 1


def test_models_refuse_edge_attr_and_pe_they_were_not_built_for():
    x, ei = torch.randn(4, 8), torch.tensor([[0, 1, 2], [1, 2, 3]])
    for model in (NodeClassifier(8, 16, 2), GraphClassifier(8, 16, 2, num_layers=1)):
        with pytest.raises(ValueError, match="edge_dim"):
            model(x, ei, edge_attr=torch.randn(3, 3))
        with pytest.raises(ValueError, match="pe_dim"):
            model(x, ei, pe=torch.randn(4, 4))
        assert torch.isfinite(model(x, ei)).all()


@pytest.mark.parametrize("local", ["gin", "gine"])
def test_int32_edge_index_with_a_local_mpnn(local):
    torch.manual_seed(0)
    x, ei = torch.randn(5, 8), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    kw = dict(edge_dim=3) if local == "gine" else {}
    model = GraphClassifier(8, 16, 2, num_layers=1, local_mpnn=local, **kw).eval()
    ea = {"edge_attr": torch.randn(4, 3)} if local == "gine" else {}
    assert torch.allclose(model(x, ei.int(), **ea), model(x, ei, **ea), atol=1e-6)


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's notes on sparse tensors
def test_sparse_adjacency_is_adj_t_for_the_layer_and_a_clear_error_elsewhere():
    from graphattn import NodeClassifier, edge_attention

    adj = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.ones(2), (2, 2))
    x = torch.randn(2, 4)
    layer = GraphSelfAttention(4, 4)
    for a in (adj, adj.to_sparse_csr()):  # the layer reads PyG's adj_t (edge j -> i at [i, j])
        torch.testing.assert_close(layer(x, a), layer(x, torch.tensor([[1, 0], [0, 1]])))
        model = NodeClassifier(4, 8, 2).eval()  # the models read it too (session 15); the functional API does not
        torch.testing.assert_close(model(x, a), model(x, torch.tensor([[1, 0], [0, 1]])))
        with pytest.raises(TypeError, match="sparse"):
            edge_attention(torch.randn(2, 1, 4), torch.randn(2, 1, 4), torch.randn(2, 1, 4), a)


def test_bench_without_such_script_lists_the_available_ones(capsys):
    from graphattn.cli.main import main

    assert main(["bench", "no_such_benchmark"]) == 2
    err = capsys.readouterr().err
    assert "large_graph" in err and "attention" in err

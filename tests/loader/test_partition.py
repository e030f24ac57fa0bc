"""Mini-batch mode for one large graph: partitions, induced subgraphs, memory bound, training."""
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from graphattn import NodeClassifier
from graphattn.loader.partition import PartitionBatches, partition_nodes
from graphattn.nn import ConvBaseline
from graphattn.tasks.social.minibatch import node_loaders
from graphattn.testing import saved_tensor_bytes, sbm_graph
from graphattn.train import TrainConfig, fit, task_loss


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # small graphs: thread start-up dominates, and the test machine is shared
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def mid():
    """A mid-size synthetic social graph: 12k nodes, 120k undirected edges."""
    return sbm_graph(12_000, 120_000, num_blocks=10, num_features=16, seed=0)


def test_sbm_graph_is_what_it_says():
    d = sbm_graph(3000, 20_000, num_blocks=5, p_in=0.8, seed=1)
    ei = d.edge_index
    assert ei.shape == (2, 40_000) and d.num_nodes == 3000 and d.x.shape == (3000, 16)
    assert bool((ei[0] != ei[1]).all())  # no self-loops
    keys = ei[0] * 3000 + ei[1]
    assert keys.unique().numel() == keys.numel()  # no duplicates
    assert torch.equal(torch.sort(keys).values, torch.sort(ei[1] * 3000 + ei[0]).values)  # symmetric
    assert (d.y[ei[0]] == d.y[ei[1]]).float().mean() > 0.75  # mostly inside blocks
    masks = torch.stack([d.train_mask, d.val_mask, d.test_mask])
    assert bool((masks.sum(0) == 1).all())


@pytest.mark.parametrize("method", ["bfs", "random"])
def test_partitions_cover_all_nodes_within_capacity(mid, method):
    P = 16
    part = partition_nodes(mid.edge_index, mid.num_nodes, P, method=method, seed=0)
    assert part.shape == (mid.num_nodes,) and int(part.min()) >= 0 and int(part.max()) < P
    assert int(torch.bincount(part, minlength=P).max()) <= math.ceil(mid.num_nodes / P)
    assert torch.equal(part, partition_nodes(mid.edge_index, mid.num_nodes, P, method=method, seed=0))


def test_bfs_partitions_keep_more_edges_than_random(mid):
    kept = {}
    for method in ("bfs", "random"):
        part = partition_nodes(mid.edge_index, mid.num_nodes, 16, method=method)
        kept[method] = float((part[mid.edge_index[0]] == part[mid.edge_index[1]]).float().mean())
    assert kept["bfs"] > 2 * kept["random"]


def test_batches_are_induced_subgraphs_and_cover_every_node_once(mid):
    part = partition_nodes(mid.edge_index, mid.num_nodes, 12, seed=0)
    loader = PartitionBatches(mid, part, parts_per_batch=5, shuffle=False)
    assert len(loader) == 3
    seen = []
    for b in loader:
        seen.append(b.n_id)
        ref, _ = subgraph(b.n_id, mid.edge_index, num_nodes=mid.num_nodes)
        ours = b.n_id[b.edge_index]  # back to global ids
        key = lambda ei: torch.sort(ei[0] * mid.num_nodes + ei[1]).values  # noqa: E731
        assert torch.equal(key(ours), key(ref))
        assert torch.equal(b.x, mid.x[b.n_id]) and torch.equal(b.y, mid.y[b.n_id])
        assert torch.equal(b.train_mask, mid.train_mask[b.n_id])
    assert torch.equal(torch.sort(torch.cat(seen)).values, torch.arange(mid.num_nodes))
    torch.manual_seed(0)
    shuffled = PartitionBatches(mid, part, parts_per_batch=5, shuffle=True)
    assert torch.equal(torch.sort(torch.cat([b.n_id for b in shuffled])).values, torch.arange(mid.num_nodes))


def _saved(model, x, edge_index, y, mask):
    model.train()
    (loss, _), nbytes = saved_tensor_bytes(lambda: (task_loss("multiclass", model(x, edge_index)[mask], y[mask]), 0))
    loss.backward()
    assert math.isfinite(float(loss.detach()))
    return nbytes


def test_mini_batch_memory_is_bounded_by_the_batch(mid):
    """Autograd's saved activations for one mini-batch step scale with the batch: far
    below a full-batch step of our model and of PyG's TransformerConv (whose (E, H, C)
    messages are kept for backward)."""
    torch.manual_seed(0)
    P, q = 16, 2
    part = partition_nodes(mid.edge_index, mid.num_nodes, P, seed=0)
    loader = PartitionBatches(mid, part, parts_per_batch=q, shuffle=False)
    batches = list(loader)
    n_max = max(b.num_nodes for b in batches)
    e_max = max(b.edge_index.size(1) for b in batches)
    assert n_max <= q * math.ceil(mid.num_nodes / P)  # count bound on the largest batch
    assert e_max < mid.edge_index.size(1) / 4

    ours = NodeClassifier(16, 64, 10, num_layers=2, heads=4, num_global_tokens=1)
    big = max(batches, key=lambda b: b.edge_index.size(1))
    batch_bytes = _saved(ours, big.x, big.edge_index, big.y, big.train_mask)
    full_bytes = _saved(ours, mid.x, mid.edge_index, mid.y, mid.train_mask)
    pyg = ConvBaseline("transformer", 16, 64, 10, num_layers=2, heads=4, dropout=0.0)
    pyg_bytes = _saved(pyg, mid.x, mid.edge_index, mid.y, mid.train_mask)
    # linear in the batch: within 1.5x of the full-batch bytes scaled by the batch's share of nodes
    assert batch_bytes < 1.5 * full_bytes * n_max / mid.num_nodes + 2**20
    assert batch_bytes * 4 < full_bytes
    assert batch_bytes * 8 < pyg_bytes
    # PyG keeps per-edge messages: E * H * C * 4 bytes per layer at least
    assert pyg_bytes > mid.edge_index.size(1) * 64 * 4


def test_mini_batch_training_learns():
    data = sbm_graph(5000, 40_000, num_blocks=10, num_features=16, seed=2)
    spec = {"class": "NodeClassifier", "input_dropout": 0.0,
            "kwargs": dict(in_channels=16, hidden_channels=32, num_classes=10, num_layers=2, heads=4,
                           num_global_tokens=1)}
    loaders, forward = node_loaders(data, spec, seed=0, num_parts=8, parts_per_batch=2)
    torch.manual_seed(0)
    model = NodeClassifier(**spec["kwargs"])
    res = fit(model, loaders, forward, TrainConfig(kind="multiclass", epochs=3, lr=1e-2, progress=False), log=lambda s: None)
    assert all(math.isfinite(h["loss"]) for h in res["history"])
    assert res["test"]["accuracy"] > 0.3  # 10 classes: chance is 0.1


def test_benchmark_quick_runs_within_budget(tmp_path):
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "large_graph.py"
    spec = importlib.util.spec_from_file_location("bench_large_graph", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = mod.main(["--nodes", "10000", "--edges", "50000", "--batch-nodes", "2500", "--epochs", "1",
                    "--no-progress", "--json", str(tmp_path / "r.json")])
    assert res["within_memory_budget"] and res["peak_rss_gb"] < 24
    assert res["saved_bytes_batch"] < res["saved_bytes_full_batch_estimate"]
    assert 0.0 <= res["test_accuracy"] <= 1.0 and (tmp_path / "r.json").exists()


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
    res = fit(NodeClassifier(**spec["kwargs"]), loaders, fwd, TrainConfig(kind="multiclass", epochs=2, progress=False), log=lambda s: None)
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in res["history"])
    z = torch.randn(0, 3, requires_grad=True)
    loss = task_loss("multiclass", z, torch.zeros(0))
    loss.backward()
    assert loss.item() == 0.0 and z.grad.shape == (0, 3)


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
    res = fit(NodeClassifier(**spec["kwargs"]), loaders, fwd, TrainConfig(kind="multiclass", epochs=1, progress=False), log=lambda s: None)  # the edge features reach the model
    assert res["epochs_run"] == 1

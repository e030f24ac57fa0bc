"""Mini-batch training on a synthetic social graph too large for a full-batch step.

A degree-corrected stochastic block model (default 2,000,000 nodes, 20,000,000 undirected
edges = 40 M directed entries, 10 blocks = classes, 16 noisy features) is generated in
chunks, split into BFS partitions, and a NodeClassifier with one global token per
mini-batch is trained on induced subgraphs of ``--parts-per-batch`` partitions through the
shared loop (:func:`graphattn.train.fit`). Reported: generation and partition time, time
per training epoch and per evaluation pass, accuracy, the largest mini-batch, the bytes
autograd saves for one mini-batch step (measured) and for a full-batch step (extrapolated
per node and edge from the same measurement), and the peak RSS of the process (must stay
under ``--max-rss-gb``, 24 by default).

    python benchmarks/large_graph.py                 # the full 2 M / 20 M run (minutes)
    python benchmarks/large_graph.py --quick         # 50 k nodes / 500 k edges (seconds)
    python benchmarks/large_graph.py --sampler neighbor --num-neighbors 10,10 --seed-batch 1024
                                                     # neighbour-sampled mini-batches instead
    graphattn bench large_graph --quick --json out.json
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graphattn.tasks.social.minibatch import neighbor_loaders, node_loaders  # noqa: E402
from graphattn.tasks.social.node_model import NodeModelSpec  # noqa: E402
from graphattn.testing import saved_tensor_bytes, sbm_graph  # noqa: E402
from graphattn.train import TrainConfig, fit, task_loss  # noqa: E402


def rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # Linux: KiB


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=2_000_000)
    p.add_argument("--edges", type=int, default=20_000_000, help="undirected edges")
    p.add_argument("--blocks", type=int, default=10)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--global-tokens", type=int, default=1)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-nodes", type=int, default=100_000, help="nodes per mini-batch (about)")
    p.add_argument("--parts-per-batch", type=int, default=4)
    p.add_argument("--method", choices=("bfs", "random"), default="bfs")
    p.add_argument("--sampler", choices=("partition", "neighbor"), default="partition",
                   help="partition mini-batches (default) or neighbour sampling (graphattn.NeighborLoader)")
    p.add_argument("--num-neighbors", default="10,10", help="neighbor: edges per node and hop")
    p.add_argument("--seed-batch", type=int, default=1024, help="neighbor: seed nodes per mini-batch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--max-rss-gb", type=float, default=24.0)
    p.add_argument("--quick", action="store_true", help="50k nodes, 500k edges, 1 epoch (smoke test)")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    if a.quick:
        a.nodes, a.edges, a.epochs, a.batch_nodes = 50_000, 500_000, 1, 10_000
    for name in ("epochs", "hidden", "layers", "heads", "parts_per_batch", "features", "blocks"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    res = {"nodes": a.nodes, "undirected_edges": a.edges, "hidden": a.hidden, "layers": a.layers,
           "heads": a.heads, "global_tokens": a.global_tokens, "threads": torch.get_num_threads()}

    t = time.perf_counter()
    data = sbm_graph(a.nodes, a.edges, num_blocks=a.blocks, num_features=a.features, seed=a.seed)
    res["generate_s"], res["rss_after_generate_gb"] = time.perf_counter() - t, rss_gb()
    print(f"SBM graph: {a.nodes:,} nodes, {data.edge_index.size(1):,} directed edges, {a.blocks} classes "
          f"| {res['generate_s']:.1f} s | peak RSS {res['rss_after_generate_gb']:.2f} GB", flush=True)

    spec = NodeModelSpec("NodeClassifier", dict(
        in_channels=a.features, hidden_channels=a.hidden, num_classes=a.blocks, num_layers=a.layers,
        heads=a.heads, num_global_tokens=a.global_tokens, dropout=0.1), input_dropout=0.0)
    t = time.perf_counter()
    if a.sampler == "neighbor":
        fanouts = [int(v) for v in a.num_neighbors.split(",")]
        loaders, forward = neighbor_loaders(data, spec, fanouts, batch_size=a.seed_batch)
        train = loaders["train"]
        res.update(sampler=f"neighbor {fanouts} x {a.seed_batch} seeds", batches_per_epoch=len(train),
                   partition_s=time.perf_counter() - t)
        batch = max((next(iter(train)) for _ in range(3)), key=lambda b: b.num_nodes)  # a large one of 3
        layout = f"{a.seed_batch} seeds, {fanouts}"
    else:
        loaders, forward = node_loaders(data, spec, seed=a.seed, batch_nodes=a.batch_nodes,
                                        parts_per_batch=a.parts_per_batch, method=a.method)
        train = loaders["train"]
        res.update(sampler="partition", partition_s=time.perf_counter() - t, num_parts=train.num_parts,
                   batches_per_epoch=len(train))
        inside, total = train.coverage()
        res["edges_inside_parts"] = inside / total
        print(f"partition ({a.method}): {train.num_parts} parts, {len(train)} batches of ~{a.batch_nodes:,} nodes "
              f"| {res['partition_s']:.1f} s | peak RSS {rss_gb():.2f} GB", flush=True)
        sizes = [(int(train.node_ptr[g + 1] - train.node_ptr[g]), g) for g in range(train.num_parts)]
        biggest = torch.tensor([g for _, g in sorted(sizes)[-a.parts_per_batch:]])
        batch = train.subgraph(biggest)  # the largest mini-batch
        layout = f"{train.num_parts} parts x {a.parts_per_batch}"

    model = spec.build()
    # activation memory of one training step on a (the largest) mini-batch, and per node / edge
    model.train()
    (loss, _), saved = saved_tensor_bytes(lambda: _step(model, forward, batch))
    loss.backward()
    model.zero_grad(set_to_none=True)
    n_b, e_b = batch.num_nodes, batch.edge_index.size(1)
    # saved bytes are linear in nodes and edges; the per-edge part is the (E, H) weights
    per_edge = 4 * a.heads * a.layers * 2 + 8 * 2  # weights (+ dropout mask) and the edge ids
    per_node = (saved - per_edge * (e_b + 2 * n_b * a.global_tokens)) / n_b
    full = per_node * a.nodes + per_edge * (data.edge_index.size(1) + 2 * a.nodes * a.global_tokens)
    res.update(largest_batch_nodes=n_b, largest_batch_edges=e_b, saved_bytes_batch=saved,
               saved_bytes_full_batch_estimate=full)
    print(f"largest mini-batch: {n_b:,} nodes, {e_b:,} edges; autograd saves {saved / 2**20:.0f} MiB "
          f"(full batch would save ~{full / 2**30:.1f} GiB)", flush=True)
    batch = None  # free the mini-batch before training

    t = time.perf_counter()
    out = fit(model, loaders, forward,
              TrainConfig(kind="multiclass", epochs=a.epochs, lr=3e-3, seed=a.seed, progress=not a.no_progress))
    wall = time.perf_counter() - t
    train_s = [h["seconds"] for h in out["history"]]
    res.update(epochs=a.epochs, seconds_per_epoch=sum(train_s) / len(train_s),
               eval_seconds_per_epoch=(wall - sum(train_s)) / (a.epochs + 2),  # + final train and val passes
               train_accuracy=out["train"]["accuracy"], val_accuracy=out["val"]["accuracy"],
               test_accuracy=out["test"]["accuracy"], peak_rss_gb=rss_gb(), max_rss_gb=a.max_rss_gb)
    res["within_memory_budget"] = res["peak_rss_gb"] < a.max_rss_gb
    print("\n| nodes | edges (undirected) | mini-batches | train s/epoch | eval s/pass | test acc | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {a.nodes:,} | {a.edges:,} | {layout} | {res['seconds_per_epoch']:.1f} "
          f"| {res['eval_seconds_per_epoch']:.1f} | {res['test_accuracy']:.3f} | {res['peak_rss_gb']:.2f} GB |")
    cmp = "<" if res["within_memory_budget"] else ">="
    print(f"peak RSS {res['peak_rss_gb']:.2f} GB {cmp} {a.max_rss_gb} GB budget; "
          f"{torch.get_num_threads()} threads")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return res


def _step(model, forward, batch):
    logits, y = forward(model, batch, "train")
    return task_loss("multiclass", logits, y), logits


if __name__ == "__main__":
    r = main()
    sys.exit(0 if r["within_memory_budget"] else 1)

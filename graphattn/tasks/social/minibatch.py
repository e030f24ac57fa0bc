"""Mini-batch training of node classifiers on large graphs: the loaders of :mod:`graphattn.loader`
(partitions or sampled neighbourhoods) paired with the node task's ``forward`` for :func:`graphattn.train.fit`."""
from __future__ import annotations

from typing import Optional, Sequence

from torch_geometric.data import Data

from graphattn.loader.neighbor_loader import NeighborLoader
from graphattn.loader.partition import PartitionBatches, default_partitioning, partition_nodes
from graphattn.tasks.social.node import EvalCache
from graphattn.tasks.social.node_model import NodeModelSpec, node_inputs, run_model
from graphattn.train.runtime import model_device
from graphattn.utils.validation import check_int

__all__ = ["node_loaders", "neighbor_loaders"]
def node_loaders(data: Data, model_spec: NodeModelSpec, seed: int = 0, num_parts: Optional[int] = None,
                 parts_per_batch: Optional[int] = None, batch_nodes: int = 50_000, method: str = "bfs"):
    """``(loaders, forward)`` for :func:`graphattn.train.fit` in mini-batch mode.

    Args:
        data: the whole graph (``x``, ``edge_index``, ``y``, ``train/val/test_mask``, optional
            ``pe``, ``edge_attr``).
        model_spec: the model recipe (:func:`graphattn.tasks.social.node_model.node_model_spec`).
        seed: seed of the partition.
        num_parts, parts_per_batch: P parts, q per mini-batch (default: about
            ``batch_nodes`` nodes per mini-batch, q = 4; :func:`default_partitioning`).
        batch_nodes (int, default 50,000): target mini-batch size when P is not given.
        method: ``"bfs"`` or ``"random"`` (:func:`partition_nodes`).

    Returns ``({"train", "val", "test"}: PartitionBatches, forward)``; training batches are
    re-drawn groups of parts, evaluation covers every node once.
    """
    for name, v in (("num_parts", num_parts), ("parts_per_batch", parts_per_batch)):
        if v is not None:
            check_int(name, v, 1)
    P, q = default_partitioning(data.num_nodes, batch_nodes)
    P, q = num_parts or P, parts_per_batch or q
    part = partition_nodes(data.edge_index, data.num_nodes, P, method=method, seed=seed)
    train = PartitionBatches(data, part, q, shuffle=True)
    evals = PartitionBatches(data, part, q, shuffle=False)
    inside, total = train.coverage()
    print(f"mini-batch: {train.num_parts} parts ({method}), {q} per batch, {len(train)} batches/epoch; "
          f"{inside / max(total, 1):.1%} of edges inside a part")
    cache = EvalCache()

    def forward(model, batch, split):
        key = batch.key  # before .to(), which turns the tuple into an (unhashable) list
        batch = batch.to(model_device(model))  # partitions are cut on the CPU
        inp = node_inputs(batch)
        logits = cache(model, key, lambda: run_model(model, model_spec, inp))
        mask = batch[f"{split}_mask"]
        return logits[mask], batch.y[mask]

    return {"train": train, "val": evals, "test": evals}, forward


def neighbor_loaders(data: Data, model_spec: NodeModelSpec, num_neighbors: Sequence[int], batch_size: int = 1024):
    """``(loaders, forward)`` for :func:`graphattn.train.fit` in neighbour-sampling mode
    (``graphattn train ... --mini-batch neighbor``): the training, validation and test nodes are
    the seeds of their splits' loaders (training ones shuffled every epoch, from the global RNG
    so a resumed run continues identically; validation and test batches are drawn from a fixed
    seed, the same on every pass); the loss and the metrics read the seeds' rows. The three share
    one CSR of the graph."""
    train = NeighborLoader(data, num_neighbors, batch_size, input_nodes=data.train_mask, shuffle=True)
    # evaluation: the same sampled neighbourhoods on every pass (model selection sees no draw noise)
    loaders = {"train": train, "val": train.with_seeds(data.val_mask, seed=0),
               "test": train.with_seeds(data.test_mask, seed=1)}
    print(f"mini-batch: neighbour sampling {list(num_neighbors)} per hop, {batch_size} seed nodes per batch, "
          f"{len(loaders['train'])} batches/epoch")

    def forward(model, batch, split):
        batch = batch.to(model_device(model))
        bs = batch.batch_size
        return run_model(model, model_spec, node_inputs(batch))[:bs], batch.y[:bs]

    return loaders, forward

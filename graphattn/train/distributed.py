"""Distributed data-parallel training on ``torch.distributed`` (gloo on CPU, NCCL on GPUs).

Launch any training command with ``torchrun``; :func:`init_from_env` reads the variables
torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).
:func:`graphattn.train.fit` then wraps the model in ``DistributedDataParallel``, shards the
training batches with :func:`shard_loader` (a ``DistributedSampler`` keeps the global batch:
each of W ranks takes ``batch_size // W`` graphs of the same shuffled order a single process
would use), averages the logged loss over ranks, and lets only rank 0 write checkpoints and
logs. Validation and test run unsharded on every rank, so every rank sees the same metrics.
"""
from __future__ import annotations

import os
from typing import Any, Iterable, Optional, Tuple

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

__all__ = ["DistributedSetupError", "init_from_env", "is_distributed", "rank", "world_size", "is_main",
           "shard_loader", "all_reduce_sum", "cleanup"]


class DistributedSetupError(ValueError):
    """A ``--distributed`` run that cannot be set up as asked (torchrun's environment, a batch
    size the ranks cannot share, too few batches): one clear line, not a traceback per rank."""


def _env_int(name: str, minimum: int) -> int:
    text = os.environ.get(name, "").strip()
    try:
        val = int(text)
    except ValueError:
        raise DistributedSetupError(f"environment variable {name}={os.environ.get(name)!r} is not an integer "
                                    "(torchrun sets it)") from None
    if val < minimum:
        raise DistributedSetupError(f"environment variable {name}={val} must be >= {minimum}")
    return val


def init_from_env(backend: Optional[str] = None, device=None) -> Tuple[int, int]:
    """Initialise the default process group from torchrun's environment; returns (rank, world).

    Without torchrun variables it does nothing and returns ``(0, 1)``. ``backend`` defaults to
    ``"nccl"`` when the training device (``device``, default: the GPU when CUDA is available)
    is a GPU, else ``"gloo"``; with NCCL each process uses the GPU of its ``LOCAL_RANK``.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if "WORLD_SIZE" not in os.environ or _env_int("WORLD_SIZE", 1) <= 1:
        return 0, 1
    world = _env_int("WORLD_SIZE", 1)
    if "RANK" not in os.environ:
        raise DistributedSetupError(f"WORLD_SIZE={world} but RANK is not set: launch with torchrun, "
                                    "which sets both")
    r = _env_int("RANK", 0)
    if not 0 <= r < world:  # init_process_group would wait for ranks that never come
        raise DistributedSetupError(f"RANK={r} is outside [0, WORLD_SIZE={world})")
    for name in ("LOCAL_RANK", "MASTER_PORT"):
        if name in os.environ:
            _env_int(name, 0)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = backend or ("nccl" if torch.device(device).type == "cuda" else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    try:
        dist.init_process_group(backend=backend)
    except ValueError as exc:  # rendezvous settings (MASTER_ADDR missing, ...)
        raise DistributedSetupError(f"cannot start the process group: {str(exc).splitlines()[0]}") from exc
    return dist.get_rank(), dist.get_world_size()


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    return rank() == 0


def all_reduce_sum(*values: float) -> Tuple[float, ...]:
    """Sum plain numbers over all ranks (identity when not distributed)."""
    if not is_distributed():
        return values
    # NCCL reduces GPU tensors only
    t = torch.tensor(values, dtype=torch.float64, device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t)
    return tuple(float(v) for v in t)


def shard_loader(loader: Iterable, seed: int = 0) -> Tuple[Iterable, Any]:
    """Give this rank its shard of the training batches; returns ``(loader, sampler)``.

    A ``torch.utils.data.DataLoader`` (PyG's included) is rebuilt with a
    ``DistributedSampler`` (shuffle, ``seed``) and per-rank batch size ``batch_size // W``,
    so the global batch and the epoch's order equal a single process's with the same sampler
    (a plain single-process ``DataLoader(shuffle=True)`` draws another order: the runs differ).
    A loader with ``set_shard(rank, world, seed)`` (:class:`~graphattn.loader.partition.PartitionBatches`,
    :class:`~graphattn.NeighborLoader`) shards itself: the same freshly drawn batch order on every
    rank each epoch, rank r taking batches r, r + W, .... A plain list of batches is split
    round-robin; it needs at least W batches.
    """
    W, r = world_size(), rank()
    if W == 1:
        return loader, None
    if hasattr(loader, "set_shard"):
        loader.set_shard(r, W, seed)
        if len(loader) < 1:
            raise DistributedSetupError(f"the mini-batch loader has fewer batches than the {W} ranks: use "
                                        "fewer processes or smaller batches")
        # it numbers its epochs itself; fit sets the epoch, so a resumed process continues the sequence
        return loader, (loader if hasattr(loader, "set_epoch") else None)
    if isinstance(loader, DataLoader):
        bs = loader.batch_size or 1
        if bs % W:
            raise DistributedSetupError(f"batch size {bs} is not divisible by the world size {W}: "
                                        "the global batch could not be kept (give a --batch-size that is)")
        sampler = DistributedSampler(loader.dataset, num_replicas=W, rank=r, shuffle=True, seed=seed)
        return DataLoader(loader.dataset, batch_size=bs // W, sampler=sampler,
                          collate_fn=loader.collate_fn, num_workers=loader.num_workers), sampler
    items = list(loader)
    if len(items) < W:
        raise DistributedSetupError(f"{len(items)} training batch(es) cannot be shared by {W} ranks; use the "
                         "mini-batch mode (node tasks on one graph) or fewer processes")
    return items[r::W], None


def cleanup() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()

"""DDP with gloo on 2 CPU processes reproduces single-process training with the same global batch."""
import datetime
import json
import os
import re
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data.distributed import DistributedSampler
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from graphattn import GraphClassifier, NodeClassifier
from graphattn.cli import commands
from graphattn.cli.main import main
from graphattn.data import load_karate, stratified_masks
from graphattn.loader.partition import PartitionBatches, partition_nodes
from graphattn.train import TrainConfig
from graphattn.train import distributed
from graphattn.train import distributed as D
from graphattn.train import fit, set_seed

GLOBAL_BATCH, EPOCHS = 8, 3


def dataset():
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(32):
        n = 3 + i % 5
        ei = torch.randint(0, n, (2, 2 * n), generator=g)
        out.append(Data(x=torch.randn(n, 4, generator=g), edge_index=ei, y=torch.tensor([n % 2])))
    return out


def run(world, rank, out_dir, store):
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)

    data = dataset()
    torch.manual_seed(0)
    model = GraphClassifier(4, 16, 2, num_layers=2, heads=2, num_global_tokens=1)
    if world > 1:
        train = DataLoader(data, batch_size=GLOBAL_BATCH, shuffle=True)  # fit shards it
        res = fit(model, {"train": train, "val": DataLoader(data, batch_size=16)}, forward, TrainConfig(kind="multiclass", epochs=EPOCHS, lr=0.01, progress=False), out_dir=out_dir)
    else:  # the same global batches: one replica of the same DistributedSampler
        sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=0)
        train = DataLoader(data, batch_size=GLOBAL_BATCH, sampler=sampler)
        res = _single(model, train, sampler, data, out_dir)
    if world > 1:
        dist.destroy_process_group()
    return res


def _single(model, train, sampler, data, out_dir):
    class Reseeding:  # calls set_epoch like fit does for its own sharded loader
        def __iter__(self):
            Reseeding.epoch = getattr(Reseeding, "epoch", 0) + 1
            sampler.set_epoch(Reseeding.epoch)
            return iter(train)
    return fit(model, {"train": Reseeding(), "val": DataLoader(data, batch_size=16)}, forward, TrainConfig(kind="multiclass", epochs=EPOCHS, lr=0.01, progress=False), out_dir=out_dir)


def forward(model, b, split):
    return model(b.x, b.edge_index, b.batch, num_graphs=b.num_graphs), b.y


def worker(rank, world, out_dir, store):
    run(world, rank, out_dir, store)


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed not available")
def test_two_gloo_ranks_match_single_process(tmp_path):
    single = run(1, 0, tmp_path / "single", None)
    mp.spawn(worker, args=(2, str(tmp_path / "ddp"), str(tmp_path / "store")), nprocs=2, join=True)
    ddp = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    losses_1 = [h["loss"] for h in single["history"]]
    losses_2 = [h["loss"] for h in ddp["history"]]
    assert len(losses_2) == EPOCHS
    assert losses_2 == pytest.approx(losses_1, rel=1e-4, abs=1e-5)
    assert ddp["val"]["accuracy"] == pytest.approx(single["val"]["accuracy"])
    assert sorted(os.listdir(tmp_path / "ddp")) == ["best.pt", "curves.png", "last.pt", "metrics.json", "train.log"]  # rank 0 only


def nan_worker(rank, world, store, out_dir):
    torch.set_num_threads(1)
    # a short timeout: a rank left waiting in the all-reduce fails the test instead of hanging it
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model = GraphClassifier(4, 16, 2, num_layers=1, heads=2)

    def nan_on_rank0(m, b, split):
        logits, y = forward(m, b, split)
        return (logits * float("nan") if rank == 0 and split == "train" else logits), y

    data = dataset()
    try:
        fit(model, {"train": DataLoader(data, batch_size=GLOBAL_BATCH, shuffle=True)}, nan_on_rank0, TrainConfig(kind="multiclass", epochs=2, progress=False))
        outcome = "finished"
    except FloatingPointError as exc:
        outcome = str(exc)
    with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
        f.write(outcome)
    dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed not available")
def test_nan_loss_on_one_rank_stops_every_rank(tmp_path):
    # raising on rank 0 alone would leave rank 1 waiting in DDP's gradient all-reduce
    mp.spawn(nan_worker, args=(2, str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = ((tmp_path / f"rank{r}.txt").read_text() for r in (0, 1))
    assert "epoch 1, batch 1" in r0
    assert "epoch 1" in r1 and "another rank" in r1 and "batch 1" not in r1


def test_only_rank_zero_prints(monkeypatch, capsys):
    """Under torchrun the ranks other than 0 are silent on stdout (rank 0 alone writes the files and
    says so); errors still reach stderr."""
    for main_rank, shown in ((True, "report\n"), (False, "")):
        monkeypatch.setattr(distributed, "is_main", lambda main_rank=main_rank: main_rank)
        with commands.quiet_unless_main():
            print("report")
            print("problem", file=sys.stderr)
        out, err = capsys.readouterr()
        assert out == shown and err == "problem\n"


def _sharded_partition_fit(monkeypatch, out, epochs, resume=False):
    """fit on karate's partition batches as rank 0 of 2 (the sharding of shard_loader, no process group)."""
    monkeypatch.setattr(D, "world_size", lambda: 2)
    monkeypatch.setattr(D, "rank", lambda: 0)
    data = load_karate()
    data.train_mask, data.val_mask, data.test_mask = stratified_masks(data.y, 0.6, 0.2, seed=0)
    part = partition_nodes(data.edge_index, data.num_nodes, 8)
    set_seed(0)
    model = NodeClassifier(data.num_features, 16, 2, num_layers=1, heads=2)

    def forward(m, b, split):
        mask = b[f"{split}_mask"]
        return m(b.x, b.edge_index)[mask], b.y[mask]

    loaders = {"train": PartitionBatches(data, part, parts_per_batch=2, shuffle=True), "val": [data]}
    res = fit(model, loaders, forward, TrainConfig(kind="multiclass", epochs=epochs, lr=1e-2, seed=0, resume=resume, progress=False), out_dir=out, log=lambda s: None)
    return res, int(data.train_mask.sum())


def test_resumed_sharded_mini_batches_continue_the_epoch_sequence(tmp_path, monkeypatch):
    # each new process numbered its epochs from 1 again: a resumed rank drew epoch 1's groups
    # for epoch 4, and the train metrics covered only rank 0's share of the training nodes
    whole, n_train = _sharded_partition_fit(monkeypatch, tmp_path / "whole", 6)
    _sharded_partition_fit(monkeypatch, tmp_path / "cut", 3)
    resumed, _ = _sharded_partition_fit(monkeypatch, tmp_path / "cut", 6, resume=True)
    assert [h["loss"] for h in resumed["history"]] == [h["loss"] for h in whole["history"]]
    assert resumed["train"] == whole["train"]
    correct = round(whole["train"]["accuracy"] * n_train)
    assert abs(whole["train"]["accuracy"] - correct / n_train) < 1e-6  # a fraction of all training nodes


@pytest.mark.parametrize("env,message", [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' is not an integer"),
    ({"WORLD_SIZE": "2"}, "RANK is not set"),
    ({"WORLD_SIZE": "2", "RANK": "x"}, "RANK='x' is not an integer"),
    ({"WORLD_SIZE": "2", "RANK": "5"}, r"RANK=5 is outside \[0, WORLD_SIZE=2\)"),  # init_process_group waited forever
    ({"WORLD_SIZE": "2", "RANK": "-1"}, "RANK=-1 must be >= 0"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "abc"}, "MASTER_PORT='abc' is not an integer"),
])
def test_bad_torchrun_environment_is_one_line(monkeypatch, capsys, tmp_path, env, message):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT", "MASTER_ADDR"):
        monkeypatch.delenv(name, raising=False)
    for name, val in env.items():
        monkeypatch.setenv(name, val)
    assert main(["train", "karate", "--distributed", "--mini-batch", "partition", "--epochs", "1",
                 "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphattn train: ") and len(err.strip().splitlines()) == 1
    assert re.search(message, err), err


def test_ranks_that_cannot_share_the_batches_get_a_setup_error(monkeypatch):
    monkeypatch.setattr(D, "world_size", lambda: 2)
    monkeypatch.setattr(D, "rank", lambda: 0)
    graphs = [Data(x=torch.ones(1, 1), edge_index=torch.zeros(2, 0, dtype=torch.long)) for _ in range(6)]
    with pytest.raises(D.DistributedSetupError, match="batch size 5 is not divisible"):
        D.shard_loader(DataLoader(graphs, batch_size=5))
    with pytest.raises(D.DistributedSetupError, match="cannot be shared by 2 ranks"):
        D.shard_loader([graphs[0]])

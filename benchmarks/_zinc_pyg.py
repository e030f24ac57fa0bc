"""The PyG rows of ``benchmarks/zinc.py``: PyG's ``examples/graph_gps.py`` recipe, built from PyG's own
modules (``GPSConv`` + ``GINEConv``, RWSE-20 through ``BatchNorm1d`` + ``Linear`` to 8 channels, add
pooling, the MLP head 64 → 32 → 16 → 1), trained as that example trains it (Adam 1e-3, weight decay
1e-5, ``ReduceLROnPlateau(factor 0.5, patience 20, min_lr 1e-5)`` on validation MAE, L1 loss, batch 32).

One change, so that every row of the table reads the same inputs: the example embeds PyG ``ZINC``'s
one atom-type column (``Embedding(28, 56)``) and bond type (``Embedding(4, 64)``); here the atom and
bond columns of graphattn's featurizer are embedded and summed (OGB's ``AtomEncoder`` pattern) into
the same 56 and 64 channels.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

import torch
from torch import nn
from torch.nn import BatchNorm1d, Embedding, Linear, ModuleList, ReLU, Sequential
from torch_geometric.nn import GINEConv, GPSConv, global_add_pool
from tqdm.auto import tqdm

__all__ = ["CategoricalEncoder", "GPS", "train_pyg_recipe"]


class CategoricalEncoder(nn.Module):
    """Sum of one embedding per categorical column (OGB's AtomEncoder / BondEncoder pattern)."""

    def __init__(self, vocab_sizes: Sequence[int], channels: int):
        super().__init__()
        self.embs = ModuleList(Embedding(int(v), channels) for v in vocab_sizes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.long().view(x.size(0), -1)
        return sum(emb(x[:, j]) for j, emb in enumerate(self.embs))


class GPS(nn.Module):
    """PyG ``examples/graph_gps.py``'s model (multihead attention, dropout 0.5) on our atom/bond columns."""

    def __init__(self, atom_vocab: Sequence[int], bond_vocab: Sequence[int], channels: int = 64, pe_dim: int = 8,
                 num_layers: int = 10, walk_length: int = 20):
        super().__init__()
        self.node_emb = CategoricalEncoder(atom_vocab, channels - pe_dim)
        self.pe_lin = Linear(walk_length, pe_dim)
        self.pe_norm = BatchNorm1d(walk_length)
        self.edge_emb = CategoricalEncoder(bond_vocab, channels)
        self.convs = ModuleList()
        for _ in range(num_layers):
            mlp = Sequential(Linear(channels, channels), ReLU(), Linear(channels, channels))
            self.convs.append(GPSConv(channels, GINEConv(mlp), heads=4, attn_type="multihead",
                                      attn_kwargs={"dropout": 0.5}))
        self.mlp = Sequential(Linear(channels, channels // 2), ReLU(), Linear(channels // 2, channels // 4), ReLU(),
                              Linear(channels // 4, 1))

    def forward(self, data) -> torch.Tensor:
        x = torch.cat((self.node_emb(data.x), self.pe_lin(self.pe_norm(data.random_walk_pe))), 1)
        edge_attr = self.edge_emb(data.edge_attr)
        for conv in self.convs:
            x = conv(x, data.edge_index, data.batch, edge_attr=edge_attr)
        return self.mlp(global_add_pool(x, data.batch)).view(-1)


@torch.no_grad()
def _mae(model: nn.Module, loader) -> float:
    """MAE per graph over a loader (PyG's convention: summed absolute errors / number of graphs)."""
    model.eval()
    total, n = 0.0, 0
    for data in loader:
        total += float((model(data) - data.y.view(-1)).abs().sum())
        n += data.num_graphs
    return total / max(n, 1)


def train_pyg_recipe(model: nn.Module, loaders: Dict[str, object], epochs: int, seed: int,
                     state_path: Optional[Path] = None, log: Callable[[str], None] = print,
                     progress: bool = True) -> Dict[str, object]:
    """Train as ``examples/graph_gps.py`` does; the model of the best validation MAE is kept (the
    example reports every epoch's test MAE; the table needs one). ``state_path``: saved after every
    epoch and resumed from when present. Returns the best epoch, val/test MAE there, the history and
    seconds per epoch."""
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-5)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=20, min_lr=1e-5)
    start, history, best = 1, [], {"val": math.inf, "epoch": 0, "state": None, "test": None}
    if state_path is not None and Path(state_path).is_file():
        ck = torch.load(state_path, weights_only=False)
        model.load_state_dict(ck["model"]), opt.load_state_dict(ck["opt"]), sched.load_state_dict(ck["sched"])
        start, history, best = ck["epoch"] + 1, ck["history"], ck["best"]
        torch.set_rng_state(ck["rng"])
        log(f"resumed at epoch {start}")
    for epoch in tqdm(range(start, epochs + 1), desc="gps", disable=not progress, leave=False):
        t0 = time.perf_counter()
        model.train()
        total, n = 0.0, 0
        for data in loaders["train"]:
            opt.zero_grad()
            loss = (model(data) - data.y.view(-1)).abs().mean()
            loss.backward()
            opt.step()
            total, n = total + loss.item() * data.num_graphs, n + data.num_graphs
        seconds = time.perf_counter() - t0
        val, test = _mae(model, loaders["val"]), _mae(model, loaders["test"])
        sched.step(val)
        history.append({"epoch": epoch, "loss": total / n, "val_mae": val, "test_mae": test, "seconds": seconds,
                        "lr": opt.param_groups[0]["lr"]})
        if val < best["val"]:
            best = {"val": val, "epoch": epoch, "test": test,
                    "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
        log(f"Epoch {epoch:03d} | loss {total / n:.4f} | val mae {val:.4f} | test mae {test:.4f} | {seconds:.1f}s")
        if state_path is not None:
            tmp = Path(f"{state_path}.tmp")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                        "epoch": epoch, "history": history, "best": best, "rng": torch.get_rng_state()}, tmp)
            tmp.replace(state_path)
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    return {"best_epoch": best["epoch"], "epochs_run": len(history), "history": history,
            "val": {"mae": best["val"]}, "test": {"mae": best["test"]},
            "seconds_per_epoch": sum(h["seconds"] for h in history) / max(len(history), 1)}

"""8x8 handwritten digits as pixel graphs: full vs grid (3x3 receptive field) attention vs an MLP.

scikit-learn ships the UCI digits set (1797 images of 8x8 pixels, 10 classes; no download).
Every image becomes a graph of 64 pixel nodes (feature: the grey level) with a 2-D
sinusoidal positional encoding (:func:`graphattn.images_to_batch`):

* ``full``: every pixel attends to every pixel (a tiny ViT with one pixel per patch; runs
  through the dense SDPA path since every graph is complete);
* ``grid``: every pixel attends to its 3x3 neighbourhood, as a convolution sees it (stacked
  layers widen the receptive field: 3 layers see 7x7);
* ``mlp``: a two-layer perceptron on the 64 pixel values (the usual baseline).

All three train with the same loop on the same stratified train/val/test split (fixed by
``--split-seed``); each ``--seeds`` entry changes only the initialisation and batch order.

    python examples/digits_as_graphs.py                     # a few minutes on CPU
    python examples/digits_as_graphs.py --epochs 5 --models grid mlp

Prints one line per epoch and a final table (test accuracy mean ± std over seeds, seconds per
epoch, parameters) and writes every number to ``--out`` (JSON).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from graphattn import GraphClassifier, images_to_batch
from graphattn.train import TrainConfig, fit, set_seed

MODELS = ("full", "grid", "mlp")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--split-seed", type=int, default=0, help="fixes the train/val/test split")
    p.add_argument("--test-size", type=float, default=0.2)
    p.add_argument("--val-size", type=float, default=0.1)
    p.add_argument("--limit", type=int, default=None, help="first N images only (smoke runs)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kernel-size", type=int, default=3, help="receptive field of 'grid'")
    p.add_argument("--pe-channels", type=int, default=16, help="2-D sinusoidal PE size (multiple of 4)")
    p.add_argument("--readout", default="max", choices=["mean", "sum", "max"],
                   help="graph readout (mean pooling starts on a long plateau here: at "
                        "initialisation every image's mean pixel state is almost the same)")
    p.add_argument("--mlp-hidden", type=int, default=128)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--progress", action="store_true", help="tqdm bars")
    p.add_argument("--out", default="runs/digits_as_graphs.json")
    return p.parse_args(argv)


def load_splits(test_size: float, val_size: float, seed: int, limit=None):
    """Images ``(n, 1, 8, 8)`` scaled to [0, 1], labels ``(n,)`` and stratified split indices."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (n, 1, 8, 8)
    labels = torch.tensor(digits.target, dtype=torch.long)
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    idx = list(range(labels.numel()))
    strat = labels.tolist()
    rest, test = train_test_split(idx, test_size=test_size, random_state=seed, stratify=strat)
    train, val = train_test_split(rest, test_size=val_size / (1 - test_size), random_state=seed,
                                  stratify=[strat[i] for i in rest])
    splits = {name: torch.tensor(sorted(s)) for name, s in (("train", train), ("val", val), ("test", test))}
    return images, labels, splits


class Batches:
    """Batches of dataset indices; reshuffled on every pass when ``shuffle``."""

    def __init__(self, index: torch.Tensor, batch_size: int, shuffle: bool):
        self.index, self.batch_size, self.shuffle = index, batch_size, shuffle

    def __iter__(self):
        order = torch.randperm(self.index.numel()) if self.shuffle else torch.arange(self.index.numel())
        return iter(self.index[order].split(self.batch_size))


def build(name: str, args) -> nn.Module:
    if name == "mlp":
        return nn.Sequential(nn.Linear(64, args.mlp_hidden), nn.GELU(), nn.Dropout(args.dropout),
                             nn.Linear(args.mlp_hidden, args.mlp_hidden), nn.GELU(),
                             nn.Dropout(args.dropout), nn.Linear(args.mlp_hidden, 10))
    return GraphClassifier(1, args.hidden, 10, num_layers=args.layers, heads=args.heads,
                           pe_dim=args.pe_channels, pe_kind="linear", dropout=args.dropout,
                           readout=args.readout)


def make_forward(name: str, images: torch.Tensor, labels: torch.Tensor, args):
    """``forward(model, idx, split) -> (logits, y)`` for :func:`graphattn.train.fit`."""
    templates = {}  # batch size -> images_to_batch of that many images (shared graph: CSR cached)

    def forward(model, idx, split):
        b, imgs = idx.numel(), images[idx]
        if name == "mlp":
            return model(imgs.view(b, 64)), labels[idx]
        if b not in templates:
            templates[b] = images_to_batch(torch.zeros(b, 1, 8, 8), name, kernel_size=args.kernel_size,
                                           pe_channels=args.pe_channels)
        t = templates[b]
        x = imgs.reshape(b * 64, 1)  # (N, 1): the node order of images_to_batch (row-major pixels)
        return model(x, t.edge_index, t.batch, pe=t.pe, num_graphs=b), labels[idx]

    return forward


def mean_std(xs):
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from graphattn.ops.extension import fused_available

    fused_available()  # builds (or loads) the C++ edge kernel now, not inside the first epoch
    images, labels, splits = load_splits(args.test_size, args.val_size, args.split_seed, args.limit)
    print(f"digits: {labels.numel()} images; train {splits['train'].numel()}, "
          f"val {splits['val'].numel()}, test {splits['test'].numel()} (split seed {args.split_seed})")
    t0, runs = time.perf_counter(), []
    for name in args.models:
        for seed in args.seeds:
            set_seed(seed)
            model = build(name, args)
            params = sum(p.numel() for p in model.parameters())
            print(f"--- {name}, seed {seed}: {params} parameters")
            loaders = {"train": Batches(splits["train"], args.batch_size, True),
                       "val": Batches(splits["val"], 256, False), "test": Batches(splits["test"], 256, False)}
            res = fit(model, loaders, make_forward(name, images, labels, args),
                      TrainConfig(kind="multiclass", epochs=args.epochs, lr=args.lr, seed=seed,
                                  progress=args.progress), log=print)
            epoch_s = statistics.median(h["seconds"] for h in res["history"])  # robust to warm-up
            runs.append({"model": name, "seed": seed, "parameters": params,
                         "test_accuracy": res["test"]["accuracy"], "val_accuracy": res["val"]["accuracy"],
                         "best_epoch": res["best_epoch"], "seconds_per_epoch": epoch_s})
    print(f"\nDigits 8x8 as pixel graphs: {args.layers} attention layers x {args.hidden} channels "
          f"vs MLP; {args.epochs} epochs, seeds {args.seeds}\n")
    print("| model | parameters | test acc. (mean ± std) | s / epoch (median) |")
    print("|---|---:|---:|---:|")
    summary = []
    for name in args.models:
        rs = [r for r in runs if r["model"] == name]
        acc, sd = mean_std([r["test_accuracy"] for r in rs])
        sec = statistics.mean(r["seconds_per_epoch"] for r in rs)
        label = {"full": "full attention", "grid": f"grid {args.kernel_size}x{args.kernel_size}",
                 "mlp": "MLP on 64 pixels"}[name]
        print(f"| {label} | {rs[0]['parameters']} | {acc:.4f} ± {sd:.4f} | {sec:.2f} |")
        summary.append({"model": name, "test_accuracy_mean": acc, "test_accuracy_std": sd,
                        "seconds_per_epoch": sec, "parameters": rs[0]["parameters"]})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "summary": summary, "runs": runs,
                               "total_seconds": time.perf_counter() - t0}, indent=2))
    print(f"Results written to {out} ({time.perf_counter() - t0:.0f} s in all)")
    return summary


if __name__ == "__main__":
    main()

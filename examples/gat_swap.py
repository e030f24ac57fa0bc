"""PyG's examples/gat.py (Cora, 2-layer GAT) with one import line swapped: PyG's GATConv or ours.

The model, optimiser, dropout and schedule are those of PyG 2.8's ``examples/gat.py``: 8 heads x 8
hidden channels, dropout 0.6 on the features and on the attention weights, Adam (lr 0.005, weight
decay 5e-4), 200 epochs, the test accuracy read at the best validation epoch. Cora is read from
``--root`` (the raw Planetoid files; ``$GRAPHATTN_DATA`` when set) with PyG's ``NormalizeFeatures``.

    python examples/gat_swap.py --conv pyg --seeds 0 1 2
    python examples/gat_swap.py --conv ours --seeds 0 1 2
    python examples/gat_swap.py --conv both --seeds 0 1 2 --threads 1 --out results.json

With ``--conv both`` the two runs of a seed alternate epoch by epoch, each with its own random
stream (so each draws what it would draw alone), and both see the same machine load. Prints one
line per epoch (not with ``--quiet``), one line per seed, and a summary (mean ± std of the test
accuracy, median milliseconds per epoch); ``--out`` also writes them as JSON.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
import torch_geometric.transforms as T

import graphattn.nn as ours_nn
from graphattn.data import load_planetoid

CONVS = {"pyg": pyg_nn.GATConv, "ours": ours_nn.GATConv}


class GAT(torch.nn.Module):
    """examples/gat.py's model, built from the given GATConv class."""

    def __init__(self, conv, in_channels, hidden_channels, out_channels, heads):
        super().__init__()
        self.conv1 = conv(in_channels, hidden_channels, heads, dropout=0.6)
        self.conv2 = conv(hidden_channels * heads, out_channels, heads=1, concat=False, dropout=0.6)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.6, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.6, training=self.training)
        return self.conv2(x, edge_index)


class Run:
    """One seeded training run of one conv, advanced an epoch at a time. Its random stream
    (dropout masks) is kept apart, so runs of both convs can alternate epoch by epoch (both see
    the same machine load) and still draw exactly what a run alone draws."""

    def __init__(self, conv_name, data, num_classes, seed):
        torch.manual_seed(seed)
        self.model = GAT(CONVS[conv_name], data.num_features, 8, num_classes, 8)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.005, weight_decay=5e-4)
        self.rng, self.data = torch.get_rng_state(), data
        self.best_val = self.test_acc = 0.0
        self.times = []

    def epoch(self):
        """Train one epoch and evaluate: ``(loss, train acc, val acc, test acc at the best val)``."""
        data, model = self.data, self.model
        torch.set_rng_state(self.rng)
        start = time.perf_counter()
        model.train()
        self.optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        self.optimizer.step()
        model.eval()
        with torch.no_grad():
            pred = model(data.x, data.edge_index).argmax(dim=-1)
        accs = [int((pred[m] == data.y[m]).sum()) / int(m.sum()) for m in (data.train_mask, data.val_mask,
                                                                         data.test_mask)]
        self.times.append(time.perf_counter() - start)
        self.rng = torch.get_rng_state()
        if accs[1] > self.best_val:
            self.best_val, self.test_acc = accs[1], accs[2]
        return float(loss.detach()), accs[0], accs[1], self.test_acc


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conv", choices=("pyg", "ours", "both"), default="ours")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--root", default=os.environ.get("GRAPHATTN_DATA"),
                        help="folder holding cora/ind.cora.* (default $GRAPHATTN_DATA; else downloaded)")
    parser.add_argument("--out", default=None, help="write the results to this JSON file")
    parser.add_argument("--quiet", action="store_true", help="no line per epoch")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    data = T.NormalizeFeatures()(load_planetoid("cora", root=args.root))
    num_classes = int(data.y.max()) + 1
    convs = ("pyg", "ours") if args.conv == "both" else (args.conv,)
    runs = {name: [] for name in convs}
    for seed in args.seeds:
        current = {name: Run(name, data, num_classes, seed) for name in convs}
        for epoch in range(1, args.epochs + 1):
            for name, r in current.items():  # the convs alternate epoch by epoch
                loss, train, val, test = r.epoch()
                if not args.quiet:
                    print(f"{name:4s} seed {seed} | Epoch {epoch:03d} | loss {loss:.4f} | train {train:.4f} "
                          f"| val {val:.4f} | test {test:.4f}")
        for name, r in current.items():
            print(f"{name:4s} seed {seed} | test acc {r.test_acc:.4f} | {statistics.median(r.times) * 1e3:.1f} "
                  "ms/epoch (median)")
            runs[name].append(r)
    results = {}
    for name, rs in runs.items():
        accs, secs = [r.test_acc for r in rs], [statistics.median(r.times) for r in rs]
        results[name] = {"seeds": args.seeds, "test_acc": accs, "sec_per_epoch": secs,
                         "mean_test_acc": statistics.mean(accs),
                         "std_test_acc": statistics.stdev(accs) if len(accs) > 1 else 0.0,
                         "median_sec_per_epoch": statistics.median(t for r in rs for t in r.times)}
    for name, r in results.items():
        print(f"{name:4s} GATConv | test acc {r['mean_test_acc']:.4f} ± {r['std_test_acc']:.4f} "
              f"over {len(r['seeds'])} seeds | {r['median_sec_per_epoch'] * 1e3:.1f} ms/epoch")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"epochs": args.epochs, "threads": torch.get_num_threads(), "results": results}, f, indent=2)
    return results


if __name__ == "__main__":
    main()

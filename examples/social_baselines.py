"""Our graph transformer vs PyG GCNConv / GATConv / TransformerConv on social datasets.

In one run and on the same splits, every model (same depth, width, heads, dropout,
learning rate, weight decay and epochs) is trained through the shared loop and selected on
validation accuracy; the table gives test accuracy, mean ± std over seeds (node sets:
a new stratified 60/20/20 split per seed; Cora keeps its public split, seeds change the
initialisation) or over the 10 folds (graph sets: the GIN fold files, 10 % of each
training fold held out for validation; the GIN-protocol number — best epoch of the
fold-mean test curve — is printed too).

    python examples/social_baselines.py --datasets cora,facebook --seeds 0,1,2
    python examples/social_baselines.py --datasets imdb-binary --folds 10 --epochs 100
    python examples/social_baselines.py --datasets karate --epochs 1        # smoke run

Needs $GRAPHATTN_DATA (e.g. ../shared/data) for everything but karate.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graphattn import social_graph as sg  # noqa: E402
from graphattn import social_node as sn  # noqa: E402
from graphattn.social_tasks import DATASETS, _key, build_model  # noqa: E402
from graphattn.train import fit, set_seed  # noqa: E402

DEFAULT_SETS = "facebook,lastfm_asia,github,twitch-de,twitch-engb,cora,imdb-binary,reddit-binary,collab"
MODELS = ("ours", "gcn", "gat", "transformer")


def hparams(args, defaults):
    hp = dict(defaults, heads=args.heads)
    for k in ("epochs", "lr", "hidden", "layers", "dropout", "weight_decay", "global_tokens", "patience",
              "readout", "attn_dropout"):
        v = getattr(args, k, None)
        if v is not None:
            hp[k] = v
    return hp


def run_node(name, args, log):
    results = {m: [] for m in args.models}
    for seed in args.seeds:
        spec = {"level": "node", "name": name, "display": name, "split": list(sn.SPLIT), "split_seed": seed,
                "hops": args.hops}
        data = sn.load_node_data(spec)
        hp = hparams(args, sn.node_defaults(name, data.num_nodes))
        for m in args.models:
            mspec = sn.node_model_spec("none" if m == "ours" else m, data, hp)
            set_seed(seed)
            model = build_model(mspec)
            loaders = {s: [data] for s in ("train", "val", "test")}
            t = time.perf_counter()
            res = fit(model, loaders, sn.node_forward(mspec), kind="multiclass", epochs=hp["epochs"], lr=hp["lr"],
                      weight_decay=hp["weight_decay"], patience=hp.get("patience"), seed=seed,
                      progress=False, log=lambda s: None)
            acc = res["test"]["accuracy"]
            results[m].append(acc)
            log(f"{name} seed {seed} {m:>11}: test acc {acc:.4f} (val {res['val']['accuracy']:.4f}, best epoch "
                f"{res['best_epoch']}/{res['epochs_run']}, {time.perf_counter() - t:.0f} s)")
    return results, hp


def run_graph(name, args, log):
    spec = {"level": "graph", "name": name, "display": name, "limit": None, "split_seed": 0,
            "folds": args.folds, "max_degree": 64, "rw_steps": 8}
    graphs = sg.load_graphs(spec)
    hp = hparams(args, sg.graph_defaults(name))
    results, gin = {m: [] for m in args.models}, {}
    histories = {m: [] for m in args.models}
    folds = args.fold_ids if args.fold_ids else list(range(args.folds))
    for fold in folds:
        split = sg.graph_split(spec, graphs, fold)
        for m in args.models:
            mspec = sg.graph_model_spec("none" if m == "ours" else m, graphs[0].num_features,
                                        graphs.num_classes, hp)
            t = time.perf_counter()
            res = sg.fit_fold(graphs, split, mspec, hp, seed=args.seeds[0], batch_size=args.batch_size,
                              progress=False, log=lambda s: None)
            results[m].append(res["test"]["accuracy"])
            histories[m].append(res["history"])
            log(f"{name} fold {fold + 1} {m:>11}: test acc {res['test']['accuracy']:.4f} (val "
                f"{res['val']['accuracy']:.4f}, best epoch {res['best_epoch']}, {time.perf_counter() - t:.0f} s)")
    for m in args.models:
        gin[m] = sg.gin_protocol(histories[m])
    return results, hp, gin


def fmt(v):
    t = torch.tensor(v, dtype=torch.float64)
    return f"{100 * t.mean():.1f} ± {100 * t.std(unbiased=False):.1f}" if len(v) else "—"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default=DEFAULT_SETS, help=f"comma-separated (default: {DEFAULT_SETS})")
    p.add_argument("--models", default=",".join(MODELS), help="subset of ours,gcn,gat,transformer")
    p.add_argument("--seeds", default="0,1,2", help="node sets: one stratified split + init per seed")
    p.add_argument("--folds", type=int, default=10, help="graph sets: number of folds")
    p.add_argument("--fold-ids", default=None, help="graph sets: run only these folds (0-based, comma-separated)")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--hidden", type=int, default=None)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dropout", type=float, default=None)
    p.add_argument("--attn-dropout", type=float, default=None)
    p.add_argument("--weight-decay", type=float, default=None)
    p.add_argument("--global-tokens", type=int, default=None)
    p.add_argument("--patience", type=int, default=None)
    p.add_argument("--readout", default=None)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hops", type=int, default=0,
                   help="node sets: append K-hop smoothed features [X, ÂX, .., Â^K X] (all models get them)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on small graphs)")
    p.add_argument("--json", default=None, help="append the results to this JSON-lines file")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.models = [m for m in args.models.split(",") if m]
    args.fold_ids = [int(f) for f in args.fold_ids.split(",")] if args.fold_ids else None
    bad = [m for m in args.models if m not in MODELS]
    if bad:
        p.error(f"unknown models {bad}; choose from {MODELS}")
    log = lambda s: print(s, flush=True)  # noqa: E731
    table = []
    for raw in args.datasets.split(","):
        name = _key(raw)
        if name is None:
            p.error(f"unknown dataset {raw!r}; choose from {', '.join(DATASETS)}")
        if DATASETS[name] == "node":
            res, hp = run_node(name, args, log)
            gin = None
        else:
            res, hp, gin = run_graph(name, args, log)
        row = {"dataset": name, "results": res, "hparams": hp, "gin_protocol": gin,
               "runs": "seeds " + ",".join(map(str, args.seeds)) if DATASETS[name] == "node"
               else f"{len(next(iter(res.values())))} folds"}
        table.append(row)
        log(f"== {name} ({row['runs']}): " + " | ".join(f"{m} {fmt(v)}" for m, v in res.items()))
        if gin:
            log("   GIN protocol: " + " | ".join(f"{m} {100 * g[0]:.1f} ± {100 * g[1]:.1f}" for m, g in gin.items()))
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")
    print("\n| dataset | runs | " + " | ".join(args.models) + " |")
    print("|---|---|" + "---|" * len(args.models))
    for row in table:
        print(f"| {row['dataset']} | {row['runs']} | " + " | ".join(fmt(row["results"][m]) for m in args.models) + " |")
    return table


if __name__ == "__main__":
    main()

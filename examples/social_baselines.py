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
    python examples/social_baselines.py --datasets imdb-binary --models ours,gin   # + GIN-0 (sum readout)
    python examples/social_baselines.py --datasets karate --epochs 1        # smoke run
    python examples/social_baselines.py --edges E.csv --target T.csv --target-col mature  # your own graph
    python examples/social_baselines.py --tu-text MY_GRAPHS.txt --folds 10                # your own graph set
    python examples/social_baselines.py --datasets cora --seeds 0,1,2 \
        --grid "lr=0.005,0.01;dropout=0.5,0.7;weight_decay=5e-4,5e-3"      # same grid for every model

With ``--grid`` every model (ours and each baseline) is trained once per grid point and
seed, and the point with the best validation accuracy (per seed) gives its test number.
Options of the data (``--hops``, ``--label-input``) apply to every model alike; our
model's own options (propagation, self-loops, attention/input dropout) come from the
per-dataset defaults of ``graphattn train`` unless given here.

Needs $GRAPHATTN_DATA (e.g. ../shared/data) for everything but karate.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graphattn.cli.options import DEVICE_HELP  # noqa: E402
from graphattn.cli.options import social_hparams as hparams  # noqa: E402
from graphattn.cli.social_train import DATASETS, dataset_key  # noqa: E402
from graphattn.nn.models.registry import build_model  # noqa: E402
from graphattn.tasks.social import graph as sg  # noqa: E402
from graphattn.tasks.social import graph_data as gd  # noqa: E402
from graphattn.tasks.social import node as sn  # noqa: E402
from graphattn.tasks.social.node_model import node_model_spec  # noqa: E402
from graphattn.tasks.social.specs import NodeDataSpec  # noqa: E402
from graphattn.train import TrainConfig, fit, resolve_device, set_seed  # noqa: E402

DEFAULT_SETS = "facebook,lastfm_asia,github,twitch-de,twitch-engb,cora,imdb-binary,reddit-binary,collab"
MODELS = ("ours", "gcn", "gat", "transformer")
EXTRA_MODELS = ("gin",)  # on request (--models ...,gin): GIN-0 with sum readout, the anchors' architecture


def parse_grid(text):
    """``"lr=0.005,0.01;dropout=0.5,0.7"`` -> list of dicts (the product), ``[{}]`` for none."""
    if not text:
        return [{}]
    axes = []
    for part in text.split(";"):
        key, _, vals = part.partition("=")
        key = key.strip().replace("-", "_")
        if key not in ("lr", "dropout", "weight_decay", "attn_dropout", "input_dropout") or not vals:
            raise ValueError(f"--grid: bad axis {part!r} (keys: lr, dropout, weight_decay, attn_dropout, "
                             "input_dropout; e.g. 'lr=0.005,0.01;dropout=0.5,0.7')")
        axes.append([(key, float(v)) for v in vals.split(",")])
    return [dict(point) for point in itertools.product(*axes)]


def train_node(name, data, mspec, hp, seed, device=None, log=None):
    set_seed(seed)
    dev = resolve_device(device)
    model, data = build_model(mspec).to(dev), data.to(dev)
    loaders = {s: [data] for s in ("train", "val", "test")}
    config = TrainConfig.from_recipe(hp, kind="multiclass", seed=seed, progress=False)
    return fit(model, loaders, sn.node_forward(mspec), config, log=log or (lambda s: None))


def node_spec(name, args, seed):
    """The data spec of a named node set, or of the user's ``--edges/--target[/--features]`` files."""
    spec = NodeDataSpec(name=name, display=name, split_seed=seed, hops=args.hops)
    if args.edges:
        spec = spec.replace(name=None, edges=str(Path(args.edges).resolve()), target=str(Path(args.target).resolve()),
                            features=str(Path(args.features).resolve()) if args.features else None,
                            target_col=args.target_col, id_col=args.id_col)
    return spec


def epoch_printer(log, args, *where):
    """One line per epoch (``--epoch-lines``), prefixed with the run it belongs to."""
    return (lambda line: log("   " + " ".join(map(str, where)) + " | " + line)) if args.epoch_lines else None


def run_node(name, args, log):
    results = {m: [] for m in args.models}
    grid = args.grid_points
    for seed in args.seeds:
        spec = node_spec(name, args, seed)
        data = sn.load_node_data(spec)
        hp = hparams(args, sn.node_defaults(spec.name or "", data.num_nodes), full_batch=True)
        if hp.get("label_input"):
            spec = spec.replace(label_input=True)
            data = sn.load_node_data(spec)
        for m in args.models:
            best, t = None, time.perf_counter()
            for point in (grid if m in args.grid_models else [{}]):
                # baselines use one dropout for input, features and attention; ours alone warms up
                hp_m = dict(hp, **point, **({} if m == "ours" else {"warmup": 0}))
                res = train_node(name, data, node_model_spec("none" if m == "ours" else m, data, hp_m),
                                 hp_m, seed, args.device, epoch_printer(log, args, name, "seed", seed, m))
                if point:
                    log(f"   {name} seed {seed} {m} {point}: val {res['val']['accuracy']:.4f}")
                if best is None or res["val"]["accuracy"] > best[0]["val"]["accuracy"]:
                    best = (res, point)
            res, point = best
            acc = res["test"]["accuracy"]
            results[m].append(acc)
            log(f"{name} seed {seed} {m:>11}: test acc {acc:.4f} (val {res['val']['accuracy']:.4f}, best epoch "
                f"{res['best_epoch']}/{res['epochs_run']}{', ' + str(point) if point else ''}, "
                f"{time.perf_counter() - t:.0f} s)")
    return results, hp


def run_graph(name, args, log):
    # the data spec of `graphattn train <name>` (node attributes and TU edge features included)
    spec = gd.graph_data_spec(None if args.tu_text else name, folds=args.folds, tu_text=args.tu_text)
    graphs = gd.load_graphs(spec)
    edge_dim = gd.edge_dim_of(graphs)
    if edge_dim:
        log(f"{name}: {edge_dim} edge features (TU edge attributes/labels), used by ours, gat, transformer "
            "and gin (GINEConv); not by gcn")
    hp = hparams(args, sg.graph_defaults(None if args.tu_text else name))
    results, gin = {m: [] for m in args.models}, {}
    histories = {m: [] for m in args.models}
    folds = args.fold_ids if args.fold_ids else list(range(args.folds))
    for fold in folds:
        split = gd.graph_split(spec, graphs, fold)
        for m in args.models:
            mspec = sg.graph_model_spec("none" if m == "ours" else m, graphs[0].num_features,
                                        graphs.num_classes, hp, edge_dim)
            t = time.perf_counter()
            res = sg.fit_fold(graphs, split, mspec, hp, seed=args.seeds[0], batch_size=args.batch_size,
                              progress=False, log=epoch_printer(log, args, name, "fold", fold + 1, m) or (lambda s: None),
                              device=args.device)
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
    p.add_argument("--models", default=",".join(MODELS), help="subset of ours,gcn,gat,transformer,gin")
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
    p.add_argument("--input-dropout", type=float, default=None, help="ours: dropout on the input features")
    p.add_argument("--propagation", type=int, default=None, help="ours: APPNP steps K on the logits")
    p.add_argument("--propagation-alpha", type=float, default=None)
    p.add_argument("--propagation-learned", default=None, action=argparse.BooleanOptionalAction,
                   help="ours: learned hop weights of the propagation (GPR-GNN)")
    p.add_argument("--gcn-weight", type=float, default=None, help="ours: weight of a GCN branch (SGFormer)")
    p.add_argument("--gcn-layers", type=int, default=None, help="ours: GCN layers of that branch")
    p.add_argument("--propagation-dropout", type=float, default=None,
                   help="ours: edge dropout on Â in each training propagation step (APPNP)")
    p.add_argument("--self-loops", default=None, action=argparse.BooleanOptionalAction)
    p.add_argument("--label-input", default=None, action=argparse.BooleanOptionalAction,
                   help="node sets: training labels as input columns (UniMP), for every model")
    p.add_argument("--consistency", type=int, default=None,
                   help="S dropout passes per step + GRAND's consistency loss (every model alike)")
    p.add_argument("--consistency-weight", type=float, default=None)
    p.add_argument("--consistency-temperature", type=float, default=None)
    p.add_argument("--grid", default=None,
                   help="node sets: 'lr=a,b;dropout=c,d;weight_decay=e,f' tried for every model, "
                        "chosen per seed by validation accuracy")
    p.add_argument("--grid-models", default=",".join(MODELS),
                   help="models that get --grid (the others run at the defaults, e.g. ours once tuned)")
    p.add_argument("--weight-decay", type=float, default=None)
    p.add_argument("--global-tokens", type=int, default=None)
    p.add_argument("--patience", type=int, default=None)
    p.add_argument("--readout", default=None)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hops", type=int, default=0,
                   help="node sets: append K-hop smoothed features [X, ÂX, .., Â^K X] (all models get them)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on small graphs)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--json", default=None, help="append the results to this JSON-lines file")
    p.add_argument("--epoch-lines", default=True, action=argparse.BooleanOptionalAction,
                   help="print one line per epoch of every run (default), not only one per run")
    g = p.add_argument_group("your own graph (instead of --datasets), in the formats `graphattn train` reads")
    g.add_argument("--edges", default=None, help="node classification: edges CSV (two id columns)")
    g.add_argument("--target", default=None, help="node classification: node id + label CSV")
    g.add_argument("--features", default=None, help="node classification: features JSON {node id: [feature ids]}")
    g.add_argument("--target-col", default=None, help="label column of --target (default: recognised)")
    g.add_argument("--id-col", default=None, help="node id column of --target (default: recognised)")
    g.add_argument("--tu-text", default=None, help="graph classification: a DGCNN/GIN text file or TU folder")
    args = p.parse_args(argv)
    if args.edges and not args.target:
        p.error("--edges needs --target (the node id + label CSV)")
    if args.edges and args.tu_text:
        p.error("give --edges/--target (one graph) or --tu-text (a set of graphs), not both")
    for flag in ("target", "features", "target_col", "id_col"):
        if getattr(args, flag) and not args.edges:
            p.error(f"--{flag.replace('_', '-')} goes with --edges")
    torch.set_num_threads(args.threads)
    try:
        resolve_device(args.device)
    except ValueError as exc:
        p.error(str(exc))
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.models = [m for m in args.models.split(",") if m]
    args.grid_models = [m for m in args.grid_models.split(",") if m]
    args.fold_ids = [int(f) for f in args.fold_ids.split(",")] if args.fold_ids else None
    try:
        args.grid_points = parse_grid(args.grid)
    except ValueError as exc:
        p.error(str(exc))
    bad = [m for m in args.models + args.grid_models if m not in MODELS + EXTRA_MODELS]
    if bad:
        p.error(f"unknown models {bad}; choose from {MODELS + EXTRA_MODELS}")
    log = lambda s: print(s, flush=True)  # noqa: E731
    table = []
    own = Path(args.target if args.edges else args.tu_text or "").name.split(".")[0] if args.edges or args.tu_text else None
    kinds = {own: "node" if args.edges else "graph"} if own else {}
    for raw in [own] if own else args.datasets.split(","):
        name = raw if own else dataset_key(raw)
        if name is None:
            p.error(f"unknown dataset {raw!r}; choose from {', '.join(DATASETS)}")
        kind = kinds.get(name) or DATASETS[name]
        if kind == "node":
            res, hp = run_node(name, args, log)
            gin = None
        else:
            res, hp, gin = run_graph(name, args, log)
        row = {"dataset": name, "results": res, "hparams": hp, "gin_protocol": gin,
               "runs": "seeds " + ",".join(map(str, args.seeds)) if kind == "node"
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

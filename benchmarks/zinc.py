#!/usr/bin/env python
"""ZINC-12k: our default regression recipe vs PyG's GraphGPS recipe vs GINE, on the same molecules,
features, split, epochs and seeds; test MAE mean ± std, parameters, seconds per epoch, peak memory.

    python benchmarks/zinc.py --epochs 100 --seeds 0 1 2            # the CPU-budget table
    python benchmarks/zinc.py --epochs 2000 --seeds 0 1 2 3 --device cuda   # the published budget, on a GPU
    python benchmarks/zinc.py --report                              # the table from what exists
    python benchmarks/zinc.py --smoke                               # 300 molecules, 1 epoch, every row

Rows (about 400–500k parameters each; the exact counts are in the table):
- ``ours``: the package's regression recipe for molecules (``graphattn train --task-type regression``:
  :data:`graphattn.tasks.molecules.defaults.DEFAULTS`, targets standardised on the training split) at
  10 layers × 72 channels, L1 loss (the metric; every ZINC recipe trains on it), no RDKit descriptors
  (the ZINC protocol is graph-only, and ZINC's target is built from RDKit's logP) and no early
  stopping (the budget is the epochs). ``--set KEY=VALUE`` changes a recipe key.
- ``gps``: PyG's ``examples/graph_gps.py`` as PyG builds it (``benchmarks/_zinc_pyg.py``: ``GPSConv`` +
  ``GINEConv``, RWSE-20, its widths, optimizer and schedule), reading our atom/bond columns.
- ``gine``: the package's GINE baseline (``graphattn train --baseline gine``, PyG ``GINEConv``) through
  the same recipe as ours, at 10 layers × 96 channels.

Data: ``graphattn.data.MoleculeNetDataset("zinc")`` — the official Benchmarking-GNNs val/test subsets
with the official target ``logP_SA_cycle_normalized``; the shared copy's train block is a documented
same-source substitute (``../shared/data/MANIFEST.md``), so published numbers (GraphGPS 0.070, GRIT 0.059)
compare only indicatively. MAE is per molecule (PyG's convention; Benchmarking-GNNs averages per batch).
Every (model, seed) result is written to ``<out>/runs/`` when it finishes and skipped on the next run;
a run interrupted mid-way resumes from its last epoch.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

from graphattn.data.molecules import ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS, FEATURIZER_VERSION  # noqa: E402
from graphattn.tasks.molecules import data as md  # noqa: E402
from graphattn.tasks.molecules import pipeline as mp  # noqa: E402
from graphattn.tasks.molecules.defaults import DEFAULTS  # noqa: E402
from graphattn.tasks.molecules.recipe import MoleculeRecipe  # noqa: E402
from graphattn.tasks.molecules.outputs import regression_metrics  # noqa: E402
from graphattn.version import __version__  # noqa: E402

MODELS = ("ours", "gps", "gine")
#: published ZINC-12k test MAE (~500k parameters, official train set, ZINC's own 28 atom / 3 bond types)
PUBLISHED = {"GINE": 0.252, "SAN": 0.139, "Graphormer-slim": 0.122, "GraphGPS": 0.070, "GRIT": 0.059}
_OURS = {"layers": 10, "hidden": 72, "descriptors": False, "loss": "l1", "patience": None}
_GINE = {"layers": 10, "hidden": 96, "descriptors": False, "loss": "l1", "patience": None}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 2 (--smoke: 0)")
    p.add_argument("--epochs", type=int, default=100, help="every row's epochs (default 100; published: 2000)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="another value of ours' recipe (keys of graphattn.tasks.molecules.defaults.DEFAULTS)")
    p.add_argument("--limit", type=int, default=None, help="first N molecules (quick runs)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--data-root", default=None, help="data root holding zinc_subset/ (default: $GRAPHATTN_DATA)")
    p.add_argument("--out", default=None, help="results folder (default runs/zinc_benchmark[_smoke])")
    p.add_argument("--report", action="store_true", help="the table from what exists; train nothing")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--smoke", action="store_true", help="300 molecules, 1 epoch, seed 0, every row")
    args = p.parse_args(argv)
    if args.smoke:
        args.limit, args.epochs = args.limit or 300, 1
    args.seeds = args.seeds if args.seeds is not None else ([0] if args.smoke else [0, 1, 2])
    args.out = Path(args.out or f"runs/zinc_benchmark{'_smoke' if args.smoke else ''}")
    args.ours = _recipe(p, args, _OURS)
    args.gine = {**_recipe(p, args, _GINE)}
    if args.data_root:
        os.environ["GRAPHATTN_DATA"] = args.data_root
    return args


def _recipe(p: argparse.ArgumentParser, args, base: Dict[str, object]) -> Dict[str, object]:
    hp = {**DEFAULTS, **base, "task_type": "regression", "epochs": args.epochs}
    for item in args.overrides if base is _OURS else []:
        key, sep, value = item.partition("=")
        if not sep or key not in hp:
            p.error(f"--set {item!r}: expected KEY=VALUE with KEY one of {list(hp)}")
        try:
            hp[key] = json.loads(value)
        except json.JSONDecodeError:
            hp[key] = None if value in ("none", "None") else value
    return hp


# ----------------------------------------------------------------------------- data
def load(model: str, args):
    """The ZINC set with the inputs of ``model``'s recipe (ours: its PE; gps: RWSE-20; gine: none)
    and its official split."""
    if model == "gps":
        pe = {"pe_dim": 20, "pe_kind": "rwse"}
    elif model == "ours":
        pe = {"pe_dim": args.ours["pe_dim"], "pe_kind": args.ours["pe_kind"], "hops": int(args.ours["hops"])}
    else:
        pe = {"pe_dim": 0}
    ds = md.load_dataset("zinc", limit=args.limit, log=not args.no_progress, binary=False, **pe)
    idx = md.column_split(ds) if args.limit is None else md.split_indices(ds, "random", 0, check=False)
    return ds, idx


# ----------------------------------------------------------------------------- runs
def settings(model: str, args) -> Dict[str, object]:
    s = {"model": model, "epochs": args.epochs, "limit": args.limit, "featurizer_version": FEATURIZER_VERSION}
    if model in ("ours", "gine"):
        s["hparams"] = args.ours if model == "ours" else args.gine
    return s


def result_path(model: str, seed: int, args) -> Path:
    key = hashlib.sha256(json.dumps(settings(model, args), sort_keys=True).encode()).hexdigest()[:12]
    return args.out / "runs" / f"{model}__seed{seed}__{key}.json"


@torch.no_grad()
def _gps_metrics(model, ds, idx) -> Dict[str, object]:
    from torch_geometric.loader import DataLoader

    model.eval()
    out = {}
    for part, rows in zip(("val", "test"), idx[1:]):
        pred, y = [], []
        for b in DataLoader(ds[rows], batch_size=64):
            pred.append(model(b).double().view(-1, 1))
            y.append(b.y.double().view(-1, 1))
        out[part] = regression_metrics(torch.cat(pred), torch.cat(y), ["logP_SA_cycle_normalized"])
    return out


def run_one(model: str, seed: int, args) -> Dict[str, object]:
    """Train one row once; its record (metrics in the target's units, parameters, seconds, peak RSS)."""
    from torch_geometric.loader import DataLoader

    from _zinc_pyg import GPS, train_pyg_recipe

    tag = f"[zinc {model} seed {seed}]"
    log = lambda m: print(tag, m, flush=True)  # noqa: E731
    ds, idx = load(model, args)
    work = args.out / "work" / result_path(model, seed, args).stem
    work.mkdir(parents=True, exist_ok=True)
    peak = H.PeakRSS()
    peak.start()
    t0 = time.perf_counter()
    if model == "gps":
        torch.manual_seed(seed)
        net = GPS(ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS)
        loaders = {"train": DataLoader(ds[idx[0]], batch_size=32, shuffle=True),
                   "val": DataLoader(ds[idx[1]], batch_size=64), "test": DataLoader(ds[idx[2]], batch_size=64)}
        res = train_pyg_recipe(net, loaders, args.epochs, seed, work / "state.pt", log, not args.no_progress)
        res.update(_gps_metrics(net, ds, idx))
        res["num_parameters"] = sum(p.numel() for p in net.parameters())
    else:
        hp = MoleculeRecipe.from_dict(args.ours if model == "ours" else args.gine)
        spec = mp.model_spec("none" if model == "ours" else "gine", 1, hp)
        res = mp.run_training(ds, idx, spec, hp, seed=seed, out_dir=work, resume=(work / "last.pt").is_file(),
                              progress=not args.no_progress, log=log, device=args.device)
        res.pop("model"), res.pop("meta"), res.pop("train", None)
    rec = {"model": model, "seed": seed, "sizes": [len(i) for i in idx], "seconds": time.perf_counter() - t0,
           **peak.stop(), **res, "settings": settings(model, args), "graphattn_version": __version__,
           "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    log(f"done: best epoch {rec['best_epoch']} of {rec['epochs_run']} | val mae {rec['val']['mae']:.4f} | "
        f"test mae {rec['test']['mae']:.4f} | {rec['seconds']:.0f}s")
    return rec


# ----------------------------------------------------------------------------- table
def _ms(xs: List[float]) -> str:
    if not xs:
        return "n/a"
    s = H.summarize(xs)
    return f"{s['mean']:.4f} ± {s.get('std', 0.0):.4f}" if len(xs) > 1 else f"{xs[0]:.4f}"


def report(args) -> Dict[str, object]:
    rows, missing, records = [], [], []
    for m in args.models:
        recs = [json.loads(p.read_text()) for s in args.seeds if (p := result_path(m, s, args)).is_file()]
        missing += [f"{m} seed {s}" for s in args.seeds if not result_path(m, s, args).is_file()]
        records += recs
        if not recs:
            continue
        get = lambda part, k: [r[part][k] for r in recs if r.get(part) and r[part].get(k) is not None]  # noqa: E731
        rows.append({"model": m, "seeds": len(recs), "test MAE": _ms(get("test", "mae")),
                     "val MAE": _ms(get("val", "mae")), "test RMSE": _ms(get("test", "rmse")),
                     "parameters": recs[0].get("num_parameters"),
                     "s/epoch": H.fmt(sum(r["seconds_per_epoch"] for r in recs) / len(recs)),
                     "peak MB": H.fmt(max(r.get("peak_delta_mb", 0) for r in recs)),
                     "epochs": args.epochs})
    headers = list(rows[0]) if rows else ["model"]
    table = H.markdown_table(headers, [[r[h] for h in headers] for r in rows], right=[False] + [True] * 8)
    payload = {"command": " ".join(sys.argv), "epochs": args.epochs, "seeds": args.seeds, "limit": args.limit,
               "ours": args.ours, "gine": args.gine, "table": rows, "missing": missing, "published": PUBLISHED,
               "runs": [{k: r.get(k) for k in ("model", "seed", "best_epoch", "epochs_run", "seconds")}
                        | {"test_mae": r["test"]["mae"], "val_mae": r["val"]["mae"]} for r in records]}
    paths = H.write_results(args.out / "results.json", payload, rows)
    print(f"\nZINC-12k, {args.epochs} epochs, seeds {' '.join(map(str, args.seeds))}: mean ± std over seeds")
    print(table)
    print("published test MAE (official train set, indicative only): "
          + ", ".join(f"{k} {v}" for k, v in PUBLISHED.items()))
    if missing:
        print(f"missing: {', '.join(missing)}")
    print(f"Wrote {', '.join(str(p) for p in paths)}")
    return payload


def main(argv=None) -> Dict[str, object]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    failures = 0
    if not args.report:
        for seed in args.seeds:
            for m in args.models:
                path = result_path(m, seed, args)
                if path.is_file():
                    continue
                rec = run_one(m, seed, args)
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f"{path.name}.tmp")
                tmp.write_text(json.dumps(rec, indent=1, default=str) + "\n")
                os.replace(tmp, path)
    result = report(args)
    result["failures"] = failures
    return result


if __name__ == "__main__":
    sys.exit(1 if main()["failures"] else 0)

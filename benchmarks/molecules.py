"""Molecule models across MoleculeNet: ours, GINE, GAT and chemprop on the same splits, resumable.

    python benchmarks/molecules.py --datasets tox21 toxcast clintox bbbp bace --seeds 0 1 2 \\
        --models ours gine gat chemprop                     # the suite (hours on 2 cores)
    python benchmarks/molecules.py --csv my.csv --smiles-col smiles --tasks toxic active --seeds 0 1
    python benchmarks/molecules.py --datasets bbbp --limit 300 --epochs 2 --seeds 0   # a quick look
    python benchmarks/molecules.py ... --models chemprop chemprop+desc   # chemprop without / with RDKit descriptors
    python benchmarks/molecules.py ... --report             # the table from what exists, no training
    python benchmarks/molecules.py --smoke                  # one tiny CSV, one epoch, every model installed

Every (data set, model, seed) result is written to ``<out>/runs/`` as soon as it finishes, under a
key that hashes its settings; a later run with the same settings skips it (``--only-missing``, the
default), so the suite can be finished over several runs. Each data set is loaded once (featurized
molecules, Laplacian PE and RDKit descriptors cached under ``$GRAPHATTN_CACHE``) and shared by every
model and seed. chemprop (``pip install 'graphattn[bench]'``) runs through its own CLI on our split
(``_molecules_chemprop.py``); all metrics are computed here from each model's probabilities.
The table (``<out>/results.json`` and ``.csv``) has, per data set and model, mean ± std over seeds of
the test ROC-AUC / PR-AUC and validation ROC-AUC, epochs and seconds per run, and the suite mean.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Dict, List, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402
from _molecules_chemprop import find_chemprop, run_chemprop  # noqa: E402
from _molecules_report import render, suite_rows, table_rows  # noqa: E402

from graphattn.data.download import sha256sum  # noqa: E402
from graphattn.data.moleculenet import moleculenet_names  # noqa: E402
from graphattn.data.molecules import FEATURIZER_VERSION  # noqa: E402
from graphattn.tasks.molecules import data as md  # noqa: E402
from graphattn.tasks.molecules import defaults as molecule_defaults
from graphattn.tasks.molecules import pipeline as mp  # noqa: E402
from graphattn.version import __version__  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMOKE_CSV = ROOT / "tests" / "fixtures" / "molecules_tasks_train.csv"
MODELS = ("ours", "gine", "gat", "chemprop", "chemprop+desc")  # chemprop+desc: with its RDKit 2-D descriptors
CHEMPROP = ("chemprop", "chemprop+desc")
#: The MoleculeNet classification sets of the package's one table (graphattn.data.MOLECULENET)
SUITE = moleculenet_names("classification")
DEFAULT_SUITE = ["tox21", "toxcast", "clintox", "bbbp", "bace"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="*", default=None, choices=list(SUITE),
                   help=f"MoleculeNet sets (default: {' '.join(DEFAULT_SUITE)}; none when --csv is given)")
    p.add_argument("--csv", default=None, metavar="FILE", help="also (or only) this CSV of SMILES and 0/1 labels")
    p.add_argument("--smiles-col", default="smiles", help="SMILES column of --csv")
    p.add_argument("--tasks", nargs="+", default=None, help="task columns of --csv (default: every 0/1 column)")
    p.add_argument("--split", default="scaffold", choices=list(molecule_defaults.SPLITS))
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="default: 0 1 2 (--smoke: 0)")
    p.add_argument("--models", nargs="+", default=list(MODELS[:4]), choices=MODELS)
    p.add_argument("--epochs", type=int, default=None,
                   help="every model's epoch count (default: each model's own: ours/GINE/GAT "
                        f"{molecule_defaults.DEFAULTS['epochs']} with patience {molecule_defaults.DEFAULTS['patience']}, chemprop 50)")
    p.add_argument("--patience", type=int, default=None, help="early-stopping patience of ours/GINE/GAT")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help=f"another value of the recipe of ours/GINE/GAT (keys: {', '.join(molecule_defaults.DEFAULTS)}); repeatable")
    p.add_argument("--chemprop-bin", default=None, help="the chemprop executable (default: `chemprop` on $PATH)")
    p.add_argument("--chemprop-descriptors", action="store_true",
                   help="chemprop also reads its RDKit 2-D descriptors (v1_rdkit_2d_normalized): "
                        "model chemprop becomes chemprop+desc")
    p.add_argument("--limit", type=int, default=None, help="first N molecules of every data set (quick runs)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (chemprop: OMP_NUM_THREADS)")
    p.add_argument("--out", default=None, help="results folder (default runs/molecule_benchmark[_smoke])")
    p.add_argument("--only-missing", action=argparse.BooleanOptionalAction, default=True,
                   help="skip every result that exists with the same settings (default); "
                        "--no-only-missing trains them again")
    p.add_argument("--report", action="store_true", help="print and write the table from what exists; train nothing")
    p.add_argument("--smoke", action="store_true",
                   help=f"CI smoke run: {SMOKE_CSV.relative_to(ROOT)}, 1 epoch, seed 0, every model installed")
    args = p.parse_args(argv)
    if args.smoke:
        args.csv, args.epochs = args.csv or str(SMOKE_CSV), 1
        args.datasets = args.datasets or []
    if args.chemprop_descriptors:
        args.models = list(dict.fromkeys("chemprop+desc" if m == "chemprop" else m for m in args.models))
    if args.seeds is None:
        args.seeds = [0] if args.smoke else [0, 1, 2]
    if args.datasets is None:
        args.datasets = [] if args.csv else list(DEFAULT_SUITE)
    if not args.datasets and not args.csv:
        p.error("nothing to run: give --datasets and/or --csv")
    args.out = Path(args.out or f"runs/molecule_benchmark{'_smoke' if args.smoke else ''}")
    args.hp = _recipe(p, args)
    return args


def _recipe(p: argparse.ArgumentParser, args) -> Dict[str, object]:
    """The hyperparameters of ours/GINE/GAT: the package defaults, --epochs, --patience, --set."""
    hp = dict(molecule_defaults.DEFAULTS)
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep or key not in hp:
            p.error(f"--set {item!r}: expected KEY=VALUE with KEY one of {list(hp)}")
        try:
            hp[key] = json.loads(value)
        except json.JSONDecodeError:
            hp[key] = None if value in ("none", "None") else value  # a plain word: gine, laplacian ...
    if args.epochs is not None:
        hp["epochs"] = args.epochs
    if args.patience is not None:
        hp["patience"] = args.patience
    return hp


# ----------------------------------------------------------------------------- data sets
def sources(args) -> List[Dict[str, object]]:
    """Each data set to run: its table name, ``load_dataset`` arguments and identity (hashed)."""
    out = []
    for name in args.datasets:
        out.append({"name": name, "load": {"name": name}, "identity": {"dataset": name}})
    if args.csv:
        path = Path(args.csv).expanduser().resolve()
        if not path.is_file():
            raise SystemExit(f"--csv {args.csv}: no such file")
        stem = re.sub(r"\.(csv|tsv|txt)(\.gz)?$", "", path.name, flags=re.I)
        out.append({"name": stem, "load": {"csv_path": str(path), "smiles_col": args.smiles_col, "tasks": args.tasks},
                    "identity": {"csv_sha256": sha256sum(path), "smiles_col": args.smiles_col, "tasks": args.tasks}})
    return out


def load(source: Dict[str, object], hp: Dict[str, object], limit: Optional[int]):
    """The data set with PE and descriptors (whatever the models: one cache per recipe), and its
    ``(N, T)`` labels (NaN = missing)."""
    ds = md.load_dataset(**source["load"], pe_dim=hp["pe_dim"], limit=limit, log=True,
                         descriptors=md.descriptor_set(bool(hp["descriptors"])), pe_kind=hp["pe_kind"],
                         hops=int(hp["hops"]))
    y = torch.cat([d.y.view(1, -1) for d in ds]).double()
    print(f"{source['name']}: {len(ds)} molecules ({len(ds.skipped)} of {ds.num_rows} rows skipped: invalid SMILES), "
          f"{len(ds.task_names)} task(s)", flush=True)
    return ds, y


# ----------------------------------------------------------------------------- results
#: recipe keys whose value here changes nothing (added after results were recorded without them)
_NO_OP = {"schedule": "constant", "warmup": 0, "hops": 1}


def settings(source, model: str, args) -> Dict[str, object]:
    """Everything a result depends on besides its seed (hashed into its file name)."""
    s = {"data": source["identity"], "limit": args.limit, "split": args.split, "model": model,
         "featurizer_version": FEATURIZER_VERSION}
    if model in CHEMPROP:
        s["epochs"] = args.epochs
    else:  # recipe keys at their no-op value are left out: results from before the key existed stay valid
        s["hparams"] = {k: v for k, v in args.hp.items() if _NO_OP.get(k, object()) != v}
    return s


def result_path(out: Path, source, model: str, seed: int, args) -> Path:
    key = hashlib.sha256(json.dumps(settings(source, model, args), sort_keys=True).encode()).hexdigest()[:12]
    return out / "runs" / f"{source['name']}__{model}__seed{seed}__{key}.json"


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    os.replace(tmp, path)  # atomic: an interrupted run never leaves half a result


def _f(v) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def run_one(ds, y, idx, source, model: str, seed: int, args, chemprop: Optional[str]) -> Dict[str, object]:
    """Train one model on one split; the record written to its result file."""
    tag = f"[{source['name']} {model} seed {seed}]"
    log = lambda m: print(tag, m, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    if model in CHEMPROP:
        res = run_chemprop(chemprop, args.out / "chemprop" / result_path(args.out, source, model, seed, args).stem,
                           ds.smiles, y, idx, list(ds.task_names), seed=seed, epochs=args.epochs,
                           descriptors=model == "chemprop+desc", threads=args.threads, log=log)
    else:
        spec = mp.model_spec("none" if model == "ours" else model, len(ds.task_names), args.hp,
                             graph_feature_dim=len(ds.descriptor_names or ()))
        res = mp.run_training(ds, idx, spec, args.hp, seed=seed, progress=False, log=log)
        res.pop("model"), res.pop("meta"), res.pop("train", None)
    rec = {"dataset": source["name"], "model": model, "seed": seed, "split": args.split,
           "sizes": [len(i) for i in idx], "seconds": time.perf_counter() - t0, **res,
           "settings": settings(source, model, args), "graphattn_version": __version__,
           "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    val, test = rec.get("val") or {}, rec.get("test") or {}  # absent when the split left none
    log(f"done: best epoch {rec['best_epoch']} of {rec['epochs_run']} | val auc {_f(val.get('roc_auc'))} | "
        f"test auc {_f(test.get('roc_auc'))} | test pr-auc {_f(test.get('pr_auc'))} | {rec['seconds']:.0f}s")
    return rec


def warn_one_class(name: str, tasks, y, idx, split: str) -> None:
    """Say which tasks have only one class (or no label) in the validation or test part of a split: their
    ROC-AUC is undefined there (the table shows n/a; e.g. the deterministic scaffold split of BBBP)."""
    for part, rows in zip(("validation", "test"), idx[1:]):
        labels = y[torch.as_tensor(rows)]
        one = [t for t, col in zip(tasks, labels.T) if torch.unique(col[~torch.isnan(col)]).numel() < 2]
        if one:
            print(f"{name}: the {split} split leaves {len(one)} of {len(tasks)} task(s) with one class in its "
                  f"{part} part ({', '.join(map(str, one[:5]))}{', ...' if len(one) > 5 else ''}): their ROC-AUC is "
                  "undefined there; --split deepchem_scaffold or balanced_scaffold gives both classes", flush=True)


def run_source(source, models: List[str], args, chemprop: Optional[str]) -> int:
    """Every missing (model, seed) of one data set, the data set loaded once; returns the failures."""
    todo = [(s, m) for s in args.seeds for m in models
            if not (args.only_missing and result_path(args.out, source, m, s, args).is_file())]
    done = len(args.seeds) * len(models) - len(todo)
    print(f"{source['name']}: {done} result(s) exist, {len(todo)} to run", flush=True)
    if not todo:
        return 0
    ds, y = load(source, args.hp, args.limit)
    failures, splits = 0, {}
    for seed, model in todo:
        if seed not in splits:  # the same split for every model
            splits[seed] = md.split_indices(ds, args.split, seed)
            warn_one_class(source["name"], ds.task_names, y, splits[seed], args.split)
        try:
            rec = run_one(ds, y, splits[seed], source, model, seed, args, chemprop)
        except Exception as exc:  # noqa: BLE001 (one failed run must not end hours of others)
            failures += 1
            print(f"[{source['name']} {model} seed {seed}] FAILED: {exc}", flush=True)
            traceback.print_exc()
            continue
        write_json(result_path(args.out, source, model, seed, args), rec)
    return failures


# ----------------------------------------------------------------------------- table
def report(args, srcs) -> Dict[str, object]:
    """Read every result of these settings, print the table and write results.json / .csv."""
    records, missing = [], []
    for src in srcs:
        for m in args.models:
            for s in args.seeds:
                path = result_path(args.out, src, m, s, args)
                if path.is_file():
                    records.append(json.loads(path.read_text()))
                else:
                    missing.append(f"{src['name']} {m} seed {s}")
    names = [s["name"] for s in srcs]
    rows, suite = table_rows(records, names, args.models), suite_rows(records, names, args.models, args.seeds)
    brief = [{k: r.get(k) for k in ("dataset", "model", "seed", "epochs_run", "best_epoch", "seconds")}
             | {f"{p}_{m}": (r.get(p) or {}).get(m) for p in ("val", "test") for m in ("roc_auc", "pr_auc")}
             for r in records]
    payload = {"command": " ".join(sys.argv), "split": args.split, "seeds": args.seeds, "datasets": names,
               "models": args.models, "hparams": args.hp, "table": rows, "suite": suite, "runs": brief,
               "missing": missing}
    paths = H.write_results(args.out / "results.json", payload, rows + suite)
    print(f"\n{args.split} split, seeds {' '.join(map(str, args.seeds))}: mean ± std over seeds "
          f"({len(records)} results, {len(missing)} missing)")
    print(render(rows, suite))
    if missing:
        print(f"missing: {', '.join(missing[:12])}{' ...' if len(missing) > 12 else ''}")
    print(f"Wrote {', '.join(str(p) for p in paths)}")
    return payload


def main(argv=None) -> Dict[str, object]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    srcs = sources(args)
    models = list(args.models)
    chemprop = find_chemprop(args.chemprop_bin) if set(models) & set(CHEMPROP) else None
    if set(models) & set(CHEMPROP) and chemprop is None:
        where = f"--chemprop-bin {args.chemprop_bin} is not an executable file" if args.chemprop_bin \
            else "no `chemprop` executable on $PATH"
        print(f"chemprop: skipped ({where}; pip install 'graphattn[bench]' or pass --chemprop-bin)", flush=True)
        models = [m for m in models if m not in CHEMPROP]
    failures = 0
    if not args.report:
        t0 = time.perf_counter()
        for src in srcs:
            failures += run_source(src, models, args, chemprop)
        print(f"\nall runs finished in {time.perf_counter() - t0:.0f}s ({failures} failed)", flush=True)
    result = report(args, srcs)
    result["failures"] = failures
    return result


if __name__ == "__main__":
    sys.exit(1 if main()["failures"] else 0)

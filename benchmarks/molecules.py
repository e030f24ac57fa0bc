"""Molecule models across MoleculeNet: ours, GINE, GAT and chemprop on the same splits, resumable.

    python benchmarks/molecules.py --datasets tox21 toxcast clintox bbbp bace --seeds 0 1 2 \\
        --models ours gine gat chemprop                     # the suite (hours on 2 cores)
    python benchmarks/molecules.py --datasets esol freesolv lipophilicity --split random \\
        --models ours gine chemprop chemprop+desc           # the regression suite (test RMSE)
    python benchmarks/molecules.py --csv my.csv --task-type regression --tasks logS   # numeric targets
    python benchmarks/molecules.py --csv my.csv --smiles-col smiles --tasks toxic active --seeds 0 1
    python benchmarks/molecules.py --datasets bbbp --limit 300 --epochs 2 --seeds 0   # a quick look
    python benchmarks/molecules.py ... --models chemprop chemprop+desc   # chemprop without / with RDKit descriptors
    python benchmarks/molecules.py ... --report             # the table from what exists, no training
    python benchmarks/molecules.py --smoke                  # one tiny CSV, one epoch, every model installed

Every (data set, model, seed) result is written to ``<out>/runs/`` as soon as it finishes, under a
key that hashes its settings; a later run with the same settings skips it (``--only-missing``, the
default), so the suite can be finished over several runs. Each data set is loaded once (featurized
molecules, Laplacian PE and RDKit descriptors cached under ``$GRAPHATTN_CACHE``) and shared by every
model and seed. A named set's task type comes from the package's table (``MOLECULENET[name].task_type``),
a CSV's from ``--task-type``; regressors train on targets standardised on the training split.
chemprop (``pip install 'graphattn[bench]'``) runs through its own CLI on our split
(``_molecules_chemprop.py``); all metrics are computed here from each model's predictions.
The tables (``<out>/results.json`` and ``.csv``) have, per data set and model, mean ± std over seeds of
the test ROC-AUC / PR-AUC and validation ROC-AUC with the suite mean (classification sets), or of the
test RMSE / MAE / R² and validation RMSE with each model's mean rank (regression sets), and the
epochs and seconds per run.
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
from _molecules_report import (REGRESSION_METRICS, rank_rows, render, render_regression,  # noqa: E402
                               suite_rows, table_rows)

from graphattn.data.download import sha256sum  # noqa: E402
from graphattn.data.moleculenet import MOLECULENET, moleculenet_names  # noqa: E402
from graphattn.data.molecules import FEATURIZER_VERSION  # noqa: E402
from graphattn.tasks.molecules import data as md  # noqa: E402
from graphattn.tasks.molecules import defaults as molecule_defaults  # noqa: E402
from graphattn.tasks.molecules import pipeline as mp  # noqa: E402
from graphattn.tasks.molecules.recipe import MoleculeRecipe  # noqa: E402
from graphattn.version import __version__  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMOKE_CSV = ROOT / "tests" / "fixtures" / "molecules_tasks_train.csv"
MODELS = ("ours", "gine", "gat", "chemprop", "chemprop+desc")  # chemprop+desc: with its RDKit 2-D descriptors
CHEMPROP = ("chemprop", "chemprop+desc")
#: The MoleculeNet sets of the package's one table (graphattn.data.MOLECULENET), classification and regression
SUITE = moleculenet_names()
DEFAULT_SUITE = ["tox21", "toxcast", "clintox", "bbbp", "bace"]
TASK_TYPES = ("classification", "regression")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="*", default=None, choices=list(SUITE),
                   help=f"MoleculeNet sets (default: {' '.join(DEFAULT_SUITE)}; none when --csv is given)")
    p.add_argument("--csv", default=None, metavar="FILE",
                   help="also (or only) this CSV of SMILES and 0/1 labels (numeric targets: --task-type regression)")
    p.add_argument("--smiles-col", default="smiles", help="SMILES column of --csv")
    p.add_argument("--tasks", nargs="+", default=None,
                   help="task columns of --csv (default: every 0/1 column; regression: every numeric column)")
    p.add_argument("--task-type", default="classification", choices=TASK_TYPES,
                   help="what the --csv tasks are (a named set's task type comes from the table)")
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
    """The hyperparameters of ours/GINE/GAT: the package defaults, --epochs, --patience, --set
    (for a regression set :func:`recipe` adds its task type)."""
    hp = dict(molecule_defaults.DEFAULTS)
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep or key not in hp:
            p.error(f"--set {item!r}: expected KEY=VALUE with KEY one of {list(hp)}")
        try:
            hp[key] = json.loads(value)
        except json.JSONDecodeError:
            # a plain word: gine, laplacian ...; "none" is None (no branch), except for descriptors,
            # where None means the task type's default set and "none" means none
            hp[key] = None if value in ("none", "None") and key != "descriptors" else value
    if args.epochs is not None:
        hp["epochs"] = args.epochs
    if args.patience is not None:
        hp["patience"] = args.patience
    return hp


def recipe(source, args) -> Dict[str, object]:
    """The recipe of ours/GINE/GAT on ``source``: ``args.hp`` resolved for the set's task type (its
    default descriptor set when ``descriptors`` is not given)."""
    hp = dict(args.hp)
    return molecule_defaults.defaults_for(source["task_type"], **{k: v for k, v in hp.items() if k != "task_type"})


# ----------------------------------------------------------------------------- data sets
def sources(args) -> List[Dict[str, object]]:
    """Each data set to run: its table name, task type, ``load_dataset`` arguments and identity (hashed)."""
    out = []
    for name in args.datasets:
        out.append({"name": name, "task_type": MOLECULENET[name].task_type, "load": {"name": name},
                    "identity": {"dataset": name}})
    if args.csv:
        path = Path(args.csv).expanduser().resolve()
        if not path.is_file():
            raise SystemExit(f"--csv {args.csv}: no such file")
        stem = re.sub(r"\.(csv|tsv|txt)(\.gz)?$", "", path.name, flags=re.I)
        regression = args.task_type == "regression"
        identity = {"csv_sha256": sha256sum(path), "smiles_col": args.smiles_col, "tasks": args.tasks}
        out.append({"name": stem, "task_type": args.task_type,
                    "load": {"csv_path": str(path), "smiles_col": args.smiles_col, "tasks": args.tasks,
                             "binary": not regression},
                    "identity": identity | ({"task_type": "regression"} if regression else {})})
    return out


def load(source: Dict[str, object], hp: Dict[str, object], limit: Optional[int]):
    """The data set with PE and descriptors (whatever the models: one cache per recipe), and its
    ``(N, T)`` labels (NaN = missing)."""
    ds = md.load_dataset(**source["load"], pe_dim=hp["pe_dim"], limit=limit, log=True,
                         descriptors=md.descriptor_set(hp["descriptors"]), pe_kind=hp["pe_kind"],
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
        s["hparams"] = {k: v for k, v in recipe(source, args).items() if _NO_OP.get(k, object()) != v}
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


#: the metrics of the line printed when a run finishes: (split, metric, label) per task type
_DONE_LINE = {"classification": (("val", "roc_auc", "val auc"), ("test", "roc_auc", "test auc"),
                                 ("test", "pr_auc", "test pr-auc")),
              "regression": (("val", "rmse", "val rmse"), ("test", "rmse", "test rmse"), ("test", "mae", "test mae"),
                             ("test", "r2", "test r2"))}


def done_line(rec: Dict[str, object], task_type: str) -> str:
    """``done: best epoch 12 of 24 | val rmse 0.6120 | test rmse 0.5981 | ... | 41s``"""
    parts = [f"{label} {_f((rec.get(split) or {}).get(metric))}"  # a split may have no molecules
             for split, metric, label in _DONE_LINE[task_type]]
    return f"done: best epoch {rec['best_epoch']} of {rec['epochs_run']} | {' | '.join(parts)} | {rec['seconds']:.0f}s"


def run_one(ds, y, idx, source, model: str, seed: int, args, chemprop: Optional[str]) -> Dict[str, object]:
    """Train one model on one split; the record written to its result file."""
    tag = f"[{source['name']} {model} seed {seed}]"
    log = lambda m: print(tag, m, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    if model in CHEMPROP:
        res = run_chemprop(chemprop, args.out / "chemprop" / result_path(args.out, source, model, seed, args).stem,
                           ds.smiles, y, idx, list(ds.task_names), seed=seed, epochs=args.epochs,
                           descriptors=model == "chemprop+desc", threads=args.threads,
                           task_type=source["task_type"], log=log)
    else:
        hp = MoleculeRecipe.from_dict(recipe(source, args))
        spec = mp.model_spec("none" if model == "ours" else model, len(ds.task_names), hp,
                             graph_feature_dim=len(ds.descriptor_names or ()))
        res = mp.run_training(ds, idx, spec, hp, seed=seed, progress=False, log=log)
        res.pop("model"), res.pop("meta"), res.pop("train", None)
    rec = {"dataset": source["name"], "model": model, "seed": seed, "split": args.split,
           "sizes": [len(i) for i in idx], "seconds": time.perf_counter() - t0, **res,
           "settings": settings(source, model, args), "graphattn_version": __version__,
           "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    log(done_line(rec, source["task_type"]))
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
    ds, y = load(source, recipe(source, args), args.limit)
    failures, splits = 0, {}
    for seed, model in todo:
        if seed not in splits:  # the same split for every model
            splits[seed] = md.split_indices(ds, args.split, seed)
            if source["task_type"] == "classification":
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
def _read_records(args, srcs):
    """The result records of these settings that exist, and the names of those missing."""
    records, missing = [], []
    for src in srcs:
        for m in args.models:
            for s in args.seeds:
                path = result_path(args.out, src, m, s, args)
                if path.is_file():
                    records.append(json.loads(path.read_text()))
                else:
                    missing.append(f"{src['name']} {m} seed {s}")
    return records, missing


def _brief(rec: Dict[str, object]) -> Dict[str, object]:
    """One run in ``results.json``: its identity, epochs, time and headline metrics."""
    scored = rec.get("test") or rec.get("val") or {}
    metrics = ("roc_auc", "pr_auc") if "roc_auc" in scored else ("rmse", "mae", "r2")
    return ({k: rec.get(k) for k in ("dataset", "model", "seed", "epochs_run", "best_epoch", "seconds", "num_parameters")}
            | {f"{p}_{m}": (rec.get(p) or {}).get(m) for p in ("val", "test") for m in metrics})


def report(args, srcs) -> Dict[str, object]:
    """Read every result of these settings, print the tables (classification sets with their suite
    mean, regression sets with each model's mean rank) and write results.json / .csv."""
    records, missing = _read_records(args, srcs)
    cls = [s["name"] for s in srcs if s["task_type"] == "classification"]
    reg = [s["name"] for s in srcs if s["task_type"] == "regression"]
    rows = table_rows(records, cls, args.models)
    suite = suite_rows([r for r in records if r["dataset"] in cls], cls, args.models, args.seeds) if cls else []
    reg_rows = table_rows(records, reg, args.models, REGRESSION_METRICS)
    ranks = rank_rows(reg_rows, args.models, reg)
    payload = {"command": " ".join(sys.argv), "split": args.split, "seeds": args.seeds, "datasets": cls + reg,
               "models": args.models, "hparams": args.hp, "table": rows + reg_rows, "suite": suite, "ranks": ranks,
               "runs": [_brief(r) for r in records], "missing": missing}
    paths = H.write_results(args.out / "results.json", payload, rows + suite + reg_rows + ranks)
    print(f"\n{args.split} split, seeds {' '.join(map(str, args.seeds))}: mean ± std over seeds "
          f"({len(records)} results, {len(missing)} missing)")
    if cls:
        print(render(rows, suite))
    if reg:
        print(("\n" if cls else "") + "regression sets (each in its own units; the mean rank is by test RMSE):")
        print(render_regression(reg_rows, ranks))
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

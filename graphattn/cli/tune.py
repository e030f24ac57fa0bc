"""``graphattn tune``: search the molecule recipe (ours, or ``--baseline gine|gat``) on the validation split.

Every trial trains one model on the run's split with :func:`graphattn.tasks.molecules.pipeline.run_training`
and reports each epoch's validation metric to Optuna's median pruner; the search space is
:data:`graphattn.tasks.molecules.tune.SEARCH_SPACE` less the options given on the command line (those are
fixed for every trial). The study lives in an SQLite file (``--storage``, default ``OUT/tune.db``): the same
command again continues it up to ``--trials`` finished trials. At the end a table of the best trials is
printed and ``OUT/best_config.json`` holds the best trial as options of ``graphattn train --config``;
``OUT/trials.csv`` holds every finished trial.
"""
from __future__ import annotations

import csv
import json
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List

from graphattn.cli.arguments import TUNE_ONLY, build_parser
from graphattn.cli.config_file import NOT_IN_CONFIG
from graphattn.cli.molecules_train import check_options, load_data, recipe_of, split_of
from graphattn.cli.options import check_train_numbers, given_options, usage_error
from graphattn.data.download import sha256sum
from graphattn.data.moleculenet import MOLECULENET, moleculenet_names
from graphattn.tasks.molecules.data import descriptor_set
from graphattn.tasks.molecules.tune import RecipeObjective, make_study, recipe_values, run_search, space_for, trial_table
from graphattn.train.runtime import resolve_device
from graphattn.utils.files import check_out_folder

__all__ = ["tune"]

#: train options with no meaning for a search (each trial is one fresh model in memory)
_REFUSED = ("seeds", "resume", "distributed", "ensemble", "init", "overwrite")
#: run settings that are not part of the configuration a search finds
_RUN_ONLY = frozenset({"threads", "device", "no_progress", "data_root", "given_options", "limit", *NOT_IN_CONFIG,
                       *TUNE_ONLY})


def _check(args) -> None:
    refused = [f"--{k.replace('_', '-')}" for k in _REFUSED if getattr(args, k, None) not in (None, False)]
    if refused:
        raise ValueError(f"{', '.join(refused)}: not for a search (each trial trains one model from scratch); "
                         "use them with graphattn train --config OUT/best_config.json")
    if args.trials < 1:
        raise ValueError(f"--trials must be >= 1, got {args.trials}")
    if args.top < 1:
        raise ValueError(f"--top must be >= 1, got {args.top}")
    if args.timeout is not None and args.timeout <= 0:
        raise ValueError(f"--timeout must be > 0 seconds, got {args.timeout}")
    if args.dataset is None and args.csv is None:
        raise ValueError("no dataset given: name a molecule set (e.g. bbbp) or give --csv FILE")
    if args.csv is None and args.dataset.lower() not in MOLECULENET:
        raise ValueError(f"{args.dataset!r} is not a molecule set: graphattn tune searches the molecule recipe "
                         f"(one of {', '.join(moleculenet_names())}, or --csv FILE)")


def _config(args, best: Dict[str, Any]) -> Dict[str, Any]:
    """The best trial as ``graphattn train`` options: the options given to ``tune`` and the searched values."""
    given = {k: getattr(args, k) for k in sorted(args.given_options) if k not in _RUN_ONLY}
    if args.csv is not None:  # the config works from any folder
        given["csv"] = str(Path(args.csv).expanduser().resolve())
    if args.dataset is not None:
        given["dataset"] = args.dataset
    return {**given, **best}


def _write_trials(path: Path, rows: List[Dict[str, Any]]) -> None:
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def _print_table(rows: List[Dict[str, Any]]) -> None:
    if not rows:
        return
    cols = list(dict.fromkeys(k for r in rows for k in r))
    cells = [[("" if r.get(c) is None else f"{r[c]:.3g}" if isinstance(r.get(c), float) and c == "lr"
               else str(r.get(c))) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print("| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells:
        print("| " + " | ".join(v.ljust(w) for v, w in zip(row, widths)) + " |")


def tune(args) -> int:
    """``graphattn tune``: validate, search, print the best trials, write ``OUT/best_config.json``."""
    args.given_options = given_options(args, build_parser().parse_args(["tune"]))
    baseline = getattr(args, "baseline", "none") or "none"
    name = args.dataset.lower() if args.csv is None and args.dataset else Path(args.csv or "").name
    model = "ours" if baseline == "none" else baseline
    out = Path(args.out) if args.out else Path("runs") / f"tune-{Path(name).stem}-{model}"
    try:
        _check(args)
        check_train_numbers(args)
        check_out_folder(out)
        base = recipe_of(args)
        check_options(args, base, baseline)
        split_of(args)
        space = space_for(baseline, fixed=args.given_options, recipe=base)
        device = resolve_device(args.device)
    except ValueError as exc:
        return usage_error("tune", str(exc))
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    key, higher = base.train_config().selection
    out.mkdir(parents=True, exist_ok=True)
    storage = (Path(args.storage).expanduser() if args.storage else out / "tune.db").resolve()
    if storage.is_dir() or not storage.parent.is_dir():
        return usage_error("tune", f"--storage {args.storage}: " + ("a folder, not a file" if storage.is_dir()
                                                                    else f"no folder {storage.parent}"))
    study_name = args.study_name or f"{Path(name).stem}-{model}"
    fixed = {k: v for k, v in _config(args, {}).items() if isinstance(v, (str, int, float, bool, type(None), list))}
    # trials answer one question: the same searched options, and the same molecules in the same file
    fixed["searched"] = sorted(space)
    if args.csv is not None:
        fixed["csv_sha256"] = sha256sum(args.csv)
    try:
        study = make_study(str(storage), study_name, higher, args.seed, fixed)
    except ValueError as exc:
        return usage_error("tune", str(exc))
    loaded: List[tuple] = []

    def load(hp):
        with warnings.catch_warnings():
            if loaded:  # the data's warnings (skipped SMILES, one-class tasks) were given once
                warnings.simplefilter("ignore")
            loaded.append(hp)
            return load_data(args, name, descriptor_set(hp.descriptors), hp, ours=baseline == "none")

    train = RecipeObjective(base, load, baseline, seed=args.seed, pos_weight=args.pos_weight, device=device)

    print(f"tune {name}: {'our model' if baseline == 'none' else baseline}, validation {key} "
          f"({'higher' if higher else 'lower'} is better), {len(space)} searched option(s): {', '.join(space)}; "
          f"study {study_name!r} in {storage} ({len(study.trials)} trial(s) stored)", flush=True)
    t0 = time.perf_counter()
    try:
        ran = run_search(study, space, train, trials=args.trials, timeout=args.timeout, key=key,
                         progress=not args.no_progress)
    except RuntimeError as exc:  # no validation split
        return usage_error("tune", str(exc))
    rows = trial_table(study, key, top=len(study.trials))
    if not rows:
        return usage_error("tune", f"no trial finished in {storage} (all pruned or failed); give more --trials")
    _write_trials(out / "trials.csv", rows)
    best = study.best_trial
    config = _config(args, recipe_values(best.params))
    (out / "best_config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"\n{ran} trial(s) run in {time.perf_counter() - t0:.0f}s, {len(rows)} finished in the study; "
          f"the best {min(args.top, len(rows))}:")
    _print_table(rows[:args.top])
    print(f"\nbest: trial {best.number}, val {key} {best.value:.4f}\nWrote {out / 'best_config.json'} and "
          f"{out / 'trials.csv'}; train it with: graphattn train --config {out / 'best_config.json'} --out DIR")
    return 0

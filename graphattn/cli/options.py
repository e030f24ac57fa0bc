"""Which ``graphattn train`` options apply to which task, so that an option that would be
silently ignored is refused instead (one table for the molecule and the social pipelines).

``graphattn.cli.main`` records the options the user actually gave (``args.given_options``:
every destination whose value differs from the parser's default); each pipeline calls
:func:`check_applicable` once it knows what it trains. Without that record (``train``
called directly with a namespace) nothing is checked.
"""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterable

from graphattn.tasks.molecules.recipe import TASK_TYPES
from graphattn.tasks.social.budget import budget_lr, ours_warmup
from graphattn.train.config import LOSSES, METRICS

__all__ = ["TRAIN_OPTIONS", "TASK_TYPES", "check_objective", "train_options", "recipe_options", "GROUPS", "APPLIES", "OURS_ONLY", "check_applicable",
           "given_options", "DEVICE_HELP", "DATA_ROOT_HELP", "RUN_FILES", "check_rerun", "applied_defaults"]

#: help of ``--device`` (train, pretrain, examples/social_baselines.py); :func:`graphattn.train.resolve_device`
DEVICE_HELP = "auto (the GPU when CUDA is available, else the CPU; default), cpu, cuda or cuda:N"
#: help of ``--data-root`` (every command that reads data); :func:`graphattn.data.data_root`
DATA_ROOT_HELP = ("folder of the raw data files (default: $GRAPHATTN_DATA, else the checkout's datasets/, else "
                  "~/.cache/graphattn); files missing there are downloaded into it")

#: the ``train`` options that are fields of :class:`graphattn.train.TrainConfig`, read the same way by every
#: pipeline (:func:`train_options`); the config's other fields come from ``--seed``, ``--resume`` and
#: ``--no-progress``, and ``kind`` from the task (tests/cli/test_config_options.py checks both directions)
TRAIN_OPTIONS = ("epochs", "lr", "weight_decay", "patience", "grad_clip", "schedule", "warmup", "loss", "metric")


def train_options(args) -> Dict[str, Any]:
    """The :data:`TRAIN_OPTIONS` the command line gives (None = not given), as recipe keys; ``--grad-clip 0``
    is no clipping (``grad_clip=None``)."""
    given = {k: getattr(args, k) for k in TRAIN_OPTIONS if getattr(args, k, None) is not None}
    if given.get("grad_clip") == 0:
        given["grad_clip"] = None
    return given


def recipe_options(args, recipe: Dict[str, Any]) -> Dict[str, Any]:
    """The options the command line gives (not None) for the keys of a task ``recipe``: every recipe
    key with an option of the same name is read, so a new recipe key needs no list of its own here
    (tests/cli/test_config_options.py checks that each task option is a recipe key or read elsewhere)."""
    return {k: getattr(args, k) for k in recipe if getattr(args, k, None) is not None}


#: option destinations by the task they belong to (and the name used in the error message)
GROUPS: Dict[str, FrozenSet[str]] = {
    "molecule": frozenset({"csv", "smiles_col", "tasks", "split", "split_col", "pos_weight", "descriptors",
                           "ensemble", "init", "pe_kind", "hops"}),
    "--edges input": frozenset({"edges", "target", "features", "target_col", "id_col"}),
    "graph-set": frozenset({"tu_text", "folds"}),
    "node-classification": frozenset({
        "mini_batch", "num_neighbors", "attn_dropout", "input_dropout", "propagation", "propagation_alpha",
        "propagation_learned", "propagation_dropout", "gcn_weight", "gcn_layers", "self_loops", "label_input",
        "consistency", "consistency_weight", "consistency_temperature", "max_features"}),
    "graph-level": frozenset({"readout", "local_mpnn", "batch_size", "limit"}),
}
#: the groups each task reads
APPLIES = {"molecule": ("molecule", "graph-level"), "node": ("--edges input", "node-classification"),
           "graph": ("graph-set", "graph-level")}
#: options that shape only our model, per task (a --baseline model does not read them)
OURS_ONLY = {
    "molecule": frozenset({"global_tokens", "pe_dim", "pe_kind", "hops", "local_mpnn", "readout", "init"}),
    "node": frozenset({"global_tokens", "pe_dim", "attn_dropout", "input_dropout", "propagation",
                       "propagation_alpha", "propagation_learned", "propagation_dropout", "gcn_weight",
                       "gcn_layers", "self_loops"}),
    "graph": frozenset({"global_tokens", "pe_dim", "local_mpnn"}),
}
#: PyG baselines without attention heads (--heads would be ignored)
_NO_HEADS = frozenset({"gcn", "gin", "gine"})
_TASK_NAMES = {"molecule": "molecules", "node": "node classification", "graph": "graph sets"}


def given_options(args, defaults) -> FrozenSet[str]:
    """Destinations of ``args`` whose value differs from ``defaults`` (a namespace or dict)."""
    base = vars(defaults) if not isinstance(defaults, dict) else defaults
    return frozenset(k for k, v in vars(args).items() if k in base and base[k] != v)


def _flags(names: Iterable[str]) -> str:
    return ", ".join(f"--{n.replace('_', '-')}" for n in sorted(names))


def check_applicable(args, task: str, baseline: str = "none") -> None:
    """ValueError naming every given option that ``task`` (``"molecule"``, ``"node"`` or
    ``"graph"``) would not read, and with ``baseline`` != ``"none"`` every option of our model."""
    given = getattr(args, "given_options", None)
    if given is None:
        return
    for group, names in GROUPS.items():
        if group in APPLIES[task]:
            continue
        bad = given & names
        if bad:
            raise ValueError(f"{_flags(bad)}: {group} option(s), not used for {_TASK_NAMES[task]}")
    if baseline and baseline != "none":
        bad = given & (OURS_ONLY[task] | (frozenset({"heads"}) if baseline in _NO_HEADS else frozenset()))
        if bad:
            raise ValueError(f"{_flags(bad)}: option(s) of our model, not used by --baseline {baseline}")


def check_objective(args, task_type: str, kind: str) -> None:
    """ValueError when ``--loss`` or ``--metric`` does not fit the run's task type (``task_type``, trained
    as :class:`graphattn.train.TrainConfig` ``kind``), naming the option and what it takes."""
    loss, metric = getattr(args, "loss", None), getattr(args, "metric", None)
    if loss is not None and loss not in LOSSES[kind]:
        raise ValueError(f"--loss {loss} is a regression loss; this run is {task_type} "
                         "(pass --task-type regression for numeric targets)")
    if metric is not None and metric not in METRICS[kind]:
        raise ValueError(f"--metric {metric} is not a metric of this {task_type} run; choose one of "
                         f"{', '.join(METRICS[kind])}")


def usage_error(command: str, msg: str) -> int:
    print(f"graphattn {command}: {msg}", file=sys.stderr)
    return 2


def message_of(exc: BaseException) -> str:
    """An exception's message; a KeyError's without the quotes ``str`` adds."""
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        return str(exc.args[0])
    return str(exc)


_AT_LEAST = {"epochs": 1, "warmup": 0, "limit": 1, "batch_size": 1, "patience": 0, "hidden": 1, "layers": 0, "heads": 1,
             "folds": 2, "threads": 1, "global_tokens": 0, "pe_dim": 0, "ensemble": 1, "gcn_layers": 1, "propagation": 0,
             "consistency": 0, "consistency_weight": 0}


_FRACTIONS = ("dropout", "attn_dropout", "input_dropout", "propagation_dropout")


def check_train_numbers(args) -> None:
    """ValueError naming the option when a numeric ``train`` option is out of its range."""
    for name, low in _AT_LEAST.items():
        val = getattr(args, name, None)
        if val is not None and val < low:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {low}, got {val}")
    for name in _FRACTIONS:
        val = getattr(args, name, None)
        if val is not None and not 0.0 <= val < 1.0:
            raise ValueError(f"--{name.replace('_', '-')} must be in [0, 1), got {val}")
    for name in ("lr",):
        val = getattr(args, name, None)
        if val is not None and not (math.isfinite(val) and val > 0):
            raise ValueError(f"--lr must be a finite number > 0, got {val}")
    val = getattr(args, "consistency_weight", None)
    if val is not None and not math.isfinite(val):
        raise ValueError(f"--consistency-weight must be a finite number >= 0, got {val}")
    val = getattr(args, "consistency_temperature", None)
    if val is not None and not 0.0 < val <= 1.0:
        raise ValueError(f"--consistency-temperature must be in (0, 1], got {val}")
    for name in ("weight_decay", "grad_clip"):
        val = getattr(args, name, None)
        if val is not None and not (math.isfinite(val) and val >= 0):
            raise ValueError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {val}")
    val = getattr(args, "seed", None)
    if val is not None and not 0 <= val < 2 ** 32:  # NumPy's and scikit-learn's seed range, for every pipeline
        raise ValueError(f"--seed must be in 0..{2 ** 32 - 1}, got {val}")
    seeds = getattr(args, "seeds", None) or []
    bad = next((s for s in seeds if not 0 <= s < 2 ** 32), None)
    if bad is not None:
        raise ValueError(f"--seeds: every seed must be in 0..{2 ** 32 - 1}, got {bad}")
    if seeds and val:
        raise ValueError(f"give --seed {val} or --seeds {' '.join(map(str, seeds))}, not both")
    if seeds and getattr(args, "distributed", False):
        raise ValueError("--seeds runs the seeds one after another in one process; with --distributed, launch "
                         "one torchrun job per --seed")
    if seeds and getattr(args, "folds", None):
        raise ValueError("--folds already reports the mean ± std over its folds; give --seed, not --seeds")
    val, cpus = getattr(args, "threads", None), os.cpu_count() or 1
    if val is not None and val > max(256, 4 * cpus):
        raise ValueError(f"--threads {val}: far more than this machine's {cpus} CPUs")


#: options naming files or folders: an empty value is a mistake (it would mean the current folder)
_PATH_OPTIONS = ("out", "config", "storage", "csv", "checkpoint", "init", "edges", "target", "features", "tu_text",
                 "exclude", "data_root")


#: options that name an input which must exist (``-``: standard input)
_INPUT_OPTIONS = ("config", "csv", "checkpoint", "init", "edges", "target", "features", "tu_text")


def check_paths(args) -> None:
    """ValueError naming the option given an empty path (``--out ""``, ``--csv ""``) or an input that is
    not there (``--csv missing.csv: no such file``), before any heavy import."""
    for name in _PATH_OPTIONS:
        val = getattr(args, name, None)
        for v in (val if isinstance(val, list) else [val]):
            if isinstance(v, str) and not v.strip():
                raise ValueError(f"--{name.replace('_', '-')}: empty path")
            if name in _INPUT_OPTIONS and isinstance(v, str) and v != "-" and not Path(v).expanduser().exists():
                raise ValueError(f"--{name.replace('_', '-')} {v}: no such file")


# ----------------------------------------------------------------------------- train
def social_hparams(args, defaults: Dict[str, Any], *, full_batch: bool = False) -> Dict[str, Any]:
    """The hyperparameters of a social run: ``defaults`` (the recipe) with the options ``args`` gives.
    ``full_batch`` (a node run without ``--mini-batch``): without ``--lr`` the recipe's rate follows
    the epoch budget (:func:`graphattn.tasks.social.budget.budget_lr`). A recipe's ``warmup=None``
    becomes :func:`~graphattn.tasks.social.budget.ours_warmup` for our model (``args.baseline``
    ``"none"`` or absent) when that raised its rate, else 0 (a full-length run as its recipe was
    chosen; a baseline)."""
    hp = {**defaults, **recipe_options(args, defaults), **train_options(args)}
    if getattr(args, "local_mpnn", None) is not None:  # graph sets: no recipe default (None = no branch)
        hp["local_mpnn"] = args.local_mpnn
    if getattr(args, "layers", None) is not None:  # an explicit --layers is every model's depth
        hp["baseline_layers"] = None
    if getattr(args, "readout", None) is not None:  # ... and an explicit --readout every model's readout
        # (except GIN-0's: always sum, the readout its expressiveness argument rests on)
        hp["baseline_readout"] = None
    hp["heads"] = args.heads if getattr(args, "heads", None) is not None else hp.get("heads", 4)  # default None
    if full_batch and getattr(args, "lr", None) is None:  # one step per epoch: the rate follows the budget
        hp["lr"] = budget_lr(defaults["lr"], defaults["epochs"], hp["epochs"])
    if hp.get("warmup", 0) is None:  # node recipes: our model warms up into a raised rate, the baselines do not
        ours = (getattr(args, "baseline", None) or "none") == "none"
        hp["warmup"] = ours_warmup(hp["epochs"]) if ours and hp["lr"] > defaults["lr"] else 0
    return hp


#: what a training run writes into its folder (or into its member/fold sub-folders)
RUN_FILES = ("metrics.json", "best.pt", "last.pt")


def check_rerun(out: Path, args) -> None:
    """ValueError when the output folder ``out`` already holds a run and the command line does not say
    what to do with it: continue it (``--resume``) or replace it (``--overwrite``)."""
    resume, overwrite = bool(getattr(args, "resume", False)), bool(getattr(args, "overwrite", False))
    if resume and overwrite:
        raise ValueError("--resume continues the run in --out, --overwrite replaces it: give one of them")
    if resume or overwrite or not Path(out).is_dir():
        return
    found = sorted(str(p.relative_to(out)) for f in RUN_FILES for p in (*Path(out).glob(f), *Path(out).glob(f"*/{f}")))
    if found:
        raise ValueError(f"{out} holds another run ({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}); "
                         "continue it with --resume, replace it with --overwrite, or give another --out")


def applied_defaults(specific: Dict[str, Any], args, task: str) -> str:
    """A line naming the dataset-specific settings of a ``task`` run (``"node"`` or ``"graph"``) that the
    command line did not give (e.g. Facebook's label input and propagation), or ``""`` when there are none."""
    given = getattr(args, "given_options", frozenset())
    ours = (getattr(args, "baseline", "none") or "none") == "none"
    shown = {k: v for k, v in specific.items() if k not in given and not k.startswith("baseline_")
             and (ours or k not in OURS_ONLY[task])}
    if not shown:
        return ""
    return ("defaults of this dataset (each has its option): "
            + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in shown.items()))


def out_dir_for(args, name: str) -> Path:
    return Path(args.out) if args.out else Path("runs") / name

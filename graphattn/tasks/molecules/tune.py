"""Hyperparameter search for the molecule recipe, on the validation split, with Optuna.

Optuna is the field's search library (TPE sampler, pruners, resumable storage); this module adds only
the search space of our recipe and of the GINE baseline (:data:`SEARCH_SPACE`), the objective (one
:func:`~graphattn.tasks.molecules.pipeline.run_training` per trial, reporting each epoch's validation
metric so that the median pruner can stop an unpromising trial) and the best trial as the recipe
options that ``graphattn train --config FILE`` reads.

>>> sorted(SEARCH_SPACE["gine"])
['descriptors', 'dropout', 'hidden', 'layers', 'lr']
>>> space_for("none", fixed={"lr", "hops"})["layers"]
Param(kind='int', low=2, high=6, choices=())
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from graphattn.tasks.molecules.data import descriptor_set
from graphattn.tasks.molecules.pipeline import model_spec, run_training

__all__ = ["Param", "SEARCH_SPACE", "HEADS_SPLIT_WIDTH", "space_for", "sample", "recipe_values", "TrialResult", "RecipeObjective",
           "make_study", "run_search", "trial_table"]


@dataclass(frozen=True)
class Param:
    """One searched option: ``kind`` ``"log"`` (log-uniform float), ``"float"`` (uniform, step 0.05),
    ``"int"`` (uniform integer) in ``[low, high]``, or ``"choice"`` among ``choices``."""

    kind: str
    low: float = 0
    high: float = 0
    choices: Tuple[Any, ...] = ()

    def suggest(self, trial, name: str):
        if self.kind == "log":
            return trial.suggest_float(name, self.low, self.high, log=True)
        if self.kind == "float":
            return trial.suggest_float(name, self.low, self.high, step=0.05)
        if self.kind == "int":
            return trial.suggest_int(name, int(self.low), int(self.high))
        return trial.suggest_categorical(name, list(self.choices))


_COMMON = {
    "lr": Param("log", 1e-4, 3e-3),
    "hidden": Param("choice", choices=(64, 128, 256)),
    "layers": Param("int", 2, 6),
    "dropout": Param("float", 0.0, 0.4),
    "descriptors": Param("choice", choices=("rdkit2d", "rdkit2d_normalized", "none")),
}
#: what ``graphattn tune`` searches, per ``--baseline`` (``none`` = our model): recipe field -> range.
#: ``local_mpnn`` ``"none"`` means no branch; ``pe_dim`` 0 means no positional encoding.
SEARCH_SPACE: Dict[str, Dict[str, Param]] = {
    "none": {**_COMMON,
             "pe_kind": Param("choice", choices=("laplacian", "rwse", "rrwp")),
             "pe_dim": Param("choice", choices=(0, 8, 16)),
             "hops": Param("int", 1, 3),
             "global_tokens": Param("int", 0, 2),
             "local_mpnn": Param("choice", choices=("none", "gine"))},
    "gine": dict(_COMMON),
    "gat": dict(_COMMON),
}
#: the models whose width is split over ``heads`` (so the searched widths are those ``heads`` divides)
HEADS_SPLIT_WIDTH = frozenset({"none", "gat"})


def space_for(baseline: str, fixed: Iterable[str] = (), recipe=None) -> Dict[str, Param]:
    """The search space of ``baseline`` without the options the user fixed (``fixed``: recipe fields),
    narrowed to what the fixed ``recipe`` (a :class:`~graphattn.tasks.molecules.recipe.MoleculeRecipe`)
    can take: widths its ``heads`` divide, at least one global token for ``readout="token"``."""
    if baseline not in SEARCH_SPACE:
        raise ValueError(f"no search space for --baseline {baseline!r}; choose one of {sorted(SEARCH_SPACE)}")
    fixed = set(fixed)
    space = {k: p for k, p in SEARCH_SPACE[baseline].items() if k not in fixed}
    if recipe is not None and "hidden" in space and baseline in HEADS_SPLIT_WIDTH:
        widths = tuple(w for w in space["hidden"].choices if w % recipe.heads == 0)
        if not widths:
            raise ValueError(f"--heads {recipe.heads} divides none of the searched widths "
                             f"{list(space['hidden'].choices)}; give --hidden too")
        space["hidden"] = Param("choice", choices=widths)
    if recipe is not None and "global_tokens" in space and recipe.readout == "token":
        space["global_tokens"] = Param("int", 1, space["global_tokens"].high)
    return space


def sample(trial, space: Mapping[str, Param]) -> Dict[str, Any]:
    """The recipe fields of one trial (see :func:`recipe_values`)."""
    return recipe_values({name: p.suggest(trial, name) for name, p in space.items()})


def recipe_values(params: Mapping[str, Any]) -> Dict[str, Any]:
    """A trial's parameters as recipe fields: ``local_mpnn`` ``"none"`` as None, a stepped float without
    its binary rounding error (0.35, not 0.35000000000000003).

    >>> recipe_values({"dropout": 0.35000000000000003, "local_mpnn": "none", "lr": 0.00123456})
    {'dropout': 0.35, 'local_mpnn': None, 'lr': 0.00123456}
    """
    values = dict(params)
    for name, v in values.items():
        if name in _COMMON and _COMMON[name].kind == "float":
            values[name] = round(v, 6)
    if values.get("local_mpnn") == "none":
        values["local_mpnn"] = None
    return values


@dataclass(frozen=True)
class TrialResult:
    """What one trial's training gives the search: the best epoch's validation score, its epoch and
    the epochs run."""

    value: float
    best_epoch: int
    epochs_run: int


class RecipeObjective:
    """One trial's training: ``objective(values, report)`` trains ``recipe.replace(**values)`` on the
    validation split and returns its :class:`TrialResult` (the ``train`` of :func:`run_search`).

    Args:
        recipe: the fixed :class:`~graphattn.tasks.molecules.recipe.MoleculeRecipe` the values change.
        load: ``load(recipe) -> (dataset, (train, val, test) indices)`` with the inputs that recipe
            needs (positional encoding, hop edges, descriptors); called once per distinct input setting,
            the last ``keep`` of them kept in memory.
        baseline: ``"none"`` (our model), ``"gine"`` or ``"gat"``.
        seed, pos_weight, device: of every trial's run.
        keep (int, default 4): data sets kept in memory.

    The test molecules are never read by a search (their indices are dropped before training); a split
    without validation molecules is a ``RuntimeError``."""

    def __init__(self, recipe, load: Callable, baseline: str = "none", seed: int = 0, pos_weight: bool = False,
                 device=None, keep: int = 4):
        self.recipe, self.load, self.baseline = recipe, load, baseline
        self.seed, self.pos_weight, self.device, self.keep = seed, pos_weight, device, keep
        self.key = recipe.train_config().selection[0]
        self.data: Dict[tuple, Any] = {}

    def inputs(self, recipe) -> tuple:
        """What the featurised data depends on (runs that share it share one load)."""
        return (recipe.pe_dim, recipe.pe_kind, recipe.hops, recipe.descriptors)

    def __call__(self, values: Mapping[str, Any], report: Callable[[int, Optional[float]], None]) -> TrialResult:
        hp = self.recipe.replace(**values)
        inputs = self.inputs(hp)
        if inputs not in self.data:
            if len(self.data) >= self.keep:
                self.data.pop(next(iter(self.data)))
            self.data[inputs] = self.load(hp)
        ds, idx = self.data[inputs]
        if len(idx[1]) == 0:
            raise RuntimeError("the split has no validation molecules: nothing to search on (use a larger set or "
                               "another --split)")
        idx = (idx[0], idx[1], idx[2][:0])  # the test molecules are not read by a search
        spec = model_spec(self.baseline, len(ds.task_names), hp,
                          graph_feature_dim=len(descriptor_set(hp.descriptors) or ()))
        key = self.key
        res = run_training(ds, idx, spec, hp, seed=self.seed, pos_weight=self.pos_weight, progress=False,
                           log=lambda _m: None, device=self.device,
                           on_epoch=lambda rec: report(rec["epoch"], (rec.get("val") or {}).get(key)))
        value = (res.get("val") or {}).get(key)
        return TrialResult(float("nan") if value is None else float(value), res["best_epoch"], res["epochs_run"])


def make_study(storage: Optional[str], name: str, higher: bool, seed: int, fixed: Mapping[str, Any]):
    """An Optuna study (TPE sampler seeded with ``seed``, median pruner after 5 trials and 5 epochs),
    new or loaded from the SQLite file ``storage`` (resumable); a stored study run with other fixed
    options is refused (its trials answer another question)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial is ours to print
    url = None if storage is None else f"sqlite:///{storage}"
    study = optuna.create_study(study_name=name, storage=url, load_if_exists=True,
                                direction="maximize" if higher else "minimize",
                                sampler=optuna.samplers.TPESampler(seed=seed),
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=5))
    # a continued study draws new points: TPE's random start would otherwise repeat the stored trials
    study.sampler = optuna.samplers.TPESampler(seed=seed + len(study.trials))
    stored = study.user_attrs.get("fixed")
    plain = {k: fixed[k] for k in sorted(fixed)}
    if stored is not None and stored != plain:
        changed = sorted(k for k in set(stored) | set(plain) if stored.get(k) != plain.get(k))
        raise ValueError(f"study {name!r} in {storage} was run with other settings ({', '.join(changed)}); "
                         "give another --study-name or the same options")
    if stored is None:
        study.set_user_attr("fixed", plain)
    return study


def finished(study) -> int:
    """Trials of ``study`` that completed or were pruned (a killed run's running trial does not count)."""
    import optuna

    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return sum(t.state in states for t in study.trials)


def run_search(study, space: Mapping[str, Param], train: Callable[[Dict[str, Any], Callable], TrialResult], *,
               trials: int, timeout: Optional[float] = None, key: str = "score",
               log: Callable[[str], None] = print, progress: bool = True) -> int:
    """Run trials until ``study`` holds ``trials`` finished ones (or ``timeout`` seconds pass); returns
    how many ran now. ``train(values, report)`` trains the recipe with ``values`` and calls
    ``report(epoch, score)`` after each epoch (the pruner may stop the trial there)."""
    import optuna

    todo = max(trials - finished(study), 0)
    if todo == 0:
        return 0

    def objective(trial):
        values = sample(trial, space)

        def report(epoch: int, score: float) -> None:
            if score is not None and math.isfinite(score):
                trial.report(score, epoch)
                if trial.should_prune():
                    log(f"trial {trial.number}: pruned at epoch {epoch} (val {key} {score:.4f}, below the median "
                        f"of the earlier trials there) | {_fmt(values)}")
                    raise optuna.TrialPruned(f"epoch {epoch}")

        res = train(values, report)
        trial.set_user_attr("best_epoch", res.best_epoch)
        trial.set_user_attr("epochs_run", res.epochs_run)
        log(f"trial {trial.number}: val {key} {res.value:.4f} (best epoch {res.best_epoch} of {res.epochs_run}) "
            f"| {_fmt(values)}")
        if not math.isfinite(res.value):
            raise optuna.TrialPruned("undefined validation score")
        return res.value

    before = len(study.trials)
    study.optimize(objective, n_trials=todo, timeout=timeout, show_progress_bar=progress,
                   # a diverged trial, or a sampled combination the model refuses, is a failed trial,
                   # not the end of the search
                   catch=(FloatingPointError, ValueError))
    return len(study.trials) - before


def _fmt(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v:.2g}" if isinstance(v, float) and k == "lr" else f"{k}={v}" for k, v in values.items())


def trial_table(study, key: str, top: int = 10) -> List[Dict[str, Any]]:
    """The ``top`` best finished trials (best first) as rows: ``trial``, ``val <key>``, ``epochs`` and
    each searched value."""
    import optuna

    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None]
    higher = study.direction == optuna.study.StudyDirection.MAXIMIZE
    done.sort(key=lambda t: -t.value if higher else t.value)
    return [{"trial": t.number, f"val {key}": round(t.value, 4), "epochs": t.user_attrs.get("epochs_run"),
             **recipe_values(t.params)} for t in done[:top]]

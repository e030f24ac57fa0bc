"""The molecule pipeline shared by the CLI (:mod:`graphattn.cli.molecules_train`) and the examples:
dataset → split → model → :func:`graphattn.train.fit` → per-task metrics, for classification and
regression. The data side (loading, featurizing, task names, splits) lives in
:mod:`graphattn.tasks.molecules.data`, model outputs and metrics in :mod:`graphattn.tasks.molecules.outputs`,
checkpoint → model in :mod:`graphattn.tasks.molecules.checkpoints`.

A run is described by a :class:`~graphattn.tasks.molecules.recipe.MoleculeRecipe`; its model by a
:class:`~graphattn.nn.models.registry.ModelSpec` (:func:`model_spec`), stored in checkpoints with the featurizer
version, the task names, the PE size and the recipe, so that :func:`load_model` rebuilds it from the
file alone.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from graphattn.data.descriptors import NORMALIZED_PREFIX
from graphattn.data.molecules import ATOM_FEATURE_DIMS, FEATURIZER_VERSION
from graphattn.loader.in_memory import in_memory_loader
from graphattn.nn.models.ensemble import ProbabilityEnsemble
from graphattn.nn.models.regression import MeanEnsemble, StandardizedRegressor, target_statistics
from graphattn.nn.models.registry import ModelSpec
from graphattn.tasks.molecules.data import SelectTasks, edge_vocab_sizes
from graphattn.tasks.molecules.checkpoints import load_model, task_type_of
from graphattn.tasks.molecules.defaults import BASELINES
from graphattn.tasks.molecules.finetune import apply_init
from graphattn.tasks.molecules.outputs import (model_inputs, output_metrics, outputs, predict_outputs, predict_proba,
                                               probability_metrics, split_metrics)
from graphattn.tasks.molecules.recipe import MoleculeRecipe
from graphattn.train.checkpoint import save_checkpoint
from graphattn.train.loop import fit
from graphattn.train.metrics import compute_pos_weight
from graphattn.train.runtime import model_device, resolve_device, set_seed

__all__ = ["molecule_loader", "model_spec", "forward", "split_metrics", "probability_metrics", "task_type_of",
           "training_targets", "run_training", "member_seed", "run_ensemble", "load_model", "predict_proba",
           "predict_outputs"]


# ----------------------------------------------------------------------------- batches
def molecule_loader(ds, batch_size: int, shuffle: bool = False):
    """Mini-batches of ``ds``: collated from the storage of an ``InMemoryDataset`` whose only
    transform is a :class:`~graphattn.tasks.molecules.data.SelectTasks` (applied per batch), by
    :func:`graphattn.loader.in_memory.in_memory_loader` (the batches and the shuffled order of
    PyG's ``DataLoader``, ~4x cheaper); anything else through PyG's ``DataLoader``."""
    from torch_geometric.loader import DataLoader

    transform = getattr(ds, "transform", None)
    if getattr(ds, "slices", None) is not None and (transform is None or isinstance(transform, SelectTasks)):
        return in_memory_loader(ds, batch_size=batch_size, shuffle=shuffle, transform=transform)
    return DataLoader(ds, batch_size=batch_size, shuffle=shuffle)


# ----------------------------------------------------------------------------- models
def _recipe(recipe: MoleculeRecipe) -> MoleculeRecipe:
    if not isinstance(recipe, MoleculeRecipe):
        raise TypeError(f"expected a MoleculeRecipe, got {type(recipe).__name__}: "
                        "build it with MoleculeRecipe(...) or MoleculeRecipe.from_dict(values)")
    return recipe


def model_spec(baseline: str, num_tasks: int, recipe: MoleculeRecipe, graph_feature_dim: int = 0) -> ModelSpec:
    """The model's class and constructor arguments: all it takes to rebuild the model (stored in checkpoints).
    ``graph_feature_dim``: number of molecule descriptors the head reads (0 = none). ``recipe.hops``
    sets the edge features (:func:`~graphattn.tasks.molecules.data.edge_vocab_sizes`)."""
    r = _recipe(recipe)
    edge_vocab = edge_vocab_sizes(r.hops)
    common = dict(in_channels=len(ATOM_FEATURE_DIMS), hidden_channels=r.hidden, num_tasks=num_tasks,
                  num_layers=r.layers, heads=r.heads, dropout=r.dropout,
                  edge_dim=len(edge_vocab), node_vocab_sizes=list(ATOM_FEATURE_DIMS),
                  edge_vocab_sizes=edge_vocab,
                  **({"graph_feature_dim": graph_feature_dim} if graph_feature_dim else {}))
    if baseline == "none":
        return ModelSpec("GraphClassifier",
                         dict(common, num_global_tokens=r.global_tokens, pe_dim=r.pe_dim,
                              pe_kind="laplacian" if r.pe_kind == "laplacian" else "linear", readout=r.readout,
                              **({"edge_pe_dim": r.pe_dim} if r.pe_kind == "rrwp" else {}),
                              **({"local_mpnn": r.local_mpnn} if r.local_mpnn else {})))
    if baseline in ("gine", "gat"):
        return ModelSpec("MPNNBaseline", dict(common, conv=baseline))
    raise ValueError(f"--baseline must be one of {BASELINES} for molecules, got {baseline!r}")


def forward(model: nn.Module, batch, split: str = "test") -> Tuple[Tensor, Tensor]:
    """The ``forward`` of :func:`graphattn.train.fit` for mini-batches of molecules. A regressor
    (:class:`~graphattn.nn.models.StandardizedRegressor`) in training mode gives outputs and targets in
    standard units (the loss weighs every task alike); in eval mode, in the targets' own units (the
    validation metrics and early stopping)."""
    batch = batch.to(model_device(model))
    args, kwargs = model_inputs(batch)
    out, y = model(*args, **kwargs), batch.y
    base = getattr(model, "module", model)  # under DistributedDataParallel
    if model.training and isinstance(base, StandardizedRegressor):
        return base.standardize(out), base.standardize(y)
    return out, y


def training_targets(ds, train_idx) -> Tensor:
    """``(N, T)`` targets of the training molecules (their task columns only)."""
    return torch.cat([d.y.view(1, -1) for d in ds[train_idx]]).double()


#: the metrics of each task type kept in a run's per-epoch history
_HISTORY = {"classification": ("roc_auc", "pr_auc", "loss"), "regression": ("mae", "rmse", "r2", "loss")}


def _run_meta(ds, spec: ModelSpec, recipe: MoleculeRecipe, meta: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    return {"pipeline": "molecules", "model": spec.to_dict(), "featurizer_version": FEATURIZER_VERSION,
            "task_names": list(ds.task_names), "task_type": recipe.task_type,
            "pe": {"kind": recipe.pe_kind, "k": spec.arg("pe_dim", 0)},
            "descriptors": getattr(ds, "descriptor_names", None), "hops": recipe.hops, "hparams": recipe.to_dict(),
            **(meta or {})}


def _check_inputs(ds, spec: ModelSpec, split_idx) -> None:
    dim, names = spec.arg("graph_feature_dim", 0), getattr(ds, "descriptor_names", None)
    if dim != len(names or ()):
        raise ValueError(f"the model reads {dim} molecule descriptors but the dataset carries {len(names or ())}: "
                         "load it with load_dataset(..., descriptors=descriptor_set(True)) and build the spec "
                         "with model_spec(..., graph_feature_dim=len(ds.descriptor_names))")
    if len(split_idx[0]) == 0:
        raise ValueError(f"the split of {len(ds)} molecules has no training molecules "
                         f"(train/val/test {'/'.join(str(len(i)) for i in split_idx)}); "
                         "use --split random or more data")


def _build(ds, train_idx, spec: ModelSpec, meta: Dict[str, Any], *, init, resume_from) -> nn.Module:
    """The model of a run: built, started from ``init``'s backbone, its descriptor statistics fitted on
    the training molecules, and for regression wrapped in a
    :class:`~graphattn.nn.models.StandardizedRegressor` with the training targets' statistics
    (recorded in ``meta["targets"]``)."""
    model = spec.build()
    if init is not None or resume_from is not None:
        record = apply_init(model, spec, init, resume_from)
        if record is not None:
            meta["init"] = record
    norm = getattr(model, "graph_feature_norm", None)
    names = getattr(ds, "descriptor_names", None) or ()
    # descriptor statistics of the training molecules only; chemprop's CDF-normalised set is already in
    # [0, 1] and is read as it is (chemprop: "use --no_features_scaling" with it): a CDF value that is
    # nearly constant on the training molecules would otherwise be blown up to the clamp on others
    if norm is not None and not (names and all(n.startswith(NORMALIZED_PREFIX) for n in names)):
        norm.fit(torch.cat([d.mol_desc for d in ds[train_idx]]))
    if meta["task_type"] != "regression":
        return model
    mean, std = target_statistics(training_targets(ds, train_idx), ds.task_names)
    meta["targets"] = {"mean": mean.tolist(), "std": std.tolist()}
    return StandardizedRegressor(model, mean.float(), std.float())


def _pos_weight(ds, train_idx) -> Tensor:
    y_train = training_targets(ds, train_idx).float()
    none = [t for t, n in zip(ds.task_names, (y_train == 1).sum(0).tolist()) if n == 0]
    if none:
        warnings.warn(f"--pos-weight: task(s) {none} have no positive label in the training split (weight 1; "
                      "the model cannot learn them)", stacklevel=3)
    return compute_pos_weight(y_train)


def run_training(ds, split_idx, spec: ModelSpec, recipe: MoleculeRecipe, *, seed: int = 0,
                 pos_weight: bool = False, out_dir=None, resume: bool = False,
                 meta: Optional[Dict[str, Any]] = None, progress: bool = True, log=print,
                 init=None, device=None, on_epoch=None) -> Dict[str, Any]:
    """Train one model on one split with :func:`graphattn.train.fit`; return its metrics
    (per-task and mean ROC-AUC / PR-AUC, or for ``recipe.task_type == "regression"`` MAE / RMSE / R² in
    the targets' units, of every split, best epoch, history, ...) and the trained ``model`` (best
    epoch's weights). Checkpoints in ``out_dir`` carry ``meta`` (``pipeline``, ``model``,
    ``featurizer_version``, ``task_names``, ``task_type``, ``pe``, for regression ``targets`` are
    filled in). Regression trains on targets standardised with the training split's mean and std
    (``recipe.loss``: ``"mse"`` or ``"l1"``), selects on ``recipe.metric`` (default MAE).
    ``init``: a ``graphattn pretrain`` checkpoint whose backbone the model starts from
    (:func:`graphattn.tasks.molecules.finetune.apply_init`; recorded in ``meta["init"]``). ``device``: see
    :func:`graphattn.train.resolve_device` (default: the GPU when there is one). ``on_epoch``: see
    :func:`graphattn.train.fit`."""
    recipe, spec = _recipe(recipe), ModelSpec.from_dict(spec)
    meta = _run_meta(ds, spec, recipe, meta)
    task_type = meta["task_type"]
    _check_inputs(ds, spec, split_idx)
    if pos_weight and task_type == "regression":
        raise ValueError("pos_weight weighs the positive labels of binary tasks; it has no meaning for regression")
    parts = dict(zip(("train", "val", "test"), split_idx))
    set_seed(seed)
    last = Path(out_dir) / "last.pt" if resume and out_dir is not None else None
    model = _build(ds, parts["train"], spec, meta, init=init, resume_from=last).to(resolve_device(device))
    loaders = {s: molecule_loader(ds[idx], recipe.batch_size, shuffle=(s == "train"))
               for s, idx in parts.items() if len(idx) > 0}
    pw = _pos_weight(ds, parts["train"]).to(model_device(model)) if pos_weight else None
    config = recipe.train_config(seed=seed, resume=resume, progress=progress)
    res = fit(model, loaders, forward, config, pos_weight=pw, out_dir=out_dir, meta=meta, log=log,
              on_epoch=on_epoch)
    out = {"best_epoch": res["best_epoch"], "epochs_run": res["epochs_run"],
           "seconds_per_epoch": res["seconds_per_epoch"],
           "num_parameters": sum(p.numel() for p in model.parameters()),
           "counts": {s: len(idx) for s, idx in parts.items()}}
    for s, loader in loaders.items():
        out[s] = split_metrics(model, loader, ds.task_names, task_type)
    keep = _HISTORY[task_type]
    out["history"] = [{k: (v if not isinstance(v, dict) else {m: v.get(m) for m in keep})
                       for k, v in h.items()} for h in res["history"]]
    out["meta"], out["model"] = meta, model
    return out


def member_seed(seed: int, k: int) -> int:
    """Initialisation seed of ensemble member ``k`` (0-based) of a run with ``seed``: member 0
    is the single model of that seed, and the ensembles of seeds 0, 1, 2 share no member."""
    return int(seed) + 1000 * int(k)


def run_ensemble(ds, split_idx, spec: ModelSpec, recipe: MoleculeRecipe, *, size: int = 1, seed: int = 0,
                 pos_weight: bool = False, out_dir=None, resume: bool = False,
                 meta: Optional[Dict[str, Any]] = None, progress: bool = True, log=print,
                 init=None, device=None) -> Dict[str, Any]:
    """Train ``size`` models on the same split (member ``k``: seed :func:`member_seed`, its
    checkpoints and metrics in ``out_dir/member{k}``) and average their probabilities
    (:class:`~graphattn.ProbabilityEnsemble`, chemprop's ``--ensemble_size``), or for regression their
    values (:class:`~graphattn.MeanEnsemble`; the members' spread is the uncertainty).

    ``size=1`` is exactly :func:`run_training`. Otherwise the result has the ensemble's
    metrics per split, ``members`` (each member's best epoch and val/test ROC-AUC; regression:
    MAE), ``ensemble_curve`` (the same of the ensembles of the first 1..size members) and
    the ``model``; ``out_dir/best.pt`` holds all members (``meta["ensemble"]``) and loads
    with :func:`load_model`. ``init``: every member starts from this pretrained backbone
    (its head and dropout masks still differ by seed). ``resume`` continues every member from its own ``last.pt``
    (finished members are only reloaded).
    """
    size = int(size)
    if size < 1:
        raise ValueError(f"ensemble size must be >= 1, got {size}")
    if size == 1:
        return run_training(ds, split_idx, spec, recipe, seed=seed, pos_weight=pos_weight, out_dir=out_dir,
                            resume=resume, meta=meta, progress=progress, log=log, init=init, device=device)
    out_dir = Path(out_dir) if out_dir is not None else None
    seeds = [member_seed(seed, k) for k in range(size)]
    key = "mae" if _recipe(recipe).task_type == "regression" else "roc_auc"
    members, runs = [], []
    for k, s in enumerate(seeds):
        with warnings.catch_warnings():
            if k > 0:  # every member has the same training split: its data warnings were given once
                warnings.filterwarnings("ignore", message="--pos-weight: task")
            res = run_training(ds, split_idx, spec, recipe, seed=s, pos_weight=pos_weight,
                               out_dir=out_dir / f"member{k}" if out_dir is not None else None, resume=resume,
                               meta={**(meta or {}), "ensemble_size": size},  # a resume finds the size here
                               progress=progress, log=lambda m, k=k: log(f"[member {k + 1}/{size}] {m}"),
                               init=init, device=device)
        members.append(res.pop("model"))
        runs.append(res)
        log(f"[member {k + 1}/{size}] seed {s}: best epoch {res['best_epoch']} | " + _member_line(res, key))
    regression = runs[0]["meta"]["task_type"] == "regression"
    model = (MeanEnsemble if regression else ProbabilityEnsemble)(members).eval()
    meta = {**runs[0]["meta"], "ensemble": {"size": size, "seeds": seeds}}
    out = _ensemble_summary(ds, split_idx, model, seeds, runs, key)
    if out_dir is not None:
        save_checkpoint(out_dir / "best.pt", {"model": model.state_dict(), "meta": meta})
    out["meta"], out["model"] = meta, model
    return out


def _member_line(res: Dict[str, Any], key: str) -> str:
    vals = {p: (res.get(p) or {}).get(key) for p in ("val", "test")}
    return " | ".join(f"{p} {key} {'n/a' if v is None or v != v else f'{v:.4f}'}" for p, v in vals.items())


def _ensemble_summary(ds, split_idx, model: nn.Module, seeds, runs, key: str) -> Dict[str, Any]:
    """The result of :func:`run_ensemble`: the ensemble's metrics per split, the members' and the
    ensembles of the first 1..size members (``ensemble_curve``, on ``key``: ROC-AUC or MAE)."""
    task_type = runs[0]["meta"]["task_type"]
    epochs = sum(r["epochs_run"] for r in runs)
    out: Dict[str, Any] = {
        "best_epoch": [r["best_epoch"] for r in runs], "epochs_run": epochs,
        "seconds_per_epoch": sum(r["seconds_per_epoch"] * r["epochs_run"] for r in runs) / max(1, epochs),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "member_parameters": runs[0]["num_parameters"], "counts": runs[0]["counts"],
        "members": [{"seed": s, "best_epoch": r["best_epoch"], "epochs_run": r["epochs_run"],
                     **{f"{p}_{key}": r[p][key] for p in ("val", "test") if p in r}}
                    for s, r in zip(seeds, runs)],
        "ensemble_curve": []}
    outs = {}
    for p, idx in zip(("train", "val", "test"), split_idx):
        if len(idx) > 0:
            outs[p] = outputs(model, molecule_loader(ds[idx], 256), task_type)
            out[p] = output_metrics(outs[p][0].mean(0), outs[p][1], ds.task_names, task_type)
    for m in range(1, len(runs) + 1):
        out["ensemble_curve"].append({"members": m, **{
            f"{p}_{key}": output_metrics(outs[p][0][:m].mean(0), outs[p][1], ds.task_names, task_type)[key]
            for p in ("val", "test") if p in outs}})
    return out

"""The molecule pipeline shared by the CLI (:mod:`graphattn.cli.molecules_train`) and the examples:
dataset → split → model → :func:`graphattn.train.fit` → per-task metrics, and checkpoint →
model → probabilities. The data side (loading, featurizing, task names, splits) lives in
:mod:`graphattn.tasks.molecules.data`.

Every model is described by a plain ``{"class", "kwargs"}`` spec (:func:`model_spec`), stored
in checkpoints with the featurizer version, the task names and the PE size, so that
:func:`load_model` rebuilds it from the file alone.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from graphattn.data.molecules import ATOM_FEATURE_DIMS, FEATURIZER_VERSION
from graphattn.loader.in_memory import in_memory_loader
from graphattn.nn.encodings import pe_inputs
from graphattn.nn.models.ensemble import ProbabilityEnsemble
from graphattn.nn.models.registry import build_model
from graphattn.tasks.molecules.data import SelectTasks, edge_vocab_sizes
from graphattn.tasks.molecules.defaults import BASELINES
from graphattn.tasks.molecules.finetune import apply_init
from graphattn.train.checkpoint import load_checkpoint, save_checkpoint
from graphattn.train.config import TrainConfig
from graphattn.train.loop import fit
from graphattn.train.metrics import compute_pos_weight, mean_over_valid, pr_auc_per_task, roc_auc_per_task
from graphattn.train.runtime import model_device, resolve_device, set_seed

__all__ = ["molecule_loader", "model_spec", "forward", "split_metrics", "probability_metrics",
           "run_training", "member_seed", "run_ensemble", "load_model", "predict_proba"]


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
def model_spec(baseline: str, num_tasks: int, hp: Dict[str, Any], graph_feature_dim: int = 0) -> Dict[str, Any]:
    """``{"class", "kwargs"}``: everything needed to rebuild the model (stored in checkpoints).
    ``graph_feature_dim``: number of molecule descriptors the head reads (0 = none). ``hp["hops"]``
    (default 1) sets the edge features (:func:`~graphattn.tasks.molecules.data.edge_vocab_sizes`)."""
    edge_vocab = edge_vocab_sizes(hp.get("hops", 1))
    common = dict(in_channels=len(ATOM_FEATURE_DIMS), hidden_channels=hp["hidden"], num_tasks=num_tasks,
                  num_layers=hp["layers"], heads=hp["heads"], dropout=hp["dropout"],
                  edge_dim=len(edge_vocab), node_vocab_sizes=list(ATOM_FEATURE_DIMS),
                  edge_vocab_sizes=edge_vocab,
                  **({"graph_feature_dim": graph_feature_dim} if graph_feature_dim else {}))
    if baseline == "none":
        return {"class": "GraphClassifier",
                "kwargs": dict(common, num_global_tokens=hp["global_tokens"], pe_dim=hp["pe_dim"],
                               pe_kind="linear" if hp["pe_kind"] == "rwse" else hp["pe_kind"],
                               readout=hp["readout"],
                               **({"local_mpnn": hp["local_mpnn"]} if hp.get("local_mpnn") else {}))}
    if baseline in ("gine", "gat"):
        return {"class": "MPNNBaseline", "kwargs": dict(common, conv=baseline)}
    raise ValueError(f"--baseline must be one of {BASELINES} for molecules, got {baseline!r}")


def _model_inputs(batch) -> Tuple[tuple, Dict[str, Any]]:
    """``(args, kwargs)`` of a molecule model's call for a batch."""
    gf = getattr(batch, "mol_desc", None)  # (B, D) molecule descriptors, when the dataset has them
    return ((batch.x, batch.edge_index, batch.batch, batch.edge_attr),
            {"num_graphs": batch.num_graphs, **pe_inputs(batch), **({"graph_features": gf} if gf is not None else {})})


def forward(model: nn.Module, batch, split: str = "test") -> Tuple[Tensor, Tensor]:
    """The ``forward`` of :func:`graphattn.train.fit` for mini-batches of molecules."""
    batch = batch.to(model_device(model))
    args, kwargs = _model_inputs(batch)
    return model(*args, **kwargs), batch.y


def _probabilities(model: nn.Module, loader) -> Tuple[Tensor, Optional[Tensor]]:
    """``(prob, y)`` of a whole loader, both ``(M, T)`` on the CPU (``y`` None for graphs
    without labels); for a :class:`~graphattn.ProbabilityEnsemble` ``prob`` is ``(members, M, T)``."""
    model.eval()
    probs, ys = [], []
    with torch.no_grad():
        for b in loader:
            b = b.to(model_device(model))
            args, kwargs = _model_inputs(b)
            if isinstance(model, ProbabilityEnsemble):
                probs.append(model.member_probabilities(*args, **kwargs).cpu())
            else:
                probs.append(torch.sigmoid(model(*args, **kwargs).double()).cpu())  # float64: no ties near 1
            ys.append(None if getattr(b, "y", None) is None else b.y.float().cpu())
    if not probs:
        return torch.empty(0), torch.empty(0)
    prob = torch.cat(probs, dim=-2)
    return prob, (None if any(y is None for y in ys) else torch.cat(ys).view(prob.shape[-2:]))


def probability_metrics(prob: Tensor, y: Tensor, task_names: List[str]) -> Dict[str, Any]:
    """Mean and per-task ROC-AUC / PR-AUC of probabilities ``prob (M, T)`` against labels
    ``y (M, T)`` (NaN = missing); the mean is over the tasks with both classes present."""
    if prob.numel() == 0:
        return {"roc_auc": None, "pr_auc": None, "num_molecules": 0}
    roc, pr = roc_auc_per_task(y, prob), pr_auc_per_task(y, prob)
    clean = lambda v: None if v != v else float(v)  # noqa: E731 (NaN -> None for JSON)
    return {"roc_auc": clean(mean_over_valid(roc)), "pr_auc": clean(mean_over_valid(pr)),
            "tasks_evaluated": int((roc == roc).sum()), "num_molecules": int(y.size(0)),
            "roc_auc_per_task": {t: clean(v) for t, v in zip(task_names, roc)},
            "pr_auc_per_task": {t: clean(v) for t, v in zip(task_names, pr)}}


def split_metrics(model: nn.Module, loader, task_names: List[str]) -> Dict[str, Any]:
    """:func:`probability_metrics` of ``model`` (an ensemble: its mean probability) on a loader."""
    prob, y = _probabilities(model, loader)
    return probability_metrics(prob.mean(0) if prob.dim() == 3 else prob, y, task_names)


def run_training(ds, split_idx, spec: Dict[str, Any], hp: Dict[str, Any], *, seed: int = 0,
                 pos_weight: bool = False, out_dir=None, resume: bool = False,
                 meta: Optional[Dict[str, Any]] = None, progress: bool = True, log=print,
                 init=None, device=None) -> Dict[str, Any]:
    """Train one model on one split with :func:`graphattn.train.fit`; return its metrics
    (per-task and mean ROC-AUC / PR-AUC of every split, best epoch, history, ...) and the
    trained ``model`` (best epoch's weights). Checkpoints in ``out_dir`` carry ``meta``
    (``pipeline``, ``model``, ``featurizer_version``, ``task_names``, ``pe`` are filled in).
    ``init``: a ``graphattn pretrain`` checkpoint whose backbone the model starts from
    (:func:`graphattn.tasks.molecules.finetune.apply_init`; recorded in ``meta["init"]``). ``device``: see
    :func:`graphattn.train.resolve_device` (default: the GPU when there is one)."""
    meta = {"pipeline": "molecules", "model": spec, "featurizer_version": FEATURIZER_VERSION,
            "task_names": list(ds.task_names),
            "pe": {"kind": hp.get("pe_kind", "laplacian"), "k": spec["kwargs"].get("pe_dim", 0)},
            "descriptors": getattr(ds, "descriptor_names", None), "hops": hp.get("hops", 1), "hparams": hp,
            **(meta or {})}
    dim, names = spec["kwargs"].get("graph_feature_dim", 0), getattr(ds, "descriptor_names", None)
    if dim != len(names or ()):
        raise ValueError(f"the model reads {dim} molecule descriptors but the dataset carries {len(names or ())}: "
                         "load it with load_dataset(..., descriptors=descriptor_set(True)) and build the spec "
                         "with model_spec(..., graph_feature_dim=len(ds.descriptor_names))")
    parts = dict(zip(("train", "val", "test"), split_idx))
    if len(parts["train"]) == 0:
        raise ValueError(f"the split of {len(ds)} molecules has no training molecules "
                         f"(train/val/test {'/'.join(str(len(i)) for i in split_idx)}); "
                         "use --split random or more data")
    set_seed(seed)
    model = build_model(spec)
    if init is not None or resume:
        record = apply_init(model, spec, init, Path(out_dir) / "last.pt" if resume and out_dir is not None else None)
        if record is not None:
            meta["init"] = record
    model.to(resolve_device(device))
    norm = getattr(model, "graph_feature_norm", None)
    if norm is not None:  # descriptor statistics of the training molecules only
        norm.fit(torch.cat([d.mol_desc for d in ds[parts["train"]]]))
    loaders = {s: molecule_loader(ds[idx], hp["batch_size"], shuffle=(s == "train"))
               for s, idx in parts.items() if len(idx) > 0}
    pw = None
    if pos_weight:
        y_train = torch.cat([d.y for d in ds[parts["train"]]])
        pw = compute_pos_weight(y_train)
        none = [t for t, n in zip(ds.task_names, (y_train == 1).sum(0).tolist()) if n == 0]
        if none:
            warnings.warn(f"--pos-weight: task(s) {none} have no positive label in the training split (weight 1; "
                          "the model cannot learn them)", stacklevel=2)
        pw = pw.to(model_device(model))
    config = TrainConfig.from_recipe(hp, kind="binary", seed=seed, resume=resume, progress=progress)
    res = fit(model, loaders, forward, config, pos_weight=pw, out_dir=out_dir, meta=meta, log=log)
    out = {"best_epoch": res["best_epoch"], "epochs_run": res["epochs_run"],
           "seconds_per_epoch": res["seconds_per_epoch"],
           "num_parameters": sum(p.numel() for p in model.parameters()),
           "counts": {s: len(idx) for s, idx in parts.items()}}
    for s, loader in loaders.items():
        out[s] = split_metrics(model, loader, ds.task_names)
    out["history"] = [{k: (v if not isinstance(v, dict) else {m: v.get(m) for m in ("roc_auc", "pr_auc", "loss")})
                       for k, v in h.items()} for h in res["history"]]
    out["meta"], out["model"] = meta, model
    return out


def member_seed(seed: int, k: int) -> int:
    """Initialisation seed of ensemble member ``k`` (0-based) of a run with ``seed``: member 0
    is the single model of that seed, and the ensembles of seeds 0, 1, 2 share no member."""
    return int(seed) + 1000 * int(k)


def run_ensemble(ds, split_idx, spec: Dict[str, Any], hp: Dict[str, Any], *, size: int = 1, seed: int = 0,
                 pos_weight: bool = False, out_dir=None, resume: bool = False,
                 meta: Optional[Dict[str, Any]] = None, progress: bool = True, log=print,
                 init=None, device=None) -> Dict[str, Any]:
    """Train ``size`` models on the same split (member ``k``: seed :func:`member_seed`, its
    checkpoints and metrics in ``out_dir/member{k}``) and average their probabilities
    (:class:`~graphattn.ProbabilityEnsemble`, chemprop's ``--ensemble_size``).

    ``size=1`` is exactly :func:`run_training`. Otherwise the result has the ensemble's
    metrics per split, ``members`` (each member's best epoch and val/test ROC-AUC),
    ``ensemble_curve`` (val/test ROC-AUC of the ensembles of the first 1..size members) and
    the ``model``; ``out_dir/best.pt`` holds all members (``meta["ensemble"]``) and loads
    with :func:`load_model`. ``init``: every member starts from this pretrained backbone
    (its head and dropout masks still differ by seed). ``resume`` continues every member from its own ``last.pt``
    (finished members are only reloaded).
    """
    size = int(size)
    if size < 1:
        raise ValueError(f"ensemble size must be >= 1, got {size}")
    if size == 1:
        return run_training(ds, split_idx, spec, hp, seed=seed, pos_weight=pos_weight, out_dir=out_dir,
                            resume=resume, meta=meta, progress=progress, log=log, init=init, device=device)
    out_dir = Path(out_dir) if out_dir is not None else None
    seeds = [member_seed(seed, k) for k in range(size)]
    members, runs = [], []
    for k, s in enumerate(seeds):
        with warnings.catch_warnings():
            if k > 0:  # every member has the same training split: its data warnings were given once
                warnings.filterwarnings("ignore", message="--pos-weight: task")
            res = run_training(ds, split_idx, spec, hp, seed=s, pos_weight=pos_weight,
                               out_dir=out_dir / f"member{k}" if out_dir is not None else None, resume=resume,
                               meta={**(meta or {}), "ensemble_size": size},  # a resume finds the size here
                               progress=progress, log=lambda m, k=k: log(f"[member {k + 1}/{size}] {m}"),
                               init=init, device=device)
        members.append(res.pop("model"))
        runs.append(res)
        auc = {p: (res.get(p) or {}).get("roc_auc") for p in ("val", "test")}
        log(f"[member {k + 1}/{size}] seed {s}: best epoch {res['best_epoch']} | "
            + " | ".join(f"{p} auc {'n/a' if v is None or v != v else f'{v:.4f}'}" for p, v in auc.items()))
    model = ProbabilityEnsemble(members).eval()
    meta = {**runs[0]["meta"], "ensemble": {"size": size, "seeds": seeds}}
    parts = dict(zip(("train", "val", "test"), split_idx))
    out: Dict[str, Any] = {
        "best_epoch": [r["best_epoch"] for r in runs], "epochs_run": sum(r["epochs_run"] for r in runs),
        "seconds_per_epoch": sum(r["seconds_per_epoch"] * r["epochs_run"] for r in runs)
        / max(1, sum(r["epochs_run"] for r in runs)),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "member_parameters": runs[0]["num_parameters"], "counts": runs[0]["counts"],
        "members": [{"seed": s, "best_epoch": r["best_epoch"], "epochs_run": r["epochs_run"],
                     **{f"{p}_roc_auc": r[p]["roc_auc"] for p in ("val", "test") if p in r}}
                    for s, r in zip(seeds, runs)],
        "ensemble_curve": []}
    probs = {}
    for p, idx in parts.items():
        if len(idx) > 0:
            probs[p] = _probabilities(model, molecule_loader(ds[idx], 256))
            out[p] = probability_metrics(probs[p][0].mean(0), probs[p][1], ds.task_names)
    for m in range(1, size + 1):
        out["ensemble_curve"].append({"members": m, **{
            f"{p}_roc_auc": probability_metrics(probs[p][0][:m].mean(0), probs[p][1], ds.task_names)["roc_auc"]
            for p in ("val", "test") if p in probs}})
    if out_dir is not None:
        save_checkpoint(out_dir / "best.pt", {"model": model.state_dict(), "meta": meta})
    out["meta"], out["model"] = meta, model
    return out


# ----------------------------------------------------------------------------- checkpoints
def load_model(checkpoint) -> Tuple[nn.Module, Dict[str, Any]]:
    """Rebuild the model of a molecule checkpoint (``weights_only=True``), in eval mode.

    Raises ``ValueError`` when the checkpoint was made with another featurizer version:
    its atom/bond categories would not mean the same thing.
    """
    ck = load_checkpoint(checkpoint)
    meta = ck["meta"]
    if meta.get("pipeline") != "molecules":
        raise ValueError(f"{checkpoint} is a {meta.get('pipeline')!r} checkpoint, not a molecule one")
    if str(meta.get("featurizer_version")) != FEATURIZER_VERSION:
        raise ValueError(f"{checkpoint} was trained with featurizer version {meta.get('featurizer_version')!r} "
                         f"but this graphattn featurizes molecules with version {FEATURIZER_VERSION!r}: "
                         "its atom/bond features differ, so its predictions would be meaningless. "
                         "Retrain the model (graphattn train ...) with this version.")
    if meta.get("ensemble"):
        model = ProbabilityEnsemble([build_model(meta["model"]) for _ in range(int(meta["ensemble"]["size"]))])
    else:
        model = build_model(meta["model"])
    model.load_state_dict(ck["model"])
    return model.eval(), meta


@torch.no_grad()
def predict_proba(model: nn.Module, graphs: Sequence, batch_size: int = 256, members: bool = False) -> Tensor:
    """Per-task probabilities ``(M, T)`` for a list of graphs; with ``members=True`` and a
    :class:`~graphattn.ProbabilityEnsemble`, every member's: ``(members, M, T)``."""
    from torch_geometric.loader import DataLoader

    model.eval()
    prob, _ = _probabilities(model, DataLoader(list(graphs), batch_size=batch_size))
    if prob.numel() == 0:
        return torch.empty(*((len(model.members),) if members and isinstance(model, ProbabilityEnsemble) else ()),
                           0, model.num_tasks, dtype=torch.float64)
    return prob if members or prob.dim() == 2 else prob.mean(0)

"""What a molecule model gives: per-task probabilities (classification) or values in the targets' own
units (regression, :class:`~graphattn.nn.models.StandardizedRegressor`), for a loader or a list of
graphs, and the metrics of a split (ROC-AUC / PR-AUC, or MAE / RMSE / R²)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from graphattn.nn.encodings import pe_inputs
from graphattn.nn.models.ensemble import ProbabilityEnsemble
from graphattn.nn.models.regression import MeanEnsemble
from graphattn.tasks.molecules.recipe import TASK_TYPES
from graphattn.train.metrics import mean_over_valid, pr_auc_per_task, regression_per_task, roc_auc_per_task
from graphattn.train.runtime import model_device

__all__ = ["TASK_TYPES", "model_inputs", "outputs", "probability_metrics", "regression_metrics", "output_metrics",
           "split_metrics", "predict_outputs", "predict_proba", "call_outputs"]


def _check(task_type: str) -> None:
    if task_type not in TASK_TYPES:
        raise ValueError(f"task_type must be one of {TASK_TYPES}, got {task_type!r}")


def model_inputs(batch) -> Tuple[tuple, Dict[str, Any]]:
    """``(args, kwargs)`` of a molecule model's call for a batch."""
    gf = getattr(batch, "mol_desc", None)  # (B, D) molecule descriptors, when the dataset has them
    return ((batch.x, batch.edge_index, batch.batch, batch.edge_attr),
            {"num_graphs": batch.num_graphs, **pe_inputs(batch), **({"graph_features": gf} if gf is not None else {})})


def _batch_outputs(model: nn.Module, batch, task_type: str) -> Tensor:
    """float64 outputs of one batch: ``(B, T)``, or ``(members, B, T)`` for an ensemble."""
    args, kwargs = model_inputs(batch)
    return call_outputs(model, args, kwargs, task_type)


def call_outputs(model: nn.Module, args: tuple, kwargs: Dict[str, Any], task_type: str) -> Tensor:
    """float64 outputs of one call ``model(*args, **kwargs)`` (:func:`model_inputs`): probabilities or
    values ``(B, T)``, or every member's ``(members, B, T)`` for an ensemble."""
    if isinstance(model, ProbabilityEnsemble):
        return model.member_probabilities(*args, **kwargs)
    if isinstance(model, MeanEnsemble):
        return model.member_outputs(*args, **kwargs).double()
    out = model(*args, **kwargs).double()  # float64: no ties near probability 1
    return out if task_type == "regression" else torch.sigmoid(out)


@torch.no_grad()
def outputs(model: nn.Module, loader, task_type: str = "classification") -> Tuple[Tensor, Optional[Tensor]]:
    """``(out, y)`` of a whole loader on the CPU: ``out`` the probabilities (classification) or values
    (regression) ``(M, T)``, for an ensemble every member's ``(members, M, T)``; ``y`` ``(M, T)`` (None
    for graphs without labels)."""
    _check(task_type)
    model.eval()
    outs, ys = [], []
    for b in loader:
        b = b.to(model_device(model))
        outs.append(_batch_outputs(model, b, task_type).cpu())
        ys.append(None if getattr(b, "y", None) is None else b.y.float().cpu())
    if not outs:
        return torch.empty(0), torch.empty(0)
    out = torch.cat(outs, dim=-2)
    return out, (None if any(y is None for y in ys) else torch.cat(ys).view(out.shape[-2:]))


def _clean(v) -> Optional[float]:
    return None if v != v else float(v)  # NaN -> None (JSON)


def probability_metrics(prob: Tensor, y: Tensor, task_names: List[str]) -> Dict[str, Any]:
    """Mean and per-task ROC-AUC / PR-AUC of probabilities ``prob (M, T)`` against labels
    ``y (M, T)`` (NaN = missing); the mean is over the tasks with both classes present."""
    if prob.numel() == 0:
        return {"roc_auc": None, "pr_auc": None, "num_molecules": 0}
    roc, pr = roc_auc_per_task(y, prob), pr_auc_per_task(y, prob)
    return {"roc_auc": _clean(mean_over_valid(roc)), "pr_auc": _clean(mean_over_valid(pr)),
            "tasks_evaluated": int((roc == roc).sum()), "num_molecules": int(y.size(0)),
            "roc_auc_per_task": {t: _clean(v) for t, v in zip(task_names, roc)},
            "pr_auc_per_task": {t: _clean(v) for t, v in zip(task_names, pr)}}


def regression_metrics(pred: Tensor, y: Tensor, task_names: List[str]) -> Dict[str, Any]:
    """Mean and per-task MAE, RMSE and R² of predictions ``pred (M, T)`` against targets ``y (M, T)``
    (NaN = missing), in the targets' units; the means are over the tasks with targets."""
    if pred.numel() == 0:
        return {"mae": None, "rmse": None, "r2": None, "num_molecules": 0}
    per = regression_per_task(y, pred)
    out: Dict[str, Any] = {m: _clean(mean_over_valid(v)) for m, v in per.items()}
    out.update(tasks_evaluated=int((per["mae"] == per["mae"]).sum()), num_molecules=int(y.size(0)))
    out.update({f"{m}_per_task": {t: _clean(x) for t, x in zip(task_names, v)} for m, v in per.items()})
    return out


def output_metrics(out: Tensor, y: Tensor, task_names: List[str], task_type: str = "classification") -> Dict[str, Any]:
    """:func:`probability_metrics` or :func:`regression_metrics` of one model's outputs ``(M, T)``."""
    _check(task_type)
    return (regression_metrics if task_type == "regression" else probability_metrics)(out, y, task_names)


def split_metrics(model: nn.Module, loader, task_names: List[str], task_type: str = "classification") -> Dict[str, Any]:
    """:func:`output_metrics` of ``model`` (an ensemble: its members' mean) on a loader."""
    out, y = outputs(model, loader, task_type)
    return output_metrics(out.mean(0) if out.dim() == 3 else out, y, task_names, task_type)


def predict_outputs(model: nn.Module, graphs: Sequence, task_type: str = "classification", batch_size: int = 256,
                    members: bool = False) -> Tensor:
    """Per-task probabilities or values ``(M, T)`` float64 for a list of graphs; with ``members=True``
    and an ensemble, every member's: ``(members, M, T)``."""
    from torch_geometric.loader import DataLoader

    out, _ = outputs(model, DataLoader(list(graphs), batch_size=batch_size), task_type)
    if out.numel() == 0:
        lead = (len(model.members),) if members and isinstance(model, (ProbabilityEnsemble, MeanEnsemble)) else ()
        return torch.empty(*lead, 0, model.num_tasks, dtype=torch.float64)
    return out if members or out.dim() == 2 else out.mean(0)


def predict_proba(model: nn.Module, graphs: Sequence, batch_size: int = 256, members: bool = False) -> Tensor:
    """Per-task probabilities ``(M, T)`` for a list of graphs; with ``members=True`` and a
    :class:`~graphattn.ProbabilityEnsemble`, every member's: ``(members, M, T)``."""
    return predict_outputs(model, graphs, "classification", batch_size, members)

"""Per task kind (``"binary"``, ``"multiclass"``, ``"regression"``): the training loss, the metrics
of a split, the primary metric early stopping follows, and one evaluation pass over a loader."""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphattn.train.config import LOSSES, METRICS, TASK_KINDS
from graphattn.train.metrics import (accuracy, masked_bce_with_logits, mean_over_valid, pr_auc_per_task,
                                     regression_per_task, roc_auc_per_task)

__all__ = ["PRIMARY", "Forward", "task_loss", "compute_metrics", "evaluate"]

#: ``forward(model, batch, split) -> (logits, y)`` (in training optionally ``(logits, y, aux_loss)``)
Forward = Callable[[nn.Module, Any, str], Tuple[Tensor, Tensor]]


#: default selection metric per task kind and whether higher is better (see :data:`graphattn.train.config.METRICS`)
PRIMARY = {kind: (next(iter(m)), next(iter(m.values()))) for kind, m in METRICS.items()}


def _check_kind(kind: str) -> None:
    if kind not in TASK_KINDS:
        raise ValueError(f"kind must be one of {TASK_KINDS}, got {kind!r}")


def task_loss(kind: str, logits: Tensor, y: Tensor, pos_weight: Optional[Tensor] = None,
              loss: Optional[str] = None) -> Tensor:
    """binary: masked multi-task BCE (NaN labels ignored); multiclass: CE; regression: the mean
    squared (``loss="mse"``, the default) or absolute (``"l1"``) error over the present targets (NaN
    ignored). No labels at all give a zero loss (with a graph, so every rank still steps alike)."""
    _check_kind(kind)
    if loss is not None and loss not in LOSSES[kind]:
        raise ValueError(f"loss must be one of {list(LOSSES[kind])} for kind={kind!r}, got {loss!r}")
    if kind in ("binary", "regression") and y.numel() != logits.numel():
        raise ValueError(f"kind={kind!r}: the labels {tuple(y.shape)} do not match the model's outputs "
                         f"{tuple(logits.shape)} (one output per task: (B, T) or (B,); for C classes with "
                         "integer labels use kind='multiclass')")
    if kind == "binary":
        return masked_bce_with_logits(logits, y.view_as(logits).to(logits.dtype), pos_weight)
    if kind == "multiclass":  # a batch without labelled nodes (mini-batch partitions): zero loss
        y = y.long().view(-1)
        return F.cross_entropy(logits, y) if y.numel() else logits.sum() * 0.0
    y = y.view_as(logits).to(logits.dtype)
    mask = ~torch.isnan(y)
    err = torch.where(mask, logits - torch.where(mask, y, logits.detach()), torch.zeros_like(logits))
    per = err.abs() if loss == "l1" else err.pow(2)  # masked entries: zero loss and zero gradient
    return per.sum() / mask.sum().clamp(min=1)


def compute_metrics(kind: str, logits: Tensor, y: Tensor) -> Dict[str, Any]:
    """Metrics of one split. binary: mean and per-task ROC-AUC / PR-AUC over tasks with both
    classes; multiclass: accuracy; regression: MAE, RMSE and R² per task and their means over the
    tasks with targets (NaN targets ignored; :func:`graphattn.train.metrics.regression_per_task`)."""
    _check_kind(kind)
    if kind == "binary":
        # ranked on the logits (AUCs are invariant to the monotone sigmoid, which would turn
        # logits above ~17 into ties at exactly 1.0 in float32)
        roc = roc_auc_per_task(y.view_as(logits), logits)
        pr = pr_auc_per_task(y.view_as(logits), logits)
        return {"roc_auc": mean_over_valid(roc), "pr_auc": mean_over_valid(pr),
                "roc_auc_per_task": [None if math.isnan(v) else float(v) for v in roc]}
    if kind == "multiclass":
        return {"accuracy": accuracy(logits, y.long().view(-1))}
    per = regression_per_task(y.view_as(logits), logits)
    out: Dict[str, Any] = {m: mean_over_valid(v) for m, v in per.items()}
    out.update({f"{m}_per_task": [None if math.isnan(x) else float(x) for x in v] for m, v in per.items()})
    return out


@torch.no_grad()
def evaluate(model: nn.Module, loader: Iterable, forward: Forward, kind: str, split: str = "val",
             pos_weight: Optional[Tensor] = None, loss: Optional[str] = None) -> Dict[str, Any]:
    """Run ``model`` over ``loader`` in eval mode; return metrics plus ``loss``."""
    model.eval()
    outs, ys = [], []
    for batch in loader:
        logits, y = forward(model, batch, split)[:2]
        outs.append(logits.float().cpu())
        ys.append(y.float().cpu())
    if not outs:
        return {"loss": float("nan")}
    logits, y = torch.cat(outs), torch.cat(ys)
    res = compute_metrics(kind, logits, y)
    res["loss"] = float(task_loss(kind, logits, y, pos_weight, loss))
    return res

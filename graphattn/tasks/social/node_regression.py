"""Regression on node targets of one social graph (e.g. Twitch's ``views`` or ``days``).

The data spec of such a run carries ``"task_type": "regression"`` and the ``target_col``:
:func:`graphattn.tasks.social.node.load_node_graph` then reads that column as numbers
(``y`` ``(N, 1)`` float, NaN where a cell is missing) and splits the nodes with a target at
random (60/20/20, no classes to stratify by). The model (ours or a PyG baseline, one output per
node) is wrapped in :class:`~graphattn.nn.models.regression.StandardizedRegressor` with the mean
and std of the *training* targets, so its outputs are in the target's own units; in training
:func:`regression_forward` compares standardised outputs and targets (the loss is scale-free),
at evaluation original ones (MAE, RMSE and R² in the target's units select the best epoch).
The statistics are buffers of the wrapper (they travel in the checkpoint's state dict) and are
recorded in the checkpoint's meta (:func:`statistics_meta`), from which :func:`build_node_model`
rebuilds the wrapper.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import torch
from torch import Tensor, nn

from graphattn.nn.models.regression import StandardizedRegressor, target_statistics
from graphattn.nn.models.registry import build_model
from graphattn.tasks.social.node import node_logits
from graphattn.train.evaluation import compute_metrics

__all__ = ["REGRESSION_METRICS", "is_regression", "check_targets", "build_node_model", "regression_forward",
           "statistics_meta", "regression_metrics", "format_value", "metrics_line"]

#: the metrics of a regression run, in the order they are printed
REGRESSION_METRICS = ("mae", "rmse", "r2")


def is_regression(meta: Dict[str, Any]) -> bool:
    """Whether a checkpoint's meta is of a regression run (a data spec says it as ``spec.regression``)."""
    return meta.get("task_type") == "regression"


def check_targets(display: str, data) -> Tuple[Tensor, Tensor]:
    """``(mean, std)`` ``(T,)`` of the training split's targets; ``ValueError`` naming the target column
    when the validation or test split is empty, or the training targets are all equal (nothing to learn,
    no scale)."""
    names: List[str] = list(getattr(data, "task_names", None) or [getattr(data, "target_col", "target")])
    counts = [int(data[f"{s}_mask"].sum()) for s in ("train", "val", "test")]
    if min(counts) == 0:
        raise ValueError(f"{display}: the random split of the {int(sum(counts))} nodes with a value in column "
                         f"{names[0]!r} leaves a split empty (train/val/test {counts[0]}/{counts[1]}/{counts[2]}); "
                         "regression needs more nodes with a target")
    y = data.y[data.train_mask].double()
    for t, name in enumerate(names):
        col = y[:, t][~torch.isnan(y[:, t])]
        if col.numel() and float(col.max() - col.min()) <= 1e-12 * max(float(col.abs().max()), 1.0):
            raise ValueError(f"{display}: target column {name!r} has one value ({float(col[0]):g}) for every "
                             "training node: a constant has nothing to learn and no scale to standardise by")
    return target_statistics(y, names)


def build_node_model(meta: Dict[str, Any]) -> nn.Module:
    """The model of a node (or graph-set) checkpoint's meta, for its state dict to load into: the recipe's
    model, inside a :class:`StandardizedRegressor` for a regression run (its mean and std come with the
    state dict)."""
    model = build_model(meta["model"])
    if not is_regression(meta):
        return model
    return StandardizedRegressor(model, num_tasks=len(meta["target_statistics"]["mean"]))


def _unwrapped(model: nn.Module) -> nn.Module:
    return getattr(model, "module", model)  # DistributedDataParallel keeps the wrapper as .module


def regression_forward(forward):
    """``forward(model, batch, split) -> (outputs, y)`` of a node task (full batch or mini-batches) for a
    :class:`StandardizedRegressor`: in training both in standard units (the loss), else in the original
    units (metrics, early stopping)."""
    def standardized(model, batch, split):
        out, y = forward(model, batch, split)[:2]
        if model.training:
            scaler = _unwrapped(model)
            return scaler.standardize(out), scaler.standardize(y.to(out.dtype))
        return out, y

    return standardized


def statistics_meta(model: StandardizedRegressor, task_names: List[str]) -> Dict[str, Any]:
    """The training targets' statistics of ``model`` as plain lists, for the checkpoint's meta and
    ``metrics.json`` (the model itself reads its buffers)."""
    return {"tasks": list(task_names), "mean": [float(v) for v in model.mean], "std": [float(v) for v in model.std]}


def regression_metrics(model: nn.Module, meta: Dict[str, Any], data) -> Dict[str, Dict[str, float]]:
    """MAE, RMSE and R² (means over the targets, original units) per split, from one eval-mode pass over
    the whole graph (what ``evaluate`` and ``predict`` see)."""
    out = node_logits(model, meta["model"], data)
    res = {}
    for s in ("train", "val", "test"):
        m = data[f"{s}_mask"]
        got = compute_metrics("regression", out[m].float().cpu(), data.y[m].float().cpu()) if bool(m.any()) else {}
        res[s] = {k: float(got.get(k, float("nan"))) for k in REGRESSION_METRICS}
    return res


def format_value(v: float) -> str:
    """A value in the target's units, short: 4 significant digits (whole numbers from 10,000 on)."""
    return f"{v:.0f}" if abs(v) >= 1e4 and v == v and abs(v) != float("inf") else f"{v:.4g}"


def metrics_line(metrics: Dict[str, Dict[str, float]], splits=("train", "val", "test")) -> str:
    """``train mae 12.3 rmse 20.1 R² 0.41 | val ... | test ...``."""
    return " | ".join(f"{s} mae {format_value(metrics[s]['mae'])} rmse {format_value(metrics[s]['rmse'])} "
                      f"R² {metrics[s]['r2']:.4f}" for s in splits if s in metrics)

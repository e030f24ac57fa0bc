"""Learning curves of a run: ``OUT/curves.png`` beside ``metrics.json``."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from graphattn.utils.files import save_figure

__all__ = ["curves_plot", "METRIC_LABELS"]

#: how a selection metric is named on the picture
METRIC_LABELS = {"roc_auc": "ROC-AUC", "pr_auc": "PR-AUC", "accuracy": "accuracy", "mae": "MAE", "rmse": "RMSE",
                 "r2": "R²"}


def _series(history: Sequence[Dict[str, Any]], split: str, key: str) -> List[Optional[float]]:
    out = []
    for h in history:
        v = (h.get(split) or {}).get(key)
        out.append(None if v is None or v != v else float(v))
    return out


def curves_plot(history: Sequence[Dict[str, Any]], key: str, best_epoch: int, path, title: str = "") -> Path:
    """Write the training loss and the selection metric ``key`` of the validation and test splits per
    epoch (``history``: :func:`graphattn.train.fit`'s records), the best epoch marked, to ``path``
    (PNG or SVG by its suffix). Needs matplotlib (``pip install 'graphattn[viz]'``)."""
    import matplotlib  # optional dependency (graphattn[viz])

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    epochs = [int(h["epoch"]) for h in history]
    fig = Figure(figsize=(9.0, 3.4), dpi=110)
    loss_ax, metric_ax = fig.subplots(1, 2)
    loss_ax.plot(epochs, [float(h["loss"]) for h in history], color="C0", label="train")
    loss_ax.set(xlabel="epoch", ylabel="training loss", title="loss")
    if all(float(h["loss"]) > 0 for h in history) and history and \
            max(float(h["loss"]) for h in history) > 20 * min(float(h["loss"]) for h in history):
        loss_ax.set_yscale("log")  # a loss that falls by orders of magnitude
    name = METRIC_LABELS.get(key, key)
    for split, color in (("val", "C1"), ("test", "C2")):
        ys = _series(history, split, key)
        if any(v is not None for v in ys):
            metric_ax.plot(epochs, [float("nan") if v is None else v for v in ys], color=color, label=split)
    metric_ax.set(xlabel="epoch", ylabel=name, title=f"{name} (selection metric)")
    for ax in (loss_ax, metric_ax):
        if best_epoch:
            ax.axvline(best_epoch, color="0.5", ls="--", lw=1, label=f"best epoch {best_epoch}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return save_figure(fig, path, title)

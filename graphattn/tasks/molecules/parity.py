"""The parity plot of a regression model: predicted against measured values, one panel per task, with the
y = x line and MAE / RMSE / R² in the corner (what a chemist looks at first)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import List, Sequence

import numpy as np

from graphattn.train.metrics import regression_per_task
from graphattn.utils.files import save_figure

__all__ = ["parity_plot"]

_MAX_PANELS = 12


def _panel(ax, pred: np.ndarray, y: np.ndarray, task: str, units: str) -> None:
    keep = ~np.isnan(y)
    pred, y = pred[keep], y[keep]
    per = regression_per_task(y, pred)
    ax.scatter(y, pred, s=9, alpha=0.6, edgecolors="none", color="tab:blue")
    lo = float(min(y.min(), pred.min())) if y.size else 0.0
    hi = float(max(y.max(), pred.max())) if y.size else 1.0
    pad = 0.05 * (hi - lo or 1.0)
    ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="0.3", lw=1, ls="--", label="y = x")
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_ylim(lo - pad, hi + pad)
    ax.set_aspect("equal")
    unit = f" ({units})" if units else ""
    ax.set_xlabel(f"measured{unit}")
    ax.set_ylabel(f"predicted{unit}")
    ax.set_title(task, fontsize=10)
    text = (f"MAE {per['mae'][0]:.3f}\nRMSE {per['rmse'][0]:.3f}\nR² {per['r2'][0]:.3f}\nn = {y.size}"
            if y.size else "no targets")
    ax.text(0.04, 0.96, text, transform=ax.transAxes, va="top", ha="left", fontsize=9,
            bbox=dict(boxstyle="round", facecolor="white", alpha=0.85, edgecolor="0.8"))


def parity_plot(pred, y, task_names: Sequence[str], path, title: str = "", units: str = "",
                std=None) -> Path:
    """Write the parity plot of predictions ``pred (M, T)`` against targets ``y (M, T)`` (NaN = missing)
    to ``path`` (PNG or SVG by its suffix): one panel per task (the first 12), measured on x, predicted
    on y, the y = x line, and MAE / RMSE / R² / n in the corner; ``std`` ``(M, T)`` (an ensemble's
    spread) draws error bars. Needs matplotlib (``pip install graphattn[viz]``)."""
    import matplotlib  # optional dependency (graphattn[viz])

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    pred, y = np.asarray(pred, dtype=float).reshape(len(pred), -1), np.asarray(y, dtype=float).reshape(len(y), -1)
    tasks: List[str] = list(task_names)[:_MAX_PANELS]
    cols = min(len(tasks), 4) or 1
    rows = math.ceil(len(tasks) / cols) or 1
    fig = Figure(figsize=(3.6 * cols, 3.6 * rows + (0.4 if title else 0)), dpi=110)
    axes = fig.subplots(rows, cols, squeeze=False)
    for t, task in enumerate(tasks):
        ax = axes[t // cols][t % cols]
        if std is not None:
            s = np.asarray(std, dtype=float).reshape(pred.shape)[:, t]
            keep = ~np.isnan(y[:, t])
            ax.errorbar(y[keep, t], pred[keep, t], yerr=s[keep], fmt="none", ecolor="0.7", lw=0.6, zorder=0)
        _panel(ax, pred[:, t], y[:, t], task, units)
    for t in range(len(tasks), rows * cols):
        axes[t // cols][t % cols].set_visible(False)
    return save_figure(fig, path, title)

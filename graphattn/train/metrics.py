"""Masked multi-task losses and metrics (missing labels = NaN in ``y``).

Multi-task molecule sets such as Tox21 leave many (molecule, task) labels missing. They are
stored as NaN and excluded everywhere: from the loss (zero gradient), from ``pos_weight``
and from the per-task ROC-AUC / PR-AUC. A task whose labels in the evaluated split are all
of one class has no AUC (NaN); :func:`mean_over_valid` averages over the others, which is
the MoleculeNet / chemprop convention.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["masked_bce_with_logits", "consistency_loss", "compute_pos_weight", "roc_auc_per_task",
           "pr_auc_per_task", "mean_over_valid", "accuracy", "regression_per_task"]

ArrayLike = Union[Tensor, np.ndarray, list]


def masked_bce_with_logits(logits: Tensor, y: Tensor,
                           pos_weight: Optional[Tensor] = None) -> Tensor:
    """Binary cross-entropy with logits over the present (non-NaN) labels only.

    Args:
        logits: ``(B, T)`` raw scores.
        y: ``(B, T)`` labels in {0, 1}, NaN = missing.
        pos_weight: optional ``(T,)`` weight of the positive class per task (see
            :func:`compute_pos_weight`), finite and > 0; moved to the logits' device.

    1-D ``logits`` / ``y`` ``(B,)`` are one task (``pos_weight`` ``(1,)``). Labels outside
    [0, 1] other than NaN (e.g. -1 as a missing-label code) are a ``ValueError``.

    Returns the mean over present labels (a scalar; 0 with a zero gradient if none is
    present). Missing entries contribute neither loss nor gradient.
    """
    if logits.shape != y.shape:
        raise ValueError(f"logits and y must have the same shape, got {tuple(logits.shape)} "
                         f"and {tuple(y.shape)}")
    if pos_weight is not None:
        tasks = logits.shape[-1] if logits.dim() == 2 else 1  # 1-D inputs are one task
        if pos_weight.numel() != tasks or pos_weight.dim() > 1:
            raise ValueError(f"pos_weight must have shape ({tasks},) (one weight per task), got "
                             f"{tuple(pos_weight.shape)}")
        pos_weight = pos_weight.to(device=logits.device, dtype=logits.dtype).reshape(tasks)
        if logits.dim() < 2:
            pos_weight = pos_weight.expand_as(logits) if logits.dim() == 1 else pos_weight.reshape(())
    mask = ~torch.isnan(y)
    target = torch.where(mask, y, torch.zeros_like(y)).to(logits.dtype)
    _check_binary(target, pos_weight)
    loss = F.binary_cross_entropy_with_logits(logits, target, pos_weight=pos_weight,
                                              reduction="none")
    loss = torch.where(mask, loss, torch.zeros_like(loss))  # (B, T); no gradient when masked
    return loss.sum() / mask.sum().clamp(min=1)


def _check_binary(target: Tensor, pos_weight: Optional[Tensor] = None) -> None:
    """ValueError for labels outside [0, 1] (after masking NaN; soft labels are fine) or a
    non-positive / non-finite ``pos_weight`` (one device sync for both; skipped while
    ``torch.compile`` traces)."""
    if torch.compiler.is_compiling():
        return
    bad_label = ((target < 0) | (target > 1)).any()
    bad_weight = (~torch.isfinite(pos_weight) | (pos_weight <= 0)).any() if pos_weight is not None else None
    flags = torch.stack([bad_label, bad_weight]) if bad_weight is not None else bad_label[None]
    flags = flags.tolist()
    if flags[0]:
        odd = target[(target < 0) | (target > 1)]
        raise ValueError(f"binary labels must be 0, 1 (or soft labels in [0, 1]) or NaN (missing), got "
                         f"{float(odd[0])!r} ({odd.numel()} such entries); encode missing labels as NaN")
    if len(flags) > 1 and flags[1]:
        raise ValueError(f"pos_weight must be finite and > 0, got {pos_weight.tolist()}")


def consistency_loss(logits: Sequence[Tensor], temperature: float = 0.5) -> Tensor:
    """GRAND's consistency regulariser (Feng et al., NeurIPS 2020, eq. 7): the class
    distributions of S stochastic forward passes (dropout on) are pulled towards their
    sharpened mean ``p̄^(1/T) / Σ_c p̄_c^(1/T)`` (a fixed target: no gradient flows into it).
    Not in PyG. Returns ``mean_s mean_i Σ_c (p_s[i, c] − target[i, c])²``.

    Args:
        logits: S >= 2 tensors ``(N, C)`` of raw scores of the same nodes.
        temperature: T in (0, 1]; smaller sharpens more (T = 1: the plain mean).
    """
    if len(logits) < 2:
        raise ValueError(f"consistency_loss needs at least 2 forward passes, got {len(logits)}")
    if not 0.0 < float(temperature) <= 1.0:
        raise ValueError(f"temperature must be in (0, 1], got {temperature}")
    probs = torch.stack([z.float().softmax(-1) for z in logits])  # (S, N, C)
    with torch.no_grad():
        sharp = probs.mean(0).pow(1.0 / float(temperature))
        target = sharp / sharp.sum(-1, keepdim=True).clamp(min=1e-12)
    return (probs - target).pow(2).sum(-1).mean()


def compute_pos_weight(y: Tensor) -> Tensor:
    """Per-task ``negatives / positives`` over present labels; 1.0 for a task that lacks
    positives or negatives (nothing to balance).

    ``y``: ``(N, T)`` with NaN = missing (e.g. the training split's ``dataset.y``); ``(N,)``
    is one task. Returns ``(T,)``.
    """
    if y.dim() == 1:
        y = y[:, None]
    if y.dim() != 2:
        raise ValueError(f"y must have shape (N, T) or (N,), got {tuple(y.shape)}")
    mask = ~torch.isnan(y)
    _check_binary(torch.where(mask, y, torch.zeros_like(y)))
    pos = ((y == 1) & mask).sum(0).float()
    neg = ((y == 0) & mask).sum(0).float()
    return torch.where((pos > 0) & (neg > 0), neg / pos.clamp(min=1), torch.ones_like(pos))


def _as_2d(a: ArrayLike) -> np.ndarray:
    if isinstance(a, Tensor):
        a = a.detach().cpu().double().numpy()  # float64: no ties from rounding
    a = np.asarray(a, dtype=np.float64)
    return a.reshape(-1, 1) if a.ndim == 1 else a


def _per_task(y_true: ArrayLike, y_score: ArrayLike, score_fn) -> np.ndarray:
    y_true, y_score = _as_2d(y_true), _as_2d(y_score)
    if y_true.shape != y_score.shape:
        raise ValueError(f"y_true and y_score must have the same shape, got {y_true.shape} "
                         f"and {y_score.shape}")
    odd = ~np.isnan(y_true) & (y_true != 0) & (y_true != 1)
    if odd.any():  # a -1 "missing" code would otherwise count as a negative
        raise ValueError(f"y_true must hold 0, 1 or NaN (missing), got {float(y_true[odd][0])!r} ({int(odd.sum())} such "
                         "entries); encode missing labels as NaN")
    out = np.full(y_true.shape[1], np.nan)
    for t in range(y_true.shape[1]):
        present = ~np.isnan(y_true[:, t])
        labels = y_true[present, t]
        if labels.size and labels.min() != labels.max():  # both classes present
            out[t] = score_fn(labels, y_score[present, t])
    return out


def roc_auc_per_task(y_true: ArrayLike, y_score: ArrayLike) -> np.ndarray:
    """ROC-AUC per task (column) over present labels; NaN where a task lacks a class.

    ``y_true`` ``(N, T)`` in {0, 1} with NaN = missing; ``y_score`` ``(N, T)`` logits or
    probabilities (any monotone score). 1-D inputs are one task. Returns ``(T,)`` float64.
    """
    from sklearn.metrics import roc_auc_score  # scikit-learn takes ~0.7 s to import: only here

    return _per_task(y_true, y_score, roc_auc_score)


def pr_auc_per_task(y_true: ArrayLike, y_score: ArrayLike) -> np.ndarray:
    """PR-AUC per task as average precision (scikit-learn's ``average_precision_score``: the
    step-wise sum ``Σ (R_n − R_{n−1}) P_n``, no interpolation — not the trapezoidal
    ``auc(recall, precision)`` chemprop reports as ``prc-auc``, which differs by up to ~0.01);
    same conventions as :func:`roc_auc_per_task`."""
    from sklearn.metrics import average_precision_score  # as above

    return _per_task(y_true, y_score, average_precision_score)


def mean_over_valid(values: ArrayLike) -> float:
    """Mean over the non-NaN entries (tasks that have both classes); NaN if there are none."""
    values = _as_2d(values).reshape(-1)
    valid = values[~np.isnan(values)]
    return float(valid.mean()) if valid.size else float("nan")


def accuracy(pred: ArrayLike, target: ArrayLike) -> float:
    """Fraction of correct predictions.

    ``pred`` is ``(N, C)`` class scores (argmax taken) or ``(N,)`` predicted labels;
    ``target`` is ``(N,)`` integer labels. Empty input gives NaN.
    """
    pred, target = torch.as_tensor(pred), torch.as_tensor(target)
    if pred.dim() == 2:
        pred = pred.argmax(dim=-1)
    if pred.shape != target.shape:
        raise ValueError(f"pred (as labels) and target must have the same shape, got "
                         f"{tuple(pred.shape)} and {tuple(target.shape)}")
    if target.numel() == 0:
        return float("nan")
    return (pred.long() == target.long()).float().mean().item()


def regression_per_task(y_true: ArrayLike, y_pred: ArrayLike) -> dict:
    """``{"mae", "rmse", "r2"}``, each ``(T,)`` float64: the mean absolute error, the root mean squared
    error and the coefficient of determination R² = 1 − SS_res / SS_tot of each task (column) over its
    present (non-NaN) targets. A task without targets gets NaN in all three; R² is NaN for a task
    whose present targets are all equal (SS_tot = 0). 1-D inputs are one task."""
    y_true, y_pred = _as_2d(y_true), _as_2d(y_pred)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true and y_pred must have the same shape, got {y_true.shape} and {y_pred.shape}")
    T = y_true.shape[1]
    out = {m: np.full(T, np.nan) for m in ("mae", "rmse", "r2")}
    for t in range(T):
        present = ~np.isnan(y_true[:, t])
        if not present.any():
            continue
        yt, err = y_true[present, t], y_pred[present, t] - y_true[present, t]
        out["mae"][t] = np.abs(err).mean()
        out["rmse"][t] = np.sqrt((err ** 2).mean())
        tot = ((yt - yt.mean()) ** 2).sum()
        if tot > 0:
            out["r2"][t] = 1.0 - (err ** 2).sum() / tot
    return out

"""Regression on standardised targets: :class:`StandardizedRegressor` wraps any model whose outputs
are the targets in standard units and gives them back in the original ones, and
:class:`MeanEnsemble` averages several such models and reports their spread.

Why a wrapper: targets of different tasks live on different scales (log-solubility ~1, hydration
free energy ~4 kcal/mol); training on ``(y - mean) / std`` of the training split gives every task the
same weight and the head a well-scaled output, as chemprop's ``StandardScaler`` does. Unlike
chemprop's output transform (identity in training mode), the wrapper's ``forward`` is in the
original units in both modes; :meth:`StandardizedRegressor.standardize` maps outputs and targets to
the standard units the loss is computed in.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor, nn

__all__ = ["StandardizedRegressor", "MeanEnsemble", "target_statistics"]


def target_statistics(y: Tensor, task_names: Optional[Sequence[str]] = None):
    """``(mean, std)`` ``(T,)`` float64 of the present (non-NaN) targets ``y (N, T)`` of each task (the
    population std, as scikit-learn's ``StandardScaler``).

    Raises ``ValueError`` naming the task (``task_names``, else its column number) when a task has no
    target, a non-finite one, or all equal targets (std 0: nothing to learn, and no scale).
    """
    y = torch.as_tensor(y, dtype=torch.float64)
    if y.dim() == 1:
        y = y[:, None]
    names = list(task_names) if task_names is not None else [f"column {t}" for t in range(y.size(1))]
    present = ~torch.isnan(y)
    inf = torch.isinf(y).any(0)
    if bool(inf.any()):
        bad = [names[t] for t in inf.nonzero().view(-1).tolist()]
        raise ValueError(f"task(s) {bad} have infinite target values; targets must be finite numbers")
    counts = present.sum(0)
    empty = [names[t] for t in (counts == 0).nonzero().view(-1).tolist()]
    if empty:
        raise ValueError(f"task(s) {empty} have no target value in the training split: nothing to learn or "
                         "scale them by; leave them out (--tasks) or use another split")
    filled = torch.where(present, y, torch.zeros_like(y))
    mean = filled.sum(0) / counts
    var = torch.where(present, (y - mean).pow(2), torch.zeros_like(y)).sum(0) / counts
    std = var.sqrt()
    flat = [f"{names[t]} (all {float(mean[t]):g})" for t in (std <= 1e-12 * mean.abs().clamp(min=1.0)).nonzero()
            .view(-1).tolist()]
    if flat:
        raise ValueError(f"task(s) {', '.join(flat)} have one value for every training molecule: "
                         "a constant has nothing to learn; leave them out (--tasks)")
    return mean, std


class StandardizedRegressor(nn.Module):
    r"""``model`` predicting standardised targets, with outputs in the original units:
    ``forward(*args) = model(*args) * std + mean`` per task.

    Args:
        model: any module whose output is ``(B, T)`` (or ``(B,)`` for ``T = 1``) in standard units.
        mean, std: ``(T,)`` per-task statistics of the training targets
            (:func:`target_statistics`); stored as buffers, so they travel in the ``state_dict``.
        num_tasks: ``T`` when ``mean`` / ``std`` are not given yet (a model rebuilt to load a
            ``state_dict`` into); default ``model.num_tasks``.

    :meth:`standardize` maps a tensor of original-unit values to standard units (the training
    loss compares ``standardize(forward(x))`` with ``standardize(y)``). The state dict is the
    model's under ``model.`` plus ``mean`` and ``std``.
    """

    def __init__(self, model: nn.Module, mean: Optional[Tensor] = None, std: Optional[Tensor] = None,
                 num_tasks: Optional[int] = None):
        super().__init__()
        self.model = model
        T = num_tasks if num_tasks is not None else (len(mean) if mean is not None else getattr(model, "num_tasks"))
        self.num_tasks = int(T)
        mean = torch.zeros(self.num_tasks) if mean is None else torch.as_tensor(mean, dtype=torch.float32)
        std = torch.ones(self.num_tasks) if std is None else torch.as_tensor(std, dtype=torch.float32)
        if mean.shape != (self.num_tasks,) or std.shape != (self.num_tasks,):
            raise ValueError(f"mean and std must have shape ({self.num_tasks},), got {tuple(mean.shape)} and "
                             f"{tuple(std.shape)}")
        if not bool(torch.isfinite(mean).all()) or not bool((torch.isfinite(std) & (std > 0)).all()):
            raise ValueError(f"mean must be finite and std finite and > 0, got mean {mean.tolist()}, "
                             f"std {std.tolist()}")
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def _view(self, t: Tensor, out: Tensor) -> Tensor:
        return t.to(out.dtype) if out.dim() > 1 else t.to(out.dtype).reshape(())

    def standardize(self, values: Tensor) -> Tensor:
        """``(values - mean) / std`` per task (NaN stays NaN)."""
        return (values - self._view(self.mean, values)) / self._view(self.std, values)

    def forward(self, *args, **kwargs) -> Tensor:
        out = self.model(*args, **kwargs)
        return out * self._view(self.std, out) + self._view(self.mean, out)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.model).__name__}, tasks={self.num_tasks})"


class MeanEnsemble(nn.Module):
    r"""Several independently trained regressors as one model: ``forward`` is the mean of the
    members' outputs, :meth:`member_outputs` gives each member's ``(M, B, T)``, whose standard
    deviation over the members is the ensemble's uncertainty (chemprop's ensemble variance).

    Args:
        members: the trained models (at least one), all with the same ``num_tasks``.

    Its state dict is the members' under ``members.<m>.``.
    """

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        members = list(members)
        if not members:
            raise ValueError("MeanEnsemble needs at least one member")
        tasks = {getattr(m, "num_tasks", None) for m in members}
        if len(tasks) != 1:
            raise ValueError(f"ensemble members disagree on num_tasks: {sorted(map(str, tasks))}")
        self.members = nn.ModuleList(members)
        self.num_tasks = tasks.pop()

    def member_outputs(self, *args, **kwargs) -> Tensor:
        """``(M, B, T)``: each member's output."""
        return torch.stack([m(*args, **kwargs) for m in self.members])

    def standardize(self, values: Tensor) -> Tensor:
        """The first member's :meth:`StandardizedRegressor.standardize` (every member is scaled by the
        statistics of the same training split)."""
        first = self.members[0]
        return first.standardize(values) if hasattr(first, "standardize") else values

    def forward(self, *args, **kwargs) -> Tensor:
        return self.member_outputs(*args, **kwargs).mean(0)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({len(self.members)} x {type(self.members[0]).__name__})"

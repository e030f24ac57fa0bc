"""Several trained multi-task classifiers averaged into one model."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

__all__ = ["ProbabilityEnsemble"]


class ProbabilityEnsemble(nn.Module):
    r"""Several independently trained multi-task binary classifiers as one model: the
    probabilities of its members are averaged (chemprop's ``--ensemble_size``; members differ
    in their initialisation and batch order, not in their data).

    ``forward`` takes whatever the members take and returns the **logit of the mean
    probability**, ``logit(mean_m σ(f_m(x)))`` (clamped to ``[-27.6, 27.6]``, computed in float64, returned in
    the members' dtype), so every caller
    of a single model (``sigmoid`` for probabilities, ROC-AUC on the logits, the training
    loop's evaluation) works unchanged. Averaging probabilities rather than logits is the
    usual choice: one over-confident member cannot dominate.

    Args:
        members: the trained models (at least one), all with the same ``num_tasks``.

    Shapes: the members' inputs -> logits ``(B, T)``; :meth:`member_probabilities` ``(M, B, T)``
    for M members. Its state dict is the members' under ``members.<m>.``.
    """

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        members = list(members)
        if not members:
            raise ValueError("ProbabilityEnsemble needs at least one member")
        tasks = {getattr(m, "num_tasks", None) for m in members}
        if len(tasks) != 1:
            raise ValueError(f"ensemble members disagree on num_tasks: {sorted(map(str, tasks))}")
        self.members = nn.ModuleList(members)
        self.num_tasks = tasks.pop()

    @staticmethod
    def _probabilities(logits: Sequence[Tensor]) -> Tensor:
        return torch.stack([torch.sigmoid(z.double()) for z in logits])  # float64: no ties near 1

    def member_probabilities(self, *args, **kwargs) -> Tensor:
        """``(M, B, T)`` float64: each member's probabilities."""
        return self._probabilities([m(*args, **kwargs) for m in self.members])

    def forward(self, *args, **kwargs) -> Tensor:
        logits = [m(*args, **kwargs) for m in self.members]
        return torch.logit(self._probabilities(logits).mean(0), eps=1e-12).to(logits[0].dtype)  # the members' dtype

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({len(self.members)} x {type(self.members[0]).__name__})"

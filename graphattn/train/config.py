"""``TrainConfig``: the settings of one :func:`graphattn.train.fit` run, as one frozen dataclass.

Every field is checked when the config is made, so a bad value fails before any data is read.
Plain dicts appear only at the JSON / checkpoint boundary (:meth:`TrainConfig.to_dict`,
:meth:`TrainConfig.from_dict`); a recipe dict that also holds model keys gives its training part
with :meth:`TrainConfig.from_recipe`.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any, Mapping, Optional

__all__ = ["TrainConfig", "TASK_KINDS", "SCHEDULES", "LOSSES", "METRICS"]

#: the task kinds of :func:`graphattn.train.fit`
TASK_KINDS = ("binary", "multiclass", "regression")
#: learning-rate schedules of :func:`graphattn.train.fit`
SCHEDULES = ("constant", "cosine")
#: the losses of each task kind (the first is the default): binary cross-entropy, cross-entropy, and for
#: regression the mean squared (``mse``) or absolute (``l1``) error of the standardised targets
LOSSES = {"binary": ("bce",), "multiclass": ("ce",), "regression": ("mse", "l1")}
#: the metrics of each task kind that can select the best epoch (the first is the default) and whether
#: higher is better
METRICS = {"binary": {"roc_auc": True, "pr_auc": True}, "multiclass": {"accuracy": True},
           "regression": {"mae": False, "rmse": False, "r2": True}}


def _is_int(v: Any) -> bool:
    """An integer (Python's or NumPy's), not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    """A finite real number (Python's, NumPy's or a one-element tensor's ``item()``), not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))


@dataclass(frozen=True)
class TrainConfig:
    """How :func:`graphattn.train.fit` trains (Adam, early stopping on the validation metric).

    Args:
        kind: ``"binary"`` (multi-task, NaN = missing), ``"multiclass"`` or ``"regression"``.
        epochs: epochs to train (>= 0).
        lr: Adam's learning rate (>= 0).
        weight_decay: Adam's weight decay (>= 0).
        patience: stop after this many epochs without validation improvement (None = never;
            0 acts as 1: stop at the first epoch without improvement).
        grad_clip: clip the gradient norm to this value (> 0) before each step; None = off.
        seed: seeds Python, NumPy and torch before the first epoch.
        schedule: ``"constant"`` (``lr`` every epoch) or ``"cosine"`` (decayed to ~0 over ``epochs``).
        warmup: epochs of linear warm-up to ``lr`` before the schedule (0 = none).
        resume: continue from ``out_dir/last.pt`` when it exists.
        progress: show a progress bar over the epochs.
        loss: the training loss, one of :data:`LOSSES` of ``kind`` (None = its first: ``bce``,
            ``ce``, ``mse``); regression also takes ``l1``.
        metric: the validation metric that selects the best epoch and drives early stopping, one
            of :data:`METRICS` of ``kind`` (None = its first: ``roc_auc``, ``accuracy``, ``mae``).

    >>> cfg = TrainConfig(kind="binary", epochs=30, lr=5e-4)
    >>> cfg.replace(epochs=10).epochs
    10
    >>> TrainConfig.from_dict(cfg.to_dict()) == cfg
    True
    """

    kind: str
    epochs: int = 100
    lr: float = 1e-3
    weight_decay: float = 0.0
    patience: Optional[int] = None
    grad_clip: Optional[float] = 5.0
    seed: int = 0
    schedule: str = "constant"
    warmup: int = 0
    resume: bool = False
    progress: bool = True
    loss: Optional[str] = None
    metric: Optional[str] = None

    def __post_init__(self):
        for name in ("lr", "weight_decay", "grad_clip"):  # a one-element tensor reads as its number
            v = getattr(self, name)
            if hasattr(v, "numel") and hasattr(v, "item") and v.numel() == 1:
                object.__setattr__(self, name, v.item())
        if self.kind not in TASK_KINDS:
            raise ValueError(f"kind must be one of {TASK_KINDS}, got {self.kind!r}")
        for name, table in (("loss", LOSSES), ("metric", METRICS)):
            v = getattr(self, name)
            if v is not None and v not in table[self.kind]:
                raise ValueError(f"{name} must be one of {list(table[self.kind])} for kind={self.kind!r}, got {v!r}")
        if not _is_int(self.epochs) or self.epochs < 0:
            raise ValueError(f"epochs must be an int >= 0, got {self.epochs!r}")
        for name in ("lr", "weight_decay"):  # lr 0 is allowed: the weights then stay as they are
            v = getattr(self, name)
            if not _is_real(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.patience is not None and (not _is_int(self.patience) or self.patience < 0):
            raise ValueError(f"patience must be None or an int >= 0, got {self.patience!r}")
        if self.grad_clip is not None and (not _is_real(self.grad_clip) or self.grad_clip <= 0):
            raise ValueError(f"grad_clip must be None (off) or a finite number > 0, got {self.grad_clip!r}")
        if not _is_int(self.seed):
            raise ValueError(f"seed must be an int, got {self.seed!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if not _is_int(self.warmup) or self.warmup < 0:
            raise ValueError(f"warmup must be an int >= 0 (epochs), got {self.warmup!r}")
        for name, kind in (("lr", float), ("weight_decay", float), ("epochs", int), ("seed", int), ("warmup", int)):
            object.__setattr__(self, name, kind(getattr(self, name)))  # NumPy scalars become Python numbers
        if self.grad_clip is not None:
            object.__setattr__(self, "grad_clip", float(self.grad_clip))
        if self.patience is not None:
            object.__setattr__(self, "patience", int(self.patience))

    @property
    def loss_name(self) -> str:
        """The training loss: :attr:`loss`, or the kind's default."""
        return self.loss or LOSSES[self.kind][0]

    @property
    def selection(self) -> tuple:
        """``(metric, higher_is_better)`` of the validation metric that selects the best epoch."""
        name = self.metric or next(iter(METRICS[self.kind]))
        return name, METRICS[self.kind][name]

    def replace(self, **changes: Any) -> "TrainConfig":
        """A copy with ``changes`` applied (checked again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The fields as a plain dict (JSON, checkpoints)."""
        return dataclasses.asdict(self)

    @classmethod
    def fields(cls) -> tuple:
        """The field names, in order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TrainConfig":
        """The config of a plain dict; an unknown key is a ``ValueError`` naming it (no value is
        silently ignored)."""
        unknown = sorted(set(d) - set(cls.fields()))
        if unknown:
            raise ValueError(f"unknown TrainConfig key(s) {unknown}; the fields are {list(cls.fields())}")
        return cls(**d)

    @classmethod
    def from_recipe(cls, recipe: Mapping[str, Any], **overrides: Any) -> "TrainConfig":
        """The training part of a task recipe (a dict that also holds model and data keys): the
        recipe's values of this config's fields, then ``overrides``; a field in neither keeps
        its default."""
        known = {k: recipe[k] for k in cls.fields() if k in recipe}
        return cls.from_dict({**known, **overrides})

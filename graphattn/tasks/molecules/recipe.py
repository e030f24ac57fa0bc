"""``MoleculeRecipe``: everything a molecule run is made of (model, inputs, training), one frozen
dataclass that the CLI, the pipeline, the benchmarks and the checkpoints share.

A field is checked when the recipe is made, so a bad value fails before any data is read; plain dicts
appear only at the JSON / checkpoint boundary (:meth:`MoleculeRecipe.to_dict`,
:meth:`MoleculeRecipe.from_dict`). No heavy import: ``graphattn train --help`` reads the defaults.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from graphattn.train.config import TrainConfig

__all__ = ["MoleculeRecipe", "TASK_TYPES", "PE_KINDS", "READOUTS", "LOCAL_MPNNS", "DESCRIPTORS", "DEFAULT_DESCRIPTORS"]

#: what the targets are (chemprop's ``--task-type`` names)
TASK_TYPES = ("classification", "regression")
#: positional encodings of the molecule pipeline: Laplacian eigenvectors (read by a sign-flipping
#: LapPE encoder), random-walk return probabilities (RWSE, read by a linear layer) or relative
#: random-walk probabilities of every attended pair (RRWP, GRIT's; edge features of every layer)
PE_KINDS = ("laplacian", "rwse", "rrwp")
#: poolings of the node states (``token``: the global tokens' mean state)
READOUTS = ("mean", "sum", "max", "token")
#: local message-passing branches of our model (None: none)
LOCAL_MPNNS = (None, "gine", "gin")
#: molecule descriptors before the head: none, or a set of :data:`graphattn.data.descriptors.DESCRIPTOR_SETS`
#: (RDKit's 2-D descriptors; chemprop's CDF-normalised ones, from descriptastorus)
DESCRIPTORS = ("none", "rdkit2d", "rdkit2d_normalized")
#: the descriptor set of a recipe that names none, per task type, chosen on validation across the MoleculeNet
#: suite (docs/molecules.md, "The defaults, chosen across the suite"): chemprop's CDF-normalised set for
#: classification (+0.013 validation ROC-AUC over five sets), the standardised RDKit set for regression
#: (the normalised one was worse on ESOL and FreeSolv)
DEFAULT_DESCRIPTORS = {"classification": "rdkit2d_normalized", "regression": "rdkit2d"}

_AT_LEAST = {"batch_size": 1, "hidden": 1, "layers": 0, "heads": 1, "global_tokens": 0, "pe_dim": 0, "hops": 1}


@dataclass(frozen=True)
class MoleculeRecipe:
    """A molecule run's recipe. The defaults are ``graphattn train``'s for Tox21-sized sets on a small CPU
    (early stopping usually after 20-40 epochs), chosen on validation ROC-AUC (docs/molecules.md, "How the
    defaults were chosen").

    Args:
        task_type: ``"classification"`` (0/1 tasks, ROC-AUC) or ``"regression"`` (numeric tasks,
            standardised on the training split; MAE).
        epochs, lr, weight_decay, patience, grad_clip, schedule, warmup, loss, metric: training, as
            :class:`~graphattn.train.TrainConfig` (``loss`` / ``metric`` None = the task type's first).
        batch_size: molecules per mini-batch.
        hidden, layers, heads, dropout: the model's width, depth, attention heads and dropout.
        global_tokens: learnable global tokens per molecule (our model).
        pe_dim, pe_kind: size and kind (:data:`PE_KINDS`) of the positional encoding (0 = none).
        readout: pooling of the node states (:data:`READOUTS`).
        local_mpnn: ``"gine"`` / ``"gin"``: a GraphGPS-style message-passing branch in every block.
        hops: attention between atoms up to this many bonds apart (1 = the bonds).
        descriptors: molecule descriptors concatenated before the head (chemprop's ``--features_generators``):
            ``"rdkit2d"``, ``"rdkit2d_normalized"`` or ``"none"`` (:data:`DESCRIPTORS`; True / False, as
            older records hold, read as ``"rdkit2d"`` / ``"none"``); None (the default) is the task
            type's (:data:`DEFAULT_DESCRIPTORS`), and the recipe holds that name.

    >>> recipe = MoleculeRecipe(task_type="regression", hidden=32)
    >>> recipe.train_config(seed=1).kind, recipe.replace(layers=5).layers
    ('regression', 5)
    >>> MoleculeRecipe.from_dict(recipe.to_dict()) == recipe
    True
    """

    task_type: str = "classification"
    epochs: int = 60
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 64
    patience: Optional[int] = 12
    grad_clip: Optional[float] = 5.0
    schedule: str = "constant"
    warmup: int = 0
    loss: Optional[str] = None
    metric: Optional[str] = None
    hidden: int = 64
    layers: int = 3
    heads: int = 4
    dropout: float = 0.25
    global_tokens: int = 1
    pe_dim: int = 8
    pe_kind: str = "laplacian"
    readout: str = "mean"
    local_mpnn: Optional[str] = None
    hops: int = 1
    descriptors: Optional[str] = None

    def __post_init__(self):
        if self.descriptors is None and self.task_type in DEFAULT_DESCRIPTORS:
            object.__setattr__(self, "descriptors", DEFAULT_DESCRIPTORS[self.task_type])
        if isinstance(self.descriptors, bool):  # the on/off of older records and callers
            object.__setattr__(self, "descriptors", "rdkit2d" if self.descriptors else "none")
        for name, table in (("task_type", TASK_TYPES), ("pe_kind", PE_KINDS), ("readout", READOUTS),
                            ("local_mpnn", LOCAL_MPNNS), ("descriptors", DESCRIPTORS)):
            if getattr(self, name) not in table:
                raise ValueError(f"{name} must be one of {list(table)}, got {getattr(self, name)!r}")
        for name, least in _AT_LEAST.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < least:
                raise ValueError(f"{name} must be an int >= {least}, got {v!r}")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        self.train_config()  # the training fields, checked by TrainConfig

    @property
    def kind(self) -> str:
        """The :class:`~graphattn.train.TrainConfig` kind: ``"binary"`` (multi-task 0/1) or ``"regression"``."""
        return "regression" if self.task_type == "regression" else "binary"

    def train_config(self, **overrides: Any) -> TrainConfig:
        """The training part (``seed``, ``resume``, ``progress`` come from the run: ``overrides``)."""
        return TrainConfig.from_recipe(self.to_dict(), kind=self.kind, **overrides)

    def replace(self, **changes: Any) -> "MoleculeRecipe":
        """A copy with ``changes`` applied (checked again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The fields as a plain dict (``metrics.json``, a checkpoint's ``meta["hparams"]``)."""
        return dataclasses.asdict(self)

    @classmethod
    def fields(cls) -> tuple:
        """The field names, in order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], strict: bool = True) -> "MoleculeRecipe":
        """The recipe of ``values`` (missing fields keep their defaults). ``strict``: an unknown key is a
        ``ValueError`` naming it (a value that would be silently ignored); ``strict=False`` drops them
        (a checkpoint's record, which may hold keys of other versions)."""
        unknown = sorted(set(values) - set(cls.fields()))
        if unknown and strict:
            raise ValueError(f"unknown molecule recipe key(s) {unknown}; expected some of {list(cls.fields())}")
        return cls(**{k: v for k, v in values.items() if k in cls.fields()})

"""A molecule checkpoint → its model (classifier, regressor or ensemble), rebuilt from the file alone."""
from __future__ import annotations

from typing import Any, Dict, Tuple

from torch import nn

from graphattn.data.molecules import FEATURIZER_VERSION
from graphattn.nn.models.ensemble import ProbabilityEnsemble
from graphattn.nn.models.regression import MeanEnsemble, StandardizedRegressor
from graphattn.nn.models.registry import build_model
from graphattn.train.checkpoint import load_checkpoint

__all__ = ["task_type_of", "load_model"]


def task_type_of(meta: Dict[str, Any]) -> str:
    """The task type a molecule checkpoint's ``meta`` records (``"classification"`` before regression existed)."""
    return meta.get("task_type") or "classification"


def load_model(checkpoint) -> Tuple[nn.Module, Dict[str, Any]]:
    """Rebuild the model of a molecule checkpoint (``weights_only=True``), in eval mode: a regression
    checkpoint's model gives values in its targets' units.

    Raises ``ValueError`` when the checkpoint was made with another featurizer version:
    its atom/bond categories would not mean the same thing.
    """
    ck = load_checkpoint(checkpoint)
    meta = ck["meta"]
    if meta.get("pipeline") != "molecules":
        raise ValueError(f"{checkpoint} is a {meta.get('pipeline')!r} checkpoint, not a molecule one")
    if str(meta.get("featurizer_version")) != FEATURIZER_VERSION:
        raise ValueError(f"{checkpoint} was trained with featurizer version {meta.get('featurizer_version')!r} "
                         f"but this graphattn featurizes molecules with version {FEATURIZER_VERSION!r}: "
                         "its atom/bond features differ, so its predictions would be meaningless. "
                         "Retrain the model (graphattn train ...) with this version.")
    def one() -> nn.Module:
        inner = build_model(meta["model"])
        return StandardizedRegressor(inner, num_tasks=len(meta["task_names"])) if regression else inner

    regression = task_type_of(meta) == "regression"
    if meta.get("ensemble"):
        size = int(meta["ensemble"]["size"])
        model = (MeanEnsemble if regression else ProbabilityEnsemble)([one() for _ in range(size)])
    else:
        model = one()
    model.load_state_dict(ck["model"])
    return model.eval(), meta

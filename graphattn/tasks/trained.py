"""A trained model in Python: ``graphattn.load(checkpoint)`` and its ``predict``.

    model = graphattn.load("runs/tox21/best.pt")
    pred = model.predict(["CCO", "c1ccccc1O", "not a smiles"])
    pred.values        # (3, T) probabilities (regression: values in the targets' units); NaN rows for invalid inputs
    pred.std           # (3, T) spread of an ensemble's members, else None
    pred.errors        # ["", "", "SMILES Parse Error ..."]
    pred.to_rows()     # one dict per input, the columns of `graphattn predict`

    model = graphattn.load("runs/karate/best.pt")  # a social-network model predicts on the graph it was trained on
    rows = model.predict()                          # one dict per node (or per graph of a graph set)

The featurisation is the checkpoint's own (its PE, descriptors and hop edges), as ``graphattn predict``
uses it; the command line's ``predict`` is built on these classes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from graphattn.tasks.molecules.checkpoints import load_model, task_type_of
from graphattn.tasks.molecules.data import featurize, graph_options
from graphattn.tasks.molecules.outputs import predict_outputs
from graphattn.tasks.social.predict import load_social, prediction_rows
from graphattn.train.checkpoint import load_checkpoint

__all__ = ["load", "MoleculeModel", "SocialModel", "Predictions"]

#: molecules featurized at a time (~13 KB each): a screening file is never featurized all at once
PREDICT_CHUNK = 10_000


@dataclass(frozen=True)
class Predictions:
    """A molecule model's predictions, one row per input in input order.

    ``values`` ``(N, T)`` float64: per-task probabilities (classification) or values in the targets'
    units (regression), NaN for an input that could not be featurized; ``std`` ``(N, T)``: an
    ensemble's spread over its members (the uncertainty), else ``None``; ``errors``: ``""`` or why an
    input was refused."""

    smiles: List[str]
    values: np.ndarray
    std: Optional[np.ndarray]
    errors: List[str]
    task_names: List[str]
    task_type: str

    def __len__(self) -> int:
        return len(self.smiles)

    @property
    def valid(self) -> np.ndarray:
        """``(N,)`` bool: the inputs that have predictions."""
        return np.array([not e for e in self.errors], dtype=bool)

    def to_rows(self) -> List[Dict[str, Any]]:
        """One dict per input: ``smiles``, a value per task, ``<task>_std`` for an ensemble, ``error``
        (``None`` values for a refused input)."""
        rows = []
        for i, s in enumerate(self.smiles):
            ok = not self.errors[i]
            row: Dict[str, Any] = {"smiles": s}
            row.update({t: float(self.values[i, j]) if ok else None for j, t in enumerate(self.task_names)})
            if self.std is not None:
                row.update({f"{t}_std": float(self.std[i, j]) if ok else None for j, t in enumerate(self.task_names)})
            row["error"] = self.errors[i]
            rows.append(row)
        return rows

    def to_pandas(self):
        """The rows of :meth:`to_rows` as a ``pandas.DataFrame`` (needs pandas)."""
        try:
            import pandas as pd  # optional: only this method needs it
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError("Predictions.to_pandas needs pandas (pip install pandas); "
                                      "to_rows() gives the same as dicts", name="pandas") from exc
        return pd.DataFrame(self.to_rows())


class MoleculeModel:
    """A molecule checkpoint ready to predict from SMILES (see :func:`load`)."""

    def __init__(self, model: nn.Module, meta: Dict[str, Any]):
        self.model, self.meta = model.eval(), meta
        self.task_names: List[str] = list(meta["task_names"])
        self.task_type: str = task_type_of(meta)

    @property
    def is_ensemble(self) -> bool:
        return bool(self.meta.get("ensemble"))

    def predict(self, smiles: Union[str, Sequence[str]], batch_size: int = 256) -> Predictions:
        """Predictions for one SMILES or a list; every input gets a row (an invalid one its error)."""
        smiles = [smiles] if isinstance(smiles, str) else [str(s) for s in smiles]
        t = len(self.task_names)
        values = np.full((len(smiles), t), np.nan)
        std = np.full((len(smiles), t), np.nan) if self.is_ensemble else None
        errors: List[str] = []
        for start in range(0, len(smiles), PREDICT_CHUNK):
            graphs = featurize(smiles[start:start + PREDICT_CHUNK], **graph_options(self.meta))
            errors += [g if isinstance(g, str) else "" for g in graphs]
            rows = [start + i for i, g in enumerate(graphs) if not isinstance(g, str)]
            if not rows:
                continue
            out = predict_outputs(self.model, [g for g in graphs if not isinstance(g, str)], self.task_type,
                                  batch_size, members=True).numpy()
            if out.ndim == 3:  # an ensemble: its members' mean, and their spread as the uncertainty
                values[rows], std[rows] = out.mean(0), out.std(0)
            else:
                values[rows] = out
        return Predictions(smiles, values, std, errors, self.task_names, self.task_type)

    def __repr__(self) -> str:
        kind = f"ensemble of {self.meta['ensemble']['size']}, " if self.is_ensemble else ""
        return f"MoleculeModel({kind}{self.task_type}, tasks={self.task_names})"


class SocialModel:
    """A social-network checkpoint (node or graph set): it predicts on the graph(s) it was trained on,
    read again from the run's files (see :func:`load`)."""

    def __init__(self, model: nn.Module, meta: Dict[str, Any]):
        self.model, self.meta = model.eval(), meta
        self.task_type: str = meta.get("task_type") or "classification"
        self.class_names: List[str] = list(meta.get("class_names") or [])

    def predict(self) -> List[Dict[str, Any]]:
        """One dict per node (graph set: per graph): ``node``, ``node_id``, ``split``, ``label`` and
        ``predicted`` with ``prob_<class>``, or the predicted value (regression), as ``graphattn
        predict`` writes them."""
        return prediction_rows(self.model, self.meta)

    def __repr__(self) -> str:
        return f"SocialModel({self.meta['pipeline']}, {self.task_type})"


def load(checkpoint, device: Union[str, torch.device] = "cpu") -> Union[MoleculeModel, SocialModel]:
    """The model of a ``graphattn train`` checkpoint, ready to predict: a :class:`MoleculeModel` for a
    molecule run (``predict(smiles)``), a :class:`SocialModel` for a social-network run
    (``predict()``). Loaded with ``weights_only=True``; ``ValueError`` for a pretraining checkpoint
    (it has no task head: fine-tune it with ``graphattn train --init``)."""
    meta = load_checkpoint(checkpoint).get("meta")
    pipeline = meta.get("pipeline") if isinstance(meta, dict) else None
    if pipeline is None:
        raise ValueError(f"{checkpoint} is not a graphattn training checkpoint (no 'meta.pipeline')")
    if pipeline == "molecules":
        model, meta = load_model(checkpoint)
        return MoleculeModel(model.to(device), meta)
    if pipeline in ("node", "graph"):
        _, meta, model = load_social(checkpoint)
        return SocialModel(model.to(device), meta)
    raise ValueError(f"{checkpoint} is a {pipeline!r} checkpoint, which predicts nothing"
                     + (" (a pretrained backbone: fine-tune it with graphattn train --init)" if pipeline == "pretrain"
                        else ""))

"""How close new molecules are to a model's training molecules: the overlap that makes a score on a
labelled file look better than the model is, and the highest Tanimoto similarity to the training set
(Morgan fingerprints, radius 2, 2048 bits), the simplest applicability-domain signal chemists use."""
from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from graphattn.tasks.molecules.checkpoints import task_type_of
from graphattn.tasks.molecules.data import file_sha256, graph_options, load_dataset, split_indices

__all__ = ["own_dataset", "training_smiles", "canonical_smiles", "training_overlap", "train_similarity"]


def own_dataset(meta: Dict[str, Any], log: bool = False, check: bool = True):
    """``(dataset, (train, val, test) indices)``: the data a molecule checkpoint was trained on, rebuilt
    from its recorded file, split and seed (a warning when the file changed since training; ``check``: see
    :func:`~graphattn.tasks.molecules.data.split_indices`)."""
    tasks, d = meta["task_names"], meta["data"]
    # a CSV whose tasks were inferred: the checkpoint's task names (inference rules may change)
    wanted = d["tasks"] if d["tasks"] is not None or d["dataset"] else list(tasks)
    ds = load_dataset(d["dataset"], d["csv"], d["smiles_col"], wanted, limit=d["limit"], log=log,
                      binary=task_type_of(meta) != "regression", split_col=d.get("split_col") if d["csv"] else None,
                      **graph_options(meta))
    if d.get("sha256") and file_sha256(ds) not in (None, d["sha256"]):
        warnings.warn(f"{ds.raw_path}: the file changed since this checkpoint was trained "
                      "(sha256 differs): the validation/test split is rebuilt from the new "
                      "rows, so these numbers are not those of training", stacklevel=3)
    return ds, split_indices(ds, d["split"], d["seed"], check=check)


def training_smiles(meta: Dict[str, Any], log: bool = False) -> List[str]:
    """The SMILES of a checkpoint's training split (see :func:`own_dataset`)."""
    ds, (train, _, _) = own_dataset(meta, log, check=False)
    return [ds.smiles[int(i)] for i in train]


def canonical_smiles(smiles: str) -> Optional[str]:
    """RDKit's canonical SMILES, ``None`` when RDKit cannot parse it."""
    from rdkit import Chem, RDLogger  # optional dependency (graphattn[molecules])

    RDLogger.DisableLog("rdApp.*")
    mol = Chem.MolFromSmiles(smiles)
    return None if mol is None else Chem.MolToSmiles(mol)


def training_overlap(smiles: Sequence[str], train: Sequence[str]) -> int:
    """How many of ``smiles`` are training molecules (compared as canonical SMILES)."""
    seen = {c for c in map(canonical_smiles, train) if c is not None}
    return sum(1 for s in smiles if (c := canonical_smiles(s)) is not None and c in seen)


def _fingerprints(smiles: Sequence[str]) -> List[Optional[Any]]:
    from rdkit import Chem, RDLogger  # optional dependency (graphattn[molecules])
    from rdkit.Chem import rdFingerprintGenerator

    RDLogger.DisableLog("rdApp.*")
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    out = []
    for s in smiles:
        mol = Chem.MolFromSmiles(s)
        out.append(None if mol is None else gen.GetFingerprint(mol))
    return out


def train_similarity(smiles: Sequence[str], train: Sequence[str]) -> Tuple[np.ndarray, List[str]]:
    """For each of ``smiles``: its highest Tanimoto similarity (Morgan, radius 2, 2048 bits) to a training
    molecule and that molecule's SMILES (NaN and ``""`` for an input RDKit cannot parse)."""
    from rdkit import DataStructs  # optional dependency (graphattn[molecules])

    train_fps = [(s, fp) for s, fp in zip(train, _fingerprints(train)) if fp is not None]
    fps = [fp for _, fp in train_fps]
    best, nearest = np.full(len(smiles), np.nan), [""] * len(smiles)
    for i, fp in enumerate(_fingerprints(smiles)):
        if fp is None or not fps:
            continue
        sims = np.asarray(DataStructs.BulkTanimotoSimilarity(fp, fps))
        j = int(sims.argmax())
        best[i], nearest[i] = float(sims[j]), train_fps[j][0]
    return best, nearest

"""Label cells and task columns of a molecule table: which cells are labels (a finite number,
``true``/``false``, or missing: the words of :data:`graphattn.data.rawio.MISSING_LABELS`; with
``binary`` only 0 and 1), which columns are identifiers, which columns a table's tasks are, and whether
two label rows of one molecule disagree."""
from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional, Tuple

import torch

from graphattn.data.download import DataFileError
from graphattn.data.rawio import MISSING_LABELS

__all__ = ["is_id_column", "label_value", "parse_label", "parse_split", "infer_tasks", "labels_conflict", "SPLIT_NAMES"]

#: the cells of a split column (``--split-col``), case-insensitive, and the part each names
SPLIT_NAMES = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val",
               "dev": "val", "test": "test", "testing": "test"}

_ID_COLUMNS = {"", "id", "mol_id", "molecule_id", "compound_id", "name", "index", "cid", "molregno", "cas",
               "cas_rn", "casrn", "cas_number", "inchi", "inchikey", "inchi_key", "title", "key", "num", "idx"}
#: other identifier names, on the lower-cased name: "... id", "..._id", "..._cid", "..._sid", "aid",
#: "chemblid" (Compound ID, PubChem_CID, PUBCHEM_SID, smiles_id, CMPD_CHEMBLID); not "acid", "paid"
_ID_LOWER = re.compile(r"(^|[^a-z])[csa]?id$|chembl_?id$")
#: ... and on the name as written: camel case "compoundID", "molId", "pubchemCID"
_ID_CAMEL = re.compile(r"[a-z0-9](ID|Id|CID)$")


def is_id_column(name: str) -> bool:
    """True for a column of molecule identifiers/names (never a task column)."""
    return (name.lower() in _ID_COLUMNS or name.startswith("Unnamed:") or bool(_ID_LOWER.search(name.lower()))
            or bool(_ID_CAMEL.search(name)))


def label_value(text: str, binary: bool) -> Optional[float]:
    """The value of a label cell: NaN when missing, 1.0/0.0 for true/false, the number
    (``binary``: only 0 or 1); None when it is not a label (not a finite number, or not
    0/1 with ``binary``)."""
    low = text.strip().lower()
    if low in MISSING_LABELS:
        return float("nan")
    if low in ("true", "false"):
        return float(low == "true")
    try:
        value = float(low)
    except ValueError:
        return None
    if value != value:  # "-nan" and the like
        return float("nan")
    if binary:
        return value if value in (0.0, 1.0) else None
    return value if abs(value) != float("inf") else None


def parse_label(text: str, path: Path, row: int, column: str, binary: bool = True) -> float:
    """The value of a label cell (:func:`label_value`), or a :class:`DataFileError` naming the file, row,
    column and cell when it is not a label."""
    value = label_value(text, binary)
    if value is None:
        try:
            float(text)
        except ValueError:
            what = "not a number or true/false"
        else:
            what = "not 0 or 1" if binary else "not a finite number"
        rule = ("task labels must be binary (0/1, true/false; empty = missing)" if binary else
                "task labels must be finite numbers or true/false (empty = missing)")
        raise DataFileError(f"{path}: row {row}, column {column!r}: label {text.strip()!r} is {what}; {rule}")
    return value


def parse_split(text: str, path: Path, row: int, column: str) -> str:
    """``"train"``, ``"val"`` or ``"test"`` for a split cell (:data:`SPLIT_NAMES`), or a
    :class:`DataFileError` naming the file, row, column and cell."""
    part = SPLIT_NAMES.get(text.strip().lower())
    if part is None:
        raise DataFileError(f"{path}: row {row}, column {column!r}: split {text.strip()!r} is not one of train, val, "
                            "test (any case; also valid, validation, dev, training, testing)")
    return part


def infer_tasks(header, rows, smiles_idx, binary: bool = True,
                exclude: Tuple[int, ...] = ()) -> Tuple[List[int], List[Tuple[str, str]]]:
    """Columns whose present values are all labels (``binary``: 0/1 labels; see the module
    doc), and ``(name, reason)`` of every other column except the SMILES one and ``exclude``."""
    out, skipped = [], []
    folded = [h.lower() for h in header]
    for j, name in enumerate(header):
        if j == smiles_idx or j in exclude:
            continue
        if is_id_column(name):
            skipped.append((name, "id/name column"))
            continue
        if folded.count(name.lower()) > 1:
            skipped.append((name, "its name is used by more than one column"))
            continue
        bad, present = None, 0
        for line, fields in rows:
            value = label_value(fields[j], binary)
            if value is None:
                bad = (line, fields[j].strip())
                break
            present += value == value
        if bad is not None:
            skipped.append((name, f"row {bad[0]} has {bad[1]!r}, not a "
                                  + ("0/1 label" if binary else "numeric label")))
        elif not present:
            skipped.append((name, "every cell empty"))
        else:
            out.append(j)
    return out, skipped


def labels_conflict(a, b) -> bool:
    """Whether two label rows disagree on a task both of them label."""
    if a is None or b is None or a.numel() == 0 or a.shape != b.shape:
        return False
    both = ~(torch.isnan(a) | torch.isnan(b))
    return bool((a[both] != b[both]).any())

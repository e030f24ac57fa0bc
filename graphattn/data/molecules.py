"""Any SMILES CSV as a PyG dataset (featurized once, cached); the named MoleculeNet sets build on it
in :mod:`graphattn.data.moleculenet`.

Featurization is in :mod:`graphattn.data.featurize`, reading the tables in :mod:`graphattn.data.smiles_table`,
splits in :mod:`graphattn.data.splits`.
Invalid SMILES are skipped, counted and reported with their file rows, never dropped
silently. A label cell is a finite number, ``true``/``false`` (any case, as pandas writes
booleans; 1/0), or missing (empty, ``nan``, ``NA``, ``N/A``, ``null``, ``none``: the words
of :data:`graphattn.data.rawio.MISSING_LABELS`, NaN in ``y``). With ``binary=True`` (the
named MoleculeNet classification sets, and the CSV classification pipeline, which trains with binary
cross-entropy) the numbers must be 0 or 1 (``0.0``, ``1.0``, ``1e0`` too); the library
default for :class:`MoleculeCSVDataset` is ``binary=False`` (regression targets such as
ESOL's log-solubility). RDKit is imported lazily.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch_geometric.data import InMemoryDataset

from graphattn.data.download import DataFileError, cache_root, pyg_progress_to_log, sha256sum, writable_dir
from graphattn.data.featurize import (ATOM_FEATURE_DIMS, ATOM_FEATURE_NAMES, BOND_FEATURE_DIMS, BOND_FEATURE_NAMES,
                                      FEATURIZER_VERSION, InvalidSmilesError, InvalidSmilesWarning, canonical_smiles,
                                      mol_to_data, parse_smiles, smiles_to_data)
from graphattn.data.labels import infer_tasks, labels_conflict, parse_label, parse_split
from graphattn.data.smiles_table import find_column, read_csv_table
from graphattn.utils.progress import announce, progress_bar

__all__ = [
    "FEATURIZER_VERSION", "ATOM_FEATURE_NAMES", "ATOM_FEATURE_DIMS", "BOND_FEATURE_NAMES",
    "BOND_FEATURE_DIMS", "InvalidSmilesError", "InvalidSmilesWarning", "parse_smiles",
    "mol_to_data", "smiles_to_data", "SmilesCSVDataset", "MoleculeCSVDataset",
    "TaskColumnWarning", "DuplicateSmilesWarning",
]

#: Part of every processed-cache key besides FEATURIZER_VERSION (which checkpoints check):
#: bump when what ``process`` keeps changes (2: binary labels only, whitespace inside a
#: SMILES invalid, ``limit``; 3: ``binary`` in the key, numeric labels again by default).
_PROCESS_VERSION = 7  # 7: split column; 6: #N/A, ? and - cells are missing labels; 4: identifier columns (cid, *_id, CAS...) never inferred as tasks; 5: duplicates by molecule


class DuplicateSmilesWarning(UserWarning):
    """The same molecule (RDKit's canonical SMILES) is on several rows of a molecule CSV."""


class TaskColumnWarning(UserWarning):
    """:class:`MoleculeCSVDataset` did not use some columns as tasks (``.skipped_columns``)."""


# ----------------------------------------------------------------------------- datasets

def canonical_key(smiles: str) -> str:
    """RDKit's canonical SMILES of a parsable SMILES (the text itself if RDKit fails here, or for
    a molecule too large for its canonical ranking)."""
    from rdkit import rdBase  # optional dependency: `import graphattn` works without RDKit

    try:
        mol = parse_smiles(smiles)
        with rdBase.BlockLogs():
            return canonical_smiles(mol, fallback=smiles.strip())
    except Exception:  # noqa: BLE001 - a key, not a check: fall back to the text
        return smiles.strip()


class SmilesCSVDataset(InMemoryDataset):
    """A SMILES CSV featurized once into ``<cache>/<rel>/processed/<key>/``.

    ``key`` hashes :data:`FEATURIZER_VERSION`, the processing version, the raw file's
    sha256, the column choice, ``binary``, ``limit`` and ``repr(pre_transform)``, so any
    change re-processes into a fresh folder (a ``limit`` run never reads nor overwrites the
    cache of the whole file). ``limit``: stop after that many valid molecules. ``binary``:
    labels must be 0/1 (else any finite number). ``split_col``: a column naming each molecule's
    part (``train`` / ``val`` / ``test``, :func:`~graphattn.data.labels.parse_split`), read into
    :attr:`split_labels`; never a task.
    """

    def __init__(self, raw_path, name: str, smiles_col: str, task_cols, cache_base: Path,
                 transform, pre_transform, force_reload: bool, log: bool,
                 limit: Optional[int] = None, rel: Optional[str] = None, binary: bool = True,
                 split_col: Optional[str] = None):
        self.raw_path = Path(raw_path)
        self.binary = bool(binary)
        self.name = name
        if limit is not None and int(limit) < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self._smiles_col, self._task_cols, self.split_col = smiles_col, task_cols, split_col
        self._limit = None if limit is None else int(limit)
        pre = re.sub(r"(<.*?)\s.*(>)", r"\1\2", repr(pre_transform))  # drop addresses
        spec = json.dumps([FEATURIZER_VERSION, _PROCESS_VERSION, sha256sum(self.raw_path), name,
                           smiles_col, task_cols, pre, self._limit, self.binary]
                          + ([split_col] if split_col is not None else []))
        self._key = (f"v{FEATURIZER_VERSION}-{hashlib.sha256(spec.encode()).hexdigest()[:12]}"
                     + (f"-limit{self._limit}" if self._limit else ""))
        base = writable_dir(Path(cache_base), rel or name)
        self.progress = bool(log)  # our featurizing bar; PyG's own "Processing..." lines go to the log
        with pyg_progress_to_log():
            super().__init__(str(base), transform, pre_transform, None, log, force_reload)
        self.load(self.processed_paths[0])
        with open(self.processed_paths[1]) as f:
            meta = json.load(f)
        self.task_names: List[str] = meta["task_names"]
        self.skipped: List[Tuple[int, str, str]] = [tuple(s) for s in meta["skipped"]]
        self.num_rows: int = meta["num_rows"]
        self._rows: List[int] = meta["rows"]
        self._splits: Optional[List[str]] = meta.get("splits")
        self.skipped_columns: List[Tuple[str, str]] = [tuple(c) for c in meta.get("skipped_columns", [])]
        noted = [(c, why) for c, why in self.skipped_columns if why != "id/name column"]  # mol_id etc.: expected
        if noted:
            shown = "; ".join(f"{c!r} ({why})" for c, why in noted)
            rule = "0/1, true/false or empty" if self.binary else "numbers, true/false or empty"
            warnings.warn(f"{self.raw_path.name}: columns not used as tasks (labels must be {rule}): {shown}. Name the task columns to use them "
                          "(task_cols= / --tasks)", TaskColumnWarning, stacklevel=3)
        self.duplicate_rows: List[Tuple[int, int]] = [tuple(p) for p in meta.get("duplicates", [])]
        self.conflicting_duplicate_rows: List[Tuple[int, int]] = [tuple(p) for p in
                                                                  meta.get("conflicting_duplicates", [])]
        self._warn_duplicates(self.duplicate_rows, self.conflicting_duplicate_rows)
        if self.skipped:
            shown = ", ".join(str(s[0]) for s in self.skipped[:20])
            more = ", ..." if len(self.skipped) > 20 else ""
            warnings.warn(f"{name}: skipped {len(self.skipped)} of {self.num_rows} molecules "
                          f"whose SMILES RDKit cannot parse ({self.raw_path.name} rows "
                          f"{shown}{more}; reasons in .skipped)", InvalidSmilesWarning,
                          stacklevel=3)

    def _warn_duplicates(self, dup: List[Tuple[int, int]], conflicting: List[Tuple[int, int]] = ()) -> None:
        """Warn when one molecule is on several rows (``dup``: (first row, repeat row) pairs found
        by :meth:`process`, matched on RDKit's canonical SMILES, so ``c1ccccc1`` and ``C1=CC=CC=C1``
        are one molecule; ``conflicting``: the pairs whose labels differ): a random split can put
        its copies in train and test; scaffold splits keep them together."""
        if dup:
            shown = ", ".join(f"{a}={b}" for a, b in dup[:5]) + (", ..." if len(dup) > 5 else "")
            clash = (f"; {len(conflicting)} of them with different labels (rows "
                     + ", ".join(f"{a}={b}" for a, b in conflicting[:5]) + (", ..." if len(conflicting) > 5 else "")
                     + ")") if conflicting else ""
            warnings.warn(f"{self.raw_path.name}: {len(dup)} rows repeat the molecule of an earlier row (rows {shown})"
                          f"{clash}; a random split can put copies in train and test (scaffold splits keep them "
                          "together)", DuplicateSmilesWarning, stacklevel=4)

    @property
    def raw_dir(self) -> str:
        return str(self.raw_path.parent)

    @property
    def raw_file_names(self) -> List[str]:
        return [self.raw_path.name]

    @property
    def processed_dir(self) -> str:
        return os.path.join(self.root, "processed", self._key)

    @property
    def processed_file_names(self) -> List[str]:
        return ["data.pt", "meta.json"]

    @property
    def num_tasks(self) -> int:
        return len(self.task_names)

    @property
    def smiles(self) -> List[str]:
        """SMILES of the molecules in this (possibly sliced) dataset, in order."""
        return [self._column("smiles")[i] for i in self.indices()]

    @property
    def rows(self) -> List[int]:
        """File row (1-based, header = row 1) of each molecule in this dataset."""
        return [self._rows[i] for i in self.indices()]

    @property
    def split_labels(self) -> Optional[List[str]]:
        """The part (``"train"``, ``"val"``, ``"test"``) of each molecule in this dataset, from
        ``split_col``; None without a split column."""
        return None if self._splits is None else [self._splits[i] for i in self.indices()]

    def _column(self, key):
        value = self._data[key]
        return [value] if isinstance(value, str) else value

    def _split_index(self, header: List[str]) -> Optional[int]:
        if self.split_col is None:
            return None
        return find_column(header, self.split_col, self.raw_path, flag="split_col=, CLI --split-col")

    def _select_tasks(self, header: List[str], rows) -> Tuple[int, List[int], List[Tuple[str, str]]]:
        """SMILES column, task columns and ``(name, reason)`` of the columns not used."""
        smiles_idx = find_column(header, self._smiles_col, self.raw_path, flag="smiles_col=, CLI --smiles-col")
        split_idx = self._split_index(header)
        if self._task_cols is None:
            exclude = () if split_idx is None else (split_idx,)
            return (smiles_idx, *infer_tasks(header, rows, smiles_idx, self.binary, exclude=exclude))
        idx = [find_column(header, t, self.raw_path) for t in self._task_cols]
        twice = sorted({header[j] for j in idx if idx.count(j) > 1})
        if twice:
            raise ValueError(f"{self.raw_path}: task column(s) {twice} given more than once")
        if split_idx is not None and split_idx in idx:
            raise ValueError(f"{self.raw_path}: column {header[split_idx]!r} is the split column (--split-col); "
                             "it cannot also be a task")
        return smiles_idx, idx, []

    def _task_names(self, header: List[str], task_idx: List[int]) -> List[str]:
        """The names of the task columns ``task_idx`` (a named set may rename a copy's columns)."""
        return [header[j] for j in task_idx]

    def process(self) -> None:
        header, rows = read_csv_table(self.raw_path)
        smiles_idx, task_idx, skipped_cols = self._select_tasks(header, rows)
        split_idx = self._split_index(header)
        data_list, skipped, kept, read, splits = [], [], [], 0, []
        first: Dict[str, Tuple[int, Any]] = {}  # canonical SMILES -> its first row and labels (repeats reported)
        duplicates: List[Tuple[int, int]] = []
        conflicting: List[Tuple[int, int]] = []
        total = len(rows) if self._limit is None else min(len(rows), self._limit)
        if not self.progress and total >= 2000:  # a minute or more: say once what is happening
            announce(f"featurizing the {total:,} molecules of {self.name} (once: cached in {self.processed_dir})")
        for line, fields in progress_bar(rows, desc=f"featurize {self.name}", unit="mol", total=total,
                                         disable=not self.progress):
            if self._limit is not None and len(data_list) >= self._limit:
                break
            read += 1
            y = [parse_label(fields[j], self.raw_path, line, header[j], self.binary) for j in task_idx]
            part = None if split_idx is None else parse_split(fields[split_idx], self.raw_path, line, header[split_idx])
            try:
                data = smiles_to_data(fields[smiles_idx], y)
            except InvalidSmilesError as exc:
                skipped.append((line, fields[smiles_idx], exc.reason))
                continue
            if self.pre_transform is not None:
                data = self.pre_transform(data)
            data_list.append(data)
            kept.append(line)
            splits.append(part)
            key = canonical_key(fields[smiles_idx])  # the same molecule however it is written
            labels = torch.tensor(y, dtype=torch.float64)
            if key in first:
                duplicates.append((first[key][0], line))
                if labels_conflict(first[key][1], labels):
                    conflicting.append((first[key][0], line))
            else:
                first[key] = (line, labels)
        if not read:
            raise DataFileError(f"{self.raw_path}: no data rows (only a header?)")
        if not data_list:
            raise DataFileError(f"{self.raw_path}: none of its {read} SMILES could be "
                                f"parsed (column {header[smiles_idx]!r})")
        meta = {"task_names": self._task_names(header, task_idx), "skipped": skipped,
                "splits": splits if split_idx is not None else None,
                "skipped_columns": skipped_cols, "num_rows": read, "rows": kept, "duplicates": duplicates,
                "conflicting_duplicates": conflicting,
                "featurizer_version": FEATURIZER_VERSION, "raw_file": str(self.raw_path),
                "limit": self._limit, "binary": self.binary}
        for path, write in ((self.processed_paths[1], lambda p: _dump_json(meta, p)),
                            (self.processed_paths[0], lambda p: self.save(data_list, p))):
            tmp = f"{path}.{os.getpid()}.tmp"
            write(tmp)
            os.replace(tmp, path)  # atomic: a crash never leaves a half-written cache

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}, {len(self)}, tasks={self.num_tasks})"


def _dump_json(obj, path) -> None:
    with open(path, "w") as f:
        json.dump(obj, f)


class MoleculeCSVDataset(SmilesCSVDataset):
    r"""Any CSV (or .csv.gz) with a SMILES column and numeric task columns, as PyG graphs.

    Args:
        path: the CSV file (gzip is recognised by its content, not its name).
        smiles_col: SMILES column. This and ``task_cols`` match the header exactly, else
            case-insensitively; header names are stripped of surrounding whitespace.
        task_cols: label columns, in order (a str is one column name); each must hold only
            labels (finite numbers, true/false or missing; 0/1 with ``binary``), else
            :class:`DataFileError` (a ``ValueError``) names the column, the file row and the
            value. ``None`` infers them: every other column whose labels are all valid (with
            ``binary``: 0/1) with at least one present,
            except identifier columns (``id``, ``mol_id``, ``name``, ``index``, ``cid``, CAS,
            InChIKey, ``Unnamed: *``, names ending in ``_id`` / ``ID`` / ``CID`` ...; see
            ``datasets/molecules.md``)
            and names used twice. The columns left out are listed, with the reason and the
            first offending cell, in ``skipped_columns`` and in one
            :class:`TaskColumnWarning`. Zero tasks is allowed (e.g. for prediction); ``y``
            then has shape ``(1, 0)``.
        root: data root; the cache goes to ``<cache_root(cache_dir)>/csv/<file stem>/``.
        transform, pre_transform, force_reload, cache_dir, log, limit: as in
            :class:`~graphattn.data.moleculenet.MoleculeNetDataset`.
        binary: labels must be 0/1 (true/false), for binary classification (BCE); the
            ``graphattn train --csv`` pipeline passes ``True``. Default ``False``: any finite
            number (regression targets, e.g. ESOL, FreeSolv, Lipophilicity). Part of the
            cache key.
        split_col: a column naming each row's part (``train``, ``val``/``valid``, ``test``, any
            case), read into ``split_labels``; an other value is a :class:`DataFileError`
            naming the row. Never inferred as a task.

    Missing labels are NaN in ``y``. Invalid SMILES are skipped and reported in ``skipped``.
    """

    def __init__(self, path, smiles_col: str = "smiles", task_cols=None, root=None,
                 transform=None, pre_transform=None, force_reload: bool = False,
                 cache_dir=None, log: bool = True, limit: Optional[int] = None,
                 binary: bool = False, split_col: Optional[str] = None):
        path = Path(path).expanduser()
        if not path.is_file():
            raise DataFileError(f"{path} is a folder, not a CSV file" if path.is_dir() else f"{path}: no such file")
        if isinstance(task_cols, str):
            task_cols = [task_cols]
        stem = re.sub(r"\.csv(\.gz)?$", "", path.name, flags=re.I) or "data"
        super().__init__(path, stem, smiles_col, None if task_cols is None else list(task_cols),
                         cache_root(cache_dir), transform, pre_transform, force_reload, log,
                         limit=limit, rel=f"csv/{stem}", binary=binary, split_col=split_col)


#: names that moved to :mod:`graphattn.data.moleculenet`, still importable from here (deprecated)
_MOVED = {"ToxicityDataset", "TOXICITY_DATASETS", "TOX21_TASKS", "SIDER_TASKS"}


def __getattr__(name: str):
    if name not in _MOVED:
        raise AttributeError(f"module 'graphattn.data.molecules' has no attribute {name!r}")
    import importlib

    warnings.warn(f"graphattn.data.molecules.{name} moved to graphattn.data.moleculenet.{name}",
                  DeprecationWarning, stacklevel=2)
    # by name, at first use: graphattn.data.moleculenet imports this module
    value = globals()[name] = getattr(importlib.import_module("graphattn.data.moleculenet"), name)  # warned once
    return value

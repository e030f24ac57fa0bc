"""The molecule pool of :mod:`graphattn.pretrain`: SMILES files featurized (Laplacian PE + RDKit
descriptors, cached per file), de-duplicated by canonical SMILES, minus the molecules of the
sets one will test on."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

__all__ = ["exclusion_set", "molecule_pool"]


def _canonical(smiles: str) -> Optional[str]:
    from rdkit import Chem, rdBase

    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles)
    return None if mol is None else Chem.MolToSmiles(mol)


def _smiles_column(path, candidates: Sequence[str]) -> str:
    from .data.download import DataFileError
    from .data.molecules import read_csv_table

    header, _ = read_csv_table(path, header_only=True)
    for c in candidates:
        if c in header:
            return c
        hits = [h for h in header if h.lower() == c.strip().lower()]
        if len(hits) > 1:
            raise DataFileError(f"{path}: the SMILES column {c!r} is ambiguous: the header has {hits}; "
                                "pass the exact name with --smiles-col")
        if hits:
            return hits[0]
    raise DataFileError(f"{path}: none of the SMILES column names {list(candidates)} is in its header "
                        f"{header[:20]}; pass --smiles-col NAME (several: comma-separated, first match per file)")


def exclusion_set(sources: Sequence[str], smiles_cols: Sequence[str] = ("smiles",), log: bool = True) -> set:
    """Canonical SMILES of the molecules in ``sources`` (toxicity set names or CSV paths):
    pretraining leaves them out, so no molecule of a downstream test set is seen."""
    from .data.download import DataFileError
    from .data.molecules import ToxicityDataset, read_csv_table
    from .molecule_data import cache_dir
    from .molecule_tasks import DATASETS

    out = set()
    for src in sources:
        if str(src).lower() in DATASETS:
            smiles = list(ToxicityDataset(name=str(src).lower(), cache_dir=cache_dir(), log=log).smiles)
        elif not Path(src).is_file():
            raise DataFileError(f"--exclude {src}: neither a toxicity set ({', '.join(sorted(DATASETS))}) "
                                "nor an existing CSV file")
        else:
            col = _smiles_column(src, smiles_cols)
            header, rows = read_csv_table(src)
            i = header.index(col)
            smiles = [r[i] for _, r in rows if len(r) > i and r[i].strip()]
        out.update(c for c in map(_canonical, smiles) if c is not None)
    return out


def molecule_pool(paths: Sequence[str], smiles_cols: Sequence[str] = ("smiles",), pe_dim: int = 8,
                  exclude: Sequence[str] = (), limit: Optional[int] = None, log: bool = True):
    """The featurized, de-duplicated molecules of the CSV files ``paths`` (graphs with Laplacian
    PE of size ``pe_dim`` and all RDKit descriptors), without those of ``exclude``.

    Each file's SMILES column is the first of ``smiles_cols`` in its header (case-insensitive).
    Molecules are de-duplicated across files by RDKit canonical SMILES. Returns ``(graphs,
    report)``; the report counts, per file, rows, invalid SMILES (with their rows), duplicates
    and excluded molecules. Featurizing is cached per file (:mod:`graphattn.data.molecules`).
    """
    from tqdm.auto import tqdm

    from .data.descriptors import descriptor_names
    from .data.download import DataFileError
    from .data.molecules import MoleculeCSVDataset
    from .molecule_data import _pre_transform, cache_dir

    if not paths:
        raise ValueError("no molecule files given (--csv FILE [FILE ...])")
    names = descriptor_names()
    excluded = exclusion_set(exclude, smiles_cols, log=log) if exclude else set()
    seen: set = set()
    graphs: List[Any] = []
    report: Dict[str, Any] = {"files": [], "excluded_sources": list(map(str, exclude)),
                              "descriptors": names, "pe_dim": pe_dim}
    for path in paths:
        if not Path(path).is_file():
            raise DataFileError(f"{path}: no such file")
        col = _smiles_column(path, smiles_cols)
        ds = MoleculeCSVDataset(path, col, task_cols=[], pre_transform=_pre_transform(pe_dim, names),
                                cache_dir=cache_dir(), log=log, limit=limit)
        dup = exc = 0
        for data in tqdm(ds, desc=f"pool {Path(path).name}", disable=not log, unit="mol", leave=False):
            key = _canonical(data.smiles)
            if key is None or key in seen:
                dup += 1
                continue
            seen.add(key)
            if key in excluded:
                exc += 1
                continue
            d = data.clone()
            del d.y  # labels of the source file play no part in pretraining
            graphs.append(d)
        report["files"].append({"path": str(Path(path).resolve()), "smiles_col": col, "rows": ds.num_rows,
                                "invalid": len(ds.skipped), "invalid_rows": [r for r, _, _ in ds.skipped],
                                "duplicates": dup, "excluded": exc,
                                "used": len(ds) - dup - exc})
    report["molecules"] = len(graphs)
    if not graphs:
        raise ValueError(f"no molecules left to pretrain on (files {list(map(str, paths))}"
                         f"{', after excluding ' + ', '.join(map(str, exclude)) if exclude else ''})")
    return graphs, report

"""The molecule pool of :mod:`graphattn.tasks.molecules.pretrain`: SMILES files featurized (Laplacian PE + RDKit
descriptors, cached per file), de-duplicated by canonical SMILES, minus the molecules of the
sets one will test on (matched more loosely: largest fragment, neutralised, stereochemistry ignored)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from graphattn.utils.progress import progress_bar
from graphattn.data.descriptors import descriptor_names
from graphattn.data.download import DataFileError, sha256sum
from graphattn.data.featurize import CANONICAL_MAX_ATOMS, InvalidSmilesError, canonical_smiles, parse_smiles
from graphattn.data.moleculenet import MOLECULENET, MoleculeNetDataset, moleculenet_names
from graphattn.data.molecules import MoleculeCSVDataset
from graphattn.data.smiles_table import find_column, read_csv_table
from graphattn.tasks.molecules.data import pre_transform
from graphattn.tasks.molecules.files import cache_dir

__all__ = ["exclusion_set", "molecule_pool"]


def _keys(smiles: str) -> Optional[Tuple[str, str]]:
    """``(canonical SMILES, exclusion key)`` of a SMILES, None when RDKit cannot parse it. The
    exclusion key is stricter than identity: the canonical SMILES of the largest fragment,
    neutralised, without stereochemistry, so a test molecule's salt form, charge state or
    stereoisomer is left out too."""
    from rdkit import Chem, rdBase
    from rdkit.Chem.MolStandardize import rdMolStandardize

    with rdBase.BlockLogs():
        try:
            mol = parse_smiles(smiles)  # as the featurizer reads it (stereo perception, checks)
        except InvalidSmilesError:
            return None
        if mol.GetNumAtoms() > CANONICAL_MAX_ATOMS:  # the exclusion key's SMILES would crash RDKit too
            return smiles.strip(), smiles.strip()
        frags = Chem.GetMolFrags(mol, asMols=True, sanitizeFrags=False) if mol.GetNumAtoms() else (mol,)
        uncharger = rdMolStandardize.Uncharger()

        def key(frag) -> str:  # neutralised, without stereochemistry
            try:
                frag = uncharger.uncharge(frag)
            except Exception:  # noqa: BLE001 (exotic valences: keep the charged form)
                pass
            return Chem.MolToSmiles(frag, isomericSmiles=False)

        # the largest fragment; ties on size broken by that key, so neither the order the fragments
        # are written in nor their stereo/charge forms change which one is chosen
        largest = max((m.GetNumHeavyAtoms(), m.GetNumAtoms(), key(m)) for m in frags)[2]
        return canonical_smiles(mol, smiles.strip()), largest


def _smiles_column(path, candidates: Sequence[str]) -> str:
    """The first of ``candidates`` that :func:`~graphattn.data.smiles_table.find_column` finds in
    the header of ``path`` (exact, else case-insensitive; ambiguity is an error)."""
    header, _ = read_csv_table(path, header_only=True)
    for c in candidates:
        if any(h.lower() == c.strip().lower() for h in header):
            return header[find_column(header, c, path)]
    raise DataFileError(f"{path}: none of the SMILES column names {list(candidates)} is in its header "
                        f"{header[:20]}; pass --smiles-col NAME (several: comma-separated, first match per file)")


def exclusion_set(sources: Sequence[str], smiles_cols: Sequence[str] = ("smiles",), log: bool = True) -> set:
    """Exclusion keys (largest fragment, no stereochemistry; see :func:`_keys`) of the molecules
    in ``sources`` (MoleculeNet set names or CSV paths): pretraining leaves out every molecule with
    one of these keys, so no downstream test molecule, nor its salt form or stereoisomer, is seen."""
    out = set()
    for src in sources:
        if str(src).lower() in MOLECULENET:
            smiles = list(MoleculeNetDataset(name=str(src).lower(), cache_dir=cache_dir(), log=log).smiles)
        elif not Path(src).is_file():
            raise DataFileError(f"--exclude {src}: neither a MoleculeNet set ({', '.join(moleculenet_names())}) "
                                "nor an existing CSV / SMILES file" + (" (it is a folder)" if Path(src).is_dir() else ""))
        else:
            col = _smiles_column(src, smiles_cols)
            header, rows = read_csv_table(src)
            i = header.index(col)
            smiles = [r[i] for _, r in rows if len(r) > i and r[i].strip()]
        out.update(k[1] for k in map(_keys, smiles) if k is not None)
    return out


def molecule_pool(paths: Sequence[str], smiles_cols: Sequence[str] = ("smiles",), pe_dim: int = 8,
                  exclude: Sequence[str] = (), limit: Optional[int] = None, log: bool = True):
    """The featurized, de-duplicated molecules of the CSV files ``paths`` (graphs with Laplacian
    PE of size ``pe_dim`` and all RDKit descriptors), without those of ``exclude``.

    Args:
        paths: CSV / .csv.gz files; other columns than the SMILES one are ignored.
        smiles_cols: candidate SMILES column names; per file the first one in its header
            (exact, else case-insensitive).
        pe_dim: Laplacian PE size K (0 = none).
        exclude: MoleculeNet set names or CSV files whose molecules (also their salt forms and
            stereoisomers) are left out, see :func:`exclusion_set`.
        limit: read only the first ``limit`` valid molecules of each file.

    Molecules are de-duplicated across files by RDKit canonical (isomeric) SMILES. Returns
    ``(graphs, report)``; the report counts, per file, rows, invalid SMILES (the first 100 of
    their rows), duplicates and excluded molecules. Featurizing is cached per file
    (:mod:`graphattn.data.molecules`).
    """

    if not paths:
        raise ValueError("no molecule files given (--csv FILE [FILE ...])")
    names = descriptor_names()
    excluded = exclusion_set(exclude, smiles_cols, log=log) if exclude else set()
    seen: set = set()
    graphs: List[Any] = []

    # set names as given; files by place and contents (a pipe's copy, or the file moved, is the same source)
    sources = [str(src) if str(src).lower() in MOLECULENET else
               {"path": str(Path(src).resolve()), "sha256": sha256sum(src)} for src in exclude]
    report: Dict[str, Any] = {"files": [], "excluded_sources": sources,
                              "descriptors": names, "pe_dim": pe_dim}
    for path in paths:
        if not Path(path).is_file():
            raise DataFileError(f"{path} is a folder, not a file" if Path(path).is_dir() else f"{path}: no such file")
        col = _smiles_column(path, smiles_cols)
        ds = MoleculeCSVDataset(path, col, task_cols=[], pre_transform=pre_transform(pe_dim, names),
                                cache_dir=cache_dir(), log=log, limit=limit)
        dup = exc = 0
        for data in progress_bar(ds, desc=f"pool {Path(path).name}", disable=not log, unit="mol", leave=False):
            keys = _keys(data.smiles) or (data.smiles, data.smiles)  # the dataset parsed it already
            if keys[0] in seen:
                dup += 1
                continue
            seen.add(keys[0])
            if keys[1] in excluded:
                exc += 1
                continue
            d = data.clone()
            del d.y  # labels of the source file play no part in pretraining
            graphs.append(d)
        report["files"].append({"path": str(Path(path).resolve()), "sha256": sha256sum(path),
                                "smiles_col": col, "rows": ds.num_rows,
                                "invalid": len(ds.skipped), "invalid_rows": [r for r, _, _ in ds.skipped][:100],
                                "duplicates": dup, "excluded": exc,
                                "used": len(ds) - dup - exc})
    report["molecules"] = len(graphs)
    if not graphs:
        raise ValueError(f"no molecules left to pretrain on (files {list(map(str, paths))}"
                         f"{', after excluding ' + ', '.join(map(str, exclude)) if exclude else ''})")
    return graphs, report

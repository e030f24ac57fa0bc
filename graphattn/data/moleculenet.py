"""The named MoleculeNet sets: one table (:data:`MOLECULENET`) and one dataset class
(:class:`MoleculeNetDataset`). The command line (``graphattn train NAME``), ``pretrain --exclude``
and ``benchmarks/molecules.py`` read the same table: a new set is one entry here.

Each file is looked up under the data root (``<root>/<name>/``), else downloaded from its canonical
public URL (DeepChem's MoleculeNet bucket) with a progress bar, or built from several public files
(ZINC-12k, :mod:`graphattn.data.zinc`), and checked (SMILES and task columns, row count, split sizes)
before use; a truncated or wrong file raises :class:`DataFileError` naming it.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Tuple, Union

from graphattn.data.download import DataFileError, cache_root, data_root, find_file
from graphattn.data.labels import is_id_column, parse_split
from graphattn.data.molecules import SmilesCSVDataset
from graphattn.data.smiles_table import find_column, read_csv_table
from graphattn.data.zinc import ZINC_FILE, ZINC_FOLDER, ZINC_TASK, build_zinc_subset

__all__ = ["MOLECULENET", "MoleculeNetSet", "MoleculeNetDataset", "moleculenet_names", "moleculenet_tasks", "moleculenet_file",
           "TOX21_TASKS", "SIDER_TASKS", "ToxicityDataset", "TOXICITY_DATASETS"]

_DEEPCHEM = "https://deepchemdata.s3-us-west-1.amazonaws.com/datasets/"
_BGNN = "https://github.com/graphdeeplearning/benchmarking-gnns/tree/master/data/molecules"

TOX21_TASKS = ["NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD",
               "NR-PPAR-gamma", "SR-ARE", "SR-ATAD5", "SR-HSE", "SR-MMP", "SR-p53"]
SIDER_TASKS = [
    "Hepatobiliary disorders", "Metabolism and nutrition disorders", "Product issues",
    "Eye disorders", "Investigations", "Musculoskeletal and connective tissue disorders",
    "Gastrointestinal disorders", "Social circumstances", "Immune system disorders",
    "Reproductive system and breast disorders",
    "Neoplasms benign, malignant and unspecified (incl cysts and polyps)",
    "General disorders and administration site conditions", "Endocrine disorders",
    "Surgical and medical procedures", "Vascular disorders",
    "Blood and lymphatic system disorders", "Skin and subcutaneous tissue disorders",
    "Congenital, familial and genetic disorders", "Infections and infestations",
    "Respiratory, thoracic and mediastinal disorders", "Psychiatric disorders",
    "Renal and urinary disorders", "Pregnancy, puerperium and perinatal conditions",
    "Ear and labyrinth disorders", "Cardiac disorders", "Nervous system disorders",
    "Injury, poisoning and procedural complications"]


@dataclass(frozen=True)
class MoleculeNetSet:
    """One named MoleculeNet set.

    Args:
        files: accepted file names under ``<data root>/<folder>/`` (DeepChem's and chemprop's
            copies); the first is where a download (or ``build``) writes.
        url: the canonical public file (with ``build``: where its source files are).
        tasks: the task columns, or the number of assay columns (ToxCast, whose 617 names are
            read from the file).
        rows: the accepted range of molecule rows (DeepChem's file and chemprop's cleaned copy).
        smiles_col: the SMILES column (``mol`` in BACE).
        task_type: ``"classification"`` (0/1 labels) or ``"regression"``.
        title: the name people know it by.
        aliases: per task, the other names its column has in the accepted copies (ESOL's
            ``measured log solubility in mols per litre`` in DeepChem's file, ``logp`` in chemprop's);
            the dataset's ``task_names`` are always ``tasks``.
        split_col: the column of the file that holds the set's official split (``train`` /
            ``val`` / ``test``), used unless another split is asked for; None = no official split.
        units: the targets' units (regression), for tables and plots.
        folder: the sub-folder of the data root holding the files (default: the set's name).
        build: for a set assembled from several public files instead of downloaded as one: a function
            ``build(root, download=, progress=)`` that writes ``<root>/<folder>/<files[0]>`` from them
            and returns its path; called when no accepted file exists.
        split_sizes: the molecules per part of ``split_col`` (train, val, test) the file must have;
            None = not checked.
    """

    files: Tuple[str, ...]
    url: str
    tasks: Union[Tuple[str, ...], int]
    rows: Tuple[int, int]
    smiles_col: str = "smiles"
    task_type: str = "classification"
    title: str = ""
    aliases: Tuple[Tuple[str, ...], ...] = ()
    split_col: Optional[str] = None
    units: str = ""
    folder: Optional[str] = None
    build: Optional[Callable[..., Path]] = None
    split_sizes: Optional[Tuple[int, int, int]] = None

    def column_names(self, task: str) -> Tuple[str, ...]:
        """The names the column of ``task`` may have: the task's own, then its aliases."""
        if isinstance(self.tasks, int):
            return (task,)
        i = self.tasks.index(task)
        return (task, *(self.aliases[i] if i < len(self.aliases) else ()))

    def __getitem__(self, key: str):
        """The old dict access (``TOXICITY_DATASETS[name]["tasks"]``), deprecated: use the attribute."""
        warnings.warn(f"MOLECULENET[name][{key!r}] is deprecated: use the attribute .{key}", DeprecationWarning,
                      stacklevel=2)
        return getattr(self, key)


#: every named MoleculeNet set the package knows, by the name ``graphattn train NAME`` takes
MOLECULENET = {
    "tox21": MoleculeNetSet(("tox21.csv.gz", "tox21.csv"), _DEEPCHEM + "tox21.csv.gz", tuple(TOX21_TASKS),
                            (7821, 7841), title="Tox21"),
    "toxcast": MoleculeNetSet(("toxcast_data.csv.gz", "toxcast_data.csv", "toxcast.csv.gz", "toxcast.csv"),
                              _DEEPCHEM + "toxcast_data.csv.gz", 617, (8565, 8586), title="ToxCast"),
    "clintox": MoleculeNetSet(("clintox.csv.gz", "clintox.csv"), _DEEPCHEM + "clintox.csv.gz",
                              ("FDA_APPROVED", "CT_TOX"), (1468, 1494), title="ClinTox"),
    "sider": MoleculeNetSet(("sider.csv.gz", "sider.csv"), _DEEPCHEM + "sider.csv.gz", tuple(SIDER_TASKS),
                            (1417, 1437), title="SIDER"),
    "bbbp": MoleculeNetSet(("BBBP.csv", "bbbp.csv"), _DEEPCHEM + "BBBP.csv", ("p_np",), (2030, 2060),
                           title="BBBP (blood-brain barrier penetration)"),
    "bace": MoleculeNetSet(("bace.csv",), _DEEPCHEM + "bace.csv", ("Class",), (1505, 1520), smiles_col="mol",
                           title="BACE (BACE-1 inhibitors)"),
    "hiv": MoleculeNetSet(("HIV.csv", "hiv.csv.gz", "hiv.csv"), _DEEPCHEM + "HIV.csv", ("HIV_active",),
                          (41100, 41140), title="HIV (AIDS antiviral screen)"),
    # regression sets: DeepChem's files and chemprop's copies name the target column differently
    "esol": MoleculeNetSet(("delaney-processed.csv", "delaney.csv", "esol.csv"), _DEEPCHEM + "delaney-processed.csv",
                           ("log_solubility",), (1120, 1130), task_type="regression",
                           title="ESOL (Delaney aqueous solubility)", units="log10(mol/L)",
                           aliases=(("measured log solubility in mols per litre", "logSolubility", "logp"),)),
    "freesolv": MoleculeNetSet(("SAMPL.csv", "freesolv.csv"), _DEEPCHEM + "SAMPL.csv", ("hydration_free_energy",),
                               (640, 645), task_type="regression", title="FreeSolv (hydration free energy)",
                               units="kcal/mol", aliases=(("expt", "freesolv"),)),
    "lipophilicity": MoleculeNetSet(("Lipophilicity.csv", "lipo.csv.gz", "lipo.csv", "lipophilicity.csv"),
                                    _DEEPCHEM + "Lipophilicity.csv", ("logD",), (4195, 4205), task_type="regression",
                                    title="Lipophilicity (octanol/water logD at pH 7.4)", units="logD",
                                    aliases=(("exp", "lipo"),)),
    # assembled from JT-VAE's ZINC files and Benchmarking-GNNs' subset indices (graphattn.data.zinc)
    "zinc": MoleculeNetSet((ZINC_FILE,), _BGNN, (ZINC_TASK,), (12000, 12000), task_type="regression",
                           title="ZINC-12k (Benchmarking-GNNs subset)", split_col="split", folder=ZINC_FOLDER,
                           build=build_zinc_subset, split_sizes=(10000, 1000, 1000)),
}


def moleculenet_names(task_type: Optional[str] = None) -> List[str]:
    """The table's names (of one ``task_type``, or all), sorted."""
    return sorted(n for n, s in MOLECULENET.items() if task_type is None or s.task_type == task_type)


def _hint() -> str:
    return ("delete it to re-download, or point root= (Python), --data-root (command line) or $GRAPHATTN_DATA "
            "at a good copy")


def moleculenet_tasks(name: str, header: List[str], path: Path) -> List[str]:
    """Task columns of a MoleculeNet file (as the file names them: a copy may use an alias); raises
    :class:`DataFileError` if it is the wrong file."""
    spec = MOLECULENET[name]
    n_smiles = [h.lower() for h in header].count(spec.smiles_col.lower())  # any case: a re-saved copy
    if n_smiles != 1:
        raise DataFileError(f"{path}: " + (f"several {spec.smiles_col} columns" if n_smiles
                                           else f"no {spec.smiles_col!r} column")
                            + f" (columns {header[:5]}...); not a MoleculeNet {name} file; {_hint()}")
    if isinstance(spec.tasks, int):
        tasks = [h for h in header if h.lower() != spec.smiles_col.lower() and not is_id_column(h)]
        if len(tasks) != spec.tasks:
            raise DataFileError(f"{path}: {len(tasks)} task columns, expected {spec.tasks} for {name}; {_hint()}")
        return tasks
    columns, missing = [], []
    for t in spec.tasks:
        hit = next((c for c in spec.column_names(t) if c in header), None)
        (columns.append(hit) if hit is not None else missing.append(" or ".join(spec.column_names(t))))
    if missing:
        raise DataFileError(f"{path}: missing task columns {missing} for {name}; {_hint()}")
    return columns


def _check_file(name: str) -> Callable[[Path], None]:
    def check(path: Path) -> None:
        header, rows = read_csv_table(Path(path))
        moleculenet_tasks(name, header, path)
        lo, hi = MOLECULENET[name].rows
        if not lo <= len(rows) <= hi:
            raise DataFileError(
                f"{path}: found {len(rows)} molecule rows, expected {lo}-{hi} for {name}; the "
                "file is truncated or not the MoleculeNet file. Delete it to re-download, or "
                "point root= (Python), --data-root (command line) or $GRAPHATTN_DATA at a good copy")
        if MOLECULENET[name].split_sizes is not None:
            _check_split_sizes(name, header, rows, path)
    return check


def _check_split_sizes(name: str, header: List[str], rows, path: Path) -> None:
    spec = MOLECULENET[name]
    j = find_column(header, spec.split_col, path)
    parts = [parse_split(fields[j] if j < len(fields) else "", path, line, spec.split_col) for line, fields in rows]
    found = tuple(parts.count(p) for p in ("train", "val", "test"))
    if found != spec.split_sizes:
        raise DataFileError(f"{path}: {spec.split_col!r} holds train/val/test {'/'.join(map(str, found))} molecules, "
                            f"expected {'/'.join(map(str, spec.split_sizes))} for {name}; {_hint()}")


def moleculenet_file(name: str, root=None, download: bool = True, log: bool = True) -> Path:
    """The checked raw file of the named set ``name``: ``root`` itself, found under the data root, built
    (ZINC), or downloaded from its canonical URL with a progress bar and checked."""
    spec, check = MOLECULENET[name], _check_file(name)
    if root is not None and Path(root).expanduser().is_file():  # root= the CSV itself
        check(Path(root).expanduser())
        return Path(root).expanduser()
    folder = spec.folder or name  # <root>/<folder>/, PyG's <root>/<folder>/raw/, or the root itself
    rels = [f"{d}{f}" for d in (f"{folder}/", f"{folder}/raw/", "") for f in spec.files]
    if spec.build is not None and not any((data_root(root) / r).is_file() for r in rels):
        built = spec.build(root, download=download, progress=log)
        check(built)
        return built
    return find_file(rels, url=spec.url, root=root, check=check, download=download)


class MoleculeNetDataset(SmilesCSVDataset):
    r"""A named MoleculeNet set of :data:`MOLECULENET` (classification: ``tox21``, ``toxcast``,
    ``clintox``, ``sider``, ``bbbp``, ``bace``, ``hiv``; regression: ``esol``, ``freesolv``,
    ``lipophilicity``, ``zinc``) as PyG graphs.

    The raw CSV is looked up under ``<data root>/<folder>/`` (the set's name, or
    :attr:`MoleculeNetSet.folder`: ``zinc_subset`` for ``zinc``), ``<data root>/<folder>/raw/`` and the
    data root itself (data root: ``root`` > ``$GRAPHATTN_DATA`` > checkout ``datasets/`` >
    ``~/.cache/graphattn``; ``root`` may also be the CSV file itself) under both the
    DeepChem names (``tox21.csv.gz``, ``toxcast_data.csv.gz``, ``BBBP.csv``, ...; with DeepChem's
    extra ``mol_id`` / ``name`` columns) and the chemprop copies (``toxcast.csv.gz``, ``bbbp.csv``,
    no id columns); if absent it is downloaded from DeepChem's MoleculeNet bucket, or, for ``zinc``,
    built from its public source files (:func:`~graphattn.data.zinc.build_zinc_subset`). Every file is
    checked (task columns, row count, split sizes) and a truncated or wrong file raises
    :class:`DataFileError` naming it. A set with a split column (``zinc``: ``split``) has each
    molecule's part in ``split_labels``.

    Each graph has ``x`` (N, 9), ``edge_index``, ``edge_attr`` (E, 4), ``smiles`` and
    ``y`` (1, T) float with NaN for a missing label; ``task_names`` lists the T tasks
    (canonical order and names, whatever the copy calls the columns). Rows whose SMILES RDKit rejects (e.g. the 8 hypervalent
    ``[AlH3]`` rows of Tox21) are skipped with an :class:`InvalidSmilesWarning` and listed
    in ``skipped`` as ``(file row, smiles, reason)`` (row 1 = header).

    Args:
        root: data root for the raw file (default: see above).
        name: a name of :data:`MOLECULENET`.
        transform, pre_transform: as in PyG (``pre_transform`` is part of the cache key).
        force_reload: re-process even if a cache exists.
        cache_dir: where ``<name>/processed/`` goes (default: :func:`cache_root`,
            i.e. ``$GRAPHATTN_CACHE`` or ``~/.cache/graphattn``, never the data root; falls back
            to ``~/.cache/graphattn`` when that is not writable).
        download: allow downloading when no local copy exists.
        log: show the tqdm bars while building and featurizing.
        limit: featurize only the first ``limit`` valid molecules (rows after the last one
            are not read; ``skipped`` and ``num_rows`` cover the rows read). Cached apart
            from the whole file.
    """

    def __init__(self, root=None, name: str = "tox21", transform=None, pre_transform=None,
                 force_reload: bool = False, cache_dir=None, download: bool = True,
                 log: bool = True, limit: Optional[int] = None):
        name = name.lower()
        if name not in MOLECULENET:
            raise ValueError(f"name must be one of {moleculenet_names()}, got {name!r}")
        spec = MOLECULENET[name]
        raw = moleculenet_file(name, root, download, log)
        super().__init__(raw, name, spec.smiles_col, None, cache_root(cache_dir), transform, pre_transform,
                         force_reload, log, limit=limit, binary=spec.task_type == "classification",
                         split_col=spec.split_col)

    @property
    def task_type(self) -> str:
        """``"classification"`` or ``"regression"`` (:attr:`MoleculeNetSet.task_type`)."""
        return MOLECULENET[self.name].task_type

    def _select_tasks(self, header, rows):
        tasks = moleculenet_tasks(self.name, header, self.raw_path)
        smiles = find_column(header, MOLECULENET[self.name].smiles_col, self.raw_path)
        return smiles, [header.index(t) for t in tasks], []

    def _task_names(self, header, task_idx):
        spec = MOLECULENET[self.name]
        return list(spec.tasks) if not isinstance(spec.tasks, int) else [header[j] for j in task_idx]


class ToxicityDataset(MoleculeNetDataset):
    """Deprecated name of :class:`MoleculeNetDataset` (kept for one release)."""

    def __init__(self, *args, **kwargs):
        warnings.warn("graphattn.data.ToxicityDataset is deprecated: use graphattn.data.MoleculeNetDataset "
                      "(the same class, for every MoleculeNet set)", DeprecationWarning, stacklevel=2)
        super().__init__(*args, **kwargs)


#: Deprecated name of :data:`MOLECULENET` (kept for one release).
TOXICITY_DATASETS = MOLECULENET

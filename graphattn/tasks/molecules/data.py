"""Molecule data for the pipeline: dataset loading and featurizing, task-name resolution and splits."""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from graphattn.data.descriptors import descriptor_names
from graphattn.data.download import sha256sum
from graphattn.data.moleculenet import MoleculeNetDataset
from graphattn.data.molecules import BOND_FEATURE_DIMS, InvalidSmilesError, MoleculeCSVDataset, smiles_to_data
from graphattn.data.smiles_table import find_column, read_csv_table
from graphattn.data.splits import balanced_scaffold_split, random_split, scaffold_split
from graphattn.tasks.molecules.defaults import PE_KINDS, SPLITS
from graphattn.tasks.molecules.files import cache_dir
from graphattn.transforms.descriptors import AddMolDescriptors
from graphattn.transforms.hops import AddHopEdges
from graphattn.transforms.rrwp import AddRRWP
from graphattn.transforms.positional import AddLaplacianPE, AddRandomWalkPE
from graphattn.utils.validation import check_int

__all__ = ["descriptor_set", "resolve_tasks", "load_dataset", "check_split", "split_indices",
           "featurize", "graph_options", "edge_vocab_sizes"]


def pre_transform(k: int, descriptors: Optional[Sequence[str]] = None, pe_kind: str = "laplacian",
                  hops: int = 1):
    """A positional encoding of size ``k`` (none when 0), RDKit descriptors ``descriptors``
    (names; none when None) and, for ``hops`` > 1, attention edges between the atoms up to
    ``hops`` bonds apart, composed in that order (the PE is of the molecular graph); None when
    none. ``pe_kind``: ``"laplacian"`` (the first ``k`` Laplacian eigenvectors,
    :class:`~graphattn.transforms.AddLaplacianPE`), ``"rwse"`` (random-walk return
    probabilities of ``k`` steps, :class:`~graphattn.transforms.AddRandomWalkPE`; exact on
    molecules) or ``"rrwp"`` (relative random-walk probabilities of ``k`` steps of every attended pair,
    and their diagonal, :class:`~graphattn.transforms.AddRRWP`, last: after the hop edges). ``hops``: :class:`~graphattn.transforms.AddHopEdges` with every bond column of an
    added edge set to a "no bond" category (:func:`edge_vocab_sizes`)."""
    if pe_kind not in PE_KINDS:
        raise ValueError(f"pe_kind must be one of {PE_KINDS}, got {pe_kind!r}")
    hops = check_int("hops", hops, 1)  # 1 = the bonds only
    steps = []
    if k and pe_kind != "rrwp":
        steps.append(AddLaplacianPE(k) if pe_kind == "laplacian" else AddRandomWalkPE(k))
    if descriptors is not None:
        steps.append(AddMolDescriptors(descriptors))
    if hops > 1:
        steps.append(AddHopEdges(hops, fill=BOND_FEATURE_DIMS))
    if k and pe_kind == "rrwp":  # the walk follows the bonds (hop distance 1), not the added pairs
        steps.append(AddRRWP(k, hop_column=-1 if hops > 1 else None))
    if len(steps) < 2:
        return steps[0] if steps else None
    from torch_geometric.transforms import Compose

    return Compose(steps)


def descriptor_set(kind: Union[bool, str, None]) -> Optional[List[str]]:
    """The descriptor names a new model uses: ``"rdkit2d"`` (or True) all of the installed RDKit's,
    ``"rdkit2d_normalized"`` chemprop's CDF-normalised set, ``"none"`` (False, None) none."""
    if kind in (False, None, "none"):
        return None
    return descriptor_names("rdkit2d" if kind is True else kind)


class SelectTasks:
    """Transform keeping the label columns ``cols`` of ``data.y``."""

    def __init__(self, cols: Sequence[int]):
        self.cols = list(cols)

    def __call__(self, data):
        data = data.clone()
        data.y = data.y[:, self.cols]
        return data


def norm_task(name: str) -> str:
    """Task-name key: case-folded, whitespace collapsed, none around commas."""
    return re.sub(r"\s+", " ", re.sub(r"\s*,\s*", ",", name.strip())).lower()


def resolve_tasks(tasks: Union[str, Sequence[str]], known: Sequence[str], what: str = "the data") -> List[str]:
    """The names in ``known`` that ``tasks`` asks for, in its order.

    ``tasks`` is a list of names or one comma-separated string (``--tasks``). Names match
    case-insensitively, with whitespace stripped and ignored around commas. In a string,
    task names that themselves contain commas (SIDER's "Neoplasms benign, malignant and
    unspecified (incl cysts and polyps)") are found greedily: at each position the longest
    run of comma-separated pieces that re-joined with "," is a known name wins. An exact
    (case-sensitive) match wins over names that differ only in case.

    Raises ``ValueError`` for unknown names (listing the known ones), for a task asked for
    twice, for names matching several known ones, and when nothing is asked for.
    """
    table: Dict[str, List[str]] = {}
    for k in known:
        table.setdefault(norm_task(k), []).append(k)

    def lookup(text: str) -> Optional[str]:
        hits = table.get(norm_task(text))
        if not hits:
            return None
        exact = [h for h in hits if h == text.strip()]
        if len(hits) > 1 and not exact:
            raise ValueError(f"task {text.strip()!r} is ambiguous in {what}: it matches {hits}")
        return (exact or hits)[0]

    out, unknown = [], []
    if isinstance(tasks, str):
        pieces, i = tasks.split(","), 0
        while i < len(pieces):
            for j in range(len(pieces), i, -1):  # longest run of pieces first
                hit = lookup(",".join(pieces[i:j]))
                if hit is not None:
                    out.append(hit)
                    i = j
                    break
            else:
                if pieces[i].strip():
                    unknown.append(pieces[i].strip())
                i += 1
    else:
        for t in tasks:
            hit = lookup(str(t))
            (out if hit is not None else unknown).append(hit if hit is not None else str(t))
    if unknown:
        shown = list(known)[:40]
        raise ValueError(f"unknown task(s) {unknown} for {what}; its tasks are {shown}"
                         f"{' ...' if len(known) > 40 else ''} (matched case-insensitively)")
    twice = sorted({t for t in out if out.count(t) > 1})
    if twice:
        raise ValueError(f"task(s) {twice} given more than once in the task list")
    if not out:
        raise ValueError(f"no task names given for {what}")
    return out


def load_dataset(name: Optional[str] = None, csv_path: Optional[str] = None, smiles_col: str = "smiles",
                 tasks: Optional[Union[str, Sequence[str]]] = None, pe_dim: int = 0, limit: Optional[int] = None,
                 log: bool = True, descriptors: Optional[Sequence[str]] = None, binary: bool = True,
                 pe_kind: str = "laplacian", hops: int = 1, split_col: Optional[str] = None):
    """A MoleculeNet set ``name`` or the CSV ``csv_path`` (exactly one) as a featurized dataset
    with ``task_names`` set to the tasks used and ``descriptor_names`` to ``descriptors``.

    ``tasks``: a list of task names or a comma-separated string, resolved against the
    dataset's tasks (the CSV's columns) by :func:`resolve_tasks`; None = all tasks (for a
    CSV: every binary column). ``binary``: a CSV's labels must be 0/1 (this pipeline
    trains binary classifiers with BCE; :class:`~graphattn.data.MoleculeCSVDataset` itself
    defaults to ``binary=False``, numeric labels); ``False`` keeps numeric columns. ``limit``: featurize only the first ``limit`` valid molecules
    (cached separately from the whole file). The PE (``pe_kind``), the hop edges (``hops``; see
    :func:`pre_transform`) and the RDKit descriptors
    ``descriptors`` (``data.mol_desc``; see :mod:`graphattn.data.descriptors`) are
    ``pre_transform`` steps (cached). ``split_col``: a CSV's column of ``train`` / ``val`` / ``test``
    (``ds.split_labels``, the ``"column"`` split of :func:`split_indices`; a named set with an official
    split reads its own). Raises ``ValueError`` (``DataFileError``) for bad input.
    """
    if (name is None) == (csv_path is None):
        raise ValueError("give either a dataset name or a CSV file, not "
                         f"{'both' if name is not None else 'neither'} (name={name!r}, csv={csv_path!r})")
    if tasks is not None and not isinstance(tasks, str):
        tasks = list(tasks)
    if tasks is not None and not tasks:
        tasks = None
    pre = pre_transform(pe_dim, descriptors, pe_kind, hops)
    if csv_path is not None:
        cols = None
        if tasks is not None:
            header, _ = read_csv_table(csv_path, header_only=True)
            smiles_idx = find_column(header, smiles_col, csv_path, flag="smiles_col=, CLI --smiles-col")
            split_idx = (find_column(header, split_col, csv_path, flag="--split-col")
                         if split_col is not None else None)
            cols = resolve_tasks(tasks, [h for i, h in enumerate(header) if i not in (smiles_idx, split_idx)],
                                 str(csv_path))
        ds = MoleculeCSVDataset(csv_path, smiles_col, task_cols=cols, pre_transform=pre,
                                cache_dir=cache_dir(), log=log, limit=limit, binary=binary, split_col=split_col)
        names = list(ds.task_names)
    else:
        if split_col is not None:
            raise ValueError(f"--split-col names a column of --csv; the named set {name} reads its own split "
                             "column when it has one (zinc)")
        ds = MoleculeNetDataset(name=name.lower(), pre_transform=pre, cache_dir=cache_dir(), log=log, limit=limit)
        names = list(ds.task_names)
        if tasks is not None:
            chosen = resolve_tasks(tasks, names, name)
            ds.transform = SelectTasks([names.index(t) for t in chosen])
            names = chosen
    ds.task_names = names
    ds.descriptor_names = None if descriptors is None else list(descriptors)
    return ds


def warn_one_class_tasks(ds, source: str) -> None:
    """A task whose labels are all one class has no ROC-AUC in any split: say so before training
    (the per-split "undefined" messages come only after the first epoch). Training only:
    evaluating a checkpoint on a small labelled file is not told about the loss."""
    names = ds.task_names
    y = ds._data.y if getattr(ds, "_data", None) is not None else None
    if y is None or y.numel() == 0:
        return
    if isinstance(ds.transform, SelectTasks):
        y = y[:, ds.transform.cols]
    one = []
    for t, col in zip(names, y.T):
        seen = col[~torch.isnan(col)].unique().tolist()
        if len(seen) == 1:
            one.append(f"{t!r} (all {int(seen[0])}, {int((~torch.isnan(col)).sum())} labels)")
    if one:
        warnings.warn(f"{source}: task(s) {', '.join(one)} hold one class only: their ROC-AUC / PR-AUC is "
                      "undefined in every split and they are left out of the mean (they still add to the loss)",
                      stacklevel=3)


def check_split(split_idx, split: str = "scaffold") -> None:
    """``ValueError`` when a split leaves no training molecules; a warning when it leaves no
    validation or test molecules or less than half of them for training (a scaffold split of
    a set dominated by one scaffold)."""
    counts = [len(i) for i in split_idx]
    n, sizes = sum(counts), "/".join(str(c) for c in counts)
    if counts[0] == 0:
        hint = {"random": "use more data", "column": "give the split column training rows"}.get(
            split, "use --split random or more data")
        raise ValueError(f"the {split} split of {n} molecule{'s' if n != 1 else ''} left no training molecules "
                         f"(train/val/test {sizes}); {hint}")
    problems = [f"no {part} molecules" for part, c in zip(("validation", "test"), counts[1:]) if c == 0]
    if counts[0] < 0.5 * n:
        problems.append(f"only {counts[0]} of {n} molecules for training")
    if problems:
        effect = {"no validation molecules": "no early stopping: the epoch with the lowest training loss is kept",
                  "no test molecules": "no test metrics"}
        why = "; ".join(f"{p} ({effect[p]})" if p in effect else p for p in problems)
        warnings.warn(f"the {split} split of {n} molecules is lopsided (train/val/test {sizes}): {why}; "
                      f"{'use --split random or ' if split not in ('random', 'column') else ''}more data for a "
                      "meaningful evaluation",
                      UserWarning, stacklevel=3)


def column_split(ds) -> Tuple[Tensor, Tensor, Tensor]:
    """``(train, val, test)`` index tensors of the parts a dataset's split column names
    (``ds.split_labels``)."""
    labels = getattr(ds, "split_labels", None)
    if labels is None:
        raise ValueError(f"{getattr(ds, 'name', 'the dataset')} has no split column (--split-col COL names one of a CSV)")
    return tuple(torch.tensor([i for i, p in enumerate(labels) if p == part], dtype=torch.long)
                 for part in ("train", "val", "test"))


def split_indices(ds, split: str, seed: int, check: bool = True) -> Tuple[Tensor, Tensor, Tensor]:
    """``(train, val, test)`` index tensors of split ``split`` (:data:`SPLITS`, or ``"column"``: the
    dataset's split column, :func:`column_split`) of ``ds``; ``check``: :func:`check_split` them
    (error when train is empty, warning when lopsided)."""
    if split == "column":
        idx = column_split(ds)
    elif split in ("scaffold", "deepchem_scaffold"):
        idx = scaffold_split(ds.smiles, order="deepchem" if split == "deepchem_scaffold" else "chemprop")
    elif split == "balanced_scaffold":
        idx = balanced_scaffold_split(ds.smiles, seed=seed)
    elif split == "random":
        idx = random_split(len(ds), seed=seed)
    else:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if check:
        check_split(idx, split)
    return idx


def featurize(smiles: Sequence[str], pe_dim: int = 0, descriptors: Optional[Sequence[str]] = None,
              pe_kind: str = "laplacian", hops: int = 1) -> List[Union[Any, str]]:
    """One PyG graph per SMILES (with a PE of size ``pe_dim`` of ``pe_kind``, the RDKit
    descriptors ``descriptors`` and the hop edges of ``hops``, see :func:`pre_transform`), or
    the error message (str) for a SMILES RDKit cannot parse."""
    pe = pre_transform(pe_dim, descriptors, pe_kind, hops)
    out = []
    for s in smiles:
        try:
            data = smiles_to_data(s)
        except InvalidSmilesError as exc:
            out.append(exc.reason)
            continue
        out.append(pe(data) if pe is not None else data)
    return out


def graph_options(meta: Dict[str, Any]) -> Dict[str, Any]:
    """The keyword arguments of :func:`featurize` / :func:`load_dataset` that give a model the
    inputs it was trained on, from its checkpoint's meta (PE size and kind, descriptors, hops)."""
    return {"pe_dim": meta["pe"]["k"], "pe_kind": meta["pe"].get("kind", "laplacian"),
            "descriptors": meta.get("descriptors"), "hops": meta.get("hops", 1)}


def edge_vocab_sizes(hops: int = 1) -> List[int]:
    """The edge feature vocabularies of molecule graphs featurized with ``hops``: the bond
    columns (:data:`~graphattn.data.BOND_FEATURE_DIMS`), and for ``hops`` > 1 each with one more
    category ("no bond", on the added edges) and the hop distance column (1..``hops``)."""
    if hops <= 1:
        return list(BOND_FEATURE_DIMS)
    return [d + 1 for d in BOND_FEATURE_DIMS] + [hops + 1]


def unlabelled_tasks(ds) -> List[str]:
    """Task names of ``ds`` without a single present label among its molecules: training on
    such a task learns nothing (its loss is always masked out)."""
    import torch

    if len(ds) == 0 or not ds.task_names:
        return []
    y = getattr(getattr(ds, "_data", None), "y", None)  # an unsliced InMemoryDataset: one tensor
    if y is None or getattr(ds, "_indices", None) is not None or y.numel() != len(ds) * len(ds.task_names):
        y = torch.cat([d.y.view(1, -1) for d in ds])
    y = y.view(len(ds), len(ds.task_names))
    labelled = (~torch.isnan(y.float())).any(0)
    return [t for t, ok in zip(ds.task_names, labelled.tolist()) if not ok]


def file_sha256(ds):
    """sha256 of the CSV a dataset was read from (``None`` if unknown): ``evaluate`` re-reads
    that file to rebuild the split and warns when it has changed since training."""
    path = getattr(ds, "raw_path", None)
    return sha256sum(path) if path is not None and Path(path).is_file() else None

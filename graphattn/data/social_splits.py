"""Splits of the social sets: stratified node masks, stratified K folds, published fold files.

:func:`stratified_masks` (node classification: seeded per-class train/val/test masks),
:func:`stratified_folds` (graph classification sets that ship no folds; scikit-learn,
imported lazily) and :func:`load_tu_folds` (the DGCNN/GIN ``10fold_idx`` files).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from graphattn.data.download import DataFileError, PathLike
from graphattn.data.rawio import parse_int_tokens, read_bytes, sorted_unique
from graphattn.data.splits import stratified_split

__all__ = ["stratified_masks", "stratified_folds", "load_tu_folds"]


def stratified_masks(y: Tensor, train: float = 0.6, val: float = 0.2, seed: int = 0
                     ) -> Tuple[Tensor, Tensor, Tensor]:
    """Seeded stratified train/val/test boolean masks (default 60/20/20 per class).

    Within each class the nodes are shuffled with ``seed``; the first
    ``round(train * n_c)`` go to train, the next ``round(val * n_c)`` to val, the rest to
    test (a non-empty class always keeps at least one training node). When that leaves val or
    test empty although the labelled nodes could fill them (many classes of one or two nodes),
    the part sizes are shared over the classes instead (:func:`~graphattn.data.splits.stratified_split`;
    there a class of a single node may land in val or test, with no training node).
    Nodes with a negative label (unlabelled) are in no mask. Fully vectorised.
    """
    if not (0 < train < 1 and 0 <= val < 1 and train + val <= 1):
        raise ValueError(f"bad split ratios train={train}, val={val}")
    y = torch.as_tensor(y).view(-1).long().cpu()
    n = y.numel()
    gen = torch.Generator().manual_seed(int(seed))
    labelled = y >= 0
    if not bool(labelled.any()):
        empty = torch.zeros(n, dtype=torch.bool)
        return empty, empty.clone(), empty.clone()
    key = torch.rand(n, generator=gen, dtype=torch.float64)
    yl = torch.where(labelled, y, torch.full_like(y, -1))
    order = torch.argsort(yl.double() * 2.0 + key)  # group by class, random within class
    ys = yl[order]
    counts = torch.bincount(ys[ys >= 0], minlength=int(y.max().item()) + 1 if n else 0)
    starts = torch.cumsum(counts, 0) - counts
    n_unl = int((ys < 0).sum())
    rank = torch.zeros(n, dtype=torch.long)
    lab = ys >= 0
    rank[lab] = torch.arange(n - n_unl) - starts[ys[lab]]
    n_c = counts[ys.clamp(min=0)].double()
    n_tr = torch.clamp(torch.round(n_c * train), min=1)
    n_va = torch.round(n_c * val)
    r = rank.double()
    tr_s, va_s = lab & (r < n_tr), lab & (r >= n_tr) & (r < n_tr + n_va)
    te_s = lab & (r >= n_tr + n_va)
    masks = []
    for m in (tr_s, va_s, te_s):
        out = torch.zeros(n, dtype=torch.bool)
        out[order] = m
        masks.append(out)
    n_lab = int(labelled.sum())
    test = 1.0 - train - val
    if (val > 0 and not bool(masks[1].any()) and n_lab * val >= 1) or \
            (test > 1e-9 and not bool(masks[2].any()) and n_lab * test >= 1):
        # many small classes: rounding per class left val or test empty although the whole set
        # can fill them; share the part sizes over the classes instead (other splits unchanged)
        idx = labelled.nonzero().view(-1)
        parts = stratified_split(y[idx], (train, val, max(test, 0.0)), seed=seed)
        masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
        for mask, part in zip(masks, parts):
            mask[idx[part]] = True
    return masks[0], masks[1], masks[2]


def load_tu_folds(folder: PathLike, num_graphs: Optional[int] = None
                  ) -> List[Tuple[Tensor, Tensor]]:
    """``[(train_idx, test_idx), ...]`` from ``folder`` (or ``folder/10fold_idx``).

    Files ``train_idx-K.txt`` / ``test_idx-K.txt``, K = 1, 2, ...: 0-based graph indices,
    one per line. Each fold is checked: train and test disjoint, no duplicates, and, when
    ``num_graphs`` is given, indices in range and train + test = all graphs.
    """
    folder = Path(folder)
    if (folder / "10fold_idx").is_dir():
        folder = folder / "10fold_idx"
    ks = sorted(int(m.group(1)) for f in folder.glob("test_idx-*.txt")
                if (m := re.fullmatch(r"test_idx-(\d+)\.txt", f.name)))
    if not ks:
        raise DataFileError(f"{folder}: no test_idx-K.txt files")
    if ks != list(range(ks[0], ks[0] + len(ks))):
        raise DataFileError(f"{folder}: the fold files are numbered {ks}: a fold is missing "
                            "(expected consecutive numbers, e.g. 1..10)")
    folds = []
    for k in ks:
        parts = []
        for kind in ("train", "test"):
            f = folder / f"{kind}_idx-{k}.txt"
            if not f.is_file():
                raise DataFileError(f"{f} is missing")
            idx = parse_int_tokens(read_bytes(f).removeprefix(b"\xef\xbb\xbf"), str(f))  # BOM
            if sorted_unique(idx).size != idx.size:
                raise DataFileError(f"{f}: duplicated graph indices")
            if num_graphs is not None and idx.size and (idx.min() < 0 or idx.max() >= num_graphs):
                raise DataFileError(f"{f}: index out of range for {num_graphs} graphs")
            parts.append(idx)
        tr, te = parts
        if np.intersect1d(tr, te).size:
            raise DataFileError(f"fold {k} in {folder}: train and test overlap")
        if num_graphs is not None and tr.size + te.size != num_graphs:
            raise DataFileError(f"fold {k} in {folder}: {tr.size}+{te.size} indices, "
                                f"expected {num_graphs} graphs")
        folds.append((torch.from_numpy(tr), torch.from_numpy(te)))
    return folds


def stratified_folds(y: Tensor, n_folds: int = 10, seed: int = 0) -> List[Tuple[Tensor, Tensor]]:
    """Seeded stratified K-fold split (scikit-learn), for sets that ship no fold files."""
    from sklearn.model_selection import StratifiedKFold  # scikit-learn takes ~0.7 s to import: only here

    y = torch.as_tensor(y).view(-1).cpu().numpy()
    if not 2 <= n_folds <= len(y):
        raise ValueError(f"cannot make {n_folds} folds of {len(y)} graphs: use between 2 and "
                         f"{max(len(y), 2)} folds")
    counts = np.bincount(y[y >= 0]) if y.size else np.zeros(0, dtype=np.int64)
    largest = int(counts.max()) if counts.size else 0
    if largest < n_folds:  # scikit-learn refuses this (a smaller class alone only gets its warning)
        raise ValueError(f"cannot make {n_folds} stratified folds: no class has {n_folds} graphs (graphs per "
                         f"class: {counts.tolist()}) — "
                         + (f"use at most {largest} folds" if largest >= 2 else "add graphs: folds need a class "
                            "with at least 2"))
    skf = StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=seed)
    return [(torch.from_numpy(tr.astype(np.int64)), torch.from_numpy(te.astype(np.int64)))
            for tr, te in skf.split(np.zeros(len(y)), y)]

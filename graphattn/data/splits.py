"""Train/validation/test splits: random, Bemis–Murcko scaffold, balanced scaffold, stratified.

Every function returns three sorted ``LongTensor`` s of indices ``(train, val, test)`` that
partition ``range(n)``. ``frac`` is ``(train, val, test)``, non-negative, summing to 1.

Scaffold splits follow chemprop (``chemprop.data.scaffold``) and DeepChem
(``ScaffoldSplitter``): molecules are grouped by their Bemis–Murcko scaffold (RDKit
``MurckoScaffoldSmiles(includeChirality=False)``), and whole groups are assigned, so no
scaffold ever appears in two splits. Acyclic molecules share the empty scaffold (one
group); a SMILES RDKit cannot parse forms a group of its own. RDKit is imported lazily.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

__all__ = ["random_split", "scaffold_split", "balanced_scaffold_split", "stratified_split",
           "murcko_scaffold", "scaffold_groups"]

Split = Tuple[Tensor, Tensor, Tensor]


def _check_frac(frac) -> Tuple[float, float, float]:
    frac = tuple(float(f) for f in frac)
    if len(frac) != 3 or min(frac) < 0 or not math.isclose(sum(frac), 1.0, abs_tol=1e-6):
        raise ValueError(f"frac must be three non-negative fractions (train, val, test) "
                         f"summing to 1, got {frac}")
    return frac


def _as_split(train, val, test) -> Split:
    return tuple(torch.tensor(sorted(part), dtype=torch.long) for part in (train, val, test))


def random_split(n: int, frac=(0.8, 0.1, 0.1), seed: int = 0) -> Split:
    """Uniformly random split of ``range(n)`` (chemprop sizes: ``int(f0 n)`` train,
    ``int((f0 + f1) n) - int(f0 n)`` val, the rest test)."""
    f = _check_frac(frac)
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    a, b = int(f[0] * n), int((f[0] + f[1]) * n)
    return _as_split(perm[:a], perm[a:b], perm[b:])


def murcko_scaffold(smiles: str) -> Optional[str]:
    """Bemis–Murcko scaffold SMILES without chirality ("" if acyclic); ``None`` if unparsable
    (by :func:`graphattn.data.featurize.parse_smiles`, e.g. whitespace inside the SMILES)."""
    from rdkit import rdBase
    from rdkit.Chem.Scaffolds import MurckoScaffold

    from .featurize import InvalidSmilesError, parse_smiles

    try:
        mol = parse_smiles(smiles)
    except InvalidSmilesError:
        return None
    with rdBase.BlockLogs():
        try:
            return MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False)
        except Exception:  # RDKit errors on exotic inputs: treat as unparsable
            return None


def scaffold_groups(smiles: Sequence[str]) -> List[List[int]]:
    """Indices grouped by scaffold, groups in order of first occurrence."""
    groups: Dict[object, List[int]] = {}
    for i, s in enumerate(smiles):
        scaffold = murcko_scaffold(s)
        key = ("unparsable", i) if scaffold is None else scaffold
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def _fill(groups: List[List[int]], n: int, f) -> Split:
    """chemprop's greedy assignment: a group goes to train if it fits, else val, else test."""
    train_size, val_size = f[0] * n, f[1] * n
    train, val, test = [], [], []
    for group in groups:
        if len(train) + len(group) <= train_size:
            train += group
        elif len(val) + len(group) <= val_size:
            val += group
        else:
            test += group
    return _as_split(train, val, test)


def scaffold_split(smiles: Sequence[str], frac=(0.8, 0.1, 0.1)) -> Split:
    """Deterministic scaffold split: largest scaffold groups first (DeepChem/chemprop).

    Groups are sorted by size, largest first (ties: first occurrence first), and each goes
    to train if it still fits in ``frac[0] * n``, else to val if it fits in
    ``frac[1] * n``, else to test. Train thus holds the common scaffolds, val/test the
    rarer ones — the harder, out-of-distribution evaluation.
    """
    f = _check_frac(frac)
    groups = sorted(scaffold_groups(smiles), key=len, reverse=True)  # stable: ties by first index
    return _fill(groups, len(smiles), f)


def balanced_scaffold_split(smiles: Sequence[str], frac=(0.8, 0.1, 0.1), seed: int = 0) -> Split:
    """chemprop's balanced scaffold split: seeded, so several seeds give different splits.

    Groups larger than half the val or the test size go first (they could not fit in
    val/test anyway), then the rest; each part is shuffled with ``seed``; groups are then
    assigned as in :func:`scaffold_split`.
    """
    f = _check_frac(frac)
    n = len(smiles)
    groups = scaffold_groups(smiles)
    big = [g for g in groups if len(g) > f[1] * n / 2 or len(g) > f[2] * n / 2]
    small = [g for g in groups if not (len(g) > f[1] * n / 2 or len(g) > f[2] * n / 2)]
    gen = torch.Generator().manual_seed(seed)
    big = [big[i] for i in torch.randperm(len(big), generator=gen).tolist()]
    small = [small[i] for i in torch.randperm(len(small), generator=gen).tolist()]
    return _fill(big + small, n, f)


def stratified_split(labels, frac=(0.8, 0.1, 0.1), seed: int = 0) -> Split:
    """Random split that keeps each class's proportion in every part.

    ``labels``: ``(n,)`` integer class labels (tensor, array or list). Per class with
    ``m`` members, ``round(f0 m)`` go to train, ``round(f1 m)`` (capped at what is left)
    to val and the rest to test.
    """
    f = _check_frac(frac)
    labels = torch.as_tensor(labels)
    if labels.dim() != 1:
        raise ValueError(f"labels must have shape (n,), got {tuple(labels.shape)}")
    gen = torch.Generator().manual_seed(seed)
    train, val, test = [], [], []
    for c in torch.unique(labels).tolist():
        idx = (labels == c).nonzero().view(-1)
        idx = idx[torch.randperm(idx.numel(), generator=gen)].tolist()
        m = len(idx)
        a = min(m, int(round(f[0] * m)))
        b = min(m, a + int(round(f[1] * m)))
        train += idx[:a]
        val += idx[a:b]
        test += idx[b:]
    return _as_split(train, val, test)

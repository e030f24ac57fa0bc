"""Train/validation/test splits: random, Bemis–Murcko scaffold, balanced scaffold, stratified.

Every function returns three sorted ``LongTensor`` s of indices ``(train, val, test)`` that
partition ``range(n)``. ``frac`` is ``(train, val, test)``, non-negative, summing to 1.

Scaffold splits group molecules by their Bemis–Murcko scaffold (RDKit
``MurckoScaffoldSmiles(includeChirality=False)``) and assign whole groups, largest first, so
no scaffold ever appears in two splits. Acyclic molecules share the empty scaffold (one
group); a SMILES RDKit cannot parse forms a group of its own. Two conventions exist and
give different val/test sets (on Tox21 their test sets share no molecule: the order of the
many equal-size groups decides who is tested): chemprop's (``chemprop.data.scaffold``; ties of
equal size in order of first occurrence) is :func:`scaffold_split`'s default; DeepChem's
``ScaffoldSplitter`` (ties broken by the *last* first occurrence; DGL-LifeSci's
``ScaffoldSplitter`` sorts the same way) is ``order="deepchem"``. Hu et al. 2020's pretrain-gnns (and OGB's MoleculeNet splits) use
DeepChem's order on scaffolds *with* chirality, which moves a few molecules (Tox21: 43 of
783 test molecules differ from ``order="deepchem"``).
RDKit is imported lazily.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from graphattn.data.featurize import InvalidSmilesError, parse_smiles

__all__ = ["SCAFFOLD_ORDERS", "random_split", "scaffold_split", "balanced_scaffold_split", "stratified_split",
           "murcko_scaffold", "scaffold_groups"]

Split = Tuple[Tensor, Tensor, Tensor]


def _check_frac(frac) -> Tuple[float, float, float]:
    frac = tuple(float(f) for f in frac)
    if len(frac) != 3 or min(frac) < 0 or not math.isclose(sum(frac), 1.0, abs_tol=1e-6):
        raise ValueError(f"frac must be three non-negative fractions (train, val, test) "
                         f"summing to 1, got {frac}")
    return frac


def _floor(x: float) -> int:
    """``int(x)`` that forgives float noise: ``(0.7 + 0.2) * 100`` is 89.99999999999999."""
    return int(math.floor(x + 1e-9))


def _as_split(train, val, test) -> Split:
    return tuple(torch.tensor(sorted(part), dtype=torch.long) for part in (train, val, test))


def random_split(n: int, frac=(0.8, 0.1, 0.1), seed: int = 0) -> Split:
    """Uniformly random split of ``range(n)`` (chemprop sizes: ``int(f0 n)`` train,
    ``int((f0 + f1) n) - int(f0 n)`` val, the rest test)."""
    f = _check_frac(frac)
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    a, b = _floor(f[0] * n), _floor((f[0] + f[1]) * n)
    return _as_split(perm[:a], perm[a:b], perm[b:])


def murcko_scaffold(smiles: str) -> Optional[str]:
    """Bemis–Murcko scaffold SMILES without chirality ("" if acyclic); ``None`` if unparsable
    (by :func:`graphattn.data.featurize.parse_smiles`, e.g. whitespace inside the SMILES)."""
    from rdkit import rdBase  # optional dependency: `import graphattn` works without RDKit
    from rdkit.Chem.Scaffolds import MurckoScaffold

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


def _fill(groups: List[List[int]], n: int, f, deepchem: bool = False) -> Split:
    """Greedy assignment: a group goes to train if it fits in ``f0 n``, else to val if it fits
    (chemprop: val alone in ``f1 n``; DeepChem: train + val in ``(f0 + f1) n``), else to test."""
    train_size, val_size = f[0] * n, f[1] * n
    train, val, test = [], [], []
    for group in groups:
        if len(train) + len(group) <= train_size:
            train += group
        elif len(val) + len(group) + (len(train) if deepchem else 0) <= val_size + (train_size if deepchem else 0):
            val += group
        else:
            test += group
    return _as_split(train, val, test)


SCAFFOLD_ORDERS = ("chemprop", "deepchem")


def scaffold_split(smiles: Sequence[str], frac=(0.8, 0.1, 0.1), order: str = "chemprop") -> Split:
    """Deterministic scaffold split: largest scaffold groups to train.

    Groups are sorted by size, largest first, and each goes to train if it still fits in
    ``frac[0] * n``, else to val if it fits, else to test. Train thus holds the common
    scaffolds, val/test the rarer ones — the harder, out-of-distribution evaluation.

    ``order``: ``"chemprop"`` (default; chemprop's ``scaffold_split``): ties of equal size in
    order of first occurrence, val filled up to ``frac[1] * n``. ``"deepchem"``: DeepChem's
    ``ScaffoldSplitter``: groups sorted by ``(size, first index)`` descending — among equal
    sizes the group seen *last* comes first — and val filled while train + val fit in
    ``(frac[0] + frac[1]) * n`` (DGL-LifeSci's ``ScaffoldSplitter`` too; Hu et al. 2020 / OGB:
    the same on chiral scaffolds).
    Published scaffold-split numbers are only comparable under the same convention.
    """
    f = _check_frac(frac)
    if order == "chemprop":
        groups = sorted(scaffold_groups(smiles), key=len, reverse=True)  # stable: ties by first index
        return _fill(groups, len(smiles), f)
    if order == "deepchem":
        groups = sorted(scaffold_groups(smiles), key=lambda g: (len(g), g[0]), reverse=True)
        return _fill(groups, len(smiles), f, deepchem=True)
    raise ValueError(f"order must be one of {SCAFFOLD_ORDERS}, got {order!r}")


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

    ``labels``: ``(n,)`` integer class labels (tensor, array or list). The part sizes are
    ``round(f0 n)`` train and ``round(f1 n)`` val (the rest test), shared out over the
    classes in proportion to their sizes by largest remainders (ties drawn with ``seed``),
    as scikit-learn's ``StratifiedShuffleSplit`` does: small classes do not leave val or
    test empty when the whole set can fill them (5 + 5 labels give 8 / 1 / 1).
    """
    f = _check_frac(frac)
    labels = torch.as_tensor(labels)
    if labels.dim() != 1:
        raise ValueError(f"labels must have shape (n,), got {tuple(labels.shape)}")
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(labels.numel(), generator=gen)
    perm = perm[torch.sort(labels[perm], stable=True).indices]  # grouped by class, shuffled within
    counts = torch.unique_consecutive(labels[perm], return_counts=True)[1].tolist()
    members = list(torch.split(perm, counts)) if counts else []
    members = [m.tolist() for m in members]
    left = [len(m) for m in members]
    n = sum(left)
    n_train = min(n, int(math.floor(f[0] * n + 0.5)))
    n_val = min(n - n_train, int(math.floor(f[1] * n + 0.5)))
    n_train_c = _share(n_train, [f[0] * m for m in left], left, gen)
    left = [m - t for m, t in zip(left, n_train_c)]
    rest = f[1] + f[2]
    n_val_c = _share(n_val, [(f[1] / rest if rest > 0 else 0.0) * m for m in left], left, gen)
    train, val, test = [], [], []
    for idx, a, b in zip(members, n_train_c, n_val_c):
        train += idx[:a]
        val += idx[a:a + b]
        test += idx[a + b:]
    return _as_split(train, val, test)


def _share(total: int, want: List[float], cap: List[int], gen: torch.Generator) -> List[int]:
    """Integer counts summing to ``total`` (<= sum(cap)), close to ``want`` per class: the floors
    first, then one more to the largest remainders (ties in a ``gen``-drawn order), within ``cap``."""
    out = [min(c, int(math.floor(w + 1e-9))) for w, c in zip(want, cap)]
    order = torch.randperm(len(want), generator=gen).tolist()
    need = total - sum(out)
    while need > 0:
        grow = sorted((k for k in order if out[k] < cap[k]), key=lambda k: out[k] - want[k])  # stable
        if not grow:
            break
        for k in grow[:need]:
            out[k] += 1
        need = total - sum(out)
    return out

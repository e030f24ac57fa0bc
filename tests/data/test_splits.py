import csv
import gzip

import pytest
import torch

from graphattn.data.splits import (balanced_scaffold_split, random_split, scaffold_split,
                                   stratified_split)
from graphattn.testing import requires_data, shared_data_dir


def assert_partition(parts, n):
    assert all(p.dtype == torch.long and p.dim() == 1 for p in parts)
    assert torch.cat(parts).sort().values.tolist() == list(range(n))


def scaffold_of(smiles):
    from graphattn.data.splits import murcko_scaffold
    return [murcko_scaffold(s) for s in smiles]


def assert_no_scaffold_straddles(parts, smiles):
    scaffolds = scaffold_of(smiles)
    sets = [{scaffolds[i] for i in p.tolist() if scaffolds[i] is not None} for p in parts]
    assert not sets[0] & sets[1] and not sets[0] & sets[2] and not sets[1] & sets[2]


# 10 benzenes, 6 pyridines, 4 cyclohexanes, 3 naphthalenes, 3 acyclics, 2 unparsable, ...
SMILES = (["c1ccccc1" + s for s in ["C", "O", "N", "Cl", "F", "Br", "CC", "CO", "CN", "C=O"]]
          + ["c1ccncc1" + s for s in ["C", "O", "N", "Cl", "F", "Br"]]
          + ["C1CCCCC1" + s for s in ["C", "O", "N", "Cl"]]
          + ["c1ccc2ccccc2c1" + s for s in ["C", "O", "N"]]
          + ["CCO", "CCCC", "CC(=O)O", "not_a_smiles", "C1CC"]
          + ["C1CCC1", "O=C1CCCN1", "c1ccoc1", "c1ccsc1", "C1CCOC1", "C1CCNCC1", "c1cnccn1"])


def test_frac_is_validated():
    with pytest.raises(ValueError, match="frac"):
        random_split(10, frac=(0.8, 0.1))
    with pytest.raises(ValueError, match="frac"):
        scaffold_split(SMILES, frac=(0.8, 0.3, 0.1))
    with pytest.raises(ValueError, match="frac"):
        stratified_split([0, 1], frac=(1.2, -0.1, -0.1))


def test_random_split():
    train, val, test = random_split(100, (0.8, 0.1, 0.1), seed=0)
    assert_partition((train, val, test), 100)
    assert (len(train), len(val), len(test)) == (80, 10, 10)
    again = random_split(100, seed=0)
    assert all(torch.equal(a, b) for a, b in zip((train, val, test), again))
    assert not torch.equal(random_split(100, seed=1)[0], train)
    assert_partition(random_split(0), 0)


def test_scaffold_split_groups_whole_scaffolds_largest_first():
    n = len(SMILES)
    parts = scaffold_split(SMILES, (0.7, 0.15, 0.15))
    assert_partition(parts, n)
    assert_no_scaffold_straddles(parts, SMILES)
    train = set(parts[0].tolist())
    assert set(range(10)) <= train  # the largest group (benzenes) goes to train first
    assert set(range(10, 16)) <= train  # then the pyridines
    assert len(parts[0]) <= 0.7 * n
    # unparsable SMILES each form their own group and are still assigned
    bad = [SMILES.index("not_a_smiles"), SMILES.index("C1CC")]
    assert all(any(b in p.tolist() for p in parts) for b in bad)
    # deterministic
    assert all(torch.equal(a, b) for a, b in zip(parts, scaffold_split(SMILES, (0.7, 0.15, 0.15))))


def test_balanced_scaffold_split_is_seeded():
    n = len(SMILES)
    frac = (0.6, 0.2, 0.2)
    splits = {s: balanced_scaffold_split(SMILES, frac, seed=s) for s in range(4)}
    for parts in splits.values():
        assert_partition(parts, n)
        assert_no_scaffold_straddles(parts, SMILES)
        # groups bigger than half the val/test size (benzenes: 10 > 0.2 * 40 / 2) go to train
        assert set(range(10)) <= set(parts[0].tolist())
    same = balanced_scaffold_split(SMILES, frac, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(splits[0], same))
    distinct = {tuple(p[1].tolist()) for p in splits.values()}
    assert len(distinct) > 1, "different seeds must give different validation sets"


def test_stratified_split_keeps_class_proportions():
    labels = torch.tensor([0] * 50 + [1] * 30 + [2] * 20)
    labels = labels[torch.randperm(100, generator=torch.Generator().manual_seed(3))]
    train, val, test = stratified_split(labels, (0.6, 0.2, 0.2), seed=0)
    assert_partition((train, val, test), 100)
    for part, f in ((train, 0.6), (val, 0.2), (test, 0.2)):
        counts = torch.bincount(labels[part], minlength=3).tolist()
        assert counts == [round(50 * f), round(30 * f), round(20 * f)]
    assert torch.equal(stratified_split(labels, (0.6, 0.2, 0.2), seed=0)[0], train)
    assert not torch.equal(stratified_split(labels, (0.6, 0.2, 0.2), seed=1)[0], train)
    with pytest.raises(ValueError, match="labels"):
        stratified_split(torch.zeros(4, 2))


@requires_data("tox21/tox21.csv.gz")
def test_scaffold_splits_on_tox21():
    with gzip.open(shared_data_dir() / "tox21" / "tox21.csv.gz", "rt", newline="") as f:
        smiles = [row[0] for row in list(csv.reader(f))[1:]][:2000]
    n = len(smiles)
    parts = scaffold_split(smiles)
    assert_partition(parts, n)
    assert_no_scaffold_straddles(parts, smiles)
    sizes = [len(p) / n for p in parts]
    assert sizes[0] == pytest.approx(0.8, abs=0.01) and sizes[1] == pytest.approx(0.1, abs=0.01)
    assert all(torch.equal(a, b) for a, b in zip(parts, scaffold_split(smiles)))

    b0, b1 = balanced_scaffold_split(smiles, seed=0), balanced_scaffold_split(smiles, seed=1)
    for parts in (b0, b1):
        assert_partition(parts, n)
        assert_no_scaffold_straddles(parts, smiles)
    assert not torch.equal(b0[2], b1[2])

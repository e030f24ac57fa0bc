import csv
import gzip

import pytest
import torch

from graphattn.data import balanced_scaffold_split, murcko_scaffold, random_split, scaffold_split, stratified_split
from graphattn.testing import requires_data, shared_data_dir


def assert_partition(parts, n):
    assert all(p.dtype == torch.long and p.dim() == 1 for p in parts)
    assert torch.cat(parts).sort().values.tolist() == list(range(n))


def scaffold_of(smiles):
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


def _deepchem_scaffold_reference(smiles, frac_train=0.8, frac_valid=0.1):
    """DeepChem's ScaffoldSplitter.split, transcribed from its documented algorithm."""
    scaffolds = {}
    for i, s in enumerate(smiles):
        key = scaffold_of([s])[0]  # "" for acyclic molecules (one group), None for unparsable
        scaffolds.setdefault(("none", i) if key is None else key, []).append(i)
    sets = [v for _, v in sorted(scaffolds.items(), key=lambda x: (len(x[1]), x[1][0]), reverse=True)]
    train_cutoff, valid_cutoff = frac_train * len(smiles), (frac_train + frac_valid) * len(smiles)
    train, valid, test = [], [], []
    for s in sets:
        if len(train) + len(s) > train_cutoff:
            if len(train) + len(valid) + len(s) > valid_cutoff:
                test += s
            else:
                valid += s
        else:
            train += s
    return [sorted(p) for p in (train, valid, test)]


def test_scaffold_split_deepchem_order():
    # many equal-size groups: the tie order decides which molecules are tested
    smiles = SMILES + ["c1ccc(cc1)C1CC1", "C1CCC(CC1)C1CCCC1", "c1ccc2[nH]ccc2c1", "c1ccc2occc2c1",
                       "C1CC2CCC1C2", "c1cc[nH]c1", "c1ncncn1", "C1CCCCCC1"]
    ours = scaffold_split(smiles, order="deepchem")
    assert [p.tolist() for p in ours] == _deepchem_scaffold_reference(smiles)
    assert_partition(ours, len(smiles))
    assert_no_scaffold_straddles(ours, smiles)
    chemprop = scaffold_split(smiles)
    assert chemprop[0].tolist()[:10] == ours[0].tolist()[:10]  # the largest groups go to train either way
    assert ours[2].tolist() != chemprop[2].tolist()  # but val/test differ
    with pytest.raises(ValueError, match="order"):
        scaffold_split(smiles, order="dgl")


def test_split_sizes_forgive_float_noise_and_small_classes():
    assert [len(p) for p in random_split(100, (0.7, 0.2, 0.1))] == [70, 20, 10]  # 0.7 + 0.2 < 0.9 in floats
    assert [len(p) for p in random_split(30, (0.6, 0.3, 0.1))] == [18, 9, 3]
    # 5 + 5 labels: 8 / 1 / 1 over the whole set, not 4 / 0 / 1 per class
    parts = stratified_split([0] * 5 + [1] * 5)
    assert [len(p) for p in parts] == [8, 1, 1]
    assert [len(p) for p in stratified_split([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])] == [10, 1, 1]
    labels = torch.randint(0, 300, (20000,), generator=torch.Generator().manual_seed(0))
    parts = stratified_split(labels)
    assert_partition(parts, 20000)
    assert [len(p) for p in parts] == [16000, 2000, 2000]
    for c in range(0, 300, 37):  # each class within one of its share in every part
        m = int((labels == c).sum())
        for p, f in zip(parts, (0.8, 0.1, 0.1)):
            assert abs(int((labels[p] == c).sum()) - f * m) < 1.5
    assert [len(p) for p in stratified_split([])] == [0, 0, 0]

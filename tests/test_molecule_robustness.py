"""Bad input to the molecule API and CLI: non-binary labels, empty or lopsided splits,
whitespace inside SMILES, the cache location, gzipped / oddly-cased CSVs for predict and
evaluate, predict column collisions, task names with commas, ``--out`` folders, models
without attention, ``--limit`` and conflicting dataset options.

All fixtures are written into ``tmp_path``; models are tiny (1 epoch, no descriptors unless
they are the point). The featurized cache goes to a private ``$GRAPHATTN_CACHE``.
"""
from __future__ import annotations

import csv
import gzip
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("rdkit")

from graphattn.cli import main as cli
from graphattn.cli import molecules_predict as molecule_commands
from graphattn.tasks.molecules import data as md  # noqa: E402
from graphattn.tasks.molecules import pipeline as mp  # noqa: E402
from graphattn.data import molecules  # noqa: E402
from graphattn.data.molecules import (SIDER_TASKS, TOXICITY_DATASETS,  # noqa: E402
                                      InvalidSmilesError, MoleculeCSVDataset, TaskColumnWarning,
                                      ToxicityDataset, smiles_to_data)
from graphattn.data.download import DataFileError  # noqa: E402
from graphattn.testing import shared_data_dir  # noqa: E402
from graphattn.train import load_checkpoint, save_checkpoint  # noqa: E402

TINY = ["--hidden", "16", "--layers", "1", "--heads", "2", "--pe-dim", "4", "--batch-size", "16",
        "--epochs", "1", "--no-progress", "--no-descriptors"]
#: 40 valid molecules with several scaffolds; ``toxic`` = has Cl, ``active`` = aromatic
SMILES = ["CCO", "CCCl", "c1ccccc1", "Clc1ccccc1", "CC(=O)O", "ClCC(=O)O", "c1ccncc1", "Clc1ccncc1",
          "CCN", "CCCCl", "Cc1ccccc1", "Cc1ccc(Cl)cc1", "C1CCCCC1", "ClC1CCCCC1", "Oc1ccccc1",
          "Oc1ccc(Cl)cc1", "CCCC", "CC(C)Cl", "c1ccc2ccccc2c1", "Clc1ccc2ccccc2c1", "C1CCNCC1",
          "ClC1CCNCC1", "Nc1ccccc1", "Nc1ccc(Cl)cc1", "CCOCC", "ClCCOCC", "c1ccoc1", "Clc1ccoc1",
          "C1CCOC1", "ClC1CCOC1", "O=C(O)c1ccccc1", "O=C(O)c1ccc(Cl)cc1", "CC(C)O", "CC(Cl)CO",
          "c1ccsc1", "Clc1ccsc1", "C1CC1", "ClC1CC1", "CCc1ccccc1", "CCc1ccc(Cl)cc1"]


def _labels(s):
    return int("Cl" in s), int(any(c.islower() for c in s.replace("Cl", "")))


def write_csv(path: Path, header, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def train_csv(path: Path) -> Path:
    return write_csv(path, ["smiles", "toxic", "active"], [(s, *_labels(s)) for s in SMILES])


@pytest.fixture(scope="module")
def mpatch():
    patch = pytest.MonkeyPatch()
    yield patch
    patch.undo()


@pytest.fixture(scope="module", autouse=True)
def _env(tmp_path_factory, mpatch):
    """One torch thread and a private processed-data cache for every test here."""
    mpatch.setenv("GRAPHATTN_CACHE", str(tmp_path_factory.mktemp("cache")))
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny model trained on the 40-molecule CSV (random split): ``(folder, csv)``."""
    root = tmp_path_factory.mktemp("run")
    src = train_csv(root / "train.csv")
    assert cli.main(["train", "--csv", str(src), "--split", "random", "--out", str(root / "run"), *TINY]) == 0
    return root / "run", src


# ----------------------------------------------------------------------------- 1. binary labels
def test_inference_keeps_binary_columns_and_names_the_others_in_one_warning(tmp_path):
    rows = [(s, i + 101, f"{0.1 * i:.1f}", "O" if i == 5 else str(_labels(s)[0]), "",
             ["0.0", "1.0", ""][i % 3], ["True", "false", "TRUE"][i % 3], _labels(s)[1])
            for i, s in enumerate(SMILES[:9])]
    src = write_csv(tmp_path / "m.csv", ["smiles", "cid", "conc", "typo", "empty", "floats", "bools", "act"], rows)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False, binary=True)
    assert ds.task_names == ["floats", "bools", "act"]
    assert ds.y[:3, :2].tolist()[:2] == [[0.0, 1.0], [1.0, 0.0]] and torch.isnan(ds.y[2, 0])
    msgs = [str(w.message) for w in caught if issubclass(w.category, TaskColumnWarning)]
    assert len(msgs) == 1
    msg = msgs[0]
    assert "'conc' (row 3 has '0.1'" in msg  # row 2: 0.0 is fine
    assert "cid" not in msg and dict(ds.skipped_columns)["cid"] == "id/name column"  # an identifier
    assert "'typo' (row 7 has 'O'" in msg and "'empty' (every cell empty)" in msg
    assert dict(ds.skipped_columns)["typo"].startswith("row 7 has 'O'")


@pytest.mark.parametrize("bad", ["-1", "0.5", "2", "inf", "-inf", "yes"])
def test_explicit_task_with_non_binary_label_names_column_row_and_value(tmp_path, bad):
    src = write_csv(tmp_path / "m.csv", ["smiles", "y"], [("CCO", "1"), ("CCN", ""), ("CCC", bad)])
    with pytest.raises(ValueError, match=rf"row 4, column 'y': label '{bad}' is not .*binary"):
        MoleculeCSVDataset(src, task_cols=["y"], cache_dir=tmp_path / "c", log=False, binary=True)


def test_cli_train_and_evaluate_refuse_non_binary_labels(run, tmp_path, capsys):
    src = write_csv(tmp_path / "e.csv", ["smiles", "toxic", "active"],
                    [(s, [0, 1, 2][i % 3], 1) for i, s in enumerate(SMILES)])
    assert cli.main(["train", "--csv", str(src), "--tasks", "toxic", "--split", "random", *TINY]) == 2
    assert "row 4, column 'toxic': label '2' is not 0 or 1" in capsys.readouterr().err
    assert cli.main(["evaluate", "--checkpoint", str(run[0] / "best.pt"), "--csv", str(src), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphattn evaluate:") and "label '2'" in err and "Traceback" not in err


def test_shared_toxicity_sets_keep_their_task_counts():
    root = shared_data_dir()
    if root is None or not (root / "clintox").is_dir():
        pytest.skip("shared clintox not available")
    ds = ToxicityDataset(root=root, name="clintox", download=False, log=False, limit=25)
    assert ds.task_names == ["FDA_APPROVED", "CT_TOX"] and len(ds) == 25


# ----------------------------------------------------------------------------- 2. empty splits
@pytest.mark.parametrize("desc", ["--no-descriptors", "--descriptors"])
def test_single_row_csv_gives_a_clear_error(tmp_path, capsys, desc):
    src = write_csv(tmp_path / "one.csv", ["smiles", "a"], [("CCO", 1)])
    assert cli.main(["train", "--csv", str(src), *TINY, desc]) == 2
    err = capsys.readouterr().err
    assert "the scaffold split of 1 molecule left no training molecules" in err
    assert "--split random or more data" in err


def test_scaffold_split_of_one_big_scaffold_group_is_refused_and_lopsided_splits_warn(tmp_path):
    acyclic = ["C" * k + "O" for k in range(1, 11)]  # one (empty) scaffold: too big for train
    src = write_csv(tmp_path / "a.csv", ["smiles", "a"], [(s, i % 2) for i, s in enumerate(acyclic)])
    ds = md.load_dataset(csv_path=str(src), log=False)
    with pytest.raises(ValueError, match="scaffold split of 10 molecules left no training"):
        md.split_indices(ds, "scaffold", 0)
    with pytest.warns(UserWarning, match="no validation molecules"):
        md.split_indices(ds[:5], "random", 0)  # 4/0/1
    hp = dict(mp.DEFAULTS, epochs=1, hidden=8, layers=1, heads=2, pe_dim=0, batch_size=4)
    dsd = md.load_dataset(csv_path=str(src), log=False, descriptors=md.descriptor_set(True))
    spec = mp.model_spec("none", 1, hp, graph_feature_dim=len(dsd.descriptor_names))
    empty = (torch.tensor([], dtype=torch.long), torch.arange(5), torch.arange(5, 10))
    with pytest.raises(ValueError, match="no training molecules"):
        mp.run_training(dsd, empty, spec, hp, progress=False, log=lambda m: None)


# ----------------------------------------------------------------------------- 3. whitespace
@pytest.mark.parametrize("smiles", ["CC O", "CCO\nCCN", "C1=CC=CC=C1 junk", "CCO\tC", "CCO |$;;$| name"])
def test_whitespace_inside_a_smiles_is_invalid(smiles):
    with pytest.raises(InvalidSmilesError) as info:
        smiles_to_data(smiles)
    assert info.value.reason == "whitespace inside the SMILES"


def test_outer_whitespace_and_cxsmiles_extensions_are_fine(tmp_path, capsys, run):
    assert smiles_to_data("  CCO \n").smiles == "CCO"
    assert smiles_to_data("CCO |$;;_R1$|").x.size(0) == 3
    src = write_csv(tmp_path / "w.csv", ["smiles", "a"], [("CCO", 1), ("CC O", 0), ("CCO\nCCN", 1), (" CCN ", 0)])
    with pytest.warns(molecules.InvalidSmilesWarning, match="rows 3, 4"):
        ds = MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False)
    assert ds.smiles == ["CCO", "CCN"] and {s[2] for s in ds.skipped} == {"whitespace inside the SMILES"}
    assert cli.main(["predict", "--checkpoint", str(run[0] / "best.pt"), "--smiles", "CC O"]) == 0
    assert "whitespace inside the SMILES" in capsys.readouterr().out


@pytest.mark.parametrize("smiles", ["CCO\u200b", "CCO\u00ae", "C\u00e9C", "CC\x00O"])
def test_characters_rdkit_would_drop_make_a_smiles_invalid(smiles):
    with pytest.raises(InvalidSmilesError, match="printable ASCII"):  # RDKit reads "CCO\u200b" as ethanol
        smiles_to_data(smiles)


def test_chirality_feature_is_the_same_for_every_spelling_of_a_molecule():
    from rdkit import Chem

    col = molecules.ATOM_FEATURE_NAMES.index("chirality")

    def canonical_chirality(smiles):  # the chirality column in canonical atom order
        mol = Chem.MolFromSmiles(smiles)
        ranks = list(Chem.CanonicalRankAtoms(mol, breakTies=True))
        x = smiles_to_data(smiles).x[:, col].tolist()
        return [x[i] for i in sorted(range(len(x)), key=ranks.__getitem__)]

    l_ala, d_ala = "C[C@H](N)C(=O)O", "C[C@@H](N)C(=O)O"
    assert canonical_chirality(l_ala) == canonical_chirality("N[C@@H](C)C(=O)O")  # L-alanine twice
    assert canonical_chirality(l_ala) != canonical_chirality(d_ala)  # the chiral tag gave L one of D's values
    for smiles in ["C[C@H](N)C(=O)O", "O=C(O)[C@@H]1CCCN1C(=O)[C@H](C)CS", "C[C@@H]1CC[C@H](C(C)C)[C@@H](O)C1",
                   "F[C@H]1C[C@@H](F)C1"]:
        mol = Chem.MolFromSmiles(smiles)
        ref = canonical_chirality(smiles)
        assert any(v != 0 for v in ref)
        for spelling in Chem.MolToRandomSmilesVect(mol, 6, randomSeed=0):
            assert canonical_chirality(spelling) == ref


def _canonical(smiles, column="chirality"):
    """A feature column in canonical atom (or bond) order: comparable across spellings."""
    from rdkit import Chem

    mol = Chem.MolFromSmiles(smiles)
    ranks = list(Chem.CanonicalRankAtoms(mol, breakTies=True))
    d = smiles_to_data(smiles)
    if column == "chirality":
        x = d.x[:, molecules.ATOM_FEATURE_NAMES.index(column)].tolist()
        return [x[i] for i in sorted(range(len(x)), key=ranks.__getitem__)]
    e = d.edge_attr[:, molecules.BOND_FEATURE_NAMES.index(column)].tolist()
    ends = [tuple(sorted((ranks[i], ranks[j]))) for i, j in d.edge_index.T.tolist()]
    return sorted(zip(ends, e))


def test_stereo_features_come_from_the_cip_labeller_whatever_rdkit_mode_or_edits():
    """CIP labels (featurizer version 4): pseudo-asymmetric ring centres (r / s) tell cis/trans
    ring isomers apart, RDKit's process-wide legacy/new stereo switch changes nothing, and a
    molecule edited after parsing is labelled as it is now, on a copy."""
    from rdkit import Chem

    chi = molecules.ATOM_FEATURE_NAMES.index("chirality")
    stereo = molecules.BOND_FEATURE_NAMES.index("stereo")
    smiles = ["NC[C@H]1CC[C@@H](C(=O)O)CC1", "NC[C@H]1CC[C@H](C(=O)O)CC1",  # cis / trans tranexamic acid
              "C[C@H](N)C(=O)O", "C[C@@H](N)C(=O)O", "C/C=C/C", "C/C=C\\C", "F/C=C/[C@H](Cl)Br",
              "[H]/[NH+]=C(\\N)c1ccccc1", "C/C=C1/CC[C@H](C)CC1"]  # the switch changed these two

    def features():
        return [(smiles_to_data(s).x[:, chi].tolist(), smiles_to_data(s).edge_attr[:, stereo].tolist())
                for s in smiles]

    legacy = Chem.GetUseLegacyStereoPerception()
    try:
        Chem.SetUseLegacyStereoPerception(True)
        old = features()
        Chem.SetUseLegacyStereoPerception(False)
        new = features()
        assert not Chem.GetUseLegacyStereoPerception()  # the user's setting is left as it was
    finally:
        Chem.SetUseLegacyStereoPerception(legacy)
    assert old == new
    (cis, _), (trans, _), (l_ala, _), (d_ala, _), (_, e), (_, z), (mixed, mixed_b), (_, amidinium), _ = old
    assert sorted(set(cis) - {0}) == [4] and sorted(set(trans) - {0}) == [3]  # s, s vs r, r
    assert l_ala[1] == 2 and d_ala[1] == 1  # S, R
    assert set(e) == {0, 2} and set(z) == {0, 1}  # E, Z: the indices of STEREOE / STEREOZ before
    assert mixed[3] == 1 and 2 in mixed_b
    assert set(amidinium) == {0}  # =[NH2+] is no stereo bond (legacy perception flagged it Z)

    mol = Chem.MolFromSmiles("C[C@H](N)C(=O)O")  # L-alanine, then edited into D-alanine
    mol.GetAtomWithIdx(1).InvertChirality()
    assert molecules.mol_to_data(mol).x[1, chi] == 1  # R: as it is now, not the stale S
    assert mol.GetAtomWithIdx(1).GetProp("_CIPCode") == "S"  # the caller's molecule untouched
    hand = Chem.RWMol(Chem.MolFromSmiles("CC(N)C(=O)O"))  # built by hand, no perception
    hand.GetAtomWithIdx(1).SetChiralTag(Chem.ChiralType.CHI_TETRAHEDRAL_CCW)
    assert molecules.mol_to_data(hand).x[1, chi] == smiles_to_data("C[C@H](N)C(=O)O").x[1, chi]


def test_atropisomers_pseudo_asymmetric_bonds_and_enhanced_stereo():
    biaryl = "Cc1cccc(C(=O)O)c1-c1c(C)cccc1[N+](=O)[O-] |w{}:9.8|"
    p, m = _canonical(biaryl.format("U"), "stereo"), _canonical(biaryl.format("D"), "stereo")
    assert p != m  # enantiomeric axes: P vs M (both were "other")
    assert {v for _, v in p} == {0, 9} and {v for _, v in m} == {0, 8}
    # a pseudo-asymmetric double bond (z): the same for both spellings (was RDKit's relative cis flag)
    a, b = "C/C=C(/[C@H](C)F)[C@@H](C)F", "C(/C)=C(/[C@H](F)C)[C@@H](F)C"
    assert _canonical(a, "stereo") == _canonical(b, "stereo") and 6 in {v for _, v in _canonical(a, "stereo")}
    assert _canonical(a) == _canonical(b)
    # CXSMILES AND / OR groups: a racemate (or one of two) is not the enantiomer the tags spell
    other = molecules.ATOM_FEATURE_DIMS[molecules.ATOM_FEATURE_NAMES.index("chirality")] - 1
    for group in ("&1", "o1"):
        rac = [_canonical(f"C[C{t}H](N)C(=O)O |{group}:1|") for t in ("@", "@@")]
        assert rac[0] == rac[1] and other in rac[0]
        assert rac[0] != _canonical("C[C@H](N)C(=O)O")
    assert _canonical("C[C@H](O)[C@@H](C)F |&1:1,3|") == _canonical("C[C@@H](O)[C@H](C)F |&1:1,3|")
    racemic_axis = [_canonical(biaryl.format(w)[:-1] + ",&1:9|", "stereo") for w in ("U", "D")]
    assert racemic_axis[0] == racemic_axis[1] and 9 not in {v for _, v in racemic_axis[0]}  # not P
    assert 1 in _canonical("C[C@H](N)C(=O)O |a:1|") + _canonical("C[C@@H](N)C(=O)O |a:1|")  # ABS: kept
    # the duplicate key (DuplicateSmilesWarning, pretraining's de-duplication) tells them apart too
    key = molecules.canonical_key
    assert key(biaryl.format("U")) != key(biaryl.format("D"))
    assert key("C[C@H](N)C(=O)O |&1:1|") == key("C[C@@H](N)C(=O)O |&1:1|") != key("C[C@H](N)C(=O)O")
    assert key("C[C@H](N)C(=O)O") == key("N[C@@H](C)C(=O)O") == "C[C@H](N)C(=O)O"
    assert key("C[C@H](N)C(=O)O |a:1|") == key("C[C@H](N)C(=O)O")  # ABS: what the tags say anyway
    mixed = molecules.canonical_smiles(molecules.parse_smiles("C[C@H](O)[C@@H](C)F |a:1,&1:3|"), "")  # raised
    assert mixed == molecules.canonical_smiles(molecules.parse_smiles("C[C@H](O)[C@@H](C)F |&1:3|"), "")
    huge = "C" * (molecules.CANONICAL_MAX_ATOMS + 1)  # RDKit's canonical ranking segfaults at 20k atoms
    assert key(huge) == huge and molecules.canonical_smiles(molecules.parse_smiles(huge), "text") == "text"


def test_unsanitized_molecules_are_sanitized_on_a_copy_or_refused():
    from rdkit import Chem

    raw = Chem.MolFromSmiles("c1ccccc1", sanitize=False)
    assert torch.equal(molecules.mol_to_data(raw).x, smiles_to_data("c1ccccc1").x)  # SP2, aromatic, ...
    assert raw.NeedsUpdatePropertyCache()  # the caller's molecule untouched
    with pytest.raises(ValueError, match="cannot be sanitized"):
        molecules.mol_to_data(Chem.MolFromSmiles("c1cccc1", sanitize=False))
    cached = Chem.MolFromSmiles("Oc1ccccc1", sanitize=False)
    cached.UpdatePropertyCache(strict=False)  # valences known, rings and aromaticity not perceived
    assert torch.equal(molecules.mol_to_data(cached).x, smiles_to_data("Oc1ccccc1").x)
    block = Chem.MolToMolBlock(Chem.MolFromSmiles("Oc1ccccc1"))
    ringed = Chem.MolFromMolBlock(block, sanitize=False)  # a mol block reader perceives rings, nothing else
    ringed.UpdatePropertyCache(strict=False)
    want = smiles_to_data("Oc1ccccc1")
    got = molecules.mol_to_data(ringed)
    assert torch.equal(got.x, want.x) and torch.equal(got.edge_attr, want.edge_attr)


def test_a_fragment_the_cip_labeller_gives_up_on_spoils_no_other(monkeypatch):
    from rdkit.Chem import rdCIPLabeler

    real = rdCIPLabeler.AssignCIPLabels

    def flaky(mol, atomsToLabel=None, bondsToLabel=None, maxRecursiveIterations=0):
        if 3 in atomsToLabel:  # the first fragment's centre: "too symmetric"
            raise RuntimeError("Max Iterations Exceeded")
        return real(mol, atomsToLabel=atomsToLabel, bondsToLabel=bondsToLabel,
                    maxRecursiveIterations=maxRecursiveIterations)

    monkeypatch.setattr(rdCIPLabeler, "AssignCIPLabels", flaky)
    chi = molecules.ATOM_FEATURE_NAMES.index("chirality")
    d = smiles_to_data("F/C=C/[C@H](Cl)Br.N[C@@H](C)C(=O)O")
    assert d.x[3, chi] == molecules.ATOM_FEATURE_DIMS[chi] - 1  # given up: "other"
    assert d.x[7, chi] == 2  # L-alanine still S
    assert (d.edge_attr[:, molecules.BOND_FEATURE_NAMES.index("stereo")] == 2).sum() == 2  # RDKit's E kept
    # a fragment without stereo (water, a counter-ion) is no reason to label anything
    for extra in ("F/C=C/[C@H](Cl)Br.N[C@@H](C)C(=O)O.O", "F/C=C/[C@H](Cl)Br.O.N[C@@H](C)C(=O)O"):
        x = smiles_to_data(extra).x[:, chi]
        assert x[3] == molecules.ATOM_FEATURE_DIMS[chi] - 1 and 2 in x.tolist()


def test_a_smiles_column_under_another_name_is_suggested_and_one_class_tasks_warn(tmp_path, capsys):
    rows = [(s, 1, _labels(s)[0]) for s in SMILES]
    src = write_csv(tmp_path / "o.csv", ["canonical_smiles", "all_one", "toxic"], rows)
    with pytest.raises(DataFileError, match="did you mean 'canonical_smiles'.*--smiles-col"):
        MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False)
    args = ["train", "--csv", str(src), "--split", "random", "--out", str(tmp_path / "r"), *TINY]
    assert cli.main(args) == 2
    assert "did you mean 'canonical_smiles'" in capsys.readouterr().err
    with pytest.warns(UserWarning, match=r"'all_one' \(all 1, 40 labels\) hold one class only"):
        assert cli.main([*args, "--smiles-col", "canonical_smiles"]) == 0
    # evaluating on a file where a task is one class: no training advice about the loss
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["evaluate", "--checkpoint", str(tmp_path / "r" / "best.pt"), "--csv", str(src),
                         "--smiles-col", "canonical_smiles", "--no-progress"]) == 0
    assert not [w for w in caught if "hold one class only" in str(w.message)]
    # predict / evaluate / explain on the training file itself need no --smiles-col again: the
    # checkpoint's training column is read (said on stderr); a file with neither column is refused
    capsys.readouterr()
    ck = str(tmp_path / "r" / "best.pt")
    assert cli.main(["predict", "--checkpoint", ck, "--csv", str(src), "--out", "-"]) == 0
    out = capsys.readouterr()
    rows = list(csv.DictReader(out.out.splitlines()))  # --out -: the CSV on stdout, nothing else
    assert [r["smiles"] for r in rows] == SMILES and all(r["toxic"] and not r["error"] for r in rows)
    assert "column 'canonical_smiles', the column the model was trained with" in out.err
    assert not (tmp_path / "-").exists() and not Path("-").exists()
    assert cli.main(["evaluate", "--checkpoint", ck, "--csv", str(src), "--no-progress"]) == 0
    assert "csv: 40 molecules" in capsys.readouterr().out
    assert cli.main(["explain", "--checkpoint", ck, "--csv", str(src), "--out", str(tmp_path / "e.svg")]) == 0
    other = write_csv(tmp_path / "n.csv", ["mol", "toxic"], [(s, 0) for s in SMILES[:3]])
    assert cli.main(["predict", "--checkpoint", ck, "--csv", str(other)]) == 2
    assert "no column 'smiles' nor 'canonical_smiles' (the model's training column)" in capsys.readouterr().err
    # a column the user names is never replaced by the training one
    assert cli.main(["predict", "--checkpoint", ck, "--csv", str(src), "--smiles-col", "mol"]) == 2
    assert "no column 'mol'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- 4. cache dir
def test_cache_dir_honours_graphattn_cache_with_a_read_only_data_root(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        monkeypatch.setenv("GRAPHATTN_DATA", str(ro))
        monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "mine"))
        assert md.cache_dir() == tmp_path / "mine"
        monkeypatch.delenv("GRAPHATTN_CACHE")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert md.cache_dir() == tmp_path / "home" / ".cache" / "graphattn"
    finally:
        ro.chmod(0o755)
    assert "GRAPHATTN_CACHE" in md.cache_dir.__doc__


# ----------------------------------------------------------------------------- 5. gz and headers
def test_predict_and_evaluate_read_gzip_and_loose_headers(run, tmp_path, capsys):
    src = write_csv(tmp_path / "in.csv.gz", [" SMILES ", " TOXIC", "Active "],
                    [(s, *_labels(s)) for s in SMILES[:12]])
    out = tmp_path / "p.csv"
    assert cli.main(["predict", "--checkpoint", str(run[0] / "best.pt"), "--csv", str(src), "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["smiles"] for r in rows] == SMILES[:12] and all(r["toxic"] for r in rows)
    capsys.readouterr()
    assert cli.main(["evaluate", "--checkpoint", str(run[0] / "best.pt"), "--csv", str(src)]) == 0
    res = capsys.readouterr().out
    assert "csv: 12 molecules" in res and '"tasks": ["toxic", "active"]' in res


# ----------------------------------------------------------------------------- 6. column collisions
def test_output_columns_never_collide():
    assert molecule_commands._output_columns(["row", "error", "smiles", "a"], False) == (
        ["row_task", "error_task", "smiles_task", "a"], [])
    assert molecule_commands._output_columns(["a", "a_std", "row", "row_task"], True) == (
        ["a", "a_std_task", "row_task", "row_task_task"], ["a_std", "a_std_std", "row_std", "row_task_std"])


def test_predict_keeps_row_smiles_and_error_for_tasks_named_like_them(run, tmp_path, capsys):
    ck = load_checkpoint(run[0] / "best.pt")
    ck["meta"]["task_names"] = ["row", "error"]
    save_checkpoint(tmp_path / "c.pt", ck)
    assert cli.main(["predict", "--checkpoint", str(tmp_path / "c.pt"), "--smiles", "CCO", "C(", ]) == 0
    out = capsys.readouterr()
    rows = list(csv.DictReader(out.out.splitlines()))
    assert list(rows[0]) == ["row", "smiles", "row_task", "error_task", "error"]
    assert [r["row"] for r in rows] == ["1", "2"] and rows[1]["error"] and rows[0]["error"] == ""
    assert 0 <= float(rows[0]["row_task"]) <= 1 and "'row' is written as column 'row_task'" in out.err


# ----------------------------------------------------------------------------- 7. --tasks
def test_resolve_tasks_with_commas_case_and_duplicates():
    neo = "Neoplasms benign, malignant and unspecified (incl cysts and polyps)"
    assert md.resolve_tasks(f"{neo},eye DISORDERS", SIDER_TASKS) == [neo, "Eye disorders"]
    assert md.resolve_tasks("neoplasms benign,malignant and unspecified (incl cysts and polyps)",
                            SIDER_TASKS) == [neo]
    assert md.resolve_tasks(["eye disorders", neo.upper()], SIDER_TASKS) == ["Eye disorders", neo]
    with pytest.raises(ValueError, match="more than once"):
        md.resolve_tasks("Eye disorders,eye disorders", SIDER_TASKS)
    with pytest.raises(ValueError, match=r"unknown task\(s\) \['Neoplasms benign'\]"):
        md.resolve_tasks("Neoplasms benign,Eye disorders", SIDER_TASKS)
    assert md.resolve_tasks("A", ["a", "A"]) == ["A"]
    with pytest.raises(ValueError, match="ambiguous"):
        md.resolve_tasks("ab", ["Ab", "AB"])


def test_named_dataset_and_csv_tasks_with_commas(tmp_path, monkeypatch):
    neo = "Neoplasms benign, malignant and unspecified (incl cysts and polyps)"
    monkeypatch.setitem(TOXICITY_DATASETS["sider"], "rows", (12, 12))
    write_csv(tmp_path / "data" / "sider" / "sider.csv", ["smiles", *SIDER_TASKS],
              [(s, *[(i + j) % 2 for j in range(len(SIDER_TASKS))]) for i, s in enumerate(SMILES[:12])])
    monkeypatch.setenv("GRAPHATTN_DATA", str(tmp_path / "data"))
    ds = md.load_dataset("sider", tasks=f"{neo.lower()}, Eye Disorders", log=False)
    assert ds.task_names == [neo, "Eye disorders"] and ds[0].y.shape == (1, 2)
    assert ds[0].y.tolist() == [[float(SIDER_TASKS.index(neo) % 2), float(SIDER_TASKS.index("Eye disorders") % 2)]]
    src = write_csv(tmp_path / "c.csv", ["smiles", "x, y", "Z"], [(s, *_labels(s)) for s in SMILES])
    ds = md.load_dataset(csv_path=str(src), tasks="z,X,Y", log=False)
    assert ds.task_names == ["Z", "x, y"]
    with pytest.raises(ValueError, match="more than once"):
        md.load_dataset(csv_path=str(src), tasks="Z,z", log=False)


def test_cli_tasks_duplicates_and_case(tmp_path, capsys):
    src = train_csv(tmp_path / "t.csv")
    assert cli.main(["train", "--csv", str(src), "--tasks", "toxic,TOXIC", *TINY]) == 2
    assert "more than once" in capsys.readouterr().err
    assert cli.main(["train", "--csv", str(src), "--tasks", "ACTIVE", "--split", "random",
                     "--out", str(tmp_path / "r"), *TINY]) == 0
    assert load_checkpoint(tmp_path / "r" / "best.pt")["meta"]["task_names"] == ["active"]


# ----------------------------------------------------------------------------- 8. --out folders
def test_predict_and_explain_write_into_an_existing_folder(run, tmp_path):
    ck = str(run[0] / "best.pt")
    folder = tmp_path / "out"
    folder.mkdir()
    assert cli.main(["predict", "--checkpoint", ck, "--smiles", "CCO", "--out", str(folder)]) == 0
    assert len(list(csv.DictReader((folder / "predictions.csv").open()))) == 1
    assert cli.main(["explain", "--checkpoint", ck, "--smiles", "Clc1ccccc1", "--out", str(folder)]) == 0
    assert (folder / "explain.png").read_bytes()[:4] == b"\x89PNG"
    assert cli.main(["explain", "--checkpoint", ck, "--smiles", "CCO", "CCN", "--out", str(folder)]) == 0
    assert (folder / "explain_1.png").is_file() and (folder / "explain_2.png").is_file()


# ----------------------------------------------------------------------------- 9. no attention
def test_explain_without_transformer_layers_is_a_clear_error(tmp_path, capsys, run):
    assert cli.main(["train", "--csv", str(run[1]), "--split", "random", "--out", str(tmp_path / "r0"),
                     *TINY, "--layers", "0"]) == 0
    capsys.readouterr()
    assert cli.main(["explain", "--checkpoint", str(tmp_path / "r0" / "best.pt"), "--smiles", "CCO",
                     "--out", str(tmp_path / "x.png")]) == 2
    assert "0 transformer layers" in capsys.readouterr().err and not (tmp_path / "x.png").exists()


# ----------------------------------------------------------------------------- 10. --limit
def test_limit_featurizes_only_the_first_molecules_and_keeps_caches_apart(tmp_path, monkeypatch):
    rows = [(s, *_labels(s)) for s in SMILES[:3]] + [("C(", 0, 0)] + [(s, *_labels(s)) for s in SMILES[3:20]]
    src = write_csv(tmp_path / "l.csv", ["smiles", "toxic", "active"], rows)
    calls = []
    real = molecules.smiles_to_data
    monkeypatch.setattr(molecules, "smiles_to_data", lambda *a: calls.append(a[0]) or real(*a))
    with pytest.warns(molecules.InvalidSmilesWarning, match="skipped 1 of 5"):
        small = MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False, limit=4)
    assert len(small) == 4 and small.num_rows == 5 and len(calls) == 5 and small.smiles == SMILES[:4]
    with pytest.warns(molecules.InvalidSmilesWarning, match="skipped 1 of 21"):
        full = MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False)
    assert len(full) == 20 and full.processed_dir != small.processed_dir  # not the limited cache
    calls.clear()
    with pytest.warns(molecules.InvalidSmilesWarning):
        again = MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False, limit=4)
    assert calls == [] and len(again) == 4  # its own cache, untouched by the full run
    ds = md.load_dataset(csv_path=str(src), limit=2, log=False)
    assert len(ds) == 2 and ds.num_rows == 2


def test_limit_on_a_named_dataset(tmp_path, monkeypatch):
    monkeypatch.setitem(TOXICITY_DATASETS["clintox"], "rows", (40, 40))
    write_csv(tmp_path / "clintox" / "clintox.csv", ["smiles", "FDA_APPROVED", "CT_TOX"],
              [(s, *_labels(s)) for s in SMILES])
    calls = []
    real = molecules.smiles_to_data
    monkeypatch.setattr(molecules, "smiles_to_data", lambda *a: calls.append(a[0]) or real(*a))
    ds = ToxicityDataset(root=tmp_path, name="clintox", cache_dir=tmp_path / "c", log=False, limit=6)
    assert len(ds) == 6 and len(calls) == 6


# ----------------------------------------------------------------------------- 11. name and --csv
def test_named_dataset_and_csv_together_are_refused(run, capsys):
    assert cli.main(["train", "tox21", "--csv", str(run[1]), *TINY]) == 2
    assert "not both" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not both"):
        md.load_dataset("tox21", str(run[1]))


# ----------------------------------------------------------------------------- files users have (session 13 QA)
def test_ipc_is_skipped_on_huge_molecules_and_numpy_stays_quiet(monkeypatch):
    from rdkit import Chem

    from graphattn.data import descriptors as dmod

    mol = Chem.MolFromSmiles("CCCCCCCCCCc1ccccc1")
    names = dmod.descriptor_names()
    full = dmod.mol_descriptors(mol)
    monkeypatch.setattr(dmod, "SLOW_MAX_ATOMS", 5)  # "huge" = more than 5 atoms
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing leaks (numpy overflow warnings are silenced)
        cut = dmod.mol_descriptors(mol)
    ipc, avg = names.index("Ipc"), names.index("AvgIpc")
    assert 0 < full[0, ipc] < cut[0, ipc] == pytest.approx(dmod.SATURATED)  # huge: grows with size, not 0
    assert full[0, avg] != 0 and cut[0, avg] == 0  # levels off with size: unknown
    monkeypatch.setattr(dmod, "_functions", lambda: {"Up": lambda m: float("inf"), "Down": lambda m: -float("inf"),
                                                     "Bad": lambda m: float("nan")})
    assert dmod.mol_descriptors(mol).tolist() == [[pytest.approx(dmod.SATURATED), pytest.approx(-dmod.SATURATED), 0.0]]
    others = [j for j, n in enumerate(names) if n not in ("Ipc", "AvgIpc")]
    assert torch.equal(full[:, others], cut[:, others])


def test_explain_writes_svg_refuses_other_formats_and_empty_inputs(run, tmp_path, capsys):
    folder, _ = run
    ck = str(folder / "best.pt")
    assert cli.main(["explain", "--checkpoint", ck, "--smiles", "CCO", "--out", str(tmp_path / "m.svg")]) == 0
    assert (tmp_path / "m.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
    assert cli.main(["explain", "--checkpoint", ck, "--smiles", "CCO", "--out", str(tmp_path / "m.pdf")]) == 2
    assert ".png or .svg" in capsys.readouterr().err and not (tmp_path / "m.pdf").exists()
    empty = write_csv(tmp_path / "empty.csv", ["smiles"], [])
    assert cli.main(["explain", "--checkpoint", ck, "--csv", str(empty), "--out", str(tmp_path / "e.png")]) == 2
    assert "no molecules" in capsys.readouterr().err


def test_explain_out_without_suffix_gets_png_suffix(run, tmp_path):
    # as social explain does: a PNG is never written under a name that does not say so
    folder, _ = run
    ck = str(folder / "best.pt")
    assert cli.main(["explain", "--checkpoint", ck, "--smiles", "CCO", "--out", str(tmp_path / "pic")]) == 0
    assert (tmp_path / "pic.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "pic").exists()


def test_predict_reports_the_file_rows_train_reports(run, tmp_path, capsys):
    folder, _ = run
    src = tmp_path / "blank.csv"
    src.write_text('smiles,name\n\nCCO,"a\nb"\nnot_a_smiles,x\n\nc1ccccc1,y\n')  # blank lines, a 2-line cell
    assert cli.main(["predict", "--checkpoint", str(folder / "best.pt"), "--csv", str(src),
                     "--out", str(tmp_path / "p.csv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "p.csv")))
    assert [(r["row"], r["file_row"], bool(r["error"])) for r in rows] == [
        ("1", "3", False), ("2", "5", True), ("3", "7", False)]
    assert "row 2 (file row 5)" in capsys.readouterr().err
    ds = MoleculeCSVDataset(write_csv(tmp_path / "t.csv", ["smiles", "y"], [("CCO", 1)]), log=False)
    assert ds.rows == [2]  # train/evaluate count the same way (header = row 1)
    with pytest.warns(molecules.InvalidSmilesWarning, match="rows 5"):
        bad = MoleculeCSVDataset(src, task_cols=[], log=False)
    assert bad.skipped[0][0] == 5


def test_identifier_columns_are_never_inferred_as_tasks(tmp_path):
    rows = [(100 + i, s, f"ID-{i}", 46.07 + i, _labels(s)[0], 7 + i) for i, s in enumerate(SMILES[:10])]
    src = write_csv(tmp_path / "ids.csv", ["CID", "smiles", "Compound ID", "MW", "active", "PubChem_CID"], rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = MoleculeCSVDataset(src, log=False)
    assert ds.task_names == ["MW", "active"]  # numeric labels by default; identifiers never
    assert {c for c, why in ds.skipped_columns if why == "id/name column"} == {"CID", "Compound ID", "PubChem_CID"}


def test_duplicate_smiles_are_reported(tmp_path):
    rows = [(s, _labels(s)[0]) for s in SMILES[:6]] + [(SMILES[1], 0), (SMILES[2] + " ", 1)]
    with pytest.warns(molecules.DuplicateSmilesWarning, match=r"2 rows repeat.*rows 3=8, 4=9"):
        MoleculeCSVDataset(write_csv(tmp_path / "dup.csv", ["smiles", "y"], rows), log=False)


def test_toxicity_files_in_flat_raw_or_given_directly(tmp_path):
    shared = shared_data_dir()
    src = None if shared is None else shared / "tox21" / "tox21.csv.gz"
    if src is None or not src.is_file():
        pytest.skip("tox21 not under $GRAPHATTN_DATA")
    import shutil

    for rel in ("flat/tox21.csv.gz", "pyg/tox21/raw/tox21.csv.gz"):
        dest = tmp_path / rel
        dest.parent.mkdir(parents=True)
        shutil.copyfile(src, dest)
        root = tmp_path / rel.split("/")[0]
        ds = ToxicityDataset(root, "tox21", download=False, log=False, limit=5, cache_dir=tmp_path / "c")
        assert Path(ds.raw_path) == dest and len(ds) == 5
    ds = ToxicityDataset(tmp_path / "flat" / "tox21.csv.gz", "tox21", download=False, log=False, limit=5,
                         cache_dir=tmp_path / "c")
    assert len(ds) == 5


def test_toxcast_resaved_with_an_index_column(tmp_path):
    shared = shared_data_dir()
    src = None if shared is None else shared / "toxcast" / "toxcast.csv.gz"
    if src is None or not src.is_file():
        pytest.skip("toxcast not under $GRAPHATTN_DATA")
    with gzip.open(src, "rt", newline="") as f:
        table = list(csv.reader(f))
    write_csv(tmp_path / "toxcast" / "toxcast.csv", ["Unnamed: 0", *table[0]],
              [[i, *r] for i, r in enumerate(table[1:])])  # pandas' to_csv() with its index
    ds = ToxicityDataset(tmp_path, "toxcast", download=False, log=False, limit=3, cache_dir=tmp_path / "c")
    assert ds.num_tasks == 617 and "Unnamed: 0" not in ds.task_names


def test_evaluate_says_which_tasks_it_cannot_score(run, tmp_path, capsys):
    folder, _ = run
    rows = [(s, _labels(s)[0]) for s in SMILES]
    src = write_csv(tmp_path / "one.csv", ["smiles", "toxic"], rows)
    assert cli.main(["evaluate", "--checkpoint", str(folder / "best.pt"), "--csv", str(src)]) == 0
    assert "no column for the model's task(s) ['active']" in capsys.readouterr().err
    both = write_csv(tmp_path / "both.csv", ["smiles", "Toxic", "TOXIC", "active"],
                     [(s, a, a, b) for s, (a, b) in zip(SMILES, map(_labels, SMILES))])
    assert cli.main(["evaluate", "--checkpoint", str(folder / "best.pt"), "--csv", str(both)]) == 2
    assert "rename all but one" in capsys.readouterr().err


def test_metrics_json_has_null_val_for_a_split_without_validation_molecules(tmp_path):
    import json

    src = write_csv(tmp_path / "four.csv", ["smiles", "y"], [("CCO", 0), ("c1ccccc1", 1), ("CCCl", 0),
                                                          ("c1ccncc1", 1)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(["train", "--csv", str(src), "--split", "scaffold", "--out", str(tmp_path / "r"),
                         *TINY]) == 0
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert m["val"] is None and isinstance(m["test"], dict)  # 4 molecules: train / test only


def test_review_fixes_molecules(tmp_path, monkeypatch, capsys):
    from torch_geometric.data import Data

    # a label column whose name ends in "Acid" stays a task
    rows = [(s, _labels(s)[0], _labels(s)[1]) for s in SMILES[:12]]
    src = write_csv(tmp_path / "acid.csv", ["smiles", "CarboxylicAcid", "Acid"], rows)
    assert MoleculeCSVDataset(src, log=False, binary=True, cache_dir=tmp_path / "c").task_names == [
        "CarboxylicAcid", "Acid"]
    # a pre_transform that drops data.smiles: the duplicate check does not need it
    strip = lambda d: Data(x=d.x, edge_index=d.edge_index, edge_attr=d.edge_attr, y=d.y)  # noqa: E731
    dup = write_csv(tmp_path / "d.csv", ["smiles", "y"], [("CCO", 1), ("CCO", 0), ("CCC", 1)])
    with pytest.warns(molecules.DuplicateSmilesWarning):
        ds = MoleculeCSVDataset(dup, log=False, pre_transform=strip, cache_dir=tmp_path / "c")
    assert ds.duplicate_rows == [(2, 3)] and ds.conflicting_duplicate_rows == [(2, 3)]
    # the same molecule written differently (Kekulé vs aromatic, explicit H) is a duplicate too
    same = write_csv(tmp_path / "same.csv", ["smiles", "y"],
                     [("c1ccccc1", 1), ("C1=CC=CC=C1", 1), ("CO", 0), ("[H]C([H])([H])O", 1), ("CCN", 1)])
    with pytest.warns(molecules.DuplicateSmilesWarning, match="1 of them with different labels"):
        ds = MoleculeCSVDataset(same, log=False, cache_dir=tmp_path / "c")
    assert ds.duplicate_rows == [(2, 3), (4, 5)] and ds.conflicting_duplicate_rows == [(4, 5)]
    # a checkpoint whose tasks were inferred under other rules still evaluates (its own task names)
    ids = write_csv(tmp_path / "ids.csv", ["smiles", "SID", "toxic"],
                    [(s, i % 2, _labels(s)[0]) for i, s in enumerate(SMILES)])
    monkeypatch.setattr(molecules, "_is_id_column", lambda name: False)  # the old rules: SID was a task
    assert cli.main(["train", "--csv", str(ids), "--split", "random", "--out", str(tmp_path / "old"), *TINY]) == 0
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "old" / "best.pt")["meta"]["task_names"] == ["SID", "toxic"]
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path / "old" / "best.pt")]) == 0
    # predict on a header-only CSV keeps the file_row column
    empty = write_csv(tmp_path / "empty.csv", ["smiles"], [])
    assert cli.main(["predict", "--checkpoint", str(tmp_path / "old" / "best.pt"), "--csv", str(empty),
                     "--out", str(tmp_path / "p.csv")]) == 0
    assert (tmp_path / "p.csv").read_text().splitlines()[0].startswith("row,file_row,smiles")


def test_excel_placeholders_are_missing_labels_and_delimiter_hints(tmp_path):
    from graphattn.data.download import DataFileError
    from graphattn.data.molecules import canonical_key
    from graphattn.data.smiles_table import read_csv_table

    src = tmp_path / "x.csv"
    src.write_text("smiles,tox\nCCO,1\nCCN,#N/A\nCCC,?\nCCCC,0\n")
    ds = MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False)
    assert ds.task_names == ["tox"] and torch.isnan(ds.y[1:3]).all() and ds.y[[0, 3]].flatten().tolist() == [1, 0]
    (tmp_path / "semi.csv").write_text("smiles;tox\nCCO;1,5\n")  # European Excel: decimal commas
    with pytest.raises(DataFileError, match="separated by semicolons"):
        read_csv_table(tmp_path / "semi.csv")
    assert canonical_key("C" * 6000) == "C" * 6000  # no canonical ranking of huge chains (RDKit segfaults)


def test_resume_across_featurizer_versions_names_both(tmp_path, capsys):
    from graphattn.train import load_checkpoint, save_checkpoint

    src = write_csv(tmp_path / "m.csv", ["smiles", "toxic"], [(s, _labels(s)[0]) for s in SMILES])
    args = ["train", "--csv", str(src), "--split", "random", "--out", str(tmp_path / "r"), *TINY]
    assert cli.main(args) == 0
    for name in ("last.pt", "best.pt"):  # as written by an older release
        ck = load_checkpoint(tmp_path / "r" / name)
        save_checkpoint(tmp_path / "r" / name, {**ck, "meta": {**ck["meta"], "featurizer_version": "1"}})
    capsys.readouterr()
    assert cli.main([*args, "--resume"]) == 2
    assert f"featurizer_version: '1' there, '{molecules.FEATURIZER_VERSION}' now" in capsys.readouterr().err

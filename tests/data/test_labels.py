"""Labels as files spell them: numeric (regression) molecule labels, missing-label words among
string, numeric or boolean social labels, and canonical class names that older checkpoints match.

Tiny hand-written files in ``tmp_path``; the shared ESOL/FreeSolv/Lipophilicity CSVs are used
(first molecules only) when ``$GRAPHATTN_DATA`` has them.
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch

from graphattn.data import DataFileError, canonical_label, labels, load_musae, molecules
from graphattn.data.rawio import MISSING_LABELS, label_codes
from graphattn.tasks.molecules import data as molecule_data
from graphattn.testing import shared_data_dir

ESOL = "smiles,logS,Compound ID\nCCO,-0.77,a\nc1ccccc1,-1.64,b\nCCN,NA,c\nCCCl,1,d\n"


def _csv(tmp_path, text=ESOL, name="esol.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


# ----------------------------------------------------------------------------- numeric labels
@pytest.fixture
def mol():
    pytest.importorskip("rdkit")
    return molecules


def test_numeric_column_is_a_task_by_default(tmp_path, mol):
    with warnings.catch_warnings():
        warnings.simplefilter("error", mol.TaskColumnWarning)  # 'name' is an id column: no warning
        ds = mol.MoleculeCSVDataset(_csv(tmp_path, ESOL.replace("Compound ID", "name")),
                                    cache_dir=tmp_path / "c", log=False)
    assert ds.task_names == ["logS"] and ds.binary is False
    y = ds.y[:, 0].tolist()
    assert y[:2] == pytest.approx([-0.77, -1.64]) and math.isnan(y[2]) and y[3] == 1.0
    named = mol.MoleculeCSVDataset(_csv(tmp_path), task_cols="logS", cache_dir=tmp_path / "c", log=False)
    assert named.task_names == ["logS"] and torch.allclose(named.y, ds.y, equal_nan=True)


def test_binary_true_skips_numeric_columns_with_the_warning_and_named_ones_raise(tmp_path, mol):
    src = _csv(tmp_path)
    with pytest.warns(mol.TaskColumnWarning, match=r"labels must be 0/1.*'logS' \(row 2 has '-0.77', not a 0/1"):
        ds = mol.MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False, binary=True)
    assert ds.num_tasks == 0
    with pytest.raises(DataFileError, match=r"row 2, column 'logS': label '-0.77' is not 0 or 1"):
        mol.MoleculeCSVDataset(src, task_cols=["logS"], cache_dir=tmp_path / "c", log=False, binary=True)


def test_non_numeric_columns_are_skipped_and_bad_numbers_named(tmp_path, mol):
    src = _csv(tmp_path, "smiles,y,kind\nCCO,0.5,x\nCCN,2.5,y\n")
    with pytest.warns(mol.TaskColumnWarning, match=r"numbers, true/false or empty.*'kind' \(row 2 has 'x', not a numeric"):
        ds = mol.MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False)
    assert ds.task_names == ["y"] and ds.y[:, 0].tolist() == [0.5, 2.5]
    with pytest.raises(DataFileError, match=r"column 'kind': label 'x' is not a number or true/false"):
        mol.MoleculeCSVDataset(src, task_cols="kind", cache_dir=tmp_path / "c", log=False)
    inf = _csv(tmp_path, "smiles,y\nCCO,0.5\nCCN,inf\n", name="inf.csv")
    with pytest.raises(DataFileError, match=r"row 3, column 'y': label 'inf' is not a finite number"):
        mol.MoleculeCSVDataset(inf, task_cols="y", cache_dir=tmp_path / "c", log=False)


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("word", ["", "nan", "NA", "N/A", "null", "None", "none"])
def test_molecule_missing_words_stay_missing(tmp_path, mol, binary, word):
    src = _csv(tmp_path, f"smiles,y\nCCO,1\nCCN,{word}\nCCC,0\n")
    ds = mol.MoleculeCSVDataset(src, task_cols="y", cache_dir=tmp_path / "c", log=False, binary=binary)
    y = ds.y[:, 0].tolist()
    assert y[0] == 1.0 and math.isnan(y[1]) and y[2] == 0.0


def test_binary_is_part_of_the_cache_key(tmp_path, mol):
    src = _csv(tmp_path, "smiles,y\nCCO,1\nCCN,0\n")
    a = mol.MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False)
    b = mol.MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False, binary=True)
    assert a.processed_dir != b.processed_dir and a.task_names == b.task_names == ["y"]
    assert mol.MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False).processed_dir == a.processed_dir


def test_classification_pipeline_stays_binary(tmp_path, mol, monkeypatch):
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "c"))
    src = _csv(tmp_path)
    with pytest.warns(mol.TaskColumnWarning, match="'logS'"):
        assert molecule_data.load_dataset(csv_path=str(src), log=False).num_tasks == 0
    with pytest.raises(DataFileError, match="is not 0 or 1"):
        molecule_data.load_dataset(csv_path=str(src), tasks="logS", log=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", mol.TaskColumnWarning)  # 'Compound ID' is an identifier: no warning
        ds = molecule_data.load_dataset(csv_path=str(src), log=False, binary=False)
    assert ds.task_names == ["logS"] and dict(ds.skipped_columns)["Compound ID"] == "id/name column"


@pytest.mark.parametrize("folder, file, column", [("esol", "delaney.csv", "logp"),
                                                   ("freesolv", "freesolv.csv", "freesolv"),
                                                   ("lipophilicity", "lipo.csv.gz", "lipo")])
def test_shared_regression_sets_infer_their_target(tmp_path, mol, folder, file, column):
    root = shared_data_dir()
    if root is None or not (root / folder / file).is_file():
        pytest.skip(f"shared {folder} not available")
    ds = mol.MoleculeCSVDataset(root / folder / file, cache_dir=tmp_path, log=False, limit=20)
    assert ds.task_names == [column] and ds.y.shape == (20, 1)
    assert not torch.isnan(ds.y).any() and not set(ds.y[:, 0].tolist()) <= {0.0, 1.0}


# ----------------------------------------------------------------------------- missing social labels
def test_missing_words_are_classes_among_string_labels():
    codes, names = label_codes(["NA", "EU", " NA ", "None", "", "nan", "NaN", "AS", "null", "N/A"])
    assert names == ["AS", "EU", "N/A", "NA", "None", "null"]
    assert codes.tolist() == [3, 1, 3, 4, -1, -1, -1, 0, 5, 2]


@pytest.mark.parametrize("values, names, codes", [
    (["1", "NA", "0", "None", "null", "N/A", "", "nan"], ["0", "1"], [1, -1, 0, -1, -1, -1, -1, -1]),
    (["true", "None", "FALSE", "NA"], ["False", "True"], [1, -1, 0, -1]),
    (["NA", "none", "", "NULL"], [], [-1, -1, -1, -1]),
])
def test_missing_words_are_missing_among_numbers_and_booleans(values, names, codes):
    got, got_names = label_codes(values)
    assert got_names == names and got.tolist() == codes


def test_continent_labels_load_with_na_as_a_class(tmp_path):
    e = _csv(tmp_path, "id_1,id_2\n0,1\n1,2\n2,3\n", name="e.csv")
    t = _csv(tmp_path, "id,target\n0,NA\n1,EU\n2,\n3,NA\n", name="t.csv")
    with pytest.warns(UserWarning, match="1 of 4 nodes have no label"):
        d = load_musae(e, t)
    assert d.class_names == ["EU", "NA"] and d.y.tolist() == [1, 0, -1, 1]


def test_one_missing_definition():
    assert not hasattr(molecules, "_MISSING") and labels.MISSING_LABELS is MISSING_LABELS  # the cells of molecule tables


# ----------------------------------------------------------------------------- canonical labels
@pytest.mark.parametrize("a, b", [("1.0", "1"), ("true", "True"), ("FALSE", "False"), (" 2 ", "2.0"),
                                  ("1e0", "1"), ("-0.0", "0"), (" NA ", "NA")])
def test_canonical_label_equal(a, b):
    assert canonical_label(a) == canonical_label(b)


def test_canonical_label_values_and_agreement_with_label_codes():
    assert canonical_label("1.0") == "1" and canonical_label("true") == "True"
    assert canonical_label("0.5") == "0.5" and canonical_label(" company ") == "company"
    assert canonical_label("1") != canonical_label("10") and canonical_label("NA") != canonical_label("na")
    for old in (["0.0", "1.0"], ["false", "true"], ["0", "1", "2"]):
        _, names = label_codes(old)
        assert [canonical_label(n) for n in old] == names  # an old checkpoint's names still match
        assert [canonical_label(n) for n in names] == names

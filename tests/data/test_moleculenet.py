"""The one table of named MoleculeNet sets: every user reads it, a set is one entry, old names warn."""
import dataclasses

import pytest

from graphattn.data import MOLECULENET, MoleculeNetDataset, moleculenet_names
from graphattn.data.moleculenet import TOXICITY_DATASETS, moleculenet_tasks, MoleculeNetSet, ToxicityDataset
from graphattn.testing import requires_data, shared_data_dir


def test_the_table_names_every_set_and_its_columns():
    assert moleculenet_names("classification") == ["bace", "bbbp", "clintox", "hiv", "sider", "tox21", "toxcast"]
    assert {"esol", "freesolv", "lipophilicity"} <= set(moleculenet_names("regression"))
    assert moleculenet_names() == sorted(moleculenet_names("classification") + moleculenet_names("regression"))
    assert MOLECULENET["bace"].smiles_col == "mol" and MOLECULENET["bbbp"].tasks == ("p_np",)
    assert all(isinstance(s, MoleculeNetSet) and s.url.startswith("https://") for s in MOLECULENET.values())
    with pytest.raises(ValueError, match=r"name must be one of \['bace', 'bbbp'"):
        MoleculeNetDataset(name="tox22")


def test_old_names_are_deprecated_aliases():
    assert TOXICITY_DATASETS is MOLECULENET and issubclass(ToxicityDataset, MoleculeNetDataset)
    with pytest.warns(DeprecationWarning, match="use the attribute .rows"):
        assert TOXICITY_DATASETS["tox21"]["rows"] == MOLECULENET["tox21"].rows
    with pytest.warns(DeprecationWarning, match="use graphattn.data.MoleculeNetDataset"), \
            pytest.raises(ValueError, match="name must be one of"):
        ToxicityDataset(name="nope")


def test_a_new_set_is_one_entry(tmp_path, monkeypatch):
    pytest.importorskip("rdkit")
    path = tmp_path / "mine" / "mine.csv"
    path.parent.mkdir()
    path.write_text("smiles,active\nCCO,1\nCCN,0\nc1ccccc1,1\nCC(=O)O,0\n")
    monkeypatch.setitem(MOLECULENET, "mine", MoleculeNetSet(("mine.csv",), "https://example.org/mine.csv",
                                                            ("active",), (4, 4)))
    ds = MoleculeNetDataset(root=tmp_path, name="mine", cache_dir=tmp_path / "cache", download=False, log=False)
    assert len(ds) == 4 and ds.task_names == ["active"]


@requires_data("bbbp/bbbp.csv", "bace/bace.csv")
@pytest.mark.parametrize("name, smiles_col", [("bbbp", "smiles"), ("bace", "mol")])
def test_bbbp_and_bace_by_name_from_the_shared_copies(name, smiles_col, tmp_path):
    pytest.importorskip("rdkit")
    ds = MoleculeNetDataset(root=shared_data_dir(), name=name, cache_dir=tmp_path, download=False, log=False,
                            limit=30)
    assert len(ds) == 30 and ds.task_names == list(MOLECULENET[name].tasks)
    assert dataclasses.replace(MOLECULENET[name]).smiles_col == smiles_col


@requires_data("bbbp/bbbp.csv")
def test_graphattn_train_bbbp(tmp_path, monkeypatch):
    pytest.importorskip("rdkit")
    import json

    from graphattn.cli.main import main

    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    main(["train", "bbbp", "--limit", "120", "--epochs", "1", "--hidden", "16", "--layers", "1", "--split",
          "random", "--out", str(tmp_path / "run"), "--no-progress", "--threads", "1",
          "--data-root", str(shared_data_dir())])
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["meta"]["task_names"] == ["p_np"] and metrics["epochs_run"] == 1


@pytest.mark.parametrize("name, task, rows", [("esol", "log_solubility", 1128), ("freesolv", "hydration_free_energy", 642),
                                              ("lipophilicity", "logD", 4200)])
def test_regression_sets_read_any_copy_under_their_own_task_name(name, task, rows, tmp_path):
    pytest.importorskip("rdkit")
    spec, data = MOLECULENET[name], shared_data_dir()
    found = [data / name / f for f in spec.files if data is not None and (data / name / f).is_file()]
    if not found:
        pytest.skip(f"no local copy of {name}")
    ds = MoleculeNetDataset(root=found[0], name=name, cache_dir=tmp_path, log=False)
    assert ds.task_names == [task] and ds.task_type == "regression" and len(ds) == rows
    assert ds[0].y.dtype.is_floating_point and ds.split_labels is None
    # DeepChem's column name is an alias of the same task
    header = ["Compound ID", spec.column_names(task)[1], "smiles"]
    assert moleculenet_tasks(name, header, tmp_path / "x.csv") == [spec.column_names(task)[1]]

"""graphattn.load: a trained model in Python, predicting as `graphattn predict` does."""
import csv
import math
from pathlib import Path

import numpy as np
import pytest

import graphattn
from graphattn.cli.main import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"


def rows_of(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_molecule_checkpoint_predicts_what_it_predicted_when_written():
    pytest.importorskip("rdkit")
    want = rows_of(FIXTURES / "molecules_v0_predictions.csv")
    model = graphattn.load(FIXTURES / "molecules_v0.pt")
    assert isinstance(model, graphattn.MoleculeModel) and model.task_type == "classification"
    pred = model.predict([r["smiles"] for r in want] + ["not a smiles"])
    assert len(pred) == len(want) + 1 and pred.values.shape == (len(want) + 1, len(model.task_names))
    assert pred.std is None and pred.valid.tolist() == [True] * len(want) + [False]
    for i, r in enumerate(want):
        for j, t in enumerate(model.task_names):
            assert abs(pred.values[i, j] - float(r[t])) < 2e-6
    assert np.isnan(pred.values[-1]).all() and pred.errors[-1]
    last = pred.to_rows()[-1]
    assert last["smiles"] == "not a smiles" and last[model.task_names[0]] is None and last["error"]
    one = model.predict("CCO")
    assert len(one) == 1 and abs(one.values[0, 0] - float(want[0][model.task_names[0]])) < 2e-6


def test_an_ensemble_regressor_reports_values_and_their_spread(tmp_path):
    pytest.importorskip("rdkit")
    src = tmp_path / "props.csv"
    with open(FIXTURES.parent / "molecules_tasks_train.csv", newline="") as f:
        smiles = [r["smiles"] for r in csv.DictReader(f)]
    src.write_text("smiles,logS\n" + "".join(f"{s},{0.3 * len(s) - 2:.3f}\n" for s in smiles))
    out = tmp_path / "run"
    assert main(["train", "--csv", str(src), "--task-type", "regression", "--tasks", "logS", "--ensemble", "2",
                 "--epochs", "1", "--hidden", "16", "--layers", "1", "--heads", "2", "--no-descriptors",
                 "--no-progress", "--threads", "1", "--out", str(out)]) == 0
    model = graphattn.load(out / "best.pt")
    assert model.task_type == "regression" and model.is_ensemble and "ensemble of 2" in repr(model)
    pred = model.predict(["CCO", "c1ccccc1", "C1CC"])
    assert pred.std is not None and pred.std.shape == (3, 1)
    assert np.isfinite(pred.values[:2]).all() and (pred.std[:2] > 0).all() and pred.errors[2]
    rows = pred.to_rows()
    assert set(rows[0]) == {"smiles", "logS", "logS_std", "error"}
    assert main(["predict", "--checkpoint", str(out / "best.pt"), "--smiles", "CCO", "c1ccccc1",
                 "--out", str(tmp_path / "p.csv")]) == 0
    cli = rows_of(tmp_path / "p.csv")
    assert [float(r["logS"]) for r in cli] == pytest.approx(pred.values[:2, 0].tolist(), rel=1e-5)
    assert [float(r["logS_std"]) for r in cli] == pytest.approx(pred.std[:2, 0].tolist(), rel=1e-5)


def test_a_social_checkpoint_predicts_its_nodes():
    want = rows_of(FIXTURES / "karate_v0_predictions.csv")
    model = graphattn.load(FIXTURES / "karate_v0.pt")
    assert isinstance(model, graphattn.SocialModel) and model.class_names == ["Mr. Hi", "Officer"]
    got = model.predict()
    assert len(got) == len(want) == 34
    for g, w in zip(got, want):
        assert (g["node_id"], g["split"], g["label"], g["predicted"]) == (int(w["node_id"]), w["split"], w["label"],
                                                                          w["predicted"])
        assert math.isclose(g["prob_Officer"], float(w["prob_Officer"]), abs_tol=2e-6)


def test_predict_csv_keeps_the_inputs_other_columns(tmp_path):
    pytest.importorskip("rdkit")
    src = tmp_path / "screen.csv"
    src.write_text("compound_id,name,smiles,toxic\nA1,ethanol,CCO,0\nA2,phenol,c1ccccc1O,1\nA3,broken,C1CC,\n")
    out = tmp_path / "p.csv"
    assert main(["predict", "--checkpoint", str(FIXTURES / "molecules_v0.pt"), "--csv", str(src),
                 "--out", str(out)]) == 0
    rows = rows_of(out)
    assert list(rows[0]) == ["row", "file_row", "compound_id", "name", "input_toxic", "smiles", "toxic", "active",
                             "error"]
    assert [(r["compound_id"], r["name"], r["input_toxic"]) for r in rows] == [("A1", "ethanol", "0"),
                                                                               ("A2", "phenol", "1"),
                                                                               ("A3", "broken", "")]
    assert rows[2]["error"] and rows[2]["toxic"] == "" and float(rows[0]["toxic"]) > 0


def test_a_missing_checkpoint_is_refused_clearly(tmp_path):
    with pytest.raises(Exception, match="does not exist"):
        graphattn.load(tmp_path / "none.pt")

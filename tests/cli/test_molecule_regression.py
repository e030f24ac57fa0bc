"""Molecule regression through the command line: train on numeric targets (--task-type regression), the
outputs in the targets' own units everywhere (metrics.json, evaluate, predict, ensembles), the split
column, the parity plot, explain, and the bad inputs refused by name.

The CSV is written here: 60 small molecules whose target is 40 × (number of heavy atoms) + 1000 plus
a second task with missing cells, far from unit scale, so a missing un-standardisation would show.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("rdkit")

from graphattn.cli import main as cli  # noqa: E402
from graphattn.tasks.molecules.checkpoints import load_model  # noqa: E402

TINY = ["--hidden", "16", "--layers", "1", "--heads", "2", "--pe-dim", "4", "--batch-size", "16", "--no-progress",
        "--no-descriptors"]
CHAINS = ["C" * n for n in range(1, 11)] + ["C" * n + "O" for n in range(1, 11)] + ["C" * n + "N" for n in range(1, 11)] \
    + ["OC" + "C" * n for n in range(1, 11)] + ["C" * n + "Cl" for n in range(1, 11)] + ["C" * n + "F" for n in range(1, 11)]


def heavy(smiles: str) -> int:
    return len(smiles.replace("l", ""))


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("reg") / "props.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mol_id", "smiles", "size", "other", "part"])
        for i, s in enumerate(CHAINS):
            w.writerow([f"m{i}", s, 40 * heavy(s) + 1000, "" if i % 3 == 0 else 0.5 * heavy(s),
                        ["train", "train", "train", "train", "val", "TEST"][i % 6]])
    return path


@pytest.fixture(scope="module")
def run(table, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "r"
    rc = cli.main(["train", "--csv", str(table), "--task-type", "regression", "--split-col", "part", "--epochs", "25",
                   "--lr", "3e-3", "--out", str(out), *TINY])
    assert rc == 0
    return out


def test_metrics_are_in_the_targets_units(run):
    m = json.loads((run / "metrics.json").read_text())
    assert m["task_type"] == "regression" and m["task_names"] == ["size", "other"]
    assert m["counts"] == {"train": 40, "val": 10, "test": 10}  # the split column, not a random split
    test = m["test"]
    assert set(test) >= {"mae", "rmse", "r2", "mae_per_task", "rmse_per_task", "r2_per_task"}
    # the size target spans 1040..1440: predicting the training mean would give an MAE of ~100
    assert test["mae_per_task"]["size"] < 60 and test["r2_per_task"]["size"] > 0.5
    assert m["meta"]["targets"]["mean"][0] > 1000 and m["meta"]["targets"]["std"][0] > 50
    model, meta = load_model(run / "best.pt")
    assert meta["task_type"] == "regression" and type(model).__name__ == "StandardizedRegressor"


def test_evaluate_gives_the_training_numbers_and_a_parity_plot(run, capsys):
    assert cli.main(["evaluate", "--checkpoint", str(run / "best.pt"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    res = json.loads(out.strip().splitlines()[-1])
    m = json.loads((run / "metrics.json").read_text())
    assert res["test"]["mae"] == pytest.approx(m["test"]["mae"], rel=1e-5)
    if res.get("parity_plot"):  # matplotlib installed
        assert Path(res["parity_plot"]).stat().st_size > 1000


def test_predict_writes_values_and_evaluate_csv_reads_a_labelled_file(run, table, tmp_path):
    out = tmp_path / "p.csv"
    assert cli.main(["predict", "--checkpoint", str(run / "best.pt"), "--smiles", "CCCCC", "C1", "--out",
                     str(out)]) == 0
    rows = list(csv.DictReader(open(out)))
    assert float(rows[0]["size"]) == pytest.approx(1200, abs=80)  # 5 heavy atoms: 40 * 5 + 1000
    assert rows[1]["size"] == "" and rows[1]["error"]
    assert cli.main(["evaluate", "--checkpoint", str(run / "best.pt"), "--csv", str(table), "--no-progress"]) == 0


def test_ensemble_reports_the_members_spread(table, tmp_path):
    out = tmp_path / "ens"
    assert cli.main(["train", "--csv", str(table), "--task-type", "regression", "--tasks", "size", "--split",
                     "random", "--epochs", "2", "--ensemble", "2", "--loss", "l1", "--metric", "rmse", "--out",
                     str(out), *TINY]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert [c["members"] for c in m["ensemble_curve"]] == [1, 2] and "val_mae" in m["ensemble_curve"][0]
    assert m["meta"]["hparams"]["loss"] == "l1"
    pred = tmp_path / "e.csv"
    assert cli.main(["predict", "--checkpoint", str(out / "best.pt"), "--smiles", "CCO", "--out", str(pred)]) == 0
    row = next(csv.DictReader(open(pred)))
    assert float(row["size_std"]) >= 0 and row["size"]


def test_explain_draws_a_regressor(run, tmp_path, capsys):
    png = tmp_path / "x.png"
    assert cli.main(["explain", "--checkpoint", str(run / "best.pt"), "--smiles", "CCCO", "--task", "size",
                     "--out", str(png)]) == 0
    assert "predicted size" in capsys.readouterr().out and png.stat().st_size > 1000


@pytest.mark.parametrize("rows, flags, message", [
    ([["CCO", "1.5"], ["CCC", "abc"], ["CCN", "2"]], ["--tasks", "y"], "row 3, column 'y': label 'abc'"),
    ([["CCO", "1.5"], ["CCC", "inf"], ["CCN", "2"]], ["--tasks", "y"], "label 'inf'"),
    ([["CCO", "2"], ["CCC", "2"], ["CCN", "2"], ["CCCC", "2"]], [], "y (all 2) have one value"),
    ([["CCO", ""], ["CCC", ""], ["CCN", "1"]], ["--tasks", "y", "--split-col", "part"], "no target value"),
], ids=["not-a-number", "infinite", "constant", "no-training-values"])
def test_bad_targets_are_refused_by_name(rows, flags, message, tmp_path, capsys):
    path = tmp_path / "bad.csv"
    parts = ["train", "train", "val", "test"]
    path.write_text("smiles,y,part\n" + "".join(f"{s},{y},{parts[i]}\n" for i, (s, y) in enumerate(rows)))
    split = [] if "--split-col" in flags else ["--split", "random"]
    rc = cli.main(["train", "--csv", str(path), "--task-type", "regression", "--out", str(tmp_path / "o"), *split,
                   *flags, *TINY])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


def test_a_numeric_csv_trained_as_classification_says_to_pass_the_task_type(table, tmp_path, capsys):
    rc = cli.main(["train", "--csv", str(table), "--out", str(tmp_path / "o"), *TINY])
    assert rc == 2 and "pass --task-type regression" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--pos-weight"], "no meaning for --task-type regression"),
    (["--split-col", "part", "--split", "random"], "give one of them"),
    (["--split-col", "mol_id"], "split 'm0' is not one of train, val, test"),
    (["--metric", "roc_auc"], "--metric roc_auc is not a metric of this regression run"),
])
def test_contradicting_options_are_refused(table, flags, message, tmp_path, capsys):
    rc = cli.main(["train", "--csv", str(table), "--task-type", "regression", "--out", str(tmp_path / "o"),
                   *flags, *TINY])
    assert rc == 2 and message in capsys.readouterr().err


def test_regression_options_on_a_classification_run_are_refused(tmp_path, capsys):
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "molecules_tasks_train.csv"
    rc = cli.main(["train", "--csv", str(fixture), "--loss", "l1", "--out", str(tmp_path / "o"), *TINY])
    assert rc == 2 and "--loss l1 is a regression loss" in capsys.readouterr().err

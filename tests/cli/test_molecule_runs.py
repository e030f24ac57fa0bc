"""CLI smoke runs for molecules: train -> evaluate / predict / explain, checkpoint round trip.

Tiny models and 1-2 epochs: these check the wiring, not the accuracy. The hand-written
fixture ``tests/fixtures/molecules_tasks_train.csv`` has 40 valid molecules with two 0/1
tasks (``toxic`` = has a halogen, ``active`` = aromatic; some labels missing) and one
invalid SMILES at file row 14. Tox21 tests read ``$GRAPHATTN_DATA`` / ``../shared/data``
and skip when it is absent.
"""
from __future__ import annotations

import csv
import json
import runpy
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("rdkit")

from graphattn.cli import main as cli  # noqa: E402
from graphattn.testing import shared_data_dir  # noqa: E402
from graphattn.train import load_checkpoint, save_checkpoint  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "molecules_tasks_train.csv"
ROOT = Path(__file__).resolve().parents[2]
TINY = ["--hidden", "16", "--layers", "1", "--heads", "2", "--pe-dim", "4", "--batch-size", "16",
        "--no-progress"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models gain nothing from threads, and on a busy machine OpenMP waits cost 10x."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _tox21_root():
    root = shared_data_dir()
    if root is None or not any((root / "tox21" / f).exists() for f in ("tox21.csv.gz", "tox21.csv")):
        pytest.skip("Tox21 not found under $GRAPHATTN_DATA or ../shared/data")
    return root


@pytest.fixture(scope="module")
def csv_run(tmp_path_factory, monkeypatch_module):
    """One tiny model trained on the fixture CSV (random split), shared by the tests below."""
    out = tmp_path_factory.mktemp("csv_run")
    monkeypatch_module.setenv("GRAPHATTN_DATA", str(out / "data"))  # processed cache goes here
    rc = cli.main(["train", "--csv", str(FIXTURE), "--split", "random", "--epochs", "2", "--out",
                   str(out / "run"), *TINY])
    assert rc == 0
    return out / "run"


@pytest.fixture(scope="module")
def monkeypatch_module():
    patch = pytest.MonkeyPatch()
    yield patch
    patch.undo()


def test_csv_train_writes_metrics_and_checkpoint(csv_run):
    metrics = json.loads((csv_run / "metrics.json").read_text())
    assert metrics["task_names"] == ["toxic", "active"]
    assert metrics["split"] == "random" and metrics["seed"] == 0
    assert metrics["skipped"]["count"] == 1 and metrics["skipped"]["rows"] == [14]
    assert metrics["num_molecules"] == 40
    assert set(metrics["test"]["roc_auc_per_task"]) == {"toxic", "active"}
    assert sum(metrics["counts"].values()) == 40
    meta = load_checkpoint(csv_run / "best.pt")["meta"]
    assert meta["pipeline"] == "molecules" and meta["task_names"] == ["toxic", "active"]
    assert meta["model"]["class"] == "GraphClassifier"
    assert meta["model"]["kwargs"]["num_global_tokens"] == 1 and meta["pe"]["k"] == 4


def test_predict_csv_has_a_row_per_input_and_errors_for_invalid(csv_run, tmp_path):
    inp = tmp_path / "in.csv"
    inp.write_text("name,SMILES\na,CCO\nb,not_a_smiles\nc,\nd,c1ccccc1Cl\n")
    out = tmp_path / "preds.csv"
    rc = cli.main(["predict", "--checkpoint", str(csv_run / "best.pt"), "--csv", str(inp),
                   "--smiles-col", "SMILES", "--out", str(out)])
    assert rc == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["smiles"] for r in rows] == ["CCO", "not_a_smiles", "", "c1ccccc1Cl"]
    assert rows[1]["error"] and "syntax" in rows[1]["error"].lower() and rows[1]["toxic"] == ""
    assert rows[2]["error"] and rows[2]["active"] == ""
    for r in (rows[0], rows[3]):
        assert r["error"] == "" and 0.0 <= float(r["toxic"]) <= 1.0 and 0.0 <= float(r["active"]) <= 1.0


def test_predict_smiles_to_stdout(csv_run, capsys):
    rc = cli.main(["predict", "--checkpoint", str(csv_run / "best.pt"), "--smiles", "CCO", "C1CC("])
    assert rc == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "row,smiles,toxic,active,error" and len(lines) == 3
    assert lines[2].startswith("2,C1CC(,,,")


def test_explain_writes_png(csv_run, tmp_path, capsys):
    out = tmp_path / "mol.png"
    rc = cli.main(["explain", "--checkpoint", str(csv_run / "best.pt"), "--smiles", "Clc1ccc(O)cc1",
                   "--out", str(out)])
    assert rc == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
    assert "toxic" in capsys.readouterr().out


def test_evaluate_on_csv_and_own_split(csv_run, capsys):
    assert cli.main(["evaluate", "--checkpoint", str(csv_run / "best.pt"), "--csv", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "csv: 40 molecules" in out and "ROC-AUC" in out
    assert cli.main(["evaluate", "--checkpoint", str(csv_run / "best.pt")]) == 0
    assert "test:" in capsys.readouterr().out


def test_predict_refuses_other_featurizer_version(csv_run, tmp_path, capsys):
    ck = load_checkpoint(csv_run / "best.pt")
    ck["meta"]["featurizer_version"] = "0-old"
    save_checkpoint(tmp_path / "old.pt", ck)
    assert cli.main(["predict", "--checkpoint", str(tmp_path / "old.pt"), "--smiles", "CCO"]) == 2
    err = capsys.readouterr().err
    assert "featurizer version" in err and "Retrain" in err


def test_baseline_checkpoint_predicts_but_does_not_explain(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRAPHATTN_DATA", str(tmp_path / "data"))
    tiny = [a for a in TINY if a not in ("--pe-dim", "4")]  # our model's option: refused with --baseline
    rc = cli.main(["train", "--csv", str(FIXTURE), "--split", "random", "--epochs", "1", "--baseline", "gat",
                   "--out", str(tmp_path / "run"), *tiny])
    assert rc == 0
    assert load_checkpoint(tmp_path / "run" / "best.pt")["meta"]["model"]["kwargs"]["conv"] == "gat"
    ck = str(tmp_path / "run" / "best.pt")
    assert cli.main(["predict", "--checkpoint", ck, "--smiles", "CCO"]) == 0
    assert cli.main(["explain", "--checkpoint", ck, "--smiles", "CCO", "--out", str(tmp_path / "x.png")]) == 2
    assert "baseline" in capsys.readouterr().err
    # social-network baselines are refused for molecules, with the valid choices
    assert cli.main(["train", "--csv", str(FIXTURE), "--baseline", "transformer", "--no-progress"]) == 2
    assert "none, gine, gat" in capsys.readouterr().err


def test_tox21_slice_train_predict_explain(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRAPHATTN_DATA", str(_tox21_root()))
    run = tmp_path / "tox21"
    rc = cli.main(["train", "tox21", "--limit", "200", "--epochs", "1", "--split", "scaffold",
                   "--out", str(run), *TINY, "--pe-dim", "8"])
    assert rc == 0
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["num_molecules"] == 200 and len(metrics["task_names"]) == 12
    # --limit featurizes only the first 200 valid molecules; Tox21's 8 hypervalent [AlH3]
    # rows come after them (file rows 1324+), so this slice skips none
    assert metrics["skipped"]["count"] == 0
    preds = tmp_path / "p.csv"
    assert cli.main(["predict", "--checkpoint", str(run / "best.pt"), "--smiles", "CCO",
                     "O=CO[AlH3](OC=O)OC=O", "--out", str(preds)]) == 0
    rows = list(csv.DictReader(preds.open()))
    assert len(rows) == 2 and rows[0]["NR-AR"] and "valence" in rows[1]["error"].lower()
    png = tmp_path / "m.png"
    assert cli.main(["explain", "--checkpoint", str(run / "best.pt"), "--smiles",
                     "CCOc1ccc2nc(S(N)(=O)=O)sc2c1", "--out", str(png)]) == 0
    assert png.stat().st_size > 2000


def test_example_tox21_smoke(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRAPHATTN_DATA", str(_tox21_root()))
    out = tmp_path / "res.json"
    monkeypatch.setattr(sys, "argv", ["tox21.py", "--epochs", "1", "--limit", "300", "--seeds", "0",
                                      "--hidden", "16", "--layers", "1", "--out", str(out)])
    runpy.run_path(str(ROOT / "examples" / "tox21.py"), run_name="__main__")
    res = json.loads(out.read_text())
    assert {(r["split"], r["model"]) for r in res["table"]} == {
        ("scaffold", "ours"), ("scaffold", "gine"), ("random", "ours"), ("random", "gine")}
    assert "Epoch 001" in capsys.readouterr().out

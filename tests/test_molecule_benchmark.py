"""Smoke test of benchmarks/molecules.py: the CI mode (one tiny CSV, one epoch, every model), its
table, resuming (a second run trains nothing) and --report (the table without training).

chemprop runs when its executable is on $PATH; otherwise a stand-in script writes the files
chemprop 2.3.1 writes (``test_predictions.csv``, Lightning's ``metrics.csv``, ``chemprop predict``'s
output), so the code that reads them is tested everywhere.
"""
import csv
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "molecules.py"
MODELS = ["ours", "gine", "gat", "chemprop"]

FAKE_CHEMPROP = """\
#!{python}
# Stand-in for `chemprop train` / `chemprop predict` (2.3.1): the same files, made-up probabilities.
import argparse, csv, pathlib, sys
p = argparse.ArgumentParser()
p.add_argument("mode"); p.add_argument("-i"); p.add_argument("-o"); p.add_argument("--splits-column")
p.add_argument("--target-columns", nargs="+"); p.add_argument("--model-paths")
a, _ = p.parse_known_args()
rows = list(csv.DictReader(open(a.i)))
tasks = a.target_columns or ["t0", "t1"]
def write(path, sel):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f); w.writerow(["smiles", *tasks])
        w.writerows([r["smiles"], *((len(r["smiles"]) * (j + 3)) % 7 / 7 for j in range(len(tasks)))] for r in sel)
if a.mode == "train":
    model = pathlib.Path(a.o) / "model_0"
    write(model / "test_predictions.csv", [r for r in rows if r[a.splits_column] == "test"])
    (model / "best.pt").write_text("")
    logs = model / "trainer_logs" / "version_0"; logs.mkdir(parents=True)
    (logs / "metrics.csv").write_text("epoch,step,train_loss_epoch,val/roc,val_loss\\n0,0,,0.6,0.69\\n0,0,0.7,,\\n")
else:
    write(pathlib.Path(a.o), rows)
"""


def run(args, env, timeout=120):
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def load_script(path: Path):
    spec = importlib.util.spec_from_file_location("molecule_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def rerun(smoke, capsys, monkeypatch):
    """Run the script again in this process (no second start-up of torch): its printed output."""
    bench = load_script(SCRIPT)
    for k in ("GRAPHATTN_NO_CPP", "GRAPHATTN_CACHE", "GRAPHATTN_DATA"):
        monkeypatch.setenv(k, smoke["env"][k])
    threads = torch.get_num_threads()

    def call(args):
        capsys.readouterr()
        try:
            assert bench.main(args)["failures"] == 0
        finally:
            torch.set_num_threads(threads)
        captured = capsys.readouterr()
        return captured.out + captured.err

    return call


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    pytest.importorskip("rdkit")
    tmp = tmp_path_factory.mktemp("molbench")
    chemprop = shutil.which("chemprop")
    if chemprop is None:
        chemprop = tmp / "chemprop"
        chemprop.write_text(FAKE_CHEMPROP.format(python=sys.executable))
        chemprop.chmod(0o755)
    env = {**os.environ, "GRAPHATTN_NO_CPP": "1", "GRAPHATTN_CACHE": str(tmp / "cache"),
           "GRAPHATTN_DATA": str(tmp / "data"), "OMP_NUM_THREADS": "1"}
    base = ["--smoke", "--threads", "1", "--out", str(tmp / "out")]
    args = [*base, "--chemprop-bin", str(chemprop)]
    return {"base": base, "args": args, "env": env, "out": tmp / "out", "stdout": run(args, env)}


def finite(v):
    return isinstance(v, float) and math.isfinite(v)


def test_table_has_a_finite_row_per_model(smoke):
    payload = json.loads((smoke["out"] / "results.json").read_text())
    assert [r["model"] for r in payload["table"]] == MODELS
    for row in payload["table"]:
        assert row["dataset"] == "molecules_tasks_train" and row["seeds"] == 1 and row["epochs_mean"] == 1
        for key in ("test_roc_auc_mean", "test_pr_auc_mean", "val_roc_auc_mean", "seconds_mean"):
            assert finite(row[key]), (key, row)
    assert [r["model"] for r in payload["suite"]] == MODELS and all(r["complete"] for r in payload["suite"])
    assert payload["missing"] == []
    with open(smoke["out"] / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["dataset"], r["model"]) for r in rows] == (
        [("molecules_tasks_train", m) for m in MODELS] + [("suite mean", m) for m in MODELS])
    assert all(finite(float(r["test_roc_auc_mean"])) for r in rows)
    assert len(list((smoke["out"] / "runs").glob("*.json"))) == len(MODELS)  # one file per finished result


def test_progress_is_printed_per_epoch(smoke):
    out = smoke["stdout"]
    for model in MODELS:
        assert f"[molecules_tasks_train {model} seed 0] Epoch 001" in out, out
        assert f"[molecules_tasks_train {model} seed 0] done:" in out
    assert "| molecules_tasks_train | ours" in out and "| suite mean" in out


def test_second_run_skips_every_finished_result(smoke, rerun):
    before = {p: p.stat().st_mtime_ns for p in (smoke["out"] / "runs").glob("*.json")}
    out = rerun(smoke["args"])
    assert "4 result(s) exist, 0 to run" in out
    assert "Epoch" not in out and "featurize" not in out
    assert {p: p.stat().st_mtime_ns for p in (smoke["out"] / "runs").glob("*.json")} == before


def test_report_prints_the_table_without_training(smoke):
    out = run([*smoke["args"], "--report"], smoke["env"])  # as a user runs it
    assert "Epoch" not in out and "to run" not in out
    assert "(4 results, 0 missing)" in out and "| molecules_tasks_train | chemprop" in out

def test_other_settings_are_other_results(smoke, rerun):
    out = rerun([*smoke["args"], "--report", "--set", "hidden=32", "--models", "ours", "gine"])
    assert "(0 results, 2 missing)" in out and "missing: molecules_tasks_train ours seed 0" in out


def test_absent_chemprop_is_skipped_with_a_message(smoke, rerun, tmp_path):
    out = rerun([*smoke["base"], "--chemprop-bin", str(tmp_path / "no-chemprop"), "--models", "gine", "chemprop"])
    assert "chemprop: skipped (--chemprop-bin" in out and "is not an executable file" in out
    assert "1 result(s) exist, 0 to run" in out  # gine ran before; chemprop is not attempted


def test_regression_csv_gets_the_regression_table(smoke, rerun, tmp_path):
    with open(ROOT / "tests" / "fixtures" / "molecules_tasks_train.csv", newline="") as f:
        smiles = [r["smiles"] for r in csv.DictReader(f)]
    data = tmp_path / "logs.csv"
    with open(data, "w", newline="") as f:  # a numeric target that depends on the molecule, one missing cell
        w = csv.writer(f)
        w.writerow(["smiles", "logS"])
        w.writerows([s, "" if i == 3 else f"{0.4 * len(s) - 2.5 + 0.1 * (i % 3):.3f}"] for i, s in enumerate(smiles))
    out_dir = tmp_path / "out"
    out = rerun(["--smoke", "--threads", "1", "--out", str(out_dir), "--csv", str(data), "--task-type", "regression",
                 "--split", "random", "--models", "ours", "gine", "chemprop",
                 "--chemprop-bin", smoke["args"][smoke["args"].index("--chemprop-bin") + 1]])
    assert "regression sets (each in its own units" in out and "| mean rank (test RMSE) | ours" in out
    payload = json.loads((out_dir / "results.json").read_text())
    assert [r["model"] for r in payload["table"]] == ["ours", "gine", "chemprop"] and payload["suite"] == []
    for row in payload["table"]:
        for key in ("test_rmse_mean", "test_mae_mean", "test_r2_mean", "val_rmse_mean"):
            assert finite(row[key]), (key, row)
        assert row["test_rmse_mean"] >= row["test_mae_mean"]
    ranks = [r["rank_mean"] for r in payload["ranks"]]
    assert len(ranks) == 3 and min(ranks) == 1.0 and max(ranks) <= 3.0
    assert all("test_rmse" in r and "test_roc_auc" not in r for r in payload["runs"])


def test_every_model_trains_with_the_task_types_default_descriptors():
    """The package default leaves ``descriptors`` to the task type: the benchmark resolves it per set
    (chemprop's normalised set for classification, RDKit's for regression) instead of reading none."""
    bench = load_script(SCRIPT)
    args = bench.parse_args(["--datasets", "bace", "esol"])
    got = {s["name"]: bench.recipe(s, args)["descriptors"] for s in bench.sources(args)}
    assert got == {"bace": "rdkit2d_normalized", "esol": "rdkit2d"}
    args = bench.parse_args(["--datasets", "bace", "--set", "descriptors=none"])
    assert bench.recipe(bench.sources(args)[0], args)["descriptors"] == "none"

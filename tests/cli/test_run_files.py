"""What a training run leaves to look at and to reproduce it: curves.png, train.log, and the command
line and source commit in metrics.json."""
import importlib.util
import json
import re

import pytest

from graphattn.cli.main import main
from graphattn.train.curves import curves_plot


def test_train_writes_curves_log_and_its_command(tmp_path):
    out = tmp_path / "k"
    argv = ["train", "karate", "--epochs", "12", "--no-progress", "--threads", "1", "--out", str(out)]
    assert main(argv) == 0
    env = json.loads((out / "metrics.json").read_text())["environment"]
    assert env["command"] == "graphattn " + " ".join(argv)
    assert env["git_commit"] is None or re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", env["git_commit"])
    log = (out / "train.log").read_text().splitlines()
    assert [int(line.split()[1]) for line in log if line.startswith("Epoch ")] == list(range(1, 13))
    if importlib.util.find_spec("matplotlib"):
        assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*argv[:-2], "--out", str(out), "--resume", "--epochs", "14"]) == 0  # a resumed run continues the log
    log = (out / "train.log").read_text().splitlines()
    assert [int(line.split()[1]) for line in log if line.startswith("Epoch ")] == list(range(1, 15))


def test_curves_plot_marks_the_best_epoch_and_skips_undefined_values(tmp_path):
    pytest.importorskip("matplotlib")
    history = [{"epoch": e, "loss": 1.0 / e, "val": {"mae": 0.5 / e}, "test": {"mae": float("nan") if e == 2 else 0.6 / e}}
               for e in range(1, 6)]
    path = curves_plot(history, "mae", 4, tmp_path / "c.svg", title="run")
    text = path.read_text()
    assert "best epoch 4" in text and "MAE" in text


def test_seeds_run_into_their_folders_and_one_summary(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["train", "karate", "--seeds", "0", "1", "--epochs", "4", "--no-progress", "--threads", "1",
                 "--out", str(out)]) == 0
    runs = [json.loads((out / f"seed_{s}" / "metrics.json").read_text()) for s in (0, 1)]
    assert [r["meta"]["data"]["split_seed"] for r in runs] == [0, 1]  # each run got its seed
    summary = json.loads((out / "summary.json").read_text())
    acc = summary["metrics"]["test"]["accuracy"]
    assert acc["values"] == [r["test"]["accuracy"] for r in runs]
    assert acc["mean"] == pytest.approx(sum(acc["values"]) / 2)
    assert summary["seeds"] == [0, 1] and "command" in summary["environment"]
    assert "2 seeds (0 1), mean ± std:" in capsys.readouterr().out
    assert main(["train", "karate", "--seeds", "0", "1", "--epochs", "1"]) == 2
    assert "--seeds needs --out" in capsys.readouterr().err


def test_seed_summary_uses_the_sample_std_and_skips_undefined_values():
    from graphattn.cli.seeds import seed_summary
    s = seed_summary({0: {"test": {"roc_auc": 0.7, "num_molecules": 10}},
                      1: {"test": {"roc_auc": 0.9, "num_molecules": 10}},
                      2: {"test": {"roc_auc": None}}})
    assert set(s["test"]) == {"roc_auc"} and s["test"]["roc_auc"]["values"] == [0.7, 0.9]
    assert s["test"]["roc_auc"]["std"] == pytest.approx(0.1414213, rel=1e-5)


@pytest.mark.parametrize("extra, match", [
    (["--seed", "3"], "give --seed 3 or --seeds 0 1, not both"),
    (["--folds", "2"], "--folds already reports the mean"),
    (["--seeds", "0", "-1"], "--seeds: every seed must be in"),
])
def test_seeds_refuse_what_they_would_ignore(extra, match, tmp_path, capsys):
    argv = ["train", "mutag" if "--folds" in extra else "karate", "--seeds", "0", "1", "--epochs", "1",
            "--out", str(tmp_path / "s")]
    if extra[0] == "--seeds":
        argv = argv[:2] + extra + argv[4:]
    else:
        argv += extra
    assert main(argv) == 2
    assert match in capsys.readouterr().err

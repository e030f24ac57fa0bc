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

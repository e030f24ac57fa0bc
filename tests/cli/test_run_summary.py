"""The run description names the settings a named dataset gets beyond the general defaults (the
options not given on the command line), so a user sees what was applied without reading the code."""
import json

import pytest

from graphattn.cli.main import main
from graphattn.cli.options import applied_defaults, social_hparams
from graphattn.tasks.social.budget import BUDGET_LR_CAP, budget_lr, ours_warmup
from graphattn.tasks.social.node import USER_GRAPH, dataset_specific_defaults, node_defaults


def test_karate_run_names_its_dataset_defaults(tmp_path, capsys):
    assert main(["train", "karate", "--epochs", "1", "--lr", "0.02", "--no-progress", "--threads", "1",
                 "--out", str(tmp_path / "k")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("defaults of this dataset"))
    assert "--hidden 32" in line and "--dropout 0.2" in line and "--weight-decay 0.0005" in line
    assert "--lr" not in line and "--epochs" not in line  # given on the command line


def test_facebook_defaults_and_what_a_baseline_reads():
    class Args:
        given_options = frozenset({"self_loops"})
        baseline = "none"

    fb = dataset_specific_defaults("facebook")
    assert applied_defaults(fb, Args(), "node") == ("defaults of this dataset (each has its option): "
                                                    "--label-input True, --propagation 10")
    Args.baseline = "gcn"  # propagation and self-loops shape our model only
    assert applied_defaults(fb, Args(), "node").endswith("--label-input True")
    assert applied_defaults(dataset_specific_defaults("a file of mine"), Args(), "node") == ""
    Args.baseline = "none"  # a graph of the user's own: self-loops and a GCN branch for our model
    assert dataset_specific_defaults("") == USER_GRAPH
    assert applied_defaults(USER_GRAPH, Args(), "node").endswith("--gcn-weight 0.5")  # --self-loops given


def test_ours_warms_up_and_the_baselines_do_not_unless_told():
    class Args:
        epochs, lr, warmup, baseline = 30, None, None, "none"

    recipe = node_defaults("", 1000)
    assert social_hparams(Args(), recipe, full_batch=True)["warmup"] == ours_warmup(30) == 10
    assert ours_warmup(150) == 10 and ours_warmup(5) == 1 and ours_warmup(2) == 0
    Args.epochs = recipe["epochs"]  # a run of the recipe's own length keeps its rate and starts at it
    assert social_hparams(Args(), recipe, full_batch=True)["warmup"] == 0
    Args.epochs = 30
    Args.baseline = "gcn"
    hp = social_hparams(Args(), recipe, full_batch=True)
    assert hp["warmup"] == 0 and hp["lr"] == budget_lr(recipe["lr"], recipe["epochs"], 30)
    Args.warmup = 4
    assert social_hparams(Args(), recipe, full_batch=True)["warmup"] == 4
    assert social_hparams(Args(), recipe)["lr"] == recipe["lr"]  # mini-batches: many steps per epoch


def test_a_shortened_budget_raises_the_learning_rate_and_says_so(tmp_path, capsys):
    assert budget_lr(5e-3, 300, 30) == pytest.approx(5e-3 * 10 ** 0.5)
    assert budget_lr(3e-3, 150, 300) == 3e-3 and budget_lr(1e-3, 1000, 1) == pytest.approx(1e-3 * BUDGET_LR_CAP)
    # karate's recipe: lr 0.01 for 100 epochs; 25 epochs -> 0.02 (sqrt 4)
    assert main(["train", "karate", "--epochs", "25", "--no-progress", "--threads", "1",
                 "--out", str(tmp_path / "k")]) == 0
    out = capsys.readouterr().out
    assert "learning rate 0.02: the recipe's 0.01 is for 100 epochs; for 25 it is raised by sqrt(100/25)" in out
    hp = json.loads((tmp_path / "k" / "metrics.json").read_text())["meta"]["hparams"]
    assert hp["lr"] == pytest.approx(0.02)
    assert main(["train", "karate", "--epochs", "25", "--lr", "0.01", "--no-progress", "--threads", "1",
                 "--out", str(tmp_path / "given")]) == 0  # a given --lr is kept, and nothing is said
    assert "learning rate" not in capsys.readouterr().out
    assert json.loads((tmp_path / "given" / "metrics.json").read_text())["meta"]["hparams"]["lr"] == 0.01

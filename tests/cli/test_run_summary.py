"""The run description names the settings a named dataset gets beyond the general defaults (the
options not given on the command line), so a user sees what was applied without reading the code."""
from graphattn.cli.main import main
from graphattn.cli.options import applied_defaults
from graphattn.tasks.social.node import dataset_specific_defaults


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

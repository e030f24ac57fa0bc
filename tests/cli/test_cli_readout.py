"""``graphattn train --readout``: graph-level tasks only."""
from graphattn.cli import main as cli
from graphattn.cli.main import build_parser
from graphattn.cli.options import social_hparams
from graphattn.tasks.social.graph import graph_defaults, graph_model_spec
from graphattn.train import load_checkpoint

from tiny_inputs import write_tu_text


def test_molecule_readout(tmp_path, molecule_csv, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", "--csv", str(molecule_csv), "--epochs", "1", "--readout", "sum", "--hidden", "16",
                     "--layers", "1", "--heads", "2", "--no-descriptors", "--no-progress", "--out", str(run)]) == 0
    assert load_checkpoint(run / "best.pt")["meta"]["model"]["kwargs"]["readout"] == "sum"
    capsys.readouterr()
    assert cli.main(["train", "--csv", str(molecule_csv), "--readout", "token", "--global-tokens", "0",
                     "--no-progress"]) == 2
    assert "--readout token needs --global-tokens >= 1" in capsys.readouterr().err


def test_graph_set_readout(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    txt = write_tu_text(tmp_path / "TOY.txt")
    assert cli.main(["train", "--tu-text", str(txt), "--readout", "max", "--epochs", "1", "--batch-size", "8",
                     "--no-progress", "--out", str(tmp_path / "g")]) == 0
    assert load_checkpoint(tmp_path / "g" / "best.pt")["meta"]["model"]["kwargs"]["readout"] == "max"
    capsys.readouterr()
    assert cli.main(["train", "--tu-text", str(txt), "--readout", "token", "--global-tokens", "0",
                     "--epochs", "1", "--no-progress", "--out", str(tmp_path / "t")]) == 2
    assert "num_global_tokens >= 1" in capsys.readouterr().err


def test_node_tasks_refuse_readout(capsys):
    assert cli.main(["train", "karate", "--readout", "sum", "--epochs", "1"]) == 2
    assert "--readout is for graph-level tasks" in capsys.readouterr().err


def test_reddit_binary_readouts_per_model_and_explicit_override():
    def readouts(*flags):
        hp = social_hparams(build_parser().parse_args(["train", "reddit-binary", *flags]), graph_defaults("reddit-binary"))
        return (graph_model_spec("none", 78, 2, hp).kwargs["readout"],
                graph_model_spec("gcn", 78, 2, hp).kwargs["readout"])

    assert readouts() == ("mean", "sum")  # each model at the readout chosen on validation
    assert readouts("--readout", "max") == ("max", "max")  # an explicit readout is every model's
    assert readouts("--readout", "token") == ("token", "mean")  # the baselines have no tokens
    hp = social_hparams(build_parser().parse_args(["train", "imdb-binary"]), graph_defaults("imdb-binary"))
    assert graph_model_spec("gat", 78, 2, hp).kwargs["readout"] == "mean"

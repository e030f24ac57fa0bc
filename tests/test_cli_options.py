"""Newcomer audit (session 8): options of another task or of our model under --baseline are
refused instead of silently ignored; input mistakes are one-line errors (exit 2); --threads;
predict/explain input handling; metrics.json written atomically and by rank 0 only."""
import json

import pytest
import torch

from graphattn import cli
from graphattn.cli_options import GROUPS, check_applicable, given_options

from test_molecule_robustness import TINY, train_csv  # noqa: E402  (tests/ is on sys.path)


def _fails(argv, capsys, match, tmp_path):
    assert cli.main(["train", *argv, "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("argv,match", [
    (["tox21", "--edges", "e.csv"], "--edges: --edges input option(s), not used for molecules"),
    (["tox21", "--target-col", "y"], "--target-col"),
    (["karate", "--split", "random"], "--split: molecule option(s), not used for node classification"),
    (["karate", "--pos-weight"], "--pos-weight"),
    (["karate", "--no-descriptors"], "--descriptors"),
    (["karate", "--limit", "10"], "--limit: graph-level option(s)"),
    (["karate", "--batch-size", "8"], "--batch-size"),
    (["mutag", "--gcn-weight", "0.5"], "--gcn-weight: node-classification option(s), not used for graph sets"),
    (["mutag", "--self-loops"], "--self-loops"),
    (["mutag", "--tasks", "a"], "--tasks: molecule option(s)"),
    (["tox21", "--baseline", "gine", "--global-tokens", "2"], "not used by --baseline gine"),
    (["tox21", "--baseline", "gat", "--readout", "token"], "--readout"),
    (["karate", "--baseline", "gcn", "--propagation", "5"], "--propagation: option(s) of our model"),
    (["mutag", "--baseline", "gcn", "--pe-dim", "4"], "--pe-dim"),
])
def test_options_that_would_be_ignored_are_refused(argv, match, capsys, tmp_path):
    _fails(argv, capsys, match, tmp_path)


def test_the_table_and_the_given_options():
    assert not GROUPS["molecule"] & GROUPS["node-classification"]
    parser = cli.build_parser()
    args = parser.parse_args(["train", "karate", "--seed", "3", "--split", "scaffold", "--threads", "1"])
    # --split scaffold is the default: not "given"; --seed applies everywhere
    assert given_options(args, parser.parse_args(["train"])) == {"dataset", "seed", "threads"}
    args.given_options = frozenset({"split"})
    check_applicable(args, "molecule")
    with pytest.raises(ValueError, match="--split"):
        check_applicable(args, "graph")
    del args.given_options  # called without the CLI's record: nothing to check
    check_applicable(args, "graph")


def test_molecule_model_clash_is_a_one_line_error(molecule_csv, capsys, tmp_path):
    _fails(["--csv", str(molecule_csv), "--hidden", "30", "--heads", "4", "--epochs", "1"], capsys,
           "channels (30) must be divisible by heads (4)", tmp_path)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    src = train_csv(root / "train.csv")
    assert cli.main(["train", "--csv", str(src), "--split", "random", "--out", str(root / "run"), *TINY,
                     "--threads", "1"]) == 0
    metrics = json.loads((root / "run" / "metrics.json").read_text())
    assert not list((root / "run").glob("*.tmp"))  # written atomically, no leftovers
    return root / "run", src, metrics


def test_predict_and_explain_inputs(run, capsys, tmp_path):
    folder, src, _ = run
    ck = str(folder / "best.pt")
    capsys.readouterr()
    assert cli.main(["predict", "--checkpoint", ck, "--csv", str(tmp_path / "missing.csv")]) == 2
    err = capsys.readouterr().err
    assert "missing.csv: no such file" in err and "corrupt" not in err
    assert cli.main(["predict", "--checkpoint", ck, "--smiles", "CCO", "--csv", str(src)]) == 2
    err = capsys.readouterr().err
    assert "not both" in err and "predict: predict" not in err
    assert cli.main(["explain", "--checkpoint", ck, "--smiles", "xyz", "--out", str(tmp_path / "x.png")]) == 2
    assert cli.main(["explain", "--checkpoint", ck, "--smiles", "xyz", "CCO", "--out", str(tmp_path / "m.png")]) == 0
    captured = capsys.readouterr()
    assert "input 1 'xyz'" in captured.err and (tmp_path / "m_2.png").exists() and not (tmp_path / "m_1.png").exists()
    assert cli.main(["explain", "--checkpoint", ck, "--smiles", "CCO", "--node", "3"]) == 2
    assert "--node: for social-network checkpoints" in capsys.readouterr().err


def test_threads_option_sets_torch_threads(run):
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        # karate is small: without --threads the social path would pick 1 thread; an explicit value wins
        parser_args = ["train", "karate", "--threads", "2", "--epochs", "1", "--no-progress"]
        assert cli.main([*parser_args, "--out", str(run[0].parent / "k")]) == 0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(n)
    assert cli.main(["train", "karate", "--threads", "0"]) == 2
    assert cli.main(["train", "karate", "--consistency", "2", "--consistency-weight", "nan"]) == 2


def test_metrics_are_written_by_rank_zero_only(tmp_path, monkeypatch):
    from graphattn import distributed
    from graphattn.checkpoint import write_metrics

    write_metrics(tmp_path / "a" / "metrics.json", {"x": float("nan"), "y": 1})
    assert json.loads((tmp_path / "a" / "metrics.json").read_text()) == {"x": None, "y": 1}
    monkeypatch.setattr(distributed, "is_main", lambda: False)
    write_metrics(tmp_path / "b" / "metrics.json", {"y": 1})
    assert not (tmp_path / "b" / "metrics.json").exists()


def test_a_closed_output_pipe_ends_quietly(tmp_path):
    # `graphattn train karate | head -1`: the reader leaves; no traceback, no "Exception ignored"
    # (without PYTHONUNBUFFERED the last lines are still buffered when main() returns)
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["GRAPHATTN_NO_CPP"] = "1"  # a first-time C++ kernel build would itself write to the closed pipe
    proc = subprocess.Popen([sys.executable, "-m", "graphattn", "train", "karate", "--epochs", "3", "--no-progress",
                             "--out", str(tmp_path / "k")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # before the child has written anything (it is still importing torch)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 1, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err

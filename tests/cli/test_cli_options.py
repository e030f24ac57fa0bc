"""The CLI's options and outputs: options of another task or of our model under --baseline are
refused instead of silently ignored; input mistakes are one-line errors (exit 2); --threads;
predict/explain input handling; metrics.json written atomically, by rank 0 only, with the
environment; interrupted or full-disk runs, unwritable --out and --resume messages; `bench`."""
import csv
import errno
import json
import os
import subprocess
import sys
import urllib.request
import warnings
from pathlib import Path

import pytest
import torch
from tiny_inputs import TINY, train_csv
from torch_geometric.data import Batch, Data

import graphattn
import graphattn.tasks.trained as trained
from graphattn import GraphClassifier
from graphattn.cli import main as cli
from graphattn.cli.main import main
from graphattn.cli.options import GROUPS, check_applicable, given_options
from graphattn.testing import requires_data, shared_data_dir
from graphattn.train import TrainConfig, distributed, fit
from graphattn.train.checkpoint import write_metrics
from graphattn.utils.files import check_output_not_input


def _fails(argv, capsys, match, tmp_path):
    assert cli.main(["train", *argv, "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("argv,match", [
    (["tox21", "--edges", __file__], "--edges: --edges input option(s), not used for molecules"),
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
    (["karate", "--baseline", "gcn", "--heads", "2"], "--heads: option(s) of our model, not used by --baseline gcn"),
    (["tox21", "--baseline", "gine", "--heads", "2"], "not used by --baseline gine"),
    (["karate", "--propagation", "0", "--propagation-alpha", "0.3"], "--propagation-alpha needs --propagation"),
    (["karate", "--consistency-weight", "2"], "--consistency-weight needs --consistency"),
    (["karate", "--consistency-temperature", "0.3"], "--consistency-temperature needs --consistency"),
    (["tox21", "--smiles-col", "foo"], "--smiles-col foo names a column of --csv"),
    (["tox21", "--tasks", ""], "--tasks is empty"),
    (["imdb-binary", "--folds", "2", "--seed", "-3"], "--seed must be in 0..4294967295, got -3"),
    (["karate", "--seed", str(2 ** 70)], "--seed must be in"),
    (["karate", "--threads", "100000"], "--threads 100000: far more than"),
    (["--csv", ""], "--csv: empty path"),
    (["karate", "--init", ""], "--init: empty path"),
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
    assert "row 1 'xyz'" in captured.err and (tmp_path / "m_2.png").exists() and not (tmp_path / "m_1.png").exists()
    bad = tmp_path / "bad.csv"
    bad.write_text("smiles\nCCO\n\nxyz\n")  # a blank line: the bad record is row 2, file row 4, as predict says
    assert cli.main(["explain", "--checkpoint", ck, "--csv", str(bad), "--out", str(tmp_path / "b.png")]) == 0
    assert "row 2 (file row 4) 'xyz'" in capsys.readouterr().err
    assert cli.main(["predict", "--checkpoint", ck, "--csv", str(bad)]) == 0
    assert "row 2 (file row 4): 'xyz'" in capsys.readouterr().err
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
    write_metrics(tmp_path / "a" / "metrics.json", {"x": float("nan"), "y": 1})
    assert json.loads((tmp_path / "a" / "metrics.json").read_text()) == {"x": None, "y": 1}
    monkeypatch.setattr(distributed, "is_main", lambda: False)
    write_metrics(tmp_path / "b" / "metrics.json", {"y": 1})
    assert not (tmp_path / "b" / "metrics.json").exists()


def test_a_closed_output_pipe_ends_quietly(tmp_path):
    # `graphattn train karate | head -1`: the reader leaves; no traceback, no "Exception ignored"
    # (without PYTHONUNBUFFERED the last lines are still buffered when main() returns)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["GRAPHATTN_NO_CPP"] = "1"  # a first-time C++ kernel build would itself write to the closed pipe
    proc = subprocess.Popen([sys.executable, "-m", "graphattn", "train", "karate", "--epochs", "3", "--no-progress",
                             "--out", str(tmp_path / "k")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # before the child has written anything (it is still importing torch)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 1, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err


def test_empty_out_and_edges_without_features_file(capsys, tmp_path):
    assert cli.main(["train", "karate", "--out", ""]) == 2
    assert capsys.readouterr().err.strip() == "graphattn train: --out: empty path"
    assert cli.main(["pretrain", "--csv", "x.csv", "--out", ""]) == 2
    assert "--out: empty path" in capsys.readouterr().err
    edges, target = tmp_path / "e.csv", tmp_path / "t.csv"
    edges.write_text("id_1,id_2\n0,1\n1,2\n")
    target.write_text("id,label\n0,a\n1,b\n2,a\n")
    _fails(["--edges", str(edges), "--target", str(target), "--max-features", "10"], capsys,
           "--max-features cuts a --features file, which is not given", tmp_path)


def test_predict_never_writes_over_its_inputs_and_says_when_nothing_parsed(run, capsys, tmp_path):
    folder, src, _ = run
    ck = folder / "best.pt"
    before = ck.read_bytes()
    copy = tmp_path / "in.csv"
    copy.write_bytes(src.read_bytes())
    capsys.readouterr()
    for out, what in ((ck, "is the checkpoint"), (copy, "is the --csv input")):
        assert cli.main(["predict", "--checkpoint", str(ck), "--csv", str(copy), "--out", str(out)]) == 2
        assert what in capsys.readouterr().err
    other = tmp_path / "other.pt"
    other.write_bytes(b"x")
    assert cli.main(["predict", "--checkpoint", str(ck), "--smiles", "CCO", "--out", str(other)]) == 2
    assert "existing checkpoint file" in capsys.readouterr().err
    assert ck.read_bytes() == before and copy.read_bytes() == src.read_bytes()
    # every row invalid (the wrong column) or none at all: each row has its error (exit 0, the
    # documented contract), and stderr says what is likely wrong
    header = src.read_text().splitlines()[0].split(",")
    wrong = next(h for h in header if h != "smiles")
    assert cli.main(["predict", "--checkpoint", str(ck), "--csv", str(src), "--smiles-col", wrong,
                     "--out", str(tmp_path / "p.csv")]) == 0
    assert "could be parsed (wrong --smiles-col?)" in capsys.readouterr().err
    empty = tmp_path / "empty.csv"
    empty.write_text("smiles\n")
    assert cli.main(["predict", "--checkpoint", str(ck), "--csv", str(empty), "--out", str(tmp_path / "q.csv")]) == 0
    assert "no molecules in the input" in capsys.readouterr().err
    assert cli.main(["predict", "--checkpoint", str(ck), "--smiles", "CCO", "--smiles-col", "x"]) == 2
    assert "--smiles-col x names a column of --csv" in capsys.readouterr().err


def test_social_predict_refuses_its_checkpoint_as_out(tmp_path, capsys):
    out = tmp_path / "k"
    assert cli.main(["train", "karate", "--epochs", "1", "--out", str(out), "--no-progress"]) == 0
    before = (out / "best.pt").read_bytes()
    capsys.readouterr()
    assert cli.main(["predict", "--checkpoint", str(out / "best.pt"), "--out", str(out / "best.pt")]) == 2
    assert "is the checkpoint" in capsys.readouterr().err and (out / "best.pt").read_bytes() == before
    assert cli.main(["predict", "--checkpoint", str(out / "best.pt"), "--smiles-col", "x"]) == 2
    assert "--smiles-col is for molecule checkpoints" in capsys.readouterr().err
    assert cli.main(["explain", "--checkpoint", str(out / "best.pt"), "--node", "0", "--hops", "1000000",
                     "--out", str(tmp_path / "e.png")]) == 0  # as many hops as nodes: the whole component


@pytest.mark.parametrize("argv", [["karate", "--lr", "1e7", "--epochs", "5"],
                                  pytest.param(["imdb-binary", "--lr", "1e9", "--epochs", "2", "--folds", "2",
                                                "--limit", "60"], marks=requires_data("imdb_binary"))])
def test_a_diverging_run_is_one_line_naming_the_learning_rate(argv, capsys, tmp_path, monkeypatch):
    # the hidden states overflow before the loss does: not "x contains NaN" (the user's features are finite)
    monkeypatch.setenv("GRAPHATTN_DATA", str(shared_data_dir()))
    assert cli.main(["train", *argv, "--out", str(tmp_path / "d"), "--no-progress", "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "diverged" in err and "learning rate" in err and len(err.splitlines()) == 1, err


def test_divergence_is_named_for_tuple_batches_with_missing_labels():
    # the labels' NaN (missing) must not pass for non-finite inputs: the model diverged
    torch.manual_seed(0)
    x, ei = torch.randn(8, 4), torch.tensor([[0, 1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7]])
    batch = torch.zeros(8, dtype=torch.long)
    y = torch.tensor([[1.0, float("nan")]])
    model = GraphClassifier(4, 16, 2, num_layers=2, heads=2)
    loader = [(x, ei, batch, y)] * 4
    with pytest.raises(FloatingPointError, match="diverged"):
        fit(model, {"train": loader, "val": loader}, lambda m, b, split: (m(b[0], b[1], b[2]), b[3]), TrainConfig(kind="binary", epochs=5, lr=1e9, progress=False), log=lambda m: None)


def test_output_to_stdout_is_never_taken_for_an_input(run, capsys, tmp_path):
    check_output_not_input(Path("/dev/stdout"), {"the --csv input": "/dev/stdin"})  # not a regular file
    folder, src, _ = run
    assert cli.main(["predict", "--checkpoint", str(folder / "best.pt"), "--smiles", "xx", "yy"]) == 0
    err = capsys.readouterr().err
    assert "none of the 2 SMILES could be parsed" in err and "--smiles-col" not in err


@requires_data("github_developers")
def test_max_features_on_a_named_set_without_a_features_file(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHATTN_DATA", str(shared_data_dir()))
    _fails(["github", "--max-features", "50", "--epochs", "1"], capsys, "--max-features cuts a features file",
           tmp_path)


def test_predict_in_chunks_equals_predict_at_once(run, tmp_path, monkeypatch):
    folder, src, _ = run
    args = ["predict", "--checkpoint", str(folder / "best.pt"), "--csv", str(src)]
    assert cli.main(args + ["--out", str(tmp_path / "all.csv")]) == 0
    monkeypatch.setattr(trained, "PREDICT_CHUNK", 3)  # chunk edges fall on valid and invalid rows
    assert cli.main(args + ["--out", str(tmp_path / "chunks.csv")]) == 0
    # the same rows, columns and errors; probabilities equal up to float rounding (another batch
    # composition sums in another order: 1e-6 in the 6th decimal happens)
    whole, chunked = (list(csv.DictReader(open(tmp_path / name))) for name in ("all.csv", "chunks.csv"))
    assert len(whole) == len(chunked) and list(whole[0]) == list(chunked[0])
    tasks = graphattn.load(folder / "best.pt").task_names
    assert tasks and set(tasks) <= set(whole[0])
    for a, b in zip(whole, chunked):
        assert {k: v for k, v in a.items() if k not in tasks} == {k: v for k, v in b.items() if k not in tasks}
        assert all(abs(float(a[t]) - float(b[t])) <= 2e-6 if a[t] else a[t] == b[t] for t in tasks)


def test_nan_features_in_a_list_of_graphs_stay_a_data_error_and_dict_labels_are_left_out():
    torch.manual_seed(0)
    ei = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    y = torch.tensor([[1.0, 0.0]])
    ok = Data(x=torch.randn(5, 4), edge_index=ei, y=y)
    bad = Data(x=torch.full((5, 4), float("nan")), edge_index=ei, y=y)

    def fwd(m, graphs, split):
        b = Batch.from_data_list(graphs)
        return m(b.x, b.edge_index, b.batch), b.y

    with pytest.raises(ValueError, match="x contains NaN"):  # the user's data, not a divergence
        fit(GraphClassifier(4, 16, 2, num_layers=2, heads=2), {"train": [[ok, ok], [ok, bad]], "val": [[ok, ok]]}, fwd, TrainConfig(kind="binary", epochs=2, lr=1e-3, progress=False), log=lambda m: None)
    x = torch.randn(5, 4)
    d = {"x": x, "ei": ei, "b": torch.zeros(5, dtype=torch.long), "labels": torch.tensor([[1.0, float("nan")]])}
    with pytest.raises(FloatingPointError, match="diverged"):
        fit(GraphClassifier(4, 16, 2, num_layers=2, heads=2), {"train": [d] * 4, "val": [d]}, lambda m, b, split: (m(b["x"], b["ei"], b["b"]), b["labels"]), TrainConfig(kind="binary", epochs=5, lr=1e9, progress=False), log=lambda m: None)


def test_bench_without_such_script_lists_the_available_ones(capsys):
    assert main(["bench", "no_such_benchmark"]) == 2
    err = capsys.readouterr().err
    assert "large_graph" in err and "attention" in err


def test_interrupt_and_full_disk_are_one_line(monkeypatch, capsys):
    def interrupted(argv=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_main", interrupted)
    assert main(["train", "karate"]) == 130
    assert "--resume" in capsys.readouterr().err
    assert main(["predict", "--checkpoint", "x"]) == 130
    assert "--resume" not in capsys.readouterr().err

    def full(argv=None):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli, "_main", full)
    monkeypatch.setattr(cli, "_stdout_to_devnull", lambda: None)  # keep pytest's capture
    assert main(["predict", "--checkpoint", "x"]) == 1
    assert "no space left" in capsys.readouterr().err

    def other(argv=None):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(cli, "_main", other)
    with pytest.raises(OSError):  # other OS errors are not hidden
        main(["predict", "--checkpoint", "x"])


def test_resume_without_last_pt_says_so(tmp_path, capsys):
    assert main(["train", "karate", "--epochs", "1", "--resume", "--no-progress", "--threads", "1",
                 "--out", str(tmp_path / "new")]) == 0
    assert "no " + str(tmp_path / "new" / "last.pt") + " to resume from" in capsys.readouterr().out


def test_a_missing_dataset_on_train_gives_only_the_real_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRAPHATTN_DATA", str(tmp_path / "empty"))  # today's root = the root train records
    (tmp_path / "empty").mkdir()
    def offline(*args, **kwargs):
        raise urllib.error.URLError("offline (test)")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning that "the data root this model was trained with ... does not hold"
        code = main(["train", "mutag", "--epochs", "1", "--no-progress", "--out", str(tmp_path / "r")])
    assert code == 2 and "mutag" in capsys.readouterr().err.lower()


def test_unwritable_out_is_refused_before_training(tmp_path, monkeypatch, capsys):
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(tmp_path) else real(p, mode))
    assert main(["train", "karate", "--out", str(tmp_path / "run")]) == 2
    assert "is not writable" in capsys.readouterr().err


def test_resume_names_changed_settings_and_refuses_another_batching(tmp_path, capsys):
    base = ["train", "karate", "--no-progress", "--threads", "1", "--out", str(tmp_path / "k")]
    assert main([*base, "--epochs", "1", "--lr", "0.01"]) == 0  # (without --lr a 1-epoch run raises the rate)
    capsys.readouterr()
    assert main([*base, "--epochs", "2", "--resume", "--mini-batch"]) == 2  # full batch -> partitions
    err = capsys.readouterr().err
    assert "another run" in err and "batching" in err
    assert main([*base, "--epochs", "2", "--resume", "--lr", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "--resume with changed settings" in out and "lr 0.01 -> 0.02" in out and "epochs 1 -> 2" in out


def test_metrics_record_the_environment(tmp_path):
    assert main(["train", "karate", "--epochs", "1", "--no-progress", "--threads", "1",
                 "--out", str(tmp_path / "k")]) == 0
    env = json.loads((tmp_path / "k" / "metrics.json").read_text())["environment"]
    assert env["torch"] == torch.__version__ and env["torch_threads"] == 1
    assert env["cpp_kernel"] in ("loaded", "failed to build: pure PyTorch path",
                                 "disabled (GRAPHATTN_NO_CPP): pure PyTorch path")

"""The social CLI on awkward input: clashing options, changed files, tiny sets, node ids."""
import csv
import json
import math
import os
import subprocess
import sys
import urllib.request

import pytest
import torch
from tiny_inputs import write_file
from torch import nn

from graphattn.cli.main import main
from graphattn.cli.social_train import dataset_key as _key
from graphattn.data import DataFileError, find_file
from graphattn.tasks.social import graph_data as sg
from graphattn.tasks.social import node as sn
from graphattn.tasks.social.node import _standardize
from graphattn.tasks.social.specs import GraphDataSpec, NodeDataSpec
from graphattn.train import CheckpointError, TrainConfig, fit, load_checkpoint
from graphattn.train.checkpoint import check_same_run, write_metrics


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GRAPHATTN_DATA", str(tmp_path / "no-data-here"))


def usage_error(capsys, *argv):
    assert main([*map(str, argv)]) == 2
    return capsys.readouterr().err


def _graph(tmp_path, n=40, ids=lambda i: 5 + 10 * i, labels=("human", "bot"), seed=0):
    """Two communities in the release format, with file ids that are not row numbers."""
    g = torch.Generator().manual_seed(seed)
    y = (torch.arange(n) >= n // 2).long()
    rows = [(ids(i), ids(j)) for i in range(n) for j in range(i + 1, n)
            if torch.rand(1, generator=g) < (0.3 if y[i] == y[j] else 0.02)]
    (tmp_path / "e.csv").write_text("id_1,id_2\n" + "".join(f"{a},{b}\n" for a, b in rows))
    (tmp_path / "t.csv").write_text("id,kind\n" + "".join(f"{ids(i)},{labels[int(y[i])]}\n" for i in range(n)))
    return tmp_path / "e.csv", tmp_path / "t.csv"


def _train(tmp_path, edges, target, out, *extra):
    assert main(["train", "--edges", str(edges), "--target", str(target), "--target-col", "kind",
                 "--epochs", "3", "--out", str(out), "--no-progress", *map(str, extra)]) == 0


def test_aliases_of_the_data_modules_reach_the_cli():
    for alias, name in (("lastfm", "lastfm_asia"), ("deezer", "deezer_europe"), ("imdbbinary", "imdb-binary"),
                        ("redditbinary", "reddit-binary"), ("deezer_ego_nets", "deezer-ego"),
                        ("deezer-egos", "deezer-ego"), ("reddit10k", "reddit-threads"),
                        ("github_developers", "github"), ("Twitch_EN", "twitch-engb")):
        assert _key(alias) == name, alias
    assert _key("nonsense") is None


def test_clashing_and_out_of_range_options(tmp_path, capsys):
    edges, target = _graph(tmp_path)
    assert "not both" in usage_error(capsys, "train", "karate", "--edges", edges, "--target", target)
    assert "not both" in usage_error(capsys, "train", "--edges", edges, "--target", target, "--tu-text", edges)
    assert "not both" in usage_error(capsys, "train", "karate", "--tu-text", edges)
    assert "--target goes with --edges" in usage_error(capsys, "train", "--target", target)
    assert "--target-col goes with --edges" in usage_error(capsys, "train", "karate", "--target-col", "kind")
    assert "--edges needs --target" in usage_error(capsys, "train", "--edges", edges)
    assert "--epochs must be >= 1" in usage_error(capsys, "train", "karate", "--epochs", 0)
    assert "--folds must be >= 2" in usage_error(capsys, "train", "karate", "--folds", -2)
    assert "--limit must be >= 1" in usage_error(capsys, "train", "karate", "--limit", 0)
    assert "--dropout must be in [0, 1)" in usage_error(capsys, "train", "karate", "--dropout", 1.5)
    assert "--lr must be a finite number > 0" in usage_error(capsys, "train", "karate", "--lr", 0)
    assert "--lr must be a finite number > 0" in usage_error(capsys, "train", "karate", "--lr", "inf")
    assert "--weight-decay must be a finite number >= 0" in usage_error(capsys, "train", "karate", "--weight-decay", "nan")


def test_key_error_messages_keep_their_quotes(tmp_path, capsys):
    edges, target = _graph(tmp_path)
    err = usage_error(capsys, "train", "--edges", edges, "--target", target, "--target-col", "nope", "--epochs", 1)
    assert "nope" in err and err.count("'") % 2 == 0


def test_single_class_target_is_refused(tmp_path, capsys):
    edges, target = _graph(tmp_path, labels=("human", "human"))
    assert "same class" in usage_error(capsys, "train", "--edges", edges, "--target", target, "--target-col", "kind",
                                "--epochs", 1)


def test_one_node_graph_gives_finite_features():
    x = _standardize(torch.tensor([[3.0, 1.0]]))
    assert torch.isfinite(x).all() and torch.equal(x, torch.zeros(1, 2))


def test_tiny_graph_set_is_a_clear_error_not_a_swallowed_keyerror(tmp_path, capsys):
    txt = tmp_path / "TWO.txt"
    txt.write_text("2\n2 0\n0 1 1\n0 1 0\n2 1\n0 1 1\n0 1 0\n")
    err = usage_error(capsys, "train", "--tu-text", txt, "--epochs", 1, "--no-progress")
    assert "too few" in err and "val" in err


def test_text_file_as_checkpoint_and_resume_into_another_model(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("this is not a checkpoint\n" * 20)
    assert "not a graphattn checkpoint" in usage_error(capsys, "evaluate", "--checkpoint", bad)
    edges, target = _graph(tmp_path)
    out = tmp_path / "run"
    _train(tmp_path, edges, target, out)
    err = usage_error(capsys, "train", "karate", "--epochs", 4, "--out", out, "--resume", "--no-progress")
    assert "--resume" in err and "another run" in err


def test_changed_or_moved_input_files(tmp_path, capsys):
    edges, target = _graph(tmp_path)
    out = tmp_path / "run"
    _train(tmp_path, edges, target, out)
    target.write_text(target.read_text().replace("bot", "robot"))
    assert "differ from the classes" in usage_error(capsys, "predict", "--checkpoint", out / "best.pt")
    edges.rename(tmp_path / "moved.csv")
    err = usage_error(capsys, "evaluate", "--checkpoint", out / "best.pt")
    assert "e.csv" in err and "Traceback" not in err
    assert "molecule checkpoints" in usage_error(capsys, "predict", "--checkpoint", out / "best.pt", "--smiles", "CCO")


def test_explain_takes_file_node_ids(tmp_path, capsys):
    edges, target = _graph(tmp_path)
    out = tmp_path / "run"
    _train(tmp_path, edges, target, out)
    assert main(["explain", "--checkpoint", str(out / "best.pt"), "--node", "155",
                 "--out", str(tmp_path / "noext")]) == 0
    text = capsys.readouterr().out
    assert "\nNode 155:" in text and (tmp_path / "noext.png").is_file()
    assert main(["explain", "--checkpoint", str(out / "best.pt"), "--node", "155", "--out", str(tmp_path)]) == 0
    assert main(["predict", "--checkpoint", str(out / "best.pt"), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "explain_node155.png").is_file() and (tmp_path / "predictions.csv").is_file()
    assert "not a node id" in usage_error(capsys, "explain", "--checkpoint", out / "best.pt", "--node", 16)
    assert "--hops must be >= 1" in usage_error(capsys, "explain", "--checkpoint", out / "best.pt", "--node", 155,
                                          "--hops", 0)


def test_features_source_is_pinned_in_the_checkpoint(tmp_path, capsys):
    edges, target = _graph(tmp_path, ids=lambda i: i)
    out = tmp_path / "run"
    _train(tmp_path, edges, target, out)
    spec = load_checkpoint(out / "best.pt")["meta"]["data"]
    assert spec["feature_source"] == "structural"

    # a features file that appears later is not used by this checkpoint
    feats = tmp_path / "f.json"
    feats.write_text(json.dumps({str(i): [i % 3] for i in range(40)}))
    data = sn.load_node_data(NodeDataSpec.from_dict({**spec, "features": str(feats)}))
    assert data.base_feature_source == "structural"
    # ... and a checkpoint trained on a file fails clearly without it
    with pytest.raises(ValueError, match="features file"):
        sn.load_node_data(NodeDataSpec.from_dict({**spec, "feature_source": "file"}))


def test_mini_batch_reports_whole_graph_accuracy(tmp_path, capsys):
    out = tmp_path / "mb"
    assert main(["train", "karate", "--mini-batch", "--epochs", "2", "--out", str(out), "--no-progress"]) == 0
    assert "whole graph" in capsys.readouterr().out
    full = json.loads((out / "metrics.json").read_text())["full_graph"]
    assert main(["evaluate", "--checkpoint", str(out / "best.pt")]) == 0
    evaluated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["accuracy"]
    assert evaluated == pytest.approx(full)


def test_metrics_json_is_strict(tmp_path):
    write_metrics(tmp_path / "m.json", {"a": float("nan"), "b": [1.0, math.inf], "c": {"d": 2}})
    assert json.loads((tmp_path / "m.json").read_text()) == {"a": None, "b": [1.0, None], "c": {"d": 2}}


def test_tu_text_node_attributes_reach_the_features(tmp_path, capsys):
    lines = ["6"]
    for g in range(6):
        lines += [f"2 {g % 2}", f"0 1 1 {g}.5 1", f"0 1 0 {-g}.0 2"]
    (tmp_path / "ATTR.txt").write_text("\n".join(lines) + "\n")
    base = GraphDataSpec(tu_text=str(tmp_path / "ATTR.txt"), node_attr=False)
    without = sg.load_graphs(base)
    with_attr = sg.load_graphs(base.replace(node_attr=True))
    assert with_attr[0].num_features == without[0].num_features + 2
    attr = torch.cat([g.x[:, -2:] for g in with_attr])
    assert torch.allclose(attr.mean(0), torch.zeros(2), atol=1e-5)  # z-scored over the set


def test_resume_refuses_another_run_with_the_same_shapes(tmp_path):
    torch.manual_seed(0)
    x, y = torch.randn(32, 4), torch.randint(0, 2, (32,))
    loaders = {"train": [(x, y)], "val": [(x, y)]}
    forward = lambda model, batch, split: (model(batch[0]), batch[1])  # noqa: E731
    meta = {"pipeline": "node", "data": {"edges": "a.csv"}, "hparams": {"epochs": 2}}
    fit(nn.Linear(4, 2), loaders, forward, TrainConfig(kind="multiclass", epochs=2, progress=False), out_dir=tmp_path, meta=meta, log=lambda m: None)
    # more epochs of the same run: fine
    res = fit(nn.Linear(4, 2), loaders, forward, TrainConfig(kind="multiclass", epochs=3, resume=True, progress=False), out_dir=tmp_path, meta={**meta, "hparams": {"epochs": 3}}, log=lambda m: None)
    assert res["epochs_run"] == 3
    with pytest.raises(CheckpointError, match="another run .*data"):
        fit(nn.Linear(4, 2), loaders, forward, TrainConfig(kind="multiclass", epochs=4, resume=True, progress=False), out_dir=tmp_path, meta={**meta, "data": {"edges": "b.csv"}}, log=lambda m: None)


def test_checkpoint_paths_that_are_not_checkpoints(tmp_path):
    with pytest.raises(CheckpointError, match="is a folder"):
        load_checkpoint(tmp_path)
    (tmp_path / "x.csv").write_text("smiles,y\nCCO,1\n")
    with pytest.raises(CheckpointError, match="not a graphattn checkpoint"):
        load_checkpoint(tmp_path / "x.csv")


def test_failed_download_leaves_no_folders_and_disabled_download_says_so(tmp_path, monkeypatch):
    def offline(*a, **k):
        raise OSError("offline")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(DataFileError, match="downloading"):
        find_file("some_set/deeper/file.csv", url="https://example.invalid/file.csv", root=root)
    assert list(root.iterdir()) == []
    with pytest.raises(DataFileError, match="downloads are disabled.*example.invalid"):
        find_file("some_set/file.csv", url="https://example.invalid/file.csv", root=root, download=False)


def test_resume_tolerates_a_moved_data_root_and_newer_spec_keys(tmp_path):
    old = {"pipeline": "node", "data": {"name": "lastfm_asia", "root": "/a", "split_seed": 0},
           "model": {"class": "NodeClassifier", "kwargs": {"hidden": 64}}}
    moved = {**old, "data": {**old["data"], "root": "/b", "feature_source": "structural"}}
    check_same_run(tmp_path / "last.pt", old, moved)  # no error
    with pytest.raises(CheckpointError, match="data"):
        check_same_run(tmp_path / "last.pt", old, {**old, "data": {**old["data"], "split_seed": 1}})
    with pytest.raises(CheckpointError, match="model"):
        check_same_run(tmp_path / "last.pt", old, {**old, "model": {"class": "NodeClassifier",
                                                                    "kwargs": {"hidden": 64, "gcn_weight": 0.5}}})


def test_explain_without_node_draws_the_first_row(tmp_path, capsys):
    edges, target = _graph(tmp_path)
    out = tmp_path / "run"
    _train(tmp_path, edges, target, out)
    assert main(["explain", "--checkpoint", str(out / "best.pt"), "--out", str(tmp_path / "first.png")]) == 0
    assert "\nNode 5:" in capsys.readouterr().out  # ids are 5, 15, ...: row 0 has id 5


def _rings(path, labels):
    """DGCNN/GIN text file of 4-node rings, one per label (in file order)."""
    lines = [str(len(labels))]
    for lab in labels:
        lines += [f"4 {lab}"] + [f"0 2 {(i - 1) % 4} {(i + 1) % 4}" for i in range(4)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_graph_checkpoint_refuses_files_with_other_classes_or_widths(tmp_path, capsys):
    two = _rings(tmp_path / "two.txt", [0, 1] * 10)
    out = tmp_path / "run"
    assert main(["train", "--tu-text", str(two), "--epochs", "1", "--out", str(out), "--no-progress"]) == 0
    ck = out / "best.pt"
    for labels in ([0, 1, 2] * 7, [0, 5] * 10):  # a new class; relabelled classes: refused, no IndexError nor silent relabelling
        other = _rings(tmp_path / "other.txt", labels)
        for command in ("predict", "evaluate"):
            err = usage_error(capsys, command, "--checkpoint", ck, "--tu-text", other)
            assert "differ from the classes" in err and "Traceback" not in err, (labels, command, err)
    attr = tmp_path / "attr.txt"  # the same graphs with a node attribute column: another feature width
    attr.write_text("\n".join(line + (" 0.5" if line.startswith("0 2") else "") for line in two.read_text().splitlines()))
    assert "columns, the model was trained on" in usage_error(capsys, "evaluate", "--checkpoint", ck, "--tu-text", attr)


def test_predict_numbers_a_limited_graph_set_by_file_position(tmp_path, capsys):
    txt = _rings(tmp_path / "many.txt", [i % 3 for i in range(30)])
    out = tmp_path / "run"
    assert main(["train", "--tu-text", str(txt), "--limit", "12", "--epochs", "1", "--out", str(out),
                 "--no-progress"]) == 0
    assert main(["predict", "--checkpoint", str(out / "best.pt"), "--out", str(tmp_path / "p.csv")]) == 0
    rows = list(csv.DictReader((tmp_path / "p.csv").open()))
    pos = [int(r["graph"]) for r in rows]
    assert len(rows) == 12 and pos == sorted(set(pos)) and pos != list(range(12))  # a random subset, file order
    assert all(int(r["label"]) == int(r["graph"]) % 3 for r in rows)  # label of that file position


def test_features_file_of_edges_runs_moved_unused_or_shrunk(tmp_path, capsys):
    edges, target = _graph(tmp_path, ids=lambda i: i)
    few = tmp_path / "few.json"  # 2 of 40 nodes: the run falls back to structural features
    few.write_text(json.dumps({"0": [1], "1": [2]}))
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match="fewer than half"):
        _train(tmp_path, edges, target, out, "--features", few)
    few.rename(tmp_path / "elsewhere.json")  # never used: predict/evaluate do not need it
    assert main(["evaluate", "--checkpoint", str(out / "best.pt")]) == 0
    assert main(["predict", "--checkpoint", str(out / "best.pt"), "--out", str(tmp_path / "p.csv")]) == 0
    capsys.readouterr()
    plain = tmp_path / "plain"  # trained without --features: a --features given later is refused, not ignored
    _train(tmp_path, edges, target, plain)
    full = tmp_path / "full.json"
    full.write_text(json.dumps({str(i): [i % 3, 3 + i % 2] for i in range(40)}))
    assert "not trained on --features files" in usage_error(capsys, "evaluate", "--checkpoint", plain / "best.pt",
                                                     "--features", full)
    used = tmp_path / "used"  # trained on the file, which then covers too few nodes: said so
    _train(tmp_path, edges, target, used, "--features", full)
    full.write_text(json.dumps({"0": [1]}))
    err = usage_error(capsys, "evaluate", "--checkpoint", used / "best.pt")
    assert "covers too few" in err and "data root" not in err
    edges.rename(tmp_path / "moved.csv")  # a moved input names the flag that gives its new place
    assert "give their new place with --edges" in usage_error(capsys, "predict", "--checkpoint", used / "best.pt")


@pytest.fixture
def edges(tmp_path):
    return write_file(tmp_path / "e.csv", "id_1,id_2\n0,1\n1,2\n2,3\n3,0\n")


def _cli(*args, env_extra=None):
    env = {**os.environ, "GRAPHATTN_CACHE": str(env_extra)} if env_extra else None
    return subprocess.run([sys.executable, "-m", "graphattn", *args], capture_output=True, text=True,
                          timeout=600, env=env)


def test_label_column_with_one_value_per_node_is_refused(tmp_path, edges):
    t = write_file(tmp_path / "t.csv", "id,score\n" + "".join(f"{i},{i * 1.5}\n" for i in range(4)))
    res = _cli("train", "--edges", str(edges), "--target", str(t), "--target-col", "score",
               "--epochs", "1", "--no-progress", "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "leaves the validation or test set empty" in res.stderr, res.stderr


def test_too_few_graphs_for_folds_names_the_option(tmp_path):
    f = write_file(tmp_path / "x.txt", "4\n" + "".join(f"2 {i % 2}\n0 1 1\n0 1 0\n" for i in range(4)))
    res = _cli("train", "--tu-text", str(f), "--folds", "10", "--epochs", "1", "--no-progress",
               "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "--folds 10" in res.stderr, res.stderr

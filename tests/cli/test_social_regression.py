"""Regression on node targets: train -> evaluate -> predict -> explain in the target's own units,
the numeric target column, and the options a regression run refuses."""
import csv
import json
import math

import numpy as np
import pytest
import torch

import graphattn.cli.social_train as social_train
from graphattn.cli.main import main
from graphattn.data.download import DataFileError
from graphattn.data.musae import load_musae
from graphattn.testing import requires_data, shared_data_dir
from graphattn.train import load_checkpoint

from tiny_inputs import write_tu_text

TINY = ["--hidden", "8", "--layers", "1", "--heads", "2", "--no-progress", "--seed", "0"]


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    root = shared_data_dir()
    if root is not None:
        monkeypatch.setenv("GRAPHATTN_DATA", str(root))


def _graph(tmp_path, n=60, values=None, missing=()):
    """A k-nearest-neighbour graph of ``n`` random points; the target is a smooth function of the
    position on a scale of 1000 +- 300 (plus noise), the features one-hot bins of the position."""
    rng = np.random.default_rng(0)
    pos = rng.uniform(0, 1, size=(n, 2))
    edges = set()
    for i in range(n):
        for j in np.argsort(((pos - pos[i]) ** 2).sum(1))[1:5]:
            edges.add((min(i, int(j)), max(i, int(j))))
    y = 1000 + 300 * np.sin(2 * np.pi * pos[:, 0]) + 200 * (pos[:, 1] - 0.5) + rng.normal(0, 20, n)
    cells = [f"{v:.2f}" for v in y] if values is None else list(values)
    for i in missing:
        cells[i] = ""
    (tmp_path / "edges.csv").write_text("id_1,id_2\n" + "".join(f"{a},{b}\n" for a, b in sorted(edges)))
    (tmp_path / "target.csv").write_text("id,views\n" + "".join(f"{i},{c}\n" for i, c in enumerate(cells)))
    bins = {str(i): [int(pos[i, 0] * 10), 10 + int(pos[i, 1] * 10)] for i in range(n)}
    (tmp_path / "features.json").write_text(json.dumps(bins))
    return tmp_path / "edges.csv", tmp_path / "target.csv", tmp_path / "features.json"


def _train(tmp_path, *extra, out="run", features=True):
    e, t, f = _graph(tmp_path)
    argv = ["train", "--edges", e, "--target", t, *(["--features", f] if features else []),
            "--target-col", "views", "--task-type", "regression", "--out", tmp_path / out, *TINY, *extra]
    return main([str(a) for a in argv])


def test_regression_train_evaluate_predict_explain_in_original_units(tmp_path, capsys):
    assert _train(tmp_path, "--epochs", "150", "--lr", "0.01") == 0
    text = capsys.readouterr().out
    assert "target 'views' (train mean" in text and "val mae" in text and "test mae" in text and "R²" in text
    run = tmp_path / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    meta = load_checkpoint(run / "best.pt")["meta"]
    assert meta["task_type"] == "regression" and meta["target_col"] == "views" and meta["class_names"] == []
    stats = meta["target_statistics"]
    assert stats["tasks"] == ["views"] and 800 < stats["mean"][0] < 1200 and stats["std"][0] > 50
    assert metrics["meta"]["target_statistics"] == stats  # for people reading metrics.json
    y = np.array([float(r["views"]) for r in csv.DictReader(open(tmp_path / "target.csv"))])
    for split in ("val", "test"):
        for key in ("mae", "rmse", "r2"):
            assert math.isfinite(metrics[split][key])
    # predict: original units, one row per node, the test rows' MAE is the metrics' test MAE
    assert main(["predict", "--checkpoint", str(run / "best.pt"), "--out", str(tmp_path / "pred.csv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "pred.csv")))
    assert len(rows) == 60 and list(rows[0]) == ["node", "node_id", "split", "label", "views"]
    pred = np.array([float(r["views"]) for r in rows])
    assert 700 < pred.mean() < 1300  # not standard units (mean 0, std 1)
    test = [i for i, r in enumerate(rows) if r["split"] == "test"]
    train = [i for i, r in enumerate(rows) if r["split"] == "train"]
    assert np.abs(pred[test] - y[test]).mean() == pytest.approx(metrics["test"]["mae"], rel=1e-5)
    # a learnable target: better than predicting the training mean
    assert metrics["test"]["mae"] < 0.8 * np.abs(y[test] - y[train].mean()).mean()
    assert metrics["test"]["r2"] > 0.3
    # evaluate: the same numbers from the checkpoint alone
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(run / "best.pt")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("train mae") and "test mae" in out[0]
    got = json.loads(out[-1])
    assert got["task_type"] == "regression" and got["target_col"] == "views"
    for split in ("train", "val", "test"):
        for key in ("mae", "rmse", "r2"):
            assert got["metrics"][split][key] == pytest.approx(metrics[split][key], rel=1e-6)


def test_explain_draws_a_regression_checkpoint(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert _train(tmp_path, "--epochs", "3") == 0
    capsys.readouterr()
    png = tmp_path / "x.png"
    assert main(["explain", "--checkpoint", str(tmp_path / "run" / "best.pt"), "--node", "3", "--out", str(png)]) == 0
    line = capsys.readouterr().out
    assert line.startswith("Node 3: predicted views ") and "label " in line and png.stat().st_size > 1000


def test_loss_and_metric_reach_the_config(tmp_path, monkeypatch):
    seen = {}

    def spy(model, loaders, forward, config, **kw):
        seen["config"] = config
        return real(model, loaders, forward, config, **kw)

    real = social_train.fit
    monkeypatch.setattr(social_train, "fit", spy)
    assert _train(tmp_path, "--epochs", "3", "--loss", "l1", "--metric", "rmse") == 0
    cfg = seen["config"]
    assert cfg.kind == "regression" and cfg.loss_name == "l1" and cfg.selection == ("rmse", False)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["val"]["loss"] == pytest.approx(metrics["val"]["mae"], rel=1e-4)  # the L1 loss, original units


def test_missing_cells_are_unlabelled_and_structural_features_and_mini_batches_work(tmp_path):
    assert _train(tmp_path, "--epochs", "2", "--mini-batch", features=False) == 0  # no features file
    data = load_musae(tmp_path / "edges.csv", tmp_path / "target.csv", target_col="views", numeric_target=True)
    assert data.y.shape == (60, 1) and data.y.dtype == torch.float32 and data.class_names == []
    _graph(tmp_path, missing=(4, 9))
    with pytest.warns(UserWarning, match="2 of 60 nodes have no label"):
        data = load_musae(tmp_path / "edges.csv", tmp_path / "target.csv", target_col="views", numeric_target=True)
    assert torch.isnan(data.y[[4, 9], 0]).all() and int(torch.isnan(data.y).sum()) == 2
    assert _train(tmp_path, "--epochs", "2", out="run2") == 0
    meta = load_checkpoint(tmp_path / "run2" / "best.pt")["meta"]
    assert meta["batching"] == "full"
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert set(metrics["full_graph"]) == {"train", "val", "test"}  # --mini-batch: the whole graph too


@pytest.mark.parametrize("cell, why", [("abc", "is not a number"), ("inf", "is infinite"), ("True", "is not a number")])
def test_a_non_numeric_target_cell_is_one_line_naming_row_and_value(tmp_path, capsys, cell, why):
    e, t, _ = _graph(tmp_path, values=[str(1000 + i) for i in range(5)] + [cell] + [str(1000 + i) for i in range(54)])
    rc = main(["train", "--edges", str(e), "--target", str(t), "--target-col", "views", "--task-type", "regression",
               "--out", str(tmp_path / "run"), *TINY])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "Traceback" not in err and len(err.splitlines()) == 1
    assert f"row 7, column 'views': '{cell}' {why}" in err
    with pytest.raises(DataFileError, match="row 7"):
        load_musae(e, t, target_col="views", numeric_target=True)


def _refused(tmp_path, capsys, argv):
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_a_constant_target_is_refused_by_name(tmp_path, capsys):
    e, t, _ = _graph(tmp_path, values=["1000"] * 60)
    err = _refused(tmp_path, capsys, ["train", "--edges", e, "--target", t, "--target-col", "views",
                                      "--task-type", "regression", "--out", tmp_path / "run", *TINY])
    assert "target column 'views' has one value (1000)" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("extra, msg", [
    (["--label-input"], "--label-input: classification option(s)"),
    (["--consistency", "2"], "--consistency: classification option(s)"),
    (["--metric", "accuracy"], "--metric accuracy is not a metric of this regression run"),
])
def test_classification_options_are_refused_with_regression(tmp_path, capsys, extra, msg):
    e, t, _ = _graph(tmp_path)
    err = _refused(tmp_path, capsys, ["train", "--edges", e, "--target", t, "--target-col", "views",
                                      "--task-type", "regression", *extra, "--out", tmp_path / "run", *TINY])
    assert msg in err


def test_regression_options_are_refused_with_classification(tmp_path, capsys):
    err = _refused(tmp_path, capsys, ["train", "karate", "--loss", "mse", "--epochs", "1", "--out", tmp_path / "k"])
    assert "--loss mse is a regression loss" in err


def test_graph_sets_and_class_only_named_sets_refuse_regression(tmp_path, capsys):
    txt = write_tu_text(tmp_path / "TOY.txt")
    err = _refused(tmp_path, capsys, ["train", "--tu-text", txt, "--task-type", "regression", "--out", tmp_path / "g"])
    assert "graph sets are classification only" in err
    err = _refused(tmp_path, capsys, ["train", "karate", "--task-type", "regression", "--target-col", "club",
                                      "--out", tmp_path / "k"])
    assert "karate: its node labels are classes" in err
    err = _refused(tmp_path, capsys, ["train", "karate", "--task-type", "regression", "--out", tmp_path / "k"])
    assert "--target-col" in err
    err = _refused(tmp_path, capsys, ["train", "karate", "--target-col", "club", "--out", tmp_path / "k"])
    assert "--target-col goes with --edges" in err  # classification: named sets bring their own labels


ENGB = "twitch/ENGB/"


@requires_data(ENGB + "ENGB_edges.csv.gz", ENGB + "ENGB_target.csv.gz")
def test_twitch_engb_days(tmp_path):
    root = shared_data_dir() / "twitch" / "ENGB"
    assert main(["train", "--edges", str(root / "ENGB_edges.csv.gz"), "--target", str(root / "ENGB_target.csv.gz"),
                 "--target-col", "days", "--task-type", "regression", "--epochs", "3", "--hidden", "16",
                 "--out", str(tmp_path / "tw"), "--no-progress"]) == 0
    metrics = json.loads((tmp_path / "tw" / "metrics.json").read_text())
    assert all(math.isfinite(metrics[s][k]) for s in ("train", "val", "test") for k in ("mae", "rmse", "r2"))
    assert 100 < metrics["test"]["mae"] < 2000  # days, not standard units
    assert metrics["meta"]["target_statistics"]["tasks"] == ["days"]


@requires_data(ENGB + "ENGB_edges.csv.gz", ENGB + "ENGB_target.csv.gz")
def test_twitch_named_set_takes_a_numeric_target_column(tmp_path):
    assert main(["train", "twitch-engb", "--target-col", "views", "--task-type", "regression", "--epochs", "1",
                 "--hidden", "8", "--out", str(tmp_path / "tw"), "--no-progress"]) == 0
    meta = load_checkpoint(tmp_path / "tw" / "best.pt")["meta"]
    assert meta["data"]["name"] == "twitch-engb" and meta["data"]["target_col"] == "views"
    assert not meta["hparams"]["label_input"]  # Twitch's recipe label input reads classes: off
    assert main(["evaluate", "--checkpoint", str(tmp_path / "tw" / "best.pt")]) == 0

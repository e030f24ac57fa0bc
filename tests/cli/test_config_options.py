"""Every field of TrainConfig has its `graphattn train` option, and every training option reaches the
TrainConfig that fit() gets, in each pipeline (molecules, node classification, graph sets): no value
of the user's is silently ignored."""
import pathlib

import pytest

from graphattn.cli import social_train
from graphattn.cli.arguments import build_parser
from graphattn.cli.main import main
from graphattn.cli.options import TRAIN_OPTIONS
from graphattn.tasks.molecules import pipeline
from graphattn.tasks.social import graph as social_graph
from graphattn.train import TrainConfig

from tiny_inputs import write_tu_text

FIX = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
#: config fields whose option has another destination, and the one the task sets
OTHER_DEST = {"progress": "no_progress", "kind": None}
GIVEN = ["--epochs", "3", "--lr", "0.0123", "--weight-decay", "0.001", "--patience", "7", "--grad-clip", "2.5",
         "--schedule", "cosine", "--warmup", "1", "--seed", "5", "--resume", "--no-progress"]
EXPECTED = dict(epochs=3, lr=0.0123, weight_decay=0.001, patience=7, grad_clip=2.5, schedule="cosine", warmup=1,
                seed=5, resume=True, progress=False)


class Captured(Exception):
    pass


def test_every_config_field_has_its_option_and_every_option_its_field():
    dests = vars(build_parser().parse_args(["train"]))
    for field in TrainConfig.fields():
        dest = OTHER_DEST.get(field, field)
        assert dest is None or dest in dests, f"TrainConfig.{field} has no graphattn train option"
    from_args = {f for f in TrainConfig.fields() if f not in OTHER_DEST and f not in ("seed", "resume")}
    assert set(TRAIN_OPTIONS) == from_args
    assert set(EXPECTED) == set(TrainConfig.fields()) - {"kind"}  # the test below gives every one


@pytest.fixture
def captured(monkeypatch):
    seen = []

    def fake_fit(model, loaders, forward, config, **kwargs):
        seen.append(config)
        raise Captured

    for module in (pipeline, social_train, social_graph):
        monkeypatch.setattr(module, "fit", fake_fit)
    return seen


@pytest.mark.parametrize("task, kind", [
    (["--csv", str(FIX / "molecules_tasks_train.csv"), "--no-descriptors", "--hidden", "8", "--layers", "1"], "binary"),
    (["karate", "--hidden", "8"], "multiclass"),
    (["--tu-text", "TOY", "--folds", "2", "--hidden", "8", "--batch-size", "8"], "multiclass"),
], ids=["molecules", "node", "graph-set"])
def test_every_training_option_reaches_the_config(task, kind, captured, tmp_path, monkeypatch):
    if "--csv" in task:
        pytest.importorskip("rdkit")
    if "TOY" in task:
        monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
        task = [str(write_tu_text(tmp_path / "TOY.txt")) if a == "TOY" else a for a in task]
    with pytest.raises(Captured):
        main(["train", *task, *GIVEN, "--out", str(tmp_path / "run")])
    config = captured[0]
    assert config.kind == kind
    assert {k: getattr(config, k) for k in EXPECTED} == EXPECTED


def test_grad_clip_zero_is_no_clipping_and_a_negative_one_is_refused(captured, tmp_path, capsys):
    with pytest.raises(Captured):
        main(["train", "karate", "--grad-clip", "0", "--epochs", "1", "--out", str(tmp_path / "a"), "--no-progress"])
    assert captured[0].grad_clip is None
    assert main(["train", "karate", "--grad-clip", "-1", "--out", str(tmp_path / "b")]) == 2
    assert "--grad-clip must be a finite number >= 0" in capsys.readouterr().err

"""Every field of TrainConfig has its `graphattn train` option, and every training option reaches the
TrainConfig that fit() gets, in each pipeline (molecules, node classification, graph sets): no value
of the user's is silently ignored."""
import pathlib

import pytest
from tiny_inputs import write_tu_text

from graphattn.cli import social_train
from graphattn.cli.arguments import build_parser
from graphattn.cli.main import main
from graphattn.cli.options import TRAIN_OPTIONS
from graphattn.tasks.molecules import pipeline
from graphattn.tasks.social import graph as social_graph
from graphattn.train import TrainConfig

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
    # the test below gives every one (loss and metric: tests/cli/test_regression_options.py)
    assert set(EXPECTED) == set(TrainConfig.fields()) - {"kind", "loss", "metric"}


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


#: task options that are not recipe keys, and what reads them instead
NOT_RECIPE = {
    "molecule": {"csv", "smiles_col", "tasks", "split", "split_col", "pos_weight", "ensemble", "init",  # data and run
                 "limit"},
    "node": {"edges", "target", "features", "target_col", "id_col", "max_features",  # the data spec
             "mini_batch", "num_neighbors"},  # the loaders
    "graph": {"tu_text", "folds", "limit", "batch_size",  # the data spec and loaders
              "local_mpnn"},  # read by social_hparams for graph sets (no recipe default)
}
MODEL_OPTIONS = {"hidden", "layers", "dropout", "global_tokens", "pe_dim"}


@pytest.mark.parametrize("task", ["molecule", "node", "graph"])
def test_every_task_option_is_a_recipe_key_or_read_elsewhere(task):
    """A new option of a task is a key of its recipe (read by recipe_options), or it is named here with
    what reads it: an option added to a table but to no recipe fails this test instead of being ignored."""
    from graphattn.cli.options import APPLIES, GROUPS
    from graphattn.tasks.molecules.defaults import DEFAULTS
    from graphattn.tasks.social.graph import graph_defaults
    from graphattn.tasks.social.node import node_defaults

    recipe = {"molecule": DEFAULTS, "node": node_defaults("", 100), "graph": graph_defaults(None)}[task]
    options = set().union(*(GROUPS[g] for g in APPLIES[task])) | MODEL_OPTIONS
    missing = sorted(o for o in options if o not in recipe and o not in NOT_RECIPE[task])
    assert not missing, f"{task} options that no recipe key reads: {missing}"
    assert not (NOT_RECIPE[task] & set(recipe)), "listed as not in the recipe, but it is"


#: train options every pipeline reads (the run, the training settings, the model's common shape)
COMMON = {"dataset", "config", "out", "resume", "overwrite", "no_progress", "distributed", "device", "data_root", "threads",
          "seed", "seeds", "baseline", "heads", "task_type", *TRAIN_OPTIONS, *MODEL_OPTIONS}


def test_every_train_option_is_common_or_in_a_task_group():
    """A flag added to `graphattn train` without saying which tasks read it (cli.options.GROUPS) fails here:
    without a group, the tasks that do not read it would not refuse it."""
    from graphattn.cli.options import GROUPS

    grouped = set().union(*GROUPS.values())
    dests = set(vars(build_parser().parse_args(["train"]))) - {"command"}
    assert sorted(dests - grouped - COMMON) == []

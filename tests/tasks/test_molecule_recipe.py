"""MoleculeRecipe: the one typed recipe of a molecule run (checked when made, plain dicts only at the
JSON / checkpoint boundary), and the pipeline taking it rather than a dict."""
import pytest

from graphattn.tasks.molecules import pipeline as mp
from graphattn.tasks.molecules.defaults import DEFAULTS
from graphattn.tasks.molecules.recipe import DEFAULT_DESCRIPTORS, PE_KINDS, MoleculeRecipe
from graphattn.train.config import TrainConfig


def test_defaults_are_the_recipe_and_round_trip():
    assert {**DEFAULTS, "descriptors": "rdkit2d_normalized"} == MoleculeRecipe().to_dict()
    assert tuple(DEFAULTS) == MoleculeRecipe.fields()
    r = MoleculeRecipe(task_type="regression", loss="l1", hidden=32, pe_kind="rrwp", hops=3)
    assert MoleculeRecipe.from_dict(r.to_dict()) == r
    assert r.replace(layers=5).layers == 5 and r.layers == 3  # frozen: replace makes a copy
    with pytest.raises(AttributeError):
        r.hidden = 8


def test_train_config_is_the_training_part():
    r = MoleculeRecipe(task_type="regression", epochs=7, lr=3e-4, loss="l1", metric="rmse", patience=None)
    cfg = r.train_config(seed=3, progress=False)
    assert cfg == TrainConfig(kind="regression", epochs=7, lr=3e-4, loss="l1", metric="rmse", patience=None,
                              seed=3, progress=False)
    assert (cfg.epochs, cfg.lr, cfg.loss, cfg.metric, cfg.patience, cfg.seed, cfg.progress) == \
        (7, 3e-4, "l1", "rmse", None, 3, False)
    assert MoleculeRecipe().train_config().kind == "binary"


@pytest.mark.parametrize("bad, match", [
    ({"pe_kind": "linear"}, "pe_kind must be one of"), ({"readout": "attention"}, "readout must be one of"),
    ({"task_type": "multiclass"}, "task_type must be one of"), ({"hops": 0}, "hops must be an int >= 1"),
    ({"hidden": 2.5}, "hidden must be an int"), ({"dropout": 1.0}, "dropout must be in"),
    ({"loss": "l1"}, "loss must be one of"),  # a regression loss on a classification recipe
    ({"metric": "mae"}, "metric must be one of"), ({"descriptors": "yes"}, "descriptors must be one of"),
    ({"local_mpnn": "gat"}, "local_mpnn must be one of"), ({"epochs": -1}, "epochs must be an int >= 0"),
])
def test_bad_values_are_refused_by_name(bad, match):
    with pytest.raises(ValueError, match=match):
        MoleculeRecipe(**bad)


def test_unknown_keys_are_refused_unless_reading_a_checkpoint_record():
    with pytest.raises(ValueError, match=r"unknown molecule recipe key\(s\) \['hiden'\]"):
        MoleculeRecipe.from_dict({"hiden": 32})
    # a record of another version: its own keys dropped, missing ones at their defaults
    old = {"hidden": 32, "layers": 2, "some_removed_key": 1, "task_type": "classification"}
    r = MoleculeRecipe.from_dict(old, strict=False)
    assert (r.hidden, r.layers, r.pe_kind) == (32, 2, "laplacian")
    assert set(PE_KINDS) == {"laplacian", "rwse", "rrwp"}


def test_the_pipeline_takes_a_recipe_not_a_dict():
    with pytest.raises(TypeError, match="MoleculeRecipe.from_dict"):
        mp.model_spec("none", 2, dict(DEFAULTS))
    spec = mp.model_spec("none", 2, MoleculeRecipe(pe_kind="rrwp", pe_dim=6, hops=2))
    assert spec.kwargs["edge_pe_dim"] == 6 and spec.kwargs["pe_kind"] == "linear"
    assert "edge_pe_dim" not in mp.model_spec("none", 2, MoleculeRecipe()).kwargs  # older specs unchanged


def test_descriptors_default_per_task_type_and_stay_as_given():
    """No descriptor set named: the task type's (chemprop's normalised set for classification, the
    standardised RDKit set for regression), also when the recipe is built from DEFAULTS' keys (the
    benchmarks' and the command line's way); a set named, or a record's, is kept."""
    assert MoleculeRecipe().descriptors == DEFAULT_DESCRIPTORS["classification"] == "rdkit2d_normalized"
    assert MoleculeRecipe(task_type="regression").descriptors == DEFAULT_DESCRIPTORS["regression"] == "rdkit2d"
    assert MoleculeRecipe.from_dict({**DEFAULTS, "task_type": "regression"}).descriptors == "rdkit2d"
    assert MoleculeRecipe(task_type="regression", descriptors="rdkit2d_normalized").descriptors == "rdkit2d_normalized"
    assert MoleculeRecipe(descriptors="rdkit2d").descriptors == "rdkit2d"
    assert MoleculeRecipe.from_dict(MoleculeRecipe(descriptors="none").to_dict()).descriptors == "none"

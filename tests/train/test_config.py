"""TrainConfig: one checked, frozen record of a fit() run; dicts only at the JSON boundary."""
import dataclasses
import inspect
import json

import pytest

from graphattn.train import TrainConfig, fit


def test_defaults_round_trip_through_json():
    cfg = TrainConfig(kind="regression", epochs=7, lr=3e-4, patience=2, schedule="cosine", warmup=1)
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert cfg.replace(epochs=9).epochs == 9 and cfg.epochs == 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.epochs = 3


@pytest.mark.parametrize("bad, match", [(dict(kind="ranking"), "kind must be one of"),
                                        (dict(lr=-1e-3), "lr must be"), (dict(lr=float("nan")), "lr must be"),
                                        (dict(weight_decay=-1.0), "weight_decay"), (dict(epochs=True), "epochs"),
                                        (dict(seed=1.5), "seed"), (dict(patience=1.0), "patience"),
                                        (dict(grad_clip=float("inf")), "grad_clip")])
def test_bad_values_are_refused_when_made(bad, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**{"kind": "binary", **bad})


def test_unknown_keys_are_named_not_ignored():
    with pytest.raises(ValueError, match=r"unknown TrainConfig key\(s\) \['epoch'\]"):
        TrainConfig.from_dict({"kind": "binary", "epoch": 3})


def test_from_recipe_takes_the_training_fields_of_a_task_recipe():
    recipe = {"epochs": 40, "lr": 1e-3, "weight_decay": 5e-4, "hidden": 64, "heads": 4, "schedule": "cosine"}
    cfg = TrainConfig.from_recipe(recipe, kind="multiclass", seed=3)
    assert (cfg.epochs, cfg.weight_decay, cfg.schedule, cfg.seed, cfg.warmup) == (40, 5e-4, "cosine", 3, 0)
    with pytest.raises(ValueError, match="schedule must be one of"):
        TrainConfig.from_recipe({**recipe, "schedule": "step"}, kind="multiclass")


def test_fit_takes_a_config_and_at_most_nine_parameters():
    # model, loaders, forward, config; then keyword-only: pos_weight, out_dir, meta, log, on_epoch
    params = inspect.signature(fit).parameters
    assert len(params) <= 9
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(params.values())[4:])
    with pytest.raises(TypeError, match="config must be a graphattn.train.TrainConfig"):
        fit(None, {}, None, {"kind": "binary"})


def test_numpy_and_tensor_numbers_are_taken_as_python_numbers():
    import numpy as np
    import torch

    cfg = TrainConfig(kind="binary", epochs=np.int64(3), lr=np.float32(1e-3), weight_decay=torch.tensor(0.01),
                      seed=np.int64(7), grad_clip=np.float64(2.0), patience=np.int32(4))
    assert (type(cfg.epochs), type(cfg.lr), type(cfg.seed), type(cfg.patience)) == (int, float, int, int)
    assert cfg.weight_decay == pytest.approx(0.01) and cfg.grad_clip == 2.0
    assert TrainConfig(kind="binary", lr=0.0).lr == 0.0  # fit() with lr 0 leaves the weights as they are
    with pytest.raises(ValueError, match="grad_clip must be"):
        TrainConfig(kind="binary", grad_clip=True)

"""The search of `graphattn tune` (graphattn.tasks.molecules.tune) with a stand-in for training: the
space, fixed options, the median pruner, a resumed study and a changed one."""
import math

import pytest

optuna = pytest.importorskip("optuna")

from graphattn.tasks.molecules.recipe import MoleculeRecipe  # noqa: E402
from graphattn.tasks.molecules.tune import (SEARCH_SPACE, TrialResult, make_study, run_search, sample,  # noqa: E402
                                            space_for, trial_table)


def fake_train(values, report, epochs=10):
    """A score that grows with the epoch and is best at lr = 1e-3 (higher is better)."""
    quality = -abs(math.log10(values["lr"]) + 3)
    for epoch in range(1, epochs + 1):
        report(epoch, quality + 0.01 * epoch)
    return TrialResult(quality + 0.01 * epochs, epochs, epochs)


def test_every_sampled_configuration_is_a_valid_recipe_and_fixed_options_are_not_searched():
    assert set(space_for("none", fixed={"lr", "hops"})) == set(SEARCH_SPACE["none"]) - {"lr", "hops"}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for baseline in ("none", "gine"):
        for _ in range(20):
            values = sample(study.ask(), space_for(baseline))
            recipe = MoleculeRecipe().replace(**values)  # every value passes the recipe's checks
            assert recipe.hidden % recipe.heads == 0
            assert 1e-4 <= recipe.lr <= 3e-3 and 2 <= recipe.layers <= 6
    with pytest.raises(ValueError, match="no search space"):
        space_for("gcn")
    narrowed = space_for("none", recipe=MoleculeRecipe(heads=8, readout="token"))
    assert narrowed["hidden"].choices == (64, 128, 256) and narrowed["global_tokens"].low == 1
    with pytest.raises(ValueError, match="--heads 3 divides none"):
        space_for("none", recipe=MoleculeRecipe(heads=3, hidden=63))


def test_the_median_pruner_stops_poor_trials_and_a_stored_study_resumes(tmp_path):
    db = str(tmp_path / "t.db")
    study = make_study(db, "s", higher=True, seed=0, fixed={"dataset": "bbbp"})
    lines = []
    assert run_search(study, {"lr": SEARCH_SPACE["none"]["lr"]}, fake_train, trials=14, log=lines.append,
                      progress=False) == 14
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.PRUNED) >= 1  # a trial below the median at an epoch after 5
    assert any("pruned at epoch" in line for line in lines)
    rows = trial_table(study, "roc_auc", top=3)
    assert len(rows) == 3 and rows[0]["val roc_auc"] >= rows[1]["val roc_auc"] >= rows[2]["val roc_auc"]
    again = make_study(db, "s", higher=True, seed=0, fixed={"dataset": "bbbp"})  # the same command again
    assert run_search(again, {"lr": SEARCH_SPACE["none"]["lr"]}, fake_train, trials=14, progress=False) == 0
    assert run_search(again, {"lr": SEARCH_SPACE["none"]["lr"]}, fake_train, trials=16, progress=False) == 2
    with pytest.raises(ValueError, match="other settings .*dataset"):
        make_study(db, "s", higher=True, seed=0, fixed={"dataset": "bace"})


def test_a_trial_without_a_defined_validation_score_does_not_win():
    study = make_study(None, "nan", higher=True, seed=0, fixed={})

    def undefined(values, report):
        return TrialResult(float("nan"), 1, 1)

    run_search(study, {"lr": SEARCH_SPACE["none"]["lr"]}, undefined, trials=2, progress=False, log=lambda _m: None)
    assert trial_table(study, "roc_auc") == []

"""Regressions from an audit of the training loop, its metrics and checkpoints."""
import json

import numpy as np
import pytest
import torch
from torch import nn

from graphattn.train.metrics import compute_pos_weight, masked_bce_with_logits, roc_auc_per_task
from graphattn.train import CheckpointError, compute_metrics, fit, load_checkpoint

QUIET = dict(progress=False, log=lambda s: None)


def _binary_data(n=64, seed=0, val_single_class=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = (x[:, :1] + 0.3 * torch.randn(n, 1, generator=g) > 0).float()
    splits = {"train": slice(0, 40), "val": slice(40, 52), "test": slice(52, n)}
    data = {s: (x[sl], y[sl].clone()) for s, sl in splits.items()}
    if val_single_class:
        data["val"][1][:] = 1.0
    loaders = {s: [data[s]] for s in splits}
    fwd = lambda m, b, split: (m(b[0]), b[1])  # noqa: E731
    return loaders, fwd


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 1))


def test_aucs_rank_on_logits_not_saturated_probabilities():
    y = torch.tensor([[0.0], [1.0], [0.0], [1.0]])
    logits = torch.tensor([[20.0], [25.0], [30.0], [35.0]])  # sigmoid: all 1.0 in float32
    assert compute_metrics("binary", logits, y)["roc_auc"] == pytest.approx(0.75)
    y64 = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    s64 = 1 + torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64) * 1e-12
    assert roc_auc_per_task(y64, s64)[0] == pytest.approx(roc_auc_per_task(y64.numpy(), s64.numpy())[0]) == 0.75


def test_non_finite_training_loss_is_a_clear_error():
    loaders, fwd = _binary_data()
    nan_fwd = lambda m, b, split: (m(b[0]) * float("nan"), b[1])  # noqa: E731
    with pytest.raises(FloatingPointError, match="epoch 1, batch 1"):
        fit(_model(), loaders, nan_fwd, kind="binary", epochs=2, **QUIET)
    del fwd


def test_resume_applies_the_new_learning_rate(tmp_path):
    loaders, fwd = _binary_data()
    fit(_model(), loaders, fwd, kind="binary", epochs=2, lr=1e-3, out_dir=tmp_path, **QUIET)
    fit(_model(), loaders, fwd, kind="binary", epochs=3, lr=0.05, out_dir=tmp_path, resume=True, **QUIET)
    assert load_checkpoint(tmp_path / "last.pt")["optimizer"]["param_groups"][0]["lr"] == 0.05


def test_resume_refuses_another_task_kind(tmp_path):
    loaders, fwd = _binary_data()
    fit(_model(), loaders, fwd, kind="binary", epochs=1, out_dir=tmp_path, **QUIET)
    with pytest.raises(CheckpointError, match="kind='binary'"):
        fit(_model(), loaders, fwd, kind="regression", epochs=2, out_dir=tmp_path, resume=True, **QUIET)


def test_meta_that_would_make_checkpoints_unloadable_is_refused_before_training(tmp_path):
    loaders, fwd = _binary_data()
    for bad in ({"n": np.int64(3)}, {"p": tmp_path}):
        with pytest.raises(TypeError, match="meta"):
            fit(_model(), loaders, fwd, kind="binary", epochs=1, out_dir=tmp_path / "x", meta=bad, **QUIET)
    assert not (tmp_path / "x" / "best.pt").exists()


def test_undefined_validation_auc_early_stops_on_validation_loss():
    loaders, fwd = _binary_data(val_single_class=True)
    lines = []
    res = fit(_model(), loaders, fwd, kind="binary", epochs=60, lr=0.05, patience=2, progress=False,
              log=lines.append)
    assert any("validation roc_auc is undefined" in s for s in lines)
    val_losses = [h["val"]["loss"] for h in res["history"]]
    assert res["best_epoch"] == int(np.argmin(val_losses)) + 1
    assert res["epochs_run"] < 60  # early stopping works (before: every epoch "improved")


@pytest.mark.parametrize("kwargs, match", [(dict(grad_clip=0.0), "grad_clip"), (dict(grad_clip=-1.0), "grad_clip"),
                                           (dict(epochs=-1), "epochs"), (dict(patience=-1), "patience")])
def test_fit_argument_checks(kwargs, match):
    loaders, fwd = _binary_data()
    with pytest.raises(ValueError, match=match):
        fit(_model(), loaders, fwd, kind="binary", **{"epochs": 1, **kwargs}, **QUIET)


def test_zero_epochs_writes_metrics_and_empty_loader_is_an_error(tmp_path):
    loaders, fwd = _binary_data()
    fit(_model(), loaders, fwd, kind="binary", epochs=0, out_dir=tmp_path / "new", **QUIET)
    assert json.loads((tmp_path / "new" / "metrics.json").read_text())["epochs_run"] == 0
    with pytest.raises(ValueError, match="no batches"):
        fit(_model(), {**loaders, "train": []}, fwd, kind="binary", epochs=1, **QUIET)


def test_patience_zero_stops_at_the_first_epoch_without_improvement():
    loaders, fwd = _binary_data()
    res = fit(_model(), loaders, fwd, kind="binary", epochs=30, lr=0.05, patience=0, **QUIET)
    scores = [h["val"]["roc_auc"] for h in res["history"]]
    assert res["epochs_run"] >= 2  # epoch 1 always improves: the next one is tried
    assert scores[-1] <= max(scores[:-1])  # it stopped right after an epoch without improvement
    assert all(b > a for a, b in zip(scores[:-2], scores[1:-1]))


def test_binary_loss_inputs_are_checked():
    logits = torch.randn(6, 2)
    with pytest.raises(ValueError, match="binary labels must be 0, 1"):
        masked_bce_with_logits(logits, torch.tensor([[0.0, -1.0]] * 6))
    assert torch.isfinite(masked_bce_with_logits(logits, torch.full((6, 2), 0.9)))  # soft labels are fine
    for bad in (torch.tensor([1.0, -2.0]), torch.tensor([1.0, float("inf")]), torch.tensor([0.0, 1.0])):
        with pytest.raises(ValueError, match="pos_weight"):
            masked_bce_with_logits(logits, torch.ones(6, 2), bad)
    # 1-D single-task inputs with the (1,) weight compute_pos_weight gives == the 2-D form
    y = torch.tensor([1.0, 0.0, 0.0, float("nan"), 0.0, 1.0])
    pw = compute_pos_weight(y)
    assert pw.shape == (1,) and pw.item() == pytest.approx(1.5)
    torch.testing.assert_close(masked_bce_with_logits(logits[:, 0], y, pw),
                               masked_bce_with_logits(logits[:, :1], y[:, None], pw))
    # float64 weights with float32 logits; a task with only positives is not switched off
    assert masked_bce_with_logits(logits, torch.ones(6, 2), torch.ones(2, dtype=torch.float64)).dtype == torch.float32
    assert compute_pos_weight(torch.ones(4, 1)).item() == 1.0


def test_empty_validation_loader_falls_back_to_the_training_loss():
    loaders, fwd = _binary_data()
    lines = []
    res = fit(_model(), {**loaders, "val": []}, fwd, kind="binary", epochs=40, lr=0.05, patience=2,
              progress=False, log=lines.append)
    assert any("validation split is empty" in s and "training loss" in s for s in lines)
    train_losses = [h["loss"] for h in res["history"]]
    assert res["best_epoch"] == int(np.argmin(train_losses)) + 1


def test_ensemble_logits_keep_confident_predictions_apart():
    # mean probabilities in float64 and a 1e-12 clamp: logits 18 and 24 must not tie (they did at 1e-6)
    from graphattn import ProbabilityEnsemble

    class Fixed(nn.Module):
        num_tasks = 1

        def forward(self, x):
            return x

    out = ProbabilityEnsemble([Fixed(), Fixed()])(torch.tensor([[18.0], [24.0], [-24.0]]))
    assert out.dtype == torch.float32 and out[1, 0] > out[0, 0] > 17 and out[2, 0] < -23


def test_fit_names_shape_mismatches_and_non_scalar_aux_losses():
    torch.manual_seed(0)
    x, y = torch.randn(12, 4), torch.randint(0, 2, (12,)).float()
    loaders = {"train": [(x, y)], "val": [(x, y)]}
    two = lambda model, batch, split: (model(batch[0]), batch[1])  # noqa: E731  (B, 2) logits, (B,) labels
    with pytest.raises(ValueError, match="kind='multiclass'"):
        fit(nn.Linear(4, 2), loaders, two, kind="binary", epochs=1, progress=False, log=lambda m: None)
    vector_aux = lambda model, batch, split: (model(batch[0]), batch[1], model(batch[0]).view(-1))  # noqa: E731
    with pytest.raises(ValueError, match="not a scalar"):
        fit(nn.Linear(4, 1), loaders, vector_aux, kind="binary", epochs=1, progress=False, log=lambda m: None)
    number_aux = lambda model, batch, split: (model(batch[0]), batch[1], 0.0)  # noqa: E731
    fit(nn.Linear(4, 1), loaders, number_aux, kind="binary", epochs=1, progress=False, log=lambda m: None)


def test_resume_uses_best_pt_only_when_it_is_this_runs_best_epoch(tmp_path):
    # the best weights came from whatever best.pt was in the folder (or from the last epoch when
    # it was missing), reported and kept under the recorded best epoch's name
    import shutil

    from graphattn.train import save_checkpoint

    loaders, fwd = _binary_data()
    run = dict(kind="binary", lr=1e-2, meta={"data": "a"}, **QUIET)
    fit(_model(), loaders, fwd, epochs=4, out_dir=tmp_path / "a", **run)
    ck = load_checkpoint(tmp_path / "a" / "last.pt")
    assert ck["best_epoch"] >= 1
    (tmp_path / "b").mkdir()
    shutil.copy(tmp_path / "a" / "last.pt", tmp_path / "b")  # last.pt alone
    with pytest.raises(CheckpointError, match="best.pt is missing"):
        fit(_model(), loaders, fwd, epochs=6, out_dir=tmp_path / "b", resume=True, **run)
    other = load_checkpoint(tmp_path / "a" / "best.pt")
    save_checkpoint(tmp_path / "b" / "best.pt", {**other, "meta": {"data": "another run"}})
    with pytest.raises(CheckpointError, match="belongs to another run"):
        fit(_model(), loaders, fwd, epochs=6, out_dir=tmp_path / "b", resume=True, **run)
    save_checkpoint(tmp_path / "b" / "best.pt", {**other, "epoch": ck["best_epoch"] + 7})
    with pytest.raises(CheckpointError, match="records the best epoch"):
        fit(_model(), loaders, fwd, epochs=6, out_dir=tmp_path / "b", resume=True, **run)
    # killed between writing best.pt and last.pt of epoch 5 (an improving one): best.pt is the newer state
    model = _model()
    fit(model, loaders, fwd, epochs=5, out_dir=tmp_path / "k", **run)  # the uninterrupted 5 epochs
    five = load_checkpoint(tmp_path / "k" / "last.pt")
    save_checkpoint(tmp_path / "b" / "best.pt", {**five, "best_epoch": 5, "best_score": 1.0})
    seen = []
    res = fit(_model(), loaders, fwd, epochs=5, out_dir=tmp_path / "b", resume=True, kind="binary", lr=1e-2,
              meta={"data": "a"}, progress=False, log=seen.append)
    assert any("one epoch ahead of last.pt" in m for m in seen) and res["best_epoch"] == 5
    assert any(m.startswith("Resumed from") and m.split()[2].endswith("best.pt") for m in seen)
    for f in ("best.pt", "last.pt"):  # the real pair resumes as before
        shutil.copy(tmp_path / "a" / f, tmp_path / "b" / f)
    fit(_model(), loaders, fwd, epochs=6, out_dir=tmp_path / "b", resume=True, **run)

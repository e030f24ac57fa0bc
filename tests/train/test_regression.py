"""Regression in the shared loop: the losses, the metrics (MAE, RMSE, R²) against NumPy, the selection
metric, and the standardised-target wrapper with its mean ensemble."""
import numpy as np
import pytest
import torch
from torch import nn

from graphattn.nn.models import MeanEnsemble, StandardizedRegressor, target_statistics
from graphattn.train import TrainConfig, fit
from graphattn.train.evaluation import compute_metrics, task_loss
from graphattn.train.metrics import regression_per_task


def test_metrics_match_numpy_and_skip_missing_targets():
    rng = np.random.default_rng(0)
    y = rng.normal(size=(50, 3))
    pred = y + rng.normal(scale=0.3, size=y.shape)
    y[rng.random(y.shape) < 0.2] = np.nan
    y[:, 2] = np.nan  # a task with no target in this split
    per = regression_per_task(y, pred)
    for t in range(2):
        m = ~np.isnan(y[:, t])
        err = pred[m, t] - y[m, t]
        assert per["mae"][t] == pytest.approx(np.abs(err).mean())
        assert per["rmse"][t] == pytest.approx(np.sqrt((err ** 2).mean()))
        ss_tot = ((y[m, t] - y[m, t].mean()) ** 2).sum()
        assert per["r2"][t] == pytest.approx(1 - (err ** 2).sum() / ss_tot)
    assert all(np.isnan(per[k][2]) for k in per)
    res = compute_metrics("regression", torch.tensor(pred, dtype=torch.float32), torch.tensor(y, dtype=torch.float32))
    assert res["mae"] == pytest.approx(per["mae"][:2].mean(), rel=1e-5)
    assert res["r2_per_task"][2] is None and len(res["rmse_per_task"]) == 3


def test_losses_mask_missing_targets_and_give_them_no_gradient():
    pred = torch.tensor([[1.0, 2.0], [3.0, 5.0]], requires_grad=True)
    y = torch.tensor([[0.0, float("nan")], [1.0, 1.0]])
    mse = task_loss("regression", pred, y)
    l1 = task_loss("regression", pred, y, loss="l1")
    assert mse.item() == pytest.approx((1 + 4 + 16) / 3) and l1.item() == pytest.approx((1 + 2 + 4) / 3)
    l1.backward()
    assert pred.grad[0, 1] == 0 and torch.isfinite(pred.grad).all()
    with pytest.raises(ValueError, match="loss must be one of"):
        task_loss("regression", pred, y, loss="huber")


def test_config_checks_loss_and_metric_against_the_kind():
    assert TrainConfig(kind="regression").selection == ("mae", False)
    assert TrainConfig(kind="regression", metric="r2").selection == ("r2", True)
    assert TrainConfig(kind="regression", loss="l1").loss_name == "l1"
    with pytest.raises(ValueError, match="loss must be one of"):
        TrainConfig(kind="binary", loss="l1")
    with pytest.raises(ValueError, match="metric must be one of"):
        TrainConfig(kind="binary", metric="rmse")


def test_target_statistics_name_the_tasks_they_refuse():
    y = torch.tensor([[1.0, 2.0, float("nan"), 0.5], [3.0, 2.0, float("nan"), float("nan")]])
    with pytest.raises(ValueError, match=r"\['c'\] have no target"):
        target_statistics(y, ["a", "b", "c", "d"])
    with pytest.raises(ValueError, match=r"b \(all 2\).*one value"):
        target_statistics(y[:, :2], ["a", "b"])
    with pytest.raises(ValueError, match="infinite"):
        target_statistics(torch.tensor([[1.0], [float("inf")]]), ["a"])
    mean, std = target_statistics(torch.tensor([[1.0], [3.0], [float("nan")]]))
    assert mean.tolist() == [2.0] and std.tolist() == [1.0]


def test_wrapper_outputs_original_units_and_standardizes_both_ways():
    inner = nn.Linear(4, 2)
    inner.num_tasks = 2
    model = StandardizedRegressor(inner, torch.tensor([10.0, -1.0]), torch.tensor([2.0, 0.5]))
    x = torch.randn(5, 4)
    assert torch.allclose(model(x), inner(x) * torch.tensor([2.0, 0.5]) + torch.tensor([10.0, -1.0]))
    assert torch.allclose(model.standardize(model(x)), inner(x), atol=1e-6)
    assert set(model.state_dict()) == {"model.weight", "model.bias", "mean", "std"}
    rebuilt = StandardizedRegressor(nn.Linear(4, 2), num_tasks=2)
    rebuilt.load_state_dict(model.state_dict())
    assert torch.allclose(rebuilt(x), model(x))
    ens = MeanEnsemble([model, rebuilt])
    assert ens.member_outputs(x).shape == (2, 5, 2) and torch.allclose(ens(x), model(x))


def test_fit_learns_a_shifted_scaled_target_in_original_units():
    torch.manual_seed(0)
    x = torch.randn(256, 3)
    y = (x @ torch.tensor([[2.0], [-1.0], [0.5]])) * 50 + 1000  # far from unit scale
    mean, std = target_statistics(y[:192])
    inner = nn.Linear(3, 1)
    model = StandardizedRegressor(inner, mean, std)

    def forward(m, batch, split):
        xb, yb = batch
        out = m(xb)
        return (m.standardize(out), m.standardize(yb)) if m.training else (out, yb)

    loaders = {"train": [(x[i:i + 32], y[i:i + 32]) for i in range(0, 192, 32)], "val": [(x[192:], y[192:])]}
    res = fit(model, loaders, forward, TrainConfig(kind="regression", epochs=60, lr=0.05, progress=False, loss="l1"),
              log=lambda m: None)
    assert res["val"]["mae"] < 5.0  # targets span ~±150 around 1000
    assert res["val"]["r2"] > 0.99

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import average_precision_score, roc_auc_score

from graphattn.train import compute_metrics
from graphattn.train.metrics import (accuracy, compute_pos_weight, masked_bce_with_logits, mean_over_valid,
                                     pr_auc_per_task, roc_auc_per_task)

nan = float("nan")


def test_masked_bce_matches_bce_on_present_labels_and_ignores_missing():
    logits = torch.tensor([[0.3, -1.2, 2.0], [1.5, 0.1, -0.7]], requires_grad=True)
    y = torch.tensor([[1.0, nan, 0.0], [nan, 0.0, 1.0]])
    loss = masked_bce_with_logits(logits, y)
    present = ~torch.isnan(y)
    expected = F.binary_cross_entropy_with_logits(logits[present], y[present])
    assert torch.isfinite(loss) and torch.allclose(loss, expected)
    loss.backward()
    assert torch.isfinite(logits.grad).all()
    assert (logits.grad[~present] == 0).all()
    assert (logits.grad[present] != 0).all()


def test_masked_bce_values_at_missing_positions_do_not_matter():
    y = torch.tensor([[1.0, nan], [0.0, nan]])
    a = masked_bce_with_logits(torch.tensor([[0.5, 0.0], [-0.5, 0.0]]), y)
    b = masked_bce_with_logits(torch.tensor([[0.5, 1e4], [-0.5, -1e4]]), y)
    assert torch.equal(a, b)


def test_masked_bce_pos_weight_and_all_missing():
    logits = torch.randn(5, 2, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([[1.0, 0.0], [0.0, nan], [0.0, 1.0], [nan, 0.0], [0.0, 0.0]])
    pw = torch.tensor([3.0, 0.5])
    loss = masked_bce_with_logits(logits, y, pos_weight=pw)
    present = ~torch.isnan(y)
    full = F.binary_cross_entropy_with_logits(logits, torch.nan_to_num(y), pos_weight=pw,
                                              reduction="none")
    assert torch.allclose(loss, full[present].mean())

    empty = torch.zeros(3, 2, requires_grad=True)
    loss = masked_bce_with_logits(empty, torch.full((3, 2), nan))
    loss.backward()
    assert loss.item() == 0.0 and (empty.grad == 0).all()

    with pytest.raises(ValueError, match="same shape"):
        masked_bce_with_logits(torch.zeros(3, 2), torch.zeros(3))
    with pytest.raises(ValueError, match="pos_weight"):
        masked_bce_with_logits(torch.zeros(3, 2), torch.zeros(3, 2), pos_weight=torch.ones(3))


def test_compute_pos_weight():
    y = torch.tensor([[1.0, 0.0, nan], [0.0, 0.0, 0.0], [0.0, nan, 0.0], [1.0, 0.0, nan]])
    assert compute_pos_weight(y).tolist() == [1.0, 1.0, 1.0]  # 2/2, no positives, no positives
    y = torch.tensor([[1.0], [0.0], [0.0], [0.0], [nan]])
    assert compute_pos_weight(y).tolist() == [3.0]


def test_roc_and_pr_auc_per_task_match_sklearn():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, size=(40, 3)).astype(float)
    score = y * 0.8 + rng.normal(size=(40, 3))
    y[rng.random((40, 3)) < 0.25] = nan
    y[:, 2] = np.where(np.isnan(y[:, 2]), nan, 1.0)  # task 2: one class only
    roc = roc_auc_per_task(torch.tensor(y), torch.tensor(score))
    pr = pr_auc_per_task(y, score)
    for t in range(2):
        m = ~np.isnan(y[:, t])
        assert roc[t] == pytest.approx(roc_auc_score(y[m, t], score[m, t]))
        assert pr[t] == pytest.approx(average_precision_score(y[m, t], score[m, t]))
    assert math.isnan(roc[2]) and math.isnan(pr[2])
    assert mean_over_valid(roc) == pytest.approx(np.mean(roc[:2]))


def test_auc_known_values():
    y = [0, 0, 1, 1]
    assert roc_auc_per_task(y, [0.1, 0.4, 0.35, 0.8]).tolist() == [0.75]
    assert roc_auc_per_task(y, [0.1, 0.2, 0.3, 0.4]).tolist() == [1.0]
    assert math.isnan(roc_auc_per_task([nan, nan], [0.1, 0.2])[0])


def test_auc_refuses_labels_other_than_0_1_nan():
    for bad in ([-1, 1, -1, 1], [0, 2, 0, 2], [0, 0.5, 1, 1]):
        for fn in (roc_auc_per_task, pr_auc_per_task):
            with pytest.raises(ValueError, match="0, 1 or NaN"):
                fn(bad, [0.1, 0.2, 0.3, 0.4])


def test_mean_over_valid_all_nan_is_quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(mean_over_valid([nan, nan]))
    assert mean_over_valid(np.array([0.5, nan, 0.7])) == pytest.approx(0.6)


def test_accuracy():
    scores = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    assert accuracy(scores, torch.tensor([1, 0, 0, 0])) == 0.75
    assert accuracy(torch.tensor([2, 1]), torch.tensor([2, 1])) == 1.0
    assert math.isnan(accuracy(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long)))
    with pytest.raises(ValueError, match="same shape"):
        accuracy(torch.zeros(3), torch.zeros(4))


def test_aucs_rank_on_logits_not_saturated_probabilities():
    y = torch.tensor([[0.0], [1.0], [0.0], [1.0]])
    logits = torch.tensor([[20.0], [25.0], [30.0], [35.0]])  # sigmoid: all 1.0 in float32
    assert compute_metrics("binary", logits, y)["roc_auc"] == pytest.approx(0.75)
    y64 = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    s64 = 1 + torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64) * 1e-12
    assert roc_auc_per_task(y64, s64)[0] == pytest.approx(roc_auc_per_task(y64.numpy(), s64.numpy())[0]) == 0.75


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

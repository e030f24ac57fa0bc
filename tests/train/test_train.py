import json
import pickle
import shutil

import networkx as nx
import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.data import Data

from graphattn import GraphSelfAttention, NodeClassifier
from graphattn.train import CheckpointError, TrainConfig, fit, load_checkpoint, save_checkpoint, task_loss
from graphattn.train.loop import scheduled_lr

QUIET = dict(log=lambda s: None)  # with TrainConfig(progress=False)


def karate():
    G = nx.karate_club_graph()
    ei = torch.tensor(list(G.edges)).t()
    y = torch.tensor([G.nodes[i]["club"] == "Officer" for i in G.nodes], dtype=torch.long)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(34, generator=g)
    masks = {s: torch.zeros(34, dtype=torch.bool) for s in ("train", "val", "test")}
    masks["train"][perm[:20]] = True
    masks["val"][perm[20:27]] = True
    masks["test"][perm[27:]] = True
    return torch.eye(34), torch.cat([ei, ei.flip(0)], 1), y, masks


def _setup():
    x, ei, y, masks = karate()
    fwd = lambda m, _b, split: (m(x, ei)[masks[split]], y[masks[split]])  # noqa: E731
    loaders = {s: [None] for s in ("train", "val", "test")}
    return fwd, loaders


def test_fit_trains_checkpoints_and_resumes_identically(tmp_path):
    fwd, loaders = _setup()
    torch.manual_seed(0)
    full = fit(NodeClassifier(34, 16, 2, dropout=0.3), loaders, fwd, TrainConfig(kind="multiclass", epochs=12, lr=0.01, progress=False), out_dir=tmp_path / "a", log=lambda s: None, meta={"pipeline": "node"})
    assert full["train"]["accuracy"] >= 0.8  # 2 balanced classes: chance is ~0.5
    saved = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert saved["best_epoch"] == full["best_epoch"] and saved["meta"]["pipeline"] == "node"
    # stop after 5 epochs, then resume to 12: same trajectory as one uninterrupted run
    torch.manual_seed(0)
    fit(NodeClassifier(34, 16, 2, dropout=0.3), loaders, fwd, TrainConfig(kind="multiclass", epochs=5, lr=0.01, progress=False), out_dir=tmp_path / "b", log=lambda s: None)
    torch.manual_seed(123)  # a different model init: the checkpoint must override everything
    res = fit(NodeClassifier(34, 16, 2, dropout=0.3), loaders, fwd, TrainConfig(kind="multiclass", epochs=12, lr=0.01, resume=True, progress=False), out_dir=tmp_path / "b", log=lambda s: None)
    assert [h["loss"] for h in res["history"]] == pytest.approx([h["loss"] for h in full["history"]], abs=1e-6)
    assert load_checkpoint(tmp_path / "b" / "last.pt")["epoch"] == 12


def test_checkpoint_loading_refuses_code_and_garbage(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))
    bad = tmp_path / "evil.pt"
    with open(bad, "wb") as f:
        pickle.dump({"model": Evil()}, f)
    with pytest.raises(CheckpointError, match="refusing to load|not a readable"):
        load_checkpoint(bad)
    torch.save({"model": {"w": torch.ones(2)}}, tmp_path / "ok.pt")
    data = (tmp_path / "ok.pt").read_bytes()
    (tmp_path / "trunc.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="not a readable"):
        load_checkpoint(tmp_path / "trunc.pt")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")
    save_checkpoint(tmp_path / "sub" / "c.pt", {"x": torch.arange(3)})
    assert torch.equal(load_checkpoint(tmp_path / "sub" / "c.pt")["x"], torch.arange(3))
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["c.pt"]  # no temp file left behind


def test_a_corrupt_checkpoint_is_a_checkpoint_error_whatever_the_unpickler_raises(tmp_path, monkeypatch):
    torch.save({"model": {"w": torch.ones(2)}}, tmp_path / "ok.pt")
    evil = tmp_path / "evil.pt"

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))
    torch.save({"model": Evil()}, evil)
    with pytest.raises(CheckpointError, match="GLOBAL print") as info:
        load_checkpoint(evil)
    assert "will likely succeed" not in str(info.value) and "only if you trust" in str(info.value)

    def corrupt(*args, **kwargs):  # what a flipped byte in a storage record gave: a raw traceback
        raise AttributeError("'str' object has no attribute 'dtype'")
    monkeypatch.setattr(torch, "load", corrupt)
    with pytest.raises(CheckpointError, match="not a readable graphattn checkpoint"):
        load_checkpoint(tmp_path / "ok.pt")


def test_fit_refuses_unpicklable_meta_and_a_file_as_out_dir_before_training(tmp_path):
    data = Data(x=torch.randn(6, 3), edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]), y=torch.tensor([0, 1] * 3))
    fwd = lambda m, b, split: (m(b.x, b.edge_index), b.y)  # noqa: E731
    loaders = {"train": [data], "val": [data]}
    with pytest.raises(TypeError, match="meta must hold only plain Python values"):
        fit(NodeClassifier(3, 8, 2), loaders, fwd, TrainConfig(kind="multiclass", epochs=1, progress=False), meta={"f": lambda: 1}, log=lambda s: None)
    (tmp_path / "afile").write_text("x")
    calls = []
    with pytest.raises(ValueError, match="afile is a file"):
        fit(NodeClassifier(3, 8, 2), loaders, lambda *a: calls.append(1) or fwd(*a), TrainConfig(kind="multiclass", epochs=1, progress=False), out_dir=tmp_path / "afile" / "run", log=lambda s: None)
    assert not calls  # refused before the first epoch


def test_task_losses():
    logits = torch.zeros(2, 3, requires_grad=True)
    y = torch.tensor([[1.0, float("nan"), 0.0], [float("nan")] * 3])
    loss = task_loss("binary", logits, y)
    loss.backward()
    assert loss.item() == pytest.approx(0.6931, abs=1e-4)
    assert torch.all(logits.grad[1] == 0) and logits.grad[0, 1] == 0
    with pytest.raises(ValueError, match="kind must be one of"):
        task_loss("ranking", logits, y)


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


def test_non_finite_training_loss_is_a_clear_error():
    loaders, fwd = _binary_data()
    nan_fwd = lambda m, b, split: (m(b[0]) * float("nan"), b[1])  # noqa: E731
    with pytest.raises(FloatingPointError, match="epoch 1, batch 1"):
        fit(_model(), loaders, nan_fwd, TrainConfig(kind="binary", epochs=2, progress=False), **QUIET)
    del fwd


def test_resume_applies_the_new_learning_rate(tmp_path):
    loaders, fwd = _binary_data()
    fit(_model(), loaders, fwd, TrainConfig(kind="binary", epochs=2, lr=1e-3, progress=False), out_dir=tmp_path, **QUIET)
    fit(_model(), loaders, fwd, TrainConfig(kind="binary", epochs=3, lr=0.05, resume=True, progress=False), out_dir=tmp_path, **QUIET)
    assert load_checkpoint(tmp_path / "last.pt")["optimizer"]["param_groups"][0]["lr"] == 0.05


def test_resume_refuses_another_task_kind(tmp_path):
    loaders, fwd = _binary_data()
    fit(_model(), loaders, fwd, TrainConfig(kind="binary", epochs=1, progress=False), out_dir=tmp_path, **QUIET)
    with pytest.raises(CheckpointError, match="kind='binary'"):
        fit(_model(), loaders, fwd, TrainConfig(kind="regression", epochs=2, resume=True, progress=False), out_dir=tmp_path, **QUIET)


def test_meta_that_would_make_checkpoints_unloadable_is_refused_before_training(tmp_path):
    loaders, fwd = _binary_data()
    for bad in ({"n": np.int64(3)}, {"p": tmp_path}):
        with pytest.raises(TypeError, match="meta"):
            fit(_model(), loaders, fwd, TrainConfig(kind="binary", epochs=1, progress=False), out_dir=tmp_path / "x", meta=bad, **QUIET)
    assert not (tmp_path / "x" / "best.pt").exists()


def test_undefined_validation_auc_early_stops_on_validation_loss():
    loaders, fwd = _binary_data(val_single_class=True)
    lines = []
    res = fit(_model(), loaders, fwd, TrainConfig(kind="binary", epochs=60, lr=0.05, patience=2, progress=False), log=lines.append)
    assert any("validation roc_auc is undefined" in s for s in lines)
    val_losses = [h["val"]["loss"] for h in res["history"]]
    assert res["best_epoch"] == int(np.argmin(val_losses)) + 1
    assert res["epochs_run"] < 60  # early stopping works: not every epoch counts as an improvement


@pytest.mark.parametrize("kwargs, match", [(dict(grad_clip=0.0), "grad_clip"), (dict(grad_clip=-1.0), "grad_clip"),
                                           (dict(epochs=-1), "epochs"), (dict(patience=-1), "patience"),
                                           (dict(schedule="step"), "schedule must be one of"),
                                           (dict(warmup=-1), "warmup must be"), (dict(warmup=1.5), "warmup must be")])
def test_fit_argument_checks(kwargs, match):
    loaders, fwd = _binary_data()
    with pytest.raises(ValueError, match=match):
        fit(_model(), loaders, fwd, TrainConfig(kind="binary", progress=False, **{"epochs": 1, **kwargs}), **QUIET)


def test_zero_epochs_writes_metrics_and_empty_loader_is_an_error(tmp_path):
    loaders, fwd = _binary_data()
    fit(_model(), loaders, fwd, TrainConfig(kind="binary", epochs=0, progress=False), out_dir=tmp_path / "new", **QUIET)
    assert json.loads((tmp_path / "new" / "metrics.json").read_text())["epochs_run"] == 0
    with pytest.raises(ValueError, match="no batches"):
        fit(_model(), {**loaders, "train": []}, fwd, TrainConfig(kind="binary", epochs=1, progress=False), **QUIET)


def test_patience_zero_stops_at_the_first_epoch_without_improvement():
    loaders, fwd = _binary_data()
    res = fit(_model(), loaders, fwd, TrainConfig(kind="binary", epochs=30, lr=0.05, patience=0, progress=False), **QUIET)
    scores = [h["val"]["roc_auc"] for h in res["history"]]
    assert res["epochs_run"] >= 2  # epoch 1 always improves: the next one is tried
    assert scores[-1] <= max(scores[:-1])  # it stopped right after an epoch without improvement
    assert all(b > a for a, b in zip(scores[:-2], scores[1:-1]))


def test_empty_validation_loader_falls_back_to_the_training_loss():
    loaders, fwd = _binary_data()
    lines = []
    res = fit(_model(), {**loaders, "val": []}, fwd, TrainConfig(kind="binary", epochs=40, lr=0.05, patience=2, progress=False), log=lines.append)
    assert any("validation split is empty" in s and "training loss" in s for s in lines)
    train_losses = [h["loss"] for h in res["history"]]
    assert res["best_epoch"] == int(np.argmin(train_losses)) + 1


def test_fit_names_shape_mismatches_and_non_scalar_aux_losses():
    torch.manual_seed(0)
    x, y = torch.randn(12, 4), torch.randint(0, 2, (12,)).float()
    loaders = {"train": [(x, y)], "val": [(x, y)]}
    two = lambda model, batch, split: (model(batch[0]), batch[1])  # noqa: E731  (B, 2) logits, (B,) labels
    with pytest.raises(ValueError, match="kind='multiclass'"):
        fit(nn.Linear(4, 2), loaders, two, TrainConfig(kind="binary", epochs=1, progress=False), log=lambda m: None)
    vector_aux = lambda model, batch, split: (model(batch[0]), batch[1], model(batch[0]).view(-1))  # noqa: E731
    with pytest.raises(ValueError, match="not a scalar"):
        fit(nn.Linear(4, 1), loaders, vector_aux, TrainConfig(kind="binary", epochs=1, progress=False), log=lambda m: None)
    number_aux = lambda model, batch, split: (model(batch[0]), batch[1], 0.0)  # noqa: E731
    fit(nn.Linear(4, 1), loaders, number_aux, TrainConfig(kind="binary", epochs=1, progress=False), log=lambda m: None)


def test_resume_uses_best_pt_only_when_it_is_this_runs_best_epoch(tmp_path):
    # the best weights came from whatever best.pt was in the folder (or from the last epoch when
    # it was missing), reported and kept under the recorded best epoch's name

    loaders, fwd = _binary_data()
    cfg, run = dict(kind="binary", lr=1e-2, progress=False), dict(meta={"data": "a"}, **QUIET)
    fit(_model(), loaders, fwd, TrainConfig(epochs=4, **cfg), out_dir=tmp_path / "a", **run)
    ck = load_checkpoint(tmp_path / "a" / "last.pt")
    assert ck["best_epoch"] >= 1
    (tmp_path / "b").mkdir()
    shutil.copy(tmp_path / "a" / "last.pt", tmp_path / "b")  # last.pt alone
    with pytest.raises(CheckpointError, match="best.pt is missing"):
        fit(_model(), loaders, fwd, TrainConfig(epochs=6, resume=True, **cfg), out_dir=tmp_path / "b", **run)
    other = load_checkpoint(tmp_path / "a" / "best.pt")
    save_checkpoint(tmp_path / "b" / "best.pt", {**other, "meta": {"data": "another run"}})
    with pytest.raises(CheckpointError, match="belongs to another run"):
        fit(_model(), loaders, fwd, TrainConfig(epochs=6, resume=True, **cfg), out_dir=tmp_path / "b", **run)
    save_checkpoint(tmp_path / "b" / "best.pt", {**other, "epoch": ck["best_epoch"] + 7})
    with pytest.raises(CheckpointError, match="records the best epoch"):
        fit(_model(), loaders, fwd, TrainConfig(epochs=6, resume=True, **cfg), out_dir=tmp_path / "b", **run)
    # killed between writing best.pt and last.pt of epoch 5 (an improving one): best.pt is the newer state
    model = _model()
    fit(model, loaders, fwd, TrainConfig(epochs=5, **cfg), out_dir=tmp_path / "k", **run)  # the uninterrupted 5 epochs
    five = load_checkpoint(tmp_path / "k" / "last.pt")
    save_checkpoint(tmp_path / "b" / "best.pt", {**five, "best_epoch": 5, "best_score": 1.0})
    seen = []
    res = fit(_model(), loaders, fwd, TrainConfig(epochs=5, resume=True, kind="binary", lr=1e-2, progress=False), out_dir=tmp_path / "b", meta={"data": "a"}, log=seen.append)
    assert any("one epoch ahead of last.pt" in m for m in seen) and res["best_epoch"] == 5
    assert any(m.startswith("Resumed from") and m.split()[2].endswith("best.pt") for m in seen)
    for f in ("best.pt", "last.pt"):  # the real pair resumes as before
        shutil.copy(tmp_path / "a" / f, tmp_path / "b" / f)
    fit(_model(), loaders, fwd, TrainConfig(epochs=6, resume=True, **cfg), out_dir=tmp_path / "b", **run)


def test_checkpoint_write_failure_is_a_checkpoint_error_and_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "best.pt"
    save_checkpoint(path, {"a": torch.ones(2)})

    def full(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 988288 vs 988176")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(CheckpointError, match="disk full or read-only"):
        save_checkpoint(path, {"a": torch.zeros(2)})
    monkeypatch.undo()
    assert torch.load(path, weights_only=True)["a"].tolist() == [1.0, 1.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt"]  # no temporary file left


def test_fit_accepts_numpy_scalar_aux_and_lazy_layers_name_dtype_errors():
    x, y = torch.randn(8, 3), torch.randint(0, 2, (8,)).float()
    fwd = lambda model, batch, split: (model(batch[0]), batch[1], np.float32(0.1))  # noqa: E731
    fit(nn.Linear(3, 1), {"train": [(x, y)]}, fwd, TrainConfig(kind="binary", epochs=1, progress=False), log=lambda m: None)
    layer = GraphSelfAttention((-1, 8), 4)  # lazy source side, known target side
    with pytest.raises(TypeError, match="has dtype torch.float64"):
        layer((torch.randn(3, 5, dtype=torch.float64), torch.randn(2, 8, dtype=torch.float64)),
              torch.tensor([[0, 1], [1, 0]]))


def test_scheduled_lr_warms_up_then_decays_to_near_zero_over_the_run():
    assert [scheduled_lr(1.0, e, 10, "constant", 3) for e in (1, 2, 3, 4, 10)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    cos = [scheduled_lr(1.0, e, 10, "cosine", 2) for e in range(1, 11)]
    assert cos[:3] == pytest.approx([1 / 3, 2 / 3, 1.0])  # warm-up, then the full rate at its first epoch
    assert all(a > b for a, b in zip(cos[2:], cos[3:])) and 0 < cos[-1] < 0.05  # decays, never exactly 0
    assert scheduled_lr(1.0, 6, 10, "cosine") == pytest.approx(0.5)  # half-way through a run without warm-up


def test_fit_follows_the_schedule_and_a_resumed_run_continues_it(tmp_path, monkeypatch):
    loaders, fwd = _binary_data()
    seen = []
    step = torch.optim.Adam.step

    def record(self, *a, **k):
        seen.append(self.param_groups[0]["lr"])
        return step(self, *a, **k)

    monkeypatch.setattr(torch.optim.Adam, "step", record)
    full = fit(_model(), loaders, fwd, TrainConfig(kind="binary", epochs=6, lr=0.1, schedule="cosine", warmup=1, progress=False), **QUIET)
    assert seen == pytest.approx([scheduled_lr(0.1, e, 6, "cosine", 1) for e in range(1, 7)])
    calls = []

    def killed(m, b, split):  # the run is killed in its 4th epoch, after 3 saved ones
        calls.append(split)
        if calls.count("train") == 4:
            raise KeyboardInterrupt
        return fwd(m, b, split)

    with pytest.raises(KeyboardInterrupt):
        fit(_model(), loaders, killed, TrainConfig(kind="binary", epochs=6, lr=0.1, schedule="cosine", warmup=1, progress=False), out_dir=tmp_path, **QUIET)
    seen.clear()
    res = fit(_model(), loaders, fwd, TrainConfig(kind="binary", epochs=6, lr=0.1, schedule="cosine", warmup=1, resume=True, progress=False), out_dir=tmp_path, **QUIET)
    assert seen == pytest.approx([scheduled_lr(0.1, e, 6, "cosine", 1) for e in range(4, 7)])
    assert [h["loss"] for h in res["history"]] == pytest.approx([h["loss"] for h in full["history"]], abs=1e-6)


def test_on_epoch_sees_every_record_and_an_exception_it_raises_ends_the_run(tmp_path):
    fwd, loaders = _setup()

    class Stop(Exception):
        pass

    seen = []

    def on_epoch(rec):
        seen.append((rec["epoch"], rec["val"]["accuracy"]))
        if rec["epoch"] == 3:
            raise Stop

    with pytest.raises(Stop):
        fit(NodeClassifier(34, 16, 2), loaders, fwd, TrainConfig(kind="multiclass", epochs=10, lr=0.01, progress=False),
            out_dir=tmp_path, on_epoch=on_epoch, **QUIET)
    assert [e for e, _ in seen] == [1, 2, 3]
    assert load_checkpoint(tmp_path / "last.pt")["epoch"] == 3  # saved before the callback stopped it

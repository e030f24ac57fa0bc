import json
import pickle

import pytest
import torch
from torch_geometric.data import Data

from graphattn import NodeClassifier
from graphattn.train import CheckpointError, fit, load_checkpoint, save_checkpoint, task_loss


def karate():
    import networkx as nx
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
    full = fit(NodeClassifier(34, 16, 2, dropout=0.3), loaders, fwd, kind="multiclass", epochs=12, lr=0.01,
               out_dir=tmp_path / "a", progress=False, log=lambda s: None, meta={"pipeline": "node"})
    assert full["train"]["accuracy"] >= 0.8  # 2 balanced classes: chance is ~0.5
    saved = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert saved["best_epoch"] == full["best_epoch"] and saved["meta"]["pipeline"] == "node"
    # stop after 5 epochs, then resume to 12: same trajectory as one uninterrupted run
    torch.manual_seed(0)
    fit(NodeClassifier(34, 16, 2, dropout=0.3), loaders, fwd, kind="multiclass", epochs=5, lr=0.01,
        out_dir=tmp_path / "b", progress=False, log=lambda s: None)
    torch.manual_seed(123)  # a different model init: the checkpoint must override everything
    res = fit(NodeClassifier(34, 16, 2, dropout=0.3), loaders, fwd, kind="multiclass", epochs=12, lr=0.01,
              out_dir=tmp_path / "b", resume=True, progress=False, log=lambda s: None)
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
        fit(NodeClassifier(3, 8, 2), loaders, fwd, kind="multiclass", epochs=1, meta={"f": lambda: 1},
            progress=False, log=lambda s: None)
    (tmp_path / "afile").write_text("x")
    calls = []
    with pytest.raises(ValueError, match="afile is a file"):
        fit(NodeClassifier(3, 8, 2), loaders, lambda *a: calls.append(1) or fwd(*a), kind="multiclass", epochs=1,
            out_dir=tmp_path / "afile" / "run", progress=False, log=lambda s: None)
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

"""GRAND's consistency regulariser (``--consistency S``): the loss itself, the node forward's
S passes, the training loop's auxiliary loss, and the CLI's checks and checkpoint round trip."""
import json

import pytest
import torch

from graphattn.cli.main import main
from graphattn.nn.models.registry import build_model
from graphattn.tasks.social import node as sn
from graphattn.tasks.social.node_model import ConsistencyLoss, node_model_spec
from graphattn.tasks.social.specs import NodeDataSpec
from graphattn.train import TrainConfig, fit, load_checkpoint
from graphattn.train.metrics import consistency_loss


def test_loss_matches_the_formula_and_its_target_is_fixed():
    torch.manual_seed(0)
    z = [torch.randn(5, 3, requires_grad=True) for _ in range(3)]
    T = 0.5
    p = torch.stack([t.softmax(-1) for t in z])
    sharp = p.mean(0).detach() ** (1 / T)
    target = sharp / sharp.sum(-1, keepdim=True)
    want = ((p - target) ** 2).sum(-1).mean()
    got = consistency_loss(z, T)
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    got.backward()
    g_got = [t.grad.clone() for t in z]
    for t in z:
        t.grad = None
    want.backward()  # the same formula with a detached target: same gradients
    for a, b in zip(g_got, [t.grad for t in z]):
        assert torch.allclose(a, b, atol=1e-6)


def test_identical_passes_cost_nothing_without_sharpening_and_disagreement_costs_more():
    z = torch.randn(6, 4)
    assert consistency_loss([z, z.clone()], temperature=1.0).item() == pytest.approx(0.0, abs=1e-7)
    near = consistency_loss([z, z + 0.1 * torch.randn_like(z)], 1.0)
    far = consistency_loss([z, z + 3.0 * torch.randn_like(z)], 1.0)
    assert 0 < near < far
    # sharpening: a confident, agreeing pair is already close to its sharpened mean
    confident = torch.tensor([[8.0, 0.0, 0.0]])
    vague = torch.tensor([[0.3, 0.0, 0.0]])
    assert consistency_loss([confident, confident], 0.5) < consistency_loss([vague, vague], 0.5)


@pytest.mark.parametrize("logits,T,match", [([torch.zeros(2, 2)], 0.5, "at least 2"),
                                            ([torch.zeros(2, 2)] * 2, 0.0, "temperature"),
                                            ([torch.zeros(2, 2)] * 2, 1.5, "temperature")])
def test_bad_arguments(logits, T, match):
    with pytest.raises(ValueError, match=match):
        consistency_loss(logits, T)


def _karate(samples):
    spec = NodeDataSpec(name="karate", display="karate", split=sn.SPLIT, split_seed=0)
    data = sn.load_node_data(spec)
    hp = dict(sn.node_defaults("karate", data.num_nodes), heads=2, consistency=samples)
    mspec = node_model_spec("none", data, hp)

    return data, hp, mspec, build_model(mspec)


def test_node_forward_makes_s_passes_in_training_and_one_in_evaluation():
    data, hp, mspec, model = _karate(3)
    assert mspec.consistency == ConsistencyLoss(samples=3, weight=1.0, temperature=0.5)
    fwd = sn.node_forward(mspec)
    model.train()
    logits, y, aux = fwd(model, data, "train")
    n = int(data.train_mask.sum())
    assert logits.shape[0] == y.shape[0] == 3 * n and aux.ndim == 0 and aux > 0
    assert torch.equal(y, data.y[data.train_mask].repeat(3))
    model.eval()
    out = fwd(model, data, "val")
    assert len(out) == 2 and out[0].shape[0] == int(data.val_mask.sum())
    # off (S < 2): the spec has no entry, a training step returns (logits, y) as before
    _, _, plain, model1 = _karate(1)
    assert plain.consistency is None and "consistency" not in plain.to_dict()
    model1.train()
    assert len(sn.node_forward(plain)(model1, data, "train")) == 2


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # a 34-node graph: more threads only add start-up costs
    yield
    torch.set_num_threads(n)


def test_fit_adds_the_auxiliary_loss_and_still_learns(one_thread):
    torch.manual_seed(0)
    data, hp, mspec, model = _karate(2)
    seen = []

    def forward(m, batch, split):
        out = sn.node_forward(mspec)(m, batch, split)
        if len(out) == 3:
            seen.append(float(out[2].detach()))
        return out

    res = fit(model, {s: [data] for s in ("train", "val", "test")}, forward, TrainConfig(kind="multiclass", epochs=40, lr=1e-2, progress=False), log=lambda s: None)
    assert len(seen) == 40 and all(v > 0 for v in seen)
    assert res["history"][0]["loss"] > res["history"][-1]["loss"]
    assert res["train"]["accuracy"] > 0.8

    def constant(m, batch, split):  # a fixed auxiliary term must show up in the optimised loss
        out = sn.node_forward(mspec)(m, batch, split)
        return (*out[:2], torch.tensor(5.0)) if len(out) == 3 else out

    res = fit(model, {"train": [data]}, constant, TrainConfig(kind="multiclass", epochs=1, progress=False), log=lambda s: None)
    assert 5.0 < res["history"][0]["loss"] < 6.0


def test_cli_round_trip_and_option_checks(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "k"
    assert main(["train", "karate", "--epochs", "5", "--consistency", "2", "--consistency-weight", "0.5",
                 "--out", str(out), "--no-progress"]) == 0
    ck = load_checkpoint(out / "best.pt")
    assert ck["meta"]["model"]["consistency"] == {"samples": 2, "weight": 0.5, "temperature": 0.5}
    assert ck["meta"]["hparams"]["consistency"] == 2
    metrics = json.loads((out / "metrics.json").read_text())
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out / "best.pt")]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["accuracy"]
    assert res["test"] == pytest.approx(metrics["test"]["accuracy"])
    for argv, match in ((["karate", "--consistency-temperature", "0"], "consistency-temperature"),
                        (["karate", "--consistency", "-1"], "--consistency must be >= 0"),
                        (["karate", "--consistency", "2", "--mini-batch"], "full-batch"),
                        (["imdb-binary", "--consistency", "2"], "not for graph sets"),
                        (["tox21", "--consistency", "2"], "social-network option")):
        assert main(["train", *argv, "--epochs", "1", "--out", str(tmp_path / "x"), "--no-progress"]) == 2
        assert match in capsys.readouterr().err

"""NodeClassifier options: edge dropout in the propagation (``propagation_dropout``) and a
multi-layer GCN branch (``gcn_layers``), their validation and their CLI / checkpoint round trip."""
import json
from types import SimpleNamespace

import pytest
import torch

from graphattn import NodeClassifier
from graphattn.cli.main import main
from graphattn.cli.options import social_hparams
from graphattn.tasks.social import node as sn
from graphattn.tasks.social.node import hop_features
from graphattn.tasks.social.node_model import node_model_spec
from graphattn.train import load_checkpoint


def _path(n):
    r = torch.arange(n - 1)
    return torch.cat([torch.stack([r, r + 1]), torch.stack([r + 1, r])], 1)  # (2, 2(n-1))


def _gcn_matrix(ei, N):
    A = torch.zeros(N, N)
    A[ei[1], ei[0]] = 1.0
    A.fill_diagonal_(1.0)
    d = A.sum(1).rsqrt()
    return d[:, None] * A * d[None, :]  # Â, (N, N)


def test_propagation_dropout_is_training_only_and_unbiased():
    torch.manual_seed(0)
    ei, x = _path(7), torch.randn(7, 4)
    model = NodeClassifier(4, 8, 3, num_layers=1, heads=2, propagation=4, propagation_dropout=0.5)
    plain = NodeClassifier(4, 8, 3, num_layers=1, heads=2, propagation=4)
    plain.load_state_dict(model.state_dict())  # no new parameters: same state-dict keys
    model.eval(), plain.eval()
    assert torch.allclose(model(x, ei), plain(x, ei), atol=1e-6)  # evaluation uses the full Â
    model.train()
    z = torch.randn(7, 3)
    draws = torch.stack([model._smooth(z, ei, 0.5) for _ in range(4000)])  # (S, N, K)
    assert not torch.allclose(draws[0], draws[1])  # a fresh mask per call
    assert torch.allclose(draws.mean(0), _gcn_matrix(ei, 7) @ z, atol=0.08)  # E[dropped Â] = Â
    # every entry either dropped or scaled by 1/(1-p): Â z is a sum of such terms
    one = model._smooth(torch.eye(7), ei, 0.5)  # (N, N): the dropped Â itself
    full = _gcn_matrix(ei, 7)
    kept = one != 0
    assert torch.allclose(one[kept], 2 * full[kept], atol=1e-6) and ((full != 0) & ~kept).any()
    out = model(x, ei)
    out.sum().backward()  # differentiable through the dropped propagation
    assert out.shape == (7, 3) and torch.isfinite(out).all()


def test_gcn_layers_stack_gcn_formula_and_reach_further():
    torch.manual_seed(0)
    ei, x, w = _path(8), torch.randn(8, 4), 0.7
    model = NodeClassifier(4, 6, 3, num_layers=0, heads=2, gcn_weight=w, gcn_layers=3, dropout=0.3).eval()
    A = _gcn_matrix(ei, 8)
    g = torch.relu(A @ model.gcn(x))
    for lin in model.gcn_stack:
        g = torch.relu(A @ lin(g))  # dropout is off in evaluation
    h, _ = model.backbone(x, ei)
    assert torch.allclose(model(x, ei), model.head((1 - w) * h + w * g), atol=1e-5)
    keys = set(model.state_dict())
    assert {"gcn.weight", "gcn_stack.0.weight", "gcn_stack.1.bias"} <= keys and "gcn_stack.2.weight" not in keys
    # three GCN layers: node 0 sees nodes 0..3; one layer only 0..1
    for m, expected in ((NodeClassifier(4, 6, 3, num_layers=0, heads=2, gcn_weight=w).eval(), {0, 1}),
                        (model, {0, 1, 2, 3})):
        xg = x.clone().requires_grad_()
        (m(xg, ei)[0] * torch.randn(3)).sum().backward()
        assert set((xg.grad.abs().sum(-1) > 1e-7).nonzero().flatten().tolist()) == expected
    # the default (one layer) keeps the old state dict, so older checkpoints load
    one = NodeClassifier(4, 6, 3, num_layers=0, heads=2, gcn_weight=w)
    assert not any(k.startswith("gcn_stack") for k in one.state_dict())


@pytest.mark.parametrize("kwargs, match", [
    (dict(propagation=2, propagation_dropout=1.0), "propagation_dropout must be in"),
    (dict(propagation=2, propagation_dropout=-0.1), "propagation_dropout must be in"),
    (dict(propagation_dropout=0.2), "needs propagation >= 1"),
    (dict(gcn_weight=0.5, gcn_layers=0), "gcn_layers must be an int >= 1"),
    (dict(gcn_weight=0.5, gcn_layers=2.0), "gcn_layers must be an int >= 1"),
    (dict(gcn_layers=2), "gcn_layers > 1 needs gcn_weight > 0"),
])
def test_bad_options_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NodeClassifier(3, 8, 2, **kwargs)


def test_cli_round_trip_of_the_new_options(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "k"
    assert main(["train", "karate", "--epochs", "15", "--propagation", "3", "--propagation-dropout", "0.3",
                 "--gcn-weight", "0.5", "--gcn-layers", "2", "--out", str(out), "--no-progress"]) == 0
    assert "edge dropout 0.3, GCN branch w=0.5 (2 layers)" in capsys.readouterr().out
    ck = load_checkpoint(out / "best.pt")
    kw = ck["meta"]["model"]["kwargs"]
    assert kw["propagation_dropout"] == 0.3 and kw["gcn_layers"] == 2 and "gcn_stack.0.weight" in ck["model"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert main(["evaluate", "--checkpoint", str(out / "best.pt")]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["accuracy"]
    assert res["test"] == pytest.approx(metrics["test"]["accuracy"])  # rebuilt with the same options
    # left at their defaults the options are not written, so older checkpoints stay as they were
    assert main(["train", "karate", "--epochs", "1", "--propagation", "2", "--out", str(tmp_path / "p"),
                 "--no-progress"]) == 0
    kw = load_checkpoint(tmp_path / "p" / "best.pt")["meta"]["model"]["kwargs"]
    assert "propagation_dropout" not in kw and "gcn_layers" not in kw


def test_baselines_keep_their_own_depth_unless_layers_is_given():
    data = SimpleNamespace(class_names=list("abc"), num_features=5)
    hp = dict(sn.node_defaults("karate", 34), heads=2, layers=1, baseline_layers=2)
    assert node_model_spec("gcn", data, hp).arg("num_layers") == 2
    assert node_model_spec("none", data, hp).arg("num_layers") == 1
    args = SimpleNamespace(layers=3, heads=2)
    hp3 = social_hparams(args, hp)
    assert node_model_spec("gcn", data, hp3).arg("num_layers") == 3
    assert node_model_spec("none", data, hp3).arg("num_layers") == 3
    hp_default = social_hparams(SimpleNamespace(heads=2), hp)  # no --layers: each keeps its own
    assert node_model_spec("gcn", data, hp_default).arg("num_layers") == 2


def test_hop_features_are_powers_of_the_gcn_normalised_adjacency():
    torch.manual_seed(0)
    N = 7
    ei = torch.tensor([[0, 1, 1, 2, 3, 4, 5, 5], [1, 0, 2, 1, 4, 3, 5, 6]])  # one self-loop (5, 5)
    x = torch.randn(N, 3)
    A = torch.zeros(N, N)
    A[ei[1], ei[0]] = 1.0
    A.fill_diagonal_(1.0)  # existing loop replaced by exactly one per node
    d = A.sum(1).rsqrt()
    A_hat = d[:, None] * A * d[None, :]
    out = hop_features(x, ei, 2)
    assert out.shape == (N, 9)
    torch.testing.assert_close(out, torch.cat([x, A_hat @ x, A_hat @ A_hat @ x], 1))

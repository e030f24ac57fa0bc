"""Ensembles of molecule models: ProbabilityEnsemble, run_ensemble, the CLI's --ensemble."""
import json
import warnings

import pytest
import torch
from torch import nn

from graphattn import ProbabilityEnsemble
from graphattn.cli import main as cli
from graphattn.nn.models.registry import build_model
from graphattn.tasks.molecules import data as md
from graphattn.tasks.molecules import pipeline as mp
from graphattn.tasks.molecules.viz import molecule_attention
from graphattn.tasks.molecules.recipe import MoleculeRecipe


class _Fixed(nn.Module):
    def __init__(self, logits):
        super().__init__()
        self.num_tasks = logits.size(-1)
        self.logits = nn.Parameter(logits)

    def forward(self, x):
        return self.logits.expand(x.size(0), -1)


def test_probability_ensemble_averages_probabilities_not_logits():
    a, b = torch.tensor([[4.0, -1.0, 0.0]]), torch.tensor([[-2.0, -1.0, 9.0]])
    ens = ProbabilityEnsemble([_Fixed(a), _Fixed(b)])
    x = torch.zeros(5, 1)
    out = ens(x)
    assert out.shape == (5, 3)
    want = (torch.sigmoid(a) + torch.sigmoid(b)) / 2
    torch.testing.assert_close(torch.sigmoid(out), want.expand(5, -1))
    assert not torch.allclose(out, ((a + b) / 2).expand(5, -1))  # the logit mean would differ
    assert ens.member_probabilities(x).shape == (2, 5, 3)
    one = ProbabilityEnsemble([_Fixed(a)])
    torch.testing.assert_close(one(x), a.expand(5, -1), atol=1e-4, rtol=1e-4)
    extreme = ProbabilityEnsemble([_Fixed(torch.tensor([[80.0, -80.0]]))])
    assert torch.isfinite(extreme(x)).all()  # logit of a saturated probability stays finite
    wide = ProbabilityEnsemble([_Fixed(a.double()), _Fixed(b.double())])
    assert wide(x).dtype == torch.float64 and out.dtype == torch.float32  # the members' dtype, not always float32
    torch.testing.assert_close(wide(x).float(), out)


def test_probability_ensemble_errors():
    with pytest.raises(ValueError, match="at least one member"):
        ProbabilityEnsemble([])
    with pytest.raises(ValueError, match="num_tasks"):
        ProbabilityEnsemble([_Fixed(torch.zeros(1, 2)), _Fixed(torch.zeros(1, 3))])


_HP = MoleculeRecipe(epochs=2, hidden=16, layers=1, heads=2, pe_dim=4, batch_size=16, descriptors=False)


def _small(molecule_csv):
    ds = md.load_dataset(csv_path=str(molecule_csv), pe_dim=4, log=False)
    return ds, md.split_indices(ds, "random", 0), mp.model_spec("none", len(ds.task_names), _HP)


def test_run_ensemble_members_curve_and_checkpoint(tmp_path, molecule_csv):
    ds, idx, spec = _small(molecule_csv)
    res = mp.run_ensemble(ds, idx, spec, _HP, size=3, seed=4, out_dir=tmp_path / "ens", progress=False,
                          log=lambda m: None)
    assert [m["seed"] for m in res["members"]] == [4, 1004, 2004]
    assert [c["members"] for c in res["ensemble_curve"]] == [1, 2, 3]
    # the ensemble of the first member is that member; the last curve point is the ensemble
    assert res["ensemble_curve"][0]["test_roc_auc"] == pytest.approx(res["members"][0]["test_roc_auc"])
    assert res["ensemble_curve"][-1]["val_roc_auc"] == pytest.approx(res["val"]["roc_auc"])
    single = mp.run_training(ds, idx, spec, _HP, seed=4, progress=False, log=lambda m: None)
    assert res["members"][0]["test_roc_auc"] == pytest.approx(single["test"]["roc_auc"])  # member 0 = seed 4
    for k in range(3):
        assert (tmp_path / "ens" / f"member{k}" / "best.pt").is_file()
    model, meta = mp.load_model(tmp_path / "ens" / "best.pt")
    assert isinstance(model, ProbabilityEnsemble) and len(model.members) == 3
    assert meta["ensemble"] == {"size": 3, "seeds": [4, 1004, 2004]}
    graphs = [ds[i] for i in idx[2].tolist()]
    torch.testing.assert_close(mp.predict_proba(model, graphs), mp.predict_proba(res["model"], graphs))
    manual = torch.stack([mp.predict_proba(m, graphs) for m in res["model"].members]).mean(0)
    torch.testing.assert_close(mp.predict_proba(model, graphs), manual, atol=1e-5, rtol=1e-4)
    assert mp.predict_proba(model, graphs, members=True).shape == (3, len(graphs), len(ds.task_names))
    assert mp.predict_proba(model, [], members=True).shape == (3, 0, len(ds.task_names))
    assert mp.predict_proba(model, []).shape == (0, len(ds.task_names))
    with pytest.raises(ValueError, match=">= 1"):
        mp.run_ensemble(ds, idx, spec, _HP, size=0)


def test_run_ensemble_resume_reloads_finished_members(tmp_path, molecule_csv):
    ds, idx, spec = _small(molecule_csv)
    kw = dict(size=2, seed=0, out_dir=tmp_path / "ens", progress=False, log=lambda m: None)
    first = mp.run_ensemble(ds, idx, spec, _HP, **kw)
    logs = []
    again = mp.run_ensemble(ds, idx, spec, _HP, **{**kw, "log": logs.append}, resume=True)
    assert sum("Resumed" in m for m in logs) == 2 and not any("Epoch" in m for m in logs)
    assert again["test"]["roc_auc"] == pytest.approx(first["test"]["roc_auc"])


def test_cli_ensemble_train_predict_explain_evaluate(tmp_path, molecule_csv, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", "--csv", str(molecule_csv), "--split", "random", "--epochs", "2", "--ensemble", "2",
                     "--hidden", "16", "--layers", "1", "--heads", "2", "--pe-dim", "4", "--no-descriptors",
                     "--batch-size", "16", "--no-progress", "--out", str(run)]) == 0
    assert "ensemble of 2" in capsys.readouterr().out
    metrics = json.loads((run / "metrics.json").read_text())
    assert len(metrics["members"]) == 2 and len(metrics["ensemble_curve"]) == 2
    assert metrics["meta"]["ensemble"]["size"] == 2
    best = str(run / "best.pt")
    assert cli.main(["predict", "--checkpoint", best, "--smiles", "CCO", "nonsense(",
                     "--out", str(tmp_path / "p.csv")]) == 0
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert len(rows) == 3 and "syntax error" in rows[2]
    assert rows[0] == "row,smiles,toxic,active,toxic_std,active_std,error"
    model, meta = mp.load_model(best)
    member_prob = mp.predict_proba(model, md.featurize(["CCO"], meta["pe"]["k"]), members=True)  # (2, 1, T)
    values = [float(v) for v in rows[1].split(",")[2:6]]
    want = member_prob.mean(0)[0].tolist() + member_prob.std(0, unbiased=False)[0].tolist()
    assert values == pytest.approx(want, abs=2e-6) and min(values[2:]) >= 0
    assert cli.main(["explain", "--checkpoint", best, "--smiles", "c1ccccc1O", "--out", str(tmp_path / "m.png")]) == 0
    assert (tmp_path / "m.png").stat().st_size > 0
    assert cli.main(["evaluate", "--checkpoint", best, "--no-progress"]) == 0
    assert cli.main(["train", "--csv", str(molecule_csv), "--ensemble", "0", "--no-progress"]) == 2
    assert "--ensemble must be >= 1" in capsys.readouterr().err


def test_ensemble_attention_is_the_mean_of_the_members(molecule_csv):
    ds, idx, spec = _small(molecule_csv)
    torch.manual_seed(0)
    members = [build_model(spec).eval() for _ in range(2)]
    ens = ProbabilityEnsemble(members)
    g = ds[0]
    prob, scores = molecule_attention(ens, g)
    parts = [molecule_attention(m, g) for m in members]
    torch.testing.assert_close(prob, (parts[0][0] + parts[1][0]) / 2)
    mean = (parts[0][1] + parts[1][1]) / 2
    torch.testing.assert_close(scores, mean / mean.max())
    assert scores.shape == (g.num_nodes,)


def test_social_tasks_refuse_ensemble(capsys):
    assert cli.main(["train", "karate", "--ensemble", "3", "--epochs", "1"]) == 2
    assert "--ensemble is a molecule option" in capsys.readouterr().err



def test_pos_weight_warning_given_once_per_ensemble(tmp_path, molecule_csv):
    rows = molecule_csv.read_text().splitlines()
    csv = tmp_path / "m.csv"
    csv.write_text("\n".join([rows[0] + ",never"] + [r + ",0" for r in rows[1:]]) + "\n")
    ds = md.load_dataset(csv_path=str(csv), pe_dim=4, log=False)
    idx, spec = md.split_indices(ds, "random", 0), mp.model_spec("none", len(ds.task_names), _HP)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mp.run_ensemble(ds, idx, spec, _HP.replace(epochs=1), size=3, pos_weight=True, progress=False,
                        log=lambda m: None)
    said = [str(w.message) for w in caught if "--pos-weight" in str(w.message)]
    assert len(said) == 1 and "never" in said[0]


def test_ensemble_logits_keep_confident_predictions_apart():
    # mean probabilities in float64 and a 1e-12 clamp: logits 18 and 24 must not tie (they did at 1e-6)
    class Fixed(nn.Module):
        num_tasks = 1

        def forward(self, x):
            return x

    out = ProbabilityEnsemble([Fixed(), Fixed()])(torch.tensor([[18.0], [24.0], [-24.0]]))
    assert out.dtype == torch.float32 and out[1, 0] > out[0, 0] > 17 and out[2, 0] < -23

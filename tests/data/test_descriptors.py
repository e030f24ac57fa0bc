"""Molecule-level RDKit descriptors (graphattn.data.descriptors) and the models' graph features."""
import math

import pytest
import torch

pytest.importorskip("rdkit")

import warnings  # noqa: E402

from rdkit import Chem  # noqa: E402
from rdkit.Chem import Descriptors  # noqa: E402

from graphattn import GraphClassifier, GraphFeatureNorm  # noqa: E402
from graphattn.cli import main as cli  # noqa: E402
from graphattn.data import descriptor_names  # noqa: E402
from graphattn.data import descriptors as dmod  # noqa: E402
from graphattn.data import mol_descriptors, smiles_to_data
from graphattn.nn import MPNNBaseline  # noqa: E402
from graphattn.tasks.molecules import data as md  # noqa: E402
from graphattn.tasks.molecules import pipeline as mp  # noqa: E402
from graphattn.train import load_checkpoint  # noqa: E402
from graphattn.transforms import AddMolDescriptors  # noqa: E402
from graphattn.tasks.molecules.recipe import MoleculeRecipe  # noqa: E402


def test_descriptors_are_rdkit_values_compressed_in_the_given_order():
    names = descriptor_names()
    assert len(names) > 100 and "MolWt" in names and "TPSA" in names
    mol = Chem.MolFromSmiles("CC(=O)Oc1ccccc1C(=O)O")  # aspirin
    d = mol_descriptors(mol, ["MolWt", "NumHDonors", "MolLogP"])
    assert d.shape == (1, 3) and d.dtype == torch.float32
    expect = [Descriptors.MolWt(mol), Descriptors.NumHDonors(mol), Descriptors.MolLogP(mol)]
    for got, v in zip(d[0].tolist(), expect):
        assert got == pytest.approx(math.copysign(math.log1p(abs(v)), v), rel=1e-5)
    full = mol_descriptors(mol)
    assert full.shape == (1, len(names)) and torch.isfinite(full).all()
    with pytest.raises(ValueError, match="no descriptor.*NotADescriptor"):
        mol_descriptors(mol, ["MolWt", "NotADescriptor"])


def test_uncomputable_descriptors_are_zero_not_nan():
    # partial charges are not defined for some exotic elements: RDKit gives NaN there

    mol = Chem.MolFromSmiles("[Se]=[Se]")
    d = mol_descriptors(mol)
    assert torch.isfinite(d).all()


def test_transform_needs_smiles_and_its_repr_tracks_the_names():
    data = AddMolDescriptors(["MolWt", "TPSA"])(smiles_to_data("CCO"))
    assert data.mol_desc.shape == (1, 2)
    assert repr(AddMolDescriptors(["MolWt"])) != repr(AddMolDescriptors(["TPSA"]))
    assert "rdkit=" in repr(AddMolDescriptors(["MolWt"]))
    bare = smiles_to_data("CCO")
    del bare.smiles
    with pytest.raises(ValueError, match="needs data.smiles"):
        AddMolDescriptors(["MolWt"])(bare)


def test_norm_standardises_with_training_statistics_and_clamps():
    torch.manual_seed(0)
    train = torch.randn(200, 3) * torch.tensor([5.0, 0.1, 0.0]) + torch.tensor([10.0, -2.0, 7.0])
    norm = GraphFeatureNorm(3).fit(train)
    z = norm(train)
    assert torch.allclose(z[:, :2].mean(0), torch.zeros(2), atol=1e-5)
    assert torch.allclose(z[:, :2].std(0, unbiased=False), torch.ones(2), atol=1e-4)
    assert torch.equal(z[:, 2], torch.zeros(200))  # constant column: std 1, centred
    far = norm(torch.tensor([[1e6, -1e6, 7.0]]))
    assert far.tolist() == [[norm.clip, -norm.clip, 0.0]]
    with pytest.raises(ValueError, match="NaN or infinite"):
        norm(torch.tensor([[float("nan"), 0.0, 0.0]]))
    with pytest.raises(ValueError, match=r"shape \(B, 3\)"):
        norm(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="fit needs"):
        GraphFeatureNorm(3).fit(torch.zeros(0, 3))


@pytest.mark.parametrize("cls", ["ours", "gine"])
def test_models_read_graph_features_and_keep_their_statistics(cls):
    torch.manual_seed(0)
    kw = dict(in_channels=4, hidden_channels=8, num_tasks=2, num_layers=1, heads=2, graph_feature_dim=3)
    model = (GraphClassifier(**kw) if cls == "ours" else MPNNBaseline(**kw, conv="gine")).eval()
    x, ei = torch.randn(7, 4), torch.tensor([[0, 1, 2, 4, 5], [1, 2, 0, 5, 6]])
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    f = torch.randn(2, 3)
    model.graph_feature_norm.fit(torch.randn(50, 3) * 3 + 1)
    out = model(x, ei, batch, graph_features=f)
    assert out.shape == (2, 2) and torch.isfinite(out).all()
    f2 = f.clone()
    f2[1] += 1.0
    out2 = model(x, ei, batch, graph_features=f2)
    assert torch.equal(out2[0], out[0]) and not torch.equal(out2[1], out[1])  # per-graph features
    with pytest.raises(ValueError, match="needs graph_features"):
        model(x, ei, batch)
    with pytest.raises(ValueError, match="rows but the batch has 2 graphs"):
        model(x, ei, batch, graph_features=torch.randn(3, 3))
    clone = (GraphClassifier(**kw) if cls == "ours" else MPNNBaseline(**kw, conv="gine")).eval()
    clone.load_state_dict(model.state_dict())  # the statistics travel with the weights
    assert torch.equal(clone(x, ei, batch, graph_features=f), out)
    plain = GraphClassifier(4, 8, 2, num_layers=1, heads=2).eval()
    with pytest.raises(ValueError, match="graph_feature_dim=0"):
        plain(x, ei, batch, graph_features=f)


def test_cli_train_predict_explain_evaluate_with_descriptors(tmp_path, molecule_csv):
    fixture = molecule_csv
    assert cli.main(["train", "--csv", str(fixture), "--split", "random", "--epochs", "2", "--descriptors",
                     "--hidden", "16", "--layers", "1", "--heads", "2", "--pe-dim", "4",
                     "--batch-size", "16", "--no-progress", "--out", str(tmp_path / "run")]) == 0
    ck = load_checkpoint(tmp_path / "run" / "best.pt")
    names = ck["meta"]["descriptors"]
    assert names == descriptor_names()
    assert ck["meta"]["model"]["kwargs"]["graph_feature_dim"] == len(names)
    std = ck["model"]["graph_feature_norm.std"]
    assert std.shape == (len(names),) and not torch.equal(std, torch.ones_like(std))  # fitted
    best = str(tmp_path / "run" / "best.pt")
    assert cli.main(["predict", "--checkpoint", best, "--smiles", "CCO", "c1ccccc1O", "nonsense(",
                     "--out", str(tmp_path / "p.csv")]) == 0
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert len(rows) == 4 and "syntax error" in rows[3]
    assert cli.main(["explain", "--checkpoint", best, "--smiles", "c1ccccc1O",
                     "--out", str(tmp_path / "m.png")]) == 0
    assert cli.main(["evaluate", "--checkpoint", best, "--no-progress"]) == 0


def test_social_tasks_refuse_descriptors(capsys):
    assert cli.main(["train", "karate", "--descriptors", "--epochs", "1"]) == 2
    assert "--descriptors is a molecule option" in capsys.readouterr().err


def test_pipeline_refuses_a_model_and_dataset_that_disagree_on_descriptors(molecule_csv):
    ds = md.load_dataset(csv_path=str(molecule_csv), log=False)  # no descriptors
    hp = MoleculeRecipe(epochs=1, hidden=8, layers=1, heads=2, pe_dim=0)
    spec = mp.model_spec("none", ds.num_tasks, hp, graph_feature_dim=5)
    with pytest.raises(ValueError, match="reads 5 molecule descriptors but the dataset carries 0"):
        mp.run_training(ds, md.split_indices(ds, "random", 0), spec, hp, progress=False, log=lambda m: None)


def test_ipc_is_skipped_on_huge_molecules_and_numpy_stays_quiet(monkeypatch):

    mol = Chem.MolFromSmiles("CCCCCCCCCCc1ccccc1")
    names = dmod.descriptor_names()
    full = dmod.mol_descriptors(mol)
    monkeypatch.setattr(dmod, "SLOW_MAX_ATOMS", 5)  # "huge" = more than 5 atoms
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing leaks (numpy overflow warnings are silenced)
        cut = dmod.mol_descriptors(mol)
    ipc, avg = names.index("Ipc"), names.index("AvgIpc")
    assert 0 < full[0, ipc] < cut[0, ipc] == pytest.approx(dmod.SATURATED)  # huge: grows with size, not 0
    assert full[0, avg] != 0 and cut[0, avg] == 0  # levels off with size: unknown
    monkeypatch.setattr(dmod, "_functions", lambda: {"Up": lambda m: float("inf"), "Down": lambda m: -float("inf"),
                                                     "Bad": lambda m: float("nan")})
    assert dmod.mol_descriptors(mol).tolist() == [[pytest.approx(dmod.SATURATED), pytest.approx(-dmod.SATURATED), 0.0]]
    others = [j for j, n in enumerate(names) if n not in ("Ipc", "AvgIpc")]
    assert torch.equal(full[:, others], cut[:, others])


def test_normalized_set_is_descriptastorus_values_by_name():
    """``rdkit2d_normalized``: chemprop's CDF-normalised descriptors, computed by descriptastorus itself, in
    the order of the names given; the names carry the set's prefix, and one list cannot mix the sets."""
    rdn = pytest.importorskip("descriptastorus.descriptors.rdNormalizedDescriptors")
    names = descriptor_names("rdkit2d_normalized")
    assert len(names) == 200 and all(n.startswith(dmod.NORMALIZED_PREFIX) for n in names)
    smiles = "CC(=O)Oc1ccccc1C(=O)O"
    expect = rdn.RDKit2DNormalized().process(smiles)[1:]
    got = mol_descriptors(Chem.MolFromSmiles(smiles), names)
    assert got.shape == (1, 200) and torch.isfinite(got).all()
    torch.testing.assert_close(got[0].double(), torch.tensor(expect, dtype=torch.float64).nan_to_num(0.0),
                               atol=1e-6, rtol=1e-6)
    assert 0.0 <= float(got.min()) and float(got.max()) <= 1.0
    picked = [names[5], names[0]]
    torch.testing.assert_close(mol_descriptors(Chem.MolFromSmiles(smiles), picked), got[:, [5, 0]])
    with pytest.raises(ValueError, match="mix the rdkit2d and rdkit2d_normalized"):
        mol_descriptors(Chem.MolFromSmiles(smiles), ["MolWt", names[0]])
    with pytest.raises(ValueError, match="no normalised descriptor"):
        mol_descriptors(Chem.MolFromSmiles(smiles), [dmod.NORMALIZED_PREFIX + "NotADescriptor"])
    with pytest.raises(ValueError, match="descriptor set must be one of"):
        descriptor_names("rdkit3d")
    # the cache key of a dataset built with them differs from the rdkit2d one's
    assert "descriptastorus=" in repr(AddMolDescriptors(names)) and "descriptastorus" not in repr(AddMolDescriptors())


def test_cli_descriptor_flag_forms(tmp_path, molecule_csv):
    """``--descriptors`` alone is rdkit2d, ``--descriptors rdkit2d_normalized`` chemprop's set, and
    ``--no-descriptors`` none; predict computes the checkpoint's set for new molecules."""
    from graphattn.cli.arguments import build_parser

    parse = build_parser().parse_args
    assert parse(["train", "tox21", "--descriptors"]).descriptors == "rdkit2d"
    assert parse(["train", "tox21", "--no-descriptors"]).descriptors == "none"
    assert parse(["train", "tox21"]).descriptors is None  # the recipe's default
    pytest.importorskip("descriptastorus")
    tiny = ["--split", "random", "--epochs", "1", "--hidden", "16", "--layers", "1", "--heads", "2", "--pe-dim", "0",
            "--batch-size", "16", "--no-progress"]
    assert cli.main(["train", "--csv", str(molecule_csv), *tiny, "--descriptors", "rdkit2d_normalized",
                     "--out", str(tmp_path / "run")]) == 0
    ck = load_checkpoint(tmp_path / "run" / "best.pt")
    assert ck["meta"]["descriptors"] == descriptor_names("rdkit2d_normalized")
    assert ck["meta"]["hparams"]["descriptors"] == "rdkit2d_normalized"
    model, _ = mp.load_model(tmp_path / "run" / "best.pt")
    norm = model.graph_feature_norm  # chemprop's set is read as it is ([0, 1]); rdkit2d is standardised
    assert torch.equal(norm.mean, torch.zeros_like(norm.mean)) and torch.equal(norm.std, torch.ones_like(norm.std))
    assert cli.main(["train", "--csv", str(molecule_csv), *tiny, "--descriptors", "--out", str(tmp_path / "raw")]) == 0
    assert mp.load_model(tmp_path / "raw" / "best.pt")[0].graph_feature_norm.mean.abs().sum() > 0
    g = md.featurize(["c1ccccc1O"], descriptors=ck["meta"]["descriptors"])[0]
    assert torch.equal(g.mol_desc, mol_descriptors(Chem.MolFromSmiles("c1ccccc1O"), ck["meta"]["descriptors"]))
    assert cli.main(["predict", "--checkpoint", str(tmp_path / "run" / "best.pt"), "--smiles", "c1ccccc1O",
                     "--out", str(tmp_path / "p.csv")]) == 0
    row = (tmp_path / "p.csv").read_text().splitlines()[1].split(",")
    assert abs(float(row[2]) - mp.predict_proba(model, [g])[0, 0].item()) < 1e-5

"""The molecule task (graphattn.tasks.molecules): datasets by name or CSV, task names, splits,
the featurized cache's location, training and reloading a model from its checkpoint."""
import dataclasses
from pathlib import Path

import pytest
import torch

pytest.importorskip("rdkit")

from tiny_inputs import SMILES, molecule_labels, write_csv, write_file  # noqa: E402

from graphattn.data import MOLECULENET, SIDER_TASKS  # noqa: E402
from graphattn.tasks.molecules import data as md  # noqa: E402
from graphattn.tasks.molecules import pipeline as mp  # noqa: E402
from graphattn.tasks.molecules.data import load_dataset, unlabelled_tasks  # noqa: E402
from graphattn.tasks.molecules.recipe import MoleculeRecipe  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "molecules_tasks_train.csv"
pytestmark = pytest.mark.usefixtures("private_cache")


def test_checkpoint_round_trip_gives_identical_predictions(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHATTN_DATA", str(tmp_path / "data"))
    hp = MoleculeRecipe(epochs=1, hidden=16, layers=1, heads=2, pe_dim=4, batch_size=16)
    ds = md.load_dataset(csv_path=str(FIXTURE), pe_dim=4, log=False)
    idx = md.split_indices(ds, "random", 0)
    spec = mp.model_spec("none", ds.num_tasks, hp)
    res = mp.run_training(ds, idx, spec, hp, out_dir=tmp_path / "run", progress=False, log=lambda m: None)
    graphs = md.featurize(["CCO", "Clc1ccccc1", "CC(=O)Nc1ccc(O)cc1"], pe_dim=4)
    before = mp.predict_proba(res["model"], graphs)
    model, meta = mp.load_model(tmp_path / "run" / "best.pt")
    assert torch.equal(mp.predict_proba(model, graphs), before)


def test_scaffold_split_of_one_big_scaffold_group_is_refused_and_lopsided_splits_warn(tmp_path):
    acyclic = ["C" * k + "O" for k in range(1, 11)]  # one (empty) scaffold: too big for train
    src = write_csv(tmp_path / "a.csv", ["smiles", "a"], [(s, i % 2) for i, s in enumerate(acyclic)])
    ds = md.load_dataset(csv_path=str(src), log=False)
    with pytest.raises(ValueError, match="scaffold split of 10 molecules left no training"):
        md.split_indices(ds, "scaffold", 0)
    with pytest.warns(UserWarning, match="no validation molecules"):
        md.split_indices(ds[:5], "random", 0)  # 4/0/1
    hp = MoleculeRecipe(epochs=1, hidden=8, layers=1, heads=2, pe_dim=0, batch_size=4)
    dsd = md.load_dataset(csv_path=str(src), log=False, descriptors=md.descriptor_set(True))
    spec = mp.model_spec("none", 1, hp, graph_feature_dim=len(dsd.descriptor_names))
    empty = (torch.tensor([], dtype=torch.long), torch.arange(5), torch.arange(5, 10))
    with pytest.raises(ValueError, match="no training molecules"):
        mp.run_training(dsd, empty, spec, hp, progress=False, log=lambda m: None)


def test_cache_dir_honours_graphattn_cache_with_a_read_only_data_root(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        monkeypatch.setenv("GRAPHATTN_DATA", str(ro))
        monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "mine"))
        assert md.cache_dir() == tmp_path / "mine"
        monkeypatch.delenv("GRAPHATTN_CACHE")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert md.cache_dir() == tmp_path / "home" / ".cache" / "graphattn"
    finally:
        ro.chmod(0o755)
    assert "GRAPHATTN_CACHE" in md.cache_dir.__doc__


def test_resolve_tasks_with_commas_case_and_duplicates():
    neo = "Neoplasms benign, malignant and unspecified (incl cysts and polyps)"
    assert md.resolve_tasks(f"{neo},eye DISORDERS", SIDER_TASKS) == [neo, "Eye disorders"]
    assert md.resolve_tasks("neoplasms benign,malignant and unspecified (incl cysts and polyps)",
                            SIDER_TASKS) == [neo]
    assert md.resolve_tasks(["eye disorders", neo.upper()], SIDER_TASKS) == ["Eye disorders", neo]
    with pytest.raises(ValueError, match="more than once"):
        md.resolve_tasks("Eye disorders,eye disorders", SIDER_TASKS)
    with pytest.raises(ValueError, match=r"unknown task\(s\) \['Neoplasms benign'\]"):
        md.resolve_tasks("Neoplasms benign,Eye disorders", SIDER_TASKS)
    assert md.resolve_tasks("A", ["a", "A"]) == ["A"]
    with pytest.raises(ValueError, match="ambiguous"):
        md.resolve_tasks("ab", ["Ab", "AB"])


def test_named_dataset_and_csv_tasks_with_commas(tmp_path, monkeypatch):
    neo = "Neoplasms benign, malignant and unspecified (incl cysts and polyps)"
    monkeypatch.setitem(MOLECULENET, "sider", dataclasses.replace(MOLECULENET["sider"], rows=(12, 12)))
    write_csv(tmp_path / "data" / "sider" / "sider.csv", ["smiles", *SIDER_TASKS],
              [(s, *[(i + j) % 2 for j in range(len(SIDER_TASKS))]) for i, s in enumerate(SMILES[:12])])
    monkeypatch.setenv("GRAPHATTN_DATA", str(tmp_path / "data"))
    ds = md.load_dataset("sider", tasks=f"{neo.lower()}, Eye Disorders", log=False)
    assert ds.task_names == [neo, "Eye disorders"] and ds[0].y.shape == (1, 2)
    assert ds[0].y.tolist() == [[float(SIDER_TASKS.index(neo) % 2), float(SIDER_TASKS.index("Eye disorders") % 2)]]
    src = write_csv(tmp_path / "c.csv", ["smiles", "x, y", "Z"], [(s, *molecule_labels(s)) for s in SMILES])
    ds = md.load_dataset(csv_path=str(src), tasks="z,X,Y", log=False)
    assert ds.task_names == ["Z", "x, y"]
    with pytest.raises(ValueError, match="more than once"):
        md.load_dataset(csv_path=str(src), tasks="Z,z", log=False)


def test_unlabelled_columns_in_the_first_rows_are_fine_without_tasks(tmp_path, monkeypatch):
    """Inferred tasks (ToxCast-like sparse columns) with --limit are not refused, nor is
    evaluate --csv on a file where one of the model's tasks has no label."""
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "c"))

    f = write_file(tmp_path / "m.csv", "smiles,a,b\n" + "".join(f"{'C' * (i + 1)}O,{i % 2},{'' if i < 6 else i % 2}\n"
                                                          for i in range(12)))
    ds = load_dataset(csv_path=str(f), limit=4, log=False)
    assert list(ds.task_names) == ["a", "b"] and unlabelled_tasks(ds) == ["b"]
    assert unlabelled_tasks(load_dataset(csv_path=str(f), log=False)) == []


def test_rwse_molecules_train_predict_and_evaluate_through_the_cli(tmp_path, monkeypatch, capsys):
    """``--pe-kind rwse``: the graphs carry the random-walk return probabilities (exact), the
    model reads them through a linear encoder (changing them changes its output), the
    checkpoint records the kind, and predict / evaluate featurize new molecules the same way."""
    from graphattn.cli import main as cli
    from graphattn.data import random_walk_pe
    from graphattn.nn.encodings import pe_inputs

    monkeypatch.setenv("GRAPHATTN_DATA", str(tmp_path / "data"))
    csv_in = write_csv(tmp_path / "m.csv", ["smiles", "toxic", "active"], [(s, *molecule_labels(s)) for s in SMILES])
    tiny = ["--hidden", "16", "--layers", "1", "--heads", "2", "--batch-size", "16", "--epochs", "1",
            "--no-progress", "--no-descriptors", "--split", "random"]
    assert cli.main(["train", "--csv", str(csv_in), *tiny, "--pe-kind", "rwse", "--pe-dim", "6",
                     "--out", str(tmp_path / "run")]) == 0
    model, meta = mp.load_model(tmp_path / "run" / "best.pt")
    assert meta["pe"] == {"kind": "rwse", "k": 6} and meta["hparams"]["pe_kind"] == "rwse"
    assert model.backbone.pe_kind == "linear"

    g = md.featurize(["Clc1ccccc1"], pe_dim=6, pe_kind="rwse")[0]
    assert not hasattr(g, "lap_pe")
    assert torch.allclose(g.random_walk_pe, random_walk_pe(g.edge_index, g.num_nodes, 6))
    assert torch.equal(pe_inputs(g)["pe"], g.random_walk_pe) and pe_inputs(g)["pe_eigvals"] is None
    p = mp.predict_proba(model, [g])
    g2 = g.clone()
    g2.random_walk_pe = torch.zeros_like(g.random_walk_pe)
    assert not torch.allclose(mp.predict_proba(model, [g2]), p)  # the encoding reaches the output

    out = tmp_path / "p.csv"
    assert cli.main(["predict", "--checkpoint", str(tmp_path / "run" / "best.pt"), "--smiles", "Clc1ccccc1",
                     "--out", str(out)]) == 0
    row = out.read_text().splitlines()[1].split(",")
    assert abs(float(row[-3]) - p[0, 0].item()) < 1e-5 and abs(float(row[-2]) - p[0, 1].item()) < 1e-5
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path / "run" / "best.pt"), "--csv", str(csv_in)]) == 0
    with pytest.raises(ValueError, match="pe_kind must be one of"):
        md.featurize(["CCO"], pe_dim=4, pe_kind="linear")


def test_rrwp_molecules_with_hops_train_and_predict_through_the_cli(tmp_path, monkeypatch, capsys):
    """``--pe-kind rrwp --hops 3``: every attended atom pair carries its relative random-walk vector
    (walked on the bonds only), the model reads it through ``edge_pe`` (changing it changes the
    output), the checkpoint records the kind, and predict featurizes new molecules the same way."""
    from graphattn.cli import main as cli
    from graphattn.transforms import relative_random_walk

    monkeypatch.setenv("GRAPHATTN_DATA", str(tmp_path / "data"))
    csv_in = write_csv(tmp_path / "m.csv", ["smiles", "toxic", "active"], [(s, *molecule_labels(s)) for s in SMILES])
    tiny = ["--hidden", "16", "--layers", "1", "--heads", "2", "--batch-size", "16", "--epochs", "1",
            "--no-progress", "--no-descriptors", "--split", "random"]
    assert cli.main(["train", "--csv", str(csv_in), *tiny, "--pe-kind", "rrwp", "--pe-dim", "5", "--hops", "3",
                     "--out", str(tmp_path / "run")]) == 0
    model, meta = mp.load_model(tmp_path / "run" / "best.pt")
    assert meta["pe"] == {"kind": "rrwp", "k": 5} and model.backbone.edge_pe_dim == 5

    g = md.featurize(["Clc1ccccc1O"], pe_dim=5, pe_kind="rrwp", hops=3)[0]
    bonds = g.edge_index[:, g.edge_attr[:, -1] == 1]
    diag, pairs = relative_random_walk(bonds, g.num_nodes, 5, g.edge_index)
    assert torch.equal(g.edge_rrwp, pairs) and torch.equal(g.rrwp, diag) and not hasattr(g, "lap_pe")
    p = mp.predict_proba(model, [g])
    g2 = g.clone()
    g2.edge_rrwp = torch.zeros_like(g.edge_rrwp)
    assert not torch.allclose(mp.predict_proba(model, [g2]), p)  # the pair vectors reach the output
    out = tmp_path / "p.csv"
    assert cli.main(["predict", "--checkpoint", str(tmp_path / "run" / "best.pt"), "--smiles", "Clc1ccccc1O",
                     "--out", str(out)]) == 0
    row = out.read_text().splitlines()[1].split(",")
    assert abs(float(row[-3]) - p[0, 0].item()) < 1e-5


def test_hop_attention_molecules_through_the_cli(tmp_path, monkeypatch, capsys):
    """``--hops 3``: the graphs carry the atom pairs up to 3 bonds apart after the bonds, with a
    "no bond" category and the hop distance; the checkpoint records it, predict featurizes the
    same way; our model alone reads it (not a baseline, not a pretrained backbone)."""
    from graphattn.cli import main as cli
    from graphattn.data import BOND_FEATURE_DIMS

    monkeypatch.setenv("GRAPHATTN_DATA", str(tmp_path / "data"))
    csv_in = write_csv(tmp_path / "m.csv", ["smiles", "toxic", "active"], [(s, *molecule_labels(s)) for s in SMILES])
    tiny = ["--hidden", "16", "--layers", "1", "--heads", "2", "--batch-size", "16", "--epochs", "1",
            "--no-progress", "--no-descriptors", "--split", "random", "--pe-dim", "4"]
    assert cli.main(["train", "--csv", str(csv_in), *tiny, "--hops", "3", "--out", str(tmp_path / "run")]) == 0
    model, meta = mp.load_model(tmp_path / "run" / "best.pt")
    assert meta["hops"] == 3 and md.graph_options(meta)["hops"] == 3
    assert model.backbone.edge_encoder is not None and model.backbone.edge_dim == len(BOND_FEATURE_DIMS) + 1

    plain, = md.featurize(["CCCCl"], pe_dim=4)
    g, = md.featurize(["CCCCl"], pe_dim=4, hops=3)
    e = plain.edge_index.size(1)
    assert torch.equal(g.edge_index[:, :e], plain.edge_index) and torch.equal(g.lap_pe, plain.lap_pe)
    assert g.edge_index.size(1) == e + 2 * 2 + 2 * 1  # a chain of 4 heavy atoms: 2 pairs 2 apart, 1 pair 3 apart
    assert g.edge_attr[e:, :-1].tolist() == [list(BOND_FEATURE_DIMS)] * 6
    assert g.edge_attr[:, -1].tolist() == [1] * e + [2] * 4 + [3] * 2

    out = tmp_path / "p.csv"
    assert cli.main(["predict", "--checkpoint", str(tmp_path / "run" / "best.pt"), "--smiles", "CCCCl",
                     "--out", str(out)]) == 0
    row = out.read_text().splitlines()[1].split(",")
    p = mp.predict_proba(model, [g])
    assert abs(float(row[-3]) - p[0, 0].item()) < 1e-5
    capsys.readouterr()
    assert cli.main(["train", "--csv", str(csv_in), *tiny, "--hops", "3", "--baseline", "gine"]) == 2
    assert "--hops" in capsys.readouterr().err
    assert cli.main(["train", "--csv", str(csv_in), *tiny, "--hops", "0"]) == 2
    assert "--hops must be >= 1" in capsys.readouterr().err
    for bad in (0, True, 2.5):
        with pytest.raises(ValueError, match="hops must be an int >= 1"):
            md.featurize(["CCO"], hops=bad)

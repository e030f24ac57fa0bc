"""Self-supervised pretraining (graphattn.tasks.molecules.pretrain) and fine-tuning from it (train --init)."""
import gzip
import json
import os
import shutil
import stat
import threading
import warnings
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Batch

from graphattn import GraphTransformer, MoleculePretrainer
from graphattn.cli import main as cli
from graphattn.cli.molecules_train import _resumed_ensemble_size
from graphattn.data import (FEATURIZER_VERSION, DataFileError, MoleculeNetDataset, descriptor_names, find_column,
                            read_csv_table)
from graphattn.data.musae import read_target
from graphattn.data.smiles_table import sniff_table_kind
from graphattn.nn import MPNNBaseline
from graphattn.nn.encodings import pe_inputs
from graphattn.nn.models.registry import build_model
from graphattn.tasks.molecules import data as md
from graphattn.tasks.molecules import defaults as molecule_defaults
from graphattn.tasks.molecules import finetune as ft
from graphattn.tasks.molecules import pipeline as mp
from graphattn.tasks.molecules import pretrain as pt
from graphattn.tasks.molecules import pretrain_data as pdata
from graphattn.tasks.molecules.files import _sniffed_suffix, spooled
from graphattn.tasks.molecules.pretrain_data import _keys
from graphattn.train import CheckpointError, save_checkpoint
from graphattn.train.checkpoint import check_same_run
from graphattn.tasks.molecules.recipe import MoleculeRecipe

_SMILES = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "C", "CCN(CC)CC", "O=C(O)c1ccccc1OC(C)=O", "C1CCCCC1",
           "N#Cc1ccccc1", "CCCCCCCCCC(=O)O", "c1ccncc1", "ClC(Cl)Cl", "CC(C)Cc1ccc(C(C)C(=O)O)cc1", "OC1CCCCC1",
           "c1ccc2ccccc2c1", "CC(=O)OCC", "NCCO"]
_HP = dict(epochs=2, hidden=16, layers=1, heads=2, pe_dim=4, batch_size=8, global_tokens=1)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GRAPHATTN_DATA", str(tmp_path / "data"))


@pytest.fixture(scope="module")
def graphs():
    return md.featurize(_SMILES, 4, descriptor_names())


def _model(graphs, **hp):
    bb = pt.arch_spec({**molecule_defaults.PRETRAIN_DEFAULTS, **_HP, **hp})
    torch.manual_seed(0)
    return MoleculePretrainer(bb, graphs[0].mol_desc.size(1))


def test_atom_mask_rate_every_molecule_and_seeded():
    b = torch.arange(50).repeat_interleave(6)  # 50 molecules of 6 atoms
    m = pt.sample_atom_mask(b, 50, 0.15, torch.Generator().manual_seed(1))
    assert m.dtype == torch.bool and m.shape == (300,)
    assert torch.zeros(50, dtype=torch.long).index_add_(0, b, m.long()).min() >= 1  # >= 1 atom per molecule
    assert 0.1 < m.float().mean() < 0.4
    assert torch.equal(m, pt.sample_atom_mask(b, 50, 0.15, torch.Generator().manual_seed(1)))
    one = pt.sample_atom_mask(torch.zeros(1, dtype=torch.long), 1, 0.01)
    assert one.tolist() == [True]  # a one-atom molecule always gets its atom masked
    assert pt.sample_atom_mask(torch.zeros(0, dtype=torch.long), 0, 0.15).numel() == 0
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="mask rate"):
            pt.sample_atom_mask(b, 50, bad)


def test_masked_atoms_are_hidden_from_the_whole_model(graphs):
    model = _model(graphs).eval()
    batch = Batch.from_data_list(graphs[:4])
    mask = torch.zeros(batch.num_nodes, dtype=torch.bool)
    mask[[1, 5, 12]] = True
    a1, d1 = model(batch, mask)
    changed = batch.clone()
    changed.x = batch.x.clone()
    changed.x[mask] = (changed.x[mask] + 1) % 2  # other element / degree / ...: invisible when masked
    a2, d2 = model(changed, mask)
    assert torch.allclose(a1, a2) and torch.allclose(d1, d2)
    # an unmasked atom's features do matter
    changed.x = batch.x.clone()
    changed.x[0, 0] = 17
    assert not torch.allclose(model(changed, mask)[1], d1)
    assert a1.shape == (3, sum(model.vocab_sizes)) and d1.shape == (4, graphs[0].mol_desc.size(1))
    # outside the pretrainer's forward the backbone is a plain GraphTransformer again
    plain = GraphTransformer(**pt.arch_spec({**molecule_defaults.PRETRAIN_DEFAULTS, **_HP})).eval()
    plain.load_state_dict(model.backbone.state_dict())
    kw = dict(num_graphs=batch.num_graphs, **pe_inputs(batch))
    assert torch.allclose(model.backbone(batch.x, batch.edge_index, batch.edge_attr, batch.batch, **kw)[0],
                          plain(batch.x, batch.edge_index, batch.edge_attr, batch.batch, **kw)[0])
    with pytest.raises(ValueError, match="atom_mask"):
        model(batch, mask[:-1])


def test_pretraining_learns_both_tasks(graphs):
    # the pool repeats 16 molecules, so validation molecules were seen in training (with other
    # masks): this checks that both losses are optimised, not that they generalise
    res = pt.run_pretraining(graphs * 4, dict(_HP, epochs=12, hidden=32, val_fraction=0.25, lr=3e-3), seed=0,
                             progress=False, log=lambda m: None)
    h = res["history"]
    assert h[-1]["loss"] < 0.6 * h[0]["loss"]
    assert res["val_descriptor_mae"] < h[0]["val"]["mae"]
    el = res["val_masked_atom"]["atomic_num"]
    assert el["accuracy"] > el["majority"] - 1e-9 and el["accuracy"] > 0.6
    assert res["counts"] == {"train": 48, "val": 16}


def test_fine_tuning_starts_from_the_pretrained_backbone(tmp_path, graphs, molecule_csv):
    pt.run_pretraining(graphs, _HP, out_dir=tmp_path / "pre", progress=False, log=lambda m: None)
    state, meta = ft.load_pretrained(tmp_path / "pre" / "best.pt")
    assert meta["pipeline"] == "pretrain" and all(not k.startswith("backbone.") for k in state)
    ds = md.load_dataset(csv_path=str(molecule_csv), pe_dim=4, log=False)
    hp = MoleculeRecipe(**_HP, descriptors=False)
    spec = mp.model_spec("none", len(ds.task_names), hp)
    model = build_model(spec)
    fresh_head = {k: v.clone() for k, v in model.head.state_dict().items()}
    ft.load_pretrained_backbone(model, tmp_path / "pre" / "best.pt")
    for k, v in model.backbone.state_dict().items():
        assert torch.equal(v, state[k]), k
    assert all(torch.equal(v, fresh_head[k]) for k, v in model.head.state_dict().items())
    # the training run records where it started from
    res = mp.run_training(ds, md.split_indices(ds, "random", 0), spec, hp.replace(epochs=1), progress=False,
                          log=lambda m: None, init=tmp_path / "pre" / "best.pt")
    assert res["meta"]["init"]["sha256"] and res["meta"]["init"]["checkpoint"].endswith("best.pt")
    # another width is refused with the settings named
    wide = build_model(mp.model_spec("none", 2, hp.replace(hidden=32)))
    with pytest.raises(ValueError, match="hidden_channels"):
        ft.load_pretrained_backbone(wide, tmp_path / "pre" / "best.pt")

    with pytest.raises(ValueError, match="GraphClassifier"):
        ft.load_pretrained_backbone(MPNNBaseline(**mp.model_spec("gine", 2, hp).kwargs), tmp_path / "pre" / "best.pt")


def test_load_pretrained_refuses_other_checkpoints(tmp_path, graphs, molecule_csv, monkeypatch):
    pt.run_pretraining(graphs, _HP, out_dir=tmp_path / "pre", progress=False, log=lambda m: None)
    ds = md.load_dataset(csv_path=str(molecule_csv), pe_dim=4, log=False)
    hp = MoleculeRecipe(**dict(_HP, epochs=1), descriptors=False)
    mp.run_training(ds, md.split_indices(ds, "random", 0), mp.model_spec("none", 2, hp), hp, progress=False,
                    log=lambda m: None, out_dir=tmp_path / "ft")
    with pytest.raises(ValueError, match="not a pretraining checkpoint"):
        ft.load_pretrained(tmp_path / "ft" / "best.pt")
    monkeypatch.setattr(ft, "FEATURIZER_VERSION", "999")  # this version of graphattn featurizes otherwise
    with pytest.raises(ValueError, match="featurizer version"):
        ft.load_pretrained(tmp_path / "pre" / "best.pt")


def test_molecule_pool_dedupes_excludes_and_counts(tmp_path):
    a = tmp_path / "a.csv"
    a.write_text("SMILES,score\nCCO,1\nOCC,2\nnot_a_smiles,3\nc1ccccc1,4\nCCN,5\n")
    b = tmp_path / "b.csv"
    b.write_text("mol,Class\nC(C)O,1\nc1ccncc1,0\n")
    ex = tmp_path / "test_set.csv"
    ex.write_text("smiles,y\nNCC,1\n")
    graphs, rep = pdata.molecule_pool([a, b], ["smiles", "mol"], pe_dim=4, exclude=[str(ex)], log=False)
    assert sorted(g.smiles for g in graphs) == ["CCO", "c1ccccc1", "c1ccncc1"]
    fa, fb = rep["files"]
    assert (fa["smiles_col"], fa["invalid"], fa["invalid_rows"], fa["duplicates"], fa["excluded"], fa["used"]) == \
        ("SMILES", 1, [4], 1, 1, 2)
    assert (fb["smiles_col"], fb["duplicates"], fb["used"]) == ("mol", 1, 1)
    assert all(not hasattr(g, "y") or g.y is None for g in graphs) and graphs[0].mol_desc.shape[0] == 1
    with pytest.raises(ValueError, match="SMILES column"):
        pdata.molecule_pool([b], ["smiles"], log=False)
    # exclusion also catches the test molecules' stereoisomers and salt / charge forms
    c = tmp_path / "c.csv"
    c.write_text("smiles\nC[C@H](N)O\n[Na+].CC(=O)[O-]\nCCCC\n")
    ex2 = tmp_path / "test2.csv"
    ex2.write_text("smiles\nCC(N)O\nCC(=O)O\n")
    graphs, rep = pdata.molecule_pool([c], ["smiles"], pe_dim=0, exclude=[str(ex2)], log=False)
    assert [g.smiles for g in graphs] == ["CCCC"] and rep["files"][0]["excluded"] == 2
    with pytest.raises(ValueError, match="no molecules left"):
        pdata.molecule_pool([ex], ["smiles"], exclude=[str(ex)], log=False)
    with pytest.raises(ValueError, match="no such file"):
        pdata.molecule_pool([tmp_path / "missing.csv"], log=False)


def test_cli_pretrain_then_train_init_then_evaluate(tmp_path, molecule_csv, capsys):
    pre = tmp_path / "pre"
    args = ["pretrain", "--csv", str(molecule_csv), "--epochs", "2", "--hidden", "16", "--layers", "1",
            "--heads", "2", "--pe-dim", "4", "--batch-size", "8", "--out", str(pre), "--no-progress"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "masked element accuracy" in out and (pre / "best.pt").is_file() and (pre / "metrics.json").is_file()
    run = tmp_path / "run"
    base = ["train", "--csv", str(molecule_csv), "--epochs", "1", "--split", "random", "--no-progress",
            "--no-descriptors"]
    assert cli.main(base + ["--init", str(pre / "best.pt"), "--out", str(run)]) == 0
    ck = torch.load(run / "best.pt", weights_only=True)
    assert ck["meta"]["hparams"]["hidden"] == 16 and ck["meta"]["init"]["molecules"] > 0
    assert cli.main(["evaluate", "--checkpoint", str(run / "best.pt")]) == 0
    capsys.readouterr()
    # clashes and misuse are clear errors, not tracebacks
    assert cli.main(base + ["--init", str(pre / "best.pt"), "--hidden", "32"]) == 2
    assert "drop --hidden 32 (pretrained: 16)" in capsys.readouterr().err
    assert cli.main(base + ["--init", str(pre / "best.pt"), "--baseline", "gine"]) == 2
    assert "--init" in capsys.readouterr().err
    assert cli.main(base + ["--init", str(tmp_path / "nope.pt")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cli.main(base + ["--init", str(run / "best.pt")]) == 2
    assert "not a pretraining checkpoint" in capsys.readouterr().err
    assert cli.main(["evaluate", "--checkpoint", str(pre / "best.pt")]) == 2
    assert "pretraining checkpoint" in capsys.readouterr().err
    assert cli.main(["train", "karate", "--init", str(pre / "best.pt")]) == 2
    assert "--init" in capsys.readouterr().err
    assert cli.main(["pretrain", "--csv", str(molecule_csv), "--mask-rate", "1.5"]) == 2
    assert "--mask-rate" in capsys.readouterr().err


def test_cli_pretrain_resume_and_out_errors(tmp_path, molecule_csv, capsys):
    pre = tmp_path / "pre"
    base = ["pretrain", "--csv", str(molecule_csv), "--epochs", "1", "--hidden", "16", "--layers", "1",
            "--heads", "2", "--pe-dim", "4", "--batch-size", "8", "--no-progress"]
    assert cli.main(base + ["--out", str(pre)]) == 0
    capsys.readouterr()
    # resuming with another split seed / validation fraction / width is refused, without a traceback
    for extra in (["--seed", "7"], ["--val-fraction", "0.5"], ["--hidden", "32"]):
        assert cli.main(base + ["--out", str(pre), "--resume", "--epochs", "2"] + extra) == 2
        assert "another run" in capsys.readouterr().err
    assert cli.main(base + ["--out", str(pre), "--resume", "--epochs", "2"]) == 0
    capsys.readouterr()
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert cli.main(base + ["--out", str(afile)]) == 2
    assert "is a file" in capsys.readouterr().err
    assert cli.main(base + ["--out", str(pre), "--lr", "inf"]) == 2
    assert "--lr" in capsys.readouterr().err
    assert cli.main(base + ["--out", str(pre), "--exclude", "tox22"]) == 2  # a run is in pre: said first
    assert "holds another run" in capsys.readouterr().err
    assert cli.main(base + ["--out", str(tmp_path / "new"), "--exclude", "tox22"]) == 2
    assert "neither a MoleculeNet set" in capsys.readouterr().err


def test_init_refuses_other_heads_even_when_given_as_the_default(tmp_path, molecule_csv, capsys):
    pre = tmp_path / "pre"
    assert cli.main(["pretrain", "--csv", str(molecule_csv), "--epochs", "1", "--hidden", "16", "--layers", "1",
                     "--heads", "2", "--pe-dim", "4", "--out", str(pre), "--no-progress"]) == 0
    capsys.readouterr()
    base = ["train", "--csv", str(molecule_csv), "--epochs", "1", "--split", "random", "--no-progress",
            "--no-descriptors", "--init", str(pre / "best.pt")]
    assert cli.main(base + ["--heads", "4"]) == 2  # 4 is the parser's default, but it was given
    assert "drop --heads 4 (pretrained: 2)" in capsys.readouterr().err
    assert cli.main(base + ["--heads", "2", "--hidden", "16", "--out", str(tmp_path / "ok")]) == 0  # agreeing
    # through the API the head count is compared too (same parameter shapes, other grouping)
    ds = md.load_dataset(csv_path=str(molecule_csv), pe_dim=4, log=False)
    hp = MoleculeRecipe(hidden=16, layers=1, heads=8, pe_dim=4, epochs=1, descriptors=False)
    with pytest.raises(ValueError, match="heads"):  # also without the spec
        ft.load_pretrained_backbone(build_model(mp.model_spec("none", 2, hp)), pre / "best.pt")
    with pytest.raises(ValueError, match="heads"):
        mp.run_training(ds, md.split_indices(ds, "random", 0), mp.model_spec("none", 2, hp), hp, progress=False,
                        log=lambda m: None, init=pre / "best.pt")


def test_fine_tune_resume_keeps_the_init_record(tmp_path, molecule_csv, capsys):
    pre, run = tmp_path / "pre", tmp_path / "run"
    assert cli.main(["pretrain", "--csv", str(molecule_csv), "--epochs", "1", "--hidden", "16", "--layers", "1",
                     "--heads", "2", "--pe-dim", "4", "--out", str(pre), "--no-progress"]) == 0
    base = ["train", "--csv", str(molecule_csv), "--split", "random", "--no-progress", "--no-descriptors",
            "--out", str(run)]
    assert cli.main(base + ["--epochs", "1", "--init", str(pre / "best.pt")]) == 0
    # resumed without --init and without its flags: the backbone settings come from last.pt
    assert cli.main(base + ["--epochs", "2", "--resume"]) == 0
    assert torch.load(run / "last.pt", weights_only=True)["meta"]["init"]["molecules"] > 0
    assert cli.main(base + ["--epochs", "3", "--resume", "--hidden", "32"]) == 2
    assert "drop --hidden 32" in capsys.readouterr().err
    # a run trained from scratch cannot be resumed "from" a pretrained backbone
    scratch = tmp_path / "scratch"
    small = ["--hidden", "16", "--layers", "1", "--heads", "2", "--pe-dim", "4"]
    assert cli.main(base[:-1] + [str(scratch), "--epochs", "1"] + small) == 0
    capsys.readouterr()
    assert cli.main(base[:-1] + [str(scratch), "--epochs", "2", "--resume", "--init", str(pre / "best.pt")]) == 2
    assert "trained from scratch" in capsys.readouterr().err
    assert "init" not in torch.load(scratch / "last.pt", weights_only=True)["meta"]
    # the same --init file with other contents (pretraining went on): said so, not "another file"
    assert cli.main(["pretrain", "--csv", str(molecule_csv), "--epochs", "2", "--out", str(pre), "--resume",
                     "--no-progress", *small]) == 0
    capsys.readouterr()
    assert cli.main(base + ["--epochs", "3", "--resume", "--init", str(pre / "best.pt")]) == 2
    err = capsys.readouterr().err
    assert "whose contents changed since" in err and "not from --init" not in err
    assert cli.main(base + ["--epochs", "3", "--resume"]) == 0  # without --init: resumed as recorded


def test_smiles_column_ambiguous_case(tmp_path):
    f = tmp_path / "two.csv"
    f.write_text("Smiles,SMILES\nCCO,CCN\n")
    with pytest.raises(ValueError, match="ambiguous"):
        pdata.molecule_pool([f], ["smiles"], log=False)
    graphs, _ = pdata.molecule_pool([f], ["SMILES"], pe_dim=0, log=False)  # the exact name wins
    assert [g.smiles for g in graphs] == ["CCN"]


def test_validation_masks_are_fixed(graphs):
    model = _model(graphs).eval()
    fwd = pt.pretrain_forward(0.3)
    batch = Batch.from_data_list(graphs[:6])
    a = fwd(model, batch, "val")
    b = fwd(model, batch, "val")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    torch.manual_seed(1)
    t1 = fwd(model, batch, "train")[2]
    torch.manual_seed(2)
    t2 = fwd(model, batch, "train")[2]
    assert not torch.equal(t1, t2)  # training masks are drawn afresh


def test_train_out_that_is_a_file_is_refused_before_training(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    assert cli.main(["train", "karate", "--out", str(f)]) == 2
    assert "is a file" in capsys.readouterr().err


def test_exclude_a_named_toxicity_set(tmp_path, monkeypatch):
    shared = Path(__file__).resolve().parents[3] / "shared" / "data"
    if not (shared / "tox21").is_dir():
        pytest.skip("../shared/data/tox21 not present")
    monkeypatch.setenv("GRAPHATTN_DATA", str(shared))

    first = MoleculeNetDataset(name="tox21", log=False).smiles[0]  # a Tox21 molecule
    f = tmp_path / "pool.csv"
    f.write_text(f"smiles\n{first}\nCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCO\n")
    graphs, rep = pdata.molecule_pool([f], pe_dim=0, exclude=["tox21"], log=False)
    assert [g.smiles for g in graphs] == ["CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCO"] and rep["files"][0]["excluded"] == 1


def test_resumed_fine_tuned_ensemble_starts_unstarted_members_from_the_backbone(tmp_path, molecule_csv, capsys):
    pre = tmp_path / "pre"
    assert cli.main(["pretrain", "--csv", str(molecule_csv), "--epochs", "1", "--hidden", "16", "--layers", "1",
                     "--heads", "2", "--pe-dim", "4", "--out", str(pre), "--no-progress"]) == 0
    base = ["train", "--csv", str(molecule_csv), "--split", "random", "--no-progress", "--no-descriptors",
            "--epochs", "2"]
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert cli.main(base + ["--init", str(pre / "best.pt"), "--ensemble", "2", "--out", str(full)]) == 0
    shutil.copytree(full, cut)
    shutil.rmtree(cut / "member1")  # killed before member 2 started
    for f in ("best.pt", "metrics.json"):
        (cut / f).unlink()
    # resumed with neither --init nor --ensemble: both come from the folder
    assert cli.main(base + ["--out", str(cut), "--resume"]) == 0
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (full, cut))
    assert a["test"]["roc_auc"] == b["test"]["roc_auc"] and a["val"]["roc_auc"] == b["val"]["roc_auc"]
    assert torch.load(cut / "member1" / "last.pt", weights_only=True)["meta"]["init"]["molecules"] > 0
    capsys.readouterr()
    # a folder's layout and --ensemble must agree
    assert cli.main(base + ["--out", str(cut), "--resume", "--ensemble", "1"]) == 2
    assert "holds an ensemble of 2" in capsys.readouterr().err
    single = tmp_path / "single"
    assert cli.main(base + ["--init", str(pre / "best.pt"), "--out", str(single)]) == 0
    assert cli.main(base + ["--out", str(single), "--resume", "--ensemble", "2"]) == 2
    assert "holds a single model" in capsys.readouterr().err


def test_pos_weight_recorded_checkpoint_modes_out_parent_and_fragment_order(tmp_path, molecule_csv, capsys):
    run = tmp_path / "run"
    base = ["train", "--csv", str(molecule_csv), "--split", "random", "--no-progress", "--no-descriptors",
            "--hidden", "16", "--layers", "1", "--heads", "2", "--pe-dim", "4", "--out", str(run)]
    assert cli.main(base + ["--epochs", "1", "--pos-weight"]) == 0
    ck = torch.load(run / "best.pt", weights_only=True)
    assert ck["meta"]["pos_weight"] is True

    assert json.loads((run / "metrics.json").read_text())["pos_weight"] is True
    umask = os.umask(0)
    os.umask(umask)
    for f in ("best.pt", "last.pt", "metrics.json"):  # as plain writes: readable by the group if the umask allows
        assert stat.S_IMODE((run / f).stat().st_mode) == 0o666 & ~umask
    capsys.readouterr()
    assert cli.main(base + ["--epochs", "2", "--resume"]) == 2  # without --pos-weight: another loss
    assert "pos_weight" in capsys.readouterr().err
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    assert cli.main(["train", "--csv", str(molecule_csv), "--out", str(blocker / "sub"), "--epochs", "1"]) == 2
    assert "is a file, so no folder" in capsys.readouterr().err
    assert _keys("c1ccccc1.c1ccncc1")[1] == _keys("c1ccncc1.c1ccccc1")[1]  # fragment order does not matter


def test_exclusion_key_and_resumed_ensemble_size_rules(tmp_path):
    for a, b in (("C/C=C/C.C=CCC", "CC=CC.C=CCC"), ("CC[NH3+].CCO", "CCN.CCO"), ("[Na+].CC(=O)[O-]", "CC(=O)O")):
        assert _keys(a)[1] == _keys(b)[1]  # stereo / charge forms of one molecule share the key
    for k, meta in ((0, {"data": {}}), (1, {"data": {}})):  # written before sizes were recorded
        save_checkpoint(tmp_path / "old" / f"member{k}" / "last.pt", {"meta": meta})
    with pytest.raises(ValueError, match="pass --ensemble N"):
        _resumed_ensemble_size(tmp_path / "old", None)
    assert _resumed_ensemble_size(tmp_path / "old", 3) == 3
    save_checkpoint(tmp_path / "new" / "member0" / "last.pt", {"meta": {"ensemble_size": 3}})
    assert _resumed_ensemble_size(tmp_path / "new", None) == 3  # members 1, 2 not started yet
    with pytest.raises(ValueError, match="give --ensemble 3"):
        _resumed_ensemble_size(tmp_path / "new", 2)
    assert _resumed_ensemble_size(tmp_path / "new", 4) == 4  # growing is fine
    assert _resumed_ensemble_size(tmp_path / "none", None) is None
    # a single run written into an ensemble's folder (or the reverse): --resume must be told which
    save_checkpoint(tmp_path / "new" / "last.pt", {"meta": {}})
    with pytest.raises(ValueError, match="single model .*and an ensemble's member"):
        _resumed_ensemble_size(tmp_path / "new", None)
    assert _resumed_ensemble_size(tmp_path / "new", 1) == 1
    assert _resumed_ensemble_size(tmp_path / "new", 3) == 3


def test_resume_compares_init_and_pool_files_by_contents_not_place(tmp_path):
    init = {"checkpoint": "/old/P/best.pt", "sha256": "a" * 64, "molecules": 10}
    moved = dict(init, checkpoint="/new/P/best.pt", excluded_sources=["tox21"])  # a later record's extra key
    check_same_run(tmp_path, {"init": init}, {"init": moved})
    with pytest.raises(CheckpointError, match="differing from this run's: init\\)"):
        check_same_run(tmp_path, {"init": init}, {"init": dict(moved, sha256="b" * 64)})
    pool = {"files": [{"path": "/a/pool.smi", "sha256": "c" * 64, "rows": 5}], "molecules": 5}
    check_same_run(tmp_path, {"pool": pool}, {"pool": {"files": [dict(pool["files"][0], path="/b/x.smi")],
                                                       "molecules": 5}})
    with pytest.raises(CheckpointError, match="differing from this run's: pool\\)"):  # same name and size, other molecules
        check_same_run(tmp_path, {"pool": pool}, {"pool": {"files": [dict(pool["files"][0], sha256="d" * 64)],
                                                           "molecules": 5}})
    old = {"files": [{"path": "/a/pool.smi", "rows": 5}], "molecules": 5}  # before files were hashed
    with pytest.raises(CheckpointError, match="differing from this run's: pool\\)"):
        check_same_run(tmp_path, {"pool": old}, {"pool": {"files": [dict(pool["files"][0], path="/b/x.smi")],
                                                          "molecules": 5}})
    check_same_run(tmp_path, {"pool": old}, {"pool": pool})


def test_pretraining_reads_smiles_lists_tsv_and_pipes(tmp_path, capsys):
    plain = tmp_path / "zinc.smi"  # no header: SMILES, white space, a name
    plain.write_text("CCO  mol_a\nc1ccccc1O\tmol b\n\nnot_a_smiles x\nCC(=O)Nc1ccc(O)cc1 mol_c\n")
    headed = tmp_path / "zinc_h.smi.gz"
    with gzip.open(headed, "wt") as f:
        f.write("smiles zinc_id\nC1CCCCC1 ZINC1\nN#Cc1ccccc1 ZINC2\n")
    tsv = tmp_path / "chembl.tsv"
    tsv.write_text("chembl_id\tcanonical_smiles\nCHEMBL1\tc1ccncc1\nCHEMBL2\tClC(Cl)Cl\n")
    graphs, rep = pdata.molecule_pool([plain, headed, tsv], ["smiles", "canonical_smiles"], pe_dim=0, log=False)
    assert sorted(g.smiles for g in graphs) == sorted(["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "C1CCCCC1",
                                                      "N#Cc1ccccc1", "c1ccncc1", "ClC(Cl)Cl"])
    a, b, c = rep["files"]
    assert (a["rows"], a["invalid_rows"], b["smiles_col"], c["smiles_col"]) == (4, [4], "smiles", "canonical_smiles")
    assert all(len(f["sha256"]) == 64 for f in rep["files"])
    # pipes are read once into a temporary file (its kind sniffed); a folder is named as one
    fifo, ex_fifo = tmp_path / "in.fifo", tmp_path / "ex.fifo"
    os.mkfifo(fifo)
    os.mkfifo(ex_fifo)

    def feed(path, text):
        with open(path, "w") as f:
            f.write(text)

    threads = [threading.Thread(target=feed, args=(fifo, "smiles,y\nCCO,1\nCCN,0\nCCC,1\n")),
               threading.Thread(target=feed, args=(ex_fifo, "CCN\n"))]
    for t in threads:
        t.start()
    out = tmp_path / "pre"
    code = cli.main(["pretrain", "--csv", str(fifo), "--exclude", str(ex_fifo), "--epochs", "1", "--hidden", "16",
                     "--layers", "1", "--heads", "2", "--pe-dim", "0", "--batch-size", "8", "--out", str(out),
                     "--no-progress"])
    for t in threads:
        t.join()
    assert code == 0, capsys.readouterr().err
    assert "3 rows, 2 used (0 invalid SMILES, 0 duplicates, 1 excluded)" in capsys.readouterr().out
    assert cli.main(["pretrain", "--csv", str(tmp_path), "--out", str(tmp_path / "p2"), "--no-progress"]) == 2
    assert "is a folder, not a file" in capsys.readouterr().err


@pytest.mark.parametrize("first", ["c1ccnc1", "C1CC", "c1cc1", "Cl2"])
def test_a_headerless_smiles_list_starting_with_an_invalid_smiles_keeps_that_row(tmp_path, first):
    f = tmp_path / "l.smi"
    f.write_text(f"{first} bad\nCCO ethanol\nc1ccccc1 benzene\n")
    header, rows = read_csv_table(f)
    assert header == ["smiles", "name"] and [r[1][0] for r in rows] == [first, "CCO", "c1ccccc1"]
    graphs, rep = pdata.molecule_pool([f], ["smiles"], pe_dim=0, log=False)
    assert rep["files"][0]["invalid_rows"] == [1] and len(graphs) == 2
    # plain words RDKit cannot parse and no SMILES could be spelled with stay headers
    for word in ("SMILES", "Name", "ID", "CID", "zinc_id", "compound"):
        f.write_text(f"{word} title\nCCO ethanol\n")
        assert read_csv_table(f)[0] == [word, "title"]


def test_train_csv_from_a_pipe_is_refused_with_the_reason(tmp_path, capsys):
    fifo = tmp_path / "train.fifo"
    os.mkfifo(fifo)
    assert cli.main(["train", "--csv", str(fifo), "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert "is a pipe, not a file" in capsys.readouterr().err


def test_incomplete_pretraining_checkpoint_is_a_clear_error(tmp_path):
    save_checkpoint(tmp_path / "odd.pt", {"model": {}, "meta": {"pipeline": "pretrain",
                                                                 "featurizer_version": FEATURIZER_VERSION}})
    with pytest.raises(ValueError, match="incomplete pretraining checkpoint"):
        ft.load_pretrained(tmp_path / "odd.pt")


def test_comma_files_named_like_smiles_lists_stay_csv_and_cxsmiles_stay_whole(tmp_path):
    (tmp_path / "c.smi").write_text("smiles,p_np\nCCO,1\nCCN,0\n")  # a CSV saved as .smi (worked before)
    (tmp_path / "c.tsv").write_text("smiles,p_np\nCCO,1\n")
    (tmp_path / "x.smi").write_text("\nC[C@H](F)Cl |&1:1,2| first\nCCO\n")
    assert read_csv_table(tmp_path / "c.smi") == (["smiles", "p_np"], [(2, ["CCO", "1"]), (3, ["CCN", "0"])])
    assert read_csv_table(tmp_path / "c.tsv") == (["smiles", "p_np"], [(2, ["CCO", "1"])])
    assert read_csv_table(tmp_path / "x.smi") == (["smiles", "name"], [(2, ["C[C@H](F)Cl |&1:1,2|", "first"]),
                                                                        (3, ["CCO", ""])])


def test_pretrain_resume_with_the_exclude_file_moved_or_piped(tmp_path, capsys):
    pool = tmp_path / "pool.csv"
    pool.write_text("smiles\n" + "\n".join(_SMILES) + "\n")
    excl = tmp_path / "excl.csv"
    excl.write_text("smiles\nCCO\n")
    base = ["pretrain", "--csv", str(pool), "--hidden", "16", "--layers", "1", "--heads", "2", "--pe-dim", "0",
            "--batch-size", "8", "--out", str(tmp_path / "p"), "--no-progress"]
    assert cli.main(base + ["--exclude", str(excl), "--epochs", "1"]) == 0
    moved = tmp_path / "moved.csv"
    moved.write_bytes(excl.read_bytes())
    fifo = tmp_path / "ex.fifo"
    os.mkfifo(fifo)
    feed = threading.Thread(target=lambda: fifo.write_text("smiles\nCCO\n"))
    feed.start()
    assert cli.main(base + ["--exclude", str(fifo), "--epochs", "2", "--resume"]) == 0, capsys.readouterr().err
    feed.join()
    assert cli.main(base + ["--exclude", str(moved), "--epochs", "3", "--resume"]) == 0, capsys.readouterr().err
    moved.write_text("smiles\nCCN\n")  # other molecules kept out: another run
    assert cli.main(base + ["--exclude", str(moved), "--epochs", "4", "--resume"]) == 2
    assert "differing from this run's: pool; split)" in capsys.readouterr().err


def test_sniffing_pipes_blank_lead_lines_and_old_exclude_records(tmp_path):
    assert [sniff_table_kind(s) for s in ("smiles,y", "C[C@H](F)Cl |&1:1,2| a", "CCO\tethanol", "smiles\tname",
                                          "Compound ID,SMILES", "smiles zinc_id")] == \
        ["csv", "smiles_list", "smiles_list", "tsv", "csv", "smiles_list"]
    (tmp_path / "b.csv").write_text("\n\nsmiles,y\nCCO,1\n")  # blank lines before the header
    assert read_csv_table(tmp_path / "b.csv") == (["smiles", "y"], [(4, ["CCO", "1"])])
    (tmp_path / "e.smi").write_text("Compound ID,SMILES\nm1,CCO\n")  # a CSV named .smi, space in a column name
    assert read_csv_table(tmp_path / "e.smi") == (["Compound ID", "SMILES"], [(2, ["m1", "CCO"])])
    fifo = tmp_path / "cx.fifo"
    os.mkfifo(fifo)
    feed = threading.Thread(target=lambda: fifo.write_text("C[C@H](F)Cl |&1:1,2| first\nCCO\n"))
    feed.start()
    copy = spooled(fifo)
    feed.join()
    assert copy.endswith(".smi") and read_csv_table(copy)[1][0] == (1, ["C[C@H](F)Cl |&1:1,2|", "first"])
    # an --exclude file recorded by name (older runs) and by contents (now) is the same run
    old = {"pool": {"excluded_sources": ["excl.csv"], "molecules": 3}}
    new = {"pool": {"excluded_sources": [{"path": "/x/excl.csv", "sha256": "a" * 64}], "molecules": 3}}
    check_same_run(tmp_path, old, new)


def test_sniffing_keeps_tsv_headers_iupac_names_and_semicolon_hints(tmp_path):
    # B3DB's TSV header (first field "NO.") and a plain word RDKit parses ("BBB") stay TSV headers
    assert _sniffed_suffix(b"NO.\tcompound_name\tSMILES\tBBB+/BBB-\n1\tethanol\tCCO\tBBB+\n") == ".tsv"
    assert _sniffed_suffix(b"BBB\tsmiles\nCCO\t1\n") == ".tsv"
    (tmp_path / "iupac.smi").write_text("CC(C)(C)C 2,2-dimethylpropane\nCCO ethanol\n")  # commas in names
    assert read_csv_table(tmp_path / "iupac.smi")[1][0] == (1, ["CC(C)(C)C", "2,2-dimethylpropane"])
    (tmp_path / "semi").write_text("smiles;label\nCCO;1\n")  # no suffix, European Excel
    header, _ = read_csv_table(tmp_path / "semi")
    with pytest.raises(DataFileError, match="separated by semicolons"):
        find_column(header, "smiles", tmp_path / "semi")
    with pytest.raises(CheckpointError):  # a set name is not a file recorded by contents
        check_same_run(tmp_path, {"pool": {"excluded_sources": ["tox21"]}},
                       {"pool": {"excluded_sources": [{"path": "/x/other.csv", "sha256": "a" * 64}]}})


def test_target_id_fallback_takes_a_named_integer_column_else_the_index(tmp_path):
    (tmp_path / "t.csv").write_text(",name,label\n0,alice,1\n1,bob,0\n2,carol,1\n")  # names are no ids
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert read_target(tmp_path / "t.csv", None)[0].tolist() == [0, 1, 2]

"""A molecule checkpoint exported with torch.export: the program and the package's featuriser give the
predictions graphattn.load(...).predict gives, for batches of any size."""
from pathlib import Path

import numpy as np
import pytest

import graphattn

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"


def test_an_exported_molecule_program_predicts_as_the_checkpoint(tmp_path):
    pytest.importorskip("rdkit")
    from graphattn.tasks.molecules.export import export_checkpoint, load_exported

    record = export_checkpoint(FIXTURES / "molecules_v0.pt", tmp_path / "m.pt2")
    assert (tmp_path / "m.pt2").exists() and (tmp_path / "m.pt2.json").exists()
    assert record["inputs"][:5] == ["x", "edge_index", "batch", "edge_attr", "ptr"] and record["max_difference"] <= 1e-5
    exported, ref = load_exported(tmp_path / "m.pt2"), graphattn.load(FIXTURES / "molecules_v0.pt")
    for smiles in (["CCO", "c1ccccc1O", "not a smiles", "CC(C)(C)c1ccc(O)cc1", "O=C=O"], ["C"], ["[Na+].[Cl-]"]):
        a, b = exported.predict(smiles), ref.predict(smiles)
        assert a.errors == b.errors and a.values.shape == b.values.shape
        assert np.allclose(a.values, b.values, atol=1e-6, equal_nan=True)
    with pytest.raises(FileNotFoundError, match="featurisation record"):
        load_exported(tmp_path / "missing.pt2")


def test_the_export_command_writes_a_program_that_loads_and_refuses_what_cannot_be_exported(tmp_path, capsys):
    pytest.importorskip("rdkit")
    from graphattn.cli.main import main
    from graphattn.tasks.molecules.export import load_exported

    assert main(["export", "--checkpoint", str(FIXTURES / "molecules_v0.pt"), "--out", f"{tmp_path}/"]) == 0
    assert "Wrote" in capsys.readouterr().out
    a = load_exported(tmp_path / "model.pt2").predict(["CCO", "c1ccccc1O"])
    b = graphattn.load(FIXTURES / "molecules_v0.pt").predict(["CCO", "c1ccccc1O"])
    assert np.allclose(a.values, b.values, atol=1e-6)
    for checkpoint, out, why in ((FIXTURES / "karate_v0.pt", tmp_path / "k.pt2", "neighbour sampling"),
                                 (FIXTURES / "molecules_v0.pt", tmp_path / "m.pt", "not a checkpoint's .pt")):
        assert main(["export", "--checkpoint", str(checkpoint), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert why in err and len(err.strip().splitlines()) == 1 and not out.exists()

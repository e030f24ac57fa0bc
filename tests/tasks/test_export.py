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

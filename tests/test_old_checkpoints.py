"""Checkpoints written by an earlier layout of the package still load and predict the same numbers
(tests/fixtures/README.md says how each was made)."""
import csv
import pathlib

import pytest

from graphattn.cli.main import main

FIX = pathlib.Path(__file__).parent / "fixtures" / "checkpoints"


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _same(new, old, prob_cols):
    assert len(new) == len(old) and new[0].keys() == old[0].keys()
    for a, b in zip(new, old):
        for col in a:
            if col in prob_cols:
                assert float(a[col]) == pytest.approx(float(b[col]), abs=2e-6), (col, a, b)
            else:
                assert a[col] == b[col]


def test_molecule_checkpoint_of_the_earlier_layout_predicts_the_same(tmp_path):
    pytest.importorskip("rdkit")
    out = tmp_path / "p.csv"
    main(["predict", "--checkpoint", str(FIX / "molecules_v0.pt"), "--smiles", "CCO", "c1ccccc1O",
          "CC(=O)Nc1ccc(O)cc1", "--out", str(out), "--no-progress"])
    _same(_rows(out), _rows(FIX / "molecules_v0_predictions.csv"), {"toxic", "active"})


def test_node_checkpoint_of_the_earlier_layout_predicts_the_same(tmp_path):
    out = tmp_path / "p.csv"
    main(["predict", "--checkpoint", str(FIX / "karate_v0.pt"), "--out", str(out), "--no-progress"])
    old = _rows(FIX / "karate_v0_predictions.csv")
    _same(_rows(out), old, {c for c in old[0] if c.startswith("prob_")})

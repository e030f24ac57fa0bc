"""Trust in a prediction: evaluate --csv says how many molecules the model was trained on, predict
--similarity gives each input's highest Tanimoto similarity to the training molecules."""
import csv
import json
from pathlib import Path

import pytest

from graphattn.cli.main import main

SRC = Path(__file__).resolve().parents[1] / "fixtures" / "molecules_tasks_train.csv"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    pytest.importorskip("rdkit")
    out = tmp_path_factory.mktemp("domain") / "run"
    assert main(["train", "--csv", str(SRC), "--epochs", "1", "--hidden", "16", "--layers", "1", "--heads", "2",
                 "--no-descriptors", "--no-progress", "--threads", "1", "--split", "random", "--out", str(out)]) == 0
    return out / "best.pt"


def test_evaluate_on_training_molecules_says_how_many(trained, capsys, tmp_path):
    from graphattn.tasks.molecules.domain import training_smiles
    from graphattn.train.checkpoint import load_checkpoint
    train = set(training_smiles(load_checkpoint(trained)["meta"]))
    assert main(["evaluate", "--checkpoint", str(trained), "--csv", str(SRC), "--no-progress"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert result["in_training_split"] == len(train) > 0
    assert f"warning: {len(train)} of the 40 molecules" in captured.err
    fresh = tmp_path / "new.csv"
    fresh.write_text("smiles,toxic,active\nCCCCCCCCO,1,0\nc1ccc2[nH]ccc2c1,0,1\nCC(C)(C)c1ccccc1,1,1\n")
    assert main(["evaluate", "--checkpoint", str(trained), "--csv", str(fresh), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.strip().splitlines()[-1])["in_training_split"] == 0
    assert "training split" not in captured.err


def test_predict_similarity_to_the_training_set(trained, tmp_path):
    from graphattn.tasks.molecules.domain import training_smiles
    from graphattn.train.checkpoint import load_checkpoint
    member = training_smiles(load_checkpoint(trained)["meta"])[0]
    out = tmp_path / "p.csv"
    assert main(["predict", "--checkpoint", str(trained), "--smiles", member, "C1CC", "FC(F)(F)c1ccc(Br)cc1S(=O)(=O)N",
                 "--similarity", "--out", str(out)]) == 0
    rows = list(csv.DictReader(open(out)))
    assert float(rows[0]["train_similarity"]) == 1.0 and rows[0]["nearest_train"] == member
    assert rows[1]["train_similarity"] == "" and rows[1]["error"]
    assert 0.0 <= float(rows[2]["train_similarity"]) < 1.0 and rows[2]["nearest_train"]


def test_train_similarity_is_tanimoto_on_morgan_bits():
    pytest.importorskip("rdkit")
    from rdkit import Chem, DataStructs
    from rdkit.Chem import rdFingerprintGenerator
    from graphattn.tasks.molecules.domain import train_similarity
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    fp = lambda s: gen.GetFingerprint(Chem.MolFromSmiles(s))  # noqa: E731
    train = ["CCO", "c1ccccc1", "CCN"]
    sim, nearest = train_similarity(["CCCO", "c1ccccc1C"], train)
    for i, s in enumerate(["CCCO", "c1ccccc1C"]):
        want = max(DataStructs.TanimotoSimilarity(fp(s), fp(t)) for t in train)
        assert sim[i] == pytest.approx(want)
    assert nearest[1] == "c1ccccc1"

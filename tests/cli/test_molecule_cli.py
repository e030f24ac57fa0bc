"""The molecule commands on awkward input: non-binary labels, empty splits, whitespace inside
SMILES, gzipped / oddly-cased / piped CSVs for predict and evaluate, predict column collisions,
task names, ``--out`` folders, models without attention, conflicting dataset options, changed
training files and resumed runs of another featurizer version.

All fixtures are written into ``tmp_path``; models are tiny (1 epoch, no descriptors unless
they are the point). The featurized cache goes to a private ``$GRAPHATTN_CACHE``.
"""
from __future__ import annotations

import csv
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("rdkit")

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

from tiny_inputs import SMILES, TINY, molecule_labels, train_csv, write_csv, write_file  # noqa: E402
from torch_geometric.data import Data  # noqa: E402

from graphattn.cli import main as cli  # noqa: E402
from graphattn.cli import molecules_predict as molecule_commands  # noqa: E402
from graphattn.data import (DataFileError, MoleculeCSVDataset, labels, molecules, read_csv_table,  # noqa: E402
                            smiles_to_data)
from graphattn.tasks.molecules import data as md  # noqa: E402
from graphattn.tasks.molecules.files import spooled as _spooled  # noqa: E402
from graphattn.train import load_checkpoint, save_checkpoint  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def mpatch():
    patch = pytest.MonkeyPatch()
    yield patch
    patch.undo()


@pytest.fixture(scope="module", autouse=True)
def _env(tmp_path_factory, mpatch):
    """One torch thread and a private processed-data cache for every test here."""
    mpatch.setenv("GRAPHATTN_CACHE", str(tmp_path_factory.mktemp("cache")))
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny model trained on the 40-molecule CSV (random split): ``(folder, csv)``."""
    root = tmp_path_factory.mktemp("run")
    src = train_csv(root / "train.csv")
    assert cli.main(["train", "--csv", str(src), "--split", "random", "--out", str(root / "run"), *TINY]) == 0
    return root / "run", src


def test_cli_train_and_evaluate_refuse_non_binary_labels(run, tmp_path, capsys):
    src = write_csv(tmp_path / "e.csv", ["smiles", "toxic", "active"],
                    [(s, [0, 1, 2][i % 3], 1) for i, s in enumerate(SMILES)])
    assert cli.main(["train", "--csv", str(src), "--tasks", "toxic", "--split", "random", *TINY]) == 2
    assert "row 4, column 'toxic': label '2' is not 0 or 1" in capsys.readouterr().err
    assert cli.main(["evaluate", "--checkpoint", str(run[0] / "best.pt"), "--csv", str(src), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphattn evaluate:") and "label '2'" in err and "Traceback" not in err


@pytest.mark.parametrize("desc", ["--no-descriptors", "--descriptors"])
def test_single_row_csv_gives_a_clear_error(tmp_path, capsys, desc):
    src = write_csv(tmp_path / "one.csv", ["smiles", "a"], [("CCO", 1)])
    assert cli.main(["train", "--csv", str(src), *TINY, desc]) == 2
    err = capsys.readouterr().err
    assert "the scaffold split of 1 molecule left no training molecules" in err
    assert "--split random or more data" in err


def test_outer_whitespace_and_cxsmiles_extensions_are_fine(tmp_path, capsys, run):
    assert smiles_to_data("  CCO \n").smiles == "CCO"
    assert smiles_to_data("CCO |$;;_R1$|").x.size(0) == 3
    src = write_csv(tmp_path / "w.csv", ["smiles", "a"], [("CCO", 1), ("CC O", 0), ("CCO\nCCN", 1), (" CCN ", 0)])
    with pytest.warns(molecules.InvalidSmilesWarning, match="rows 3, 4"):
        ds = MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False)
    assert ds.smiles == ["CCO", "CCN"] and {s[2] for s in ds.skipped} == {"whitespace inside the SMILES"}
    assert cli.main(["predict", "--checkpoint", str(run[0] / "best.pt"), "--smiles", "CC O"]) == 0
    assert "whitespace inside the SMILES" in capsys.readouterr().out


def test_a_smiles_column_under_another_name_is_suggested_and_one_class_tasks_warn(tmp_path, capsys):
    rows = [(s, 1, molecule_labels(s)[0]) for s in SMILES]
    src = write_csv(tmp_path / "o.csv", ["canonical_smiles", "all_one", "toxic"], rows)
    with pytest.raises(DataFileError, match="did you mean 'canonical_smiles'.*--smiles-col"):
        MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False)
    args = ["train", "--csv", str(src), "--split", "random", "--out", str(tmp_path / "r"), *TINY]
    assert cli.main(args) == 2
    assert "did you mean 'canonical_smiles'" in capsys.readouterr().err
    with pytest.warns(UserWarning, match=r"'all_one' \(all 1, 40 labels\) hold one class only"):
        assert cli.main([*args, "--smiles-col", "canonical_smiles"]) == 0
    # evaluating on a file where a task is one class: no training advice about the loss
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["evaluate", "--checkpoint", str(tmp_path / "r" / "best.pt"), "--csv", str(src),
                         "--smiles-col", "canonical_smiles", "--no-progress"]) == 0
    assert not [w for w in caught if "hold one class only" in str(w.message)]
    # predict / evaluate / explain on the training file itself need no --smiles-col again: the
    # checkpoint's training column is read (said on stderr); a file with neither column is refused
    capsys.readouterr()
    ck = str(tmp_path / "r" / "best.pt")
    assert cli.main(["predict", "--checkpoint", ck, "--csv", str(src), "--out", "-"]) == 0
    out = capsys.readouterr()
    rows = list(csv.DictReader(out.out.splitlines()))  # --out -: the CSV on stdout, nothing else
    assert [r["smiles"] for r in rows] == SMILES and all(r["toxic"] and not r["error"] for r in rows)
    assert "column 'canonical_smiles', the column the model was trained with" in out.err
    assert not (tmp_path / "-").exists() and not Path("-").exists()
    assert cli.main(["evaluate", "--checkpoint", ck, "--csv", str(src), "--no-progress"]) == 0
    assert "csv: 40 molecules" in capsys.readouterr().out
    assert cli.main(["explain", "--checkpoint", ck, "--csv", str(src), "--out", str(tmp_path / "e.svg")]) == 0
    other = write_csv(tmp_path / "n.csv", ["mol", "toxic"], [(s, 0) for s in SMILES[:3]])
    assert cli.main(["predict", "--checkpoint", ck, "--csv", str(other)]) == 2
    assert "no column 'smiles' nor 'canonical_smiles' (the model's training column)" in capsys.readouterr().err
    # a column the user names is never replaced by the training one
    assert cli.main(["predict", "--checkpoint", ck, "--csv", str(src), "--smiles-col", "mol"]) == 2
    assert "no column 'mol'" in capsys.readouterr().err


def test_predict_and_evaluate_read_gzip_and_loose_headers(run, tmp_path, capsys):
    src = write_csv(tmp_path / "in.csv.gz", [" SMILES ", " TOXIC", "Active "],
                    [(s, *molecule_labels(s)) for s in SMILES[:12]])
    out = tmp_path / "p.csv"
    assert cli.main(["predict", "--checkpoint", str(run[0] / "best.pt"), "--csv", str(src), "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["smiles"] for r in rows] == SMILES[:12] and all(r["toxic"] for r in rows)
    capsys.readouterr()
    assert cli.main(["evaluate", "--checkpoint", str(run[0] / "best.pt"), "--csv", str(src)]) == 0
    res = capsys.readouterr().out
    assert "csv: 12 molecules" in res and '"tasks": ["toxic", "active"]' in res


def test_output_columns_never_collide():
    assert molecule_commands._output_columns(["row", "error", "smiles", "a"], False) == (
        ["row_task", "error_task", "smiles_task", "a"], [])
    assert molecule_commands._output_columns(["a", "a_std", "row", "row_task"], True) == (
        ["a", "a_std_task", "row_task", "row_task_task"], ["a_std", "a_std_std", "row_std", "row_task_std"])


def test_predict_keeps_row_smiles_and_error_for_tasks_named_like_them(run, tmp_path, capsys):
    ck = load_checkpoint(run[0] / "best.pt")
    ck["meta"]["task_names"] = ["row", "error"]
    save_checkpoint(tmp_path / "c.pt", ck)
    assert cli.main(["predict", "--checkpoint", str(tmp_path / "c.pt"), "--smiles", "CCO", "C(", ]) == 0
    out = capsys.readouterr()
    rows = list(csv.DictReader(out.out.splitlines()))
    assert list(rows[0]) == ["row", "smiles", "row_task", "error_task", "error"]
    assert [r["row"] for r in rows] == ["1", "2"] and rows[1]["error"] and rows[0]["error"] == ""
    assert 0 <= float(rows[0]["row_task"]) <= 1 and "'row' is written as column 'row_task'" in out.err


def test_cli_tasks_duplicates_and_case(tmp_path, capsys):
    src = train_csv(tmp_path / "t.csv")
    assert cli.main(["train", "--csv", str(src), "--tasks", "toxic,TOXIC", *TINY]) == 2
    assert "more than once" in capsys.readouterr().err
    assert cli.main(["train", "--csv", str(src), "--tasks", "ACTIVE", "--split", "random",
                     "--out", str(tmp_path / "r"), *TINY]) == 0
    assert load_checkpoint(tmp_path / "r" / "best.pt")["meta"]["task_names"] == ["active"]


def test_predict_and_explain_write_into_an_existing_folder(run, tmp_path):
    ck = str(run[0] / "best.pt")
    folder = tmp_path / "out"
    folder.mkdir()
    assert cli.main(["predict", "--checkpoint", ck, "--smiles", "CCO", "--out", str(folder)]) == 0
    assert len(list(csv.DictReader((folder / "predictions.csv").open()))) == 1
    assert cli.main(["explain", "--checkpoint", ck, "--smiles", "Clc1ccccc1", "--out", str(folder)]) == 0
    assert (folder / "explain.png").read_bytes()[:4] == b"\x89PNG"
    assert cli.main(["explain", "--checkpoint", ck, "--smiles", "CCO", "CCN", "--out", str(folder)]) == 0
    assert (folder / "explain_1.png").is_file() and (folder / "explain_2.png").is_file()


def test_explain_without_transformer_layers_is_a_clear_error(tmp_path, capsys, run):
    assert cli.main(["train", "--csv", str(run[1]), "--split", "random", "--out", str(tmp_path / "r0"),
                     *TINY, "--layers", "0"]) == 0
    capsys.readouterr()
    assert cli.main(["explain", "--checkpoint", str(tmp_path / "r0" / "best.pt"), "--smiles", "CCO",
                     "--out", str(tmp_path / "x.png")]) == 2
    assert "0 transformer layers" in capsys.readouterr().err and not (tmp_path / "x.png").exists()


def test_named_dataset_and_csv_together_are_refused(run, capsys):
    assert cli.main(["train", "tox21", "--csv", str(run[1]), *TINY]) == 2
    assert "not both" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not both"):
        md.load_dataset("tox21", str(run[1]))


def test_explain_writes_svg_refuses_other_formats_and_empty_inputs(run, tmp_path, capsys):
    folder, _ = run
    ck = str(folder / "best.pt")
    assert cli.main(["explain", "--checkpoint", ck, "--smiles", "CCO", "--out", str(tmp_path / "m.svg")]) == 0
    assert (tmp_path / "m.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
    assert cli.main(["explain", "--checkpoint", ck, "--smiles", "CCO", "--out", str(tmp_path / "m.pdf")]) == 2
    assert ".png or .svg" in capsys.readouterr().err and not (tmp_path / "m.pdf").exists()
    empty = write_csv(tmp_path / "empty.csv", ["smiles"], [])
    assert cli.main(["explain", "--checkpoint", ck, "--csv", str(empty), "--out", str(tmp_path / "e.png")]) == 2
    assert "no molecules" in capsys.readouterr().err


def test_explain_out_without_suffix_gets_png_suffix(run, tmp_path):
    # as social explain does: a PNG is never written under a name that does not say so
    folder, _ = run
    ck = str(folder / "best.pt")
    assert cli.main(["explain", "--checkpoint", ck, "--smiles", "CCO", "--out", str(tmp_path / "pic")]) == 0
    assert (tmp_path / "pic.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "pic").exists()


def test_predict_reports_the_file_rows_train_reports(run, tmp_path, capsys):
    folder, _ = run
    src = tmp_path / "blank.csv"
    src.write_text('smiles,name\n\nCCO,"a\nb"\nnot_a_smiles,x\n\nc1ccccc1,y\n')  # blank lines, a 2-line cell
    assert cli.main(["predict", "--checkpoint", str(folder / "best.pt"), "--csv", str(src),
                     "--out", str(tmp_path / "p.csv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "p.csv")))
    assert [(r["row"], r["file_row"], bool(r["error"])) for r in rows] == [
        ("1", "3", False), ("2", "5", True), ("3", "7", False)]
    assert "row 2 (file row 5)" in capsys.readouterr().err
    ds = MoleculeCSVDataset(write_csv(tmp_path / "t.csv", ["smiles", "y"], [("CCO", 1)]), log=False)
    assert ds.rows == [2]  # train/evaluate count the same way (header = row 1)
    with pytest.warns(molecules.InvalidSmilesWarning, match="rows 5"):
        bad = MoleculeCSVDataset(src, task_cols=[], log=False)
    assert bad.skipped[0][0] == 5


def test_evaluate_says_which_tasks_it_cannot_score(run, tmp_path, capsys):
    folder, _ = run
    rows = [(s, molecule_labels(s)[0]) for s in SMILES]
    src = write_csv(tmp_path / "one.csv", ["smiles", "toxic"], rows)
    assert cli.main(["evaluate", "--checkpoint", str(folder / "best.pt"), "--csv", str(src)]) == 0
    assert "no column for the model's task(s) ['active']" in capsys.readouterr().err
    both = write_csv(tmp_path / "both.csv", ["smiles", "Toxic", "TOXIC", "active"],
                     [(s, a, a, b) for s, (a, b) in zip(SMILES, map(molecule_labels, SMILES))])
    assert cli.main(["evaluate", "--checkpoint", str(folder / "best.pt"), "--csv", str(both)]) == 2
    assert "rename all but one" in capsys.readouterr().err


def test_metrics_json_has_null_val_for_a_split_without_validation_molecules(tmp_path):
    src = write_csv(tmp_path / "four.csv", ["smiles", "y"], [("CCO", 0), ("c1ccccc1", 1), ("CCCl", 0),
                                                          ("c1ccncc1", 1)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(["train", "--csv", str(src), "--split", "scaffold", "--out", str(tmp_path / "r"),
                         *TINY]) == 0
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert m["val"] is None and isinstance(m["test"], dict)  # 4 molecules: train / test only


def test_task_columns_duplicate_spellings_other_task_rules_and_a_header_only_csv(tmp_path, monkeypatch, capsys):
    # a label column whose name ends in "Acid" stays a task
    rows = [(s, molecule_labels(s)[0], molecule_labels(s)[1]) for s in SMILES[:12]]
    src = write_csv(tmp_path / "acid.csv", ["smiles", "CarboxylicAcid", "Acid"], rows)
    assert MoleculeCSVDataset(src, log=False, binary=True, cache_dir=tmp_path / "c").task_names == [
        "CarboxylicAcid", "Acid"]
    # a pre_transform that drops data.smiles: the duplicate check does not need it
    strip = lambda d: Data(x=d.x, edge_index=d.edge_index, edge_attr=d.edge_attr, y=d.y)  # noqa: E731
    dup = write_csv(tmp_path / "d.csv", ["smiles", "y"], [("CCO", 1), ("CCO", 0), ("CCC", 1)])
    with pytest.warns(molecules.DuplicateSmilesWarning):
        ds = MoleculeCSVDataset(dup, log=False, pre_transform=strip, cache_dir=tmp_path / "c")
    assert ds.duplicate_rows == [(2, 3)] and ds.conflicting_duplicate_rows == [(2, 3)]
    # the same molecule written differently (Kekulé vs aromatic, explicit H) is a duplicate too
    same = write_csv(tmp_path / "same.csv", ["smiles", "y"],
                     [("c1ccccc1", 1), ("C1=CC=CC=C1", 1), ("CO", 0), ("[H]C([H])([H])O", 1), ("CCN", 1)])
    with pytest.warns(molecules.DuplicateSmilesWarning, match="1 of them with different labels"):
        ds = MoleculeCSVDataset(same, log=False, cache_dir=tmp_path / "c")
    assert ds.duplicate_rows == [(2, 3), (4, 5)] and ds.conflicting_duplicate_rows == [(4, 5)]
    # a checkpoint whose tasks were inferred under other rules still evaluates (its own task names)
    ids = write_csv(tmp_path / "ids.csv", ["smiles", "SID", "toxic"],
                    [(s, i % 2, molecule_labels(s)[0]) for i, s in enumerate(SMILES)])
    monkeypatch.setattr(labels, "is_id_column", lambda name: False)  # rules that take SID for a task
    assert cli.main(["train", "--csv", str(ids), "--split", "random", "--out", str(tmp_path / "old"), *TINY]) == 0
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "old" / "best.pt")["meta"]["task_names"] == ["SID", "toxic"]
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path / "old" / "best.pt")]) == 0
    # predict on a header-only CSV keeps the file_row column
    empty = write_csv(tmp_path / "empty.csv", ["smiles"], [])
    assert cli.main(["predict", "--checkpoint", str(tmp_path / "old" / "best.pt"), "--csv", str(empty),
                     "--out", str(tmp_path / "p.csv")]) == 0
    assert (tmp_path / "p.csv").read_text().splitlines()[0].startswith("row,file_row,smiles")


def test_resume_across_featurizer_versions_names_both(tmp_path, capsys):
    src = write_csv(tmp_path / "m.csv", ["smiles", "toxic"], [(s, molecule_labels(s)[0]) for s in SMILES])
    args = ["train", "--csv", str(src), "--split", "random", "--out", str(tmp_path / "r"), *TINY]
    assert cli.main(args) == 0
    for name in ("last.pt", "best.pt"):  # as written by an older release
        ck = load_checkpoint(tmp_path / "r" / name)
        save_checkpoint(tmp_path / "r" / name, {**ck, "meta": {**ck["meta"], "featurizer_version": "1"}})
    capsys.readouterr()
    assert cli.main([*args, "--resume"]) == 2
    assert f"featurizer_version: '1' there, '{molecules.FEATURIZER_VERSION}' now" in capsys.readouterr().err


def test_csv_from_a_pipe(tmp_path):
    """`head x.csv | graphattn predict --csv /dev/stdin`: the table is read in one pass (a second
    open would find the pipe consumed); evaluate spools a pipe to a file."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "w") as f:
            f.write("smiles,y\nCCO,1\nCCN,0\n")

    for read in (read_csv_table, lambda p: read_csv_table(_spooled(p))):
        t = threading.Thread(target=feed)
        t.start()
        header, rows = read(fifo)
        t.join()
        assert header == ["smiles", "y"] and [r for _, r in rows] == [["CCO", "1"], ["CCN", "0"]]
    assert _spooled(tmp_path / "plain.csv") == str(tmp_path / "plain.csv")  # files are read in place
    names = []
    for _ in range(2):  # the same contents get the same name: the processed cache is reused
        t = threading.Thread(target=feed)
        t.start()
        names.append(Path(_spooled(fifo)).name)
        t.join()
    assert names[0] == names[1]


def test_named_task_without_any_label(tmp_path):
    f = write_file(tmp_path / "m.csv", "smiles,a,b\n" + "".join(f"{'C' * (i + 1)}O,{i % 2},\n" for i in range(12)))
    res = _cli("train", "--csv", str(f), "--tasks", "a,b", "--epochs", "1", "--split", "random", "--no-descriptors",
               "--no-progress", "--threads", "1", "--out", str(tmp_path / "o"), env_extra=tmp_path / "c")
    assert res.returncode == 2 and "task column(s) ['b'] hold no label" in res.stderr, res.stderr


def _cli(*args, env_extra=None):
    env = {**os.environ, "GRAPHATTN_CACHE": str(env_extra)} if env_extra else None
    return subprocess.run([sys.executable, "-m", "graphattn", *args], capture_output=True, text=True,
                          timeout=600, env=env)


def test_evaluate_warns_when_the_training_csv_changed(tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text((FIXTURES / "molecules_tasks_train.csv").read_text())
    res = _cli("train", "--csv", str(csv), "--tasks", "toxic", "--epochs", "1", "--split", "random",
               "--no-descriptors", "--no-progress", "--threads", "1", "--out", str(tmp_path / "o"),
               env_extra=tmp_path / "cache")
    assert res.returncode == 0, res.stderr
    lines = csv.read_text().splitlines()
    csv.write_text("\n".join([lines[0]] + lines[1:][::-1]) + "\n")  # same rows, another order
    res = _cli("evaluate", "--checkpoint", str(tmp_path / "o" / "best.pt"), "--no-progress",
               env_extra=tmp_path / "cache")
    assert res.returncode == 0, res.stderr
    assert "the file changed since this checkpoint was trained" in res.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.load(tmp_path / "o" / "best.pt", weights_only=True)["meta"]["data"]["sha256"]


def test_evaluate_csv_with_an_unlabelled_task_column(tmp_path):
    rows = "".join(f"{'C' * (i + 1)}O,{i % 2},{(i // 2) % 2}\n" for i in range(16))
    train = write_file(tmp_path / "m.csv", "smiles,a,b\n" + rows)
    res = _cli("train", "--csv", str(train), "--epochs", "1", "--split", "random", "--no-descriptors",
               "--no-progress", "--threads", "1", "--out", str(tmp_path / "o"), env_extra=tmp_path / "c")
    assert res.returncode == 0, res.stderr
    new = write_file(tmp_path / "n.csv", "smiles,a,b\n" + "".join(f"{'C' * (i + 2)}N,{i % 2},\n" for i in range(8)))
    res = _cli("evaluate", "--checkpoint", str(tmp_path / "o" / "best.pt"), "--csv", str(new),
               "--no-progress", env_extra=tmp_path / "c")
    assert res.returncode == 0, res.stderr

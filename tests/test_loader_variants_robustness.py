"""Documented file formats in the variants users' files come in (session-9 audit): each case was
mishandled before (silent misread, a traceback, or a misleading message)."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest
import torch

from graphattn.utils.files import out_path
from graphattn.data import DataFileError, MoleculeCSVDataset, load_musae, load_tu_folds, load_tu_text
from graphattn.data.ego_json import load_ego_json

FIXTURES = Path(__file__).parent / "fixtures"


def write(path: Path, text: str, encoding="utf-8") -> Path:
    path.write_text(text, encoding=encoding)
    return path


@pytest.fixture
def edges(tmp_path):
    return write(tmp_path / "e.csv", "id_1,id_2\n0,1\n1,2\n2,3\n3,0\n")


# ----------------------------------------------------------------------------- MUSAE target
def test_label_column_first_does_not_become_the_id(tmp_path, edges):
    t = write(tmp_path / "t.csv", "class,user\nb,0\na,1\nb,2\na,3\n")
    g = load_musae(edges, t, target_col="class")
    assert g.class_names == ["a", "b"] and g.y.tolist() == [1, 0, 1, 0]


def test_id_column_as_label_is_refused(tmp_path, edges):
    t = write(tmp_path / "t.csv", "id,target\n0,a\n1,b\n2,a\n3,b\n")
    with pytest.raises(DataFileError, match="column .id. is an id column, not class labels"):
        load_musae(edges, t, target_col="id")


def test_target_col_case_whitespace_rows_and_quoted_edges(tmp_path):
    e = write(tmp_path / "e.csv", '"id_1","id_2"\n"0","1"\n"1","2"\n')
    t = write(tmp_path / "t.csv", "id,Label\n0,x\n   \n1,y\n2,x\n")
    g = load_musae(e, t, target_col="label")
    assert g.class_names == ["x", "y"] and g.edge_index.size(1) == 4


def test_features_file_that_is_not_json(tmp_path, edges):
    t = write(tmp_path / "t.csv", "id,target\n0,a\n1,b\n2,a\n3,b\n")
    f = write(tmp_path / "f.csv", "node_id,0,1\n0,1,0\n")
    with pytest.raises(DataFileError, match="not a JSON file.*looks like a CSV"):
        load_musae(edges, t, f)


# ----------------------------------------------------------------------------- TU text + folds
@pytest.mark.parametrize("attr,msg", [("nan", "node attribute is NaN or infinite"), ("inf", "node attribute is NaN or infinite"),
                                      ("abc", "node attributes must be numbers")])
def test_tu_bad_node_attributes_name_graph_and_node(tmp_path, attr, msg):
    f = write(tmp_path / "x.txt", f"1\n2 0\n0 1 1 {attr}\n0 1 0 0.5\n")
    with pytest.raises(DataFileError, match=f"graph 0 node 0: {msg}"):
        load_tu_text(f)


def test_tu_non_integer_neighbour(tmp_path):
    f = write(tmp_path / "x.txt", "1\n2 0\n0 1 1.0 0.5\n0 1 0 0.5\n")
    with pytest.raises(DataFileError, match="neighbours must be integer"):
        load_tu_text(f)


@pytest.mark.parametrize("text,msg", [("2 1\n0 1 1\n0 1 0\n", "number of graphs alone"),
                                      ("1 junk\n1 0\n0 0\n", "number of graphs alone"),
                                      ("1\n1 0 7\n0 0\n", "expected a header 'n label'")])
def test_tu_extra_tokens_on_count_or_header_lines(tmp_path, text, msg):
    with pytest.raises(DataFileError, match=msg):
        load_tu_text(write(tmp_path / "x.txt", text))


def test_tu_file_and_fold_files_with_bom(tmp_path):
    g = load_tu_text(write(tmp_path / "x.txt", "\ufeff2\n1 0\n0 0\n1 1\n0 0\n"))
    assert len(g) == 2
    d = tmp_path / "10fold_idx"
    d.mkdir()
    write(d / "train_idx-1.txt", "\ufeff1\n")
    write(d / "test_idx-1.txt", "\ufeff0\n")
    ((tr, te),) = load_tu_folds(d, 2)
    assert tr.tolist() == [1] and te.tolist() == [0]


def test_fold_numbering_gap_is_an_error(tmp_path):
    for k in (1, 2, 4):
        write(tmp_path / f"train_idx-{k}.txt", "1\n")
        write(tmp_path / f"test_idx-{k}.txt", "0\n")
    with pytest.raises(DataFileError, match=r"numbered \[1, 2, 4\]: a fold is missing"):
        load_tu_folds(tmp_path, 2)


def test_stale_fold_files_ignored_without_folds(tmp_path):
    from graphattn.tasks.social.graph_data import GRAPH_FEATURES, load_graphs

    text = "6\n" + "".join(f"2 {i % 2}\n0 1 1\n0 1 0\n" for i in range(6))
    f = write(tmp_path / "x.txt", text)
    d = tmp_path / "10fold_idx"
    d.mkdir()
    write(d / "train_idx-1.txt", "0\n")  # covers 2 of 6 graphs: does not fit this file
    write(d / "test_idx-1.txt", "1\n")
    spec = {"tu_text": str(f), "folds": None, "limit": None, **GRAPH_FEATURES}
    with pytest.warns(UserWarning, match="ignoring the fold files"):
        graphs = load_graphs(spec)
    assert graphs.folds is None and len(graphs) == 6
    with pytest.raises(DataFileError, match="expected 6 graphs"):
        load_graphs({**spec, "folds": 10})


# ----------------------------------------------------------------------------- ego zip
def test_ego_zip_with_macos_resource_forks(tmp_path):
    z = tmp_path / "egos.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("__MACOSX/egos/._g.json", b"\x00\x05\x16\x07\xff\xfe junk")
        zf.writestr("egos/._g.json", b"\xff\xfe junk")
        zf.writestr("egos/g.json", json.dumps({"0": [[0, 1]], "1": [[0, 1], [1, 2]]}))
        zf.writestr("egos/t.csv", "id,target\n0,0\n1,1\n")
    graphs = load_ego_json(z, "egos/t.csv")
    assert len(graphs) == 2


# ----------------------------------------------------------------------------- molecule CSVs
def test_named_task_without_any_label(tmp_path):
    f = write(tmp_path / "m.csv", "smiles,a,b\n" + "".join(f"{'C' * (i + 1)}O,{i % 2},\n" for i in range(12)))
    res = _cli("train", "--csv", str(f), "--tasks", "a,b", "--epochs", "1", "--split", "random", "--no-descriptors",
               "--no-progress", "--threads", "1", "--out", str(tmp_path / "o"), env_extra=tmp_path / "c")
    assert res.returncode == 2 and "task column(s) ['b'] hold no label" in res.stderr, res.stderr


def test_unlabelled_columns_in_the_first_rows_are_fine_without_tasks(tmp_path, monkeypatch):
    """Inferred tasks (ToxCast-like sparse columns) with --limit are not refused, nor is
    evaluate --csv on a file where one of the model's tasks has no label."""
    from graphattn.tasks.molecules.data import load_dataset, unlabelled_tasks

    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "c"))

    f = write(tmp_path / "m.csv", "smiles,a,b\n" + "".join(f"{'C' * (i + 1)}O,{i % 2},{'' if i < 6 else i % 2}\n"
                                                          for i in range(12)))
    ds = load_dataset(csv_path=str(f), limit=4, log=False)
    assert list(ds.task_names) == ["a", "b"] and unlabelled_tasks(ds) == ["b"]
    assert unlabelled_tasks(load_dataset(csv_path=str(f), log=False)) == []


@pytest.mark.parametrize("text,msg", [("smiles,y\n", "no data rows"),
                                      ("smiles;y\nCCO;1\n", "separated by semicolons"),
                                      ("smiles\ty\nCCO\t1\n", "separated by tabs: name the file .tsv")])
def test_molecule_csv_messages(tmp_path, text, msg):
    with pytest.raises(DataFileError, match=msg):
        MoleculeCSVDataset(write(tmp_path / "m.csv", text), cache_dir=tmp_path / "c", log=False)


def test_molecule_csv_not_utf8(tmp_path):
    f = tmp_path / "m.csv"
    f.write_bytes("smiles,y,name\nCCO,1,caf\u00e9\n".encode("cp1252"))
    with pytest.raises(DataFileError, match="not UTF-8 text"):
        MoleculeCSVDataset(f, cache_dir=tmp_path / "c", log=False)


# ----------------------------------------------------------------------------- CLI
def test_out_path_with_trailing_slash(tmp_path):
    assert out_path(str(tmp_path / "new") + "/", "p.csv") == tmp_path / "new" / "p.csv"
    assert out_path(tmp_path, "p.csv") == tmp_path / "p.csv"
    assert out_path(tmp_path / "x.csv", "p.csv") == tmp_path / "x.csv"


def _cli(*args, env_extra=None):
    import os

    env = {**os.environ, "GRAPHATTN_CACHE": str(env_extra)} if env_extra else None
    return subprocess.run([sys.executable, "-m", "graphattn", *args], capture_output=True, text=True,
                          timeout=600, env=env)


def test_label_column_with_one_value_per_node_is_refused(tmp_path, edges):
    t = write(tmp_path / "t.csv", "id,score\n" + "".join(f"{i},{i * 1.5}\n" for i in range(4)))
    res = _cli("train", "--edges", str(edges), "--target", str(t), "--target-col", "score",
               "--epochs", "1", "--no-progress", "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "leaves the validation or test set empty" in res.stderr, res.stderr


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


def test_moleculenet_file_with_upper_case_smiles_header(tmp_path):
    from graphattn.data.molecules import SIDER_TASKS, toxicity_tasks

    assert toxicity_tasks("sider", ["SMILES", *SIDER_TASKS], tmp_path / "sider.csv") == list(SIDER_TASKS)
    with pytest.raises(DataFileError, match="no 'smiles' column"):
        toxicity_tasks("sider", ["mol", *SIDER_TASKS], tmp_path / "sider.csv")


def test_too_few_graphs_for_folds_names_the_option(tmp_path):
    f = write(tmp_path / "x.txt", "4\n" + "".join(f"2 {i % 2}\n0 1 1\n0 1 0\n" for i in range(4)))
    res = _cli("train", "--tu-text", str(f), "--folds", "10", "--epochs", "1", "--no-progress",
               "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "--folds 10" in res.stderr, res.stderr


def test_evaluate_csv_with_an_unlabelled_task_column(tmp_path):
    rows = "".join(f"{'C' * (i + 1)}O,{i % 2},{(i // 2) % 2}\n" for i in range(16))
    train = write(tmp_path / "m.csv", "smiles,a,b\n" + rows)
    res = _cli("train", "--csv", str(train), "--epochs", "1", "--split", "random", "--no-descriptors",
               "--no-progress", "--threads", "1", "--out", str(tmp_path / "o"), env_extra=tmp_path / "c")
    assert res.returncode == 0, res.stderr
    new = write(tmp_path / "n.csv", "smiles,a,b\n" + "".join(f"{'C' * (i + 2)}N,{i % 2},\n" for i in range(8)))
    res = _cli("evaluate", "--checkpoint", str(tmp_path / "o" / "best.pt"), "--csv", str(new),
               "--no-progress", env_extra=tmp_path / "c")
    assert res.returncode == 0, res.stderr


def test_tiny_user_graph_still_loads_for_existing_checkpoints(tmp_path):
    """The empty-split refusal is a training-time check: predict / explain of a checkpoint
    load the same graph through load_node_data, which must not refuse it."""
    from graphattn.tasks.social import node as sn

    e = write(tmp_path / "e.csv", "id_1,id_2\n" + "".join(f"{i},{(i + 1) % 6}\n" for i in range(6)))
    t = write(tmp_path / "t.csv", "id,target\n" + "".join(f"{i},{i % 2}\n" for i in range(6)))
    spec = {"edges": str(e), "target": str(t), "features": None, "target_col": None}
    data = sn.load_node_data(spec)
    assert data.num_nodes == 6

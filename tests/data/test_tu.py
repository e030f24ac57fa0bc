"""Graph-level datasets: DGCNN/GIN text format, fold files, ego-net JSON, TU wrapper, and malformed
or unusual files (bad tokens, empty graphs, node attributes, byte-order marks)."""
import gzip
import json
import os
import time
import zipfile
from pathlib import Path

import pytest
import torch
from torch_geometric.datasets import FakeDataset
from torch_geometric.loader import DataLoader

import graphattn.data.tu as tu
from graphattn import GraphClassifier
from graphattn.data import (DataFileError, GraphList, add_structural_features, load_musae, load_social_graph_dataset,
                            load_tu_dataset, load_tu_folder, load_tu_folds, load_tu_text, stratified_folds)
from graphattn.data.rawio import parse_int_tokens
from graphattn.data.tu import load_ego_json

from tiny_inputs import write_file

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "social"
DATA = Path(os.environ.get("GRAPHATTN_DATA", "/nonexistent"))


def check_graphs(graphs):
    for d in graphs:
        ei, n = d.edge_index, d.num_nodes
        if ei.numel():
            assert int(ei.min()) >= 0 and int(ei.max()) < n
        key = ei[0] * n + ei[1]
        assert torch.unique(key).numel() == key.numel()
        assert torch.equal(torch.sort(key).values, torch.sort(ei[1] * n + ei[0]).values)
        assert not bool((ei[0] == ei[1]).any())


def check_folds(folds, n):
    assert folds
    for tr, te in folds:
        both = torch.cat([tr, te])
        assert both.numel() == n and torch.equal(torch.sort(both).values, torch.arange(n))
    tests = torch.cat([te for _, te in folds])
    assert torch.unique(tests).numel() == tests.numel()             # test sets disjoint
    # they cover every graph, except that DGCNN's MUTAG/PTC files use floor(n/10) test
    # graphs per fold, so n % 10 graphs (8 / 4) are never tested
    assert tests.numel() >= n - n % len(folds)


# --------------------------------------------------------------------- fixtures

def test_tiny_text_format():
    gs = load_tu_text(FIX / "tiny_tu.txt")
    assert isinstance(gs, GraphList) and len(gs) == 3
    assert gs.label_values == [0, 2] and gs.num_classes == 2
    assert gs.y.tolist() == [0, 1, 0]                      # {0, 2} -> {0, 1}
    assert [d.num_nodes for d in gs] == [3, 2, 4]
    assert [d.edge_index.size(1) for d in gs] == [6, 2, 4]  # self-loop 1-1 dropped
    assert gs.num_self_loops_removed == 1
    assert gs[0].tag.tolist() == [0, 1, 0] and gs.num_tags == 2
    assert gs[0].x.tolist() == [[1, 0], [0, 1], [1, 0]]     # one-hot tags when > 1 tag
    check_graphs(gs)
    kept = load_tu_text(FIX / "tiny_tu.txt", remove_self_loops=False)
    assert kept[2].edge_index.size(1) == 5 and kept.num_self_loops_removed == 0


def test_gzip_attrs_asym_and_single_tag(tmp_path):
    gz = tmp_path / "T.txt.gz"
    gz.write_bytes(gzip.compress((FIX / "tiny_tu.txt").read_bytes()))
    a, b = load_tu_text(gz), load_tu_text(FIX / "tiny_tu.txt")
    assert all(torch.equal(x.edge_index, y.edge_index) for x, y in zip(a, b))
    at = load_tu_text(FIX / "tiny_tu_attr.txt")
    assert at[0].node_attr.tolist() == [[0.5, 1.0], [0.25, -2.0]]
    assert at[1].node_attr.tolist() == [[15.0, 0.0]] and at[1].edge_index.size(1) == 0
    asym = load_tu_text(FIX / "tiny_tu_asym.txt")
    assert sorted(map(tuple, asym[0].edge_index.t().tolist())) == [(0, 1), (1, 0), (1, 2), (2, 1)]
    loop = load_tu_text(FIX / "tiny_tu_selfloop.txt")
    assert loop[0].x is None and loop.num_tags == 1 and loop.label_values == [5]
    assert loop[0].edge_index.tolist() == [[0, 1], [1, 0]]


@pytest.mark.parametrize("text,match", [
    (None, "truncated"),
    ("1\n2 0\n0 1 5\n0 1 0\n", "out of range"),
    ("1\n2 0\n0 3 1\n0 1 0\n", "declares 3 neighbours"),
    ("2\n1 0\n0 0\n", "truncated"),
    ("1\n1 0\n0 0\n1 0\n", "lines left"),
])
def test_malformed_text_files(tmp_path, text, match):
    f = FIX / "tiny_tu_truncated.txt"
    if text is not None:
        f = tmp_path / "bad.txt"
        f.write_text(text)
    with pytest.raises(DataFileError, match=match):
        load_tu_text(f)


def test_fold_files(tmp_path):
    folds = load_tu_folds(FIX / "tu_folds", num_graphs=3)
    assert len(folds) == 3
    check_folds(folds, 3)
    bad = tmp_path / "10fold_idx"
    bad.mkdir()
    (bad / "train_idx-1.txt").write_text("0\n1\n")
    (bad / "test_idx-1.txt").write_text("1\n2\n")
    with pytest.raises(DataFileError, match="overlap"):
        load_tu_folds(tmp_path)
    with pytest.raises(DataFileError, match="out of range"):
        load_tu_folds(tmp_path, num_graphs=2)


def test_stratified_folds():
    y = torch.tensor([0] * 60 + [1] * 30 + [2] * 10)
    folds = stratified_folds(y, 10, seed=0)
    check_folds(folds, 100)
    assert all(torch.bincount(y[te], minlength=3).tolist() == [6, 3, 1] for _, te in folds)


def test_ego_json_plain_and_zip(tmp_path):
    gs = load_ego_json(FIX / "tiny_ego_graphs.json", FIX / "tiny_ego_target.csv")
    assert len(gs) == 2 and gs.y.tolist() == [1, 0]       # ordered by graph id
    assert [d.num_nodes for d in gs] == [2, 3] and gs.num_self_loops_removed == 1
    check_graphs(gs)
    z = tmp_path / "egos.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.write(FIX / "tiny_ego_graphs.json", "egos/g.json")
        zf.write(FIX / "tiny_ego_target.csv", "egos/t.csv")
    gz = load_ego_json(z, "egos/t.csv")
    assert all(torch.equal(a.edge_index, b.edge_index) for a, b in zip(gs, gz))


def test_structural_features():
    gs = load_tu_text(FIX / "tiny_tu.txt")
    add_structural_features(gs, max_degree=1, rw_steps=3)
    assert gs[0].x.shape == (3, 2 + 2 + 1 + 3)             # tags + onehot(deg<=1) + log + rw
    gs = load_tu_text(FIX / "tiny_tu_selfloop.txt")
    add_structural_features(gs, max_degree=None, degree="onehot", rw_steps=0)
    assert gs[0].x.tolist()[2] == [1.0, 0.0, 0.0]           # isolated node: degree 0
    assert gs[0].feature_source == "structural"


def test_tu_original_format_wrapper(tmp_path):
    raw = tmp_path / "TINY" / "raw"
    raw.mkdir(parents=True)
    (raw / "TINY_A.txt").write_text("1, 2\n2, 1\n2, 3\n3, 2\n4, 5\n5, 4\n")
    (raw / "TINY_graph_indicator.txt").write_text("1\n1\n1\n2\n2\n")
    (raw / "TINY_graph_labels.txt").write_text("-1\n1\n")
    ds = load_tu_dataset(tmp_path, "TINY")
    assert len(ds) == 2 and ds[0].num_nodes == 3 and ds[1].y.tolist() == [1]
    gl = add_structural_features(list(ds), max_degree=2, rw_steps=2)
    assert gl[0].x.shape == (3, 3 + 1 + 2)


# --------------------------------------------------------------------- real data (MANIFEST)

SETS = [  # name, folder, graphs, nodes, undirected edges (no self-loops), label counts
    ("imdb-binary", "imdb_binary", 1000, 19773, 96531, [500, 500]),
    ("mutag", "mutag", 188, 3371, 3721, [63, 125]),
    ("ptc", "ptc", 344, 8792, 8931, [192, 152]),
    ("nci1", "nci1", 4110, 122747, 132753, [2053, 2057]),
    ("reddit-binary", "reddit_binary", 2000, 859254, 995508, [1000, 1000]),
    ("deezer-ego", "deezer_ego_nets", 9629, 226213, 628303, [5470, 4159]),
    # 247,549 listed pairs incl. 1,365 self-loops
    ("reddit-threads", "reddit_threads_10k", 10000, 237390, 247549 - 1365, [4843, 5157]),
    pytest.param("collab", "collab", 5000, 372474, 12286079, [2600, 775, 1625],
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize("name,folder,g,n,e,counts", SETS)
def test_graph_dataset_counts(name, folder, g, n, e, counts):
    if not (DATA / folder).is_dir():
        pytest.skip(f"{folder} not under $GRAPHATTN_DATA")
    t = time.perf_counter()
    gs = load_social_graph_dataset(name, root=DATA, download=False)
    print(f"{name}: loaded in {time.perf_counter() - t:.2f}s")
    assert len(gs) == g
    assert sum(d.num_nodes for d in gs) == n
    assert sum(d.edge_index.size(1) for d in gs) == 2 * e
    assert torch.bincount(gs.y).tolist() == counts
    check_folds(gs.folds, g)
    check_graphs(gs[:50])
    if name == "collab":
        assert gs.num_self_loops_removed == 2837


def test_text_set_download_and_extract(tmp_path, monkeypatch):
    up = tmp_path / "upstream"
    up.mkdir()
    with zipfile.ZipFile(up / "IMDBMULTI.zip", "w") as zf:       # the IHGNN zip layout
        zf.write(FIX / "tiny_tu.txt", "IMDBMULTI/IMDBMULTI.txt")
        for f in (FIX / "tu_folds" / "10fold_idx").iterdir():
            zf.write(f, f"IMDBMULTI/10fold_idx/{f.name}")
        zf.writestr("__MACOSX/IMDBMULTI/._IMDBMULTI.txt", "junk")
    monkeypatch.setattr(tu, "_IHGNN", up.as_uri())
    root = tmp_path / "root"
    with pytest.warns(UserWarning, match="expected 1500"):
        gs = load_social_graph_dataset("imdb-multi", root=root)
    assert len(gs) == 3 and len(gs.folds) == 3
    assert (root / "imdb_multi" / "IMDBMULTI" / "IMDBMULTI.txt").is_file()
    assert not (root / "imdb_multi" / "__MACOSX").exists()
    with pytest.warns(UserWarning):
        again = load_social_graph_dataset("imdb-multi", root=root, download=False)
    assert [d.num_nodes for d in again] == [3, 2, 4]


def test_missing_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(DataFileError, match="IMDBMULTI"):
        load_social_graph_dataset("imdb-multi", root=tmp_path, download=False)
    with pytest.raises(KeyError):
        load_social_graph_dataset("nope")


def test_attribute_beyond_float32_is_a_clear_error(tmp_path):
    f = tmp_path / "big.txt"
    f.write_text("1\n2 0\n0 1 1 0.5\n0 1 0 1e39\n")  # finite as a Python float, inf as float32
    with pytest.raises(DataFileError, match=r"graph 0 node 1: node attribute beyond float32's range"):
        load_tu_text(f)


def test_structural_features_refuse_a_dataset_whose_items_are_copies():
    ds = FakeDataset(num_graphs=2, avg_num_nodes=6)
    with pytest.raises(TypeError, match=r"pass list\(dataset\)"):
        add_structural_features(ds)
    graphs = add_structural_features(list(ds))
    assert graphs[0].feature_source == "structural"


@pytest.mark.parametrize("attr,msg", [("nan", "node attribute is NaN or infinite"), ("inf", "node attribute is NaN or infinite"),
                                      ("abc", "node attributes must be numbers")])
def test_tu_bad_node_attributes_name_graph_and_node(tmp_path, attr, msg):
    f = write_file(tmp_path / "x.txt", f"1\n2 0\n0 1 1 {attr}\n0 1 0 0.5\n")
    with pytest.raises(DataFileError, match=f"graph 0 node 0: {msg}"):
        load_tu_text(f)


def test_tu_non_integer_neighbour(tmp_path):
    f = write_file(tmp_path / "x.txt", "1\n2 0\n0 1 1.0 0.5\n0 1 0 0.5\n")
    with pytest.raises(DataFileError, match="neighbours must be integer"):
        load_tu_text(f)


@pytest.mark.parametrize("text,msg", [("2 1\n0 1 1\n0 1 0\n", "number of graphs alone"),
                                      ("1 junk\n1 0\n0 0\n", "number of graphs alone"),
                                      ("1\n1 0 7\n0 0\n", "expected a header 'n label'")])
def test_tu_extra_tokens_on_count_or_header_lines(tmp_path, text, msg):
    with pytest.raises(DataFileError, match=msg):
        load_tu_text(write_file(tmp_path / "x.txt", text))


def test_tu_file_and_fold_files_with_bom(tmp_path):
    g = load_tu_text(write_file(tmp_path / "x.txt", "\ufeff2\n1 0\n0 0\n1 1\n0 0\n"))
    assert len(g) == 2
    d = tmp_path / "10fold_idx"
    d.mkdir()
    write_file(d / "train_idx-1.txt", "\ufeff1\n")
    write_file(d / "test_idx-1.txt", "\ufeff0\n")
    ((tr, te),) = load_tu_folds(d, 2)
    assert tr.tolist() == [1] and te.tolist() == [0]


def test_fold_numbering_gap_is_an_error(tmp_path):
    for k in (1, 2, 4):
        write_file(tmp_path / f"train_idx-{k}.txt", "1\n")
        write_file(tmp_path / f"test_idx-{k}.txt", "0\n")
    with pytest.raises(DataFileError, match=r"numbered \[1, 2, 4\]: a fold is missing"):
        load_tu_folds(tmp_path, 2)


def test_ego_zip_with_macos_resource_forks(tmp_path):
    z = tmp_path / "egos.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("__MACOSX/egos/._g.json", b"\x00\x05\x16\x07\xff\xfe junk")
        zf.writestr("egos/._g.json", b"\xff\xfe junk")
        zf.writestr("egos/g.json", json.dumps({"0": [[0, 1]], "1": [[0, 1], [1, 2]]}))
        zf.writestr("egos/t.csv", "id,target\n0,0\n1,1\n")
    graphs = load_ego_json(z, "egos/t.csv")
    assert len(graphs) == 2


def test_ego_json_string_targets_name_the_file(tmp_path):
    g = write_file(tmp_path / "g.json", '{"0": [[0, 1]], "1": [[0, 1], [1, 2]]}')
    t = write_file(tmp_path / "labels.csv", "id,target\n0,a\n1,b\n")
    with pytest.raises(ValueError, match=r"labels\.csv: row 2: .*'a'.* must be integers"):
        load_ego_json(g, t)
    z = tmp_path / "egos.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("egos/g.json", g.read_text())
        zf.writestr("egos/t.csv", "id,target\n0,1\n1,\n")
    with pytest.raises(DataFileError, match=r"egos\.zip:egos/t\.csv: row 3"):
        load_ego_json(z, "egos/t.csv")
    write_file(t, "id,target\n0,1.0\n1,0\n")            # an integral float is an integer label
    assert load_ego_json(g, t).y.tolist() == [1, 0]
    write_file(t, "id,target\n0,1\n0,0\n")
    with pytest.raises(DataFileError, match="graph id 0 has two labels: 1 on row 2 and 0 on row 3"):
        load_ego_json(g, t)
    write_file(t, "id,target\n0,1\n1,0\n0,1\n")                # the same label again: read once
    with pytest.warns(UserWarning, match=r"1 graph id\(s\) on more than one row with the same label"):
        assert load_ego_json(g, t).y.tolist() == [1, 0]
    write_file(g, '{"0": [[0, 1]], "1": [[0, 1], [1, 2]], "0": [[0, 1]]}')
    with pytest.warns(UserWarning, match="listed more than once with the same edges"):
        assert len(load_ego_json(g, t)) == 2
    write_file(g, '{"0": [[0, 1]], "1": [[0, 1], [1, 2]], "0": [[1, 0]]}')
    with pytest.raises(DataFileError, match="graph id 0 appears twice with different edges"):
        load_ego_json(g, t)


@pytest.mark.parametrize("graphs,match", [
    ('{"0": [[0, 1, 2]]}', r"edge \[0, 1, 2\] is not a pair"),     # was re-paired silently
    ('{"0": [[0, 1.5]]}', "is not a pair"),
    ('{"0": [[0, 1]], "x": []}', "'x' is not an integer graph id"),
    ('{"0": {"a": 1}}', "expected a list"),
    ('{"0": [[0, 3]]}', r"node ids are not 0\.\.3"),
])
def test_ego_json_malformed_graphs(tmp_path, graphs, match):
    g = write_file(tmp_path / "g.json", graphs)
    t = write_file(tmp_path / "t.csv", "id,target\n0,1\n")
    with pytest.raises(DataFileError, match=match):
        load_ego_json(g, t)


def _empty_graph_batch(graphs):
    add_structural_features(graphs, max_degree=4, rw_steps=3)
    torch.manual_seed(0)
    batch = next(iter(DataLoader(list(graphs), batch_size=len(graphs))))
    for readout in ("mean", "sum", "max", "token"):
        model = GraphClassifier(graphs[0].num_features, 8, 2, num_layers=1, heads=2,
                                num_global_tokens=1, readout=readout)
        out = model(batch.x, batch.edge_index, batch.batch, num_graphs=batch.num_graphs)
        assert out.shape == (len(graphs), 2) and torch.isfinite(out).all(), readout
        out.sum().backward()


def test_ego_json_empty_graphs_warn_and_train(tmp_path):
    g = write_file(tmp_path / "g.json", '{"0": [[0, 1], [1, 2]], "1": [], "2": [[0, 0]], "3": []}')
    t = write_file(tmp_path / "t.csv", "id,target\n0,1\n1,0\n2,1\n3,0\n")
    with pytest.warns(UserWarning, match=r"2 of 4 graphs have no edges, hence 0 nodes"):
        gl = load_ego_json(g, t)
    assert [d.num_nodes for d in gl] == [3, 0, 1, 0] and gl.num_self_loops_removed == 1
    _empty_graph_batch(gl)                       # last graph of the batch is empty too


def test_tu_text_empty_graphs_warn_and_train(tmp_path):
    f = write_file(tmp_path / "Z.txt", "3\n0 0\n2 1\n0 1 1\n0 1 0\n0 1\n")
    with pytest.warns(UserWarning, match=r"2 of 3 graphs have 0 nodes"):
        gl = load_tu_text(f)
    assert [d.num_nodes for d in gl] == [0, 2, 0] and gl.y.tolist() == [0, 1, 1]
    _empty_graph_batch(gl)


def test_tu_text_integer_beyond_int64(tmp_path):
    f = write_file(tmp_path / "B.txt", "1\n2 0\n0 1 99999999999999999999\n0 1 0\n")
    with pytest.raises(DataFileError, match="int64"):
        load_tu_text(f)


@pytest.mark.parametrize("last", ["-", "+"])
def test_a_sign_without_digits_is_not_read_as_node_zero(tmp_path, last):
    # numpy's text parser reads a lone sign at the end of the text as 0 and "- 2" as -2:
    # an edge 2-0 that is in no file, a node tag 0, a fold holding graph 0
    f = write_file(tmp_path / "S.txt", f"1\n3 1\n0 1 1\n0 1 0\n0 1 {last}\n")
    with pytest.raises(DataFileError, match="integer"):
        load_tu_text(f)
    write_file(tmp_path / "e.csv", f"id_1,id_2\n1,2\n2,{last}\n")
    write_file(tmp_path / "t.csv", "id,target\n0,a\n1,b\n2,a\n")
    with pytest.raises(DataFileError, match="integer id"):
        load_musae(tmp_path / "e.csv", tmp_path / "t.csv")
    for text in (f"1 2 {last}", f"1 {last} 2", f"{last}\n"):
        with pytest.raises(DataFileError, match="without digits"):
            parse_int_tokens(text.encode(), "f.txt")
    assert parse_int_tokens(b"-1 +2 3", "f.txt").tolist() == [-1, 2, 3]
    tu = tmp_path / "tu"
    tu.mkdir()
    write_file(tu / "T_A.txt", "1, 2\n2, 1\n")
    write_file(tu / "T_graph_indicator.txt", "1\n1\n1\n")
    write_file(tu / "T_graph_labels.txt", "1\n")
    write_file(tu / "T_node_labels.txt", f"1\n1\n{last}\n")
    with pytest.raises(DataFileError, match="without digits"):
        load_tu_folder(tu, "T")


def test_tu_text_node_attributes_documented_and_parsed(tmp_path):
    doc = load_tu_text.__doc__
    assert "node_attr" in doc and "not** part of ``x``" in doc
    f = write_file(tmp_path / "A.txt", "1\n2 0\n1 1 1 0.5 -2\n2 1 0 1.5 3\n")
    (d,) = load_tu_text(f)
    assert d.node_attr.dtype == torch.float32
    assert d.node_attr.tolist() == [[0.5, -2.0], [1.5, 3.0]] and d.x.shape == (2, 2)


def test_tu_text_integer_attributes_are_not_misread(tmp_path):
    # the token walk alone reads node 1 as tag 7, 3 neighbours (1, 0, 0) and uses up every
    # token; the line layout check sends it to the line parser: tags 0 and 3, attrs 7 and 0
    f = write_file(tmp_path / "I.txt", "1\n2 0\n0 1 1 7\n3 1 0 0\n")
    (d,) = load_tu_text(f)
    assert d.tag.tolist() == [0, 1] and load_tu_text(f).tag_values == [0, 3]
    assert d.node_attr.tolist() == [[7.0], [0.0]]
    assert d.edge_index.tolist() == [[0, 1], [1, 0]]


def test_tu_text_fast_path_unchanged_with_irregular_whitespace(tmp_path):
    text = "2\n2 0\n0 1 1\n0 1 0\n3 1\n1 2 1 2\n1 1 0\n1 1 0\n"
    a = load_tu_text(write_file(tmp_path / "a.txt", text))
    messy = "2\r\n2  0\r\n0\t1 1 \r\n\n0 1 0\r\n 3 1\n1 2 1 2\n1 1 0\n1 1 0"
    b = load_tu_text(write_file(tmp_path / "b.txt", messy))
    gz = tmp_path / "c.txt.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    c = load_tu_text(gz)
    for x, y in ((a, b), (a, c)):
        assert x.y.tolist() == y.y.tolist() and x.tag_values == y.tag_values
        for g, h in zip(x, y):
            assert torch.equal(g.edge_index, h.edge_index) and g.num_nodes == h.num_nodes
            assert getattr(h, "node_attr", None) is None

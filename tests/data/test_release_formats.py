"""Files as users have them: release folders, the TU original format, id columns, wide features."""
import gzip
import json
import os
import pickle
import shutil
import threading
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch_geometric.datasets import TUDataset

import graphattn.data.edge_list as edge_list
import graphattn.tasks.social.node as sn
from graphattn.cli.main import main
from graphattn.data import (DataFileError, load_musae, load_planetoid, load_social_graph_dataset,
                            load_social_node_dataset, load_tu_dataset, load_tu_folder, load_tu_text, stratified_folds)
from graphattn.tasks.social.graph_data import graph_split, load_graphs
from graphattn.tasks.social.inputs import input_files
from graphattn.tasks.social.specs import GraphDataSpec
from graphattn.train import load_checkpoint


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GRAPHATTN_DATA", str(tmp_path / "no-data-here"))


# ----------------------------------------------------------------------------- TU original format
def _random_sets(seed, n_graphs=12, empty_tail=0):
    """Random graphs (sizes 1..6, some without edges; the last ``empty_tail`` edgeless)."""
    g = torch.Generator().manual_seed(seed)
    graphs = []
    for k in range(n_graphs):
        n = int(torch.randint(1, 7, (1,), generator=g))
        p = 0.0 if k >= n_graphs - empty_tail else float(torch.rand(1, generator=g))
        edges = [(i, j) for i in range(n) for j in range(i + 1, n) if torch.rand(1, generator=g) < p]
        tags = torch.randint(0, 3, (n,), generator=g).tolist()
        graphs.append((n, edges, 2 * int(torch.randint(0, 3, (1,), generator=g)) - 1, tags))
    return graphs


def _write_text(path, graphs):
    lines = [str(len(graphs))]
    for n, edges, label, tags in graphs:
        lines.append(f"{n} {label}")
        for i in range(n):
            nb = [j for a, b in edges for j in ((b,) if a == i else (a,) if b == i else ())]
            lines.append(" ".join(map(str, [tags[i], len(nb), *nb])))
    path.write_text("\n".join(lines) + "\n")


def _write_tu(folder, name, graphs, attrs=None, gz=False, shuffle_edges=True):
    folder.mkdir(parents=True, exist_ok=True)
    a, gi, gl, nl, off = [], [], [], [], 0
    for k, (n, edges, label, tags) in enumerate(graphs):
        for i, j in edges:  # both directions, as TU files list them
            a += [f"{off + i + 1}, {off + j + 1}", f"{off + j + 1}, {off + i + 1}"]
        gi += [str(k + 1)] * n
        gl.append(str(label))
        nl += [str(t) for t in tags]
        off += n
    if shuffle_edges:
        a = [a[i] for i in np.random.default_rng(0).permutation(len(a))]
    files = {"A": a, "graph_indicator": gi, "graph_labels": gl, "node_labels": nl}
    if attrs is not None:
        files["node_attributes"] = [", ".join(f"{v:.3f}" for v in row) for row in attrs.tolist()]
    for kind, rows in files.items():
        text = ("\n".join(rows) + "\n").encode()
        if gz:
            (folder / f"{name}_{kind}.txt.gz").write_bytes(gzip.compress(text))
        else:
            (folder / f"{name}_{kind}.txt").write_bytes(text)


@pytest.mark.parametrize("seed", range(4))
def test_tu_folder_equals_the_text_format_reader(tmp_path, seed):
    graphs = _random_sets(seed, empty_tail=2)
    _write_text(tmp_path / "S.txt", graphs)
    _write_tu(tmp_path / "S" / "raw", "S", graphs, gz=seed % 2 == 1)
    ref = load_tu_text(tmp_path / "S.txt")
    for path in (tmp_path / "S", tmp_path / "S" / "raw", tmp_path / "S" / "raw" / f"S_A.txt{'.gz' * (seed % 2)}"):
        got = load_tu_folder(path)
        assert len(got) == len(ref) == 12  # the two trailing edgeless graphs are kept
        assert got.label_values == ref.label_values == sorted({g[2] for g in graphs})
        assert got.tag_values == ref.tag_values
        for a, b in zip(ref, got):
            assert a.num_nodes == b.num_nodes
            assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.y, b.y)
            assert torch.equal(a.tag, b.tag) and torch.equal(a.x, b.x)


def test_tu_folder_keeps_what_pyg_read_tu_data_drops(tmp_path):
    """PyG's reader loses trailing graphs without edges; ours keeps them (see tu_folder's docstring)."""
    graphs = [(2, [(0, 1)], 1, [0, 0]), (1, [], 2, [0]), (1, [], 1, [0])]
    _write_tu(tmp_path / "T" / "raw", "T", graphs)
    got = load_tu_folder(tmp_path / "T")
    assert [g.num_nodes for g in got] == [2, 1, 1] and got.y.tolist() == [0, 1, 0]
    assert [g.edge_index.size(1) for g in got] == [2, 0, 0]


def test_tu_folder_attributes_multi_column_labels_and_order(tmp_path):
    graphs = _random_sets(7, n_graphs=5)
    n = sum(g[0] for g in graphs)
    attrs = torch.randn(n, 3, generator=torch.Generator().manual_seed(0))
    _write_tu(tmp_path, "X", graphs, attrs=attrs)
    got = load_tu_folder(tmp_path)
    assert torch.allclose(torch.cat([g.node_attr for g in got]), attrs, atol=1e-3)
    # nodes listed out of graph order in the indicator (graphs interleaved, each graph's nodes in
    # their order) are regrouped with their edges, labels and attributes
    gi = (tmp_path / "X_graph_indicator.txt").read_text().split()
    keys, lo = np.random.default_rng(1).random(n), 0
    for size, *_ in graphs:
        keys[lo:lo + size] = np.sort(keys[lo:lo + size])
        lo += size
    perm = np.argsort(keys)  # new row -> original node
    inv = np.empty(n, dtype=np.int64)
    inv[perm] = np.arange(n)
    (tmp_path / "X_graph_indicator.txt").write_text("\n".join(gi[p] for p in perm) + "\n")
    tags = (tmp_path / "X_node_labels.txt").read_text().split()
    (tmp_path / "X_node_labels.txt").write_text("\n".join(f"{tags[p]}, 7" for p in perm) + "\n")
    attr_rows = (tmp_path / "X_node_attributes.txt").read_text().splitlines()
    (tmp_path / "X_node_attributes.txt").write_text("\n".join(attr_rows[p] for p in perm) + "\n")
    a = np.array([[int(v) for v in ln.split(",")] for ln in (tmp_path / "X_A.txt").read_text().splitlines()])
    (tmp_path / "X_A.txt").write_text("\n".join(f"{inv[i - 1] + 1}, {inv[j - 1] + 1}" for i, j in a) + "\n")
    again = load_tu_folder(tmp_path)
    for g, h in zip(got, again):
        assert torch.equal(g.edge_index, h.edge_index) and torch.equal(g.tag, h.tag)
        assert torch.allclose(g.node_attr, h.node_attr)


def test_tu_folder_errors_name_the_problem(tmp_path):
    graphs = [(2, [(0, 1)], 0, [0, 0]), (2, [(0, 1)], 1, [0, 0])]
    _write_tu(tmp_path / "a", "A", graphs)
    (tmp_path / "a" / "A_A.txt").write_text("1, 3\n")  # joins graph 1 and graph 2
    with pytest.raises(DataFileError, match="joins nodes of graphs 1 and 2"):
        load_tu_folder(tmp_path / "a")
    (tmp_path / "a" / "A_A.txt").write_text("1, 9\n")
    with pytest.raises(DataFileError, match=r"node ids must be in 1\.\.4"):
        load_tu_folder(tmp_path / "a")
    (tmp_path / "a" / "A_A.txt").write_text("1, 2\n")
    (tmp_path / "a" / "A_graph_labels.txt").unlink()
    with pytest.raises(DataFileError, match="no A_graph_labels.txt"):
        load_tu_folder(tmp_path / "a")
    with pytest.raises(DataFileError, match="no TU files"):
        load_tu_folder(tmp_path / "nothing")
    _write_tu(tmp_path / "two", "P", graphs)
    _write_tu(tmp_path / "two", "Q", graphs)
    with pytest.raises(DataFileError, match="several sets"):
        load_tu_folder(tmp_path / "two")
    assert len(load_tu_folder(tmp_path / "two", "Q")) == 2
    # the text reader points at the TU reader when handed NAME_A.txt
    with pytest.raises(DataFileError, match="load_tu_folder"):
        load_tu_text(tmp_path / "two" / "P_A.txt")


def test_named_graph_set_from_tu_files_and_the_cli(tmp_path, capsys):
    graphs = [(3, [(0, 1), (1, 2)], k % 2, [0, 0, 0]) for k in range(30)]
    root = tmp_path / "root"
    _write_tu(root / "mutag" / "MUTAG" / "raw", "MUTAG", graphs)
    with pytest.warns(UserWarning):
        got = load_social_graph_dataset("mutag", root=root, download=False)
    assert len(got) == 30 and got.folds is not None and len(got.folds) == 10
    with pytest.raises(DataFileError, match=r"TU original format.*COLLAB_A.txt"):
        load_social_graph_dataset("collab", root=root, download=False)
    for arg in (root / "mutag" / "MUTAG", root / "mutag" / "MUTAG" / "raw" / "MUTAG_A.txt"):
        out = tmp_path / f"run{len(str(arg))}"
        assert main(["train", "--tu-text", str(arg), "--epochs", "1", "--folds", "2", "--out", str(out),
                     "--no-progress", "--threads", "1"]) == 0
        assert (out / "best.pt").is_file()
    assert main(["train", "--tu-text", str(tmp_path), "--epochs", "1", "--out", str(tmp_path / "x")]) == 2
    assert "without TU files" in capsys.readouterr().err


def test_load_tu_dataset_layout_and_failed_download(tmp_path, monkeypatch):
    graphs = [(2, [(0, 1)], k % 2, [0, 0]) for k in range(4)]
    _write_tu(tmp_path / "flat" / "S", "S", graphs)
    with pytest.raises(DataFileError, match="load_tu_folder"):
        load_tu_dataset(tmp_path / "flat", "S")

    def offline(self):
        raise OSError("network unreachable")

    monkeypatch.setattr(TUDataset, "download", offline)
    with pytest.raises(DataFileError, match="download of 'NOPE'.*network unreachable"):
        load_tu_dataset(tmp_path / "new", "NOPE")
    assert not (tmp_path / "new").exists()


# ----------------------------------------------------------------------------- tiny graph sets
def test_tiny_graph_sets_split_and_fold_messages(tmp_path, capsys):
    graphs = [(3, [(0, 1)], k % 3, [0, 0, 0]) for k in range(15)]
    _write_tu(tmp_path / "t", "T", graphs)
    assert main(["train", "--tu-text", str(tmp_path / "t"), "--epochs", "1", "--out", str(tmp_path / "r"),
                 "--no-progress", "--threads", "1"]) == 0  # 80/10/10 of 5 per class rounds val/test to 0

    parts = graph_split(GraphDataSpec(split_seed=0), load_tu_folder(tmp_path / "t"), None)
    assert all(p.numel() > 0 for p in parts) and sum(p.numel() for p in parts) == 15
    assert len(set(torch.cat(parts).tolist())) == 15
    with pytest.raises(ValueError, match=r"no class has 6 graphs.*\[5, 5, 5\].*at most 5 folds"):
        stratified_folds(torch.arange(15) % 3, 6)
    assert main(["train", "--tu-text", str(tmp_path / "t"), "--folds", "6", "--epochs", "1",
                 "--out", str(tmp_path / "r6")]) == 2
    assert "at most 5 folds" in capsys.readouterr().err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn warns about the 2-graph class; it still splits
        folds = stratified_folds(torch.tensor([0] * 20 + [1] * 2), 5)
    assert len(folds) == 5


# ----------------------------------------------------------------------------- MUSAE files
def _musae(folder, n=60, ids=lambda i: i, target_header="id,target", feats=None, prefix=""):
    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    y = (torch.arange(n) >= n // 2).long()
    rows = [(ids(i), ids(j)) for i in range(n) for j in range(i + 1, n)
            if torch.rand(1, generator=g) < (0.3 if y[i] == y[j] else 0.02)]
    (folder / f"{prefix}edges.csv").write_text("id_1,id_2\n" + "".join(f"{a},{b}\n" for a, b in rows))
    (folder / f"{prefix}target.csv").write_text(target_header + "\n" + "".join(
        f"{ids(i)},{int(y[i])}\n" for i in range(n)))
    if feats is not None:
        (folder / f"{prefix}features.json").write_text(json.dumps({str(ids(i)): feats(i) for i in range(n)}))
    return y


def test_id_column_choice(tmp_path):
    # Twitch Gamers' layout: a numeric_id column after per-node numbers
    n = 30
    (tmp_path / "e.csv").write_text("numeric_id_1,numeric_id_2\n" + "".join(f"{i},{(i + 1) % n}\n" for i in range(n)))
    (tmp_path / "t.csv").write_text("views,mature,numeric_id\n" + "".join(f"{7 * (i % 3)},{i % 2},{i}\n"
                                                                         for i in range(n)))
    d = load_musae(tmp_path / "e.csv", tmp_path / "t.csv", target_col="mature")
    assert d.node_id.tolist() == list(range(n)) and d.y.tolist() == [i % 2 for i in range(n)]
    (tmp_path / "u.csv").write_text("paid,label,user_id\n" + "".join(f"{i % 2},{i % 2},{i}\n" for i in range(n)))
    assert load_musae(tmp_path / "e.csv", tmp_path / "u.csv").node_id.tolist() == list(range(n))  # not "paid"
    (tmp_path / "v.csv").write_text("views,mature,key\n" + "".join(f"{i % 3},{i % 2},{i}\n" for i in range(n)))
    with pytest.raises(DataFileError, match=r"node id 0 \(column 'views'\) has two labels .*--id-col"):
        load_musae(tmp_path / "e.csv", tmp_path / "v.csv", target_col="mature")
    d = load_musae(tmp_path / "e.csv", tmp_path / "v.csv", target_col="mature", id_col="KEY")
    assert d.node_id.tolist() == list(range(n))
    with pytest.raises(DataFileError, match="no column 'nope'"):
        load_musae(tmp_path / "e.csv", tmp_path / "v.csv", target_col="mature", id_col="nope")
    with pytest.raises(DataFileError, match="both 'mature'"):
        load_musae(tmp_path / "e.csv", tmp_path / "v.csv", target_col="mature", id_col="mature")


def test_feature_budget_keeps_the_most_frequent_ids(tmp_path):
    # feature 1000 + i on node i alone, 0..4 on many nodes
    _musae(tmp_path, feats=lambda i: [i % 5, 1000 + i])
    full = load_musae(tmp_path / "edges.csv", tmp_path / "target.csv", tmp_path / "features.json")
    assert full.x.shape == (60, 65)
    with pytest.warns(UserWarning, match="keeping the 10 most frequent"):
        cut = load_musae(tmp_path / "edges.csv", tmp_path / "target.csv", tmp_path / "features.json",
                         max_feature_bytes=60 * 4 * 10)
    assert cut.x.shape == (60, 10) and cut.num_feature_ids == 65
    assert cut.feature_ids[:5].tolist() == [0, 1, 2, 3, 4]
    assert torch.equal(cut.x[:, :5], full.x[:, :5])
    with pytest.raises(ValueError, match="max_feature_bytes"):
        load_musae(tmp_path / "edges.csv", tmp_path / "target.csv", max_feature_bytes=0)


@pytest.mark.parametrize("layout", ["facebook_large/musae_facebook_", "facebook_large/facebook_", "musae_facebook_"])
def test_named_node_set_in_its_release_folder(tmp_path, layout):
    folder, prefix = layout.rsplit("/", 1) if "/" in layout else ("", layout)
    root = tmp_path / "root"
    y = _musae(root / folder, feats=lambda i: [i % 4], prefix=prefix, target_header="id,page_type")
    # the features JSON with a UTF-8 byte-order mark (Windows editors write one)
    fj = root / folder / f"{prefix}features.json"
    fj.write_bytes(b"\xef\xbb\xbf" + fj.read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # counts differ from the real Facebook
        d = load_social_node_dataset("facebook", root=root, download=False)
    assert torch.equal(d.y, y) and d.feature_source == "file" and d.x.shape == (60, 4)


def test_cli_id_col_max_features_and_huge_node_ids(tmp_path, capsys):
    n = 40
    _musae(tmp_path, n=n, ids=lambda i: 5 + 10 * i, feats=lambda i: [i % 3, 100 + i],
           target_header="key,kind")
    args = ["train", "--edges", tmp_path / "edges.csv", "--target", tmp_path / "target.csv", "--features",
            tmp_path / "features.json", "--target-col", "kind", "--epochs", "2", "--no-progress", "--threads", "1"]
    assert main([*map(str, args), "--id-col", "key", "--max-features", "5", "--out", str(tmp_path / "r")]) == 0
    meta = load_checkpoint(tmp_path / "r" / "best.pt")["meta"]
    assert meta["data"]["max_features"] == 5 and meta["data"]["id_col"] == "key"
    assert main(["predict", "--checkpoint", str(tmp_path / "r" / "best.pt"), "--out", str(tmp_path / "p.csv")]) == 0
    assert len((tmp_path / "p.csv").read_text().splitlines()) == n + 1
    capsys.readouterr()
    assert main(["explain", "--checkpoint", str(tmp_path / "r" / "best.pt"), "--node", "99999999999999999999",
                 "--out", str(tmp_path / "x.png")]) == 2
    assert "not a node id" in capsys.readouterr().err
    for bad in ("0", "-3", "many"):
        assert main([*map(str, args), "--max-features", bad, "--out", str(tmp_path / "b")]) == 2
        assert "--max-features must be" in capsys.readouterr().err
    assert main([*map(str, args), "--max-features", "all", "--out", str(tmp_path / "all")]) == 0
    assert "max_features" not in load_checkpoint(tmp_path / "all" / "best.pt")["meta"]["data"]
    assert main(["train", "imdb-binary", "--id-col", "x", "--out", str(tmp_path / "c")]) == 2
    assert "--id-col" in capsys.readouterr().err


def test_resume_keeps_the_resumed_runs_feature_cut(tmp_path, monkeypatch, capsys):
    """A run that kept every feature id (e.g. from before the budget) resumes with all of
    them although the default budget would now cut; a cut run resumes with its own cut."""
    _musae(tmp_path, n=40, feats=lambda i: [i % 3, 100 + i], target_header="id,kind")
    args = ["train", "--edges", tmp_path / "edges.csv", "--target", tmp_path / "target.csv", "--features",
            tmp_path / "features.json", "--target-col", "kind", "--no-progress", "--threads", "1"]
    args = [*map(str, args)]
    assert main([*args, "--epochs", "1", "--max-features", "all", "--out", str(tmp_path / "r")]) == 0
    first = load_checkpoint(tmp_path / "r" / "last.pt")["meta"]
    monkeypatch.setattr(sn, "FEATURE_BYTES", 40 * 4 * 5)  # the default budget now keeps 5 ids
    assert main([*args, "--epochs", "2", "--resume", "--out", str(tmp_path / "r")]) == 0
    ck = load_checkpoint(tmp_path / "r" / "last.pt")
    assert ck["epoch"] == 2 and ck["meta"]["model"] == first["model"] and "max_features" not in ck["meta"]["data"]
    # a fresh run under the small budget is cut, and resumes with its cut
    assert main([*args, "--epochs", "1", "--out", str(tmp_path / "c")]) == 0
    assert load_checkpoint(tmp_path / "c" / "last.pt")["meta"]["data"]["max_features"] == 5
    assert main([*args, "--epochs", "2", "--resume", "--out", str(tmp_path / "c")]) == 0
    # an explicit --max-features that contradicts the resumed run is still refused
    capsys.readouterr()
    assert main([*args, "--epochs", "3", "--resume", "--max-features", "3", "--out", str(tmp_path / "c")]) == 2
    assert "another run" in capsys.readouterr().err


def test_tu_sources_line_ends_label_columns_and_gzipped_raw_files(tmp_path, capsys):
    graphs = [(2, [(0, 1)], k % 2, [0, 0]) for k in range(20)]
    # GIN's files win over TU files in the same data root, and a checkpoint pins its source
    root = tmp_path / "root"
    (root / "mutag" / "MUTAG").mkdir(parents=True)
    _write_text(root / "mutag" / "MUTAG" / "MUTAG.txt", graphs)
    tu_graphs = [(3, [(0, 1)], k % 2, [0, 0, 0]) for k in range(20)]
    _write_tu(root / "MUTAG" / "raw", "MUTAG", tu_graphs)
    with pytest.warns(UserWarning):
        assert load_social_graph_dataset("mutag", root=root, download=False).source == "gin"
        got = load_social_graph_dataset("mutag", root=root, download=False, source="tu")
    assert got.source == "tu" and got[0].num_nodes == 3
    # BOM, CR-only line ends, attributes beyond float32, space-separated label columns
    _write_tu(tmp_path / "b", "B", graphs, attrs=torch.ones(40, 1))
    gi = tmp_path / "b" / "B_graph_indicator.txt"
    gi.write_bytes(b"\xef\xbb\xbf" + gi.read_bytes().replace(b"\n", b"\r"))
    assert len(load_tu_folder(tmp_path / "b")) == 20
    at = tmp_path / "b" / "B_node_attributes.txt"
    at.write_text("1e40\n" + "1\n" * 39)
    with pytest.raises(DataFileError, match="float32"):
        load_tu_folder(tmp_path / "b")
    at.write_text("1\n" * 40)
    (tmp_path / "b" / "B_node_labels.txt").write_text("1 2\n" + "1, 2\n" * 39)
    with pytest.raises(DataFileError, match="comma-separated"):
        load_tu_folder(tmp_path / "b")
    (tmp_path / "b" / "B_node_labels.txt").unlink()
    # any file of the set names it on the command line
    assert main(["train", "--tu-text", str(tmp_path / "b" / "B_graph_labels.txt"), "--epochs", "1",
                 "--out", str(tmp_path / "r"), "--no-progress", "--threads", "1"]) == 0
    # gzipped raw files: PyG's TUDataset cannot read them, say so
    (tmp_path / "z" / "Z" / "raw").mkdir(parents=True)
    (tmp_path / "z" / "Z" / "raw" / "Z_A.txt.gz").write_bytes(gzip.compress(b"1, 2\n"))
    with pytest.raises(DataFileError, match="gzipped"):
        load_tu_dataset(tmp_path / "z", "Z")
    with pytest.raises(ValueError, match="add graphs"):
        stratified_folds(torch.tensor([0, 1, 2, 3]), 2)
    capsys.readouterr()
    assert main(["train", "cora", "--max-features", "5", "--out", str(tmp_path / "c")]) == 2
    assert "does not read one" in capsys.readouterr().err


# ----------------------------------------------------------------------------- Planetoid family
def _write_planetoid(folder, name, n_labelled=12, n_all=600, n_test=40, classes=3, feats=8, gap=False):
    """Raw ``ind.<name>.*`` files as kimiyoung/planetoid ships them (pickled scipy/numpy)."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    n_total = n_all + n_test + (2 if gap else 0)
    lab = rng.integers(0, classes, n_total)
    x = (rng.random((n_total, feats)) < 0.3).astype(np.float32)
    x[np.arange(n_total), lab] = 1.0  # class-revealing features
    onehot = np.eye(classes)[lab]
    test_ids = np.arange(n_all, n_total)
    if gap:  # CiteSeer: test.index skips ids (isolated nodes PyG adds back)
        test_ids = np.delete(test_ids, [3, 7])
    graph = {i: [] for i in range(n_total)}
    for i in range(n_total):
        for j in rng.integers(0, n_total, 3):
            if lab[i] == lab[j] or rng.random() < 0.1:
                graph[i].append(int(j))
                graph[int(j)].append(i)
    objs = {"x": sp.csr_matrix(x[:n_labelled]), "y": onehot[:n_labelled], "allx": sp.csr_matrix(x[:n_all]),
            "ally": onehot[:n_all], "tx": sp.csr_matrix(x[test_ids]), "ty": onehot[test_ids], "graph": graph}
    for suf, obj in objs.items():
        with open(folder / f"ind.{name}.{suf}", "wb") as f:
            pickle.dump(obj, f)
    perm = rng.permutation(test_ids)
    (folder / f"ind.{name}.test.index").write_text("\n".join(map(str, perm)) + "\n")


@pytest.mark.parametrize("name,layout", [("citeseer", "citeseer"), ("pubmed", "PubMed/raw")])
def test_planetoid_family_by_name_and_cli(tmp_path, monkeypatch, capsys, name, layout):
    root = tmp_path / "root"
    _write_planetoid(root / layout, name, gap=name == "citeseer")
    with pytest.warns(UserWarning, match="expected"):  # counts differ from the real set
        d = load_social_node_dataset(name, root=root, download=False)
    assert d.name == name and int(d.train_mask.sum()) == 12 and int(d.val_mask.sum()) == 500
    assert d.num_nodes == 640 + (2 if name == "citeseer" else 0) and d.num_features == 8
    assert int((d.y < 0).sum()) == (2 if name == "citeseer" else 0)  # CiteSeer's gap nodes: unlabelled
    monkeypatch.setenv("GRAPHATTN_DATA", str(root))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["train", name.upper() if name == "pubmed" else "CiteSeer", "--epochs", "2",
                     "--out", str(tmp_path / "r"), "--no-progress", "--threads", "1"]) == 0
    meta = load_checkpoint(tmp_path / "r" / "best.pt")["meta"]
    assert meta["data"]["name"] == name and meta["hparams"]["gcn_weight"] == 0.98  # Cora's recipe
    assert main(["predict", "--checkpoint", str(tmp_path / "r" / "best.pt"), "--out", str(tmp_path / "p.csv")]) == 0


def test_planetoid_cache_follows_replaced_files(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    _write_planetoid(tmp_path / "r" / "citeseer", "citeseer", feats=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert load_social_node_dataset("citeseer", root=tmp_path / "r", download=False).num_features == 8
        _write_planetoid(tmp_path / "r" / "citeseer", "citeseer", feats=11)  # replaced in place
        assert load_social_node_dataset("citeseer", root=tmp_path / "r", download=False).num_features == 11


def test_planetoid_cache_built_privately_and_rebuilt_when_corrupt(tmp_path, monkeypatch):
    """PyG writes processed/data.pt in place: concurrent first loads read half-written files and
    a killed write never loaded again. The folder is now renamed into place, and rebuilt if bad."""
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    _write_planetoid(tmp_path / "r" / "citeseer", "citeseer")
    out, errors = [], []

    def load():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out.append(load_planetoid("citeseer", tmp_path / "r", download=False).num_nodes)
        except Exception as exc:  # noqa: BLE001 - any failure fails the test
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and out == [640] * 4
    folders = list((tmp_path / "cache" / "planetoid").iterdir())
    assert len(folders) == 1 and ".tmp-" not in folders[0].name  # no private copies left behind
    umask = os.umask(0)
    os.umask(umask)
    assert folders[0].stat().st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0700: a shared cache
    processed = folders[0] / "CiteSeer" / "processed" / "data.pt"
    processed.write_bytes(processed.read_bytes()[:100])  # a write killed half-way
    with pytest.warns(UserWarning, match="rebuilding"):
        assert load_planetoid("citeseer", tmp_path / "r", download=False).num_nodes == 640


def test_user_files_are_fingerprinted(tmp_path, capsys):
    """--edges/--target runs record a sha256 of their files: evaluate warns when they changed,
    --resume refuses new contents but accepts the same files moved elsewhere."""
    _musae(tmp_path / "a", n=40)
    args = ["--target-col", "target", "--no-progress", "--threads", "1", "--out", str(tmp_path / "r")]

    def train(folder, *extra):
        return main(["train", "--edges", str(folder / "edges.csv"), "--target", str(folder / "target.csv"),
                     *args, *extra])

    assert train(tmp_path / "a", "--epochs", "1") == 0
    assert load_checkpoint(tmp_path / "r" / "best.pt")["meta"]["data"]["sha256"]
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # the same files elsewhere: the same run
    assert train(tmp_path / "b", "--epochs", "2", "--resume") == 0
    target = tmp_path / "b" / "target.csv"
    lines = target.read_text().splitlines()
    target.write_text("\n".join(lines[:1] + [f"{r.split(',')[0]},{1 - int(r.split(',')[1])}" for r in lines[1:]]))
    capsys.readouterr()
    assert train(tmp_path / "b", "--epochs", "3", "--resume") == 2  # relabelled: another run
    assert "another run" in capsys.readouterr().err
    with pytest.warns(UserWarning, match="changed since this model was trained"):  # last.pt: read from b/
        main(["evaluate", "--checkpoint", str(tmp_path / "r" / "last.pt")])


def test_moved_user_files_are_found_with_relocation_flags(tmp_path, capsys):
    _musae(tmp_path / "a", n=40)
    assert main(["train", "--edges", str(tmp_path / "a" / "edges.csv"), "--target", str(tmp_path / "a" / "target.csv"),
                 "--target-col", "target", "--epochs", "1", "--no-progress", "--threads", "1",
                 "--out", str(tmp_path / "r")]) == 0
    ck = str(tmp_path / "r" / "best.pt")
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", ck]) == 0
    before = capsys.readouterr().out
    shutil.move(tmp_path / "a", tmp_path / "b")
    assert main(["evaluate", "--checkpoint", ck]) == 2  # the recorded paths are gone
    err = capsys.readouterr().err
    assert "edges.csv" in err and "target.csv" in err and "--edges, --target" in err
    moved = ["--edges", str(tmp_path / "b" / "edges.csv"), "--target", str(tmp_path / "b" / "target.csv")]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # same contents: no "changed" warning
        assert main(["evaluate", "--checkpoint", ck, *moved]) == 0
    assert capsys.readouterr().out == before  # the same numbers
    assert main(["predict", "--checkpoint", ck, *moved, "--out", str(tmp_path / "p.csv")]) == 0
    assert main(["explain", "--checkpoint", ck, *moved, "--node", "3", "--out", str(tmp_path / "x.png")]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", ck, "--tu-text", str(tmp_path / "b")]) == 2
    assert "not trained on --tu-text" in capsys.readouterr().err


def test_fold_resume_reuses_only_this_runs_finished_folds(tmp_path, capsys):
    """A finished fold was reused by any later --resume into the folder (another dataset, seed or
    model reported the earlier run's numbers); now it is refused, or continued for new epochs."""
    a = [(3, [(0, 1), (1, 2)], k % 2, [0, 0, 0]) for k in range(24)]
    b = [(4, [(0, 1), (2, 3)], k % 2, [0, 0, 0, 0]) for k in range(24)]
    _write_text(tmp_path / "a.txt", a)
    _write_text(tmp_path / "b.txt", b)
    common = ["--folds", "2", "--no-progress", "--threads", "1"]
    assert main(["train", "--tu-text", str(tmp_path / "a.txt"), *common, "--epochs", "1", "--out", str(tmp_path / "r")]) == 0
    shutil.copytree(tmp_path / "r", tmp_path / "s")
    capsys.readouterr()
    assert main(["train", "--tu-text", str(tmp_path / "b.txt"), *common, "--epochs", "1", "--resume",
                 "--out", str(tmp_path / "s")]) == 2
    assert "another run" in capsys.readouterr().err
    assert main(["train", "--tu-text", str(tmp_path / "a.txt"), *common, "--epochs", "1", "--resume",
                 "--out", str(tmp_path / "r")]) == 0
    assert capsys.readouterr().out.count("done before (resume)") == 2  # the same run: reused
    assert main(["train", "--tu-text", str(tmp_path / "a.txt"), *common, "--epochs", "2", "--resume",
                 "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "done before" not in out and out.count("Resumed from") == 2  # more epochs: continued
    assert json.loads((tmp_path / "r" / "fold01" / "metrics.json").read_text())["epochs_run"] == 2


def _two_label_sets(n_graphs=20):
    g = [(n, edges, (k % 2) * 2 - 1, tags) for k, (n, edges, _, tags) in enumerate(_random_sets(5, n_graphs))]
    return g


def _fold_files(folder, n, k=2):
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(k):
        test = [i for i in range(n) if i % k == f]
        (folder / f"test_idx-{f + 1}.txt").write_text("\n".join(map(str, test)) + "\n")
        (folder / f"train_idx-{f + 1}.txt").write_text("\n".join(str(i) for i in range(n) if i % k != f) + "\n")


def test_graph_set_folds_are_pinned_to_their_fold_files(tmp_path, capsys):
    # evaluate/predict rebuilt the folds from whatever fold files were there: moved without them (the
    # documented --tu-text NEWPATH) or edited, the "test" graphs silently became another split's
    graphs = _two_label_sets()
    (tmp_path / "S").mkdir()
    _write_text(tmp_path / "S" / "S.txt", graphs)
    _fold_files(tmp_path / "S" / "10fold_idx", len(graphs))
    run = tmp_path / "run"
    assert main(["train", "--tu-text", str(tmp_path / "S" / "S.txt"), "--folds", "2", "--epochs", "1",
                 "--no-progress", "--threads", "1", "--out", str(run)]) == 0
    assert load_checkpoint(run / "best.pt")["meta"]["data"]["fold_source"] == "files"
    assert main(["evaluate", "--checkpoint", str(run / "best.pt")]) == 0
    capsys.readouterr()
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "S.txt").write_bytes((tmp_path / "S" / "S.txt").read_bytes())
    for command in ("evaluate", "predict"):
        assert main([command, "--checkpoint", str(run / "best.pt"), "--tu-text", str(moved / "S.txt")]) == 2
        assert "came from the fold files" in capsys.readouterr().err
    _fold_files(moved / "10fold_idx", len(graphs))
    assert main(["evaluate", "--checkpoint", str(run / "best.pt"), "--tu-text", str(moved / "S.txt")]) == 0
    capsys.readouterr()
    (moved / "10fold_idx" / "test_idx-1.txt").write_text("0\n")  # edited: another split
    (moved / "10fold_idx" / "train_idx-1.txt").write_text("\n".join(map(str, range(1, len(graphs)))) + "\n")
    assert main(["evaluate", "--checkpoint", str(run / "best.pt"), "--tu-text", str(moved / "S.txt")]) == 2
    assert "fold files changed" in capsys.readouterr().err
    (tmp_path / "S" / "S.txt").rename(tmp_path / "S" / "gone.txt")
    assert main(["evaluate", "--checkpoint", str(run / "best.pt")]) == 2
    assert "give their new place with --tu-text" in capsys.readouterr().err


def test_tu_raw_layout_finds_the_fold_files_beside_raw_and_hashes_only_its_own_files(tmp_path, capsys):
    graphs = _two_label_sets()
    _write_tu(tmp_path / "B" / "raw", "B", graphs)
    _write_tu(tmp_path / "B" / "raw", "B_full", graphs[:4])  # another set whose names start with B_
    _fold_files(tmp_path / "B" / "10fold_idx", len(graphs))
    files = input_files(GraphDataSpec(tu_text=str(tmp_path / "B" / "raw" / "B_A.txt")))
    assert files and all(p.name.startswith("B_") and not p.name.startswith("B_full") for p in files)
    assert main(["train", "--tu-text", str(tmp_path / "B" / "raw" / "B_A.txt"), "--folds", "2", "--epochs", "1",
                 "--no-progress", "--threads", "1", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "stratified folds" not in out and "2-fold CV" in out


def _edge_feature_files(folder, name, rng, both_ways=True):
    """Edge labels (0..2) and 2 attributes per row of ``NAME_A.txt``, the same for both directions of an edge."""
    rows = [tuple(map(int, ln.split(","))) for ln in (folder / f"{name}_A.txt").read_text().splitlines()]
    feats = {}
    for i, j in rows:
        key = (min(i, j), max(i, j))
        if key not in feats:
            feats[key] = (int(rng.integers(0, 3)), rng.normal(size=2).round(3))
    (folder / f"{name}_edge_labels.txt").write_text("".join(f"{feats[min(i, j), max(i, j)][0]}\n" for i, j in rows))
    (folder / f"{name}_edge_attributes.txt").write_text(
        "".join(", ".join(map(str, feats[min(i, j), max(i, j)][1])) + "\n" for i, j in rows))


def test_tu_edge_labels_and_attributes_are_pygs_edge_attr(tmp_path):
    # PyG's TUDataset reads them into edge_attr (attributes, then one-hot labels): so do we
    graphs = _random_sets(3, n_graphs=15)  # no edgeless tail: PyG's reader drops such graphs
    _write_tu(tmp_path / "T" / "raw", "T", graphs)
    _edge_feature_files(tmp_path / "T" / "raw", "T", np.random.default_rng(0))
    ours = load_tu_folder(tmp_path / "T")
    pyg = TUDataset(str(tmp_path), "T", use_edge_attr=True)
    assert len(ours) == len(pyg) and ours.num_edge_attributes == 2 and ours.edge_label_values == [(0, 2)]
    for a, b in zip(ours, pyg):
        assert torch.equal(a.edge_index, b.edge_index)
        assert a.edge_attr.shape == (a.edge_index.size(1), 5) and torch.allclose(a.edge_attr, b.edge_attr)
    # several label columns with gaps (1 and 5 only): one-hot of label - min per column, unused values too
    raw = tmp_path / "M" / "M" / "raw"
    _write_tu(raw, "M", graphs)
    labels = [int(v) for v in (tmp_path / "T" / "raw" / "T_edge_labels.txt").read_text().split()]
    (raw / "M_edge_labels.txt").write_text("".join(f"{1 + 4 * (v == 2)}, {v % 2}\n" for v in labels))
    ours, pyg = load_tu_folder(raw), TUDataset(str(tmp_path / "M"), "M", use_edge_attr=True)
    assert ours.edge_label_values == [(1, 5), (0, 1)]
    for a, b in zip(ours, pyg):
        assert a.edge_attr.size(1) == 7 and torch.equal(a.edge_attr, b.edge_attr)
    # an edge listed one way gets its features both ways; repeated rows that disagree are warned about
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "O_A.txt").write_text("1, 2\n2, 3\n2, 3\n")
    (folder / "O_graph_indicator.txt").write_text("1\n1\n1\n")
    (folder / "O_graph_labels.txt").write_text("0\n")
    (folder / "O_edge_labels.txt").write_text("7\n8\n9\n")
    with pytest.warns(UserWarning, match="1 repeated edge rows carry other edge labels"):
        (g,) = load_tu_folder(folder)
    assert g.edge_index.tolist() == [[0, 1, 1, 2], [1, 0, 2, 1]]
    assert g.edge_attr.argmax(1).tolist() == [0, 0, 1, 1]  # labels 7, 7, 8, 8 (the first row of 2-3)


def test_tu_edge_features_reach_the_models_and_baselines(tmp_path, capsys):
    # the class is in the edge labels only (every graph a 5-node path with the same node labels)
    graphs = [(5, [(i, i + 1) for i in range(4)], k % 2, [0] * 5) for k in range(40)]
    _write_tu(tmp_path / "P", "P", graphs)
    rows = [tuple(map(int, ln.split(","))) for ln in (tmp_path / "P" / "P_A.txt").read_text().splitlines()]
    (tmp_path / "P" / "P_edge_labels.txt").write_text("".join(f"{((i - 1) // 5) % 2}\n" for i, _ in rows))
    run = tmp_path / "run"
    args = ["train", "--tu-text", str(tmp_path / "P"), "--epochs", "40", "--lr", "0.01", "--no-progress",
            "--threads", "1", "--seed", "0"]
    assert main(args + ["--out", str(run)]) == 0
    out = capsys.readouterr().out
    assert "2 edge features (TU edge attributes/labels)" in out
    meta = load_checkpoint(run / "best.pt")["meta"]
    assert meta["model"]["kwargs"]["edge_dim"] == 2
    assert json.loads((run / "metrics.json").read_text())["test"]["accuracy"] == 1.0  # chance without them
    assert main(["evaluate", "--checkpoint", str(run / "best.pt")]) == 0
    assert main(["predict", "--checkpoint", str(run / "best.pt"), "--out", str(tmp_path / "p.csv")]) == 0
    old = dict(meta["data"])
    del old["edge_attr"], old["edge_dim"]  # a spec written before edge features were used: none
    assert all(g.edge_attr is None for g in load_graphs(GraphDataSpec.from_dict(old)))
    (tmp_path / "P" / "P_edge_labels.txt").rename(tmp_path / "labels.txt")  # moved away: named, not a raw error
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(run / "best.pt")]) == 2
    assert "trained on 2 edge features" in capsys.readouterr().err
    (tmp_path / "labels.txt").rename(tmp_path / "P" / "P_edge_labels.txt")
    for baseline, used in (("gin", True), ("gat", True), ("gcn", False)):
        assert main(args[:3] + ["--epochs", "1", "--no-progress", "--threads", "1", "--baseline", baseline,
                                "--out", str(tmp_path / baseline)]) == 0
        assert ("not used by gcn" in capsys.readouterr().out) != used
        kwargs = load_checkpoint(tmp_path / baseline / "best.pt")["meta"]["model"]["kwargs"]
        assert kwargs.get("edge_dim") == (2 if used else None)


def test_unused_tu_files_are_checked_and_named_and_partial_folds_warned(tmp_path):
    graphs = _two_label_sets()
    _write_tu(tmp_path / "E", "E", graphs)
    n_rows = len((tmp_path / "E" / "E_A.txt").read_text().splitlines())
    (tmp_path / "E" / "E_edge_labels.txt").write_text("1\n")  # one row for every edge row is needed
    with pytest.raises(DataFileError, match=rf"E_edge_labels.txt: 1 rows, expected {n_rows}"):
        load_tu_folder(tmp_path / "E")
    (tmp_path / "E" / "E_edge_labels.txt").unlink()
    (tmp_path / "E" / "E_graph_attributes.txt").write_text("0.5\n" * len(graphs))
    with pytest.warns(UserWarning, match="E_graph_attributes.txt checked but not used"):
        load_tu_folder(tmp_path / "E")
    (tmp_path / "E" / "E_graph_attributes.txt").unlink()
    folds = tmp_path / "E" / "10fold_idx"
    _fold_files(folds, len(graphs), k=4)
    for f in (3, 4):  # two of the four folds' files only: their test sets cover half the graphs
        (folds / f"test_idx-{f}.txt").unlink()
        (folds / f"train_idx-{f}.txt").unlink()
    with pytest.warns(UserWarning, match="test sets cover 10 of 20 graphs"):
        assert main(["train", "--tu-text", str(tmp_path / "E"), "--folds", "2", "--epochs", "1", "--no-progress",
                     "--threads", "1", "--out", str(tmp_path / "run")]) == 0


def test_edges_csv_read_in_chunks_equals_read_at_once_and_names_the_first_bad_row(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    rows = [f"{a},{b}" for a, b in rng.integers(0, 10 ** 6, (300, 2))]
    rows[100:100] = ["", "  "]  # blank lines are skipped, and counted in row numbers
    path = tmp_path / "e.csv"
    path.write_text("id_1,id_2\r\n" + "\r\n".join(rows) + "\r\n")
    whole = edge_list.read_edge_list(path)
    for chunk in (1, 5, 64, 1000):  # chunk edges inside rows and on newlines
        monkeypatch.setattr(edge_list, "EDGE_CHUNK", chunk)
        got = edge_list.read_edge_list(path)
        assert got[0] == whole[0] and np.array_equal(got[1], whole[1]) and np.array_equal(got[2], whole[2])
        bad = rows[:250] + ["7,8,9"] + rows[250:260] + ["1,x"] + rows[260:]
        path.write_text("id_1,id_2\n" + "\n".join(bad) + "\n")
        with pytest.raises(DataFileError, match=r"row 252 has 3 fields"):  # the first bad row, in any chunk
            edge_list.read_edge_list(path)
        path.write_text("id_1,id_2\r\n" + "\r\n".join(rows) + "\r\n")

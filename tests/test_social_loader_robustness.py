"""Robustness of the social-network loaders on malformed or unusual raw files.

Missing / non-canonical labels, unusable feature files, ragged edge rows, failed
downloads, non-integer targets and empty graphs; tiny hand-written files, no network.
"""
import gzip
import warnings
import zipfile

import numpy as np
import pytest
import torch

from graphattn.data import download as dl
from graphattn.data import social
from graphattn.data.download import DataFileError
from graphattn.data.ego_json import load_ego_json
from graphattn.data.musae import load_musae
from graphattn.data.social import SOCIAL_NODE_DATASETS, load_social_node_dataset, stratified_masks
from graphattn.data.tu_text import load_tu_text

EDGES = "id_1,id_2\n0,1\n1,2\n2,3\n3,4\n4,5\n5,0\n"  # a 6-cycle


def write(path, text):
    path.write_text(text)
    return path


def target_csv(tmp_path, labels, name="t.csv"):
    rows = "".join(f"{i},{lab}\n" for i, lab in enumerate(labels))
    return write(tmp_path / name, "id,target\n" + rows)


def load(tmp_path, labels, features=None, **kw):
    e = write(tmp_path / "e.csv", EDGES)
    f = write(tmp_path / "f.json", features) if features is not None else None
    return load_musae(e, target_csv(tmp_path, labels), f, **kw)


# --------------------------------------------------------------------- 1. missing labels

def test_missing_labels_become_unlabelled(tmp_path):
    labels = ["a", "", "nan", "b", "NaN", "a"]
    with pytest.warns(UserWarning, match="3 of 6 nodes have no label"):
        d = load(tmp_path, labels)
    assert d.class_names == ["a", "b"]                    # no '' / 'nan' class
    assert d.y.tolist() == [0, -1, -1, 1, -1, 0]
    tr, va, te = stratified_masks(d.y, 0.5, 0.25, seed=0)
    assert not (tr | va | te)[d.y < 0].any()       # unlabelled nodes are in no mask
    assert (tr | va | te)[d.y >= 0].all()


@pytest.mark.parametrize("token", ["", "NA", "nan", "NaN", "null", "None", " none ", "N/A"])
def test_each_missing_token(tmp_path, token):
    with pytest.warns(UserWarning, match="1 of 6 nodes have no label"):
        d = load(tmp_path, ["0", "1", token, "1", "0", "1"])
    assert d.class_names == ["0", "1"] and d.y.tolist() == [0, 1, -1, 1, 0, 1]


def test_all_labels_missing_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="every one of the 6 labels .* is missing"):
        load(tmp_path, ["", "NA", "nan", "null", "None", ""])


@pytest.mark.filterwarnings("ignore:lastfm_asia. 6 nodes")
def test_named_dataset_masks_skip_unlabelled(tmp_path):
    folder = tmp_path / "lastfm_asia"
    folder.mkdir()
    write(folder / "lastfm_asia_edges.csv", EDGES)
    target_csv(folder, ["3", "", "3", "7", "7", "3"], name="lastfm_asia_target.csv")
    with pytest.warns(UserWarning):
        d = load_social_node_dataset("lastfm_asia", root=tmp_path, download=False, rw_steps=2)
    assert d.y[1] == -1 and d.class_names == ["3", "7"]
    assert not (d.train_mask | d.val_mask | d.test_mask)[1]
    assert int((d.train_mask | d.val_mask | d.test_mask).sum()) == 5
    assert d.feature_source == "structural" and d.x.shape == (6, 3)


# --------------------------------------------------------------------- 2. label normalisation

def test_integer_and_float_spellings_are_one_class(tmp_path):
    d = load(tmp_path, ["1.0", "1", "0", "10", "2.0", "0.0"])
    assert d.class_names == ["0", "1", "2", "10"]               # numeric order
    assert d.y.tolist() == [1, 1, 0, 3, 2, 0]


def test_fractional_numbers_sort_numerically(tmp_path):
    d = load(tmp_path, ["0.5", "1.5", "1", "0.5", "10", "-2"])
    assert d.class_names == ["-2", "0.5", "1", "1.5", "10"]
    assert d.y.tolist() == [1, 3, 2, 1, 4, 0]


def test_boolean_case_variants_are_one_class(tmp_path):
    d = load(tmp_path, ["True", "true", "TRUE", "False", "false", "True"])
    assert d.class_names == ["False", "True"]
    assert d.y.tolist() == [1, 1, 1, 0, 0, 1]


def test_strings_keep_sorted_order(tmp_path):
    d = load(tmp_path, ["tvshow", "company", " government ", "company", "tvshow", "company"])
    assert d.class_names == ["company", "government", "tvshow"]
    assert d.y.tolist() == [2, 0, 1, 0, 2, 0]


def test_a_quantity_as_target_warns_that_each_value_became_a_class(tmp_path):
    # MUSAE's Wikipedia sets (chameleon, crocodile, squirrel) have page traffic as 'target'
    n = 120
    edges = write(tmp_path / "e.csv", "id_1,id_2\n" + "".join(f"{i},{(i + 1) % n}\n" for i in range(n)))
    traffic = write(tmp_path / "w.csv", "id,target\n" + "".join(f"{i},{17 * i * i % 9973}\n" for i in range(n)))
    with pytest.warns(UserWarning, match=r"'target' has 120 distinct values over 120 labelled nodes.*bin it"):
        d = load_musae(edges, traffic)
    assert len(d.class_names) == 120
    classes = write(tmp_path / "c.csv", "id,target\n" + "".join(f"{i},{i % 24}\n" for i in range(n)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 24 classes of 5 nodes each: class labels, no warning
        assert len(load_musae(edges, classes).class_names) == 24


# --------------------------------------------------------------------- 3. features JSON

LABELS = ["a", "b", "a", "b", "a", "b"]


def test_feature_count_uses_matching_nodes(tmp_path):
    feats = '{"0": [3, 5], "1": [5], "2": [5], "99": [3], "98": [4], "97": [4]}'
    with pytest.warns(UserWarning) as rec:
        d = load(tmp_path, LABELS, feats)
    msgs = [str(w.message) for w in rec]
    assert any("features for 3 of 6 nodes" in m for m in msgs), msgs   # not 6 (JSON length)
    assert any("3 feature rows name nodes absent" in m for m in msgs)
    assert d.feature_source == "file" and d.feature_ids.tolist() == [3, 5]  # 4: unknown nodes
    assert d.x[:3].tolist() == [[1, 1], [0, 1], [0, 1]] and d.x[3:].sum() == 0


def test_repeated_node_key_counts_once(tmp_path):
    with pytest.warns(UserWarning, match="fewer than half"):
        d = load(tmp_path, LABELS, '{"1": [3, 4], "01": [4, 3], "001": [3, 4]}')
    assert d.x is None


def test_a_node_listed_twice_is_read_once_or_refused(tmp_path):
    """Features JSON: a node listed again with the same features is read once (warning); with other
    features it is an error naming both keys (a dict would silently keep the last)."""
    with pytest.warns(UserWarning, match=r"1 node\(s\) listed more than once with the same features"):
        load(tmp_path, LABELS, '{"0": [1], "1": [2], "2": [3], "0": [1]}')
    with pytest.raises(DataFileError, match="node 1 is listed twice with different features .keys '1' and '01'"):
        load(tmp_path, LABELS, '{"0": [1], "1": [2], "2": [3], "01": [4]}')


@pytest.mark.filterwarnings("ignore:.*absent from the target file")
@pytest.mark.filterwarnings("ignore:twitch-de. 6 nodes")
def test_too_few_matching_nodes_fall_back_to_structural(tmp_path):
    feats = '{"0": [1], "1": [2], "50": [1], "51": [1], "52": [1], "53": [1]}'
    with pytest.warns(UserWarning, match="only 2 of 6 nodes .*fewer than half.*not using"):
        d = load(tmp_path, LABELS, feats)
    assert d.x is None and not d.has_features and d.feature_source == "none"
    assert "fewer than half" in d.feature_fallback
    # the named-dataset path then computes structural features, as with no file at all
    folder = tmp_path / "root" / "twitch" / "DE"
    folder.mkdir(parents=True)
    write(folder / "DE_edges.csv", EDGES)
    target_csv(folder, LABELS, name="DE_target.csv")
    write(folder / "DE_features.json", feats)
    with pytest.warns(UserWarning, match="fewer than half"):
        d2 = load_social_node_dataset("twitch-de", root=tmp_path / "root", download=False,
                                      rw_steps=3)
    assert d2.feature_source == "structural" and d2.x.shape == (6, 4)


def test_empty_feature_lists_fall_back(tmp_path):
    with pytest.warns(UserWarning, match="0 feature columns"):
        d = load(tmp_path, LABELS, '{"0": [], "1": [], "2": [], "3": [], "4": [], "5": []}')
    assert d.x is None and d.feature_source == "none"


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_max_features_must_be_positive_int(tmp_path, bad):
    with pytest.raises(ValueError, match="max_features"):
        load(tmp_path, LABELS, '{"0": [1]}', max_features=bad)
    with pytest.raises(ValueError, match="max_features"):
        load_social_node_dataset("lastfm_asia", root=tmp_path / "none", download=False,
                                 max_features=bad)


def test_max_features_keeps_most_frequent(tmp_path):
    feats = '{"0": [9, 1], "1": [1], "2": [1, 7], "3": [7], "4": [9, 7], "5": [1]}'
    d = load(tmp_path, LABELS, feats, max_features=2)
    assert d.feature_ids.tolist() == [1, 7] and d.x.shape == (6, 2)


@pytest.mark.parametrize("value,match", [
    ("1.5", "feature id 1.5 is not an integer"),
    ("true", "feature id True is not an integer"),
    ('"x"', "feature id 'x' is not an integer"),
    ("[1, 2]", r"feature id \[1, 2\] is not an integer"),
    ("9223372036854775808", "feature id 9223372036854775808 is beyond the int64 range"),
    ("-4", "feature id -4 is negative"),
])
def test_non_integer_feature_ids_are_errors(tmp_path, value, match):
    feats = '{"0": [1], "3": [2, %s], "4": [1]}' % value
    with pytest.raises(DataFileError, match=r"f\.json: node '3': " + match):
        load(tmp_path, LABELS, feats)


def test_feature_lists_must_be_lists(tmp_path):
    with pytest.raises(DataFileError, match="node '0': expected a list"):
        load(tmp_path, LABELS, '{"0": 5}')
    with pytest.raises(DataFileError, match="'1.0' is not an integer node id"):
        load(tmp_path, LABELS, '{"1.0": [1]}')


# --------------------------------------------------------------------- 4. ragged edge rows

@pytest.mark.parametrize("body,row,fields", [
    ("0,1,2\n3\n", 2, 3),            # 4 ids on 2 rows: was silently re-paired as (0,1),(2,3)
    ("0,1\n2\n", 3, 1),
    ("0,1\n\n2,3,4\n4,5\n", 4, 3),   # row numbers count blank lines (file line numbers)
    ("0,1\n1,2,\n", 3, 3),
])
def test_ragged_edge_rows_are_errors(tmp_path, body, row, fields):
    e = write(tmp_path / "e.csv", "id_1,id_2\n" + body)
    with pytest.raises(DataFileError, match=rf"e\.csv: row {row} has {fields} fields"):
        load_musae(e, target_csv(tmp_path, LABELS))


def test_edge_ids_checked_per_row(tmp_path):
    t = target_csv(tmp_path, LABELS)
    e = write(tmp_path / "e.csv", "id_1,id_2\n0,1\n1,2.0\n")
    with pytest.raises(DataFileError, match=r"row 3 field b'2.0' is not an integer"):
        load_musae(e, t)
    e = write(tmp_path / "e.csv", "id_1,id_2\n0,1\n1,99999999999999999999\n")
    with pytest.raises(DataFileError, match="row 3 id 99999999999999999999 is beyond the int64"):
        load_musae(e, t)
    e = write(tmp_path / "e.csv", "id_1,id_2\r\n0, 1\r\n\r\n1 ,2\r\n")  # CRLF, spaces: fine
    assert load_musae(e, t).edge_index.size(1) == 4


def test_target_id_beyond_int64_is_an_error(tmp_path):
    e = write(tmp_path / "e.csv", "id_1,id_2\n0,1\n")
    t = write(tmp_path / "t.csv", "id,target\n0,a\n99999999999999999999,b\n")
    with pytest.raises(DataFileError, match="not an int64 integer"):
        load_musae(e, t)


# --------------------------------------------------------------------- 5. downloads

def _spec_with(monkeypatch, tmp_path, **urls):
    spec = dict(SOCIAL_NODE_DATASETS["lastfm_asia"])
    for kind, url in urls.items():
        spec[kind] = (spec[kind][0], url)
    spec["rows"], spec["blobs"] = None, {}  # stand-in files: not the pinned upstream ones
    monkeypatch.setitem(SOCIAL_NODE_DATASETS, "lastfm_asia", spec)
    monkeypatch.setattr(social, "_FAILED_DOWNLOADS", {})
    return spec


def test_failed_download_leaves_no_empty_folders(tmp_path, monkeypatch):
    missing = (tmp_path / "nowhere" / "x.csv").as_uri()
    _spec_with(monkeypatch, tmp_path, edges=missing)
    root = tmp_path / "fresh" / "data"
    with pytest.raises(DataFileError, match="downloading .* failed"):
        load_social_node_dataset("lastfm_asia", root=root)
    assert not (tmp_path / "fresh").exists()     # root, parents and dataset folder removed
    # an existing root stays; only the dataset folder the attempt made goes
    root.mkdir(parents=True)
    (root / "other").mkdir()
    with pytest.raises(DataFileError):
        load_social_node_dataset("lastfm_asia", root=root)
    assert sorted(p.name for p in root.iterdir()) == ["other"]


def test_failed_second_file_keeps_the_first(tmp_path, monkeypatch):
    edges = write(tmp_path / "src_edges.csv", EDGES)
    _spec_with(monkeypatch, tmp_path, edges=edges.as_uri(),
               target=(tmp_path / "nowhere.csv").as_uri())
    with pytest.raises(DataFileError):
        load_social_node_dataset("lastfm_asia", root=tmp_path / "r")
    assert (tmp_path / "r" / "lastfm_asia" / "lastfm_asia_edges.csv").read_text() == EDGES


def test_download_disabled_message(tmp_path):
    with pytest.raises(DataFileError) as err:
        load_social_node_dataset("lastfm_asia", root=tmp_path, download=False)
    msg = str(err.value)
    assert "downloads are disabled" in msg and "download=False" in msg
    assert "no download is available" not in msg
    assert "https://" in msg and not any(tmp_path.iterdir())


@pytest.mark.filterwarnings("ignore:lastfm_asia. 6 nodes")
def test_failed_features_download_is_not_retried(tmp_path, monkeypatch):
    folder = tmp_path / "lastfm_asia"
    folder.mkdir()
    write(folder / "lastfm_asia_edges.csv", EDGES)
    target_csv(folder, LABELS, name="lastfm_asia_target.csv")
    _spec_with(monkeypatch, tmp_path, features=(tmp_path / "nowhere.json").as_uri())
    calls = []
    real = dl.download_url

    def counting(url, *a, **k):
        calls.append(url)
        return real(url, *a, **k)

    monkeypatch.setattr(dl, "download_url", counting)
    for attempt in range(3):
        with pytest.warns(UserWarning, match="no node features file") as rec:
            d = load_social_node_dataset("lastfm_asia", root=tmp_path, rw_steps=2)
        assert d.feature_source == "structural" and d.x.shape == (6, 3)
        if attempt:
            assert any("not retried" in str(w.message) for w in rec)
    assert len(calls) == 1
    assert sorted(p.name for p in folder.iterdir()) == ["lastfm_asia_edges.csv",
                                                        "lastfm_asia_target.csv"]


# --------------------------------------------------------------------- 6. ego JSON / TU text

def test_ego_json_string_targets_name_the_file(tmp_path):
    g = write(tmp_path / "g.json", '{"0": [[0, 1]], "1": [[0, 1], [1, 2]]}')
    t = write(tmp_path / "labels.csv", "id,target\n0,a\n1,b\n")
    with pytest.raises(ValueError, match=r"labels\.csv: row 2: .*'a'.* must be integers"):
        load_ego_json(g, t)
    z = tmp_path / "egos.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("egos/g.json", g.read_text())
        zf.writestr("egos/t.csv", "id,target\n0,1\n1,\n")
    with pytest.raises(DataFileError, match=r"egos\.zip:egos/t\.csv: row 3"):
        load_ego_json(z, "egos/t.csv")
    write(t, "id,target\n0,1.0\n1,0\n")            # an integral float is an integer label
    assert load_ego_json(g, t).y.tolist() == [1, 0]
    write(t, "id,target\n0,1\n0,0\n")
    with pytest.raises(DataFileError, match="graph id 0 has two labels: 1 on row 2 and 0 on row 3"):
        load_ego_json(g, t)
    write(t, "id,target\n0,1\n1,0\n0,1\n")                # the same label again: read once
    with pytest.warns(UserWarning, match=r"1 graph id\(s\) on more than one row with the same label"):
        assert load_ego_json(g, t).y.tolist() == [1, 0]
    write(g, '{"0": [[0, 1]], "1": [[0, 1], [1, 2]], "0": [[0, 1]]}')
    with pytest.warns(UserWarning, match="listed more than once with the same edges"):
        assert len(load_ego_json(g, t)) == 2
    write(g, '{"0": [[0, 1]], "1": [[0, 1], [1, 2]], "0": [[1, 0]]}')
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
    g = write(tmp_path / "g.json", graphs)
    t = write(tmp_path / "t.csv", "id,target\n0,1\n")
    with pytest.raises(DataFileError, match=match):
        load_ego_json(g, t)


def _empty_graph_batch(graphs):
    from torch_geometric.loader import DataLoader

    from graphattn.data.structural import add_structural_features
    from graphattn.nn.models.graph_transformer import GraphClassifier

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
    g = write(tmp_path / "g.json", '{"0": [[0, 1], [1, 2]], "1": [], "2": [[0, 0]], "3": []}')
    t = write(tmp_path / "t.csv", "id,target\n0,1\n1,0\n2,1\n3,0\n")
    with pytest.warns(UserWarning, match=r"2 of 4 graphs have no edges, hence 0 nodes"):
        gl = load_ego_json(g, t)
    assert [d.num_nodes for d in gl] == [3, 0, 1, 0] and gl.num_self_loops_removed == 1
    _empty_graph_batch(gl)                       # last graph of the batch is empty too


def test_tu_text_empty_graphs_warn_and_train(tmp_path):
    f = write(tmp_path / "Z.txt", "3\n0 0\n2 1\n0 1 1\n0 1 0\n0 1\n")
    with pytest.warns(UserWarning, match=r"2 of 3 graphs have 0 nodes"):
        gl = load_tu_text(f)
    assert [d.num_nodes for d in gl] == [0, 2, 0] and gl.y.tolist() == [0, 1, 1]
    _empty_graph_batch(gl)


def test_tu_text_integer_beyond_int64(tmp_path):
    f = write(tmp_path / "B.txt", "1\n2 0\n0 1 99999999999999999999\n0 1 0\n")
    with pytest.raises(DataFileError, match="int64"):
        load_tu_text(f)


@pytest.mark.parametrize("last", ["-", "+"])
def test_a_sign_without_digits_is_not_read_as_node_zero(tmp_path, last):
    # numpy's text parser reads a lone sign at the end of the text as 0 and "- 2" as -2:
    # an edge 2-0 that is in no file, a node tag 0, a fold holding graph 0
    from graphattn.data.rawio import parse_int_tokens
    from graphattn.data.tu_folder import load_tu_folder

    f = write(tmp_path / "S.txt", f"1\n3 1\n0 1 1\n0 1 0\n0 1 {last}\n")
    with pytest.raises(DataFileError, match="integer"):
        load_tu_text(f)
    write(tmp_path / "e.csv", f"id_1,id_2\n1,2\n2,{last}\n")
    write(tmp_path / "t.csv", "id,target\n0,a\n1,b\n2,a\n")
    with pytest.raises(DataFileError, match="integer id"):
        load_musae(tmp_path / "e.csv", tmp_path / "t.csv")
    for text in (f"1 2 {last}", f"1 {last} 2", f"{last}\n"):
        with pytest.raises(DataFileError, match="without digits"):
            parse_int_tokens(text.encode(), "f.txt")
    assert parse_int_tokens(b"-1 +2 3", "f.txt").tolist() == [-1, 2, 3]
    tu = tmp_path / "tu"
    tu.mkdir()
    write(tu / "T_A.txt", "1, 2\n2, 1\n")
    write(tu / "T_graph_indicator.txt", "1\n1\n1\n")
    write(tu / "T_graph_labels.txt", "1\n")
    write(tu / "T_node_labels.txt", f"1\n1\n{last}\n")
    with pytest.raises(DataFileError, match="without digits"):
        load_tu_folder(tu, "T")


# --------------------------------------------------------------------- 7. TU node attributes

def test_tu_text_node_attributes_documented_and_parsed(tmp_path):
    doc = load_tu_text.__doc__
    assert "node_attr" in doc and "not** part of ``x``" in doc
    f = write(tmp_path / "A.txt", "1\n2 0\n1 1 1 0.5 -2\n2 1 0 1.5 3\n")
    (d,) = load_tu_text(f)
    assert d.node_attr.dtype == torch.float32
    assert d.node_attr.tolist() == [[0.5, -2.0], [1.5, 3.0]] and d.x.shape == (2, 2)


def test_tu_text_integer_attributes_are_not_misread(tmp_path):
    # the token walk alone reads node 1 as tag 7, 3 neighbours (1, 0, 0) and uses up every
    # token; the line layout check sends it to the line parser: tags 0 and 3, attrs 7 and 0
    f = write(tmp_path / "I.txt", "1\n2 0\n0 1 1 7\n3 1 0 0\n")
    (d,) = load_tu_text(f)
    assert d.tag.tolist() == [0, 1] and load_tu_text(f).tag_values == [0, 3]
    assert d.node_attr.tolist() == [[7.0], [0.0]]
    assert d.edge_index.tolist() == [[0, 1], [1, 0]]


def test_tu_text_fast_path_unchanged_with_irregular_whitespace(tmp_path):
    text = "2\n2 0\n0 1 1\n0 1 0\n3 1\n1 2 1 2\n1 1 0\n1 1 0\n"
    a = load_tu_text(write(tmp_path / "a.txt", text))
    messy = "2\r\n2  0\r\n0\t1 1 \r\n\n0 1 0\r\n 3 1\n1 2 1 2\n1 1 0\n1 1 0"
    b = load_tu_text(write(tmp_path / "b.txt", messy))
    gz = tmp_path / "c.txt.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    c = load_tu_text(gz)
    for x, y in ((a, b), (a, c)):
        assert x.y.tolist() == y.y.tolist() and x.tag_values == y.tag_values
        for g, h in zip(x, y):
            assert torch.equal(g.edge_index, h.edge_index) and g.num_nodes == h.num_nodes
            assert getattr(h, "node_attr", None) is None


def test_no_warning_on_clean_files(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = load(tmp_path, ["1", "0", "1", "0", "1", "0"],
                 '{"0": [1], "1": [2], "2": [1], "3": [2], "4": [1], "5": [2]}')
    assert d.feature_source == "file" and np.array_equal(d.y.numpy(), [1, 0, 1, 0, 1, 0])


def test_real_world_target_exports(tmp_path):
    # pandas' df.to_csv() index column, Mac Excel's CR-only line ends, Excel's #N/A, semicolons
    from graphattn.data import load_musae
    from graphattn.data.download import DataFileError

    edges = tmp_path / "e.csv"
    edges.write_text("id_1,id_2\n0,1\n1,2\n")
    (tmp_path / "t.csv").write_text(",user,label\n0,2,1\n1,0,0\n2,1,0\n")
    with pytest.warns(UserWarning, match="node ids taken from column 'user'"):
        d = load_musae(edges, tmp_path / "t.csv")
    assert dict(zip(d.node_id.tolist(), d.y.tolist())) == {2: 1, 0: 0, 1: 0}
    (tmp_path / "cr.csv").write_text("id,target\r0,1\r1,0\r2,0\r")
    (tmp_path / "ecr.csv").write_text("id_1,id_2\r0,1\r1,2\r")
    d = load_musae(tmp_path / "ecr.csv", tmp_path / "cr.csv")
    assert d.y.tolist() == [1, 0, 0] and d.edge_index.size(1) == 4
    (tmp_path / "na.csv").write_text("id,target\n0,1\n1,#N/A\n2,0\n")
    with pytest.warns(UserWarning, match="no label"):
        d = load_musae(edges, tmp_path / "na.csv")
    assert d.y.tolist() == [1, -1, 0] and list(d.class_names) == ["0", "1"]
    (tmp_path / "semi.csv").write_text("id;target\n0;1\n")
    with pytest.raises(DataFileError, match="separated by semicolons"):
        load_musae(edges, tmp_path / "semi.csv")


def test_duplicated_target_column_names_are_refused(tmp_path):
    from graphattn.data import load_musae
    from graphattn.data.download import DataFileError

    edges = tmp_path / "e.csv"
    edges.write_text("id_1,id_2\n0,1\n")
    (tmp_path / "t.csv").write_text("id,target,target\n0,1,0\n1,0,1\n")
    with pytest.raises(DataFileError, match="appears 2 times"):
        load_musae(edges, tmp_path / "t.csv")
    with pytest.raises(DataFileError, match="appears 2 times"):
        load_musae(edges, tmp_path / "t.csv", target_col="target")


def test_dataset_names_match_with_underscores_or_hyphens_as_the_cli_does():
    from graphattn.data.rawio import canonical_name
    from graphattn.data.social import SOCIAL_NODE_ALIASES
    from graphattn.data.tu import SOCIAL_GRAPH_ALIASES, SOCIAL_GRAPH_DATASETS

    node = (*SOCIAL_NODE_DATASETS, "karate")
    for name, want in (("twitch_engb", "twitch-engb"), ("Twitch_EN", "twitch-engb"), ("TWITCH-DE", "twitch-de"),
                       ("lastfm-asia", "lastfm_asia"), ("Deezer-Europe", "deezer_europe"), ("github", "github")):
        assert canonical_name(name, SOCIAL_NODE_ALIASES, node) == want, name
    for name, want in (("IMDB_MULTI", "imdb-multi"), ("reddit_threads", "reddit-threads"),
                       ("deezer_ego_nets", "deezer-ego"), ("COLLAB", "collab")):
        assert canonical_name(name, SOCIAL_GRAPH_ALIASES, tuple(SOCIAL_GRAPH_DATASETS)) == want, name
    assert canonical_name("no_such-set", SOCIAL_NODE_ALIASES, node) == "no_such-set"
    with pytest.raises(KeyError, match="unknown social node dataset 'no_such'"):
        load_social_node_dataset("no_such")

"""Node-level social datasets: MUSAE/FEATHER reader, named sets, Cora, splits, structural PE, and
malformed or unusual raw files (missing or odd labels, feature files, ragged rows, failed downloads)."""
import gzip
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import AddRandomWalkPE
from torch_geometric.utils import stochastic_blockmodel_graph

from graphattn.data import SOCIAL_GRAPH_DATASETS, SOCIAL_NODE_DATASETS, DataFileError
from graphattn.data import download as dl
from graphattn.data import (load_cora, load_karate, load_musae, load_social_node_dataset, random_walk_pe, social,
                            stratified_masks, structural_node_features)
from graphattn.data.rawio import canonical_name
from graphattn.data.social import SOCIAL_NODE_ALIASES
from graphattn.data.tu import SOCIAL_GRAPH_ALIASES

from tiny_inputs import write_file

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "social"
DATA = Path(os.environ.get("GRAPHATTN_DATA", "/nonexistent"))


def needs(*rel):
    return pytest.mark.skipif(not all((DATA / r).exists() for r in rel),
                              reason=f"{rel} not under $GRAPHATTN_DATA")


def edge_set(ei):
    return set(map(tuple, ei.t().tolist()))


def assert_undirected_simple(data):
    """Symmetric, no duplicated edges, no self-loops, ids in range (vectorised)."""
    ei, n = data.edge_index, data.num_nodes
    assert int(ei.min()) >= 0 and int(ei.max()) < n
    key = ei[0] * n + ei[1]
    assert torch.unique(key).numel() == key.numel(), "duplicated edges"
    assert torch.equal(torch.sort(key).values, torch.sort(ei[1] * n + ei[0]).values), \
        "not symmetric"
    assert not bool((ei[0] == ei[1]).any()), "self-loops left"


# --------------------------------------------------------------------- release format (fixtures)

def test_load_musae_fixture():
    d = load_musae(FIX / "tiny_edges.csv", FIX / "tiny_target.csv", FIX / "tiny_features.json")
    assert d.num_nodes == 4
    assert_undirected_simple(d)
    assert edge_set(d.edge_index) == {(0, 1), (1, 0), (1, 2), (2, 1), (0, 2), (2, 0), (2, 3),
                                      (3, 2)}
    assert d.num_self_loops_removed == 1
    assert d.class_names == ["company", "government", "tvshow"]
    assert d.y.tolist() == [2, 0, 2, 1]
    assert d.target_col == "page_type"
    assert d.has_features and d.feature_source == "file"
    assert d.feature_ids.tolist() == [3, 7, 11]           # sparse ids -> 0..F-1, sorted
    assert d.x.tolist() == [[1, 1, 0], [1, 0, 1], [0, 0, 0], [0, 0, 1]]  # repeats collapse


def test_load_musae_gzip_and_no_features(tmp_path):
    for name in ("tiny_edges.csv", "tiny_target.csv"):
        with open(FIX / name, "rb") as f, gzip.open(tmp_path / (name + ".gz"), "wb") as g:
            g.write(f.read())
    d = load_musae(tmp_path / "tiny_edges.csv.gz", tmp_path / "tiny_target.csv.gz")
    ref = load_musae(FIX / "tiny_edges.csv", FIX / "tiny_target.csv")
    assert torch.equal(d.edge_index, ref.edge_index) and torch.equal(d.y, ref.y)
    assert d.x is None and not d.has_features and d.feature_source == "none"


def test_twitch_new_id_and_bool_labels():
    d = load_musae(FIX / "twitchlike_edges.csv", FIX / "twitchlike_target.csv")
    # nodes are ordered by new_id: 0 -> user 90002 (False), 1 -> 90003 (True), 2 -> 90001 (True)
    assert d.node_id.tolist() == [0, 1, 2]
    assert d.class_names == ["False", "True"] and d.target_col == "mature"
    assert d.y.tolist() == [0, 1, 1]
    assert_undirected_simple(d)


def test_numeric_labels_sort_numerically():
    d = load_musae(FIX / "lastfmlike_edges.csv", FIX / "lastfmlike_target.csv")
    assert d.class_names == ["2", "10"]
    assert d.y.tolist() == [1, 0, 0]


def test_unknown_edge_id_is_a_clear_error():
    with pytest.raises(DataFileError, match="not in column 'id'"):
        load_musae(FIX / "badid_edges.csv", FIX / "lastfmlike_target.csv")


def test_target_col_and_malformed_files(tmp_path):
    d = load_musae(FIX / "tiny_edges.csv", FIX / "tiny_target.csv", target_col="name")
    assert len(d.class_names) == 4
    with pytest.raises(DataFileError, match="no column"):
        load_musae(FIX / "tiny_edges.csv", FIX / "tiny_target.csv", target_col="nope")
    bad = tmp_path / "e.csv"
    bad.write_text("id_1,id_2\n0,1\n2\n")
    with pytest.raises(DataFileError, match="exactly two"):
        load_musae(bad, FIX / "tiny_target.csv")
    dup = tmp_path / "t.csv"
    dup.write_text("id,target\n0,a\n0,b\n1,a\n")
    with pytest.raises(DataFileError, match=r"node id 0 \(column .id.\) has two labels .* row 2 and .* row 3"):
        load_musae(FIX / "lastfmlike_edges.csv", dup)
    dup.write_text("id,target,views\n0,a,5\n1,b,6\n0,a,7\n")  # Twitch FR's repeats: the same label, read once
    (bad.parent / "e01.csv").write_text("id_1,id_2\n0,1\n")
    with pytest.warns(UserWarning, match=r"1 node id\(s\) .*first row of each is kept: 0 \(differing in views\)"):
        d = load_musae(bad.parent / "e01.csv", dup)
    assert d.node_id.tolist() == [0, 1] and d.class_names == ["a", "b"] and d.y.tolist() == [0, 1]
    trunc = tmp_path / "e.csv.gz"
    trunc.write_bytes(gzip.compress((FIX / "tiny_edges.csv").read_bytes())[:-12])
    with pytest.raises(DataFileError, match="gzip"):
        load_musae(trunc, FIX / "tiny_target.csv")


def test_named_dataset_downloads_into_root(tmp_path, monkeypatch):
    spec = dict(SOCIAL_NODE_DATASETS["lastfm_asia"])
    spec["edges"] = (spec["edges"][0], (FIX / "tiny_edges.csv").as_uri())
    spec["target"] = (spec["target"][0], (FIX / "tiny_target.csv").as_uri())
    spec["features"] = (spec["features"][0], (FIX / "tiny_features.json").as_uri())
    spec["rows"], spec["blobs"] = None, {}  # stand-in files, not the pinned upstream ones
    monkeypatch.setitem(SOCIAL_NODE_DATASETS, "lastfm_asia", spec)
    with pytest.warns(UserWarning, match="expected 7624"):
        d = load_social_node_dataset("lastfm", root=tmp_path)
    assert (tmp_path / "lastfm_asia" / "lastfm_asia_edges.csv").is_file()
    assert d.feature_source == "file" and d.x.shape == (4, 3)
    with pytest.raises(DataFileError):
        load_social_node_dataset("twitch-de", root=tmp_path, download=False)
    # a download is checked against the expected row count before it is kept
    spec["rows"] = (171002, 22470)
    monkeypatch.setitem(SOCIAL_NODE_DATASETS, "facebook", spec)
    with pytest.raises(DataFileError, match="expected 171002"):
        load_social_node_dataset("facebook", root=tmp_path / "fresh")
    assert not any((tmp_path / "fresh").rglob("*.csv*"))


# --------------------------------------------------------------------- splits

def test_stratified_masks():
    y = torch.tensor([0] * 50 + [1] * 30 + [2] * 20 + [3] * 3)
    tr, va, te = stratified_masks(y, 0.6, 0.2, seed=0)
    assert not (tr & va).any() and not (tr & te).any() and not (va & te).any()
    assert (tr | va | te).all()
    for c, n in [(0, 50), (1, 30), (2, 20)]:
        m = y == c
        assert int((tr & m).sum()) == round(0.6 * n) and int((va & m).sum()) == round(0.2 * n)
    assert int((tr & (y == 3)).sum()) >= 1
    tr2, _, _ = stratified_masks(y, seed=0)
    tr3, _, _ = stratified_masks(y, seed=1)
    assert torch.equal(tr, tr2) and not torch.equal(tr, tr3)
    yl = y.clone()
    yl[:5] = -1                                  # unlabelled nodes are in no mask
    a, b, c = stratified_masks(yl)
    assert not (a | b | c)[:5].any() and (a | b | c)[5:].all()


# --------------------------------------------------------------------- structural features

def test_karate_and_exact_rwpe_matches_pyg():
    d = load_karate(rw_steps=8)
    assert d.num_nodes == 34 and d.edge_index.size(1) == 156
    assert d.class_names == ["Mr. Hi", "Officer"] and int(d.y.sum()) == 17
    assert_undirected_simple(d)
    assert d.x.shape == (34, 9) and d.feature_source == "structural"
    ref = AddRandomWalkPE(8)(Data(edge_index=d.edge_index, num_nodes=34)).random_walk_pe
    assert torch.allclose(d.x[:, 1:], ref, atol=1e-5)
    big = random_walk_pe(d.edge_index, 34, 8, exact_max_nodes=10)   # estimator path
    assert torch.allclose(big[:, :3], ref[:, :3], atol=1e-5)   # k=1,2 closed form, 3 triangles


def test_rwpe_estimator_tracks_exact():
    torch.manual_seed(0)
    ei = stochastic_blockmodel_graph([300, 300, 300], [[0.05, 0.01, 0.005], [0.01, 0.04, 0.01],
                                                       [0.005, 0.01, 0.06]])
    exact = random_walk_pe(ei, 900, 8)
    est = random_walk_pe(ei, 900, 8, exact_max_nodes=100, num_probes=256)
    assert torch.allclose(est[:, 2], exact[:, 2], atol=1e-6)        # P^3 via triangles
    for k in (3, 5, 7):                                   # even steps: k index 3 -> P^4
        rel = (est[:, k] - exact[:, k]).abs().mean() / exact[:, k].mean()
        assert rel < 0.15, (k, float(rel))
    s = structural_node_features(ei, 900, rw_steps=4)
    assert s.shape == (900, 5) and torch.isfinite(s).all()


# --------------------------------------------------------------------- real data (MANIFEST)

@needs("facebook_page_page/facebook_edges.csv.gz")
def test_facebook_counts():
    d = load_social_node_dataset("facebook", root=DATA, download=False)
    assert d.num_nodes == 22470 and d.edge_index.size(1) == 2 * (171002 - 179)
    assert d.class_names == ["company", "government", "politician", "tvshow"]
    assert torch.bincount(d.y).tolist() == [6495, 6880, 5768, 3327]
    assert d.x.shape == (22470, 4714) and int(d.x.sum()) == 314583
    assert_undirected_simple(d)
    assert int(d.train_mask.sum() + d.val_mask.sum() + d.test_mask.sum()) == 22470


@needs("lastfm_asia/lastfm_asia_edges.csv.gz")
def test_lastfm_counts_structural():
    with pytest.warns(UserWarning, match="structural"):
        d = load_social_node_dataset("lastfm_asia", root=DATA, download=False, rw_steps=4)
    assert (d.num_nodes, d.edge_index.size(1) // 2, len(d.class_names)) == (7624, 27806, 18)
    assert d.feature_source == "structural" and d.x.shape == (7624, 5)
    assert torch.bincount(d.y)[d.class_names.index("17")] == 1572
    assert_undirected_simple(d)


@needs("github_developers/git_edges.csv.gz")
def test_github_counts():
    d = load_social_node_dataset("github", root=DATA, download=False, features=False,
                                 structural_features=False)
    assert (d.num_nodes, d.edge_index.size(1) // 2) == (37700, 289003)
    assert torch.bincount(d.y).tolist() == [27961, 9739] and d.x is None


@pytest.mark.parametrize("lang,n,e,mature,width,nnz", [("de", 9498, 153138, 5742, 2514, 193132),
                                                       ("engb", 7126, 35324, 3888, 2545, 147683)])
def test_twitch_counts(lang, n, e, mature, width, nnz):
    if not (DATA / f"twitch/{lang.upper()}").is_dir():
        pytest.skip("twitch data absent")
    d = load_social_node_dataset(f"twitch-{lang}", root=DATA, download=False)
    assert (d.num_nodes, d.edge_index.size(1) // 2) == (n, e)
    assert d.class_names == ["False", "True"] and int(d.y.sum()) == mature
    assert d.x.shape == (n, width)
    assert int(d.x.sum()) == nnz     # MANIFEST's 193,725 / 148,218 count repeated ids
    assert_undirected_simple(d)


@needs("cora/ind.cora.x")
def test_cora_public_split(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path))
    d = load_cora(DATA)
    assert d.num_nodes == 2708 and d.edge_index.size(1) == 10556 and d.x.shape[1] == 1433
    assert [int(m.sum()) for m in (d.train_mask, d.val_mask, d.test_mask)] == [140, 500, 1000]
    assert torch.bincount(d.y).tolist() == [351, 217, 418, 818, 426, 298, 180]
    assert not any(p.name.startswith("processed") for p in DATA.joinpath("cora").iterdir())
    again = load_social_node_dataset("cora", root=DATA)          # cached processed file
    assert torch.equal(again.edge_index, d.edge_index)


def test_karate_node_ids_match_labels():
    d = load_karate(structural_features=False)
    deg = torch.bincount(d.edge_index[1], minlength=34)
    assert d.edge_index.size(1) == 156 and deg[33] == 17 and deg[0] == 16
    assert d.class_names[d.y[0]] == "Mr. Hi" and d.class_names[d.y[33]] == "Officer"


@pytest.mark.parametrize("lang", ["DE", "ENGB", "ES", "FR", "PTBR", "RU", "TW"])
def test_twitch_features_also_found_under_upstreams_lang_json_name(lang):
    # upstream names the features <LANG>.json in some commits, for every language
    names = SOCIAL_NODE_DATASETS[f"twitch-{lang.lower()}"]["features"][0]
    assert names[0] == f"twitch/{lang}/{lang}_features.json"
    assert f"twitch/{lang}/{lang}.json" in names and f"twitch/{lang}/{lang}.json.gz" in names
    assert len(names) == len(set(names))


EDGES = "id_1,id_2\n0,1\n1,2\n2,3\n3,4\n4,5\n5,0\n"  # a 6-cycle


def target_csv(tmp_path, labels, name="t.csv"):
    rows = "".join(f"{i},{lab}\n" for i, lab in enumerate(labels))
    return write_file(tmp_path / name, "id,target\n" + rows)


def load(tmp_path, labels, features=None, **kw):
    e = write_file(tmp_path / "e.csv", EDGES)
    f = write_file(tmp_path / "f.json", features) if features is not None else None
    return load_musae(e, target_csv(tmp_path, labels), f, **kw)


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
    write_file(folder / "lastfm_asia_edges.csv", EDGES)
    target_csv(folder, ["3", "", "3", "7", "7", "3"], name="lastfm_asia_target.csv")
    with pytest.warns(UserWarning):
        d = load_social_node_dataset("lastfm_asia", root=tmp_path, download=False, rw_steps=2)
    assert d.y[1] == -1 and d.class_names == ["3", "7"]
    assert not (d.train_mask | d.val_mask | d.test_mask)[1]
    assert int((d.train_mask | d.val_mask | d.test_mask).sum()) == 5
    assert d.feature_source == "structural" and d.x.shape == (6, 3)


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
    edges = write_file(tmp_path / "e.csv", "id_1,id_2\n" + "".join(f"{i},{(i + 1) % n}\n" for i in range(n)))
    traffic = write_file(tmp_path / "w.csv", "id,target\n" + "".join(f"{i},{17 * i * i % 9973}\n" for i in range(n)))
    with pytest.warns(UserWarning, match=r"'target' has 120 distinct values over 120 labelled nodes.*bin it"):
        d = load_musae(edges, traffic)
    assert len(d.class_names) == 120
    classes = write_file(tmp_path / "c.csv", "id,target\n" + "".join(f"{i},{i % 24}\n" for i in range(n)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 24 classes of 5 nodes each: class labels, no warning
        assert len(load_musae(edges, classes).class_names) == 24


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
    write_file(folder / "DE_edges.csv", EDGES)
    target_csv(folder, LABELS, name="DE_target.csv")
    write_file(folder / "DE_features.json", feats)
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


@pytest.mark.parametrize("body,row,fields", [
    ("0,1,2\n3\n", 2, 3),            # 4 ids on 2 rows: was silently re-paired as (0,1),(2,3)
    ("0,1\n2\n", 3, 1),
    ("0,1\n\n2,3,4\n4,5\n", 4, 3),   # row numbers count blank lines (file line numbers)
    ("0,1\n1,2,\n", 3, 3),
])
def test_ragged_edge_rows_are_errors(tmp_path, body, row, fields):
    e = write_file(tmp_path / "e.csv", "id_1,id_2\n" + body)
    with pytest.raises(DataFileError, match=rf"e\.csv: row {row} has {fields} fields"):
        load_musae(e, target_csv(tmp_path, LABELS))


def test_edge_ids_checked_per_row(tmp_path):
    t = target_csv(tmp_path, LABELS)
    e = write_file(tmp_path / "e.csv", "id_1,id_2\n0,1\n1,2.0\n")
    with pytest.raises(DataFileError, match=r"row 3 field '2.0' is not an integer"):
        load_musae(e, t)
    e = write_file(tmp_path / "e.csv", "id_1,id_2\n0,1\n1,99999999999999999999\n")
    with pytest.raises(DataFileError, match="row 3 id 99999999999999999999 is beyond the int64"):
        load_musae(e, t)
    e = write_file(tmp_path / "e.csv", "id_1,id_2\r\n0, 1\r\n\r\n1 ,2\r\n")  # CRLF, spaces: fine
    assert load_musae(e, t).edge_index.size(1) == 4


def test_target_id_beyond_int64_is_an_error(tmp_path):
    e = write_file(tmp_path / "e.csv", "id_1,id_2\n0,1\n")
    t = write_file(tmp_path / "t.csv", "id,target\n0,a\n99999999999999999999,b\n")
    with pytest.raises(DataFileError, match="not an int64 integer"):
        load_musae(e, t)


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
    edges = write_file(tmp_path / "src_edges.csv", EDGES)
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
    write_file(folder / "lastfm_asia_edges.csv", EDGES)
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


def test_no_warning_on_clean_files(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = load(tmp_path, ["1", "0", "1", "0", "1", "0"],
                 '{"0": [1], "1": [2], "2": [1], "3": [2], "4": [1], "5": [2]}')
    assert d.feature_source == "file" and np.array_equal(d.y.numpy(), [1, 0, 1, 0, 1, 0])


def test_real_world_target_exports(tmp_path):
    # pandas' df.to_csv() index column, Mac Excel's CR-only line ends, Excel's #N/A, semicolons
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
    (tmp_path / "semi.csv").write_text("id;target\n0;1\n1;0\n2;0\n")  # European Excel's semicolons are read
    assert load_musae(edges, tmp_path / "semi.csv").y.tolist() == [1, 0, 0]


def test_duplicated_target_column_names_are_refused(tmp_path):
    edges = tmp_path / "e.csv"
    edges.write_text("id_1,id_2\n0,1\n")
    (tmp_path / "t.csv").write_text("id,target,target\n0,1,0\n1,0,1\n")
    with pytest.raises(DataFileError, match="appears 2 times"):
        load_musae(edges, tmp_path / "t.csv")
    with pytest.raises(DataFileError, match="appears 2 times"):
        load_musae(edges, tmp_path / "t.csv", target_col="target")


def test_dataset_names_match_with_underscores_or_hyphens_as_the_cli_does():
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


@pytest.fixture
def edges(tmp_path):
    return write_file(tmp_path / "e.csv", "id_1,id_2\n0,1\n1,2\n2,3\n3,0\n")


def test_label_column_first_does_not_become_the_id(tmp_path, edges):
    t = write_file(tmp_path / "t.csv", "class,user\nb,0\na,1\nb,2\na,3\n")
    g = load_musae(edges, t, target_col="class")
    assert g.class_names == ["a", "b"] and g.y.tolist() == [1, 0, 1, 0]


def test_id_column_as_label_is_refused(tmp_path, edges):
    t = write_file(tmp_path / "t.csv", "id,target\n0,a\n1,b\n2,a\n3,b\n")
    with pytest.raises(DataFileError, match="column .id. is an id column, not class labels"):
        load_musae(edges, t, target_col="id")


def test_target_col_case_whitespace_rows_and_quoted_edges(tmp_path):
    e = write_file(tmp_path / "e.csv", '"id_1","id_2"\n"0","1"\n"1","2"\n')
    t = write_file(tmp_path / "t.csv", "id,Label\n0,x\n   \n1,y\n2,x\n")
    g = load_musae(e, t, target_col="label")
    assert g.class_names == ["x", "y"] and g.edge_index.size(1) == 4


def test_features_file_that_is_not_json(tmp_path, edges):
    t = write_file(tmp_path / "t.csv", "id,target\n0,a\n1,b\n2,a\n3,b\n")
    f = write_file(tmp_path / "f.csv", "node_id,0,1\n0,1,0\n")
    with pytest.raises(DataFileError, match="not a JSON file.*looks like a CSV"):
        load_musae(edges, t, f)


def test_stratified_masks_small_classes_fill_val_and_test_other_splits_unchanged():
    y = torch.arange(10).repeat_interleave(2)  # ten classes of two nodes: rounding per class left val empty
    tr, va, te = stratified_masks(y, 0.6, 0.2, seed=0)
    assert (int(tr.sum()), int(va.sum()), int(te.sum())) == (12, 4, 4)
    assert not bool(((tr & va) | (tr & te) | (va & te)).any())
    big = torch.randint(0, 3, (500,), generator=torch.Generator().manual_seed(1))
    masks = stratified_masks(big, 0.6, 0.2, seed=3)  # the per-class rule as before (README numbers)
    for c in range(3):
        m = int((big == c).sum())
        assert int((masks[0] & (big == c)).sum()) == max(1, round(0.6 * m))

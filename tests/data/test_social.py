"""Node-level social datasets: MUSAE/FEATHER reader, named sets, Cora, splits, structural PE."""
import gzip
import os
from pathlib import Path

import pytest
import torch

from graphattn.data.download import DataFileError
from graphattn.data.social import (SOCIAL_NODE_DATASETS, load_cora, load_karate, load_musae,
                                   load_social_node_dataset, random_walk_pe, stratified_masks,
                                   structural_node_features)

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
    from torch_geometric.data import Data
    from torch_geometric.transforms import AddRandomWalkPE

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
    from torch_geometric.utils import stochastic_blockmodel_graph

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
    from graphattn.data.social import load_karate
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

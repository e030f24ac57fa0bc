"""Downloads are checked before they are kept: byte count, pinned hashes, whole-file checks;
a failed download leaves no folders behind and is not retried."""
import gzip
import io
import os
import time
import urllib.request

import pytest

from graphattn.data import (SOCIAL_NODE_DATASETS, DataFileError, download, load_social_node_dataset, planetoid,
                            read_csv_table, social)
from graphattn.data.download import download_url, git_blob_sha1
from graphattn.data.rawio import read_bytes
from graphattn.testing import shared_data_dir


class _CutResponse(io.BytesIO):
    """A response that announces more bytes than it sends (a connection closed early)."""

    def __init__(self, body: bytes, length: int):
        super().__init__(body)
        self.headers = {"Content-Length": str(length)}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_download_cut_short_is_refused_and_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(urllib.request, "urlopen", lambda req, timeout=None: _CutResponse(b"1\n" * 1250, 5000))
    dest = tmp_path / "cora" / "ind.cora.test.index"
    with pytest.raises(DataFileError, match=r"incomplete, got 2,500 of 5,000 bytes"):
        download_url("https://example.org/ind.cora.test.index", dest, progress=False)
    assert not (tmp_path / "cora").exists()  # no file, no .part, no folder


def test_git_blob_pin_and_rejection_messages_name_the_url_and_destination(tmp_path):
    src = tmp_path / "hello.txt"
    src.write_bytes(b"hello\n")
    assert git_blob_sha1(src) == "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object hello.txt`
    dest = tmp_path / "root" / "a.txt"
    download_url(src.as_uri(), dest, git_blob="ce013625030ba8dba906f756967f9e9ca394464a", progress=False)
    assert dest.read_bytes() == b"hello\n"
    src.write_bytes(b"<html>rate limited</html>")
    other = tmp_path / "root" / "b.txt"
    with pytest.raises(DataFileError, match=r"rejected, nothing kept at .*b\.txt: git blob mismatch"):
        download_url(src.as_uri(), other, git_blob="ce013625030ba8dba906f756967f9e9ca394464a", progress=False)

    def check(path):
        raise DataFileError(f"{path}: 3 data rows, expected 7; delete it to re-download")

    with pytest.raises(DataFileError) as err:
        download_url(src.as_uri(), other, check=check, progress=False)
    msg = str(err.value)
    assert src.as_uri() in msg and ".part" not in msg and "delete it" not in msg and "b.txt: 3 data rows" in msg
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == ["a.txt"]


def test_stale_part_files_of_killed_downloads_are_removed(tmp_path):
    src = tmp_path / "s.txt"
    src.write_text("x")
    root = tmp_path / "root"
    root.mkdir()
    old, fresh = root / "d.txt.abc123.part", root / "d.txt.def456.part"
    old.write_text("half"), fresh.write_text("in progress elsewhere")
    os.utime(old, (time.time() - 2 * 86400,) * 2)
    download_url(src.as_uri(), root / "d.txt", progress=False)
    assert not old.exists() and fresh.exists()


def test_planetoid_files_are_checked_local_and_downloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "root"
    (root / "cora").mkdir(parents=True)
    (root / "cora" / "ind.cora.x").write_text("<html>404</html>")  # saved by hand from a browser
    with pytest.raises(DataFileError, match=r"ind.cora.x: not a Planetoid pickle"):
        planetoid.load_planetoid("cora", root=root, download=False)
    (root / "cora" / "ind.cora.x").unlink()
    page = tmp_path / "page.html"
    page.write_text("<html>404</html>")
    monkeypatch.setattr(planetoid, "_PLANETOID_URL", tmp_path.as_uri())
    (tmp_path / "ind.cora.x").write_text("<html>404</html>")
    with pytest.raises(DataFileError, match="sha256 mismatch"):  # pinned: an error page is never kept
        planetoid.load_planetoid("cora", root=root)
    assert not (root / "cora" / "ind.cora.x").exists()


def test_a_corrupt_gzip_is_a_data_file_error_naming_the_file(tmp_path):
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(gzip.compress(b"smiles,y\nCCO,1\n")[:10] + b"\xff" * 40)  # a gzip header, then garbage
    with pytest.raises(DataFileError, match="bad.csv.gz: corrupt or truncated gzip"):
        read_bytes(bad)
    with pytest.raises(DataFileError, match="bad.csv.gz: cannot read as CSV"):
        read_csv_table(bad)


def test_a_cut_features_download_is_refused(tmp_path, monkeypatch):
    feats = tmp_path / "feats.json"
    feats.write_text('{"0": [1, 2], "1": [3')  # cut mid-way: starts like JSON
    spec = dict(social.SOCIAL_NODE_DATASETS["lastfm_asia"])
    spec["features"] = (spec["features"][0], feats.as_uri())
    monkeypatch.setattr(social, "_FAILED_DOWNLOADS", {})
    with pytest.raises(DataFileError, match="rejected"):
        social._get(spec, "features", tmp_path / "root", True)
    assert not (tmp_path / "root").exists()


def test_pinned_hashes_match_the_shared_copies_of_the_upstream_files(tmp_path):
    # a wrong pin would refuse every real download: each one is checked against the shared data's
    # copy of the same upstream file (gunzipped: the copies are recompressed, the downloads are not)
    root = shared_data_dir()
    if root is None:
        pytest.skip("shared data not available (set GRAPHATTN_DATA)")
    checked = 0
    for name, spec in social.SOCIAL_NODE_DATASETS.items():
        for kind, blob in spec["blobs"].items():
            local = next((root / r for r in spec[kind][0] if (root / r).is_file()), None)
            if blob is None or local is None:
                continue
            plain = tmp_path / f"{name}-{kind}"
            plain.write_bytes(read_bytes(local))
            assert git_blob_sha1(plain) == blob, (name, kind)
            checked += 1
    for fn, sha in planetoid._SHA256.items():
        if (root / "cora" / fn).is_file():
            assert download.sha256sum(root / "cora" / fn) == sha, fn
            checked += 1
    assert checked >= 10 or not (root / "cora").is_dir()


def test_planetoid_downloads_pass_their_checks(tmp_path, monkeypatch):
    # the check of a download sees NAME.<random>.part: ind.cora.test.index was taken for a pickle
    src = (shared_data_dir() or tmp_path / "none") / "cora"
    if not (src / "ind.cora.test.index").is_file():
        pytest.skip("shared Cora files not available (set GRAPHATTN_DATA)")
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(planetoid, "_PLANETOID_URL", src.as_uri())
    data = planetoid.load_planetoid("cora", root=tmp_path / "root")
    assert data.num_nodes == 2708 and int(data.test_mask.sum()) == 1000
    assert sorted(p.name for p in (tmp_path / "root" / "cora").iterdir()) == sorted(planetoid._SHA256)


def test_download_cleanup_is_done_once_in_download_url(tmp_path, monkeypatch):
    assert not hasattr(social, "_new_dirs")
    spec = dict(SOCIAL_NODE_DATASETS["lastfm_asia"])
    spec["features"] = (spec["features"][0], (tmp_path / "nowhere.json").as_uri())
    monkeypatch.setitem(SOCIAL_NODE_DATASETS, "lastfm_asia", spec)
    monkeypatch.setattr(social, "_FAILED_DOWNLOADS", {})
    root = tmp_path / "fresh" / "root"
    with pytest.raises(DataFileError, match="downloading .* failed"):
        social._get(spec, "features", root, True)
    assert not (tmp_path / "fresh").exists()  # root, parents and dataset folder removed
    assert list(social._FAILED_DOWNLOADS) == [spec["features"][1]]
    with pytest.raises(DataFileError, match="not retried"):
        social._get(spec, "features", root, True)
    assert not (tmp_path / "fresh").exists()


def test_failed_download_keeps_an_existing_root(tmp_path, monkeypatch):
    spec = dict(SOCIAL_NODE_DATASETS["lastfm_asia"])
    spec["edges"], spec["rows"] = (spec["edges"][0], (tmp_path / "nowhere.csv").as_uri()), None
    monkeypatch.setitem(SOCIAL_NODE_DATASETS, "lastfm_asia", spec)
    root = tmp_path / "root"
    (root / "other").mkdir(parents=True)
    with pytest.raises(DataFileError):
        load_social_node_dataset("lastfm_asia", root=root)
    assert [p.name for p in root.iterdir()] == ["other"]

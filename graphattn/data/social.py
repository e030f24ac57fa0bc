"""Node-level social datasets by name: MUSAE/FEATHER releases, karate club and Cora.

:func:`load_social_node_dataset` knows the published graphs of the MUSAE/FEATHER release
format (Rozemberczki et al.; see ``datasets/social.md``), finds their files under the data
root and downloads them when absent, reads them with
:func:`~graphattn.data.musae.load_musae` and adds stratified masks
(:func:`~graphattn.data.social_splits.stratified_masks`). Datasets whose feature file is not
available get *structural* features (log-degree and random-walk return probabilities,
:func:`~graphattn.data.structural.structural_node_features`), with a warning and
``data.feature_source == "structural"``. Karate club comes from networkx, Cora from the
raw Planetoid files (:func:`~graphattn.data.planetoid.load_planetoid`; CiteSeer and PubMed too). The readers and helpers
are re-exported here.
"""
from __future__ import annotations

import gzip
import warnings
import zlib
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

import numpy as np
import torch
from torch_geometric.data import Data

from graphattn.data.download import DataFileError, PathLike, data_root, find_file
from graphattn.data.musae import check_max_features, load_musae
from graphattn.data.planetoid import PLANETOID_DATASETS, load_cora, load_planetoid
from graphattn.data.rawio import (canonical_name, label_codes, parse_json, read_bytes, sorted_unique,
                                  undirected_edge_index)
from graphattn.data.social_splits import stratified_masks
from graphattn.data.structural import random_walk_pe, structural_node_features

__all__ = [
    "load_musae", "load_social_node_dataset", "load_karate", "load_cora", "load_planetoid",
    "stratified_masks", "structural_node_features", "random_walk_pe",
    "undirected_edge_index", "sorted_unique", "SOCIAL_NODE_DATASETS", "SOCIAL_NODE_ALIASES", "random_masks",
]

_DS = "https://raw.githubusercontent.com/benedekrozemberczki/datasets"
_FB, _LF, _GIT = ("ca6ad595ef93473106b3909e087be364032ce56b",
                  "8ac937178d60da00e56c9ba7b1d672dca31877b2",
                  "3be0c070b1c39fe100ab7b998c5391480f9683c8")
_TW, _TW_TW, _DZ = ("032d50167c8682c456cb498e0ecad6201fe14844",
                    "0f1d339a10cdb25bcdf6e25ae67654ccc48cb5d4",
                    "cc0c850c1c1e8893eae91e4750d0bd5b387c0170")
_TW_FEAT = {"DE": (_TW, "DE.json"), "ENGB": ("0c64fc3b2057ed844fb43de3af65cf8af79e0e8a", None),
            "ES": ("d64658d4ad0afeadb0704e24954f697e16be4ddd", None),
            "FR": ("6377e8ddfbb27fde93198cd45ed9130b6badef18", None),
            "PTBR": ("0e15f5180a69357a812beab51712d646bb1d14ec", None),
            "RU": ("2cc959e03cb623fcfc040a3c1ddb243600575d97", None), "TW": (_TW_TW, "TW.json")}


def _spec(folder, stem, upstream, commit, feat_commit, counts, snap_prefix="", feat_name=None,
          rows=None, extra_features=(), blobs=None):
    """Accepted local names (the shared-data names, plain or .gz, then SNAP's, then
    ``extra_features``) and URLs."""
    def names(kind, ext, extra=()):
        base = f"{stem}_{kind}.{ext}"
        cands = []
        # the shared-data folder first (downloads are plain: the 1st name), then the folder
        # the release unzips into (facebook_large/, git_web_ml/, lasftm_asia/ [sic]), then the
        # root itself (root= pointed at the folder holding the files)
        for d in dict.fromkeys((f"{folder}/", f"{upstream}/", "")):
            cands += [f"{d}{base}", f"{d}{base}.gz"]
            if snap_prefix:  # SNAP's zips name the files musae_<stem>_<kind>.<ext>
                cands += [f"{d}{snap_prefix}{base}", f"{d}{snap_prefix}{base}.gz"]
            cands += [f"{d}{e}" for e in extra]
        return list(dict.fromkeys(cands))
    fname = feat_name or f"{stem}_features.json"
    return {
        "edges": (names("edges", "csv"), f"{_DS}/{commit}/{upstream}/{stem}_edges.csv"),
        "target": (names("target", "csv"), f"{_DS}/{commit}/{upstream}/{stem}_target.csv"),
        "features": (names("features", "json", (fname, fname + ".gz", *extra_features)),
                     f"{_DS}/{feat_commit}/{upstream}/{fname}"),
        "counts": counts,
        "rows": rows,  # (edge rows, target rows) verified on the shared copies, else None
        # git blob ids of the pinned upstream files (edges, target, features; None where not verified):
        # a download must be byte-identical (MANIFEST of the shared data; checked against its copies)
        "blobs": dict(zip(("edges", "target", "features"), blobs or (None, None, None))),
    }


_TW_BLOBS = {"DE": ("79e183523520870cea12b3c465ab232c51e51647", "10a0a7d06d17c0da2f21a998b0f3444c0981289e",
                    "5f06ed4c1a54eca126437b712f608d7cd48ca682"),
             "ENGB": ("4b2145e7964fe025bd0ab3e1fb792af862ff0ac7", "bcb996ae2841eaf3600e616ad2fa90b36203321f",
                      "fae0b86a1cf3f08b8ea43c321f41a4bc51058c98")}


def _twitch(lang, nodes, edges):
    commit = _TW_TW if lang == "TW" else _TW
    fc, fname = _TW_FEAT[lang]
    rows = (edges, nodes) if lang in ("DE", "ENGB") else None
    # upstream names the features <LANG>.json in some commits, for every language
    return _spec(f"twitch/{lang}", lang, f"twitch/{lang}", commit, fc, (nodes, edges, 2),
                 snap_prefix="musae_", feat_name=fname, rows=rows,
                 extra_features=(f"{lang}.json", f"{lang}.json.gz"), blobs=_TW_BLOBS.get(lang))


#: name -> file candidates, pinned upstream URLs and expected (nodes, undirected edges, classes)
SOCIAL_NODE_DATASETS = {
    "facebook": _spec("facebook_page_page", "facebook", "facebook_large", _FB, _FB,
                      (22470, 170823, 4), snap_prefix="musae_", rows=(171002, 22470),
                      blobs=("942806ae8b16d8b9bc819ede309d4990e3c2294b", "2c84204dfac17ccaf16855c3c48f0357aa0efbee",
                             "3ecc626d60130d78366ceb1f511dfbf37df58731")),
    "lastfm_asia": _spec("lastfm_asia", "lastfm_asia", "lasftm_asia", _LF, _LF,
                         (7624, 27806, 18), rows=(27806, 7624),
                         blobs=("1e8268dea093d0e7d0ed9674de3d393681cc3b3a", "9768d6bd952fa753c2591da9e02e0623a9f8cec0",
                                None)),
    "github": _spec("github_developers", "git", "git_web_ml", _GIT, _GIT, (37700, 289003, 2),
                    snap_prefix="musae_", rows=(289003, 37700),
                    blobs=("49bb6e5bc769ac966988259ec7e45f44ec0c14ef", "e9d6561dfb0bffcd08fb39b87c8cc46ee27049e0",
                           None)),
    "deezer_europe": _spec("deezer_europe", "deezer_europe", "deezer_europe", _DZ, _DZ,
                           (28281, 92752, 2)),
    **{f"twitch-{k.lower()}": _twitch(k, *v) for k, v in {
        "DE": (9498, 153138), "ENGB": (7126, 35324), "ES": (4648, 59382), "FR": (6549, 112666),
        "PTBR": (1912, 31299), "RU": (4385, 37304), "TW": (2772, 63462)}.items()},
}
#: other spellings of the node-classification datasets' names (upstream folder and file names) -> the name
SOCIAL_NODE_ALIASES = {"facebook_page_page": "facebook", "lastfm": "lastfm_asia", "lastfm-asia": "lastfm_asia",
                       "git": "github", "github_developers": "github", "deezer": "deezer_europe",
                       "deezer-europe": "deezer_europe", "twitch-en": "twitch-engb",
                       "twitch-pt": "twitch-ptbr", "karate_club": "karate", "karateclub": "karate"}


def _structural_check(kind: str, rows: Optional[int] = None, whole: bool = False):
    """Header sanity (catches HTML pages and git-LFS pointers); with ``rows``, also the
    number of data rows; with ``whole``, a features file must parse as JSON (both used on
    downloads: a cut file would otherwise be kept and fail every later run)."""
    def check(path: Path) -> None:
        if rows is not None or whole:
            head = read_bytes(path)
        else:
            with open(path, "rb") as f:
                head = f.read(4096)
            if head[:2] == b"\x1f\x8b":
                try:
                    with gzip.open(path, "rb") as f:
                        head = f.read(4096)
                except (EOFError, OSError, zlib.error) as exc:
                    raise DataFileError(f"{path}: corrupt gzip file ({exc})") from exc
        if kind == "features":
            if not head.lstrip().removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"{"):  # UTF-8 BOM
                raise DataFileError(f"{path}: not a JSON object (an HTML page or LFS pointer?)")
            if whole:
                parse_json(head.decode("utf-8-sig", "replace"), str(path))
            return
        if b"," not in head.split(b"\n", 1)[0] or head.startswith(b"version https://git-lfs"):
            raise DataFileError(f"{path}: not a CSV with a header row (an LFS pointer?)")
        if rows is not None:
            got = sum(1 for ln in head.split(b"\n")[1:] if ln.strip())
            if got != rows:
                raise DataFileError(f"{path}: {got} data rows, expected {rows} (truncated or "
                                    "changed upstream file)")
    return check


#: features URLs whose download failed in this process -> the error (not retried)
_FAILED_DOWNLOADS: Dict[str, str] = {}


def _get(spec: dict, kind: str, root, download: bool) -> Path:
    """A local file (header check only), else a download checked against the row count.

    A failed download leaves no empty folder behind (:func:`~graphattn.data.download.download_url`
    removes the ones it made); a failed features download is remembered per URL and not
    tried again in this process."""
    rels, url = spec[kind]
    base = data_root(root)
    if any((base / r).is_file() for r in rels):
        return find_file(rels, url=url, root=root, check=_structural_check(kind),
                         download=False)
    if not download:
        raise DataFileError(f"none of {list(rels)} found under data root {base} (set root=, --data-root "
                            f"or $GRAPHATTN_DATA); downloads are disabled (download=False): pass "
                            f"download=True to fetch {url}, or put the file there by hand")
    if kind == "features" and url in _FAILED_DOWNLOADS:
        raise DataFileError(f"{url}: its download already failed in this process, not retried "
                            f"({_FAILED_DOWNLOADS[url]})")
    rows = None
    if spec.get("rows") and kind != "features":
        rows = spec["rows"][0 if kind == "edges" else 1]
    try:
        return find_file(rels, url=url, root=root, check=_structural_check(kind, rows, whole=True),
                         download=True, git_blob=spec.get("blobs", {}).get(kind))
    except DataFileError as exc:
        if kind == "features":
            _FAILED_DOWNLOADS[url] = str(exc)
        raise


def random_masks(y: torch.Tensor, train: float = 0.6, val: float = 0.2, seed: int = 0
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded random train/val/test boolean masks of the nodes with a numeric target (regression: no
    classes to stratify by); nodes whose targets ``y (N,)`` or ``(N, T)`` are all NaN are in no mask.
    The sizes are those of :func:`stratified_masks` for a single class."""
    y = torch.as_tensor(y)
    present = ~torch.isnan(y.view(y.size(0), -1).float()).all(1)
    return stratified_masks(torch.where(present, 0, -1), train, val, seed=seed)


def load_karate(structural_features: bool = True, rw_steps: int = 16) -> Data:
    """Zachary's karate club (networkx): 34 nodes, 78 edges, classes 0='Mr. Hi', 1='Officer'."""
    import networkx as nx  # networkx takes ~0.4 s to import: only the karate club needs it

    g = nx.karate_club_graph()
    clubs = [g.nodes[v]["club"] for v in range(g.number_of_nodes())]
    y, names = label_codes(clubs)
    # Edges straight from networkx's node ids (0..33), which index `clubs`; re-building a graph
    # from the edge list would renumber nodes in order of appearance and scramble the labels.
    edges = np.asarray(list(g.edges()), dtype=np.int64).T  # (2, 78)
    ei, _ = undirected_edge_index(edges[0], edges[1], len(clubs))
    data = Data(edge_index=torch.from_numpy(ei), y=torch.from_numpy(y), num_nodes=len(clubs))
    data.class_names, data.target_col = names, "club"
    data.x, data.has_features, data.feature_source = None, False, "none"
    if structural_features:
        data.x = structural_node_features(data.edge_index, data.num_nodes, rw_steps)
        data.feature_source = "structural"
    return data


def load_social_node_dataset(name: str, root: Optional[PathLike] = None, *, download: bool = True,
                             features: bool = True, structural_features: Union[str, bool] = "auto",
                             rw_steps: int = 16, max_features: Optional[int] = None,
                             max_feature_bytes: Optional[int] = None,
                             split: Tuple[float, float] = (0.6, 0.2), seed: int = 0,
                             target_col: Optional[str] = None, numeric_target: bool = False) -> Data:
    """A published node-classification social graph by name, with stratified masks.

    Names: ``karate``, ``facebook``, ``lastfm_asia``, ``github``, ``deezer_europe``,
    ``twitch-de|engb|es|fr|ptbr|ru|tw`` (and the Planetoid citation graphs ``cora``,
    ``citeseer``, ``pubmed``, which keep their public split: :func:`load_planetoid`).
    Files are looked up under ``<root>/<folder>/`` by the names of the shared data folder
    (``facebook_page_page/facebook_edges.csv.gz``, ``twitch/DE/DE_edges.csv.gz``...) and
    the upstream/SNAP names (``musae_facebook_edges.csv``...), plain or gzipped, then in
    the folders the releases unzip into (``facebook_large/``, ``git_web_ml/``,
    ``lasftm_asia/``) and in ``<root>`` itself; absent ones
    are downloaded (``download=True``) from benedekrozemberczki/datasets at the pinned
    commits listed in ``datasets/social.md``.

    With ``download=False`` a missing file is a :class:`DataFileError` saying so. A failed
    download leaves no empty folder behind; a failed features download is not retried in
    the same process (the structural fallback below is used).

    ``features``: use the features JSON when it is there or can be downloaded (and is
    usable: see :func:`load_musae` — a file covering fewer than half of the nodes, or
    with no feature at all, is dropped with a warning, as if absent).
    ``structural_features``: ``"auto"`` adds ``[log1p(deg), RWPE_1..rw_steps]`` as ``x``
    only when there are no features (warning, ``data.feature_source = "structural"``);
    ``True`` appends them to file features too; ``False`` never (``x`` may be ``None``).
    ``max_features``, ``max_feature_bytes``: ``None`` or positive integers, memory controls for
    wide feature files (see :func:`load_musae`).
    ``split``: (train, val) fractions per class for :func:`stratified_masks`, test = rest;
    nodes with a missing label (``y = -1``) are in no mask.
    ``target_col``: the column of the target file to read (default: the release's label column);
    ``numeric_target``: read it as numbers for regression (:func:`load_musae`; ``y`` ``(N, 1)``
    float, NaN missing) with :func:`random_masks` — the MUSAE/FEATHER sets only (Twitch's ``days``
    and ``views``); karate and the Planetoid sets have class labels alone (``ValueError``).
    """
    check_max_features(max_features)
    key = canonical_name(name, SOCIAL_NODE_ALIASES, (*SOCIAL_NODE_DATASETS, *PLANETOID_DATASETS, "karate"))
    if numeric_target and key in (*PLANETOID_DATASETS, "karate"):
        raise ValueError(f"{key}: its node labels are classes (no numeric column to regress); regression "
                         "needs a MUSAE/FEATHER set with a numeric column (e.g. twitch-de --target-col views) "
                         "or --edges/--target files")
    if key in PLANETOID_DATASETS:
        return load_planetoid(key, root, download=download)
    if key == "karate":
        data = load_karate(structural_features is not False, rw_steps)
    else:
        if key not in SOCIAL_NODE_DATASETS:
            raise KeyError(f"unknown social node dataset {name!r}; known: karate, cora, citeseer, pubmed, "
                           + ", ".join(SOCIAL_NODE_DATASETS))
        spec = SOCIAL_NODE_DATASETS[key]
        paths = {kind: _get(spec, kind, root, download) for kind in ("edges", "target")}
        feat_path = None
        if features:
            try:
                feat_path = _get(spec, "features", root, download)
            except DataFileError as exc:
                warnings.warn(f"{key}: no node features file ({exc}); using structural features "
                              "(log-degree + random-walk PE) instead", stacklevel=2)
        data = load_musae(paths["edges"], paths["target"], feat_path, target_col, max_features=max_features,
                          max_feature_bytes=max_feature_bytes, numeric_target=numeric_target)
        n_exp, e_exp, c_exp = spec["counts"]
        got = (data.num_nodes, data.edge_index.size(1) // 2, c_exp if numeric_target else len(data.class_names))
        if got != (n_exp, e_exp, c_exp):
            warnings.warn(f"{key}: {got[0]} nodes / {got[1]} undirected edges / {got[2]} classes, expected "
                          f"{n_exp} / {e_exp} / {c_exp} (a different release of the files, or a cut copy?)",
                          stacklevel=2)
        add = structural_features is True or (structural_features == "auto" and data.x is None)
        if add:
            s = structural_node_features(data.edge_index, data.num_nodes, rw_steps)
            if data.x is None:
                data.x, data.feature_source = s, "structural"
            else:
                data.x, data.feature_source = torch.cat([data.x, s], 1), "file+structural"
    data.name = key
    data.train_mask, data.val_mask, data.test_mask = (random_masks if numeric_target else stratified_masks)(
        data.y, split[0], split[1], seed=seed)
    return data

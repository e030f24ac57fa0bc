"""Node-level social datasets: the MUSAE/FEATHER release format, karate club and Cora.

The release format (Rozemberczki et al.; see ``datasets/social.md``) is three files:

* an edges CSV with a header naming two id columns, one *undirected* edge per row,
  each pair written once (``id_1,id_2``, ``node_1,node_2`` or ``from,to``);
* a target CSV with one row per node: an id column (``id``; for Twitch ``new_id`` is the
  id the edges use, ``id`` there is the Twitch user id) and a label column;
* optionally a features JSON ``{"node id": [feature id, ...]}`` (sparse binary bag of
  features; Twitch lists may repeat an id).

Files may be plain or gzip-compressed (``.gz``). :func:`load_musae` reads any graph in
that format; :func:`load_social_node_dataset` knows the published ones by name, finds
them under the data root and downloads them when absent. Datasets whose feature file is
not available get *structural* features (log-degree and random-walk return
probabilities), with a warning and ``data.feature_source == "structural"``.
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from .download import DataFileError, cache_root, data_root, find_file

PathLike = Union[str, os.PathLike]

__all__ = [
    "load_musae", "load_social_node_dataset", "load_karate", "load_cora",
    "stratified_masks", "structural_node_features", "random_walk_pe",
    "undirected_edge_index", "sorted_unique", "SOCIAL_NODE_DATASETS",
]

# --------------------------------------------------------------------------- helpers


def read_bytes(path: PathLike) -> bytes:
    """Whole file as bytes, transparently gunzipping ``*.gz`` (or gzip magic)."""
    path = Path(path)
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (EOFError, OSError, gzip.BadGzipFile) as exc:
            raise DataFileError(f"{path}: corrupt or truncated gzip file ({exc})") from exc
    return raw


def _text(path: PathLike) -> str:
    try:
        return read_bytes(path).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{path}: not UTF-8 text ({exc})") from exc


def parse_int_tokens(buf: bytes, what: str, sep: bytes = b" ") -> np.ndarray:
    """All integers in ``buf`` (whitespace/``sep`` separated) as int64, C speed."""
    if sep != b" ":
        buf = buf.replace(sep, b" ")
    if not buf.strip():
        return np.zeros(0, dtype=np.int64)
    try:
        return np.fromstring(buf, dtype=np.int64, sep=" ")  # noqa: NPY201 (text mode is supported)
    except ValueError as exc:
        raise DataFileError(f"{what}: non-integer token ({exc})") from exc


def sorted_unique(a: np.ndarray, return_inverse: bool = False):
    """``np.unique`` by sort + diff (numpy 2.4's hash-based ``np.unique`` is ~100x slower
    on large int arrays here)."""
    a = np.asarray(a)
    s = np.sort(a, kind="stable")
    u = s[np.concatenate([[True], s[1:] != s[:-1]])] if s.size else s
    if return_inverse:
        return u, np.searchsorted(u, a)
    return u


def undirected_edge_index(src: np.ndarray, dst: np.ndarray, num_nodes: int,
                          remove_self_loops: bool = True) -> Tuple[np.ndarray, int]:
    """Both directions, deduplicated, sorted by (src, dst); returns (edge_index, #self-loops)."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    loops = src == dst
    n_loops = int(np.count_nonzero(loops))
    if remove_self_loops and n_loops:
        src, dst = src[~loops], dst[~loops]
    key = np.concatenate([src * num_nodes + dst, dst * num_nodes + src])
    key = sorted_unique(key)
    return np.stack([key // num_nodes, key % num_nodes]), n_loops


def _csv_rows(path: PathLike) -> Tuple[List[str], List[List[str]]]:
    reader = csv.reader(io.StringIO(_text(path)))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise DataFileError(f"{path}: empty CSV file") from None
    rows = [r for r in reader if r]
    return header, rows


def _read_edges_csv(path: PathLike) -> Tuple[List[str], np.ndarray, np.ndarray]:
    raw = read_bytes(path).replace(b"\r", b"")
    nl = raw.find(b"\n")
    header = raw if nl < 0 else raw[:nl]
    body = b"" if nl < 0 else raw[nl + 1:]
    names = [h.strip() for h in header.decode("utf-8-sig", "replace").split(",")]
    if len(names) != 2 or any(n.lstrip("-").isdigit() for n in names):
        raise DataFileError(f"{path}: expected a header of two id columns (e.g. 'id_1,id_2'), "
                            f"got {header[:80]!r}")
    lines = [ln for ln in body.split(b"\n") if ln.strip()]
    tok = parse_int_tokens(body.replace(b",", b" "), str(path))
    if tok.size != 2 * len(lines):
        raise DataFileError(f"{path}: {len(lines)} edge rows but {tok.size} ids; every row must "
                            "hold exactly two integer ids (truncated or malformed file?)")
    pairs = tok.reshape(-1, 2)
    return names, pairs[:, 0], pairs[:, 1]


_ID_COLUMNS = ("new_id", "id", "node_id", "node")
_TARGET_COLUMNS = ("target", "page_type", "ml_target", "mature", "label", "class", "y")


def _label_codes(values: Sequence[str]) -> Tuple[np.ndarray, List[str]]:
    """Map label strings to 0..C-1 in sorted order (numeric order when all are integers)."""
    vals = [v.strip() for v in values]
    uniq = sorted(set(vals))
    try:
        uniq = sorted(uniq, key=lambda s: int(s))
    except ValueError:
        pass
    index = {v: i for i, v in enumerate(uniq)}
    return np.fromiter((index[v] for v in vals), dtype=np.int64, count=len(vals)), uniq


def _read_target(path: PathLike, target_col: Optional[str]):
    header, rows = _csv_rows(path)
    lower = [h.lower() for h in header]
    id_col = next((lower.index(c) for c in _ID_COLUMNS if c in lower), 0)
    if target_col is not None:
        if target_col not in header:
            raise DataFileError(f"{path}: no column {target_col!r} (columns: {header})")
        t_col = header.index(target_col)
    else:
        t_col = next((lower.index(c) for c in _TARGET_COLUMNS if c in lower), None)
        if t_col is None:
            raise DataFileError(f"{path}: cannot tell the label column among {header}; "
                                "pass target_col=")
    width = len(header)
    bad = next((i for i, r in enumerate(rows) if len(r) != width), None)
    if bad is not None:
        raise DataFileError(f"{path}: row {bad + 2} has {len(rows[bad])} fields, header has "
                            f"{width} (truncated or malformed file?)")
    try:
        ids = np.array([int(r[id_col]) for r in rows], dtype=np.int64)
    except ValueError as exc:
        raise DataFileError(f"{path}: id column {header[id_col]!r} is not integer ({exc})") from exc
    y, names = _label_codes([r[t_col] for r in rows])
    return ids, y, names, header[id_col], header[t_col]


def _read_features(path: PathLike, id_index: Dict[int, int], num_nodes: int,
                   max_features: Optional[int]) -> Tuple[Tensor, np.ndarray, int]:
    try:
        obj = json.loads(_text(path))
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{path}: invalid JSON (truncated?): {exc}") from exc
    if not isinstance(obj, dict):
        raise DataFileError(f"{path}: expected an object {{node id: [feature ids]}}")
    rows, cols, missing = [], [], 0
    for key, feats in obj.items():
        try:
            node = id_index.get(int(key))
            ids = np.asarray(feats, dtype=np.int64).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise DataFileError(f"{path}: entry {key!r} is not 'node id: [feature ids]' "
                                f"({exc})") from exc
        if node is None:
            missing += 1
            continue
        rows.append(np.full(ids.size, node, dtype=np.int64))
        cols.append(ids)
    if missing:
        warnings.warn(f"{path}: {missing} feature rows name nodes absent from the target file; "
                      "ignored", stacklevel=3)
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    feature_ids, c = sorted_unique(c, return_inverse=True)  # sparse ids -> 0..F-1 (sorted)
    if max_features is not None and max_features < feature_ids.size:
        # keep the most frequent feature ids (counted once per node), in id order
        first = sorted_unique(r * feature_ids.size + c)
        freq = np.bincount(first % feature_ids.size, minlength=feature_ids.size)
        keep = np.sort(np.argsort(-freq, kind="stable")[:max_features])
        remap = np.full(feature_ids.size, -1, dtype=np.int64)
        remap[keep] = np.arange(keep.size)
        c = remap[c]
        r, c = r[c >= 0], c[c >= 0]
        feature_ids = feature_ids[keep]
    x = torch.zeros(num_nodes, int(feature_ids.size), dtype=torch.float32)
    x[torch.from_numpy(r), torch.from_numpy(c)] = 1.0  # duplicates collapse to 1 (multi-hot)
    return x, feature_ids, len(obj)


# --------------------------------------------------------------------------- public reader


def load_musae(edges_path: PathLike, target_path: PathLike,
               features_path: Optional[PathLike] = None, target_col: Optional[str] = None,
               *, max_features: Optional[int] = None, remove_self_loops: bool = True) -> Data:
    """Read a graph in the MUSAE/FEATHER release format into a PyG ``Data``.

    Args:
        edges_path: CSV with a two-column header and one edge per row (plain or ``.gz``).
        target_path: CSV with an id column (``new_id`` if present, else ``id``, else the
            first column) and a label column (``target_col``, or auto-detected among
            ``target, page_type, ml_target, mature, label, class, y``).
        features_path: optional JSON ``{node id: [feature ids]}``; becomes a dense
            multi-hot float matrix ``x`` of shape (N, F), the distinct feature ids being
            re-numbered 0..F-1 in sorted order (original ids in ``data.feature_ids``).
        max_features: keep only the F most frequent feature ids (memory control).
        remove_self_loops: drop ``u,u`` rows (Facebook has 179).

    Nodes are the rows of the target file, numbered 0..N-1 in increasing id order
    (``data.node_id`` keeps the file ids). Labels are re-coded to 0..C-1 in sorted order
    (numeric when all labels are integers; ``False < True``), names in ``data.class_names``.
    Edges are made undirected (both directions), deduplicated and sorted.

    Returns ``Data(x, y, edge_index, num_nodes, has_features, feature_source, class_names,
    target_col, node_id[, feature_ids])``; ``x`` is ``None`` when no features file is given.
    """
    ids, y, class_names, id_name, t_name = _read_target(target_path, target_col)
    order = np.argsort(ids, kind="stable")
    ids, y = ids[order], y[order]
    if ids.size and np.any(ids[1:] == ids[:-1]):
        dup = ids[1:][ids[1:] == ids[:-1]][:5].tolist()
        raise DataFileError(f"{target_path}: duplicated node ids in column {id_name!r}: {dup}")
    n = int(ids.size)
    if n == 0:
        raise DataFileError(f"{target_path}: no nodes")
    _, src, dst = _read_edges_csv(edges_path)
    contiguous = bool(ids[0] == 0 and ids[-1] == n - 1)
    if contiguous:
        s, d = src, dst
        bad = (s < 0) | (s >= n) | (d < 0) | (d >= n)
    else:
        s = np.clip(np.searchsorted(ids, src), 0, n - 1)
        d = np.clip(np.searchsorted(ids, dst), 0, n - 1)
        bad = (ids[s] != src) | (ids[d] != dst)
    if np.any(bad):
        k = int(np.flatnonzero(bad)[0])
        raise DataFileError(
            f"{edges_path}: edge row {k + 2} ({src[k]},{dst[k]}) names a node id that is not in "
            f"column {id_name!r} of {target_path} ({int(np.count_nonzero(bad))} such rows); "
            "wrong target file, or the edges use another id column?")
    edge_index, n_loops = undirected_edge_index(s, d, n, remove_self_loops=remove_self_loops)
    data = Data(edge_index=torch.from_numpy(edge_index), y=torch.from_numpy(y), num_nodes=n)
    data.class_names = list(class_names)
    data.target_col = t_name
    data.node_id = torch.from_numpy(ids)
    data.num_self_loops_removed = n_loops if remove_self_loops else 0
    if features_path is not None:
        index = {int(v): i for i, v in enumerate(ids.tolist())}
        x, feature_ids, n_rows = _read_features(features_path, index, n, max_features)
        if n_rows < n:
            warnings.warn(f"{features_path}: features for {n_rows} of {n} nodes; the others get "
                          "all-zero rows", stacklevel=2)
        data.x = x
        data.feature_ids = torch.from_numpy(feature_ids)
        data.has_features, data.feature_source = True, "file"
    else:
        data.x = None
        data.has_features, data.feature_source = False, "none"
    return data


# --------------------------------------------------------------------------- splits


def stratified_masks(y: Tensor, train: float = 0.6, val: float = 0.2, seed: int = 0
                     ) -> Tuple[Tensor, Tensor, Tensor]:
    """Seeded stratified train/val/test boolean masks (default 60/20/20 per class).

    Within each class the nodes are shuffled with ``seed``; the first
    ``round(train * n_c)`` go to train, the next ``round(val * n_c)`` to val, the rest to
    test (a non-empty class always keeps at least one training node). Nodes with a
    negative label (unlabelled) are in no mask. Fully vectorised.
    """
    if not (0 < train < 1 and 0 <= val < 1 and train + val <= 1):
        raise ValueError(f"bad split ratios train={train}, val={val}")
    y = torch.as_tensor(y).view(-1).long().cpu()
    n = y.numel()
    gen = torch.Generator().manual_seed(int(seed))
    labelled = y >= 0
    if not bool(labelled.any()):
        empty = torch.zeros(n, dtype=torch.bool)
        return empty, empty.clone(), empty.clone()
    key = torch.rand(n, generator=gen, dtype=torch.float64)
    yl = torch.where(labelled, y, torch.full_like(y, -1))
    order = torch.argsort(yl.double() * 2.0 + key)  # group by class, random within class
    ys = yl[order]
    counts = torch.bincount(ys[ys >= 0], minlength=int(y.max().item()) + 1 if n else 0)
    starts = torch.cumsum(counts, 0) - counts
    n_unl = int((ys < 0).sum())
    rank = torch.zeros(n, dtype=torch.long)
    lab = ys >= 0
    rank[lab] = torch.arange(n - n_unl) - starts[ys[lab]]
    n_c = counts[ys.clamp(min=0)].double()
    n_tr = torch.clamp(torch.round(n_c * train), min=1)
    n_va = torch.round(n_c * val)
    r = rank.double()
    tr_s, va_s = lab & (r < n_tr), lab & (r >= n_tr) & (r < n_tr + n_va)
    te_s = lab & (r >= n_tr + n_va)
    masks = []
    for m in (tr_s, va_s, te_s):
        out = torch.zeros(n, dtype=torch.bool)
        out[order] = m
        masks.append(out)
    return masks[0], masks[1], masks[2]


# --------------------------------------------------------------------------- structural features


def _degree(edge_index: Tensor, num_nodes: int) -> Tensor:
    return torch.bincount(edge_index[0], minlength=num_nodes).to(torch.float32)


def random_walk_pe(edge_index: Tensor, num_nodes: int, steps: int = 16, *,
                   exact_max_nodes: int = 4000, num_probes: int = 64, seed: int = 0,
                   triangle_budget: float = 5e7) -> Tensor:
    """Random-walk return probabilities ``[P^k]_ii`` for k = 1..steps, shape (N, steps).

    ``P = D^-1 A`` (isolated nodes stay at 0). This is the RWPE of Dwivedi et al. that PyG's
    ``AddRandomWalkPE`` computes, but PyG squares sparse matrices (fill-in: 57 s on LastFM,
    >20 GB on GitHub here), so:

    * N <= ``exact_max_nodes``: exact, by K dense (small or dense graphs) or sparse x dense
      products;
    * larger graphs: k = 1, 2 exact (closed forms), k = 3 exact by weighted triangle counts
      when ``sum(deg^2) <= triangle_budget`` (LastFM, Facebook, Twitch; not GitHub: 2.5e8),
      the other k >= 3 an unbiased Monte-Carlo estimate
      with ``num_probes`` Rademacher probes Z on ``S = D^-1/2 A D^-1/2`` (same diagonal as
      ``P^k``): ``diag(S^2m) ~ mean((S^m Z)^2)`` (relative std ~ sqrt(2/num_probes)),
      ``diag(S^2m+1) ~ mean(S^m Z * S^m+1 Z)``; cost ``steps/2 * nnz * num_probes``.
    """
    n = int(num_nodes)
    if steps <= 0 or n == 0:
        return torch.zeros(n, max(steps, 0))
    row, col = edge_index[0].long(), edge_index[1].long()
    deg = _degree(edge_index, n)
    inv = torch.where(deg > 0, 1.0 / deg.clamp(min=1), torch.zeros_like(deg))
    if n <= exact_max_nodes:
        out = torch.empty(n, steps)
        diag = torch.arange(n)
        if n <= 64 or 16 * row.numel() >= n * n:  # dense matmul wins on dense graphs
            p = torch.zeros(n, n)
            p.index_put_((row, col), inv[row], accumulate=True)
            cur = p
            for k in range(steps):
                if k:
                    cur = cur @ p
                out[:, k] = cur[diag, diag]
        else:
            p = torch.sparse_coo_tensor(torch.stack([row, col]), inv[row], (n, n),
                                        check_invariants=False).coalesce()
            cur = p.to_dense()
            for k in range(steps):
                if k:
                    cur = torch.sparse.mm(p, cur)
                out[:, k] = cur[diag, diag]
        return out
    out = torch.empty(n, steps)
    loops = row == col
    out[:, 0] = torch.zeros(n).index_add_(0, row[loops], inv[row[loops]])
    isq = inv.sqrt()
    s = torch.sparse_coo_tensor(torch.stack([row, col]), isq[row] * isq[col], (n, n),
                                check_invariants=False).coalesce()
    if steps > 1:  # sum_j P_ij P_ji = sum_j A_ij A_ji / (d_i d_j)
        out[:, 1] = torch.zeros(n).index_add_(0, row, inv[row] * inv[col])
    if steps > 2:
        gen = torch.Generator().manual_seed(int(seed))
        z = torch.randint(0, 2, (n, num_probes), generator=gen).float() * 2 - 1
        ys = [z]
        for _ in range(steps // 2 + 1):
            ys.append(torch.sparse.mm(s, ys[-1]))
        for k in range(3, steps + 1):
            m = k // 2
            est = (ys[m] * ys[m]).mean(1) if k % 2 == 0 else (ys[m] * ys[m + 1]).mean(1)
            out[:, k - 1] = est.clamp(0.0, 1.0)
        deg_np = deg.numpy().astype(np.float64)
        if float((deg_np ** 2).sum()) <= triangle_budget:
            out[:, 2] = _return_prob_3(row.numpy(), col.numpy(), deg_np, n)
    return out


def _return_prob_3(row: np.ndarray, col: np.ndarray, deg: np.ndarray, n: int) -> Tensor:
    """Exact ``[P^3]_ii = 1/d_i sum_j A_ij/d_j (A D^-1 A)_ji`` (weighted triangles), scipy."""
    import scipy.sparse as sp

    inv = np.where(deg > 0, 1.0 / np.maximum(deg, 1), 0.0)
    a = sp.csr_matrix((np.ones(row.size), (row, col)), shape=(n, n))
    c = (a.multiply(inv[None, :]).tocsr() @ a).multiply(a).tocsr()  # only at edges
    return torch.from_numpy(inv * (c @ inv)).float()


def structural_node_features(edge_index: Tensor, num_nodes: int, rw_steps: int = 16,
                             **rw_kwargs) -> Tensor:
    """``[log(1 + degree), RWPE_1..RWPE_rw_steps]`` as float (N, 1 + rw_steps)."""
    deg = _degree(edge_index, num_nodes)
    feats = [torch.log1p(deg).unsqueeze(1)]
    if rw_steps > 0:
        feats.append(random_walk_pe(edge_index, num_nodes, rw_steps, **rw_kwargs))
    return torch.cat(feats, dim=1)


# --------------------------------------------------------------------------- named datasets

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
          rows=None):
    """Accepted local names (the shared-data names, plain or .gz, then SNAP's) and URLs."""
    def names(kind, ext, extra=()):
        base = f"{stem}_{kind}.{ext}"
        cands = [f"{folder}/{base}", f"{folder}/{base}.gz"]  # downloads are plain: 1st name
        if snap_prefix:  # SNAP's zips name the files musae_<stem>_<kind>.<ext>
            cands += [f"{folder}/{snap_prefix}{base}", f"{folder}/{snap_prefix}{base}.gz"]
        return cands + [f"{folder}/{e}" for e in extra if f"{folder}/{e}" not in cands]
    fname = feat_name or f"{stem}_features.json"
    return {
        "edges": (names("edges", "csv"), f"{_DS}/{commit}/{upstream}/{stem}_edges.csv"),
        "target": (names("target", "csv"), f"{_DS}/{commit}/{upstream}/{stem}_target.csv"),
        "features": (names("features", "json", (fname, fname + ".gz")),
                     f"{_DS}/{feat_commit}/{upstream}/{fname}"),
        "counts": counts,
        "rows": rows,  # (edge rows, target rows) verified on the shared copies, else None
    }


def _twitch(lang, nodes, edges):
    commit = _TW_TW if lang == "TW" else _TW
    fc, fname = _TW_FEAT[lang]
    rows = (edges, nodes) if lang in ("DE", "ENGB") else None
    return _spec(f"twitch/{lang}", lang, f"twitch/{lang}", commit, fc, (nodes, edges, 2),
                 snap_prefix="musae_", feat_name=fname, rows=rows)


#: name -> file candidates, pinned upstream URLs and expected (nodes, undirected edges, classes)
SOCIAL_NODE_DATASETS = {
    "facebook": _spec("facebook_page_page", "facebook", "facebook_large", _FB, _FB,
                      (22470, 170823, 4), snap_prefix="musae_", rows=(171002, 22470)),
    "lastfm_asia": _spec("lastfm_asia", "lastfm_asia", "lasftm_asia", _LF, _LF,
                         (7624, 27806, 18), rows=(27806, 7624)),
    "github": _spec("github_developers", "git", "git_web_ml", _GIT, _GIT, (37700, 289003, 2),
                    snap_prefix="musae_", rows=(289003, 37700)),
    "deezer_europe": _spec("deezer_europe", "deezer_europe", "deezer_europe", _DZ, _DZ,
                           (28281, 92752, 2)),
    **{f"twitch-{k.lower()}": _twitch(k, *v) for k, v in {
        "DE": (9498, 153138), "ENGB": (7126, 35324), "ES": (4648, 59382), "FR": (6549, 112666),
        "PTBR": (1912, 31299), "RU": (4385, 37304), "TW": (2772, 63462)}.items()},
}
_ALIASES = {"facebook_page_page": "facebook", "lastfm": "lastfm_asia", "lastfm-asia": "lastfm_asia",
            "git": "github", "github_developers": "github", "deezer": "deezer_europe",
            "deezer-europe": "deezer_europe", "twitch-en": "twitch-engb",
            "twitch-pt": "twitch-ptbr"}


def _structural_check(kind: str, rows: Optional[int] = None):
    """Header sanity (catches HTML pages and git-LFS pointers); with ``rows``, also the
    number of data rows (used on downloads)."""
    def check(path: Path) -> None:
        if rows is not None:
            head = read_bytes(path)
        else:
            with open(path, "rb") as f:
                head = f.read(4096)
            if head[:2] == b"\x1f\x8b":
                try:
                    with gzip.open(path, "rb") as f:
                        head = f.read(4096)
                except (EOFError, OSError) as exc:
                    raise DataFileError(f"{path}: corrupt gzip file ({exc})") from exc
        if kind == "features":
            if not head.lstrip().startswith(b"{"):
                raise DataFileError(f"{path}: not a JSON object (an HTML page or LFS pointer?)")
            return
        if b"," not in head.split(b"\n", 1)[0] or head.startswith(b"version https://git-lfs"):
            raise DataFileError(f"{path}: not a CSV with a header row (an LFS pointer?)")
        if rows is not None:
            got = sum(1 for ln in head.split(b"\n")[1:] if ln.strip())
            if got != rows:
                raise DataFileError(f"{path}: {got} data rows, expected {rows} (truncated or "
                                    "changed upstream file)")
    return check


def _get(spec: dict, kind: str, root, download: bool) -> Path:
    """A local file (header check only), else a download checked against the row count."""
    rels, url = spec[kind]
    base = data_root(root)
    if any((base / r).is_file() for r in rels) or not download:
        return find_file(rels, url=url, root=root, check=_structural_check(kind),
                         download=False)
    rows = None
    if spec.get("rows") and kind != "features":
        rows = spec["rows"][0 if kind == "edges" else 1]
    return find_file(rels, url=url, root=root, check=_structural_check(kind, rows),
                     download=True)


def load_karate(structural_features: bool = True, rw_steps: int = 16) -> Data:
    """Zachary's karate club (networkx): 34 nodes, 78 edges, classes 0='Mr. Hi', 1='Officer'."""
    import networkx as nx

    g = nx.karate_club_graph()
    clubs = [g.nodes[v]["club"] for v in range(g.number_of_nodes())]
    y, names = _label_codes(clubs)
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
                             split: Tuple[float, float] = (0.6, 0.2), seed: int = 0) -> Data:
    """A published node-classification social graph by name, with stratified masks.

    Names: ``karate``, ``facebook``, ``lastfm_asia``, ``github``, ``deezer_europe``,
    ``twitch-de|engb|es|fr|ptbr|ru|tw`` (and ``cora``, which keeps its public split).
    Files are looked up under ``<root>/<folder>/`` by the names of the shared data folder
    (``facebook_page_page/facebook_edges.csv.gz``, ``twitch/DE/DE_edges.csv.gz``...) and
    the upstream/SNAP names (``musae_facebook_edges.csv``...), plain or gzipped; absent ones
    are downloaded (``download=True``) from benedekrozemberczki/datasets at the pinned
    commits listed in ``datasets/social.md``.

    ``features``: use the features JSON when it is there or can be downloaded.
    ``structural_features``: ``"auto"`` adds ``[log1p(deg), RWPE_1..rw_steps]`` as ``x``
    only when there are no features (warning, ``data.feature_source = "structural"``);
    ``True`` appends them to file features too; ``False`` never (``x`` may be ``None``).
    ``split``: (train, val) fractions per class for :func:`stratified_masks`, test = rest.
    """
    key = name.lower().replace(" ", "")
    key = _ALIASES.get(key, key)
    if key == "cora":
        return load_cora(root, download=download)
    if key in ("karate", "karate_club", "karateclub"):
        data = load_karate(structural_features is not False, rw_steps)
    else:
        if key not in SOCIAL_NODE_DATASETS:
            raise KeyError(f"unknown social node dataset {name!r}; known: karate, cora, "
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
        data = load_musae(paths["edges"], paths["target"], feat_path, max_features=max_features)
        n_exp, e_exp, c_exp = spec["counts"]
        got = (data.num_nodes, data.edge_index.size(1) // 2, len(data.class_names))
        if got[0] != n_exp or got[2] != c_exp:
            warnings.warn(f"{key}: {got[0]} nodes / {got[2]} classes, expected {n_exp} / {c_exp} "
                          "(a different release of the files?)", stacklevel=2)
        add = structural_features is True or (structural_features == "auto" and data.x is None)
        if add:
            s = structural_node_features(data.edge_index, data.num_nodes, rw_steps)
            if data.x is None:
                data.x, data.feature_source = s, "structural"
            else:
                data.x, data.feature_source = torch.cat([data.x, s], 1), "file+structural"
    data.name = key
    data.train_mask, data.val_mask, data.test_mask = stratified_masks(
        data.y, split[0], split[1], seed=seed)
    return data


# --------------------------------------------------------------------------- Cora

_CORA_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
_PLANETOID_URL = "https://github.com/kimiyoung/planetoid/raw/master/data"


def load_cora(root: Optional[PathLike] = None, *, download: bool = True) -> Data:
    """Cora with the public Planetoid split, read by PyG's ``Planetoid`` from raw ``ind.cora.*``.

    The eight raw files are looked up under ``<root>/cora/`` (or ``<root>/Cora/raw/``) and
    downloaded from kimiyoung/planetoid when absent. They are symlinked (copied where links
    are not possible) into ``$GRAPHATTN_CACHE`` (default ``~/.cache/graphattn``)
    ``/planetoid/<hash>/Cora/raw`` where PyG writes its processed file; the data root is
    never written to when the files are present. 2,708 nodes, 10,556 directed edges,
    1,433 features, 7 classes, masks 140/500/1000.
    """
    from torch_geometric.datasets import Planetoid

    raw = {}
    for suf in _CORA_SUFFIXES:
        fn = f"ind.cora.{suf}"
        raw[fn] = find_file([f"cora/{fn}", f"Cora/raw/{fn}"], url=f"{_PLANETOID_URL}/{fn}",
                            root=root, download=download)
    tag = hashlib.sha1(str(raw["ind.cora.x"].resolve().parent).encode()).hexdigest()[:12]
    proc_root = cache_root() / "planetoid" / tag
    raw_dir = proc_root / "Cora" / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    for fn, src in raw.items():
        dst = raw_dir / fn
        if dst.is_symlink() or dst.exists():
            if dst.resolve() == src.resolve() or (not dst.is_symlink()
                                                  and dst.stat().st_size == src.stat().st_size):
                continue
            dst.unlink()
        try:
            dst.symlink_to(src.resolve())
        except OSError:
            import shutil
            shutil.copyfile(src, dst)
    ds = Planetoid(str(proc_root), "Cora", split="public")
    data = ds[0]
    data.name = "cora"
    data.class_names = [str(i) for i in range(ds.num_classes)]
    data.has_features, data.feature_source = True, "file"
    return data

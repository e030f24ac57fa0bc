"""The MUSAE/FEATHER release format of node-level social graphs (Rozemberczki et al.).

The release format (see ``datasets/social.md``) is three files:

* an edges CSV with a header naming two id columns, one *undirected* edge per row,
  each pair written once (``id_1,id_2``, ``node_1,node_2`` or ``from,to``);
* a target CSV with one row per node: an id column (``id``; for Twitch ``new_id`` is the
  id the edges use, ``id`` there is the Twitch user id) and a label column;
* optionally a features JSON ``{"node id": [feature id, ...]}`` (sparse binary bag of
  features; Twitch lists may repeat an id).

Files may be plain or gzip-compressed (``.gz``). :func:`load_musae` reads any graph in
that format; :func:`graphattn.data.social.load_social_node_dataset` knows the published
ones by name.
"""
from __future__ import annotations

import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from .download import DataFileError, PathLike
from .rawio import (csv_rows, parse_int_tokens, parse_json, read_bytes, read_text, sorted_unique,
                    undirected_edge_index)

__all__ = ["load_musae"]


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
    header, rows = csv_rows(read_text(path), str(path))
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
    obj = parse_json(read_text(path), str(path))
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

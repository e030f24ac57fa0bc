"""The TU original format of graph-classification sets, read from any folder.

The TU Dortmund collection (Morris et al. 2020) ships a set ``NAME`` as text files in one
folder (plain or ``.gz``)::

    NAME_A.txt                 one edge "i, j" per line, 1-based node ids over the whole set
    NAME_graph_indicator.txt   per node, its 1-based graph id
    NAME_graph_labels.txt      per graph, its class label
    NAME_node_labels.txt       optional: per node, its label(s) (comma-separated)
    NAME_node_attributes.txt   optional: per node, continuous attributes (comma-separated)
    NAME_edge_labels.txt       optional: per edge (row of NAME_A.txt), its label(s)
    NAME_edge_attributes.txt   optional: per edge, continuous attributes (comma-separated)
    NAME_graph_attributes.txt  optional: row count checked, values not used (a warning says so)

:func:`load_tu_folder` returns the :class:`~graphattn.data.tu_text.GraphList` layout of
:func:`~graphattn.data.tu_text.load_tu_text` (``y``, ``tag``, ``x`` = one-hot tags when
there are several, ``node_attr``, undirected deduplicated edges, ``label_values``), plus
``edge_attr`` when the set has edge labels or attributes: PyG's ``TUDataset`` layout
(attributes first, then per label column the one-hot of ``label - min``).

Why not PyG's ``TUDataset`` here: it needs the ``<root>/<NAME>/raw/`` layout (anything else
starts a download), and its reader ``torch_geometric.io.read_tu_data`` cuts the edge slices
from ``bincount(batch[row])`` without ``minlength``, so a set whose last graphs have no edges
loses them (a 3-graph set whose graphs 2 and 3 have no edges loads as 1 graph; checked with
PyG 2.8). :func:`~graphattn.data.tu.load_tu_dataset` still wraps ``TUDataset``
for users who want the PyG dataset object.
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Optional, Tuple

import numpy as np
import torch

from graphattn.data.download import DataFileError, PathLike
from graphattn.data.rawio import parse_int_tokens, read_bytes, sorted_unique, undirected_edge_index
from graphattn.data.tu_text import GraphList, split_graphs

__all__ = ["load_tu_folder", "find_tu_prefix"]

_A_FILE = re.compile(r"^(?P<prefix>.+)_A\.txt(\.gz)?$")
#: any file of a TU set in the original format: NAME_A.txt, NAME_graph_labels.txt, ... (``.gz`` too)
TU_FILE = re.compile(r"^(?P<prefix>.+)_(A|graph_indicator|graph_labels|graph_attributes|node_labels|"
                     r"node_attributes|edge_labels|edge_attributes)\.txt(\.gz)?$")
_F32_MAX = float(np.finfo(np.float32).max)


def find_tu_prefix(path: PathLike, name: Optional[str] = None) -> Optional[Tuple[Path, str]]:
    """``(folder, NAME)`` of the TU files at ``path`` (a ``NAME_A.txt[.gz]`` file, or a folder
    holding one directly or under ``raw/``), or ``None`` when there are none.
    A folder with several sets needs ``name``."""
    p = Path(path).expanduser()
    if p.is_file():  # NAME_A.txt, or another file of the set next to it
        m = TU_FILE.match(p.name)
        if m is None or not any((p.parent / f"{m.group('prefix')}_A.txt{gz}").is_file() for gz in ("", ".gz")):
            return None
        return p.parent, m.group("prefix")
    for folder in (p, p / "raw"):
        if not folder.is_dir():
            continue
        found = sorted({m.group("prefix") for f in folder.iterdir() if (m := _A_FILE.match(f.name))})
        if name is not None:
            if name in found:
                return folder, name
            continue
        if len(found) > 1:
            raise DataFileError(f"{folder}: TU files of several sets {found}; give the NAME_A.txt of the one "
                                "to read (or name= in Python)")
        if found:
            return folder, found[0]
    return None


def _read(folder: Path, prefix: str, kind: str, required: bool = True) -> Optional[bytes]:
    for cand in (folder / f"{prefix}_{kind}.txt", folder / f"{prefix}_{kind}.txt.gz"):
        if cand.is_file():  # a UTF-8 byte-order mark (Notepad) dropped; CRLF and CR-only line ends read as \n
            return read_bytes(cand).removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if required:
        raise DataFileError(f"{folder}: no {prefix}_{kind}.txt (the TU format needs {prefix}_A.txt, "
                            f"{prefix}_graph_indicator.txt and {prefix}_graph_labels.txt)")
    return None


def _rows(buf: bytes, what: str, n_rows: int, floats: bool = False) -> np.ndarray:
    """A comma-separated table of ``n_rows`` equally wide rows, as (n_rows, D)."""
    lines = [ln for ln in buf.split(b"\n") if ln.strip()]
    if len(lines) != n_rows:
        raise DataFileError(f"{what}: {len(lines)} rows, expected {n_rows} (one per node/edge/graph)")
    width = lines[0].count(b",") + 1 if lines else 0
    body = b" ".join(lines).replace(b",", b" ")
    if floats:
        try:
            vals = np.array(body.split(), dtype=np.float64)
        except ValueError as exc:
            raise DataFileError(f"{what}: not numbers ({exc})") from None
        if not np.isfinite(vals).all():
            raise DataFileError(f"{what}: NaN or infinite values")
        if vals.size and np.abs(vals).max() > _F32_MAX:
            raise DataFileError(f"{what}: values beyond the float32 range (|v| > {_F32_MAX:.3g})")
    else:
        vals = parse_int_tokens(body, what)
    if vals.size != n_rows * width:
        raise DataFileError(f"{what}: rows of different widths (expected {width} comma-separated values per "
                            "row, as in the first row)")
    return vals.reshape(n_rows, width)


def _edge_features(folder: Path, prefix: str, n_edges: int) -> Tuple[Optional[np.ndarray], int, list]:
    """``(E, D)`` float features of the rows of ``NAME_A.txt`` as PyG's ``read_tu_data`` builds
    them: edge attributes, then per edge-label column the one-hot of ``label - min`` (``max - min
    + 1`` columns, unused values included); the number of attribute columns; per label column
    its ``(min, max)`` (``[]`` without labels). ``None`` without files."""
    where = f"{folder}/{prefix}"
    parts, n_attr, values = [], 0, []
    raw = _read(folder, prefix, "edge_attributes", required=False)
    if raw is not None:
        attr = _rows(raw, f"{where}_edge_attributes.txt", n_edges, floats=True)
        parts.append(attr)
        n_attr = attr.shape[1]
    raw = _read(folder, prefix, "edge_labels", required=False)
    if raw is not None:
        rows = _rows(raw, f"{where}_edge_labels.txt", n_edges)
        for col in rows.T if n_edges else ():
            lo, hi = int(col.min()), int(col.max())
            if hi - lo >= 1 << 16:
                raise DataFileError(f"{where}_edge_labels.txt: labels span {lo}..{hi}: one-hot columns for "
                                    "every value in between (PyG's layout) would be too many")
            one_hot = np.zeros((n_edges, hi - lo + 1), dtype=np.float64)
            one_hot[np.arange(n_edges), col - lo] = 1.0
            parts.append(one_hot)
            values.append((lo, hi))
    return (np.concatenate(parts, 1) if parts else None), n_attr, values


def _undirected_with_features(src: np.ndarray, dst: np.ndarray, feats: np.ndarray, n: int,
                              remove_self_loops: bool, where: str) -> Tuple[np.ndarray, np.ndarray]:
    """:func:`~graphattn.data.rawio.undirected_edge_index` (same edges, same order) carrying each
    edge's features: an edge ``s -> d`` takes the features of the file's row ``s -> d`` when there
    is one, else those of its row ``d -> s``; among several rows for one direction the first is
    kept (a warning counts the ones that disagree with it)."""
    rows = np.arange(src.size)
    if remove_self_loops:
        keep = src != dst
        src, dst, rows = src[keep], dst[keep], rows[keep]
    m = max(int(n), 1)
    key = np.concatenate([src * m + dst, dst * m + src])
    prio = np.concatenate([np.zeros(src.size, np.int64), np.ones(src.size, np.int64)])  # own direction first
    row = np.concatenate([rows, rows])
    order = np.lexsort((row, prio, key))
    key, prio, row = key[order], prio[order], row[order]
    first = np.ones(key.size, dtype=bool)
    first[1:] = key[1:] != key[:-1]
    # rows of the same direction disagreeing with the one kept (a reversed row never counts)
    head = np.maximum.accumulate(np.where(first, np.arange(key.size), 0))
    same_dir = ~first & (prio == prio[head])
    clash = same_dir & (feats[row] != feats[row[head]]).any(1)
    if clash.any():
        warnings.warn(f"{where}_A.txt: {np.unique(row[clash]).size} repeated edge rows carry other edge labels/attributes "
                      "than the first row of the same edge; the first row's are used", stacklevel=3)
    key, row = key[first], row[first]
    return np.stack([key // m, key % m]), feats[row]


def load_tu_folder(path: PathLike, name: Optional[str] = None, *, remove_self_loops: bool = True,
                   one_hot_tags: bool = True) -> GraphList:
    """Read a TU-format set from ``path``: its ``NAME_A.txt`` file, its folder, or a folder
    with the files under ``raw/`` (PyG's layout). ``name`` picks a set when the folder holds
    several. Returns a :class:`GraphList` as :func:`~graphattn.data.tu_text.load_tu_text`:
    labels re-coded to 0..C-1 (sorted; originals in ``label_values``), node labels as ``tag``
    (several label columns: each distinct row is one tag) with ``x`` its one-hot when there
    are several, ``node_attr`` (N, D) float when the set has node attributes, edges made
    undirected and deduplicated, self-loops removed unless ``remove_self_loops=False``, and
    ``edge_attr`` (e, D) float when the set has ``edge_attributes`` / ``edge_labels`` files
    (attribute columns first, then per label column the one-hot of ``label - min``, as PyG's
    ``TUDataset``; an edge listed in one direction only gives both directions its features).
    The list's ``num_edge_attributes`` counts the attribute columns, ``edge_label_values`` is
    each label column's ``(min, max)``.
    Shapes per graph: ``y`` (1,), ``tag`` (n,), ``edge_index`` (2, e)."""
    folder, prefix = _set_files(path, name)
    where = f"{folder}/{prefix}"
    gi, labels = _graph_ids(folder, prefix, where)
    n, n_graphs = int(gi.size), int(labels.size)
    order = np.argsort(gi, kind="stable")  # nodes grouped by graph (they usually are already)
    new_id = np.empty(n, dtype=np.int64)
    new_id[order] = np.arange(n)
    sizes = np.bincount(gi, minlength=n_graphs)
    node_off = np.concatenate([[0], np.cumsum(sizes)])
    src, dst, n_edge_rows = _edge_rows(folder, prefix, where, gi, new_id)
    n_loops = int(np.count_nonzero(src == dst))
    feats, n_edge_attr, edge_label_values = _edge_features(folder, prefix, n_edge_rows)
    if feats is None:
        ei, _ = undirected_edge_index(src, dst, n, remove_self_loops=remove_self_loops)  # sorted by source
        edge_attr = None
    else:
        ei, feats = _undirected_with_features(src, dst, feats, n, remove_self_loops, where)
        edge_attr = torch.from_numpy(feats).float()
    tag, tag_values, attr = _node_features(folder, prefix, where, n, order)

    raw = _read(folder, prefix, "graph_attributes", required=False)
    if raw is not None:  # graph-level regression targets: rows counted, not parsed (not used)
        got = sum(1 for ln in raw.split(b"\n") if ln.strip())
        if got != n_graphs:
            raise DataFileError(f"{where}_graph_attributes.txt: {got} rows, expected {n_graphs} (one per graph)")
        warnings.warn(f"{where}: {prefix}_graph_attributes.txt checked but not used (graph classification "
                      "uses the graph labels)", stacklevel=2)
    label_values, y = sorted_unique(labels, return_inverse=True)
    out = split_graphs(ei[0], ei[1], node_off, y, torch.from_numpy(tag), len(tag_values), attr, one_hot_tags,
                       edge_attr=edge_attr)
    n_empty = int(np.count_nonzero(sizes == 0))
    if n_empty:
        warnings.warn(f"{where}: {n_empty} of {n_graphs} graphs have no nodes (graph ids absent from the "
                      "graph indicator); kept as empty graphs", stacklevel=2)
    out.name = prefix
    out.label_values = [int(v) for v in label_values]
    out.tag_values = [int(v) for v in tag_values]
    out.num_self_loops_removed = n_loops if remove_self_loops else 0
    out.num_edge_attributes = n_edge_attr
    out.edge_label_values = edge_label_values
    return out


def _set_files(path: PathLike, name: Optional[str]) -> Tuple[Path, str]:
    """``(folder, NAME)`` of the set at ``path`` (see :func:`find_tu_prefix`); no set, or a set
    with regression targets and no class labels, is a :class:`DataFileError`."""
    found = find_tu_prefix(path, name)
    if found is None:
        raise DataFileError(f"{path}: no TU files (NAME_A.txt, NAME_graph_indicator.txt, "
                            f"NAME_graph_labels.txt{f' with NAME={name}' if name else ''}) here or under raw/")
    folder, prefix = found
    if _read(folder, prefix, "graph_attributes", required=False) is not None and \
            _read(folder, prefix, "graph_labels", required=False) is None:
        raise DataFileError(f"{folder}: {prefix} has graph_attributes (regression targets) and no "
                            "graph_labels: graph classification needs class labels")
    return folder, prefix


def _graph_ids(folder: Path, prefix: str, where: str) -> Tuple[np.ndarray, np.ndarray]:
    """Each node's graph (0-based, from the graph indicator) and the graph labels as written."""
    gi = parse_int_tokens(_read(folder, prefix, "graph_indicator"), f"{where}_graph_indicator.txt")
    labels = parse_int_tokens(_read(folder, prefix, "graph_labels"), f"{where}_graph_labels.txt")
    n_graphs = int(labels.size)
    if gi.size and (gi.min() < 1 or gi.max() > n_graphs):
        raise DataFileError(f"{where}_graph_indicator.txt: graph ids must be in 1..{n_graphs} (the number "
                            f"of graph labels), got {int(gi.min())}..{int(gi.max())}")
    return gi - 1, labels


def _edge_rows(folder: Path, prefix: str, where: str, gi: np.ndarray,
               new_id: np.ndarray) -> Tuple[np.ndarray, np.ndarray, int]:
    """``NAME_A.txt``'s rows as ``(src, dst)`` in the graph-grouped node numbering ``new_id``, and
    the number of rows; an id out of range or an edge between two graphs is a :class:`DataFileError`."""
    n = int(gi.size)
    a = parse_int_tokens(_read(folder, prefix, "A").replace(b",", b" "), f"{where}_A.txt")
    if a.size % 2:
        raise DataFileError(f"{where}_A.txt: every row must be an edge 'i, j' (odd number of ids)")
    a = a.reshape(-1, 2) - 1
    if a.size and (a.min() < 0 or a.max() >= n):
        raise DataFileError(f"{where}_A.txt: node ids must be in 1..{n} (the rows of the graph indicator), "
                            f"got {int(a.min()) + 1}..{int(a.max()) + 1}")
    src, dst = new_id[a[:, 0]], new_id[a[:, 1]]
    cross = gi[a[:, 0]] != gi[a[:, 1]]
    if cross.any():
        k = int(np.flatnonzero(cross)[0])
        raise DataFileError(f"{where}_A.txt: row {k + 1} joins nodes of graphs {int(gi[a[k, 0]]) + 1} and "
                            f"{int(gi[a[k, 1]]) + 1} ({int(cross.sum())} such edges)")
    return src, dst, a.shape[0]


def _node_features(folder: Path, prefix: str, where: str, n: int, order: np.ndarray):
    """``(tag (n,), tag values, node attributes (n, D) float or None)`` in graph-grouped node order
    (``order``); without node labels every node has tag 0."""
    tag_raw = _read(folder, prefix, "node_labels", required=False)
    if tag_raw is not None:
        rows = _rows(tag_raw, f"{where}_node_labels.txt", n)[order]
        _, tag = np.unique(rows, axis=0, return_inverse=True)
        tag_values = rows[:, 0] if rows.shape[1] == 1 else None
        tag = tag.reshape(-1).astype(np.int64)
        tag_values = (sorted_unique(tag_values).tolist() if tag_values is not None
                      else list(range(int(tag.max()) + 1 if n else 0)))
    else:
        tag, tag_values = np.zeros(n, dtype=np.int64), [0]
    attr_raw = _read(folder, prefix, "node_attributes", required=False)
    attr = (torch.from_numpy(_rows(attr_raw, f"{where}_node_attributes.txt", n, floats=True)[order]).float()
            if attr_raw is not None else None)
    return tag, tag_values, attr

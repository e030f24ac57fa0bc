"""The MUSAE/FEATHER release format of node-level social graphs (Rozemberczki et al.).

The release format (see ``datasets/social.md``) is three files:

* an edges CSV with a header naming two id columns, one *undirected* edge per row,
  each pair written once (``id_1,id_2``, ``node_1,node_2`` or ``from,to``); headerless, SNAP/KONECT
  text and other separators read too (:mod:`graphattn.data.edge_list`);
* a target CSV with one row per node: an id column (``id``; for Twitch ``new_id`` is the
  id the edges use, ``id`` there is the Twitch user id) and a label column;
* optionally a features JSON ``{"node id": [feature id, ...]}`` (sparse binary bag of
  features; Twitch lists may repeat an id).

Files may be plain or gzip-compressed (``.gz``). :func:`load_musae` reads any graph in
that format; :func:`graphattn.data.social.load_social_node_dataset` knows the published
ones by name.
"""
from __future__ import annotations

import math
import re
import warnings
from itertools import chain
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from graphattn.data.download import DataFileError, PathLike
from graphattn.data.edge_list import edge_row_number, read_edge_list
from graphattn.data.rawio import (MISSING_LABELS, JSONObject, csv_rows, delimiter_hint, label_codes, parse_json,
                                  read_text, sniff_delimiter, sorted_unique, undirected_edge_index)

__all__ = ["load_musae", "check_max_features", "read_target", "numeric_targets"]


_ID_COLUMNS = ("new_id", "id", "node_id", "node", "numeric_id")
_ID_NAME = re.compile(r"(^|[^A-Za-z])(id|ID|Id)$|[a-z](Id|ID)$")  # user_id, numeric id, userId; not "paid"
_TARGET_COLUMNS = ("target", "page_type", "ml_target", "mature", "label", "class", "y")


def _column(path, header: List[str], name: str, what: str) -> int:
    """Index of column ``name`` (exact, else the one case-insensitive match)."""
    lower = [h.lower() for h in header]
    if header.count(name) > 1:  # the same name twice (e.g. "id,target,target"): which one is meant?
        raise DataFileError(f"{path}: column {name!r} ({what}s) appears {header.count(name)} times in the header "
                            f"{header}; rename the columns")
    if name in header:
        return header.index(name)
    if lower.count(name.lower()) == 1:  # e.g. --target-col label for a 'Label' column
        return lower.index(name.lower())
    if lower.count(name.lower()) > 1:
        raise DataFileError(f"{path}: column {name!r} ({what}s) is ambiguous: "
                            f"{[h for h in header if h.lower() == name.lower()]} match it")
    raise DataFileError(f"{path}: no column {name!r} for the {what}s (columns: {header})")


def _target_columns(path, header: List[str], rows: List[List[str]], target_col: Optional[str],
                    id_col: Optional[str]) -> Tuple[int, int]:
    """``(id column, label column)`` of a target CSV: the named ones, else recognised (see
    :func:`load_musae`)."""
    lower = [h.lower() for h in header]
    if target_col is not None:
        t_col = _column(path, header, target_col, "label")
    else:
        t_col = next((lower.index(c) for c in _TARGET_COLUMNS if c in lower), None)
        if t_col is not None and lower.count(lower[t_col]) > 1:
            raise DataFileError(f"{path}: the label column {header[t_col]!r} appears {lower.count(lower[t_col])} "
                                f"times in the header {header}; rename the columns (or pass target_col=)")
        if t_col is None:  # the one column that is not named like an id (e.g. 'id,club')
            others = [i for i, h in enumerate(header) if lower[i] not in _ID_COLUMNS and not _ID_NAME.search(h)
                      and h and not h.startswith("Unnamed:") and (id_col is None or h.lower() != id_col.lower())]
            t_col = others[0] if len(others) == 1 and len(header) > 1 else None
        if t_col is None:
            hint = delimiter_hint(header[0]) if len(header) == 1 else ""
            raise DataFileError(f"{path}: cannot tell the label column among {header}"
                                + (hint or "; pass target_col="))
    if lower[t_col] in _ID_COLUMNS:
        raise DataFileError(f"{path}: column {header[t_col]!r} is an id column, not class labels; "
                            f"pass the column of class labels (columns: {header})")
    if id_col is not None:
        id_col = _column(path, header, id_col, "node id")
        if id_col == t_col:
            raise DataFileError(f"{path}: the node id column and the label column are both "
                                f"{header[t_col]!r}")
    else:
        # a known id name, else a name ending in "id" (numeric_id, user_id), else the first
        # column that is not the label column (a nameless one last: pandas' df.to_csv() / R's
        # write.csv put the row index there, ",user,label" — taking it gave nodes others' labels)
        named = [i for i in range(len(header)) if i != t_col and header[i] and not header[i].startswith("Unnamed:")]
        id_col = next((lower.index(c) for c in _ID_COLUMNS if c in lower and lower.index(c) != t_col),
                      next((i for i, h in enumerate(header) if i != t_col and _ID_NAME.search(h)), None))
        if id_col is None:
            def integers(i):
                return all(len(r) > i and r[i].strip().lstrip("-").isdigit() for r in rows)

            id_col = next((i for i in named if integers(i)),  # a named column of integer ids, else any
                          next((i for i in range(len(header)) if i != t_col), None))
            if id_col is not None and len(header) > 2:
                warnings.warn(f"{path}: node ids taken from column {header[id_col]!r} of {header} (no column is "
                              "named like an id); pass id_col= (--id-col) to choose another", stacklevel=3)
    if id_col is None:
        raise DataFileError(f"{path}: the only column {header[t_col]!r} is the label column; a "
                            "target CSV needs a node id column too (e.g. 'id,target')")
    return id_col, t_col


def numeric_targets(path, column: str, cells: List[str]) -> np.ndarray:
    """The float64 values of a numeric target column (regression), NaN where a cell is missing (empty,
    ``nan``, ``NA``, ``N/A``, ``null``, ``None``, ``?``, ``-``); a cell that is not a finite number is a
    :class:`DataFileError` naming its file row (the header is row 1), the column and the value."""
    out = np.empty(len(cells), dtype=np.float64)
    for i, cell in enumerate(cells):
        text = cell.strip()
        if text.lower() in MISSING_LABELS:
            out[i] = np.nan
            continue
        try:
            v = float(text)
        except ValueError:
            v = None
        if v is None or not math.isfinite(v):
            why = "is not a number" if v is None else "is infinite"
            raise DataFileError(f"{path}: row {i + 2}, column {column!r}: {text[:40]!r} {why} (a regression "
                                "target must be a finite number; an empty cell or nan is a missing value)")
        out[i] = v
    return out


def read_target(path: PathLike, target_col: Optional[str], id_col: Optional[str] = None, *,
                numeric: bool = False):
    """A target CSV in file order: ``(node ids (int64), labels (0..C-1, -1 missing), class names,
    id column name, label column name)``; the columns are named, else recognised (see
    :func:`load_musae`). ``numeric``: the labels are the column's numbers (float64, NaN missing;
    :func:`numeric_targets`) and there are no class names (``[]``)."""
    text = read_text(path)
    header, rows = csv_rows(text, str(path), sniff_delimiter(text))
    id_col, t_col = _target_columns(path, header, rows, target_col, id_col)
    width = len(header)
    bad = next((i for i, r in enumerate(rows) if len(r) != width), None)
    if bad is not None:
        raise DataFileError(f"{path}: row {bad + 2} has {len(rows[bad])} fields, header has "
                            f"{width} (truncated or malformed file?)")
    try:
        ids = np.array([int(r[id_col]) for r in rows], dtype=np.int64)
    except (ValueError, OverflowError) as exc:
        raise DataFileError(f"{path}: id column {header[id_col]!r} is not an int64 integer "
                            f"({exc}); name the node id column with id_col= (--id-col)") from exc
    if numeric:
        y, names = numeric_targets(path, header[t_col], [r[t_col] for r in rows]), []
    else:
        y, names = label_codes([r[t_col] for r in rows])
    ids, y, rows = drop_duplicate_ids(path, header, rows, ids, y, id_col, t_col)
    n_missing = int(np.count_nonzero(np.isnan(y) if numeric else y < 0))
    if rows and n_missing == len(rows):
        raise DataFileError(f"{path}: every one of the {len(rows)} labels in column "
                            f"{header[t_col]!r} is missing (empty or nan; NA/N/A/#N/A/null/None/?/- too "
                            "when the other labels are numbers or booleans)")
    labelled = len(rows) - n_missing
    if len(names) >= 20 and len(names) * 5 > labelled:  # fewer than 5 nodes per class on average
        warnings.warn(f"{path}: column {header[t_col]!r} has {len(names)} distinct values over {labelled} "
                      "labelled nodes, each made a class; if it is a quantity to regress (e.g. the page "
                      "traffic of MUSAE's Wikipedia sets), train with --task-type regression, bin it into classes, "
                      "or pass the column of class labels (target_col=, --target-col)", stacklevel=3)
    if n_missing:
        warnings.warn(f"{path}: {n_missing} of {len(rows)} nodes have no label (empty or nan; "
                      f"NA/N/A/#N/A/null/None/?/- among numeric or boolean labels) in column {header[t_col]!r}: they are kept unlabelled (y = "
                      f"{'NaN' if numeric else '-1'}, in no train/val/test mask)", stacklevel=3)
    return ids, y, names, header[id_col], header[t_col]


def _bad_feature(path, keys: List[str], lists: List[list]) -> DataFileError:
    """The error naming the first node whose feature list holds a non-int64 entry."""
    for key, feats in zip(keys, lists):
        for v in feats:
            if type(v) is not int:
                return DataFileError(f"{path}: node {key!r}: feature id {v!r} is not an integer "
                                     "(feature ids are integer indices of binary features)")
            if not 0 <= v < 2 ** 63:
                return DataFileError(f"{path}: node {key!r}: feature id {v} is "
                                     + ("negative" if v < 0 else "beyond the int64 range"))
    return DataFileError(f"{path}: malformed feature lists")


def _read_features(path: PathLike, id_index: Dict[int, int], num_nodes: int,
                   max_features: Optional[int], max_bytes: Optional[int] = None
                   ) -> Tuple[Tensor, np.ndarray, int, int]:
    """``(x (N, F) multi-hot, feature ids (F,), number of target nodes that have a row,
    number of distinct feature ids before any cut)``."""
    obj = parse_json(read_text(path), str(path), pairs=True)
    if not isinstance(obj, JSONObject):
        raise DataFileError(f"{path}: expected an object {{node id: [feature ids]}}")
    keys, nodes, lists, unknown, seen, repeated = [], [], [], 0, {}, []
    for key, feats in obj.pairs:
        try:
            nid = int(key)
        except ValueError:
            raise DataFileError(f"{path}: key {key!r} is not an integer node id") from None
        if not isinstance(feats, list):
            raise DataFileError(f"{path}: node {key!r}: expected a list of feature ids, got "
                                f"{type(feats).__name__} {str(feats)[:40]}")
        if nid in seen:  # a node listed twice: the same features once, different ones an error
            if sorted(map(str, seen[nid][1])) != sorted(map(str, feats)):
                raise DataFileError(f"{path}: node {nid} is listed twice with different features "
                                    f"(keys {seen[nid][0]!r} and {key!r})")
            repeated.append(nid)
            continue
        seen[nid] = (key, feats)
        node = id_index.get(nid)
        if node is None:
            unknown += 1
            continue
        keys.append(key)
        nodes.append(node)
        lists.append(feats)
    if repeated:
        warnings.warn(f"{path}: {len(repeated)} node(s) listed more than once with the same features, read "
                      f"once: {repeated[:10]}" + (" ..." if len(repeated) > 10 else ""), stacklevel=3)
    if unknown:
        warnings.warn(f"{path}: {unknown} feature rows name nodes absent from the target file; "
                      "ignored", stacklevel=3)
    lens = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    if set(map(type, chain.from_iterable(lists))) - {int}:  # floats, bools, strings, lists
        raise _bad_feature(path, keys, lists)
    try:
        c = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=int(lens.sum()))
    except OverflowError:
        raise _bad_feature(path, keys, lists) from None
    if c.size and c.min() < 0:
        raise _bad_feature(path, keys, lists)
    r = np.repeat(np.asarray(nodes, dtype=np.int64), lens)
    feature_ids, c = sorted_unique(c, return_inverse=True)  # sparse ids -> 0..F-1 (sorted)
    total = int(feature_ids.size)
    if max_bytes is not None and num_nodes * total * 4 > max_bytes:
        fit = max(1, int(max_bytes // (4 * max(num_nodes, 1))))
        if max_features is None or fit < max_features:
            warnings.warn(f"{path}: {total:,} feature ids x {num_nodes:,} nodes would make a dense x of "
                          f"{num_nodes * total * 4 / 2**30:.1f} GiB; keeping the {fit:,} most frequent ids "
                          f"(budget {max_bytes / 2**30:.2f} GiB; on the command line --max-features all keeps "
                          "every one)", stacklevel=3)
            max_features = fit
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
    return x, feature_ids, len(set(nodes)), total


def check_max_features(max_features: Optional[int]) -> None:
    """``ValueError`` unless ``max_features`` is ``None`` or a positive integer."""
    if max_features is None:
        return
    if isinstance(max_features, bool) or not isinstance(max_features, (int, np.integer)):
        raise ValueError(f"max_features must be a positive integer or None, got {max_features!r}")
    if max_features <= 0:
        raise ValueError(f"max_features must be a positive integer or None, got {max_features} "
                         "(it keeps the F most frequent feature ids)")


def drop_duplicate_ids(path, header: List[str], rows: List[List[str]], ids: np.ndarray, y: np.ndarray,
                       id_col: int, t_col: int):
    """``(ids, y, rows)`` without the repeats of a node id whose label agrees with its first row (a
    warning names the ids and the columns that differ); an id whose rows disagree on the label is a
    :class:`DataFileError` naming both file rows (the header is row 1). Public releases have such
    repeats: Twitch FR's target file lists ``new_id`` 1018 twice (identical rows) and 3754 twice (the
    ``views`` differ by one)."""
    order = np.argsort(ids, kind="stable")
    again = np.zeros(ids.size, dtype=bool)
    again[order[1:]] = ids[order[1:]] == ids[order[:-1]]
    if not again.any():
        return ids, y, rows
    first = {}
    for i in order.tolist():  # the first file row of every id (stable sort: file order within an id)
        first.setdefault(int(ids[i]), i)
    differ: Dict[int, List[str]] = {}
    for i in np.flatnonzero(again).tolist():
        j = first[int(ids[i])]
        if y[i] != y[j] and not (y[i] != y[i] and y[j] != y[j]):  # NaN = NaN: both missing
            raise DataFileError(f"{path}: node id {int(ids[i])} (column {header[id_col]!r}) has two labels in column "
                                f"{header[t_col]!r}: {rows[j][t_col]!r} on row {j + 2} and {rows[i][t_col]!r} on row "
                                f"{i + 2}; if {header[id_col]!r} is not the node id column, name it with id_col= "
                                "(--id-col)")
        differ.setdefault(int(ids[i]), [])
        differ[int(ids[i])] += [header[c] for c in range(len(header)) if rows[i][c] != rows[j][c]
                                and header[c] not in differ[int(ids[i])]]
    shown = ", ".join(f"{k}" + (f" (differing in {', '.join(v)})" if v else " (identical rows)")
                      for k, v in list(differ.items())[:10])
    warnings.warn(f"{path}: {len(differ)} node id(s) in column {header[id_col]!r} appear on more than one row "
                  f"with the same label; the first row of each is kept: {shown}"
                  + (" ..." if len(differ) > 10 else ""), stacklevel=4)
    keep = ~again
    return ids[keep], y[keep], [r for r, k in zip(rows, keep.tolist()) if k]


def load_musae(edges_path: PathLike, target_path: PathLike,
               features_path: Optional[PathLike] = None, target_col: Optional[str] = None,
               *, max_features: Optional[int] = None, remove_self_loops: bool = True,
               id_col: Optional[str] = None, max_feature_bytes: Optional[int] = None,
               numeric_target: bool = False) -> Data:
    """Read a graph in the MUSAE/FEATHER release format into a PyG ``Data``.

    Args:
        edges_path: an edge list, one edge per row (plain or ``.gz``): a CSV with a two-column
            header or none, a SNAP/KONECT text file (tab or space separated, ``#``/``%`` comments);
            every non-blank row must hold exactly two integer ids (a row with 1 or 3 fields
            is a :class:`DataFileError` naming the file and row).
        target_path: CSV with an id column (``id_col``, or auto-detected: ``new_id``,
            ``id``, ``node_id``, ``node``, ``numeric_id``, else the first name ending in
            ``id``, else the first column) and a label column (``target_col``, or
            auto-detected among ``target, page_type, ml_target, mature, label, class, y``).
        features_path: optional JSON ``{node id: [feature ids]}``; becomes a dense
            multi-hot float matrix ``x`` of shape (N, F), the distinct feature ids being
            re-numbered 0..F-1 in sorted order (original ids in ``data.feature_ids``).
            Feature ids must be non-negative int64 integers (``1.5``, ``true``, ``"x"`` are
            a :class:`DataFileError` naming the node). Nodes without a row get zeros (with a
            warning). When fewer than half of the nodes have a row, or no node has any
            feature (F = 0), the file is **not used**: a warning says why and the result is
            the no-features one (``x = None``, ``feature_source = "none"``,
            ``data.feature_fallback`` = the reason), on which the named-dataset and training
            paths compute structural features, as for a graph without a features file.
        max_features: keep only the F most frequent feature ids (memory control); a
            positive integer (else ``ValueError``).
        max_feature_bytes: a memory budget for the dense ``x``: when N × F float32 would
            exceed it, only the most frequent feature ids that fit are kept (with a warning;
            ``data.num_feature_ids`` is the number before the cut). ``None``: no budget.
        id_col: name of the node id column of the target CSV (case-insensitive).
        remove_self_loops: drop ``u,u`` rows (Facebook has 179).

    Labels: re-coded to 0..C-1, names in ``data.class_names``: numbers in numeric order
    when every present label is numeric (``"1"`` and ``"1.0"`` are one class ``"1"``),
    ``False < True`` for booleans in any case, else sorted strings. Missing labels (empty or
    ``nan``; ``NA``, ``N/A``, ``null``, ``None`` too when every other label is numeric or
    boolean, else those are classes) give ``y = -1`` (unlabelled: in no mask of
    :func:`~graphattn.data.social_splits.stratified_masks`) with a warning counting them;
    a file with no label at all is a :class:`DataFileError`. Every distinct value is a class:
    a column with 20 or more values and fewer than 5 labelled nodes per value on average (a
    quantity such as page traffic, not class labels) is loaded with a warning.

    ``numeric_target`` (regression): ``y`` is the label column's numbers instead, float32 of shape
    (N, 1), NaN where a cell is missing (:func:`numeric_targets`; a cell that is not a finite
    number is a :class:`DataFileError` naming row, column and value), ``class_names`` is ``[]``
    and ``task_names`` is ``[label column]``.

    A node id on several rows of the target file is read once when every row gives it the same
    label (a warning names it and the columns that differ); rows that disagree on the label are a
    :class:`DataFileError` naming both.

    Nodes are the rows of the target file, numbered 0..N-1 in increasing id order
    (``data.node_id`` keeps the file ids). Edges are made undirected (both directions),
    deduplicated and sorted.

    Shapes: ``x`` (N, F) or ``None``, ``y`` (N,) int64 in -1..C-1, ``edge_index`` (2, E).

    Returns ``Data(x, y, edge_index, num_nodes, has_features, feature_source, class_names,
    target_col, node_id[, feature_ids])``; ``x`` is ``None`` when no (usable) features file
    is given. :class:`DataFileError` is a ``ValueError``.
    """
    check_max_features(max_features)
    if max_feature_bytes is not None and (isinstance(max_feature_bytes, bool) or not isinstance(
            max_feature_bytes, (int, np.integer)) or max_feature_bytes <= 0):
        raise ValueError(f"max_feature_bytes must be a positive integer or None, got {max_feature_bytes!r}")
    target = read_target(target_path, target_col, id_col, numeric=numeric_target)  # warnings: at our caller
    ids, y, class_names, id_name, t_name = _sorted_nodes(target_path, *target)
    n = int(ids.size)
    s, d = _edges_as_node_indices(edges_path, target_path, ids, id_name)
    edge_index, n_loops = undirected_edge_index(s, d, n, remove_self_loops=remove_self_loops)
    y = torch.from_numpy(y).float().view(-1, 1) if numeric_target else torch.from_numpy(y)  # (N, 1) or (N,)
    data = Data(edge_index=torch.from_numpy(edge_index), y=y, num_nodes=n)
    data.class_names = list(class_names)
    data.target_col = t_name
    if numeric_target:
        data.task_names = [t_name]
    data.node_id = torch.from_numpy(ids)
    data.num_self_loops_removed = n_loops if remove_self_loops else 0
    data.x, data.has_features, data.feature_source = None, False, "none"
    if features_path is not None:
        index = {int(v): i for i, v in enumerate(ids.tolist())}
        _attach_features(data, features_path, _read_features(features_path, index, n, max_features,
                                                             max_feature_bytes))
    return data


def _sorted_nodes(target_path: PathLike, ids: np.ndarray, y: np.ndarray, class_names, id_name: str,
                  t_name: str):
    """:func:`read_target`'s result with the nodes in increasing id order (ids are unique there, see
    :func:`drop_duplicate_ids`); an empty file is a :class:`DataFileError`."""
    order = np.argsort(ids, kind="stable")
    ids, y = ids[order], y[order]
    if ids.size and np.any(ids[1:] == ids[:-1]):
        dup = ids[1:][ids[1:] == ids[:-1]][:5].tolist()
        raise DataFileError(f"{target_path}: duplicated node ids in column {id_name!r}: {dup}")
    if ids.size == 0:
        raise DataFileError(f"{target_path}: no nodes")
    return ids, y, class_names, id_name, t_name


def _edges_as_node_indices(edges_path: PathLike, target_path: PathLike, ids: np.ndarray,
                           id_name: str) -> Tuple[np.ndarray, np.ndarray]:
    """The edges CSV's endpoints as node indices 0..N-1 (``ids``: the sorted node ids); an id
    that is no node is a :class:`DataFileError` naming the row."""
    n = int(ids.size)
    _, src, dst = read_edge_list(edges_path)
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
            f"{edges_path}: edge row {edge_row_number(edges_path, k)} ({src[k]},{dst[k]}) names a node id that is not in "
            f"column {id_name!r} of {target_path} ({int(np.count_nonzero(bad))} such rows); "
            "wrong target file, or the edges use another id column?")
    return s, d


def _attach_features(data: Data, features_path: PathLike, read) -> None:
    """``data.x`` and the feature fields from :func:`_read_features`' result ``read``, or, when
    too few nodes have a row or no feature id is listed, ``data.feature_fallback`` (the reason;
    ``x`` stays ``None``). Warnings point at the caller of :func:`load_musae`."""
    n = data.num_nodes
    x, feature_ids, matched, total = read
    reason = None
    if 2 * matched < n:
        reason = f"features for only {matched} of {n} nodes (fewer than half)"
    elif x.size(1) == 0:
        reason = f"no feature ids at all in the {matched} feature lists (0 feature columns)"
    if reason is not None:
        warnings.warn(f"{features_path}: {reason}; not using the file: x = None as without a "
                      "features file (the training and named-dataset paths then use "
                      "structural features)", stacklevel=3)
        data.feature_fallback = reason
        return
    if matched < n:
        warnings.warn(f"{features_path}: features for {matched} of {n} nodes; the others "
                      "get all-zero rows", stacklevel=3)
    data.x = x
    data.feature_ids = torch.from_numpy(feature_ids)
    data.num_feature_ids = total
    data.has_features, data.feature_source = True, "file"


"""Graph-level ego-net sets in the Karate Club JSON format (Deezer ego-nets, Reddit threads).

A JSON object ``{graph id: [[u, v], ...]}`` of local edge lists plus a CSV ``id,target``,
as separate files or as members of one ``.zip``; read by :func:`load_ego_json` into a
:class:`~graphattn.data.tu_text.GraphList`.
"""
from __future__ import annotations

import warnings
import zipfile
from itertools import chain
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import torch
from torch_geometric.data import Data

from graphattn.data.download import DataFileError, PathLike
from graphattn.data.rawio import (JSONObject, as_number, csv_rows, parse_json, read_text, sorted_unique,
                                  undirected_edge_index)
from graphattn.data.tu_text import GraphList

__all__ = ["load_ego_json"]


def _targets(header: List[str], rows: List[List[str]], what: str) -> Dict[int, int]:
    """``{graph id: integer label}`` of the target CSV (``id`` column, else the first;
    ``target`` column, else the last), with errors naming ``what`` and the row."""
    tcol = header.index("target") if "target" in header else len(header) - 1
    icol = header.index("id") if "id" in header else 0
    out: Dict[int, int] = {}
    row_of: Dict[int, int] = {}
    repeated = []
    for k, r in enumerate(rows):
        if len(r) != len(header):
            raise DataFileError(f"{what}: row {k + 2} has {len(r)} fields, header {header} has "
                                f"{len(header)}")
        gid, lab = as_number(r[icol].strip()), as_number(r[tcol].strip())
        if not isinstance(gid, int) or not isinstance(lab, int):
            raise DataFileError(f"{what}: row {k + 2}: graph id {r[icol]!r} and target "
                                f"{r[tcol]!r} (column {header[tcol]!r}) must be integers; "
                                "string or missing labels are not supported in this format")
        if gid in out:  # the same label again: read once; another label: which one is meant?
            if out[gid] != lab:
                raise DataFileError(f"{what}: graph id {gid} has two labels: {out[gid]} on row {row_of[gid]} and "
                                    f"{lab} on row {k + 2}")
            repeated.append(gid)
            continue
        out[gid], row_of[gid] = lab, k + 2
    if repeated:
        warnings.warn(f"{what}: {len(repeated)} graph id(s) on more than one row with the same label, read once: "
                      f"{repeated[:10]}" + (" ..." if len(repeated) > 10 else ""), stacklevel=3)
    return out


def _edge_lists(obj, what: str) -> Tuple[List[int], List[list]]:
    """Graph ids (sorted) and their edge lists ``[[u, v], ...]``, validated."""
    if not isinstance(obj, JSONObject):
        raise DataFileError(f"{what}: expected an object {{graph id: [[u, v], ...]}}")
    by_id: Dict[int, list] = {}
    repeated = []
    for key, edges in obj.pairs:
        try:
            gid = int(key)
        except ValueError:
            raise DataFileError(f"{what}: key {key!r} is not an integer graph id") from None
        if not isinstance(edges, list):
            raise DataFileError(f"{what}: graph {key}: expected a list of [u, v] pairs, got "
                                f"{type(edges).__name__}")
        if gid in by_id:  # the same edges again: read once; other edges: which graph is meant?
            if by_id[gid] != edges:
                raise DataFileError(f"{what}: graph id {gid} appears twice with different edges (key {key!r})")
            repeated.append(gid)
            continue
        by_id[gid] = edges
    if repeated:
        warnings.warn(f"{what}: {len(repeated)} graph id(s) listed more than once with the same edges, read once: "
                      f"{repeated[:10]}" + (" ..." if len(repeated) > 10 else ""), stacklevel=3)
    ids = sorted(by_id)
    lists = [by_id[g] for g in ids]
    pairs = list(chain.from_iterable(lists))
    ok = (set(map(type, pairs)) <= {list} and set(map(len, pairs)) <= {2}
          and set(map(type, chain.from_iterable(pairs))) <= {int})
    if not ok:
        for gid, edges in zip(ids, lists):
            for e in edges:
                if not (isinstance(e, list) and len(e) == 2 and all(type(v) is int for v in e)):
                    raise DataFileError(f"{what}: graph {gid}: edge {str(e)[:40]} is not a pair "
                                        "[u, v] of integer node ids")
    return ids, lists


def load_ego_json(graphs: PathLike, target: PathLike, *, member_prefix: str = "",
                  remove_self_loops: bool = True) -> GraphList:
    """Karate Club graph-level format: JSON ``{graph id: [[u, v], ...]}`` + CSV ``id,target``.

    ``graphs`` may be a ``.json``/``.json.gz`` file, or a ``.zip`` holding both files (then
    ``target`` names the CSV member, e.g. ``deezer_egos/deezer_target.csv``). Node ids are
    local and must cover 0..n-1; graphs are ordered by integer id. Targets must be
    integers (re-coded to 0..C-1 in sorted order, originals in ``label_values``); a
    non-integer one is a :class:`DataFileError` naming the file and row. A graph id listed twice
    is read once when both give the same label (or edges), with a warning; otherwise it is a
    :class:`DataFileError` naming both rows (keys).

    A graph with an empty edge list has **0 nodes** (the format cannot list isolated
    nodes). Such graphs are kept, with a warning counting them: the graph pipeline
    (structural features, batching, every readout) handles empty graphs, whose pooled
    representation is the readout of nothing (zeros / global tokens only).

    Shapes: each ``Data`` has ``edge_index`` (2, E_g) (both directions, deduplicated),
    ``y`` (1,) and ``num_nodes``.
    """
    graphs = Path(graphs)
    jtext, ttext, jwhat, twhat = _read_files(graphs, target)
    ids, lists = _edge_lists(parse_json(jtext, jwhat, pairs=True), jwhat)
    header, rows = csv_rows(ttext, twhat)
    targets = _targets(header, rows, twhat)
    missing = [i for i in ids if i not in targets]
    if missing or len(targets) != len(ids):
        extra = sorted(set(targets) - set(ids))[:3]
        raise DataFileError(f"{jwhat}: {len(ids)} graphs, {len(targets)} targets in {twhat} "
                            f"(first graphs without target: {missing[:3]}; targets without "
                            f"graph: {extra})")
    label_values, y = sorted_unique(np.array([targets[i] for i in ids]), return_inverse=True)
    pairs, g_of_e, sizes = _local_edges(ids, lists, jwhat)
    n_empty = int(np.count_nonzero(sizes == 0))
    if n_empty:
        first = [ids[i] for i in np.flatnonzero(sizes == 0)[:5].tolist()]
        warnings.warn(f"{jwhat}: {n_empty} of {len(ids)} graphs have no edges, hence 0 nodes "
                      f"(ids {first}...); kept as empty graphs", stacklevel=2)
    off = np.concatenate([[0], np.cumsum(sizes)])
    src, dst = pairs[:, 0] + off[g_of_e], pairs[:, 1] + off[g_of_e]
    loops_total = int(np.count_nonzero(src == dst))
    ei, _ = undirected_edge_index(src, dst, int(off[-1]), remove_self_loops=remove_self_loops)
    e_off = np.searchsorted(ei[0], off)
    out = GraphList()
    for g in range(len(ids)):
        a, b = int(off[g]), int(off[g + 1])
        local = torch.from_numpy(ei[:, e_off[g]:e_off[g + 1]] - a)
        out.append(Data(edge_index=local, y=torch.tensor([int(y[g])]), num_nodes=b - a))
    out.name = graphs.name.split(".")[0]
    out.label_values = [int(v) for v in label_values]
    out.tag_values = [0]
    out.num_self_loops_removed = loops_total if remove_self_loops else 0
    return out


def _read_files(graphs: Path, target: PathLike) -> Tuple[str, str, str, str]:
    """``(JSON text, target CSV text, how to name each in errors)``, from the two files or from
    the members of the ``.zip`` ``graphs`` (``target``: the CSV member's name)."""
    if graphs.suffix != ".zip":
        return read_text(graphs), read_text(target), str(graphs), str(target)
    try:
        with zipfile.ZipFile(graphs) as zf:
            names = zf.namelist()
            # skip macOS resource-fork entries (__MACOSX/..., ._name) a re-zipped archive holds
            jname = next((n for n in names if n.endswith(".json") and not n.startswith("__MACOSX/")
                          and not Path(n).name.startswith("._")), None)
            if jname is None or str(target) not in names:
                raise DataFileError(f"{graphs}: expected a .json member and {target}; "
                                    f"has {names}")
            jtext, ttext = zf.read(jname).decode("utf-8-sig"), zf.read(str(target)).decode("utf-8-sig")
    except zipfile.BadZipFile as exc:
        raise DataFileError(f"{graphs}: corrupt zip ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{graphs}: a member is not UTF-8 text ({exc.reason})") from exc
    return jtext, ttext, f"{graphs}:{jname}", f"{graphs}:{target}"


def _local_edges(ids: List[int], lists: List[list], jwhat: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(pairs (E, 2) of local node ids, each edge's graph, nodes per graph)``; the node ids of
    every graph must cover 0..n-1 (n = its largest id + 1), else a :class:`DataFileError`."""
    lens = np.fromiter((len(e) for e in lists), dtype=np.int64, count=len(lists))
    try:
        flat = np.fromiter(chain.from_iterable(chain.from_iterable(lists)), dtype=np.int64,
                           count=2 * int(lens.sum()))
    except OverflowError:
        raise DataFileError(f"{jwhat}: a node id beyond the int64 range") from None
    pairs = flat.reshape(-1, 2)
    g_of_e = np.repeat(np.arange(len(ids)), lens)
    if pairs.size and pairs.min() < 0:
        raise DataFileError(f"{jwhat}: negative node id")
    # nodes per graph = max id + 1, and the ids must cover 0..n-1 (no gaps)
    sizes = np.zeros(len(ids), dtype=np.int64)
    np.maximum.at(sizes, g_of_e, pairs.max(1) + 1)
    gap = sizes > 2 * lens  # more nodes than the edges can touch (also keeps `big` small)
    if not np.any(gap):
        big = int(sizes.max()) if sizes.size else 1
        present = sorted_unique(np.concatenate([g_of_e * big + pairs[:, 0],
                                                g_of_e * big + pairs[:, 1]]))
        gap = np.bincount(present // max(big, 1), minlength=len(ids)) != sizes
    if np.any(gap):
        g = int(np.flatnonzero(gap)[0])
        raise DataFileError(f"{jwhat}: graph {ids[g]} node ids are not 0..{sizes[g] - 1}")
    return pairs, g_of_e, sizes

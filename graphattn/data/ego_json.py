"""Graph-level ego-net sets in the Karate Club JSON format (Deezer ego-nets, Reddit threads).

A JSON object ``{graph id: [[u, v], ...]}`` of local edge lists plus a CSV ``id,target``,
as separate files or as members of one ``.zip``; read by :func:`load_ego_json` into a
:class:`~graphattn.data.tu_text.GraphList`.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from .download import DataFileError, PathLike
from .rawio import csv_rows, parse_json, read_text, sorted_unique, undirected_edge_index
from .tu_text import GraphList

__all__ = ["load_ego_json"]


def load_ego_json(graphs: PathLike, target: PathLike, *, member_prefix: str = "",
                  remove_self_loops: bool = True) -> GraphList:
    """Karate Club graph-level format: JSON ``{graph id: [[u, v], ...]}`` + CSV ``id,target``.

    ``graphs`` may be a ``.json``/``.json.gz`` file, or a ``.zip`` holding both files (then
    ``target`` names the CSV member, e.g. ``deezer_egos/deezer_target.csv``). Node ids are
    local and must cover 0..n-1; graphs are ordered by integer id.
    """
    graphs = Path(graphs)
    if graphs.suffix == ".zip":
        try:
            with zipfile.ZipFile(graphs) as zf:
                names = zf.namelist()
                jname = next((n for n in names if n.endswith(".json")), None)
                if jname is None or str(target) not in names:
                    raise DataFileError(f"{graphs}: expected a .json member and {target}; "
                                        f"has {names}")
                jtext, ttext = zf.read(jname).decode(), zf.read(str(target)).decode()
        except zipfile.BadZipFile as exc:
            raise DataFileError(f"{graphs}: corrupt zip ({exc})") from exc
    else:
        jtext, ttext = read_text(graphs), read_text(target)
    obj = parse_json(jtext, str(graphs))
    header, rows = csv_rows(ttext, str(target))
    tcol = header.index("target") if "target" in header else len(header) - 1
    targets = {int(r[0]): int(r[tcol]) for r in rows}
    ids = sorted(int(k) for k in obj)
    missing = [i for i in ids if i not in targets]
    if missing or len(targets) != len(ids):
        raise DataFileError(f"{graphs}: {len(ids)} graphs, {len(targets)} targets "
                            f"(first graph without target: {missing[:3]})")
    label_values, y = sorted_unique(np.array([targets[i] for i in ids]), return_inverse=True)
    lists = [obj[str(gid)] for gid in ids]
    lens = np.fromiter((len(e) for e in lists), dtype=np.int64, count=len(lists))
    flat = np.fromiter((v for e in lists for pair in e for v in pair), dtype=np.int64,
                       count=2 * int(lens.sum()))
    if flat.size != 2 * lens.sum():
        raise DataFileError(f"{graphs}: every edge must be a pair [u, v]")
    pairs = flat.reshape(-1, 2)
    g_of_e = np.repeat(np.arange(len(ids)), lens)
    if pairs.size and pairs.min() < 0:
        raise DataFileError(f"{graphs}: negative node id")
    # nodes per graph = max id + 1, and the ids must cover 0..n-1 (no gaps)
    big = int(pairs.max()) + 1 if pairs.size else 1
    sizes = np.zeros(len(ids), dtype=np.int64)
    np.maximum.at(sizes, g_of_e, pairs.max(1) + 1)
    present = sorted_unique(np.concatenate([g_of_e * big + pairs[:, 0],
                                            g_of_e * big + pairs[:, 1]]))
    distinct = np.bincount(present // big, minlength=len(ids))
    if np.any(distinct != sizes):
        g = int(np.flatnonzero(distinct != sizes)[0])
        raise DataFileError(f"{graphs}: graph {ids[g]} node ids are not 0..{sizes[g] - 1}")
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

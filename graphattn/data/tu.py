"""Graph-level social (and small molecular) datasets: DGCNN/GIN text format, ego-net JSON, TU.

DGCNN/GIN text format (``IMDBBINARY.txt``, ``COLLAB.txt``..., plain or ``.gz``)::

    G                      number of graphs
    n l                    per graph: number of nodes, graph label
    t m v_1 ... v_m [a..]  per node: tag, neighbour count, 0-based local neighbours,
                           optionally continuous attributes

:func:`load_tu_text` returns a :class:`GraphList` (a ``list`` of PyG ``Data``) with

* ``y`` (1,) long — labels re-coded to 0..C-1 in sorted numeric order (REDDIT-BINARY and
  MUTAG use {0, 2} in these files; the original values are in ``GraphList.label_values``);
* ``tag`` (N,) long — node tags re-coded to 0..T-1 in sorted order; ``x`` is the one-hot
  of ``tag`` when T > 1 (molecular sets), else ``None`` (the social sets have one tag);
* ``edge_index`` — both directions, deduplicated, sorted; **self-loops removed** by default
  (COLLAB has 2,837; attention layers add the self-connections they need);
* ``node_attr`` (N, D) float when the file has continuous attributes.

The 10-fold split files ``10fold_idx/train_idx-K.txt`` / ``test_idx-K.txt`` are read by
:func:`load_tu_folds`. Social graphs have no node features: :func:`add_structural_features`
adds degree features and random-walk PE. Users with the TU original format
(``NAME_A.txt``, ``NAME_graph_indicator.txt``...) use :func:`load_tu_dataset`, a thin wrapper
of PyG's ``TUDataset``.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import warnings
import zipfile
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from .download import DataFileError, data_root, find_file
from .social import (parse_int_tokens, random_walk_pe, read_bytes, sorted_unique,
                     undirected_edge_index)

PathLike = Union[str, os.PathLike]

__all__ = [
    "GraphList", "load_tu_text", "load_tu_folds", "stratified_folds", "load_ego_json",
    "load_social_graph_dataset", "load_tu_dataset", "add_structural_features",
    "SOCIAL_GRAPH_DATASETS",
]


class GraphList(list):
    """A ``list`` of ``Data`` graphs plus dataset facts (``num_classes``, label values...)."""

    name: str = ""
    label_values: List[int] = []
    tag_values: List[int] = []
    num_self_loops_removed: int = 0
    folds: Optional[List[Tuple[Tensor, Tensor]]] = None

    @property
    def num_classes(self) -> int:
        return len(self.label_values)

    @property
    def num_tags(self) -> int:
        return len(self.tag_values)

    @property
    def y(self) -> Tensor:
        return torch.cat([d.y for d in self]) if len(self) else torch.zeros(0, dtype=torch.long)


# --------------------------------------------------------------------------- text format


def _walk(tok: np.ndarray, path):
    """Token positions of node lines and graph headers, per-graph (n, label), end position.

    Sequential (each line's length depends on its neighbour count) but cheap: ~0.1 s for
    COLLAB's 372k node lines."""
    mv = memoryview(tok)
    total = len(mv)
    if total == 0:
        raise DataFileError(f"{path}: empty file")
    n_graphs = mv[0]
    if n_graphs < 0:
        raise DataFileError(f"{path}: negative graph count {n_graphs}")
    sizes, labels, pos, heads = [], [], [], []
    app = pos.append
    p = 1
    for g in range(n_graphs):
        if p + 2 > total:
            raise DataFileError(f"{path}: truncated: declares {n_graphs} graphs but ends in the "
                                f"header of graph {g}")
        n, lab = mv[p], mv[p + 1]
        heads.append(p)
        if n < 0:
            raise DataFileError(f"{path}: graph {g} declares {n} nodes")
        sizes.append(n)
        labels.append(lab)
        p += 2
        for i in range(n):
            if p + 2 > total:
                raise DataFileError(f"{path}: truncated: graph {g} declares {n} nodes but the "
                                    f"file ends at node {i}")
            app(p)
            m = mv[p + 1]
            if m < 0:
                raise DataFileError(f"{path}: graph {g} node {i}: negative neighbour count")
            p += 2 + m
            if p > total:
                raise DataFileError(f"{path}: truncated: node {i} of graph {g} declares "
                                    f"{mv[pos[-1] + 1]} neighbours, more than the file holds")
    return (np.asarray(pos, dtype=np.int64), np.asarray(heads, dtype=np.int64),
            np.asarray(sizes, dtype=np.int64), np.asarray(labels, dtype=np.int64), p)


def _parse_lines(text: str, path):
    """Slow, line-aware parser for files with node attributes (or odd layouts)."""
    lines = [ln.split() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    if not lines:
        raise DataFileError(f"{path}: empty file")
    it = iter(lines)
    try:
        n_graphs = int(next(it)[0])
    except ValueError:
        raise DataFileError(f"{path}: first line must be the number of graphs") from None
    sizes, labels, tags, nbr_counts, nbrs, attrs = [], [], [], [], [], []
    for g in range(n_graphs):
        head = next(it, None)
        if head is None:
            raise DataFileError(f"{path}: truncated: declares {n_graphs} graphs, found {g}")
        try:
            n, lab = int(head[0]), int(head[1])
        except (ValueError, IndexError):
            raise DataFileError(f"{path}: graph {g}: expected a header 'n label', got "
                                f"{' '.join(head[:4])!r} (node count of the previous graph "
                                "wrong?)") from None
        sizes.append(n)
        labels.append(lab)
        for i in range(n):
            row = next(it, None)
            if row is None:
                raise DataFileError(f"{path}: truncated: graph {g} declares {n} nodes, found {i}")
            try:
                t, m = int(row[0]), int(row[1])
            except (ValueError, IndexError):
                raise DataFileError(f"{path}: graph {g} node {i}: expected 'tag count "
                                    f"neighbours...', got {' '.join(row[:4])!r}") from None
            if m < 0 or len(row) < 2 + m:
                raise DataFileError(f"{path}: graph {g} node {i} declares {m} neighbours but "
                                    f"lists {len(row) - 2}")
            tags.append(t)
            nbr_counts.append(m)
            nbrs.extend(int(v) for v in row[2:2 + m])
            attrs.append([float(v) for v in row[2 + m:]])
    if next(it, None) is not None:
        raise DataFileError(f"{path}: lines left after the {n_graphs} declared graphs (a node "
                            "count or the graph count is wrong)")
    dims = {len(a) for a in attrs}
    if len(dims) > 1:
        raise DataFileError(f"{path}: node attribute rows have different lengths {sorted(dims)}")
    attr = np.asarray(attrs, dtype=np.float32) if dims and dims != {0} else None
    return (np.asarray(sizes, np.int64), np.asarray(labels, np.int64), np.asarray(tags, np.int64),
            np.asarray(nbr_counts, np.int64), np.asarray(nbrs, np.int64), attr)


def _unique_pairs(src: np.ndarray, dst: np.ndarray, n: int) -> Tuple[np.ndarray, np.ndarray]:
    key = sorted_unique(src * max(n, 1) + dst)
    return key // max(n, 1), key % max(n, 1)


def _is_symmetric(src: np.ndarray, dst: np.ndarray, n: int) -> bool:
    """Randomised O(E) test that the set of (src, dst) pairs (no duplicates) is symmetric.

    Per node i, sum of w[j] over out-edges (i, j) must equal the sum over in-edges (j, i)
    for random weights w in [1, 2); a missing reverse edge changes a sum by >= 1.
    """
    if src.size == 0:
        return True
    w = np.random.default_rng(12345).random(n) + 1.0
    a = np.bincount(src, weights=w[dst], minlength=n)
    b = np.bincount(dst, weights=w[src], minlength=n)
    return bool(np.allclose(a, b, rtol=0, atol=1e-6))


def load_tu_text(path: PathLike, *, remove_self_loops: bool = True,
                 one_hot_tags: bool = True) -> GraphList:
    """Read a DGCNN/GIN text file (plain or ``.gz``) into a :class:`GraphList`.

    Vectorised: the whole file is tokenised by numpy at C speed; only a cheap walk over
    node lines runs in Python. The declared graph/node/neighbour counts are checked
    (a truncated file fails with a :class:`DataFileError` naming the graph), neighbour
    indices must lie in 0..n-1, and edges are symmetrised and deduplicated.
    """
    path = Path(path)
    raw = read_bytes(path)
    try:
        tok = np.fromstring(raw, dtype=np.int64, sep=" ")  # noqa: NPY201
        fast = True
    except ValueError:
        fast = False  # float attributes (or garbage): the line parser says which
    node_attr = None
    if fast:
        try:
            pos, head, sizes, labels, end = _walk(tok, path)
        except DataFileError:
            end = -1
        # integer node attributes or a damaged file: the line-aware parser sorts it out
        # and names the offending graph/line
        fast = end == tok.size
    if fast:
        tags = tok[pos]
        cnt = tok[pos + 1]
        # every token is a count, a graph header, a tag, a neighbour count or a neighbour:
        # blank out the non-neighbours and compress (cheaper than a gather)
        keep = np.ones(tok.size, dtype=bool)
        keep[0] = False
        keep[head], keep[head + 1] = False, False
        keep[pos], keep[pos + 1] = False, False
        nbrs = tok[keep]
    else:
        sizes, labels, tags, cnt, nbrs, node_attr = _parse_lines(raw.decode("utf-8", "replace"),
                                                                  path)
    n_graphs, n_total = sizes.size, int(sizes.sum())
    node_off = np.concatenate([[0], np.cumsum(sizes)])
    # per-edge quantities via np.repeat (sequential memory access, no random gathers)
    lim = np.repeat(np.repeat(sizes, sizes), cnt)
    bad = (nbrs < 0) | (nbrs >= lim)
    if np.any(bad):
        k = int(np.flatnonzero(bad)[0])
        node = int(np.searchsorted(np.cumsum(cnt), k, side="right"))
        g = int(np.searchsorted(node_off, node, side="right") - 1)
        raise DataFileError(f"{path}: graph {g} (n={sizes[g]}) node {node - int(node_off[g])} "
                            f"lists neighbour {int(nbrs[k])}, out of range")
    del lim, bad
    src = np.repeat(np.arange(n_total, dtype=np.int64), cnt)
    dst = nbrs + np.repeat(np.repeat(node_off[:-1], sizes), cnt)
    del nbrs
    loops = src == dst
    n_loops = int(np.count_nonzero(loops))
    if remove_self_loops and n_loops:
        keep = ~loops
        src, dst = src[keep], dst[keep]
    # src is non-decreasing; the edge list is a sorted set iff dst increases within a node
    if src.size > 1 and not np.all((np.diff(dst) > 0) | (np.diff(src) > 0)):
        src, dst = _unique_pairs(src, dst, n_total)
    if not _is_symmetric(src, dst, n_total):
        src, dst = _unique_pairs(np.concatenate([src, dst]), np.concatenate([dst, src]), n_total)
    e_off = np.searchsorted(src, node_off)

    label_values, y = sorted_unique(labels, return_inverse=True)
    tag_values, tag = sorted_unique(tags, return_inverse=True)
    n_tags = int(tag_values.size)
    tag_all = torch.from_numpy(tag.astype(np.int64))
    attr_all = torch.from_numpy(node_attr) if node_attr is not None else None
    out = GraphList()
    for g in range(n_graphs):
        a, b = int(node_off[g]), int(node_off[g + 1])
        ea, eb = int(e_off[g]), int(e_off[g + 1])
        ei = np.empty((2, eb - ea), dtype=np.int64)
        np.subtract(src[ea:eb], a, out=ei[0])
        np.subtract(dst[ea:eb], a, out=ei[1])
        data = Data(edge_index=torch.from_numpy(ei), y=torch.tensor([int(y[g])]),
                    num_nodes=b - a)
        data.tag = tag_all[a:b].clone()
        if one_hot_tags and n_tags > 1:
            data.x = torch.nn.functional.one_hot(data.tag, n_tags).float()
        if attr_all is not None:
            data.node_attr = attr_all[a:b].clone()
        out.append(data)
    out.name = path.name.split(".")[0]
    out.label_values = [int(v) for v in label_values]
    out.tag_values = [int(v) for v in tag_values]
    out.num_self_loops_removed = n_loops if remove_self_loops else 0
    return out


def load_tu_folds(folder: PathLike, num_graphs: Optional[int] = None
                  ) -> List[Tuple[Tensor, Tensor]]:
    """``[(train_idx, test_idx), ...]`` from ``folder`` (or ``folder/10fold_idx``).

    Files ``train_idx-K.txt`` / ``test_idx-K.txt``, K = 1, 2, ...: 0-based graph indices,
    one per line. Each fold is checked: train and test disjoint, no duplicates, and, when
    ``num_graphs`` is given, indices in range and train + test = all graphs.
    """
    folder = Path(folder)
    if (folder / "10fold_idx").is_dir():
        folder = folder / "10fold_idx"
    ks = sorted(int(m.group(1)) for f in folder.glob("test_idx-*.txt")
                if (m := re.fullmatch(r"test_idx-(\d+)\.txt", f.name)))
    if not ks:
        raise DataFileError(f"{folder}: no test_idx-K.txt files")
    folds = []
    for k in ks:
        parts = []
        for kind in ("train", "test"):
            f = folder / f"{kind}_idx-{k}.txt"
            if not f.is_file():
                raise DataFileError(f"{f} is missing")
            idx = parse_int_tokens(read_bytes(f), str(f))
            if sorted_unique(idx).size != idx.size:
                raise DataFileError(f"{f}: duplicated graph indices")
            if num_graphs is not None and idx.size and (idx.min() < 0 or idx.max() >= num_graphs):
                raise DataFileError(f"{f}: index out of range for {num_graphs} graphs")
            parts.append(idx)
        tr, te = parts
        if np.intersect1d(tr, te).size:
            raise DataFileError(f"fold {k} in {folder}: train and test overlap")
        if num_graphs is not None and tr.size + te.size != num_graphs:
            raise DataFileError(f"fold {k} in {folder}: {tr.size}+{te.size} indices, "
                                f"expected {num_graphs} graphs")
        folds.append((torch.from_numpy(tr), torch.from_numpy(te)))
    return folds


def stratified_folds(y: Tensor, n_folds: int = 10, seed: int = 0) -> List[Tuple[Tensor, Tensor]]:
    """Seeded stratified K-fold split (scikit-learn), for sets that ship no fold files."""
    from sklearn.model_selection import StratifiedKFold

    y = torch.as_tensor(y).view(-1).cpu().numpy()
    skf = StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=seed)
    return [(torch.from_numpy(tr.astype(np.int64)), torch.from_numpy(te.astype(np.int64)))
            for tr, te in skf.split(np.zeros(len(y)), y)]


# --------------------------------------------------------------------------- ego-net JSON


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
        jtext, ttext = read_bytes(graphs).decode(), read_bytes(target).decode("utf-8-sig")
    try:
        obj = json.loads(jtext)
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{graphs}: invalid JSON (truncated?): {exc}") from exc
    rows = [r for r in csv.reader(io.StringIO(ttext)) if r]
    header, rows = rows[0], rows[1:]
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


# --------------------------------------------------------------------------- named datasets

_IHGNN = ("https://raw.githubusercontent.com/yeweiysh/IHGNN/"
          "dcb2c23cdc06f3ed8cc1dd0f0dced9ddd9156bad/data")
_DS = "https://raw.githubusercontent.com/benedekrozemberczki"

#: name -> (folder, file stem, expected (graphs, nodes, undirected edges w/o loops, classes))
SOCIAL_GRAPH_DATASETS = {
    "imdb-binary": ("imdb_binary", "IMDBBINARY", (1000, 19773, 96531, 2)),
    "imdb-multi": ("imdb_multi", "IMDBMULTI", (1500, None, None, 3)),  # TU: ~19.5k / ~98.9k
    "reddit-binary": ("reddit_binary", "REDDIT-BINARY", (2000, 859254, 995508, 2)),
    "collab": ("collab", "COLLAB", (5000, 372474, 12286079, 3)),
    "mutag": ("mutag", "MUTAG", (188, 3371, 3721, 2)),
    "ptc": ("ptc", "PTC", (344, 8792, 8931, 2)),
    "nci1": ("nci1", "NCI1", (4110, 122747, 132753, 2)),
    "deezer-ego": ("deezer_ego_nets", "deezer_egos", (9629, 226213, 628303, 2)),
    "reddit-threads": ("reddit_threads_10k", "reddit10k", (10000, 237390, 247549, 2)),
}
_GRAPH_ALIASES = {"imdbbinary": "imdb-binary", "imdb_binary": "imdb-binary",
                  "imdbmulti": "imdb-multi", "imdb_multi": "imdb-multi",
                  "redditbinary": "reddit-binary", "reddit_binary": "reddit-binary",
                  "deezer_ego_nets": "deezer-ego", "deezer-egos": "deezer-ego",
                  "deezer_egos": "deezer-ego", "reddit_threads": "reddit-threads",
                  "reddit10k": "reddit-threads", "reddit_threads_10k": "reddit-threads"}


def _zip_check(members: Sequence[str]):
    def check(path: Path) -> None:
        try:
            with zipfile.ZipFile(path) as zf:
                names = set(zf.namelist())
        except zipfile.BadZipFile as exc:
            raise DataFileError(f"{path}: not a zip file ({exc})") from exc
        lost = [m for m in members if m not in names]
        if lost:
            raise DataFileError(f"{path}: zip lacks {lost}")
    return check


def _tu_text_files(folder: str, stem: str, root, download: bool) -> Tuple[Path, Optional[Path]]:
    """Locate ``<stem>.txt[.gz]`` and its fold folder; extract/download the IHGNN zip if needed."""
    base = data_root(root)
    for rel in (f"{folder}/{stem}.txt.gz", f"{folder}/{stem}.txt", f"{folder}/{stem}/{stem}.txt",
                f"{folder}/{stem}/{stem}.txt.gz"):
        if (base / rel).is_file():
            txt = base / rel
            break
    else:
        zrel = f"{folder}/{stem}.zip"
        zpath = find_file([zrel], url=f"{_IHGNN}/{stem}.zip", root=root, download=download,
                          check=_zip_check([f"{stem}/{stem}.txt"]))
        with zipfile.ZipFile(zpath) as zf:
            wanted = [m for m in zf.namelist() if m.startswith(f"{stem}/")
                      and "__MACOSX" not in m and not m.endswith((".DS_Store", "/"))]
            try:
                zf.extractall(zpath.parent, members=wanted)
            except OSError as exc:
                raise DataFileError(f"cannot extract {zpath} into {zpath.parent}: {exc}") from exc
        txt = zpath.parent / stem / f"{stem}.txt"
    for cand in (txt.parent / "10fold_idx", txt.parent / stem / "10fold_idx"):
        if cand.is_dir():
            return txt, cand
    return txt, None


def load_social_graph_dataset(name: str, root: Optional[PathLike] = None, *,
                              download: bool = True, remove_self_loops: bool = True,
                              structural_features: bool = False, **feature_kwargs) -> GraphList:
    """A published graph-classification set by name, with its 10 folds in ``.folds``.

    Names: ``imdb-binary``, ``imdb-multi``, ``reddit-binary``, ``collab``, ``mutag``,
    ``ptc``, ``nci1`` (DGCNN/GIN text format, 10-fold files), ``deezer-ego``,
    ``reddit-threads`` (Karate Club JSON; folds from :func:`stratified_folds`, seed 0).
    Files are taken from ``<root>/<folder>/`` (``imdb_binary/IMDBBINARY.txt.gz``...,
    a ``<folder>/<NAME>.zip`` or its extracted ``<folder>/<NAME>/``) and otherwise
    downloaded (the IHGNN zip for the text sets, benedekrozemberczki/datasets or
    karateclub for the JSON ones; pinned commits in ``datasets/social.md``).
    ``structural_features=True`` runs :func:`add_structural_features` (kwargs forwarded).
    """
    key = name.lower().replace(" ", "")
    key = _GRAPH_ALIASES.get(key, key)
    if key not in SOCIAL_GRAPH_DATASETS:
        raise KeyError(f"unknown graph dataset {name!r}; known: {', '.join(SOCIAL_GRAPH_DATASETS)}")
    folder, stem, counts = SOCIAL_GRAPH_DATASETS[key]
    if key == "deezer-ego":
        z = find_file([f"{folder}/deezer_egos.zip"],
                      url=f"{_DS}/datasets/b2243d00403effca7d588715e5daa5b3aca35a0e/"
                          "graph_classification/deezer_egos.zip",
                      root=root, download=download,
                      check=_zip_check(["deezer_egos/deezer_target.csv"]))
        out = load_ego_json(z, "deezer_egos/deezer_target.csv", remove_self_loops=remove_self_loops)
        out.folds = stratified_folds(out.y)
    elif key == "reddit-threads":
        kc = (f"{_DS}/karateclub/6f6fe5e3ca68ebd08cb3ebcad5276603b32a787d/"
              "dataset/graph_level/reddit10k")
        g = find_file([f"{folder}/reddit10k_graphs.json.gz", f"{folder}/reddit10k_graphs.json",
                       f"{folder}/graphs.json"], url=f"{kc}/graphs.json", root=root,
                      download=download)
        t = find_file([f"{folder}/reddit10k_target.csv", f"{folder}/target.csv"],
                      url=f"{kc}/target.csv", root=root, download=download)
        out = load_ego_json(g, t, remove_self_loops=remove_self_loops)
        out.folds = stratified_folds(out.y)
    else:
        txt, fold_dir = _tu_text_files(folder, stem, root, download)
        out = load_tu_text(txt, remove_self_loops=remove_self_loops)
        out.folds = load_tu_folds(fold_dir, num_graphs=len(out)) if fold_dir else None
        if out.folds is None:
            warnings.warn(f"{key}: no 10fold_idx folder next to {txt}; using stratified_folds()",
                          stacklevel=2)
            out.folds = stratified_folds(out.y)
    out.name = key
    if len(out) != counts[0]:
        warnings.warn(f"{key}: {len(out)} graphs, expected {counts[0]} (another release?)",
                      stacklevel=2)
    if structural_features:
        add_structural_features(out, **feature_kwargs)
    return out


def load_tu_dataset(root: PathLike, name: str, **kwargs):
    """The TU original format (``NAME_A.txt``, ``NAME_graph_indicator.txt``,
    ``NAME_graph_labels.txt``[, ``NAME_node_labels.txt``...]) via PyG's ``TUDataset``.

    Expects ``<root>/<name>/raw/<name>_*.txt`` (PyG downloads from the TU server when they
    are absent and a network is available). PyG already re-codes graph labels to 0..C-1.
    Returns the ``TUDataset``; ``list(ds)`` gives the same shape as :func:`load_tu_text`
    (``x`` holds one-hot node labels where the set has them; social sets have none — use
    :func:`add_structural_features`).
    """
    from torch_geometric.datasets import TUDataset

    return TUDataset(str(root), name, **kwargs)


# --------------------------------------------------------------------------- features


def add_structural_features(data_list: Sequence[Data], max_degree: Optional[int] = 64,
                            degree: str = "onehot", rw_steps: int = 8, replace: bool = False,
                            exact_max_nodes: int = 1000) -> Sequence[Data]:
    """Add degree / random-walk features to every graph, in place; returns ``data_list``.

    * ``degree="onehot"``: one-hot of ``min(deg, max_degree)`` (``max_degree + 1`` columns,
      the last one meaning "max_degree or more"; ``max_degree=None`` uses the largest degree
      in ``data_list``, as GIN does) plus ``log(1 + deg)``; ``degree="log"``: only the log.
    * ``rw_steps > 0``: random-walk return probabilities ``[P^k]_ii``, k = 1..rw_steps, exact
      for graphs of up to ``exact_max_nodes`` nodes, a 64-probe Monte-Carlo estimate above
      (see :func:`graphattn.data.social.random_walk_pe`; ~10 % of REDDIT-BINARY's graphs).

    Width: ``max_degree + 2 + rw_steps`` (74 by default), concatenated after the
    existing ``x`` (one-hot tags of the molecular sets) unless ``replace``.
    Sets ``data.feature_source = "structural"``. Measured here (2 CPU cores), ``rw_steps=8``:
    IMDB-BINARY 0.3 s, COLLAB ~11 s, REDDIT-BINARY ~6 s; ``rw_steps=0``: COLLAB ~4 s.
    """
    if degree not in ("onehot", "log"):
        raise ValueError(f"degree must be 'onehot' or 'log', not {degree!r}")
    degs = [torch.bincount(d.edge_index[0], minlength=d.num_nodes) for d in data_list]
    if degree == "onehot" and max_degree is None:
        max_degree = int(max((int(g.max()) for g in degs if g.numel()), default=0))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # many tiny ops: the intra-op pool only adds latency spikes
    try:
        for d, deg in zip(data_list, degs):
            feats = []
            if degree == "onehot":
                feats.append(torch.nn.functional.one_hot(deg.clamp(max=max_degree),
                                                         max_degree + 1).float())
            feats.append(torch.log1p(deg.float()).unsqueeze(1))
            if rw_steps > 0:
                feats.append(random_walk_pe(d.edge_index, d.num_nodes, rw_steps,
                                            exact_max_nodes=exact_max_nodes))
            s = torch.cat(feats, 1)
            d.x = s if (replace or d.x is None) else torch.cat([d.x, s], 1)
            d.feature_source = "structural"
    finally:
        torch.set_num_threads(threads)
    return data_list

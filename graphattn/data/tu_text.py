"""The DGCNN/GIN text format of graph-classification sets, read into a :class:`GraphList`.

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

The 10-fold split files that come with these files are read by
:func:`~graphattn.data.social_splits.load_tu_folds`.
"""
from __future__ import annotations

import math
import warnings
from itertools import repeat
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from graphattn.data.download import DataFileError, PathLike
from graphattn.data.rawio import (check_int64_range, has_lone_sign, read_bytes, sorted_unique, undirected_edge_index,
                                  unique_pairs)

__all__ = ["GraphList", "load_tu_text"]


class GraphList(list):
    """A ``list`` of ``Data`` graphs plus dataset facts (``num_classes``, label values...)."""

    name: str = ""
    label_values: List[int] = []
    tag_values: List[int] = []
    num_self_loops_removed: int = 0
    num_edge_attributes: int = 0  # TU folder sets: edge_attr's leading continuous columns
    edge_label_values: list = []  # per edge-label column: (min, max)
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



def split_graphs(src: np.ndarray, dst: np.ndarray, node_off: np.ndarray, y: np.ndarray, tag: Tensor,
                 n_tags: int, attr: Optional[Tensor], one_hot_tags: bool = True,
                 edge_attr: Optional[Tensor] = None) -> GraphList:
    """One ``Data`` per graph of a whole set's global edge list (shared by the text and the TU
    folder readers). ``src`` / ``dst`` ``(E,)`` sorted by ``src``, every edge inside one graph;
    ``node_off`` ``(G + 1,)`` node offsets; ``y`` ``(G,)`` re-coded labels; ``tag`` ``(N,)``
    re-coded node tags (``x`` = their one-hot when ``n_tags > 1`` and ``one_hot_tags``);
    ``attr`` ``(N, D)`` or None; ``edge_attr`` ``(E, D')`` aligned with ``src`` or None. Each
    graph: ``edge_index`` ``(2, e)`` local ids, ``y`` ``(1,)``, ``tag`` ``(n,)``[, ``x``
    ``(n, n_tags)``, ``node_attr`` ``(n, D)``, ``edge_attr`` ``(e, D')``]."""
    e_off = np.searchsorted(src, node_off)
    out = GraphList()
    for g in range(len(node_off) - 1):
        a, b = int(node_off[g]), int(node_off[g + 1])
        ea, eb = int(e_off[g]), int(e_off[g + 1])
        ei = np.empty((2, eb - ea), dtype=np.int64)
        np.subtract(src[ea:eb], a, out=ei[0])
        np.subtract(dst[ea:eb], a, out=ei[1])
        data = Data(edge_index=torch.from_numpy(ei), y=torch.tensor([int(y[g])]), num_nodes=b - a)
        data.tag = tag[a:b].clone()
        if one_hot_tags and n_tags > 1:
            data.x = torch.nn.functional.one_hot(data.tag, n_tags).float()
        if attr is not None:
            data.node_attr = attr[a:b].clone()
        if edge_attr is not None:
            data.edge_attr = edge_attr[ea:eb].clone()
        out.append(data)
    return out


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
    first = next(it)
    try:
        if len(first) != 1:
            raise ValueError
        n_graphs = int(first[0])
    except ValueError:
        hint = (" — it looks like the TU original format's NAME_A.txt ('i, j' edge rows): read its folder "
                "with graphattn.data.load_tu_folder (on the command line --tu-text accepts it)"
                if len(first) == 2 and first[0].endswith(",") else "")
        raise DataFileError(f"{path}: first line must be the number of graphs alone, got "
                            f"{' '.join(first[:4])!r}{hint}") from None
    sizes, labels, tags, nbr_counts, nbrs, attrs = [], [], [], [], [], []
    for g in range(n_graphs):
        head = next(it, None)
        if head is None:
            raise DataFileError(f"{path}: truncated: declares {n_graphs} graphs, found {g}")
        try:
            if len(head) != 2:
                raise ValueError
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
            try:
                nbrs.extend(int(v) for v in row[2:2 + m])
            except ValueError:
                raise DataFileError(f"{path}: graph {g} node {i}: neighbours must be integer "
                                    f"node indices, got {' '.join(row[2:2 + m])[:60]!r}") from None
            try:
                a = [float(v) for v in row[2 + m:]]
            except ValueError:
                raise DataFileError(f"{path}: graph {g} node {i}: node attributes must be numbers, "
                                    f"got {' '.join(row[2 + m:])[:60]!r}") from None
            if not all(math.isfinite(v) for v in a):
                raise DataFileError(f"{path}: graph {g} node {i}: node attribute is NaN or "
                                    f"infinite ({' '.join(row[2 + m:])[:60]!r})")
            if any(abs(v) > _F32_MAX for v in a):  # finite here, infinite as the float32 features
                raise DataFileError(f"{path}: graph {g} node {i}: node attribute beyond float32's range "
                                    f"(±{_F32_MAX:.3g}): {' '.join(row[2 + m:])[:60]!r}; rescale the attributes")
            attrs.append(a)
    if next(it, None) is not None:
        raise DataFileError(f"{path}: lines left after the {n_graphs} declared graphs (a node "
                            "count or the graph count is wrong)")
    dims = {len(a) for a in attrs}
    if len(dims) > 1:
        raise DataFileError(f"{path}: node attribute rows have different lengths {sorted(dims)}")
    attr = np.asarray(attrs, dtype=np.float32) if dims and dims != {0} else None
    return (np.asarray(sizes, np.int64), np.asarray(labels, np.int64), np.asarray(tags, np.int64),
            np.asarray(nbr_counts, np.int64), np.asarray(nbrs, np.int64), attr)



_F32_MAX = float(np.finfo(np.float32).max)
_TO_SPACE = bytes.maketrans(b"\t\r\v\f", b"    ")


def _tokens_per_line(raw: bytes) -> np.ndarray:
    """Number of whitespace-separated tokens on each non-blank line of ``raw`` (C-speed
    bytes operations: ~0.4 s for COLLAB's 84 MB)."""
    r = raw.translate(_TO_SPACE)
    while b"  " in r:
        r = r.replace(b"  ", b" ")
    r = r.replace(b" \n", b"\n").replace(b"\n ", b"\n").strip(b" \n")
    lines = [ln for ln in r.split(b"\n") if ln]
    return np.fromiter(map(bytes.count, lines, repeat(b" ")), np.int64, len(lines)) + 1


def _layout_matches(raw: bytes, sizes: np.ndarray, cnt: np.ndarray) -> bool:
    """Whether the lines of ``raw`` hold the tokens the fast walk assigned to them: 1 (the
    graph count), 2 per graph header, ``2 + m`` per node line. The walk cannot see line
    breaks, so integer node attributes after the neighbours could be misread as the next
    node's tag and count and still use up every token."""
    n_graphs = sizes.size
    expected = np.empty(1 + n_graphs + cnt.size, dtype=np.int64)
    expected[0] = 1
    heads = 1 + np.arange(n_graphs) + np.concatenate([[0], np.cumsum(sizes)])[:-1]
    expected[heads] = 2
    node_line = np.ones(expected.size, dtype=bool)
    node_line[0], node_line[heads] = False, False
    expected[node_line] = 2 + cnt
    return bool(np.array_equal(_tokens_per_line(raw), expected))


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
    node lines runs in Python, and its line layout is checked against the file's lines.
    The declared graph/node/neighbour counts are checked (a truncated file fails with a
    :class:`DataFileError` naming the graph), neighbour indices must lie in 0..n-1, and
    edges are symmetrised and deduplicated.

    Args:
        path: the ``.txt`` / ``.txt.gz`` file.
        remove_self_loops: drop ``u,u`` edges (their number in ``num_self_loops_removed``).
        one_hot_tags: set ``x`` to the one-hot node tags when there is more than one tag.

    Node attributes: extra numbers after a node's neighbours (float or integer, the same
    count D on every node line) are parsed into ``data.node_attr`` (N, D) float32. They
    are **not** part of ``x``: a model pipeline that wants them must concatenate them
    itself. Files without them have no ``node_attr``.

    Graphs declared with 0 nodes are kept (a warning counts them): the graph pipeline
    (structural features, batching, readouts) handles empty graphs.

    Shapes: per graph ``edge_index`` (2, E_g), ``y`` (1,), ``tag`` (N_g,), ``x`` (N_g, T)
    or absent, ``node_attr`` (N_g, D) or absent.
    """
    path = Path(path).expanduser()
    sizes, labels, tags, cnt, nbrs, node_attr = _read_counts(read_bytes(path), path)
    n_graphs = sizes.size
    node_off = np.concatenate([[0], np.cumsum(sizes)])
    src, dst = _global_edges(sizes, cnt, nbrs, node_off, path)
    del nbrs
    src, dst, n_loops = _edge_set(src, dst, int(sizes.sum()), remove_self_loops)
    label_values, y = sorted_unique(labels, return_inverse=True)
    tag_values, tag = sorted_unique(tags, return_inverse=True)
    n_tags = int(tag_values.size)
    tag_all = torch.from_numpy(tag.astype(np.int64))
    attr_all = torch.from_numpy(node_attr) if node_attr is not None else None
    out = split_graphs(src, dst, node_off, y, tag_all, n_tags, attr_all, one_hot_tags)
    n_empty = int(np.count_nonzero(sizes == 0))
    if n_empty:
        first = np.flatnonzero(sizes == 0)[:5].tolist()
        warnings.warn(f"{path}: {n_empty} of {n_graphs} graphs have 0 nodes (graph indices "
                      f"{first}...); kept as empty graphs", stacklevel=2)
    out.name = path.name.split(".")[0]
    out.label_values = [int(v) for v in label_values]
    out.tag_values = [int(v) for v in tag_values]
    out.num_self_loops_removed = n_loops if remove_self_loops else 0
    return out


def _read_counts(raw: bytes, path: Path):
    """``(sizes, labels, tags, neighbour counts, neighbours, node attributes or None)`` of the
    file's bytes ``raw``: tokenised by numpy when every token is an int64 and the line layout
    checks out, else by the line parser (which names the offending graph/line)."""
    try:
        if has_lone_sign(raw):  # fromstring would read "-" as 0 or "- 2" as -2: the line parser names it
            raise ValueError("a sign without digits")
        tok = np.fromstring(raw, dtype=np.int64, sep=" ")  # noqa: NPY201
        fast = True
    except ValueError:
        fast = False  # float attributes (or garbage): the line parser says which
    if fast:
        check_int64_range(tok, str(path))
        try:
            pos, head, sizes, labels, end = _walk(tok, path)
        except DataFileError:
            end = -1
        # integer node attributes or a damaged file: the line-aware parser sorts it out
        # and names the offending graph/line
        fast = end == tok.size and _layout_matches(raw, sizes, tok[pos + 1])
    if not fast:
        return _parse_lines(raw.decode("utf-8-sig", "replace"), path)  # -sig: a BOM is no token
    # every token is a count, a graph header, a tag, a neighbour count or a neighbour:
    # blank out the non-neighbours and compress (cheaper than a gather)
    keep = np.ones(tok.size, dtype=bool)
    keep[0] = False
    keep[head], keep[head + 1] = False, False
    keep[pos], keep[pos + 1] = False, False
    return sizes, labels, tok[pos], tok[pos + 1], tok[keep], None


def _global_edges(sizes: np.ndarray, cnt: np.ndarray, nbrs: np.ndarray, node_off: np.ndarray,
                  path: Path) -> Tuple[np.ndarray, np.ndarray]:
    """The whole file's edges ``(src, dst)`` as listed, with global node numbers; a neighbour
    index out of its graph's range is a :class:`DataFileError` naming the graph and node."""
    n_total = int(sizes.sum())
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
    return src, dst


def _edge_set(src: np.ndarray, dst: np.ndarray, n_total: int,
              remove_self_loops: bool) -> Tuple[np.ndarray, np.ndarray, int]:
    """``(src, dst, number of self-loops)``: the edges sorted, deduplicated and symmetrised,
    self-loops dropped with ``remove_self_loops``."""
    loops = src == dst
    n_loops = int(np.count_nonzero(loops))
    if remove_self_loops and n_loops:
        keep = ~loops
        src, dst = src[keep], dst[keep]
    # src is non-decreasing; the edge list is a sorted set iff dst increases within a node
    if src.size > 1 and not np.all((np.diff(dst) > 0) | (np.diff(src) > 0)):
        src, dst = unique_pairs(src, dst, n_total)
    if not _is_symmetric(src, dst, n_total):
        src, dst = undirected_edge_index(src, dst, n_total, remove_self_loops=False)[0]
    return src, dst, n_loops

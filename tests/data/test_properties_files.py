"""Property-based tests for the file loaders: random, truncated or wrongly formatted files
fail with a clear DataFileError/ValueError (or load consistently) — never crash or hang."""
import gzip

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphattn.data import DataFileError, load_musae, load_tu_text

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def tu_text(graphs):
    lines = [str(len(graphs))]
    for label, adj in graphs:
        lines.append(f"{len(adj)} {label}")
        for nbrs in adj:
            lines.append(" ".join(["0", str(len(nbrs)), *map(str, nbrs)]))
    return "\n".join(lines) + "\n"


@st.composite
def tu_graphs(draw):
    out = []
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 6))
        adj = [sorted(set(draw(st.lists(st.integers(0, n - 1), max_size=4)))) for _ in range(n)]
        out.append((draw(st.sampled_from([0, 2, 5])), adj))
    return out


@SETTINGS
@given(tu_graphs(), st.data())
def test_tu_text_valid_or_truncated(tmp_path_factory, graphs, data):
    path = tmp_path_factory.mktemp("tu") / "g.txt"
    text = tu_text(graphs)
    path.write_text(text)
    out = load_tu_text(path)
    assert len(out) == len(graphs)
    labels = sorted({lab for lab, _ in graphs})
    for d, (lab, adj) in zip(out, graphs):
        assert d.num_nodes == len(adj) and int(d.y) == labels.index(lab)  # labels remapped to 0..C-1
        ei = d.edge_index
        assert ei.numel() == 0 or (ei.min() >= 0 and ei.max() < len(adj))
        if ei.numel():  # symmetric
            fwd = set(map(tuple, ei.t().tolist()))
            assert fwd == {(b, a) for a, b in fwd}
    cut = data.draw(st.integers(0, len(text) - 2))
    path.write_text(text[:cut])
    try:
        short = load_tu_text(path)
    except (DataFileError, ValueError) as exc:
        assert str(path) in str(exc) or "empty" in str(exc) or "truncated" in str(exc)
    else:  # a cut that happens to end on a complete, self-consistent prefix is fine
        assert len(short) <= len(graphs)


@SETTINGS
@given(st.binary(max_size=200))
def test_tu_text_random_bytes_clear_error(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("tu") / "g.txt.gz"
    path.write_bytes(gzip.compress(blob))
    try:
        out = load_tu_text(path)
    except (DataFileError, ValueError):
        return
    assert all(torch.isfinite(d.edge_index.float()).all() for d in out)


@SETTINGS
@given(st.integers(2, 12), st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=30),
       st.sampled_from(["ok", "unknown_id", "no_header", "bad_label"]))
def test_musae_random_files(tmp_path_factory, n, edges, corruption):
    tmp = tmp_path_factory.mktemp("musae")
    edges = [(a % n, b % n) for a, b in edges]
    if corruption == "unknown_id":
        edges = edges + [(0, n + 5)]
    e_lines = ["id_1,id_2"] + [f"{a},{b}" for a, b in edges]
    if corruption == "no_header":
        e_lines = e_lines[1:] or ["0,1"]
        e_lines[0] = "x,y,z"
    labels = [("a", "b", "c")[i % 3] if corruption != "bad_label" else "" for i in range(n)]
    (tmp / "e.csv").write_text("\n".join(e_lines) + "\n")
    (tmp / "t.csv").write_text("id,target\n" + "\n".join(f"{i},{lab}" for i, lab in enumerate(labels)) + "\n")
    try:
        d = load_musae(tmp / "e.csv", tmp / "t.csv")
    except (DataFileError, ValueError) as exc:
        assert corruption != "ok", f"valid file rejected: {exc}"
        return
    assert corruption in ("ok", "bad_label")
    assert d.num_nodes == n and d.y.shape == (n,)
    ei = d.edge_index
    assert not bool((ei[0] == ei[1]).any())  # self-loops removed
    assert set(map(tuple, ei.t().tolist())) == {(b, a) for a, b in ei.t().tolist()}  # undirected


def test_truncated_gzip_is_a_clear_error(tmp_path):
    blob = gzip.compress((tu_text([(0, [[1], [0]])]) * 50).encode())
    (tmp_path / "g.txt.gz").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DataFileError, match="corrupt or truncated gzip"):
        load_tu_text(tmp_path / "g.txt.gz")

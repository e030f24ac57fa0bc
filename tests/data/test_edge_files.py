"""Edge lists and target tables as people have them: MUSAE CSVs with a header, headerless CSVs, SNAP /
KONECT text files (tab or space separated, comment lines, gzipped), semicolons; target tables whose
label column is the one column not named like an id, tab- or space-separated."""
import gzip
import re

import networkx as nx
import numpy as np
import pytest

from graphattn.data import load_musae
from graphattn.data.download import DataFileError
from graphattn.data.musae import read_target

EDGES = [(0, 1), (1, 2), (2, 0), (2, 3)]

FORMATS = {
    "musae.csv": "id_1,id_2\n" + "".join(f"{u},{v}\n" for u, v in EDGES),
    "headerless.csv": "".join(f"{u},{v}\n" for u, v in EDGES),
    "snap.txt": "# Directed graph (each unordered pair of nodes is saved once): x.txt\n# Nodes: 4 Edges: 4\n"
                "# FromNodeId\tToNodeId\n" + "".join(f"{u}\t{v}\n" for u, v in EDGES),
    "spaces.txt": "".join(f"{u}  {v} \n" for u, v in EDGES),
    "konect.tsv": "% sym unweighted\n% 4 4 4\n" + "".join(f"{u} {v}\n" for u, v in EDGES),
    "semicolons.csv": "source;target\r\n" + "".join(f"{u};{v}\r\n" for u, v in EDGES),
    "quoted.csv": '"from","to"\n' + "".join(f'"{u}","{v}"\n' for u, v in EDGES),
}


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("gz", [False, True])
def test_every_edge_list_format_gives_the_same_graph(tmp_path, name, gz):
    edges = tmp_path / (name + (".gz" if gz else ""))
    text = FORMATS[name].encode()
    edges.write_bytes(gzip.compress(text) if gz else text)
    target = tmp_path / "target.csv"
    target.write_text("id,club\n0,a\n1,a\n2,b\n3,b\n")
    data = load_musae(edges, target)
    got = {tuple(sorted(e)) for e in data.edge_index.t().tolist()}
    assert got == {tuple(sorted(e)) for e in EDGES}
    assert data.class_names == ["a", "b"] and data.y.tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize("text, match", [
    ("0 1 5\n1 2 3\n", r"expected two columns of node ids .* the first row '0 1 5' has 3 field"),
    ("0\t1\n1\t2\t3\n", r"row 2 has 3 fields \('1\\t2\\t3'\)"),
    ("# c\n0,1\n1,b\n", r"row 3 field 'b' is not an integer id"),
    ("0,a\n", r"the first row '0,a' is neither a header of two names nor an edge"),
])
def test_bad_edge_rows_are_named_without_a_bytes_repr(tmp_path, text, match):
    path = tmp_path / "e.txt"
    path.write_text(text)
    target = tmp_path / "target.csv"
    target.write_text("id,club\n0,a\n1,b\n2,b\n")
    with pytest.raises(DataFileError, match=match) as err:
        load_musae(path, target)
    assert not re.search(r"(^|[\s(])b['\"]", str(err.value))  # no bytes repr


def test_an_unknown_edge_id_names_the_files_own_row(tmp_path):
    path = tmp_path / "e.txt"
    path.write_text("# header comment\n\n0 1\n# inside\n1 9\n")
    target = tmp_path / "target.csv"
    target.write_text("id,club\n0,a\n1,b\n")
    with pytest.raises(DataFileError, match=r"edge row 5 \(1,9\) names a node id"):
        load_musae(path, target)


@pytest.mark.parametrize("name, text", [
    ("t.csv", "id,club\n0,x\n1,y\n2,x\n"),
    ("t.tsv", "node_id\tclub\n0\tx\n1\ty\n2\tx\n"),
    ("t.txt", "node club\n0 x\n1  y\n2 x \n"),
    ("t2.csv", "user_id;club\n0;x\n1;y\n2;x\n"),
])
def test_the_one_column_not_named_like_an_id_is_the_label(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    ids, y, names, id_name, label_name = read_target(path, None)
    assert ids.tolist() == [0, 1, 2] and y.tolist() == [0, 1, 0] and names == ["x", "y"]
    assert label_name == "club"


def test_two_candidate_label_columns_still_ask_which(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,name,club\n0,a,x\n1,b,y\n")
    with pytest.raises(DataFileError, match=r"cannot tell the label column among \['id', 'name', 'club'\]"):
        read_target(path, None)


def test_a_snap_file_trains_through_the_cli(tmp_path):
    from graphattn.cli.main import main
    g = nx.karate_club_graph()
    edges = tmp_path / "karate.txt.gz"
    edges.write_bytes(gzip.compress(("# FromNodeId\tToNodeId\n" + "".join(f"{u}\t{v}\n" for u, v in g.edges())).encode()))
    target = tmp_path / "club.csv"
    target.write_text("id,club\n" + "".join(f"{n},{g.nodes[n]['club']}\n" for n in g.nodes()))
    assert main(["train", "--edges", str(edges), "--target", str(target), "--epochs", "2", "--no-progress",
                 "--threads", "1", "--out", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "best.pt").is_file()
    assert np.isfinite(__import__("json").loads((tmp_path / "run" / "metrics.json").read_text())["test"]["accuracy"])

"""The social-network task (graphattn.tasks.social) below the CLI: loading the graph of a
checkpoint, fold files that do not fit, and a recorded data root that moved."""
import pytest

from graphattn.data import DataFileError
from graphattn.tasks.social import node as sn
from graphattn.tasks.social.graph_data import load_graphs
from graphattn.tasks.social.node import recorded_root_first
from graphattn.tasks.social.specs import GraphDataSpec, NodeDataSpec

from tiny_inputs import write_file


def test_recorded_root_is_used_only_while_it_holds_the_data(tmp_path):
    calls = []

    def load(root=None, download=True):
        calls.append((root, download))
        if root is not None:
            raise DataFileError(f"{root}: the dataset is gone")
        return "from today's root"

    with pytest.warns(UserWarning, match="does not hold the dataset any more"):
        assert recorded_root_first(load, str(tmp_path)) == "from today's root"
    assert calls == [(str(tmp_path), False), (None, True)]
    calls.clear()
    assert recorded_root_first(load, str(tmp_path / "moved")) == "from today's root"
    assert calls == [(None, True)]  # the recorded folder no longer exists: not tried


def test_stale_fold_files_ignored_without_folds(tmp_path):
    text = "6\n" + "".join(f"2 {i % 2}\n0 1 1\n0 1 0\n" for i in range(6))
    f = write_file(tmp_path / "x.txt", text)
    d = tmp_path / "10fold_idx"
    d.mkdir()
    write_file(d / "train_idx-1.txt", "0\n")  # covers 2 of 6 graphs: does not fit this file
    write_file(d / "test_idx-1.txt", "1\n")
    spec = GraphDataSpec(tu_text=str(f))
    with pytest.warns(UserWarning, match="ignoring the fold files"):
        graphs = load_graphs(spec)
    assert graphs.folds is None and len(graphs) == 6
    with pytest.raises(DataFileError, match="expected 6 graphs"):
        load_graphs(spec.replace(folds=10))


def test_tiny_user_graph_still_loads_for_existing_checkpoints(tmp_path):
    """The empty-split refusal is a training-time check: predict / explain of a checkpoint
    load the same graph through load_node_data, which must not refuse it."""
    e = write_file(tmp_path / "e.csv", "id_1,id_2\n" + "".join(f"{i},{(i + 1) % 6}\n" for i in range(6)))
    t = write_file(tmp_path / "t.csv", "id,target\n" + "".join(f"{i},{i % 2}\n" for i in range(6)))
    spec = NodeDataSpec(edges=str(e), target=str(t))
    data = sn.load_node_data(spec)
    assert data.num_nodes == 6

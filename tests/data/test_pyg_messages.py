"""PyG's dataset classes print their progress ("Processing...", "Done!", "Downloading ...") on stderr,
where a command's errors go; graphattn sends those lines to its logger and lets the rest through."""
import logging
import sys

from graphattn.data.download import pyg_progress_to_log
from graphattn.data.tu import load_tu_dataset


def test_pyg_lines_go_to_the_log_and_the_rest_to_stderr(capsys, caplog):
    caplog.set_level(logging.INFO, logger="graphattn")
    with pyg_progress_to_log():
        print("Processing...", file=sys.stderr)
        print("a real problem", file=sys.stderr)
        sys.stderr.write("\rbar  10%")              # a progress bar: no newline, written at once
        sys.stderr.write("Proc")                    # a PyG line written in pieces
        sys.stderr.write("essing...\n")
        print("Done!", file=sys.stderr)
        print("Downloading https://example.org/x.zip", file=sys.stderr)
    err = capsys.readouterr().err
    assert err == "a real problem\n\rbar  10%"
    assert [r.getMessage() for r in caplog.records] == ["Processing...", "Processing...", "Done!",
                                                        "Downloading https://example.org/x.zip"]


def test_processing_a_tu_dataset_prints_nothing(tmp_path, capsys, monkeypatch, caplog):
    """PyG keeps quiet under pytest (PYTEST_CURRENT_TEST); outside it its lines reached the command's stderr."""
    raw = tmp_path / "TOY" / "raw"
    raw.mkdir(parents=True)
    (raw / "TOY_A.txt").write_text("1, 2\n2, 1\n3, 4\n4, 3\n")
    (raw / "TOY_graph_indicator.txt").write_text("1\n1\n2\n2\n")
    (raw / "TOY_graph_labels.txt").write_text("0\n1\n")
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    caplog.set_level(logging.INFO, logger="graphattn")
    ds = load_tu_dataset(tmp_path, "TOY")
    assert len(ds) == 2
    assert capsys.readouterr().err == ""
    assert [r.getMessage() for r in caplog.records if r.name == "graphattn"] == ["Processing...", "Done!"]

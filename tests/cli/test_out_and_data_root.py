"""Where a command writes and reads: an output folder that holds a run is not replaced silently, and
the data root is one rule for every command (``--data-root`` > ``$GRAPHATTN_DATA`` > ...), with
relative paths resolved where they enter."""
import os
from pathlib import Path

import pytest

from graphattn.cli.main import main
from graphattn.data import data_root
from graphattn.data.download import cache_root, find_file
from graphattn.testing import shared_data_dir

KARATE = ["train", "karate", "--epochs", "1", "--no-progress", "--threads", "1"]


def test_a_second_run_into_the_same_folder_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(KARATE) == 0                          # the default folder, runs/karate
    first = (tmp_path / "runs" / "karate" / "metrics.json").read_bytes()
    capsys.readouterr()
    assert main(KARATE + ["--epochs", "2"]) == 2
    err = capsys.readouterr().err
    assert "runs/karate holds another run" in err and "--resume" in err and "--overwrite" in err
    assert (tmp_path / "runs" / "karate" / "metrics.json").read_bytes() == first  # untouched
    assert main(KARATE + ["--epochs", "2", "--overwrite"]) == 0
    assert (tmp_path / "runs" / "karate" / "metrics.json").read_bytes() != first
    assert main(KARATE + ["--epochs", "3", "--resume"]) == 0
    assert main(KARATE + ["--resume", "--overwrite"]) == 2
    assert "give one of them" in capsys.readouterr().err


def test_a_folder_of_other_files_is_not_a_run(tmp_path, capsys):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "README.txt").write_text("my notes\n")
    assert main(KARATE + ["--out", str(out)]) == 0
    assert (out / "metrics.json").is_file() and (out / "README.txt").read_text() == "my notes\n"


def test_molecule_and_graph_set_runs_are_refused_too(tmp_path, capsys, molecule_csv, private_cache):
    out = tmp_path / "m"
    argv = ["train", "--csv", str(molecule_csv), "--epochs", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 2 and "holds another run" in capsys.readouterr().err
    folds = tmp_path / "g"
    (folds / "fold1").mkdir(parents=True)
    (folds / "fold1" / "best.pt").write_bytes(b"")  # a --folds run keeps its checkpoints per fold
    tu = tmp_path / "TOY.txt"
    tu.write_text("4\n" + "".join(f"3 {g % 2}\n0 1 1\n0 2 0 2\n0 1 1\n" for g in range(4)))
    assert main(["train", "--tu-text", str(tu), "--folds", "2", "--epochs", "1", "--no-progress",
                 "--out", str(folds)]) == 2
    assert "fold1/best.pt" in capsys.readouterr().err


def test_relative_data_paths_are_resolved_where_they_enter(tmp_path, monkeypatch):
    (tmp_path / "d").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRAPHATTN_DATA", "d")
    monkeypatch.setenv("GRAPHATTN_CACHE", "c")
    root, cache = data_root(), cache_root()
    assert root == tmp_path / "d" and root.is_absolute() and cache == tmp_path / "c"
    assert data_root("d") == tmp_path / "d"
    assert root.as_uri().startswith("file:///")       # a relative path has no file URI (the download tests use one)
    monkeypatch.chdir("/")
    assert data_root(root) == tmp_path / "d"          # once resolved, a later working directory does not move it


def test_shared_data_dir_is_absolute_with_a_relative_variable(tmp_path, monkeypatch):
    (tmp_path / "shared").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRAPHATTN_DATA", "shared")
    assert shared_data_dir() == tmp_path / "shared"


def test_data_root_option_and_the_offline_error_name_it(tmp_path, capsys, monkeypatch):
    data = shared_data_dir()  # before the variable is pointed elsewhere below
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRAPHATTN_DATA", str(tmp_path / "nowhere"))
    monkeypatch.setattr("urllib.request.urlopen", _offline)
    with pytest.raises(Exception, match=r"--data-root \(command line\) or \$GRAPHATTN_DATA"):
        find_file(["x/none.csv"], url="https://example.org/none.csv", root=tmp_path / "nowhere")
    if data is None or not (data / "cora").is_dir():
        pytest.skip("shared Cora files not available (set GRAPHATTN_DATA)")
    rel = os.path.relpath(data, tmp_path)
    argv = ["train", "cora", "--epochs", "1", "--no-progress", "--threads", "1", "--out", "o"]
    assert main(argv + ["--data-root", rel]) == 0     # relative, from the directory the command starts in
    assert Path(os.environ["GRAPHATTN_DATA"]) == data.resolve()


def _offline(*args, **kwargs):
    raise OSError("no network in this test")

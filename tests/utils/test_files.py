"""File helpers (graphattn.utils.files): CSV output that replaces files atomically, keeps links,
devices and pipes, appends to standard output and stderr, and output paths given as folders."""
import gzip
import os
import subprocess
import sys

from graphattn.cli.main import main
from graphattn.utils.files import out_path, write_csv


def test_write_csv_replaces_atomically_keeps_links_and_devices(tmp_path):
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    write_csv(link, ["a", "b"], [{"a": 1, "b": 2}])
    assert link.is_symlink() and target.read_text().splitlines() == ["a,b", "1,2"]
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    write_csv(fifo, ["a"], [{"a": 3}])  # written into the pipe, not replaced by a file
    assert os.read(r, 100) == b"a\r\n3\r\n" and fifo.exists() and not fifo.is_file()
    os.close(r)


def test_write_csv_to_a_gz_name_is_gzip_compressed(tmp_path, capsys):
    write_csv(tmp_path / "p.csv.gz", ["node", "label"], [{"node": 0, "label": "a,b"}, {"node": 1, "label": "c"}])
    assert gzip.decompress((tmp_path / "p.csv.gz").read_bytes()).decode() == 'node,label\r\n0,"a,b"\r\n1,c\r\n'
    assert main(["train", "karate", "--epochs", "1", "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    assert main(["predict", "--checkpoint", str(tmp_path / "run" / "best.pt"), "--out", str(tmp_path / "k.csv.gz")]) == 0
    assert gzip.open(tmp_path / "k.csv.gz", "rt").readline().startswith("node,node_id,split,label,predicted")


def test_write_csv_to_our_own_stdout_appends(tmp_path, monkeypatch):
    """`predict --out /dev/stdout >> log`: written through sys.stdout, not by reopening the
    file with "w" (which would truncate the log) or renaming over it."""
    log = tmp_path / "log.txt"
    log.write_text("first\n")
    with open(log, "a") as f:
        link = tmp_path / "stdout"  # as /dev/stdout -> /proc/self/fd/1 -> the shell's `>> log`
        link.symlink_to(f"/proc/self/fd/{f.fileno()}")
        monkeypatch.setattr(sys, "stdout", f)
        write_csv(link, ["a"], [{"a": 1}])
        f.flush()
    monkeypatch.undo()
    text = log.read_text()
    assert text.startswith("first\n") and text.split()[1:] == ["a", "1"]


def test_write_csv_appends_to_other_descriptors_and_replaces_link_targets(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("old\n")
    code = ("import sys; from graphattn.utils.files import write_csv; print('e', file=sys.stderr, flush=True); "
            "write_csv('/dev/stderr', ['a'], [{'a': 1}])")
    with open(log, "a") as err:
        subprocess.run([sys.executable, "-c", code], stderr=err, check=True)
    assert log.read_text().split() == ["old", "e", "a", "1"]  # appended, nothing truncated
    real = tmp_path / "results" / "real.csv"
    real.parent.mkdir()
    real.write_text("before\n")
    link = tmp_path / "out.csv"
    link.symlink_to(real)
    write_csv(link, ["b"], [{"b": 2}])
    assert link.is_symlink() and real.read_text().split() == ["b", "2"]


def test_out_path_with_trailing_slash(tmp_path):
    assert out_path(str(tmp_path / "new") + "/", "p.csv") == tmp_path / "new" / "p.csv"
    assert out_path(tmp_path, "p.csv") == tmp_path / "p.csv"
    assert out_path(tmp_path / "x.csv", "p.csv") == tmp_path / "x.csv"

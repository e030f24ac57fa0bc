"""Where outputs go wrong (QA, session 14): unwritable or full destinations, interrupted runs,
moved data roots — one-line errors and intact files, never tracebacks or replaced devices."""
import errno
import os
import warnings
from pathlib import Path

import pytest
import torch

from graphattn.cli import main as cli
from graphattn.train.checkpoint import CheckpointError, save_checkpoint
from graphattn.utils.files import write_csv
from graphattn.cli.main import main


def test_checkpoint_write_failure_is_a_checkpoint_error_and_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "best.pt"
    save_checkpoint(path, {"a": torch.ones(2)})

    def full(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 988288 vs 988176")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(CheckpointError, match="disk full or read-only"):
        save_checkpoint(path, {"a": torch.zeros(2)})
    monkeypatch.undo()
    assert torch.load(path, weights_only=True)["a"].tolist() == [1.0, 1.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt"]  # no temporary file left


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
    import gzip

    write_csv(tmp_path / "p.csv.gz", ["node", "label"], [{"node": 0, "label": "a,b"}, {"node": 1, "label": "c"}])
    assert gzip.decompress((tmp_path / "p.csv.gz").read_bytes()).decode() == 'node,label\r\n0,"a,b"\r\n1,c\r\n'
    assert main(["train", "karate", "--epochs", "1", "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    assert main(["predict", "--checkpoint", str(tmp_path / "run" / "best.pt"), "--out", str(tmp_path / "k.csv.gz")]) == 0
    assert gzip.open(tmp_path / "k.csv.gz", "rt").readline().startswith("node,node_id,split,label,predicted")


def test_interrupt_and_full_disk_are_one_line(monkeypatch, capsys):
    def interrupted(argv=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_main", interrupted)
    assert main(["train", "karate"]) == 130
    assert "--resume" in capsys.readouterr().err
    assert main(["predict", "--checkpoint", "x"]) == 130
    assert "--resume" not in capsys.readouterr().err

    def full(argv=None):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli, "_main", full)
    monkeypatch.setattr(cli, "_stdout_to_devnull", lambda: None)  # keep pytest's capture
    assert main(["predict", "--checkpoint", "x"]) == 1
    assert "no space left" in capsys.readouterr().err

    def other(argv=None):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(cli, "_main", other)
    with pytest.raises(OSError):  # other OS errors are not hidden
        main(["predict", "--checkpoint", "x"])


def test_resume_without_last_pt_says_so(tmp_path, capsys):
    assert main(["train", "karate", "--epochs", "1", "--resume", "--no-progress", "--threads", "1",
                 "--out", str(tmp_path / "new")]) == 0
    assert "no " + str(tmp_path / "new" / "last.pt") + " to resume from" in capsys.readouterr().out


def test_recorded_root_is_used_only_while_it_holds_the_data(tmp_path):
    from graphattn.data.download import DataFileError
    from graphattn.tasks.social.node import recorded_root_first

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


def test_a_missing_dataset_on_train_gives_only_the_real_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRAPHATTN_DATA", str(tmp_path / "empty"))  # today's root = the root train records
    (tmp_path / "empty").mkdir()
    import urllib.error
    import urllib.request

    def offline(*args, **kwargs):
        raise urllib.error.URLError("offline (test)")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # was: "the data root this model was trained with ... does not hold"
        code = main(["train", "mutag", "--epochs", "1", "--no-progress", "--out", str(tmp_path / "r")])
    assert code == 2 and "mutag" in capsys.readouterr().err.lower()


def test_unwritable_out_is_refused_before_training(tmp_path, monkeypatch, capsys):
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(tmp_path) else real(p, mode))
    assert main(["train", "karate", "--out", str(tmp_path / "run")]) == 2
    assert "is not writable" in capsys.readouterr().err


def test_csv_from_a_pipe(tmp_path):
    """`head x.csv | graphattn predict --csv /dev/stdin`: the table is read in one pass (it was
    opened twice, and the first open consumed the pipe); evaluate spools a pipe to a file."""
    import threading

    from graphattn.data.smiles_table import read_csv_table
    from graphattn.cli.molecules_predict import _spooled

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "w") as f:
            f.write("smiles,y\nCCO,1\nCCN,0\n")

    for read in (read_csv_table, lambda p: read_csv_table(_spooled(p))):
        t = threading.Thread(target=feed)
        t.start()
        header, rows = read(fifo)
        t.join()
        assert header == ["smiles", "y"] and [r for _, r in rows] == [["CCO", "1"], ["CCN", "0"]]
    assert _spooled(tmp_path / "plain.csv") == str(tmp_path / "plain.csv")  # files are read in place
    names = []
    for _ in range(2):  # the same contents get the same name: the processed cache is reused
        t = threading.Thread(target=feed)
        t.start()
        names.append(Path(_spooled(fifo)).name)
        t.join()
    assert names[0] == names[1]


def test_unwritable_caches_are_named(tmp_path, monkeypatch):
    from graphattn.data.download import DataFileError
    from graphattn.data.molecules import writable_dir

    blocker = tmp_path / "afile"
    blocker.write_text("")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.warns(UserWarning, match="not writable; processing into"):
        assert writable_dir(blocker, "csv/x") == tmp_path / "home" / ".cache" / "graphattn" / "csv" / "x"
    monkeypatch.setenv("HOME", str(blocker))  # the fallback cannot be made either
    with pytest.raises(DataFileError, match="GRAPHATTN_CACHE"):
        writable_dir(blocker, "csv/x")


def test_write_csv_to_our_own_stdout_appends(tmp_path, monkeypatch):
    """`predict --out /dev/stdout >> log`: written through sys.stdout, not by reopening the
    file with "w" (which truncated the log) or renaming over it."""
    import sys

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


def test_stratified_masks_small_classes_fill_val_and_test_other_splits_unchanged():
    from graphattn.data.social_splits import stratified_masks

    y = torch.arange(10).repeat_interleave(2)  # ten classes of two nodes: rounding per class left val empty
    tr, va, te = stratified_masks(y, 0.6, 0.2, seed=0)
    assert (int(tr.sum()), int(va.sum()), int(te.sum())) == (12, 4, 4)
    assert not bool(((tr & va) | (tr & te) | (va & te)).any())
    big = torch.randint(0, 3, (500,), generator=torch.Generator().manual_seed(1))
    masks = stratified_masks(big, 0.6, 0.2, seed=3)  # the per-class rule as before (README numbers)
    for c in range(3):
        m = int((big == c).sum())
        assert int((masks[0] & (big == c)).sum()) == max(1, round(0.6 * m))


def test_float64_node_classifier_builds_its_gcn_graph_once():
    from graphattn import NodeClassifier
    from graphattn.nn.models import node_classifier as nc

    calls = []
    real = nc.gcn_normalized_graph
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(nc, "gcn_normalized_graph", lambda *a, **k: calls.append(1) or real(*a, **k))
    try:
        m = NodeClassifier(4, 8, 2, num_layers=1, heads=2, self_loops=True, propagation=3).double().eval()
        x, ei = torch.randn(30, 4, dtype=torch.float64), torch.randint(0, 30, (2, 90))
        for _ in range(3):
            m(x, ei)
    finally:
        monkeypatch.undo()
    assert len(calls) == 1  # one cache entry serves the attention's loops and the propagation


def test_write_csv_appends_to_other_descriptors_and_replaces_link_targets(tmp_path):
    import subprocess
    import sys

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


def test_fit_accepts_numpy_scalar_aux_and_lazy_layers_name_dtype_errors():
    import numpy as np
    from torch import nn

    from graphattn import GraphSelfAttention
    from graphattn.train import fit

    x, y = torch.randn(8, 3), torch.randint(0, 2, (8,)).float()
    fwd = lambda model, batch, split: (model(batch[0]), batch[1], np.float32(0.1))  # noqa: E731
    fit(nn.Linear(3, 1), {"train": [(x, y)]}, fwd, kind="binary", epochs=1, progress=False, log=lambda m: None)
    layer = GraphSelfAttention((-1, 8), 4)  # lazy source side, known target side
    with pytest.raises(TypeError, match="has dtype torch.float64"):
        layer((torch.randn(3, 5, dtype=torch.float64), torch.randn(2, 8, dtype=torch.float64)),
              torch.tensor([[0, 1], [1, 0]]))


def test_resume_names_changed_settings_and_refuses_another_batching(tmp_path, capsys):
    base = ["train", "karate", "--no-progress", "--threads", "1", "--out", str(tmp_path / "k")]
    assert main([*base, "--epochs", "1"]) == 0
    capsys.readouterr()
    assert main([*base, "--epochs", "2", "--resume", "--mini-batch"]) == 2  # full batch -> partitions
    err = capsys.readouterr().err
    assert "another run" in err and "batching" in err
    assert main([*base, "--epochs", "2", "--resume", "--lr", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "--resume with changed settings" in out and "lr 0.01 -> 0.02" in out and "epochs 1 -> 2" in out


def test_metrics_record_the_environment(tmp_path):
    import json

    assert main(["train", "karate", "--epochs", "1", "--no-progress", "--threads", "1",
                 "--out", str(tmp_path / "k")]) == 0
    env = json.loads((tmp_path / "k" / "metrics.json").read_text())["environment"]
    assert env["torch"] == torch.__version__ and env["torch_threads"] == 1
    assert env["cpp_kernel"] in ("loaded", "failed to build: pure PyTorch path",
                                 "disabled (GRAPHATTN_NO_CPP): pure PyTorch path")

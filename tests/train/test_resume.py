"""Crash safety: a training process killed with SIGKILL at a random moment, then resumed,
ends with exactly the metrics of an uninterrupted run; checkpoints are never half-written."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from graphattn.train import load_checkpoint

JOB = r"""
import sys, torch, networkx as nx
from graphattn import NodeClassifier
from graphattn.train import TrainConfig, fit
torch.set_num_threads(1)
G = nx.karate_club_graph()
ei = torch.tensor(list(G.edges)).t(); ei = torch.cat([ei, ei.flip(0)], 1)
y = torch.tensor([G.nodes[i]["club"] == "Officer" for i in G.nodes], dtype=torch.long)
perm = torch.randperm(34, generator=torch.Generator().manual_seed(0))
masks = {"train": perm[:20], "val": perm[20:27], "test": perm[27:]}
x = torch.eye(34)
fwd = lambda m, _b, s: (m(x, ei)[masks[s]], y[masks[s]])
torch.manual_seed(0)
model = NodeClassifier(34, 32, 2, num_layers=2, heads=4, dropout=0.3)
fit(model, {s: [None] for s in masks}, fwd, TrainConfig(kind="multiclass", epochs=int(sys.argv[2]), lr=0.01,
                                                        resume=len(sys.argv) > 3, progress=False),
    out_dir=sys.argv[1], log=lambda s: None)
"""
EPOCHS = 150


def _run(tmp, out, *extra):
    script = tmp / "job.py"
    script.write_text(JOB)
    return subprocess.Popen([sys.executable, str(script), str(out), str(EPOCHS), *extra],
                            env={**os.environ, "PYTHONHASHSEED": "0"})


@pytest.mark.parametrize("trial", [0, 1])
def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path, trial):
    ref = _run(tmp_path, tmp_path / "ref")
    assert ref.wait(timeout=300) == 0
    expected = json.loads((tmp_path / "ref" / "metrics.json").read_text())

    out = tmp_path / "killed"
    proc = _run(tmp_path, out)
    deadline = time.time() + 120
    while not (out / "last.pt").exists() and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(random.Random(trial).uniform(0.05, 0.6))  # somewhere mid-run, maybe mid-write
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "metrics.json").exists(), "the run finished before it could be killed"
    stopped_at = load_checkpoint(out / "last.pt")["epoch"]  # a complete, loadable checkpoint
    assert 1 <= stopped_at < EPOCHS
    resumed = _run(tmp_path, out, "--resume")
    assert resumed.wait(timeout=300) == 0
    got = json.loads((out / "metrics.json").read_text())
    assert not [p for p in os.listdir(out) if p.endswith(".tmp")]  # a killed write's temp file is cleaned
    assert [h["loss"] for h in got["history"]] == pytest.approx([h["loss"] for h in expected["history"]], abs=1e-6)
    for split in ("train", "val", "test"):
        assert got[split]["accuracy"] == expected[split]["accuracy"]
    assert got["best_epoch"] == expected["best_epoch"]

"""Smoke and meaning tests of the sequence and image examples and the full-sequence benchmark.

examples/sequence_patterns.py, examples/digits_as_graphs.py (tiny sizes, one epoch) and
benchmarks/sequence.py --quick (a subprocess, as a user runs it).
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from graphattn import images_to_batch, sequence_graph

ROOT = Path(__file__).resolve().parents[1]


def load_script(relpath: str):
    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def no_cpp_build(monkeypatch):
    """The examples use the C++ kernel when it is built; a cold build takes minutes, and the
    kernel has its own tests (tests/ops/test_fused_cpp.py): smoke-test the pure PyTorch paths."""
    monkeypatch.setenv("GRAPHATTN_NO_CPP", "1")


@pytest.fixture(scope="module")
def seq():
    return load_script("examples/sequence_patterns.py")


@pytest.fixture(scope="module")
def digits():
    pytest.importorskip("sklearn")
    return load_script("examples/digits_as_graphs.py")


# ----------------------------------------------------------------------------- sequences
def test_task_labels_are_the_first_symbol(seq):
    symbols, labels = seq.make_data(5, 12, 4, torch.Generator().manual_seed(0))
    assert symbols.shape == labels.shape == (5, 12)
    assert (labels == symbols[:, :1]).all() and int(symbols.max()) < 4


@pytest.mark.parametrize("length,window", [(32, 3), (40, 1)])
def test_window_reach_is_layers_times_window(seq, length, window):
    graph = sequence_graph(length, "window", window=window)
    for layers in (1, 2, 3):  # position 0 reaches tokens 0..layers*window, no further
        assert seq.reach_fraction(graph, length, layers) == pytest.approx((layers * window + 1) / length)


def test_reach_of_long_range_patterns(seq):
    L, w, s = 64, 4, 8
    assert seq.reach_fraction(sequence_graph(L, "full"), L, 1) == 1.0
    assert seq.reach_fraction(sequence_graph(L, "stride", stride=s), L, 2) == pytest.approx(1 / s)
    glob = sequence_graph(L, ["window", "global"], window=w, num_global=1)
    assert seq.reach_fraction(glob, L, 1) == 1.0
    window = sequence_graph(L, "window", window=w)
    assert seq.reach_fraction(window, L, 1, tokens=1) < 1.0  # token needs two hops
    assert seq.reach_fraction(window, L, 2, tokens=1) == 1.0
    # window + stride: 0 -> multiples of s -> their windows; the last s/2 - 1 tokens are too far
    ws = sequence_graph(L, ["window", "stride"], window=w, stride=s)
    assert seq.reach_fraction(ws, L, 2) == pytest.approx((L - (s - w - 1)) / L)


def test_sequence_example_runs_and_prints_table(seq, tmp_path, capsys):
    out = tmp_path / "seq.json"
    rows = seq.main(["--epochs", "1", "--length", "16", "--vocab", "4", "--train", "32", "--val", "16",
                     "--test", "16", "--hidden", "16", "--heads", "2", "--pe-channels", "8",
                     "--window", "1", "--stride", "4", "--batch-size", "16", "--out", str(out)])
    text = capsys.readouterr().out
    assert "Epoch 001 | loss" in text and "| pattern | edges / sequence" in text
    by_name = {r["pattern"]: r for r in rows}
    assert list(by_name) == list(seq.PATTERNS)
    assert by_name["full"]["edges_per_sequence"] == 16 * 16
    assert by_name["window"]["edges_per_sequence"] == 16 * 3 - 2
    assert by_name["stride"]["edges_per_sequence"] == 16 * 4
    assert by_name["window+token"]["edges_per_sequence"] == 16 * 3 - 2 + 2 * 16 + 1
    assert by_name["window"]["accuracy_bound"] < by_name["window+global"]["accuracy_bound"] == 1.0
    for r in rows:
        assert 0.0 <= r["test_accuracy"] <= 1.0 and r["seconds_per_epoch"] > 0
    payload = json.loads(out.read_text())
    assert payload["chance"] == 0.25 and len(payload["results"]) == len(seq.PATTERNS)


def test_sequence_example_rejects_unknown_pattern(seq):
    with pytest.raises(SystemExit):
        seq.parse_args(["--patterns", "banded"])


# ----------------------------------------------------------------------------- digits
def test_digit_pixels_follow_images_to_batch_node_order(digits):
    images, labels, splits = digits.load_splits(0.2, 0.1, 0, limit=300)
    assert images.shape == (300, 1, 8, 8) and 0.0 <= float(images.min()) and float(images.max()) <= 1.0
    parts = [set(splits[k].tolist()) for k in ("train", "val", "test")]
    assert sum(map(len, parts)) == 300 and not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    idx = splits["test"][:3]
    real = images_to_batch(images[idx], "grid", pe_channels=16)
    x = images[idx].reshape(3 * 64, 1)  # what the example feeds the model with a shared template
    template = images_to_batch(torch.zeros(3, 1, 8, 8), "grid", pe_channels=16)
    assert torch.equal(real.x, x) and torch.equal(real.edge_index, template.edge_index)
    assert torch.equal(real.pe, template.pe)


def test_digits_example_runs_and_prints_table(digits, tmp_path, capsys):
    out = tmp_path / "digits.json"
    summary = digits.main(["--epochs", "1", "--seeds", "0", "--limit", "200", "--hidden", "16",
                           "--layers", "1", "--heads", "2", "--mlp-hidden", "16", "--out", str(out)])
    text = capsys.readouterr().out
    assert "Epoch 001 | loss" in text and "| model | parameters | test acc." in text
    assert [s["model"] for s in summary] == ["full", "grid", "mlp"]
    for s in summary:
        assert 0.0 <= s["test_accuracy_mean"] <= 1.0 and s["seconds_per_epoch"] > 0
    assert len(json.loads(out.read_text())["runs"]) == 3


# ----------------------------------------------------------------------------- benchmark
def test_sequence_benchmark_quick(tmp_path):
    pytest.importorskip("torch_geometric")
    out = tmp_path / "bench.json"
    env = {**os.environ, "GRAPHATTN_NO_CPP": "1"}  # no cold C++ build in a smoke test
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sequence.py"), "--quick",
                           "--threads", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "× ref fwd+bwd" in proc.stdout and "1.1x target" in proc.stdout
    results = {r["row"]: r for r in json.loads(out.read_text())["results"]}
    assert {"plain SDPA", "ours (dense)", "ours (dense, new graph)", "ours (chunked)",
            "TransformerConv", "ours (edge_index only)", "nn.MultiheadAttention", "SDPA core",
            "ours core (edge_index only)", "ours core (batch=)"} <= set(results)
    assert results["plain SDPA"]["ratio_vs_plain"] == pytest.approx(1.0)
    assert results["ours (dense)"]["max_abs_diff_vs_ref"] < 1e-5  # same weights, same numbers
    assert results["ours (edge_index only)"]["max_abs_diff_vs_ref"] < 1e-5
    for r in results.values():  # nn.MultiheadAttention has its own weights
        assert r["total_ms"] > 0 and (r["row"] == "nn.MultiheadAttention" or r["max_abs_diff_vs_ref"] < 1e-4), r
    assert out.with_suffix(".csv").exists()

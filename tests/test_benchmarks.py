"""Smoke test of benchmarks/attention.py: tiny sizes, every row runs, the table prints."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "attention.py"
LAYERS = ("ours (auto)", "ours (chunked)", "TransformerConv", "GATConv")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    pytest.importorskip("torch_geometric")
    out = tmp_path_factory.mktemp("bench") / "attention.json"
    # One tiny case, 1 thread per worker, workers in parallel: fast on a 2-core machine.
    # GRAPHATTN_NO_CPP keeps a cold C++ build out of the smoke test (tests/test_kernels.py
    # covers the kernel); "ours (auto)" then reports the chunked fallback as its backend.
    env = {**os.environ, "GRAPHATTN_NO_CPP": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--cases", "random-2k",
                           "--threads", "1", "--jobs", "3", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, json.loads(out.read_text()), out


def test_table_printed_with_every_layer(quick_run):
    stdout, _, _ = quick_run
    assert "| case" in stdout and "speed-up vs TC" in stdout
    table_rows = [line for line in stdout.splitlines() if line.startswith("| random N=2k")]
    assert all(any(f"| {name} " in r for r in table_rows) for name in LAYERS), stdout
    assert "fwd floor @gather" in stdout  # the bandwidth-floor table


def test_results_are_finite_and_written(quick_run):
    _, payload, out = quick_run
    results = payload["results"]
    assert sorted(r["row"] for r in results) == sorted(LAYERS)
    for r in results:
        assert "error" not in r, r
        assert r["time_s"] > 0 and r["peak_delta_mb"] >= 0
        for key in ("speedup_vs_tc", "mem_vs_tc", "speedup_vs_gat", "mem_vs_gat"):
            assert r[key] is not None and math.isfinite(r[key]) and r[key] > 0, (key, r)
    tc = next(r for r in results if r["row"] == "TransformerConv")
    assert tc["speedup_vs_tc"] == pytest.approx(1.0) and tc["mem_vs_tc"] == pytest.approx(1.0)
    assert "glibc" in payload["meta"]["allocator"] or "malloc" in payload["meta"]["allocator"]
    (floor,) = payload["floor"]
    assert floor["fwd_bytes"] == (3 * 40_000 + 2_000) * 4 * 32 * 4
    assert math.isfinite(floor["fwd_floor_gather_s"]) and floor["fwd_floor_gather_s"] > 0
    assert out.with_suffix(".csv").read_text().startswith("case_name,")

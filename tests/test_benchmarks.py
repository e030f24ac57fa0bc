"""Smoke test of benchmarks/attention.py: tiny sizes, every row runs, the table prints."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphattn.ops import extension
from graphattn.testing import shared_data_dir

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "attention.py"
LAYERS = ("ours (auto)", "ours (chunked)", "TransformerConv", "GATConv")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    pytest.importorskip("torch_geometric")
    out = tmp_path_factory.mktemp("bench") / "attention.json"
    # One tiny case, 1 thread per worker, workers in parallel: fast on a 2-core machine.
    # GRAPHATTN_NO_CPP keeps a cold C++ build out of the smoke test (tests/ops/test_fused_cpp.py
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
    assert floor["floor_basis"] == "gather"  # CPU: gaps against the random-gather floor
    assert floor["total_floor_s"] == pytest.approx(floor["total_floor_gather_s"])
    assert out.with_suffix(".csv").read_text().startswith("case_name,")


@pytest.mark.slow
def test_compiled_row_runs_next_to_eager_and_pyg(tmp_path):
    """``--compile`` adds ``ours (compiled)`` (torch.compile, fullgraph) to the same run and says how its
    time compares with the eager layer's."""
    pytest.importorskip("torch_geometric")
    if not extension.fused_available():
        pytest.skip(f"fused C++ kernel unavailable: {extension.build_error()}")
    out = tmp_path / "attention.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--cases", "molecules-16", "--compile",
                           "--rows", "ours (auto)", "ours (compiled)", "TransformerConv", "--threads", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = {r["row"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == {"ours (auto)", "ours (compiled)", "TransformerConv"}
    for r in results.values():
        assert "error" not in r and r["time_s"] > 0, r
    assert results["ours (compiled)"]["backend"].startswith("torch.compile, fullgraph: fused C++"), results
    assert "torch.compile(layer, fullgraph=True) vs the same layer in eager mode" in proc.stdout


# ----------------------------------------------------------------------------- crossover.py
@pytest.fixture(scope="module")
def crossover_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "crossover.json"
    # No C++ build in a smoke test: the fused row is then skipped, with a note.
    env = {**os.environ, "GRAPHATTN_NO_CPP": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "crossover.py"), "--quick",
                           "--threads", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, json.loads(out.read_text())


def test_crossover_table_and_statement(crossover_run):
    stdout, payload = crossover_run
    assert "impl='fused' skipped" in stdout
    rows = [line for line in stdout.splitlines() if line.startswith("| ") and "spread" not in line]
    assert len(rows) == 4 * 2  # 4 spreads x sizes 4, 8
    for spread in ("equal", "±50%", "1..2n", "log-normal"):
        assert sum(r.startswith(f"| {spread} ") for r in rows) == 2, stdout
        assert f"- {spread}: " in stdout  # one crossover sentence per spread
    results = payload["results"]
    assert payload["meta"]["impls"] == ["dense", "chunked"]
    for r in results:
        assert r["dense_ms"] > 0 and r["chunked_ms"] > 0
        assert r["chunked_max_abs_diff"] < 1e-4  # both impls computed the same attention
        assert r["auto"] == "dense"  # complete graphs: auto takes the SDPA path here
        assert r["best"] in ("dense", "chunked") and r["padding_waste"] >= 1.0
    equal = [r for r in results if r["spread"] == "equal"]
    assert all(r["padding_waste"] == 1.0 and r["E"] == 8 * r["mean_n"] ** 2 for r in equal)


def test_graph_sizes_spreads():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _inputs import complete_graph_batch, graph_sizes, padding_waste

    assert graph_sizes(16, 5, "equal") == [16] * 5
    wide = graph_sizes(16, 2000, "1..2n", seed=1)
    assert min(wide) >= 1 and max(wide) <= 31 and abs(sum(wide) / 2000 - 16) < 1
    assert 2.5 < padding_waste(wide) < 3.5  # ~3x: 31^2 / E[n^2] with n ~ U[1, 31]
    with pytest.raises(ValueError, match="spread must be one of"):
        graph_sizes(16, 5, "wide")
    ei, batch = complete_graph_batch([2, 3])
    assert ei.shape == (2, 4 + 9) and batch.tolist() == [0, 0, 1, 1, 1]
    assert set(map(tuple, ei.t().tolist())) == ({(i, j) for i in range(2) for j in range(2)}
                                                | {(i, j) for i in range(2, 5) for j in range(2, 5)})


# ----------------------------------------------------------------------------- tox21_epoch.py
def test_tox21_epoch_smoke(tmp_path):
    pytest.importorskip("torch_geometric")
    pytest.importorskip("rdkit")

    root = shared_data_dir()
    if root is None or not (root / "tox21").is_dir():
        pytest.skip("Tox21 not found (set GRAPHATTN_DATA to the shared data folder)")
    out = tmp_path / "tox21.json"
    env = {**os.environ, "GRAPHATTN_NO_CPP": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tox21_epoch.py"), "--limit", "150",
                           "--repeats", "1", "--warmup", "0", "--threads", "1", "--jobs", "2",
                           "--data-root", str(root), "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert any(line.startswith("| ours ") for line in table), proc.stdout
    assert any(line.startswith("| TransformerConv ") for line in table), proc.stdout
    assert "x TransformerConv:" in proc.stdout  # the verdict line
    res = {r["model"]: r for r in json.loads(out.read_text())["results"]}
    ours, tc = res["ours"], res["TransformerConv"]
    assert "error" not in ours and "error" not in tc, (ours, tc)
    assert ours["backend"].startswith("chunked") and tc["backend"].startswith("PyG")
    assert ours["num_parameters"] == tc["num_parameters"]  # equal-size models
    assert tc["max_abs_diff_vs_ours"] < 1e-4  # and the same function
    assert ours["molecules"] == tc["molecules"] == 120  # scaffold train split: 80% of 150
    assert ours["edges"] == tc["edges"] > 0 and ours["batches"] == 1
    assert ours["epoch_s"] > 0 and ours["peak_delta_mb"] >= 0
    assert tc["speedup_vs_tc"] == pytest.approx(1.0) and ours["speedup_vs_tc"] > 0
    assert 0 < ours["collate_storage_s"] and 0 < ours["collate_s"]  # both collations of the same batches


@pytest.mark.slow
def test_tox21_epoch_compiled_row_of_the_default_recipe(tmp_path):
    pytest.importorskip("rdkit")
    root = shared_data_dir()
    if root is None or not (root / "tox21").is_dir():
        pytest.skip("Tox21 not found (set GRAPHATTN_DATA to the shared data folder)")
    out = tmp_path / "tox21.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tox21_epoch.py"), "--limit", "150",
                           "--recipe", "defaults", "--compile", "--models", "ours", "--repeats", "1",
                           "--warmup", "1", "--threads", "1", "--batch-size", "32", "--data-root", str(root),
                           "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = {r["model"]: r for r in json.loads(out.read_text())["results"]}
    assert set(res) == {"ours", "ours (compiled)"}  # no TransformerConv row for the default recipe
    fast = res["ours (compiled)"]
    assert "error" not in fast, fast
    # one trace per batch size class, not per batch: batches of 32 molecules straddle a node-count
    # bound of the first trace (N <= 512) and may compile once more
    assert 0 <= fast["recompiles"] <= 2 and fast["compiled_vs_eager"] > 0 and fast["eager_epoch_s"] > 0
    # the same training up to dropout masks (drawn from another generator state when compiled)
    assert fast["mean_loss_per_epoch"][0] == pytest.approx(res["ours"]["mean_loss_per_epoch"][0], rel=0.05)

#!/usr/bin/env python
"""GraphSelfAttention vs PyG TransformerConv / GATConv: one layer, forward + backward, CPU.

Every (case, layer) pair runs in a fresh subprocess under the same thread count and the
same malloc settings; the script prints one markdown table (median time, peak extra RSS,
ratios vs PyG), the memory-bandwidth floor of each case, and writes JSON + CSV to --out.
See benchmarks/README.md for the method.

    python benchmarks/attention.py                 # 10k/200k, 100k/2M, 128 molecules
    python benchmarks/attention.py --large         # + N=200k / E=5M
    python benchmarks/attention.py --quick         # tiny sizes, seconds (smoke test)
    python benchmarks/attention.py --tuned-malloc  # MALLOC_MMAP_MAX_=0 ... for ALL rows
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402  (stdlib only: the driver never imports torch)

IN_CHANNELS, OUT_CHANNELS, HEADS, DTYPE_BYTES = 128, 32, 4, 4
REF_TC, REF_GAT = "TransformerConv", "GATConv"

# Cases: name -> spec. "group" decides when a case runs (default / --large / --quick).
CASES = {
    "random-10k": {"kind": "random", "N": 10_000, "E": 200_000, "group": "default"},
    "random-100k": {"kind": "random", "N": 100_000, "E": 2_000_000, "group": "default"},
    "random-200k": {"kind": "random", "N": 200_000, "E": 5_000_000, "group": "large"},
    "molecules-128": {"kind": "molecules", "graphs": 128, "group": "default"},
    "random-2k": {"kind": "random", "N": 2_000, "E": 40_000, "group": "quick"},
    "molecules-16": {"kind": "molecules", "graphs": 16, "group": "quick"},
}
# Rows: layer name -> how to build it (see build_layer). Extend here (e.g. compile, bf16).
ROWS = {
    "ours (auto)": {"layer": "ours", "impl": "auto"},
    "ours (chunked)": {"layer": "ours", "impl": "chunked"},
    REF_TC: {"layer": "TransformerConv"},
    REF_GAT: {"layer": "GATConv"},
}
# Rough peak-RSS model for the memory cap, bytes per edge in units of one (H*C) float row:
# PyG keeps ~5 (TransformerConv) / ~3.3 (GATConv) per-edge (E, H, C) tensors alive (fitted
# to N=100k/E=2M: 6.4 / 4.5 GB). A case that outgrows the estimate is killed at the cap.
_EDGE_ROWS = {"TransformerConv": 5.5, "GATConv": 3.5, "ours": 0.0}


# ----------------------------------------------------------------------------- inputs
def molecule_like_edges(graphs: int, seed: int):
    """Disjoint union of random molecule-sized graphs: 18-32 nodes (mean 25), a random
    spanning tree plus 3 ring closures (~27 bonds), both directions (~54 directed edges)."""
    rng = random.Random(seed)
    src, dst, offset = [], [], 0
    for _ in range(graphs):
        n = rng.randint(18, 32)
        bonds = {(rng.randrange(i), i) for i in range(1, n)}  # random tree
        while len(bonds) < n - 1 + 3:
            a, b = sorted(rng.sample(range(n), 2))
            bonds.add((a, b))
        for a, b in bonds:
            src += [a + offset, b + offset]
            dst += [b + offset, a + offset]
        offset += n
    return offset, src, dst


def case_size(case: dict):
    if case["kind"] == "random":
        return case["N"], case["E"]
    n, src, _ = molecule_like_edges(case["graphs"], seed=0)
    return n, len(src)


def case_label(name: str, case: dict) -> str:
    n, e = case_size(case)
    short = lambda v: f"{v / 1e6:g}M" if v >= 1e6 else (f"{v / 1e3:.3g}k" if v >= 1e3 else str(v))  # noqa: E731
    if case["kind"] == "molecules":
        return f"{case['graphs']} molecules (N={short(n)}, E={short(e)})"
    return f"random N={short(n)}, E={short(e)}"


def build_inputs(case: dict, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    if case["kind"] == "random":
        N, E = case["N"], case["E"]
        edge_index = torch.randint(0, N, (2, E), generator=g)  # self-loops/duplicates allowed
    else:
        N, src, dst = molecule_like_edges(case["graphs"], seed)
        edge_index = torch.tensor([src, dst], dtype=torch.long)
    x = torch.randn(N, IN_CHANNELS, generator=g)
    return x, edge_index


def build_layer(row: dict):
    """The layer and a short description of the backend that will actually run."""
    if row["layer"] == "ours":
        import graphattn

        layer = graphattn.GraphSelfAttention(IN_CHANNELS, OUT_CHANNELS, heads=HEADS, impl=row["impl"])
        backend = "chunked PyTorch"
        if row["impl"] == "auto":
            try:
                from graphattn import kernels

                if kernels.fused_available():  # builds/loads the C++ kernel before the baseline
                    backend = "fused C++"
                elif kernels._disabled():
                    backend = "chunked (GRAPHATTN_NO_CPP set)"
                else:
                    backend = f"chunked (C++ build failed: {kernels._ERROR})"
            except ImportError:
                backend = "chunked (no graphattn.kernels)"
        return layer, backend
    import torch_geometric
    from torch_geometric import typing as pyg_typing
    from torch_geometric.nn import GATConv, TransformerConv

    extras = [n for n, ok in (("pyg-lib", pyg_typing.WITH_PYG_LIB),
                              ("torch-scatter", pyg_typing.WITH_TORCH_SCATTER)) if ok]
    backend = f"PyG {torch_geometric.__version__}" + (f" + {', '.join(extras)}" if extras else "")
    if row["layer"] == "TransformerConv":
        return TransformerConv(IN_CHANNELS, OUT_CHANNELS, heads=HEADS), backend
    # No self-loops: TransformerConv and ours attend over the given edges only.
    return GATConv(IN_CHANNELS, OUT_CHANNELS, heads=HEADS, add_self_loops=False), backend


# ----------------------------------------------------------------------------- workers
def layer_worker(spec: dict) -> dict:
    import torch

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    x, edge_index = build_inputs(spec["case"], spec["seed"])
    x.requires_grad_(True)
    layer, backend = build_layer(ROWS[spec["row"]])
    meter = H.PeakRSS()
    meter.start()  # baseline: imports + inputs + parameters

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        t0 = time.perf_counter()
        out = layer(x, edge_index)
        t1 = time.perf_counter()
        out.sum().backward()
        t2 = time.perf_counter()
        return {"fwd": t1 - t0, "total": t2 - t0}

    times = H.time_repeats(step, spec["warmup"], spec["repeats"], spec["min_time"])
    total, fwd = H.summarize(times["total"]), H.summarize(times["fwd"])
    return {"backend": backend, "time_s": total["median"], "time_q1_s": total["q1"],
            "time_q3_s": total["q3"], "time_min_s": total["min"], "fwd_s": fwd["median"],
            "repeats": total["n"], "torch": torch.__version__, "threads": torch.get_num_threads(),
            **meter.stop()}


def bandwidth_worker(spec: dict) -> dict:
    import torch

    torch.set_num_threads(spec["threads"])
    row_bytes = HEADS * OUT_CHANNELS * DTYPE_BYTES
    res = {"copy_GBps": H.measure_copy_bandwidth(spec["copy_bytes"]) / 1e9, "row_bytes": row_bytes,
           "gather_GBps": {}}
    for name, case in spec["cases"].items():
        N, E = case_size(case)  # k and v tables: 2N rows; k_j and v_j per edge: 2E gathers
        # at least 1M gathers so small (cache-resident) tables are timed over enough work
        res["gather_GBps"][name] = H.measure_gather_bandwidth(
            2 * N, row_bytes, min(max(2 * E, 1_000_000), 4_000_000)) / 1e9
    return res


# ----------------------------------------------------------------------------- report
def floor_row(name: str, case: dict, bw: dict, results: list) -> dict:
    """Bytes one layer must move, and the time they take at the measured bandwidths."""
    N, E = case_size(case)
    row_b = HEADS * OUT_CHANNELS * DTYPE_BYTES
    fwd_bytes = (3 * E + N) * row_b   # q_i, k_j, v_j per edge + one output row per node
    bwd_bytes = (4 * E + 3 * N) * row_b  # q_i, k_j, v_j, dout_i per edge + dq, dk, dv per node
    gather = bw.get("gather_GBps", {}).get(name, math.nan) * 1e9
    copy = bw.get("copy_GBps", math.nan) * 1e9
    ours = [r for r in results if r["case_name"] == name and r["layer"] == "ours" and "time_s" in r]
    best = min(ours, key=lambda r: r["time_s"], default=None)
    rec = {"case_name": name, "N": N, "E": E, "fwd_bytes": fwd_bytes, "bwd_bytes": bwd_bytes,
           "fwd_floor_copy_s": fwd_bytes / copy, "fwd_floor_gather_s": fwd_bytes / gather,
           "total_floor_gather_s": (fwd_bytes + bwd_bytes) / gather}
    if best is not None:
        rec.update(best_ours=best["row"], ours_fwd_s=best["fwd_s"], ours_time_s=best["time_s"],
                   gap_fwd=best["fwd_s"] / rec["fwd_floor_gather_s"],
                   gap_total=best["time_s"] / rec["total_floor_gather_s"])
    return rec


def add_ratios(results: list) -> None:
    by_case = {}
    for r in results:
        by_case.setdefault(r["case_name"], {})[r["row"]] = r
    for r in results:
        for ref, key in ((REF_TC, "tc"), (REF_GAT, "gat")):
            ref_r = by_case[r["case_name"]].get(ref, {})
            ok = "time_s" in r and "time_s" in ref_r
            r[f"speedup_vs_{key}"] = ref_r["time_s"] / r["time_s"] if ok else None
            ok = ok and ref_r["peak_delta_mb"] > 0
            r[f"mem_vs_{key}"] = r["peak_delta_mb"] / ref_r["peak_delta_mb"] if ok else None


def render(results: list, floors: list, bw: dict) -> str:
    x = lambda v: "n/a" if v is None else f"{v:.2f}×"  # noqa: E731
    rows = []
    for r in results:
        if "time_s" not in r:
            rows.append([r["label_case"], r["row"], r.get("backend", "—"), "—", "—", "—", "—",
                         "—", "—", "—", "—"])
            continue
        spread = (r["time_q3_s"] - r["time_q1_s"]) / r["time_s"] * 100
        rows.append([r["label_case"], r["row"], r["backend"], H.fmt(r["time_s"]), f"{spread:.0f}%",
                     H.fmt(r["fwd_s"]), f"{r['peak_delta_mb']:.0f}", x(r["speedup_vs_tc"]),
                     H.fmt(r["mem_vs_tc"]), x(r["speedup_vs_gat"]), H.fmt(r["mem_vs_gat"])])
    head = ["case", "layer", "backend", "fwd+bwd (s)", "IQR/med", "fwd (s)", "peak ΔRSS (MB)",
            "speed-up vs TC", "mem / TC", "speed-up vs GAT", "mem / GAT"]
    text = [H.markdown_table(head, rows, right=[False] * 3 + [True] * 8)]
    notes = [f"- {r['label_case']} / {r['row']}: {r['error']}" for r in results if "error" in r]
    if notes:
        text += ["", "Not measured:"] + notes
    frows = [[f["label_case"], f"{f['fwd_bytes'] / 1e9:.3g}", f"{bw['gather_GBps'][f['case_name']]:.3g}",
              H.fmt(f["fwd_floor_copy_s"]), H.fmt(f["fwd_floor_gather_s"]), H.fmt(f.get("ours_fwd_s")),
              x(f.get("gap_fwd")), H.fmt(f["total_floor_gather_s"]), H.fmt(f.get("ours_time_s")),
              x(f.get("gap_total"))] for f in floors] if bw.get("gather_GBps") else []
    if frows:
        text += ["", f"Bandwidth floor (copy {bw['copy_GBps']:.1f} GB/s read+write; random gather of "
                 f"{bw['row_bytes']}-byte rows per case below). Fwd bytes = (3E + N)·H·C·4; "
                 "bwd bytes ≈ (4E + 3N)·H·C·4; 'ours' = the faster of our rows.", "",
                 H.markdown_table(["case", "fwd GB", "gather GB/s", "fwd floor @copy (s)",
                                   "fwd floor @gather (s)", "ours fwd (s)", "gap",
                                   "fwd+bwd floor @gather (s)", "ours fwd+bwd (s)", "gap"],
                                  frows, right=[False] + [True] * 9)]
    return "\n".join(text)


# ----------------------------------------------------------------------------- driver
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny cases and few repeats (smoke test)")
    p.add_argument("--large", action="store_true", help="also run N=200k / E=5M")
    p.add_argument("--cases", nargs="+", choices=sorted(CASES), help="run exactly these cases")
    p.add_argument("--rows", nargs="+", choices=list(ROWS), help="run only these layers")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats (default 5, quick 2)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up runs per case")
    p.add_argument("--min-time", type=float, default=None,
                   help="keep repeating until this many timed seconds (default 2, quick 0)")
    p.add_argument("--threads", type=int, default=2, help="torch / OpenMP threads per case")
    p.add_argument("--tuned-malloc", action="store_true",
                   help="MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1e11 for every row")
    p.add_argument("--mem-cap-gb", type=float, default=20.0,
                   help="skip/kill a case whose RSS would exceed this (also capped at 90%% of "
                        "the currently available memory)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per case")
    p.add_argument("--jobs", type=int, default=1,
                   help="cases run concurrently (>1 distorts timings; for smoke tests only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "attention.json",
                   help="JSON results (a CSV is written beside it)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        spec = json.loads(args.worker)
        fn = bandwidth_worker if spec["kind"] == "bandwidth" else layer_worker
        try:
            H.emit_result(fn(spec))
        except Exception as exc:  # reported in the table, not a crash of the driver
            H.emit_result({"error": f"{type(exc).__name__}: {exc}"})
        return 0

    if args.cases:
        names = args.cases
    else:
        groups = {"quick"} if args.quick else ({"default", "large"} if args.large else {"default"})
        names = [n for n, c in CASES.items() if c["group"] in groups]
    row_names = args.rows or list(ROWS)
    repeats = args.repeats if args.repeats is not None else (2 if args.quick else 5)
    min_time = args.min_time if args.min_time is not None else (0.0 if args.quick else 2.0)
    env = H.worker_env(args.threads, args.tuned_malloc)
    avail = H.mem_available_bytes()
    cap = int(args.mem_cap_gb * 2**30)
    if avail is not None:
        cap = min(cap, int(0.9 * avail))
    malloc = H.malloc_description(env)
    load_start = os.getloadavg()
    print(f"# graph attention benchmark: 1 layer ({IN_CHANNELS} -> {HEADS} heads x {OUT_CHANNELS}), "
          f"forward + backward of out.sum() w.r.t. parameters and x, float32")
    print(f"threads: {args.threads} | allocator: {malloc} | memory cap per case: {cap / 2**30:.1f} GB | "
          f"repeats: >= {repeats} (and >= {min_time:g} s) after {args.warmup} warm-up | "
          f"load average: {', '.join(f'{v:.1f}' for v in load_start)}", flush=True)

    jobs, skipped = [{"kind": "bandwidth", "label": "bandwidth", "threads": args.threads,
                      "copy_bytes": (32 if args.quick else 256) * 2**20,
                      "cases": {n: CASES[n] for n in names}}], []
    for name in names:
        case = CASES[name]
        N, E = case_size(case)
        for row in row_names:
            job = {"kind": "layer", "case_name": name, "case": case, "row": row,
                   "layer": ROWS[row]["layer"], "label_case": case_label(name, case),
                   "label": f"{name} {row}", "threads": args.threads, "seed": args.seed,
                   "warmup": args.warmup, "repeats": repeats, "min_time": min_time}
            est = (E * _EDGE_ROWS[job["layer"]] * HEADS * OUT_CHANNELS * DTYPE_BYTES
                   + E * 96 + N * (IN_CHANNELS + 12 * HEADS * OUT_CHANNELS) * DTYPE_BYTES + 600 * 2**20)
            if est > cap:
                skipped.append({**job, "error": f"skipped: estimated peak {est / 2**30:.1f} GB > "
                                                f"cap {cap / 2**30:.1f} GB"})
            else:
                jobs.append(job)
    t0 = time.perf_counter()
    done = H.run_cases(jobs, str(Path(__file__).resolve()), env, timeout=args.timeout,
                       mem_cap=cap, parallel=args.jobs, desc="attention benchmark")
    bw, results = done[0], done[1:] + skipped
    order = {(n, r): i for i, (n, r) in enumerate((n, r) for n in names for r in row_names)}
    results.sort(key=lambda r: order[(r["case_name"], r["row"])])
    add_ratios(results)
    floors = []
    if "error" not in bw:
        for name in names:
            f = floor_row(name, CASES[name], bw, results)
            floors.append({**f, "label_case": case_label(name, CASES[name])})
    else:
        print(f"bandwidth measurement failed: {bw['error']}")
    print()
    print(render(results, floors, bw))
    meta = {"argv": sys.argv[1:], "machine": H.machine_info(), "threads": args.threads,
            "allocator": malloc, "mem_cap_gb": cap / 2**30, "repeats": repeats, "warmup": args.warmup,
            "min_time_s": min_time, "dims": {"in_channels": IN_CHANNELS, "heads": HEADS,
                                             "out_channels": OUT_CHANNELS, "dtype": "float32"},
            "torch": next((r["torch"] for r in results if "torch" in r), None),
            "wall_s": time.perf_counter() - t0, "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
            "memory_method": "peak_delta_mb = ru_maxrss at the end - RSS after setup (imports, "
                             "inputs, parameters), with the RSS high-water mark reset at the end of "
                             "setup; one fresh subprocess per case",
            "time_method": "median wall time of forward + out.sum().backward() over the repeats"}
    strip = ("case", "kind", "label", "min_time", "warmup")
    flat = [{k: v for k, v in r.items() if k not in strip} for r in results]
    paths = H.write_results(args.out, {"meta": meta, "bandwidth": bw, "results": flat, "floor": floors},
                            flat)
    print(f"\nresults: {', '.join(str(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""GraphSelfAttention vs PyG TransformerConv / GATConv: one layer, forward + backward, CPU.

Every (case, layer) pair runs in a fresh subprocess under the same thread count and the
same malloc settings; the script prints one markdown table (median time, peak extra RSS,
ratios vs PyG), the memory-bandwidth floor of each case, and writes JSON + CSV to --out.
See benchmarks/README.md for the method.

    python benchmarks/attention.py                 # 10k/200k, 100k/2M, 128 molecules, bipartite 100k -> 50k
    python benchmarks/attention.py --large         # + N=200k / E=5M
    python benchmarks/attention.py --quick         # tiny sizes, seconds (smoke test)
    python benchmarks/attention.py --tuned-malloc  # MALLOC_MMAP_MAX_=0 ... for ALL rows
    python benchmarks/attention.py --compile       # + torch.compile(layer, fullgraph=True)
    python benchmarks/attention.py --bf16          # + the layer under torch.autocast(bfloat16)
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _device as D  # noqa: E402
import _harness as H  # noqa: E402  (stdlib only: the driver never imports torch)

from _attention_report import (CASES, DTYPE_BYTES, HEADS, IN_CHANNELS, OUT_CHANNELS,  # noqa: E402
                               ROWS, add_ratios, case_label, case_size, estimated_peak_bytes,
                               floor_row, render)
from _inputs import molecule_like_edges  # noqa: E402


# ----------------------------------------------------------------------------- inputs
def build_inputs(case: dict, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    if case["kind"] == "bipartite":  # x = (x_src, x_dst): every layer in PyG's bipartite mode
        Ns, Nd, E = case["N_src"], case["N_dst"], case["E"]
        edge_index = torch.stack([torch.randint(0, Ns, (E,), generator=g), torch.randint(0, Nd, (E,), generator=g)])
        return (torch.randn(Ns, IN_CHANNELS, generator=g), torch.randn(Nd, IN_CHANNELS, generator=g)), edge_index
    if case["kind"] == "random":
        N, E = case["N"], case["E"]
        edge_index = torch.randint(0, N, (2, E), generator=g)  # self-loops/duplicates allowed
    else:
        N, src, dst = molecule_like_edges(case["graphs"], seed)
        edge_index = torch.tensor([src, dst], dtype=torch.long)
    x = torch.randn(N, IN_CHANNELS, generator=g)
    return x, edge_index


def build_layer(row: dict, device: str = "cpu"):
    """The layer, and for ours a note on why the fused kernel will not run ("" if it may)."""
    if row["layer"] == "ours":
        import graphattn

        layer = graphattn.GraphSelfAttention(IN_CHANNELS, OUT_CHANNELS, heads=HEADS, impl=row["impl"])
        why = ""
        if row["impl"] == "auto" and device != "cpu":
            from graphattn.ops.fused_triton import triton_available

            why = "" if triton_available(device) else "no triton: the chunked path runs"
        elif row["impl"] == "auto":
            try:
                from graphattn.ops import extension

                if extension.fused_available():  # builds/loads the C++ kernel before the baseline
                    why = ""
                elif extension.disabled():
                    why = "GRAPHATTN_NO_CPP set"
                else:
                    why = f"C++ build failed: {extension.build_error()}"
            except ImportError:
                why = "no graphattn.ops.extension"
        return layer, why
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
def _release_freed_memory() -> None:
    """Hand freed heap memory back to the OS (glibc's ``malloc_trim``; a no-op elsewhere)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def layer_worker(spec: dict) -> dict:
    import torch

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    device = D.resolve_device(spec["device"])
    x, edge_index = build_inputs(spec["case"], spec["seed"])
    layer, note = build_layer(ROWS[spec["row"]], spec["device"])
    xs = tuple(t.to(device).requires_grad_(True) for t in (x if isinstance(x, tuple) else (x,)))
    x = xs if len(xs) == 2 else xs[0]  # (x_src, x_dst) for a bipartite case
    edge_index, layer = edge_index.to(device), layer.to(device)
    compiled = bool(ROWS[spec["row"]].get("compile"))
    half = ROWS[spec["row"]].get("autocast")  # e.g. "bfloat16": the forward under torch.autocast
    autocast = ((lambda: torch.autocast(device.type, dtype=getattr(torch, half))) if half
                else contextlib.nullcontext)
    if compiled:  # the kernels are named from an eager call: a compiled graph's autograd node hides them
        kernels = " + ".join(D.attention_backends(layer(x, edge_index)))
        note = f"torch.compile, fullgraph: {kernels}" + (f" ({note})" if note else "")
        layer = torch.compile(layer, fullgraph=True)
    ran = []

    def step():
        layer.zero_grad(set_to_none=True)
        for t in xs:
            t.grad = None
        D.synchronize(device)
        t0 = time.perf_counter()
        with autocast():
            out = layer(x, edge_index)
        D.synchronize(device)
        t1 = time.perf_counter()
        out.sum().backward()
        D.synchronize(device)
        t2 = time.perf_counter()
        if not ran:  # what actually ran, read off the autograd graph (after the timer)
            ran.append(" + ".join(D.attention_backends(out)))
        return {"fwd": t1 - t0, "total": t2 - t0}

    if compiled:  # compile (forward and backward graphs) before the memory baseline and the timings
        step()
        step()
        _release_freed_memory()  # the memory of these runs counts from the baseline on, as for eager rows
    meter = D.PeakMemory(device)
    meter.start()  # baseline: imports + inputs + parameters (+ the compiled code)
    times = H.time_repeats(step, spec["warmup"], spec["repeats"], spec["min_time"])
    total, fwd = H.summarize(times["total"]), H.summarize(times["fwd"])
    where = f" on {device.type}" if device.type != "cpu" else ""
    if compiled:
        backend = note + where
    else:
        backend = note if ROWS[spec["row"]]["layer"] != "ours" else (
            (ran[0] or "?") + (f" ({note})" if note else "") + where)
    return {"backend": backend, "time_s": total["median"], "time_q1_s": total["q1"],
            "time_q3_s": total["q3"], "time_min_s": total["min"], "fwd_s": fwd["median"],
            "repeats": total["n"], "torch": torch.__version__, "threads": torch.get_num_threads(),
            **meter.stop()}


def bandwidth_worker(spec: dict) -> dict:
    import torch

    torch.set_num_threads(spec["threads"])
    device = spec.get("device", "cpu")
    row_bytes = HEADS * OUT_CHANNELS * DTYPE_BYTES
    res = {"copy_GBps": H.measure_copy_bandwidth(spec["copy_bytes"], device=device) / 1e9,
           "row_bytes": row_bytes, "gather_GBps": {}, "device": device}
    for name, case in spec["cases"].items():
        N, E = case_size(case)  # k and v tables: 2N rows; k_j and v_j per edge: 2E gathers
        # at least 1M gathers so small (cache-resident) tables are timed over enough work
        res["gather_GBps"][name] = H.measure_gather_bandwidth(
            2 * N, row_bytes, min(max(2 * E, 1_000_000), 4_000_000), device=device) / 1e9
    return res


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
    p.add_argument("--device", default="cpu", choices=D.DEVICES,
                   help="cuda: synchronized timers, peak CUDA memory ('ours (auto)' = the Triton kernels there, "
                        "when triton is installed)")
    p.add_argument("--compile", action="store_true",
                   help="add the row 'ours (compiled)': torch.compile(layer, fullgraph=True), compiled (two "
                        "untimed runs) before the memory baseline, then timed like the others")
    p.add_argument("--bf16", action="store_true",
                   help="add the row 'ours (bf16)': the layer under torch.autocast(bfloat16) (bf16 projections "
                        "and the bf16 kernel, float32 accumulation), and its time over 'ours (auto)'")
    p.add_argument("--tuned-malloc", action="store_true",
                   help="MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1e11 for every row")
    p.add_argument("--mem-cap-gb", type=float, default=20.0,
                   help="skip/kill a case whose RSS would exceed this (also capped at 90%% of "
                        "the currently available memory)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per case")
    p.add_argument("--jobs", type=int, default=1,
                   help="cases run concurrently (>1 distorts timings; for smoke tests only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None,
                   help="JSON results (a CSV is written beside it); default benchmarks/results/attention.json, "
                        "with --quick runs/bench_attention_quick.json (the committed results stay as they are)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.out is None:
        args.out = (Path("runs") / "bench_attention_quick.json" if args.quick
                    else Path(__file__).resolve().parent / "results" / "attention.json")
    return args


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
    row_names = args.rows or [r for r in ROWS if (args.compile or not ROWS[r].get("compile"))
                              and (args.bf16 or not ROWS[r].get("autocast"))]
    cuda = args.device == "cuda"
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
          f"forward + backward of out.sum() w.r.t. parameters and x, float32"
          f"{' (ours (bf16): bfloat16 autocast)' if 'ours (bf16)' in row_names else ''}, {args.device}")
    print(f"threads: {args.threads} | allocator: {malloc} | memory cap per case: {cap / 2**30:.1f} GB | "
          f"repeats: >= {repeats} (and >= {min_time:g} s) after {args.warmup} warm-up | "
          f"load average: {', '.join(f'{v:.1f}' for v in load_start)}", flush=True)

    jobs, skipped = [{"kind": "bandwidth", "label": "bandwidth", "threads": args.threads,
                      "copy_bytes": (32 if args.quick else (2048 if cuda else 256)) * 2**20,
                      "cases": {n: CASES[n] for n in names}, "device": args.device}], []
    for name in names:
        case = CASES[name]
        for row in row_names:
            job = {"kind": "layer", "case_name": name, "case": case, "row": row,
                   "layer": ROWS[row]["layer"], "label_case": case_label(name, case),
                   "label": f"{name} {row}", "threads": args.threads, "seed": args.seed,
                   "warmup": args.warmup, "repeats": repeats, "min_time": min_time,
                   "device": args.device}
            est = estimated_peak_bytes(case, job["layer"])  # host RSS model: CPU only
            if est > cap and not cuda:
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
    print(render(results, floors, bw, D.memory_label(args.device)))
    meta = {"argv": sys.argv[1:], "machine": H.machine_info(args.device), "threads": args.threads, "device": args.device,
            "allocator": malloc, "mem_cap_gb": cap / 2**30, "repeats": repeats, "warmup": args.warmup,
            "min_time_s": min_time, "dims": {"in_channels": IN_CHANNELS, "heads": HEADS,
                                             "out_channels": OUT_CHANNELS, "dtype": "float32"},
            "torch": next((r["torch"] for r in results if "torch" in r), None),
            "wall_s": time.perf_counter() - t0, "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
            "memory_method": ("peak_delta_mb = torch.cuda.max_memory_allocated - memory_allocated "
                              "after setup (peak stats reset there)" if cuda else
                              "peak_delta_mb = ru_maxrss at the end - RSS after setup (imports, "
                              "inputs, parameters), with the RSS high-water mark reset at the end of "
                              "setup; one fresh subprocess per case"),
            "time_method": "median wall time of forward + out.sum().backward() over the repeats"}
    strip = ("case", "kind", "label", "min_time", "warmup")
    flat = [{k: v for k, v in r.items() if k not in strip} for r in results]
    paths = H.write_results(args.out, {"meta": meta, "bandwidth": bw, "results": flat, "floor": floors},
                            flat)
    print(f"\nresults: {', '.join(str(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

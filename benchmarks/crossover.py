#!/usr/bin/env python
"""Dense (SDPA) vs sparse (fused C++ or Triton / chunked) edge attention on batches of complete graphs.

A batch of ``--graphs`` molecule-sized graphs under the "full" pattern (every graph complete,
self-loops included, as ``sequence_graph(n, "full")`` builds it), for each mean graph size n
in ``--sizes`` and each size spread in ``--spreads``:

* ``equal``: every graph has n nodes (no padding);
* ``±50%``: sizes uniform on [n/2, 3n/2];
* ``1..2n``: sizes uniform on [1, 2n - 1] (padding to the largest graph wastes ~3x).

For each case it times ``edge_attention(q, k, v, edge_index, batch=batch, impl=...)`` forward +
backward (gradients of q, k, v; ``(N, H, C)`` = 4 heads x 32 channels, float32) with
``impl="dense"`` (padded SDPA), ``"fused"`` (C++ CSR kernel on CPU, Triton on CUDA) and ``"chunked"``
(pure PyTorch), interleaved round by round in this one process so load hits every impl
alike. The graph is the same tensor every call, so the CSR view and the completeness check
are cached as in the layers of one model; their one-off cost per batch is reported apart
(``setup``). The table also shows what ``impl="auto"`` picks and how far that is from the
best, and the script states the crossover.

    python benchmarks/crossover.py                          # n = 8..128, 3 spreads, 128 graphs
    python benchmarks/crossover.py --sizes 16 64 --spreads equal 1..2n --repeats 3
    python benchmarks/crossover.py --quick                  # tiny, seconds (smoke test)
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _device as D  # noqa: E402
import _harness as H  # noqa: E402
from _inputs import SPREADS, complete_graph_batch, graph_sizes, padding_waste  # noqa: E402

IMPLS = ("dense", "fused", "chunked")
_NAMES = {"SDPA": "dense", "fused C++": "fused", "fused Triton": "fused", "chunked PyTorch": "chunked"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64, 128], help="mean graph sizes n")
    p.add_argument("--spreads", nargs="+", default=list(SPREADS), choices=SPREADS)
    p.add_argument("--graphs", type=int, default=128, help="graphs per batch B")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--channels", type=int, default=32, help="channels per head C")
    p.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    p.add_argument("--repeats", type=int, default=5, help="timed rounds at least (every impl once per round)")
    p.add_argument("--min-time", type=float, default=1.0,
                   help="keep adding rounds until the slowest impl has this many timed seconds (max 100 rounds)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--device", default="cpu", choices=D.DEVICES)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="n = 4, 8; B = 8; 2 rounds (smoke test)")
    p.add_argument("--out", type=Path, default=Path("runs/bench_crossover.json"),
                   help="JSON results (a CSV is written beside it)")
    a = p.parse_args(argv)
    if a.quick:
        a.sizes, a.graphs, a.repeats, a.min_time, a.warmup = [4, 8], 8, 2, 0.0, 1
    return a


def measure_case(n: int, spread: str, a, device, impls):
    """Median fwd+bwd seconds per impl for one batch, plus setup cost and auto's choice."""
    import torch

    from graphattn.ops.csr import to_csr
    from graphattn.ops.dense import complete_graph_sizes, padded_length, prefer_dense
    from graphattn.functional import edge_attention

    sizes = graph_sizes(n, a.graphs, spread, seed=a.seed)
    edge_index, batch = complete_graph_batch(sizes, device=device)
    N, E, Hh, C = batch.numel(), edge_index.size(1), a.heads, a.channels
    g = torch.Generator().manual_seed(a.seed)
    q, k, v, grad_out = (torch.randn(N, Hh, C, generator=g).to(device) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)

    def setup():  # what a new batch costs once: CSR view + completeness check (+ CSC for fused)
        csr = to_csr(edge_index, N, cache=False)
        complete_graph_sizes(csr, batch)
        return csr

    def timed(fn):
        D.synchronize(device)
        t0 = time.perf_counter()
        out = fn()
        D.synchronize(device)
        return time.perf_counter() - t0, out

    setup_s = statistics.median(timed(setup)[0] for _ in range(3))
    csc_s = statistics.median(timed(lambda: setup().csc)[0] for _ in range(3)) - setup_s

    def step(impl):
        for t in (q, k, v):
            t.grad = None
        D.synchronize(device)
        t0 = time.perf_counter()
        out = edge_attention(q, k, v, edge_index, batch=batch, impl=impl)
        out.backward(grad_out)
        D.synchronize(device)
        return time.perf_counter() - t0, out.detach()

    outs = {}
    for impl in impls:
        for _ in range(a.warmup):
            _, outs[impl] = step(impl)
    auto = edge_attention(q, k, v, edge_index, batch=batch, impl="auto")
    auto_pick = [_NAMES.get(b, b) for b in D.attention_backends(auto)] or ["?"]
    times = {impl: [] for impl in impls}
    r = 0
    while r < a.repeats or (max(sum(t) for t in times.values()) < a.min_time and r < 100):
        for impl in impls[r % len(impls):] + impls[: r % len(impls)]:  # rotate the order
            times[impl].append(step(impl)[0])
        r += 1
    ref = outs[impls[0]]
    L = padded_length(torch.tensor(sizes))  # what the dense path pads to
    rec = {"spread": spread, "mean_n": n, "graphs": a.graphs, "N": N, "E": E, "max_n": max(sizes),
           "padded_length": L, "padding_waste": padding_waste(sizes, L), "setup_ms": 1e3 * setup_s, "csc_ms": 1e3 * max(csc_s, 0.0),
           "auto": auto_pick[0], "rule": "dense" if prefer_dense(torch.tensor(sizes)) else "fused",
           "rounds": r}
    for impl in impls:
        s = H.summarize(times[impl])
        rec[f"{impl}_ms"] = 1e3 * s["median"]
        rec[f"{impl}_iqr"] = (s["q3"] - s["q1"]) / s["median"]
        rec[f"{impl}_max_abs_diff"] = float((outs[impl] - ref).abs().max())
    rec["best"] = min(impls, key=lambda i: rec[f"{i}_ms"])
    rec["auto_vs_best"] = (rec[f"{rec['auto']}_ms"] / rec[f"{rec['best']}_ms"]
                           if f"{rec['auto']}_ms" in rec else None)
    return rec


def crossover_lines(results, impls):
    """One sentence per spread: where dense (SDPA) and the best sparse impl trade places."""
    sparse = [i for i in impls if i != "dense"]
    if "dense" not in impls or not sparse:
        return []
    lines = []
    for spread in dict.fromkeys(r["spread"] for r in results):
        rs = sorted((r for r in results if r["spread"] == spread), key=lambda r: r["mean_n"])
        best_sparse = [min(sparse, key=lambda i: r[f"{i}_ms"]) for r in rs]
        ratio = [r[f"{s}_ms"] / r["dense_ms"] for r, s in zip(rs, best_sparse)]  # > 1: dense wins
        wins = ["dense" if x > 1 else s for x, s in zip(ratio, best_sparse)]
        parts = ", ".join(f"n={r['mean_n']}: {w} ({max(x, 1 / x):.2f}x)" for r, w, x in zip(rs, wins, ratio))
        flips = [f"{rs[i - 1]['mean_n']}→{rs[i]['mean_n']}" for i in range(1, len(rs)) if wins[i] != wins[i - 1]]
        where = (f"crossover between n = {', '.join(flips)}" if flips
                 else f"no crossover in n = {rs[0]['mean_n']}..{rs[-1]['mean_n']}: {wins[0]} wins throughout")
        lines.append(f"- {spread}: {where} (winner, margin: {parts})")
    return lines


def render(results, impls, a):
    head = (["spread", "mean n", "max n", "pad L", "N", "E", "pad waste", "setup ms"]
            + [f"{i} ms (IQR)" for i in impls] + ["best", "auto picks", "auto / best", "rule"])
    rows = []
    for r in results:
        rows.append([r["spread"], r["mean_n"], r["max_n"], r["padded_length"], r["N"], r["E"],
                     f"{r['padding_waste']:.2f}×",
                     H.fmt(r["setup_ms"])]
                    + [f"{H.fmt(r[f'{i}_ms'])} ({100 * r[f'{i}_iqr']:.0f}%)" for i in impls]
                    + [r["best"], r["auto"], "n/a" if r["auto_vs_best"] is None else f"{r['auto_vs_best']:.2f}×",
                       r["rule"]])
    return H.markdown_table(head, rows, right=[False] + [True] * (len(head) - 5) + [False, False, True, False])


def main(argv=None):
    a = parse_args(argv)
    import torch
    from tqdm import tqdm

    from graphattn.ops.extension import fused_available
    from graphattn.ops.fused_triton import triton_available

    torch.set_num_threads(a.threads)
    device = D.resolve_device(a.device)
    impls = list(a.impls)
    have_fused = triton_available(device) if device.type == "cuda" else fused_available()
    if "fused" in impls and not have_fused:
        why = "no triton" if device.type == "cuda" else "the C++ kernel is unavailable here"
        print(f"note: impl='fused' skipped ({why})")
        impls.remove("fused")
    print(f"# dense vs sparse edge attention on {a.graphs} complete graphs per batch, {a.heads} heads x "
          f"{a.channels} channels, float32, {a.device}, fwd+bwd; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}", flush=True)
    cases = [(n, s) for s in a.spreads for n in a.sizes]
    results = []
    for n, spread in tqdm(cases, desc="crossover", unit="case", file=sys.stderr):
        results.append(measure_case(n, spread, a, device, impls))
    print("\n" + render(results, impls, a))
    lines = crossover_lines(results, impls)
    if lines:
        print("\nDense (SDPA) vs the best sparse impl, per spread (median fwd+bwd; setup excluded):")
        print("\n".join(lines))
    bad = [r for r in results if r["auto_vs_best"] is not None and r["auto_vs_best"] > 1.1]
    print(f"\nimpl='auto' within 10% of the best in {len(results) - len(bad)} of {len(results)} cases"
          + (": misses at " + ", ".join(f"{r['spread']} n={r['mean_n']} ({r['auto_vs_best']:.2f}x)" for r in bad)
             if bad else ""))
    if {"dense", "fused"} <= set(impls):
        close = [r for r in results if max(r["dense_ms"], r["fused_ms"]) <= 1.05 * min(r["dense_ms"], r["fused_ms"])]
        wrong = [r for r in results if r not in close and r["rule"] != min(("dense", "fused"), key=lambda i: r[f"{i}_ms"])]
        print(f"graphattn.ops.dense.prefer_dense (dense vs fused) picks the faster in {len(results) - len(close) - len(wrong)} "
              f"of {len(results) - len(close)} cases that differ by > 5%"
              + (": wrong at " + ", ".join(f"{r['spread']} n={r['mean_n']}" for r in wrong) if wrong else ""))
    payload = {"meta": {**H.machine_info(a.device), "torch": torch.__version__, "threads": torch.get_num_threads(),
                        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
                        "impls": impls, "loadavg_end": os.getloadavg()},
               "results": results, "crossover": lines}
    paths = H.write_results(a.out, payload, results)
    print(f"results: {', '.join(str(p) for p in paths)}")
    return payload


if __name__ == "__main__":
    main()

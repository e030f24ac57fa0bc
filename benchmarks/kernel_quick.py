"""Quick check of the fused C++ edge-attention kernel against a naive torch implementation.

One attention core (no projections), forward + backward w.r.t. q, k, v, on a random graph
(default N=100k, E=2M, 4 heads x 32 channels, float32, 2 threads). Every implementation runs
in a fresh process so that its peak RSS (``ru_maxrss``) is its own; the inputs alone are
reported as ``base`` so the kernel's own footprint is visible.

    python benchmarks/kernel_quick.py                 # fused vs naive, defaults
    python benchmarks/kernel_quick.py --nodes 200000 --edges 5000000 --impl fused
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def naive_attention(q, k, v, csr, scale):
    """Per-edge (E, H, C) gathers, scatter-amax softmax, index_add aggregation."""
    import torch

    N, H, C = q.shape
    row, col = csr.row, csr.col
    s = (q[row] * k[col]).sum(-1) * scale
    m = torch.full((N, H), float("-inf"), dtype=s.dtype)
    m = m.scatter_reduce(0, row[:, None].expand(-1, H), s.detach(), "amax", include_self=True)
    p = torch.exp(s - m[row])
    denom = torch.zeros(N, H, dtype=s.dtype).index_add(0, row, p)
    a = p / denom[row]
    return torch.zeros(N, H, C, dtype=q.dtype).index_add(0, row, a[..., None] * v[col])


def child(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    from graphattn.ops import extension, fused_cpp as kernels
    from graphattn.ops.csr import to_csr

    gen = torch.Generator().manual_seed(0)
    N, E, H, C = args.nodes, args.edges, args.heads, args.channels
    ei = torch.randint(0, N, (2, E), generator=gen)
    csr = to_csr(ei, N)
    q, k, v = (torch.randn(N, H, C, generator=gen).requires_grad_() for _ in range(3))
    dout = torch.randn(N, H, C, generator=gen)
    scale = C ** -0.5
    if args.impl == "fused":
        t0 = time.perf_counter()
        ok = extension.fused_available()
        build_s = time.perf_counter() - t0
        if not ok:
            return {"impl": args.impl, "error": "fused kernel unavailable"}
        kernels.csc_arrays(csr)  # the kernel's source-major copy: static-graph preprocessing, cached
        fn = lambda: kernels.fused_edge_attention(q, k, v, csr, scale=scale)  # noqa: E731
    else:
        build_s = 0.0
        _ = csr.csc  # the naive path's source-major view, cached like the CSR itself
        fn = lambda: naive_attention(q, k, v, csr, scale)  # noqa: E731
    base = rss_mb()
    fwd, total = [], []
    for _ in range(args.repeats + 1):  # first run is a warm-up
        t0 = time.perf_counter()
        out = fn()
        t1 = time.perf_counter()
        torch.autograd.backward(out, dout)
        t2 = time.perf_counter()
        fwd.append(t1 - t0)
        total.append(t2 - t0)
        del out
        q.grad = k.grad = v.grad = None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"impl": args.impl, "N": N, "E": E, "H": H, "C": C, "threads": args.threads,
            "fwd_s": statistics.median(fwd[1:]), "fwd_bwd_s": statistics.median(total[1:]),
            "first_fwd_bwd_s": total[0], "build_or_load_s": build_s,
            "base_rss_mb": base, "peak_rss_mb": peak, "peak_minus_base_mb": peak - base}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--edges", type=int, default=2_000_000)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--channels", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--impl", choices=["fused", "naive", "all"], default="all")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args)), flush=True)
        return
    impls = ["fused", "naive"] if args.impl == "all" else [args.impl]
    results = []
    for impl in impls:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--impl", impl]
        for name in ("nodes", "edges", "heads", "channels", "threads", "repeats"):
            cmd += [f"--{name}", str(getattr(args, name))]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            res = {"impl": impl, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
        else:
            res = json.loads(lines[-1][7:])
        results.append(res)
        print(json.dumps(res), flush=True)
    ok = {r["impl"]: r for r in results if "error" not in r}
    if "fused" in ok and "naive" in ok:
        f, n = ok["fused"], ok["naive"]
        print(f"\nfused fwd+bwd {f['fwd_bwd_s']:.3f} s (fwd {f['fwd_s']:.3f} s), "
              f"peak RSS {f['peak_rss_mb']:.0f} MB (+{f['peak_minus_base_mb']:.0f} MB over inputs)")
        print(f"naive fwd+bwd {n['fwd_bwd_s']:.3f} s (fwd {n['fwd_s']:.3f} s), "
              f"peak RSS {n['peak_rss_mb']:.0f} MB (+{n['peak_minus_base_mb']:.0f} MB over inputs)")
        print(f"speed-up {n['fwd_bwd_s'] / f['fwd_bwd_s']:.1f}x, "
              f"extra-memory ratio {n['peak_minus_base_mb'] / max(f['peak_minus_base_mb'], 1):.1f}x")


if __name__ == "__main__":
    main()

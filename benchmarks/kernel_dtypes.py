#!/usr/bin/env python
"""The fused C++ kernel alone, forward + backward, in float32, bfloat16 and float16 (CPU).

Same random graph and values in every dtype, one process, interleaved repeats; prints the median
times and each dtype's ratio to float32. The layer under ``torch.autocast`` (projections too) is a
row of ``benchmarks/attention.py --bf16``.

    python benchmarks/kernel_dtypes.py                       # N=100k, E=2M, 4 heads x 32, 1 thread
    python benchmarks/kernel_dtypes.py --nodes 10000 --edges 200000
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from graphattn import to_csr
from graphattn.ops import extension
from graphattn.ops import fused_cpp

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--edges", type=int, default=2_000_000)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--channels", type=int, default=32, help="channels per head")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7, help="timed repeats per dtype (interleaved)")
    p.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not extension.fused_available():
        raise SystemExit(f"the C++ kernel is unavailable: {extension.build_error()}")
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    N, E, H, C = args.nodes, args.edges, args.heads, args.channels
    csr = to_csr(torch.randint(0, N, (2, E), generator=g), N)
    base = [torch.randn(N, H, C, generator=g) for _ in range(4)]  # q, k, v, dout (float32)
    inputs = {name: [t.to(DTYPES[name]) for t in base] for name in args.dtypes}

    def step(name):
        q, k, v, dout = inputs[name]
        q, k, v = (t.requires_grad_(True) for t in (q, k, v))
        t0 = time.perf_counter()
        out = fused_cpp.fused_edge_attention(q, k, v, csr)
        t1 = time.perf_counter()
        torch.autograd.grad(out, (q, k, v), dout)
        return t1 - t0, time.perf_counter() - t0

    times = {name: [] for name in args.dtypes}
    for name in args.dtypes:  # warm-up (and the CSC build) outside the timings
        step(name)
    for _ in range(args.repeats):
        for name in args.dtypes:
            times[name].append(step(name))
    print(f"# fused C++ kernel, fwd+bwd, N={N} E={E} {H} heads x {C}, {args.threads} thread(s), "
          f"median of {args.repeats}, load average {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    ref = {k: statistics.median(t[k] for t in times.get("float32", times[args.dtypes[0]])) for k in (0, 1)}
    for name, ts in times.items():
        fwd, total = (statistics.median(t[k] for t in ts) for k in (0, 1))
        print(f"{name:9s} fwd {fwd * 1e3:8.1f} ms  fwd+bwd {total * 1e3:8.1f} ms  "
              f"{total / ref[1]:.2f}x the float32 fwd+bwd ({fwd / ref[0]:.2f}x fwd)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

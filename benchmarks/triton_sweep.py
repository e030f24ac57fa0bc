"""Block-size / warp sweep of the Triton edge-attention kernels on a GPU (attention core only).

For each graph and each (edges per step, warps per program) pair: forward and forward + backward
time of ``edge_attention(q, k, v, impl="fused")`` on CUDA (median of CUDA-event timings after a
warm-up), the chunked PyTorch path for reference, and the relative error of the output and of the
gradients against a float64 run of the chunked path. The winner is what
``graphattn.ops.fused_triton._blocks`` / ``_NUM_WARPS`` use.

    python benchmarks/triton_sweep.py                       # 100k/2M, 200k/5M, 128 molecules
    python benchmarks/triton_sweep.py --blocks 8 16 --warps 1 2 --cases 100k
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CASES = {"100k": (100_000, 2_000_000), "200k": (200_000, 5_000_000), "molecules": None}


def bench(fn, reps: int = 20) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    p.add_argument("--blocks", nargs="+", type=int, default=[8, 16, 32, 64], help="edges per step")
    p.add_argument("--warps", nargs="+", type=int, default=[1, 2, 4, 8], help="warps per program")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--channels", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs") / "triton_sweep.json",
                   help="JSON results (a CSV is written beside it)")
    a = p.parse_args(argv)
    import torch
    import triton

    from graphattn.functional import edge_attention, edge_attention_prechecked
    from graphattn.ops import fused_triton as ta
    from graphattn.ops.csr import to_csr
    from graphattn.testing import random_graph_batch

    if not torch.cuda.is_available() or not ta.triton_available(torch.device("cuda")):
        print("triton_sweep.py needs a CUDA GPU and triton", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    torch.manual_seed(a.seed)
    H, C = a.heads, a.channels
    rows = []
    for name in a.cases:
        if CASES[name] is None:
            ei, b = random_graph_batch([int(x) for x in torch.randint(10, 40, (128,))], avg_degree=2.2)
            ei, N = ei.to(dev), int(b.numel())
        else:
            N, E = CASES[name]
            ei = torch.randint(0, N, (2, E), device=dev)
        csr = to_csr(ei, N)
        q, k, v = (torch.randn(N, H, C, device=dev, requires_grad=True) for _ in range(3))
        g = torch.randn(N, H, C, device=dev)
        ref = edge_attention(q.double(), k.double(), v.double(), ei, impl="chunked", csr=csr)
        ref_grads = torch.autograd.grad(ref, [q, k, v], g.double())

        def fwd(impl):
            return edge_attention_prechecked(q, k, v, ei, impl=impl, csr=csr)

        def step(impl):
            torch.autograd.grad(fwd(impl), [q, k, v], g)

        label = f"{name} (N={N:,}, E={csr.num_edges:,})"
        rows.append([label, "chunked PyTorch", f"{bench(lambda: fwd('chunked')):.3f}",
                     f"{bench(lambda: step('chunked')):.3f}", "", ""])
        blocks, warps = ta._blocks, ta._NUM_WARPS
        try:
            for be in a.blocks:
                for w in a.warps:
                    ta._blocks = lambda E_, N_, C_, CV_, be=be: (be, triton.next_power_of_2(C_),
                                                                 triton.next_power_of_2(CV_))
                    ta._NUM_WARPS = w
                    out = fwd("fused")
                    grads = torch.autograd.grad(out, [q, k, v], g)
                    e_out = ((out.double() - ref).norm() / ref.norm()).item()
                    e_grad = max(((x.double() - y).norm() / y.norm()).item() for x, y in zip(grads, ref_grads))
                    rows.append([label, f"Triton {be} edges x {w} warps", f"{bench(lambda: fwd('fused')):.3f}",
                                 f"{bench(lambda: step('fused')):.3f}", f"{e_out:.1e}", f"{e_grad:.1e}"])
                    print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
        finally:
            ta._blocks, ta._NUM_WARPS = blocks, warps
    import _harness as harness

    print(f"# Triton edge attention sweep: {a.heads} heads x {C} channels, float32, "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    head = ["case", "kernel", "fwd (ms)", "fwd+bwd (ms)", "rel. err out", "rel. err grads"]
    print(harness.markdown_table(head, rows, right=[False, False, True, True, True, True]))
    records = [dict(zip(["case", "kernel", "fwd_ms", "total_ms", "rel_err_out", "rel_err_grads"], r)) for r in rows]
    paths = harness.write_results(a.out, {"meta": {**harness.machine_info("cuda"), "args": vars(a)},
                                          "results": records}, records)
    print(f"results: {', '.join(str(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python
"""Full attention over sequences: our layer (dense SDPA path, edge paths) vs plain SDPA vs PyG.

Case: B=8 sequences x L=512 tokens, every sequence a complete graph (``sequence_graph``
"full", self-loops included; 8 * 512^2 = 2.1M edges), 4 heads x 32 channels (128 model dims).
One layer, forward + backward (gradients for the input and the weights), CPU, float32:

* ``plain SDPA``: ``Linear(128, 3*128)`` -> reshape -> ``F.scaled_dot_product_attention`` on
  ``(B, H, L, C)`` -> reshape; the like-for-like reference (same projection, same weights);
* ``ours (dense)``: ``GraphSelfAttention(128, 32, heads=4, root_weight=False)`` called with
  ``batch=``, so it detects the complete graphs and takes the SDPA path;
* ``ours (edge_index only)``: the same layer given the ``edge_index`` alone (no ``batch``): it
  recognises the complete blocks from the edges (once per graph) and takes the SDPA path too;
* ``nn.MultiheadAttention``: torch's layer on ``(B, L, 128)`` (its own weights; it also runs an
  output projection, which the rows above do not);
* ``SDPA core`` / ``ours core (edge_index only)`` / ``ours core (batch=)``: the attention alone,
  no projections: ``F.scaled_dot_product_attention`` on ``x`` viewed as q = k = v ``(B, H, L, C)``
  vs ``graphattn.edge_attention`` on ``x`` viewed as ``(N, H, C)`` (ratios against ``SDPA core``);
* ``ours (dense, new graph)``: the same, but handed a new ``edge_index`` tensor (a view) on
  every call, so each call pays the one-off cost of a new graph (CSR build + completeness
  check), as when a DataLoader yields fresh batch tensors every step;
* ``ours (chunked)`` / ``ours (fused)``: the same layer forced onto its edge paths;
* ``TransformerConv``: PyG's layer on the same edges (skipped when it would not fit in memory).

All rows run in this one process on the same inputs, interleaved round by round (the order
rotating), so a busy machine slows every row alike; the ratio column is the median over
rounds of (row time / reference time in the same round), the reference being plain SDPA for
the layers and SDPA core for the attention cores. ``--profile`` adds the cost of each
step of our layer's dense path measured alone (input checks, CSR cache hit, completeness
check) and a torch profiler table.

    python benchmarks/sequence.py                  # 8 x 512, the issue's case
    python benchmarks/sequence.py --profile        # + where our dense path spends its time
    python benchmarks/sequence.py --quick          # 2 x 64, seconds (smoke test)
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

PLAIN = "plain SDPA"
CORE = "SDPA core"
TARGET = 1.1  # target: our layer within 1.1x of plain SDPA, our attention core within 1.1x of SDPA


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8, help="sequences B")
    p.add_argument("--length", type=int, default=512, help="tokens per sequence L")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--channels", type=int, default=32, help="channels per head C")
    p.add_argument("--repeats", type=int, default=10, help="timed rounds (every row once per round)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="cuda: every row on the GPU, timers synchronised ('ours (fused)' = the Triton kernels)")
    p.add_argument("--no-pyg", action="store_true", help="skip TransformerConv")
    p.add_argument("--no-edge", action="store_true", help="skip the edge paths (chunked, fused)")
    p.add_argument("--no-cold", action="store_true", help="skip the new-graph-every-call row")
    p.add_argument("--no-core", action="store_true", help="skip the attention-core rows (no projections)")
    p.add_argument("--no-mha", action="store_true", help="skip nn.MultiheadAttention")
    p.add_argument("--profile", action="store_true", help="per-step cost of our dense path")
    p.add_argument("--quick", action="store_true", help="B=2, L=64, 3 rounds (smoke test)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/bench_sequence.json")
    args = p.parse_args(argv)
    if args.quick:
        args.batch, args.length, args.repeats, args.warmup = 2, 64, 3, 1
    return args


class PlainSDPA:
    """Linear qkv + SDPA + reshape: what a plain transformer layer does (no graph at all)."""

    def __init__(self, lin_qkv, batch: int, length: int, heads: int, channels: int):
        self.lin_qkv, self.B, self.L, self.H, self.C = lin_qkv, batch, length, heads, channels

    def __call__(self, x):
        import torch.nn.functional as F

        B, L, H, C = self.B, self.L, self.H, self.C
        qkv = self.lin_qkv(x).view(B, L, 3, H, C).permute(2, 0, 3, 1, 4)  # (3, B, H, L, C)
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])  # (B, H, L, C)
        return out.transpose(1, 2).reshape(B * L, H * C)  # (N, H*C)


def core_rows(args, edge_index, batch):
    """The attention alone, x viewed as q = k = v: SDPA vs our edge attention (no projections)."""
    import torch.nn.functional as F

    from graphattn import edge_attention

    B, L, H, C = args.batch, args.length, args.heads, args.channels

    def sdpa(x):
        t = x.view(B, L, H, C).transpose(1, 2)  # (B, H, L, C)
        return F.scaled_dot_product_attention(t, t, t).transpose(1, 2).reshape(B * L, H * C)

    def ours(x, with_batch):
        t = x.view(B * L, H, C)  # (N, H, C)
        return edge_attention(t, t, t, edge_index, batch=batch if with_batch else None).reshape(B * L, H * C)

    return {CORE: (sdpa, [], "F.scaled_dot_product_attention alone", CORE),
            "ours core (edge_index only)": (lambda x: ours(x, False), [], "edge_attention(q, k, v, edge_index)", CORE),
            "ours core (batch=)": (lambda x: ours(x, True), [], "edge_attention(..., batch=batch)", CORE)}


def mha_row(args, dev):
    import torch

    B, L, F_in = args.batch, args.length, args.heads * args.channels
    torch.manual_seed(args.seed)
    mha = torch.nn.MultiheadAttention(F_in, args.heads, batch_first=True).to(dev)

    def run(x):
        t = x.view(B, L, F_in)
        return mha(t, t, t, need_weights=False)[0].reshape(B * L, F_in)

    return {"nn.MultiheadAttention": (run, list(mha.parameters()), "torch's layer (+ output projection)", PLAIN)}


def build_rows(args, x, edge_index, batch):
    """name -> (callable x -> out, parameters, note, reference row for the ratio)."""
    import torch

    from graphattn import GraphSelfAttention
    from graphattn.ops.extension import fused_available
    from graphattn.ops.fused_triton import triton_available

    F_in, heads, C = args.heads * args.channels, args.heads, args.channels
    dev = x.device
    torch.manual_seed(args.seed)
    ours = GraphSelfAttention(F_in, C, heads=heads, root_weight=False).to(dev)
    rows = {PLAIN: (PlainSDPA(ours.lin_qkv, args.batch, args.length, heads, C), list(ours.parameters()),
                    "Linear + F.scaled_dot_product_attention", PLAIN),
            "ours (dense)": (lambda t: ours(t, edge_index, batch=batch), list(ours.parameters()),
                             "GraphSelfAttention(batch=...) -> SDPA path", PLAIN),
            "ours (edge_index only)": (lambda t: ours(t, edge_index), list(ours.parameters()),
                                       "GraphSelfAttention(x, edge_index): blocks found from the edges", PLAIN)}
    if not args.no_mha:
        rows.update(mha_row(args, dev))
    if not args.no_cold:
        def cold(t):  # a new edge_index tensor every call (as from a DataLoader): cache misses
            return ours(t, edge_index.view(2, -1), batch=batch)  # a free view, but a new tensor

        rows["ours (dense, new graph)"] = (cold, list(ours.parameters()),
                                           "same, CSR + completeness check rebuilt every call", PLAIN)
    if not args.no_edge:
        for impl in ("chunked", "fused"):
            if impl == "fused" and not (triton_available(dev) if dev.type == "cuda" else fused_available()):
                print("note: the fused kernel (C++ on CPU, Triton on CUDA) is not available here; "
                      "'ours (fused)' skipped")
                continue
            layer = GraphSelfAttention(F_in, C, heads=heads, root_weight=False, impl=impl).to(dev)
            layer.load_state_dict(ours.state_dict())
            rows[f"ours ({impl})"] = (lambda t, m=layer: m(t, edge_index), list(layer.parameters()),
                                      f"edge path, impl={impl!r}", PLAIN)
    if not args.no_pyg:
        E = edge_index.size(1)
        need = 7 * E * heads * C * 4  # PyG keeps ~6-7 (E, H, C) float tensors alive in fwd+bwd
        avail = (torch.cuda.mem_get_info(dev)[0] if dev.type == "cuda" else H.mem_available_bytes())
        if avail is not None and need > 0.6 * avail:
            print(f"note: TransformerConv skipped: needs ~{need / 2**30:.1f} GiB, "
                  f"{avail / 2**30:.1f} GiB available")
        else:
            from torch_geometric.nn import TransformerConv

            tc = TransformerConv(F_in, C, heads=heads, root_weight=False).to(dev)
            with torch.no_grad():  # same q/k/v weights as ours
                w, b = ours.lin_qkv.weight.view(3, heads * C, F_in), ours.lin_qkv.bias.view(3, heads * C)
                for i, lin in enumerate((tc.lin_query, tc.lin_key, tc.lin_value)):
                    lin.weight.copy_(w[i])
                    lin.bias.copy_(b[i])
            rows["TransformerConv"] = (lambda t: tc(t, edge_index), list(tc.parameters()),
                                       "PyG, per-edge (E, H, C) tensors", PLAIN)
    if not args.no_core:
        rows.update(core_rows(args, edge_index, batch))
    return rows


def time_rows(rows, x, grad_out, warmup: int, repeats: int):
    """Interleaved rounds; returns {name: {"fwd": [...], "total": [...]}} and the outputs."""
    import torch

    sync = torch.cuda.synchronize if x.device.type == "cuda" else (lambda: None)

    def step(fn, params):
        for p in params + [x]:
            p.grad = None
        sync()
        t0 = time.perf_counter()
        out = fn(x)
        sync()
        t1 = time.perf_counter()
        out.backward(grad_out)
        sync()
        t2 = time.perf_counter()
        return out.detach(), {"fwd": t1 - t0, "total": t2 - t0}

    names, outs = list(rows), {}
    for name in names:
        for _ in range(warmup):
            outs[name], _ = step(*rows[name][:2])
    times = {n: {"fwd": [], "total": []} for n in names}
    from tqdm.auto import tqdm

    for r in tqdm(range(repeats), desc="rounds", leave=False):
        for name in names[r % len(names):] + names[: r % len(names)]:  # rotate the order
            _, t = step(*rows[name][:2])
            for k, v in t.items():
                times[name][k].append(v)
    return times, outs


def profile_dense(x, edge_index, batch, reps: int = 20):
    """Cost of each step of the dense path, measured alone (milliseconds, median)."""
    from graphattn.ops.csr import to_csr
    from graphattn.ops.dense import complete_graph_sizes
    from graphattn.utils.validation import check_edge_index, check_features

    import torch

    N = x.size(0)
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)

    def med(fn, n=reps):
        ts = []
        for _ in range(n):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(ts)

    def cold():  # first call on a new graph: CSR build + completeness check
        complete_graph_sizes(to_csr(edge_index.view(2, -1), N), batch)

    csr = to_csr(edge_index, N)
    steps = {"check_features(x): isfinite over (N, F)": lambda: check_features(x, x.size(1)),
             "check_edge_index: aminmax over (2, E)": lambda: check_edge_index(edge_index, N),
             "to_csr (cache hit)": lambda: to_csr(edge_index, N),
             "complete_graph_sizes (cache hit)": lambda: complete_graph_sizes(csr, batch),
             "first call on a new graph (CSR build + completeness check)": cold}
    return {k: med(f, 3 if f is cold else reps) for k, f in steps.items()}


def main(argv=None):
    args = parse_args(argv)
    import torch

    from graphattn import sequences_to_batch

    import _device as D

    if args.threads:
        torch.set_num_threads(args.threads)
    D.resolve_device(args.device)  # a clear error for --device cuda without a GPU
    B, L, Hh, C = args.batch, args.length, args.heads, args.channels
    F_in = Hh * C
    g = torch.Generator().manual_seed(args.seed)
    data = sequences_to_batch(torch.randn(B, L, F_in, generator=g), "full", pe=None).to(args.device)
    x = data.x.clone().requires_grad_(True)
    edge_index, batch = data.edge_index, data.batch
    grad_out = torch.randn(B * L, F_in, generator=g).to(args.device)
    print(f"{B} sequences x {L} tokens, full attention ({edge_index.size(1):,} edges), "
          f"{Hh} heads x {C} channels; torch {torch.__version__}, {torch.get_num_threads()} threads, {args.device}")
    rows = build_rows(args, x, edge_index, batch)
    times, outs = time_rows(rows, x, grad_out, args.warmup, args.repeats)

    results = []
    for name, (_, _, note, ref_name) in rows.items():
        t, ref_t, ref = times[name], times[ref_name], outs[ref_name]
        ratio = [a / b for a, b in zip(t["total"], ref_t["total"])]
        ratio_fwd = [a / b for a, b in zip(t["fwd"], ref_t["fwd"])]
        results.append({"row": name, "note": note, "reference": ref_name,
                        "fwd_ms": 1e3 * statistics.median(t["fwd"]),
                        "ratio_fwd": statistics.median(ratio_fwd),
                        "total_ms": 1e3 * statistics.median(t["total"]),
                        "total_q1_ms": 1e3 * H.summarize(t["total"])["q1"],
                        "total_q3_ms": 1e3 * H.summarize(t["total"])["q3"],
                        "ratio_vs_plain": statistics.median(ratio),
                        "max_abs_diff_vs_ref": (float((outs[name] - ref).abs().max())
                                                if name != "nn.MultiheadAttention" else float("nan")),
                        "rounds": len(t["total"])})
    table = H.markdown_table(
        ["row", "what", "fwd ms", "fwd+bwd ms (IQR)", "vs", "× ref fwd", "× ref fwd+bwd", "max |Δ| vs ref"],
        [[r["row"], r["note"], H.fmt(r["fwd_ms"]),
          f"{H.fmt(r['total_ms'])} ({H.fmt(r['total_q1_ms'])}-{H.fmt(r['total_q3_ms'])})", r["reference"],
          f"{r['ratio_fwd']:.2f}", f"{r['ratio_vs_plain']:.2f}", f"{r['max_abs_diff_vs_ref']:.1e}"]
         for r in results],
        right=[False, False, True, True, False, True, True, True])
    print("\n" + table)
    print()
    for r in results:
        if r["row"].startswith("ours") and r["row"].endswith(("(dense)", "(edge_index only)", "(batch=)")):
            verdict = "within" if r["ratio_vs_plain"] <= TARGET else "MISSES"
            print(f"{r['row']} = {r['ratio_vs_plain']:.2f}x {r['reference']} (fwd+bwd): {verdict} the {TARGET}x "
                  f"target (median of {args.repeats} paired rounds; load average {os.getloadavg()[0]:.1f})")
    payload = {"meta": {**H.machine_info(args.device), "torch": torch.__version__, "threads": torch.get_num_threads(),
                        "args": vars(args), "edges": int(edge_index.size(1)),
                        "loadavg": os.getloadavg()}, "results": results}
    if args.profile:
        steps = profile_dense(x, edge_index, batch)
        plain_ms = next(r for r in results if r["row"] == PLAIN)["total_ms"]
        print("\nOur dense path, each step alone (median ms; plain SDPA fwd+bwd = "
              f"{H.fmt(plain_ms)} ms):")
        print(H.markdown_table(["step", "ms", "% of plain"],
                               [[k, H.fmt(v), f"{100 * v / plain_ms:.1f}"] for k, v in steps.items()],
                               right=[False, True, True]))
        payload["profile_ms"] = steps
    H.write_results(Path(args.out), payload, results)
    print(f"Results written to {args.out}")
    return payload


if __name__ == "__main__":
    main()

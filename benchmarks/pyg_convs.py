"""graphattn.nn.GATConv / GATv2Conv / TransformerConv against PyG's classes of the same name.

Both layers of a pair are built with the same arguments and the same weights (ours loads PyG's
state dict), get the same inputs, and run alternately in one process, so both see the same
machine load; the table gives medians and PyG / ours ratios (> 1: ours is faster).

    python benchmarks/pyg_convs.py                      # Cora shape, 128 molecules, N=100k/E=2M
    python benchmarks/pyg_convs.py --quick              # small inputs, a minute or less (the smoke test)
    python benchmarks/pyg_convs.py --threads 1 --cases cora molecules-128
    python benchmarks/pyg_convs.py --device cuda        # the same table on a GPU

Cases: ``cora``: 2,708 nodes, 10,556 edges (5,278 random undirected pairs), 1,433 input channels,
8 heads x 8 (PyG's examples/gat.py); ``molecules-128``: 128 random molecule-shaped graphs
(``_inputs.molecule_like_edges``), 128 inputs, 4 heads x 32; ``random-100k``: N=100k, E=2M
random edges, 128 inputs, 4 heads x 32. Every conv with PyG's defaults (GAT/GATv2 add self-loops)
and no dropout. Timed: ``train`` = ``out = conv(x, edge_index); out.sum().backward()`` (the
input features need no gradient on Cora, as the first layer of gat.py; elsewhere they do), and
``eval`` = the forward under ``torch.no_grad()``. One untimed warm-up per layer, then repeats
until ``--min-time`` seconds per layer (at least ``--repeats``; 3 runs on random-100k). glibc's
malloc with its defaults. The load average is recorded: on a shared machine it says how noisy a run was.
Results: a markdown table on stdout and JSON (``--out``, default benchmarks/results/pyg_convs.json).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch_geometric
import torch_geometric.nn as pyg_nn
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402
from _inputs import molecule_like_edges  # noqa: E402

import graphattn  # noqa: E402
import graphattn.nn as ga_nn  # noqa: E402

CONVS = ("GATConv", "GATv2Conv", "TransformerConv")
CASES = {
    "cora": dict(kind="random", N=2708, E=10556, F=1433, heads=8, C=8, x_grad=False),
    "molecules-128": dict(kind="molecules", graphs=128, F=128, heads=4, C=32, x_grad=True),
    "random-100k": dict(kind="random", N=100_000, E=2_000_000, F=128, heads=4, C=32, x_grad=True, repeats=3,
                        min_time=0.0),
}
QUICK = {
    "cora-quarter": dict(kind="random", N=677, E=2640, F=358, heads=8, C=8, x_grad=False),
    "molecules-16": dict(kind="molecules", graphs=16, F=128, heads=4, C=32, x_grad=True),
    "random-5k": dict(kind="random", N=5_000, E=50_000, F=128, heads=4, C=32, x_grad=True),
}


def build_inputs(case: dict, device: torch.device, seed: int = 0):
    """``(x, edge_index)`` of a case: undirected random pairs (Cora-like), molecules, or random edges."""
    g = torch.Generator().manual_seed(seed)
    if case["kind"] == "molecules":
        N, src, dst = molecule_like_edges(case["graphs"], seed)
        edge_index = torch.tensor([src, dst])
    elif case["N"] < 10_000:  # both directions of E/2 random pairs, as Cora's undirected edges
        N = case["N"]
        half = torch.randint(0, N, (2, case["E"] // 2), generator=g)
        edge_index = torch.cat([half, half.flip(0)], dim=1)
    else:
        N = case["N"]
        edge_index = torch.randint(0, N, (2, case["E"]), generator=g)
    x = torch.randn(N, case["F"], generator=g)
    return x.to(device).requires_grad_(case["x_grad"]), edge_index.to(device)


def build_pair(name: str, case: dict, device: torch.device):
    """(PyG's conv, ours) with the same arguments and weights."""
    theirs = getattr(pyg_nn, name)(case["F"], case["C"], heads=case["heads"]).to(device)
    ours = getattr(ga_nn, name)(case["F"], case["C"], heads=case["heads"]).to(device)
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def timed(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(layers: dict, x, edge_index, device, repeats: int, min_time: float, max_repeats: int = 200) -> dict:
    """Alternating timed runs of every layer: ``{name: {"train": [s, ...], "eval": [s, ...]}}``."""
    def train(conv):
        def step():
            for p in conv.parameters():
                p.grad = None
            x.grad = None
            conv(x, edge_index).sum().backward()
        return step

    def evaluate(conv):
        def step():
            with torch.no_grad():
                conv(x, edge_index)
        return step

    times = {name: {"train": [], "eval": []} for name in layers}
    for phase, make in (("train", train), ("eval", evaluate)):
        steps = {name: make(conv) for name, conv in layers.items()}
        for step in steps.values():  # warm-up: builds caches, the C++ extension, lazy CUDA state
            timed(step, device)
        n = 0
        while n < repeats or (min(sum(t[phase]) for t in times.values()) < min_time and n < max_repeats):
            for name, step in steps.items():
                times[name][phase].append(timed(step, device))
            n += 1
    return times


def run_case(case_name: str, case: dict, convs, device, args) -> list:
    x, edge_index = build_inputs(case, device)
    rows = []
    for name in convs:
        theirs, ours = build_pair(name, case, device)
        t = measure({"pyg": theirs, "ours": ours}, x, edge_index, device, case.get("repeats", args.repeats),
                    case.get("min_time", args.min_time))
        for phase in ("train", "eval"):
            p, o = statistics.median(t["pyg"][phase]), statistics.median(t["ours"][phase])
            rows.append(dict(case=case_name, conv=name, phase=phase, N=x.size(0), E=edge_index.size(1),
                             in_channels=case["F"], heads=case["heads"], channels=case["C"], pyg_s=p, ours_s=o,
                             ratio=p / o, pyg=H.summarize(t["pyg"][phase]), ours=H.summarize(t["ours"][phase])))
        del theirs, ours
    return rows


def render(rows: list) -> str:
    out = []
    for phase, title in (("train", "forward + backward"), ("eval", "forward, no_grad")):
        body = [[f"{r['case']} (N={r['N']:,}, E={r['E']:,})", r["conv"], H.fmt(r["pyg_s"] * 1e3),
                 H.fmt(r["ours_s"] * 1e3), f"{r['ratio']:.2f}×"] for r in rows if r["phase"] == phase]
        out.append(f"{title}, median ms\n\n" + H.markdown_table(
            ["case", "conv", "PyG (ms)", "ours (ms)", "PyG / ours"], body))
    return "\n\n".join(out)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", nargs="+", default=None, help=f"cases to run (default: all of {list(CASES)})")
    p.add_argument("--convs", nargs="+", default=list(CONVS), choices=CONVS)
    p.add_argument("--quick", action="store_true", help=f"small inputs {list(QUICK)}, fewer repeats")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--repeats", type=int, default=None, help="at least this many timed runs per layer")
    p.add_argument("--min-time", type=float, default=None, help="and at least this many seconds per layer")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "pyg_convs.json")
    args = p.parse_args(argv)
    table = QUICK if args.quick else CASES
    args.cases = args.cases or list(table)
    unknown = [c for c in args.cases if c not in {**CASES, **QUICK}]
    if unknown:
        p.error(f"unknown cases {unknown}; choose from {list(CASES) + list(QUICK)}")
    args.repeats = args.repeats or (2 if args.quick else 5)
    args.min_time = args.min_time if args.min_time is not None else (0.2 if args.quick else 2.0)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False")
    device = torch.device(args.device)
    rows = []
    for case_name in tqdm(args.cases, desc="cases", file=sys.stderr):
        rows += run_case(case_name, {**CASES, **QUICK}[case_name], args.convs, device, args)
    print(render(rows))
    payload = dict(date=datetime.date.today().isoformat(), command=" ".join(["python", *sys.argv]),
                   device=args.device, threads=torch.get_num_threads(), torch=torch.__version__,
                   torch_geometric=torch_geometric.__version__, graphattn=graphattn.__version__,
                   machine=H.machine_info(args.device), malloc="glibc defaults",
                   load_average=os.getloadavg(), rows=rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

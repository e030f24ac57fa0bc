#!/usr/bin/env python
"""Efficient attention variants: accuracy vs training throughput vs peak memory (a PNG + tables).

Two workloads, every variant trained the same way (Adam, 2 layers, 64 channels, 4 heads),
each (variant, size) case in a fresh process so peak memory is its own:

* **sequence**: the long-range "copy the first symbol" task of ``examples/sequence_patterns.py``
  (every token's label is the symbol at position 0; chance = 1/V). Local window attention
  (|i-j| <= 4) plus one global mechanism, or full attention with a score normalization.
  Throughput and peak memory at every length in ``--lengths`` (``--tokens`` tokens per step,
  so the work per step is the same), accuracy on held-out sequences after ``--acc-steps``
  training steps at ``--acc-length`` (Adam, lr 5e-3: full attention needs ~200 steps at
  L=256 before it suddenly finds position 0; at lr 2e-3 it is still at chance after 300).
* **graph**: node classification on a social graph (Facebook Page-Page from the shared data
  folder, and/or the synthetic degree-corrected SBM of ``graphattn.large_graph``), full batch,
  edge attention over the graph's edges plus one global mechanism; test accuracy at the best
  validation epoch, nodes per second of training, peak memory. (Linformer projections and the
  Synthesizer need fixed-size inputs, so they are not run on graphs.)

Peak memory is the extra RSS of the worker over its inputs and model (``_harness.PeakRSS``).

    python benchmarks/variants.py --quick                  # seconds, in-process smoke test
    nohup python benchmarks/variants.py > runs/variants.log &   # lengths 256..4096 + graph

Writes ``--out`` (JSON, and CSV beside it), ``<out stem>.md`` (the tables) and ``--png``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402
from _variants_report import merge_results, plot, tables  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's graphattn, also in worker processes
WINDOW = 4

# name -> (pattern, uses window/num_global, model options); "{L}" options filled per length
SEQ_VARIANTS = {
    "full (softmax)": ("full", False, {}),
    "full (relu)": ("full", False, {"normalization": "relu"}),
    "full (sigmoid)": ("full", False, {"normalization": "sigmoid"}),
    "window": ("window", True, {}),
    "window+global pos.": (["window", "global"], True, {}),
    "window+linear (elu)": ("window", True, {"global_attn": "linear"}),
    "window+performer": ("window", True, {"global_attn": "linear", "global_attn_kwargs": {"feature_map": "favor"}}),
    "window+linformer": ("window", True, {"global_attn": "reduced", "global_attn_kwargs": {
        "mode": "project", "num_keys": 64, "max_nodes": "{L}"}}),
    "window+pooled keys": ("window", True, {"global_attn": "reduced", "global_attn_kwargs": {"num_keys": 64}}),
    "window+clustered": ("window", True, {"global_attn": "clustered", "global_attn_kwargs": {
        "num_clusters": 8, "block_size": 64}}),
    "window+synthesizer": ("window", True, {"global_attn": "synthesizer", "global_attn_kwargs": {
        "max_nodes": "{L}", "rank": 32}}),
}
GRAPH_VARIANTS = {
    "edges (softmax)": {},
    "edges (relu)": {"normalization": "relu"},
    "edges (sigmoid)": {"normalization": "sigmoid"},
    "edges+global token": {"num_global_tokens": 1},
    "edges+linear (elu)": {"global_attn": "linear"},
    "edges+performer": {"global_attn": "linear", "global_attn_kwargs": {"feature_map": "favor"}},
    "edges+pooled keys": {"global_attn": "reduced", "global_attn_kwargs": {"num_keys": 256}},
    "edges+clustered": {"global_attn": "clustered", "global_attn_kwargs": {"num_clusters": 16, "block_size": 64}},
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    p.add_argument("--tokens", type=int, default=4096, help="tokens per training step (B = tokens / L)")
    p.add_argument("--steps", type=int, default=3, help="timed steps per speed case (after 1 warm-up)")
    p.add_argument("--acc-length", type=int, default=256)
    p.add_argument("--acc-steps", type=int, default=300, help="training steps of the accuracy run")
    p.add_argument("--eval-seqs", type=int, default=64)
    p.add_argument("--vocab", type=int, default=8)
    p.add_argument("--variants", nargs="*", default=list(SEQ_VARIANTS), choices=list(SEQ_VARIANTS),
                   help="sequence variants (none: only the graph cases, or replot --merge files)")
    p.add_argument("--graphs", nargs="*", default=None, choices=("facebook", "sbm"),
                   help="default: facebook if the shared data is there, else sbm")
    p.add_argument("--graph-variants", nargs="*", default=list(GRAPH_VARIANTS), choices=list(GRAPH_VARIANTS))
    p.add_argument("--graph-epochs", type=int, default=20)
    p.add_argument("--sbm-nodes", type=int, default=100_000)
    p.add_argument("--sbm-edges", type=int, default=1_000_000, help="undirected edges")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--case-timeout", type=float, default=300.0, help="seconds per case")
    p.add_argument("--mem-cap-gb", type=float, default=6.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny sizes, all cases in this process")
    p.add_argument("--merge", nargs="+", default=(), metavar="JSON",
                   help="earlier results of this script: their cases are kept unless re-run here")
    p.add_argument("--out", default="benchmarks/results/variants.json")
    p.add_argument("--png", default=None, help="default: <out stem>.png")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.quick:
        a.lengths, a.tokens, a.steps, a.acc_length, a.acc_steps, a.eval_seqs = [32, 64], 128, 1, 32, 3, 8
        a.graph_epochs, a.sbm_nodes, a.sbm_edges, a.graphs = 2, 1000, 5000, a.graphs or ["sbm"]
    return a


# ----------------------------------------------------------------------------- worker side
def _fill(obj, L):
    if isinstance(obj, dict):
        return {k: _fill(v, L) for k, v in obj.items()}
    return L if obj == "{L}" else obj


def _train_step(model, opt, inputs, y):
    import torch.nn.functional as F

    loss = F.cross_entropy(model(*inputs[0], **inputs[1]), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.detach())


def seq_case(s):
    """Train one variant at one length; throughput, peak memory, and accuracy if asked."""
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT / "examples"))
    from sequence_patterns import make_data  # the task of examples/sequence_patterns.py

    from graphattn import NodeClassifier, sequences_to_batch

    torch.manual_seed(s["seed"])
    L, V = s["length"], s["vocab"]
    B = max(1, s["tokens"] // L)
    pattern, local, options = SEQ_VARIANTS[s["variant"]]
    pkw = ({"window": WINDOW} | ({"num_global": 1} if "global" in pattern else {})) if local else {}
    t = sequences_to_batch(torch.zeros(B, L, V), pattern, pe_channels=16, **pkw)
    model = NodeClassifier(V, 64, V, num_layers=2, heads=4, pe_dim=16, pe_kind="linear", **_fill(options, L))
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    gen = torch.Generator().manual_seed(s["seed"])

    def batch_of(symbols):
        x = F.one_hot(symbols, V).float().view(-1, V)  # (B*L, V)
        return (x, t.edge_index), {"batch": t.batch, "pe": t.pe}

    peak = H.PeakRSS()
    peak.start()
    steps = s["acc_steps"] if s["train"] else s["steps"] + 1
    times, losses = [], []
    for _ in range(steps):
        sym, y = make_data(B, L, V, gen)
        t0 = time.perf_counter()
        losses.append(_train_step(model, opt, batch_of(sym), y.reshape(-1)))
        times.append(time.perf_counter() - t0)
    res = {"batch": B, "edges_per_seq": t.edge_index.size(1) // B, "steps": steps,
           "step_s": H.summarize(times[1:] or times)["median"], "final_loss": losses[-1]}
    res["tokens_per_s"] = B * L / res["step_s"]
    res.update(peak.stop())
    if s["train"]:
        model.eval()
        correct = total = 0
        egen = torch.Generator().manual_seed(10_000 + s["seed"])  # the same held-out set for all
        with torch.no_grad():
            for _ in range(max(1, s["eval_seqs"] // B)):
                sym, y = make_data(B, L, V, egen)
                inputs = batch_of(sym)
                pred = model(*inputs[0], **inputs[1]).argmax(-1)
                correct += int((pred == y.reshape(-1)).sum())
                total += y.numel()
        res["accuracy"] = correct / total
    return res


def _graph_data(name, s):
    import torch

    if name == "facebook":
        from graphattn.data.social import load_social_node_dataset
        from graphattn.testing import shared_data_dir

        data = load_social_node_dataset("facebook", root=shared_data_dir(), download=False, max_features=256)
    else:
        from graphattn.large_graph import sbm_graph

        data = sbm_graph(s["sbm_nodes"], s["sbm_edges"], num_blocks=10, num_features=16, seed=s["seed"])
    data.x = data.x.float()
    return data, int(data.y.max()) + 1, torch


def graph_case(s):
    """Full-batch node classification with one variant; best-val test accuracy, nodes/s, memory."""
    data, classes, torch = _graph_data(s["graph"], s)
    import torch.nn.functional as F

    from graphattn import NodeClassifier

    torch.manual_seed(s["seed"])
    model = NodeClassifier(data.x.size(1), 64, classes, num_layers=2, heads=4, dropout=0.1,
                           **GRAPH_VARIANTS[s["variant"]])
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    peak = H.PeakRSS()
    peak.start()
    times, best = [], (-1.0, 0.0, 0)
    for epoch in range(1, s["epochs"] + 1):
        model.train()
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        model.eval()
        with torch.no_grad():
            pred = model(data.x, data.edge_index).argmax(-1)
        val = float((pred[data.val_mask] == data.y[data.val_mask]).float().mean())
        if val > best[0]:
            best = (val, float((pred[data.test_mask] == data.y[data.test_mask]).float().mean()), epoch)
    res = {"nodes": data.num_nodes, "edges": data.edge_index.size(1), "epochs": s["epochs"],
           "step_s": H.summarize(times[1:] or times)["median"], "val_accuracy": best[0],
           "accuracy": best[1], "best_epoch": best[2]}
    res["nodes_per_s"] = data.num_nodes / res["step_s"]
    res.update(peak.stop())
    return res


def run_worker(spec):
    import torch

    torch.set_num_threads(spec["threads"])
    return seq_case(spec) if spec["kind"] == "seq" else graph_case(spec)


# ----------------------------------------------------------------------------- driver side
def jobs_for(a):
    common = {"threads": a.threads, "seed": a.seed, "vocab": a.vocab}
    seq = []
    for v in a.variants:
        for L in sorted(set(a.lengths) | {a.acc_length}):
            seq.append({**common, "kind": "seq", "variant": v, "length": L, "tokens": a.tokens,
                        "steps": a.steps, "acc_steps": a.acc_steps, "eval_seqs": a.eval_seqs,
                        "train": L == a.acc_length, "label": f"{v} L={L}"})
    graphs = a.graphs
    if graphs is None:
        from graphattn.testing import shared_data_dir  # light: no torch work

        root = shared_data_dir()
        graphs = ["facebook"] if root is not None and (root / "facebook_page_page").is_dir() else ["sbm"]
    graph = [{**common, "kind": "graph", "graph": g, "variant": v, "epochs": a.graph_epochs,
              "sbm_nodes": a.sbm_nodes, "sbm_edges": a.sbm_edges, "label": f"{g}: {v}"}
             for g in graphs for v in a.graph_variants]
    return seq, graph


def run_all(jobs, a):
    """Fresh process per case (in-process with --quick); larger lengths of a variant are
    skipped once a smaller one failed (timeout / memory)."""
    from tqdm import tqdm

    env = H.worker_env(a.threads, tuned_malloc=False)
    cap = int(a.mem_cap_gb * 2**30)
    failed, out = set(), []
    for job in tqdm(jobs, desc="variants", unit="case", file=sys.stderr):
        key = (job["kind"], job.get("graph"), job["variant"])
        if key in failed and job["kind"] == "seq":
            out.append({**job, "error": "skipped: a shorter length already failed"})
            continue
        if a.quick:
            try:
                res = {**job, **run_worker(job)}
            except Exception as exc:  # report and go on: one broken variant must not hide the rest
                res = {**job, "error": f"{type(exc).__name__}: {exc}"}
        else:
            res = H.run_cases([job], str(Path(__file__).resolve()), env, timeout=a.case_timeout,
                              mem_cap=cap, desc=job["label"])[0]
        if "error" in res:
            failed.add(key)
            tqdm.write(f"{job['label']}: {res['error']}")
        out.append(res)
    return out


def main(argv=None):
    a = parse_args(argv)
    if a.worker:
        H.emit_result(run_worker(json.loads(a.worker)))
        return None
    t0 = time.perf_counter()
    seq_jobs, graph_jobs = jobs_for(a)
    print(f"{len(seq_jobs)} sequence cases (lengths {a.lengths}), {len(graph_jobs)} graph cases; "
          f"{a.threads} thread(s) per case, {'in-process' if a.quick else 'one process per case'}", flush=True)
    seq = run_all(seq_jobs, a)
    graph = run_all(graph_jobs, a)
    if a.merge:
        seq, graph = merge_results(seq, graph, a, list(SEQ_VARIANTS), list(GRAPH_VARIANTS))
    text = tables(seq, graph, a)
    print("\n" + text)
    out = Path(a.out)
    png = Path(a.png) if a.png else out.with_suffix(".png")
    payload = {"args": vars(a), "machine": H.machine_info(), "sequence": seq, "graph": graph,
               "total_s": time.perf_counter() - t0}
    H.write_results(out, payload, seq + graph)
    out.with_suffix(".md").write_text(text + "\n")
    plot(seq, graph, a, png, list(SEQ_VARIANTS) + list(GRAPH_VARIANTS))
    print(f"wrote {out}, {out.with_suffix('.csv')}, {out.with_suffix('.md')}, {png} "
          f"({time.perf_counter() - t0:.0f} s in all)")
    return payload


if __name__ == "__main__":
    main()

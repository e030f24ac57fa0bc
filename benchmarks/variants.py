#!/usr/bin/env python
"""Efficient attention variants: accuracy vs training throughput vs peak memory (a PNG + tables).

Every variant is trained the same way (Adam, 2 layers, 64 channels, 4 heads), each case in
a fresh process so peak memory is its own (worker code: ``_variants_cases.py``):

* **sequence**: the long-range "copy the first symbol" task of ``examples/sequence_patterns.py``
  (every token's label is the symbol at position 0; chance = 1/V). Local window attention
  (|i-j| <= 4) plus one global mechanism, or full attention with a score normalization.
  Throughput and peak memory at every length in ``--lengths`` (``--tokens`` tokens per step,
  so the work per step is the same). Accuracy at ``--acc-length``: up to ``--acc-steps``
  steps (Adam, ``--lr``), held-out accuracy every ``--eval-every`` steps, stopping at the
  first checkpoint >= ``--solve-acc``; reported: the final accuracy, the step it was solved
  at, and the whole curve. The task has a long plateau at chance followed by a sudden jump
  (full attention ~200 steps, the global branches 800-1200+ at lr 5e-3), so a short budget
  measures the plateau, not the variant.
* **graph**: node classification, full batch (Facebook Page-Page and GitHub developers from
  the shared data folder, at full size; the synthetic degree-corrected SBM of
  ``graphattn.loader.partition``), edge attention over the graph's edges plus one global
  mechanism; test accuracy at the best validation epoch, nodes/s of training, peak memory.
  (Linformer projections and the Synthesizer need fixed-size inputs: not run on graphs.)
* **large graph** (``sbm-large``, default 2 M nodes / 20 M undirected edges): a full-batch
  step does not fit the memory cap, so mini-batch training, Cluster-GCN style
  (``graphattn.loader.partition.PartitionBatches``): BFS-grown parts (``--large-partition``) of
  ``--large-batch-nodes`` / ``--large-parts-per-batch`` nodes, ``--large-parts-per-batch``
  random parts per step, ``--large-epochs`` epochs over all parts; then val and test accuracy
  over all val / test nodes by mini-batch inference over fixed groups of parts (test at the
  best-val epoch; majority class reported). ``--large-epochs 0``: ``--large-steps`` timed
  steps only, no accuracy. The graph is generated once into ``--cache-dir``; the workers'
  progress bars go to ``<out stem>.large.log``.

Peak memory is the extra RSS of the worker over its inputs and model (``_harness.PeakRSS``).

    python benchmarks/variants.py --quick                  # seconds, in-process smoke test
    nohup python benchmarks/variants.py > runs/variants.log &   # everything (about an hour, 1 core)
    python benchmarks/variants.py --variants --graphs github --merge benchmarks/results/variants.json

Writes ``--out`` (JSON, and CSV beside it), ``<out stem>.md`` (the tables), ``--png`` (every panel) and
each panel on its own beside it (``<png stem>-sequence-accuracy.png``, ``-sequence-throughput``,
``-sequence-curves``, ``-<graph>.png``).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402
import _variants_cases as C  # noqa: E402
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
    "window+clustered (sep. QK)": ("window", True, {"global_attn": "clustered", "global_attn_kwargs": {
        "num_clusters": 8, "block_size": 64, "shared_qk": False}}),
    "window+synthesizer": ("window", True, {"global_attn": "synthesizer", "global_attn_kwargs": {
        "max_nodes": "{L}", "rank": 32}}),
    "window+compressed keys": ("window", True, {"global_attn": "compressed", "global_attn_kwargs": {"stride": 8}}),
    "window+fourier (FNet)": ("window", True, {"global_attn": "fourier"}),
    "window+sinkhorn": ("window", True, {"global_attn": "sinkhorn", "global_attn_kwargs": {"block_size": 32}}),
    "full (AFT)": ("full", False, {"score": "aft"}),
}
GRAPHS = ("facebook", "github", "sbm", "sbm-large")
GRAPH_VARIANTS = {
    "edges (softmax)": {},
    "edges (relu)": {"normalization": "relu"},
    "edges (sigmoid)": {"normalization": "sigmoid"},
    "edges+global token": {"num_global_tokens": 1},
    "edges+linear (elu)": {"global_attn": "linear"},
    "edges+performer": {"global_attn": "linear", "global_attn_kwargs": {"feature_map": "favor"}},
    "edges+pooled keys": {"global_attn": "reduced", "global_attn_kwargs": {"num_keys": 256}},
    "edges+clustered": {"global_attn": "clustered", "global_attn_kwargs": {"num_clusters": 16, "block_size": 64}},
    "edges+clustered (sep. QK)": {"global_attn": "clustered", "global_attn_kwargs": {
        "num_clusters": 16, "block_size": 64, "shared_qk": False}},
    "edges (AFT)": {"score": "aft"},
    "edges+sinkhorn": {"global_attn": "sinkhorn", "global_attn_kwargs": {"block_size": 64}},
    "edges+compressed keys": {"global_attn": "compressed", "global_attn_kwargs": {"stride": 64}},
    "edges+fourier (FNet)": {"global_attn": "fourier"},
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="*", default=[256, 512, 1024, 2048, 4096])
    p.add_argument("--tokens", type=int, default=4096, help="tokens per training step (B = tokens / L)")
    p.add_argument("--steps", type=int, default=3, help="timed steps per speed case (after 1 warm-up)")
    p.add_argument("--acc-length", type=int, default=256)
    p.add_argument("--acc-steps", type=int, default=2000, help="step budget of the accuracy run")
    p.add_argument("--eval-every", type=int, default=100, help="held-out checkpoint interval (steps)")
    p.add_argument("--solve-acc", type=float, default=0.99, help="stop at the first checkpoint this good")
    p.add_argument("--lr", type=float, default=5e-3, help="Adam learning rate of the sequence runs")
    p.add_argument("--eval-seqs", type=int, default=64)
    p.add_argument("--vocab", type=int, default=8)
    p.add_argument("--variants", nargs="*", default=list(SEQ_VARIANTS), choices=list(SEQ_VARIANTS),
                   help="sequence variants (none: only the graph cases, or replot --merge files)")
    p.add_argument("--graphs", nargs="*", default=None, choices=GRAPHS,
                   help="default: facebook and github if the shared data is there, else sbm")
    p.add_argument("--graph-variants", nargs="*", default=list(GRAPH_VARIANTS), choices=list(GRAPH_VARIANTS))
    p.add_argument("--graph-epochs", type=int, default=20)
    p.add_argument("--sbm-nodes", type=int, default=100_000)
    p.add_argument("--sbm-edges", type=int, default=1_000_000, help="undirected edges")
    p.add_argument("--large-nodes", type=int, default=2_000_000)
    p.add_argument("--large-edges", type=int, default=20_000_000, help="undirected edges")
    p.add_argument("--large-batch-nodes", type=int, default=200_000, help="nodes per mini-batch")
    p.add_argument("--large-steps", type=int, default=3,
                   help="with --large-epochs 0: timed mini-batch steps (after 1 warm-up)")
    p.add_argument("--large-epochs", type=int, default=1,
                   help="training epochs over all parts, then accuracy (0: speed only)")
    p.add_argument("--large-partition", choices=("bfs", "random"), default="bfs",
                   help="bfs: connected regions; a batch keeps 2.3x the edges of random parts (2M SBM)")
    p.add_argument("--large-parts-per-batch", type=int, default=2, help="parts per mini-batch (q)")
    p.add_argument("--large-lr", type=float, default=5e-3)
    p.add_argument("--large-variants", nargs="*", choices=list(GRAPH_VARIANTS), default=[
        "edges (softmax)", "edges+global token", "edges+linear (elu)", "edges+pooled keys"])
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "graphattn-variants"),
                   help="where the large SBM is kept between cases")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--case-timeout", type=float, default=300.0, help="seconds per speed / graph case")
    p.add_argument("--long-timeout", type=float, default=1800.0, help="seconds per accuracy / large case")
    p.add_argument("--mem-cap-gb", type=float, default=6.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny sizes, all cases in this process")
    p.add_argument("--merge", nargs="+", default=(), metavar="JSON",
                   help="earlier results of this script: their cases are kept unless re-run here")
    p.add_argument("--out", default=None, help="default benchmarks/results/variants.json; with --quick "
                                               "runs/bench_variants_quick.json (committed results untouched)")
    p.add_argument("--png", default=None, help="default: <out stem>.png")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.out is None:
        a.out = "runs/bench_variants_quick.json" if a.quick else "benchmarks/results/variants.json"
    if a.quick:
        a.lengths, a.tokens, a.steps, a.acc_length, a.acc_steps, a.eval_seqs = [32, 64], 128, 1, 32, 3, 8
        a.eval_every, a.graph_epochs, a.sbm_nodes, a.sbm_edges = 2, 2, 1000, 5000
        a.large_nodes, a.large_edges, a.large_batch_nodes, a.large_steps = 2000, 10_000, 500, 1
        a.large_epochs = min(a.large_epochs, 2)
        a.graphs, a.cache_dir = a.graphs or ["sbm", "sbm-large"], None
    return a


# ----------------------------------------------------------------------------- worker side
def _fill(obj, L):
    if isinstance(obj, dict):
        return {k: _fill(v, L) for k, v in obj.items()}
    return L if obj == "{L}" else obj


def run_worker(spec):
    import torch

    torch.set_num_threads(spec["threads"])
    case = {"seq": C.seq_case, "graph": C.graph_case, "large": C.large_graph_case}[spec["kind"]]
    return case(spec)


# ----------------------------------------------------------------------------- driver side
def jobs_for(a):
    """(sequence jobs, graph jobs); the accuracy run at ``--acc-length`` is also that length's
    speed case. ``--acc-steps 0``: speed only."""
    common = {"threads": a.threads, "seed": a.seed, "vocab": a.vocab}
    seq = []
    lengths = sorted(set(a.lengths) | ({a.acc_length} if a.acc_steps > 0 else set()))
    for v in a.variants:
        pattern, local, options = SEQ_VARIANTS[v]
        pkw = ({"window": WINDOW} | ({"num_global": 1} if "global" in pattern else {})) if local else {}
        for L in lengths:
            train = a.acc_steps > 0 and L == a.acc_length
            seq.append({**common, "kind": "seq", "variant": v, "length": L, "tokens": a.tokens,
                        "pattern": pattern, "pattern_kwargs": pkw, "options": _fill(options, L),
                        "steps": a.steps, "acc_steps": a.acc_steps, "eval_seqs": a.eval_seqs, "lr": a.lr,
                        "eval_every": a.eval_every, "solve_acc": a.solve_acc, "train": train,
                        "timeout": a.long_timeout if train else a.case_timeout, "label": f"{v} L={L}"})
    graphs = a.graphs
    if graphs is None:
        from graphattn.testing import shared_data_dir  # light: no torch work

        root = shared_data_dir()
        have = [g for g, d in (("facebook", "facebook_page_page"), ("github", "github_developers"))
                if root is not None and (root / d).is_dir()]
        graphs = have or ["sbm"]
    graph = []
    log = str(Path(a.out).with_suffix(".large.log")) if not a.quick else None
    for g in graphs:
        large = g == "sbm-large"
        for v in (a.large_variants if large else a.graph_variants):
            size = (a.large_nodes, a.large_edges) if large else (a.sbm_nodes, a.sbm_edges)
            graph.append({**common, "kind": "large" if large else "graph", "graph": g, "variant": v,
                          "options": GRAPH_VARIANTS[v], "epochs": a.graph_epochs, "sbm_nodes": size[0],
                          "sbm_edges": size[1], "batch_nodes": a.large_batch_nodes, "steps": a.large_steps,
                          "cache_dir": a.cache_dir, "timeout": a.long_timeout if large else a.case_timeout,
                          "label": f"{g}: {v}"})
            if large:
                graph[-1].update(epochs_large=a.large_epochs, partition=a.large_partition,
                                 parts_per_batch=a.large_parts_per_batch, lr=a.large_lr, log=log)
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
            res = H.run_cases([job], str(Path(__file__).resolve()), env, timeout=job["timeout"],
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
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    seq_jobs, graph_jobs = jobs_for(a)
    print(f"{len(seq_jobs)} sequence cases (lengths {a.lengths}), {len(graph_jobs)} graph cases; "
          f"{a.threads} thread(s) per case, {'in-process' if a.quick else 'one process per case'}", flush=True)
    if any(j["kind"] == "large" for j in graph_jobs) and not a.quick:
        print(f"large-graph progress: tail -f {Path(a.out).with_suffix('.large.log')}", flush=True)
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
    panels = plot(seq, graph, a, png, list(SEQ_VARIANTS) + list(GRAPH_VARIANTS))
    print(f"wrote {out}, {out.with_suffix('.csv')}, {out.with_suffix('.md')}, {png} and its {len(panels)} panels "
          f"one by one ({png.stem}-*.png; {time.perf_counter() - t0:.0f} s in all)")
    return payload


if __name__ == "__main__":
    main()

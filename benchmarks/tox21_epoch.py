#!/usr/bin/env python
"""One Tox21 training epoch: our graph transformer vs the same model with PyG TransformerConv.

Both models are :class:`graphattn.GraphClassifier` as ``graphattn.tasks.molecules.pipeline`` builds
it (categorical atom/bond encoders, bond features through ``edge_dim``, pre-norm blocks with
a feed-forward network, mean readout, MLP head): 4 layers, 4 heads x 32 channels (hidden 128),
no global tokens and no PE, so the graphs are the molecules themselves. The
``TransformerConv`` model swaps only the attention layer of every block for
``TransformerConv(128, 32, heads=4, edge_dim=128, root_weight=False)`` with our layer's
weights copied in: the same function (checked: ``max |Δ| vs ours`` on one batch, eval mode),
the same parameter count.

Work timed per epoch: forward + masked multi-task BCE + backward + Adam step over every batch
of the Tox21 train split (scaffold split, batch size 128, shuffled with a per-epoch seed, so
both models see the same batches). Batches are collated before the timer starts (new tensors
every epoch, as a DataLoader yields them); collation time is reported apart. Each model runs
in a fresh subprocess: 1 untimed warm-up epoch, then ``--repeats`` timed epochs (median);
peak memory is its extra RSS over data + model (CUDA: peak allocated, ``--device cuda``).

    python benchmarks/tox21_epoch.py                    # full train split (~6.3k molecules)
    python benchmarks/tox21_epoch.py --limit 300 --repeats 1 --warmup 0   # smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _device as D  # noqa: E402
import _harness as H  # noqa: E402

HIDDEN, LAYERS, HEADS, BATCH_SIZE = 128, 4, 4, 128
MODELS = ("ours", "TransformerConv")
TARGET = 1.5  # target: an epoch >= 1.5x faster than the TransformerConv model


# ----------------------------------------------------------------------------- worker side
def tc_attention(ours):
    """A ``TransformerConv`` module computing what ``ours`` (a GraphSelfAttention with
    score="dot") computes, with its weights, callable like it inside GraphTransformerBlock."""
    import torch
    from torch import nn
    from torch_geometric.nn import TransformerConv

    class TCAttention(nn.Module):
        def __init__(self):
            super().__init__()
            HC = ours.heads * ours.out_channels
            self.conv = TransformerConv(ours.in_channels, ours.out_channels, heads=ours.heads,
                                        concat=ours.concat, dropout=ours.dropout, edge_dim=ours.edge_dim,
                                        root_weight=ours.root_weight)
            with torch.no_grad():
                w, b = ours.lin_qkv.weight.view(3, HC, -1), ours.lin_qkv.bias.view(3, HC)
                for i, lin in enumerate((self.conv.lin_query, self.conv.lin_key, self.conv.lin_value)):
                    lin.weight.copy_(w[i])
                    lin.bias.copy_(b[i])
                if ours.lin_edge is not None:
                    self.conv.lin_edge.weight.copy_(ours.lin_edge.weight)
                if ours.lin_skip is not None:
                    self.conv.lin_skip.load_state_dict(ours.lin_skip.state_dict())
            if not ours.root_weight:  # PyG 2.8 builds lin_skip even then (unused): drop it
                self.conv.lin_skip = None

        def forward(self, x, edge_index, edge_attr=None, return_attention_weights=False, *, batch=None,
                    edge_attr_index=None):
            if edge_attr_index is not None:  # PyG takes one feature row per edge
                edge_attr = edge_attr.index_select(0, edge_attr_index)
            return self.conv(x, edge_index, edge_attr)

    if ours.score != "dot" or ours.normalization != "softmax":
        raise ValueError("TransformerConv matches only score='dot' with softmax")
    return TCAttention()


def build_models(num_tasks: int, seed: int, which: str):
    """(our model, the model to time): ``which`` = "ours" or "TransformerConv"."""
    import torch

    from graphattn.nn.models.registry import build_model
    from graphattn.tasks.molecules.defaults import DEFAULTS
    from graphattn.tasks.molecules.pipeline import model_spec

    hp = {**DEFAULTS, "hidden": HIDDEN, "layers": LAYERS, "heads": HEADS, "global_tokens": 0, "pe_dim": 0}
    torch.manual_seed(seed)
    ours = build_model(model_spec("none", num_tasks, hp))
    if which == "ours":
        return ours, ours
    tc = build_model(model_spec("none", num_tasks, hp))
    tc.load_state_dict(ours.state_dict())
    for block in tc.backbone.blocks:
        block.attn = tc_attention(block.attn)
    return ours, tc


def load_train_set(spec):
    from graphattn.data import ToxicityDataset
    from graphattn.tasks.molecules.data import split_indices

    ds = ToxicityDataset(root=spec["data_root"], name="tox21", cache_dir=spec["cache_dir"],
                         download=False, log=False)
    if spec["limit"]:
        ds = ds[: spec["limit"]]
    train_idx = split_indices(ds, spec["split"], spec["seed"])[0]
    return ds[train_idx], ds.num_tasks


def epoch_worker(spec: dict) -> dict:
    import torch
    import torch_geometric
    from torch_geometric.loader import DataLoader

    from graphattn.train import task_loss

    torch.set_num_threads(spec["threads"])
    device = D.resolve_device(spec["device"])
    train, num_tasks = load_train_set(spec)
    ours, model = build_models(num_tasks, spec["seed"], spec["model"])
    ours.to(device)
    model.to(device)

    def call(m, b):
        return m(b.x, b.edge_index, b.batch, b.edge_attr, num_graphs=b.num_graphs)

    probe = next(iter(DataLoader(train, batch_size=spec["batch_size"]))).to(device)
    model.eval()
    ours.eval()
    with torch.no_grad():  # same function: the swapped layer computes what ours computes
        diff = float((call(model, probe) - call(ours, probe)).abs().max())
    model.train()
    found = D.attention_backends(call(model, probe))  # what actually ran (train mode)
    backend = " + ".join(found) if found else f"PyG {torch_geometric.__version__}"
    del ours, probe
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def batches(epoch):  # the same shuffled batches for every model: seed per epoch
        gen = torch.Generator().manual_seed(spec["seed"] * 1000 + epoch)
        t0 = time.perf_counter()
        out = [b.to(device) for b in DataLoader(train, batch_size=spec["batch_size"], shuffle=True,
                                                 generator=gen)]
        return out, time.perf_counter() - t0

    meter = D.PeakMemory(device)
    meter.start()  # baseline: imports + data + model
    times, collate, losses = [], [], []
    for epoch in range(spec["warmup"] + spec["repeats"]):
        data, t_collate = batches(epoch)
        D.synchronize(device)
        t0 = time.perf_counter()
        total = torch.zeros((), device=device)
        for b in data:
            loss = task_loss("binary", call(model, b), b.y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach()
        D.synchronize(device)
        if epoch >= spec["warmup"]:
            times.append(time.perf_counter() - t0)
            collate.append(t_collate)
        losses.append(float(total) / len(data))
    s = H.summarize(times)
    return {"backend": backend, "epoch_s": s["median"], "epoch_q1_s": s["q1"], "epoch_q3_s": s["q3"],
            "epoch_min_s": s["min"], "epoch_times_s": times, "epochs": len(times),
            "collate_s": H.summarize(collate)["median"], "molecules": len(train), "batches": len(data),
            "nodes": int(sum(b.num_nodes for b in data)), "edges": int(sum(b.num_edges for b in data)),
            "num_parameters": sum(p.numel() for p in model.parameters()), "max_abs_diff_vs_ours": diff,
            "mean_loss_per_epoch": losses, "torch": torch.__version__, "threads": torch.get_num_threads(),
            **meter.stop()}


# ----------------------------------------------------------------------------- driver side
def render(results, device: str) -> str:
    rows = []
    for r in results:
        if "epoch_s" not in r:
            rows.append([r["model"], "—", "—", "—", "—", "—", "—", "—", "—", "—", r.get("error", "")[:80]])
            continue
        sp, mem = r.get("speedup_vs_tc"), r.get("mem_vs_tc")
        rows.append([r["model"], r["backend"], f"{r['num_parameters']:,}", H.fmt(r["epoch_s"]),
                     f"{100 * (r['epoch_q3_s'] - r['epoch_q1_s']) / r['epoch_s']:.0f}%", r["epochs"],
                     H.fmt(r["collate_s"]), f"{r['peak_delta_mb']:.0f}",
                     "n/a" if sp is None else f"{sp:.2f}×", H.fmt(mem), f"{r['max_abs_diff_vs_ours']:.1e}"])
    head = ["model", "backend", "params", "epoch (s)", "IQR/med", "epochs", "collate (s)",
            D.memory_label(device), "speed-up vs TC", "mem / TC", "max |Δ| vs ours"]
    return H.markdown_table(head, rows, right=[False, False] + [True] * 9)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2, help="torch / OpenMP threads per model")
    p.add_argument("--limit", type=int, default=None, help="first N molecules only (smoke runs)")
    p.add_argument("--device", default="cpu", choices=D.DEVICES)
    p.add_argument("--repeats", type=int, default=3, help="timed epochs per model (median)")
    p.add_argument("--warmup", type=int, default=1, help="untimed epochs first")
    p.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    p.add_argument("--split", default="scaffold", choices=("scaffold", "random", "balanced_scaffold"))
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--data-root", default=os.environ.get("GRAPHATTN_DATA"),
                   help="data root holding tox21/ (default $GRAPHATTN_DATA, else ../shared/data)")
    p.add_argument("--cache-dir", default=None,
                   help="featurized-data cache (default $GRAPHATTN_CACHE or ~/.cache/graphattn; "
                        "never the data folder)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per model")
    p.add_argument("--jobs", type=int, default=1,
                   help="models run concurrently (>1 distorts timings; for smoke tests only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs/bench_tox21_epoch.json"),
                   help="JSON results (a CSV is written beside it)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.worker:
        try:
            H.emit_result(epoch_worker(json.loads(a.worker)))
        except Exception as exc:  # reported in the table, not a crash of the driver
            H.emit_result({"error": f"{type(exc).__name__}: {exc}"})
        return 0
    root = a.data_root
    if root is None:
        shared = Path(__file__).resolve().parents[2] / "shared" / "data"
        root = str(shared) if shared.is_dir() else None
    env = H.worker_env(a.threads, tuned_malloc=False)
    avail = H.mem_available_bytes()
    print(f"# Tox21 training epoch ({a.split} train split{f' of the first {a.limit}' if a.limit else ''}, "
          f"batch {a.batch_size}): GraphClassifier {LAYERS} layers x {HEADS} heads x {HIDDEN // HEADS} "
          f"channels, ours vs TransformerConv; {a.device}, {a.threads} threads, "
          f"{a.warmup} warm-up + {a.repeats} timed epochs; allocator: {H.malloc_description(env)}; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    jobs = [{"model": m, "label": m, "threads": a.threads, "device": a.device, "limit": a.limit,
             "batch_size": a.batch_size, "split": a.split, "seed": a.seed, "repeats": a.repeats,
             "warmup": a.warmup, "data_root": root, "cache_dir": a.cache_dir} for m in a.models]
    t0 = time.perf_counter()
    results = H.run_cases(jobs, str(Path(__file__).resolve()), env, timeout=a.timeout,
                          mem_cap=int(0.9 * avail) if avail else None, parallel=a.jobs, desc="tox21 epoch")
    ok = {r["model"]: r for r in results if "epoch_s" in r}
    for r in ok.values():
        tc = ok.get("TransformerConv")
        r["speedup_vs_tc"] = tc["epoch_s"] / r["epoch_s"] if tc else None
        r["mem_vs_tc"] = r["peak_delta_mb"] / tc["peak_delta_mb"] if tc and tc["peak_delta_mb"] > 0 else None
    print("\n" + render(results, a.device))
    if len(ok) == 2:
        r = ok["ours"]
        sp = ok["TransformerConv"]["epoch_s"] / r["epoch_s"]
        print(f"\n{r['molecules']} molecules, {r['batches']} batches, {r['nodes']:,} nodes, {r['edges']:,} "
              f"directed bonds per epoch. ours ({r['backend']}) = {sp:.2f}x TransformerConv: "
              f"{'meets' if sp >= TARGET else 'MISSES'} the {TARGET}x target")
    meta = {"argv": sys.argv[1:], "machine": H.machine_info(a.device), "allocator": H.malloc_description(env),
            "loadavg_end": os.getloadavg(), "wall_s": time.perf_counter() - t0,
            "model": {"hidden": HIDDEN, "layers": LAYERS, "heads": HEADS, "global_tokens": 0, "pe_dim": 0}}
    flat = [{k: v for k, v in r.items() if k not in ("label", "data_root", "cache_dir")} for r in results]
    paths = H.write_results(a.out, {"meta": meta, "results": flat}, flat)
    print(f"results: {', '.join(str(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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

``--compile`` adds a row for our model under ``torch.compile(fullgraph=True, dynamic=True)``:
its process trains a compiled and an eager copy (same weights, same batches) in alternate
epochs, so ``compiled / eager`` is a ratio measured side by side (the first, warm-up epoch
holds the compilation; ``recompiles`` counts graphs compiled after it). ``--recipe defaults``
times the model ``graphattn train tox21`` builds by default (``DEFAULTS``: Laplacian PE,
a global token, RDKit descriptors; no TransformerConv row, which has no global token).

Collation: ``collate PyG (s)`` is PyG's ``DataLoader`` over the epoch, ``collate storage (s)``
:func:`graphattn.loader.in_memory.in_memory_loader` (the same batches, from the dataset's
concatenated tensors), ``collate share`` PyG's collation over (it + the training epoch).

    python benchmarks/tox21_epoch.py                    # full train split (~6.3k molecules)
    python benchmarks/tox21_epoch.py --limit 300 --repeats 1 --warmup 0   # smoke run
    python benchmarks/tox21_epoch.py --recipe defaults --batch-size 64 --threads 1 --compile --models ours
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
COMPILED = "ours (compiled)"
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


def recipe_hp(recipe: str) -> dict:
    """The hyper-parameters of the timed model: this benchmark's (no PE, no global token) or
    ``graphattn train``'s defaults."""
    from graphattn.tasks.molecules.defaults import defaults_for

    if recipe == "defaults":
        return defaults_for("classification")
    return {**defaults_for("classification"), "hidden": HIDDEN, "layers": LAYERS, "heads": HEADS, "global_tokens": 0, "pe_dim": 0}


def build_models(num_tasks: int, seed: int, which: str, hp: dict, graph_feature_dim: int = 0):
    """(our model, the model to time): ``which`` = "ours", COMPILED (ours, compiled later) or
    "TransformerConv"."""
    import torch

    from graphattn.nn.models.registry import build_model
    from graphattn.tasks.molecules.pipeline import model_spec
    from graphattn.tasks.molecules.recipe import MoleculeRecipe

    spec = model_spec("none", num_tasks, MoleculeRecipe.from_dict(hp), graph_feature_dim=graph_feature_dim)
    torch.manual_seed(seed)
    ours = build_model(spec)
    if which != "TransformerConv":
        return ours, ours
    tc = build_model(spec)
    tc.load_state_dict(ours.state_dict())
    for block in tc.backbone.blocks:
        block.attn = tc_attention(block.attn)
    return ours, tc


def load_train_set(spec):
    """(training split, number of tasks, number of descriptors) of the recipe's featurized Tox21."""
    from graphattn.data import MoleculeNetDataset
    from graphattn.tasks.molecules.data import descriptor_set, load_dataset, split_indices

    if spec["recipe"] == "defaults":  # featurized as graphattn train does it (PE, descriptors)
        if spec["data_root"]:
            os.environ["GRAPHATTN_DATA"] = spec["data_root"]
        if spec["cache_dir"]:
            os.environ["GRAPHATTN_CACHE"] = spec["cache_dir"]
        hp = recipe_hp("defaults")
        ds = load_dataset("tox21", pe_dim=hp["pe_dim"], descriptors=descriptor_set(hp["descriptors"]), log=False,
                          limit=spec["limit"])
    else:
        ds = MoleculeNetDataset(root=spec["data_root"], name="tox21", cache_dir=spec["cache_dir"],
                             download=False, log=False)
        if spec["limit"]:
            ds = ds[: spec["limit"]]
    train_idx = split_indices(ds, spec["split"], spec["seed"])[0]
    return ds[train_idx], ds.num_tasks, len(getattr(ds, "descriptor_names", None) or ())


def collated_epoch(train, spec: dict, epoch: int, device):
    """The epoch's shuffled batches (seed per epoch: the same for every model) from PyG's
    ``DataLoader``, and the seconds of PyG's collation and of the storage collation."""
    import torch
    from torch_geometric.loader import DataLoader

    from graphattn.loader.in_memory import in_memory_loader

    seed = spec["seed"] * 1000 + epoch
    t0 = time.perf_counter()
    out = [b.to(device) for b in DataLoader(train, batch_size=spec["batch_size"], shuffle=True,
                                             generator=torch.Generator().manual_seed(seed))]
    t1 = time.perf_counter()
    fast = [b.to(device) for b in in_memory_loader(train, batch_size=spec["batch_size"], shuffle=True,
                                                    generator=torch.Generator().manual_seed(seed))]
    t2 = time.perf_counter()
    assert len(fast) == len(out) and all(torch.equal(a.edge_index, b.edge_index) for a, b in zip(out, fast))
    return out, t1 - t0, t2 - t1


def train_epoch(model, opt, data, device) -> tuple:
    """(seconds, mean loss) of one training epoch over ``data``."""
    import torch

    from graphattn.tasks.molecules.pipeline import forward
    from graphattn.train import task_loss

    D.synchronize(device)
    t0 = time.perf_counter()
    total = torch.zeros((), device=device)
    for b in data:
        loss = task_loss("binary", *forward(model, b))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
    D.synchronize(device)
    return time.perf_counter() - t0, float(total) / len(data)


def probe_model(ours, model, train, spec, device) -> tuple:
    """(max |Δ| of ``model`` vs ``ours`` on one batch in eval mode, the attention backend that ran)."""
    import torch
    import torch_geometric
    from torch_geometric.loader import DataLoader

    from graphattn.tasks.molecules.pipeline import forward

    probe = next(iter(DataLoader(train, batch_size=spec["batch_size"]))).to(device)
    model.eval()
    ours.eval()
    with torch.no_grad():  # same function: the swapped layer computes what ours computes
        diff = float((forward(model, probe)[0] - forward(ours, probe)[0]).abs().max())
    model.train()
    found = D.attention_backends(forward(model, probe)[0])  # what actually ran (train mode)
    return diff, " + ".join(found) if found else f"PyG {torch_geometric.__version__}"


def epoch_worker(spec: dict) -> dict:
    import torch
    from torch._dynamo.utils import counters

    torch.set_num_threads(spec["threads"])
    device = D.resolve_device(spec["device"])
    train, num_tasks, num_desc = load_train_set(spec)
    ours, model = build_models(num_tasks, spec["seed"], spec["model"], recipe_hp(spec["recipe"]), num_desc)
    ours.to(device)
    model.to(device)
    diff, backend = probe_model(ours, model, train, spec, device)
    twin = None
    if spec["model"] == COMPILED:  # an eager copy trained side by side: the ratio is not the load's
        twin = model
        model = torch.compile(build_models(num_tasks, spec["seed"], "ours", recipe_hp(spec["recipe"]),
                                           num_desc)[1].to(device).train(), fullgraph=True, dynamic=True)
        backend += " (torch.compile)"
    del ours
    opts = [torch.optim.Adam(m.parameters(), lr=1e-3) for m in (model, twin) if m is not None]
    meter = D.PeakMemory(device)
    meter.start()  # baseline: imports + data + model
    times, eager, collate, fast, losses, graphs = [], [], [], [], [], 0
    for epoch in range(spec["warmup"] + spec["repeats"]):
        data, t_collate, t_fast = collated_epoch(train, spec, epoch, device)
        t, loss = train_epoch(model, opts[0], data, device)
        t_eager = train_epoch(twin, opts[1], data, device)[0] if twin is not None else None
        if epoch == 0:
            graphs = counters["stats"]["unique_graphs"]
        if epoch >= spec["warmup"]:
            times.append(t)
            eager.append(t_eager)
            collate.append(t_collate)
            fast.append(t_fast)
        losses.append(loss)
    s = H.summarize(times)
    out = {"backend": backend, "epoch_s": s["median"], "epoch_q1_s": s["q1"], "epoch_q3_s": s["q3"],
           "epoch_min_s": s["min"], "epoch_times_s": times, "epochs": len(times),
           "collate_s": H.summarize(collate)["median"], "collate_storage_s": H.summarize(fast)["median"],
           "molecules": len(train), "batches": len(data),
           "nodes": int(sum(b.num_nodes for b in data)), "edges": int(sum(b.num_edges for b in data)),
           "num_parameters": sum(p.numel() for p in model.parameters()), "max_abs_diff_vs_ours": diff,
           "mean_loss_per_epoch": losses, "torch": torch.__version__, "threads": torch.get_num_threads(),
           **meter.stop()}
    if twin is not None:
        out.update(eager_epoch_s=H.summarize(eager)["median"], recompiles=counters["stats"]["unique_graphs"] - graphs,
                   compiled_vs_eager=H.summarize([c / e for c, e in zip(times, eager)])["median"])
    return out


# ----------------------------------------------------------------------------- driver side
def render(results, device: str) -> str:
    head = ["model", "backend", "params", "epoch (s)", "IQR/med", "epochs", "collate PyG (s)",
            "collate storage (s)", "collate share", "compiled / eager", "recompiles",
            D.memory_label(device), "speed-up vs TC", "mem / TC", "max |Δ| vs ours"]
    rows = []
    for r in results:
        if "epoch_s" not in r:
            rows.append([r["model"]] + ["—"] * (len(head) - 2) + [r.get("error", "")[:80]])
            continue
        sp, mem, ce = r.get("speedup_vs_tc"), r.get("mem_vs_tc"), r.get("compiled_vs_eager")
        share = r["collate_s"] / (r["collate_s"] + r["epoch_s"])
        rows.append([r["model"], r["backend"], f"{r['num_parameters']:,}", H.fmt(r["epoch_s"]),
                     f"{100 * (r['epoch_q3_s'] - r['epoch_q1_s']) / r['epoch_s']:.0f}%", r["epochs"],
                     H.fmt(r["collate_s"]), H.fmt(r["collate_storage_s"]), f"{100 * share:.0f}%",
                     "—" if ce is None else f"{ce:.2f}", r.get("recompiles", "—"), f"{r['peak_delta_mb']:.0f}",
                     "n/a" if sp is None else f"{sp:.2f}×", H.fmt(mem), f"{r['max_abs_diff_vs_ours']:.1e}"])
    return H.markdown_table(head, rows, right=[False, False] + [True] * (len(head) - 2))


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
    p.add_argument("--compile", action="store_true",
                   help=f"add a row '{COMPILED}': torch.compile(fullgraph=True, dynamic=True), timed against an "
                        "eager copy in the same process")
    p.add_argument("--recipe", default="bench", choices=("bench", "defaults"),
                   help="the timed model: this benchmark's (4 x 128, no PE) or graphattn train's DEFAULTS "
                        "(no TransformerConv row)")
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
    hp = recipe_hp(a.recipe)
    models = [m for m in a.models if a.recipe == "bench" or m != "TransformerConv"] + ([COMPILED] if a.compile else [])
    print(f"# Tox21 training epoch ({a.split} train split{f' of the first {a.limit}' if a.limit else ''}, "
          f"batch {a.batch_size}): GraphClassifier {hp['layers']} layers x {hp['heads']} heads x "
          f"{hp['hidden'] // hp['heads']} channels ({a.recipe} recipe), {' vs '.join(models)}; {a.device}, "
          f"{a.threads} threads, "
          f"{a.warmup} warm-up + {a.repeats} timed epochs; allocator: {H.malloc_description(env)}; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    jobs = [{"model": m, "label": m, "threads": a.threads, "device": a.device, "limit": a.limit,
             "batch_size": a.batch_size, "split": a.split, "seed": a.seed, "repeats": a.repeats,
             "warmup": a.warmup, "data_root": root, "cache_dir": a.cache_dir, "recipe": a.recipe} for m in models]
    t0 = time.perf_counter()
    results = H.run_cases(jobs, str(Path(__file__).resolve()), env, timeout=a.timeout,
                          mem_cap=int(0.9 * avail) if avail else None, parallel=a.jobs, desc="tox21 epoch")
    ok = {r["model"]: r for r in results if "epoch_s" in r}
    for r in ok.values():
        tc = ok.get("TransformerConv")
        r["speedup_vs_tc"] = tc["epoch_s"] / r["epoch_s"] if tc else None
        r["mem_vs_tc"] = r["peak_delta_mb"] / tc["peak_delta_mb"] if tc and tc["peak_delta_mb"] > 0 else None
    print("\n" + render(results, a.device))
    if "ours" in ok and "TransformerConv" in ok:
        r = ok["ours"]
        sp = ok["TransformerConv"]["epoch_s"] / r["epoch_s"]
        print(f"\n{r['molecules']} molecules, {r['batches']} batches, {r['nodes']:,} nodes, {r['edges']:,} "
              f"directed bonds per epoch. ours ({r['backend']}) = {sp:.2f}x TransformerConv: "
              f"{'meets' if sp >= TARGET else 'MISSES'} the {TARGET}x target")
    meta = {"argv": sys.argv[1:], "machine": H.machine_info(a.device), "allocator": H.malloc_description(env),
            "loadavg_end": os.getloadavg(), "wall_s": time.perf_counter() - t0,
            "model": {k: hp[k] for k in ("hidden", "layers", "heads", "global_tokens", "pe_dim", "descriptors")},
            "recipe": a.recipe}
    flat = [{k: v for k, v in r.items() if k not in ("label", "data_root", "cache_dir")} for r in results]
    paths = H.write_results(a.out, {"meta": meta, "results": flat}, flat)
    print(f"results: {', '.join(str(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

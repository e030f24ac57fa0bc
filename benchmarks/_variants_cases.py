"""Worker side of ``benchmarks/variants.py``: one training case per call (a JSON spec in, a
dict of numbers out). The spec carries the model options, so this module holds no variant
table. Three kinds of case:

* ``seq_case``: the copy-the-first-symbol task; speed at one length, or (``train``) a full
  accuracy run with held-out checkpoints every ``eval_every`` steps that stops at the first
  checkpoint with accuracy >= ``solve_acc`` (the step is reported as ``solved_step``).
* ``graph_case``: full-batch node classification (Facebook, GitHub, a synthetic SBM).
* ``large_graph_case``: mini-batch (Cluster-GCN) training on a graph too large for a
  full-batch step (the 2 M-node SBM): ``epochs`` epochs over all parts, then val / test
  accuracy over every val / test node by mini-batch inference; throughput, epoch and
  evaluation time, peak memory (``epochs`` = 0: a few timed steps, no accuracy).
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import _harness as H

ROOT = Path(__file__).resolve().parents[1]
__all__ = ["seq_case", "graph_case", "large_graph_case"]


def _train_step(model, opt, args, kwargs, y, mask=None):
    """One Adam step on the cross-entropy of the (masked) logits; returns the loss."""
    import torch.nn.functional as F

    logits = model(*args, **kwargs)
    loss = F.cross_entropy(logits if mask is None else logits[mask], y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.detach())


def _clustered_reach(model, args, kwargs, seq_len):
    """Fraction of tokens that position 0 of their sequence reaches through the layers'
    union of pattern edges and (data-dependent) clustered-attention edges: with the
    copy task, accuracy <= reach + (1 - reach) / V. None when no layer is clustered."""
    import torch

    from graphattn.nn.variants.clustered_attention import ClusteredAttention

    patterns, hooks = [], []
    for block in model.modules():
        if isinstance(getattr(block, "global_attn", None), ClusteredAttention):
            hooks.append(block.global_attn.register_forward_hook(
                lambda m, inp, out: patterns.append(m.forward(*inp, return_pattern=True)[1])))
    if not hooks:
        return None
    with torch.no_grad():
        model(*args, **kwargs)
    for h in hooks:
        h.remove()
    edge_index = args[1]
    seen = torch.arange(args[0].size(0)) % seq_len == 0  # position 0 of every sequence
    for extra in patterns:  # one hop per layer: window edges and that layer's clusters
        src, dst = torch.cat([edge_index, extra], dim=1)
        seen = seen.clone().index_fill_(0, dst[seen[src]], True)
    return float(seen.float().mean())


def seq_case(s):
    """Train one variant at one length; throughput, peak memory, and the accuracy curve if asked."""
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT / "examples"))
    from sequence_patterns import make_data  # the task of examples/sequence_patterns.py

    from graphattn import NodeClassifier, sequences_to_batch

    torch.manual_seed(s["seed"])
    L, V = s["length"], s["vocab"]
    B = max(1, s["tokens"] // L)
    t = sequences_to_batch(torch.zeros(B, L, V), s["pattern"], pe_channels=16, **s["pattern_kwargs"])
    model = NodeClassifier(V, 64, V, num_layers=2, heads=4, pe_dim=16, pe_kind="linear", **s["options"])
    opt = torch.optim.Adam(model.parameters(), lr=s["lr"])
    gen = torch.Generator().manual_seed(s["seed"])
    egen = torch.Generator().manual_seed(10_000 + s["seed"])  # the same held-out set for all
    held_out = [make_data(B, L, V, egen) for _ in range(max(1, s["eval_seqs"] // B))] if s["train"] else []

    def inputs(symbols):
        x = F.one_hot(symbols, V).float().view(-1, V)  # (B*L, V)
        return (x, t.edge_index), {"batch": t.batch, "pe": t.pe}

    def evaluate():
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for sym, y in held_out:
                args, kwargs = inputs(sym)
                correct += int((model(*args, **kwargs).argmax(-1) == y.reshape(-1)).sum())
                total += y.numel()
        model.train()
        return correct / total

    peak = H.PeakRSS()
    peak.start()
    steps = s["acc_steps"] if s["train"] else s["steps"] + 1
    times, losses, curve, solved = [], [], [], None
    for step in range(1, steps + 1):
        sym, y = make_data(B, L, V, gen)
        args, kwargs = inputs(sym)
        t0 = time.perf_counter()
        losses.append(_train_step(model, opt, args, kwargs, y.reshape(-1)))
        times.append(time.perf_counter() - t0)
        if s["train"] and (step % s["eval_every"] == 0 or step == steps):
            curve.append([step, evaluate()])
            if curve[-1][1] >= s["solve_acc"]:
                solved = step
                break
    res = {"batch": B, "edges_per_seq": t.edge_index.size(1) // B, "steps": len(times),
           "step_s": H.summarize(times[1:] or times)["median"], "final_loss": losses[-1]}
    res["tokens_per_s"] = B * L / res["step_s"]
    res.update(peak.stop())
    if s["train"]:
        res.update(accuracy=curve[-1][1], curve=curve, solved_step=solved,
                   train_cpu_s=sum(times))
        model.eval()
        reach = _clustered_reach(model, *inputs(held_out[0][0]), L)
        if reach is not None:
            res["clustered_reach"] = reach
    return res


def _graph_data(s):
    import torch

    name = s["graph"]
    if name in ("facebook", "github"):
        import warnings

        from graphattn.data.social import load_social_node_dataset
        from graphattn.testing import shared_data_dir

        with warnings.catch_warnings():  # GitHub has no feature file: structural features, on purpose
            warnings.simplefilter("ignore")
            data = load_social_node_dataset(name, root=shared_data_dir(), download=False, max_features=256)
    else:
        from graphattn.testing import sbm_graph

        data = sbm_graph(s["sbm_nodes"], s["sbm_edges"], num_blocks=10, num_features=16, seed=s["seed"])
    data.x = data.x.float()
    return data, int(data.y.max()) + 1, torch


def _auc(score, y):
    """ROC-AUC of ``score`` for binary labels ``y`` (Mann-Whitney rank sum; ties broken by order)."""
    import torch

    ranks = torch.empty(score.numel(), dtype=torch.float64)
    ranks[score.argsort()] = torch.arange(1, score.numel() + 1, dtype=torch.float64)
    pos = y == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def graph_case(s):
    """Full-batch node classification with one variant; best-val test accuracy, nodes/s, memory."""
    data, classes, torch = _graph_data(s)

    from graphattn import NodeClassifier

    torch.manual_seed(s["seed"])
    model = NodeClassifier(data.x.size(1), 64, classes, num_layers=2, heads=4, dropout=0.1, **s["options"])
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    peak = H.PeakRSS()
    peak.start()
    times, best, best_auc = [], (-1.0, 0.0, 0), (-1.0, 0.0, 0)
    for epoch in range(1, s["epochs"] + 1):
        model.train()
        t0 = time.perf_counter()
        _train_step(model, opt, (data.x, data.edge_index), {}, data.y[data.train_mask], data.train_mask)
        times.append(time.perf_counter() - t0)
        model.eval()
        with torch.no_grad():
            logits = model(data.x, data.edge_index)
        pred = logits.argmax(-1)
        val = float((pred[data.val_mask] == data.y[data.val_mask]).float().mean())
        if val > best[0]:
            best = (val, float((pred[data.test_mask] == data.y[data.test_mask]).float().mean()), epoch)
        if classes == 2:  # imbalanced binary sets: accuracy can sit at the majority class; AUC ranks
            margin = logits[:, 1] - logits[:, 0]
            val = _auc(margin[data.val_mask], data.y[data.val_mask])
            if val > best_auc[0]:
                best_auc = (val, _auc(margin[data.test_mask], data.y[data.test_mask]), epoch)
    res = {"nodes": data.num_nodes, "edges": data.edge_index.size(1), "features": data.x.size(1),
           "epochs": s["epochs"], "mode": "full batch", "step_s": H.summarize(times[1:] or times)["median"],
           "val_accuracy": best[0], "accuracy": best[1], "best_epoch": best[2]}
    if classes == 2:
        res.update(val_auc=best_auc[0], auc=best_auc[1], best_auc_epoch=best_auc[2])
    res["nodes_per_s"] = data.num_nodes / res["step_s"]
    res["majority_acc"] = float(torch.bincount(data.y[data.test_mask]).max()) / int(data.test_mask.sum())
    res.update(peak.stop())
    return res


def _large_sbm(s):
    """The large SBM, generated once and kept in ``cache_dir`` (never the shared data folder)."""
    import torch

    from graphattn.testing import sbm_graph

    cache = s.get("cache_dir")
    path = Path(cache) / f"sbm_{s['sbm_nodes']}_{s['sbm_edges']}_s{s['seed']}.pt" if cache else None
    if path is not None and path.exists():
        return torch.load(path, weights_only=False), True
    t0 = time.perf_counter()
    data = sbm_graph(s["sbm_nodes"], s["sbm_edges"], num_blocks=10, num_features=16, seed=s["seed"])
    data.generate_s = time.perf_counter() - t0
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(data, str(path) + ".part")
        Path(str(path) + ".part").rename(path)
    return data, False


def _large_eval(model, batches, groups):
    """Mini-batch inference over fixed groups of parts (every node predicted once): val and
    test accuracy over all val / test nodes of the graph."""
    import torch

    model.eval()
    hit = {"val": 0, "test": 0, "nodes": 0}
    with torch.no_grad():
        for parts in groups:
            b = batches.subgraph(parts)
            pred = model(b.x.float(), b.edge_index).argmax(-1)
            hit["nodes"] += b.num_nodes
            for k in ("val", "test"):
                m = b[f"{k}_mask"]
                hit[k] += int((pred[m] == b.y[m]).sum())
    model.train()
    return hit


def large_graph_case(s):
    """Mini-batch training on a graph too large for a full-batch step (the 2 M-node SBM),
    Cluster-GCN style (:class:`graphattn.loader.partition.PartitionBatches`): the nodes are cut into
    parts of ``batch_nodes / parts_per_batch`` nodes (``partition``: ``"bfs"`` regions, or
    ``"random"``), and every step trains on the subgraph induced by ``parts_per_batch`` parts
    drawn at random. ``epochs`` > 0: that many epochs over all parts, then val and test
    accuracy over *all* val / test nodes by mini-batch inference over fixed groups of parts
    (the test accuracy at the best-val epoch); ``epochs`` = 0: ``steps`` timed steps only.
    Progress goes to ``log`` (a file) when given, else stderr."""
    import torch
    from tqdm import tqdm

    from graphattn import NodeClassifier
    from graphattn.loader.partition import PartitionBatches, partition_nodes

    data, cached = _large_sbm(s)
    N, E = data.num_nodes, data.edge_index.size(1)
    q, method, epochs = s.get("parts_per_batch", 1), s.get("partition", "random"), s.get("epochs_large", 0)
    P = max(2 * q, math.ceil(q * N / s["batch_nodes"]))
    t0 = time.perf_counter()
    part = partition_nodes(data.edge_index, N, P, method=method, seed=s["seed"])
    partition_s = time.perf_counter() - t0
    batches = PartitionBatches(data, part, q, shuffle=True)
    data.edge_index = None  # the batches keep their own int32 copy of the edges
    inside, _ = batches.coverage()
    eval_groups = list(torch.arange(batches.num_parts).split(q))  # fixed: every node once
    torch.manual_seed(s["seed"])
    model = NodeClassifier(data.x.size(1), 64, int(data.y.max()) + 1, num_layers=2, heads=4, dropout=0.1,
                           **s["options"])
    opt = torch.optim.Adam(model.parameters(), lr=s.get("lr", 5e-3))
    log = open(s["log"], "a") if s.get("log") else sys.stderr
    peak = H.PeakRSS()
    peak.start()
    times, sizes, epoch_s, eval_s, best, curve = [], [], [], [], (-1.0, 0.0, 0), []
    n_val, n_test = int(data.val_mask.sum()), int(data.test_mask.sum())
    for epoch in range(1, max(epochs, 1) + 1):
        groups = batches.groups() if epochs else batches.groups()[:s["steps"] + 1]
        t_ep = time.perf_counter()
        for parts in tqdm(groups, desc=f"{s['variant']} epoch {epoch}/{max(epochs, 1)}", unit="batch",
                          file=log, mininterval=5):
            b = batches.subgraph(parts)
            t1 = time.perf_counter()
            loss = _train_step(model, opt, (b.x.float(), b.edge_index), {}, b.y[b.train_mask], b.train_mask)
            times.append(time.perf_counter() - t1)
            sizes.append((b.num_nodes, b.edge_index.size(1)))
        epoch_s.append(time.perf_counter() - t_ep)
        if epochs:
            t1 = time.perf_counter()
            hit = _large_eval(model, batches, tqdm(eval_groups, desc="  eval", unit="batch", file=log,
                                                    mininterval=5))
            eval_s.append(time.perf_counter() - t1)
            curve.append([epoch, hit["val"] / n_val, hit["test"] / n_test])
            if curve[-1][1] > best[0]:
                best = (curve[-1][1], curve[-1][2], epoch)
            print(f"{s['variant']}: epoch {epoch} val {curve[-1][1]:.4f} test {curve[-1][2]:.4f} "
                  f"({epoch_s[-1]:.0f} s train, {eval_s[-1]:.0f} s eval)", file=log, flush=True)
    step_s = H.summarize(times[1:] or times)["median"]
    mean_nodes = sum(n for n, _ in sizes) / len(sizes)
    res = {"nodes": N, "edges": E, "mode": "mini-batch", "partition": method, "parts": P,
           "parts_per_batch": q, "edges_in_parts": inside / E, "partition_s": partition_s,
           "batch_nodes": round(mean_nodes), "batch_edges": sum(e for _, e in sizes) // len(sizes),
           "steps": len(times), "step_s": step_s, "nodes_per_s": mean_nodes / step_s, "final_loss": loss,
           "graph_cached": cached, "epoch_s_est": N / (mean_nodes / step_s)}
    if epochs:
        ys = data.y[data.test_mask]
        res.update(epochs=epochs, epoch_s=H.summarize(epoch_s)["median"], eval_s=H.summarize(eval_s)["median"],
                   train_nodes_per_s=N * epochs / sum(epoch_s), val_accuracy=best[0], accuracy=best[1],
                   best_epoch=best[2], curve=curve, val_nodes=n_val, test_nodes=n_test, eval_nodes=hit["nodes"],
                   majority_acc=float(torch.bincount(ys).max()) / ys.numel(), lr=s.get("lr", 5e-3))
    if getattr(data, "generate_s", None):
        res["generate_s"] = data.generate_s
    res.update(peak.stop())
    if log is not sys.stderr:
        log.close()
    return res

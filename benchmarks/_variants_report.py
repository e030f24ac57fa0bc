"""Tables, plot and result merging of ``benchmarks/variants.py`` (the variant names are
passed in, in the script's order). Headers take the settings from the rows themselves, so
merged runs are described by what each row actually ran."""
from __future__ import annotations

import json
from pathlib import Path

import _harness as H

__all__ = ["merge_results", "tables", "plot"]


def _key(r):
    return r["kind"], r.get("graph"), r["variant"], r.get("length"), bool(r.get("train"))


def merge_results(seq, graph, a, seq_names, graph_names):
    """Earlier runs' cases (``--merge``) overridden by this run's; tables cover them all."""
    merged = {}
    for f in a.merge:
        old = json.loads(Path(f).read_text())
        for r in old["sequence"] + old["graph"]:
            merged[_key(r)] = r
        a.lengths = sorted(set(a.lengths) | set(old["args"]["lengths"]))
    for r in seq + graph:
        merged[_key(r)] = r
    rows = list(merged.values())
    a.variants = [v for v in seq_names if any(r["kind"] == "seq" and r["variant"] == v for r in rows)]
    order = {v: i for i, v in enumerate(graph_names)}
    graph = sorted((r for r in rows if r["kind"] != "seq"), key=lambda r: (r["graph"], order[r["variant"]]))
    return [r for r in rows if r["kind"] == "seq"], graph


def _mb(r):
    return r.get("peak_delta_mb") if "error" not in r else None


def _speed_rows(seq, v):
    """Length -> the speed row of variant v (a separate speed case wins over the accuracy run)."""
    by_len = {}
    for r in sorted((r for r in seq if r["variant"] == v), key=lambda r: not r.get("train")):
        by_len[r["length"]] = r
    return by_len


def _pct(x):
    return "n/a" if x is None else f"{x:.3f}"


def _reach_note(r):
    reach = r.get("clustered_reach")
    return "" if reach is None else f"position 0 reaches {reach:.1%} of tokens (end of training)"


def _acc_at(r, step):
    pts = [acc for s, acc in r.get("curve") or [] if s <= step]
    return pts[-1] if pts else None


def _seq_tables(seq, a):
    acc = {r["variant"]: r for r in seq if r.get("train")}
    lines = []
    if acc:
        r0 = next(iter(acc.values()))
        budget = max(r.get("acc_steps", 0) for r in acc.values())
        lines += [f"### Copy-the-first-symbol at L={r0['length']}: accuracy within {budget} steps of "
                  f"{r0['tokens']} tokens (Adam lr {r0.get('lr', 5e-3)}, held-out check every "
                  f"{r0.get('eval_every', '-')} steps, stop at >= {r0.get('solve_acc', '-')}; chance "
                  f"{1 / r0['vocab']:.3f}, one seed)", ""]
        rows = []
        for v in a.variants:
            r = acc.get(v)
            if r is None:
                continue
            rows.append([v, r.get("edges_per_seq", "n/a"), _pct(_acc_at(r, 300)), _pct(_acc_at(r, 1000)),
                         _pct(r.get("accuracy")), r.get("solved_step") or f"not in {r.get('steps', '?')}",
                         H.fmt(r.get("train_cpu_s")), r.get("error", "")[:50] or _reach_note(r)])
        lines += [H.markdown_table(["variant", "edges/seq", "acc. @300", "acc. @1000", "final acc.",
                                    "solved at step", "train s", "note"], rows,
                                   [False, True, True, True, True, True, True, False]), ""]
    lines += [f"### Training throughput (k tokens/s) and peak extra memory (MB) per length, "
              f"{seq[0]['tokens'] if seq else '?'} tokens per step, {a.threads} thread(s)", ""]
    head = ["variant"] + [f"k tok/s L={L}" for L in a.lengths] + [f"MB L={L}" for L in a.lengths]
    rows = []
    for v in a.variants:
        by_len = _speed_rows(seq, v)
        if not any(L in by_len for L in a.lengths):
            continue
        rows.append([v] + [H.fmt(by_len[L]["tokens_per_s"] / 1e3) if "tokens_per_s" in by_len.get(L, {})
                           else "n/a" for L in a.lengths]
                    + [H.fmt(_mb(by_len.get(L, {"error": 1}))) for L in a.lengths])
    return lines + [H.markdown_table(head, rows, [False] + [True] * (len(head) - 1)), ""]


def _large_table(g, rs, full):
    """Mini-batch rows of a graph too large for a full batch; ``full``: the full-batch rows of
    the small SBM with the same edges/node ratio, used for the full-batch memory estimate."""
    n = next((r for r in rs if "nodes" in r), {})
    ref = next(iter(full.values()), {})
    same_density = ref.get("nodes") and n.get("nodes") and \
        abs(ref["edges"] / ref["nodes"] - n["edges"] / n["nodes"]) < 0.1 * n["edges"] / n["nodes"]
    scale = n["nodes"] / ref["nodes"] if same_density else None
    acc = next((r for r in rs if "accuracy" in r), None)
    q = n.get("parts_per_batch", 1)
    parts = (f"{n.get('parts', '?')} {n.get('partition', 'random')} parts, {q} per mini-batch of "
             f"~{n.get('batch_nodes', '?')} nodes (~{n.get('batch_edges', '?')} induced edges, "
             f"{H.fmt(n.get('edges_in_parts', 1 / max(n.get('parts', 1), 1)) * 100)}% of all edges inside a part)")
    if acc is not None:
        head = (f"### {g}: {n.get('nodes', '?')} nodes, {n.get('edges', '?')} directed edges: mini-batch, "
                f"{acc['epochs']} epoch(s), accuracy over all {acc['val_nodes']} val / {acc['test_nodes']} "
                f"test nodes (majority class {H.fmt(acc['majority_acc'])})")
        how = (f"Cluster-GCN training: {parts}; Adam lr {acc.get('lr')}. Accuracy: mini-batch inference over "
               f"fixed groups of the same parts (every node once), test at the best-val epoch. k nodes/s: "
               f"batch nodes / median step; epoch s: measured, with batch extraction; eval s: one pass.")
    else:
        head = (f"### {g}: {n.get('nodes', '?')} nodes, {n.get('edges', '?')} directed edges: mini-batch "
                f"throughput and memory only (no accuracy)")
        how = (f"{n.get('steps', '?')} timed training steps (after 1 warm-up); {parts}; "
               f"epoch time = nodes / throughput.")
    lines = [head, "", how + f" A full-batch step was not run: estimated as the peak memory of the same "
             f"variant on the {ref.get('nodes', '?')}-node SBM (same edges per node) x {H.fmt(scale)}.", ""]
    rows = []
    for r in rs:
        f = full.get(r["variant"], {})
        est = _mb(f) * scale / 1024 if scale and _mb(f) else None
        rows.append([r["variant"], _pct(r.get("val_accuracy")), _pct(r.get("accuracy")),
                     H.fmt(r["nodes_per_s"] / 1e3 if "nodes_per_s" in r else None), H.fmt(r.get("step_s")),
                     H.fmt(r.get("epoch_s", r.get("epoch_s_est"))) + ("" if "epoch_s" in r else " (est.)"),
                     H.fmt(r.get("eval_s")), H.fmt(_mb(r)), H.fmt(est), r.get("error", "")[:60]])
    lines += [H.markdown_table(["variant", "val acc.", "test acc.", "k nodes/s (mini-batch)", "s/step",
                                "s/epoch", "eval s", "peak MB", "full batch est. GB", "note"], rows,
                               [False] + [True] * 8 + [False]), ""]
    return lines


def tables(seq, graph, a):
    lines = _seq_tables(seq, a) if seq else []
    for g in sorted({r["graph"] for r in graph}):
        rs = [r for r in graph if r["graph"] == g]
        if rs[0]["kind"] == "large":
            full = {r["variant"]: r for r in graph if r["graph"] == "sbm" and "error" not in r}
            lines += _large_table(g, rs, full)
            continue
        n = next((r for r in rs if "nodes" in r), {})
        maj = f", majority class {H.fmt(n['majority_acc'])}" if "majority_acc" in n else ""
        lines += [f"### {g}: {n.get('nodes', '?')} nodes, {n.get('edges', '?')} directed edges, "
                  f"{n.get('features', '?')} features, full batch, {n.get('epochs', a.graph_epochs)} epochs "
                  f"(test acc. at best val. epoch{maj})", ""]
        auc = any("auc" in r for r in rs)
        rows = [[r["variant"], _pct(r.get("accuracy"))] + ([_pct(r.get("auc"))] if auc else [])
                + [H.fmt(r["nodes_per_s"] / 1e3 if "nodes_per_s" in r else None),
                   H.fmt(r.get("step_s")), H.fmt(_mb(r)), r.get("error", "")[:60]] for r in rs]
        head = ["variant", "test acc."] + (["test AUC (best val. AUC epoch)"] if auc else []) + \
            ["k nodes/s", "s/step", "peak MB", "note"]
        lines += [H.markdown_table(head, rows, [False] + [True] * (len(head) - 2) + [False]), ""]
    return "\n".join(lines)


def _scatter(ax, pts, color, xlabel, title, chance=None, ylabel="accuracy", chance_label="chance"):
    mem = [m for *_, m in pts if m]
    top = max(mem) if mem else 1.0
    for i, (name, x, y, m) in enumerate(sorted(pts, key=lambda p: (round(p[2], 2), p[1]))):
        ax.scatter([x], [y], s=40 + 1500 * (m or 0) / top, alpha=0.6, color=color[name.split(" (L=")[0]],
                   label=name)
        ax.annotate(name, (x, y), fontsize=7, xytext=(5, -12 + 9 * (i % 4)), textcoords="offset points")
    ax.set_xscale("log")
    if chance is not None:
        ax.axhline(chance, ls="--", lw=0.8, color="gray")
        ax.annotate(chance_label, (0.01, chance), xycoords=("axes fraction", "data"), va="bottom",
                    fontsize=7, color="gray")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, markerscale=0.3, loc="best")


def _seq_panels(axes, seq, a, color):
    Lmax = max(a.lengths) if a.lengths else None
    train = {r["variant"]: r for r in seq if r.get("train") and "accuracy" in r}
    pts = []
    for v in a.variants:
        ok = [r for r in _speed_rows(seq, v).values() if "tokens_per_s" in r and r["length"] in a.lengths]
        if v in train and ok:
            r = max(ok, key=lambda r: r["length"])
            pts.append((v + ("" if r["length"] == Lmax else f" (L={r['length']})"), r["tokens_per_s"],
                        train[v]["accuracy"], _mb(r)))
    if pts:
        r0 = next(iter(train.values()))
        _scatter(axes[0], pts, color, f"training tokens / s at L={Lmax}",
                 f"copy-first-symbol: acc. at L={r0['length']} within {r0['acc_steps']} steps vs speed\n"
                 f"(marker area ~ peak memory at L={Lmax})", chance=1 / r0["vocab"])
    ax = axes[1]
    for v in a.variants:
        ok = sorted((L, r["tokens_per_s"]) for L, r in _speed_rows(seq, v).items() if "tokens_per_s" in r)
        if ok:
            ax.plot(*zip(*ok), marker="o", label=v, color=color[v])
    ax.set(xscale="log", yscale="log", xlabel="sequence length L", ylabel="training tokens / s",
           title="throughput vs length (same tokens per step)")
    if a.lengths:
        ax.set_xticks(a.lengths, [str(L) for L in a.lengths])
        ax.minorticks_off()
    if ax.get_legend_handles_labels()[0]:  # no sequence rows (e.g. a graphs-only run): no legend
        ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax = axes[2]
    for v, r in train.items():
        if r.get("curve"):
            ax.plot(*zip(*([(0, 1 / r["vocab"])] + r["curve"])), label=v, color=color[v], lw=1.2)
    ax.set(xlabel="training step", ylabel="held-out accuracy", title="accuracy vs training steps (one seed)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def _graph_panel(ax, g, rs, color):
    """One graph's panel: accuracy (or ROC-AUC) against training speed, marker area ~ peak memory."""
    n = rs[0] if rs else {}
    if rs and rs[0]["kind"] == "large" and all("accuracy" in r for r in rs):
        _scatter(ax, [(r["variant"], r["nodes_per_s"], r["accuracy"], _mb(r)) for r in rs], color,
                 "training nodes / s (mini-batch)",
                 f"{g} ({n['nodes']} nodes, {n['edges']} edges): test accuracy vs speed\n"
                 f"mini-batches of ~{n.get('batch_nodes')} nodes, {n.get('epochs')} epoch(s) "
                 "(marker area ~ peak memory)", chance=n.get("majority_acc"), ylabel="test accuracy",
                 chance_label="majority class")
        return
    if rs and rs[0]["kind"] == "large":  # no accuracy: throughput bars, memory in the label
        ax.barh([r["variant"] for r in rs], [r["nodes_per_s"] for r in rs],
                color=[color[r["variant"]] for r in rs])
        for i, r in enumerate(rs):
            ax.annotate(f" {_mb(r) or 0:.0f} MB", (r["nodes_per_s"], i), va="center", fontsize=7)
        ax.set(xlabel="training nodes / s (mini-batch)", title=f"{g}: {n.get('nodes')} nodes, "
               f"{n.get('edges')} edges\nmini-batches of ~{n.get('batch_nodes')} nodes "
               "(no accuracy measured)")
        ax.grid(alpha=0.3)
        return
    metric = "auc" if all("auc" in r for r in rs) else "accuracy"  # binary, imbalanced: AUC
    pts = [(r["variant"], r["nodes_per_s"], r[metric], _mb(r)) for r in rs]
    label = "test ROC-AUC" if metric == "auc" else "test accuracy"
    _scatter(ax, pts, color, "training nodes / s (full batch)",
             f"{g} ({n.get('nodes', '?')} nodes, {n.get('edges', '?')} edges): {label} vs speed\n"
             "(marker area ~ peak memory)", ylabel=label)


#: the file-name suffixes of the three sequence panels written on their own
SEQ_PANELS = ("sequence-accuracy", "sequence-throughput", "sequence-curves")


def plot(seq, graph, a, path, names):
    """All panels in one picture at ``path``, and each panel on its own beside it
    (``<stem>-sequence-accuracy.png``, ..., ``<stem>-<graph>.png``: readable at page width);
    returns the paths of the single panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = sorted({r["graph"] for r in graph})
    rows = {g: [r for r in graph if r["graph"] == g and "nodes_per_s" in r] for g in graphs}
    cols = max(3, len(graphs))
    fig, axes = plt.subplots(2, cols, figsize=(6.5 * cols, 12), squeeze=False)
    cmap = plt.get_cmap("tab20")
    color = {v: cmap(i % 20) for i, v in enumerate(names)}
    _seq_panels(axes[0], seq, a, color)
    for ax, g in zip(axes[1], graphs):
        _graph_panel(ax, g, rows[g], color)
    for ax in list(axes[0][3:]) + list(axes[1][len(graphs):]):
        ax.axis("off")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    singles = [plt.subplots(figsize=(9, 6.5)) for _ in SEQ_PANELS]
    _seq_panels([ax for _, ax in singles], seq, a, color)
    named = list(zip(SEQ_PANELS, singles))
    for g in graphs:
        one = plt.subplots(figsize=(9, 6.5))
        _graph_panel(one[1], g, rows[g], color)
        named.append((g, one))
    written = []
    for suffix, (f, _) in named:
        f.tight_layout()
        written.append(path.with_name(f"{path.stem}-{suffix}.png"))
        f.savefig(written[-1], dpi=110)
        plt.close(f)
    return written

"""Tables, plot and result merging of ``benchmarks/variants.py`` (the variant names are
passed in, in the script's order)."""
from __future__ import annotations

import json
from pathlib import Path

import _harness as H

__all__ = ["merge_results", "tables", "plot"]


def merge_results(seq, graph, a, seq_names, graph_names):
    """Earlier runs' cases (``--merge``) overridden by this run's; tables cover them all."""
    key = lambda r: (r["kind"], r.get("graph"), r["variant"], r.get("length"))  # noqa: E731
    merged = {}
    for f in a.merge:
        old = json.loads(Path(f).read_text())
        for r in old["sequence"] + old["graph"]:
            merged[key(r)] = r
        a.lengths = sorted(set(a.lengths) | set(old["args"]["lengths"]))
    for r in seq + graph:
        merged[key(r)] = r
    rows = list(merged.values())
    a.variants = [v for v in seq_names if any(r["kind"] == "seq" and r["variant"] == v for r in rows)]
    order = {v: i for i, v in enumerate(graph_names)}
    graph = sorted((r for r in rows if r["kind"] == "graph"), key=lambda r: (r["graph"], order[r["variant"]]))
    return [r for r in rows if r["kind"] == "seq"], graph


def _mb(r):
    return r.get("peak_delta_mb") if "error" not in r else None


def tables(seq, graph, a):
    lines = []
    if seq:
        acc = {r["variant"]: r for r in seq if r.get("train")}
        lines += [f"### Copy-the-first-symbol, accuracy at L={a.acc_length} after {a.acc_steps} steps of "
                  f"{a.tokens} tokens (chance {1 / a.vocab:.3f}); {a.threads} thread(s)", ""]
        head = ["variant", "edges/seq", "acc."] + [f"k tok/s L={L}" for L in a.lengths] + \
               [f"MB L={L}" for L in a.lengths]
        rows = []
        for v in a.variants:
            by_len = {r["length"]: r for r in seq if r["variant"] == v}
            r0 = acc.get(v, {})
            rows.append([v, r0.get("edges_per_seq", "n/a"), H.fmt(r0.get("accuracy"))]
                        + [H.fmt(by_len[L]["tokens_per_s"] / 1e3) if "tokens_per_s" in by_len.get(L, {}) else "n/a"
                           for L in a.lengths]
                        + [H.fmt(_mb(by_len.get(L, {"error": 1}))) for L in a.lengths])
        lines += [H.markdown_table(head, rows, [False] + [True] * (len(head) - 1)), ""]
    for g in sorted({r["graph"] for r in graph}):
        rs = [r for r in graph if r["graph"] == g]
        n = next((r for r in rs if "nodes" in r), {})
        lines += [f"### {g}: {n.get('nodes', '?')} nodes, {n.get('edges', '?')} directed edges, full batch, "
                  f"{a.graph_epochs} epochs (test acc. at best val. epoch)", ""]
        rows = [[r["variant"], H.fmt(r.get("accuracy")),
                 H.fmt(r["nodes_per_s"] / 1e3 if "nodes_per_s" in r else None),
                 H.fmt(r.get("step_s")), H.fmt(_mb(r)), r.get("error", "")[:60]] for r in rs]
        lines += [H.markdown_table(["variant", "test acc.", "k nodes/s", "s/step", "peak MB", "note"], rows,
                                   [False, True, True, True, True, False]), ""]
    return "\n".join(lines)


def plot(seq, graph, a, path, names):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = sorted({r["graph"] for r in graph})
    fig, axes = plt.subplots(1, 2 + len(graphs), figsize=(6.5 * (2 + len(graphs)), 6))
    cmap = plt.get_cmap("tab20")
    color = {v: cmap(i % 20) for i, v in enumerate(names)}

    def scatter(ax, pts, xlabel, title, chance=None):
        mem = [m for *_, m in pts if m]
        top = max(mem) if mem else 1.0
        for i, (name, x, y, m) in enumerate(sorted(pts, key=lambda p: (round(p[2], 2), p[1]))):
            ax.scatter([x], [y], s=40 + 1500 * (m or 0) / top, alpha=0.6, color=color[name.split(" (L=")[0]],
                       label=name)
            ax.annotate(name, (x, y), fontsize=7, xytext=(5, -12 + 9 * (i % 4)), textcoords="offset points")
        ax.set_xscale("log")
        if chance is not None:
            ax.axhline(chance, ls="--", lw=0.8, color="gray")
            ax.annotate("chance", (0.01, chance), xycoords=("axes fraction", "data"), va="bottom",
                        fontsize=7, color="gray")
        ax.set(xlabel=xlabel, ylabel="accuracy", title=title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, markerscale=0.3, loc="best")

    Lmax = max(a.lengths) if a.lengths else None
    pts = []
    for v in a.variants:
        acc = next((r.get("accuracy") for r in seq if r["variant"] == v and r.get("train")), None)
        ok = [r for r in seq if r["variant"] == v and "tokens_per_s" in r and r["length"] in a.lengths]
        if acc is None or not ok:
            continue
        r = max(ok, key=lambda r: r["length"])
        pts.append((v + ("" if r["length"] == Lmax else f" (L={r['length']})"), r["tokens_per_s"], acc, _mb(r)))
    if pts:
        scatter(axes[0], pts, f"training tokens / s at L={Lmax}",
                f"copy-first-symbol: acc. at L={a.acc_length} after {a.acc_steps} steps vs speed\n"
                f"(marker area ~ peak memory at L={Lmax})", chance=1 / a.vocab)
    ax = axes[1]
    for v in a.variants:
        ok = sorted((r["length"], r["tokens_per_s"]) for r in seq if r["variant"] == v and "tokens_per_s" in r)
        if ok:
            ax.plot(*zip(*ok), marker="o", label=v, color=color[v])
    ax.set(xscale="log", yscale="log", xlabel="sequence length L", ylabel="training tokens / s",
           title="throughput vs length (same tokens per step)")
    if a.lengths:
        ax.set_xticks(a.lengths, [str(L) for L in a.lengths])
        ax.minorticks_off()
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    for ax, g in zip(axes[2:], graphs):
        rs = [r for r in graph if r["graph"] == g and "nodes_per_s" in r]
        pts = [(r["variant"], r["nodes_per_s"], r["accuracy"], _mb(r)) for r in rs]
        n = rs[0] if rs else {}
        scatter(ax, pts, "training nodes / s (full batch)",
                f"{g} ({n.get('nodes', '?')} nodes, {n.get('edges', '?')} edges): test acc. vs speed\n"
                "(marker area ~ peak memory)")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

"""Cases, ratios, bandwidth floors and tables of ``benchmarks/attention.py`` (stdlib only:
the driver process never imports torch)."""
from __future__ import annotations

import math

import _harness as H
from _inputs import molecule_like_edges

__all__ = ["IN_CHANNELS", "OUT_CHANNELS", "HEADS", "DTYPE_BYTES", "REF_TC", "REF_GAT", "CASES", "ROWS",
           "case_size", "case_label", "estimated_peak_bytes", "floor_row", "add_ratios", "row_ratios", "render"]

IN_CHANNELS, OUT_CHANNELS, HEADS, DTYPE_BYTES = 128, 32, 4, 4
REF_TC, REF_GAT = "TransformerConv", "GATConv"

# Cases: name -> spec. "group" decides when a case runs (default / --large / --quick).
CASES = {
    "random-10k": {"kind": "random", "N": 10_000, "E": 200_000, "group": "default"},
    "random-100k": {"kind": "random", "N": 100_000, "E": 2_000_000, "group": "default"},
    "random-200k": {"kind": "random", "N": 200_000, "E": 5_000_000, "group": "large"},
    "molecules-128": {"kind": "molecules", "graphs": 128, "group": "default"},
    # bipartite (x_src, x_dst), e.g. users -> items: every layer in PyG's bipartite mode
    "bipartite-100k": {"kind": "bipartite", "N_src": 100_000, "N_dst": 50_000, "E": 1_000_000,
                       "group": "default"},
    "bipartite-2k": {"kind": "bipartite", "N_src": 2_000, "N_dst": 1_000, "E": 20_000, "group": "quick"},
    "random-2k": {"kind": "random", "N": 2_000, "E": 40_000, "group": "quick"},
    "molecules-16": {"kind": "molecules", "graphs": 16, "group": "quick"},
}
# Rows: layer name -> how to build it (see attention.build_layer).
# "compile": run torch.compile(layer, fullgraph=True) (only with --compile).
# "autocast": run the layer under torch.autocast(device, that dtype) (only with --bf16): bfloat16
# projections, and the kernel in bfloat16 (float32 accumulation).
ROWS = {
    "ours (auto)": {"layer": "ours", "impl": "auto"},
    "ours (compiled)": {"layer": "ours", "impl": "auto", "compile": True},
    "ours (chunked)": {"layer": "ours", "impl": "chunked"},
    "ours (bf16)": {"layer": "ours", "impl": "auto", "autocast": "bfloat16"},
    REF_TC: {"layer": "TransformerConv"},
    REF_GAT: {"layer": "GATConv"},
}
# Rough peak-RSS model for the memory cap, bytes per edge in units of one (H*C) float row:
# PyG keeps ~5 (TransformerConv) / ~3.3 (GATConv) per-edge (E, H, C) tensors alive (fitted
# to N=100k/E=2M: 6.4 / 4.5 GB). A case that outgrows the estimate is killed at the cap.
_EDGE_ROWS = {"TransformerConv": 5.5, "GATConv": 3.5, "ours": 0.0}


def case_size(case: dict):
    """``(N, E)``; N counts both sides of a bipartite case."""
    if case["kind"] == "random":
        return case["N"], case["E"]
    if case["kind"] == "bipartite":
        return case["N_src"] + case["N_dst"], case["E"]
    n, src, _ = molecule_like_edges(case["graphs"], seed=0)
    return n, len(src)


def case_label(name: str, case: dict) -> str:
    n, e = case_size(case)
    short = lambda v: f"{v / 1e6:g}M" if v >= 1e6 else (f"{v / 1e3:.3g}k" if v >= 1e3 else str(v))  # noqa: E731
    if case["kind"] == "molecules":
        return f"{case['graphs']} molecules (N={short(n)}, E={short(e)})"
    if case["kind"] == "bipartite":
        return f"bipartite {short(case['N_src'])} -> {short(case['N_dst'])}, E={short(e)}"
    return f"random N={short(n)}, E={short(e)}"


def estimated_peak_bytes(case: dict, layer: str) -> int:
    N, E = case_size(case)
    return (E * _EDGE_ROWS[layer] * HEADS * OUT_CHANNELS * DTYPE_BYTES
            + E * 96 + N * (IN_CHANNELS + 12 * HEADS * OUT_CHANNELS) * DTYPE_BYTES + 600 * 2**20)


def floor_row(name: str, case: dict, bw: dict, results: list) -> dict:
    """Bytes one layer must move, and the time they take at the measured bandwidths."""
    N, E = case_size(case)
    row_b = HEADS * OUT_CHANNELS * DTYPE_BYTES
    fwd_bytes = (3 * E + N) * row_b   # q_i, k_j, v_j per edge + one output row per node
    bwd_bytes = (4 * E + 3 * N) * row_b  # q_i, k_j, v_j, dout_i per edge + dq, dk, dv per node
    gather = bw.get("gather_GBps", {}).get(name, math.nan) * 1e9
    copy = bw.get("copy_GBps", math.nan) * 1e9
    ours = [r for r in results if r["case_name"] == name and r["layer"] == "ours" and "time_s" in r
            and not ROWS[r["row"]].get("autocast")]  # the floor's bytes are float32
    best = min(ours, key=lambda r: r["time_s"], default=None)
    # On a GPU the index_select gather probe is slower than our kernel's gathers, so it is no
    # floor there: the gaps are taken against the per-edge bytes at copy speed (a reference a
    # kernel can beat when part of the k/v tables stays in L2).
    basis = "copy" if bw.get("device") == "cuda" else "gather"
    ref_bw = copy if basis == "copy" else gather
    rec = {"case_name": name, "N": N, "E": E, "fwd_bytes": fwd_bytes, "bwd_bytes": bwd_bytes,
           "fwd_floor_copy_s": fwd_bytes / copy, "fwd_floor_gather_s": fwd_bytes / gather,
           "total_floor_gather_s": (fwd_bytes + bwd_bytes) / gather, "floor_basis": basis,
           "fwd_floor_s": fwd_bytes / ref_bw, "total_floor_s": (fwd_bytes + bwd_bytes) / ref_bw}
    if best is not None:
        rec.update(best_ours=best["row"], ours_fwd_s=best["fwd_s"], ours_time_s=best["time_s"],
                   gap_fwd=best["fwd_s"] / rec["fwd_floor_s"],
                   gap_total=best["time_s"] / rec["total_floor_s"])
    return rec


def add_ratios(results: list) -> None:
    by_case = {}
    for r in results:
        by_case.setdefault(r["case_name"], {})[r["row"]] = r
    for r in results:
        for ref, key in ((REF_TC, "tc"), (REF_GAT, "gat")):
            ref_r = by_case[r["case_name"]].get(ref, {})
            ok = "time_s" in r and "time_s" in ref_r
            r[f"speedup_vs_{key}"] = ref_r["time_s"] / r["time_s"] if ok else None
            ok = ok and ref_r["peak_delta_mb"] > 0
            r[f"mem_vs_{key}"] = r["peak_delta_mb"] / ref_r["peak_delta_mb"] if ok else None


def row_ratios(results: list, row: str, key: str = "time_s") -> list:
    """``(case label, row's value / the value of "ours (auto)")`` of ``key`` (``"time_s"``: fwd+bwd,
    ``"fwd_s"``) for every case with both rows measured."""
    by_case = {}
    for r in results:
        if "time_s" in r:
            by_case.setdefault(r["case_name"], {})[r["row"]] = r
    return [(rows[row]["label_case"], rows[row][key] / rows["ours (auto)"][key])
            for rows in by_case.values() if row in rows and "ours (auto)" in rows]


def render(results: list, floors: list, bw: dict, memory_label: str = "peak ΔRSS (MB)") -> str:
    x = lambda v: "n/a" if v is None else f"{v:.2f}×"  # noqa: E731
    rows = []
    for r in results:
        if "time_s" not in r:
            rows.append([r["label_case"], r["row"], r.get("backend", "—"), "—", "—", "—", "—",
                         "—", "—", "—", "—"])
            continue
        spread = (r["time_q3_s"] - r["time_q1_s"]) / r["time_s"] * 100
        rows.append([r["label_case"], r["row"], r["backend"], H.fmt(r["time_s"]), f"{spread:.0f}%",
                     H.fmt(r["fwd_s"]), f"{r['peak_delta_mb']:.0f}", x(r["speedup_vs_tc"]),
                     H.fmt(r["mem_vs_tc"]), x(r["speedup_vs_gat"]), H.fmt(r["mem_vs_gat"])])
    head = ["case", "layer", "backend", "fwd+bwd (s)", "IQR/med", "fwd (s)", memory_label,
            "speed-up vs TC", "mem / TC", "speed-up vs GAT", "mem / GAT"]
    text = [H.markdown_table(head, rows, right=[False] * 3 + [True] * 8)]
    notes = [f"- {r['label_case']} / {r['row']}: {r['error']}" for r in results if "error" in r]
    if notes:
        text += ["", "Not measured:"] + notes
    compiled = row_ratios(results, "ours (compiled)")
    if compiled:
        text += ["", "torch.compile(layer, fullgraph=True) vs the same layer in eager mode (fwd+bwd time):"]
        text += [f"- {label}: {ratio:.2f}× the eager time" for label, ratio in compiled]
    half = row_ratios(results, "ours (bf16)")
    if half:
        fwd = dict(row_ratios(results, "ours (bf16)", "fwd_s"))
        text += ["", "The layer under torch.autocast(bfloat16) (bf16 projections and kernel) vs float32:"]
        text += [f"- {label}: {ratio:.2f}× the float32 fwd+bwd time ({fwd[label]:.2f}× fwd)" for label, ratio in half]
    frows = [[f["label_case"], f"{f['fwd_bytes'] / 1e9:.3g}", f"{bw['gather_GBps'][f['case_name']]:.3g}",
              H.fmt(f["fwd_floor_copy_s"]), H.fmt(f["fwd_floor_gather_s"]), H.fmt(f.get("ours_fwd_s")),
              x(f.get("gap_fwd")), H.fmt(f["total_floor_s"]), H.fmt(f.get("ours_time_s")),
              x(f.get("gap_total"))] for f in floors] if bw.get("gather_GBps") else []
    if frows:
        basis = floors[0]["floor_basis"]
        note = (" On CUDA the gaps are against the per-edge bytes at copy speed, a reference rather "
                "than a floor: the index_select probe gathers slower than our kernel, and L2 hits "
                "can beat it." if basis == "copy" else "")
        text += ["", f"Bandwidth floor (copy {bw['copy_GBps']:.1f} GB/s read+write; random gather of "
                 f"{bw['row_bytes']}-byte rows per case below). Fwd bytes = (3E + N)·H·C·4; "
                 "bwd bytes ≈ (4E + 3N)·H·C·4; 'ours' = the faster of our rows." + note, "",
                 H.markdown_table(["case", "fwd GB", "gather GB/s", "fwd floor @copy (s)",
                                   "fwd floor @gather (s)", "ours fwd (s)", f"gap (@{basis})",
                                   f"fwd+bwd floor @{basis} (s)", "ours fwd+bwd (s)", f"gap (@{basis})"],
                                  frows, right=[False] + [True] * 9)]
    return "\n".join(text)

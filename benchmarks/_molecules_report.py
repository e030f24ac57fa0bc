"""Tables of ``benchmarks/molecules.py``: per data set and model, mean ± std over seeds of the
test ROC-AUC / PR-AUC and validation ROC-AUC, epochs and wall time, and the suite mean per model.
Standard library only (the records are plain JSON)."""
from __future__ import annotations

import statistics
from typing import Dict, List, Optional, Sequence, Tuple

import _harness as H

__all__ = ["METRICS", "table_rows", "suite_rows", "render"]

#: (column stem, split, metric) of the table
METRICS = (("test_roc_auc", "test", "roc_auc"), ("test_pr_auc", "test", "pr_auc"), ("val_roc_auc", "val", "roc_auc"))


def _mean_std(values: Sequence[Optional[float]]) -> Tuple[Optional[float], Optional[float]]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def _metric(rec: Dict, split: str, metric: str) -> Optional[float]:
    return (rec.get(split) or {}).get(metric)


def table_rows(records: List[Dict], datasets: Sequence[str], models: Sequence[str]) -> List[Dict]:
    """One row per (data set, model) that has results, in the order asked for."""
    rows = []
    for ds in datasets:
        for model in models:
            sel = sorted((r for r in records if r["dataset"] == ds and r["model"] == model), key=lambda r: r["seed"])
            if not sel:
                continue
            row = {"dataset": ds, "model": model, "seeds": len(sel), "seed_list": " ".join(str(r["seed"]) for r in sel)}
            for stem, split, metric in METRICS:
                row[f"{stem}_mean"], row[f"{stem}_std"] = _mean_std([_metric(r, split, metric) for r in sel])
            row["epochs_mean"] = statistics.fmean(r["epochs_run"] for r in sel)
            row["seconds_mean"] = statistics.fmean(r["seconds"] for r in sel)
            row["seconds_total"] = sum(r["seconds"] for r in sel)
            rows.append(row)
    return rows


def suite_rows(records: List[Dict], datasets: Sequence[str], models: Sequence[str], seeds: Sequence[int]) -> List[Dict]:
    """Per model: the mean over data sets of each data set's mean over seeds (``complete`` when
    every data set has every seed; n/a when a metric is undefined on one of them); the std is
    over seeds of the per-seed suite means (only the seeds every data set has)."""
    out = []
    for model in models:
        by = {(r["dataset"], r["seed"]): r for r in records if r["model"] == model}
        have = [d for d in datasets if any((d, s) in by for s in seeds)]
        if not have:
            continue
        row = {"dataset": "suite mean", "model": model, "datasets": f"{len(have)}/{len(datasets)}",
               "complete": all((d, s) in by for d in datasets for s in seeds)}
        full_seeds = [s for s in seeds if all((d, s) in by for d in have)]
        for stem, split, metric in METRICS:
            per_ds = [_mean_std([_metric(by[(d, s)], split, metric) for s in seeds if (d, s) in by])[0] for d in have]
            row[f"{stem}_mean"] = None if None in per_ds else statistics.fmean(per_ds)  # n/a on a set: no mean
            per_seed = []
            for s in full_seeds:
                vals = [_metric(by[(d, s)], split, metric) for d in have]
                if all(v is not None for v in vals):
                    per_seed.append(statistics.fmean(vals))
            row[f"{stem}_std"] = statistics.stdev(per_seed) if len(per_seed) > 1 else None
        row["seconds_total"] = sum(r["seconds"] for r in by.values() if r["dataset"] in have)
        out.append(row)
    return out


def _pm(row: Dict, stem: str) -> str:
    m, s = row.get(f"{stem}_mean"), row.get(f"{stem}_std")
    if m is None:
        return "n/a"
    return f"{m:.4f}" + (f" ± {s:.4f}" if s is not None else "")


def render(rows: List[Dict], suite: List[Dict]) -> str:
    """The markdown table: the data set rows, then one suite-mean row per model."""
    headers = ["dataset", "model", "seeds", "test ROC-AUC", "test PR-AUC", "val ROC-AUC", "epochs", "s / run"]
    cells = [[r["dataset"], r["model"], r["seeds"], _pm(r, "test_roc_auc"), _pm(r, "test_pr_auc"),
              _pm(r, "val_roc_auc"), f"{r['epochs_mean']:.1f}", H.fmt(r["seconds_mean"])] for r in rows]
    cells += [[r["dataset"], r["model"], f"{r['datasets']} sets" + ("" if r["complete"] else " (partial)"),
               _pm(r, "test_roc_auc"), _pm(r, "test_pr_auc"), _pm(r, "val_roc_auc"), "", ""] for r in suite]
    return H.markdown_table(headers, cells, right=[False, False, True, True, True, True, True, True])

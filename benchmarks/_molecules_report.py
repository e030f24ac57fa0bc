"""Tables of ``benchmarks/molecules.py``: per data set and model, mean ± std over seeds of the
test ROC-AUC / PR-AUC and validation ROC-AUC (classification sets) or of the test RMSE / MAE / R² and
validation RMSE (regression sets, in each set's own units), epochs, parameters and wall time; the
suite mean per model over the classification sets, and over the regression sets the mean rank by
test RMSE (a mean RMSE across sets of different units would mean nothing).
Standard library only (the records are plain JSON)."""
from __future__ import annotations

import statistics
from typing import Dict, List, Optional, Sequence, Tuple

import _harness as H

__all__ = ["METRICS", "REGRESSION_METRICS", "table_rows", "suite_rows", "rank_rows", "render", "render_regression"]

#: (column stem, split, metric) of the classification table
METRICS = (("test_roc_auc", "test", "roc_auc"), ("test_pr_auc", "test", "pr_auc"), ("val_roc_auc", "val", "roc_auc"))
#: (column stem, split, metric) of the regression table
REGRESSION_METRICS = (("test_rmse", "test", "rmse"), ("test_mae", "test", "mae"), ("test_r2", "test", "r2"),
                      ("val_rmse", "val", "rmse"))


def _mean_std(values: Sequence[Optional[float]]) -> Tuple[Optional[float], Optional[float]]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def _metric(rec: Dict, split: str, metric: str) -> Optional[float]:
    return (rec.get(split) or {}).get(metric)


def table_rows(records: List[Dict], datasets: Sequence[str], models: Sequence[str],
               metrics: Sequence[Tuple[str, str, str]] = METRICS) -> List[Dict]:
    """One row per (data set, model) that has results, in the order asked for, with ``metrics``."""
    rows = []
    for ds in datasets:
        for model in models:
            sel = sorted((r for r in records if r["dataset"] == ds and r["model"] == model), key=lambda r: r["seed"])
            if not sel:
                continue
            row = {"dataset": ds, "model": model, "seeds": len(sel), "seed_list": " ".join(str(r["seed"]) for r in sel)}
            for stem, split, metric in metrics:
                row[f"{stem}_mean"], row[f"{stem}_std"] = _mean_std([_metric(r, split, metric) for r in sel])
            row["parameters"] = _mean_std([r.get("num_parameters") for r in sel])[0]
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


def rank_rows(rows: List[Dict], models: Sequence[str], datasets: Sequence[str]) -> List[Dict]:
    """Per model: its mean rank by mean test RMSE over the regression ``datasets`` (1 = lowest RMSE of
    the models with results on that set; ties share the better rank) and how often it ranks first."""
    ranks: Dict[str, List[int]] = {m: [] for m in models}
    for ds in datasets:
        have = {r["model"]: r["test_rmse_mean"] for r in rows if r["dataset"] == ds and r["test_rmse_mean"] is not None}
        for m, v in have.items():
            ranks[m].append(1 + sum(w < v for w in have.values()))
    return [{"dataset": "mean rank (test RMSE)", "model": m, "datasets": f"{len(r)}/{len(datasets)}",
             "rank_mean": statistics.fmean(r), "wins": sum(x == 1 for x in r)} for m, r in ranks.items() if r]


def _pm(row: Dict, stem: str, digits: int = 4) -> str:
    m, s = row.get(f"{stem}_mean"), row.get(f"{stem}_std")
    if m is None:
        return "n/a"
    return f"{m:.{digits}f}" + (f" ± {s:.{digits}f}" if s is not None else "")


def _params(n: Optional[float]) -> str:
    return "n/a" if n is None else f"{n / 1e3:.0f}k"


def render(rows: List[Dict], suite: List[Dict]) -> str:
    """The markdown table: the data set rows, then one suite-mean row per model."""
    headers = ["dataset", "model", "seeds", "test ROC-AUC", "test PR-AUC", "val ROC-AUC", "epochs", "s / run"]
    cells = [[r["dataset"], r["model"], r["seeds"], _pm(r, "test_roc_auc"), _pm(r, "test_pr_auc"),
              _pm(r, "val_roc_auc"), f"{r['epochs_mean']:.1f}", H.fmt(r["seconds_mean"])] for r in rows]
    cells += [[r["dataset"], r["model"], f"{r['datasets']} sets" + ("" if r["complete"] else " (partial)"),
               _pm(r, "test_roc_auc"), _pm(r, "test_pr_auc"), _pm(r, "val_roc_auc"), "", ""] for r in suite]
    return H.markdown_table(headers, cells, right=[False, False, True, True, True, True, True, True])


def render_regression(rows: List[Dict], ranks: List[Dict]) -> str:
    """The markdown table of the regression sets (each in its own units), then each model's mean rank."""
    headers = ["dataset", "model", "seeds", "test RMSE", "test MAE", "test R²", "val RMSE", "epochs", "params",
               "s / run"]
    cells = [[r["dataset"], r["model"], r["seeds"], _pm(r, "test_rmse", 3), _pm(r, "test_mae", 3), _pm(r, "test_r2", 3),
              _pm(r, "val_rmse", 3), f"{r['epochs_mean']:.1f}", _params(r["parameters"]), H.fmt(r["seconds_mean"])]
             for r in rows]
    cells += [[r["dataset"], r["model"], f"{r['datasets']} sets", f"rank {r['rank_mean']:.2f}", f"first on {r['wins']}",
               "", "", "", "", ""] for r in ranks]
    return H.markdown_table(headers, cells, right=[False, False] + [True] * 8)

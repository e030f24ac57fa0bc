"""What ``graphattn train`` says about a molecule run: the result line, and the hint for a CSV of numeric
targets trained as classification."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from graphattn.data.labels import infer_tasks
from graphattn.data.smiles_table import find_column, read_csv_table

__all__ = ["print_result", "regression_hint"]


def _fmt(v) -> str:
    return "n/a" if v is None or v != v else f"{v:.4f}"


def print_result(args, name: str, res: Dict[str, Any], ensemble: int, skipped, out: Path) -> None:
    """The closing lines of a molecule run: best epoch, the validation and test metrics (ROC-AUC /
    PR-AUC, or MAE / RMSE / R² in the targets' units), speed, skipped rows and the files written."""
    val, test = res.get("val") or {}, res.get("test") or {}
    best = (f"best epoch {res['best_epoch']}/{res['epochs_run']}" if ensemble == 1 else
            f"ensemble of {ensemble} (best epochs {res['best_epoch']})")
    split = (f"split column {res['meta']['data'].get('split_col')!r}" if _split_of(res) == "column"
             else f"{_split_of(res)} split")
    if res["meta"].get("task_type") == "regression":
        scores = (f"val MAE {_fmt(val.get('mae'))} | test MAE {_fmt(test.get('mae'))} | "
                  f"test RMSE {_fmt(test.get('rmse'))} | test R² {_fmt(test.get('r2'))}")
    else:
        scores = (f"val ROC-AUC {_fmt(val.get('roc_auc'))} | test ROC-AUC {_fmt(test.get('roc_auc'))} | "
                  f"test PR-AUC {_fmt(test.get('pr_auc'))}")
    print(f"{name} ({split}, seed {args.seed}): {best} | {scores} | {res['seconds_per_epoch']:.1f} s/epoch")
    if skipped:
        print(f"Skipped {len(skipped)} invalid SMILES (file rows {', '.join(str(s['row']) for s in skipped)})")
    print(f"Wrote {out / 'metrics.json'} and {out / 'best.pt'}")


def _split_of(res: Dict[str, Any]) -> str:
    """The split a run's result records (``"column"`` for a split column)."""
    return str((res["meta"].get("data") or {}).get("split"))


def regression_hint(csv: Optional[str], smiles_col: str) -> str:
    """For a CSV without 0/1 columns: ``"; its numeric column(s) [...] ... --task-type regression"`` when
    it has numeric ones, else ``""``."""
    if csv is None:
        return ""
    try:
        header, rows = read_csv_table(csv)
        numeric, _ = infer_tasks(header, rows, find_column(header, smiles_col, csv), binary=False)
    except (ValueError, OSError):
        return ""
    if not numeric:
        return ""
    names = [header[j] for j in numeric]
    return (f"; its numeric column(s) {names[:10]}{' ...' if len(names) > 10 else ''} look like regression "
            "targets: pass --task-type regression")

"""chemprop 2.x as a baseline of ``benchmarks/molecules.py``: its own CLI in a subprocess, on our split.

The molecules of our loaded dataset (the SMILES RDKit parsed, with our labels) are written to one
CSV with a ``split`` column (``train``/``val``/``test`` from our indices) and trained with
``chemprop train --splits-column split -t classification|regression`` at chemprop's defaults
(``--epochs`` only when the benchmark sets one; for regression chemprop standardises the targets on
its training rows itself and predicts in their units). Tasks are renamed ``t0, t1, ...`` in that
file, so any task name passes the command line unchanged. The test predictions are chemprop's own
``test_predictions.csv``; the validation predictions come from ``chemprop predict`` with the saved
``best.pt``. Both are scored by :func:`graphattn.tasks.molecules.outputs.output_metrics`
(ROC-AUC / PR-AUC, or MAE / RMSE / R²), as every other model is.

While chemprop trains, its Lightning ``metrics.csv`` is read every few seconds and each finished
epoch is printed as one line; chemprop's own output goes to ``chemprop.log`` in the work folder.
The validation ROC-AUC (regression: MSE of the standardised targets) on those lines is chemprop's own,
computed over all tasks' labels pooled together; the table's is the mean of the per-task values (tasks with both classes), as for every model.
"""
from __future__ import annotations

import csv
import math
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import torch

from graphattn.tasks.molecules.outputs import output_metrics

__all__ = ["DESCRIPTORS", "find_chemprop", "run_chemprop"]

#: chemprop's RDKit 2-D descriptors (its v1 ``rdkit_2d_normalized``), for ``--chemprop-descriptors``
DESCRIPTORS = "v1_rdkit_2d_normalized"
_POLL_S = 3.0
_QUIET_S = 120.0  # a line at least this often while an epoch runs


def find_chemprop(path: Optional[str]) -> Optional[str]:
    """The chemprop executable: ``path`` when given (None if it is not an executable file),
    else ``chemprop`` on ``$PATH`` (None when absent)."""
    if path:
        p = Path(path).expanduser()
        return str(p) if p.is_file() and os.access(p, os.X_OK) else None
    return shutil.which("chemprop")


def _label(v: float, task_type: str) -> object:
    """One CSV cell: empty when missing, 0/1 for classification, the exact value for regression."""
    if math.isnan(v):
        return ""
    return repr(v) if task_type == "regression" else int(v)


def _write_inputs(work: Path, smiles: Sequence[str], y: torch.Tensor, split_idx, task_type: str) -> List[Path]:
    """``data.csv`` (smiles, t0.., split) and ``val.csv`` (the validation SMILES) in ``work``."""
    part = [""] * len(smiles)
    for name, idx in zip(("train", "val", "test"), split_idx):
        for i in idx.tolist():
            part[i] = name
    tasks = [f"t{j}" for j in range(y.size(1))]
    data, val = work / "data.csv", work / "val.csv"
    with open(data, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["smiles", *tasks, "split"])
        for s, row, p in zip(smiles, y.tolist(), part):
            if p:
                w.writerow([s, *(_label(v, task_type) for v in row), p])
    with open(val, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["smiles"])
        w.writerows([smiles[i]] for i in split_idx[1].tolist())
    return [data, val]


def _train_argv(exe: str, data: Path, out: Path, num_tasks: int, seed: int, epochs: Optional[int],
                descriptors: bool, task_type: str = "classification") -> List[str]:
    argv = [exe, "train", "-i", str(data), "-s", "smiles", "--target-columns", *(f"t{j}" for j in range(num_tasks)),
            "--splits-column", "split", "-t", task_type, "--pytorch-seed", str(seed), "-o", str(out)]
    if epochs is not None:  # chemprop refuses warm-up epochs >= epochs (default warm-up: 2)
        argv += ["--epochs", str(epochs), "--warmup-epochs", str(min(2, epochs - 1))]
    if descriptors:
        argv += ["--molecule-featurizers", DESCRIPTORS]
    return argv


def _epochs_logged(metrics_csv: Path) -> List[Dict[str, float]]:
    """The validation rows of Lightning's ``metrics.csv`` (one per finished epoch)."""
    if not metrics_csv.is_file():
        return []
    rows = []
    with open(metrics_csv, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("val_loss"):
                rows.append({k: float(v) for k, v in r.items() if v not in ("", None)})
    return rows


def _run_logged(argv: List[str], work: Path, env: Dict[str, str], log: Callable[[str], None],
                watch: Optional[Path] = None) -> float:
    """Run ``argv`` with its output in ``work/chemprop.log``; print each epoch ``watch`` (a
    ``metrics.csv``) gains. Returns the wall time; ``RuntimeError`` with the log's end on failure."""
    t0 = last_line = time.perf_counter()
    shown = 0
    with open(work / "chemprop.log", "a") as out:
        out.write("$ " + " ".join(argv) + "\n")
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work)
        while True:
            try:
                proc.wait(timeout=_POLL_S)
                done = True
            except subprocess.TimeoutExpired:
                done = False
            rows = _epochs_logged(watch) if watch is not None else []
            for r in rows[shown:]:
                own = next(((k[4:], v) for k, v in r.items() if k.startswith("val/")), None)  # roc; mse
                log(f"Epoch {int(r['epoch']) + 1:03d} | val loss {r['val_loss']:.4f}"
                    + (f" | val {own[0]} (chemprop's, tasks pooled) {own[1]:.4f}" if own is not None else "")
                    + f" | {time.perf_counter() - t0:.0f}s")
                last_line = time.perf_counter()
            shown = len(rows)
            if done:
                break
            if time.perf_counter() - last_line > _QUIET_S:
                log(f"chemprop {argv[1]} running ({time.perf_counter() - t0:.0f}s)")
                last_line = time.perf_counter()
    if proc.returncode != 0:
        tail = (work / "chemprop.log").read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError(f"chemprop {argv[1]} failed (exit {proc.returncode}); the end of {work / 'chemprop.log'}:\n"
                           + "\n".join(tail))
    return time.perf_counter() - t0


def _read_predictions(path: Path, smiles: List[str], num_tasks: int) -> torch.Tensor:
    """``(M, T)`` predictions of chemprop's prediction file, checked row by row against ``smiles``."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    got = [r["smiles"] for r in rows]
    if got != smiles:
        bad = next((i for i, (a, b) in enumerate(zip(got, smiles)) if a != b), min(len(got), len(smiles)))
        raise RuntimeError(f"{path}: {len(got)} rows for {len(smiles)} molecules, first difference at row {bad + 1}; "
                           "chemprop did not predict the molecules it was given")
    return torch.tensor([[float(r[f"t{j}"]) for j in range(num_tasks)] for r in rows], dtype=torch.float64)


def _num_parameters(log_file: Path) -> Optional[int]:
    """Trainable weights from Lightning's model summary in chemprop's log (``Trainable params: 318 K``:
    three significant digits); None when there is none. The checkpoint itself holds pickled chemprop
    classes, which this process (without chemprop) cannot read."""
    found = re.findall(r"Trainable params:\s*([\d.]+)\s*([KMB]?)", log_file.read_text(errors="replace"))
    if not found:
        return None
    value, unit = found[-1]
    return int(float(value) * {"": 1, "K": 1e3, "M": 1e6, "B": 1e9}[unit])


def run_chemprop(exe: str, work: Path, smiles: Sequence[str], y: torch.Tensor, split_idx, task_names: List[str], *,
                 seed: int, epochs: Optional[int] = None, descriptors: bool = False, threads: Optional[int] = None,
                 task_type: str = "classification", log: Callable[[str], None] = print) -> Dict[str, object]:
    """Train chemprop (``task_type`` ``"classification"`` or ``"regression"``) on ``split_idx``
    (train/val/test indices into ``smiles`` and ``y (N, T)``, NaN = missing) in the fresh folder
    ``work``; return our metrics of its val/test predictions, ``epochs_run``, ``best_epoch`` (lowest
    validation loss, chemprop's checkpoint rule), ``num_parameters`` and timings."""
    work = Path(work).resolve()  # chemprop runs inside it: its paths must not be relative to here
    shutil.rmtree(work, ignore_errors=True)  # a run killed half-way leaves chemprop's folders behind
    work.mkdir(parents=True)
    data, val_csv = _write_inputs(work, smiles, y, split_idx, task_type)
    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    out, t = work / "out", y.size(1)
    metrics_csv = out / "model_0" / "trainer_logs" / "version_0" / "metrics.csv"
    train_s = _run_logged(_train_argv(exe, data, out, t, seed, epochs, descriptors, task_type), work, env, log,
                          metrics_csv)
    predict = [exe, "predict", "-i", str(val_csv), "-s", "smiles", "--model-paths", str(out / "model_0" / "best.pt"),
               "-o", str(work / "val_predictions.csv")]
    if descriptors:  # predict computes them again for its molecules
        predict += ["--molecule-featurizers", DESCRIPTORS]
    predict_s = _run_logged(predict, work, env, log)
    res: Dict[str, object] = {}
    for part, idx, path in (("val", split_idx[1], work / "val_predictions.csv"),
                            ("test", split_idx[2], out / "model_0" / "test_predictions.csv")):
        order = idx.tolist() if part == "val" else sorted(idx.tolist())  # chemprop keeps file order for its test rows
        pred = _read_predictions(path, [smiles[i] for i in order], t)
        res[part] = output_metrics(pred, y[order], task_names, task_type)
    epochs_log = _epochs_logged(metrics_csv)
    best = min(range(len(epochs_log)), key=lambda i: epochs_log[i]["val_loss"]) + 1 if epochs_log else None
    res.update(epochs_run=len(epochs_log), best_epoch=best, train_seconds=train_s, predict_seconds=predict_s,
               seconds_per_epoch=train_s / max(1, len(epochs_log)),
               num_parameters=_num_parameters(work / "chemprop.log"))
    return res

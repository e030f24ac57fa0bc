"""Molecule checkpoints: ``graphattn evaluate`` and ``predict`` rebuild the model, its featurizer and its
descriptors from the checkpoint alone (training is in :mod:`graphattn.cli.molecules_train`, pictures in
:mod:`graphattn.cli.molecules_explain`)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Tuple

from torch import nn

from graphattn.cli.options import message_of, usage_error
from graphattn.data.download import DataFileError
from graphattn.data.moleculenet import MOLECULENET
from graphattn.data.smiles_table import find_column, read_csv_table
from graphattn.tasks.molecules.data import graph_options, load_dataset
from graphattn.tasks.molecules.domain import own_dataset, train_similarity, training_overlap, training_smiles
from graphattn.tasks.molecules.files import spooled  # pipes: read once, into a temporary file
from graphattn.tasks.molecules.checkpoints import load_model, task_type_of
from graphattn.tasks.molecules.outputs import output_metrics, outputs
from graphattn.tasks.molecules.parity import parity_plot
from graphattn.tasks.trained import MoleculeModel
from graphattn.train.runtime import resolve_device
from graphattn.utils.files import check_output_not_input, out_path, write_csv

__all__ = ["evaluate", "predict", "checkpoint_inputs"]

def _smiles_column(header: List[str], args, meta: dict, path, command: str) -> int:
    """Index of the SMILES column of --csv: ``--smiles-col``; when that was not given and the
    file has no ``smiles`` column, the column the checkpoint was trained with (a model trained
    with ``--smiles-col mol`` predicts on its own training file as it is; a note says so)."""
    try:
        return find_column(header, args.smiles_col, path, flag="--smiles-col")
    except DataFileError:
        trained = str((meta.get("data") or {}).get("smiles_col") or "smiles")
        if args.smiles_col != "smiles" or trained.strip().lower() == "smiles":
            raise  # chosen by the user, or nothing else to try
        try:
            j = find_column(header, trained, path)
        except DataFileError:
            raise DataFileError(f"{path}: no column 'smiles' nor {trained!r} (the model's training column); "
                                f"columns are {header} (choose one with --smiles-col)") from None
        print(f"graphattn {command}: {path}: reading SMILES from column {header[j]!r}, the column the "
              "model was trained with (no 'smiles' column; --smiles-col chooses another)", file=sys.stderr)
        return j


def _read_smiles_csv(path, args, meta: dict, command: str, with_lines: bool = False, with_columns: bool = False):
    """The SMILES column (:func:`_smiles_column`) of a CSV / .csv.gz, read and matched as the
    datasets do (with ``with_lines``: also each record's file line, the row number
    train/evaluate report; with ``with_columns``: also the file's other columns, name → cells)."""
    header, rows = read_csv_table(path)
    j = _smiles_column(header, args, meta, path, command)
    smiles = [fields[j] for _, fields in rows]
    if not with_lines:
        return smiles
    if not with_columns:
        return smiles, [line for line, _ in rows]
    others = {h: [fields[k] if k < len(fields) else "" for _, fields in rows] for k, h in enumerate(header) if k != j}
    return smiles, [line for line, _ in rows], others


def _output_columns(tasks: List[str], ensemble: bool) -> Tuple[List[str], List[str]]:
    """Names of the probability and (ensembles) std columns of ``predict``'s CSV, per task.

    The std column of task ``t`` is ``t_std``. The probability column is ``t`` itself unless
    that is ``row``, ``smiles``, ``error``, an std column or an earlier task's column: then
    ``_task`` is appended (again, until it is unique). Deterministic for a checkpoint."""
    std = [f"{t}_std" for t in tasks] if ensemble else []
    taken = {"row", "file_row", "smiles", "error", *std}
    prob = []
    for t in tasks:
        col = t
        while col in taken:
            col += "_task"
        taken.add(col)
        prob.append(col)
    return prob, std


def checkpoint_inputs(args, meta: dict, command: str, with_lines: bool = False, with_columns: bool = False):
    """The input SMILES (with ``with_lines``: and the file lines of --csv records, else None; with
    ``with_columns``: and --csv's other columns, name → cells, else ``{}``)."""
    if args.smiles and args.csv:
        raise ValueError(f"give either --smiles or --csv {args.csv}, not both")
    if args.smiles_col != "smiles" and not args.csv:
        raise ValueError(f"--smiles-col {args.smiles_col} names a column of --csv, which is not given")
    if args.smiles:
        smiles = list(args.smiles)
        return smiles if not with_lines else (smiles, None, {}) if with_columns else (smiles, None)
    if args.csv:
        return _read_smiles_csv(args.csv, args, meta, command, with_lines, with_columns)
    raise ValueError("give --smiles SMILES [...] or --csv FILE")


# ----------------------------------------------------------------------------- evaluate / predict / explain
def _labelled_csv(args, meta: dict, opts: dict):
    """``(dataset, the model's tasks it labels, {"csv": dataset})`` of ``evaluate --csv``; ``ValueError``
    when no task column, or several spellings of one, are there."""
    tasks = meta["task_names"]
    csv_path = spooled(args.csv)
    header, _ = read_csv_table(csv_path, header_only=True)
    smiles_col = header[_smiles_column(header, args, meta, args.csv, "evaluate")]
    folded = {}
    for h in header:
        folded.setdefault(h.lower(), []).append(h)
    present = [t for t in tasks if t in header or len(folded.get(t.lower(), [])) == 1]
    clash = next((t for t in tasks if t not in header and len(folded.get(t.lower(), [])) > 1), None)
    if clash is not None:
        raise ValueError(f"{args.csv}: columns {folded[clash.lower()]} all match the model's task "
                         f"{clash!r} (letter case aside): rename all but one")
    if present and len(present) < len(tasks):
        print(f"graphattn evaluate: {args.csv} has no column for the model's task(s) "
              f"{[t for t in tasks if t not in present]}; evaluating the other {len(present)}", file=sys.stderr)
    if not present:
        raise ValueError(f"{args.csv} has none of the model's task columns {tasks} (columns: {header})")
    ds = load_dataset(csv_path=csv_path, smiles_col=smiles_col,
                      tasks=[t if t in header else folded[t.lower()][0] for t in present],
                      log=not args.no_progress, binary=task_type_of(meta) != "regression", **opts)
    return ds, present, {"csv": ds}


def _own_split(args, meta: dict):
    """``(dataset, tasks, {"val": ..., "test": ...})``: the checkpoint's own split, rebuilt (with a warning
    when its file changed since training)."""
    ds, idx = own_dataset(meta, log=not args.no_progress)
    return ds, meta["task_names"], {"val": ds[idx[1]], "test": ds[idx[2]]}


def metrics_line(name: str, res: dict, task_type: str) -> str:
    """The lines ``evaluate`` prints for one split: the means, then the metric per task."""
    fmt = lambda v: "n/a" if v is None else f"{v:.4f}"  # noqa: E731
    if task_type == "regression":
        head = (f"{name}: {res['num_molecules']} molecules | MAE {fmt(res['mae'])} | RMSE {fmt(res['rmse'])} | "
                f"R² {fmt(res['r2'])}")
        per = res.get("mae_per_task", {})
        return head + ("\n  MAE " + ", ".join(f"{t} {fmt(v)}" for t, v in per.items()) if len(per) > 1 else "")
    head = (f"{name}: {res['num_molecules']} molecules | ROC-AUC {fmt(res['roc_auc'])} | "
            f"PR-AUC {fmt(res['pr_auc'])} ({res.get('tasks_evaluated', 0)} tasks with both classes)")
    return head + "\n  " + ", ".join(f"{t} {fmt(v)}" for t, v in res.get("roc_auc_per_task", {}).items())


def _parity(args, meta: dict, part: str, pred, y, tasks, std):
    """Write the parity plot of a regression checkpoint's ``part`` beside the checkpoint (``parity.png``;
    for ``--csv`` ``parity_<csv stem>.png``); its path, or None (a note says why) without matplotlib or
    a writable folder."""
    stem = Path(args.csv).name.split(".")[0] if args.csv else ""
    path = Path(args.checkpoint).resolve().parent / (f"parity_{stem}.png" if args.csv else "parity.png")
    d = meta.get("data") or {}
    title = f"{d.get('dataset') or Path(d.get('csv') or '').name}: {'--csv ' + stem if args.csv else part + ' split'}"
    named = MOLECULENET.get(str(d.get("dataset") or ""))
    try:
        parity_plot(pred, y, tasks, path, title=title, std=std, units=named.units if named is not None else "")
    except ImportError:
        print("graphattn evaluate: no parity plot (matplotlib is missing: pip install graphattn[viz])", file=sys.stderr)
        return None
    except OSError as exc:
        print(f"graphattn evaluate: no parity plot: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return None
    print(f"Wrote {path}")
    return str(path)


def evaluate(args) -> int:
    """Mean and per-task ROC-AUC / PR-AUC (regression: MAE / RMSE / R², in the targets' units, and a
    parity plot of the test split beside the checkpoint) of a checkpoint on its own val/test split, or
    on --csv."""
    from torch_geometric.loader import DataLoader

    try:
        model, meta = load_model(args.checkpoint)
    except (ValueError, RuntimeError) as exc:
        return usage_error("evaluate", str(exc))
    tasks, opts = meta["task_names"], graph_options(meta)
    try:
        ds, present, parts = (_labelled_csv(args, meta, opts) if args.csv else _own_split(args, meta))
    except (DataFileError, ValueError, OSError) as exc:
        return usage_error("evaluate", str(exc))
    model = model.to(resolve_device("auto"))  # evaluate: the GPU when there is one
    result = {"checkpoint": str(args.checkpoint), "tasks": present}
    if args.csv:
        # evaluate on the tasks present in the CSV only: reorder the model's outputs to them
        cols = [tasks.index(t) for t in present]
        model = _Columns(model, cols)
    task_type = task_type_of(meta)
    for name, part in parts.items():
        out, y = outputs(model, DataLoader(part, batch_size=256), task_type)
        mean = out.mean(0) if out.dim() == 3 else out
        res = result[name] = output_metrics(mean, y, present, task_type)
        print(metrics_line(name, res, task_type))
        if task_type == "regression" and name in ("test", "csv") and res["num_molecules"]:
            result["parity_plot"] = _parity(args, meta, name, mean, y, present, out.std(0, unbiased=False)
                                            if out.dim() == 3 else None)
    if args.csv:
        result["in_training_split"] = _training_overlap_note(args, meta, ds)
    if args.csv and ds.skipped:
        print(f"Skipped {len(ds.skipped)} invalid SMILES (file rows {', '.join(str(s[0]) for s in ds.skipped)})")
    result["skipped_rows"] = [s[0] for s in ds.skipped]  # the file rows skipped (its own split's file, or --csv)
    print(json.dumps({k: v for k, v in result.items()}, default=str))
    return 0


def _training_overlap_note(args, meta: dict, ds):
    """How many of evaluate --csv's molecules the model was trained on, with a warning when any (their
    score overstates how the model does on new molecules); None when the training file cannot be read."""
    try:
        train = training_smiles(meta)
    except (DataFileError, ValueError, OSError) as exc:
        print(f"graphattn evaluate: cannot check --csv against the training molecules ({message_of(exc)})",
              file=sys.stderr)
        return None
    n = training_overlap(ds.smiles, train)
    if n:
        print(f"graphattn evaluate: warning: {n} of the {len(ds)} molecules of {args.csv} are in this model's "
              "training split: the score on them overstates how the model does on new molecules", file=sys.stderr)
    return n


class _Columns(nn.Module):
    """A model restricted to some of its output columns (for evaluate on a CSV)."""

    def __init__(self, model: nn.Module, cols: List[int]):
        super().__init__()
        self.model, self.cols = model, cols

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)[:, self.cols]


def predict(args) -> int:
    """Per-task probabilities (regression: values in the targets' units) for --smiles or --csv; a CSV at --out (``OUT/predictions.csv`` when
    OUT is a folder; stdout without --out or with ``--out -``). Columns: ``row`` (1-based input position), with
    --csv ``file_row`` (the record's line in the file, the row number train/evaluate report) and the
    file's other columns (ids, names; one named like an output column gets ``input_`` before its name),
    ``smiles``, one probability (value) column per task, for an ensemble checkpoint ``<task>_std``
    columns (spread of its members' probabilities or values: the uncertainty), ``error``. Every input gets a row; an
    invalid SMILES gets empty probabilities and an ``error``. A task whose name is taken
    (``row``, ``smiles``, ``error``, another task's ``_std``) gets ``_task`` appended (see
    :func:`_output_columns`; a note goes to stderr). Built on :class:`graphattn.tasks.trained.MoleculeModel`."""
    try:
        if args.out and args.out != "-":
            check_output_not_input(out_path(args.out, "predictions.csv"),
                                   {"the checkpoint": args.checkpoint, "the --csv input": args.csv})
        model, meta = load_model(args.checkpoint)
        smiles, lines, others = checkpoint_inputs(args, meta, "predict", with_lines=True, with_columns=True)
    except (ValueError, RuntimeError, OSError) as exc:  # DataFileError is a ValueError
        return usage_error("predict", str(exc))
    pred = MoleculeModel(model, meta).predict(smiles)
    tasks, task_type = meta["task_names"], pred.task_type
    digits = ".6g" if task_type == "regression" else ".6f"  # values in the targets' units, or probabilities
    prob_cols, std_cols = _output_columns(tasks, pred.std is not None)
    for t, c in zip(tasks, prob_cols):
        if c != t:
            print(f"graphattn predict: task {t!r} is written as column {c!r} (its name is taken)", file=sys.stderr)
    sim_cols = ["train_similarity", "nearest_train"] if getattr(args, "similarity", False) else []
    if sim_cols:
        try:
            sim, nearest = train_similarity(smiles, training_smiles(meta))
        except (DataFileError, ValueError, OSError) as exc:
            return usage_error("predict", f"--similarity needs the model's training molecules: {message_of(exc)}")
    ours = {"row", "file_row", "smiles", *prob_cols, *std_cols, *sim_cols, "error"}
    extra = {}
    for name, cells in others.items():
        col = name
        while col in ours or col in extra:
            col = "input_" + col
        extra[col] = cells
    ok = [i for i, e in enumerate(pred.errors) if not e]
    rows = [{"row": i + 1, **({"file_row": lines[i]} if lines is not None else {}),
             **{c: cells[i] for c, cells in extra.items()}, "smiles": s,
             **{c: "" for c in prob_cols + std_cols}, "error": e}
            for i, (s, e) in enumerate(zip(smiles, pred.errors))]
    if sim_cols:
        for i, r in enumerate(rows):
            r.update(train_similarity="" if sim[i] != sim[i] else f"{sim[i]:.4f}", nearest_train=nearest[i])
    for i in ok:
        rows[i].update({c: format(float(p), digits) for c, p in zip(prob_cols, pred.values[i])})
        if std_cols:
            rows[i].update({c: format(float(v), digits) for c, v in zip(std_cols, pred.std[i])})
    fields = ["row", *(["file_row"] if lines is not None else []), *extra, "smiles", *prob_cols, *std_cols, *sim_cols,
              "error"]
    out = out_path(args.out, "predictions.csv") if args.out and args.out != "-" else "-"  # "-": stdout
    try:
        write_csv(out, fields, rows)
    except OSError as exc:
        return usage_error("predict", f"cannot write {out}: {exc}")
    if out != "-":
        print(f"Wrote {len(rows)} predictions ({len(rows) - len(ok)} invalid SMILES) to {out}")
    for r in rows:
        if r["error"]:
            where = f" (file row {r['file_row']})" if "file_row" in r else ""
            print(f"row {r['row']}{where}: {r['smiles']!r}: {r['error']}", file=sys.stderr)
    if not ok:  # every row answered with its error (the documented contract), and the likely cause said
        print("graphattn predict: " + ("no molecules in the input (the file has a header only)" if not rows else
                                       f"none of the {len(rows)} SMILES could be parsed"
                                       + (" (wrong --smiles-col?)" if args.csv else "")), file=sys.stderr)
    return 0

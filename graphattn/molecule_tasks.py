"""Molecule tasks behind the CLI: train on MoleculeNet toxicity sets or any SMILES CSV, then
evaluate, predict and explain with the checkpoint.

``graphattn train tox21`` (also ``toxcast``, ``clintox``, ``sider``, or ``--csv FILE``)
featurizes the molecules (:mod:`graphattn.data.molecules`, cached), adds Laplacian PE,
splits them (scaffold by default), trains a :class:`~graphattn.GraphClassifier` with one
global token — or, with ``--baseline gine|gat``, a PyG model of the same width and depth
(:class:`~graphattn.molecule_baselines.MPNNBaseline`) — through the shared loop
:func:`graphattn.train.fit`, and writes ``OUT/metrics.json`` and ``OUT/best.pt``. The
checkpoint's ``meta`` holds the model class and constructor kwargs, the featurizer
version, the task names, the PE size and the data/split settings, so ``evaluate``,
``predict`` and ``explain`` rebuild everything from it alone.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import torch
from torch import nn

from .molecule_pipeline import (BASELINES, DEFAULTS, SPLITS, descriptor_set, featurize, load_dataset, load_model,
                                model_spec, predict_proba, run_ensemble, split_indices, split_metrics)

__all__ = ["DATASETS", "handles", "add_train_arguments", "train", "evaluate", "predict", "explain"]

DATASETS = {"tox21", "toxcast", "clintox", "sider"}


def handles(args) -> bool:
    """True when ``train`` is ours: a MoleculeNet toxicity set name or ``--csv``."""
    name = getattr(args, "dataset", None)
    return (name is not None and name.lower() in DATASETS) or getattr(args, "csv", None) is not None


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Molecule options of ``graphattn train``. ``--baseline`` is shared with the social tasks:
    whichever pipeline adds its options first defines it (no ``choices``); each validates its
    own values (none|gine|gat here) in ``train``."""
    g = parser.add_argument_group("molecules")
    g.add_argument("--csv", default=None, help="train on any CSV (or .csv.gz) with a SMILES column and 0/1 task "
                                                "columns (instead of a named dataset)")
    g.add_argument("--smiles-col", default="smiles", help="SMILES column of --csv (default: smiles)")
    g.add_argument("--tasks", default=None,
                   help="comma-separated task names, matched case-insensitively; names containing commas "
                        "(SIDER) are recognised (default: every task; for --csv every column of 0/1 labels)")
    g.add_argument("--split", choices=SPLITS, default="scaffold",
                   help="scaffold (deterministic Bemis-Murcko, default), random or balanced_scaffold (seeded)")
    g.add_argument("--pos-weight", action="store_true",
                   help="weight positives by negatives/positives per task (training split)")
    g.add_argument("--local-mpnn", default=None, choices=["gine", "gin"],
                   help="our model: add a GraphGPS-style GINE/GIN branch next to the attention in every block "
                        "(molecules; graph sets such as imdb-binary take gin: they have no edge features)")
    g.add_argument("--descriptors", action=argparse.BooleanOptionalAction, default=None,
                   help="feed ~200 RDKit 2-D molecule descriptors to the head (chemprop's rdkit_2d; "
                        "standardised on the training split, stored in the checkpoint); default: "
                        f"{'on' if DEFAULTS['descriptors'] else 'off'}")
    g.add_argument("--ensemble", type=int, default=None, metavar="N",
                   help="train N models on the same split (seeds S, S+1000, ...) and average their "
                        "probabilities (chemprop's --ensemble_size); one checkpoint holds them all (default: 1)")
    if "--baseline" not in parser._option_string_actions:  # shared with the social tasks; each validates
        g.add_argument("--baseline", default="none",
                       help="train a PyG model of the same width and depth instead of ours: molecules "
                            "gine|gat, social networks gcn|gat|transformer (default: none)")


def _hparams(args) -> Dict[str, Any]:
    hp = dict(DEFAULTS)
    for name in ("epochs", "lr", "batch_size", "patience", "hidden", "layers", "heads", "dropout",
                 "global_tokens", "pe_dim", "local_mpnn", "descriptors", "readout"):
        if getattr(args, name, None) is not None:
            hp[name] = getattr(args, name)
    if getattr(args, "weight_decay", None) is not None:
        hp["weight_decay"] = args.weight_decay
    return hp


def _err(command: str, msg: str) -> int:
    print(f"graphattn {command}: {msg}", file=sys.stderr)
    return 2


# ----------------------------------------------------------------------------- train
#: ``graphattn train`` options of the social tasks that have no meaning for molecules.
_SOCIAL_ONLY = ("mini_batch", "attn_dropout", "input_dropout", "propagation", "propagation_alpha",
                "propagation_learned", "propagation_dropout", "gcn_weight", "gcn_layers", "self_loops",
                "label_input", "folds")


def train(args) -> int:
    """``graphattn train``: prints one line per epoch and a final summary."""
    from .data.download import DataFileError

    hp = _hparams(args)
    baseline = getattr(args, "baseline", "none") or "none"
    if baseline not in BASELINES:
        return _err("train", f"--baseline must be one of {', '.join(BASELINES)} for molecules, got {baseline!r}")
    if args.csv is not None and args.dataset is not None:
        return _err("train", f"give either a dataset name ({args.dataset!r}) or --csv ({args.csv!r}), not both")
    if args.csv is None and args.dataset.lower() not in DATASETS:
        return _err("train", f"unknown molecule dataset {args.dataset!r}; choose one of {sorted(DATASETS)}")
    social = [f"--{k.replace('_', '-')}" for k in _SOCIAL_ONLY if getattr(args, k, None) not in (None, False)]
    if social:  # parsed for the social tasks: refuse rather than silently ignore them
        return _err("train", f"{', '.join(social)} {'is a' if len(social) == 1 else 'are'} social-network "
                             "option(s), not used for molecules")
    if hp["readout"] == "token" and hp["global_tokens"] < 1 and baseline == "none":
        return _err("train", "--readout token needs --global-tokens >= 1")
    ensemble = 1 if args.ensemble is None else args.ensemble
    if ensemble < 1:
        return _err("train", f"--ensemble must be >= 1, got {ensemble}")
    name = args.dataset.lower() if args.csv is None else Path(args.csv).name
    pe_dim = hp["pe_dim"] if baseline == "none" else 0
    descriptors = descriptor_set(hp["descriptors"])
    try:
        ds = load_dataset(None if args.csv else name, args.csv, args.smiles_col, args.tasks or None, pe_dim,
                          args.limit, log=not args.no_progress, descriptors=descriptors)
        if not ds.task_names:
            raise ValueError(f"{name}: no task columns of 0/1 labels found; pass --tasks")
        split_idx = split_indices(ds, args.split, args.seed)
    except (DataFileError, ValueError) as exc:
        return _err("train", str(exc))
    tasks = list(ds.task_names) if args.tasks else None
    spec = model_spec(baseline, len(ds.task_names), hp, graph_feature_dim=len(descriptors or ()))
    out = Path(args.out) if args.out else Path("runs") / f"{Path(name).stem}-{args.split}-seed{args.seed}"
    data = {"dataset": None if args.csv else name, "csv": str(Path(args.csv).resolve()) if args.csv else None,
            "smiles_col": args.smiles_col, "tasks": tasks, "split": args.split, "seed": args.seed,
            "limit": args.limit}
    skipped = [{"row": r, "smiles": s, "reason": why} for r, s, why in ds.skipped]
    print(f"{name}: {len(ds)} molecules ({len(skipped)} of {ds.num_rows} skipped: invalid SMILES), "
          f"{len(ds.task_names)} tasks, {args.split} split "
          f"{'/'.join(str(len(i)) for i in split_idx)} | model {spec['class']}"
          f"{'(' + baseline + ')' if baseline != 'none' else ''} hidden {hp['hidden']} layers {hp['layers']}"
          f"{f', ensemble of {ensemble}' if ensemble > 1 else ''}")
    res = run_ensemble(ds, split_idx, spec, hp, size=ensemble, seed=args.seed, pos_weight=args.pos_weight,
                       out_dir=out, resume=args.resume, meta={"data": data}, progress=not args.no_progress)
    res.pop("model")
    summary = {**data, "dataset": name, "model": spec["class"], "baseline": baseline,
               "task_names": list(ds.task_names), "num_molecules": len(ds),
               "skipped": {"count": len(skipped), "rows": [s["row"] for s in skipped], "molecules": skipped},
               **res}
    from .train import write_metrics

    write_metrics(out / "metrics.json", summary)  # strict JSON: a one-class task's NaN AUC -> null
    val, test = res.get("val", {}), res.get("test", {})
    fmt = lambda v: "n/a" if v is None else f"{v:.4f}"  # noqa: E731
    best = (f"best epoch {res['best_epoch']}/{res['epochs_run']}" if ensemble == 1 else
            f"ensemble of {ensemble} (best epochs {res['best_epoch']})")
    print(f"{name} ({args.split} split, seed {args.seed}): {best} | "
          f"val ROC-AUC {fmt(val.get('roc_auc'))} | test ROC-AUC {fmt(test.get('roc_auc'))} | "
          f"test PR-AUC {fmt(test.get('pr_auc'))} | {res['seconds_per_epoch']:.1f} s/epoch")
    if skipped:
        print(f"Skipped {len(skipped)} invalid SMILES (file rows {', '.join(str(s['row']) for s in skipped)})")
    print(f"Wrote {out / 'metrics.json'} and {out / 'best.pt'}")
    return 0


def _read_smiles_csv(path, smiles_col: str) -> List[str]:
    """The SMILES column of a CSV / .csv.gz, read and matched as the datasets do."""
    from .data.molecules import find_column, read_csv_table

    header, rows = read_csv_table(path)
    try:
        j = find_column(header, smiles_col, path)
    except ValueError as exc:
        raise ValueError(f"{exc}; pass --smiles-col") from None
    return [fields[j] for _, fields in rows]


def _out_path(out, default_name: str) -> Path:
    """``out``, or ``out/default_name`` when ``out`` is an existing folder or ends with a slash."""
    path = Path(out)
    if path.is_dir() or str(out).endswith(("/", "\\")):
        return path / default_name
    return path


def _output_columns(tasks: List[str], ensemble: bool) -> Tuple[List[str], List[str]]:
    """Names of the probability and (ensembles) std columns of ``predict``'s CSV, per task.

    The std column of task ``t`` is ``t_std``. The probability column is ``t`` itself unless
    that is ``row``, ``smiles``, ``error``, an std column or an earlier task's column: then
    ``_task`` is appended (again, until it is unique). Deterministic for a checkpoint."""
    std = [f"{t}_std" for t in tasks] if ensemble else []
    taken = {"row", "smiles", "error", *std}
    prob = []
    for t in tasks:
        col = t
        while col in taken:
            col += "_task"
        taken.add(col)
        prob.append(col)
    return prob, std


def _inputs(args, command: str) -> List[str]:
    if args.smiles:
        return list(args.smiles)
    if args.csv:
        return _read_smiles_csv(args.csv, args.smiles_col)
    raise ValueError(f"{command}: give --smiles SMILES [...] or --csv FILE")


# ----------------------------------------------------------------------------- evaluate / predict / explain
def evaluate(args) -> int:
    """Mean and per-task ROC-AUC / PR-AUC of a checkpoint on its own val/test split, or on --csv."""
    from torch_geometric.loader import DataLoader

    from .data.download import DataFileError

    try:
        model, meta = load_model(args.checkpoint)
    except (ValueError, RuntimeError) as exc:
        return _err("evaluate", str(exc))
    tasks, k, d = meta["task_names"], meta["pe"]["k"], meta["data"]
    try:
        if args.csv:
            from .data.molecules import find_column, read_csv_table

            header, _ = read_csv_table(args.csv, header_only=True)
            find_column(header, args.smiles_col, args.csv)
            folded = {}
            for h in header:
                folded.setdefault(h.lower(), []).append(h)
            present = [t for t in tasks if t in header or len(folded.get(t.lower(), [])) == 1]
            if not present:
                return _err("evaluate", f"{args.csv} has none of the model's task columns {tasks} "
                                        f"(columns: {header})")
            ds = load_dataset(csv_path=args.csv, smiles_col=args.smiles_col, pe_dim=k,
                              tasks=[t if t in header else folded[t.lower()][0] for t in present],
                              log=not args.no_progress, descriptors=meta.get("descriptors"))
            parts = {"csv": ds}
        else:
            ds = load_dataset(d["dataset"], d["csv"], d["smiles_col"], d["tasks"], k, d["limit"],
                              log=not args.no_progress, descriptors=meta.get("descriptors"))
            present = tasks
            idx = split_indices(ds, d["split"], d["seed"])
            parts = {"val": ds[idx[1]], "test": ds[idx[2]]}
    except (DataFileError, ValueError, OSError) as exc:
        return _err("evaluate", str(exc))
    model = model.to(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    result = {"checkpoint": str(args.checkpoint), "tasks": present}
    if args.csv:
        # evaluate on the tasks present in the CSV only: reorder the model's outputs to them
        cols = [tasks.index(t) for t in present]
        model = _Columns(model, cols)
    for name, part in parts.items():
        res = split_metrics(model, DataLoader(part, batch_size=256), present)
        result[name] = res
        fmt = lambda v: "n/a" if v is None else f"{v:.4f}"  # noqa: E731
        print(f"{name}: {res['num_molecules']} molecules | ROC-AUC {fmt(res['roc_auc'])} | "
              f"PR-AUC {fmt(res['pr_auc'])} ({res.get('tasks_evaluated', 0)} tasks with both classes)")
        print("  " + ", ".join(f"{t} {fmt(v)}" for t, v in res.get("roc_auc_per_task", {}).items()))
    if args.csv and ds.skipped:
        print(f"Skipped {len(ds.skipped)} invalid SMILES (file rows {', '.join(str(s[0]) for s in ds.skipped)})")
    result["skipped_rows"] = [s[0] for s in ds.skipped] if args.csv else []
    print(json.dumps({k: v for k, v in result.items()}, default=str))
    return 0


class _Columns(nn.Module):
    """A model restricted to some of its output columns (for evaluate on a CSV)."""

    def __init__(self, model: nn.Module, cols: List[int]):
        super().__init__()
        self.model, self.cols = model, cols

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)[:, self.cols]


def predict(args) -> int:
    """Per-task probabilities for --smiles or --csv; a CSV at --out (``OUT/predictions.csv`` when
    OUT is a folder; stdout without --out). Columns: ``row`` (1-based input position),
    ``smiles``, one probability column per task, for an ensemble checkpoint ``<task>_std``
    columns (spread of its members' probabilities), ``error``. Every input gets a row; an
    invalid SMILES gets empty probabilities and an ``error``. A task whose name is taken
    (``row``, ``smiles``, ``error``, another task's ``_std``) gets ``_task`` appended (see
    :func:`_output_columns`; a note goes to stderr)."""
    try:
        model, meta = load_model(args.checkpoint)
        smiles = _inputs(args, "predict")
    except (ValueError, RuntimeError, OSError) as exc:  # DataFileError is a ValueError
        return _err("predict", str(exc))
    tasks = meta["task_names"]
    graphs = featurize(smiles, meta["pe"]["k"], meta.get("descriptors"))
    ok = [i for i, g in enumerate(graphs) if not isinstance(g, str)]
    prob = predict_proba(model, [graphs[i] for i in ok], members=True)
    # an ensemble also reports how much its members disagree: <task>_std, the standard
    # deviation of the members' probabilities (chemprop's ensemble uncertainty)
    prob_cols, std_cols = _output_columns(tasks, prob.dim() == 3)
    for t, c in zip(tasks, prob_cols):
        if c != t:
            print(f"graphattn predict: task {t!r} is written as column {c!r} (its name is taken)", file=sys.stderr)
    std = prob.std(0, unbiased=False) if std_cols else None
    prob = prob.mean(0) if std_cols else prob
    rows = [{"row": i + 1, "smiles": s, **{c: "" for c in prob_cols + std_cols},
             "error": g if isinstance(g, str) else ""} for i, (s, g) in enumerate(zip(smiles, graphs))]
    for j, i in enumerate(ok):
        rows[i].update({c: f"{float(p):.6f}" for c, p in zip(prob_cols, prob[j])})
        if std_cols:
            rows[i].update({c: f"{float(v):.6f}" for c, v in zip(std_cols, std[j])})
    fields = ["row", "smiles", *prob_cols, *std_cols, "error"]
    if args.out:
        out = _out_path(args.out, "predictions.csv")
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            with open(out, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=fields)
                w.writeheader()
                w.writerows(rows)
        except OSError as exc:
            return _err("predict", f"cannot write {out}: {exc}")
        print(f"Wrote {len(rows)} predictions ({len(rows) - len(ok)} invalid SMILES) to {out}")
    else:
        w = csv.DictWriter(sys.stdout, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        if r["error"]:
            print(f"row {r['row']}: {r['smiles']!r}: {r['error']}", file=sys.stderr)
    return 0


def explain(args) -> int:
    """Draw each molecule with atoms and bonds coloured by attention rollout
    (:func:`graphattn.viz.molecule_attention`) and the per-task probabilities as caption, to
    --out (default ``explain.png``; ``OUT/explain.png`` when OUT is a folder; with several
    molecules ``<stem>_<i>.png``)."""
    from .viz import draw_molecule_attention, molecule_attention

    try:
        model, meta = load_model(args.checkpoint)
        smiles = _inputs(args, "explain")
    except (ValueError, RuntimeError, OSError) as exc:
        return _err("explain", str(exc))
    if meta["model"]["class"] != "GraphClassifier":
        return _err("explain", "attention pictures need our GraphClassifier, not a --baseline checkpoint")
    if int(meta["model"]["kwargs"].get("num_layers", 1)) < 1:
        return _err("explain", "the model has 0 transformer layers (--layers 0): there is no attention to draw")
    out = _out_path(args.out or "explain.png", "explain.png")
    graphs = featurize(smiles, meta["pe"]["k"], meta.get("descriptors"))
    status = 0
    for i, (s, g) in enumerate(zip(smiles, graphs)):
        if isinstance(g, str):
            print(f"graphattn explain: {s!r}: {g}", file=sys.stderr)
            status = 1
            continue
        path = out if len(smiles) == 1 else out.with_name(f"{out.stem}_{i + 1}{out.suffix or '.png'}")
        prob, scores = molecule_attention(model, g)
        lines = [f"{t} {p:.2f}" for t, p in zip(meta["task_names"], prob.tolist())]
        legend = "\n".join(["colour: attention rollout (red = most attended)"]
                           + [", ".join(lines[j:j + 4]) for j in range(0, min(len(lines), 24), 4)])
        draw_molecule_attention(s, scores, path, legend=legend)
        top = ", ".join(f"{t} {p:.3f}" for p, t in sorted(zip(prob.tolist(), meta["task_names"]), reverse=True)[:3])
        print(f"{s}: highest probabilities {top}; most attended atom #{int(scores.argmax())}. Wrote {path}")
    return status

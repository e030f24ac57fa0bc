"""``graphattn train`` on a set of graphs (graph classification): options to a data spec, the run,
its summary and ``OUT/metrics.json`` (one sub-folder per fold with ``--folds``)."""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any, Dict, Optional

import torch

from graphattn.cli.options import applied_defaults, check_rerun, out_dir_for, social_hparams
from graphattn.data.download import files_sha256
from graphattn.nn.models.registry import ModelSpec
from graphattn.tasks.social.graph import (finished_same_fold, fit_fold, gin_protocol, graph_dataset_specific_defaults,
                                          graph_defaults, graph_model_spec)
from graphattn.tasks.social.graph_data import edge_dim_of, graph_data_spec, graph_split, load_graphs
from graphattn.tasks.social.specs import GraphDataSpec
from graphattn.train.checkpoint import write_metrics
from graphattn.train.runtime import threads_for

__all__ = ["data_spec", "prepare_graph", "run_graph"]
def data_spec(args, name: Optional[str]) -> GraphDataSpec:
    """The data spec of ``graphattn train NAME`` / ``--tu-text FILE`` (:func:`graph_data_spec`)."""
    return graph_data_spec(name, limit=args.limit, seed=args.seed, folds=args.folds, tu_text=args.tu_text)


# ----------------------------------------------------------------------------- CLI
def prepare_graph(args, name: Optional[str]):
    """(data spec, graphs, hyperparameters) of a ``graphattn train`` command."""
    spec = data_spec(args, name)
    check_rerun(out_dir_for(args, spec.label + (f"-{args.folds}fold" if args.folds else "")), args)
    hp = social_hparams(args, graph_defaults(name))
    if args.baseline == "none":
        spec = spec.replace(pe_dim=hp["pe_dim"])
    else:
        hp["pe_dim"] = 0
    graphs = load_graphs(spec)
    spec = spec.replace(edge_dim=edge_dim_of(graphs) or 0)  # evaluate/predict/--resume need the same edge features
    if spec.name and getattr(graphs, "source", None) in ("gin", "tu"):
        spec = spec.replace(graph_source=graphs.source)  # evaluate/predict re-read the same files (and folds)
    if args.folds and spec.tu_text:  # evaluate/predict/--resume use the same folds, or refuse
        if graphs.folds is not None and len(graphs.folds) == args.folds:
            spec = spec.replace(fold_source="files", folds_sha256=files_sha256(graphs.fold_files))
            tested = torch.cat([te for _, te in graphs.folds])
            if tested.unique().numel() != len(graphs) or tested.numel() != len(graphs):
                warnings.warn(f"the {args.folds} fold files' test sets cover {tested.unique().numel()} of "
                              f"{len(graphs)} graphs{' (some twice)' if tested.numel() != tested.unique().numel() else ''}: "
                              "the mean is not a cross-validation over the whole set", stacklevel=2)
        else:
            spec = spec.replace(fold_source="stratified")
    if graphs.num_classes < 2:
        raise ValueError(f"{spec.label}: every graph has the same label; classification needs at least two")

    # a model option that does not fit (e.g. --readout token without tokens) fails here, as an input error
    graph_model_spec(args.baseline, graphs[0].num_features, graphs.num_classes, hp, edge_dim_of(graphs)).build()
    for fold in range(args.folds) if args.folds else [None]:
        try:
            parts = graph_split(spec, graphs, fold)
        except ValueError as exc:
            raise ValueError(f"--folds {args.folds}: {exc}" if args.folds else str(exc)) from exc
        empty = [s for s, idx in zip(("train", "val", "test"), parts) if idx.numel() == 0]
        if empty:
            where = f"fold {fold + 1} of {args.folds}" if fold is not None else "the 80/10/10 split"
            raise ValueError(f"{spec.label}: {len(graphs)} graphs are too few: {where} has no "
                             f"{'/'.join(empty)} graphs (10 % of the training graphs go to validation); "
                             + ("use fewer folds, or more graphs" if fold is not None and args.folds > 2
                                else "use more graphs"))
    return spec, graphs, hp


def run_graph(args, spec: GraphDataSpec, graphs, hp: Dict[str, Any]) -> int:
    """Train (per fold), print per-epoch lines and the summary, write OUT/metrics.json."""
    threads_for(sum(g.edge_index.size(1) for g in graphs[:64]) // max(1, min(len(graphs), 64)) * args.batch_size,
                args.threads)
    names = [str(v) for v in graphs.label_values]
    edge_dim = edge_dim_of(graphs)
    model_spec = graph_model_spec(args.baseline, graphs[0].num_features, len(names), hp, edge_dim)
    out = out_dir_for(args, spec.label + (f"-{args.folds}fold" if args.folds else ""))
    print(_describe(args, spec, graphs, names, edge_dim, model_spec, hp))
    applied = applied_defaults(graph_dataset_specific_defaults(spec.name), args, "graph")
    if applied:
        print(applied)
    folds = list(range(args.folds)) if args.folds else [None]
    if args.folds and (graphs.folds is None or len(graphs.folds) != args.folds):
        why = (f"the dataset has {len(graphs.folds)} folds" if graphs.folds is not None else
               "no 10fold_idx folder next to the file" if spec.tu_text else "no fold files")
        print(f"{args.folds} stratified folds (seed {spec.split_seed}): {why}")
    results, histories = [], []
    for fold in folds:
        split = graph_split(spec, graphs, fold)
        sub = out / f"fold{fold + 1:02d}" if fold is not None else out
        meta = {"pipeline": "graph", "model": model_spec.to_dict(), "data": spec.to_dict(), "fold": fold, "class_names": names,
                "feature_source": getattr(graphs[0], "feature_source", "structural"), "hparams": hp}
        if fold is not None:
            print(f"--- fold {fold + 1}/{len(folds)}: {len(split[0])} train / {len(split[1])} val / "
                  f"{len(split[2])} test graphs")
            if args.resume and (sub / "metrics.json").exists() and finished_same_fold(sub, meta):
                res = json.loads((sub / "metrics.json").read_text())
                print(f"fold {fold + 1}: done before (resume), test acc {res['test']['accuracy']:.4f}")
                results.append(res), histories.append(res["history"])
                continue
        res = fit_fold(graphs, split, model_spec, hp, seed=args.seed, batch_size=args.batch_size,
                       out_dir=sub, resume=args.resume, meta=meta, progress=not args.no_progress,
                       device=getattr(args, "device", None))
        results.append(res), histories.append(res["history"])
        if fold is not None:
            print(f"fold {fold + 1}: best epoch {res['best_epoch']} | val acc {res['val']['accuracy']:.4f} | "
                  f"test acc {res['test']['accuracy']:.4f}")
    if args.folds:
        _cv_summary(args, spec, out, results, histories, meta)
    else:
        r = results[0]
        print(f"{spec.label}: best epoch {r['best_epoch']} | train acc {r['train']['accuracy']:.4f} | "
              f"val acc {r['val']['accuracy']:.4f} | test acc {r['test']['accuracy']:.4f} | "
              f"{r['seconds_per_epoch']:.2f} s/epoch")
        print(f"Wrote {out / 'metrics.json'} and {out / 'best.pt'}")
    return 0


def _describe(args, spec: GraphDataSpec, graphs, names, edge_dim: int, model_spec: ModelSpec,
              hp: Dict[str, Any]) -> str:
    """The two lines a graph-set run starts with: the data, and the model and its training."""
    n_nodes = sum(g.num_nodes for g in graphs)
    return (f"{spec.label}: {len(graphs):,} graphs, {n_nodes:,} nodes, {len(names)} classes, "
            f"{graphs[0].num_features} node features ({getattr(graphs[0], 'feature_source', 'structural')})"
            + (f", {edge_dim} edge features (TU edge attributes/labels"
               + (f"; not used by {args.baseline}" if not model_spec.arg("edge_dim") else "") + ")"
               if edge_dim else "") + "\nmodel: "
            f"{model_spec.name}{' (' + args.baseline + ')' if args.baseline != 'none' else ''}, "
            f"{hp['layers']} layers x {hp['hidden']} hidden, {hp['heads']} heads, "
            + ("" if model_spec.name == "ConvBaseline" else f"{hp['global_tokens']} global tokens, ")
            + f"readout {model_spec.arg('readout')}; {hp['epochs']} epochs, lr {hp['lr']}, "
            f"batch {args.batch_size}" + (f"; {args.folds}-fold CV" if args.folds else "; stratified 80/10/10 split"))


def _cv_summary(args, spec: GraphDataSpec, out: Path, results, histories, meta: Dict[str, Any]) -> None:
    """The k-fold summary: OUT/metrics.json (mean ± std, the GIN protocol's number), OUT/best.pt (the
    fold with the best validation accuracy) and the closing lines."""
    test = torch.tensor([r["test"]["accuracy"] for r in results])
    gin = gin_protocol(histories)
    best = max(range(len(results)), key=lambda i: results[i]["val"]["accuracy"])
    # "meta" and "best_fold": those of OUT/best.pt (the fold with the best validation accuracy)
    summary = {"folds": args.folds, "test_accuracy_mean": float(test.mean()),
               "test_accuracy_std": float(test.std(unbiased=False)), "per_fold": test.tolist(),
               "gin_protocol": {"mean": gin[0], "std": gin[1], "epoch": gin[2]},
               "best_fold": best, "meta": {**meta, "fold": best}}
    write_metrics(out / "metrics.json", summary, environment=True)
    shutil.copyfile(out / f"fold{best + 1:02d}" / "best.pt", out / "best.pt")
    sd = float(test.std(unbiased=False))
    print(f"{spec.label} {args.folds}-fold: test acc {100 * test.mean():.2f} ± {100 * sd:.2f} "
          f"(model selected on validation) | GIN protocol {100 * gin[0]:.2f} ± {100 * gin[1]:.2f} "
          f"(epoch {gin[2]})")
    print(f"Wrote {out / 'metrics.json'} and {out / 'best.pt'} (fold {best + 1}, best validation accuracy)")

"""Social-network tasks behind the CLI: node classification on one graph (karate, Cora, the
MUSAE/FEATHER sets, any graph in their release format) and graph classification on sets of
graphs (IMDB, REDDIT, COLLAB, ... in the DGCNN/GIN text format, k-fold cross-validation).

``graphattn train karate`` trains our :class:`~graphattn.NodeClassifier` full-batch,
``--mini-batch`` switches to partition mini-batches (:mod:`graphattn.loader.partition`),
``--baseline gcn|gat|transformer|gin`` trains a PyG model of the same depth and width instead,
``imdb-binary --folds 10`` trains a :class:`~graphattn.GraphClassifier` per fold, and
``--task-type regression`` a node model on a numeric target column
(:mod:`graphattn.tasks.social.node_regression`). Every run
goes through the one loop :func:`graphattn.train.fit` and writes ``OUT/metrics.json`` and
``OUT/best.pt``; the checkpoint's ``meta`` holds everything needed to rebuild the data and
the model (``pipeline``, ``model``, ``data``, ``class_names``) for evaluate/predict/explain.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, Optional

from graphattn.cli.options import applied_defaults, check_applicable, check_rerun, out_dir_for, social_hparams
from graphattn.cli.social_node_spec import (CLASSIFICATION_ONLY, check_classes, check_task_type, describe_node,
                                            node_data_spec, node_meta, run_model_spec)
from graphattn.cli.social_predict import message_of, node_accuracy
from graphattn.cli.social_train_graph import prepare_graph, run_graph
from graphattn.data.download import DataFileError
from graphattn.data.social import SOCIAL_NODE_ALIASES
from graphattn.data.tu import SOCIAL_GRAPH_ALIASES
from graphattn.nn.models.registry import build_model
from graphattn.nn.models.regression import StandardizedRegressor
from graphattn.tasks.social import node as sn
from graphattn.tasks.social.budget import BUDGET_LR_CAP
from graphattn.tasks.social.graph_data import GRAPH_DATASETS
from graphattn.tasks.social.minibatch import neighbor_loaders, node_loaders
from graphattn.tasks.social.node_model import NodeModelSpec
from graphattn.tasks.social.node_regression import (check_targets, format_value, metrics_line, regression_forward,
                                                    regression_metrics)
from graphattn.tasks.social.specs import NodeDataSpec
from graphattn.train import distributed
from graphattn.train.checkpoint import CheckpointError, load_checkpoint, write_metrics
from graphattn.train.config import TrainConfig
from graphattn.train.loop import fit
from graphattn.train.runtime import resolve_device, set_seed, threads_for

__all__ = ["DATASETS", "dataset_key", "train"]

DATASETS = {**{n: "node" for n in sn.NODE_DATASETS}, **{n: "graph" for n in GRAPH_DATASETS}}
SOCIAL_BASELINES = ("none", "gcn", "gat", "transformer", "gin")


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def dataset_key(name: Optional[str]) -> Optional[str]:
    """Canonical dataset name (``Twitch_DE`` -> ``twitch-de``, ``LastFM-Asia`` -> ``lastfm_asia``)."""
    if name is None:
        return None
    table = {_norm(a): _norm(b) for a, b in {**SOCIAL_NODE_ALIASES, **SOCIAL_GRAPH_ALIASES}.items()}
    n = _norm(name)
    n = table.get(n, n)
    return next((k for k in DATASETS if _norm(k) == n), None)


def train(args) -> int:
    """``graphattn train`` for social datasets; prints one line per epoch and a summary."""
    name = dataset_key(args.dataset)
    graph_level = bool(args.tu_text) or (name is not None and not args.edges and DATASETS[name] == "graph")
    try:  # everything that depends on the user's input; training errors keep their traceback
        _check_inputs(args)
        check_task_type(args, graph_level)
        if (args.baseline or "none") not in SOCIAL_BASELINES:
            raise ValueError(f"--baseline must be one of {', '.join(SOCIAL_BASELINES)} for social networks, "
                             f"got {args.baseline!r}")
        if args.features and not args.edges:
            raise ValueError("--features goes with --edges/--target (named datasets find their own files)")
        if args.edges and not args.features and getattr(args, "max_features", None) is not None:
            raise ValueError("--max-features cuts a --features file, which is not given (the features are "
                             "structural)")
        if getattr(args, "descriptors", None) not in (None, "none"):
            raise ValueError("--descriptors is a molecule option (RDKit descriptors of SMILES)")
        if getattr(args, "ensemble", None) not in (None, 1):
            raise ValueError("--ensemble is a molecule option (averaged probabilities of N models)")
        if getattr(args, "readout", None) and not graph_level:
            raise ValueError("--readout is for graph-level tasks (molecules, graph sets), not node classification")
        if getattr(args, "local_mpnn", None) and not graph_level:
            raise ValueError("--local-mpnn is a molecule / graph-set option (node sets: see --gcn-weight, "
                             "--propagation)")
        if graph_level:
            cons = [f"--{k.replace('_', '-')}" for k in ("consistency", "consistency_weight", "consistency_temperature")
                    if getattr(args, k, None) is not None]
            if cons:
                raise ValueError(f"{', '.join(cons)}: node classification option(s), not for graph sets")
            if args.mini_batch:
                raise ValueError("--mini-batch is for node classification on one large graph")

            check_applicable(args, "graph", args.baseline or "none")
            job = prepare_graph(args, name)
        else:
            if args.folds:
                raise ValueError("--folds is for graph classification (a TU dataset or --tu-text)")
            if getattr(args, "distributed", False) and not args.mini_batch:
                raise ValueError("--distributed needs batches to share between the ranks: a full-batch node "
                                 "set is one batch; add --mini-batch (partition mini-batches)")
            check_applicable(args, "node", args.baseline or "none")
            spec = node_data_spec(args, None if args.edges else name)
            check_rerun(out_dir_for(args, spec.label), args)
            job = _prepare_node(args, spec)
    except (DataFileError, KeyError, ValueError, FileNotFoundError) as exc:
        hint = " (on the command line: --target-col NAME)" if "target_col" in message_of(exc) else ""
        print(f"graphattn train: {message_of(exc)}{hint}", file=sys.stderr)
        return 2
    if graph_level:
        return run_graph(args, *job)
    return _train_node(args, *job)


def _fanouts(text: Optional[str], layers: int) -> list:
    """``--num-neighbors 10,5`` -> [10, 5]; default 10 per attention layer."""
    if text is None:
        return [10] * max(int(layers), 1)
    try:
        fan = [-1 if v.strip().lower() == "all" else int(v) for v in str(text).split(",")]
    except ValueError:
        fan = []
    if not fan or any(v < -1 or v == 0 for v in fan):
        raise ValueError(f"--num-neighbors must be comma-separated ints >= 1, or all / -1 (every edge), "
                         f"got {text!r}")
    return fan


def _check_inputs(args) -> None:
    """ValueError for options that contradict each other (instead of silently ignoring one)."""
    given = [f for f, v in (("a dataset name", args.dataset), ("--edges", args.edges),
                            ("--tu-text", args.tu_text)) if v]
    if len(given) > 1:
        raise ValueError(f"give one input: {' or '.join(given)}, not both")
    if args.edges and not args.target:
        raise ValueError("--edges needs --target (the node id + label CSV)")
    regression = getattr(args, "task_type", None) == "regression"
    for flag, val in (("--target", args.target), ("--target-col", args.target_col),
                      ("--id-col", getattr(args, "id_col", None))):
        if val and not args.edges and not (flag == "--target-col" and regression and args.dataset):
            raise ValueError(f"{flag} goes with --edges (named datasets and --tu-text bring their own labels; "
                             "--target-col names a numeric column of a named set with --task-type regression)")


def _resumed_feature_cut(args, spec: NodeDataSpec) -> NodeDataSpec:
    """On ``--resume`` without ``--max-features``, the resumed run's own feature cut wins over
    the default budget: a run from before the budget (or one that kept every id) re-reads all
    feature ids instead of being refused as "another run" for its narrower ``x``."""
    if not getattr(args, "resume", False) or spec.max_feature_bytes is None:
        return spec
    last = out_dir_for(args, spec.label) / "last.pt"
    if not last.is_file():
        return spec

    try:
        old = (load_checkpoint(last).get("meta") or {}).get("data") or {}
    except CheckpointError:
        return spec  # fit() reports an unreadable last.pt
    if old.get("level") != "node":
        return spec
    return spec.replace(max_feature_bytes=None,
                        max_features=int(old["max_features"]) if old.get("max_features") is not None else None)


def _pinned(spec: NodeDataSpec, data) -> NodeDataSpec:
    """The spec with what reading its graph decided, for evaluate / predict to rebuild the same inputs:
    the target column read (also a recognised one), the feature source and the feature budget's cut."""
    cut = spec.max_features
    if spec.max_feature_bytes is not None and getattr(data, "feature_ids", None) is not None \
            and int(data.feature_ids.numel()) < int(getattr(data, "num_feature_ids", 0)):
        cut = int(data.feature_ids.numel())
    source = data.base_feature_source if data.base_feature_source in ("file", "structural") else spec.feature_source
    return spec.replace(target_col=data.target_col if spec.regression else spec.target_col, feature_source=source,
                        max_features=cut, max_feature_bytes=None)


def _prepare_node(args, spec: NodeDataSpec):
    """(data spec, graph, hyperparameters, model) of a node-classification run; every input error raises
    ``ValueError`` here, before anything is written. The model is built once, from ``--seed``."""
    spec = _resumed_feature_cut(args, spec)
    data = sn.load_node_graph(spec)
    if spec.regression:  # (mean, std) of the training targets
        stats = check_targets(spec.label, data)
    else:
        check_classes(spec, data)
        stats = None
    if getattr(args, "max_features", None) is not None and data.base_feature_source == "structural":
        raise ValueError(f"--max-features cuts a features file; {spec.label} has none here (its features "
                         "are structural)")
    spec = _pinned(spec, data)
    hp = social_hparams(args, sn.node_defaults(spec.name or "", data.num_nodes),
                        full_batch=not args.mini_batch)
    if stats is not None:  # a recipe's label input / consistency loss read class labels (given ones are refused)
        hp.update(label_input=False, consistency=0)
    if args.baseline != "none":
        hp["pe_dim"] = 0
    if args.mini_batch and hp.get("label_input"):
        if getattr(args, "label_input", None):
            raise ValueError("--label-input needs full-batch training (not --mini-batch)")
        hp["label_input"] = False  # the partition loader has no masked label input
    if getattr(args, "num_neighbors", None) is not None and args.mini_batch != "neighbor":
        raise ValueError("--num-neighbors goes with --mini-batch neighbor")
    if args.mini_batch == "neighbor":
        if int(hp.get("propagation") or 0) > 0:
            # K propagation hops reach far beyond the layers' sampled hops: trained on 2-hop samples,
            # a K = 10 APPNP head scores 0.27 on GitHub's whole graph (majority class 0.74)
            if getattr(args, "propagation", None) or getattr(args, "propagation_learned", None) \
                    or getattr(args, "propagation_dropout", None):
                raise ValueError("--propagation needs full-batch training or --mini-batch (partitions): "
                                 "sampled neighbourhoods (--mini-batch neighbor) hold only as many hops as "
                                 "--num-neighbors has entries, not the propagation's K")
            hp.update(propagation=0, propagation_learned=False, propagation_dropout=0.0)
        hp["num_neighbors"] = _fanouts(getattr(args, "num_neighbors", None), hp["layers"])
    if args.mini_batch and int(hp.get("consistency") or 0) > 1:
        if getattr(args, "consistency", None):
            raise ValueError("--consistency needs full-batch training (not --mini-batch)")
        hp["consistency"] = 0
    if args.baseline == "none" and getattr(args, "propagation_alpha", None) is not None \
            and not int(hp.get("propagation") or 0):
        raise ValueError("--propagation-alpha needs --propagation K >= 1 (this run propagates no steps)")
    cons = [f"--{k.replace('_', '-')}" for k in ("consistency_weight", "consistency_temperature")
            if getattr(args, k, None) is not None]
    if cons and not int(hp.get("consistency") or 0):
        raise ValueError(f"{', '.join(cons)} needs --consistency S >= 1 (this run has no consistency loss)")
    spec = spec.replace(pe_dim=int(hp.get("pe_dim") or 0), label_input=bool(hp.get("label_input")))
    data = sn.add_node_encodings(data, spec)
    threads_for(data.edge_index.size(1), getattr(args, "threads", None))
    set_seed(args.seed)
    model = build_model(run_model_spec(args.baseline, spec, data, hp))  # option clashes fail here, as input errors
    if stats is not None:  # outputs in the target's units; the loss is on standardised ones
        model = StandardizedRegressor(model, *stats)
    return spec, data, hp, model


def _announce(args, spec: NodeDataSpec, data, model_spec: NodeModelSpec, hp: Dict[str, Any],
              meta: Dict[str, Any]) -> None:
    """The lines a node run starts with: the data and the model, the dataset's own defaults, a raised rate."""
    target = None
    if spec.regression:
        st = meta["target_statistics"]
        target = (f"target {meta['target_col']!r} (train mean {format_value(st['mean'][0])}, "
                  f"std {format_value(st['std'][0])}; standardised for the loss)")
    print(describe_node(spec, data, model_spec, hp, args.mini_batch, target))
    specific = sn.dataset_specific_defaults(spec.name or "")
    if spec.regression:
        specific = {k: v for k, v in specific.items() if k not in CLASSIFICATION_ONLY}
    applied = applied_defaults(specific, args, "node")
    if applied:
        print(applied)
    recipe = sn.node_defaults(spec.name or "", data.num_nodes)
    if hp["lr"] != recipe["lr"] and getattr(args, "lr", None) is None:
        print(f"learning rate {hp['lr']:.3g}: the recipe's {recipe['lr']:g} is for {recipe['epochs']} epochs; "
              f"for {hp['epochs']} it is raised by sqrt({recipe['epochs']}/{hp['epochs']}) (at most "
              f"x{BUDGET_LR_CAP:g}; --lr sets it)")


def _train_node(args, spec: NodeDataSpec, data, hp: Dict[str, Any], model) -> int:
    model_spec = run_model_spec(args.baseline, spec, data, hp)
    regression = spec.regression
    device = resolve_device(getattr(args, "device", None))
    model = model.to(device)
    out = out_dir_for(args, spec.label)
    meta = node_meta(args.mini_batch, spec, data, model_spec, hp, model)
    _announce(args, spec, data, model_spec, hp, meta)
    if args.mini_batch == "neighbor":
        loaders, forward = neighbor_loaders(data, model_spec, hp["num_neighbors"])
    elif args.mini_batch:
        loaders, forward = node_loaders(data, model_spec, seed=args.seed)
    else:
        data = data.to(device)  # one full batch: moved once
        loaders = {s: [data] for s in ("train", "val", "test")}
        forward = sn.node_forward(model_spec)
    if regression:
        forward = regression_forward(forward)
    config = TrainConfig.from_recipe(hp, kind="regression" if regression else "multiclass", seed=args.seed,
                                     resume=args.resume, progress=not args.no_progress)
    res = fit(model, loaders, forward, config, out_dir=out, meta=meta)
    scores = (metrics_line(res) if regression else
              " | ".join(f"{s} acc {res[s]['accuracy']:.4f}" for s in ("train", "val", "test")))
    print(f"{spec.label}: best epoch {res['best_epoch']}/{res['epochs_run']} | {scores}"
          + f" | {res['seconds_per_epoch']:.2f} s/epoch"
          + {None: "", "partition": " (on the partitions)",
             "neighbor": " (on sampled neighbourhoods)"}[args.mini_batch])
    if args.mini_batch:
        # the numbers above come from the partition subgraphs (edges between parts are cut) or
        # sampled neighbourhoods;
        # evaluate / predict / explain read the whole graph, so report that too
        full = regression_metrics(model, meta, data) if regression else node_accuracy(model, meta, data)
        res["full_graph"] = full
        print(f"{spec.label}: whole graph (as evaluate/predict see it) | "
              + (metrics_line(full) if regression else " | ".join(f"{s} acc {v:.4f}" for s, v in full.items())))

        if distributed.is_main():
            write_metrics(out / "metrics.json", res, environment=True)
    print(f"Wrote {out / 'metrics.json'} and {out / 'best.pt'}")
    return 0

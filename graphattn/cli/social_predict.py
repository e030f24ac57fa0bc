"""Social-network checkpoints: rebuild the model and its graph, then ``graphattn evaluate``,
``predict`` and ``explain`` (training is in :mod:`graphattn.cli.social_train`)."""
from __future__ import annotations

import json
import sys
from pathlib import Path


from graphattn.cli.options import message_of
from graphattn.data.download import DataFileError
from graphattn.tasks.social import node as sn
from graphattn.tasks.social.node_model import node_inputs
from graphattn.tasks.social.graph import evaluate_graph
from graphattn.tasks.social.inputs import input_files
from graphattn.tasks.social.node import node_accuracy
from graphattn.tasks.social.node_regression import is_regression, metrics_line, regression_metrics
from graphattn.tasks.social.predict import RELOCATE_KEYS, load_social, node_data, prediction_rows
from graphattn.tasks.social.specs import data_spec_from_dict
from graphattn.tasks.social.viz import draw_ego_attention, last_layer_attention
from graphattn.utils.files import check_output_not_input, out_path, write_csv

__all__ = ["evaluate", "predict", "explain"]


def _load(checkpoint, args=None):
    """Checkpoint, meta and model; ``args``: the command's flags (``--edges`` ... where the run's files
    are now, see :func:`graphattn.tasks.social.predict.relocate`)."""
    moved = {k: getattr(args, k, None) for k in RELOCATE_KEYS} if args is not None else None
    return load_social(checkpoint, moved)


def _social_command(fn):
    """Runs a checkpoint command; missing/changed input files give one clear line, exit 2."""
    import functools

    @functools.wraps(fn)
    def run(args) -> int:
        command = fn.__name__
        smiles_col = getattr(args, "smiles_col", "smiles")
        for flag, val in (("--csv", getattr(args, "csv", None)), ("--smiles", getattr(args, "smiles", None)),
                          ("--smiles-col", smiles_col if smiles_col != "smiles" else None),
                          ("--similarity", getattr(args, "similarity", False) or None)):
            if val:
                print(f"graphattn {command}: {flag} is for molecule checkpoints; {args.checkpoint} is a "
                      "social-network model (it reads the graph it was trained on)", file=sys.stderr)
                return 2
        try:
            return fn(args)
        except (DataFileError, FileNotFoundError, KeyError, ValueError) as exc:
            print(f"graphattn {command}: {message_of(exc)}", file=sys.stderr)
            return 2
        except OSError as exc:  # unreadable input or unwritable output (a folder, read-only, disk full)
            where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
            print(f"graphattn {command}: {where}{exc.strerror or exc}", file=sys.stderr)
            return 2
    return run


@_social_command
def evaluate(args) -> int:
    """Accuracy (regression: MAE, RMSE and R² in the target's units) of a checkpoint on the train/val/test
    split it was trained with."""
    ck, meta, model = _load(args.checkpoint, args)
    if is_regression(meta):
        res = regression_metrics(model, meta, node_data(meta))
        print(metrics_line(res))
        print(json.dumps({"checkpoint": str(args.checkpoint), "task_type": "regression",
                          "target_col": meta["target_col"],
                          "metrics": {s: {k: (None if v != v else v) for k, v in m.items()} for s, m in res.items()}}))
        return 0
    if meta["pipeline"] == "graph":
        res = evaluate_graph(model, meta)
    else:
        res = node_accuracy(model, meta, node_data(meta))
    print(" | ".join(f"{s} acc {v:.4f}" for s, v in res.items()))
    print(json.dumps({"checkpoint": str(args.checkpoint),
                      "accuracy": {s: (None if v != v else v) for s, v in res.items()}}))
    return 0


@_social_command
def predict(args) -> int:
    """Class probabilities per node (or per graph) as a CSV at --out (default: ``predictions.csv``
    beside the checkpoint; ``--out -``: standard output)."""
    ck, meta, model = _load(args.checkpoint, args)
    out = ("-" if args.out == "-" else out_path(args.out, "predictions.csv") if args.out  # "-": stdout
           else Path(args.checkpoint).with_name("predictions.csv"))

    if out != "-":
        check_output_not_input(out, {"the checkpoint": args.checkpoint,
                                     **{"an input file of the run": p for p in input_files(data_spec_from_dict(meta["data"]))
                                        if p}})
    rows = [{k: _cell(k, v) for k, v in r.items()} for r in prediction_rows(model, meta)]
    write_csv(out, list(rows[0]), rows)  # makes the folder
    print(f"Wrote {len(rows)} predictions to " + ("standard output" if out == "-" else str(out)),
          file=sys.stderr if out == "-" else sys.stdout)
    return 0


def _cell(key: str, v):
    """A CSV cell of a prediction row: probabilities with 6 decimals, values with 8 significant digits."""
    if not isinstance(v, float):
        return v
    return format(v, ".6f" if key.startswith("prob_") else ".8g")


def _node_row(data, node: int) -> int:
    """Row of the node whose id (in the input files; the row itself without ids) is ``node``."""
    ids = getattr(data, "node_id", None)
    if ids is None:
        if not 0 <= node < data.num_nodes:
            raise ValueError(f"--node must be in [0, {data.num_nodes}), got {node}")
        return node
    in_range = -2 ** 63 <= node < 2 ** 63  # node ids are int64
    hit = (ids == node).nonzero().view(-1) if in_range else ids.new_zeros(0)
    if hit.numel() == 0:
        raise ValueError(f"--node {node} is not a node id of this graph (ids {int(ids.min())}..{int(ids.max())}, "
                         f"{data.num_nodes} nodes)")
    return int(hit[0])


#: nodes labelled in an ego-graph picture besides the centre, when --top-k is not given
DEFAULT_TOP_K = 10


@_social_command
def explain(args) -> int:
    """Ego-graph of --node with edges coloured by last-layer attention, as a PNG at --out; only
    the centre and the --top-k nodes it attends to most are labelled (default 10)."""
    ck, meta, model = _load(args.checkpoint, args)
    if meta["pipeline"] != "node":
        raise ValueError("ego-graph pictures need a node-classification checkpoint")
    if meta["model"]["class"] != "NodeClassifier":
        raise ValueError("attention pictures need our model (not a --baseline checkpoint)")
    if args.hops < 1:
        raise ValueError(f"--hops must be >= 1, got {args.hops}")
    if getattr(args, "task", None) is not None:
        raise ValueError("--task is for molecule checkpoints (a task's atom attribution); a social-network "
                         "picture shows the predicted class of every node")
    top_k = DEFAULT_TOP_K if getattr(args, "top_k", None) is None else args.top_k
    if top_k < 0:
        raise ValueError(f"--top-k must be >= 0, got {top_k}")

    data = node_data(meta)
    if args.node is None:  # the first node (row 0), whatever its id in the files
        node = 0
        node_id = int(data.node_id[0]) if getattr(data, "node_id", None) is not None else 0
    else:
        node_id = args.node
        node = _node_row(data, node_id)
    regression = is_regression(meta)
    logits, edge_index, alpha = last_layer_attention(model.model if regression else model, data,
                                                     node_inputs(data))
    if regression:  # the values in the target's units (the inner model's are standardised)
        logits = sn.node_logits(model, meta["model"], data)
    out = (out_path(args.out, f"explain_node{node_id}.png") if args.out
           else Path(args.checkpoint).with_name(f"explain_node{node_id}.png"))
    if not out.suffix:
        out = out.with_suffix(".png")
    info = draw_ego_attention(data, node, edge_index, alpha, logits, meta["class_names"], out,
                              hops=args.hops, top_k=top_k, value_name=meta["target_col"] if regression else None)
    label = "unlabelled" if info["label"] is None else f"label {info['label']:.6g}" if regression \
        else f"label {info['label']}"
    said = (f"predicted {meta['target_col']} {info['predicted']:.6g}" if regression
            else f"predicted {info['predicted']} (p={info['prob']:.3f})")
    print(f"Node {node_id}: {said}, {label}; "
          f"{info['nodes']} nodes / {info['edges']} edges drawn"
          + (f" (of the {info['ego_nodes']} nodes within {args.hops} hops)"
             if info["ego_nodes"] > info["nodes"] else "")
          + f", {len(info['labelled'])} labelled; "
          + (f"top attended neighbour {info['top_source']} (α={info['top_alpha']:.3f})"
             if info["top_source"] is not None else "no neighbours to attend to (isolated node)")
          + f". Wrote {out}")
    return 0

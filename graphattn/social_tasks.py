"""Social-network tasks behind the CLI: node classification on one graph (karate, Cora, the
MUSAE/FEATHER sets, any graph in their release format) and graph classification on sets of
graphs (IMDB, REDDIT, COLLAB, ... in the DGCNN/GIN text format, k-fold cross-validation).

``graphattn train karate`` trains our :class:`~graphattn.NodeClassifier` full-batch,
``--mini-batch`` switches to partition mini-batches (:mod:`graphattn.large_graph`),
``--baseline gcn|gat|transformer`` trains a PyG model of the same depth and width instead,
``imdb-binary --folds 10`` trains a :class:`~graphattn.GraphClassifier` per fold. Every run
goes through the one loop :func:`graphattn.train.fit` and writes ``OUT/metrics.json`` and
``OUT/best.pt``; the checkpoint's ``meta`` holds everything needed to rebuild the data and
the model (``pipeline``, ``model``, ``data``, ``class_names``) for evaluate/predict/explain.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any, Dict, Optional

import torch

from . import social_node as sn
from .social_graph import GRAPH_DATASETS

__all__ = ["DATASETS", "handles", "add_train_arguments", "train", "evaluate", "predict", "explain",
           "build_model"]

DATASETS = {**{n: "node" for n in sn.NODE_DATASETS}, **{n: "graph" for n in GRAPH_DATASETS}}
SOCIAL_BASELINES = ("none", "gcn", "gat", "transformer")
_ALIASES = {"facebook_page_page": "facebook", "lastfm": "lastfm_asia", "git": "github",
            "github_developers": "github", "deezer": "deezer_europe", "twitch-en": "twitch-engb",
            "twitch-pt": "twitch-ptbr", "imdb": "imdb-binary", "reddit": "reddit-binary",
            "karate_club": "karate", "karateclub": "karate"}


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _key(name: Optional[str]) -> Optional[str]:
    """Canonical dataset name (``Twitch_DE`` -> ``twitch-de``, ``LastFM-Asia`` -> ``lastfm_asia``)."""
    if name is None:
        return None
    from .data.social import _ALIASES as node_aliases
    from .data.tu import _GRAPH_ALIASES as graph_aliases

    table = {_norm(a): _norm(b) for a, b in {**node_aliases, **graph_aliases, **_ALIASES}.items()}
    n = _norm(name)
    n = table.get(n, n)
    return next((k for k in DATASETS if _norm(k) == n), None)


def handles(args) -> bool:
    """True when the train command is ours: a social dataset name, --edges or --tu-text."""
    return bool(getattr(args, "edges", None) or getattr(args, "tu_text", None) or getattr(args, "target", None)
                or _key(args.dataset) in DATASETS)


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("social networks")
    g.add_argument("--edges", default=None, help="edges CSV of a graph in the MUSAE/FEATHER release format")
    g.add_argument("--target", default=None, help="target CSV (node id column + label column) for --edges")
    g.add_argument("--features", default=None, help="optional features JSON {node id: [feature ids]} for --edges")
    g.add_argument("--target-col", default=None, help="label column of --target (default: auto-detected)")
    g.add_argument("--tu-text", default=None, help="graph classification file in the DGCNN/GIN text format")
    g.add_argument("--folds", type=int, default=None,
                   help="k-fold cross-validation for graph classification (10 uses the dataset's "
                        "10fold_idx files when present); reports mean ± std")
    if "--baseline" not in parser._option_string_actions:  # shared with the molecule tasks
        g.add_argument("--baseline", default="none",
                       help="train a PyG model of the same depth and width instead of ours: "
                            "social: gcn | gat | transformer (GCNConv, GATConv, TransformerConv); "
                            "molecules: gine | gat")
    g.add_argument("--mini-batch", action="store_true",
                   help="node classification on partition mini-batches (graphs too large for full batch)")
    g.add_argument("--attn-dropout", type=float, default=None, help="node sets: dropout on attention weights")
    g.add_argument("--input-dropout", type=float, default=None,
                   help="node sets: dropout on the input features (default: --dropout)")
    g.add_argument("--propagation", type=int, default=None,
                   help="node sets: K steps of APPNP propagation of our logits (0 = none)")
    g.add_argument("--propagation-alpha", type=float, default=None, help="node sets: APPNP teleport a")
    g.add_argument("--propagation-learned", default=None, action=argparse.BooleanOptionalAction,
                   help="node sets: learn the K+1 hop weights of the propagation (GPR-GNN), "
                        "initialised to APPNP's")
    g.add_argument("--gcn-weight", type=float, default=None,
                   help="node sets: weight w in [0, 1) of a GCN branch next to our attention (SGFormer)")
    g.add_argument("--gcn-layers", type=int, default=None, help="node sets: GCN layers of that branch (default 1)")
    g.add_argument("--propagation-dropout", type=float, default=None,
                   help="node sets: edge dropout on Â in each training propagation step (APPNP)")
    g.add_argument("--self-loops", default=None, action=argparse.BooleanOptionalAction,
                   help="node sets: each node also attends to itself")
    g.add_argument("--label-input", default=None, action=argparse.BooleanOptionalAction,
                   help="node sets: training labels as input columns (UniMP), for every model alike")


# ----------------------------------------------------------------------------- train
def _hparams(args, defaults: Dict[str, Any]) -> Dict[str, Any]:
    hp = dict(defaults)
    for name in ("epochs", "lr", "hidden", "layers", "dropout", "global_tokens", "pe_dim",
                 "patience", "weight_decay", "attn_dropout", "input_dropout", "propagation",
                 "propagation_alpha", "propagation_learned", "gcn_weight", "gcn_layers", "propagation_dropout",
                 "self_loops", "label_input", "local_mpnn", "readout"):
        val = getattr(args, name, None)
        if val is not None:  # --weight-decay defaults to None, so an explicit 0 is honoured
            hp[name] = val
    if getattr(args, "layers", None) is not None:  # an explicit --layers is every model's depth
        hp["baseline_layers"] = None
    if getattr(args, "readout", None) is not None:  # ... and an explicit --readout every model's readout
        hp["baseline_readout"] = None
    hp["heads"] = args.heads
    return hp


def _threads_for(num_edges: int) -> None:
    """One intra-op thread for small graphs: thread start-up costs more than the work (and
    on a busy machine several threads per process make a 34-node epoch 50x slower)."""
    if num_edges < 20_000:
        torch.set_num_threads(1)


def _out_dir(args, name: str) -> Path:
    return Path(args.out) if args.out else Path("runs") / name


def train(args) -> int:
    """``graphattn train`` for social datasets; prints one line per epoch and a summary."""
    from .data.download import DataFileError

    name = _key(args.dataset)
    graph_level = bool(args.tu_text) or (name is not None and not args.edges and DATASETS[name] == "graph")
    try:  # everything that depends on the user's input; training errors keep their traceback
        _check_inputs(args)
        if (args.baseline or "none") not in SOCIAL_BASELINES:
            raise ValueError(f"--baseline must be one of {', '.join(SOCIAL_BASELINES)} for social networks, "
                             f"got {args.baseline!r}")
        if args.features and not args.edges:
            raise ValueError("--features goes with --edges/--target (named datasets find their own files)")
        if getattr(args, "descriptors", None):
            raise ValueError("--descriptors is a molecule option (RDKit descriptors of SMILES)")
        if getattr(args, "ensemble", None) not in (None, 1):
            raise ValueError("--ensemble is a molecule option (averaged probabilities of N models)")
        if getattr(args, "readout", None) and not graph_level:
            raise ValueError("--readout is for graph-level tasks (molecules, graph sets), not node classification")
        if getattr(args, "local_mpnn", None) and not graph_level:
            raise ValueError("--local-mpnn is a molecule / graph-set option (node sets: see --gcn-weight, "
                             "--propagation)")
        if graph_level:
            if args.mini_batch:
                raise ValueError("--mini-batch is for node classification on one large graph")
            from .social_graph import prepare_graph

            job = prepare_graph(args, name)
        else:
            if args.folds:
                raise ValueError("--folds is for graph classification (a TU dataset or --tu-text)")
            job = _prepare_node(args, sn.data_spec(args, None if args.edges else name))
    except (DataFileError, KeyError, ValueError, FileNotFoundError) as exc:
        hint = " (on the command line: --target-col NAME)" if "target_col" in _message(exc) else ""
        print(f"graphattn train: {_message(exc)}{hint}", file=sys.stderr)
        return 2
    if graph_level:
        from .social_graph import run_graph

        return run_graph(args, *job)
    return _train_node(args, *job)


def _message(exc: BaseException) -> str:
    """An exception's message; a KeyError's without the quotes ``str`` adds."""
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        return str(exc.args[0])
    return str(exc)


def _check_inputs(args) -> None:
    """ValueError for options that contradict each other (instead of silently ignoring one)."""
    given = [f for f, v in (("a dataset name", args.dataset), ("--edges", args.edges),
                            ("--tu-text", args.tu_text)) if v]
    if len(given) > 1:
        raise ValueError(f"give one input: {' or '.join(given)}, not both")
    if args.edges and not args.target:
        raise ValueError("--edges needs --target (the node id + label CSV)")
    for flag, val in (("--target", args.target), ("--target-col", args.target_col)):
        if val and not args.edges:
            raise ValueError(f"{flag} goes with --edges (named datasets and --tu-text bring their own labels)")


def _prepare_node(args, spec: Dict[str, Any]):
    data = sn.load_node_data(spec)
    present = data.y[data.y >= 0].unique()
    if present.numel() < 2:
        raise ValueError(f"{spec['display']}: every labelled node has the same class "
                         f"({[data.class_names[int(c)] for c in present]}); classification needs at least two")
    if data.base_feature_source in ("file", "structural"):  # evaluate/predict rebuild the same inputs
        spec["feature_source"] = data.base_feature_source
    hp = _hparams(args, sn.node_defaults(spec["display"], data.num_nodes))
    if args.baseline != "none":
        hp["pe_dim"] = 0
    if args.mini_batch and hp.get("label_input"):
        if getattr(args, "label_input", None):
            raise ValueError("--label-input needs full-batch training (not --mini-batch)")
        hp["label_input"] = False  # the partition loader has no masked label input
    if hp.get("pe_dim") or hp.get("label_input"):
        spec["pe_dim"], spec["label_input"] = hp.get("pe_dim", 0), bool(hp.get("label_input"))
        data = sn.load_node_data(spec)
    build_model(sn.node_model_spec(args.baseline, data, hp))  # option clashes fail here, as input errors
    return spec, data, hp


def _train_node(args, spec: Dict[str, Any], data, hp: Dict[str, Any]) -> int:
    from .train import fit, set_seed

    _threads_for(data.edge_index.size(1))
    set_seed(args.seed)
    model_spec = sn.node_model_spec(args.baseline, data, hp)
    model = build_model(model_spec)
    out = _out_dir(args, spec["display"])
    meta = {"pipeline": "node", "model": model_spec, "data": spec, "class_names": list(data.class_names),
            "feature_source": data.feature_source, "hparams": hp}
    print(sn.describe_node(spec, data, model_spec, hp, args.mini_batch))
    if args.mini_batch:
        from .large_graph import node_loaders

        loaders, forward = node_loaders(data, model_spec, seed=args.seed)
    else:
        loaders = {s: [data] for s in ("train", "val", "test")}
        forward = sn.node_forward(model_spec)
    res = fit(model, loaders, forward, kind="multiclass", epochs=hp["epochs"], lr=hp["lr"],
              weight_decay=hp["weight_decay"], patience=hp.get("patience"), seed=args.seed,
              out_dir=out, resume=args.resume, meta=meta, progress=not args.no_progress)
    acc = {s: res[s]["accuracy"] for s in ("train", "val", "test")}
    print(f"{spec['display']}: best epoch {res['best_epoch']}/{res['epochs_run']} | "
          + " | ".join(f"{s} acc {acc[s]:.4f}" for s in acc)
          + f" | {res['seconds_per_epoch']:.2f} s/epoch" + (" (on the partitions)" if args.mini_batch else ""))
    if args.mini_batch:
        # the numbers above come from the partition subgraphs (edges between parts are cut);
        # evaluate / predict / explain read the whole graph, so report that too
        full = _node_accuracy(model, meta, data)
        res["full_graph"] = full
        print(f"{spec['display']}: whole graph (as evaluate/predict see it) | "
              + " | ".join(f"{s} acc {v:.4f}" for s, v in full.items()))
        from . import distributed
        from .train import write_metrics

        if distributed.is_main():
            write_metrics(out / "metrics.json", res)
    print(f"Wrote {out / 'metrics.json'} and {out / 'best.pt'}")
    return 0


def build_model(model_spec: Dict[str, Any]) -> torch.nn.Module:
    """Rebuild a model from the ``meta["model"]`` of a checkpoint."""
    from .baselines import ConvBaseline
    from .models import GraphClassifier, NodeClassifier

    classes = {"NodeClassifier": NodeClassifier, "GraphClassifier": GraphClassifier,
               "ConvBaseline": ConvBaseline}
    if model_spec["class"] not in classes:
        raise ValueError(f"unknown model class {model_spec['class']!r}")
    return classes[model_spec["class"]](**model_spec["kwargs"])


# ----------------------------------------------------------------------------- evaluate / predict
def _load(checkpoint: str):
    from .train import load_checkpoint

    ck = load_checkpoint(checkpoint)
    meta = ck["meta"]
    model = build_model(meta["model"])
    model.load_state_dict(ck["model"])
    model.eval()
    return ck, meta, model


def _node_data(meta: Dict[str, Any]):
    """The graph of a node checkpoint, checked against what the model was trained on."""
    from .data.rawio import canonical_label

    data = sn.load_node_data(meta["data"])
    # older versions named some classes differently ("1.0", "true"): compare canonical names
    if [canonical_label(n) for n in data.class_names] != [canonical_label(n) for n in meta["class_names"]]:
        raise ValueError(f"the labels now read ({list(data.class_names)}) differ from the classes the model "
                         f"was trained on ({list(meta['class_names'])}): the target file changed")
    want = meta["model"]["kwargs"].get("in_channels")
    if want is not None and data.num_features != want:
        raise ValueError(f"the node features now built have {data.num_features} columns, the model was "
                         f"trained on {want}: the input files changed")
    return data


def _social_command(fn):
    """Runs a checkpoint command; missing/changed input files give one clear line, exit 2."""
    import functools

    @functools.wraps(fn)
    def run(args) -> int:
        from .data.download import DataFileError

        command = fn.__name__
        for flag, val in (("--csv", getattr(args, "csv", None)), ("--smiles", getattr(args, "smiles", None))):
            if val:
                print(f"graphattn {command}: {flag} is for molecule checkpoints; {args.checkpoint} is a "
                      "social-network model (it reads the graph it was trained on)", file=sys.stderr)
                return 2
        try:
            return fn(args)
        except (DataFileError, FileNotFoundError, KeyError, ValueError) as exc:
            print(f"graphattn {command}: {_message(exc)}", file=sys.stderr)
            return 2
    return run


def _node_accuracy(model, meta: Dict[str, Any], data) -> Dict[str, float]:
    logits = sn.node_logits(model, meta["model"], data)
    res = {}
    for s in ("train", "val", "test"):
        m = data[f"{s}_mask"] & (data.y >= 0)
        res[s] = float((logits[m].argmax(-1) == data.y[m]).float().mean()) if bool(m.any()) else float("nan")
    return res


@_social_command
def evaluate(args) -> int:
    """Accuracy of a checkpoint on the train/val/test split it was trained with."""
    ck, meta, model = _load(args.checkpoint)
    if meta["pipeline"] == "graph":
        from .social_graph import evaluate_graph

        res = evaluate_graph(model, meta)
    else:
        res = _node_accuracy(model, meta, _node_data(meta))
    print(" | ".join(f"{s} acc {v:.4f}" for s, v in res.items()))
    print(json.dumps({"checkpoint": str(args.checkpoint),
                      "accuracy": {s: (None if v != v else v) for s, v in res.items()}}))
    return 0


@_social_command
def predict(args) -> int:
    """Class probabilities per node (or per graph) as a CSV at --out."""
    ck, meta, model = _load(args.checkpoint)
    names = meta["class_names"]
    out = Path(args.out) if args.out else Path(args.checkpoint).with_name("predictions.csv")
    if out.is_dir():
        out = out / "predictions.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    if meta["pipeline"] == "graph":
        from .social_graph import predict_graph

        rows = predict_graph(model, meta)
    else:
        data = _node_data(meta)
        prob = torch.softmax(sn.node_logits(model, meta["model"], data), -1)
        split = ["train" if a else "val" if b else "test" if c else "" for a, b, c in
                 zip(data.train_mask.tolist(), data.val_mask.tolist(), data.test_mask.tolist())]
        ids = data.node_id.tolist() if getattr(data, "node_id", None) is not None else range(data.num_nodes)
        rows = [{"node": i, "node_id": nid, "split": split[i],
                 "label": names[int(data.y[i])] if int(data.y[i]) >= 0 else "",  # "" = unlabelled
                 "predicted": names[int(prob[i].argmax())],
                 **{f"prob_{n}": f"{float(p):.6f}" for n, p in zip(names, prob[i])}}
                for i, nid in enumerate(ids)]
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"Wrote {len(rows)} predictions to {out}")
    return 0


def _node_row(data, node: int) -> int:
    """Row of the node whose id (in the input files; the row itself without ids) is ``node``."""
    ids = getattr(data, "node_id", None)
    if ids is None:
        if not 0 <= node < data.num_nodes:
            raise ValueError(f"--node must be in [0, {data.num_nodes}), got {node}")
        return node
    hit = (ids == node).nonzero().view(-1)
    if hit.numel() == 0:
        raise ValueError(f"--node {node} is not a node id of this graph (ids {int(ids.min())}..{int(ids.max())}, "
                         f"{data.num_nodes} nodes)")
    return int(hit[0])


@_social_command
def explain(args) -> int:
    """Ego-graph of --node with edges coloured by last-layer attention, as a PNG at --out."""
    ck, meta, model = _load(args.checkpoint)
    if meta["pipeline"] != "node":
        raise ValueError("ego-graph pictures need a node-classification checkpoint")
    if meta["model"]["class"] != "NodeClassifier":
        raise ValueError("attention pictures need our model (not a --baseline checkpoint)")
    if args.hops < 1:
        raise ValueError(f"--hops must be >= 1, got {args.hops}")
    from .viz_social import draw_ego_attention, last_layer_attention

    data = _node_data(meta)
    if args.node is None:  # the first node (row 0), whatever its id in the files
        node = 0
        node_id = int(data.node_id[0]) if getattr(data, "node_id", None) is not None else 0
    else:
        node_id = args.node
        node = _node_row(data, node_id)
    logits, edge_index, alpha = last_layer_attention(model, data, sn.node_inputs(data))
    out = Path(args.out) if args.out else Path(args.checkpoint).with_name(f"explain_node{node_id}.png")
    if out.is_dir():
        out = out / f"explain_node{node_id}.png"
    elif not out.suffix:
        out = out.with_suffix(".png")
    info = draw_ego_attention(data, node, edge_index, alpha, logits, meta["class_names"], out,
                              hops=args.hops)
    print(f"Node {node_id}: predicted {info['predicted']} (p={info['prob']:.3f}), label {info['label']}; "
          f"{info['nodes']} nodes / {info['edges']} edges drawn; "
          f"top attended neighbour {info['top_source']} (α={info['top_alpha']:.3f}). Wrote {out}")
    return 0

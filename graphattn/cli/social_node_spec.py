"""The node-classification (or node-regression) run of ``graphattn train`` in words and as a data spec: its
task type and the options that fit it, the spec of a named set or of ``--edges/--target[/--features]`` files
(with the ``--max-features`` cut), and the lines a run starts with."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from graphattn.cli.options import check_objective
from graphattn.data.download import data_root, files_sha256
from graphattn.tasks.social import node as sn
from graphattn.tasks.social.inputs import input_files
from graphattn.tasks.social.node_model import NodeModelSpec, node_model_spec
from graphattn.tasks.social.node_regression import statistics_meta
from graphattn.tasks.social.specs import NodeDataSpec

__all__ = ["node_data_spec", "feature_cut", "describe_node", "check_task_type", "CLASSIFICATION_ONLY", "check_classes",
           "run_model_spec", "node_meta"]

#: node options that read class labels (the label input's one-hot columns, the consistency loss's
#: sharpened class distribution): refused with ``--task-type regression``
CLASSIFICATION_ONLY = ("label_input", "consistency", "consistency_weight", "consistency_temperature")


def check_task_type(args, graph_level: bool) -> str:
    """The run's task type (``--task-type``, default classification), once ``--loss`` / ``--metric``
    and the node options fit it (ValueError naming the option otherwise). Graph sets are classification
    only."""
    task_type = getattr(args, "task_type", None) or "classification"
    regression = task_type == "regression"
    if regression and graph_level:
        raise ValueError("--task-type regression: graph sets are classification only (their graph labels are "
                         "classes); regression runs on node targets (--edges/--target, or a MUSAE set with "
                         "--target-col)")
    check_objective(args, task_type, "regression" if regression else "multiclass")
    given = [k for k in CLASSIFICATION_ONLY if getattr(args, k, None) not in (None, False)]
    if regression and given:
        raise ValueError(f"{', '.join('--' + k.replace('_', '-') for k in given)}: classification option(s) "
                         "(they read class labels), not for --task-type regression")
    if regression and not args.edges and getattr(args, "target_col", None) is None:
        raise ValueError(f"--task-type regression on {args.dataset}: name the numeric column of its target file "
                         "with --target-col (e.g. views or days for the Twitch sets)")
    return task_type


def describe_node(spec: NodeDataSpec, data, model_spec: NodeModelSpec, hp: Dict[str, Any],
                  mini_batch: Optional[str] = None, target: Optional[str] = None) -> str:
    """The two lines a node run starts with: the graph (sizes, classes or the regression ``target``,
    features, split), and the model with its training (layers, width, heads, dropout, batching, epochs,
    learning rate)."""
    kw = model_spec.kwargs
    what = (f"PyG {kw['kind']} baseline" if model_spec.name == "ConvBaseline" else
            f"NodeClassifier, {kw['num_global_tokens']} global tokens, PE {kw['pe_dim']}"
            + (", self-loops" if kw.get("self_loops") else "")
            + (f", {'learned (GPR) ' if kw.get('propagation_learned') else 'APPNP '}propagation "
               f"K={kw['propagation']} a={kw['propagation_alpha']}" if kw.get("propagation") else "")
            + (f", edge dropout {kw['propagation_dropout']}" if kw.get("propagation_dropout") else "")
            + (f", GCN branch w={kw['gcn_weight']}" if kw.get("gcn_weight") else "")
            + (f" ({kw['gcn_layers']} layers)" if kw.get("gcn_layers", 1) > 1 else ""))
    counts = [int(data[f"{s}_mask"].sum()) for s in ("train", "val", "test")]
    batching = {None: "full batch", "partition": "mini-batch (partitions)",
                "neighbor": f"mini-batch (neighbour sampling {hp.get('num_neighbors')})"}[mini_batch or None]
    return (f"{spec.label}: {data.num_nodes:,} nodes, {data.edge_index.size(1) // 2:,} undirected edges, "
            f"{target or f'{len(data.class_names)} classes'}, {data.num_features} features ({data.feature_source}); "
            f"split {counts[0]}/{counts[1]}/{counts[2]}\n"
            f"model: {what}, {kw['num_layers']} layers x {hp['hidden']} hidden, {hp['heads']} heads, "
            f"dropout {hp['dropout']}; {batching}, "
            + (f"consistency loss S={cons.samples} w={cons.weight} T={cons.temperature}, "
               if (cons := model_spec.consistency) else "") +
            f"{hp['epochs']} epochs, lr {hp['lr']}, weight decay {hp['weight_decay']}")


def feature_cut(text) -> Tuple[Optional[int], Optional[int]]:
    """``--max-features N | all`` -> the data spec's feature cut ``(max_features, max_feature_bytes)``:
    a fixed count, or the default budget (1 GiB for the dense ``x``, resolved to a count when the graph is
    read so a checkpoint rebuilds the same columns); ``all``: neither."""
    if text is None or str(text).lower() == "auto":
        return None, sn.FEATURE_BYTES
    if str(text).lower() == "all":
        return None, None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"--max-features must be a positive integer or 'all', got {text!r}")
    return n, None


def node_data_spec(args, name: Optional[str]) -> NodeDataSpec:
    """Data spec of a ``graphattn train`` command (named dataset or --edges/--target files)."""
    max_features, max_feature_bytes = feature_cut(getattr(args, "max_features", None))
    spec = NodeDataSpec(split_seed=int(args.seed), max_features=max_features, max_feature_bytes=max_feature_bytes)
    if name in ("cora", "citeseer", "pubmed", "karate") and max_features is not None:
        raise ValueError(f"--max-features cuts a MUSAE features file; {name} does not read one")
    if getattr(args, "task_type", None) == "regression":  # the column is read as numbers, the split random
        spec = spec.replace(task_type="regression", target_col=args.target_col)
    if name is not None:
        return spec.replace(name=name, display=name, root=str(data_root().resolve()))
    if not args.target:
        raise ValueError("--edges needs --target (the CSV with node ids and labels)")
    paths = {k: getattr(args, k) for k in ("edges", "target", "features")}
    for k, p in paths.items():
        if p is not None and not Path(p).expanduser().is_file():
            raise ValueError(f"--{k} {p}: no such file")
    spec = spec.replace(name=None, display=Path(args.edges).name.split(".")[0].replace("_edges", ""),
                        target_col=args.target_col, id_col=getattr(args, "id_col", None),
                        **{k: (str(Path(p).expanduser().resolve()) if p else None) for k, p in paths.items()})
    return spec.replace(sha256=files_sha256(input_files(spec)))  # evaluate warns, --resume refuses, when they change


def check_classes(spec: NodeDataSpec, data) -> None:
    """ValueError unless a classification graph has two classes and a validation and a test split."""
    present = data.y[data.y >= 0].unique()
    if present.numel() < 2:
        raise ValueError(f"{spec.label}: every labelled node has the same class "
                         f"({[data.class_names[int(c)] for c in present]}); classification needs at least two")
    if not spec.name and not (bool(data.val_mask.any()) and bool(data.test_mask.any())):
        # a user's file (at training time only: checkpoints of such graphs still load)
        raise ValueError(f"{spec.target}: the stratified split leaves the validation or test set "
                         f"empty ({int((data.y >= 0).sum())} labelled nodes in {len(data.class_names)} "
                         "classes; the split is per class, so each class needs a few nodes) — does the "
                         f"label column ({spec.target_col or 'auto-detected'}) hold class labels? "
                         "(numeric targets: --task-type regression)")


def run_model_spec(baseline: str, spec: NodeDataSpec, data, hp: Dict[str, Any]) -> NodeModelSpec:
    """The model recipe of a node run: one output per class, or per target of a regression run."""
    outputs = len(data.task_names) if spec.regression else None
    return node_model_spec(baseline, data, hp, outputs)


def node_meta(mini_batch: Optional[str], spec: NodeDataSpec, data, model_spec: NodeModelSpec,
              hp: Dict[str, Any], model) -> Dict[str, Any]:
    """The checkpoint's meta: what evaluate/predict/explain rebuild the data and the model from."""
    meta = {"pipeline": "node", "model": model_spec.to_dict(), "data": spec.to_dict(), "class_names": list(data.class_names),
            "feature_source": data.feature_source, "hparams": hp,
            # full batch, partitions or sampled neighbourhoods: a resume must not switch it
            "batching": {"partition": "partitions", "neighbor": "neighbor"}.get(mini_batch or "", "full")}
    if spec.regression:
        meta.update(task_type="regression", target_col=data.target_col,
                    target_statistics=statistics_meta(model, data.task_names))
    return meta

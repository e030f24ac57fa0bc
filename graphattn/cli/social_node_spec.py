"""The node-classification run of ``graphattn train`` in words and as a data spec: the spec of a named
set or of ``--edges/--target[/--features]`` files (with the ``--max-features`` cut), and the lines a run
starts with."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from graphattn.data.download import data_root, files_sha256
from graphattn.tasks.social import node as sn
from graphattn.tasks.social.inputs import input_files

__all__ = ["node_data_spec", "feature_cut", "describe_node"]


def describe_node(spec: Dict[str, Any], data, model_spec: Dict[str, Any], hp: Dict[str, Any],
                  mini_batch: Optional[str] = None) -> str:
    """The two lines a node run starts with: the graph (sizes, classes, features, split), and the model
    with its training (layers, width, heads, dropout, batching, epochs, learning rate)."""
    kw = model_spec["kwargs"]
    what = (f"PyG {kw['kind']} baseline" if model_spec["class"] == "ConvBaseline" else
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
    return (f"{spec['display']}: {data.num_nodes:,} nodes, {data.edge_index.size(1) // 2:,} undirected edges, "
            f"{len(data.class_names)} classes, {data.num_features} features ({data.feature_source}); "
            f"split {counts[0]}/{counts[1]}/{counts[2]}\n"
            f"model: {what}, {kw['num_layers']} layers x {hp['hidden']} hidden, {hp['heads']} heads, "
            f"dropout {hp['dropout']}; {batching}, "
            + ("consistency loss S={samples} w={weight} T={temperature}, ".format(**model_spec["consistency"])
               if model_spec.get("consistency") else "") +
            f"{hp['epochs']} epochs, lr {hp['lr']}, weight decay {hp['weight_decay']}")


def feature_cut(text) -> Dict[str, Any]:
    """``--max-features N | all`` -> the data spec's feature cut: ``max_features`` (a fixed
    count) or ``max_feature_bytes`` (the default: a 1 GiB budget for the dense ``x``,
    resolved to a count when the graph is read so a checkpoint rebuilds the same columns)."""
    if text is None or str(text).lower() == "auto":
        return {"max_feature_bytes": sn.FEATURE_BYTES}
    if str(text).lower() == "all":
        return {}
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"--max-features must be a positive integer or 'all', got {text!r}")
    return {"max_features": n}


def node_data_spec(args, name: Optional[str]) -> Dict[str, Any]:
    """Data spec of a ``graphattn train`` command (named dataset or --edges/--target files)."""
    spec: Dict[str, Any] = {"level": "node", "split": list(sn.SPLIT), "split_seed": int(args.seed), "pe_dim": 0}
    spec.update(feature_cut(getattr(args, "max_features", None)))
    if name in ("cora", "citeseer", "pubmed", "karate") and "max_features" in spec:
        raise ValueError(f"--max-features cuts a MUSAE features file; {name} does not read one")
    if name is not None:
        spec.update(name=name, display=name, root=str(data_root().resolve()))
        return spec
    if not args.target:
        raise ValueError("--edges needs --target (the CSV with node ids and labels)")
    paths = {k: getattr(args, k) for k in ("edges", "target", "features")}
    for k, p in paths.items():
        if p is not None and not Path(p).expanduser().is_file():
            raise ValueError(f"--{k} {p}: no such file")
    spec.update(name=None, display=Path(args.edges).name.split(".")[0].replace("_edges", ""),
                target_col=args.target_col, id_col=getattr(args, "id_col", None),
                **{k: (str(Path(p).expanduser().resolve()) if p else None) for k, p in paths.items()})
    spec["sha256"] = files_sha256(input_files(spec))  # evaluate warns, --resume refuses, when they change
    return spec

"""A social-network checkpoint → its model and graph, and one prediction row per node (or per graph)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch
from torch import nn

from graphattn.tasks.social import node as sn
from graphattn.tasks.social.graph import predict_graph
from graphattn.tasks.social.node_regression import build_node_model, is_regression
from graphattn.tasks.social.specs import DataSpec, NodeDataSpec, data_spec_from_dict
from graphattn.train.checkpoint import load_checkpoint

__all__ = ["RELOCATE_KEYS", "load_social", "node_data", "prediction_rows", "splits_and_ids"]

#: the input files of a run that evaluate / predict / explain can be told have moved
RELOCATE_KEYS = ("edges", "target", "features", "tu_text")


def relocate(spec: DataSpec, moved: Mapping[str, Optional[str]]) -> DataSpec:
    """The data spec of a run pointed at its input files' new places (``moved``: key of
    :data:`RELOCATE_KEYS` → path); the recorded sha256 still checks their contents (a warning when they
    differ). ``ValueError`` for a file the run did not use, or one that does not exist."""
    changes = {}
    for key in RELOCATE_KEYS:
        path = moved.get(key)
        if not path:
            continue
        flag = "--" + key.replace("_", "-")
        if getattr(spec, key) is None:
            what = ("a named dataset" if spec.name else "--edges/--target without --features: structural "
                    "features" if key == "features" and spec.edges else "other inputs")
            raise ValueError(f"{flag}: this model was not trained on {flag} files ({what}); nothing to relocate")
        if not Path(path).expanduser().exists():
            raise ValueError(f"{flag} {path}: no such file")
        changes[key] = str(Path(path).expanduser().resolve())
    return spec.replace(**changes)


def load_social(checkpoint, moved: Optional[Mapping[str, Optional[str]]] = None
                ) -> Tuple[Dict[str, Any], Dict[str, Any], nn.Module]:
    """``(checkpoint, meta, model in eval mode)`` of a node or graph-set checkpoint (``moved``: see
    :func:`relocate`); a regression model sits inside its :class:`~graphattn.StandardizedRegressor`."""
    ck = load_checkpoint(checkpoint)
    meta = ck["meta"]
    if meta.get("pipeline") not in ("node", "graph"):
        raise ValueError(f"{checkpoint} is a {meta.get('pipeline')!r} checkpoint, not a social-network one")
    if moved:
        meta["data"] = relocate(data_spec_from_dict(meta["data"]), moved).to_dict()
    model = build_node_model(meta)
    model.load_state_dict(ck["model"])
    return ck, meta, model.eval()


def node_data(meta: Dict[str, Any]):
    """The graph of a node checkpoint, checked against what the model was trained on."""
    data = sn.load_node_data(NodeDataSpec.from_dict(meta["data"]))
    sn.check_matches_checkpoint(meta, data.class_names, data.num_features, "", "the input files")
    return data


def splits_and_ids(data) -> Tuple[List[str], List[int]]:
    """Each node's split (``""``: in none) and its id in the input files (the row without ids)."""
    split = ["train" if a else "val" if b else "test" if c else "" for a, b, c in
             zip(data.train_mask.tolist(), data.val_mask.tolist(), data.test_mask.tolist())]
    ids = data.node_id.tolist() if getattr(data, "node_id", None) is not None else list(range(data.num_nodes))
    return split, ids


def value_column(meta: Dict[str, Any]) -> str:
    """The column of a node regression checkpoint's predicted values: the target column's name."""
    col = meta["target_col"]
    return f"predicted_{col}" if col in ("node", "node_id", "split", "label") else col


@torch.no_grad()
def prediction_rows(model: nn.Module, meta: Dict[str, Any], data=None) -> List[Dict[str, Any]]:
    """One row per graph of a graph-set checkpoint, else per node of its graph (``data``: that graph, read
    again from the run's files when ``None``). Node rows: ``node`` (row), ``node_id``, ``split``, ``label``
    (``""`` when unlabelled) and either ``predicted`` with ``prob_<class>`` columns, or (regression) the
    predicted value in the target's units in :func:`value_column`. Numbers are floats."""
    if meta["pipeline"] == "graph":
        return predict_graph(model, meta)
    data = node_data(meta) if data is None else data
    split, ids = splits_and_ids(data)
    out = sn.node_logits(model, meta["model"], data)
    if is_regression(meta):
        name, pred, true = value_column(meta), out[:, 0].tolist(), data.y[:, 0].tolist()
        return [{"node": i, "node_id": nid, "split": split[i], "label": "" if true[i] != true[i] else true[i],
                 name: pred[i]} for i, nid in enumerate(ids)]
    names, prob = meta["class_names"], torch.softmax(out, -1)
    return [{"node": i, "node_id": nid, "split": split[i],
             "label": names[int(data.y[i])] if int(data.y[i]) >= 0 else "",
             "predicted": names[int(prob[i].argmax())],
             **{f"prob_{n}": float(p) for n, p in zip(names, prob[i])}} for i, nid in enumerate(ids)]

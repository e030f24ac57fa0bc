"""Graph classification on sets of social graphs: IMDB-BINARY/MULTI, REDDIT-BINARY, COLLAB,
the bonus ego-net sets, and any file in the DGCNN/GIN text format (``--tu-text``).

Social graphs have no node features: every graph gets one-hot degree (capped at 64) +
log-degree + 8 random-walk return probabilities + the local degree profile
(:class:`~graphattn.tasks.social.specs.GraphDataSpec`, :func:`graphattn.data.structural.add_structural_features`).
With ``--folds K`` each fold trains a fresh model: the fold's training graphs minus a
stratified 10 % validation part (model selection, early stopping), tested on the fold's
test graphs; 10 folds use the dataset's ``10fold_idx`` files when present (else seeded
stratified folds). Two numbers are reported: **test accuracy at the best validation
epoch** (mean ± std over folds) and, for comparison with GIN's table (Xu et al. 2019),
the GIN protocol: the epoch whose test accuracy averaged over folds is highest.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from graphattn.nn.models.baselines import EDGE_BASELINES
from graphattn.nn.models.registry import ModelSpec
from graphattn.tasks.social.graph_data import graph_split, load_graphs
from graphattn.tasks.social.node import check_matches_checkpoint
from graphattn.tasks.social.specs import GraphDataSpec
from graphattn.train.checkpoint import check_same_run, json_safe, load_checkpoint
from graphattn.train.config import TrainConfig
from graphattn.train.loop import fit
from graphattn.train.runtime import model_device, resolve_device, set_seed

__all__ = ["graph_defaults", "graph_dataset_specific_defaults", "graph_model_spec", "graph_forward", "fit_fold", "gin_protocol", "finished_same_fold",
           "evaluate_graph", "predict_graph"]


_BASE = dict(hidden=64, layers=3, epochs=100, lr=1e-3, dropout=0.2, weight_decay=0.0,
             global_tokens=1, pe_dim=0, patience=None, readout="mean", schedule="constant", warmup=0,
             baseline_readout=None)  # readout of the PyG baselines where it differs from ours' (None: readout)
_PER_DATASET: Dict[str, Dict[str, Any]] = {
    # REDDIT-BINARY (graphs of 6 to 3,782 nodes): a sum readout made our training collapse, the mean
    # one did not; the PyG baselines are the other way round, so they keep the sum readout
    # (docs/social.md, "How the recipes were chosen")
    "reddit-binary": dict(epochs=50, baseline_readout="sum"),
    "collab": dict(epochs=50),
}


def graph_defaults(name: Optional[str]) -> Dict[str, Any]:
    """Hyperparameters used when the command line leaves them out."""
    return {**_BASE, **_PER_DATASET.get(name or "", {})}


def graph_dataset_specific_defaults(name: Optional[str]) -> Dict[str, Any]:
    """The settings a named graph set gets beyond the general defaults."""
    return dict(_PER_DATASET.get(name or "", {}))


# ----------------------------------------------------------------------------- models
def _baseline_readout(hp: Dict[str, Any], kind: str) -> str:
    if kind == "gin":  # GIN's sum readout (what makes it as expressive as the WL test)
        return "sum"
    readout = hp.get("baseline_readout") or hp["readout"]
    return "mean" if readout == "token" else readout  # the baselines have no global tokens


def finished_same_fold(folder: Path, meta: Dict[str, Any]) -> bool:
    """A finished fold of ``--resume`` is reused only when it is this run's (else CheckpointError,
    as for an unfinished one) with the same hyperparameters; with others (e.g. more epochs) it
    is continued by ``fit`` instead of reported with another run's numbers."""
    last = folder / "last.pt"
    if not last.is_file():
        return False
    old = load_checkpoint(last).get("meta") or {}
    check_same_run(last, old, meta)
    same = json.dumps(json_safe(old.get("hparams")), sort_keys=True) == json.dumps(json_safe(meta.get("hparams")),
                                                                                 sort_keys=True)
    return same


def graph_model_spec(baseline: str, in_channels: int, num_classes: int, hp: Dict[str, Any],
                     edge_dim: Optional[int] = None) -> ModelSpec:
    """The model of a graph-set run; ``edge_dim``: the graphs' edge features (TU edge labels /
    attributes), used by our model and by the GAT, TransformerConv and GIN (as GINEConv) baselines;
    GCNConv takes no edge features."""
    if baseline and baseline != "none":
        return ModelSpec("ConvBaseline", dict(
            kind=baseline, in_channels=in_channels, hidden_channels=hp["hidden"], out_channels=num_classes,
            num_layers=hp["layers"], heads=hp["heads"], dropout=hp["dropout"], graph_level=True,
            readout=_baseline_readout(hp, baseline),
            **({"edge_dim": edge_dim} if edge_dim and baseline in EDGE_BASELINES else {})))
    return ModelSpec("GraphClassifier", dict(
        in_channels=in_channels, hidden_channels=hp["hidden"], num_tasks=num_classes, num_layers=hp["layers"],
        heads=hp["heads"], num_global_tokens=hp["global_tokens"], pe_dim=hp["pe_dim"], dropout=hp["dropout"],
        readout=hp["readout"], **({"edge_dim": edge_dim} if edge_dim else {}),
        **({"local_mpnn": hp["local_mpnn"]} if hp.get("local_mpnn") else {})))


def _logits(model: nn.Module, spec: ModelSpec, batch) -> Tensor:
    edge_attr = batch.edge_attr if spec.arg("edge_dim") else None
    if spec.name == "ConvBaseline":
        return model(batch.x, batch.edge_index, batch.batch, edge_attr=edge_attr, num_graphs=batch.num_graphs)
    pe = getattr(batch, "lap_pe", None) if spec.arg("pe_dim") else None
    return model(batch.x, batch.edge_index, batch.batch, edge_attr=edge_attr, pe=pe, num_graphs=batch.num_graphs)


def graph_forward(spec: ModelSpec) -> Callable:
    """The ``forward`` of :func:`graphattn.train.fit` for mini-batches of graphs (``spec``: the model's
    :class:`~graphattn.nn.models.registry.ModelSpec` or its checkpoint form)."""
    spec = ModelSpec.from_dict(spec)

    def forward(model, batch, split):
        batch = batch.to(model_device(model))  # the loaders yield CPU batches
        return _logits(model, spec, batch), batch.y

    return forward


def _loaders(graphs, split, batch_size: int):
    from torch_geometric.loader import DataLoader

    sets = {s: [graphs[i] for i in idx.tolist()] for s, idx in zip(("train", "val", "test"), split)}
    return {s: DataLoader(v, batch_size=batch_size, shuffle=(s == "train")) for s, v in sets.items() if v}


def fit_fold(graphs, split, model_spec, hp, *, seed=0, batch_size=64, out_dir=None, resume=False,
             meta=None, progress=True, log=print, device=None) -> Dict[str, Any]:
    """Train one model on one (train, val, test) split with :func:`graphattn.train.fit`
    (on ``device``: :func:`graphattn.train.resolve_device`, default the GPU when there is one)."""
    set_seed(seed)
    model = ModelSpec.from_dict(model_spec).build().to(resolve_device(device))
    config = TrainConfig.from_recipe(hp, kind="multiclass", seed=seed, resume=resume, progress=progress)
    return fit(model, _loaders(graphs, split, batch_size), graph_forward(model_spec), config, out_dir=out_dir,
               meta=meta, log=log)


def gin_protocol(histories: List[List[Dict[str, Any]]]) -> Tuple[float, float, int]:
    """GIN's number: max over epochs of the fold-mean test accuracy (mean, std, epoch)."""
    n = min(len(h) for h in histories)
    acc = torch.tensor([[h[e]["test"]["accuracy"] for e in range(n)] for h in histories])  # (folds, epochs)
    best = int(acc.mean(0).argmax())
    return float(acc[:, best].mean()), float(acc[:, best].std(unbiased=False)), best + 1


@torch.no_grad()
def _graph_logits(model, meta) -> Tuple[Any, Tuple[Tensor, Tensor, Tensor], Tensor]:
    from torch_geometric.loader import DataLoader

    data_spec = GraphDataSpec.from_dict(meta["data"])
    graphs, spec = load_graphs(data_spec), ModelSpec.from_dict(meta["model"])
    where = data_spec.tu_text or data_spec.label
    width = graphs[0].num_features if len(graphs) else spec.arg("in_channels")  # none: no check
    check_matches_checkpoint(meta, graphs.label_values, width, f"{where}: ",
                             "the graph files (labels, node labels or attribute files)")
    split = graph_split(data_spec, graphs, meta.get("fold"))
    model.eval()
    dev = model_device(model)
    logits = torch.cat([_logits(model, spec, b.to(dev)).cpu()
                        for b in DataLoader(list(graphs), batch_size=128)])
    return graphs, split, logits


def evaluate_graph(model, meta) -> Dict[str, float]:
    graphs, split, logits = _graph_logits(model, meta)
    y = graphs.y
    return {s: float((logits[idx].argmax(-1) == y[idx]).float().mean()) if idx.numel() else math.nan
            for s, idx in zip(("train", "val", "test"), split)}


def predict_graph(model, meta) -> List[Dict[str, Any]]:
    graphs, split, logits = _graph_logits(model, meta)
    names, prob = meta["class_names"], torch.softmax(logits, -1)
    where = [""] * len(graphs)
    for s, idx in zip(("train", "val", "test"), split):
        for i in idx.tolist():
            where[i] = s
    pos = getattr(graphs, "file_index", None)  # --limit runs: a subset, numbered by file position
    pos = pos.tolist() if pos is not None else range(len(graphs))
    return [{"graph": pos[i], "split": where[i], "label": names[int(graphs[i].y)],
             "predicted": names[int(prob[i].argmax())],
             **{f"prob_{n}": float(p) for n, p in zip(names, prob[i])}} for i in range(len(graphs))]

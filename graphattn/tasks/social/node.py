"""Node classification on one social graph: data recipe, features, model spec, forward.

A data spec (:class:`~graphattn.tasks.social.specs.NodeDataSpec`, stored in checkpoints as its
``to_dict()``) is what :func:`load_node_data` rebuilds exactly the graph, features and split a model
was trained on from; ``graphattn train`` cuts wide feature files to what fits a dense ``x`` of
:data:`FEATURE_BYTES` (``--max-features all`` keeps all).

Features: a file's multi-hot features are used as they are (Cora's are row-normalised, as in
GCN/GAT); graphs without a features file
get structural ones (log-degree + random-walk return probabilities, standardised per
column); karate gets one-hot node ids plus the structural columns (Kipf & Welling's demo
uses the identity). Splits: the public one for Cora, else seeded stratified 60/20/20.
With ``"label_input": True`` the one-hot training labels are appended as K more columns
(UniMP, Shi et al. 2021); in training :func:`node_forward` shows only a random half of them
and computes the loss on the other half, at evaluation all training labels are shown and
validation/test labels never are. It is a property of the data, so the PyG baselines get it too.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from graphattn.data.download import DataFileError, data_root
from graphattn.data.rawio import canonical_label
from graphattn.data.social import (SOCIAL_NODE_DATASETS, load_musae, load_social_node_dataset, random_masks,
                                   stratified_masks, structural_node_features)
from graphattn.nn.features import gcn_normalized_graph
from graphattn.tasks.social.inputs import warn_if_inputs_changed
from graphattn.tasks.social.node_model import NodeModelSpec, node_inputs, run_model
from graphattn.tasks.social.specs import SPLIT, NodeDataSpec
from graphattn.train.metrics import consistency_loss
from graphattn.train.runtime import model_device
from graphattn.transforms.positional import AddLaplacianPE

__all__ = ["NODE_DATASETS", "SPLIT", "USER_GRAPH", "dataset_specific_defaults", "node_accuracy", "load_node_data", "load_node_graph", "add_node_encodings", "hop_features", "node_defaults", "node_forward",
           "node_logits", "EvalCache", "label_columns", "masked_label_input"]


def _musae_names():
    return tuple(SOCIAL_NODE_DATASETS)


NODE_DATASETS = ("karate", "cora", "citeseer", "pubmed") + _musae_names()
#: citation graphs with a public split and bag-of-words features (row-normalised, as in GCN/GAT)
PLANETOID = ("cora", "citeseer", "pubmed")

#: memory budget of a features file's dense multi-hot ``x`` in ``graphattn train`` (Deezer Europe's
#: 28k nodes x 31k feature ids would be 3.5 GB, ~11 GB at peak with input dropout)
FEATURE_BYTES = 2 ** 30

_BASE = dict(hidden=64, layers=2, epochs=150, lr=3e-3, dropout=0.3, weight_decay=0.0,
             global_tokens=0, pe_dim=0, patience=50, attn_dropout=0.0, input_dropout=None,
             self_loops=False, propagation=0, propagation_alpha=0.1, propagation_learned=False,
             gcn_weight=0.0, gcn_layers=1, propagation_dropout=0.0, label_input=False,
             consistency=0, consistency_weight=1.0, consistency_temperature=0.5,
             schedule="constant", warmup=None,  # None: ours_warmup(epochs) for ours, 0 for the baselines
             baseline_layers=None)  # depth of the PyG baselines where it differs from ours' (None: layers)
_PER_DATASET = {
    "karate": dict(hidden=32, epochs=100, lr=1e-2, dropout=0.2, weight_decay=5e-4, patience=None),
    # lr / dropout / weight decay are shared with the --baseline models; the rest is ours only, each
    # chosen on validation accuracy (docs/social.md, "How the recipes were chosen")
    # Cora: a GCN branch next to the attention (SGFormer), one attention layer, propagation and
    # GRAND's consistency loss; the PyG baselines keep 2 layers (baseline_layers)
    "cora": dict(hidden=64, epochs=300, lr=5e-3, dropout=0.6, weight_decay=5e-4, patience=100,
                 input_dropout=0.8, attn_dropout=0.8, self_loops=True, layers=1, propagation=20,
                 gcn_weight=0.98, baseline_layers=2, consistency=4),
    # homophilous sets with 60 % labelled nodes: training labels as input (every model), and our
    # predictions propagated; LastFM/GitHub have only structural features
    "facebook": dict(label_input=True, self_loops=True, propagation=10),
    "lastfm_asia": dict(epochs=300, label_input=True, self_loops=True, propagation=10, input_dropout=0.0),
    "github": dict(label_input=True, self_loops=True, propagation=10, input_dropout=0.0),
    # Twitch: weak homophily (propagation hurts), features noisy: more dropout and weight decay
    **{f"twitch-{k}": dict(dropout=0.5, weight_decay=5e-4, label_input=True, self_loops=True)
       for k in ("de", "engb", "es", "fr", "ptbr", "ru", "tw")},
}
# CiteSeer / PubMed: Cora's recipe, not tuned on them (no copies of their files here)
_PER_DATASET["citeseer"] = _PER_DATASET["pubmed"] = dict(_PER_DATASET["cora"])
# Twitch ENGB and GitHub: a GCN branch (SGFormer) helped on validation; on Twitch DE it did not,
# so the other languages keep w = 0 (docs/social.md, "How the recipes were chosen")
_PER_DATASET["twitch-engb"] = dict(_PER_DATASET["twitch-engb"], gcn_weight=0.9)
_PER_DATASET["github"] = dict(_PER_DATASET["github"], gcn_weight=0.5)


#: A graph of the user's own (``--edges``; no name): self-loops and a GCN branch for our model, chosen
#: on the validation accuracy of short runs of weakly homophilous graphs read as files, where attention
#: alone learned slowest (docs/social.md, "Short runs" and "How the recipes were chosen").
USER_GRAPH = dict(self_loops=True, gcn_weight=0.5)


def dataset_specific_defaults(name: str) -> Dict[str, Any]:
    """The settings a named node set gets beyond the general defaults (chosen on its validation
    accuracy; ``graphattn train`` names them in its run description); for a graph of the user's
    own (``name`` ``""``, or one without a recipe) :data:`USER_GRAPH`."""
    return dict(_PER_DATASET.get(name, USER_GRAPH))


def node_defaults(name: str, num_nodes: int) -> Dict[str, Any]:
    """Hyperparameters used when the command line leaves them out: the general recipe and
    :func:`dataset_specific_defaults`."""
    hp = dict(_BASE)
    hp.update(dataset_specific_defaults(name))
    if num_nodes > 200_000:  # large graphs: fewer, cheaper epochs
        hp.update(epochs=min(hp["epochs"], 20), patience=None)
    return hp


# ----------------------------------------------------------------------------- data
def _standardize(x: Tensor) -> Tensor:
    if x.size(0) < 2:  # the std of one row is NaN: centre only
        return x - x.mean(0)
    return (x - x.mean(0)) / x.std(0).clamp(min=1e-6)


def recorded_root_first(load: Callable, root: Optional[str]):
    """``load(root=..., download=...)`` from the data root a run recorded while that root still
    holds the dataset, else from today's data root (``$GRAPHATTN_DATA``, ...; downloading when
    absent): a moved or deleted copy falls back instead of failing with advice it ignores."""
    if root and Path(root).is_dir() and Path(root).resolve() != data_root().resolve():  # else: today's root
        try:
            return load(root=root, download=False)
        except (DataFileError, FileNotFoundError) as exc:
            warnings.warn(f"the data root this model was trained with ({root}) does not hold the dataset "
                          f"any more ({str(exc).splitlines()[0][:200]}); reading it from today's data root "
                          "($GRAPHATTN_DATA, or a download) — make sure it is the same release", stacklevel=3)
    return load(root=None)


def load_node_data(spec: NodeDataSpec):
    """Rebuild the graph of a data spec: ``Data(x, y, edge_index, masks, class_names, ...)``, with the
    positional encodings and label inputs the spec asks for (:func:`add_node_encodings`)."""
    return add_node_encodings(load_node_graph(spec), spec)


def _read_graph(spec: NodeDataSpec):
    """The graph, raw features and split of a named set or of the spec's files."""
    cut = {k: getattr(spec, k) for k in ("max_features", "max_feature_bytes") if getattr(spec, k) is not None}
    numeric = spec.regression  # y (N, 1) float, NaN missing; a random split
    target = {"target_col": spec.target_col, "numeric_target": True} if numeric else {}
    if spec.name:
        # a model pinned to structural features does not read (or try to download) the features file
        return recorded_root_first(lambda **where: load_social_node_dataset(
            spec.name, split=spec.split, seed=spec.split_seed, features=spec.feature_source != "structural",
            **cut, **target, **where), spec.root)
    # a run that fell back to structural features never used its features file: not read again
    features = spec.features if spec.feature_source != "structural" else None
    gone = [(key, path) for key, path in (("edges", spec.edges), ("target", spec.target), ("features", features))
            if path is not None and not Path(path).exists()]
    if gone:
        raise DataFileError(f"{', '.join(p for _, p in gone)}: the {'/'.join('--' + k for k, _ in gone)} "
                            f"file(s) this model was trained on are not there any more; give their new place "
                            f"with {', '.join('--' + k for k, _ in gone)}")
    warn_if_inputs_changed(spec)
    data = load_musae(spec.edges, spec.target, features, spec.target_col, id_col=spec.id_col,
                      numeric_target=numeric, **cut)
    masks = random_masks if numeric else stratified_masks
    data.train_mask, data.val_mask, data.test_mask = masks(data.y, *spec.split, seed=spec.split_seed)
    if data.x is None:
        data.x = structural_node_features(data.edge_index, data.num_nodes)
        data.feature_source = "structural"
    return data


def load_node_graph(spec: NodeDataSpec):
    """The graph, node features and split of a data spec, before any model-dependent input.

    ``spec.feature_source`` (set by ``graphattn train``, ``"file"`` or ``"structural"``)
    pins where the features come from, so a checkpoint trained on structural features
    still gets them after a features file appears, and one trained on a features file fails
    clearly when that file is gone. ``data.base_feature_source`` is that source.
    """
    data = _read_graph(spec)
    source, want = data.feature_source, spec.feature_source
    if want == "structural" and source == "file":
        data.x = structural_node_features(data.edge_index, data.num_nodes)
        source = data.feature_source = "structural"
    elif want == "file" and source != "file":
        if spec.features:  # --edges/--target/--features run: the file is there (checked above)
            raise ValueError(f"{spec.features}: this model was trained on the node features of this file, "
                             "which gives none now (it covers too few of the target's nodes, see the warning): "
                             "the input files changed")
        raise ValueError(f"{spec.label}: this model was trained on the node "
                         "features file, which is not found now (only structural features could be built); "
                         "put the features JSON back under the data root")
    data.base_feature_source = source
    if spec.name == "karate":
        data.x = torch.cat([torch.eye(data.num_nodes), _standardize(data.x)], 1)
        source = data.feature_source = "identity+structural"
    elif source == "structural":
        data.x = _standardize(data.x)
    elif source == "file" and spec.name in PLANETOID:  # row-normalised, as in GCN/GAT
        data.x = data.x / data.x.sum(1, keepdim=True).clamp(min=1.0)
    data.x = data.x.float()
    if spec.hops > 0:
        data.x = hop_features(data.x, data.edge_index, spec.hops)
        data.feature_source += f"+{spec.hops}hop"
    return data


def add_node_encodings(data, spec: NodeDataSpec):
    """The inputs of a data spec that depend on the model's settings: ``spec.pe_dim`` Laplacian PE
    columns (``data.lap_pe``) and, with ``spec.label_input``, the one-hot training labels as extra
    columns of ``x``. Returns the graph (a new object when PE is added)."""
    if spec.pe_dim > 0:
        data = AddLaplacianPE(spec.pe_dim)(data)
    if spec.label_input:
        data.x = torch.cat([data.x, label_columns(data.y, data.train_mask, len(data.class_names))], 1)
        data.feature_source += "+train labels"
    return data


def check_matches_checkpoint(meta: Dict[str, Any], class_names, num_features: int, where: str,
                             what: str) -> None:
    """ValueError when the inputs now read are not what the checkpoint's model was trained on:
    other class names (compared canonically: older versions wrote "1.0", "true") — the label
    column and class indices would be wrong — or another feature width. ``where`` starts the
    message, ``what`` names the files that changed."""
    now = [str(n) for n in class_names]
    if [canonical_label(n) for n in now] != [canonical_label(n) for n in meta["class_names"]]:
        raise ValueError(f"{where}the labels now read ({now}) differ from the classes the model was trained on "
                         f"({list(meta['class_names'])}): {what} changed")
    want = meta["model"]["kwargs"].get("in_channels")
    if want is not None and num_features != want:
        raise ValueError(f"{where}the node features now built have {num_features} columns, the model was "
                         f"trained on {want}: {what} changed")


def label_columns(y: Tensor, known: Tensor, num_classes: int) -> Tensor:
    """One-hot labels of the ``known`` nodes, zeros elsewhere (UniMP's label input, Shi et
    al. 2021): appended to the features, they let a model read its neighbours' training
    labels. Shapes: y ``(N,)``, known ``(N,)`` bool -> ``(N, num_classes)``."""
    out = torch.zeros(y.size(0), num_classes, device=y.device)
    out[known, y[known]] = 1.0
    return out


def hop_features(x: Tensor, edge_index: Tensor, hops: int) -> Tensor:
    """``[X, ÂX, ..., Â^K X]`` with ``Â = D^-1/2 (A + I) D^-1/2`` (SIGN, Frasca et al. 2020;
    NAGphormer's hop tokens, Chen et al. 2023): K-hop smoothed copies of the features,
    computed once before training. Shape ``(N, F)`` -> ``(N, (K + 1) F)``."""
    (row, col), w = gcn_normalized_graph(edge_index, x.size(0))  # (E' + N,) each
    out, cur = [x], x
    for _ in range(hops):
        cur = torch.zeros_like(cur).index_add_(0, col, cur[row] * w[:, None])
        out.append(cur)
    return torch.cat(out, 1)


class EvalCache:
    """Reuses eval-mode logits of a batch while the parameters are unchanged, so the
    validation and test passes of an epoch share one forward over the (same) graph.
    Invalidated by any training-mode forward and by any in-place change of a parameter
    (optimizer steps, ``load_state_dict``)."""

    def __init__(self):
        self.key, self.store = None, {}

    def __call__(self, model: nn.Module, batch_key, compute: Callable[[], Tensor]) -> Tensor:
        if model.training:
            self.key, self.store = None, {}
            return compute()
        key = tuple(p._version for p in model.parameters()) + tuple(id(p) for p in model.parameters())
        if key != self.key:
            self.key, self.store = key, {}
        if batch_key not in self.store:
            self.store[batch_key] = compute()
        return self.store[batch_key]


#: Share of the training nodes whose label is an input in a training step (the loss is on the rest).
LABEL_RATE = 0.5


def masked_label_input(x: Tensor, data, rate: float = LABEL_RATE) -> Tuple[Tensor, Tensor]:
    """Training step of the label input (UniMP's masked label prediction): a random ``rate``
    of the training nodes keep their label columns, the others are zeroed and are the ones
    the loss is computed on, so a model cannot learn to copy its own label.

    Shapes: x ``(N, F + K)`` (last K columns: labels) -> ``(x', loss mask (N,) bool)``."""
    K = len(data.class_names)
    keep = data.train_mask & (torch.rand(data.num_nodes, device=x.device) < rate)
    x = x.clone()
    x[:, -K:] = label_columns(data.y, keep, K).to(x)
    return x, data.train_mask & ~keep


def node_forward(spec: NodeModelSpec):
    """``forward(model, data, split) -> (logits[mask], y[mask])`` for full-batch training.

    With ``spec.consistency`` (S >= 2 samples, weight λ, temperature T) a training step makes S forward
    passes and returns ``(logits, y, λ · consistency_loss)``
    (:func:`graphattn.train.metrics.consistency_loss`, GRAND's regulariser)."""
    cache, spec = EvalCache(), NodeModelSpec.from_dict(spec)

    def forward(model, data, split):
        inp = node_inputs(data)
        mask = data[f"{split}_mask"]
        if not model.training:
            logits = cache(model, id(data), lambda: run_model(model, spec, inp))
            return logits[mask], data.y[mask]
        cons = spec.consistency
        outs, ys, every = [], [], []
        for _ in range(cons.samples if cons else 1):  # S passes, each with its own dropout
            x, m = masked_label_input(inp["x"], data) if spec.label_input else (inp["x"], mask)
            logits = run_model(model, spec, inp, x)
            outs.append(logits[m]), ys.append(data.y[m]), every.append(logits)
        if len(every) == 1:
            return outs[0], ys[0]
        # the supervised loss averages over the passes; GRAND's consistency term covers every node
        aux = cons.weight * consistency_loss(every, cons.temperature)
        return torch.cat(outs), torch.cat(ys), aux

    return forward


@torch.no_grad()
def node_logits(model: nn.Module, spec: NodeModelSpec, data) -> Tensor:
    """Eval-mode logits of every node of the whole graph (no autograd graph is kept), returned on
    the graph's device. They are computed on the model's device (the inputs are copied there;
    ``data`` itself is not moved); a graph too large for the GPU's memory (a ``--mini-batch``
    run) falls back to the CPU with a warning."""
    model.eval()
    dev, inputs, spec = model_device(model), node_inputs(data), NodeModelSpec.from_dict(spec)
    try:
        return run_model(model, spec, {k: None if v is None else v.to(dev) for k, v in inputs.items()}).to(data.y.device)
    except torch.cuda.OutOfMemoryError:
        pass  # below, once the failed pass's tensors are released
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    warnings.warn(f"the whole graph ({data.num_nodes:,} nodes) does not fit in the GPU's memory for one "
                  "forward pass: computing its logits on the CPU", stacklevel=2)
    model.cpu()
    try:
        return run_model(model, spec, {k: None if v is None else v.cpu() for k, v in inputs.items()}).to(data.y.device)
    finally:
        model.to(dev)


def node_accuracy(model, meta: Dict[str, Any], data) -> Dict[str, float]:
    logits = node_logits(model, meta["model"], data)
    res = {}
    for s in ("train", "val", "test"):
        m = data[f"{s}_mask"] & (data.y >= 0)
        res[s] = float((logits[m].argmax(-1) == data.y[m]).float().mean()) if bool(m.any()) else float("nan")
    return res

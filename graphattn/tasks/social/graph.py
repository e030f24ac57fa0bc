"""Graph classification on sets of social graphs: IMDB-BINARY/MULTI, REDDIT-BINARY, COLLAB,
the bonus ego-net sets, and any file in the DGCNN/GIN text format (``--tu-text``).

Social graphs have no node features: every graph gets one-hot degree (capped at 64) +
log-degree + 8 random-walk return probabilities + the local degree profile
(:data:`GRAPH_FEATURES`, :func:`graphattn.data.structural.add_structural_features`).
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
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from graphattn.train.loop import model_device

__all__ = ["GRAPH_DATASETS", "GRAPH_FEATURES", "load_graphs", "graph_split", "graph_model_spec", "graph_forward",
           "fit_fold", "prepare_graph", "run_graph", "evaluate_graph", "predict_graph"]


def _names():
    from graphattn.data.tu import SOCIAL_GRAPH_DATASETS

    return tuple(SOCIAL_GRAPH_DATASETS)


GRAPH_DATASETS = _names()

_BASE = dict(hidden=64, layers=3, epochs=100, lr=1e-3, dropout=0.2, weight_decay=0.0,
             global_tokens=1, pe_dim=0, patience=None, readout="mean",
             baseline_readout=None)  # readout of the PyG baselines where it differs from ours' (None: readout)
_PER_DATASET: Dict[str, Dict[str, Any]] = {
    # REDDIT-BINARY has graphs of 6 to 3,782 nodes: for ours a sum readout made training collapse
    # (fold 1, 30 epochs: validation stuck at the majority class for 15 epochs, best val 0.800);
    # the mean readout (the default) reached val 0.928 / 0.933 (with LDP features) within 20
    # epochs. The PyG baselines are the other way round (fold 1 validation, 20 epochs: GCN 0.856
    # with sum vs 0.728 with mean, GAT 0.822 vs 0.711), so they keep the sum readout.
    "reddit-binary": dict(epochs=50, baseline_readout="sum"),
    "collab": dict(epochs=50),
}
#: node features of the graph sets (:func:`graphattn.data.structural.add_structural_features`):
#: one-hot degree up to 64, log-degree, 8 random-walk return probabilities and the local degree
#: profile (LDP: the neighbours' degree min/max/mean/std, Cai & Wang 2018; REDDIT-BINARY fold 1,
#: mean readout, best validation accuracy within 20 epochs: 0.933 with, 0.928 without).
#: Checkpoints store these in their data spec (older ones, without ``ldp``, are read without it).
GRAPH_FEATURES: Dict[str, Any] = dict(max_degree=64, rw_steps=8, ldp=True)
#: validation fraction carved (stratified) out of each fold's training graphs
VAL_FRACTION = 0.1


def graph_defaults(name: Optional[str]) -> Dict[str, Any]:
    return {**_BASE, **_PER_DATASET.get(name or "", {})}


# ----------------------------------------------------------------------------- data
def data_spec(args, name: Optional[str]) -> Dict[str, Any]:
    from graphattn.data.download import data_root

    spec: Dict[str, Any] = {"level": "graph", "name": name, "limit": args.limit, "split_seed": int(args.seed),
                            "folds": args.folds, **GRAPH_FEATURES, "node_attr": True, "edge_attr": True}
    if args.tu_text:
        from graphattn.data.download import files_sha256, input_files

        path = Path(args.tu_text).expanduser()
        if not path.exists():
            raise ValueError(f"--tu-text {args.tu_text}: no such file or folder")
        from graphattn.data.tu_folder import find_tu_prefix

        tu = find_tu_prefix(path)  # the TU original format (NAME_A.txt, ...): its folder or A file
        if path.is_dir() and tu is None:
            raise ValueError(f"--tu-text {args.tu_text}: a folder without TU files (NAME_A.txt, "
                             "NAME_graph_indicator.txt, NAME_graph_labels.txt); give a DGCNN/GIN text file instead")
        spec.update(name=None, tu_text=str(path.resolve()),
                    display=(tu[1] if tu else path.name.split(".")[0]).lower())
        spec["sha256"] = files_sha256(input_files(spec))  # evaluate warns, --resume refuses, when they change
    else:
        spec.update(display=name, root=str(data_root().resolve()))
    return spec


def tu_fold_dir(tu_text, tu=None) -> Path:
    """The ``10fold_idx`` folder of ``--tu-text`` files: next to the data files, or beside the
    ``raw/`` folder that holds them (PyG's layout); the first place when neither has one."""
    from graphattn.data.tu import find_tu_prefix

    tu = tu if tu is not None else find_tu_prefix(tu_text)
    base = tu[0] if tu else Path(tu_text).parent
    places = [base / "10fold_idx"] + ([base.parent / "10fold_idx"] if tu and base.name == "raw" else [])
    return next((d for d in places if d.is_dir()), places[0])


def _fold_files_check(spec: Dict[str, Any], graphs, k: int) -> None:
    """A run whose folds came from fold files (``spec["fold_source"] == "files"``) is evaluated on
    the same files: missing or changed ones would silently give another split."""
    from graphattn.data.download import DataFileError, files_sha256

    files = getattr(graphs, "fold_files", None) or []
    if graphs.folds is None or len(graphs.folds) != k or not files:
        raise DataFileError(f"{spec.get('tu_text') or spec.get('display')}: this model's {k} folds came from the "
                            "fold files (10fold_idx/) next to its graph files, which are not there now; copy "
                            "the folder along (else the test graphs would be another split's)")
    want = spec.get("folds_sha256")
    if want and files_sha256(files) != want:
        raise DataFileError(f"{files[0].parent}: the fold files changed since this model was trained (sha256 "
                            "differs): its test graphs would be another split's")


def load_graphs(spec: Dict[str, Any]):
    """The featurised graphs of a data spec (a :class:`~graphattn.data.tu.GraphList`)."""
    from graphattn.data.download import DataFileError, warn_if_inputs_changed
    from graphattn.data.tu import (add_structural_features, find_tu_prefix, load_social_graph_dataset,
                                   load_tu_folder, load_tu_folds, load_tu_text)

    if spec.get("tu_text"):
        if not Path(spec["tu_text"]).exists():
            raise DataFileError(f"{spec['tu_text']}: the graph files this model was trained on are not there any "
                                "more; give their new place with --tu-text (with their 10fold_idx/ folder)")
        warn_if_inputs_changed(spec)
        tu = find_tu_prefix(spec["tu_text"])
        graphs = load_tu_folder(*tu) if tu else load_tu_text(spec["tu_text"])
        fold_dir = tu_fold_dir(spec["tu_text"], tu)
        graphs.folds, graphs.fold_files = None, []
        if fold_dir.is_dir():
            try:
                graphs.folds = load_tu_folds(fold_dir, len(graphs))
                graphs.fold_files = sorted(fold_dir.glob("*_idx-*.txt"))
            except DataFileError as exc:
                if spec.get("folds"):  # the user asked for folds: the fold files must be right
                    raise
                warnings.warn(f"ignoring the fold files next to {Path(spec['tu_text']).name} (no "
                              f"--folds given, and they do not fit: {exc})", stacklevel=2)
    else:
        from graphattn.tasks.social.node import recorded_root_first

        graphs = recorded_root_first(lambda **where: load_social_graph_dataset(
            spec["name"], source=spec.get("graph_source"), **where), spec.get("root"))
    if spec.get("limit"):
        from graphattn.data.tu import GraphList

        keep = torch.randperm(len(graphs), generator=torch.Generator().manual_seed(0))[:spec["limit"]]
        keep = keep.sort().values
        sub = GraphList(graphs[i] for i in keep.tolist())  # a random subset: files are sorted by label
        sub.name, sub.label_values, sub.folds = graphs.name, graphs.label_values, None
        sub.file_index = keep  # (limit,) each graph's position in the file: what predict numbers them by
        sub.source = getattr(graphs, "source", None)
        sub.num_edge_attributes, sub.edge_label_values = graphs.num_edge_attributes, graphs.edge_label_values
        graphs = sub
    add_structural_features(graphs, max_degree=spec["max_degree"], rw_steps=spec["rw_steps"],
                            ldp=bool(spec.get("ldp", False)))
    if spec.get("node_attr") and len(graphs) and all(getattr(g, "node_attr", None) is not None for g in graphs):
        # continuous node attributes of the file (text format: columns after the neighbours),
        # z-scored over all nodes of the set; specs written before this existed skip them
        # (in float64: squares of attributes near float32's limit would overflow)
        mean, std = _column_stats(g.node_attr for g in graphs)
        for g in graphs:
            g.x = torch.cat([g.x, ((g.node_attr.double() - mean) / std).to(g.x.dtype)], 1)
            g.feature_source = "structural+attributes"
    _edge_features(graphs, bool(spec.get("edge_attr")))
    if "edge_dim" in spec and (edge_dim_of(graphs) or 0) != spec["edge_dim"]:
        from graphattn.data.download import DataFileError

        got, where = edge_dim_of(graphs) or 0, spec.get("tu_text") or spec.get("display")
        why = ("the edge files are not there" if not got else "other label values or attribute columns"
               if spec["edge_dim"] else "edge files added since")
        raise DataFileError(f"{where}: this model was trained on {spec['edge_dim']} edge features (the set's "
                            f"NAME_edge_attributes.txt / NAME_edge_labels.txt), the files give {got} now ({why})")
    if int(spec.get("pe_dim", 0) or 0) > 0:
        from graphattn.nn.encodings import AddLaplacianPE

        lap = AddLaplacianPE(int(spec["pe_dim"]), eigval_attr_name=None, mask_attr_name=None)
        for i, g in enumerate(graphs):
            graphs[i] = lap(g)
    return graphs


def _stratified_part(idx: Tensor, y: Tensor, frac: float, seed: int) -> Tuple[Tensor, Tensor]:
    """Split ``idx`` into (rest, part) with ``part`` a stratified ``frac`` of it."""
    from graphattn.data.social import stratified_masks

    _, va, _ = stratified_masks(y[idx], 1.0 - frac, frac, seed=seed) if frac > 0 else (None, None, None)
    if va is None:
        return idx, idx[:0]
    if not bool(va.any()) and idx.numel() >= 2:
        # per-class rounding left the part empty (tiny sets: 10 % of 5 graphs rounds to 0): one graph of
        # the largest class, drawn with the seed, so that a split never lacks validation or test graphs
        yi = y[idx]
        big = int(torch.bincount(yi).argmax())
        members = (yi == big).nonzero().view(-1)
        va = va.clone()
        va[members[torch.randint(members.numel(), (1,), generator=torch.Generator().manual_seed(seed))]] = True
    return idx[~va], idx[va]


def graph_split(spec: Dict[str, Any], graphs, fold: Optional[int]) -> Tuple[Tensor, Tensor, Tensor]:
    """(train, val, test) graph indices of fold ``fold`` (0-based) or of the single split."""
    from graphattn.data.tu import stratified_folds

    y, seed = graphs.y, int(spec.get("split_seed", 0))
    if fold is None:  # one stratified 80/10/10 split
        rest, test = _stratified_part(torch.arange(len(graphs)), y, 0.1, seed)
        train, val = _stratified_part(rest, y, 1.0 / 9.0, seed + 1)
        return train.sort().values, val.sort().values, test.sort().values
    k = int(spec["folds"])
    source = spec.get("fold_source")  # recorded at training (older runs: whatever is there)
    if source == "files":
        _fold_files_check(spec, graphs, k)
    use_files = source != "stratified" and graphs.folds is not None and len(graphs.folds) == k
    folds = graphs.folds if use_files else stratified_folds(y, k, seed)
    tr, te = folds[fold]
    train, val = _stratified_part(tr, y, VAL_FRACTION, seed + fold)
    return train.sort().values, val.sort().values, te.sort().values


# ----------------------------------------------------------------------------- models
def _baseline_readout(hp: Dict[str, Any], kind: str) -> str:
    if kind == "gin":  # GIN's sum readout (what makes it as expressive as the WL test)
        return "sum"
    readout = hp.get("baseline_readout") or hp["readout"]
    return "mean" if readout == "token" else readout  # the baselines have no global tokens


def _finished_same_fold(folder: Path, meta: Dict[str, Any]) -> bool:
    """A finished fold of ``--resume`` is reused only when it is this run's (else CheckpointError,
    as for an unfinished one) with the same hyperparameters; with others (e.g. more epochs) it
    is continued by ``fit`` instead of reported with another run's numbers."""
    from graphattn.train.checkpoint import _check_same_run, _json_safe, load_checkpoint

    last = folder / "last.pt"
    if not last.is_file():
        return False
    old = load_checkpoint(last).get("meta") or {}
    _check_same_run(last, old, meta)
    same = json.dumps(_json_safe(old.get("hparams")), sort_keys=True) == json.dumps(_json_safe(meta.get("hparams")),
                                                                                   sort_keys=True)
    return same


def _column_stats(parts) -> Tuple[Tensor, Tensor]:
    """Mean and std (floored at 1e-6) per column over all rows of ``parts`` ((n_i, D) each), in
    float64: squares of attributes near float32's limit would overflow."""
    cols = torch.cat([p.double() for p in parts])
    return cols.mean(0), cols.std(0, unbiased=False).clamp(min=1e-6)


def _edge_features(graphs, use: bool) -> None:
    """Edge features of a TU-folder set (``edge_attr``: attribute columns, then one-hot edge
    labels) kept with their attribute columns z-scored over all edges of the set (float64, as
    the node attributes), or dropped when ``use`` is off (specs written before they were used)."""
    if not use or not len(graphs) or not all(getattr(g, "edge_attr", None) is not None for g in graphs):
        for g in graphs:
            g.edge_attr = None
        return
    k = int(getattr(graphs, "num_edge_attributes", 0) or 0)
    if k:
        mean, std = _column_stats(g.edge_attr[:, :k] for g in graphs)
        for g in graphs:
            g.edge_attr = torch.cat([((g.edge_attr[:, :k].double() - mean) / std).float(), g.edge_attr[:, k:]], 1)


def edge_dim_of(graphs) -> Optional[int]:
    """The width of the graphs' ``edge_attr``, ``None`` when they have none."""
    return int(graphs[0].edge_attr.size(1)) if len(graphs) and getattr(graphs[0], "edge_attr", None) is not None \
        else None


def graph_model_spec(baseline: str, in_channels: int, num_classes: int, hp: Dict[str, Any],
                     edge_dim: Optional[int] = None) -> Dict[str, Any]:
    """The model of a graph-set run; ``edge_dim``: the graphs' edge features (TU edge labels /
    attributes), used by our model and by the GAT, TransformerConv and GIN (as GINEConv) baselines;
    GCNConv takes no edge features."""
    if baseline and baseline != "none":
        from graphattn.nn.models.baselines import EDGE_BASELINES

        return {"class": "ConvBaseline", "kwargs": dict(
            kind=baseline, in_channels=in_channels, hidden_channels=hp["hidden"], out_channels=num_classes,
            num_layers=hp["layers"], heads=hp["heads"], dropout=hp["dropout"], graph_level=True,
            readout=_baseline_readout(hp, baseline),
            **({"edge_dim": edge_dim} if edge_dim and baseline in EDGE_BASELINES else {}))}
    return {"class": "GraphClassifier", "kwargs": dict(
        in_channels=in_channels, hidden_channels=hp["hidden"], num_tasks=num_classes, num_layers=hp["layers"],
        heads=hp["heads"], num_global_tokens=hp["global_tokens"], pe_dim=hp["pe_dim"], dropout=hp["dropout"],
        readout=hp["readout"], **({"edge_dim": edge_dim} if edge_dim else {}),
        **({"local_mpnn": hp["local_mpnn"]} if hp.get("local_mpnn") else {}))}


def _logits(model: nn.Module, spec: Dict[str, Any], batch) -> Tensor:
    edge_attr = batch.edge_attr if spec["kwargs"].get("edge_dim") else None
    if spec["class"] == "ConvBaseline":
        return model(batch.x, batch.edge_index, batch.batch, edge_attr=edge_attr, num_graphs=batch.num_graphs)
    pe = getattr(batch, "lap_pe", None) if spec["kwargs"].get("pe_dim") else None
    return model(batch.x, batch.edge_index, batch.batch, edge_attr=edge_attr, pe=pe, num_graphs=batch.num_graphs)


def graph_forward(spec: Dict[str, Any]) -> Callable:
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
    from graphattn.cli.social_train import build_model
    from graphattn.train.loop import fit, resolve_device, set_seed

    set_seed(seed)
    model = build_model(model_spec).to(resolve_device(device))
    return fit(model, _loaders(graphs, split, batch_size), graph_forward(model_spec), kind="multiclass",
               epochs=hp["epochs"], lr=hp["lr"], weight_decay=hp["weight_decay"], patience=hp.get("patience"),
               seed=seed, out_dir=out_dir, resume=resume, meta=meta, progress=progress, log=log)


def gin_protocol(histories: List[List[Dict[str, Any]]]) -> Tuple[float, float, int]:
    """GIN's number: max over epochs of the fold-mean test accuracy (mean, std, epoch)."""
    n = min(len(h) for h in histories)
    acc = torch.tensor([[h[e]["test"]["accuracy"] for e in range(n)] for h in histories])  # (folds, epochs)
    best = int(acc.mean(0).argmax())
    return float(acc[:, best].mean()), float(acc[:, best].std(unbiased=False)), best + 1


# ----------------------------------------------------------------------------- CLI
def prepare_graph(args, name: Optional[str]):
    """(data spec, graphs, hyperparameters) of a ``graphattn train`` command."""
    from graphattn.cli.social_train import _hparams

    spec = data_spec(args, name)
    hp = _hparams(args, graph_defaults(name))
    if args.baseline == "none":
        spec["pe_dim"] = hp["pe_dim"]
    else:
        hp["pe_dim"] = 0
    graphs = load_graphs(spec)
    spec["edge_dim"] = edge_dim_of(graphs) or 0  # evaluate/predict/--resume need the same edge features
    if spec.get("name") and getattr(graphs, "source", None) in ("gin", "tu"):
        spec["graph_source"] = graphs.source  # evaluate/predict re-read the same files (and folds)
    if args.folds and spec.get("tu_text"):  # evaluate/predict/--resume use the same folds, or refuse
        from graphattn.data.download import files_sha256

        if graphs.folds is not None and len(graphs.folds) == args.folds:
            spec["fold_source"], spec["folds_sha256"] = "files", files_sha256(graphs.fold_files)
            tested = torch.cat([te for _, te in graphs.folds])
            if tested.unique().numel() != len(graphs) or tested.numel() != len(graphs):
                warnings.warn(f"the {args.folds} fold files' test sets cover {tested.unique().numel()} of "
                              f"{len(graphs)} graphs{' (some twice)' if tested.numel() != tested.unique().numel() else ''}: "
                              "the mean is not a cross-validation over the whole set", stacklevel=2)
        else:
            spec["fold_source"] = "stratified"
    if graphs.num_classes < 2:
        raise ValueError(f"{spec['display']}: every graph has the same label; classification needs at least two")
    from graphattn.cli.social_train import build_model

    # a model option that does not fit (e.g. --readout token without tokens) fails here, as an input error
    build_model(graph_model_spec(args.baseline, graphs[0].num_features, graphs.num_classes, hp, edge_dim_of(graphs)))
    for fold in range(args.folds) if args.folds else [None]:
        try:
            parts = graph_split(spec, graphs, fold)
        except ValueError as exc:
            raise ValueError(f"--folds {args.folds}: {exc}" if args.folds else str(exc)) from exc
        empty = [s for s, idx in zip(("train", "val", "test"), parts) if idx.numel() == 0]
        if empty:
            where = f"fold {fold + 1} of {args.folds}" if fold is not None else "the 80/10/10 split"
            raise ValueError(f"{spec['display']}: {len(graphs)} graphs are too few: {where} has no "
                             f"{'/'.join(empty)} graphs (10 % of the training graphs go to validation); "
                             + ("use fewer folds, or more graphs" if fold is not None and args.folds > 2
                                else "use more graphs"))
    return spec, graphs, hp


def run_graph(args, spec: Dict[str, Any], graphs, hp: Dict[str, Any]) -> int:
    """Train (per fold), print per-epoch lines and the summary, write OUT/metrics.json."""
    from graphattn.cli.social_train import _out_dir, _threads_for
    from graphattn.train.loop import write_metrics

    _threads_for(sum(g.edge_index.size(1) for g in graphs[:64]) // max(1, min(len(graphs), 64)) * args.batch_size,
                 args)
    names = [str(v) for v in graphs.label_values]
    edge_dim = edge_dim_of(graphs)
    model_spec = graph_model_spec(args.baseline, graphs[0].num_features, len(names), hp, edge_dim)
    out = _out_dir(args, spec["display"] + (f"-{args.folds}fold" if args.folds else ""))
    n_nodes = sum(g.num_nodes for g in graphs)
    print(f"{spec['display']}: {len(graphs):,} graphs, {n_nodes:,} nodes, {len(names)} classes, "
          f"{graphs[0].num_features} node features ({getattr(graphs[0], 'feature_source', 'structural')})"
          + (f", {edge_dim} edge features (TU edge attributes/labels"
             + (f"; not used by {args.baseline}" if not model_spec["kwargs"].get("edge_dim") else "") + ")"
             if edge_dim else "") + "\nmodel: "
          f"{model_spec['class']}{' (' + args.baseline + ')' if args.baseline != 'none' else ''}, "
          f"{hp['layers']} layers x {hp['hidden']} hidden, {hp['heads']} heads, "
          + ("" if model_spec["class"] == "ConvBaseline" else f"{hp['global_tokens']} global tokens, ")
          + f"readout {model_spec['kwargs']['readout']}; {hp['epochs']} epochs, lr {hp['lr']}, batch {args.batch_size}"
          + (f"; {args.folds}-fold CV" if args.folds else "; stratified 80/10/10 split"))
    folds = list(range(args.folds)) if args.folds else [None]
    if args.folds and (graphs.folds is None or len(graphs.folds) != args.folds):
        why = (f"the dataset has {len(graphs.folds)} folds" if graphs.folds is not None else
               "no 10fold_idx folder next to the file" if spec.get("tu_text") else "no fold files")
        print(f"{args.folds} stratified folds (seed {spec.get('split_seed', 0)}): {why}")
    results, histories = [], []
    for fold in folds:
        split = graph_split(spec, graphs, fold)
        sub = out / f"fold{fold + 1:02d}" if fold is not None else out
        meta = {"pipeline": "graph", "model": model_spec, "data": spec, "fold": fold, "class_names": names,
                "feature_source": getattr(graphs[0], "feature_source", "structural"), "hparams": hp}
        if fold is not None:
            print(f"--- fold {fold + 1}/{len(folds)}: {len(split[0])} train / {len(split[1])} val / "
                  f"{len(split[2])} test graphs")
            if args.resume and (sub / "metrics.json").exists() and _finished_same_fold(sub, meta):
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
        print(f"{spec['display']} {args.folds}-fold: test acc {100 * test.mean():.2f} ± {100 * sd:.2f} "
              f"(model selected on validation) | GIN protocol {100 * gin[0]:.2f} ± {100 * gin[1]:.2f} "
              f"(epoch {gin[2]})")
        print(f"Wrote {out / 'metrics.json'} and {out / 'best.pt'} (fold {best + 1}, best validation accuracy)")
    else:
        r = results[0]
        print(f"{spec['display']}: best epoch {r['best_epoch']} | train acc {r['train']['accuracy']:.4f} | "
              f"val acc {r['val']['accuracy']:.4f} | test acc {r['test']['accuracy']:.4f} | "
              f"{r['seconds_per_epoch']:.2f} s/epoch")
        print(f"Wrote {out / 'metrics.json'} and {out / 'best.pt'}")
    return 0


@torch.no_grad()
def _run(model, meta) -> Tuple[Any, Tuple[Tensor, Tensor, Tensor], Tensor]:
    from torch_geometric.loader import DataLoader

    graphs = load_graphs(meta["data"])
    from graphattn.tasks.social.node import check_matches_checkpoint

    where = meta["data"].get("tu_text") or meta["data"].get("display") or meta["data"].get("name")
    width = graphs[0].num_features if len(graphs) else meta["model"]["kwargs"].get("in_channels")  # none: no check
    check_matches_checkpoint(meta, graphs.label_values, width, f"{where}: ",
                             "the graph files (labels, node labels or attribute files)")
    split = graph_split(meta["data"], graphs, meta.get("fold"))
    model.eval()
    dev = model_device(model)
    logits = torch.cat([_logits(model, meta["model"], b.to(dev)).cpu()
                        for b in DataLoader(list(graphs), batch_size=128)])
    return graphs, split, logits


def evaluate_graph(model, meta) -> Dict[str, float]:
    graphs, split, logits = _run(model, meta)
    y = graphs.y
    return {s: float((logits[idx].argmax(-1) == y[idx]).float().mean()) if idx.numel() else math.nan
            for s, idx in zip(("train", "val", "test"), split)}


def predict_graph(model, meta) -> List[Dict[str, Any]]:
    graphs, split, logits = _run(model, meta)
    names, prob = meta["class_names"], torch.softmax(logits, -1)
    where = [""] * len(graphs)
    for s, idx in zip(("train", "val", "test"), split):
        for i in idx.tolist():
            where[i] = s
    pos = getattr(graphs, "file_index", None)  # --limit runs: a subset, numbered by file position
    pos = pos.tolist() if pos is not None else range(len(graphs))
    return [{"graph": pos[i], "split": where[i], "label": names[int(graphs[i].y)],
             "predicted": names[int(prob[i].argmax())],
             **{f"prob_{n}": f"{float(p):.6f}" for n, p in zip(names, prob[i])}} for i in range(len(graphs))]

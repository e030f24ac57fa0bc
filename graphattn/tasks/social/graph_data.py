"""Graph sets for classification: which sets exist, their node features, loading a data spec and the
train/validation/test split of a fold (``10fold_idx`` files when present, else seeded stratified folds)."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional, Tuple

import torch
from torch import Tensor

from graphattn.data.download import DataFileError, data_root, files_sha256
from graphattn.data.social import stratified_masks
from graphattn.data.tu import (SOCIAL_GRAPH_DATASETS, GraphList, add_structural_features, find_tu_prefix,
                               load_social_graph_dataset, load_tu_folder, load_tu_folds, load_tu_text, stratified_folds)
from graphattn.tasks.social.inputs import input_files, warn_if_inputs_changed
from graphattn.tasks.social.node import recorded_root_first
from graphattn.tasks.social.specs import GraphDataSpec
from graphattn.transforms.positional import AddLaplacianPE

__all__ = ["GRAPH_DATASETS", "VAL_FRACTION", "graph_data_spec", "tu_fold_dir", "load_graphs", "graph_split",
           "edge_dim_of"]
#: the named graph sets (:data:`graphattn.data.SOCIAL_GRAPH_DATASETS`)
GRAPH_DATASETS = tuple(SOCIAL_GRAPH_DATASETS)


#: validation fraction carved (stratified) out of each fold's training graphs
VAL_FRACTION = 0.1


def tu_fold_dir(tu_text, tu=None) -> Path:
    """The ``10fold_idx`` folder of ``--tu-text`` files: next to the data files, or beside the
    ``raw/`` folder that holds them (PyG's layout); the first place when neither has one."""
    tu = tu if tu is not None else find_tu_prefix(tu_text)
    base = tu[0] if tu else Path(tu_text).parent
    places = [base / "10fold_idx"] + ([base.parent / "10fold_idx"] if tu and base.name == "raw" else [])
    return next((d for d in places if d.is_dir()), places[0])


def _fold_files_check(spec: GraphDataSpec, graphs, k: int) -> None:
    """A run whose folds came from fold files (``spec.fold_source == "files"``) is evaluated on
    the same files: missing or changed ones would silently give another split."""
    files = getattr(graphs, "fold_files", None) or []
    if graphs.folds is None or len(graphs.folds) != k or not files:
        raise DataFileError(f"{spec.tu_text or spec.label}: this model's {k} folds came from the "
                            "fold files (10fold_idx/) next to its graph files, which are not there now; copy "
                            "the folder along (else the test graphs would be another split's)")
    want = spec.folds_sha256
    if want and files_sha256(files) != want:
        raise DataFileError(f"{files[0].parent}: the fold files changed since this model was trained (sha256 "
                            "differs): its test graphs would be another split's")


def load_graphs(spec: GraphDataSpec):
    """The featurised graphs of a data spec (a :class:`~graphattn.data.tu.GraphList`): the structural
    node features of :func:`graphattn.data.structural.add_structural_features` (one-hot degree up to
    ``max_degree``, log-degree, ``rw_steps`` random-walk return probabilities and, with ``ldp``, the
    local degree profile: the neighbours' degree min/max/mean/std, Cai & Wang 2018), the file's node
    attributes and edge features, and ``pe_dim`` Laplacian-PE columns."""
    if spec.tu_text:
        if not Path(spec.tu_text).exists():
            raise DataFileError(f"{spec.tu_text}: the graph files this model was trained on are not there any "
                                "more; give their new place with --tu-text (with their 10fold_idx/ folder)")
        warn_if_inputs_changed(spec)
        tu = find_tu_prefix(spec.tu_text)
        graphs = load_tu_folder(*tu) if tu else load_tu_text(spec.tu_text)
        fold_dir = tu_fold_dir(spec.tu_text, tu)
        graphs.folds, graphs.fold_files = None, []
        if fold_dir.is_dir():
            try:
                graphs.folds = load_tu_folds(fold_dir, len(graphs))
                graphs.fold_files = sorted(fold_dir.glob("*_idx-*.txt"))
            except DataFileError as exc:
                if spec.folds:  # the user asked for folds: the fold files must be right
                    raise
                warnings.warn(f"ignoring the fold files next to {Path(spec.tu_text).name} (no "
                              f"--folds given, and they do not fit: {exc})", stacklevel=2)
    else:
        graphs = recorded_root_first(lambda **where: load_social_graph_dataset(
            spec.name, source=spec.graph_source, **where), spec.root)
    if spec.limit:
        keep = torch.randperm(len(graphs), generator=torch.Generator().manual_seed(0))[:spec.limit]
        keep = keep.sort().values
        sub = GraphList(graphs[i] for i in keep.tolist())  # a random subset: files are sorted by label
        sub.name, sub.label_values, sub.folds = graphs.name, graphs.label_values, None
        sub.file_index = keep  # (limit,) each graph's position in the file: what predict numbers them by
        sub.source = getattr(graphs, "source", None)
        sub.num_edge_attributes, sub.edge_label_values = graphs.num_edge_attributes, graphs.edge_label_values
        graphs = sub
    add_structural_features(graphs, max_degree=spec.max_degree, rw_steps=spec.rw_steps, ldp=spec.ldp)
    if spec.node_attr and len(graphs) and all(getattr(g, "node_attr", None) is not None for g in graphs):
        # continuous node attributes of the file (text format: columns after the neighbours),
        # z-scored over all nodes of the set; specs written before this existed skip them
        # (in float64: squares of attributes near float32's limit would overflow)
        mean, std = _column_stats(g.node_attr for g in graphs)
        for g in graphs:
            g.x = torch.cat([g.x, ((g.node_attr.double() - mean) / std).to(g.x.dtype)], 1)
            g.feature_source = "structural+attributes"
    _edge_features(graphs, spec.edge_attr)
    if spec.edge_dim is not None and (edge_dim_of(graphs) or 0) != spec.edge_dim:
        got, where = edge_dim_of(graphs) or 0, spec.tu_text or spec.label
        why = ("the edge files are not there" if not got else "other label values or attribute columns"
               if spec.edge_dim else "edge files added since")
        raise DataFileError(f"{where}: this model was trained on {spec.edge_dim} edge features (the set's "
                            f"NAME_edge_attributes.txt / NAME_edge_labels.txt), the files give {got} now ({why})")
    if spec.pe_dim > 0:
        lap = AddLaplacianPE(spec.pe_dim, eigval_attr_name=None, mask_attr_name=None)
        for i, g in enumerate(graphs):
            graphs[i] = lap(g)
    return graphs


def _stratified_part(idx: Tensor, y: Tensor, frac: float, seed: int) -> Tuple[Tensor, Tensor]:
    """Split ``idx`` into (rest, part) with ``part`` a stratified ``frac`` of it."""
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


def graph_split(spec: GraphDataSpec, graphs, fold: Optional[int]) -> Tuple[Tensor, Tensor, Tensor]:
    """(train, val, test) graph indices of fold ``fold`` (0-based) or of the single split."""
    y, seed = graphs.y, spec.split_seed
    if fold is None:  # one stratified 80/10/10 split
        rest, test = _stratified_part(torch.arange(len(graphs)), y, 0.1, seed)
        train, val = _stratified_part(rest, y, 1.0 / 9.0, seed + 1)
        return train.sort().values, val.sort().values, test.sort().values
    k = int(spec.folds)
    source = spec.fold_source  # recorded at training (older runs: whatever is there)
    if source == "files":
        _fold_files_check(spec, graphs, k)
    use_files = source != "stratified" and graphs.folds is not None and len(graphs.folds) == k
    folds = graphs.folds if use_files else stratified_folds(y, k, seed)
    tr, te = folds[fold]
    train, val = _stratified_part(tr, y, VAL_FRACTION, seed + fold)
    return train.sort().values, val.sort().values, te.sort().values


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


def graph_data_spec(name: Optional[str], *, limit: Optional[int] = None, seed: int = 0, folds: Optional[int] = None,
                    tu_text: Optional[str] = None) -> GraphDataSpec:
    """The data spec (stored in checkpoints) of a named graph set or of a ``tu_text`` file or folder (DGCNN/GIN
    text or TU original format): features, ``limit`` graphs, split seed, ``folds``, and the files' sha256."""
    spec = GraphDataSpec(name=name, limit=limit, split_seed=int(seed), folds=folds)
    if not tu_text:
        return spec.replace(display=name, root=str(data_root().resolve()))
    path = Path(tu_text).expanduser()
    if not path.exists():
        raise ValueError(f"--tu-text {tu_text}: no such file or folder")
    tu = find_tu_prefix(path)  # the TU original format (NAME_A.txt, ...): its folder or A file
    if path.is_dir() and tu is None:
        raise ValueError(f"--tu-text {tu_text}: a folder without TU files (NAME_A.txt, "
                         "NAME_graph_indicator.txt, NAME_graph_labels.txt); give a DGCNN/GIN text file instead")
    spec = spec.replace(name=None, tu_text=str(path.resolve()), display=(tu[1] if tu else path.name.split(".")[0]).lower())
    return spec.replace(sha256=files_sha256(input_files(spec)))  # evaluate warns, --resume refuses, when they change

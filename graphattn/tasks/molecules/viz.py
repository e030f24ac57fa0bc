"""Attention pictures: what a :class:`~graphattn.GraphClassifier` looks at.

Molecules: :func:`collect_attention` records every block's attention weights during an
ordinary forward pass (forward hooks; the model is not modified), :func:`attention_rollout`
turns them into node importances (the same for every task; a task's own attribution is in
:mod:`graphattn.tasks.molecules.attribution`), :func:`draw_molecule_attention` colours atoms and
bonds (RDKit), atoms numbered as :func:`atom_labels` names them, in panels over their colour
bars (matplotlib). RDKit and matplotlib are imported inside the functions that use them only.
"""
from __future__ import annotations

import io
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor, nn

from graphattn.data.featurize import parse_smiles
from graphattn.nn.block import GraphTransformerBlock
from graphattn.nn.models.ensemble import ProbabilityEnsemble
from graphattn.nn.models.regression import MeanEnsemble, StandardizedRegressor
from graphattn.train.runtime import model_device

__all__ = ["base_model", "prediction", "collect_attention", "ensemble_mean", "attention_rollout", "molecule_logits", "readout_scores", "molecule_attention",
           "atom_labels", "molecule_figure", "draw_molecule_attention"]


@contextmanager
def collect_attention(model: nn.Module) -> Iterator[List[Tuple[Tensor, Tensor]]]:
    """Inside the ``with`` block, each forward pass of ``model`` appends one
    ``(edge_index, alpha)`` per :class:`~graphattn.GraphTransformerBlock`, in layer order
    (``alpha`` is ``(E, H)``; ``edge_index`` includes the global-token edges, tokens being
    nodes ``N .. N + B*G - 1``). The forward output itself is unchanged.

    Example::

        with collect_attention(model) as att:
            logits = model(x, edge_index, ...)
    """
    records: List[Tuple[Tensor, Tensor]] = []
    handles = []

    def ask(module, args, kwargs):
        return args, {**kwargs, "return_attention_weights": True}

    def keep(module, args, kwargs, output):
        out, (edge_index, alpha) = output
        records.append((edge_index.detach(), alpha.detach()))
        return out

    for m in model.modules():
        if isinstance(m, GraphTransformerBlock):
            handles.append(m.register_forward_pre_hook(ask, with_kwargs=True))
            handles.append(m.register_forward_hook(keep, with_kwargs=True))
    if not handles:
        raise ValueError(f"{type(model).__name__} has no GraphTransformerBlock: nothing to explain")
    try:
        yield records
    finally:
        for h in handles:
            h.remove()


def attention_rollout(attentions: Sequence[Tuple[Tensor, Tensor]], num_nodes: int,
                      residual: float = 0.5) -> Tensor:
    r"""Attention rollout (Abnar & Zuidema 2020) on a graph.

    Per layer l, ``A_l[i, j]`` is the head-averaged weight of edge j -> i (rows sum to 1
    for nodes with incoming edges); the residual connection is modelled as
    ``Â_l = residual·I + (1 - residual)·A_l`` (rows renormalised), and
    ``R = Â_L ⋯ Â_1``: ``R[i, j]`` is how much of node i's final state flows from input
    node j. Dense ``(n, n)``: meant for molecule-sized graphs.
    """
    eye = torch.eye(num_nodes, dtype=torch.float64)
    R = eye.clone()
    for edge_index, alpha in attentions:
        A = torch.zeros(num_nodes, num_nodes, dtype=torch.float64)
        A.index_put_((edge_index[1].cpu(), edge_index[0].cpu()), alpha.double().mean(-1).cpu(),
                     accumulate=True)  # (n, n): target row, source column
        A = residual * eye + (1 - residual) * A
        A = A / A.sum(-1, keepdim=True).clamp_min(1e-12)
        R = A @ R
    return R


def base_model(model: nn.Module) -> nn.Module:
    """The model a :class:`~graphattn.nn.models.StandardizedRegressor` wraps (its backbone and readout
    are the attention the pictures read); any other model itself."""
    return model.model if isinstance(model, StandardizedRegressor) else model


def prediction(model: nn.Module, out: Tensor) -> Tensor:
    """What a model's output means to a person: values (a regressor) or probabilities (sigmoid)."""
    return out if isinstance(model, StandardizedRegressor) else torch.sigmoid(out)


def molecule_logits(model: nn.Module, data) -> Tuple[Tensor, object]:
    """``(logits (1, T), data on the model's device)``: one forward pass of ``model`` in eval
    mode on one molecule with every input it reads (bond features when it has an edge encoder,
    Laplacian PE, descriptors); the caller's train/eval mode is kept, as PyG's Explainer does."""
    if int(getattr(data, "num_graphs", 1) or 1) > 1:
        raise ValueError(f"an explanation is of one molecule; got a batch of {data.num_graphs} "
                         "(call it per graph: batch.get_example(i) or batch.to_data_list())")
    was_training = model.training
    model.eval()
    device = model_device(model)
    data = data.to(device)
    batch = torch.zeros(data.num_nodes, dtype=torch.long, device=device)
    has_edge_encoder = getattr(getattr(base_model(model), "backbone", None), "edge_encoder", None) is not None
    gf = getattr(data, "mol_desc", None)  # (1, D) molecule descriptors, when the model reads them
    try:
        logits = model(data.x, data.edge_index, batch, data.edge_attr if has_edge_encoder else None,
                       num_graphs=1, pe=getattr(data, "lap_pe", None),
                       pe_eigvals=getattr(data, "lap_eigval", None), pe_mask=getattr(data, "lap_pe_mask", None),
                       **({"graph_features": gf} if gf is not None else {}))
    finally:
        model.train(was_training)
    return logits, data


def readout_scores(model: nn.Module, R: Tensor, num_atoms: int) -> Tensor:
    """Atom scores ``(N,)`` from a rollout ``R`` ``(N + G, N + G)``, read from what the
    prediction is made of: the rows of the global tokens for ``readout="token"``, the mean of
    the atom rows otherwise (mean/sum/max pooling); atom columns only."""
    N, model = num_atoms, base_model(model)
    G = getattr(getattr(model, "backbone", None), "num_global_tokens", 0) or 0
    rows = R[N:N + G] if getattr(model, "readout", "mean") == "token" and G > 0 else R[:N]
    return rows.mean(0)[:N].float()


@torch.no_grad()
def ensemble_mean(parts: Sequence[Tuple[Tensor, Tensor]]) -> Tuple[Tensor, Tensor]:
    """The members' ``(probabilities (T,), atom scores (N,))`` of an ensemble combined: the mean
    probabilities, and the mean of the scores (each already scaled to max 1) rescaled to max 1."""
    scores = torch.stack([p[1] for p in parts]).mean(0)
    return torch.stack([p[0] for p in parts]).mean(0), scores / scores.max().clamp_min(1e-12)


def molecule_attention(model: nn.Module, data, residual: float = 0.5) -> Tuple[Tensor, Tensor]:
    """Per-task probabilities (a regressor: values) ``(T,)`` and atom importances ``(N,)`` in [0, 1]
    for one molecule.

    Importance = attention rollout over all layers (heads averaged) read from what the
    prediction is made of (:func:`readout_scores`): the rows of the global tokens for
    ``readout="token"``, the mean of the atom rows otherwise (mean/sum/max pooling); restricted
    to atoms and scaled so the most important atom is 1. For a
    :class:`~graphattn.ProbabilityEnsemble` the probabilities are the ensemble's (mean over
    members) and the importances the mean of the members' (each scaled to max 1 first),
    rescaled to max 1.
    """
    if isinstance(model, (ProbabilityEnsemble, MeanEnsemble)):
        return ensemble_mean([molecule_attention(m, data, residual) for m in model.members])
    with collect_attention(model) as att:
        logits, data = molecule_logits(model, data)
    N = data.num_nodes
    G = getattr(getattr(base_model(model), "backbone", None), "num_global_tokens", 0) or 0
    scores = readout_scores(model, attention_rollout(att, N + G, residual), N)
    scores = scores / scores.max().clamp_min(1e-12)
    return prediction(model, logits[0]).float().cpu(), scores.cpu()


#: smallest score range (a fraction of the highest score) drawn as the full white-red scale
MIN_COLOUR_SPAN = 0.25


def colour_levels(scores: Sequence[float]) -> List[float]:
    """Colour level in [0, 1] (white .. red) of every score: the highest is 1, the lowest 0 when
    the scores spread over at least :data:`MIN_COLOUR_SPAN` of the highest; closer scores keep
    their differences at that scale (near-equal scores: near-equal colours)."""
    lo, hi = min(scores), max(scores)
    span = max(hi - lo, MIN_COLOUR_SPAN * hi)
    return [1.0 - (hi - s) / span if span > 0 else 1.0 for s in scores]


def _colour(v: float) -> Tuple[float, float, float]:
    """White (0) -> orange -> red (1)."""
    v = min(max(float(v), 0.0), 1.0)
    if v < 0.5:
        t = v / 0.5
        return (1.0, 1.0 - 0.35 * t, 1.0 - 0.8 * t)
    t = (v - 0.5) / 0.5
    return (1.0 - 0.1 * t, 0.65 - 0.55 * t, 0.2 - 0.15 * t)


def atom_labels(smiles: str) -> List[str]:
    """Element and index of every atom, ``["C0", "C1", "O2"]`` for ``"CCO"``: the names the
    text output and the pictures (atom indices drawn beside the atoms) share. Atom ``i`` is
    node ``i`` of :func:`graphattn.data.molecules.smiles_to_data`."""
    return [f"{a.GetSymbol()}{a.GetIdx()}" for a in parse_smiles(smiles).GetAtoms()]


def _molecule_png(mol, levels: List[float], size: Tuple[int, int]) -> bytes:
    """RDKit PNG of ``mol``, atom ``i`` coloured by ``levels[i]`` (white .. red), each bond by
    the mean of its atoms, atom indices drawn beside the atoms."""
    from rdkit import rdBase  # optional dependency, as in parsing
    from rdkit.Chem.Draw import rdMolDraw2D

    atoms = list(range(mol.GetNumAtoms()))
    bonds = [b.GetIdx() for b in mol.GetBonds()]
    bond_cols = {b.GetIdx(): _colour((levels[b.GetBeginAtomIdx()] + levels[b.GetEndAtomIdx()]) / 2)
                 for b in mol.GetBonds()}
    drawer = rdMolDraw2D.MolDraw2DCairo(*size)
    opts = drawer.drawOptions()
    opts.addAtomIndices = True
    opts.annotationFontScale = 0.6  # small indices: they sit beside the atoms, not over their colour
    opts.padding = 0.03
    with rdBase.BlockLogs():  # RDKit's console notes on exotic valences, as in parsing
        rdMolDraw2D.PrepareAndDrawMolecule(drawer, mol, highlightAtoms=atoms,
                                           highlightAtomColors={i: _colour(levels[i]) for i in atoms},
                                           highlightBonds=bonds, highlightBondColors=bond_cols)
    drawer.FinishDrawing()
    return drawer.GetDrawingText()


def _trimmed(img, pad: int = 12):
    """An RGB(A) image without its white margins (RDKit centres a molecule in its whole canvas), ``pad``
    pixels kept around the drawing."""
    ink = (img[..., :3] < 0.98).any(axis=-1)
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    if rows.size == 0:
        return img
    r0, r1 = max(rows[0] - pad, 0), min(rows[-1] + pad + 1, img.shape[0])
    c0, c1 = max(cols[0] - pad, 0), min(cols[-1] + pad + 1, img.shape[1])
    return img[r0:r1, c0:c1]


def molecule_figure(smiles: str, panels: Sequence[Tuple[str, Sequence[float]]], caption: str = "",
                    size: Tuple[int, int] = (600, 520), title: Optional[str] = None):
    """A matplotlib ``Figure``: one panel per ``(title, atom_scores)`` side by side, each the
    molecule with atom ``i`` coloured by ``atom_scores[i]`` (:func:`colour_levels`: the
    molecule's highest score red, white at most :data:`MIN_COLOUR_SPAN` of it lower) and its
    atoms labelled with their index, over a colour bar in the panel's scores relative to the
    molecule's highest (axis label ``"colour bar"``); ``title`` (default: the SMILES) above, ``caption``
    (may have several lines) below. The drawings are cropped to the molecule. A SMILES
    :func:`graphattn.data.featurize.parse_smiles` rejects raises its ``ValueError``."""
    from matplotlib.cm import ScalarMappable  # optional dependency (graphattn[viz])
    from matplotlib.colors import ListedColormap, Normalize
    from matplotlib.figure import Figure
    from matplotlib.image import imread

    mol = parse_smiles(smiles)
    panels = [(name, [float(v) for v in scores]) for name, scores in panels]
    for name, scores in panels:
        if len(scores) != mol.GetNumAtoms():
            raise ValueError(f"{name}: {len(scores)} atom scores but {smiles!r} has {mol.GetNumAtoms()} atoms")
    images = [_trimmed(imread(io.BytesIO(_molecule_png(mol, colour_levels(scores), size)), format="png"))
              for _, scores in panels]
    w = size[0] / 100
    h = max(min(img.shape[0] / img.shape[1] * w, size[1] / 100) for img in images)  # the drawings' own height
    lines = caption.count("\n") + 1 if caption else 0
    fig = Figure(figsize=(w * len(panels), h + 1.3 + 0.2 * lines), dpi=100, layout="constrained")
    grid = fig.add_gridspec(2, len(panels), height_ratios=[h, 0.15])
    cmap = ListedColormap([_colour(v / 255) for v in range(256)], name="attention")
    for k, ((name, scores), img) in enumerate(zip(panels, images)):
        ax = fig.add_subplot(grid[0, k])
        ax.imshow(img)
        ax.set_title(name, fontsize=11)
        ax.axis("off")
        hi = max(scores)
        span = max(hi - min(scores), MIN_COLOUR_SPAN * hi) or 1.0
        cax = fig.add_subplot(grid[1, k], label="colour bar")
        fig.colorbar(ScalarMappable(Normalize(hi - span, hi), cmap), cax=cax, orientation="horizontal")
        cax.set_xlabel("atom score relative to this molecule (1 = its highest atom)", fontsize=9)
    fig.suptitle(smiles if title is None else title, fontsize=12)
    if caption:
        fig.supxlabel(caption, fontsize=9)
    return fig


def draw_molecule_attention(smiles: str, atom_scores: Sequence[float], path, legend: str = "",
                            size: Tuple[int, int] = (600, 520), title: str = "attention rollout",
                            more: Sequence[Tuple[str, Sequence[float]]] = (), name: Optional[str] = None) -> Path:
    """PNG (or SVG, by ``path``'s suffix) of ``smiles`` with atom ``i`` highlighted by
    ``atom_scores[i]`` under ``title``, panels ``more`` (``(title, atom_scores)``, e.g. a task's
    attribution) beside it, each over its colour bar, ``legend`` (may have several lines)
    below and the SMILES (with ``name`` before it) above: :func:`molecule_figure`. Scores closer together than :data:`MIN_COLOUR_SPAN` of the
    highest are not stretched to the full white-red range (benzene's six rollout scores differ
    by 0.2 %: all red, not a pattern); on Tox21 molecules the spread is 30-76 % of the highest
    (5-95 % quantiles). Needs RDKit and matplotlib.

    Atom ``i`` is RDKit atom ``i`` of :func:`graphattn.data.featurize.parse_smiles`, the node
    order of :func:`graphattn.data.molecules.smiles_to_data`; a SMILES it rejects raises its
    :class:`~graphattn.data.featurize.InvalidSmilesError` (a ``ValueError``).
    """
    path = Path(path)
    fmt = path.suffix.lower() or ".png"
    if fmt not in (".png", ".svg"):
        raise ValueError(f"{path}: molecule pictures are written as .png or .svg, not {path.suffix}")
    fig = molecule_figure(smiles, [(title, atom_scores), *more], legend, size,
                          title=smiles if name is None else f"{name}: {smiles}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=fmt[1:])
    return path

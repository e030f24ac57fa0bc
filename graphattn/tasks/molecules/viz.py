"""Attention pictures: what a :class:`~graphattn.GraphClassifier` looks at.

Molecules (this file, RDKit): :func:`collect_attention` records every block's attention
weights during an ordinary forward pass (forward hooks; the model is not modified),
:func:`attention_rollout` turns them into node importances, :func:`draw_molecule_attention`
colours atoms and bonds. Other pictures (ego-graphs, training curves) can live beside them.
RDKit is imported inside the drawing function only.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Sequence, Tuple

import torch
from torch import Tensor, nn

from graphattn.data.featurize import parse_smiles
from graphattn.nn.block import GraphTransformerBlock
from graphattn.nn.models.ensemble import ProbabilityEnsemble
from graphattn.train.loop import model_device

__all__ = ["collect_attention", "attention_rollout", "molecule_attention", "draw_molecule_attention"]


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


@torch.no_grad()
def molecule_attention(model: nn.Module, data, residual: float = 0.5) -> Tuple[Tensor, Tensor]:
    """Per-task probabilities ``(T,)`` and atom importances ``(N,)`` in [0, 1] for one molecule.

    Importance = attention rollout over all layers (heads averaged) read from what the
    prediction is made of: the rows of the global tokens for ``readout="token"``, the mean
    of the atom rows otherwise (mean/sum/max pooling); restricted to atoms and scaled so
    the most important atom is 1. For a :class:`~graphattn.ProbabilityEnsemble` the
    probabilities are the ensemble's (mean over members) and the importances the mean of the
    members' (each scaled to max 1 first), rescaled to max 1.
    """
    if isinstance(model, ProbabilityEnsemble):
        parts = [molecule_attention(m, data, residual) for m in model.members]
        scores = torch.stack([p[1] for p in parts]).mean(0)
        return torch.stack([p[0] for p in parts]).mean(0), scores / scores.max().clamp_min(1e-12)
    if int(getattr(data, "num_graphs", 1) or 1) > 1:
        raise ValueError(f"molecule_attention explains one molecule; got a batch of {data.num_graphs} "
                         "(call it per graph: batch.get_example(i) or batch.to_data_list())")
    was_training = model.training
    model.eval()
    device = model_device(model)
    data = data.to(device)
    batch = torch.zeros(data.num_nodes, dtype=torch.long, device=device)
    has_edge_encoder = getattr(getattr(model, "backbone", None), "edge_encoder", None) is not None
    try:
        with collect_attention(model) as att:
            gf = getattr(data, "mol_desc", None)  # (1, D) molecule descriptors, when the model reads them
            logits = model(data.x, data.edge_index, batch, data.edge_attr if has_edge_encoder else None,
                           num_graphs=1, pe=getattr(data, "lap_pe", None),
                           pe_eigvals=getattr(data, "lap_eigval", None), pe_mask=getattr(data, "lap_pe_mask", None),
                           **({"graph_features": gf} if gf is not None else {}))
    finally:
        model.train(was_training)  # as PyG's Explainer: the caller's mode is kept
    N = data.num_nodes
    G = getattr(getattr(model, "backbone", None), "num_global_tokens", 0) or 0
    R = attention_rollout(att, N + G, residual)
    rows = R[N:N + G] if getattr(model, "readout", "mean") == "token" and G > 0 else R[:N]
    scores = rows.mean(0)[:N].float()
    scores = scores / scores.max().clamp_min(1e-12)
    return torch.sigmoid(logits[0]).float().cpu(), scores.cpu()


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


def draw_molecule_attention(smiles: str, atom_scores: Sequence[float], path, legend: str = "",
                            size: Tuple[int, int] = (600, 520)) -> Path:
    """PNG (or SVG, by ``path``'s suffix) of ``smiles`` with atom ``i`` highlighted by
    ``atom_scores[i]``, rescaled so the molecule's lowest score is white and its highest red,
    and each bond by the mean of its two atoms; ``legend`` (may have several lines) below.
    Scores closer together than :data:`MIN_COLOUR_SPAN` of the highest are not stretched to
    the full white-red range (benzene's six rollout scores differ by 0.2 %: all red, not a
    pattern); on Tox21 molecules the spread is 30-76 % of the highest (5-95 % quantiles).

    Atom ``i`` is RDKit atom ``i`` of :func:`graphattn.data.featurize.parse_smiles`, the node
    order of :func:`graphattn.data.molecules.smiles_to_data`; a SMILES it rejects raises its
    :class:`~graphattn.data.featurize.InvalidSmilesError` (a ``ValueError``).
    """
    from rdkit.Chem.Draw import rdMolDraw2D

    mol = parse_smiles(smiles)
    scores = [float(s) for s in atom_scores]
    if len(scores) != mol.GetNumAtoms():
        raise ValueError(f"atom_scores has {len(scores)} entries but {smiles!r} has {mol.GetNumAtoms()} atoms")
    scores = colour_levels(scores)
    atoms = list(range(mol.GetNumAtoms()))
    atom_cols = {i: _colour(scores[i]) for i in atoms}
    bonds = [b.GetIdx() for b in mol.GetBonds()]
    bond_cols = {b.GetIdx(): _colour((scores[b.GetBeginAtomIdx()] + scores[b.GetEndAtomIdx()]) / 2)
                 for b in mol.GetBonds()}
    path = Path(path)
    fmt = path.suffix.lower() or ".png"
    if fmt not in (".png", ".svg"):
        raise ValueError(f"{path}: molecule pictures are written as .png or .svg, not {path.suffix}")
    drawer = rdMolDraw2D.MolDraw2DSVG(*size) if fmt == ".svg" else rdMolDraw2D.MolDraw2DCairo(*size)
    opts = drawer.drawOptions()
    opts.legendFontSize = 16
    opts.legendFraction = 0.2
    from rdkit import rdBase

    with rdBase.BlockLogs():  # RDKit's console notes on exotic valences, as in parsing
        rdMolDraw2D.PrepareAndDrawMolecule(drawer, mol, legend=legend, highlightAtoms=atoms,
                                           highlightAtomColors=atom_cols, highlightBonds=bonds,
                                           highlightBondColors=bond_cols)
    drawer.FinishDrawing()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = drawer.GetDrawingText()
    path.write_bytes(text.encode() if isinstance(text, str) else text)  # SVG text / PNG bytes
    return path
